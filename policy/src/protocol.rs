//! hunt/1 on the wire: header names, the refusal, and how a backend classifies a
//! try from its headers. Pure functions over byte slices, so the agent (hyper) and
//! the Wasm sidecar (proxy-wasm) classify identically. The spec is
//! `docs/protocol.md`.

use crate::Try;

/// Set once per request by the front proxy: names the try that may be refused.
pub const OFFER: &str = "hunt-offer";
/// Set on every try by the front proxy: names this try.
pub const TARGET: &str = "hunt-target";
/// On a refusal: `hunt: busy`.
pub const BUSY_HEADER: &str = "hunt";
pub const BUSY_VALUE: &str = "busy";
/// A refusal's status: 425 Too Early, "not processed, safe to replay".
pub const BUSY_STATUS: u16 = 425;
/// Optional on an accepted response: which agent served it.
pub const SERVED_BY: &str = "hunt-served-by";
/// The agent's own health path.
pub const HEALTH_PATH: &str = "/.hunt/health";
/// Longest accepted `hunt-offer` / `hunt-target` value.
pub const MAX_MARK_LEN: usize = 64;

/// What a backend makes of a try's hunt headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Both headers present, well formed and equal: this try may be refused.
    Offer,
    /// Hunt headers present but not an offer (the second candidate's try).
    Final,
    /// No hunt headers: ordinary traffic, health checks.
    Plain,
    /// A hunt header is repeated, empty, too long or not a token. Never refused.
    Malformed,
}

impl Mark {
    /// What the policy sees: only an offer may be refused.
    pub fn as_try(self) -> Try {
        match self {
            Mark::Offer => Try::Offer,
            _ => Try::Final,
        }
    }
}

/// A header as the caller found it: absent, present once, or present more than once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field<'a> {
    Absent,
    One(&'a [u8]),
    Repeated,
}

/// Classify a try from its `hunt-offer` and `hunt-target` headers. When unsure,
/// never refuse: anything but two well-formed equal values is not an offer.
pub fn classify(offer: Field<'_>, target: Field<'_>) -> Mark {
    match (offer, target) {
        (Field::Absent, Field::Absent) => Mark::Plain,
        (Field::One(o), Field::One(t)) if is_token(o) && is_token(t) => {
            if o == t {
                Mark::Offer
            } else {
                Mark::Final
            }
        }
        (Field::One(v), Field::Absent) | (Field::Absent, Field::One(v)) if is_token(v) => Mark::Final,
        _ => Mark::Malformed,
    }
}

/// RFC 9110 token characters, 1 to [`MAX_MARK_LEN`] bytes.
pub fn is_token(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= MAX_MARK_LEN
        && v.iter().all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// True for headers a backend strips before the app sees the request, and a
/// front proxy strips from clients: `hunt` and everything starting `hunt-`.
pub fn is_hunt_header(name: &str) -> bool {
    name.len() >= 4 && name[..4].eq_ignore_ascii_case("hunt") && (name.len() == 4 || name.as_bytes()[4] == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use Field::*;

    #[test]
    fn classification() {
        assert_eq!(classify(One(b"1"), One(b"1")), Mark::Offer);
        assert_eq!(classify(One(b"web3"), One(b"web3")), Mark::Offer);
        assert_eq!(classify(One(b"1"), One(b"2")), Mark::Final);
        assert_eq!(classify(One(b"web3"), One(b"web7")), Mark::Final);
        assert_eq!(classify(Absent, One(b"2")), Mark::Final);
        assert_eq!(classify(One(b"1"), Absent), Mark::Final);
        assert_eq!(classify(Absent, Absent), Mark::Plain);
        assert_eq!(classify(Repeated, One(b"1")), Mark::Malformed);
        assert_eq!(classify(One(b""), One(b"")), Mark::Malformed);
        assert_eq!(classify(One(b"a b"), One(b"a b")), Mark::Malformed);
        assert_eq!(classify(One(&[b'x'; 65]), One(&[b'x'; 65])), Mark::Malformed);
        assert_eq!(classify(One(b"1"), Repeated), Mark::Malformed);
        assert_eq!(Mark::Malformed.as_try(), Try::Final);
    }

    #[test]
    fn hunt_headers() {
        for h in ["hunt", "hunt-offer", "Hunt-Target", "hunt-served-by"] {
            assert!(is_hunt_header(h), "{h}");
        }
        for h in ["hunter", "x-hunt", "hun", "huntlb"] {
            assert!(!is_hunt_header(h), "{h}");
        }
    }
}
