//! Requests in flight per front (`hunt-front`), as one proxy-wasm shared-data
//! value for every worker thread of the sidecar's Envoy: the agent's
//! `PerFront`. A front that cannot send `hunt-seen` (Envoy) names itself
//! instead, and what it has in flight here is what it would have sent.
//!
//! One value, not a key per front: proxy-wasm 0.2 cannot delete a key, so
//! names sent by anyone who reaches the sidecar would pile up for good. Here a
//! front goes with its last request, and the table holds at most
//! [`MAX_FRONTS`]; a try from a front beyond that counts for none (its offers
//! are decided as if it sent no `hunt-seen`, the paper's SR_dyn).
//!
//! Encoding: one `name count\n` line per front with requests in flight. A name
//! is what `protocol::parse_front` accepts: visible ASCII, so no space or newline.

/// Fronts the table holds at most.
pub const MAX_FRONTS: usize = 64;

fn entries(table: &[u8]) -> impl Iterator<Item = (&[u8], u32)> {
    table.split(|&b| b == b'\n').filter_map(|line| {
        let at = line.iter().rposition(|&b| b == b' ')?;
        let n = std::str::from_utf8(&line[at + 1..]).ok()?.parse().ok()?;
        Some((&line[..at], n))
    })
}

/// `name`'s requests in flight (0 when it has none, or the table is unreadable).
pub fn get(table: &[u8], name: &[u8]) -> u32 {
    entries(table).find(|(k, _)| *k == name).map_or(0, |(_, n)| n)
}

/// The table with `name`'s count moved by `delta`, a name that reaches 0
/// removed; `None` when `name` is new and the table is full.
pub fn add(table: &[u8], name: &[u8], delta: i32) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(table.len() + name.len() + 8);
    let (mut found, mut kept) = (false, 0);
    for (k, n) in entries(table) {
        let n = if k == name {
            found = true;
            n.saturating_add_signed(delta)
        } else {
            n
        };
        if n > 0 {
            kept += 1;
            out.extend_from_slice(k);
            out.extend_from_slice(format!(" {n}\n").as_bytes());
        }
    }
    if !found && delta > 0 {
        if kept >= MAX_FRONTS {
            return None;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(format!(" {delta}\n").as_bytes());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_front_apart_and_forgets_one_with_nothing_in_flight() {
        let t = add(b"", b"127.0.1.254:10000", 1).unwrap();
        let t = add(&t, b"127.0.1.254:10000", 1).unwrap();
        let t = add(&t, b"front-b", 1).unwrap();
        assert_eq!((get(&t, b"127.0.1.254:10000"), get(&t, b"front-b"), get(&t, b"other")), (2, 1, 0));
        let t = add(&t, b"front-b", -1).unwrap();
        assert_eq!(t, b"127.0.1.254:10000 2\n", "a front with nothing in flight leaves the table");
        // A name that is a prefix or suffix of another is its own front.
        let t = add(&t, b"127.0.1.254:1000", 1).unwrap();
        assert_eq!((get(&t, b"127.0.1.254:10000"), get(&t, b"127.0.1.254:1000")), (2, 1));
    }

    #[test]
    fn a_full_table_takes_no_new_front_but_still_counts_the_ones_it_has() {
        let mut t = Vec::new();
        for i in 0..MAX_FRONTS {
            t = add(&t, format!("f{i}").as_bytes(), 1).unwrap();
        }
        assert_eq!(add(&t, b"one-too-many", 1), None);
        let t = add(&t, b"f3", 1).unwrap();
        assert_eq!(get(&t, b"f3"), 2);
        // once one goes, a new one fits
        let t = add(&t, b"f0", -1).unwrap();
        assert_eq!(get(&add(&t, b"one-too-many", 1).unwrap(), b"one-too-many"), 1);
    }

    #[test]
    fn a_decrement_never_goes_below_zero_or_adds_a_front() {
        assert_eq!(add(b"", b"a", -1).unwrap(), b"");
        assert_eq!(add(b"a 1\n", b"a", -1).unwrap(), b"");
        assert_eq!(get(b"garbage\nno-count x\n", b"garbage"), 0);
    }
}
