//! The agent's own header handling, fuzzed: `huntlb_agent::headers` over a
//! `HeaderMap` of any names and values. The `headers` target (`lib.rs`) covers
//! `protocol::classify` given each field; this one covers the agent's walk of a
//! real header map into those fields (`read_try`), the stripping of hop-by-hop,
//! `Connection`-named, `hunt-*` and (in responses) `x-envoy-*` headers, the head
//! of a forward to a peer (`to_peer`), the `Upgrade`, `TE: trailers` and gRPC
//! checks, and a body's framing toward an HTTP/1.1 app (`keep_body_framing`).
//!
//! Not part of `lib.rs`: the policy crate replays `lib.rs` and cannot depend on
//! the agent. `fuzz_targets/agent_headers.rs` hands it libFuzzer's inputs and
//! `agent/tests/fuzz_replay.rs` replays `fuzz/corpus/agent_headers/` on stable,
//! both by including this file.
//!
//! Input: lines (`\n`); a line `name:value` is one header, appended in order (a
//! name may repeat). A line whose first byte is below 0x20 names a header of
//! [`NAMES`] by that byte and takes the rest of the line as its value, so short
//! inputs reach the headers that matter. Names and values `http` refuses are
//! skipped, as hyper would refuse the request.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use huntlb_agent::headers::{self, read_try, Hunt, HOP_BY_HOP};
use huntlb_policy::protocol::{self, Mark};
use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// The headers a one-byte name picks: every one the agent reads or strips.
pub const NAMES: [&str; 20] = [
    "hunt-offer", "hunt-target", "x-envoy-attempt-count", "hunt-seen", "hunt-front", "hunt", "hunt-via",
    "hunt-served-by", "hunt-status", "connection", "upgrade", "te", "keep-alive", "proxy-connection",
    "x-envoy-degraded", "x-envoy-immediate-health-check-fail", "content-type", "content-length",
    "transfer-encoding", "trailer",
];

/// The header map the input describes.
pub fn header_map(data: &[u8]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for line in data.split(|&b| b == b'\n') {
        let (name, value): (&[u8], &[u8]) = match line.first() {
            Some(&b) if b < 0x20 && b != b'\t' => (NAMES[usize::from(b) % NAMES.len()].as_bytes(), &line[1..]),
            _ => match line.iter().position(|&b| b == b':') {
                Some(i) => (&line[..i], &line[i + 1..]),
                None => (line, b""),
            },
        };
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            h.append(n, v);
        }
    }
    h
}

fn values<'a>(h: &'a HeaderMap, name: &str) -> Vec<&'a [u8]> {
    h.get_all(name).iter().map(HeaderValue::as_bytes).collect()
}

/// `hunt` or `hunt-*`, any case: written out here, not borrowed from the code under test.
fn is_hunt(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "hunt" || n.starts_with("hunt-")
}

