//! Acceptance policies for service hunting (hunt/1).
//!
//! A front proxy *offers* a request to a first candidate; the agent beside that
//! candidate accepts it or refuses it ("busy"), and a refused request goes to a
//! second candidate as a *final* try, which must accept. This crate holds the
//! only decision code: which offers to refuse. It does no I/O, so the agent, the
//! proxy-wasm filter and the bench simulator all call the same function, and the
//! Lua port in `haproxy-lua/` is held to the same JSON vectors (`policy/vectors`).
//!
//! The policies are the SRLB paper's (Desmouceaux et al.):
//! * [`Policy::Static`] is SR_c (Algorithm 1): accept an offer iff fewer than `c`
//!   workers are busy.
//! * [`Policy::Dynamic`] is SR_dyn (Algorithm 2): SR_c whose `c` moves by one at the
//!   end of every window of offers to keep the acceptance ratio between `low` and
//!   `high` (near 1/2).
//! * [`Policy::Always`] accepts everything: behind a random proxy this is the
//!   paper's RR baseline.
//!
//! Finals are never refused, whatever the policy and the load.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};


pub mod admission;
pub mod forward;
pub mod llm;
pub mod prefix;
pub mod metrics;
pub mod protocol;
pub mod settings;
mod spec;
pub use admission::{admit, Gates, Reason, Verdict};
pub use settings::{RawSettings, Settings, SettingsError};
pub use spec::{spec_warning, SpecError};

/// Which try of a request the agent is looking at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Try {
    /// The first candidate's try: it may be refused.
    Offer,
    /// Any try that may not be refused (second candidate, plain traffic).
    Final,
}

/// The backend's load as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    /// Busy workers `b` (or requests in flight to the app).
    pub busy: u32,
    /// Worker count `n`. SR_dyn never raises `c` above `n` (Algorithm 2: `c < n`).
    pub workers: u32,
    /// On an offer, the front's own count of its requests at this backend when
    /// it chose it (`hunt-seen`), if it sent one: see [`DynamicParams::seen_margin`].
    pub seen: Option<u32>,
}

impl Load {
    /// A load with no `hunt-seen` from the front.
    pub fn new(busy: u32, workers: u32) -> Load {
        Load { busy, workers, seen: None }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Accept,
    Refuse,
}

impl Decision {
    pub fn is_accept(self) -> bool {
        self == Decision::Accept
    }
}

/// SR_dyn's parameters. Defaults are the paper's: window 50, thresholds 0.4/0.6, c0 = 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DynamicParams {
    /// Offers per adaptation window.
    pub window: u16,
    /// Below this acceptance ratio, `c` goes up by one.
    pub low: f64,
    /// Above this acceptance ratio, `c` goes down by one.
    pub high: f64,
    /// Initial threshold.
    pub c0: u32,
    /// Upper bound for `c`, on top of the paper's `c < n`. `None`: only `n` bounds it.
    pub c_max: Option<u32>,
    /// Lower bound for `c` (the start is `max(c0, c_min)`). Set to the backend's
    /// cores, it never refuses while a core is free, so on a mixed fleet a big
    /// backend keeps what it can serve at once instead of refusing half its
    /// offers like a small one (`docs/protocol.md` § 7; measured on a mixed
    /// fleet in `docs/results/elb.md`).
    pub c_min: u32,
    /// Accept, outside the window, an offer whose front already counted at
    /// least `busy - seen_margin` of its requests here (`busy <= seen +
    /// seen_margin`; spec key `seen_margin`, once called `slack`): the
    /// front chose this backend as its least loaded, and its count is right, so
    /// a refusal would only send the request to one it thinks is worse. With one
    /// front every offer is such; with many, the agent refuses what the others
    /// have loaded it with. `None` (or no `hunt-seen`): the paper's SR_dyn.
    pub seen_margin: Option<u32>,
}

impl Default for DynamicParams {
    fn default() -> Self {
        DynamicParams { window: 50, low: 0.4, high: 0.6, c0: 1, c_max: None, c_min: 0, seen_margin: None }
    }
}

