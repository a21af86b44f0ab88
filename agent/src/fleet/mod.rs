//! The forwarding tier's view of the fleet: each agent hears a small sample
//! of its members (`fleet_sample`, drawn again every `fleet_resample_ms`,
//! keeping the least loaded), subscribes to their counts, and
//! [`Fleet::pick`] asks the policy crate where an offer goes
//! (`huntlb_policy::forward`). A member a draw drops while in view stays in
//! it until the member drawn in its place is heard (`State::standby`).
//!
//! ```text
//!  every fleet_resample_ms: draw K members (keep the B least) ──sealed "... sub" (1 changes / 0 beats / 2 leave)──► each, renewing
//!  count changes ──on that thread──► the listeners that asked for changes (about K: every agent samples K)
//!  members ──UDP──► socket ──reader thread: member? sealed? newer?──► peers: member -> (busy, seq, ready, heard, own forwards since)
//!  offer ──► pick: the view's ready members heard within dead_after ──► route(busy, seen, their counts) ──► member's IP : fleet_peer_port
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
//! Reports are read by an offer about to decide by the counts (what is
//! queued, one batch at most: `Fleet::fresh`), by the sample's tick, and by
//! a task on the agent's runtime when neither has read for a tick and a half
//! (`Fleet::read_task`): no thread of its own, so no wake-up of one. A flood of junk on the fleet port costs
//! an offer one batch's checks at most.
//!
//! One lock holds the tier's tables (`State`): an offer, a report taken, a
//! draw or a scrape takes it once, for table work only (a datagram's MAC is
//! checked before it, a report sealed and sent after it). Not a task that
//! owns them: an offer decides in `pick`, synchronously, on the runtime's
//! thread, and a message to a task and its wake-up would cost that offer more
//! than a lock no other thread contends (with `threads` = 1, the default).
//! Beside it: the socket's inbox, held by whoever reads (taken before the
//! tables' lock, never under it).

use crate::config::FleetConfig;
use crate::seal::Keys;
use crate::sync::lock;
use batch::Inbox;
use members::{resolve_all, Members};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

