//! One request through the agent: classify its hunt headers, ask the policy if it
//! is an offer, then refuse at once or forward to the app.
//!
//! ```text
//!  proxy ──► agent ──┬── offer & policy says busy ──► 425 `hunt: busy` (app never sees it)
//!                    │     (a body of no declared length: only once it has ended within
//!                    │      the proxy's copy; else accepted after all, `hold`)
//!                    ├── otherwise ──► app (hunt-* stripped) ──► response (its hunt-* stripped,
//!                    │                                          an app 425 carried as 400) + hunt-served-by
//!                    └── offer, fleet_listen set, a peer is the fleet's least ──► that peer's agent, as a
//!                          final (`relay`); no connection to it: refused, so the front re-sends
//! ```

use crate::config::{Config, LoadSource};
use crate::fleet::{Fleet, Pick, Target};
use crate::load::{Inflight, InflightGuard, PerFront, PerFrontGuard, Progress, RelayGuard, Relaying, Scoreboard};
use crate::metrics::{Gauges, Metrics};
use crate::upstream::{closed_before_write, Lent, Returned, Watched};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, Limited};
use huntlb_policy::protocol::{self, Field, Hold, Mark};
use huntlb_policy::{Gates, Load, Policy, Reason, SharedPolicy, Verdict};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::client::legacy::{connect::capture_connection, connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

pub type AgentBody = UnsyncBoxBody<Bytes, hyper::Error>;

/// How long a refused request's body may take to drain before the connection is
/// closed instead.
const DRAIN_TIME: Duration = Duration::from_secs(2);
/// How long a refusal of an offer whose body has no declared length (a gRPC
/// call) waits for that body to end before the offer is accepted instead
/// (`Agent::hold`): an open stream costs at most this, and only when refused.
const HOLD_TIME: Duration = Duration::from_millis(100);
const HEALTH_CONNECT_TIMEOUT: Duration = Duration::from_millis(200);

pub struct Agent {
    pub cfg: Config,
    policy: SharedPolicy,
    inflight: Arc<Inflight>,
    per_front: Arc<PerFront>,
    pub scoreboard: Option<Arc<Scoreboard>>,
    pub metrics: Metrics,
    client: Client<Watched, Lent>,
    /// No pool: a request whose pooled connection the app had closed before
    /// any of it was written goes again on a connection of its own.
    fresh_client: Client<Watched, Lent>,
    /// The forwarding tier (`fleet_listen`), and its HTTP/1.1 client to peers.
    pub fleet: Option<Arc<Fleet>>,
    peer_client: Client<Watched, Lent>,
    relaying: Arc<Relaying>,
    app_authority: http::uri::Authority,
    app_up: AtomicBool,
    /// No sign of life from the app for `app_stall` while requests waited on it
    /// (a frozen process still completes TCP handshakes). Cleared by any answer.
    stalled: AtomicBool,
    progress: Arc<Progress>,
    draining: AtomicBool,
}

impl Agent {
    pub fn new(cfg: Config, fleet: Option<Arc<Fleet>>) -> Arc<Self> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(1)));
        // A peer that does not take the connection within this took nothing:
        // the offer is refused to its front, which re-sends it (a connect
        // error, never a timeout after the try may have been sent).
        let mut peer_connector = connector.clone();
        peer_connector.set_connect_timeout(Some(cfg.fleet.as_ref().map_or(Duration::from_secs(1), |f| f.dead_after.min(Duration::from_secs(1)))));
        let peer_client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(cfg.pool_idle)
            .pool_timer(TokioTimer::new())
            .build(Watched::http1_tls(peer_connector, cfg.fleet.as_ref().and_then(|f| f.tls.clone())));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(cfg.pool_idle)
            // Without a timer the pool never reaps: an idle connection goes only
            // when a checkout meets it, so the pool stayed as deep as the
            // busiest moment so far (the soak's fds crept up 330 -> 360).
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(cfg.max_inflight as usize)
            .http2_only(cfg.app_h2)
            .build(if cfg.app_h2 { Watched::http2(connector.clone()) } else { Watched::http1(connector.clone()) });
        let fresh_client = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(0).http2_only(cfg.app_h2).build(Watched::http1(connector));
        let scoreboard = matches!(cfg.load, LoadSource::Apache { .. }).then(|| Arc::new(Scoreboard::default()));
        Arc::new(Agent {
            policy: SharedPolicy::new(cfg.policy),
            inflight: Arc::new(Inflight::default()),
            per_front: Arc::new(PerFront::default()),
            scoreboard,
            metrics: Metrics::default(),
            client,
            fresh_client,
            fleet,
            peer_client,
            relaying: Arc::new(Relaying::default()),
            app_authority: cfg.app.to_string().parse().expect("a socket address is an authority"),
            app_up: AtomicBool::new(true),
            stalled: AtomicBool::new(false),
            progress: Arc::new(Progress::default()),
            draining: AtomicBool::new(false),
            cfg,
        })
    }

    /// The load `b` the policy sees now.
    fn busy(&self) -> u32 {
        match &self.scoreboard {
            Some(board) => board.busy.load(Ordering::Acquire),
            None => self.inflight.get(),
        }
    }

    pub fn inflight(&self) -> u32 {
        self.inflight.get()
    }

    /// Tries being relayed to peers: a drain waits for them too.
    pub fn relaying(&self) -> u32 {
        self.relaying.get()
    }

    /// The load the policy sees, as the forwarding tier reports it to peers.
    pub fn busy_now(&self) -> u32 {
        self.busy()
    }

    /// Called on every change of the in-flight count, and on a drain.
    pub fn on_inflight_change(&self, f: Box<dyn Fn() + Send + Sync>) {
        self.inflight.on_change(f);
    }

    /// Whether peers may forward here: not draining, app up and answering.
    pub fn takes_forwards(&self) -> bool {
        self.gates() == Gates::OPEN && !self.stalled.load(Ordering::Acquire)
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
        // Peers hear at once that this agent takes no more forwards.
        self.inflight.changed();
    }

    pub fn gauges(&self) -> Gauges {
        Gauges {
            inflight: u64::from(self.inflight.get()),
            busy: u64::from(self.busy()),
            c: match self.policy.policy() {
                Policy::Always => None,
                _ => Some(self.policy.state().c),
            },
            workers: self.cfg.workers,
            app_up: self.app_up.load(Ordering::Acquire),
            stalled: self.stalled.load(Ordering::Acquire),
            draining: self.draining.load(Ordering::Acquire),
            apache_polls: self.scoreboard.as_ref().map(|b| (b.polls.load(Ordering::Relaxed), b.errors.load(Ordering::Relaxed))),
            fleet: self.fleet.as_ref().map(|f| (f.ready_peers(), f.peers_wanting(), f.reports_bad())),
        }
    }

    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Result<Response<AgentBody>, std::convert::Infallible> {
        if req.uri().path() == self.cfg.health_path {
            return Ok(self.health().await);
        }
        let target = field(req.headers(), protocol::TARGET);
        let attempt = field(req.headers(), protocol::ENVOY_ATTEMPT);
        let named_by_target = target != Field::Absent;
        // An Envoy front names its tries by its own attempt count, never by hunt-target.
        let from_envoy = !named_by_target && attempt != Field::Absent;
        let mark = protocol::classify(field(req.headers(), protocol::OFFER), protocol::per_try_mark(target, attempt));
        // A front that cannot say what it counts here names itself instead:
        // what it counts is what this agent holds from it.
        let front = protocol::parse_front(field(req.headers(), protocol::FRONT)).map(Box::<[u8]>::from);
        let seen = protocol::parse_seen(field(req.headers(), protocol::SEEN)).or_else(|| front.as_deref().map(|f| self.per_front.get(f)));
        // The forwarding tier decides an offer when peers are heard and no gate
        // is shut (a shut gate refuses as without it); the acceptance policy
        // decides when no peer is.
        let pick = match &self.fleet {
            Some(fleet) if mark == Mark::Offer && self.gates() == Gates::OPEN && forwardable(&req) => fleet.pick(self.busy(), seen),
            _ => Pick::NoPeers,
        };
        if let Pick::Forward(to) = pick {
            // Counted for its front here, where its front counts it.
            let counted = front.as_deref().map(|f| self.per_front.enter(f));
            return Ok(self.relay(req, &to, named_by_target, counted).await);
        }
        let (verdict, load) = match pick {
            Pick::Keep => (Verdict::Accept, Load { busy: self.busy(), workers: self.cfg.workers, seen }),
            _ => self.admit(mark, seen),
        };
        let m = &self.metrics;
        if mark == Mark::Final && self.policy.is_busy(load) {
            m.finals_busy.fetch_add(1, Ordering::Relaxed); // accepted while busy: the scaling signal
        }
        let counter = match mark {
            Mark::Offer => (verdict == Verdict::Accept).then_some(&m.offers_accepted), // refusals count in refuse()
            Mark::Final => Some(&m.finals),
            Mark::Plain => Some(&m.plain),
            Mark::Malformed => {
                debug!(offer = ?req.headers().get(protocol::OFFER), target = ?req.headers().get(protocol::TARGET), "malformed hunt headers: treated as final");
                Some(&m.malformed)
            }
        };
        if let Some(n) = counter {
            n.fetch_add(1, Ordering::Relaxed);
        }
        let mut resp = match verdict {
            Verdict::Accept => {
                // Counted for its front until its response body ends, as the
                // front counts it (Envoy: until the stream completes).
                let counted = front.as_deref().map(|f| self.per_front.enter(f));
                self.forward(req, VecDeque::new(), named_by_target, matches!(mark, Mark::Offer | Mark::Final), counted).await
            }
            Verdict::Refuse(why) => self.refuse(req, why, named_by_target, front.as_deref()).await,
            // A peer's forward that finds no room reached no app: refused, and
            // the peer refuses it to its front, which re-sends it (counted
            // there, in `huntlb_forwards_total{outcome="refused"}`: it was no
            // offer here).
            Verdict::Overloaded if mark == Mark::Final && req.headers().contains_key(protocol::VIA) => {
                busy_response(req.version() < http::Version::HTTP_2 && !req.body().is_end_stream())
            }
            Verdict::Overloaded => plain(StatusCode::SERVICE_UNAVAILABLE, "huntlb agent: max_inflight reached\n"),
        };
        if from_envoy && leaves_rotation(&resp, verdict) {
            resp.headers_mut().insert(protocol::ENVOY_HC_FAIL, HeaderValue::from_static("true"));
        }
        Ok(resp)
    }

    /// This try's verdict, and the load it saw: the agent knows every gate
    /// (`huntlb_policy::admit`).
    fn admit(&self, mark: Mark, seen: Option<u32>) -> (Verdict, Load) {
        let gates = self.gates();
        let load = Load { busy: self.busy(), workers: self.cfg.workers, seen };
        let verdict = self.policy.admit(mark.as_try(), gates, load);
        if mark == Mark::Offer {
            debug!(busy = load.busy, workers = load.workers, c = self.policy.state().c, ?gates, ?verdict, "offer");
        }
        (verdict, load)
    }

    fn gates(&self) -> Gates {
        Gates {
            draining: self.draining.load(Ordering::Acquire),
            app_down: !self.app_up.load(Ordering::Acquire),
            at_capacity: self.inflight.get() >= self.cfg.max_inflight,
        }
    }

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
    async fn relay(&self, req: Request<Incoming>, target: &Target, named_by_target: bool, front: Option<PerFrontGuard>) -> Response<AgentBody> {
        let to = target.authority.as_str();
        let m = &self.metrics;
        let h1 = req.version() < http::Version::HTTP_2;
        let has_body = !req.body().is_end_stream();
        let trailers = takes_trailers(req.headers());
        let (mut parts, body) = req.into_parts();
        // What it takes to serve the offer here instead, should the peer not
        // take the connection: the head as it came, and the body, lent.
        let here = (parts.method.clone(), parts.uri.clone(), parts.version, parts.headers.clone());
        let (back_tx, back) = tokio::sync::oneshot::channel();
        let body = Lent::new(VecDeque::new(), body, Some(back_tx));
        strip_request_headers(&mut parts.headers);
        if trailers {
            parts.headers.insert(header::TE, HeaderValue::from_static("trailers"));
        }
        parts.headers.insert(protocol::TARGET, HeaderValue::from_static(FORWARDED_MARK));
        if let Some(f) = &self.fleet {
            if let Ok(v) = HeaderValue::from_str(f.advertise()) {
                parts.headers.insert(protocol::VIA, v);
            }
        }
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = match Uri::builder().scheme("http").authority(to).path_and_query(path).build() {
            Ok(u) => u,
            Err(_) => return plain(StatusCode::BAD_REQUEST, "huntlb agent: bad request target\n"),
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
        match sent {
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
                        m.offers_accepted.fetch_add(1, Ordering::Relaxed);
                        let (method, uri, version, headers) = here;
                        let mut local = Request::new(rest);
                        (*local.method_mut(), *local.uri_mut(), *local.version_mut(), *local.headers_mut()) = (method, uri, version, headers);
                        self.forward(local, held, named_by_target, true, front).await
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
        }
    }

    /// The busy refusal: 425, `hunt: busy`, empty body. A body up to `drain_limit`
    /// is read and dropped first so the connection can carry the next request;
    /// a larger or slower one gets the refusal with `connection: close`.
    async fn refuse(&self, req: Request<Incoming>, why: Reason, named_by_target: bool, front: Option<&[u8]>) -> Response<AgentBody> {
        let h1 = req.version() < http::Version::HTTP_2;
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_none() && !req.body().is_end_stream() {
            return self.hold(req, why, named_by_target, front).await;
        }
        self.metrics.refused(why);
        let has_body = declared.is_some_and(|n| n > 0);
        let mut close = false;
        if has_body {
            close = match declared {
                Some(n) if n > self.cfg.drain_limit as u64 => true,
                _ => {
                    let drained = tokio::time::timeout(DRAIN_TIME, Limited::new(req.into_body(), self.cfg.drain_limit).collect()).await;
                    !matches!(drained, Ok(Ok(_)))
                }
            };
        }
        if close {
            self.metrics.refusals_closed.fetch_add(1, Ordering::Relaxed);
        }
        // On HTTP/2 the stream ends with the response (hyper resets it if its
        // body is unread); `connection: close` is for HTTP/1 only.
        busy_response(close && h1)
    }

    /// A refusal of an offer whose body has no declared length (a gRPC call, a
    /// chunked upload) is held until the front is known to hold the whole body
    /// (`protocol::held_refusal`): the body is read, and the refusal goes only
    /// once it has ended within `drain_limit` (the front's replay copy). A body
    /// that passes it, or is still open after `HOLD_TIME`, may be one the front
    /// can no longer re-send, so the offer is accepted after all, as a final:
    /// what was read goes to the app first, then the rest as it comes.
    async fn hold(&self, req: Request<Incoming>, why: Reason, named_by_target: bool, front: Option<&[u8]>) -> Response<AgentBody> {
        let h1 = req.version() < http::Version::HTTP_2;
        let (parts, mut body) = req.into_parts();
        let limit = self.cfg.drain_limit as u64;
        let mut held = VecDeque::new();
        let (mut read, mut ended, mut waited_out) = (0u64, false, false);
        let deadline = tokio::time::sleep(HOLD_TIME);
        tokio::pin!(deadline);
        loop {
            match protocol::held_refusal(read, ended, waited_out, limit) {
                Hold::Wait => {}
                Hold::Refuse => {
                    self.metrics.refused(why);
                    return busy_response(false);
                }
                Hold::Accept => break,
            }
            tokio::select! {
                frame = body.frame(), if !ended => match frame {
                    Some(Ok(f)) => {
                        if let Some(d) = f.data_ref() {
                            read += d.len() as u64;
                        }
                        held.push_back(f);
                    }
                    None => ended = true,
                    Some(Err(e)) => {
                        // The front gave up the request: nothing reached the app.
                        debug!(error = %e, "held offer's body failed");
                        self.metrics.refused(why);
                        return busy_response(h1);
                    }
                },
                _ = &mut deadline, if !waited_out => waited_out = true,
            }
        }
        debug!(read, ended, ?why, "held refusal: the front may not hold the whole body, accepted");
        self.metrics.offers_accepted.fetch_add(1, Ordering::Relaxed);
        if self.inflight.get() >= self.cfg.max_inflight {
            return plain(StatusCode::SERVICE_UNAVAILABLE, "huntlb agent: max_inflight reached\n");
        }
        // Not a try the front may send once more: it may not hold the body.
        // Accepted after all, it counts for its front like any other.
        let counted = front.map(|f| self.per_front.enter(f));
        self.forward(Request::from_parts(parts, body), held, named_by_target, false, counted).await
    }

    /// Forward to the app, `held` (body frames already read) first. `named_by_target`:
    /// the try carried `hunt-target`, so its front may retry a 425 by status
    /// alone (`protocol::carry`). `resendable`: an offer or a final from a hunting
    /// front, which holds the request and may send it once more (to another
    /// backend) if it never reached the app. `front`: the try's place in its
    /// front's count here, held, like the in-flight slot, until the body ends.
    async fn forward(
        &self,
        mut req: Request<Incoming>,
        held: VecDeque<Frame<Bytes>>,
        named_by_target: bool,
        resendable: bool,
        front: Option<PerFrontGuard>,
    ) -> Response<AgentBody> {
        let guard = self.inflight.enter();
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
        let (back_tx, back) = tokio::sync::oneshot::channel();
        let body = Lent::new(held, body, Some(back_tx));
        if !self.cfg.app_h2 {
            keep_body_framing(&mut parts.headers, &body);
        }
        // The head again, should the app have closed the pooled connection
        // before any of the request was written (`upstream`).
        let head = (parts.method.clone(), parts.uri.clone(), parts.version, parts.headers.clone());
        let m = &self.metrics;
        let start = Instant::now();
        let waiting = self.progress.wait();
        let mut req = Request::from_parts(parts, body);
        let cap = capture_connection(&mut req);
        let deadline = tokio::time::Instant::now() + self.cfg.app_timeout;
        let mut sent = tokio::time::timeout_at(deadline, self.client.request(req)).await;
        if matches!(&sent, Ok(Err(e)) if !e.is_connect()) && closed_before_write(&cap) {
            // Nothing of it was written: the app never saw it, and it goes
            // once more, on a connection of its own (the pool may hold more
            // that the app closed at the same time).
            if let Ok(Ok(Returned { held, rest })) = tokio::time::timeout(Duration::from_millis(100), back).await {
                debug!(app = %self.cfg.app, "the app had closed the idle connection before the request was written: sent again");
                m.app_resends.fetch_add(1, Ordering::Relaxed);
                let mut again = Request::new(Lent::new(held, rest, None));
                (*again.method_mut(), *again.uri_mut(), *again.version_mut(), *again.headers_mut()) = head;
                sent = tokio::time::timeout_at(deadline, self.fresh_client.request(again)).await;
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
                if let Ok(v) = HeaderValue::from_str(&self.cfg.id) {
                    parts.headers.insert(protocol::SERVED_BY, v);
                }
                Response::from_parts(parts, Guarded { inner: body, _guard: Some(guard), _front: front, _relay: None }.boxed_unsync())
            }
        }
    }

    async fn health(&self) -> Response<AgentBody> {
        self.metrics.health_checks.fetch_add(1, Ordering::Relaxed);
        if self.draining.load(Ordering::Acquire) {
            return plain(StatusCode::SERVICE_UNAVAILABLE, "draining\n");
        }
        if self.stalled.load(Ordering::Acquire) {
            let msg = format!("app at {} stalled: no answer for over {} ms while requests waited\n", self.cfg.app, self.cfg.app_stall.as_millis());
            return plain(StatusCode::SERVICE_UNAVAILABLE, &msg);
        }
        // An app that answered a request within `app_probe_ms` is up: no
        // connection to it is needed to say so. Busy fronts check often (four
        // Envoys and HAProxys over 12 agents made 120-220 connections a second
        // to the apps on the bench); an idle app is connected to as before, and
        // a dead one fails the next check a beat later, or at once on the
        // request that finds it gone (`app_up`).
        if self.app_is_up() && self.progress.answered_within(self.cfg.app_probe) {
            return plain(StatusCode::OK, "ok\n");
        }
        if self.probe_app().await {
            plain(StatusCode::OK, "ok\n")
        } else {
            plain(StatusCode::SERVICE_UNAVAILABLE, "app unreachable\n")
        }
    }

    /// Try a TCP connection to the app; record the answer. A stalled app stays
    /// down whatever its TCP stack says.
    pub async fn probe_app(&self) -> bool {
        let up = matches!(
            tokio::time::timeout(HEALTH_CONNECT_TIMEOUT, tokio::net::TcpStream::connect(self.cfg.app)).await,
            Ok(Ok(_))
        ) && !self.stalled.load(Ordering::Acquire);
        self.app_up.store(up, Ordering::Release);
        up
    }

    pub fn app_is_up(&self) -> bool {
        self.app_up.load(Ordering::Acquire)
    }

    /// The app answered: it is up, and not stalled.
    fn app_answered(&self) {
        self.progress.app_answered();
        self.app_up.store(true, Ordering::Release);
        if self.stalled.swap(false, Ordering::AcqRel) {
            info!(app = %self.cfg.app, "app answering again");
        }
    }

    /// One look at the app, every `app_probe_ms`: a stall starts when requests
    /// have waited `app_stall` with no answer; while stalled, ask the app itself
    /// (`OPTIONS *`, any HTTP answer will do) so that an app left without
    /// traffic (its backend ejected) is seen when it comes back.
    pub async fn watch_app(&self) {
        let limit = self.cfg.app_stall;
        if !limit.is_zero() && !self.stalled.load(Ordering::Acquire) && self.progress.stalled_for().is_some_and(|d| d > limit) {
            self.stalled.store(true, Ordering::Release);
            self.app_up.store(false, Ordering::Release);
            warn!(app = %self.cfg.app, stall_ms = limit.as_millis() as u64, "app stalled: refusing offers and reporting unhealthy until it answers");
        }
        if self.stalled.load(Ordering::Acquire) {
            if answers_http(self.cfg.app, self.cfg.app_probe.max(HEALTH_CONNECT_TIMEOUT)).await {
                self.app_answered();
            }
        } else if !self.app_is_up() && self.probe_app().await {
            info!(app = %self.cfg.app, "app reachable again");
        }
    }
}

