//! The load `b` the policy compares with `c`.
//!
//! * In-flight (default): requests this agent has forwarded and not finished.
//!   Exact for an app reached only through the agent.
//! * Apache scoreboard: `BusyWorkers` from `mod_status?auto`, as SRLB's agent read
//!   it from shared memory. Polled every `apache_poll_ms`; the status request
//!   itself occupies one worker, so one is subtracted.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Requests in flight to the app, with a guard that counts one down on drop.
#[derive(Default, Debug)]
pub struct Inflight(AtomicU32);

impl Inflight {
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }

    pub fn enter(self: &Arc<Self>) -> InflightGuard {
        self.0.fetch_add(1, Ordering::AcqRel);
        InflightGuard(self.clone())
    }
}

pub struct InflightGuard(Arc<Inflight>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Apache's BusyWorkers as last polled, and how many polls failed.
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
}
