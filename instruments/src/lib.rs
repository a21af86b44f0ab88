//! huntlb's measuring side: the workload app that stands in for the SRLB paper's
//! Apache servers, the load generator, and the simulator the real runs are
//! compared with.

pub mod epp;
pub mod llm;
pub mod loadgen;
pub mod serve;
pub mod sim;
pub mod workload;