struct Peer {
    busy: u32,
    ready: bool,
    heard: Instant,
    /// Alive this long after `heard`: `dead_after` if its report came while
    /// this agent asked it for every change, `FleetConfig::beats_alive` if
    /// for beats only (it beats each `fleet_quiet_beat_ms` then). Set here,
    /// from what this agent asked, never from what the report says.
    alive_for: Duration,
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
    /// since: an answer comes within a round trip (a quiet member's may wait
    /// for its next quiet beat), so one older than the time a live member is
    /// given (`Fleet::alive_for`) is a member that does not answer
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

pub use crate::config::MAX_MEMBERS;

/// This agent's count and whether it takes forwards, as the agent tells it
/// (None once the agent is gone: nothing more is sent).
pub type ReportFn = Box<dyn Fn() -> Option<(u32, bool)> + Send + Sync>;

/// What the tier knows, behind one lock (`Fleet::state`): the tables an
/// offer, a report taken and a draw each read and write together, so one
/// acquisition does where there were five (a report taken went through the
/// members, the keys, the links, the peers and the listeners in turn).
/// Held for table work only: a datagram is checked before it (`take`),
/// and written under it but sealed and sent after it (`send_with`).
struct State {
    /// Members' last reports, by member address; only members have entries.
    peers: HashMap<SocketAddr, Peer>,
    /// What this agent and each member know of each other (nonces, sequence);
    /// only members have entries.
    links: HashMap<SocketAddr, Link>,
    /// Who the members are (`fleet_peers` resolved): the only senders
    /// heard, the only places counts and forwards go. Shared with the reader
    /// for a batch of datagrams (`drain`), replaced whole when it changes.
    members: Arc<Members>,
    /// The members this agent hears (and whose counts decide its forwards).
    sample: Vec<SocketAddr>,
    /// Make before break: members the last draw dropped while in the view,
    /// each still in it (and subscribed) until the member drawn in its place,
    /// not heard within dead_after then, is heard: (the one kept, the one it
    /// stands for). A member drawn in answers a round trip later (a reader's
    /// tick on each side, up to 20 ms on a busy host), and without this the
    /// view read one short meanwhile at such draws: offers compared one count
    /// fewer, and `huntlb_fleet_peers` read under the sample in a fleet where
    /// every member answers. At most `fleet_sample` entries, cleared at each
    /// draw; released only by a report taken from the member drawn (sealed,
    /// echoing our nonce), so no datagram without the key ends one early, and
    /// a member that never answers keeps one until the next draw, no longer.
    standby: Vec<(SocketAddr, SocketAddr)>,
    /// The members that sample this agent.
    listeners: HashMap<SocketAddr, Listener>,
    /// Shared as `members` is: a batch's MACs are checked, and a send's
    /// reports sealed, outside the lock.
    keys: Arc<Keys>,
    /// Counts this boot's reports from 1 (peers order them per boot, under
    /// their nonce: no clock is read). The count is read under the lock that
    /// numbers it, so a later number always carries a later count (threads
    /// race to send).
    seq: u64,
}

pub struct Fleet {
    cfg: FleetConfig,
    sock: Socket,
    /// The tables (`State`). Never held while waiting: no other lock is
    /// taken under it (the reader's inbox, when both are held, first), and
    /// the one call out of the tier made under it, this agent's count
    /// (`report`), reads atomics (and the accept queue at most once a ms).
    state: Mutex<State>,
    /// This agent's boot, as its reports name it: random, so no clock decides.
    boot: u64,
    /// `cfg.from` as our reports name it (`from`), written once.
    from_text: Box<str>,
    /// The stream for draws and ties (splitmix64 over a counter).
    draws: AtomicU64,
    /// Lines about bad datagrams (or failed reads) logged in the current 10 s
    /// window: the window's number since `born` (high half) and the count.
    /// No lock: a flood of junk never touches `state`.
    bad_logged: AtomicU64,
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
    /// The socket's reader: whoever holds it (the reader task, or an offer:
    /// `fresh`) reads, one at a time, so reports are taken in the order they came.
    inbox: Mutex<Inbox>,
    /// When the socket was last read to the end (microseconds since `born`;
    /// 0: the reader is due now): the reader task reads a tick and a half after it.
    read_at: AtomicU64,
    /// An offer read (`fresh`): the reader task sets its next read from `read_at`.
    read_moved: tokio::sync::Notify,
    /// The tier stopped being quiet (a listener now wants every change, or an
    /// offer here decides by counts): the sample's task, asleep for up to a
    /// quiet beat, wakes to beat each heartbeat and draw each
    /// `fleet_resample_ms` from now, not from its next quiet beat.
    busy_now: tokio::sync::Notify,
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
/// The reader task reads no sooner than this after the last read (by an
/// offer, the sample's tick, or itself), and no later than READ_BUSY_MAX
/// (a tick and a half: `read_task`): a report counts as heard within that
/// of its arrival (liveness), and the socket's buffer holds what comes in
/// between. Quiet, a quarter of a quiet beat, no later than READ_QUIET_MAX
/// (4 wake-ups a second at the defaults, where an eighth of a beat's alive
/// window, at most 100 ms, took 10 and a tenth of a core's 0.2% idle budget):
/// a waking member's subscription is answered, and a member locked out by a
/// forged sequence heals (`heard`, `Taken::Old`), a read later.
const READ_EVERY: Duration = Duration::from_millis(10);
const READ_BUSY_MAX: Duration = Duration::from_millis(50);
const READ_QUIET_MAX: Duration = Duration::from_millis(250);
/// At most this many datagrams per pass of the reader task, a batch at a
/// time with the thread yielded between: a flood cannot hold it.
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

impl Peer {
    /// Heard within its `alive_for`.
    fn alive(&self, now: Instant) -> bool {
        now.duration_since(self.heard) <= self.alive_for
    }

