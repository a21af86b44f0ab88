//! Passing an offer to a peer (the forwarding tier): as a final, to the member
//! `Fleet::pick` chose, at its own address; back here if it reached no one.

use crate::dispatch::Agent;
use crate::metrics::Fate;
use crate::fleet::Target;
use crate::headers::{keep_body_framing, strip_hop_by_hop, strip_reserved_response_headers, to_peer};
use crate::load::PerFrontGuard;
use crate::respond::{busy_response, plain, source_chain, AgentBody};
use crate::app::Guarded;
use crate::body::{Lent, Returned};
use crate::upstream::closed_before_write;
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use huntlb_policy::protocol;
use hyper::body::{Body, Incoming};
use hyper_util::client::legacy::connect::capture_connection;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tracing::debug;

impl Agent {
    /// An offer forwarded to the peer at `to` (its `listen`), as a final: it
    /// goes with `hunt-target: forwarded` and no other hunt header, so the peer
    /// never refuses it for load, never forwards it again, and carries its
    /// app's own 425 as 400 (`protocol::carry`). This agent holds no in-flight
    /// slot for it (its app does not work on it), only its front's count.
    ///
    /// Exactly once: no connection to the peer means nothing reached it, and
    /// the front gets the refusal and re-sends the request (its final); so
    /// does a peer's own refusal (it could not reach its app). Anything after
    /// the try may have reached the peer is an error the client sees (502,
    /// 504), never a refusal.
    pub(crate) async fn relay(&self, req: Request<Incoming>, target: &Target, named_by_target: bool, front: Option<PerFrontGuard>) -> (Response<AgentBody>, Option<Fate>) {
        let to = target.authority.as_str();
        let m = &self.metrics;
        let h1 = req.version() < http::Version::HTTP_2;
        let has_body = !req.body().is_end_stream();
        let (mut parts, body) = req.into_parts();
        // What it takes to serve the offer here instead, should the peer not
        // take the connection: the head as it came, and the body, lent.
        let here = (parts.method.clone(), parts.uri.clone(), parts.version, parts.headers.clone());
        let (back_tx, back) = tokio::sync::oneshot::channel();
        let body = Lent::new(VecDeque::new(), body, Some(back_tx));
        to_peer(&mut parts.headers, self.fleet.as_ref().map(|f| f.advertise()));
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = match Uri::builder().scheme("http").authority(to).path_and_query(path).build() {
            Ok(u) => u,
            Err(_) => return (plain(StatusCode::BAD_REQUEST, "huntlb agent: bad request target\n"), None),
        };
        parts.version = http::Version::HTTP_11;
        keep_body_framing(&mut parts.headers, &body);
        // The peer's own 504 (which names its app) comes first.
        let relay = self.relaying.enter();
        let limit = self.cfg.app_timeout + Duration::from_secs(1);
        let mut req = Request::from_parts(parts, body);
        let cap = capture_connection(&mut req);
        let sent = tokio::time::timeout(limit, self.peer_client.request(req)).await;
        let lost = |why: &dyn std::fmt::Display| {
            if let Some(f) = &self.fleet {
                f.lost(target.member);
            }
            debug!(peer = to, %why, "forward refused: the front re-sends");
            m.forwards_refused.fetch_add(1, Ordering::Relaxed);
            // The front's body may be part read: an HTTP/1 connection closes.
            busy_response(h1 && has_body)
        };
        let resp = match sent {
            Err(_) => {
                m.forwards_failed.fetch_add(1, Ordering::Relaxed);
                let msg = format!("huntlb agent: peer {to} did not answer within {} ms\n", limit.as_millis());
                plain(StatusCode::GATEWAY_TIMEOUT, &msg)
            }
            // No connection, or the peer had closed our idle one before any of
            // the try was written: nothing reached it, and the body comes back.
            // The offer is served here, as if kept (the peer takes no more
            // forwards until it reports again).
            Ok(Err(e)) if e.is_connect() || closed_before_write(&cap) => {
                if let Some(f) = &self.fleet {
                    f.lost(target.member);
                }
                drop(relay);
                // The client dropped the request with its error; bounded all the same.
                match tokio::time::timeout(Duration::from_millis(100), back).await {
                    Ok(Ok(Returned { held, rest })) => {
                        debug!(peer = to, error = %source_chain(&e), "peer unreachable: offer served here");
                        m.forwards_unreachable.fetch_add(1, Ordering::Relaxed);
                        let (method, uri, version, headers) = here;
                        let mut local = Request::new(rest);
                        (*local.method_mut(), *local.uri_mut(), *local.version_mut(), *local.headers_mut()) = (method, uri, version, headers);
                        return (self.forward(local, held, named_by_target, true, front).await, Some(Fate::Accepted));
                    }
                    _ => lost(&source_chain(&e)),
                }
            }
            Ok(Err(e)) => {
                m.forwards_failed.fetch_add(1, Ordering::Relaxed);
                plain(StatusCode::BAD_GATEWAY, &format!("huntlb agent: peer {to} failed: {}\n", source_chain(&e)))
            }
            // The peer's own refusal (`hunt` is the agent's alone): its app never saw it.
            Ok(Ok(resp)) if resp.status().as_u16() == protocol::BUSY_STATUS && resp.headers().contains_key(protocol::BUSY_HEADER) => {
                lost(&"the peer refused its final")
            }
            Ok(Ok(resp)) => {
                m.forwards_sent.fetch_add(1, Ordering::Relaxed);
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                let served_by = parts.headers.get(protocol::SERVED_BY).cloned();
                // The peer carried its app's 425 (we named the try): restore it,
                // then carry it as our own front needs.
                let carried = parts.status.as_u16() == protocol::CARRIER_STATUS
                    && parts.headers.get(protocol::APP_STATUS).is_some_and(|v| v.as_bytes() == b"425");
                strip_reserved_response_headers(&mut parts.headers);
                let app_status = if carried { protocol::BUSY_STATUS } else { parts.status.as_u16() };
                let (status, hunt_status) = protocol::carry(app_status, named_by_target);
                parts.status = StatusCode::from_u16(status).expect("a status");
                if let Some(v) = hunt_status {
                    parts.headers.insert(protocol::APP_STATUS, HeaderValue::from_static(v));
                }
                if let Some(v) = served_by {
                    parts.headers.insert(protocol::SERVED_BY, v);
                }
                Response::from_parts(parts, Guarded { inner: body, _guard: None, _front: front, _relay: Some(relay) }.boxed_unsync())
            }
        };
        (resp, None)
    }
}
