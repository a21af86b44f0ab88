//! The policies themselves: which one ([`Policy`], parsed from a spec) and its
//! step, [`Policy::decide`], pure: state in, state out. The algorithms are the
//! SRLB paper's, one function each (`sr_c`, `sr_dyn`).

use crate::decision::{Decision, Load, Outcome, State, Try};

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