    /// Ready, alive, and not benched by a failed forward.
    fn in_view(&self, now: Instant) -> bool {
        self.ready && self.alive(now) && self.benched.is_none_or(|t| now >= t)
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

impl State {
    /// The members this agent renews: the sample, and the members standing
    /// in for some of it (`standby`).
    fn subscribed(&self) -> impl Iterator<Item = &SocketAddr> {
        self.sample.iter().chain(self.standby.iter().map(|(m, _)| m))
    }

    /// The members whose counts decide this agent's offers, if in view.
    fn view(&self, now: Instant) -> impl Iterator<Item = &SocketAddr> {
        view(&self.sample, &self.standby, &self.peers, now)
    }
}

/// The sample, and each member standing in for a member of it (`State::standby`)
/// while that one is not alive (`Peer::alive`): never more than the sample.
fn view<'a>(
    sample: &'a [SocketAddr],
    standby: &'a [(SocketAddr, SocketAddr)],
    peers: &'a HashMap<SocketAddr, Peer>,
    now: Instant,
) -> impl Iterator<Item = &'a SocketAddr> {
    let unheard = move |m: &SocketAddr| peers.get(m).is_none_or(|p| !p.alive(now));
    sample.iter().chain(standby.iter().filter(move |(_, drawn)| unheard(drawn)).map(|(m, _)| m))
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

impl Fleet {
    /// Bind `fleet_listen` and start the reader task (`read_task`) on the
    /// current runtime. Nothing is sent until `start` says where this
    /// agent's count comes from.
    pub async fn bind(cfg: FleetConfig) -> anyhow::Result<Arc<Fleet>> {
        let fleet = Fleet::open(cfg).await?;
        tokio::spawn(fleet.clone().read_task());
        Ok(fleet)
    }

    /// Bind `fleet_listen`, with no reader yet: offers read what is
    /// queued themselves (`fresh`), as they do whenever the reader is late.
    pub(super) async fn open(cfg: FleetConfig) -> anyhow::Result<Arc<Fleet>> {
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
            state: Mutex::new(State {
                peers: HashMap::new(),
                links: HashMap::new(),
                members: Arc::default(),
                sample: Vec::new(),
                standby: Vec::new(),
                listeners: HashMap::new(),
                keys: Arc::new(cfg.keys.clone()),
                seq: 0,
            }),
            boot: nonce(),
            from_text: cfg.from.to_string().into(),
            draws: AtomicU64::new(nonce()),
            bad_logged: AtomicU64::new(0),
            bad: Default::default(),
            sent: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            born: Instant::now(),
            consulted_us: AtomicU64::new(0),
            told_changes: AtomicBool::new(false),
            report: OnceLock::new(),
            inbox: Mutex::new(Inbox::default()),
            read_at: AtomicU64::new(0),
            read_moved: tokio::sync::Notify::new(),
            busy_now: tokio::sync::Notify::new(),
            cfg,
        };
        fleet.set_members(fleet.cfg.peers.clone(), resolved);
        Ok(Arc::new(fleet))
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
    /// often a quiet agent draws (so renews) its sample: `fleet_quiet_beat_ms`.
    /// Such a listener takes us for alive for that and half a dead_after more
    /// (`FleetConfig::beats_alive`), and keeps our subscription as long: both
    /// sides go by their own settings, which a fleet shares (as it shares
    /// `fleet_dead_after_ms`). 12 quiet agents sampling 8 each send about 16
    /// datagrams each per quiet beat (8 renewals, 8 beats), where a beat each
    /// half dead_after cost 8 times as many.
    fn quiet_beat(&self) -> Duration {
        self.cfg.quiet_beat.max(self.cfg.heartbeat)
    }

    /// How long a member heard now stays alive (`Peer::alive_for`): what our
    /// reports ask of it now (`send_with`), every change or beats only.
    fn alive_for(&self) -> Duration {
        if self.wants() {
            self.cfg.dead_after
        } else {
            self.cfg.beats_alive()
        }
    }

    /// Is a listener's subscription still on: renewed within `dead_after`
    /// if it wants every change, within `FleetConfig::beats_alive` if beats
    /// only (it renews each quiet beat then).
    fn subscribed_now(&self, x: &Listener, now: Instant) -> bool {
        now.duration_since(x.renewed) <= if x.changes { self.cfg.dead_after } else { self.cfg.beats_alive() }
    }

    /// Did an offer here decide by the peers' counts within `WANT_FOR`?
    fn wants(&self) -> bool {
        let at = self.consulted_us.load(Ordering::Relaxed);
        at != 0 && self.micros().saturating_sub(at - 1) <= WANT_FOR.as_micros() as u64
    }
}

pub use offer::{Gauges, Outstanding, Pick, Target};
pub use read::{Bad, BAD_REASONS};

mod batch;
mod members;
mod offer;
mod read;
mod sample;
#[cfg(test)]
mod tests;
