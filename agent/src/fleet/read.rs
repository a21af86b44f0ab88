//! Reading the members' reports: an offer about to decide by the counts
//! takes what is queued itself, so does the sample's tick, and a task on the
//! agent's runtime drains the socket when a tick and a half passed with no
//! read; a datagram is believed only from a member, sealed, naming its
//! source, newer than the last.

use super::batch::{Inbox, INBOX};
use super::members::Members;
use super::{lock, nonce, Fleet, Link, Peer, State, ANSWER_EVERY, READ_AT_MOST, READ_BUSY_MAX, READ_EVERY, READ_QUIET_MAX};
use crate::seal::Keys;
use huntlb_policy::forward::{open_ref, ReportRef, Rejected};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

impl Fleet {
    /// The reader: a task on the agent's own runtime (its one thread by
    /// default), not a thread of its own. It reads only when no one has for
    /// a tick and a half (liveness, and a buffer that must not drop the
    /// newest): the offers (`fresh`) and the sample's tick read, and each
    /// read moves the reader's next one on. At most `READ_AT_MOST` a pass,
    /// a batch at a time: a flood is dropped by the kernel, not read ahead
    /// of the requests. A thread of its own, woken every 10 ms over a
    /// condition variable the offers also waited on, cost the same CPU
    /// (docs/results/tier-cost.md): one thread is the simpler shape, with no
    /// wait across threads. Reading on each arrival instead (a wakeup per
    /// datagram, about 2000 a second per agent with 12 agents and 4 fronts
    /// at ρ 0.88) took the agents from 0.34 to 0.57 of a core on the 2-core
    /// bench.
    pub(super) async fn read_task(self: Arc<Self>) {
        // The sample's tick reads (`run`), and offers read before they
        // decide: the reader reads only when that tick is late by half a
        // tick, and at least every READ_QUIET_MAX.
        let read_busy = self.tick().mul_f32(1.5).clamp(READ_EVERY, READ_BUSY_MAX);
        // Quiet, what comes is beats and renewals, each a quiet beat apart:
        // read four times a beat. Liveness does not ride on it (whatever
        // judges a member alive, an offer's pick, the sample's task, a
        // scrape, reads what is queued first: `fresh`); what waits for it is
        // a waking member's ask for every change, answered a read later.
        let read_quiet = (self.quiet_beat() / 4).clamp(read_busy, READ_QUIET_MAX);
        loop {
            let every = if self.quiet() { read_quiet } else { read_busy };
            let due = self.born + Duration::from_micros(self.read_at.load(Ordering::Relaxed)) + every;
            if Instant::now() < due {
                // An offer's read wakes this task (on the same thread: no
                // syscall), which only sets its timer later.
                tokio::select! {
                    () = tokio::time::sleep_until(due.into()) => {}
                    () = self.read_moved.notified() => {}
                }
                continue;
            }
            // A pass of at most READ_AT_MOST, a batch at a time, yielding
            // between batches: a flood of junk shares the thread with the
            // requests instead of holding it.
            let mut left = READ_AT_MOST;
            while left > 0 {
                let all = match self.inbox.try_lock() {
                    Ok(mut inbox) => self.drain(&mut inbox, INBOX.min(left)),
                    Err(_) => true, // another worker is reading (threads > 1)
                };
                left = left.saturating_sub(INBOX);
                if all {
                    break;
                }
                tokio::task::yield_now().await;
            }
            self.read_at.store(self.micros(), Ordering::Relaxed);
        }
    }

