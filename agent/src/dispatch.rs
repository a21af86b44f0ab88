//! One request through the agent, decided here: read its hunt headers, ask the tier or the policy
//! where it goes, then refuse at once, forward to the app, or pass it to a peer.
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

//!
//! `Agent::handle` is that flow in named steps: `read_try` (what the try says
//! of itself), `serve_forward` (a peer's forward), `ask_tier` (the fleet's
//! pick), `pass_on` (to a peer), `decide` and `count` (the policy's verdict
//! and the counters it moves: the rules, tested in process), `answer` and
//! `tell_envoy`.

use crate::agent::Agent;
use crate::commit::{await_go, Framing, Go};
use crate::fleet::{Pick, Target};
use crate::headers::{forwardable, read_try_from, Hunt, Source};
use crate::load::PerFrontGuard;
use crate::metrics::Fate;
use crate::respond::{busy_response, leaves_rotation, plain, AgentBody};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use huntlb_policy::protocol::{self, Mark};
use huntlb_policy::{Gates, Load, Verdict};
use hyper::body::{Body, Frame, Incoming};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tracing::debug;

/// What went ahead of the body: read off it for its prompt, sent first wherever the try goes.
type Held = VecDeque<Frame<Bytes>>;

/// What a try says of itself, read once from its headers and its connection
/// (`read_try`): what every later step decides by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Try {
    pub(crate) mark: Mark,
    /// It carries `hunt-target` (HAProxy names its tries so; a peer's forward).
    pub(crate) named_by_target: bool,
    /// An Envoy front's: told when its backend should leave rotation.
    pub(crate) from_envoy: bool,
    /// The front it counts for (its key), if one is named or known.
    pub(crate) front: Option<Box<[u8]>>,
    /// What its front counts here: `hunt-seen`, else what this agent holds from that front.
    pub(crate) seen: Option<u32>,
    /// `hunt-pass`: the tier may pass it on; it is never refused.
    pub(crate) pass: bool,
    /// A peer's forward under the commit handshake (`hunt-commit`).
    pub(crate) commit: bool,
}

impl Agent {
    /// One request from the connection whose peer is `remote` (the TCP
    /// source: with `fleet_pass_plain` it says who may mark the try).
    pub async fn handle(self: Arc<Self>, mut req: Request<Incoming>, remote: SocketAddr) -> Result<Response<AgentBody>, Infallible> {
        if req.uri().path() == self.cfg.health_path {
            return Ok(self.health().await);
        }
        let t = match self.read_try(req.headers_mut(), remote) {
            Ok(t) => t,
            Err(why) => return Ok(plain(StatusCode::BAD_REQUEST, why)),
        };
        if t.commit {
            return Ok(self.serve_forward(req, &t).await);
        }
        let (pick, held) = match self.ask_tier(&mut req, &t).await {
            Ok(p) => p,
            Err(failed) => return Ok(failed),
        };
        if let Pick::Forward(to) = pick {
            return Ok(self.pass_on(req, held, &to, &t).await);
        }
        let (verdict, load) = self.decide(&t, &pick);
        self.count(&t, &pick, verdict, load, req.headers());
        let resp = self.answer(req, held, &t, verdict).await;
        Ok(self.tell_envoy(resp, &t, verdict))
    }

