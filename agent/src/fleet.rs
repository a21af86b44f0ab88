//! The forwarding tier's view of the fleet: this agent's count goes to its
//! members on each change (and every `fleet_heartbeat_ms`), theirs come in,
//! and [`Fleet::pick`] asks the policy crate where an offer goes
//! (`huntlb_policy::forward`).
//!
//! ```text
//!  Inflight changes ──announce, on that thread──UDP sealed "hunt-fleet/2 ..."──► members that want it
//!  members ──UDP──► socket (buffer sized for the fleet) ──reader thread: member? sealed? newer?──► peers: member -> (busy, seq, ready, heard, own forwards since)
//!  offer ──► pick: ready members heard within dead_after ──► route(busy, seen, their counts) ──► member's IP : fleet_peer_port
//! ```
//!
//! Trust (docs/protocol.md, "Trust"): a datagram is believed only if its source
//! is a member (an address `fleet_peers` resolves to), its MAC checks under
//! the shared key, the member it names is its source, and it is newer than the
//! last heard from that member. Even then it carries facts about its sender
//! (a count, whether it takes forwards, whether it wants changes), never where
//! a request goes: a forward goes to the member's own address, as resolved
//! here, on the configured port. The table is keyed by member, so it holds
//! at most as many entries as `fleet_peers` resolves to.
//!
//! Reports are read by a thread of their own, off the offer path: every 10 ms,
//! and when an offer about to decide by the counts asks for them fresh (it
//! waits at most 0.5 ms). An offer reads the table under one short lock and
//! never touches the socket, so a flood of junk on the fleet port costs the
//! reader, not the offers.

use crate::config::{FleetConfig, Peer as PeerEntry};
use crate::seal::Keys;
use huntlb_policy::forward::{kept_by_seen, open, route, seal, Rejected, Report, Route};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::{HashMap, HashSet, VecDeque};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::{error, info, warn};

struct Peer {
    busy: u32,
    seq: u64,
    ready: bool,
    heard: Instant,
    /// When this agent forwarded there, for `settle`: not yet in `busy`.
    sent: VecDeque<Instant>,
}

/// Why a datagram was dropped, in `huntlb_fleet_reports_bad_total`'s label order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    Stranger = 0,
    Malformed = 1,
    Unauthenticated = 2,
    Replayed = 3,
}

/// At most this many members (addresses `fleet_peers` resolves to): what a
/// DNS answer can add to the table and to each change's sends is bounded.
pub const MAX_MEMBERS: usize = 4096;

pub struct Fleet {
    cfg: FleetConfig,
    sock: Socket,
    keys: RwLock<Keys>,
    /// Members' last reports, by member address; only members have entries.
    peers: Mutex<HashMap<SocketAddr, Peer>>,
    /// Each `fleet_peers` entry's addresses (names resolved, `resolve`), and
    /// all of them as a set: where our count goes, and the only senders heard.
    members: RwLock<(Vec<Vec<SocketAddr>>, HashSet<SocketAddr>)>,
    /// Starts at the clock's microseconds, so a restarted agent's reports are
    /// newer than its old ones at every peer. Locked while the count is read,
    /// so a later number always carries a later count (threads race to send).
    seq: Mutex<u64>,
    /// The tie-break stream (splitmix64 over a counter).
    draws: AtomicU64,
    /// Lines about bad datagrams (or failed reads) logged in the current 10 s window.
    bad_logged: Mutex<(Instant, u32)>,
    /// Datagrams dropped, by `Bad`.
    bad: [AtomicU64; 4],
    /// When a count last went out to every member, in microseconds since
    /// `born`: the heartbeat waits a beat after it.
    sent_us: AtomicU64,
    born: Instant,
    /// Members whose last report wanted every change of our count, and when it was read.
    wanting: Mutex<HashMap<SocketAddr, Instant>>,
    /// When an offer here last decided by the peers' counts (microseconds
    /// since `born`, plus one; 0: never).
    consulted_us: AtomicU64,
    /// What our last report to every member said of `wants`.
    told_wants: AtomicBool,
    /// Offers' asks for a fresh view, and the reader's answers (`fresh`).
    asks: Mutex<Asks>,
    asked: Condvar,
    drained: Condvar,
}

