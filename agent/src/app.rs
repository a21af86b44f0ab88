//! Talking to the app: the request with hunt headers stripped, its answer with
//! the agent's own headers only; once more on a fresh connection when the
//! app had closed the pooled one before any of it was written (`upstream`).

use crate::agent::Agent;
use crate::headers::{keep_body_framing, strip_hop_by_hop, strip_request_headers, strip_reserved_response_headers, takes_trailers, upgrade_of, is_grpc, GRPC_TRAILERS};
use crate::load::{InflightGuard, PerFrontGuard, PrefillGuard, RelayGuard, Slot};
use crate::respond::{plain, source_chain, unreachable_response, AgentBody};
use crate::body::{Lent, Returned};
use crate::upstream::closed_before_write;
use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use huntlb_policy::protocol;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tracing::{debug, warn};

impl Agent {
    /// Pass to the app (never "forward": that is the tier's hop to a peer), `held` (body frames already read) first. `named_by_target`:
    /// the try carried `hunt-target`, so its front may retry a 425 by status
    /// alone (`protocol::carry`). `resendable`: an offer or a final from a hunting
    /// front, which holds the request and may send it once more (to another
    /// backend) if it never reached the app. `front`: the try's place in its
    /// front's count here, held, like the in-flight slot, until the body ends.
    pub(crate) async fn pass_to_app(
        &self,
        req: Request<Incoming>,
        held: VecDeque<Frame<Bytes>>,
        named_by_target: bool,
        resendable: bool,
        front: Option<PerFrontGuard>,
    ) -> Response<AgentBody> {
        // load = "llm": its prompt's weight and its seat go to peers in one report (the seat's)
        let prefill = self.prefill(req.headers(), false);
        self.pass_to_app_in(req, held, named_by_target, resendable, front, Slot { seat: self.inflight.enter(), prefill }).await
    }

