//! huntlb's measuring side: the workload app that stands in for the SRLB paper's
//! Apache servers, and (in later modules) the load generator and scenarios.

pub mod loadgen;
pub mod workload;
