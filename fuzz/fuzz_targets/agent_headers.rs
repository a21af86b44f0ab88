#![no_main]
// Body in ../src/agent_headers.rs (shared with agent/tests/fuzz_replay.rs): not in
// ../src/lib.rs, which the policy crate replays and which cannot use the agent.
#[path = "../src/agent_headers.rs"]
mod agent_headers;

libfuzzer_sys::fuzz_target!(|data: &[u8]| agent_headers::agent_headers(data));
