//! Reading the members' reports, off the offer path: a thread of its own that
//! drains the socket every `READ_EVERY` and when an offer asks, and believes a
//! datagram only from a member, sealed, naming its source, newer than the last.

use super::{Bad, Fleet, Peer, ASK_WAIT, READ_AT_MOST, READ_EVERY};
use huntlb_policy::forward::{open, Rejected};
use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::{Duration, Instant};
use tracing::{info, warn};

impl Fleet {
    /// The reader thread: it drains the socket every `READ_EVERY` (liveness,
    /// and a buffer that must not drop the newest) and whenever an offer
    /// about to decide by the counts asks (`fresh`). Reading when asked, not
    /// on each arrival: a wakeup per datagram (about 2000 a second per agent
    /// with 12 agents and 4 fronts at ρ 0.88) took the tier's agents from 0.34
    /// to 0.57 of a core on the 2-core bench and cost 2.5% of the mean; reading
    /// every 2 ms instead left counts up to 2 ms old and cost 6%.
    pub(super) fn read_forever(&self) {
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
    pub(super) fn drain(&self, buf: &mut [MaybeUninit<u8>]) {
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
    pub(super) fn fresh(&self) {
        let mut asks = self.asks.lock().unwrap_or_else(PoisonError::into_inner);
        asks.asked += 1;
        let want = asks.asked;
        self.asked.notify_one();
        let _ = self.drained.wait_timeout_while(asks, ASK_WAIT, |a| a.done < want);
    }

    /// One datagram: believed only from a member, sealed under a key held,
    /// naming its source as its sender, and newer than the last from it.
    pub(super) fn take(&self, d: &[u8], from: SocketAddr) {
        if !self.members.read().unwrap_or_else(PoisonError::into_inner).set.contains(&from) {
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
        self.taken.fetch_add(1, Ordering::Relaxed);
        self.listen(from, r.sub);
    }

    /// Counted; at most 10 lines per 10 s, so a flood cannot fill the log.
    pub(super) fn drop_bad(&self, why: Bad, from: SocketAddr, e: &str) {
        self.bad[why as usize].fetch_add(1, Ordering::Relaxed);
        if self.may_log() {
            warn!(%from, reason = ?why, error = e, "fleet_listen: datagram dropped");
        }
    }

    pub(super) fn may_log(&self) -> bool {
        let mut g = self.bad_logged.lock().unwrap_or_else(PoisonError::into_inner);
        if g.0.elapsed() > Duration::from_secs(10) {
            *g = (Instant::now(), 0);
        }
        g.1 += 1;
        g.1 <= 10
    }
}
