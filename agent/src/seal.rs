//! The forwarding tier's shared key: reports are sealed with HMAC-SHA256
//! (ring) under the first key of `fleet_key_file` and taken under any key in
//! it, so a key is rotated without a window in which agents disagree:
//!
//! ```text
//!  1. every agent: old          (seal old, take old)
//!  2. every agent: old + new    (seal old, take both)
//!  3. every agent: new + old    (seal new, take both)
//!  4. every agent: new          (seal new, take new)
//! ```
//!
//! The file is read again when it changes (`Keys::reload_if_changed`); a file
//! that no longer loads leaves the keys in use, with an error in the log.
//! The framing (text, a space, the tag's hex) is the policy crate's
//! (`huntlb_policy::forward::{seal, open}`); only the MAC is here.

use huntlb_policy::forward::TAG_LEN;
use ring::hmac;
use std::os::unix::fs::MetadataExt;
use std::time::SystemTime;

/// A key shorter than this is refused: a guessable key makes every report
/// forgeable. `openssl rand -hex 32` gives 64 characters.
pub const MIN_KEY_LEN: usize = 32;

/// A key whose characters say less than this (their counted entropy, bits
/// per character times its length) is warned about: `openssl rand -hex 32`
/// says about 240, a word or a repeated character far less.
pub const WEAK_KEY_BITS: f64 = 100.0;

/// Who may read the key file, besides its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readers {
    /// The owner only (group and others may neither read nor write it), as
    /// ssh asks of a private key: anyone who reads it speaks for the fleet.
    Owner,
    /// Anyone the file's mode lets (`fleet_key_readable_by_others = true`: a
    /// secret store that mounts files 0444).
    Any,
}

#[derive(Clone)]
pub struct Keys {
    /// The first seals; all are tried when checking.
    keys: Vec<hmac::Key>,
    /// Lines (1-based) whose key looks guessable: warned about, not refused.
    pub weak: Vec<usize>,
    /// What the file was when read: (modified, inode, length).
    stamp: Option<(SystemTime, u64, u64)>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key material.
        write!(f, "Keys({} held)", self.keys.len())
    }
}