/// An acceptance policy, parsed from a spec such as `static:4` or `dynamic:window=50`
/// (see `docs/protocol.md` for the grammar, shared with the Lua module and the filter).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    Always,
    Static { c: u32 },
    Dynamic(DynamicParams),
}

/// What a policy remembers between decisions. For SR_dyn: the current `c` and the
/// window's counters, exactly Algorithm 2's variables. Static policies never change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    pub c: u32,
    pub attempt: u16,
    pub accepted: u16,
}

impl State {
    /// The state as one word, for lock-free sharing (an `AtomicU64` in the agent,
    /// compare-and-swap shared data across Envoy worker threads in the filter).
    pub fn to_bits(self) -> u64 {
        (u64::from(self.c) << 32) | (u64::from(self.attempt) << 16) | u64::from(self.accepted)
    }

    pub fn from_bits(v: u64) -> State {
        State { c: (v >> 32) as u32, attempt: (v >> 16) as u16, accepted: v as u16 }
    }
}

/// A decision and the state to keep for the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub decision: Decision,
    pub state: State,
}

impl Policy {
    /// The state before the first decision.
    pub fn initial_state(&self) -> State {
        let c = match *self {
            Policy::Always => u32::MAX,
            Policy::Static { c } => c,
            Policy::Dynamic(p) => p.c0.max(p.c_min),
        };
        State { c, attempt: 0, accepted: 0 }
    }

    /// Whether `load` is at or above the threshold `c` in effect in `state`:
    /// an offer would be refused now. A final that arrives then is accepted
    /// while busy, which is the scaling signal (`metrics::FINALS_BUSY`).
    pub fn is_busy(&self, state: State, load: Load) -> bool {
        !matches!(self, Policy::Always) && load.busy >= state.c
    }

    /// Decide on one try. Pure: same inputs, same outcome.
    pub fn decide(&self, state: State, try_: Try, load: Load) -> Outcome {
        if try_ == Try::Final {
            return Outcome { decision: Decision::Accept, state };
        }
        match *self {
            Policy::Always => Outcome { decision: Decision::Accept, state },
            Policy::Static { c } => Outcome { decision: sr_c(c, load.busy), state },
            Policy::Dynamic(p) => sr_dyn(&p, state, load),
        }
    }
}

/// Algorithm 1: accept iff fewer than `c` workers are busy.
fn sr_c(c: u32, busy: u32) -> Decision {
    if busy < c {
        Decision::Accept
    } else {
        Decision::Refuse
    }
}

/// Algorithm 2, step for step: count the offer; at the end of a window adapt `c`
/// from the window's acceptance ratio and reset the counters; then apply SR_c.
/// (As in the paper, the offer that closes a window is decided with the new `c`
/// and counts towards the next window, so the very first window holds
/// `window - 1` decisions and every later one `window`.)
fn sr_dyn(p: &DynamicParams, mut s: State, load: Load) -> Outcome {
    if let (Some(margin), Some(seen)) = (p.seen_margin, load.seen) {
        if load.busy <= seen.saturating_add(margin) {
            // The front's view of this backend is right: not the window's business.
            return Outcome { decision: Decision::Accept, state: s };
        }
    }
    s.attempt += 1;
    if s.attempt == p.window {
        let ratio = f64::from(s.accepted) / f64::from(p.window);
        let ceiling = p.c_max.map_or(load.workers, |m| m.min(load.workers));
        if ratio < p.low && s.c < ceiling {
            s.c += 1;
        } else if ratio > p.high && s.c > p.c_min {
            s.c -= 1;
        }
        s.attempt = 0;
        s.accepted = 0;
    }
    let decision = sr_c(s.c, load.busy);
    if decision.is_accept() {
        s.accepted += 1;
    }
    Outcome { decision, state: s }
}

impl FromStr for Policy {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        spec::parse(s)
    }
}

impl fmt::Display for Policy {
    /// The canonical spec: parsing it gives the same policy back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Always => write!(f, "always"),
            Policy::Static { c } => write!(f, "static:{c}"),
            Policy::Dynamic(p) => {
                write!(f, "dynamic:window={},low={},high={},c0={}", p.window, p.low, p.high, p.c0)?;
                if let Some(m) = p.c_max {
                    write!(f, ",c_max={m}")?;
                }
                if p.c_min > 0 {
                    write!(f, ",c_min={}", p.c_min)?;
                }
                if let Some(k) = p.seen_margin {
                    write!(f, ",seen_margin={k}")?;
                }
                Ok(())
            }
        }
    }
}

