//! This agent's side of the subscriptions: which members it hears (its
//! sample, drawn again every `fleet_resample_ms`), and where its own count
//! goes: to the members that sample it, every change to those that want
//! changes, a heartbeat to the others after a beat of silence.
//!
//! Every report carries what its sender asks of its receiver (`Sub`): a
//! member in the sender's sample has its subscription renewed (every change,
//! or beats), any other is told to send nothing. So a draw that drops a
//! member ends that subscription with the same datagram that would renew it.

use super::batch::{scratch, Batch};
use super::{lock, Fleet, Link, Listener, ReportFn, State, KEYS_EVERY};
use huntlb_policy::forward::{append_tag, ReportRef, Sub};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{error, info};

impl Fleet {
    /// Where this agent's count comes from; then draw the sample every
    /// `fleet_resample_ms` (renewing its subscriptions), beat to the silent
    /// listeners, and look at the key file for a rotation. Ends when `report`
    /// says the agent is gone.
    pub async fn run(self: Arc<Self>, report: ReportFn) {
        if self.report.set(report).is_err() {
            return;
        }
        let (every, quiet_every) = (self.tick(), self.quiet_tick());
        let (mut drawn, mut keys_at): (Option<Instant>, Instant) = (None, Instant::now());
        loop {
            // What is queued first: the draw keeps by fresh counts (and the
            // reader task's next read moves on).
            self.fresh();
            let quiet = self.quiet();
            let resample = if quiet { self.cfg.resample.max(self.quiet_beat()) } else { self.cfg.resample };
            if drawn.is_none_or(|t| t.elapsed() >= resample) {
                drawn = Some(Instant::now());
                if !self.redraw() {
                    return;
                }
            }
            let Some(next_beat) = self.beat() else { return };
            let Some(all_heard) = self.renew_unheard() else { return };
            if keys_at.elapsed() >= KEYS_EVERY {
                keys_at = Instant::now();
                self.reload_keys();
            }
            // Until the next thing due (a draw, a listener's beat, the key
            // file), not a fixed tick: under load every change already told
            // the listeners, and idle, a beat is due each quiet beat.
            // At least a tick apart; a tick while a sampled member is unheard.
            // Quiet, the key file is looked at in a pass that comes anyway (a
            // beat or a draw, each quiet beat), not one of its own.
            let now = Instant::now();
            let floor = now + if quiet { quiet_every } else { every };
            let keys_due = (!quiet).then_some(keys_at + KEYS_EVERY);
            let due = [drawn.map(|t| t + resample), next_beat, keys_due].into_iter().flatten().min().unwrap_or(floor);
            tokio::select! {
                () = tokio::time::sleep_until((if all_heard { due.max(floor) } else { floor }).into()) => {}
                // Quiet no more: beats and draws are due sooner than this sleep.
                () = self.busy_now.notified(), if quiet => {}
            }
        }
    }

    /// How often the sample's task ticks (`run`) while offers decide by counts.
    pub(super) fn tick(&self) -> Duration {
        self.cfg.heartbeat.min(self.cfg.resample) / 2
    }

    /// Quiet (nothing decides by counts, here or at a listener): a tick, a
    /// draw and a beat to each listener as liveness needs them, no more
    /// (`quiet_beat`): the fixed part a fleet pays at idle, or behind one front.
    pub(super) fn quiet_tick(&self) -> Duration {
        let every = self.tick();
        (self.cfg.dead_after / 8).clamp(every, Duration::from_millis(500).max(every))
    }

    /// A change of this agent's count: to the listeners that want every
    /// change; and when this agent starts or stops wanting its sample's
    /// changes, to its sample at once. Called from the thread that made the
    /// change: a task woken for it would add a scheduling delay, and the
    /// simulator puts the tier at 0.81x least-request with counts 0.2 ms late
    /// but 0.84x at 1 ms and 1.00x at 5 ms.
    pub fn changed(&self) {
        let now = Instant::now();
        // Into a list this thread keeps: no allocation at each change.
        scratch(|to| {
            {
                let st = lock(&self.state);
                to.extend(st.listeners.iter().filter(|(_, x)| x.changes && now.duration_since(x.renewed) <= self.cfg.dead_after).map(|(a, _)| *a));
                let changes = self.wants();
                if self.told_changes.swap(changes, Ordering::Relaxed) != changes {
                    if changes {
                        self.busy_now.notify_one();
                    }
                    for m in st.subscribed() {
                        if !to.contains(m) {
                            to.push(*m);
                        }
                    }
                }
            }
            if !to.is_empty() {
                self.send(to);
            }
        });
    }

