//! The decision's vocabulary, shared by every host and every policy: which try
//! ([`Try`]), the backend's load ([`Load`]), what a policy remembers ([`State`],
//! one word so that hosts can share it without a lock) and what it answers
//! ([`Decision`], [`Outcome`]).

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
    /// it chose it (`hunt-seen`), if it sent one: see [`DynamicParams::seen_margin`](crate::policy::DynamicParams::seen_margin).
    pub seen: Option<u32>,
}

impl Load {
    /// A load with no `hunt-seen` from the front.
    pub fn new(busy: u32, workers: u32) -> Load {
        Load { busy, workers, seen: None }
    }
}

/// What a policy answers a try: a refusal is "busy" (425), and the front
/// sends the request on to its second candidate.
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