/// Does an HTTP server answer at `addr` within `limit`? `OPTIONS *` asks the
/// server itself, not a resource; any status line is an answer.
async fn answers_http(addr: std::net::SocketAddr, limit: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"OPTIONS * HTTP/1.1\r\nhost: huntlb-agent\r\nconnection: close\r\n\r\n").await?;
        let mut head = [0u8; 5];
        s.read_exact(&mut head).await?;
        Ok::<bool, std::io::Error>(&head == b"HTTP/")
    };
    matches!(tokio::time::timeout(limit, ask).await, Ok(Ok(true)))
}

/// A response body that holds its request's in-flight slot (and its place in
/// its front's count) until it ends.
struct Guarded {
    inner: Incoming,
    /// None for a forwarded try: its peer's app holds the slot.
    _guard: Option<InflightGuard>,
    /// Some for a forwarded try: a drain waits for it.
    _relay: Option<RelayGuard>,
    _front: Option<PerFrontGuard>,
}

impl Body for Guarded {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// `hunt-target` on a forwarded try: a final at the peer.
const FORWARDED_MARK: &str = "forwarded";

/// Can this offer go to a peer? Not an upgrade (its tunnel is joined here),
/// and not a body of no declared length: if the peer cannot be reached that
/// body is gone, and the front may not hold it whole to re-send (`hold`).
fn forwardable(req: &Request<Incoming>) -> bool {
    upgrade_of(req.headers()).is_none() && (req.body().is_end_stream() || req.headers().contains_key(header::CONTENT_LENGTH))
}

/// A body of no declared length (HTTP/2 without `content-length`) going out
/// over HTTP/1.1 is sent chunked, whatever the method: hyper's client sends a
/// GET, HEAD or CONNECT of unknown length with no body at all (it assumes
/// those have none), so a GET with a body reached the app empty.
fn keep_body_framing(h: &mut HeaderMap, body: &impl Body) {
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
fn takes_trailers(h: &HeaderMap) -> bool {
    h.get_all(header::TE).iter().any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("trailers"))))
}