    /// Draw the sample again: keep the `keep` least loaded of it (ready and
    /// alive: `Peer::alive`), draw the rest uniformly from the other members,
    /// and send our count to the new sample (renewing) and to the dropped
    /// (ending). Without a sample (`fleet_sample` 0, or no more members than
    /// it), every member. A member drawn that is not alive has a dropped
    /// member in view stand in for it until it is (`State::standby`):
    /// renewed, not ended. False once the agent is gone.
    pub(super) fn redraw(&self) -> bool {
        // Quiet, nothing here or at a listener decides by counts, so a fresh
        // draw buys little: all but one of the sample is kept (renewed), and
        // one member drawn anew, where each quiet beat used to drop and ask
        // half the sample (a leave, a subscription and its answer each). Not
        // none: in time every member is drawn, a dead one too, and counted
        // unheard (`huntlb_fleet_peers_unheard`) in an idle fleet. (Read
        // before the lock, which `quiet` takes.)
        let keep = if self.quiet() { self.cfg.keep.max(self.cfg.sample.saturating_sub(1)) } else { self.cfg.keep };
        let mut st = lock(&self.state);
        let others = st.members.others.clone();
        let old = std::mem::take(&mut st.sample);
        let old_standby = std::mem::take(&mut st.standby);
        let k = self.cfg.sample;
        let now = Instant::now();
        let new = if k == 0 || k >= others.len() {
            others
        } else {
            // What may be kept: the old sample's members ready and heard
            // within dead_after, at their count plus what we forwarded since.
            let kept_from: Vec<(SocketAddr, u32)> = {
                let peers = &st.peers;
                old.iter()
                    .filter_map(|m| peers.get(m).map(|p| (m, p)))
                    .filter(|(_, p)| p.ready && p.alive(now))
                    .map(|(m, p)| (*m, p.busy.saturating_add(p.sent.len() as u32)))
                    .collect()
            };
            huntlb_policy::forward::redraw(&kept_from, &others, k, keep, || self.draw())
        };
        // Make before break: each member drawn that is not heard yet has a
        // member of the old view, dropped now but in view, stand in for it
        // until it is (`heard` releases it). Not heard yet: silent for
        // dead_after, or new to the view (not subscribed until this draw's
        // report reaches it: what it said last was before it was dropped, and
        // goes stale a round trip before its answer comes if it was dropped
        // about dead_after ago). So the view after a draw holds at least as
        // many as before, up to the sample; a dead member drawn again and
        // again is stood in for too (`huntlb_fleet_peers_unheard` counts it).
        let was: Vec<SocketAddr> = old.iter().chain(old_standby.iter().map(|(m, _)| m)).copied().collect();
        let unheard: Vec<SocketAddr> = new.iter().filter(|m| !was.contains(m) || st.peers.get(m).is_none_or(|p| !p.alive(now))).copied().collect();
        let dropped: Vec<SocketAddr> = was.into_iter().filter(|m| !new.contains(m)).collect();
        st.standby = dropped.iter().filter(|m| st.peers.get(m).is_some_and(|p| p.in_view(now))).copied().zip(unheard).collect();
        // A member new to the sample answers its subscription at once: it is
        // asked. One kept is renewed, and answers at its next beat.
        ask(&mut st, new.iter().filter(|m| !old.contains(m)));
        let mut to = dropped;
        to.extend_from_slice(&new);
        st.sample = new;
        drop(st);
        self.told_changes.store(self.wants(), Ordering::Relaxed);
        // Each report asks what the tables now say: the new sample and the
        // standing-in renewed, the rest of the dropped ended.
        self.send(&to)
    }

    /// Our count to each listener it has not gone to for a beat (peers take
    /// silence for death); listeners that stopped renewing are forgotten.
    /// When the next beat is due (None inside: no listener); None once the
    /// agent is gone.
    pub(super) fn beat(&self) -> Option<Option<Instant>> {
        let now = Instant::now();
        let (heartbeat, quiet) = (self.cfg.heartbeat, self.quiet_beat());
        // A listener that wants every change decides by our count: a beat
        // each heartbeat. One that asked for beats only decides by no
        // count: it needs to hear us each quiet beat, no sooner
        // (`FleetConfig::beats_alive`).
        let period = |x: &Listener| if x.changes { heartbeat } else { quiet };
        let (to, next): (Vec<SocketAddr>, Option<Instant>) = {
            let l = &mut lock(&self.state).listeners;
            l.retain(|_, x| self.subscribed_now(x, now));
            // When one is due, every one past half its period goes too (a
            // beat early is no harm): listeners subscribed at different
            // moments come into step, and a quiet agent wakes once a quiet
            // beat for all of them, not once for each.
            let due = |x: &Listener, part: u32| now.duration_since(x.told) >= period(x) / part;
            let part = if l.values().any(|x| due(x, 1)) { 2 } else { 1 };
            let to = l.iter().filter(|(_, x)| due(x, part)).map(|(a, _)| *a).collect();
            // The ones told now are due a period from now; the others at theirs.
            let next = l.values().map(|x| if due(x, part) { now + period(x) } else { x.told + period(x) }).min();
            (to, next)
        };
        let alive = if to.is_empty() { self.report.get().is_some_and(|r| r().is_some()) } else { self.send(&to) };
        alive.then_some(next)
    }