/// A policy shared by many threads without a lock: the state is packed into one
/// `AtomicU64` and updated with compare-and-swap. Static policies never write it,
/// so their hot path is a plain comparison.
#[derive(Debug)]
pub struct SharedPolicy {
    policy: Policy,
    state: AtomicU64,
}

impl SharedPolicy {
    pub fn new(policy: Policy) -> Self {
        SharedPolicy { policy, state: AtomicU64::new(policy.initial_state().to_bits()) }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Decide on one try, updating the shared state atomically
    /// ([`admission::decide_in`]: the rule every host shares).
    pub fn decide(&self, try_: Try, load: Load) -> Decision {
        admission::decide_in(&self.policy, &self.state, try_, load)
    }

    /// Decide on one try with the host's gates first ([`admission::admit`]).
    pub fn admit(&self, try_: Try, gates: Gates, load: Load) -> Verdict {
        admission::admit(&self.policy, &self.state, try_, gates, load)
    }

    /// [`Policy::is_busy`] on the state as of now.
    pub fn is_busy(&self, load: Load) -> bool {
        self.policy.is_busy(self.state(), load)
    }

    /// The state as of now (for metrics: the current `c`).
    pub fn state(&self) -> State {
        State::from_bits(self.state.load(Ordering::Acquire))
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    fn load(busy: u32) -> Load {
        Load::new(busy, 32)
    }

    #[test]
    fn pack_round_trips() {
        let s = State { c: 33, attempt: 49, accepted: 17 };
        assert_eq!(State::from_bits(s.to_bits()), s);
        let a = Policy::Always.initial_state();
        assert_eq!(State::from_bits(a.to_bits()), a);
    }

    #[test]
    fn shared_policy_matches_pure_policy() {
        let p: Policy = "dynamic".parse().unwrap();
        let shared = SharedPolicy::new(p);
        let mut s = p.initial_state();
        for i in 0..500u32 {
            let busy = (i * 7) % 5;
            let out = p.decide(s, Try::Offer, load(busy));
            s = out.state;
            assert_eq!(shared.decide(Try::Offer, load(busy)), out.decision, "step {i}");
            assert_eq!(shared.state(), s, "step {i}");
        }
    }

    #[test]
    fn shared_policy_counts_every_offer_across_threads() {
        // 4 threads x 1000 offers at busy=0 with c0=0: every offer is refused, so each
        // completed window raises c by one until it accepts; no offer may be lost.
        let p = Policy::Dynamic(DynamicParams { window: 10, c0: 0, ..Default::default() });
        let shared = std::sync::Arc::new(SharedPolicy::new(p));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let s = shared.clone();
                std::thread::spawn(move || {
                    (0..1000).filter(|_| s.decide(Try::Offer, load(5)).is_accept()).count()
                })
            })
            .collect();
        let accepted: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        // busy=5: c climbs 0..=5 refusing (first window 9 offers, then 10 each), then
        // c=6 accepts; with acceptance 1.0 c drops back to 5, and so on.
        let st = shared.state();
        assert!(st.c == 5 || st.c == 6, "c settled at {}", st.c);
        let seen = 4000u64;
        // Sequential replay gives the exact count: the CAS loop must not drop offers.
        let mut s = p.initial_state();
        let mut want = 0;
        for _ in 0..seen {
            let out = p.decide(s, Try::Offer, load(5));
            s = out.state;
            want += usize::from(out.decision.is_accept());
        }
        assert_eq!(accepted, want);
        assert_eq!(st, s);
    }

    #[test]
    fn display_round_trips() {
        for spec in ["always", "static:0", "static:33", "dynamic", "dynamic:window=10,low=0.3,high=0.7,c0=2,c_max=8"] {
            let p: Policy = spec.parse().unwrap();
            let again: Policy = p.to_string().parse().unwrap();
            assert_eq!(p, again, "{spec}");
        }
    }
}
