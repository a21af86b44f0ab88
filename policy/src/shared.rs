//! One policy shared by many threads of one host (the agent's), without a lock.

use crate::admission::{self, Gates, Verdict};
use crate::decision::{Decision, Load, State, Try};
use crate::policy::Policy;
use std::sync::atomic::{AtomicU64, Ordering};

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
mod tests;
