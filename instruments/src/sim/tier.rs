//! The forwarding tier's agents: what each one knows of its peers' counts,
//! and the datagrams that knowledge costs.
//!
//! Two ways to share counts, as the agent has them:
//! * **every peer** (`fleet_sample` 0): each change of a
//!   server's count goes to every agent that decides by counts (`wants`), and
//!   every agent sees every other's count `fleet_delay_s` late. An agent sends
//!   its count to every member at least every [`HEARTBEAT_S`]; a change that
//!   went to all of them counts as one.
//! * **a bounded sample** (`fleet_sample` K, the agent's `fleet_sample`):
//!   agent `a` hears K other servers, `S_a`. Every `fleet_resample_s` (agents
//!   staggered) it re-draws `S_a`: it keeps the `fleet_sample_keep` members it
//!   sees lowest and draws the rest uniformly from the servers not kept (not
//!   itself), and sends its count to each member, old and new: a renewal to
//!   a member kept, a subscription to a new one (which answers with its count
//!   at once: unknown until then, two datagrams after), a leave to a dropped
//!   one. A member sends its count on each change to the agents that sample it
//!   and decide by counts (`wants`), and a heartbeat every [`HEARTBEAT_S`] to
//!   those that do not (with one front, that is all the tier sends). An agent
//!   that starts wanting changes tells its sample at once (K datagrams, and K
//!   counts back); one that stops, K datagrams.
//! * **pull on demand** (`fleet_probe` D): nothing is pushed; an agent about
//!   to decide by counts asks D random peers for theirs (a datagram each way)
//!   and decides when the answers are back, two datagrams later.
//!
//! Either way an agent wants changes only while it decides offers by the
//! counts (for [`WANT_FOR_S`] after the last such offer): with one front every
//! offer is kept by the front's own count (`seen`), and nobody does.
//!
//! What an agent sees of a peer is the peer's count `fleet_delay_s` ago plus
//! the forwards it sent there within `fleet_delay_s + hop_s` (the agent's
//! `fleet_settle_ms`: sent, not yet in what it heard).

use super::Datagrams;
use rand::{rngs::SmallRng, seq::SliceRandom, Rng, SeedableRng};
use std::collections::VecDeque;

/// The agent's `WANT_FOR`: it wants its peers' changes this long after an
/// offer last decided by them.
pub const WANT_FOR_S: f64 = 10.0;
/// The agent's default `fleet_heartbeat_ms`.
pub const HEARTBEAT_S: f64 = 0.05;

/// How the agents share counts (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TierSpec {
    pub delay_s: f64,
    pub hop_s: f64,
    /// Every peer's changes come as a snapshot refreshed this often (old
    /// model, every peer and no delay only); 0: live.
    pub view_s: f64,
    /// K: 0 is every peer.
    pub sample: usize,
    pub resample_s: f64,
    pub keep: usize,
    /// D: instead of pushed counts, an agent about to decide by counts asks
    /// D random peers for theirs and decides on the answers (0: push).
    pub probe: usize,
    pub seed: u64,
}

pub(super) struct Tier {
    spec: TierSpec,
    n: usize,
    /// The history path (a delay, a hop or a sample) or the snapshot path.
    delayed: bool,
    /// Each server's count changes, (time, count), back to the one in force
    /// `delay_s` ago.
    history: Vec<VecDeque<(f64, u32)>>,
    /// Each agent's forwards within the settle window, (time, to).
    recent: Vec<VecDeque<(f64, usize)>>,
    /// Snapshot path: the fleet's counts, when taken, and each agent's forwards since.
    snap: Vec<u32>,
    snap_t: f64,
    forwarded: Vec<Vec<u32>>,
    /// When each agent last decided an offer by the counts.
    consulted: Vec<f64>,
    /// Bounded: each agent's sample (sorted) and when each member joined it.
    samples: Vec<Vec<usize>>,
    sub_at: Vec<Vec<f64>>,
    /// Bounded: whether each agent told its sample it wants changes.
    subscribed: Vec<bool>,
    /// Bounded: agents that want each server's changes.
    subs: Vec<u32>,
    /// Bounded: (agent, member) pairs of agents that do not want changes
    /// (their members beat to them), and since when that number holds.
    beat_pairs: (u64, f64),
    /// When each server last sent its count to all it sends to (heartbeats).
    beat: Vec<f64>,
    redraws: u64,
    rng: SmallRng,
    pub(super) sent: Datagrams,
}

