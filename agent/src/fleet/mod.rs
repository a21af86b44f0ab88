//! The forwarding tier's view of the fleet: each agent hears a small sample
//! of its members (`fleet_sample`, drawn again every `fleet_resample_ms`,
//! keeping the least loaded), subscribes to their counts, and
//! [`Fleet::pick`] asks the policy crate where an offer goes
//! (`huntlb_policy::forward`).
//!
//! ```text
//!  every fleet_resample_ms: draw K members (keep the B least) ──sealed "... sub" (1 changes / 0 beats / 2 leave)──► each, renewing
//!  count changes ──on that thread──► the listeners that asked for changes (about K: every agent samples K)
//!  members ──UDP──► socket ──reader thread: member? sealed? newer?──► peers: member -> (busy, seq, ready, heard, own forwards since)
//!  offer ──► pick: the sample's ready members heard within dead_after ──► route(busy, seen, their counts) ──► member's IP : fleet_peer_port
//! ```
//!
//! Why a sample: a count sent to every peer on each change costs 2 λ (N - 1)
//! datagrams a second per agent, which grows with the fleet; sent to the K
//! agents that sample it, 2 λ K, whatever N. docs/results/many-fronts-sim.md
//! measures what hearing K peers instead of all costs in latency.
//!
//! Trust (docs/protocol.md, "Trust"): a datagram is believed only if its source
//! is a member (an address `fleet_peers` resolves to), its MAC checks under
//! the shared key, the member it names is its source, it is for this agent,
//! it echoes the nonce this agent gave that member (`Link`), and it is newer
//! than the last taken under that nonce. Even then it carries facts about its sender
//! (a count, whether it takes forwards, what it asks of us), never where
//! a request goes: a forward goes to the member's own address, as resolved
//! here, on the configured port, and a count to the member's own address.
//! The tables are keyed by member, so each holds at most as many entries as
//! `fleet_peers` resolves to.
//!
//! Reports are read by a thread of their own every 10 ms, and by an offer
//! about to decide by the counts: it takes what is queued itself, one batch
//! at most, when no other thread is reading, and otherwise asks the reader
//! and waits for it at most 0.5 ms (`Fleet::fresh`). So a flood of junk on
//! the fleet port costs an offer one batch's checks and that wait at most.

use crate::config::FleetConfig;
use crate::seal::Keys;
use huntlb_policy::forward::{kept_by_seen, route, Route};
use members::{resolve_all, Members};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tracing::debug;

struct Peer {
    busy: u32,
    ready: bool,
    heard: Instant,
    /// When this agent forwarded there, for `settle`: not yet in `busy`.
    sent: VecDeque<Instant>,
    /// This agent's forwards the peer took and has not answered yet: the
    /// least it can hold, whatever it reports (a member that always says 0
    /// draws from each agent only until that agent's own forwards there
    /// make it no longer the least).
    outstanding: Arc<AtomicU32>,
    /// Out of the view until then: a forward there failed (`lost`).
    benched: Option<Instant>,
    /// Failed forwards in a row: each doubles the bench, up to `BENCH_MAX`.
    strikes: u32,
}

/// What this agent and one member know of each other's boots: the nonce this
/// agent gave the member (its reports must echo it), the member's boot and
/// nonce as last taken (ours echo that nonce), and the highest sequence taken
/// under our nonce. Freshness is proven by the echo, not by the sender's clock:
/// a report recorded before our nonce was drawn (or before we restarted) is
/// taken nowhere, and a member that restarts with any clock is heard once it
/// has learnt our nonce, one round trip.
struct Link {
    mine: u64,
    boot: u64,
    theirs: u64,
    seq: u64,
    /// When a report from the member was last taken.
    taken: Option<Instant>,
    /// When an unproven report from it was last answered (at most one an `ANSWER_EVERY`).
    answered: Option<Instant>,
    /// When this agent first asked it for its count (drew it into the sample,
    /// or renewed it there after `dead_after` of silence) with none taken
    /// since: an answer comes within a round trip, so one older than
    /// `dead_after` is a member that does not answer
    /// (`huntlb_fleet_peers_unheard`). A draw that drops it keeps the date:
    /// a dead member, drawn again and again for 100 ms at a time, is counted.
    asked: Option<Instant>,
    /// The member's address as our reports to it name it (`to`), written once.
    to: Box<str>,
}