impl Keys {
    /// One or two keys, a line each (blank lines and `#` comments skipped);
    /// the error says what is wrong, never what the key is. A file that group
    /// or others may read or write is refused unless `readers` is `Any`.
    pub fn load(path: &str, readers: Readers) -> Result<Keys, String> {
        if readers == Readers::Owner {
            let mode = std::fs::metadata(path).map_err(|e| format!("{path}: {e}"))?.mode() & 0o777;
            if mode & 0o066 != 0 {
                return Err(format!(
                    "{path}: mode {mode:04o} lets group or others read or write the fleet's key (anyone who reads it can speak for any member): `chmod 600 {path}`, or set fleet_key_readable_by_others = true where a secret store mounts it so"
                ));
            }
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let stamp = stamp(path);
        let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
        match lines.len() {
            0 => return Err(format!("{path}: no key in it (a line of at least {MIN_KEY_LEN} characters: `openssl rand -hex 32`)")),
            1 | 2 => {}
            n => return Err(format!("{path}: {n} keys; at most 2 (the one that seals, and the one being rotated in or out)")),
        }
        if let Some(i) = lines.iter().position(|l| l.len() < MIN_KEY_LEN) {
            return Err(format!("{path}: key on line {} is {} characters, fewer than {MIN_KEY_LEN}", i + 1, lines[i].len()));
        }
        let weak = lines.iter().enumerate().filter(|(_, l)| entropy_bits(l) < WEAK_KEY_BITS).map(|(i, _)| i + 1).collect();
        Ok(Keys { keys: lines.iter().map(|l| hmac::Key::new(hmac::HMAC_SHA256, l.as_bytes())).collect(), weak, stamp })
    }

    /// What to warn about this key file, once loaded.
    pub fn warnings(&self, path: &str) -> Vec<String> {
        self.weak
            .iter()
            .map(|line| format!("config key `fleet_key_file`: {path}: the key on line {line} looks guessable (under {WEAK_KEY_BITS} bits by its characters): `openssl rand -hex 32`"))
            .collect()
    }

    /// Read the file again if it changed since it was read; `Ok(None)`: unchanged.
    pub fn reload_if_changed(&self, path: &str, readers: Readers) -> Result<Option<Keys>, String> {
        if stamp(path) == self.stamp {
            return Ok(None);
        }
        Keys::load(path, readers).map(Some)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The tag of `text` under the sealing key.
    pub fn tag(&self, text: &[u8]) -> [u8; TAG_LEN] {
        let full = hmac::sign(&self.keys[0], text);
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(&full.as_ref()[..TAG_LEN]);
        out
    }

    /// Does `tag` seal `text` under any key held? Constant time in the tag
    /// (ring's `verify` compares so; a truncated tag is checked by computing
    /// the full one and comparing the prefix in constant time).
    pub fn verify(&self, text: &[u8], tag: &[u8; TAG_LEN]) -> bool {
        self.keys.iter().any(|k| {
            let full = hmac::sign(k, text);
            constant_time_eq(&full.as_ref()[..TAG_LEN], tag)
        })
    }
}

/// The key's characters' entropy, counted: each character's frequency in the
/// key, -log2 of it, summed. A repeated character says 0; 64 random hex
/// digits about 240.
pub fn entropy_bits(key: &str) -> f64 {
    let mut n = [0u32; 256];
    for b in key.bytes() {
        n[usize::from(b)] += 1;
    }
    let len = key.len() as f64;
    n.iter().filter(|&&c| c > 0).map(|&c| f64::from(c) * -(f64::from(c) / len).log2()).sum()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn stamp(path: &str) -> Option<(SystemTime, u64, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.ino(), m.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use huntlb_policy::forward::{open, seal, Rejected};

    fn key_file_mode(name: &str, text: &str, mode: u32) -> String {
        use std::os::unix::fs::PermissionsExt;
        let p = std::env::temp_dir().join(format!("huntlb-seal-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p.to_string_lossy().into_owned()
    }

    fn key_file(name: &str, text: &str) -> String {
        key_file_mode(name, text, 0o600)
    }

    fn load(path: &str) -> Result<Keys, String> {
        Keys::load(path, Readers::Owner)
    }

    /// The vectors' sealed reports, made and opened with ring's HMAC.
    #[test]
    fn seals_as_the_vectors_say() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../policy/vectors/forward.json")).expect("forward.json parses");
        for c in doc["sealed"].as_array().unwrap() {
            let (key, text, d) = (c["key"].as_str().unwrap(), c["text"].as_str().unwrap(), c["datagram"].as_str().unwrap());
            let keys = load(&key_file("vector", key)).unwrap();
            assert_eq!(seal(text, &keys.tag(text.as_bytes())), d);
            assert_eq!(open(d.as_bytes(), |t, tag| keys.verify(t, tag)).map(|r| r.to_string()), Ok(text.to_string()));
            // One changed byte anywhere, text or tag: not authentic.
            for i in 0..d.len() {
                let mut b = d.as_bytes().to_vec();
                b[i] = if b[i] == b'1' { b'2' } else { b'1' };
                assert!(open(&b, |t, tag| keys.verify(t, tag)).is_err(), "byte {i} changed, still opened");
            }
        }
    }

    #[test]
    fn two_keys_during_a_rotation_and_errors_that_name_no_key() {
        let (old, new) = ("o".repeat(40), "n".repeat(40));
        let text = b"hunt-fleet/2 127.0.0.1:9700 1 2 1 1";
        let sealed_old = load(&key_file("old", &old)).unwrap().tag(text);
        let both = load(&key_file("both", &format!("# rotating\n{new}\n\n{old}\n"))).unwrap();
        assert_eq!(both.len(), 2);
        assert!(both.verify(text, &sealed_old), "the old key is still taken");
        assert!(both.verify(text, &both.tag(text)), "the new one seals");
        let only_new = load(&key_file("new", &new)).unwrap();
        assert!(!only_new.verify(text, &sealed_old), "once rotated out, the old key is not taken");
        assert_eq!(open(&seal("hunt-fleet/2 127.0.0.1:9700 1 2 1 1", &sealed_old).into_bytes(), |t, g| only_new.verify(t, g)), Err(Rejected::Unauthenticated));
        for (name, text, want) in [("empty", "\n# none\n", "no key"), ("short", "abc", "fewer than"), ("three", "a\nb\nc", "3 keys")] {
            let short = "x".repeat(40);
            let body = if name == "three" { format!("{short}\n{short}\n{short}") } else { text.to_string() };
            let e = load(&key_file(name, &body)).unwrap_err();
            assert!(e.contains(want) && !e.contains(&short), "{e}");
        }
        assert!(load("/nonexistent/fleet.key").unwrap_err().contains("/nonexistent/fleet.key"));
    }

    /// As ssh does with a private key: a key file group or others may read or
    /// write is refused, unless told a secret store mounts it so; a key that
    /// looks guessable loads, with a warning.
    #[test]
    fn a_key_others_may_read_is_refused_and_a_weak_one_warned_about() {
        let key = "9f3c5a7e01b2d4c6aa81f0e3b5c7d9e1f2a4b6c8d0e1f3a5b7c9d1e3f5a7b9c1";
        for mode in [0o644, 0o640, 0o604, 0o622] {
            let path = key_file_mode(&format!("mode{mode:o}"), key, mode);
            let e = load(&path).unwrap_err();
            assert!(e.contains(&format!("mode {mode:04o}")) && e.contains("chmod 600") && !e.contains(key), "{e}");
            assert!(Keys::load(&path, Readers::Any).is_ok(), "told otherwise: mode {mode:o} taken");
        }
        assert!(load(&key_file_mode("mode400", key, 0o400)).is_ok());
        let strong = load(&key_file("strong", key)).unwrap();
        assert!(strong.weak.is_empty() && strong.warnings("k").is_empty(), "{}", entropy_bits(key));
        let weak = load(&key_file("weak", &format!("{key}\n{}", "a".repeat(32)))).unwrap();
        assert_eq!(weak.weak, [2]);
        let w = weak.warnings("/etc/fleet.key");
        assert!(w.len() == 1 && w[0].contains("line 2") && w[0].contains("/etc/fleet.key") && !w[0].contains("aaaa"), "{w:?}");
        assert_eq!(entropy_bits(&"a".repeat(32)), 0.0);
        assert!(entropy_bits("abcdefgh".repeat(4).as_str()) < WEAK_KEY_BITS);
    }
}
