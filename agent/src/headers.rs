//! What the agent reads from and writes into headers, apart from the decision:
//! the hunt fields of a try (read through `huntlb_policy::protocol`), hop-by-hop
//! and reserved headers stripped each way, upgrades, gRPC trailers, a body's
//! framing. Pure functions over a `HeaderMap`, reachable by the fuzz targets.

use http::{header, HeaderMap, HeaderValue, Request};
use huntlb_policy::protocol::{self, Field, Mark};
use hyper::body::{Body, Incoming};
use std::net::IpAddr;

/// `hunt-target` on a forwarded try: a final at the peer.
pub const FORWARDED_MARK: &str = "forwarded";

/// Can this offer go to a peer? Not an upgrade (its tunnel is joined here),
/// and not a body of no declared length: if the peer cannot be reached that
/// body is gone, and the front may not hold it whole to re-send (`hold`).
pub fn forwardable(req: &Request<Incoming>) -> bool {
    upgrade_of(req.headers()).is_none() && (req.body().is_end_stream() || req.headers().contains_key(header::CONTENT_LENGTH))
}

/// A body of no declared length (HTTP/2 without `content-length`) going out
/// over HTTP/1.1 is sent chunked, whatever the method: hyper's client sends a
/// GET, HEAD or CONNECT of unknown length with no body at all (it assumes
/// those have none), so a GET with a body reached the app empty.
pub fn keep_body_framing(h: &mut HeaderMap, body: &impl Body) {
    if !body.is_end_stream()
        && body.size_hint().exact().is_none()
        && !h.contains_key(header::CONTENT_LENGTH)
        && !h.contains_key(header::TRANSFER_ENCODING)
    {
        h.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
    }
}

/// `te: trailers` is hop-by-hop but says the client takes trailers, which
/// gRPC servers require of every call: that one value is passed on.
pub fn takes_trailers(h: &HeaderMap) -> bool {
    h.get_all(header::TE).iter().any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("trailers"))))
}

/// A try's hunt headers, as the agent reads them (`dispatch`): what it is,
/// who named it, and what its front said it counts at this backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hunt<'a> {
    /// Offer, final, plain or malformed: `protocol::classify` of `hunt-offer`
    /// against the try's own mark (`hunt-target`, else Envoy's attempt count).
    pub mark: Mark,
    /// The try carries `hunt-target` (HAProxy names its tries so; a peer's forward).
    pub named_by_target: bool,
    /// An Envoy front: no `hunt-target`, an `x-envoy-attempt-count`.
    pub from_envoy: bool,
    /// The front to count this try for: `hunt-front` or `hunt-pass` when
    /// well formed, or (`fleet_pass_plain`) the TCP source of a plain front's try.
    pub front: Option<Front<'a>>,
    /// `hunt-seen`, when well formed: the front's own count here.
    pub seen: Option<u32>,
    /// `hunt-pass`, naming a front: the front never re-sends this try; the
    /// tier may pass it on to a peer, and it is never refused.
    pub pass: bool,
    /// A peer's forward (`hunt-commit`, `commit`): never beside `hunt-pass`,
    /// and with `fleet_pass_plain` only from a member's IP.
    pub commit: bool,
    /// `hunt-commit` from an IP that is no member's (`fleet_pass_plain`):
    /// never a peer's forward, answered 400 and never processed. Not ignored:
    /// a real forward from a source no member has (a NAT, a second address)
    /// would reach the app with its go byte; refused before go, its peer
    /// serves it itself.
    pub stray_commit: bool,
}

/// Whom a try is counted for (`PerFront`): a front's own name, or the address
/// its connection came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front<'a> {
    /// `hunt-front` or `hunt-pass`, as the front wrote it.
    Named(&'a [u8]),
    /// `fleet_pass_plain`: the TCP peer's IP (not its port: a front's
    /// connections come from many ports).
    Source(IpAddr),
}

impl Front<'_> {
    /// The key it is counted under. A source is keyed by its IP as text, so a
    /// member's front that names itself by its IP (`hunt-pass: 10.0.0.5`) is
    /// the same front as its plain tries.
    pub fn key(&self) -> Box<[u8]> {
        match self {
            Front::Named(n) => Box::from(*n),
            Front::Source(ip) => ip.to_string().into_bytes().into_boxed_slice(),
        }
    }
}

