//! The `agent_headers` fuzz target on stable, in `make test`: every committed
//! input of `fuzz/corpus/agent_headers/`, then seeded random and mutated inputs,
//! through the body libFuzzer runs (`fuzz/src/agent_headers.rs`, included here,
//! so the checks are written once; the replay itself is `fuzz/src/replay.rs`).
//! The policy crate's targets are replayed by `policy/tests/fuzz_replay.rs`;
//! the long runs are `make fuzz` (nightly).

#[path = "../../fuzz/src/agent_headers.rs"]
mod target;
#[path = "../../fuzz/src/replay.rs"]
mod replay;

use replay::{corpus, input, run, Rng};

const NAME: &str = "agent_headers";

#[test]
fn every_corpus_input_passes() {
    let files = corpus(NAME);
    assert!(files.len() >= 10, "fuzz/corpus/agent_headers holds {} inputs", files.len());
    for (path, data) in &files {
        run(NAME, target::agent_headers, &path.display().to_string(), data);
    }
}

#[test]
fn the_corpus_reaches_every_kind_of_try() {
    // Seeds that no longer parse as meant would leave the replay checking little.
    use huntlb_agent::headers::read_try;
    use huntlb_policy::protocol::Mark;
    let marks: Vec<Mark> = corpus(NAME).iter().map(|(_, d)| read_try(&target::header_map(d)).mark).collect();
    for want in [Mark::Offer, Mark::Final, Mark::Plain, Mark::Malformed] {
        assert!(marks.contains(&want), "no corpus input reads as {want:?}");
    }
}

/// Pieces of header lines, so random inputs get past the header map's checks.
const WORDS: [&[u8]; 26] = [
    b"\n", b":", b",", b" ", b"hunt", b"hunt-", b"hunt-offer:", b"hunt-target:", b"x-envoy-attempt-count:", b"hunt-seen:",
    b"hunt-front:", b"connection:", b"upgrade", b"te:", b"trailers", b"keep-alive", b"x-envoy-", b"content-type:",
    b"application/grpc", b"1", b"web-1", b"forwarded", b"999999999", b"\x00", b"\x0b", b"\xff",
];

#[test]
fn seeded_random_and_mutated_inputs_pass() {
    let mut rng = Rng(0x0a6e_47f0_22c3_91d5);
    let seeds: Vec<Vec<u8>> = corpus(NAME).into_iter().map(|(_, d)| d).collect();
    for i in 0..5000 {
        let data = input(&mut rng, i, &seeds, &WORDS);
        run(NAME, target::agent_headers, &format!("seeded input {i}"), &data);
    }
}