impl Tier {
    pub(super) fn new(spec: TierSpec, n: usize) -> Tier {
        let k = spec.sample.min(n - 1);
        let mut rng = SmallRng::seed_from_u64(spec.seed ^ 0x7165_7273_616d_706c);
        let samples: Vec<Vec<usize>> = if k == 0 {
            Vec::new()
        } else {
            (0..n).map(|a| draw(&mut rng, n, a, &[], k)).collect()
        };
        // At start every agent subscribes to its sample, and each member answers.
        let pairs = (n * k) as u64;
        let sent = Datagrams { subscribes: pairs, counts: pairs, ..Datagrams::default() };
        Tier {
            spec: TierSpec { sample: k, keep: spec.keep.min(k), ..spec },
            n,
            delayed: spec.delay_s > 0.0 || spec.hop_s > 0.0 || k > 0 || spec.probe > 0,
            history: vec![VecDeque::from([(f64::NEG_INFINITY, 0)]); n],
            recent: vec![VecDeque::new(); n],
            snap: vec![0; n],
            snap_t: f64::NEG_INFINITY,
            forwarded: if k == 0 && spec.probe == 0 && spec.delay_s == 0.0 && spec.hop_s == 0.0 { vec![vec![0; n]; n] } else { Vec::new() },
            consulted: vec![f64::NEG_INFINITY; n],
            sub_at: samples.iter().map(|s| vec![0.0; s.len()]).collect(),
            samples,
            subscribed: vec![false; n],
            subs: vec![0; n],
            beat_pairs: (pairs, 0.0),
            beat: vec![0.0; n],
            redraws: n as u64,
            rng,
            sent,
        }
    }

    fn bounded(&self) -> bool {
        self.spec.sample > 0
    }

    fn wants(&self, a: usize, now: f64) -> bool {
        now - self.consulted[a] <= WANT_FOR_S
    }

    /// An offer at agent `a` decides by the counts: from now on it wants
    /// them (and, bounded, subscribes to its sample if it was not).
    pub(super) fn consult(&mut self, a: usize, now: f64) {
        self.consulted[a] = now;
        if self.bounded() && !self.subscribed[a] {
            self.subscribed[a] = true;
            for &m in &self.samples[a] {
                self.subs[m] += 1;
            }
            let k = self.samples[a].len() as u64;
            self.pairs_beating(now, -(k as i64));
            self.sent.subscribes += k;
            self.sent.counts += k; // each member's count at once, a datagram back
        }
    }

    /// The number of (agent, member) pairs that beat changes by `by` at `now`.
    fn pairs_beating(&mut self, now: f64, by: i64) {
        let (pairs, since) = self.beat_pairs;
        self.sent.heartbeats += (pairs as f64 * (now - since) / HEARTBEAT_S) as u64;
        self.beat_pairs = ((pairs as i64 + by) as u64, now);
    }

