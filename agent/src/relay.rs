//! Passing an offer to a peer (the forwarding tier): as a final, to the member
//! `Fleet::pick` chose, at its own address, committed by the handshake of
//! `commit`; served here if the peer did not take it in time.

use crate::agent::Agent;
use crate::metrics::Fate;
use crate::fleet::Target;
use crate::headers::{strip_hop_by_hop, strip_reserved_response_headers, to_peer};
use crate::load::PerFrontGuard;
use crate::respond::{busy_response, plain, source_chain, AgentBody};
use crate::app::Guarded;
use crate::body::{Lent, Returned};
use crate::commit::{Framing, Gated};
use http::{header, HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use huntlb_policy::protocol;
use hyper::body::{Body, Incoming};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// A forward's `decided`: nothing yet, go said (by the peer's 100 Continue),
/// or withdrawn (by this agent: the peer's answer or failure before go, or
/// `fleet_commit_ms` passed). Exactly one of the last two, ever.
const PENDING: u8 = 0;
const GO: u8 = 1;
const WITHDRAWN: u8 = 2;
use std::time::Duration;
use tracing::debug;

impl Agent {
    /// An offer forwarded to the peer at `to` (its `listen`), as a final: it
    /// goes with `hunt-target: forwarded` and no other hunt header, so the peer
    /// never refuses it for load, never forwards it again, and carries its
    /// app's own 425 as 400 (`protocol::carry`). This agent holds no in-flight
    /// slot for it (its app does not work on it), only its front's count.
    ///
    /// Exactly once, by the commit handshake (`commit`): the peer has
    /// `fleet_commit_ms` to say it takes the forward; until this agent says go,
    /// nothing reached the peer's app, and any failure (no connection, no word
    /// in time, the peer's refusal) serves the offer here. After go, the
    /// request is the peer's: a failure is an error the client sees (502, 504),
    /// never a second try.
    pub(crate) async fn relay(&self, req: Request<Incoming>, held: VecDeque<hyper::body::Frame<bytes::Bytes>>, target: &Target, named_by_target: bool, front: Option<PerFrontGuard>) -> (Response<AgentBody>, Option<Fate>) {
        let to = target.authority.as_str();
        let m = &self.metrics;
        let Some(fleet) = self.fleet.as_ref() else { return (plain(StatusCode::INTERNAL_SERVER_ERROR, "huntlb agent: no fleet\n"), None) };
        let h1 = req.version() < http::Version::HTTP_2;
        let (mut parts, body) = req.into_parts();
        // `forwardable`: no body, or a declared length.
        let framing = match parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok()) {
            Some(n) => Framing::Length(n),
            None => Framing::None,
        };
        let has_body = !held.is_empty() || !body.is_end_stream();
        // What it takes to serve the offer here instead: the head as it came,
        // and the body, lent (it comes back whole if the peer never got go).
        let here = (parts.method.clone(), parts.uri.clone(), parts.version, parts.headers.clone());
        let (back_tx, back) = tokio::sync::oneshot::channel();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        let body = Gated::new(go_rx, framing, Lent::new(held, body, Some(back_tx)));
        to_peer(&mut parts.headers, Some(fleet.advertise()));
        framing.mark(&mut parts.headers);
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = match Uri::builder().scheme("http").authority(to).path_and_query(path).build() {
            Ok(u) => u,
            Err(_) => return (plain(StatusCode::BAD_REQUEST, "huntlb agent: bad request target\n"), None),
        };
        parts.version = http::Version::HTTP_11;
        let relay = self.relaying.enter();
        let mut req = Request::from_parts(parts, body);
        // The peer's "I take it" is its 100 Continue. Go is said right there,
        // in hyper's connection task (no hop to this one), unless this task
        // has withdrawn the forward first: whichever takes `decided` decides.
        let decided = Arc::new(AtomicU8::new(PENDING));
        let (taken_tx, taken) = tokio::sync::oneshot::channel::<()>();
        let on_continue = Arc::new(std::sync::Mutex::new(Some((go_tx, taken_tx))));
        let (d, on) = (decided.clone(), on_continue.clone());
        hyper::ext::on_informational(&mut req, move |r| {
            if r.status() == StatusCode::CONTINUE && d.compare_exchange(PENDING, GO, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                if let Some((go, taken)) = crate::sync::lock(&on).take() {
                    let _ = go.send(());
                    let _ = taken.send(());
                }
            }
        });
        // Withdrawn: go is dropped, so the body ends in an error, hyper
        // abandons the request and closes the connection, and the body
        // comes back at once.
        let withdraw = || {
            let won = decided.compare_exchange(PENDING, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire).is_ok();
            if won {
                drop(crate::sync::lock(&on_continue).take());
            }
            won
        };
        let mut sending = Box::pin(self.clients.peer.request(req));
        let deadline = tokio::time::sleep(fleet.commit());
        tokio::pin!(deadline);
        // Before go: what the peer said, if anything.
        let mut answered = None;
        tokio::select! {
            biased;
            _ = taken => {}
            r = &mut sending => {
                if withdraw() {
                    // The peer answered, or the try failed, before go: its app
                    // never saw it (the peer gives nothing to its app before
                    // the go byte).
                    drop(sending);
                    fleet.lost(target.member);
                    drop(relay);
                    match &r {
                        Ok(resp) => {
                            debug!(peer = to, status = resp.status().as_u16(), "peer did not take the forward: served here");
                            m.forwards_refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            debug!(peer = to, error = %source_chain(e), "peer unreachable: served here");
                            m.forwards_unreachable.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    drop(r);
                    return self.serve_here(back, here, named_by_target, front, has_body && h1).await;
                }
                answered = Some(r);
            }
            _ = &mut deadline => {
                if withdraw() {
                    // No word in time: withdrawn. The peer sees the connection
                    // end before any go byte. Dropping the try (still
                    // connecting, or waiting on the peer) gives the body back
                    // at once: hyper drops it with the request, or on the
                    // body's error.
                    drop(sending);
                    fleet.lost(target.member);
                    drop(relay);
                    m.forwards_withdrawn.fetch_add(1, Ordering::Relaxed);
                    debug!(peer = to, commit_ms = fleet.commit().as_millis() as u64, "forward withdrawn: no word from the peer in time; served here");
                    return self.serve_here(back, here, named_by_target, front, has_body && h1).await;
                }
            }
        }
        // Go was said: from here the request is the peer's.
        let taken_there = fleet.took(target);
        let limit = self.cfg.app_timeout + Duration::from_secs(1);
        let sent = match answered {
            Some(r) => Ok(r),
            None => tokio::time::timeout(limit, sending).await,
        };
        let resp = match sent {
            Err(_) => {
                m.forwards_failed.fetch_add(1, Ordering::Relaxed);
                let msg = format!("huntlb agent: peer {to} did not answer within {} ms\n", limit.as_millis());
                plain(StatusCode::GATEWAY_TIMEOUT, &msg)
            }
            Ok(Err(e)) => {
                m.forwards_failed.fetch_add(1, Ordering::Relaxed);
                plain(StatusCode::BAD_GATEWAY, &format!("huntlb agent: peer {to} failed: {}\n", source_chain(&e)))
            }
            // The peer's own refusal after go (`hunt` is the agent's alone): its
            // app never saw it, but the body went there, so the front re-sends.
            Ok(Ok(resp)) if resp.status().as_u16() == protocol::BUSY_STATUS && resp.headers().contains_key(protocol::BUSY_HEADER) => {
                fleet.lost(target.member);
                debug!(peer = to, "forward refused after go: the front re-sends");
                m.forwards_refused.fetch_add(1, Ordering::Relaxed);
                busy_response(h1 && has_body)
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
                let guards = (relay, taken_there);
                return (Response::from_parts(parts, Guarded { inner: body, _guard: None, _front: front, _relay: Some(guards), prefill: None }.boxed_unsync()), None);
            }
        };
        (resp, None)
    }

    /// A forward the peer never got go for: served here, with the body as it
    /// came back (whole: nothing of it was sent). Its front counts it here.
    async fn serve_here(
        &self,
        back: tokio::sync::oneshot::Receiver<Returned>,
        here: (http::Method, Uri, http::Version, http::HeaderMap),
        named_by_target: bool,
        front: Option<PerFrontGuard>,
        close: bool,
    ) -> (Response<AgentBody>, Option<Fate>) {
        // The client dropped the request with its error; bounded all the same.
        match tokio::time::timeout(Duration::from_millis(100), back).await {
            Ok(Ok(Returned { held, rest })) => {
                let (method, uri, version, headers) = here;
                let mut local = Request::new(rest);
                (*local.method_mut(), *local.uri_mut(), *local.version_mut(), *local.headers_mut()) = (method, uri, version, headers);
                (self.pass_to_app(local, held, named_by_target, true, front).await, Some(Fate::Accepted))
            }
            // Never expected (the body comes back when the try is dropped):
            // refused, so the front re-sends.
            _ => {
                self.metrics.forwards_refused.fetch_add(1, Ordering::Relaxed);
                (busy_response(close), None)
            }
        }
    }
}
