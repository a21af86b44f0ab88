//! A report sealed with a MAC, and opened: the tag is checked before anything
//! else of a datagram is believed.

use super::report::{nibble, HEX};
use super::{Report, ReportRef, MAX_REPORT_LEN};

/// Earlier versions of the datagram: authentic ones are told apart from junk
/// (`Rejected::Version`), so a fleet mid-upgrade says so in its logs instead of
/// calling its own members malformed.
const OLDER: &[&str] = &["hunt-fleet/1", "hunt-fleet/2"];
/// Bytes of the report's MAC (HMAC-SHA256, truncated as RFC 2104 allows; 128
/// bits leave a forger one chance in 2^128 a datagram).
pub const TAG_LEN: usize = 16;

/// Why a datagram was not taken as a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// Not the shape of a sealed report (what is wrong with it).
    Malformed(String),
    /// Its MAC does not match under any key held: not from a key holder, or
    /// changed on the way.
    Unauthenticated,
    /// Authentic, but an earlier version of the datagram (which one): an
    /// agent of an older huntlb, which this one neither hears nor forwards to.
    Version(String),
}

/// A report's text and its tag, as one datagram.
pub fn seal(text: &str, tag: &[u8; TAG_LEN]) -> String {
    let mut out = Vec::with_capacity(text.len() + 1 + 2 * TAG_LEN);
    out.extend_from_slice(text.as_bytes());
    append_tag(&mut out, tag);
    String::from_utf8(out).expect("text and hex digits are UTF-8")
}

/// [`seal`] in place: a space and the tag's hex after the text already in
/// `out`, so a host that formats into a buffer it keeps allocates nothing.
pub fn append_tag(out: &mut Vec<u8>, tag: &[u8; TAG_LEN]) {
    out.push(b' ');
    for b in tag {
        out.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
    }
}

/// Check a datagram's tag with `verify(text, tag)` (the host's MAC, under each
/// key it accepts), then parse the text. Nothing but the length and the tag's
/// shape is looked at before the tag is checked.
pub fn open(d: &[u8], verify: impl FnOnce(&[u8], &[u8; TAG_LEN]) -> bool) -> Result<Report, Rejected> {
    open_ref(d, verify).map(|r| r.owned())
}

/// [`open`], the report borrowing its addresses from the datagram: what a
/// host's reader takes at every datagram, with no allocation when it opens.
pub fn open_ref(d: &[u8], verify: impl FnOnce(&[u8], &[u8; TAG_LEN]) -> bool) -> Result<ReportRef<'_>, Rejected> {
    if d.len() > MAX_REPORT_LEN {
        return Err(Rejected::Malformed(format!("{} bytes, more than {MAX_REPORT_LEN}", d.len())));
    }
    let hex_len = 2 * TAG_LEN;
    if d.len() < hex_len + 1 || d[d.len() - hex_len - 1] != b' ' {
        return Err(Rejected::Malformed(format!("no tag: a report ends with a space and {hex_len} hex digits")));
    }
    let (text, hex) = (&d[..d.len() - hex_len - 1], &d[d.len() - hex_len..]);
    let mut tag = [0u8; TAG_LEN];
    for (i, pair) in hex.chunks(2).enumerate() {
        match (nibble(pair[0]), nibble(pair[1])) {
            (Some(hi), Some(lo)) => tag[i] = hi << 4 | lo,
            _ => return Err(Rejected::Malformed(format!("tag: expected {hex_len} lowercase hex digits"))),
        }
    }
    if !verify(text, &tag) {
        return Err(Rejected::Unauthenticated);
    }
    // A key holder sent it: an older agent's report is said to be one.
    if let Some(old) = OLDER.iter().find(|m| text.starts_with(m.as_bytes()) && text.get(m.len()) == Some(&b' ')) {
        return Err(Rejected::Version(old.to_string()));
    }
    // Its text is still checked like any input.
    ReportRef::parse(text).map_err(Rejected::Malformed)
}
