//! The `agent_headers` fuzz target on stable, in `make test`: every committed
//! input of `fuzz/corpus/agent_headers/`, then seeded random and mutated inputs,
//! through the body libFuzzer runs (`fuzz/src/agent_headers.rs`, included here,
//! so the checks are written once). The policy crate's targets are replayed by
//! `policy/tests/fuzz_replay.rs`; the long runs are `make fuzz` (nightly).

#[path = "../../fuzz/src/agent_headers.rs"]
mod target;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

fn corpus() -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/agent_headers");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let data = std::fs::read(&p).unwrap();
            (p, data)
        })
        .collect();
    files.sort();
    files
}

/// Run one input, naming it if it fails (a failing random input is printed so
/// it can be committed to the corpus).
fn run(what: &str, data: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| target::agent_headers(data))).is_err() {
        panic!("fuzz target agent_headers failed on {what}: {data:?}");
    }
}

#[test]
fn every_corpus_input_passes() {
    let files = corpus();
    assert!(files.len() >= 10, "fuzz/corpus/agent_headers holds {} inputs", files.len());
    for (path, data) in &files {
        run(&path.display().to_string(), data);
    }
}

#[test]
fn the_corpus_reaches_every_kind_of_try() {
    // Seeds that no longer parse as meant would leave the replay checking little.
    use huntlb_agent::headers::read_try;
    use huntlb_policy::protocol::Mark;
    let marks: Vec<Mark> = corpus().iter().map(|(_, d)| read_try(&target::header_map(d)).mark).collect();
    for want in [Mark::Offer, Mark::Final, Mark::Plain, Mark::Malformed] {
        assert!(marks.contains(&want), "no corpus input reads as {want:?}");
    }
}

/// xorshift64*: a fixed seed, so a failure here fails the same way every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Pieces of header lines, so random inputs get past the header map's checks.
const WORDS: [&[u8]; 26] = [
    b"\n", b":", b",", b" ", b"hunt", b"hunt-", b"hunt-offer:", b"hunt-target:", b"x-envoy-attempt-count:", b"hunt-seen:",
    b"hunt-front:", b"connection:", b"upgrade", b"te:", b"trailers", b"keep-alive", b"x-envoy-", b"content-type:",
    b"application/grpc", b"1", b"web-1", b"forwarded", b"999999999", b"\x00", b"\x0b", b"\xff",
];

fn mutate(rng: &mut Rng, data: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(data.len() + 1);
        match rng.below(4) {
            0 if at < data.len() => data[at] = rng.next() as u8,
            1 => data.insert(at, rng.next() as u8),
            2 if at < data.len() => {
                data.remove(at);
            }
            _ => {
                let w = WORDS[rng.below(WORDS.len())];
                data.splice(at..at, w.iter().copied());
            }
        }
    }
}

#[test]
fn seeded_random_and_mutated_inputs_pass() {
    let mut rng = Rng(0x0a6e_47f0_22c3_91d5);
    let seeds: Vec<Vec<u8>> = corpus().into_iter().map(|(_, d)| d).collect();
    for i in 0..5000 {
        let data = if i % 3 == 0 {
            let mut d = Vec::new();
            for _ in 0..rng.below(40) {
                if rng.below(2) == 0 {
                    d.push(rng.next() as u8);
                } else {
                    d.extend_from_slice(WORDS[rng.below(WORDS.len())]);
                }
            }
            d
        } else {
            let mut d = seeds[rng.below(seeds.len())].clone();
            mutate(&mut rng, &mut d);
            d
        };
        run(&format!("seeded input {i}"), &data);
    }
}
