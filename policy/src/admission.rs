//! "Why was this offer refused?" in one function: [`admit`].
//!
//! An offer passes the host's gates first, then the acceptance policy:
//!
//! ```text
//!  try ──► final? ──yes──► at capacity? ──yes──► Overloaded (503, never a refusal)
//!            │ no                  └─no──► Accept
//!            ▼
//!  draining? ──► app down? ──► at capacity? ──► policy busy? ──► Accept
//!     │ yes         │ yes           │ yes            │ yes
//!     ▼             ▼               ▼                ▼
//!  Refuse(Draining) Refuse(AppDown) Refuse(Overload) Refuse(Policy)
//! ```
//!
//! A gate that refuses spares the policy: its state does not advance, so SR_dyn's
//! window counts only offers it was asked about. Each host passes the gates it
//! can know: the agent knows all three; the Wasm and Lua sidecars know none
//! (their proxy does the draining and health) and pass [`Gates::OPEN`].
//! `policy/vectors/admission.json` holds the Rust and Lua answers together.

use crate::decision::{Decision, Load, State, Try};
use crate::policy::Policy;

/// What a host knows about its backend besides the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Gates {
    /// SIGTERM received: new work belongs elsewhere.
    pub draining: bool,
    /// The app is unreachable or stalled: an offer is better served elsewhere.
    pub app_down: bool,
    /// `max_inflight` reached: the host takes no more, offer or not.
    pub at_capacity: bool,
}

impl Gates {
    /// A host that knows no gate (the sidecars).
    pub const OPEN: Gates = Gates { draining: false, app_down: false, at_capacity: false };
}

/// Why an offer was refused. [`Reason::name`] is the metric label and the vector name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The acceptance policy said busy.
    Policy,
    AppDown,
    Draining,
    /// `max_inflight` reached.
    Overload,
}

impl Reason {
    /// Every reason, in metric order.
    pub const ALL: [Reason; 4] = [Reason::Policy, Reason::AppDown, Reason::Draining, Reason::Overload];

    pub fn name(self) -> &'static str {
        match self {
            Reason::Policy => "policy",
            Reason::AppDown => "app_down",
            Reason::Draining => "draining",
            Reason::Overload => "overload",
        }
    }
}

/// What happens to one try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Forward it to the app.
    Accept,
    /// The busy refusal (425 `hunt: busy`): the app never sees it, the proxy re-sends.
    Refuse(Reason),
    /// A try that may not be refused, at capacity: an error the client sees
    /// (503), never a refusal, so it is not re-sent.
    Overloaded,
}

/// Decide one try: the gates, then the policy on the state in `cell`.
pub fn admit(policy: &Policy, cell: &impl StateCell, try_: Try, gates: Gates, load: Load) -> Verdict {
    if try_ == Try::Final {
        return if gates.at_capacity { Verdict::Overloaded } else { Verdict::Accept };
    }
    let gate = [(gates.draining, Reason::Draining), (gates.app_down, Reason::AppDown), (gates.at_capacity, Reason::Overload)];
    if let Some(&(_, why)) = gate.iter().find(|(closed, _)| *closed) {
        return Verdict::Refuse(why);
    }
    match decide_in(policy, cell, try_, load) {
        Decision::Accept => Verdict::Accept,
        Decision::Refuse => Verdict::Refuse(Reason::Policy),
    }
}

/// Where a policy's state lives between decisions: one word that many threads
/// (the agent's) or many Envoy workers (the Wasm sidecar's shared data) update.
/// Only reading and a conditional write vary by host; the rule that uses them
/// is [`decide_in`], written once.
pub trait StateCell {
    /// What a write must present to succeed: the version that was read.
    type Version: Copy;
    /// Write conflicts tolerated before giving up (and accepting). Every
    /// conflict means another decision went through, so the default waits as
    /// long as it takes (lock-free); a host call that must not spin sets a bound.
    const MAX_CONFLICTS: usize = usize::MAX;
    /// The state now, or `None` if it cannot be read.
    fn read(&self) -> Option<(State, Self::Version)>;
    /// Write `state` if nothing was written since `version` was read.
    fn write(&self, state: State, version: Self::Version) -> Write;
}

/// How a conditional write went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    Done,
    /// Someone wrote in between: read again and decide again.
    Conflict,
    /// The cell cannot be written.
    Failed,
}

/// The shared-state rule: read, decide, write back only if no one wrote in
/// between, else decide again on what they wrote (so no offer is lost from
/// SR_dyn's window); and when unsure, never refuse: a cell that fails or stays
/// contended accepts. Stateless policies and finals never touch the cell.
pub fn decide_in<C: StateCell>(policy: &Policy, cell: &C, try_: Try, load: Load) -> Decision {
    if !matches!(policy, Policy::Dynamic(_)) || try_ == Try::Final {
        return policy.decide(policy.initial_state(), try_, load).decision;
    }
    for _ in 0..C::MAX_CONFLICTS {
        let Some((state, version)) = cell.read() else { break };
        let out = policy.decide(state, try_, load);
        match cell.write(out.state, version) {
            Write::Done => return out.decision,
            Write::Conflict => continue,
            Write::Failed => break,
        }
    }
    Decision::Accept
}

/// The agent's cell: an `AtomicU64` holding [`State::to_bits`].
impl StateCell for std::sync::atomic::AtomicU64 {
    type Version = u64;

    fn read(&self) -> Option<(State, u64)> {
        let bits = self.load(std::sync::atomic::Ordering::Acquire);
        Some((State::from_bits(bits), bits))
    }

    fn write(&self, state: State, version: u64) -> Write {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        match self.compare_exchange(version, state.to_bits(), AcqRel, Acquire) {
            Ok(_) => Write::Done,
            Err(_) => Write::Conflict,
        }
    }
}

#[cfg(test)]
mod tests;
