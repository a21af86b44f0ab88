//! One request through the agent, decided here: classify its hunt headers, ask the policy if it
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
use crate::fleet::{Fleet, Pick};
use crate::headers::{forwardable, read_try_from, Hunt, Source};
use crate::load::{Inflight, PerFront, Progress, Relaying, Scoreboard};
use crate::metrics::{Fate, Gauges, Metrics};
use crate::respond::{busy_response, leaves_rotation, plain, AgentBody};
use crate::body::Lent;
use crate::commit::{await_go, Framing, Gated, Go};
use crate::upstream::Watched;
use http::{HeaderValue, Request, Response, StatusCode};
use huntlb_policy::protocol::{self, Mark};
use huntlb_policy::{Gates, Load, Policy, SharedPolicy, Verdict};
use hyper::body::{Body, Incoming};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::debug;

pub struct Agent {
    pub cfg: Config,
    pub(crate) policy: SharedPolicy,
    pub(crate) inflight: Arc<Inflight>,
    pub(crate) per_front: Arc<PerFront>,
    pub scoreboard: Option<Arc<Scoreboard>>,
    /// With `llm_metrics_url`: the server's KV-cache use, as last read.
    pub kv: Option<Arc<crate::load::kv::KvRead>>,
    pub metrics: Metrics,
    pub(crate) client: Client<Watched, Lent>,
    /// No pool: a request whose pooled connection the app had closed before
    /// any of it was written goes again on a connection of its own.
    pub(crate) fresh_client: Client<Watched, Lent>,
    /// The forwarding tier (`fleet_listen`), and its HTTP/1.1 client to peers.
    pub fleet: Option<Arc<Fleet>>,
    pub(crate) peer_client: Client<Watched, Gated>,
    pub(crate) relaying: Arc<Relaying>,
    pub(crate) app_authority: http::uri::Authority,
    pub(crate) app_up: AtomicBool,
    /// No sign of life from the app for `app_stall` while requests waited on it
    /// (a frozen process still completes TCP handshakes). Cleared by any answer.
    pub(crate) stalled: AtomicBool,
    pub(crate) progress: Arc<Progress>,
    pub(crate) draining: AtomicBool,
    /// Connection slots on `listen` (`max_connections`): the accept loop holds
    /// one a connection.
    pub(crate) connections: Arc<tokio::sync::Semaphore>,
    /// The `listen` socket, once bound (-1 before): its accept queue is read
    /// for readiness.
    pub(crate) listen_fd: std::sync::atomic::AtomicI32,
    /// When the accept queue was last read (microseconds, even), and whether
    /// it was over half full (the low bit).
    pub(crate) queue_checked: std::sync::atomic::AtomicU64,
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
        // Forwards leave from this agent's member IP (its reports' source):
        // a peer with `fleet_pass_plain` takes a forward only from a member's
        // IP, and a socket left unbound leaves by the route's address (on
        // loopback 127.0.0.1 for every agent). An IP this host cannot bind (a
        // NAT's, a published port's) is left to the route, and said.
        if let Some(f) = &cfg.fleet {
            let ip = f.from.ip();
            if std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok() {
                peer_connector.set_local_address(Some(ip));
            } else if f.pass_plain {
                tracing::warn!(%ip, "fleet_pass_plain: forwards to peers cannot leave from this agent's member IP (not this host's); peers with fleet_pass_plain take them for a plain front's tries unless the route's source is a member's");
            }
        }
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
        let scoreboard = matches!(cfg.load, LoadSource::Apache { .. } | LoadSource::Scoreboard { .. }).then(|| Arc::new(Scoreboard::default()));
        Arc::new(Agent {
            policy: SharedPolicy::new(cfg.policy),
            inflight: Arc::new(Inflight::default()),
            per_front: Arc::new(PerFront::default()),
            scoreboard,
            kv: cfg.llm_kv.as_ref().map(|_| Arc::default()),
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
            connections: Arc::new(tokio::sync::Semaphore::new(cfg.max_connections)),
            listen_fd: std::sync::atomic::AtomicI32::new(-1),
            queue_checked: std::sync::atomic::AtomicU64::new(0),
            cfg,
        })
    }

    /// The load `b` the policy sees now.
    pub(crate) fn busy(&self) -> u32 {
        match (&self.scoreboard, &self.cfg.load) {
            (Some(board), _) => board.busy.load(Ordering::Acquire),
            (None, LoadSource::Llm(w)) => {
                let b = w.load(self.inflight.get(), self.inflight.prefill_tokens());
                match (&self.cfg.llm_kv, &self.kv) {
                    (Some(k), Some(read)) => k.bound.load(b, w.workers, read.read()),
                    _ => b,
                }
            }
            (None, _) => self.inflight.get(),
        }
    }

    /// With `load = "llm"`: count this request's prompt (its Content-Length,
    /// estimated in tokens and capped) until the guard drops, at its first
    /// response byte. A forged length weighs at most the server's seats.
    /// `tell`: peers hear of it now; else with the next change (the request's
    /// seat, counted right after: one report for both).
    pub(crate) fn prefill(&self, headers: &http::HeaderMap, tell: bool) -> Option<crate::load::PrefillGuard> {
        let LoadSource::Llm(w) = &self.cfg.load else { return None };
        // hyper refuses a request with two different or unparsable lengths
        // before it gets here; one left unreadable counts as none
        let len = headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        self.inflight.prefill(w.prompt_tokens(len), tell)
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

    /// Whether peers may forward here: not draining, app up and answering,
    /// and connections to spare (a forward needs one).
    pub fn takes_forwards(&self) -> bool {
        self.gates() == Gates::OPEN && !self.stalled.load(Ordering::Acquire) && self.takes_connections()
    }

    /// Room for a new connection on `listen`: slots to spare (1/64 of
    /// `max_connections`, at least one: idle connections held by anyone, a
    /// slowloris, fill them), and an accept queue under half full (the
    /// kernel's, which fills once the slots are gone).
    pub fn takes_connections(&self) -> bool {
        let spare = (self.cfg.max_connections / 64).max(1);
        if self.connections.available_permits() < spare {
            return false;
        }
        // The accept queue is read at most every millisecond (a syscall;
        // reports go out thousands of times a second).
        let now = self.progress.now_us();
        let last = self.queue_checked.load(Ordering::Relaxed);
        if now.saturating_sub(last & !1) >= 1000 {
            let fd = self.listen_fd.load(Ordering::Acquire);
            let full = fd >= 0 && crate::server::accept_queue(fd).is_some_and(|(queued, max)| queued * 2 > max);
            self.queue_checked.store((now & !1) | u64::from(full), Ordering::Relaxed);
            return !full;
        }
        last & 1 == 0
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
            connections: (self.cfg.max_connections - self.connections.available_permits()) as u64,
            connections_max: self.cfg.max_connections as u64,
            llm_prefill_seats: match &self.cfg.load {
                LoadSource::Llm(w) => Some(u64::from(w.prefill_seats(self.inflight.prefill_tokens()))),
                _ => None,
            },
            llm_kv: match (&self.cfg.llm_kv, &self.kv) {
                (Some(k), Some(read)) => {
                    let last = read.read();
                    Some(crate::metrics::KvGauges {
                        usage: last.map_or(0, |(v, _)| v),
                        full: k.bound.full(last),
                        polls: read.polls.each_ref().map(|a| a.load(Ordering::Relaxed)),
                    })
                }
                _ => None,
            },
            apache_polls: self.scoreboard.as_ref().map(|b| (b.polls.load(Ordering::Relaxed), b.errors.load(Ordering::Relaxed))),
            fleet: self.fleet.as_ref().map(|f| f.gauges()),
            prefix: self.fleet.as_ref().is_some_and(|f| f.prefix_bytes().is_some()),
        }
    }

    /// One request from the connection whose peer is `remote` (the TCP
    /// source: with `fleet_pass_plain` it says who may mark the try).
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>, remote: SocketAddr) -> Result<Response<AgentBody>, std::convert::Infallible> {
        if req.uri().path() == self.cfg.health_path {
            return Ok(self.health().await);
        }
        let source = self.source(remote);
        let Hunt { mark, named_by_target, from_envoy, front, seen, pass, commit, stray_commit } = read_try_from(req.headers(), source);
        if stray_commit {
            // Before "I take it": nothing processed; a real forward from a
            // source no member has is served by its peer (`relay`).
            debug!(%remote, "hunt-commit from an IP that is no member's: refused, not processed");
            return Ok(plain(StatusCode::BAD_REQUEST, "huntlb agent: hunt-commit is a peer's forward, taken only from a fleet member's IP\n"));
        }
        // A front that cannot say what it counts here names itself instead:
        // what it counts is what this agent holds from it (None: a new front
        // past `MAX_FRONTS`, its count here unknown).
        let front = front.map(|f| f.key());
        let seen = seen.or_else(|| front.as_deref().and_then(|f| self.per_front.seen(f)));
        let mut req = req;
        self.forwarded_for(req.headers_mut(), remote, commit);
        if source.is_some() {
            debug!(%remote, member = source.is_some_and(|s| s.member), pass, commit, ?mark, ?seen, "try read by its source (fleet_pass_plain)");
        }
        // A peer's forward under the commit handshake (`commit`): nothing of
        // it reaches the app before its go byte; after it, the request is
        // this agent's, a final (no policy, no refusal).
        if commit {
            return Ok(match self.take_forward(&mut req, mark).await {
                Ok((held, slot)) => {
                    self.metrics.finals.fetch_add(1, Ordering::Relaxed);
                    let counted = front.as_deref().and_then(|f| self.per_front.enter(f));
                    // its prompt weighs from its go (its own Content-Length is back in its head)
                    let prefill = self.prefill(req.headers(), true);
                    self.forward_in(req, held, named_by_target, true, counted, crate::load::Slot { seat: slot, prefill }).await
                }
                Err(resp) => resp,
            });
        }
        // The forwarding tier decides an offer, or a try its front lets pass
        // (`hunt-pass`), when peers are heard and no gate is shut (a shut gate
        // refuses an offer as without it); the acceptance policy decides an
        // offer when no peer is. A passed try that stays is never refused: it
        // is plain to the policy (`read_try`).
        // With prefix affinity (`llm_prefix_bytes`) such a try's body is read
        // first, for its prompt (`prompt`): what was read goes on first,
        // wherever the try goes.
        let mut held = VecDeque::new();
        let pick = match &self.fleet {
            Some(fleet) if (mark == Mark::Offer || pass) && self.gates() == Gates::OPEN && forwardable(&req) => {
                let mut prefix = None;
                if let Some(bytes) = fleet.prefix_bytes().filter(|_| crate::prompt::readable(req.method(), req.headers())) {
                    match crate::prompt::read(req.body_mut(), bytes).await {
                        Ok(read) => (held, prefix) = (read.held, read.prefix),
                        // The client gave the request up before its body was whole: nothing went anywhere.
                        Err(e) => {
                            debug!(error = %e, "offer's body failed while read for its prompt: not processed");
                            return Ok(plain(StatusCode::BAD_REQUEST, "huntlb agent: the request's body failed\n"));
                        }
                    }
                    if prefix.is_none() {
                        self.metrics.prefix[2].fetch_add(1, Ordering::Relaxed);
                    }
                }
                let (pick, home) = fleet.pick_for(self.busy(), seen, prefix);
                if prefix.is_some() {
                    self.metrics.prefix[if home { 0 } else { 1 }].fetch_add(1, Ordering::Relaxed);
                }
                pick
            }
            _ => Pick::NoPeers,
        };
        if let Pick::Forward(to) = pick {
            // Counted for its front here, where its front counts it.
            let counted = front.as_deref().and_then(|f| self.per_front.enter(f));
            let (resp, fate) = self.relay(req, held, &to, named_by_target, counted).await;
            // Only a forward that reached no one and was served here is an
            // offer of this agent's; the rest count in huntlb_forwards_total.
            if let Some(fate) = fate {
                self.metrics.offer(fate);
            }
            return Ok(resp);
        }
        let (verdict, load) = match pick {
            Pick::Keep => (Verdict::Accept, Load { busy: self.busy(), workers: self.cfg.workers, seen }),
            _ => self.admit(mark, seen),
        };
        let m = &self.metrics;
        // Accepted while busy, with nowhere less loaded to go: the scaling
        // signal. A final was refused elsewhere first; a try the tier kept
        // here (`hunt-pass`, `fleet_pass_plain`) found no peer less loaded.
        // Under tier fronts every try is a pass: without the second term the
        // signal would stay near 0 however busy the fleet.
        let unrefusable = mark == Mark::Final || (pass && matches!(pick, Pick::Keep));
        if unrefusable && self.policy.is_busy(load) {
            m.finals_busy.fetch_add(1, Ordering::Relaxed);
        }
        if mark == Mark::Offer && verdict == Verdict::Accept {
            m.offer(Fate::Accepted);
        }
        let counter = match mark {
            Mark::Offer => None, // counted by its fate, here
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
                let counted = front.as_deref().and_then(|f| self.per_front.enter(f));
                self.forward(req, held, named_by_target, matches!(mark, Mark::Offer | Mark::Final), counted).await
            }
            Verdict::Refuse(why) => {
                let (resp, fate) = self.refuse(req, why, named_by_target, front.as_deref()).await;
                m.offer(fate);
                resp
            }
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

    /// A peer's forward (`hunt-commit`): refused at once if there is no room
    /// (425 `hunt: busy`, before "I take it": the peer serves it itself), else
    /// taken (reading its body sends `100 Continue`), and given to the app only
    /// after the go byte; the head then carries the request's own framing.
    /// It counts in this agent's load from the moment it is taken, as a try
    /// that arrived would: peers deciding meanwhile see it here.
    /// `Ok`: what came after the go byte, and its slot; `Err`: the answer, nothing processed.
    async fn take_forward(
        &self,
        req: &mut Request<Incoming>,
        mark: Mark,
    ) -> Result<(VecDeque<hyper::body::Frame<bytes::Bytes>>, crate::load::InflightGuard), Response<AgentBody>> {
        let framing = match Framing::read(req.headers()) {
            Ok(f) if mark == Mark::Final && req.version() < http::Version::HTTP_2 => f,
            Ok(_) => return Err(plain(StatusCode::BAD_REQUEST, "huntlb agent: hunt-commit is for a peer's forward (a final, over HTTP/1.1)\n")),
            Err(e) => return Err(plain(StatusCode::BAD_REQUEST, &format!("huntlb agent: {e}\n"))),
        };
        if self.gates().at_capacity {
            return Err(busy_response(true));
        }
        // A forward taken while busy is a final accepted while busy: the scaling signal.
        let busy = self.policy.is_busy(Load { busy: self.busy(), workers: self.cfg.workers, seen: None });
        let slot = self.inflight.enter();
        match await_go(req.body_mut()).await {
            Go::Given(held) => {
                self.metrics.taken_here.fetch_add(1, Ordering::Relaxed);
                if busy {
                    self.metrics.finals_busy.fetch_add(1, Ordering::Relaxed);
                }
                framing.restore(req.headers_mut());
                Ok((held, slot))
            }
            Go::Withdrawn => {
                self.metrics.withdrawn_here.fetch_add(1, Ordering::Relaxed);
                debug!("forward withdrawn by its peer before go: not processed");
                Err(plain(StatusCode::BAD_REQUEST, "huntlb agent: forward withdrawn\n"))
            }
            Go::Malformed => Err(plain(StatusCode::BAD_REQUEST, "huntlb agent: a forward's body must start with its go byte\n")),
        }
    }

    /// This try's verdict, and the load it saw: the agent knows every gate
    /// (`huntlb_policy::admit`).
    pub(crate) fn admit(&self, mark: Mark, seen: Option<u32>) -> (Verdict, Load) {
        let gates = self.gates();
        let load = Load { busy: self.busy(), workers: self.cfg.workers, seen };
        let verdict = self.policy.admit(mark.as_try(), gates, load);
        if mark == Mark::Offer {
            debug!(busy = load.busy, workers = load.workers, c = self.policy.state().c, ?gates, ?verdict, "offer");
        }
        (verdict, load)
    }

    /// With `fleet_pass_plain`, who sent a try: its connection's IP, and
    /// whether that is a member's. None: the option is off (hunt headers
    /// decide, as from a front that strips a client's).
    fn source(&self, remote: SocketAddr) -> Option<Source> {
        let fleet = self.fleet.as_ref().filter(|f| f.pass_plain())?;
        // An IPv4 client of a dual-stack socket shows as ::ffff:a.b.c.d.
        let ip = remote.ip().to_canonical();
        Some(Source { ip, member: fleet.is_member_ip(ip) })
    }

    /// `forwarded_for`: the app's `X-Forwarded-For` gets `remote`, the
    /// address this try came from, once, here, before it goes to the app or
    /// to a peer. A member's forward (`hunt-commit` from a member's IP, its
    /// proven source: never the header alone) is left as its member wrote it,
    /// so the app there sees the client and the front, as the member's own
    /// app would have, not the member.
    fn forwarded_for(&self, h: &mut http::HeaderMap, remote: SocketAddr, commit: bool) {
        let Some(ff) = &self.cfg.forwarded_for else { return };
        let ip = remote.ip().to_canonical();
        if commit && self.fleet.as_ref().is_some_and(|f| f.is_member_ip(ip)) {
            return;
        }
        ff.apply(h, ip);
    }

    pub(crate) fn gates(&self) -> Gates {
        Gates {
            draining: self.draining.load(Ordering::Acquire),
            app_down: !self.app_up.load(Ordering::Acquire),
            at_capacity: self.inflight.get() >= self.cfg.max_inflight,
        }
    }
}