/// The lower-cased tokens of every `Connection` value that is text.
fn connection_tokens(h: &HeaderMap) -> Vec<String> {
    h.get_all("connection")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

pub fn agent_headers(data: &[u8]) {
    let h = header_map(data);
    check_read(&h);
    check_request_strip(&h);
    check_response_strip(&h);
    check_to_peer(&h);
    check_upgrade_and_trailers(&h);
    check_body_framing(&h, data.len());
}

/// `read_try`: an offer only from one well-formed `hunt-offer` equal to the try's
/// one mark; who named the try; `hunt-seen` and `hunt-front` only when well formed.
fn check_read(h: &HeaderMap) {
    let t = read_try(h);
    let (offer, target, attempt) = (values(h, "hunt-offer"), values(h, "hunt-target"), values(h, "x-envoy-attempt-count"));
    let mark = if target.is_empty() { &attempt } else { &target };
    if t.mark == Mark::Offer {
        assert!(offer.len() == 1 && mark.len() == 1 && offer[0] == mark[0], "offer from {offer:?} / {mark:?}");
        assert!(protocol::is_token(offer[0]), "offer with a non-token mark {offer:?}");
    }
    if offer.is_empty() && mark.is_empty() {
        assert_eq!(t.mark, Mark::Plain, "no hunt marks, yet {:?}", t.mark);
    }
    if offer.len() > 1 || mark.len() > 1 {
        assert_eq!(t.mark, Mark::Malformed, "a repeated mark, yet {:?}", t.mark);
    }
    assert_eq!(t.named_by_target, !target.is_empty());
    assert_eq!(t.from_envoy, target.is_empty() && !attempt.is_empty());
    let seen = values(h, "hunt-seen");
    let want_seen = match seen[..] {
        [v] if (1..=9).contains(&v.len()) && v.iter().all(u8::is_ascii_digit) => {
            Some(std::str::from_utf8(v).unwrap().parse::<u32>().expect("9 digits fit a u32"))
        }
        _ => None,
    };
    assert_eq!(t.seen, want_seen, "hunt-seen {seen:?}");
    let front = values(h, "hunt-front");
    match t.front {
        Some(headers::Front::Source(ip)) => panic!("read_try counted a try for a source ({ip}) without fleet_pass_plain"),
        Some(headers::Front::Named(f)) => {
            assert!(front.len() == 1 && front[0] == f, "front {f:?} from {front:?}");
            assert!((1..=protocol::MAX_MARK_LEN).contains(&f.len()) && f.iter().all(|&b| b.is_ascii_graphic() && b != b','));
        }
        None => assert!(
            front.len() != 1 || front[0].is_empty() || front[0].len() > protocol::MAX_MARK_LEN
                || front[0].iter().any(|&b| !b.is_ascii_graphic() || b == b','),
            "a well-formed hunt-front {front:?} was not read"
        ),
    }
}

/// What the app gets: no hop-by-hop header, none `Connection` named, no `hunt-*`;
/// every other header with all its values, in order; stripping twice changes nothing.
fn check_request_strip(h: &HeaderMap) {
    let mut s = h.clone();
    headers::strip_request_headers(&mut s);
    let named = connection_tokens(h);
    let dropped = |n: &str| is_hunt(n) || HOP_BY_HOP.contains(&n) || named.iter().any(|t| t == n);
    for n in s.keys() {
        assert!(!dropped(n.as_str()), "{n} survived stripping");
    }
    for n in h.keys().filter(|n| !dropped(n.as_str())) {
        assert_eq!(values(&s, n.as_str()), values(h, n.as_str()), "{n} changed by stripping");
    }
    let mut again = s.clone();
    headers::strip_request_headers(&mut again);
    assert_eq!(again, s, "stripping is not idempotent");
}

/// What goes back to a front from an app or a peer: no `hunt-*`, no `x-envoy-*`
/// control, everything else untouched.
fn check_response_strip(h: &HeaderMap) {
    let mut s = h.clone();
    headers::strip_reserved_response_headers(&mut s);
    let reserved = |n: &str| is_hunt(n) || (n.len() > 8 && n.starts_with("x-envoy-"));
    for n in s.keys() {
        assert!(!reserved(n.as_str()), "{n} survived the response strip");
    }
    for n in h.keys().filter(|n| !reserved(n.as_str())) {
        assert_eq!(values(&s, n.as_str()), values(h, n.as_str()), "{n} changed by the response strip");
    }
}

/// A forward to a peer is a final there, whatever the front's try said: the
/// front's hunt headers are gone, the only mark is `hunt-target: forwarded`,
/// and it names this agent; `te: trailers` only if the client takes trailers.
fn check_to_peer(h: &HeaderMap) {
    let via = "10.0.0.7:7000";
    let mut p = h.clone();
    headers::to_peer(&mut p, Some(via));
    let t: Hunt = read_try(&p);
    assert_eq!(t.mark, Mark::Final, "a forward reads as {:?}", t.mark);
    assert!(t.named_by_target && !t.from_envoy && t.front.is_none() && t.seen.is_none());
    assert_eq!(values(&p, "hunt-target"), [headers::FORWARDED_MARK.as_bytes()]);
    assert_eq!(values(&p, "hunt-via"), [via.as_bytes()]);
    for n in p.keys().map(|n| n.as_str()).filter(|n| is_hunt(n)) {
        assert!(n == "hunt-target" || n == "hunt-via", "{n} reached the peer");
    }
    let te = values(&p, "te");
    if headers::takes_trailers(h) {
        assert_eq!(te, [b"trailers".as_slice()]);
    } else {
        assert!(te.is_empty(), "te {te:?} reached the peer");
    }
    let mut bad = h.clone();
    headers::to_peer(&mut bad, Some("not\na header value"));
    assert!(values(&bad, "hunt-via").is_empty(), "a fleet address that is no header value was sent");
}

fn check_upgrade_and_trailers(h: &HeaderMap) {
    if let Some(v) = headers::upgrade_of(h) {
        assert_eq!(Some(&v), h.get("upgrade"), "upgrade_of is not the Upgrade header");
        assert!(connection_tokens(h).iter().any(|t| t == "upgrade"), "an upgrade without Connection: upgrade");
    }
    if headers::takes_trailers(h) {
        let te = h.get_all("te").iter().filter_map(|v| v.to_str().ok()).collect::<Vec<_>>().join(",");
        assert!(te.split(',').any(|t| t.trim().eq_ignore_ascii_case("trailers")), "takes trailers from te {te:?}");
    }
    if headers::is_grpc(h) {
        let ct = h.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
        assert!(ct.trim_start().to_ascii_lowercase().starts_with("application/grpc"), "gRPC from {ct:?}");
    }
}

/// A request body as hyper reports it: ended or not, of known length or not.
struct Framing {
    ended: bool,
    exact: Option<u64>,
}

impl Body for Framing {
    type Data = &'static [u8];
    type Error = std::convert::Infallible;
    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Poll::Ready(None)
    }
    fn is_end_stream(&self) -> bool {
        self.ended
    }
    fn size_hint(&self) -> SizeHint {
        self.exact.map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

/// A body still to come, of no declared length, goes chunked; nothing else is
/// touched, and a body whose length is known or declared keeps its headers.
fn check_body_framing(h: &HeaderMap, n: usize) {
    for (ended, exact) in [(false, None), (false, Some(n as u64)), (true, None), (true, Some(0))] {
        let mut f = h.clone();
        headers::keep_body_framing(&mut f, &Framing { ended, exact });
        let declared = h.contains_key("content-length") || h.contains_key("transfer-encoding");
        if !ended && exact.is_none() && !declared {
            let mut want = h.clone();
            want.insert("transfer-encoding", HeaderValue::from_static("chunked"));
            assert_eq!(f, want, "a body of no declared length is not sent chunked");
        } else {
            assert_eq!(&f, h, "framing changed a body that is declared, sized or ended");
        }
    }
}
