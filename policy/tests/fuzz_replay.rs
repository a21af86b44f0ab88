//! The cargo-fuzz targets (`fuzz/`, docs/fuzzing.md) on stable, in `make test`:
//! every committed corpus input, then a few thousand seeded random and mutated
//! inputs, through the same target bodies libFuzzer runs (`fuzz/src/lib.rs`,
//! included here, so the checks are written once). The long runs are
//! `make fuzz` (nightly, cargo-fuzz).

#[path = "../../fuzz/src/lib.rs"]
mod targets;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
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

/// Run one input, naming it if it fails (the panic message alone would not say
/// which input, and a failing random input is printed so it can be committed).
fn run(target: &str, f: fn(&[u8]), what: &str, data: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| f(data))).is_err() {
        panic!("fuzz target {target} failed on {what}: {data:?}");
    }
}

#[test]
fn every_corpus_input_passes() {
    for (name, f) in targets::TARGETS {
        let files = corpus(name);
        assert!(!files.is_empty(), "fuzz/corpus/{name} is empty");
        for (path, data) in &files {
            run(name, f, &path.display().to_string(), data);
        }
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

/// Pieces of the inputs the targets read, so random inputs get past the parsers.
const WORDS: [&[u8]; 24] = [
    b"always", b"static:", b"dynamic", b"dynamic:", b"window=", b"low=", b"high=", b"c0=", b"c_max=", b",", b"=",
    b"0.", b"1", b"50", b"65535", b"65536", b" ", b"\n", b"hunt", b"hunt-", b"web-1", b"\xff", b"\x00", b"\xc3\xa9",
];

/// A libFuzzer-style mutation: overwrite, insert, delete or splice in a word.
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
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for (name, f) in targets::TARGETS {
        let seeds: Vec<Vec<u8>> = corpus(name).into_iter().map(|(_, d)| d).collect();
        for i in 0..5000 {
            let data = if i % 3 == 0 {
                // random bytes and words
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
            run(name, f, &format!("seeded input {i}"), &data);
        }
    }
}