fn field<'a>(h: &'a HeaderMap, name: &str) -> Field<'a> {
    let mut values = h.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Field::Absent,
        (Some(v), None) => Field::One(v.as_bytes()),
        (Some(_), Some(_)) => Field::Repeated,
    }
}

// Not `trailer`: it names the fields a body's trailers will carry, end to end
// (RFC 9110 6.6.2), and an HTTP/1.1 server sends only the trailers it names.
const HOP_BY_HOP: [&str; 5] = ["connection", "keep-alive", "proxy-connection", "te", "upgrade"];

/// What gRPC sends as trailers (its status, in every call that has a body).
const GRPC_TRAILERS: &str = "grpc-status, grpc-message, grpc-status-details-bin";

/// A gRPC message: `content-type: application/grpc`, with or without a `+codec`.
fn is_grpc(h: &HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| {
        let v = v.trim_start().to_ascii_lowercase();
        v.strip_prefix("application/grpc").is_some_and(|rest| rest.is_empty() || rest.starts_with(['+', ';']))
    })
}

fn strip_hop_by_hop(h: &mut HeaderMap) {
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
fn upgrade_of(h: &HeaderMap) -> Option<HeaderValue> {
    let asked = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    asked.then(|| h.get(header::UPGRADE).cloned()).flatten()
}

/// Join a client connection and an app connection after a 101, byte for byte,
/// until either side closes. The session holds no in-flight slot: it is not a
/// request the app is working on, and counting it would keep `b` high forever.
async fn tunnel(down: hyper::upgrade::OnUpgrade, up: hyper::upgrade::OnUpgrade) {
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

fn strip_request_headers(h: &mut HeaderMap) {
    strip_hop_by_hop(h);
    strip_hunt_headers(h);
}

fn strip_hunt_headers(h: &mut HeaderMap) {
    strip_where(h, protocol::is_hunt_header);
}

/// An app's (or a peer's) response: `protocol::is_reserved_response_header`.
fn strip_reserved_response_headers(h: &mut HeaderMap) {
    strip_where(h, protocol::is_reserved_response_header);
}

fn strip_where(h: &mut HeaderMap, reserved: fn(&str) -> bool) {
    let names: Vec<_> = h.keys().filter(|k| reserved(k.as_str())).cloned().collect();
    for k in names {
        h.remove(k);
    }
}

fn full(b: impl Into<Bytes>) -> AgentBody {
    Full::new(b.into()).map_err(|never| match never {}).boxed_unsync()
}

fn plain(status: StatusCode, msg: &str) -> Response<AgentBody> {
    let mut r = Response::new(full(msg.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

fn busy_response(close: bool) -> Response<AgentBody> {
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
fn unreachable_response(h1: bool) -> Response<AgentBody> {
    let mut r = busy_response(h1);
    r.headers_mut().insert(protocol::BUSY_HEADER, HeaderValue::from_static(protocol::UNREACHABLE_VALUE));
    r
}

/// Whether this answer is a refusal about the whole backend
/// (`protocol::leaves_rotation`): `unreachable`, or an offer refused because the
/// app is down or the agent drains. App responses never carry `hunt`: the
/// agent strips it from them, so the header marks the agent's own refusals.
fn leaves_rotation(resp: &Response<AgentBody>, verdict: Verdict) -> bool {
    match resp.headers().get(protocol::BUSY_HEADER).map(HeaderValue::as_bytes) {
        Some(v) if v == protocol::UNREACHABLE_VALUE.as_bytes() => true,
        Some(v) if v == protocol::BUSY_VALUE.as_bytes() => matches!(verdict, Verdict::Refuse(why) if protocol::leaves_rotation(why)),
        _ => false,
    }
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}
