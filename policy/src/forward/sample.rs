//! Which peers an agent hears: a sample of the fleet, drawn again now and then.

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

/// `fleet_sample_keep`'s default for a sample of `sample` peers: half of it,
/// at most [`DEFAULT_SAMPLE_KEEP`], so every draw brings in a new peer.
pub fn default_sample_keep(sample: usize) -> usize {
    DEFAULT_SAMPLE_KEEP.min(sample / 2)
}