/// `fleet_pass_plain`: where a try's connection came from, and whether that
/// IP is a fleet member's (an address `fleet_peers` resolves to, this agent's
/// own included). Only a member may mark a try; anyone else's is a plain
/// front's, whatever hunt headers it carries (a plain front passes a client's
/// on untouched).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    pub ip: IpAddr,
    pub member: bool,
}

/// Read a try's hunt headers. Pure: nothing here depends on the agent's state
/// (what a named front holds is looked up by the caller).
pub fn read_try(h: &HeaderMap) -> Hunt<'_> {
    // hunt-pass is authoritative: the tier front overwrites it on every try and
    // sets no other hunt header, so any other beside it is a client's. Such a
    // try is plain to the policy (never refused), counted for the front it
    // names, and no peer's forward (a forward never carries hunt-pass): a
    // client gains nothing by adding marks, a count or hunt-commit to it, and
    // the front need not remove them.
    if let Some(front) = protocol::pass_front(field(h, protocol::PASS)) {
        return passed(Front::Named(front));
    }
    let target = field(h, protocol::TARGET);
    let attempt = field(h, protocol::ENVOY_ATTEMPT);
    let named_by_target = target != Field::Absent;
    Hunt {
        mark: protocol::classify(field(h, protocol::OFFER), protocol::per_try_mark(target, attempt)),
        named_by_target,
        // An Envoy front names its tries by its own attempt count, never by hunt-target.
        from_envoy: !named_by_target && attempt != Field::Absent,
        front: protocol::parse_front(field(h, protocol::FRONT)).map(Front::Named),
        seen: protocol::parse_seen(field(h, protocol::SEEN)),
        pass: false,
        commit: h.contains_key(protocol::COMMIT),
        stray_commit: false,
    }
}

/// [`read_try`] with `fleet_pass_plain` (`source` given; `None`: the option
/// is off, and this is `read_try`). A try from an IP that is no member's is a
/// plain front's: every hunt header on it is ignored (a client's, passed on
/// untouched) and it is passed for the front at that IP; one with
/// `hunt-commit` is refused (`stray_commit`). A member's try is
/// read as ever (a peer's forward, a front on a member's host marking its
/// tries), and one it did not mark at all is passed for its IP too.
pub fn read_try_from(h: &HeaderMap, source: Option<Source>) -> Hunt<'_> {
    let Some(source) = source else { return read_try(h) };
    if !source.member {
        return Hunt { stray_commit: h.contains_key(protocol::COMMIT), ..passed(Front::Source(source.ip)) };
    }
    let t = read_try(h);
    let marked = t.pass || t.commit || t.mark != Mark::Plain;
    if marked {
        t
    } else {
        passed(Front::Source(source.ip))
    }
}

/// A try its front lets pass: plain to the policy, counted for `front`, no peer's forward.
fn passed(front: Front<'_>) -> Hunt<'_> {
    Hunt { mark: Mark::Plain, named_by_target: false, from_envoy: false, front: Some(front), seen: None, pass: true, commit: false, stray_commit: false }
}

/// The head of an offer passed on to a peer (`relay`): every hop-by-hop and
/// `hunt-*` header of the front's try removed, `te: trailers` kept if the
/// client takes trailers, marked a final (`hunt-target: forwarded`), and
/// `hunt-via` naming this agent (`fleet_advertise`) when it is a header value.
pub fn to_peer(h: &mut HeaderMap, via: Option<&str>) {
    let trailers = takes_trailers(h);
    strip_request_headers(h);
    if trailers {
        h.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    h.insert(protocol::TARGET, HeaderValue::from_static(FORWARDED_MARK));
    if let Some(Ok(v)) = via.map(HeaderValue::from_str) {
        h.insert(protocol::VIA, v);
    }
}

pub fn field<'a>(h: &'a HeaderMap, name: &str) -> Field<'a> {
    let mut values = h.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Field::Absent,
        (Some(v), None) => Field::One(v.as_bytes()),
        (Some(_), Some(_)) => Field::Repeated,
    }
}

// Not `trailer`: it names the fields a body's trailers will carry, end to end
// (RFC 9110 6.6.2), and an HTTP/1.1 server sends only the trailers it names.
pub const HOP_BY_HOP: [&str; 5] = ["connection", "keep-alive", "proxy-connection", "te", "upgrade"];

