//! The load `b` the policy compares with `c`, and whether the app makes progress.
//!
//! * In-flight (default): requests this agent has forwarded and not finished.
//!   Exact for an app reached only through the agent.
//! * Apache's busy workers, read every `apache_poll_ms`: from the scoreboard in
//!   shared memory (`apache_scoreboard`, [`scoreboard`]), as SRLB's agent read
//!   it, or from `mod_status?auto` (`apache_status_url`): the status request
//!   itself occupies one worker, so one is subtracted.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::collections::HashMap;
use crate::sync::lock;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub mod kv;
pub mod scoreboard;

/// Requests in flight to the app, with a guard that counts one down on drop.
/// Every change calls the hook set by [`Inflight::on_change`] on the thread
/// that made it (the forwarding tier sends the new count from there: no task
/// to wake, so peers hear it as soon as this thread runs on).
#[derive(Default)]
pub struct Inflight {
    n: AtomicU32,
    /// With `load = "llm"`: the estimated prompt tokens of requests still
    /// waiting for their first response byte (each held by a [`PrefillGuard`]).
    prefill: AtomicU64,
    on_change: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Inflight {
    pub fn get(&self) -> u32 {
        self.n.load(Ordering::Acquire)
    }

    pub fn enter(self: &Arc<Self>) -> InflightGuard {
        self.n.fetch_add(1, Ordering::AcqRel);
        self.changed();
        InflightGuard(self.clone())
    }

    /// Prompt tokens waiting for prefill (`load = "llm"`).
    pub fn prefill_tokens(&self) -> u64 {
        self.prefill.load(Ordering::Acquire)
    }

    /// Count `tokens` of prompt waiting for prefill until the guard drops (at
    /// the request's first response byte, or when it ends without one). None
    /// for 0: nothing to count, nothing to tell peers. `tell` false: the
    /// caller makes a change right after (`enter`), which tells both.
    pub fn prefill(self: &Arc<Self>, tokens: u64, tell: bool) -> Option<PrefillGuard> {
        if tokens == 0 {
            return None;
        }
        self.prefill.fetch_add(tokens, Ordering::AcqRel);
        if tell {
            self.changed();
        }
        Some(PrefillGuard(self.clone(), tokens))
    }

    /// Set once, at start; a second hook is ignored.
    pub fn on_change(&self, f: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_change.set(f);
    }

    /// Run the hook now (a change the count does not show: a drain).
    pub fn changed(&self) {
        if let Some(f) = self.on_change.get() {
            f();
        }
    }
}

pub struct InflightGuard(Arc<Inflight>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.n.fetch_sub(1, Ordering::AcqRel);
        self.0.changed();
    }
}

/// A request's place in the load: its seat, and with `load = "llm"` its
/// prompt's weight, held until its first response byte.
pub struct Slot {
    pub seat: InflightGuard,
    pub prefill: Option<PrefillGuard>,
}

/// A request's prompt tokens in [`Inflight::prefill_tokens`], until dropped.
pub struct PrefillGuard(Arc<Inflight>, u64);

impl Drop for PrefillGuard {
    fn drop(&mut self) {
        self.0.prefill.fetch_sub(self.1, Ordering::AcqRel);
        self.0.changed();
    }
}

/// Tries this agent is relaying to peers (the forwarding tier): not load here,
/// but a drain waits for them as for its own requests.
#[derive(Default, Debug)]
pub struct Relaying(AtomicU32);

impl Relaying {
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }

    pub fn enter(self: &Arc<Self>) -> RelayGuard {
        self.0.fetch_add(1, Ordering::AcqRel);
        RelayGuard(self.clone())
    }
}

pub struct RelayGuard(Arc<Relaying>);

