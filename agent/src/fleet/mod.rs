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

use crate::config::FleetConfig;
use members::resolve_all;
use crate::seal::Keys;
use huntlb_policy::forward::{kept_by_seen, route, seal, Report, Route};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::{debug, error, info};

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
                // Why this offer was forwarded: its inputs, as `route` saw them.
                debug!(busy, ?seen, to = %member, least = counts[i], peers = counts.len(), "offer forwarded: not the fleet's least");
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
}

mod members;
mod read;
#[cfg(test)]
mod tests;
