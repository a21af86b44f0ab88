//! huntlb's Envoy filter (proxy-wasm, `wasm32-wasip1`): the agent's acceptance
//! policy inside a backend's own Envoy, for meshes with no separate agent
//! process (`envoy-filter/examples/sidecar.yaml`). The hunting *front* needs no
//! filter: it is native Envoy config (`envoy-filter/examples/front.yaml`).
//!
//! Everything that decides lives in plain Rust (this crate's `config` and the
//! `huntlb-policy` crate) and is unit-tested natively; the host glue in `wasm`
//! only moves headers and counters.

pub mod config;
pub mod fronts;
pub mod reply;

#[cfg(target_arch = "wasm32")]
mod wasm;