/// What gRPC sends as trailers (its status, in every call that has a body).
pub const GRPC_TRAILERS: &str = "grpc-status, grpc-message, grpc-status-details-bin";

/// A gRPC message: `content-type: application/grpc`, with or without a `+codec`.
pub fn is_grpc(h: &HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| {
        let v = v.trim_start().to_ascii_lowercase();
        v.strip_prefix("application/grpc").is_some_and(|rest| rest.is_empty() || rest.starts_with(['+', ';']))
    })
}

pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    // Headers named in `Connection` are hop-by-hop too.
    let named: Vec<String> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    for n in named.iter().map(String::as_str).chain(HOP_BY_HOP) {
        h.remove(n);
    }
}

/// The protocol a request or a 101 asks to switch to: an `Upgrade` header with
/// `upgrade` among the `Connection` tokens (RFC 9110 7.8).
pub fn upgrade_of(h: &HeaderMap) -> Option<HeaderValue> {
    let asked = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    asked.then(|| h.get(header::UPGRADE).cloned()).flatten()
}

pub fn strip_request_headers(h: &mut HeaderMap) {
    strip_hop_by_hop(h);
    strip_hunt_headers(h);
}

pub fn strip_hunt_headers(h: &mut HeaderMap) {
    strip_where(h, protocol::is_hunt_header);
}

/// An app's (or a peer's) response: `protocol::is_reserved_response_header`.
pub fn strip_reserved_response_headers(h: &mut HeaderMap) {
    strip_where(h, protocol::is_reserved_response_header);
}

