//! The forwarding tier's view of the fleet: this agent's count goes to every
//! peer on each change (and every `fleet_heartbeat_ms`), theirs come in, and
//! [`Fleet::pick`] asks the policy crate where an offer goes
//! (`huntlb_policy::forward`).
//!
//! ```text
//!  Inflight changes ──announce, on that thread──UDP "hunt-fleet/1 ..."──► every peer
//!  every peer ──UDP──► socket buffer ──read by pick (each offer) and every 10 ms──► peers: addr -> (busy, seq, ready, heard, own forwards since)
//!  offer ──► pick: ready peers heard within dead_after ──► route(busy, seen, their counts)
//! ```
//!
//! Reports are read when they are needed, not as they arrive: nothing waits
//! on the socket, so a report costs its peer a send and this agent no wakeup.
//! On the 2-core bench VM, a task woken for each of 12 agents' ~2200 reports a
//! second to 11 peers cost about half a core; `pick` reads what is queued
//! before it decides, so its view is as fresh as before.

use crate::config::{FleetConfig, Peer as PeerEntry};
use huntlb_policy::forward::{kept_by_seen, route, Report, Route};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use std::net::UdpSocket;
use tracing::{info, warn};

struct Peer {
    busy: u32,
    seq: u64,
    ready: bool,
    heard: Instant,
    /// When this agent forwarded there, for `settle`: not yet in `busy`.
    sent: VecDeque<Instant>,
}

pub struct Fleet {
    cfg: FleetConfig,
    sock: UdpSocket,
    peers: Mutex<HashMap<String, Peer>>,
    /// Each `fleet_peers` entry's addresses (names resolved, `resolve`):
    /// where our count goes, and the only senders whose reports are taken.
    resolved: Mutex<Vec<Vec<SocketAddr>>>,
    /// Starts at the clock's microseconds, so a restarted agent's reports are
    /// newer than its old ones at every peer. Locked while the count is read,
    /// so a later number always carries a later count (threads race to send).
    seq: Mutex<u64>,
    /// The tie-break stream (splitmix64 over a counter).
    draws: AtomicU64,
    /// Lines about bad datagrams (or failed reads) logged in the current 10 s window.
    bad_logged: Mutex<(Instant, u32)>,
    /// Datagrams that were not a report from a peer (`huntlb_fleet_reports_bad_total`).
    bad: AtomicU64,
    /// Held by the one thread reading the socket: an offer that finds another
    /// reading decides on the view that one is bringing up to date, instead
    /// of queueing behind it (a flood costs at most one reader).
    reading: Mutex<()>,
    /// When a count last went out to every peer, in microseconds since
    /// `born`: the heartbeat waits a beat after it.
    sent_us: AtomicU64,
    born: Instant,
    /// Peers, by the address their reports come from, whose last report
    /// wanted every change of our count, and when it was read.
    wanting: Mutex<HashMap<SocketAddr, Instant>>,
    /// When an offer here last decided by the peers' counts (microseconds
    /// since `born`, plus one; 0: never).
    consulted_us: AtomicU64,
    /// What our last report to every peer said of `wants`.
    told_wants: AtomicBool,
}

/// Who a count goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum To {
    /// A change: the peers that want every change.
    Wanting,
    /// A heartbeat: every peer.
    All,
}

/// How often queued reports are read when no offer reads them: keeps `heard`
/// within 10 ms of arrival for liveness, and the socket buffer (about 160
/// reports at Linux's default 208 KiB) from dropping the newest ones.
const READ_EVERY: Duration = Duration::from_millis(10);
/// At most this many datagrams per read: a flood cannot hold up an offer.
const READ_AT_MOST: usize = 1024;
/// An agent wants its peers' every change for this long after an offer here
/// last decided by them: a fleet whose fronts come and go does not flap.
const WANT_FOR: Duration = Duration::from_secs(10);

/// Where one offer goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Pick {
    /// No ready peer: the acceptance policy decides, as without a fleet.
    NoPeers,
    /// Here: this backend is the fleet's least (or the front knew its load).
    Keep,
    /// To the peer whose `listen` this is, as a final.
    Forward(String),
}