impl Drop for RelayGuard {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Requests in flight per front (`hunt-front`, `hunt-pass`, or with
/// `fleet_pass_plain` a plain front's source IP): each front's own count at
/// this backend, what a front that cannot send `hunt-seen` would have sent.
/// A front's entry lives while it has requests here, and the table holds at
/// most `MAX_FRONTS` of them: a try from one more front is counted for none
/// (its front's count here is unknown, `seen` None, and the tier decides it
/// by the loads alone).
#[derive(Default, Debug)]
pub struct PerFront(Mutex<HashMap<Box<[u8]>, u32>>);

/// At most this many fronts counted at once, as many as the fleet's members
/// (`MAX_MEMBERS`): a front is a proxy, and more proxies than backends with
/// requests at one backend at once is no fleet this was built for. About 80
/// bytes an entry (the map's slot, the key's allocation), so at most ~330 KB.
pub const MAX_FRONTS: usize = crate::config::MAX_MEMBERS;

impl PerFront {
    #[cfg(test)]
    pub fn get(&self, front: &[u8]) -> u32 {
        lock(&self.0).get(front).copied().unwrap_or(0)
    }

    /// What `front` holds here, or None if it has nothing here and the table
    /// is full (its tries are counted for no front until there is room).
    pub fn seen(&self, front: &[u8]) -> Option<u32> {
        let m = lock(&self.0);
        match m.get(front) {
            Some(n) => Some(*n),
            None => (m.len() < MAX_FRONTS).then_some(0),
        }
    }

    /// Count one request for `front` until the guard drops; None (not
    /// counted) if `front` is new and `MAX_FRONTS` are counted already.
    pub fn enter(self: &Arc<Self>, front: &[u8]) -> Option<PerFrontGuard> {
        let mut m = lock(&self.0);
        let room = m.len() < MAX_FRONTS;
        match m.get_mut(front) {
            Some(n) => *n += 1,
            None if room => {
                m.insert(front.into(), 1);
            }
            None => return None,
        }
        Some(PerFrontGuard(self.clone(), front.into()))
    }

    /// Fronts with requests in flight (a front's entry goes with its last request).
    #[cfg(test)]
    pub fn fronts(&self) -> usize {
        lock(&self.0).len()
    }
}

pub struct PerFrontGuard(Arc<PerFront>, Box<[u8]>);

impl Drop for PerFrontGuard {
    fn drop(&mut self) {
        let mut m = lock(&self.0 .0);
        if let Some(n) = m.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.1);
            }
        }
    }
}

/// Is the app making progress? Requests waiting for the app's response head,
/// and when it last showed progress: a response head, or the moment something
/// started waiting while nothing was. Response bodies do not count as waiting:
/// a long stream (server-sent events) is progress, not a stall.
#[derive(Debug)]
pub struct Progress {
    epoch: Instant,
    waiting: AtomicU32,
    mark_ms: AtomicU64,
    /// When the app last answered (a response head, or an HTTP probe): `NEVER` before.
    answer_ms: AtomicU64,
    /// When a health check's TCP probe last reached the app: `NEVER` before.
    /// Not progress (a hung app accepts connections), only "up" for checks.
    reached_ms: AtomicU64,
}

const NEVER: u64 = u64::MAX;

impl Default for Progress {
    fn default() -> Self {
        Progress { epoch: Instant::now(), waiting: AtomicU32::new(0), mark_ms: AtomicU64::new(0), answer_ms: AtomicU64::new(NEVER), reached_ms: AtomicU64::new(NEVER) }
    }
}

impl Progress {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A request starts waiting for its response head; the guard ends the wait.
    /// Microseconds since this agent started.
    pub fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    pub fn wait(self: &Arc<Self>) -> WaitGuard {
        if self.waiting.fetch_add(1, Ordering::AcqRel) == 0 {
            self.answered();
        }
        WaitGuard(self.clone())
    }

    /// The app showed it is alive (a response head, an answer to a probe).
    pub fn answered(&self) {
        self.mark_ms.store(self.now_ms(), Ordering::Release);
    }

    /// The app answered: progress, and a sign that it is up.
    pub fn app_answered(&self) {
        self.answered();
        self.answer_ms.store(self.now_ms(), Ordering::Release);
    }

    /// A health check's probe reached the app (a TCP connection).
    pub fn app_reached(&self) {
        self.reached_ms.store(self.now_ms(), Ordering::Release);
    }

    /// Did the app answer, or a probe reach it, within `d`?
    pub fn up_within(&self, d: Duration) -> bool {
        self.within(&self.answer_ms, d) || self.within(&self.reached_ms, d)
    }

    fn within(&self, at: &AtomicU64, d: Duration) -> bool {
        let at = at.load(Ordering::Acquire);
        at != NEVER && self.now_ms().saturating_sub(at) <= d.as_millis() as u64
    }

    /// How long requests have waited with no sign of life from the app, if any wait.
    pub fn stalled_for(&self) -> Option<Duration> {
        (self.waiting.load(Ordering::Acquire) > 0)
            .then(|| Duration::from_millis(self.now_ms().saturating_sub(self.mark_ms.load(Ordering::Acquire))))
    }
}

pub struct WaitGuard(Arc<Progress>);

