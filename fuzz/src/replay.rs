//! A fuzz target replayed on stable, in `make test`: its committed corpus, then
//! seeded random and mutated inputs. Included by path by
//! `policy/tests/fuzz_replay.rs` and `agent/tests/fuzz_replay.rs` (not a
//! module of this crate), so the replay is written once for every target.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

/// Every input of `fuzz/corpus/<target>`, sorted by name.
pub fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    // The including crate's directory: policy/ and agent/ both sit beside fuzz/.
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
pub fn run(target: &str, f: fn(&[u8]), what: &str, data: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| f(data))).is_err() {
        panic!("fuzz target {target} failed on {what}: {data:?}");
    }
}

/// xorshift64*: a fixed seed, so a failure here fails the same way every run.
pub struct Rng(pub u64);

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

/// The `i`th seeded input: every third random bytes and `words` (pieces of
/// what the target reads, so random inputs get past its parsers), the others
/// one of `seeds` mutated.
pub fn input(rng: &mut Rng, i: usize, seeds: &[Vec<u8>], words: &[&[u8]]) -> Vec<u8> {
    if i % 3 == 0 {
        let mut d = Vec::new();
        for _ in 0..rng.below(40) {
            if rng.below(2) == 0 {
                d.push(rng.next() as u8);
            } else {
                d.extend_from_slice(words[rng.below(words.len())]);
            }
        }
        d
    } else {
        let mut d = seeds[rng.below(seeds.len())].clone();
        mutate(rng, &mut d, words);
        d
    }
}

/// A libFuzzer-style mutation: overwrite, insert, delete or splice in a word.
fn mutate(rng: &mut Rng, data: &mut Vec<u8>, words: &[&[u8]]) {
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(data.len() + 1);
        match rng.below(4) {
            0 if at < data.len() => data[at] = rng.next() as u8,
            1 => data.insert(at, rng.next() as u8),
            2 if at < data.len() => {
                data.remove(at);
            }
            _ => {
                let w = words[rng.below(words.len())];
                data.splice(at..at, w.iter().copied());
            }
        }
    }
}
