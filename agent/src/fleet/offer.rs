//! The offer's side of the tier: where an offer goes by the sample's counts
//! (`pick`) or its prefix's home (`pick_for`), what a forward's outcome does
//! to the view (`lost`, `took`), and the gauges `/metrics` reads. Each reads
//! the tables under one acquisition of the state's lock.

use super::batch::scratch;
use super::{lock, Fleet, Peer, State, BAD_REASONS, BENCH_FIRST, BENCH_MAX};
use huntlb_policy::forward::{kept_by_seen, route, Route};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::debug;

/// Where one offer goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Pick {
    /// No ready peer: the acceptance policy decides, as without a fleet.
    NoPeers,
    /// Here: this backend is the least of what it hears (or the front knew its load).
    Keep,
    /// To this member's agent, as a final.
    Forward(Target),
}

/// A member, and where its agent takes forwards: its own address, resolved
/// here, on `fleet_peer_port`. Nothing a datagram says goes into it.
#[derive(Debug, Clone)]
pub struct Target {
    pub member: SocketAddr,
    pub authority: String,
    /// This agent's forwards in flight there (`Outstanding` counts one).
    pub outstanding: Arc<AtomicU32>,
}

impl PartialEq for Target {
    fn eq(&self, o: &Target) -> bool {
        (self.member, &self.authority) == (o.member, &o.authority)
    }
}
impl Eq for Target {}

/// One forward the peer took, until its answer ends (`Fleet::took`).
pub struct Outstanding(Arc<AtomicU32>);

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The tier's gauges and counters, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gauges {
    /// Sampled members alive (`Peer::alive`) and taking forwards.
    pub peers: usize,
    /// Sampled members heard and ready, but benched by a forward not taken.
    pub benched: usize,
    /// Members asked for their count over `dead_after` ago, not heard since.
    pub unheard: usize,
    /// Members, this agent not counted.
    pub members: usize,
    /// Members sampling this agent that want every change.
    pub wanting: usize,
    pub sent: u64,
    pub taken: u64,
    pub bad: [u64; BAD_REASONS],
}

impl Fleet {
    /// Where this offer goes, by the view's ready members alive
    /// (`Peer::alive`: the sample, and the members standing in for its members
    /// not heard yet: `State::standby`).
    pub fn pick(&self, busy: u32, seen: Option<u32>) -> Pick {
        let now = Instant::now();
        // The front knew this backend's load: kept whatever the peers hold.
        // With one front every offer is such.
        if kept_by_seen(self.cfg.forwarding, busy, seen) {
            return if self.ready_peers() > 0 { Pick::Keep } else { Pick::NoPeers };
        }
        self.consult();
        self.fresh();
        let mut st = lock(&self.state);
        let mut members: Vec<SocketAddr> = st.view(now).copied().collect();
        let mut counts = Vec::with_capacity(members.len());
        let peers = &mut st.peers;
        members.retain(|member| {
            let Some(p) = peers.get_mut(member) else { return false };
            if !p.in_view(now) {
                return false;
            }
            while p.sent.front().is_some_and(|t| now.duration_since(*t) > self.cfg.settle) {
                p.sent.pop_front();
            }
            counts.push(p.count());
            true
        });
        if counts.is_empty() {
            return Pick::NoPeers;
        }
        match route(self.cfg.forwarding, busy, seen, &counts, self.draw()) {
            Route::Keep => {
                debug!(busy, ?seen, least = counts.iter().min(), peers = counts.len(), "offer kept: the least of its sample");
                Pick::Keep
            }
            Route::Forward(i) => {
                let member = members[i];
                // Why this offer was forwarded: its inputs, as `route` saw them.
                debug!(busy, ?seen, to = %member, least = counts[i], peers = counts.len(), "offer forwarded: not the least of its sample");
                let outstanding = match peers.get_mut(&member) {
                    Some(p) => {
                        p.sent.push_back(now);
                        p.outstanding.clone()
                    }
                    None => Arc::default(),
                };
                Pick::Forward(Target { member, authority: SocketAddr::new(member.ip(), self.cfg.peer_port).to_string(), outstanding })
            }
        }
    }