impl Link {
    /// A member first heard from, or first sent to: a nonce drawn for it.
    fn new(member: SocketAddr) -> Link {
        Link { mine: nonce(), boot: 0, theirs: 0, seq: 0, taken: None, answered: None, asked: None, to: member.to_string().into() }
    }
}

/// A member that samples this agent: what it asked for, when it last renewed,
/// and when our count last went to it (a heartbeat goes only after a beat of
/// silence).
struct Listener {
    changes: bool,
    renewed: Instant,
    told: Instant,
}

/// Why a datagram was dropped, in `huntlb_fleet_reports_bad_total`'s label order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    Stranger = 0,
    Malformed = 1,
    Unauthenticated = 2,
    Replayed = 3,
    /// Sealed, but echoing a nonce this agent did not give the sender or no
    /// longer holds: a first contact, a restart on either side, or a replay.
    Unproven = 4,
    /// Sealed by an agent of an earlier version (`hunt-fleet/2`).
    Version = 5,
}

/// How many reasons `Bad` has.
pub const BAD_REASONS: usize = 6;

pub use crate::config::MAX_MEMBERS;

/// This agent's count and whether it takes forwards, as the agent tells it
/// (None once the agent is gone: nothing more is sent).
pub type ReportFn = Box<dyn Fn() -> Option<(u32, bool)> + Send + Sync>;

pub struct Fleet {
    cfg: FleetConfig,
    sock: Socket,
    keys: RwLock<Keys>,
    /// Members' last reports, by member address; only members have entries.
    peers: Mutex<HashMap<SocketAddr, Peer>>,
    /// What this agent and each member know of each other (nonces, sequence);
    /// only members have entries. Locked before `peers` when both are.
    links: Mutex<HashMap<SocketAddr, Link>>,
    /// This agent's boot, as its reports name it: random, so no clock decides.
    boot: u64,
    /// `cfg.from` as our reports name it (`from`), written once.
    from_text: Box<str>,
    /// Who the members are (`fleet_peers` resolved): the only senders
    /// heard, the only places counts and forwards go.
    members: RwLock<Members>,
    /// The members this agent hears (and whose counts decide its forwards).
    sample: Mutex<Vec<SocketAddr>>,
    /// The members that sample this agent.
    listeners: Mutex<HashMap<SocketAddr, Listener>>,
    /// Counts this boot's reports from 1 (peers order them per boot, under
    /// their nonce: no clock is read). Locked while the count is read, so a
    /// later number always carries a later count (threads race to send).
    seq: Mutex<u64>,
    /// The stream for draws and ties (splitmix64 over a counter).
    draws: AtomicU64,
    /// Lines about bad datagrams (or failed reads) logged in the current 10 s window.
    bad_logged: Mutex<(Instant, u32)>,
    /// Datagrams dropped, by `Bad`.
    bad: [AtomicU64; BAD_REASONS],
    /// Reports sent, and reports taken: the tier's cost.
    sent: AtomicU64,
    taken: AtomicU64,
    born: Instant,
    /// When an offer here last decided by the peers' counts (microseconds
    /// since `born`, plus one; 0: never).
    consulted_us: AtomicU64,
    /// Whether our sample was last told we want every change.
    told_changes: AtomicBool,
    /// Where this agent's count comes from (`start`).
    report: OnceLock<ReportFn>,
    /// Offers' asks for a fresh view, and the reader's answers (`fresh`).
    asks: Mutex<Asks>,
    /// Held by whoever reads the socket (the reader, or an offer: `fresh`):
    /// one at a time, so reports are taken in the order they came.
    reading: Mutex<()>,
    /// The reader does nothing while set (tests: a reader that is late).
    #[cfg(test)]
    reader_paused: AtomicBool,
    asked: Condvar,
    drained: Condvar,
}

/// How many times offers asked the reader to drain, and up to which ask it has.
#[derive(Default)]
struct Asks {
    asked: u64,
    done: u64,
}