impl Fleet {
    pub async fn bind(cfg: FleetConfig) -> anyhow::Result<Arc<Fleet>> {
        use anyhow::Context;
        let sock = UdpSocket::bind(cfg.listen).with_context(|| format!("config key `fleet_listen`: bind {}", cfg.listen))?;
        // Never waited on: reads and sends that would block return at once.
        sock.set_nonblocking(true).context("config key `fleet_listen`: set non-blocking")?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let resolved = resolve_all(&cfg.peers, &[]).await;
        Ok(Arc::new(Fleet {
            sock,
            peers: Mutex::new(HashMap::new()),
            resolved: Mutex::new(resolved),
            seq: Mutex::new(now.as_micros() as u64),
            draws: AtomicU64::new(now.as_nanos() as u64 ^ u64::from(std::process::id()) << 32),
            bad_logged: Mutex::new((Instant::now(), 0)),
            bad: AtomicU64::new(0),
            reading: Mutex::new(()),
            sent_us: AtomicU64::new(0),
            born: Instant::now(),
            wanting: Mutex::new(HashMap::new()),
            consulted_us: AtomicU64::new(0),
            told_wants: AtomicBool::new(false),
            cfg,
        }))
    }

    /// Where this offer goes, by the ready peers heard from within `dead_after`.
    pub fn pick(&self, busy: u32, seen: Option<u32>) -> Pick {
        // The front knew this backend's load: kept whatever the peers hold, so
        // the reports queued since the last read (about 20 per offer with 12
        // agents) are left to the next tick instead of delaying this offer.
        // With one front every offer is such. Whether any peer is in the view
        // is then as of that last read, at most 10 ms old.
        if kept_by_seen(self.cfg.forwarding, busy, seen) {
            let now = Instant::now();
            let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
            let any = peers.values().any(|p| p.ready && now.duration_since(p.heard) <= self.cfg.dead_after);
            return if any { Pick::Keep } else { Pick::NoPeers };
        }
        // From now on (for WANT_FOR) this agent wants every change of its
        // peers' counts; they hear so at its next report.
        self.consulted_us.store(self.micros() + 1, Ordering::Relaxed);
        self.read_queued();
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let mut addrs = Vec::with_capacity(peers.len());
        let mut counts = Vec::with_capacity(peers.len());
        for (addr, p) in peers.iter_mut() {
            if !p.ready || now.duration_since(p.heard) > self.cfg.dead_after {
                continue;
            }
            while p.sent.front().is_some_and(|t| now.duration_since(*t) > self.cfg.settle) {
                p.sent.pop_front();
            }
            addrs.push(addr);
            counts.push(p.busy.saturating_add(p.sent.len() as u32));
        }
        if counts.is_empty() {
            return Pick::NoPeers;
        }
        match route(self.cfg.forwarding, busy, seen, &counts, self.draw()) {
            Route::Keep => Pick::Keep,
            Route::Forward(i) => {
                let addr = addrs[i].clone();
                if let Some(p) = peers.get_mut(&addr) {
                    p.sent.push_back(now);
                }
                Pick::Forward(addr)
            }
        }
    }

    /// Where peers forward to: this agent.
    pub fn advertise(&self) -> &str {
        &self.cfg.advertise
    }

    /// Datagrams dropped as not a report from a peer.
    pub fn reports_bad(&self) -> u64 {
        self.bad.load(Ordering::Relaxed)
    }

    /// Ready peers heard from within `dead_after`.
    pub fn ready_peers(&self) -> usize {
        self.read_queued();
        let now = Instant::now();
        let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        peers.values().filter(|p| p.ready && now.duration_since(p.heard) <= self.cfg.dead_after).count()
    }

    /// Peers whose reports within `dead_after` want every change of our count.
    pub fn peers_wanting(&self) -> usize {
        self.read_queued();
        let now = Instant::now();
        self.wanting.lock().unwrap_or_else(PoisonError::into_inner).values().filter(|t| now.duration_since(**t) <= self.cfg.dead_after).count()
    }

