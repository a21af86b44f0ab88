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
//! * **shared otherwise** (`share`, [`super::share`]; off by default):
//!   filters on the sample's pushes (`level`, `delta`, `batch`: a member sends
//!   fewer counts, its heartbeats still carry the truth every [`HEARTBEAT_S`];
//!   `piggy`: a forward's answer tells the forwarder the peer's count), or
//!   tokens instead of the sample (a server below a level hands each free
//!   slot to one agent; an agent forwards only on a token).
//!
//! Either way an agent wants changes only while it decides offers by the
//! counts (for [`WANT_FOR_S`] after the last such offer): with one front every
//! offer is kept by the front's own count (`seen`), and nobody does.
//!
//! What an agent sees of a peer is the peer's count `fleet_delay_s` ago plus
//! the forwards it sent there within `fleet_delay_s + hop_s` (the agent's
//! `fleet_settle_ms`: sent, not yet in what it heard).

use super::share::Share;
use super::Datagrams;
use huntlb_policy::forward::redraw;
use rand::{rngs::SmallRng, Rng, SeedableRng};
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
    /// Filters on the pushed counts, or tokens instead (default: as shipped).
    pub share: Share,
}

/// A token (`Share::tokens`): server `server` held `count` when it sent it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Token {
    pub(super) server: usize,
    pub(super) count: u32,
    pub(super) sent: f64,
    /// It reaches its agent then (a datagram later).
    pub(super) usable: f64,
    pub(super) expires: f64,
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
    /// Filtered pushes: each server's true count, what it sent its listeners
    /// ((when, count): changes that went out and heartbeats), when it last
    /// sent, what, and whether a coalesced change waits for `batch`.
    cur: Vec<u32>,
    rep: Vec<VecDeque<(f64, u32)>>,
    last_push: Vec<f64>,
    last_val: Vec<u32>,
    pending: Vec<bool>,
    /// Filtered pushes: per agent, counts heard from one member alone (a
    /// subscription's answer, a forward's answer): (member, usable at, taken at, count).
    private: Vec<Vec<(usize, f64, f64, u32)>>,
    /// Tokens: each server's tokens out (their expiries, in order), each agent's held.
    out: Vec<VecDeque<f64>>,
    held: Vec<Vec<Token>>,
    /// Tokens with `piggy`: the forwarder whose forward is being taken now.
    answer_to: Option<usize>,
    /// Pull with `memory`: per agent, the lowest answers of its earlier pulls
    /// (server, count then plus its own forwards there since, when taken).
    memo: Vec<Vec<(usize, u32, f64)>>,
}

impl Tier {
    pub(super) fn new(spec: TierSpec, n: usize) -> Tier {
        let k = spec.sample.min(n - 1);
        let mut rng = SmallRng::seed_from_u64(spec.seed ^ 0x7165_7273_616d_706c);
        let samples: Vec<Vec<usize>> = if k == 0 {
            Vec::new()
        } else {
            (0..n).map(|a| draw(&mut rng, n, a, k)).collect()
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
            cur: vec![0; n],
            rep: vec![VecDeque::from([(f64::NEG_INFINITY, 0)]); n],
            last_push: vec![0.0; n],
            last_val: vec![0; n],
            pending: vec![false; n],
            private: vec![Vec::new(); n],
            out: vec![VecDeque::new(); n],
            held: vec![Vec::new(); n],
            answer_to: None,
            memo: vec![Vec::new(); n],
        }
    }

    fn filtered(&self) -> bool {
        self.spec.share.filtered() && self.bounded()
    }