    /// Where an offer goes when its prompt's prefix hashed to `prefix`
    /// (prefix affinity, `llm_prefix_bytes`): to the prefix's home among every
    /// member, when the wait there is within `llm_prefix_bound` of the wait
    /// at the least this agent knows (`huntlb_policy::prefix::home`); else, or
    /// with no prefix, as [`Fleet::pick`] decides. A prefixed offer the home
    /// declined is decided by the peers' counts alone, not by its front's
    /// (`seen`): the front counts here what affinity sent to homes, so its
    /// count here says nothing of this backend's load (with one gateway it
    /// kept offers at full servers: TTFT p90 2.3x least-request's).
    /// The second value: the offer went to its prefix's home.
    pub fn pick_for(&self, busy: u32, seen: Option<u32>, prefix: Option<u64>) -> (Pick, bool) {
        match (prefix, self.cfg.affinity) {
            (Some(h), Some(a)) => match self.pick_home(busy, h, a) {
                Some(p) => (p, true),
                None => (self.pick(busy, None), false),
            },
            _ => (self.pick(busy, seen), false),
        }
    }

    /// Is this agent prefix-affine (`llm_prefix_bytes` above 0)? How many bytes of a prompt name its home.
    pub fn prefix_bytes(&self) -> Option<usize> {
        self.cfg.affinity.map(|a| a.bytes)
    }

    /// The home of `prefix`, if its count is known and the wait there within
    /// `a.bound` of the wait at the least (`huntlb_policy::prefix::home`):
    /// kept here, or forwarded there. None: the ordinary rule decides
    /// (no peer in view, the home's count unknown, or the home too busy).
    fn pick_home(&self, busy: u32, prefix: u64, a: huntlb_policy::prefix::Affinity) -> Option<Pick> {
        let now = Instant::now();
        self.consult();
        self.fresh();
        let mut st = lock(&self.state);
        let in_view: Vec<SocketAddr> = st.view(now).copied().collect();
        let State { peers, members, .. } = &mut *st;
        let settle = self.cfg.settle;
        // What this agent takes a peer to hold, if it is in view.
        let mut count = |member: &SocketAddr| -> Option<u32> {
            let p = peers.get_mut(member).filter(|p| p.in_view(now))?;
            while p.sent.front().is_some_and(|t| now.duration_since(*t) > settle) {
                p.sent.pop_front();
            }
            Some(p.count())
        };
        // the least count known: this agent's and its sample's view (what `pick` compares with)
        let view: Vec<u32> = in_view.iter().filter_map(&mut count).collect();
        if view.is_empty() {
            return None;
        }
        let least = view.into_iter().fold(busy, u32::min);
        // The home's count: its own, or any member heard (its sample's, or one that samples this agent).
        let i = huntlb_policy::prefix::home(prefix, a, &members.ids, least, |i| match members.ranked[i] {
            None => Some(busy),
            Some(m) => count(&m),
        })?;
        let Some(member) = members.ranked[i] else {
            debug!(busy, least, "offer kept: its prefix's home");
            return Some(Pick::Keep);
        };
        debug!(busy, least, to = %member, "offer forwarded: its prefix's home");
        let p = peers.get_mut(&member)?;
        p.sent.push_back(now);
        Some(Pick::Forward(Target { member, authority: SocketAddr::new(member.ip(), self.cfg.peer_port).to_string(), outstanding: p.outstanding.clone() }))
    }

    /// An offer here decides by the counts: from now on (for WANT_FOR) this
    /// agent wants every change of its sample's counts, and they hear so now:
    /// not at this agent's next change of count (`changed`), which a forward
    /// does not make, nor at its next beat, up to `fleet_heartbeat_ms` later,
    /// while they send beats only and the next offers here decide on counts
    /// that old (docs/llm.md § 6).
    fn consult(&self) {
        self.consulted_us.store(self.micros() + 1, Ordering::Relaxed);
        if !self.told_changes.swap(true, Ordering::Relaxed) {
            self.busy_now.notify_one();
            scratch(|to| {
                to.extend(lock(&self.state).subscribed());
                self.send(to)
            });
        }
    }

    /// Sampled members alive (`Peer::alive`) and taking forwards.
    pub fn ready_peers(&self) -> usize {
        lock(&self.state).ready_peers(Instant::now())
    }