    /// The peers agent `a` decides by, and their counts as it sees them;
    /// `live(s)` is server s's true count now (the snapshot path reads it).
    pub(super) fn view(&mut self, a: usize, now: f64, live: impl Fn(usize) -> u32) -> (Vec<usize>, Vec<u32>) {
        if !self.delayed {
            if self.spec.view_s == 0.0 || now >= self.snap_t + self.spec.view_s {
                for (s, v) in self.snap.iter_mut().enumerate() {
                    *v = live(s);
                }
                self.snap_t = now;
                self.forwarded.iter_mut().for_each(|f| f.fill(0));
            }
            let peers: Vec<usize> = (0..self.n).filter(|&s| s != a).collect();
            let counts = peers.iter().map(|&s| self.snap[s] + self.forwarded[a][s]).collect();
            return (peers, counts);
        }
        let at = now - self.spec.delay_s;
        let settle = now - self.spec.delay_s - self.spec.hop_s;
        let r = &mut self.recent[a];
        while r.front().is_some_and(|&(t, _)| t <= settle) {
            r.pop_front();
        }
        let peers: Vec<usize> = if self.bounded() {
            // A new member's first count comes back two datagrams after it joined.
            let known = |i: usize| now >= self.sub_at[a][i] + 2.0 * self.spec.delay_s;
            self.samples[a].iter().enumerate().filter(|&(i, _)| known(i)).map(|(_, &s)| s).collect()
        } else {
            (0..self.n).filter(|&s| s != a).collect()
        };
        let mut counts: Vec<u32> = peers.iter().map(|&s| count_at(&mut self.history[s], at)).collect();
        for &(_, to) in self.recent[a].iter() {
            if let Some(i) = peers.iter().position(|&s| s == to) {
                counts[i] += 1;
            }
        }
        (peers, counts)
    }

    /// Agent `a` forwarded an offer to `to` at `now`.
    pub(super) fn forwarded(&mut self, a: usize, to: usize, now: f64) {
        if self.delayed {
            self.recent[a].push_back((now, to));
        } else {
            self.forwarded[a][to] += 1;
        }
    }

    /// Server `s`'s count changed to `count`: it goes to whoever hears `s`.
    pub(super) fn changed(&mut self, s: usize, now: f64, count: u32) {
        if self.delayed {
            self.history[s].push_back((now, count));
        }
        if self.spec.probe > 0 {
            return; // nothing is pushed: counts are asked for
        }
        let (to, every) = if self.bounded() {
            (u64::from(self.subs[s]), u64::from(self.subs[s]))
        } else {
            let wanting = (0..self.n).filter(|&a| a != s && self.wants(a, now)).count() as u64;
            (wanting, self.n as u64 - 1)
        };
        self.beats(s, now, every);
        self.sent.counts += to;
        if to == every {
            self.beat[s] = now;
        }
    }

    /// Heartbeats server `s` sent since its last send to all of its `every` hearers.
    fn beats(&mut self, s: usize, now: f64, every: u64) {
        let k = ((now - self.beat[s]) / HEARTBEAT_S).floor();
        if k >= 1.0 {
            self.sent.heartbeats += k as u64 * every;
            self.beat[s] += k * HEARTBEAT_S;
        }
    }

    /// Pull on demand: the peers agent `a` asks for their counts (D at
    /// random, in order), a datagram each way.
    pub(super) fn ask(&mut self, a: usize) -> Vec<usize> {
        let d = self.spec.probe;
        self.sent.asks += d as u64;
        self.sent.counts += d as u64;
        draw(&mut self.rng, self.n, a, &[], d)
    }

    /// Pull on demand: the answers of `peers` as agent `a` has them at `now`
    /// (each read a datagram before), plus its own forwards there since.
    pub(super) fn answers(&mut self, a: usize, peers: &[usize], now: f64) -> Vec<u32> {
        let at = now - self.spec.delay_s;
        let settle = now - self.spec.delay_s - self.spec.hop_s;
        let r = &mut self.recent[a];
        while r.front().is_some_and(|&(t, _)| t <= settle) {
            r.pop_front();
        }
        let mut counts: Vec<u32> = peers.iter().map(|&s| count_at(&mut self.history[s], at)).collect();
        for &(_, to) in self.recent[a].iter() {
            if let Some(i) = peers.iter().position(|&s| s == to) {
                counts[i] += 1;
            }
        }
        counts
    }