    /// A forward to `addr` found no one there, or a peer that cannot reach its
    /// app: it takes no more until it reports again.
    pub fn lost(&self, addr: &str) {
        if let Some(p) = self.peers.lock().unwrap_or_else(PoisonError::into_inner).get_mut(addr) {
            p.ready = false;
        }
    }

    fn draw(&self) -> u64 {
        // splitmix64: cheap, and distinct per agent by its seed.
        let mut z = self.draws.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Send `report()`'s count now: a change to the peers that want every
    /// change, a heartbeat to all (a change of what this agent wants goes to
    /// all too: a peer must start sending at once). Called on each change of the
    /// count, from the thread that made it: a task woken for it would add a
    /// scheduling delay, and the simulator puts the tier at 0.81x least-request
    /// with counts 0.2 ms late but 0.84x at 1 ms and 1.00x at 5 ms. Every change
    /// goes: with 12 agents at ρ 0.88 the counts sit within one of the least
    /// almost always, so sending only those near it saved 1-4% of the
    /// datagrams (measured, not kept).
    /// `report` is None once the agent is gone: nothing is sent, and false
    /// comes back.
    /// With one front, no agent wants changes (its offers are all kept by
    /// `seen`), and the tier sends heartbeats only: on the bench the counts
    /// otherwise cost the one-front tier 0.5% of its mean (0.13 ms).
    pub fn announce(&self, to: To, report: impl FnOnce() -> Option<(u32, bool)>) -> bool {
        let wants = self.wants();
        let d = {
            let mut seq = self.seq.lock().unwrap_or_else(PoisonError::into_inner);
            let Some((busy, ready)) = report() else { return false };
            *seq += 1;
            Report { addr: self.cfg.advertise.clone(), seq: *seq, busy, ready, wants }.to_string()
        };
        let all = self.told_wants.swap(wants, Ordering::Relaxed) != wants || to == To::All;
        let own = self.cfg.listen;
        let mut targets = self.targets();
        targets.retain(|p| *p != own);
        let every = targets.len();
        if !all {
            let now = Instant::now();
            let wanting = self.wanting.lock().unwrap_or_else(PoisonError::into_inner);
            targets.retain(|p| wanting.get(p).is_some_and(|t| now.duration_since(*t) <= self.cfg.dead_after));
        }
        for peer in &targets {
            // A full send buffer would block: the report is dropped, and the
            // next change or heartbeat resends.
            let _ = self.sock.send_to(d.as_bytes(), peer);
        }
        if targets.len() == every {
            self.sent_us.store(self.micros(), Ordering::Relaxed);
        }
        true
    }

    fn micros(&self) -> u64 {
        self.born.elapsed().as_micros() as u64
    }

    /// Did an offer here decide by the peers' counts within `WANT_FOR`?
    fn wants(&self) -> bool {
        let at = self.consulted_us.load(Ordering::Relaxed);
        at != 0 && self.micros().saturating_sub(at - 1) <= WANT_FOR.as_micros() as u64
    }

    /// At start, and whenever `fleet_heartbeat_ms` pass with no count sent to
    /// every peer, send the count to all (peers take silence for death); forget
    /// peers long silent. A busy agent whose peers all want its changes sends
    /// every change to all, so its beats are skipped: 12 agents' beats were 10%
    /// of the datagrams on the bench.
    pub async fn heartbeat(self: Arc<Self>, report: impl Fn() -> Option<(u32, bool)>) {
        if !self.announce(To::All, &report) {
            return;
        }
        loop {
            let since = self.born.elapsed().saturating_sub(Duration::from_micros(self.sent_us.load(Ordering::Relaxed)));
            tokio::time::sleep(self.cfg.heartbeat.saturating_sub(since)).await;
            self.forget_silent();
            let since = self.born.elapsed().saturating_sub(Duration::from_micros(self.sent_us.load(Ordering::Relaxed)));
            if since >= self.cfg.heartbeat && !self.announce(To::All, &report) {
                return;
            }
        }
    }

    /// Every peer address, once.
    fn targets(&self) -> Vec<SocketAddr> {
        let mut out: Vec<SocketAddr> = Vec::new();
        for a in self.resolved.lock().unwrap_or_else(PoisonError::into_inner).iter().flatten() {
            if !out.contains(a) {
                out.push(*a);
            }
        }
        out
    }

    /// Peers not heard from for four times `dead_after` are forgotten: a
    /// fleet that scales in and out does not grow the map `pick` walks.
    fn forget_silent(&self) {
        // What is queued counts as heard.
        self.read_queued();
        let now = Instant::now();
        let limit = self.cfg.dead_after * 4;
        self.peers.lock().unwrap_or_else(PoisonError::into_inner).retain(|_, p| now.duration_since(p.heard) <= limit);
        self.wanting.lock().unwrap_or_else(PoisonError::into_inner).retain(|_, t| now.duration_since(*t) <= limit);
    }

    /// Resolve the names in `fleet_peers` again every `fleet_resolve_ms`: a
    /// peer that joins is sent our count from then on. A name that does not
    /// resolve keeps the addresses it had (a DNS hiccup is not a fleet change).
    pub async fn resolve(self: Arc<Self>) {
        if !self.cfg.peers.iter().any(|p| matches!(p, PeerEntry::Name { .. })) {
            return;
        }
        loop {
            tokio::time::sleep(self.cfg.resolve).await;
            let old = self.resolved.lock().unwrap_or_else(PoisonError::into_inner).clone();
            let new = resolve_all(&self.cfg.peers, &old).await;
            if new != old {
                info!(peers = new.iter().flatten().count(), "fleet_peers resolved to a new set");
            }
            *self.resolved.lock().unwrap_or_else(PoisonError::into_inner) = new;
        }
    }

    /// Read queued reports every `READ_EVERY`, for when no offer does.
    pub async fn keep_up(self: Arc<Self>) {
        let mut tick = tokio::time::interval(READ_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.read_queued();
        }
    }

    /// Take every report queued on the socket (at most `READ_AT_MOST`), unless
    /// another thread is at it. A report's `heard` is when it is read here:
    /// within `READ_EVERY` of its arrival.
    fn read_queued(&self) {
        use std::io::ErrorKind::{ConnectionRefused, ConnectionReset, Interrupted, WouldBlock};
        let Ok(_reading) = self.reading.try_lock() else { return };
        let mut buf = [0u8; huntlb_policy::forward::MAX_REPORT_LEN + 1];
        for _ in 0..READ_AT_MOST {
            let (n, from) = match self.sock.recv_from(&mut buf) {
                Ok(x) => x,
                Err(e) if e.kind() == WouldBlock => return,
                // A send's ICMP error, where the platform reports one to an
                // unconnected socket (once): not about what is queued.
                Err(e) if matches!(e.kind(), ConnectionRefused | ConnectionReset | Interrupted) => continue,
                Err(e) => {
                    if self.may_log() {
                        warn!(error = %e, "fleet_listen: read failed; queued reports are read at the next offer or tick");
                    }
                    return;
                }
            };
            // Only the configured peers are heard: a report names where
            // requests will be sent, so a stray sender must not be able to.
            if !self.resolved.lock().unwrap_or_else(PoisonError::into_inner).iter().flatten().any(|a| *a == from) {
                self.bad.fetch_add(1, Ordering::Relaxed);
                self.log_bad(from, "not a peer in fleet_peers");
                continue;
            }
            match Report::parse(&buf[..n]) {
                Ok(r) if r.addr == self.cfg.advertise => {}
                Ok(r) => {
                    let mut wanting = self.wanting.lock().unwrap_or_else(PoisonError::into_inner);
                    if r.wants {
                        wanting.insert(from, Instant::now());
                    } else {
                        wanting.remove(&from);
                    }
                    drop(wanting);
                    self.heard(r);
                }
                Err(e) => {
                    self.bad.fetch_add(1, Ordering::Relaxed);
                    self.log_bad(from, &e);
                }
            }
        }
    }

    fn heard(&self, r: Report) {
        let now = Instant::now();
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        match peers.get_mut(&r.addr) {
            // Older than what we know (UDP may reorder); but a peer silent for
            // `dead_after` is taken afresh (it may have restarted after its
            // clock stepped back).
            Some(p) if r.seq <= p.seq && now.duration_since(p.heard) <= self.cfg.dead_after => {}
            Some(p) => {
                if !p.ready && r.ready {
                    info!(peer = %r.addr, "peer takes forwards again");
                }
                (p.busy, p.seq, p.ready, p.heard) = (r.busy, r.seq, r.ready, now);
            }
            None => {
                info!(peer = %r.addr, busy = r.busy, ready = r.ready, "peer heard");
                peers.insert(r.addr, Peer { busy: r.busy, seq: r.seq, ready: r.ready, heard: now, sent: VecDeque::new() });
            }
        }
    }

    /// At most 10 lines per 10 s: a stray sender must not flood the log.
    fn log_bad(&self, from: SocketAddr, e: &str) {
        if self.may_log() {
            warn!(%from, error = e, "fleet_listen: not a hunt-fleet/1 report, dropped");
        }
    }

    fn may_log(&self) -> bool {
        let mut g = self.bad_logged.lock().unwrap_or_else(PoisonError::into_inner);
        if g.0.elapsed() > Duration::from_secs(10) {
            *g = (Instant::now(), 0);
        }
        g.1 += 1;
        g.1 <= 10
    }
}

/// Each entry's addresses, in order. A name that does not resolve within 2 s
/// keeps what it had in `before` (same index).
async fn resolve_all(peers: &[PeerEntry], before: &[Vec<SocketAddr>]) -> Vec<Vec<SocketAddr>> {
    let mut out = Vec::with_capacity(peers.len());
    for (i, p) in peers.iter().enumerate() {
        out.push(match p {
            PeerEntry::Addr(a) => vec![*a],
            PeerEntry::Name { host, port } => {
                match tokio::time::timeout(Duration::from_secs(2), tokio::net::lookup_host((host.as_str(), *port))).await {
                    Ok(Ok(addrs)) => addrs.collect(),
                    failed => {
                        let why = match failed {
                            Ok(Err(e)) => e.to_string(),
                            _ => "no answer within 2 s".into(),
                        };
                        warn!(name = %host, error = %why, "fleet_peers: name does not resolve; keeping its last addresses");
                        before.get(i).cloned().unwrap_or_default()
                    }
                }
            }
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_resolve_to_every_address_and_a_failed_lookup_keeps_the_last() {
        let local = PeerEntry::Name { host: "localhost".into(), port: 9700 };
        let fixed: SocketAddr = "127.0.0.9:9700".parse().unwrap();
        let got = resolve_all(&[local, PeerEntry::Addr(fixed)], &[]).await;
        assert!(got[0].contains(&"127.0.0.1:9700".parse().unwrap()), "{got:?}");
        assert_eq!(got[1], vec![fixed]);
        // A name that does not resolve (an empty one fails at once, with no
        // query sent): the addresses it had stay.
        let gone = PeerEntry::Name { host: String::new(), port: 9701 };
        let before: SocketAddr = "127.0.0.7:9701".parse().unwrap();
        assert_eq!(resolve_all(&[PeerEntry::Addr(fixed), gone], &[vec![fixed], vec![before]]).await, vec![vec![fixed], vec![before]]);
    }

    fn cfg(listen: &str, peers: &[&str]) -> FleetConfig {
        FleetConfig {
            listen: listen.parse().unwrap(),
            peers: peers.iter().map(|p| PeerEntry::Addr(p.parse().unwrap())).collect(),
            advertise: listen.into(),
            forwarding: huntlb_policy::forward::Forwarding { slack: 0, seen_slack: None },
            heartbeat: Duration::from_secs(60),
            dead_after: Duration::from_secs(120),
            settle: Duration::ZERO,
            resolve: Duration::from_secs(1),
        }
    }

    /// Counts go out from `announce` alone (no heartbeat, no reading task
    /// runs here) and an offer reads what is queued before it decides.
    #[tokio::test]
    async fn an_offer_reads_the_counts_queued_before_it_decides() {
        let (a, b) = ("127.77.9.1:9700", "127.77.9.2:9700");
        let fa = Fleet::bind(cfg(a, &[a, b])).await.unwrap();
        let fb = Fleet::bind(cfg(b, &[a, b])).await.unwrap();
        assert_eq!(fb.pick(5, None), Pick::NoPeers, "nothing heard yet");
        assert!(fa.announce(To::All, || Some((3, true))));
        assert_eq!(fb.pick(5, None), Pick::Forward(a.into()), "A holds 3, B 5: to A");
        assert!(fa.announce(To::All, || Some((9, true))));
        assert_eq!(fb.pick(5, None), Pick::Keep, "A now holds 9");
        // A report whose agent is gone is not sent.
        assert!(!fa.announce(To::All, || None));
        assert!(fa.announce(To::All, || Some((9, false))));
        assert_eq!(fb.pick(5, None), Pick::NoPeers, "A takes no forwards");
        assert_eq!(fb.ready_peers(), 0);
        // And the other way.
        assert!(fb.announce(To::All, || Some((1, true))));
        assert_eq!(fa.ready_peers(), 1);
    }

    /// A change goes only to the peers that want it: one whose offers are all
    /// kept by `seen` does not, until an offer there decides by the counts.
    #[tokio::test]
    async fn changes_go_to_the_peers_that_want_them() {
        let (a, b) = ("127.77.9.6:9700", "127.77.9.7:9700");
        let seen = |l| FleetConfig { forwarding: huntlb_policy::forward::Forwarding { slack: 0, seen_slack: Some(1) }, ..cfg(l, &[a, b]) };
        let fa = Fleet::bind(seen(a)).await.unwrap();
        let fb = Fleet::bind(seen(b)).await.unwrap();
        assert!(fa.announce(To::All, || Some((7, true))));
        assert!(fb.announce(To::All, || Some((3, true))));
        assert_eq!(fa.ready_peers(), 1);
        assert_eq!(fb.pick(3, Some(3)), Pick::NoPeers, "kept by seen, on the view as last read: empty");
        assert_eq!(fb.ready_peers(), 1);
        assert_eq!(fb.pick(3, Some(3)), Pick::Keep, "the front knew B's load");
        // B wants nothing: A's change does not go to it, and B still sees 7.
        assert!(fa.announce(To::Wanting, || Some((1, true))));
        assert_eq!(fb.pick(5, None), Pick::Keep, "B holds 5, A as last heard 7");
        // That offer decided by the counts: B's next report says it wants them,
        // and goes to every peer, though it is a change.
        assert!(fb.announce(To::Wanting, || Some((5, true))));
        assert_eq!(fa.ready_peers(), 1);
        assert!(fa.announce(To::Wanting, || Some((1, true))));
        assert_eq!(fb.pick(5, None), Pick::Forward(a.into()), "A's change reached B: 1 against 5");
    }

    #[tokio::test]
    async fn a_stray_datagram_is_counted_and_dropped() {
        let (a, b) = ("127.77.9.3:9700", "127.77.9.4:9700");
        let fa = Fleet::bind(cfg(a, &[a, b])).await.unwrap();
        let stray = std::net::UdpSocket::bind("127.77.9.5:0").unwrap();
        stray.send_to(b"hunt-fleet/1 127.77.9.5:9700 1 0 1", a).unwrap();
        let peer = std::net::UdpSocket::bind(b).unwrap();
        peer.send_to(b"not a report", a).unwrap();
        assert_eq!(fa.ready_peers(), 0);
        assert_eq!(fa.reports_bad(), 2, "one from outside fleet_peers, one that does not parse");
        assert_eq!(fa.pick(7, None), Pick::NoPeers);
    }
}