/// How many times offers asked the reader to drain, and up to which ask it has.
#[derive(Default)]
struct Asks {
    asked: u64,
    done: u64,
}

/// Who a count goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum To {
    /// A change: the members that want every change.
    Wanting,
    /// A heartbeat: every member.
    All,
}

/// An agent wants its peers' every change for this long after an offer here
/// last decided by them: a fleet whose fronts come and go does not flap.
const WANT_FOR: Duration = Duration::from_secs(10);
/// The receive buffer asked for, per member: a burst of this many reports
/// from each (about 768 bytes each in the kernel's accounting) waits unread
/// without loss. Linux caps it at `net.core.rmem_max` (a warning says so).
const BUFFERED_PER_MEMBER: usize = 64;
const MIN_RCVBUF: usize = 1 << 20;
/// The reader takes what is queued at least this often: a report counts as
/// heard within this of its arrival (liveness), and the socket's buffer holds
/// what comes in between.
const READ_EVERY: Duration = Duration::from_millis(10);
/// An offer waits this long at most for the reader (`Fleet::fresh`).
const ASK_WAIT: Duration = Duration::from_micros(500);
/// At most this many datagrams per pass: a flood cannot keep the reader from
/// answering the offers that asked.
const READ_AT_MOST: usize = 1024;
/// How often the key file is looked at for a rotation.
const KEYS_EVERY: Duration = Duration::from_secs(2);

/// Where one offer goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Pick {
    /// No ready peer: the acceptance policy decides, as without a fleet.
    NoPeers,
    /// Here: this backend is the fleet's least (or the front knew its load).
    Keep,
    /// To this member's agent, as a final.
    Forward(Target),
}

/// A member, and where its agent takes forwards: its own address, resolved
/// here, on `fleet_peer_port`. Nothing a datagram says goes into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub member: SocketAddr,
    pub authority: String,
}

impl Fleet {
    pub async fn bind(cfg: FleetConfig) -> anyhow::Result<Arc<Fleet>> {
        use anyhow::Context;
        let sock = Socket::new(Domain::for_address(cfg.listen), Type::DGRAM, Some(Protocol::UDP)).context("config key `fleet_listen`: socket")?;
        sock.bind(&SockAddr::from(cfg.listen)).with_context(|| format!("config key `fleet_listen`: bind {}", cfg.listen))?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let resolved = resolve_all(&cfg.peers, &[]).await;
        let fleet = Fleet {
            sock,
            keys: RwLock::new(cfg.keys.clone()),
            peers: Mutex::new(HashMap::new()),
            members: RwLock::new((Vec::new(), HashSet::new())),
            seq: Mutex::new(now.as_micros() as u64),
            draws: AtomicU64::new(now.as_nanos() as u64 ^ u64::from(std::process::id()) << 32),
            bad_logged: Mutex::new((Instant::now(), 0)),
            bad: Default::default(),
            sent_us: AtomicU64::new(0),
            born: Instant::now(),
            wanting: Mutex::new(HashMap::new()),
            consulted_us: AtomicU64::new(0),
            told_wants: AtomicBool::new(false),
            asks: Mutex::new(Asks::default()),
            asked: Condvar::new(),
            drained: Condvar::new(),
            cfg,
        };
        fleet.set_members(resolved);
        let fleet = Arc::new(fleet);
        let reader = fleet.clone();
        std::thread::Builder::new().name("huntlb-fleet".into()).spawn(move || reader.read_forever()).context("fleet_listen: reader thread")?;
        Ok(fleet)
    }

