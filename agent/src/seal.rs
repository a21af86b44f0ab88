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

#[derive(Clone)]
pub struct Keys {
    /// The first seals; all are tried when checking.
    keys: Vec<hmac::Key>,
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
    /// the error says what is wrong, never what the key is.
    pub fn load(path: &str) -> Result<Keys, String> {
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
        Ok(Keys { keys: lines.iter().map(|l| hmac::Key::new(hmac::HMAC_SHA256, l.as_bytes())).collect(), stamp })
    }

    /// Read the file again if it changed since it was read; `Ok(None)`: unchanged.
    pub fn reload_if_changed(&self, path: &str) -> Result<Option<Keys>, String> {
        if stamp(path) == self.stamp {
            return Ok(None);
        }
        Keys::load(path).map(Some)
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

    fn key_file(name: &str, text: &str) -> String {
        let p = std::env::temp_dir().join(format!("huntlb-seal-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }

    /// The vectors' sealed reports, made and opened with ring's HMAC.
    #[test]
    fn seals_as_the_vectors_say() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../policy/vectors/forward.json")).expect("forward.json parses");
        for c in doc["sealed"].as_array().unwrap() {
            let (key, text, d) = (c["key"].as_str().unwrap(), c["text"].as_str().unwrap(), c["datagram"].as_str().unwrap());
            let keys = Keys::load(&key_file("vector", key)).unwrap();
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
        let sealed_old = Keys::load(&key_file("old", &old)).unwrap().tag(text);
        let both = Keys::load(&key_file("both", &format!("# rotating\n{new}\n\n{old}\n"))).unwrap();
        assert_eq!(both.len(), 2);
        assert!(both.verify(text, &sealed_old), "the old key is still taken");
        assert!(both.verify(text, &both.tag(text)), "the new one seals");
        let only_new = Keys::load(&key_file("new", &new)).unwrap();
        assert!(!only_new.verify(text, &sealed_old), "once rotated out, the old key is not taken");
        assert_eq!(open(&seal("hunt-fleet/2 127.0.0.1:9700 1 2 1 1", &sealed_old).into_bytes(), |t, g| only_new.verify(t, g)), Err(Rejected::Unauthenticated));
        for (name, text, want) in [("empty", "\n# none\n", "no key"), ("short", "abc", "fewer than"), ("three", "a\nb\nc", "3 keys")] {
            let short = "x".repeat(40);
            let body = if name == "three" { format!("{short}\n{short}\n{short}") } else { text.to_string() };
            let e = Keys::load(&key_file(name, &body)).unwrap_err();
            assert!(e.contains(want) && !e.contains(&short), "{e}");
        }
        assert!(Keys::load("/nonexistent/fleet.key").unwrap_err().contains("/nonexistent/fleet.key"));
    }
}