/// An agent wants its sample's every change for this long after an offer
/// here last decided by them: a fleet whose fronts come and go does not flap.
const WANT_FOR: Duration = Duration::from_secs(10);
/// The receive buffer asked for, per member it may hear from at once (its
/// sample and its listeners, or every member without a sample): a burst of
/// this many reports from each (about 768 bytes each in the kernel's
/// accounting) waits unread without loss. Linux caps it at
/// `net.core.rmem_max` (a warning says so).
const BUFFERED_PER_MEMBER: usize = 64;
const MIN_RCVBUF: usize = 1 << 20;
/// The reader takes what is queued at least this often: a report counts as
/// heard within this of its arrival (liveness), and the socket's buffer holds
/// what comes in between.
const READ_EVERY: Duration = Duration::from_millis(10);
/// Quiet (`Fleet::quiet`), the reader takes what is queued at least this often.
const READ_QUIET_MAX: Duration = Duration::from_millis(50);
/// An offer waits this long at most for the reader (`Fleet::fresh`).
const ASK_WAIT: Duration = Duration::from_micros(500);
/// At most this many datagrams per pass: a flood cannot keep the reader from
/// answering the offers that asked.
const READ_AT_MOST: usize = 1024;
/// How often the key file is looked at for a rotation.
const KEYS_EVERY: Duration = Duration::from_secs(2);
/// An unproven report from a member is answered at once (it learns our nonce:
/// the handshake that makes a restarted member heard within a round trip),
/// then at most once this often: replayed captures make us send that member,
/// at its own address, at most 100 datagrams a second.
const ANSWER_EVERY: Duration = Duration::from_millis(10);
/// A forward to a member failed (no connection, no answer within
/// `fleet_commit_ms`, refused): out of the view this long, doubled at each
/// failure in a row, up to `BENCH_MAX`. Longer than a heartbeat, so a member
/// that reports ready while it cannot take connections is not tried again at
/// its next report; below a second at most, so one that recovers is back
/// within a second.
const BENCH_FIRST: Duration = Duration::from_millis(100);
const BENCH_MAX: Duration = Duration::from_millis(800);

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

impl Peer {
    /// Ready, heard within `dead_after`, and not benched by a failed forward.
    fn in_view(&self, now: Instant, dead_after: Duration) -> bool {
        self.ready && now.duration_since(self.heard) <= dead_after && self.benched.is_none_or(|t| now >= t)
    }

    /// What this agent takes the peer to hold: its last count plus what was
    /// forwarded there since (`settle`), and never less than this agent's own
    /// forwards it has yet to answer.
    fn count(&self) -> u32 {
        let count = self.busy.saturating_add(self.sent.len() as u32);
        if crate::insider::no_floor() {
            return count;
        }
        count.max(self.outstanding.load(Ordering::Acquire))
    }
}

/// A random 64-bit number, never 0 (a boot, a nonce, the draws' seed).
pub(crate) fn nonce() -> u64 {
    use ring::rand::SecureRandom;
    let rng = ring::rand::SystemRandom::new();
    loop {
        let mut b = [0u8; 8];
        if rng.fill(&mut b).is_ok() {
            let n = u64::from_le_bytes(b);
            if n != 0 {
                return n;
            }
        }
    }
}

