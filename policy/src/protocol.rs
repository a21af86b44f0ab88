//! hunt/1 on the wire: header names, the refusal, and how a backend classifies a
//! try from its headers. Pure functions over byte slices, so the agent (hyper) and
//! the Wasm sidecar (proxy-wasm) classify identically. The spec is
//! `docs/protocol.md`.

use crate::Try;

/// Set once per request by the front proxy: names the try that may be refused.
pub const OFFER: &str = "hunt-offer";
/// Set on every try by the front proxy: names this try.
pub const TARGET: &str = "hunt-target";
/// Envoy's own per-try header (`include_request_attempt_count`: `1`, `2`, ...).
/// An Envoy front names its tries with it instead of `hunt-target`, natively,
/// with no upstream filter: see [`per_try_mark`].
pub const ENVOY_ATTEMPT: &str = "x-envoy-attempt-count";
/// On an offer, optional: the front's own count of its requests outstanding at
/// this backend when it chose it (HAProxy: `srv_conn`). The policy's `seen_margin`
/// reads it (`Load::seen`); see [`parse_seen`].
pub const SEEN: &str = "hunt-seen";
/// Longest `hunt-seen` value: 9 digits always fit a `u32`.
pub const MAX_SEEN_DIGITS: usize = 9;
/// Optional on every try from a front that cannot send `hunt-seen` (Envoy: its
/// least-request count at the chosen host is not visible to its config): the
/// front's own name. The agent counts the requests it holds from each name,
/// which is that front's own count at this backend, and uses it as `hunt-seen`.
pub const FRONT: &str = "hunt-front";
/// Set on every try by a front that never re-sends a refused try (no copy of
/// the request, no retry on 425), its value the front's own name as in
/// [`FRONT`]: `hunt-pass: 10.0.0.7:80`. The backend may pass such a try on to
/// a peer through the forwarding tier (which commits it only when the peer
/// takes it, and otherwise serves it where it landed), never refuses it, and
/// counts it for that front. So the front is the proxy's own balancer plus one
/// header, whatever the fleet's size. See [`pass_front`]; hosts without a tier
/// (the sidecars) need not read it: to them such a try is plain, never
/// refused either.
pub const PASS: &str = "hunt-pass";
/// On a refusal: `hunt: busy`.
pub const BUSY_HEADER: &str = "hunt";
pub const BUSY_VALUE: &str = "busy";
/// On a final the agent could not even connect to its app for: `hunt:
/// unreachable`, with the refusal's status. The request reached no app, so the
/// front may send it once more, to another backend (`docs/protocol.md` § 4).
pub const UNREACHABLE_VALUE: &str = "unreachable";
/// A refusal's status: 425 Too Early, "not processed, safe to replay".
pub const BUSY_STATUS: u16 = 425;
/// Envoy's own response header: the host that answers it is taken out of its
/// cluster's load balancing at once (clusters with active health checks), and
/// back only when its health checks pass again. The agent adds it to a refusal
/// that is about the whole backend, not this offer ([`leaves_rotation`]), for
/// a try from an Envoy front: a backend that refuses fast holds the fewest
/// requests, and a least-request front would send it everything until its
/// health checks caught up. Not a hunt header: the Envoy front removes it from
/// what clients see.
pub const ENVOY_HC_FAIL: &str = "x-envoy-immediate-health-check-fail";
/// On a try one agent forwarded to another (the forwarding tier): the
/// forwarding agent's address. Such a try is a final (it carries only
/// `hunt-target: forwarded`) that the receiving agent refuses only when it
/// could not take it at all (`max_inflight`), as no app has seen it then; the
/// forwarding agent turns that into a refusal its front re-sends.
pub const VIA: &str = "hunt-via";
/// Only on a forward between agents: the request's own body length (`none`
/// without one); the body is one byte longer, the go byte first (the agent's
/// `commit`). Fronts remove a client's, as they remove `hunt-via`.
pub const COMMIT: &str = "hunt-commit";
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

