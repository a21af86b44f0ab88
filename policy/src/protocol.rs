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

/// An app's own 425 travels from agent to front as this status, with
/// `hunt-status: 425`: HAProxy's `retry-on 425` retries by status alone and
/// cannot look at `hunt: busy`, so between agent and front 425 means only the
/// refusal. A 4xx, like 425, so no proxy retries it and no 5xx outlier or
/// layer-7 health check counts it.
pub const CARRIER_STATUS: u16 = 400;
/// On a carried response: the app's own status.
pub const APP_STATUS: &str = "hunt-status";

/// The agent's side of "the refusal space is the agent's": the status (and the
/// `hunt-status` value, if any) an app response with this status goes upstream
/// as. Every `hunt`/`hunt-*` header the app set is removed as well, so
/// `hunt: busy` on the wire always comes from an agent.
pub fn carry(app_status: u16) -> (u16, Option<&'static str>) {
    if app_status == BUSY_STATUS {
        (CARRIER_STATUS, Some("425"))
    } else {
        (app_status, None)
    }
}

/// The front's side: the status the client gets for a response that arrived
/// with `status` and `hunt-status` (absent: `None`). Only the exact carried
/// form is restored; an app's own 400 stays 400.
pub fn restore(status: u16, app_status: Option<&[u8]>) -> u16 {
    match app_status {
        Some(b"425") if status == CARRIER_STATUS => BUSY_STATUS,
        _ => status,
    }
}

/// "Why was this request not offered?", for a front: the Envoy front filter
/// calls this; HAProxy's front.cfg states the same rule as native checks
/// (`req.body_size`, and `nbsrv` >= 2: with one usable server a refusal would
/// come back to it). Offered only if its whole body is
/// known to fit the retry buffer: no body at all (the headers end the stream),
/// or a Content-Length within the limit. "No length" is not "no body": Envoy's
/// HTTP/1 codec removes `transfer-encoding: chunked` before filters see the
/// request, and an HTTP/2 upload need not declare a length. Such a body could
/// overflow the buffer while a refusal drains it, and then nothing can be
/// re-sent (an empty 503): it goes to one candidate, as a final.
pub fn offerable(end_of_stream: bool, content_length: Option<&str>, transfer_encoding: Option<&str>, max_offer_body: u64) -> bool {
    if end_of_stream {
        return true;
    }
    if transfer_encoding.is_some() {
        return false; // chunked: length unknown until the end
    }
    content_length.is_some_and(|v| v.trim().parse::<u64>().is_ok_and(|n| n <= max_offer_body))
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
    fn an_apps_425_is_carried_and_restored() {
        assert_eq!(carry(425), (400, Some("425")));
        for s in [200, 400, 404, 500, 503] {
            assert_eq!(carry(s), (s, None));
            assert_eq!(restore(s, None), s);
        }
        let (status, app) = carry(425);
        assert_eq!(restore(status, app.map(str::as_bytes)), 425);
        // only the exact carried form comes back
        assert_eq!(restore(400, Some(b"426")), 400);
        assert_eq!(restore(200, Some(b"425")), 200);
        assert!(is_hunt_header(APP_STATUS));
    }

    #[test]
    fn only_bodies_that_fit_are_offered() {
        // the headers end the stream: no body
        assert!(offerable(true, None, None, 100));
        assert!(offerable(false, Some("100"), None, 100));
        assert!(!offerable(false, Some("101"), None, 100));
        assert!(!offerable(false, Some("x"), None, 100));
        assert!(!offerable(false, None, Some("chunked"), 100));
        // a body follows and no length says how big (chunked with the header
        // removed by Envoy's codec, or an HTTP/2 upload): not offered
        assert!(!offerable(false, None, None, 100));
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