    /// Read the try's hunt headers (by its source, with `fleet_pass_plain`),
    /// and give the app's `X-Forwarded-For` its source. Err: a stray
    /// `hunt-commit`, refused (400, saying why) before anything is processed.
    pub(crate) fn read_try(&self, h: &mut HeaderMap, remote: SocketAddr) -> Result<Try, &'static str> {
        let source = self.source(remote);
        let Hunt { mark, named_by_target, from_envoy, front, seen, pass, commit, stray_commit } = read_try_from(h, source);
        if stray_commit {
            // Before "I take it": nothing processed; a real forward from a
            // source no member has is served by its peer (`relay`).
            debug!(%remote, "hunt-commit from an IP that is no member's: refused, not processed");
            return Err("huntlb agent: hunt-commit is a peer's forward, taken only from a fleet member's IP\n");
        }
        // A front that cannot say what it counts here names itself instead:
        // what it counts is what this agent holds from it (None: a new front
        // past `MAX_FRONTS`, its count here unknown).
        let front = front.map(|f| f.key());
        let seen = seen.or_else(|| front.as_deref().and_then(|f| self.per_front.seen(f)));
        self.forwarded_for(h, remote, commit);
        if source.is_some() {
            debug!(%remote, member = source.is_some_and(|s| s.member), pass, commit, ?mark, ?seen, "try read by its source (fleet_pass_plain)");
        }
        Ok(Try { mark, named_by_target, from_envoy, front, seen, pass, commit })
    }

    /// A peer's forward under the commit handshake: nothing of it reaches the
    /// app before its go byte; after it, the request is this agent's, a final
    /// (no policy, no refusal).
    async fn serve_forward(&self, mut req: Request<Incoming>, t: &Try) -> Response<AgentBody> {
        match self.take_forward(&mut req, t.mark).await {
            Ok((held, slot)) => {
                self.metrics.finals.fetch_add(1, Ordering::Relaxed);
                let counted = self.enter_front(t);
                // its prompt weighs from its go (its own Content-Length is back in its head)
                let prefill = self.prefill(req.headers(), true);
                self.pass_to_app_in(req, held, t.named_by_target, true, counted, crate::load::Slot { seat: slot, prefill }).await
            }
            Err(resp) => resp,
        }
    }

    /// The forwarding tier decides an offer, or a try its front lets pass
    /// (`hunt-pass`), when peers are heard and no gate is shut (a shut gate
    /// refuses an offer as without it); the acceptance policy decides an
    /// offer when no peer is. A passed try that stays is never refused: it
    /// is plain to the policy (`read_try`).
    /// With prefix affinity (`llm_prefix_bytes`) such a try's body is read
    /// first, for its prompt (`prompt`): what was read goes on first,
    /// wherever the try goes. Err: the body failed while read.
    async fn ask_tier(&self, req: &mut Request<Incoming>, t: &Try) -> Result<(Pick, Held), Response<AgentBody>> {
        let mut held = VecDeque::new();
        let pick = match &self.fleet {
            Some(fleet) if (t.mark == Mark::Offer || t.pass) && self.gates() == Gates::OPEN && forwardable(req) => {
                let mut prefix = None;
                if let Some(bytes) = fleet.prefix_bytes().filter(|_| crate::prompt::readable(req.method(), req.headers())) {
                    match crate::prompt::read(req.body_mut(), bytes).await {
                        Ok(read) => (held, prefix) = (read.held, read.prefix),
                        // The client gave the request up before its body was whole: nothing went anywhere.
                        Err(e) => {
                            debug!(error = %e, "offer's body failed while read for its prompt: not processed");
                            return Err(plain(StatusCode::BAD_REQUEST, "huntlb agent: the request's body failed\n"));
                        }
                    }
                    if prefix.is_none() {
                        self.metrics.prefix[2].fetch_add(1, Ordering::Relaxed);
                    }
                }
                let busy = self.busy();
                // `llm_seen_while_free`: a front's count keeps a try only while a seat is free here
                let seen = if self.cfg.llm_seen_while_free { huntlb_policy::llm::seen_while_free(busy, self.cfg.workers, t.seen) } else { t.seen };
                let (pick, home) = fleet.pick_for(busy, seen, prefix);
                if prefix.is_some() {
                    self.metrics.prefix[if home { 0 } else { 1 }].fetch_add(1, Ordering::Relaxed);
                }
                pick
            }
            _ => Pick::NoPeers,
        };
        Ok((pick, held))
    }

    /// To the peer the tier picked, as a final (`relay`).
    async fn pass_on(&self, req: Request<Incoming>, held: Held, to: &Target, t: &Try) -> Response<AgentBody> {
        // Counted for its front here, where its front counts it.
        let counted = self.enter_front(t);
        let (resp, fate) = self.relay(req, held, to, t.named_by_target, counted).await;
        // Only a forward that reached no one and was served here is an
        // offer of this agent's; the rest count in huntlb_forwards_total.
        if let Some(fate) = fate {
            self.metrics.offer(fate);
        }
        resp
    }

    /// The verdict on a try that stays: accepted if the tier kept it (the
    /// least of its sample), else the policy's (`admit`); and the load seen.
    pub(crate) fn decide(&self, t: &Try, pick: &Pick) -> (Verdict, Load) {
        match pick {
            Pick::Keep => (Verdict::Accept, Load { busy: self.busy(), workers: self.cfg.workers, seen: t.seen }),
            _ => self.admit(t.mark, t.seen),
        }
    }

    /// The counters a verdict moves (`h`: the try's headers, for the log line of a malformed one).
    pub(crate) fn count(&self, t: &Try, pick: &Pick, verdict: Verdict, load: Load, h: &HeaderMap) {
        let m = &self.metrics;
        // Accepted while busy, with nowhere less loaded to go: the scaling
        // signal. A final was refused elsewhere first; a try the tier kept
        // here (`hunt-pass`, `fleet_pass_plain`) found no peer less loaded.
        // Under tier fronts every try is a pass: without the second term the
        // signal would stay near 0 however busy the fleet.
        let unrefusable = t.mark == Mark::Final || (t.pass && matches!(pick, Pick::Keep));
        if unrefusable && self.policy.is_busy(load) {
            m.finals_busy.fetch_add(1, Ordering::Relaxed);
        }
        if t.mark == Mark::Offer && verdict == Verdict::Accept {
            m.offer(Fate::Accepted);
        }
        let counter = match t.mark {
            Mark::Offer => None, // counted by its fate, here
            Mark::Final => Some(&m.finals),
            Mark::Plain => Some(&m.plain),
            Mark::Malformed => {
                debug!(offer = ?h.get(protocol::OFFER), target = ?h.get(protocol::TARGET), "malformed hunt headers: treated as final");
                Some(&m.malformed)
            }
        };
        if let Some(n) = counter {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The verdict carried out: to the app, refused (`hunt: busy`), or no room.
    async fn answer(&self, req: Request<Incoming>, held: Held, t: &Try, verdict: Verdict) -> Response<AgentBody> {
        match verdict {
            Verdict::Accept => {
                // Counted for its front until its response body ends, as the
                // front counts it (Envoy: until the stream completes).
                let counted = self.enter_front(t);
                self.pass_to_app(req, held, t.named_by_target, matches!(t.mark, Mark::Offer | Mark::Final), counted).await
            }
            Verdict::Refuse(why) => {
                let (resp, fate) = self.refuse(req, why, t.named_by_target, t.front.as_deref()).await;
                self.metrics.offer(fate);
                resp
            }
            // A peer's forward that finds no room reached no app: refused, and
            // the peer refuses it to its front, which re-sends it (counted
            // there, in `huntlb_forwards_total{outcome="refused"}`: it was no
            // offer here).
            Verdict::Overloaded if t.mark == Mark::Final && req.headers().contains_key(protocol::VIA) => {
                busy_response(req.version() < http::Version::HTTP_2 && !req.body().is_end_stream())
            }
            Verdict::Overloaded => plain(StatusCode::SERVICE_UNAVAILABLE, "huntlb agent: max_inflight reached\n"),
        }
    }

    /// An Envoy front is told when this backend should leave its rotation.
    fn tell_envoy(&self, mut resp: Response<AgentBody>, t: &Try, verdict: Verdict) -> Response<AgentBody> {
        if t.from_envoy && leaves_rotation(&resp, verdict) {
            resp.headers_mut().insert(protocol::ENVOY_HC_FAIL, HeaderValue::from_static("true"));
        }
        resp
    }

    /// The try counted for its front while it is here (None: no front known).
    fn enter_front(&self, t: &Try) -> Option<PerFrontGuard> {
        t.front.as_deref().and_then(|f| self.per_front.enter(f))
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
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;
