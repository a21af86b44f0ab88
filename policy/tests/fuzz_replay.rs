//! The cargo-fuzz targets (`fuzz/`, docs/fuzzing.md) on stable, in `make test`:
//! every committed corpus input, then a few thousand seeded random and mutated
//! inputs, through the same target bodies libFuzzer runs (`fuzz/src/lib.rs`,
//! included here, so the checks are written once; the replay itself is
//! `fuzz/src/replay.rs`). The long runs are `make fuzz` (nightly, cargo-fuzz).

#[path = "../../fuzz/src/lib.rs"]
mod targets;
#[path = "../../fuzz/src/replay.rs"]
mod replay;

use replay::{corpus, input, run, Rng};

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

/// Pieces of the inputs the targets read, so random inputs get past the parsers.
const WORDS: [&[u8]; 24] = [
    b"always", b"static:", b"dynamic", b"dynamic:", b"window=", b"low=", b"high=", b"c0=", b"c_max=", b",", b"=",
    b"0.", b"1", b"50", b"65535", b"65536", b" ", b"\n", b"hunt", b"hunt-", b"web-1", b"\xff", b"\x00", b"\xc3\xa9",
];

#[test]
fn seeded_random_and_mutated_inputs_pass() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for (name, f) in targets::TARGETS {
        let seeds: Vec<Vec<u8>> = corpus(name).into_iter().map(|(_, d)| d).collect();
        for i in 0..5000 {
            let data = input(&mut rng, i, &seeds, &WORDS);
            run(name, f, &format!("seeded input {i}"), &data);
        }
    }
}