    /// Where this offer goes, by the ready members heard from within `dead_after`.
    pub fn pick(&self, busy: u32, seen: Option<u32>) -> Pick {
        let now = Instant::now();
        // The front knew this backend's load: kept whatever the peers hold.
        // With one front every offer is such.
        if kept_by_seen(self.cfg.forwarding, busy, seen) {
            let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
            let any = peers.values().any(|p| p.ready && now.duration_since(p.heard) <= self.cfg.dead_after);
            return if any { Pick::Keep } else { Pick::NoPeers };
        }
        // From now on (for WANT_FOR) this agent wants every change of its
        // peers' counts; they hear so at its next report.
        self.consulted_us.store(self.micros() + 1, Ordering::Relaxed);
        self.fresh();
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        let mut members = Vec::with_capacity(peers.len());
        let mut counts = Vec::with_capacity(peers.len());
        for (member, p) in peers.iter_mut() {
            if !p.ready || now.duration_since(p.heard) > self.cfg.dead_after {
                continue;
            }
            while p.sent.front().is_some_and(|t| now.duration_since(*t) > self.cfg.settle) {
                p.sent.pop_front();
            }
            members.push(*member);
            counts.push(p.busy.saturating_add(p.sent.len() as u32));
        }
        if counts.is_empty() {
            return Pick::NoPeers;
        }
        match route(self.cfg.forwarding, busy, seen, &counts, self.draw()) {
            Route::Keep => Pick::Keep,
            Route::Forward(i) => {
                let member = members[i];
                if let Some(p) = peers.get_mut(&member) {
                    p.sent.push_back(now);
                }
                Pick::Forward(Target { member, authority: SocketAddr::new(member.ip(), self.cfg.peer_port).to_string() })
            }
        }
    }

    /// This agent as it names itself on what it forwards (`hunt-via`).
    pub fn advertise(&self) -> &str {
        &self.cfg.advertise
    }

    /// Datagrams dropped, by reason (`Bad`'s order).
    pub fn reports_bad(&self) -> [u64; 4] {
        self.bad.each_ref().map(|a| a.load(Ordering::Relaxed))
    }

    /// Ready members heard from within `dead_after`.
    pub fn ready_peers(&self) -> usize {
        let now = Instant::now();
        let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        peers.values().filter(|p| p.ready && now.duration_since(p.heard) <= self.cfg.dead_after).count()
    }

    /// Members whose reports within `dead_after` want every change of our count.
    pub fn peers_wanting(&self) -> usize {
        let now = Instant::now();
        self.wanting.lock().unwrap_or_else(PoisonError::into_inner).values().filter(|t| now.duration_since(**t) <= self.cfg.dead_after).count()
    }

