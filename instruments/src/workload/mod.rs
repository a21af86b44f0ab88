//! An HTTP server that behaves like SRLB's Apache servers on a 2-core VM, so that
//! a 2-core test machine can host twelve of them: `n` worker slots, a bounded
//! backlog of requests waiting for a slot, and `k` *emulated* cores shared by the
//! busy workers (processor sharing). Nothing burns CPU: service demand is
//! emulated with timers, exactly (see [`ps`]).

pub mod demand;
pub mod ps;
pub mod server;

pub use demand::Demand;
pub use ps::ProcessorSharing;