    /// `pass_to_app`, in an in-flight slot already taken (a peer's forward holds
    /// one from the moment this agent says it takes it), its prompt's weight
    /// (`load = "llm"`) held until its first response byte.
    pub(crate) async fn pass_to_app_in(
        &self,
        mut req: Request<Incoming>,
        held: VecDeque<Frame<Bytes>>,
        named_by_target: bool,
        resendable: bool,
        front: Option<PerFrontGuard>,
        slot: Slot,
    ) -> Response<AgentBody> {
        // An upgrade (WebSocket) passes through: the app answers the handshake,
        // and on 101 the two connections are joined (`tunnel`).
        let upgrade = upgrade_of(req.headers());
        let h1 = req.version() < http::Version::HTTP_2;
        // `te: trailers` is hop-by-hop but says the client takes trailers, which
        // gRPC servers require of every call: pass that one value on.
        let trailers = takes_trailers(req.headers());
        let downstream = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        strip_request_headers(&mut parts.headers);
        if let Some(protocol) = upgrade {
            parts.headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            parts.headers.insert(header::UPGRADE, protocol);
        }
        if trailers {
            parts.headers.insert(header::TE, HeaderValue::from_static("trailers"));
        }
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = match Uri::builder().scheme("http").authority(self.app_authority.clone()).path_and_query(path).build() {
            Ok(u) => u,
            Err(_) => return plain(StatusCode::BAD_REQUEST, "huntlb agent: bad request target\n"),
        };
        parts.version = if self.cfg.app_h2 { http::Version::HTTP_2 } else { http::Version::HTTP_11 };
        // Over HTTP/1.1 a request the app's close kept from being written goes
        // again (`upstream`): the body lent back, and the head kept for it.
        // Over HTTP/2 none is ever sent again, and nothing is kept.
        let (back_tx, back) = match self.cfg.app_h2 {
            true => (None, None),
            false => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                (Some(tx), Some(rx))
            }
        };
        let body = Lent::new(held, body, back_tx);
        if !self.cfg.app_h2 {
            keep_body_framing(&mut parts.headers, &body);
        }
        let head = back.is_some().then(|| (parts.method.clone(), parts.uri.clone(), parts.version, parts.headers.clone()));
        let m = &self.metrics;
        let start = Instant::now();
        let waiting = self.progress.wait();
        let req = Request::from_parts(parts, body);
        let deadline = tokio::time::Instant::now() + self.cfg.app_timeout;
        let mut sent = tokio::time::timeout_at(deadline, self.clients.app.request(req)).await;
        let unwritten = matches!(&sent, Ok(Err(e)) if !e.is_connect() && closed_before_write(e));
        if let (true, Some(back), Some(head)) = (unwritten, back, head) {
            // Nothing of it was written: the app never saw it, and it goes
            // once more, on a connection of its own (the pool may hold more
            // that the app closed at the same time).
            if let Ok(Ok(Returned { held, rest })) = tokio::time::timeout(Duration::from_millis(100), back).await {
                debug!(app = %self.cfg.app, "the app had closed the idle connection before the request was written: sent again");
                m.app_resends.fetch_add(1, Ordering::Relaxed);
                let mut again = Request::new(Lent::new(held, rest, None));
                (*again.method_mut(), *again.uri_mut(), *again.version_mut(), *again.headers_mut()) = head;
                sent = tokio::time::timeout_at(deadline, self.clients.fresh.request(again)).await;
            }
        }
        drop(waiting);
        match sent {
            Err(_) => {
                m.app_errors_timeout.fetch_add(1, Ordering::Relaxed);
                let msg = format!("huntlb agent: app at {} did not answer within {} ms\n", self.cfg.app, self.cfg.app_timeout.as_millis());
                plain(StatusCode::GATEWAY_TIMEOUT, &msg)
            }
            Ok(Err(e)) if e.is_connect() => {
                m.app_errors_connect.fetch_add(1, Ordering::Relaxed);
                if self.app_up.swap(false, Ordering::AcqRel) {
                    warn!(app = %self.cfg.app, error = %e, "app unreachable: refusing offers until it answers");
                }
                if resendable {
                    // No connection, so the app never saw it: the front may send
                    // it to another backend, which a 502 would not let it do. An
                    // offer accepted just before the agent learnt its app had
                    // died is one: refused, it still has its final.
                    return unreachable_response(h1);
                }
                plain(StatusCode::BAD_GATEWAY, &format!("huntlb agent: app at {} unreachable: {}\n", self.cfg.app, source_chain(&e)))
            }
            Ok(Err(e)) => {
                // The request may have reached the app: answer an error, never a
                // refusal, so the proxy does not replay it.
                m.app_errors_other.fetch_add(1, Ordering::Relaxed);
                plain(StatusCode::BAD_GATEWAY, &format!("huntlb agent: app at {} failed: {}\n", self.cfg.app, source_chain(&e)))
            }
            Ok(Ok(mut resp)) => {
                m.observe(start.elapsed());
                self.app_answered();
                let switched = match downstream {
                    Some(down) if resp.status() == StatusCode::SWITCHING_PROTOCOLS => {
                        let up = hyper::upgrade::on(&mut resp);
                        tokio::spawn(tunnel(down, up));
                        upgrade_of(resp.headers()).or_else(|| resp.headers().get(header::UPGRADE).cloned())
                    }
                    _ => None,
                };
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                if let Some(protocol) = switched {
                    parts.headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
                    parts.headers.insert(header::UPGRADE, protocol);
                }
                // The refusal space is the agent's: no app response may look like
                // one, or a front would re-send a request the app processed; nor
                // may it tell an Envoy front to eject this backend.
                strip_reserved_response_headers(&mut parts.headers);
                // An HTTP/1.1 front gets trailers only if the response names
                // them first (hyper sends no others). An HTTP/2 app names none,
                // but a gRPC answer's are known: without them the call's status
                // is lost and the client sees an error (HAProxy fronts speak
                // HTTP/1.1 to agents).
                if h1 && trailers && !parts.headers.contains_key(header::TRAILER) && is_grpc(&parts.headers) {
                    parts.headers.insert(header::TRAILER, HeaderValue::from_static(GRPC_TRAILERS));
                }
                if let (carrier, Some(app_status)) = protocol::carry(parts.status.as_u16(), named_by_target) {
                    parts.status = StatusCode::from_u16(carrier).expect("the carrier is a status");
                    parts.headers.insert(protocol::APP_STATUS, HeaderValue::from_static(app_status));
                }
                if let Some(v) = &self.cfg.served_by {
                    parts.headers.insert(protocol::SERVED_BY, v.clone());
                }
                Response::from_parts(parts, Guarded { inner: body, _guard: Some(slot.seat), _front: front, _relay: None, prefill: slot.prefill }.boxed_unsync())
            }
        }
    }
}

/// A response body that holds its request's in-flight slot (and its place in
/// its front's count) until it ends.
pub(crate) struct Guarded {
    pub(crate) inner: Incoming,
    /// None for a forwarded try: its peer's app holds the slot.
    pub(crate) _guard: Option<InflightGuard>,
    /// Some for a forwarded try: a drain waits for it.
    /// A forward: the tries being relayed, and this agent's count at the peer.
    pub(crate) _relay: Option<(RelayGuard, crate::fleet::Outstanding)>,
    pub(crate) _front: Option<PerFrontGuard>,
    /// With `load = "llm"`: its prompt's weight, dropped at the first frame
    /// (a stream's first token: the prefill is done).
    pub(crate) prefill: Option<PrefillGuard>,
}

impl Body for Guarded {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let got = Pin::new(&mut self.inner).poll_frame(cx);
        if got.is_ready() {
            self.prefill = None;
        }
        got
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Join a client connection and an app connection after a 101, byte for byte,
/// until either side closes. The session holds no in-flight slot: it is not a
/// request the app is working on, and counting it would keep `b` high forever.
pub(crate) async fn tunnel(down: hyper::upgrade::OnUpgrade, up: hyper::upgrade::OnUpgrade) {
    match tokio::try_join!(down, up) {
        Ok((down, up)) => {
            let (mut down, mut up) = (TokioIo::new(down), TokioIo::new(up));
            if let Err(e) = tokio::io::copy_bidirectional(&mut down, &mut up).await {
                debug!(error = %e, "upgraded connection ended");
            }
        }
        Err(e) => debug!(error = %e, "upgrade did not complete"),
    }
}