pub fn strip_where(h: &mut HeaderMap, reserved: fn(&str) -> bool) {
    let names: Vec<_> = h.keys().filter(|k| reserved(k.as_str())).cloned().collect();
    for k in names {
        h.remove(k);
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    fn head(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn hunt_pass_outranks_every_other_hunt_header_a_client_adds() {
        let forged = [("hunt-offer", "1"), ("hunt-target", "1"), ("hunt-seen", "0"), ("hunt-front", "someone-else"), ("x-envoy-attempt-count", "1")];
        let mut pairs = forged.to_vec();
        pairs.push(("hunt-pass", "10.0.0.7:80"));
        let h = head(&pairs);
        let t = read_try(&h);
        assert_eq!((t.mark, t.pass, t.named_by_target, t.from_envoy, t.seen), (Mark::Plain, true, false, false, None));
        assert_eq!(t.front, Some(Front::Named(b"10.0.0.7:80")));
        // Without hunt-pass the same headers are an offer, as ever.
        let h = head(&forged);
        let t = read_try(&h);
        assert_eq!((t.mark, t.pass, t.seen), (Mark::Offer, false, Some(0)));
        assert_eq!(t.front, Some(Front::Named(b"someone-else")));
        // A bad hunt-pass (repeated, empty) lets nothing pass: the marks decide.
        let h = head(&[("hunt-pass", "a"), ("hunt-pass", "b"), ("hunt-offer", "1"), ("hunt-target", "1")]);
        assert_eq!((read_try(&h).mark, read_try(&h).pass), (Mark::Offer, false));
    }

    /// What `fleet_pass_plain` makes of a try: (mark, pass, front, a peer's forward).
    fn from(pairs: &[(&'static str, &'static str)], ip: &str, members: &[&str], pass_plain: bool) -> (Mark, bool, Option<Box<[u8]>>, bool) {
        let (mark, pass, front, commit, _) = from_all(pairs, ip, members, pass_plain);
        (mark, pass, front, commit)
    }

    /// `from`, and whether the try is a stray hunt-commit (refused, never processed).
    fn from_all(pairs: &[(&'static str, &'static str)], ip: &str, members: &[&str], pass_plain: bool) -> (Mark, bool, Option<Box<[u8]>>, bool, bool) {
        let h = head(pairs);
        let ip: IpAddr = ip.parse().unwrap();
        let source = pass_plain.then(|| Source { ip, member: members.iter().any(|m| m.parse::<IpAddr>().unwrap() == ip) });
        let t = read_try_from(&h, source);
        (t.mark, t.pass, t.front.map(|f| f.key()), t.commit, t.stray_commit)
    }

    const MEMBERS: [&str; 2] = ["10.0.0.1", "10.0.0.2"];
    const FORWARD: [(&str, &str); 4] = [("hunt-target", "forwarded"), ("hunt-offer", "1"), ("hunt-via", "10.0.0.2:8080"), ("hunt-commit", "none")];

    fn key(s: &str) -> Option<Box<[u8]>> {
        Some(s.as_bytes().into())
    }

    #[test]
    fn a_plain_fronts_try_is_passed_for_its_source_ip() {
        // No hunt header at all, from a front that is no member: passed, counted for its IP.
        assert_eq!(from(&[], "10.0.9.1", &MEMBERS, true), (Mark::Plain, true, key("10.0.9.1"), false));
        // Off: a plain try, counted for no front, as ever.
        assert_eq!(from(&[], "10.0.9.1", &MEMBERS, false), (Mark::Plain, false, None, false));
        // A member's host running a plain front: its unmarked tries pass too.
        assert_eq!(from(&[], "10.0.0.1", &MEMBERS, true), (Mark::Plain, true, key("10.0.0.1"), false));
        // IPv6 sources are keyed by their IP alone, as text.
        assert_eq!(from(&[], "fd00::7", &MEMBERS, true).2, key("fd00::7"));
    }

    #[test]
    fn a_clients_hunt_headers_through_a_plain_front_decide_nothing() {
        let client = "10.0.9.1";
        // offer marks: no offer (so never refused), a pass for the source
        for forged in [&[("hunt-offer", "1"), ("hunt-target", "1")][..], &[("hunt-offer", "1"), ("x-envoy-attempt-count", "1")], &[("hunt-offer", "x"), ("hunt-target", "y"), ("hunt-offer", "z")]] {
            assert_eq!(from(forged, client, &MEMBERS, true), (Mark::Plain, true, key(client), false), "{forged:?}");
        }
        // a peer's forward, word for word, but from no member: no forward, refused unprocessed
        assert_eq!(from_all(&FORWARD, client, &MEMBERS, true), (Mark::Plain, true, key(client), false, true));
        assert!(!from_all(&FORWARD, "10.0.0.2", &MEMBERS, true).4, "a member's forward is no stray");
        assert!(!from_all(&[("hunt-offer", "1")], client, &MEMBERS, true).4);
        // another front's name, a count, hunt-seen: counted for the real source
        let named = [("hunt-pass", "10.0.9.2"), ("hunt-front", "10.0.9.3"), ("hunt-seen", "0"), ("hunt-via", "x")];
        assert_eq!(from(&named, client, &MEMBERS, true), (Mark::Plain, true, key(client), false));
        // Off, the same headers decide as ever: an offer, a forward, another front's name.
        assert_eq!(from(&[("hunt-offer", "1"), ("hunt-target", "1")], client, &MEMBERS, false).0, Mark::Offer);
        assert_eq!(from(&FORWARD, client, &MEMBERS, false), (Mark::Final, false, None, true));
        assert_eq!(from(&named, client, &MEMBERS, false), (Mark::Plain, true, key("10.0.9.2"), false));
    }

    #[test]
    fn a_members_marks_are_read_as_ever() {
        // a peer's forward, from a member's IP: a final under the handshake
        assert_eq!(from(&FORWARD, "10.0.0.2", &MEMBERS, true), (Mark::Final, false, None, true));
        // a tier front on a member's host naming itself: passed for that name (back-compat)
        assert_eq!(from(&[("hunt-pass", "10.0.0.1:10000")], "10.0.0.1", &MEMBERS, true), (Mark::Plain, true, key("10.0.0.1:10000"), false));
        // a refusing front on a member's host: its offers are offers
        assert_eq!(from(&[("hunt-offer", "1"), ("hunt-target", "1"), ("hunt-front", "f1")], "10.0.0.1", &MEMBERS, true), (Mark::Offer, false, key("f1"), false));
        // A tier front elsewhere (hunt-pass, the shipped front-tier configs) still
        // passes, counted for its source IP whatever it names.
        assert_eq!(from(&[("hunt-pass", "10.0.9.5:10000")], "10.0.9.5", &MEMBERS, true), (Mark::Plain, true, key("10.0.9.5"), false));
    }
}
