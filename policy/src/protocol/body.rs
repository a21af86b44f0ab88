//! Which requests are offered: a refused offer is re-sent from the front's own
//! copy, so its body must fit that copy, or the backend must hold its refusal
//! until it does.

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
