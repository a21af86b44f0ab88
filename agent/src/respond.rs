//! The agent's own answers: a plain text status, the busy refusal (`425 hunt:
//! busy`), `hunt: unreachable`, and which of them take a backend out of an
//! Envoy front's rotation.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use huntlb_policy::protocol;
use huntlb_policy::Verdict;

pub type AgentBody = UnsyncBoxBody<Bytes, hyper::Error>;

pub(crate) fn full(b: impl Into<Bytes>) -> AgentBody {
    Full::new(b.into()).map_err(|never| match never {}).boxed_unsync()
}

pub(crate) fn plain(status: StatusCode, msg: &str) -> Response<AgentBody> {
    let mut r = Response::new(full(msg.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

pub(crate) fn busy_response(close: bool) -> Response<AgentBody> {
    let mut r = Response::new(full(Bytes::new()));
    *r.status_mut() = StatusCode::from_u16(protocol::BUSY_STATUS).expect("425 is a status");
    let h = r.headers_mut();
    h.insert(protocol::BUSY_HEADER, HeaderValue::from_static(protocol::BUSY_VALUE));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    if close {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// A final whose app could not be reached: the refusal's status with `hunt:
/// unreachable`. Its body was never read, so an HTTP/1 connection closes.
pub(crate) fn unreachable_response(h1: bool) -> Response<AgentBody> {
    let mut r = busy_response(h1);
    r.headers_mut().insert(protocol::BUSY_HEADER, HeaderValue::from_static(protocol::UNREACHABLE_VALUE));
    r
}

/// Whether this answer is a refusal about the whole backend
/// (`protocol::leaves_rotation`): `unreachable`, or an offer refused because the
/// app is down or the agent drains. App responses never carry `hunt`: the
/// agent strips it from them, so the header marks the agent's own refusals.
pub(crate) fn leaves_rotation(resp: &Response<AgentBody>, verdict: Verdict) -> bool {
    match resp.headers().get(protocol::BUSY_HEADER).map(HeaderValue::as_bytes) {
        Some(v) if v == protocol::UNREACHABLE_VALUE.as_bytes() => true,
        Some(v) if v == protocol::BUSY_VALUE.as_bytes() => matches!(verdict, Verdict::Refuse(why) if protocol::leaves_rotation(why)),
        _ => false,
    }
}

pub(crate) fn source_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

