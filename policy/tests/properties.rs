//! Properties of the decision over random specs, loads and try sequences
//! (proptest): what must hold for every input, not only the vectors' cases.

use huntlb_policy::admission::{admit, decide_in};
use huntlb_policy::{Decision, Gates, Load, Policy, State, Try, Verdict};
use proptest::prelude::*;
use std::sync::atomic::AtomicU64;

fn policies() -> impl Strategy<Value = Policy> {
    prop_oneof![
        Just("always".to_string()),
        (0u32..70).prop_map(|c| format!("static:{c}")),
        (1u16..60, 0u32..40, proptest::option::of(0u32..80), 0u8..3, 0u32..10, proptest::option::of(0u32..4)).prop_map(
            |(w, c0, cmax, band, cmin, margin)| {
                let (low, high) = [(0.4, 0.6), (0.1, 0.9), (0.5, 0.5)][band as usize];
                let mut s = format!("dynamic:window={w},low={low},high={high},c0={c0}");
                if let Some(m) = cmax {
                    s += &format!(",c_max={m}");
                }
                if cmin > 0 {
                    s += &format!(",c_min={cmin}");
                }
                if let Some(k) = margin {
                    s += &format!(",seen_margin={k}");
                }
                s
            }
        ),
    ]
    .prop_filter_map("valid spec", |s| s.parse::<Policy>().ok())
}

fn steps() -> impl Strategy<Value = Vec<(bool, u32, Option<u32>)>> {
    // (is an offer, busy workers, the front's hunt-seen)
    proptest::collection::vec((any::<bool>(), 0u32..80, proptest::option::of(0u32..80)), 1..400)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Finals are never refused; the state stays in bounds: SR_dyn's c never
    /// above the workers (or c_max) unless it started there, the window's
    /// counter below the window, its acceptances at most one ahead of it.
    #[test]
    fn state_stays_valid(policy in policies(), workers in 1u32..64, steps in steps()) {
        let mut state = policy.initial_state();
        let start_c = state.c;
        for (offer, busy, seen) in steps {
            let try_ = if offer { Try::Offer } else { Try::Final };
            let out = policy.decide(state, try_, Load { busy, workers, seen });
            if try_ == Try::Final {
                prop_assert_eq!(out.decision, Decision::Accept);
                prop_assert_eq!(out.state, state);
            }
            if let Policy::Dynamic(p) = policy {
                let ceiling = p.c_max.map_or(workers, |m| m.min(workers)).max(start_c);
                prop_assert!(out.state.c <= ceiling, "c {} above {}", out.state.c, ceiling);
                prop_assert!(out.state.c >= p.c_min, "c {} below c_min {}", out.state.c, p.c_min);
                // an offer the front saw right is accepted and moves nothing
                if let (true, Some(k), Some(s)) = (offer, p.seen_margin, seen) {
                    if busy <= s.saturating_add(k) {
                        prop_assert_eq!(out.decision, Decision::Accept);
                        prop_assert_eq!(out.state, state);
                        state = out.state;
                        continue;
                    }
                }
                prop_assert!(out.state.attempt < p.window);
                // the offer that closes a window counts towards the next one (see
                // sr_dyn), so the window's acceptances may lead its offers by one
                prop_assert!(out.state.accepted <= out.state.attempt + 1);
            } else {
                prop_assert_eq!(out.state, policy.initial_state());
            }
            // the decision is SR_c on the c in effect
            if try_ == Try::Offer {
                prop_assert_eq!(out.decision.is_accept(), busy < out.state.c);
            }
            state = out.state;
        }
    }

    /// The packed state round-trips, so the shared cell holds exactly the state.
    #[test]
    fn state_bits_round_trip(c in any::<u32>(), attempt in any::<u16>(), accepted in any::<u16>()) {
        let s = State { c, attempt, accepted };
        prop_assert_eq!(State::from_bits(s.to_bits()), s);
    }

    /// The shared cell decides exactly as the pure function does, one thread.
    #[test]
    fn shared_cell_matches_pure(policy in policies(), workers in 1u32..64, steps in steps()) {
        let cell = AtomicU64::new(policy.initial_state().to_bits());
        let mut state = policy.initial_state();
        for (offer, busy, seen) in steps {
            let try_ = if offer { Try::Offer } else { Try::Final };
            let load = Load { busy, workers, seen };
            let want = policy.decide(state, try_, load);
            prop_assert_eq!(decide_in(&policy, &cell, try_, load), want.decision);
            state = want.state;
        }
    }

    /// A closed gate refuses an offer without moving the policy's state; a final
    /// is accepted through every gate but capacity.
    #[test]
    fn gates_spare_the_state(policy in policies(), busy in 0u32..80, d in any::<bool>(), a in any::<bool>(), cap in any::<bool>()) {
        let gates = Gates { draining: d, app_down: a, at_capacity: cap };
        let cell = AtomicU64::new(policy.initial_state().to_bits());
        let load = Load::new(busy, 32);
        let v = admit(&policy, &cell, Try::Offer, gates, load);
        if d || a || cap {
            prop_assert!(matches!(v, Verdict::Refuse(_)));
            prop_assert_eq!(State::from_bits(cell.load(std::sync::atomic::Ordering::Acquire)), policy.initial_state());
        }
        let f = admit(&policy, &cell, Try::Final, gates, load);
        prop_assert_eq!(f, if cap { Verdict::Overloaded } else { Verdict::Accept });
    }

    /// Display is canonical: printing a parsed spec and parsing it again gives
    /// the same policy.
    #[test]
    fn spec_display_round_trips(policy in policies()) {
        prop_assert_eq!(policy.to_string().parse::<Policy>().unwrap(), policy);
    }
}