impl Drop for WaitGuard {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Apache's BusyWorkers as last polled (status page or scoreboard), and how many polls failed.
#[derive(Default, Debug)]
pub struct Scoreboard {
    pub busy: AtomicU32,
    pub polls: AtomicU64,
    pub errors: AtomicU64,
}

/// Parse `BusyWorkers: N` from a `?auto` status page.
pub fn parse_busy_workers(page: &str) -> Option<u32> {
    page.lines().find_map(|l| l.strip_prefix("BusyWorkers:")).and_then(|v| v.trim().parse().ok())
}

/// Poll mod_status forever. On failure keep the last value and count the error:
/// a status page that is briefly unreachable should not flip every decision.
pub async fn poll_apache(board: Arc<Scoreboard>, url: http::Uri, every: Duration) {
    let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let got = tokio::time::timeout(Duration::from_secs(1), async {
            let resp = client.get(url.clone()).await.ok()?;
            let body = resp.into_body().collect().await.ok()?.to_bytes();
            parse_busy_workers(std::str::from_utf8(&body).ok()?)
        })
        .await;
        board.polls.fetch_add(1, Ordering::Relaxed);
        match got {
            Ok(Some(n)) => board.busy.store(n.saturating_sub(1), Ordering::Release),
            _ => {
                board.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_auto() {
        let page = "127.0.0.1\nServerVersion: Apache/2.4.62\nTotal Accesses: 12\nBusyWorkers: 5\nIdleWorkers: 3\nScoreboard: W____\n";
        assert_eq!(parse_busy_workers(page), Some(5));
        assert_eq!(parse_busy_workers("IdleWorkers: 3\n"), None);
        assert_eq!(parse_busy_workers("BusyWorkers: x\n"), None);
    }

    #[test]
    fn guard_counts_down() {
        let f = Arc::new(Inflight::default());
        let a = f.enter();
        let b = f.enter();
        assert_eq!(f.get(), 2);
        drop(a);
        drop(b);
        assert_eq!(f.get(), 0);
    }

    #[test]
    fn prefill_tokens_count_until_their_guard_drops_and_each_change_is_told() {
        let f = Arc::new(Inflight::default());
        let told = Arc::new(AtomicU32::new(0));
        let t = told.clone();
        f.on_change(Box::new(move || {
            t.fetch_add(1, Ordering::Relaxed);
        }));
        assert!(f.prefill(0, true).is_none());
        let a = f.prefill(2048, true).unwrap();
        let b = f.prefill(10, false).unwrap(); // told with the seat's change, next
        let seat = f.enter();
        assert_eq!((f.prefill_tokens(), f.get(), told.load(Ordering::Relaxed)), (2058, 1, 2));
        drop(a);
        assert_eq!(f.prefill_tokens(), 10);
        drop(b);
        drop(seat);
        assert_eq!((f.prefill_tokens(), told.load(Ordering::Relaxed)), (0, 5));
    }
}

#[cfg(test)]
mod per_front_tests {
    use super::*;

    #[test]
    fn counts_each_front_apart_and_forgets_a_front_with_nothing_in_flight() {
        let p = Arc::new(PerFront::default());
        let a1 = p.enter(b"a").unwrap();
        let a2 = p.enter(b"a").unwrap();
        let b1 = p.enter(b"b").unwrap();
        assert_eq!((p.get(b"a"), p.get(b"b"), p.get(b"c")), (2, 1, 0));
        drop(a1);
        drop(b1);
        assert_eq!((p.get(b"a"), p.get(b"b")), (1, 0));
        assert_eq!(p.fronts(), 1);
        drop(a2);
        assert_eq!(p.fronts(), 0);
    }

    #[test]
    fn holds_at_most_max_fronts_and_counts_a_new_front_again_once_there_is_room() {
        let p = Arc::new(PerFront::default());
        let held: Vec<_> = (0..MAX_FRONTS).map(|i| p.enter(format!("10.0.{}.{}", i / 256, i % 256).as_bytes()).unwrap()).collect();
        assert_eq!(p.fronts(), MAX_FRONTS);
        // a front already counted still is; a new one is not, and its count here is unknown
        let again = p.enter(b"10.0.0.0").unwrap();
        assert_eq!((p.get(b"10.0.0.0"), p.seen(b"10.0.0.0")), (2, Some(2)));
        assert!(p.enter(b"10.99.0.1").is_none());
        assert_eq!((p.fronts(), p.seen(b"10.99.0.1")), (MAX_FRONTS, None));
        drop(again);
        drop(held);
        assert_eq!((p.fronts(), p.seen(b"10.99.0.1")), (0, Some(0)));
        assert!(p.enter(b"10.99.0.1").is_some());
    }
}