    pub(super) fn probes(&self) -> bool {
        self.spec.probe > 0
    }

    /// When the next agent re-draws its sample (never with every peer).
    pub(super) fn next_redraw(&self) -> f64 {
        if self.bounded() && self.spec.resample_s > 0.0 {
            self.redraws as f64 * self.spec.resample_s / self.n as f64
        } else {
            f64::INFINITY
        }
    }

    /// The next agent in turn re-draws its sample at `now`.
    pub(super) fn redraw(&mut self, now: f64) {
        let a = (self.redraws % self.n as u64) as usize;
        self.redraws += 1;
        if self.subscribed[a] && !self.wants(a, now) {
            // No offer decided by the counts for WANT_FOR: it tells its sample.
            for &m in &self.samples[a] {
                self.subs[m] -= 1;
            }
            let k = self.samples[a].len() as u64;
            self.sent.renewals += k;
            self.pairs_beating(now, k as i64);
            self.subscribed[a] = false;
        }
        let (k, b) = (self.spec.sample, self.spec.keep);
        // Keep the b members it sees lowest (unknown ones last), ties at random.
        let (peers, counts) = self.view(a, now, |_| 0);
        let old = self.samples[a].clone();
        let mut ranked: Vec<(u32, u64, usize)> =
            old.iter().map(|&m| (peers.iter().position(|&p| p == m).map_or(u32::MAX, |i| counts[i]), self.rng.gen(), m)).collect();
        ranked.sort_unstable();
        let kept: Vec<usize> = ranked.iter().take(b).map(|&(_, _, m)| m).collect();
        let mut new = draw(&mut self.rng, self.n, a, &kept, k - kept.len());
        new.extend(&kept);
        new.sort_unstable();
        let mut sub_at = Vec::with_capacity(k);
        let wanting = self.subscribed[a];
        for &m in &new {
            match old.iter().position(|&o| o == m) {
                Some(i) => {
                    sub_at.push(self.sub_at[a][i]);
                    self.sent.renewals += 1;
                }
                None => {
                    // A new listener answers with its count at once.
                    sub_at.push(now);
                    self.sent.subscribes += 1;
                    self.sent.counts += 1;
                    if wanting {
                        self.subs[m] += 1;
                    }
                }
            }
        }
        for &m in old.iter().filter(|m| !new.contains(m)) {
            self.sent.unsubscribes += 1;
            if wanting {
                self.subs[m] -= 1;
            }
        }
        self.samples[a] = new;
        self.sub_at[a] = sub_at;
    }

    /// The last request arrived at `end`: heartbeats due until then.
    pub(super) fn finish(&mut self, end: f64) {
        if self.probes() {
            return; // an ask is its own liveness check: nothing beats
        }
        if self.bounded() {
            self.pairs_beating(end, 0);
        }
        for s in 0..self.n {
            let every = if self.bounded() { u64::from(self.subs[s]) } else { self.n as u64 - 1 };
            self.beats(s, end, every);
        }
    }

    #[cfg(test)]
    pub(super) fn sample(&self, a: usize) -> &[usize] {
        &self.samples[a]
    }
}

/// Server's count in force at `at` (older entries are dropped: every view
/// looks at the same `now - delay`, which only moves forward).
fn count_at(h: &mut VecDeque<(f64, u32)>, at: f64) -> u32 {
    while h.len() >= 2 && h[1].0 <= at {
        h.pop_front();
    }
    h[0].1
}

/// `k` servers drawn uniformly among those neither `a` nor in `not`, in order.
fn draw(rng: &mut SmallRng, n: usize, a: usize, not: &[usize], k: usize) -> Vec<usize> {
    let mut pool: Vec<usize> = (0..n).filter(|&s| s != a && !not.contains(&s)).collect();
    let k = k.min(pool.len());
    let mut drawn = pool.partial_shuffle(rng, k).0.to_vec();
    drawn.sort_unstable();
    drawn
}