    /// Take what is queued, at most `most` datagrams, up to `INBOX` a
    /// syscall (`Inbox`). False if it stopped at `most` with more queued
    /// (it cannot tell when exactly `most` were).
    pub(super) fn drain(&self, inbox: &mut Inbox, most: usize) -> bool {
        let mut read = 0;
        while read < most {
            match inbox.recv(&self.sock, most - read) {
                Ok((n, all)) => {
                    // The members and the keys as of this batch: its datagrams
                    // are checked without the lock (a flood of junk keeps no
                    // offer from the tables).
                    let (members, keys) = {
                        let st = lock(&self.state);
                        (st.members.clone(), st.keys.clone())
                    };
                    for i in 0..n {
                        if let (d, Some(from)) = inbox.get(i) {
                            self.take(d, from, &members, &keys);
                        }
                    }
                    read += n;
                    if all || n == 0 {
                        return true;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                // A send's ICMP error, where the platform reports one to an
                // unconnected socket: not about what is queued.
                Err(e) if matches!(e.kind(), std::io::ErrorKind::Interrupted | std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset) => read += 1,
                Err(e) => {
                    if self.may_log() {
                        warn!(error = %e, "fleet_listen: read failed");
                    }
                    return true;
                }
            }
        }
        false
    }

    /// Before an offer decides by the counts: take what is queued, here, on
    /// the offer's thread: a report the kernel already has is in the
    /// decision, with nothing to wake. One batch (`INBOX`) at most: a burst,
    /// or a flood of junk, costs an offer one batch's checks (about 2 µs a
    /// datagram) and leaves the rest to the reader, which is then due at
    /// once. With `threads` > 1 and another worker reading, the offer decides
    /// on the tables as they are (that worker is taking the news).
    pub(super) fn fresh(&self) {
        let Ok(mut inbox) = self.inbox.try_lock() else { return };
        let all = self.drain(&mut inbox, INBOX);
        drop(inbox);
        // All taken: the reader's next read moves on. More queued: it is due now.
        self.read_at.store(if all { self.micros() } else { 0 }, Ordering::Relaxed);
        self.read_moved.notify_one();
    }

    /// One datagram: believed only from a member, sealed under a key held,
    /// naming its source as its sender and this agent as its receiver,
    /// echoing the nonce this agent gave that member, and newer than the
    /// last taken under that nonce. Checked against `members` and `keys` (the
    /// batch's) first, then taken under the lock.
    pub(super) fn take(&self, d: &[u8], from: SocketAddr, members: &Members, keys: &Keys) {
        // An IPv4 member heard on a dual-stack `[::]` socket: its own address.
        let from = SocketAddr::new(from.ip().to_canonical(), from.port());
        if !members.set.contains(&from) {
            return self.drop_bad(Bad::Stranger, from, "source is no member of fleet_peers");
        }
        let r = match open_ref(d, |text, tag| keys.verify(text, tag)) {
            Ok(r) => r,
            Err(Rejected::Unauthenticated) => return self.drop_bad(Bad::Unauthenticated, from, "MAC matches no key in fleet_key_file"),
            Err(Rejected::Malformed(e)) => return self.drop_bad(Bad::Malformed, from, &e),
            Err(Rejected::Version(v)) => {
                return self.drop_bad(Bad::Version, from, &format!("{v}: an agent of an earlier huntlb; agents of different tier versions neither hear nor forward to each other: upgrade it"))
            }
        };
        // A recorded report sent again from another member's address.
        if r.from.parse::<SocketAddr>().ok() != Some(from) {
            return self.drop_bad(Bad::Replayed, from, "names another sender than its source");
        }
        if from == self.cfg.from {
            return;
        }
        // A report recorded on its way to another member.
        if r.to.parse::<SocketAddr>().ok() != Some(self.cfg.from) {
            return self.drop_bad(Bad::Replayed, from, "is for another member");
        }
        let taken = self.heard(&mut lock(&self.state), &r, from);
        // What the report asks of us, done after the lock.
        match taken {
            Taken::Unproven { answer } => {
                self.bad[Bad::Unproven as usize].fetch_add(1, Ordering::Relaxed);
                debug!(%from, answer, "fleet_listen: report echoes no nonce of ours (first contact, a restart, or a replay): not taken");
                if answer {
                    self.answer(from, r.mine);
                }
            }
            Taken::Old { starved } => {
                self.drop_bad(Bad::Replayed, from, "not newer than the last report from this member");
                if starved {
                    warn!(peer = %from, "fleet_listen: a member's reports have been dropped as old for half of fleet_dead_after_ms: nonce drawn again, its sequence starts over");
                    self.answer(from, r.mine);
                }
            }
            Taken::Yes { send, released } => {
                self.taken.fetch_add(1, Ordering::Relaxed);
                match (send, released) {
                    (true, Some(m)) => self.send(&[from, m]),
                    (true, None) => self.send(&[from]),
                    (false, Some(m)) => self.send(&[m]),
                    (false, None) => true,
                };
            }
            Taken::Gone => {}
        }
    }

    /// A sealed report from `from`, for us: taken into the tables if it
    /// echoes our nonce and is newer than the last.
    fn heard(&self, st: &mut State, r: &ReportRef<'_>, from: SocketAddr) -> Taken {
        // No longer a member since its batch began (a new list): not taken,
        // so the tables keep members only.
        if !st.members.set.contains(&from) {
            return Taken::Gone;
        }
        let now = Instant::now();
        let link = st.links.entry(from).or_insert_with(|| Link::new(from));
        if r.yours != link.mine {
            // It does not know our nonce (yet, or any more): answer with it,
            // echoing its own, and it is heard from its next report on.
            let answer = link.answered.is_none_or(|t| now.duration_since(t) >= ANSWER_EVERY);
            if answer {
                link.answered = Some(now);
            }
            return Taken::Unproven { answer };
        }
        let answer;
        if r.boot != link.boot {
            // The member's first report under our nonce, or its new boot: taken,
            // and our nonce drawn again, so that nothing sent before (by
            // its earlier boot, or recorded) is ever taken again.
            if link.boot != 0 {
                info!(peer = %from, "peer restarted: heard under a new nonce");
            }
            (link.boot, link.theirs, link.seq, link.mine) = (r.boot, r.mine, r.seq, nonce());
            answer = true;
        } else if r.seq <= link.seq {
            // Not newer than what we took under this nonce: reordered by UDP,
            // or replayed. If the member has not been taken for half its
            // dead_after, its own reports are what is being dropped (a
            // forged sequence from a key holder): our nonce is drawn again,
            // the sequence starts over, and it is back one round trip later.
            let starved = link.taken.is_none_or(|t| now.duration_since(t) >= self.cfg.dead_after / 2);
            if starved {
                (link.mine, link.seq) = (nonce(), 0);
                link.answered = Some(now);
            }
            return Taken::Old { starved };
        } else {
            // It drew its nonce for us again (our boot is new to it, or it
            // healed a lock-out): our report goes back at once, echoing it, so
            // that it hears us now rather than at our next beat.
            answer = r.mine != link.theirs;
            (link.seq, link.theirs) = (r.seq, r.mine);
        }
        (link.taken, link.asked) = (Some(now), None);
        // How long it stays alive: by what our reports ask of it (every
        // change, or beats each quiet beat), not by anything it says.
        let alive_for = self.alive_for();
        match st.peers.get_mut(&from) {
            Some(p) => {
                if !p.ready && r.ready {
                    info!(peer = %from, "peer takes forwards again");
                }
                (p.busy, p.ready, p.heard, p.alive_for) = (r.busy, r.ready, now, alive_for);
            }
            None => {
                info!(peer = %from, busy = r.busy, ready = r.ready, "peer heard");
                st.peers.insert(
                    from,
                    Peer { busy: r.busy, ready: r.ready, heard: now, alive_for, sent: VecDeque::new(), outstanding: Default::default(), benched: None, strikes: 0 },
                );
            }
        }
        let first = self.listen(st, from, r.sub, now);
        // A member drawn in, heard: the member that stood in for it leaves
        // the view, and is told so (`State::standby`).
        let released = st.standby.iter().position(|(_, drawn)| *drawn == from).map(|i| st.standby.swap_remove(i).0);
        Taken::Yes { send: first || answer, released }
    }

    /// Counted; at most 10 lines per 10 s, so a flood cannot fill the log.
    pub(super) fn drop_bad(&self, why: Bad, from: SocketAddr, e: &str) {
        self.bad[why as usize].fetch_add(1, Ordering::Relaxed);
        if self.may_log() {
            warn!(%from, reason = ?why, error = e, "fleet_listen: datagram dropped");
        }
    }

    /// At most 10 lines in each 10 s window since `born`. Racing threads may
    /// log a line or two more at a window's turn: a bound, not a count.
    pub(super) fn may_log(&self) -> bool {
        let window = self.born.elapsed().as_secs() / 10;
        let logged = self.bad_logged.load(Ordering::Relaxed);
        if logged >> 32 != window {
            self.bad_logged.store(window << 32 | 1, Ordering::Relaxed);
            return true;
        }
        self.bad_logged.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff < 10
    }
}

/// What a sealed report for us came to, under the lock; the rest is done after it.
enum Taken {
    /// Echoing no nonce of ours: not taken; `answer`: ours goes back (at
    /// most one an `ANSWER_EVERY`).
    Unproven { answer: bool },
    /// Not newer than the last: dropped; `starved`: our nonce was drawn
    /// again, and goes back.
    Old { starved: bool },
    /// Taken; `send`: our count goes back now (a new listener, or one that
    /// must learn our nonce); `released`: a member that stood in for this
    /// one, out of the view now, told to leave.
    Yes { send: bool, released: Option<SocketAddr> },
    /// From a member no longer one.
    Gone,
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