    /// A forward to `member` found no one there, or a peer that cannot reach
    /// its app: it takes no more until it reports again.
    pub fn lost(&self, member: SocketAddr) {
        if let Some(p) = self.peers.lock().unwrap_or_else(PoisonError::into_inner).get_mut(&member) {
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

    /// Send `report()`'s count now, sealed: a change to the members that want
    /// every change, a heartbeat to all (a change of what this agent wants
    /// goes to all too: a peer must start sending at once). Called on each
    /// change of the count, from the thread that made it: a task woken for it
    /// would add a scheduling delay, and the simulator puts the tier at 0.81x
    /// least-request with counts 0.2 ms late but 0.84x at 1 ms and 1.00x at 5 ms.
    /// `report` is None once the agent is gone: nothing is sent, and false
    /// comes back. With one front, no agent wants changes (its offers are all
    /// kept by `seen`), and the tier sends heartbeats only.
    pub fn announce(&self, to: To, report: impl FnOnce() -> Option<(u32, bool)>) -> bool {
        let wants = self.wants();
        let text = {
            let mut seq = self.seq.lock().unwrap_or_else(PoisonError::into_inner);
            let Some((busy, ready)) = report() else { return false };
            *seq += 1;
            Report { from: self.cfg.from.to_string(), seq: *seq, busy, ready, wants }.to_string()
        };
        let d = seal(&text, &self.keys.read().unwrap_or_else(PoisonError::into_inner).tag(text.as_bytes()));
        let all = self.told_wants.swap(wants, Ordering::Relaxed) != wants || to == To::All;
        let mut targets = self.targets();
        let every = targets.len();
        if !all {
            let now = Instant::now();
            let wanting = self.wanting.lock().unwrap_or_else(PoisonError::into_inner);
            targets.retain(|p| wanting.get(p).is_some_and(|t| now.duration_since(*t) <= self.cfg.dead_after));
        }
        for peer in &targets {
            // Never waits: a full send buffer drops the report, and the next
            // change or heartbeat resends.
            let _ = self.sock.send_to_with_flags(d.as_bytes(), &SockAddr::from(*peer), libc::MSG_DONTWAIT);
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
    /// every member, send the count to all (peers take silence for death);
    /// look at the key file for a rotation. A busy agent whose peers all want
    /// its changes sends every change to all, so its beats are skipped.
    pub async fn heartbeat(self: Arc<Self>, report: impl Fn() -> Option<(u32, bool)>) {
        if !self.announce(To::All, &report) {
            return;
        }
        let mut keys_at = Instant::now();
        loop {
            let since = self.born.elapsed().saturating_sub(Duration::from_micros(self.sent_us.load(Ordering::Relaxed)));
            tokio::time::sleep(self.cfg.heartbeat.saturating_sub(since)).await;
            if keys_at.elapsed() >= KEYS_EVERY {
                keys_at = Instant::now();
                self.reload_keys();
            }
            let since = self.born.elapsed().saturating_sub(Duration::from_micros(self.sent_us.load(Ordering::Relaxed)));
            if since >= self.cfg.heartbeat && !self.announce(To::All, &report) {
                return;
            }
        }
    }

    fn reload_keys(&self) {
        let current = self.keys.read().unwrap_or_else(PoisonError::into_inner).clone();
        match current.reload_if_changed(&self.cfg.key_file) {
            Ok(None) => {}
            Ok(Some(k)) => {
                info!(keys = k.len(), "fleet_key_file changed: reports sealed with its first key, taken under any");
                *self.keys.write().unwrap_or_else(PoisonError::into_inner) = k;
            }
            Err(e) => error!(error = %e, "config key `fleet_key_file`: does not load; the keys in use stay"),
        }
    }

    /// Every member address but this agent's own, once.
    fn targets(&self) -> Vec<SocketAddr> {
        let members = self.members.read().unwrap_or_else(PoisonError::into_inner);
        members.1.iter().copied().filter(|a| *a != self.cfg.from && *a != self.cfg.listen).collect()
    }

    /// Take a new member list: the table and the wanting set keep only
    /// members, and the socket's buffer is sized for them.
    fn set_members(&self, resolved: Vec<Vec<SocketAddr>>) {
        let mut set = HashSet::new();
        for a in resolved.iter().flatten() {
            if set.len() == MAX_MEMBERS {
                warn!(max = MAX_MEMBERS, "fleet_peers resolves to more addresses than the tier takes; the rest are no members");
                break;
            }
            set.insert(*a);
        }
        let want = (set.len() * BUFFERED_PER_MEMBER * 768).max(MIN_RCVBUF);
        if self.sock.recv_buffer_size().is_ok_and(|have| have < want) {
            let _ = self.sock.set_recv_buffer_size(want);
            // Linux doubles what it grants (bookkeeping): half is the data.
            let got = self.sock.recv_buffer_size().unwrap_or(0) / 2;
            if got < want / 2 {
                warn!(asked = want, got, members = set.len(), "fleet_listen: receive buffer capped by net.core.rmem_max; a burst of reports may be dropped (raise it: sysctl -w net.core.rmem_max={want})");
            }
        }
        self.peers.lock().unwrap_or_else(PoisonError::into_inner).retain(|k, _| set.contains(k));
        self.wanting.lock().unwrap_or_else(PoisonError::into_inner).retain(|k, _| set.contains(k));
        *self.members.write().unwrap_or_else(PoisonError::into_inner) = (resolved, set);
    }

    /// Resolve the names in `fleet_peers` again every `fleet_resolve_ms`: a
    /// member that joins is sent our count from then on, one that leaves is
    /// forgotten. A name that does not resolve keeps the addresses it had (a
    /// DNS hiccup is not a fleet change). DNS decides who is a member, so it
    /// is trusted as far as that: a forged answer adds a member, whose reports
    /// still need the key (docs/protocol.md, "Trust").
    pub async fn resolve(self: Arc<Self>) {
        if !self.cfg.peers.iter().any(|p| matches!(p, PeerEntry::Name { .. })) {
            return;
        }
        loop {
            tokio::time::sleep(self.cfg.resolve).await;
            let old = self.members.read().unwrap_or_else(PoisonError::into_inner).0.clone();
            let new = resolve_all(&self.cfg.peers, &old).await;
            if new != old {
                info!(members = new.iter().flatten().count(), "fleet_peers resolved to a new set");
                self.set_members(new);
            }
        }
    }

    /// The reader thread: it drains the socket every `READ_EVERY` (liveness,
    /// and a buffer that must not drop the newest) and whenever an offer
    /// about to decide by the counts asks (`fresh`). Reading when asked, not
    /// on each arrival: a wakeup per datagram (about 2000 a second per agent
    /// with 12 agents and 4 fronts at ρ 0.88) took the tier's agents from 0.34
    /// to 0.57 of a core on the 2-core bench and cost 2.5% of the mean; reading
    /// every 2 ms instead left counts up to 2 ms old and cost 6%.
    fn read_forever(&self) {
        let mut buf = [MaybeUninit::<u8>::uninit(); huntlb_policy::forward::MAX_REPORT_LEN + 1];
        let mut asks = self.asks.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            asks = self.asked.wait_timeout_while(asks, READ_EVERY, |a| a.asked == a.done).unwrap_or_else(PoisonError::into_inner).0;
            let target = asks.asked;
            drop(asks);
            self.drain(&mut buf);
            asks = self.asks.lock().unwrap_or_else(PoisonError::into_inner);
            asks.done = target;
            self.drained.notify_all();
        }
    }

    /// Take what is queued on the socket, at most `READ_AT_MOST`.
    fn drain(&self, buf: &mut [MaybeUninit<u8>]) {
        for _ in 0..READ_AT_MOST {
            match self.sock.recv_from_with_flags(buf, libc::MSG_DONTWAIT) {
                Ok((n, from)) => {
                    // SAFETY: recv_from initialised the first n bytes.
                    let d = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
                    if let Some(from) = from.as_socket() {
                        self.take(d, from);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                // A send's ICMP error, where the platform reports one to an
                // unconnected socket: not about what is queued.
                Err(e) if matches!(e.kind(), std::io::ErrorKind::Interrupted | std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset) => {}
                Err(e) => {
                    if self.may_log() {
                        warn!(error = %e, "fleet_listen: read failed");
                    }
                    return;
                }
            }
        }
    }

    /// Before an offer decides by the counts: have the reader take what is
    /// queued, and wait for it at most `ASK_WAIT` (a flood of junk on the port
    /// costs the reader, and an offer this much at most).
    fn fresh(&self) {
        let mut asks = self.asks.lock().unwrap_or_else(PoisonError::into_inner);
        asks.asked += 1;
        let want = asks.asked;
        self.asked.notify_one();
        let _ = self.drained.wait_timeout_while(asks, ASK_WAIT, |a| a.done < want);
    }

    /// One datagram: believed only from a member, sealed under a key held,
    /// naming its source as its sender, and newer than the last from it.
    fn take(&self, d: &[u8], from: SocketAddr) {
        if !self.members.read().unwrap_or_else(PoisonError::into_inner).1.contains(&from) {
            return self.drop_bad(Bad::Stranger, from, "source is no member of fleet_peers");
        }
        let r = {
            let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
            open(d, |text, tag| keys.verify(text, tag))
        };
        let r = match r {
            Ok(r) => r,
            Err(Rejected::Unauthenticated) => return self.drop_bad(Bad::Unauthenticated, from, "MAC matches no key in fleet_key_file"),
            Err(Rejected::Malformed(e)) => return self.drop_bad(Bad::Malformed, from, &e),
        };
        // A recorded report sent again from another member's address.
        if r.from.parse::<SocketAddr>().ok() != Some(from) {
            return self.drop_bad(Bad::Replayed, from, "names another sender than its source");
        }
        if from == self.cfg.from {
            return;
        }
        let now = Instant::now();
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        match peers.get_mut(&from) {
            // Not newer than what we know: reordered by UDP, or replayed.
            // (A peer restarts with a larger sequence: its clock's.)
            Some(p) if r.seq <= p.seq => {
                drop(peers);
                return self.drop_bad(Bad::Replayed, from, "not newer than the last report from this member");
            }
            Some(p) => {
                if !p.ready && r.ready {
                    info!(peer = %from, "peer takes forwards again");
                }
                (p.busy, p.seq, p.ready, p.heard) = (r.busy, r.seq, r.ready, now);
            }
            None => {
                info!(peer = %from, busy = r.busy, ready = r.ready, "peer heard");
                peers.insert(from, Peer { busy: r.busy, seq: r.seq, ready: r.ready, heard: now, sent: VecDeque::new() });
            }
        }
        drop(peers);
        let mut wanting = self.wanting.lock().unwrap_or_else(PoisonError::into_inner);
        if r.wants {
            wanting.insert(from, now);
        } else {
            wanting.remove(&from);
        }
    }

    /// Counted; at most 10 lines per 10 s, so a flood cannot fill the log.
    fn drop_bad(&self, why: Bad, from: SocketAddr, e: &str) {
        self.bad[why as usize].fetch_add(1, Ordering::Relaxed);
        if self.may_log() {
            warn!(%from, reason = ?why, error = e, "fleet_listen: datagram dropped");
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

    const KEY: &str = "0123456789abcdef0123456789abcdef-test";

    /// Written once: tests run at once, and one must not read it half written.
    fn key_file() -> String {
        static FILE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        FILE.get_or_init(|| {
            let p = std::env::temp_dir().join(format!("huntlb-fleet-test-{}.key", std::process::id()));
            std::fs::write(&p, KEY).unwrap();
            p.to_string_lossy().into_owned()
        })
        .clone()
    }

    fn cfg(listen: &str, peers: &[&str]) -> FleetConfig {
        let key_file = key_file();
        FleetConfig {
            listen: listen.parse().unwrap(),
            peers: peers.iter().map(|p| PeerEntry::Addr(p.parse().unwrap())).collect(),
            advertise: listen.into(),
            from: listen.parse().unwrap(),
            peer_port: 8080,
            keys: Keys::load(&key_file).unwrap(),
            tls: None,
            key_file,
            forwarding: huntlb_policy::forward::Forwarding { slack: 0, seen_slack: None },
            heartbeat: Duration::from_secs(60),
            dead_after: Duration::from_secs(120),
            settle: Duration::ZERO,
            resolve: Duration::from_secs(1),
        }
    }

    /// The reader thread takes datagrams as they come: wait (bounded) for it.
    fn soon(what: &str, mut ok: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(5);
        while !ok() {
            assert!(Instant::now() < until, "not within 5 s: {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn forward_to(member: &str) -> Pick {
        let member: SocketAddr = member.parse().unwrap();
        Pick::Forward(Target { member, authority: SocketAddr::new(member.ip(), 8080).to_string() })
    }

    /// Counts go out from `announce` alone (no heartbeat runs here); an offer
    /// decides on what the reader thread has taken.
    #[tokio::test]
    async fn an_offer_goes_to_the_least_member_at_its_own_address() {
        let (a, b) = ("127.77.9.1:9700", "127.77.9.2:9700");
        let fa = Fleet::bind(cfg(a, &[a, b])).await.unwrap();
        let fb = Fleet::bind(cfg(b, &[a, b])).await.unwrap();
        assert_eq!(fb.pick(5, None), Pick::NoPeers, "nothing heard yet");
        assert!(fa.announce(To::All, || Some((3, true))));
        soon("A heard at B", || fb.ready_peers() == 1);
        assert_eq!(fb.pick(5, None), forward_to(a), "A holds 3, B 5: to A's agent, at A's address");
        assert!(fa.announce(To::All, || Some((9, true))));
        soon("A's 9", || fb.pick(5, None) == Pick::Keep);
        // A report whose agent is gone is not sent.
        assert!(!fa.announce(To::All, || None));
        assert!(fa.announce(To::All, || Some((9, false))));
        soon("A not ready", || fb.ready_peers() == 0);
        assert_eq!(fb.pick(5, None), Pick::NoPeers, "A takes no forwards");
        // And the other way.
        assert!(fb.announce(To::All, || Some((1, true))));
        soon("B heard at A", || fa.ready_peers() == 1);
        assert_eq!(fa.reports_bad(), [0; 4]);
    }

    /// A change goes only to the members that want it: one whose offers are
    /// all kept by `seen` does not, until an offer there decides by the counts.
    #[tokio::test]
    async fn changes_go_to_the_peers_that_want_them() {
        let (a, b) = ("127.77.9.6:9700", "127.77.9.7:9700");
        let seen = |l| FleetConfig { forwarding: huntlb_policy::forward::Forwarding { slack: 0, seen_slack: Some(1) }, ..cfg(l, &[a, b]) };
        let fa = Fleet::bind(seen(a)).await.unwrap();
        let fb = Fleet::bind(seen(b)).await.unwrap();
        assert!(fa.announce(To::All, || Some((7, true))));
        assert!(fb.announce(To::All, || Some((3, true))));
        soon("both heard", || fa.ready_peers() == 1 && fb.ready_peers() == 1);
        assert_eq!(fb.pick(3, Some(3)), Pick::Keep, "the front knew B's load");
        // B wants nothing: A's change does not go to it, and B still sees 7.
        assert!(fa.announce(To::Wanting, || Some((1, true))));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(fb.pick(5, None), Pick::Keep, "B holds 5, A as last heard 7");
        // That offer decided by the counts: B's next report says it wants them,
        // and goes to every member, though it is a change.
        assert!(fb.announce(To::Wanting, || Some((5, true))));
        soon("A knows B wants", || fa.peers_wanting() == 1);
        assert!(fa.announce(To::Wanting, || Some((1, true))));
        soon("A's change at B", || fb.pick(5, None) == forward_to(a));
    }

    /// Attackers on the fleet port: a stranger, a member's address without the
    /// key, a replay, a report naming another sender. None reaches the table.
    #[tokio::test]
    async fn only_sealed_new_reports_from_members_are_taken() {
        use std::net::UdpSocket;
        let (a, b, c) = ("127.77.9.3:9700", "127.77.9.4:9700", "127.77.9.5:9700");
        let fa = Fleet::bind(cfg(a, &[a, b, c])).await.unwrap();
        let keys = Keys::load(&key_file()).unwrap();
        let sealed = |from: &str, seq: u64, busy: u32| {
            let text = Report { from: from.into(), seq, busy, ready: true, wants: true }.to_string();
            seal(&text, &keys.tag(text.as_bytes()))
        };
        let stranger = UdpSocket::bind("127.77.9.8:0").unwrap();
        stranger.send_to(sealed("127.77.9.8:9700", 1, 0).as_bytes(), a).unwrap();
        soon("a stranger", || fa.reports_bad()[Bad::Stranger as usize] == 1);
        let pb = UdpSocket::bind(b).unwrap();
        let pc = UdpSocket::bind(c).unwrap();
        pb.send_to(b"not a report", a).unwrap();
        soon("junk", || fa.reports_bad()[Bad::Malformed as usize] == 1);
        // Unsealed, or sealed under another key.
        let text = Report { from: b.into(), seq: 5, busy: 0, ready: true, wants: true }.to_string();
        pb.send_to(seal(&text, &[0; 16]).as_bytes(), a).unwrap();
        soon("a forged tag", || fa.reports_bad()[Bad::Unauthenticated as usize] == 1);
        assert_eq!(fa.ready_peers(), 0);
        // B's real report, then the same again (a replay), then an older one.
        pb.send_to(sealed(b, 10, 4).as_bytes(), a).unwrap();
        soon("B heard", || fa.ready_peers() == 1);
        pb.send_to(sealed(b, 10, 0).as_bytes(), a).unwrap();
        pb.send_to(sealed(b, 9, 0).as_bytes(), a).unwrap();
        soon("replays", || fa.reports_bad()[Bad::Replayed as usize] == 2);
        // B's report sent from C's address: C is a member, but not its sender.
        pc.send_to(sealed(b, 11, 0).as_bytes(), a).unwrap();
        soon("moved", || fa.reports_bad()[Bad::Replayed as usize] == 3);
        assert_eq!(fa.ready_peers(), 1);
        assert_eq!(fa.pick(5, None), forward_to(b), "B as it really reported (4), at B's own address");
        assert_eq!(fa.pick(3, None), Pick::Keep, "not the replayed 0");
    }
}