    /// Renew the subscription with each member of the sample not alive
    /// (`Peer::alive`; or never heard): a subscription lost on the way (the
    /// member was not listening yet) heals within a tick, not at the next
    /// draw. Costs nothing while every sampled member is heard. Whether every
    /// one was; None once the agent is gone.
    pub(super) fn renew_unheard(&self) -> Option<bool> {
        let now = Instant::now();
        let unheard: Vec<SocketAddr> = {
            let mut st = lock(&self.state);
            let unheard: Vec<SocketAddr> = st.sample.iter().filter(|m| st.peers.get(m).is_none_or(|p| !p.alive(now))).copied().collect();
            ask(&mut st, unheard.iter());
            unheard
        };
        (unheard.is_empty() || self.send(&unheard)).then_some(unheard.is_empty())
    }

    /// A member subscribed (`Beats` or `Changes`) or left: note it. True
    /// for a new listener (or one that now wants changes): our count goes to
    /// it at once (`take`), so that it need not wait a beat to know us.
    pub(super) fn listen(&self, st: &mut State, from: SocketAddr, sub: Sub, now: Instant) -> bool {
        let l = &mut st.listeners;
        match sub {
            Sub::Leave => {
                l.remove(&from);
                false
            }
            Sub::Beats | Sub::Changes => {
                let changes = sub == Sub::Changes;
                match l.get_mut(&from) {
                    Some(x) => {
                        let first = changes && !x.changes;
                        (x.changes, x.renewed) = (changes, now);
                        if first {
                            self.busy_now.notify_one();
                        }
                        first
                    }
                    None => {
                        l.insert(from, Listener { changes, renewed: now, told: now });
                        if changes {
                            self.busy_now.notify_one();
                        }
                        true
                    }
                }
            }
        }
    }

    /// Our count to `to`, a member whose report echoed no nonce of ours,
    /// echoing the nonce that report carried (`echo`): if it was the
    /// member's own, it takes this one and learns our nonce; if it was a
    /// replay, the member drops this and answers with its own.
    pub(super) fn answer(&self, to: SocketAddr, echo: u64) {
        self.send_with(&[to], Some(echo));
    }

    /// Our count now, sealed, to each of `to` (members), each report asking
    /// of its receiver what our sample says: renewed if it is in the sample
    /// (or stands in for one of it: `State::standby`), ended if not. Never waits: a full send buffer drops a report, and the
    /// next change or beat resends. False once the agent is gone.
    pub(super) fn send(&self, to: &[SocketAddr]) -> bool {
        self.send_with(to, None)
    }

    /// `send`, echoing `echo` instead of each member's nonce as last taken.
    /// Each report is for one receiver (its address, our nonce for it, its
    /// nonce for us), so each is sealed apart: one HMAC a datagram.
    fn send_with(&self, to: &[SocketAddr], echo: Option<u64>) -> bool {
        let Some(report) = self.report.get() else { return false };
        let sub = if self.wants() { Sub::Changes } else { Sub::Beats };
        Batch::with(|batch| {
            // Written into this thread's buffers under the lock; sealed (an
            // HMAC each) and sent (one syscall) after it.
            let keys = {
                let mut st = lock(&self.state);
                // Read under the lock that numbers it: a later number carries a later count.
                let Some((busy, ready)) = report() else { return false };
                st.seq += 1;
                let (seq, now) = (st.seq, Instant::now());
                let State { links, sample, standby, listeners, keys, .. } = &mut *st;
                for peer in to {
                    let link = links.entry(*peer).or_insert_with(|| Link::new(*peer));
                    let s = if sample.contains(peer) || standby.iter().any(|(m, _)| m == peer) { sub } else { Sub::Leave };
                    let d = batch.push(*peer);
                    ReportRef { from: &self.from_text, to: &link.to, boot: self.boot, seq, busy, ready, sub: s, mine: link.mine, yours: echo.unwrap_or(link.theirs) }.write_text(d);
                    if let Some(x) = listeners.get_mut(peer) {
                        x.told = now;
                    }
                }
                keys.clone()
            };
            batch.each(|d| {
                let tag = keys.tag(d);
                append_tag(d, &tag);
            });
            batch.send(&self.sock);
            self.sent.fetch_add(to.len() as u64, Ordering::Relaxed);
            true
        })
    }

    pub(super) fn reload_keys(&self) {
        // The file is read outside the lock.
        let current = lock(&self.state).keys.clone();
        match current.reload_if_changed(&self.cfg.key_file, self.cfg.key_readers) {
            Ok(None) => {}
            Ok(Some(k)) => {
                info!(keys = k.len(), "fleet_key_file changed: reports sealed with its first key, taken under any");
                lock(&self.state).keys = Arc::new(k);
            }
            Err(e) => error!(error = %e, "config key `fleet_key_file`: does not load; the keys in use stay"),
        }
    }
}

/// Date the ask of each of `members` (`Link::asked`), unless an earlier
/// ask is still unanswered: a report to them now wants an answer within a
/// round trip. Not every report asks: a renewal of a member that hears
/// us is answered at its next beat, up to a quiet beat away when
/// quiet, and one late beat on a busy host is no member that does not answer.
fn ask<'a>(st: &mut State, members: impl Iterator<Item = &'a SocketAddr>) {
    let now = Instant::now();
    for m in members {
        st.links.entry(*m).or_insert_with(|| Link::new(*m)).asked.get_or_insert(now);
    }
}