/// The tier's gauges and counters, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gauges {
    /// Sampled members heard within `dead_after` and taking forwards.
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
    /// Bind `fleet_listen` and start the reader thread. Nothing is sent
    /// until `start` says where this agent's count comes from.
    pub async fn bind(cfg: FleetConfig) -> anyhow::Result<Arc<Fleet>> {
        use anyhow::Context;
        let sock = Socket::new(Domain::for_address(cfg.listen), Type::DGRAM, Some(Protocol::UDP)).context("config key `fleet_listen`: socket")?;
        // `[::]` hears IPv4 members too, whatever net.ipv6.bindv6only says
        // (their sources then read as ::ffff:a.b.c.d: `take` canonicalizes).
        if cfg.listen.is_ipv6() {
            sock.set_only_v6(false).context("config key `fleet_listen`: IPV6_V6ONLY")?;
        }
        sock.bind(&SockAddr::from(cfg.listen)).with_context(|| format!("config key `fleet_listen`: bind {}", cfg.listen))?;
        let resolved = resolve_all(&cfg.peers, &[]).await;
        let fleet = Fleet {
            sock,
            keys: RwLock::new(cfg.keys.clone()),
            peers: Mutex::new(HashMap::new()),
            links: Mutex::new(HashMap::new()),
            boot: nonce(),
            from_text: cfg.from.to_string().into(),
            members: RwLock::new(Members::default()),
            sample: Mutex::new(Vec::new()),
            listeners: Mutex::new(HashMap::new()),
            seq: Mutex::new(0),
            draws: AtomicU64::new(nonce()),
            bad_logged: Mutex::new((Instant::now(), 0)),
            bad: Default::default(),
            sent: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            born: Instant::now(),
            consulted_us: AtomicU64::new(0),
            told_changes: AtomicBool::new(false),
            report: OnceLock::new(),
            asks: Mutex::new(Asks::default()),
            reading: Mutex::new(()),
            #[cfg(test)]
            reader_paused: AtomicBool::new(false),
            asked: Condvar::new(),
            drained: Condvar::new(),
            cfg,
        };
        fleet.set_members(fleet.cfg.peers.clone(), resolved);
        let fleet = Arc::new(fleet);
        let reader = fleet.clone();
        std::thread::Builder::new().name("huntlb-fleet".into()).spawn(move || reader.read_forever()).context("fleet_listen: reader thread")?;
        Ok(fleet)
    }

    /// Where this offer goes, by the sample's ready members heard from within `dead_after`.
    pub fn pick(&self, busy: u32, seen: Option<u32>) -> Pick {
        let now = Instant::now();
        // The front knew this backend's load: kept whatever the peers hold.
        // With one front every offer is such.
        if kept_by_seen(self.cfg.forwarding, busy, seen) {
            return if self.ready_peers() > 0 { Pick::Keep } else { Pick::NoPeers };
        }
        self.consult();
        self.fresh();
        let sample = self.sample.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        let mut members = Vec::with_capacity(sample.len());
        let mut counts = Vec::with_capacity(sample.len());
        for member in sample {
            let Some(p) = peers.get_mut(&member) else { continue };
            if !p.in_view(now, self.cfg.dead_after) {
                continue;
            }
            while p.sent.front().is_some_and(|t| now.duration_since(*t) > self.cfg.settle) {
                p.sent.pop_front();
            }
            members.push(member);
            counts.push(p.count());
        }
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
        let sample = self.sample.lock().unwrap_or_else(PoisonError::into_inner).clone();
        // members before peers, never the other way
        let members = self.members.read().unwrap_or_else(PoisonError::into_inner);
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        let dead_after = self.cfg.dead_after;
        let settle = self.cfg.settle;
        // What this agent takes a peer to hold, if it is in view.
        let mut count = |member: &SocketAddr| -> Option<u32> {
            let p = peers.get_mut(member).filter(|p| p.in_view(now, dead_after))?;
            while p.sent.front().is_some_and(|t| now.duration_since(*t) > settle) {
                p.sent.pop_front();
            }
            Some(p.count())
        };
        // the least count known: this agent's and its sample's view (what `pick` compares with)
        let view: Vec<u32> = sample.iter().filter_map(&mut count).collect();
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
            batch::scratch(|to| {
                to.extend(self.sample.lock().unwrap_or_else(PoisonError::into_inner).iter());
                self.send(to)
            });
        }
    }

    /// How long a peer has to say it takes a forward (`fleet_commit_ms`).
    pub fn commit(&self) -> Duration {
        self.cfg.commit
    }

    /// This agent as it names itself on what it forwards (`hunt-via`).
    pub fn advertise(&self) -> &str {
        &self.cfg.advertise
    }

    /// Datagrams dropped, by reason (`Bad`'s order).
    pub fn reports_bad(&self) -> [u64; BAD_REASONS] {
        self.bad.each_ref().map(|a| a.load(Ordering::Relaxed))
    }

    /// Sampled members heard from within `dead_after` and taking forwards.
    pub fn ready_peers(&self) -> usize {
        let now = Instant::now();
        let sample = self.sample.lock().unwrap_or_else(PoisonError::into_inner);
        let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        sample.iter().filter_map(|m| peers.get(m)).filter(|p| p.in_view(now, self.cfg.dead_after)).count()
    }

    /// Sampled members heard and ready that a failed forward keeps out of the view.
    pub fn benched_peers(&self) -> usize {
        let now = Instant::now();
        let sample = self.sample.lock().unwrap_or_else(PoisonError::into_inner);
        let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        sample
            .iter()
            .filter_map(|m| peers.get(m))
            .filter(|p| p.ready && now.duration_since(p.heard) <= self.cfg.dead_after && p.benched.is_some_and(|t| now < t))
            .count()
    }

    /// Members asked for their count more than `dead_after` ago with no
    /// report taken since (`Link::asked`). Not "sampled and not heard now":
    /// a member just drawn is that for a round trip, which at 1000 agents
    /// drawing 40 members a second would read as a dead member or more.
    pub fn unheard_peers(&self) -> usize {
        let now = Instant::now();
        let links = self.links.lock().unwrap_or_else(PoisonError::into_inner);
        links.values().filter(|l| l.asked.is_some_and(|t| now.duration_since(t) > self.cfg.dead_after)).count()
    }

    /// Members sampling this agent, renewed within `dead_after`, that want every change of our count.
    pub fn peers_wanting(&self) -> usize {
        let now = Instant::now();
        self.listeners.lock().unwrap_or_else(PoisonError::into_inner).values().filter(|l| l.changes && now.duration_since(l.renewed) <= self.cfg.dead_after).count()
    }

    pub fn gauges(&self) -> Gauges {
        Gauges {
            peers: self.ready_peers(),
            benched: self.benched_peers(),
            unheard: self.unheard_peers(),
            members: self.members.read().unwrap_or_else(PoisonError::into_inner).others.len(),
            wanting: self.peers_wanting(),
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
        if let Some(p) = self.peers.lock().unwrap_or_else(PoisonError::into_inner).get_mut(&member) {
            p.strikes = p.strikes.saturating_add(1);
            let bench = BENCH_FIRST.saturating_mul(1 << (p.strikes - 1).min(8)).min(BENCH_MAX);
            p.benched = Some(Instant::now() + bench);
            debug!(peer = %member, strikes = p.strikes, bench_ms = bench.as_millis() as u64, "peer benched: a forward was not taken");
        }
    }

    /// A forward to `target` was taken by its peer: the strikes are forgotten,
    /// and the forward counts there until its answer ends (drop the guard).
    pub fn took(&self, target: &Target) -> Outstanding {
        if let Some(p) = self.peers.lock().unwrap_or_else(PoisonError::into_inner).get_mut(&target.member) {
            (p.strikes, p.benched) = (0, None);
        }
        target.outstanding.fetch_add(1, Ordering::AcqRel);
        Outstanding(target.outstanding.clone())
    }

    fn draw(&self) -> u64 {
        // splitmix64: cheap, and distinct per agent by its seed.
        let mut z = self.draws.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn micros(&self) -> u64 {
        self.born.elapsed().as_micros() as u64
    }

    /// Nothing decides by counts: no offer here within `WANT_FOR`, and no
    /// member that samples this agent wants our every change.
    fn quiet(&self) -> bool {
        !self.wants() && self.peers_wanting() == 0
    }

    /// How long a listener that asked for beats only waits for one, and how
    /// often a quiet agent draws (so renews) its sample: half of
    /// `fleet_dead_after_ms`, heard with room to spare (a tick and a read
    /// late, at most 0.72 of it: `run`, `read_forever`). Wire-compatible: a
    /// listener of any version takes a member for alive within its dead_after.
    fn quiet_beat(&self) -> Duration {
        (self.cfg.dead_after / 2).max(self.cfg.heartbeat)
    }

    /// Did an offer here decide by the peers' counts within `WANT_FOR`?
    fn wants(&self) -> bool {
        let at = self.consulted_us.load(Ordering::Relaxed);
        at != 0 && self.micros().saturating_sub(at - 1) <= WANT_FOR.as_micros() as u64
    }
}

mod batch;
mod members;
mod read;
mod sample;
#[cfg(test)]
mod tests;