    fn tokens(&self) -> Option<u32> {
        self.spec.share.tokens
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
            if self.filtered() {
                for i in 0..self.samples[a].len() {
                    let m = self.samples[a][i];
                    self.heard_alone(a, m, now + self.spec.delay_s, self.cur[m]);
                }
            }
        }
    }

    /// Agent `a` hears member `m`'s count `count`, as `m` held it at `taken`,
    /// from `m` alone (filtered pushes): usable a datagram after it was taken.
    fn heard_alone(&mut self, a: usize, m: usize, taken: f64, count: u32) {
        let p = &mut self.private[a];
        p.retain(|e| e.0 != m);
        p.push((m, taken + self.spec.delay_s, taken, count));
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
        if self.tokens().is_some() {
            return self.token_view(a, now);
        }
        if self.filtered() {
            return self.filtered_view(a, now);
        }
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
        if self.tokens().is_some() {
            // The token used: the least count of `to`'s usable ones.
            let h = &mut self.held[a];
            let i = (0..h.len()).filter(|&i| h[i].server == to && h[i].usable <= now).min_by_key(|&i| h[i].count).expect("a forward uses a token");
            h.swap_remove(i);
            self.out[to].pop_front();
        }
        if let Some(e) = self.memo[a].iter_mut().find(|e| e.0 == to) {
            e.1 += 1; // its own forward: the remembered count is a bound again
        }
        if self.delayed {
            self.recent[a].push_back((now, to));
        } else {
            self.forwarded[a][to] += 1;
        }
    }

    /// Server `s`'s count changed to `count`: it goes to whoever hears `s`.
    pub(super) fn changed(&mut self, s: usize, now: f64, count: u32) {
        if self.tokens().is_some() {
            self.cur[s] = count;
            self.issue(s, now, count);
            return;
        }
        if self.filtered() {
            self.settle(s, now);
            self.cur[s] = count;
            let share = self.spec.share;
            if share.worth_sending(self.last_val[s], count) {
                if share.batch_s > 0.0 && now < self.last_push[s] + share.batch_s {
                    self.pending[s] = true;
                } else {
                    self.push(s, now, count, false);
                }
            } else {
                self.pending[s] = false; // back to what was sent: nothing owed
            }
            return;
        }
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
        draw(&mut self.rng, self.n, a, d)
    }

    /// Pull on demand: the peers agent `a` decides over at `now` and their
    /// counts: the answers of those it `asked` (each read a datagram before,
    /// plus its own forwards there since), and with `memory` the lowest of
    /// its earlier answers not older than `age` (which it then updates).
    pub(super) fn answers(&mut self, a: usize, asked: &[usize], now: f64) -> (Vec<usize>, Vec<u32>) {
        let fresh = self.fresh_answers(a, asked, now);
        let m = self.spec.share.memory;
        if m == 0 {
            return (asked.to_vec(), fresh);
        }
        let taken = now - self.spec.delay_s;
        let old_enough = now - self.spec.share.memory_s;
        let mut all: Vec<(usize, u32, f64)> = asked.iter().zip(&fresh).map(|(&s, &c)| (s, c, taken)).collect();
        all.extend(self.memo[a].iter().filter(|e| e.2 >= old_enough && !asked.contains(&e.0)).copied());
        let peers = all.iter().map(|e| e.0).collect();
        let counts = all.iter().map(|e| e.1).collect();
        // Remember the m lowest (ties: the fresher).
        all.sort_by(|x, y| x.1.cmp(&y.1).then(y.2.total_cmp(&x.2)));
        all.truncate(m);
        self.memo[a] = all;
        (peers, counts)
    }

    fn fresh_answers(&mut self, a: usize, peers: &[usize], now: f64) -> Vec<u32> {
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
        let kept_from: Vec<(usize, u32)> = old.iter().map(|&m| (m, peers.iter().position(|&p| p == m).map_or(u32::MAX, |i| counts[i]))).collect();
        let mut new = redraw(&kept_from, &others(self.n, a), k, b, || self.rng.gen());
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
                    if self.filtered() {
                        let taken = now + self.spec.delay_s;
                        let c = self.cur[m];
                        self.heard_alone(a, m, taken, c);
                    }
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
        if self.filtered() {
            self.private[a].retain(|e| new.contains(&e.0));
        }
        self.samples[a] = new;
        self.sub_at[a] = sub_at;
    }

    /// Filtered pushes: server `s` sends `count` to its listeners at `t` (a
    /// change, or a heartbeat).
    fn push(&mut self, s: usize, t: f64, count: u32, beat: bool) {
        self.rep[s].push_back((t, count));
        self.last_push[s] = t;
        self.last_val[s] = count;
        self.pending[s] = false;
        let to = u64::from(self.subs[s]);
        if beat {
            self.sent.heartbeats += to;
        } else {
            self.sent.counts += to;
        }
    }

    /// Filtered pushes: what server `s` sent up to `t` on its timers (a
    /// coalesced change at the end of its batch, heartbeats after silence),
    /// all carrying its count since its last change (`t` is never before a
    /// timer an earlier change settled).
    fn settle(&mut self, s: usize, t: f64) {
        loop {
            let beat_at = self.last_push[s] + HEARTBEAT_S;
            let batch_at = if self.pending[s] { self.last_push[s] + self.spec.share.batch_s } else { f64::INFINITY };
            if beat_at.min(batch_at) > t {
                return;
            }
            let c = self.cur[s];
            if batch_at <= beat_at {
                self.push(s, batch_at, c, false);
            } else {
                // k beats of the same count in a row: the view needs the last.
                let k = ((t - self.last_push[s]) / HEARTBEAT_S).floor().max(1.0);
                self.sent.heartbeats += (k as u64 - 1) * u64::from(self.subs[s]);
                let at = self.last_push[s] + k * HEARTBEAT_S;
                self.push(s, at, c, true);
            }
        }
    }

    /// Filtered pushes: agent `a`'s members and their counts as it sees them:
    /// the latest of what the member sent its listeners and what it told `a`
    /// alone, a datagram late, plus `a`'s forwards there since that was taken.
    fn filtered_view(&mut self, a: usize, now: f64) -> (Vec<usize>, Vec<u32>) {
        let at = now - self.spec.delay_s;
        let horizon = HEARTBEAT_S + self.spec.share.batch_s + 2.0 * self.spec.delay_s + self.spec.hop_s + 0.01;
        let r = &mut self.recent[a];
        while r.front().is_some_and(|&(t, _)| t < now - horizon) {
            r.pop_front();
        }
        let known = |i: usize| now >= self.sub_at[a][i] + 2.0 * self.spec.delay_s;
        let peers: Vec<usize> = self.samples[a].iter().enumerate().filter(|&(i, _)| known(i)).map(|(_, &s)| s).collect();
        let mut counts = Vec::with_capacity(peers.len());
        let mut open = Vec::with_capacity(peers.len());
        // `full`: a count at the level's cap says only "that or more".
        let cap = self.spec.share.level.filter(|_| self.spec.share.full).map(|h| h.saturating_add(1));
        for &s in &peers {
            self.settle(s, at);
            let (mut taken, mut c) = heard_at(&mut self.rep[s], at);
            if let Some(&(_, _, t, pc)) = self.private[a].iter().find(|e| e.0 == s && e.1 <= now) {
                if t > taken {
                    (taken, c) = (t, pc);
                }
            }
            if cap.is_some_and(|cap| c >= cap) {
                continue;
            }
            // A forward is in what was taken if it got there by then.
            let hop = self.spec.hop_s;
            c += self.recent[a].iter().filter(|&&(t, to)| to == s && t + hop > taken).count() as u32;
            counts.push(c);
            open.push(s);
        }
        (open, counts)
    }

    /// A forward from agent `from` is about to be taken at server `to`
    /// (tokens with `piggy`: a token `to` owes now rides on the answer).
    pub(super) fn landing(&mut self, from: usize) {
        self.answer_to = Some(from);
    }

    /// A forward from agent `from` was taken at server `to` at `now`, which
    /// holds `count` since: with `piggy`, the answer tells `from` so.
    pub(super) fn landed(&mut self, from: usize, to: usize, now: f64, count: u32) {
        self.answer_to = None;
        if self.filtered() && self.spec.share.piggy {
            self.heard_alone(from, to, now, count);
        }
    }

    /// Tokens: server `s` holds `count` at `now`; it sends the tokens it owes
    /// (L - count, less those out and not lapsed), each to one agent deciding
    /// by counts, drawn at random (none: none sent).
    fn issue(&mut self, s: usize, now: f64, count: u32) {
        let l = self.tokens().expect("tokens");
        let out = &mut self.out[s];
        while out.front().is_some_and(|&e| e <= now) {
            out.pop_front();
        }
        let owed = (l.saturating_sub(count) as usize).saturating_sub(out.len());
        if owed == 0 {
            return;
        }
        let mut answer = self.answer_to.take().filter(|_| self.spec.share.piggy);
        let wanting: Vec<usize> = if answer.is_some() && owed == 1 {
            Vec::new()
        } else {
            (0..self.n).filter(|&a| a != s && self.wants(a, now)).collect()
        };
        let expires = now + self.spec.share.expire_s;
        for _ in 0..owed {
            let to = match answer.take() {
                Some(a) => {
                    self.sent.piggybacked += 1;
                    a
                }
                None if wanting.is_empty() => break,
                None => {
                    self.sent.tokens += 1;
                    wanting[self.rng.gen_range(0..wanting.len())]
                }
            };
            self.held[to].push(Token { server: s, count, sent: now, usable: now + self.spec.delay_s, expires });
            self.out[s].push_back(expires);
        }
    }

    /// Tokens: the servers agent `a` holds a usable token of, each with its
    /// count then plus `a`'s forwards there since.
    fn token_view(&mut self, a: usize, now: f64) -> (Vec<usize>, Vec<u32>) {
        let horizon = self.spec.share.expire_s + self.spec.delay_s;
        let r = &mut self.recent[a];
        while r.front().is_some_and(|&(t, _)| t < now - horizon) {
            r.pop_front();
        }
        self.held[a].retain(|t| t.expires > now);
        let usable: Vec<Token> = self.held[a].iter().filter(|t| t.usable <= now).copied().collect();
        let peers = usable.iter().map(|t| t.server).collect();
        let counts = usable
            .iter()
            .map(|t| t.count + self.recent[a].iter().filter(|&&(f, to)| to == t.server && f >= t.sent).count() as u32)
            .collect();
        (peers, counts)
    }

    #[cfg(test)]
    pub(super) fn held(&self, a: usize) -> &[Token] {
        &self.held[a]
    }

    /// The last request arrived at `end`: heartbeats due until then.
    pub(super) fn finish(&mut self, end: f64) {
        if self.probes() {
            return; // an ask is its own liveness check: nothing beats
        }
        if self.tokens().is_some() {
            return; // a token is its own liveness: nothing beats
        }
        if self.bounded() {
            self.pairs_beating(end, 0);
        }
        if self.filtered() {
            for s in 0..self.n {
                self.settle(s, end);
            }
            return;
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

/// What a server's listeners hold at `at`: (when it was sent, the count).
fn heard_at(h: &mut VecDeque<(f64, u32)>, at: f64) -> (f64, u32) {
    while h.len() >= 2 && h[1].0 <= at {
        h.pop_front();
    }
    h[0]
}

/// The servers but `a`.
fn others(n: usize, a: usize) -> Vec<usize> {
    (0..n).filter(|&s| s != a).collect()
}

/// `k` servers drawn uniformly among those but `a`, in order: a sample drawn
/// with none to keep (the agent's own draw, `redraw`).
fn draw(rng: &mut SmallRng, n: usize, a: usize, k: usize) -> Vec<usize> {
    let mut drawn = redraw(&[], &others(n, a), k, 0, || rng.gen());
    drawn.sort_unstable();
    drawn
}
