//! huntlb's Envoy filter (proxy-wasm, `wasm32-wasip1`). One module, two roles
//! chosen by its JSON configuration (see [`config`]):
//!
//! * `front`, in a front proxy's HTTP connection manager, beside the route's
//!   retry policy and an upstream `header_mutation` filter that names each try
//!   (`envoy-filter/examples/front.yaml`);
//! * `sidecar`, in a backend's own Envoy: the agent's acceptance policy as a
//!   filter, for meshes with no separate agent process.
//!
//! Everything that decides lives in plain Rust (this crate's `config` and the
//! `huntlb-policy` crate) and is unit-tested natively; the host glue in `wasm`
//! only moves headers and counters.

pub mod config;

#[cfg(target_arch = "wasm32")]
mod wasm;