    /// Sampled members heard and ready that a failed forward keeps out of the view.
    pub fn benched_peers(&self) -> usize {
        lock(&self.state).benched_peers(Instant::now())
    }

    /// Members asked for their count longer ago than a live one is given to
    /// answer (`alive_for`: `dead_after`, or while quiet a quiet beat and
    /// half a `dead_after`, since a quiet member may answer only at its next
    /// beat) with no report taken since (`Link::asked`). Not "sampled and not
    /// heard now": a member just drawn is that for a round trip, which at
    /// 1000 agents drawing 40 members a second would read as a dead member
    /// or more.
    pub fn unheard_peers(&self) -> usize {
        lock(&self.state).unheard_peers(Instant::now(), self.alive_for())
    }

    /// Members sampling this agent, renewed within `dead_after`, that want every change of our count.
    pub fn peers_wanting(&self) -> usize {
        lock(&self.state).peers_wanting(Instant::now(), self.cfg.dead_after)
    }

    /// For `/metrics`: the view as an offer now would see it, what the socket
    /// holds taken first (`fresh`), as an offer does. Else a scrape run while
    /// the reader thread waits for a core (a busy host: it reads every 10 ms
    /// at best) reads members out whose reports sit unread.
    pub fn gauges(&self) -> Gauges {
        self.fresh();
        let (now, dead_after, answer_within) = (Instant::now(), self.cfg.dead_after, self.alive_for());
        let st = lock(&self.state);
        Gauges {
            peers: st.ready_peers(now),
            benched: st.benched_peers(now),
            unheard: st.unheard_peers(now, answer_within),
            members: st.members.others.len(),
            wanting: st.peers_wanting(now, dead_after),
            sent: self.sent.load(Ordering::Relaxed),
            taken: self.taken.load(Ordering::Relaxed),
            bad: self.reports_bad(),
        }
    }

    /// A forward to `member` was not taken (no connection, no word within
    /// `fleet_commit_ms`, refused): out of the view for `BENCH_FIRST`, twice
    /// that after each failure in a row, at most `BENCH_MAX`, whatever it
    /// reports meanwhile (a member flooded with connections, or frozen, may
    /// still say it is ready).
    pub fn lost(&self, member: SocketAddr) {
        if let Some(p) = lock(&self.state).peers.get_mut(&member) {
            p.strikes = p.strikes.saturating_add(1);
            let bench = BENCH_FIRST.saturating_mul(1 << (p.strikes - 1).min(8)).min(BENCH_MAX);
            p.benched = Some(Instant::now() + bench);
            debug!(peer = %member, strikes = p.strikes, bench_ms = bench.as_millis() as u64, "peer benched: a forward was not taken");
        }
    }

    /// A forward to `target` was taken by its peer: the strikes are forgotten,
    /// and the forward counts there until its answer ends (drop the guard).
    pub fn took(&self, target: &Target) -> Outstanding {
        if let Some(p) = lock(&self.state).peers.get_mut(&target.member) {
            (p.strikes, p.benched) = (0, None);
        }
        target.outstanding.fetch_add(1, Ordering::AcqRel);
        Outstanding(target.outstanding.clone())
    }
}

/// The gauges' counts, as `Fleet`'s methods of the same names say.
impl State {
    fn ready_peers(&self, now: Instant) -> usize {
        self.view(now).filter_map(|m| self.peers.get(m)).filter(|p| p.in_view(now)).count()
    }

    fn benched_peers(&self, now: Instant) -> usize {
        let benched = |p: &&Peer| p.ready && p.alive(now) && p.benched.is_some_and(|t| now < t);
        self.view(now).filter_map(|m| self.peers.get(m)).filter(benched).count()
    }

    fn unheard_peers(&self, now: Instant, dead_after: Duration) -> usize {
        self.links.values().filter(|l| l.asked.is_some_and(|t| now.duration_since(t) > dead_after)).count()
    }

    pub(super) fn peers_wanting(&self, now: Instant, dead_after: Duration) -> usize {
        self.listeners.values().filter(|l| l.changes && now.duration_since(l.renewed) <= dead_after).count()
    }
}
