//! The forwarding tier: agents that share their in-flight counts keep an offer
//! only if their backend is the fleet's least loaded, and otherwise send it on,
//! as a final, to the least loaded peer they know of.
//!
//! ```text
//!  front ──offer──► agent A ── busy <= seen + seen_margin, or busy <= least peer + peer_margin ──► app A
//!                      │ else
//!                      └──final──► agent B (the least peer, ties at random) ──► app B
//!  agent A ──"hunt-fleet/3 <from> <to> <boot> <seq> <busy> <ready> <sub> <mine> <yours> <mac>"──► the K peers A samples (sub: 1 changes, 0 beats, 2 leave)
//!  each of them ──its count, on each change (sub 1) or as a heartbeat──► A
//! ```
//!
//! Why: a front counts only its own requests, so with several fronts its least
//! is not the fleet's. An agent hears every peer's count within a fraction of a
//! millisecond on a LAN, which is the fresh, shared view several fronts lack.
//! In `huntlb-sim` (12 × 32 workers, ρ 0.88) forwarding over 4 fronts' own least
//! is 0.81× least-request's mean with counts 0.2 ms old and 0.85× at 1 ms.
//!
//! One job a module, every one pure so that every host decides and reads alike:
//! * `route`: where an offer goes, two rules in one function, [`route`];
//! * `sample`: which peers an agent hears, drawn again now and then ([`redraw`]);
//! * `report`: the wire format of a count, [`Report`];
//! * `seal`: the report sealed with a MAC and opened ([`seal`], [`open`]); the
//!   MAC itself is the host's (HMAC-SHA256).
//!
//! `policy/vectors/forward.json` holds routes and reports, `sample.json` draws.

mod report;
mod route;
mod sample;
mod seal;

pub use report::{is_forward_addr, Report, ReportOf, ReportRef, Sub, MAX_REPORT_LEN};
pub use route::{kept_by_seen, route, route_with, Forwarding, Route};
pub use sample::{default_sample_keep, redraw};
pub use seal::{append_tag, open, open_ref, seal, Rejected, TAG_LEN};

// The sample's defaults, which the agent, the simulator and the test harness take.

/// Peers each agent hears by default (the agent's `fleet_sample`, the
/// simulator's `--fleet-sample`), so what the tier sends per change of a count
/// does not grow with the fleet. In `huntlb-sim` 8, keeping 4 at each draw,
/// costs about 19 messages per request and is within 1.05x JSQ's mean on 12
/// backends, 1.12x on 96; 4 peers miss twice as far (1.24x on 96 backends):
/// docs/results/many-fronts-sim.md.
pub const DEFAULT_SAMPLE: usize = 8;
/// The most of a sample's least loaded peers a draw keeps by default.
pub const DEFAULT_SAMPLE_KEEP: usize = 4;
/// How often a sample is drawn again by default, in ms (`fleet_resample_ms`,
/// `--fleet-resample-ms`).
pub const DEFAULT_RESAMPLE_MS: u64 = 100;

#[cfg(test)]
mod tests;