/// Whether a refusal should take its backend out of an Envoy front's rotation
/// ([`ENVOY_HC_FAIL`]): when the agent cannot reach its app (an `unreachable`
/// answer, or an offer refused as `app_down`) or is draining, every try sent
/// there is refused until its health checks say otherwise. A busy refusal
/// (`policy`, `overload`) is about this moment's load only: never.
pub fn leaves_rotation(why: crate::Reason) -> bool {
    matches!(why, crate::Reason::AppDown | crate::Reason::Draining)
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
///
/// Only a try that carried `hunt-target` is carried: it came from a front that
/// may retry by status alone (HAProxy). An Envoy front names tries with its
/// attempt count and retries on the `hunt: busy` header only, so an app's 425
/// goes to it, and on to the client, as it is; so does a plain request.
/// The front restores the carried form, `400` with `hunt-status: 425` and
/// nothing else, to 425 (HAProxy: one `http-response set-status` rule in
/// `front.cfg`); an app cannot forge it, its own `hunt-status` is removed.
pub fn carry(app_status: u16, named_by_target: bool) -> (u16, Option<&'static str>) {
    if app_status == BUSY_STATUS && named_by_target {
        (CARRIER_STATUS, Some("425"))
    } else {
        (app_status, None)
    }
}

/// What a front knows of a request's body when it decides whether to offer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// No body: a request without `content-length` on a method that carries
    /// none, or `content-length: 0`.
    Empty,
    /// The body's length is known before the first try: `content-length`, or a
    /// body the proxy has buffered whole (HAProxy's `http-buffer-request`).
    Length(u64),
    /// A body whose length the proxy does not know (chunked, an HTTP/2 upload
    /// without `content-length`, not buffered).
    Unknown,
    /// A body whose length the proxy does not know, on a request it routes to
    /// backends that *hold* a refusal until the body has ended within the
    /// proxy's copy ([`held_refusal`]): whenever a refusal arrives, the proxy
    /// holds the whole body. The Envoy front routes gRPC calls so (they carry no
    /// `content-length`); a huntlb agent holds every such refusal.
    Held,
}

/// Why a front sends a request to one candidate as a final instead of offering it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotOffered {
    /// A body of unknown length might not fit the proxy's copy: a refusal could
    /// not be re-sent.
    UnknownLength,
    /// The body is longer than the proxy's copy (`replay_limit`).
    TooBig,
}

impl NotOffered {
    pub fn name(self) -> &'static str {
        match self {
            NotOffered::UnknownLength => "unknown_length",
            NotOffered::TooBig => "too_big",
        }
    }
}

/// "Why was this request not offered?" in one function. A refused offer is
/// re-sent from the proxy's own copy of the request, so a request is offered
/// only when its whole body is known to fit that copy (`replay_limit` bytes:
/// Envoy's 1 MiB retry buffer, HAProxy's 12000 within one 16 KB buffer), or
/// when the backend makes sure it does before refusing ([`Body::Held`]: the
/// backend refuses only once the body has ended within the copy,
/// [`held_refusal`], and otherwise accepts).
/// The fronts implement it in native config (Envoy: four routes; HAProxy: the
/// `hunt_big_body` acl), and `policy/vectors/offer.json` holds the rule and
/// each real front to the same answers (`tests/test_offer_rule.py`). Besides
/// the body, a front does not offer with fewer than two usable candidates when
/// its retry could come back to the same one marked as an offer again
/// (HAProxy, `docs/protocol.md` § 1).
pub fn offerable(body: Body, replay_limit: u64) -> Result<(), NotOffered> {
    match body {
        Body::Empty | Body::Held => Ok(()),
        Body::Length(n) if n <= replay_limit => Ok(()),
        Body::Length(_) => Err(NotOffered::TooBig),
        Body::Unknown => Err(NotOffered::UnknownLength),
    }
}

/// What a backend does with an offer it would refuse whose body has no
/// declared length ([`held_refusal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Read more of the body first.
    Wait,
    /// The body ended within the proxy's copy: the proxy holds all of it and
    /// can re-send it, so the refusal may go.
    Refuse,
    /// The body passed the proxy's copy (the proxy gave up its copy: Envoy's
    /// `retry_or_shadow_abandoned`), or was still open when the backend stopped
    /// waiting: a refusal might not be re-sent, so the offer is accepted, as a
    /// final would be, with what was read passed on first.
    Accept,
}

impl Hold {
    pub fn name(self) -> &'static str {
        match self {
            Hold::Wait => "wait",
            Hold::Refuse => "refuse",
            Hold::Accept => "accept",
        }
    }
}

/// "May this refusal go yet?" for an offer whose body length was not declared
/// (a gRPC call, a chunked upload). A proxy re-sends a refused try from its own
/// copy of the request, which holds at most `replay_limit` bytes of body; the
/// proxy keeps forwarding the body as it comes, and gives its copy up for good
/// once the body passes the limit (Envoy's router: `retry_or_shadow_abandoned`).
/// So the backend refuses only after reading the end of a body of at most
/// `replay_limit` bytes: the proxy then holds all of it. `read`: body bytes
/// read so far; `ended`: the body has ended; `waited_out`: the backend's time
/// bound for holding has passed (an open stream, a slow upload).
pub fn held_refusal(read: u64, ended: bool, waited_out: bool, replay_limit: u64) -> Hold {
    if read > replay_limit {
        Hold::Accept
    } else if ended {
        Hold::Refuse
    } else if waited_out {
        Hold::Accept
    } else {
        Hold::Wait
    }
}

#[cfg(test)]
mod tests;
