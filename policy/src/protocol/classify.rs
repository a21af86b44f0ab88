//! How a backend classifies a try from its hunt headers, and which headers are
//! the hunt's own.

use super::{MAX_MARK_LEN, MAX_SEEN_DIGITS};
use crate::decision::Try;

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

/// `hunt-seen` as the policy takes it: once, 1 to 9 plain decimal digits.
/// Anything else (repeated, empty, signed, too long) is no value, and the offer
/// is decided as if the front had sent none: a bad header can only lose the
/// front's hint, never make the agent refuse what it would have accepted.
pub fn parse_seen(f: Field<'_>) -> Option<u32> {
    match f {
        Field::One(v) if !v.is_empty() && v.len() <= MAX_SEEN_DIGITS && v.iter().all(u8::is_ascii_digit) => {
            Some(v.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0')))
        }
        _ => None,
    }
}

/// A `hunt-front` value: 1 to [`MAX_MARK_LEN`] visible ASCII bytes, no comma
/// (an address such as `127.0.1.254:10000` is one). Anything else, or the
/// header repeated, is no name: the try then counts for no front.
pub fn parse_front(f: Field<'_>) -> Option<&[u8]> {
    match f {
        Field::One(v) if !v.is_empty() && v.len() <= MAX_MARK_LEN && v.iter().all(|&b| b.is_ascii_graphic() && b != b',') => Some(v),
        _ => None,
    }
}

/// A try that may be passed on to a peer though it is no offer: `hunt-pass`
/// once, a front's name as [`parse_front`] takes it (the name it is counted
/// for). Anything else (repeated, empty, too long, a comma) is no leave to pass
/// it on, and the try is served where it landed as its mark says.
pub fn pass_front(f: Field<'_>) -> Option<&[u8]> {
    parse_front(f)
}

/// The value a try's `hunt-offer` is compared with: `hunt-target` when the
/// front sent one (HAProxy names each try with the server's name), otherwise
/// Envoy's `x-envoy-attempt-count` (its native per-try count).
pub fn per_try_mark<'a>(target: Field<'a>, envoy_attempt: Field<'a>) -> Field<'a> {
    match target {
        Field::Absent => envoy_attempt,
        named => named,
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
/// Compares bytes: a name with a multi-byte character at byte 4 (not a header
/// name, but a `&str` all the same) is no hunt header, not a panic.
pub fn is_hunt_header(name: &str) -> bool {
    let n = name.as_bytes();
    n.len() >= 4 && n[..4].eq_ignore_ascii_case(b"hunt") && (n.len() == 4 || n[4] == b'-')
}

/// True for response headers an app (or a peer's agent, for a forwarded try)
/// must not send on to the front: the hunt headers, whose meaning is the
/// agent's own (`hunt: busy` would make a front re-send what the app
/// processed), and Envoy's `x-envoy-*` controls, which an Envoy front acts on
/// (`x-envoy-immediate-health-check-fail` ejects the backend that answered,
/// `x-envoy-degraded` lowers it): an app, or through the forwarding tier
/// another backend's app, must not take this backend out of rotation.
pub fn is_reserved_response_header(name: &str) -> bool {
    let n = name.as_bytes();
    is_hunt_header(name) || (n.len() > 8 && n[..8].eq_ignore_ascii_case(b"x-envoy-"))
}

