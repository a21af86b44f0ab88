//! The agent's health: what it answers the fronts' checks, and how it watches
//! its app (up, unreachable, stalled).

use crate::agent::Agent;
use crate::respond::{plain, AgentBody};
use http::{Response, StatusCode};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tracing::{info, warn};

const HEALTH_CONNECT_TIMEOUT: Duration = Duration::from_millis(200);

impl Agent {
    pub(crate) async fn health(&self) -> Response<AgentBody> {
        self.metrics.health_checks.fetch_add(1, Ordering::Relaxed);
        if self.draining.load(Ordering::Acquire) {
            return plain(StatusCode::SERVICE_UNAVAILABLE, "draining\n");
        }
        if self.stalled.load(Ordering::Acquire) {
            let msg = format!("app at {} stalled: no answer for over {} ms while requests waited\n", self.cfg.app, self.cfg.app_stall.as_millis());
            return plain(StatusCode::SERVICE_UNAVAILABLE, &msg);
        }
        // An app that answered a request, or that a check's probe reached,
        // within `app_probe_ms` is up: no connection to it is needed to say
        // so. Busy fronts check often (four Envoys and HAProxys over 12 agents
        // made 120-220 connections a second to the apps on the bench), and
        // idle, each front's checks would each connect (8 a second per app
        // with 4 fronts checking each half second); a dead app fails the
        // checks from a probe's age later, or at once on the request that
        // finds it gone (`app_up`).
        if self.app_is_up() && self.progress.up_within(self.cfg.app_probe) {
            return plain(StatusCode::OK, "ok\n");
        }
        if self.probe_app().await {
            plain(StatusCode::OK, "ok\n")
        } else {
            plain(StatusCode::SERVICE_UNAVAILABLE, "app unreachable\n")
        }
    }

    /// Try a TCP connection to the app; record the answer. A stalled app stays
    /// down whatever its TCP stack says.
    pub async fn probe_app(&self) -> bool {
        let up = matches!(
            tokio::time::timeout(HEALTH_CONNECT_TIMEOUT, tokio::net::TcpStream::connect(self.cfg.app)).await,
            Ok(Ok(_))
        ) && !self.stalled.load(Ordering::Acquire);
        self.app_up.store(up, Ordering::Release);
        if up {
            self.progress.app_reached();
        }
        up
    }

    pub fn app_is_up(&self) -> bool {
        self.app_up.load(Ordering::Acquire)
    }

    /// The app answered: it is up, and not stalled.
    pub(crate) fn app_answered(&self) {
        self.progress.app_answered();
        self.app_up.store(true, Ordering::Release);
        if self.stalled.swap(false, Ordering::AcqRel) {
            info!(app = %self.cfg.app, "app answering again");
        }
    }

    /// One look at the app, every `app_probe_ms`: a stall starts when requests
    /// have waited `app_stall` with no answer; while stalled, ask the app itself
    /// (`OPTIONS *`, any HTTP answer will do) so that an app left without
    /// traffic (its backend ejected) is seen when it comes back.
    pub async fn watch_app(&self) {
        let limit = self.cfg.app_stall;
        if !limit.is_zero() && !self.stalled.load(Ordering::Acquire) && self.progress.stalled_for().is_some_and(|d| d > limit) {
            self.stalled.store(true, Ordering::Release);
            self.app_up.store(false, Ordering::Release);
            warn!(app = %self.cfg.app, stall_ms = limit.as_millis() as u64, "app stalled: refusing offers and reporting unhealthy until it answers");
        }
        if self.stalled.load(Ordering::Acquire) {
            if answers_http(self.cfg.app, self.cfg.app_probe.max(HEALTH_CONNECT_TIMEOUT)).await {
                self.app_answered();
            }
        } else if !self.app_is_up() && self.probe_app().await {
            info!(app = %self.cfg.app, "app reachable again");
        }
    }
}

/// Does an HTTP server answer at `addr` within `limit`? `OPTIONS *` asks the
/// server itself, not a resource; any status line is an answer.
async fn answers_http(addr: std::net::SocketAddr, limit: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"OPTIONS * HTTP/1.1\r\nhost: huntlb-agent\r\nconnection: close\r\n\r\n").await?;
        let mut head = [0u8; 5];
        s.read_exact(&mut head).await?;
        Ok::<bool, std::io::Error>(&head == b"HTTP/")
    };
    matches!(tokio::time::timeout(limit, ask).await, Ok(Ok(true)))
}
