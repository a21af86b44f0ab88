//! The agent's processes around a request: its listeners (offers, admin,
//! agent-check), the tasks that watch its app and keep its fleet, and the drain
//! on SIGTERM. `run` is all a binary calls.

use crate::config::LoadSource;
use crate::agent::Agent;
use crate::listen::bind_tcp;
use crate::{fleet, load, tls};
use anyhow::Context;
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{error, info, warn};

pub async fn run(cfg: crate::config::Config) -> anyhow::Result<()> {
    let listener = bind_tcp(cfg.listen).with_context(|| format!("config key `listen`: bind {}", cfg.listen))?;
    let admin = bind_tcp(cfg.admin).with_context(|| format!("config key `admin`: bind {}", cfg.admin))?;
    let fleet = match &cfg.fleet {
        Some(f) => Some(fleet::Fleet::bind(f.clone()).await?),
        None => None,
    };
    // the scoreboard is opened and its layout checked before anything is served: an error names the file
    let board = match &cfg.load {
        LoadSource::Scoreboard { file, .. } => {
            let b = load::scoreboard::Board::open(file).map_err(|e| anyhow::anyhow!("config key `apache_scoreboard`: {e}"))?;
            if cfg.workers > b.slots() {
                anyhow::bail!(
                    "config key `workers`: {} is more than the {} worker slots of Apache's scoreboard {} (ServerLimit {} x ThreadLimit {} of ScoreBoardFile {})",
                    cfg.workers, b.slots(), b.source.display(), b.server_limit, b.thread_limit, file.display()
                );
            }
            info!(scoreboard = %b.source.display(), server_limit = b.server_limit, thread_limit = b.thread_limit, busy = ?b.busy(), "Apache scoreboard opened");
            Some(b)
        }
        _ => None,
    };
    let agent = Agent::new(cfg, fleet);
    let c = &agent.cfg;
    let tls = match &c.tls {
        None => "off",
        Some(t) if t.mtls => "mtls",
        Some(_) => "on",
    };
    info!(id = %c.id, listen = %c.listen, admin = %c.admin, app = %c.app, policy = %c.policy, workers = c.workers, load = ?c.load, tls, "huntlb-agent ready");

    if !agent.probe_app().await {
        info!(app = %c.app, "app not reachable yet: offers are refused until it answers");
    }
    if let (LoadSource::Apache { status_url, poll }, Some(board)) = (&c.load, &agent.scoreboard) {
        tokio::spawn(load::poll_apache(board.clone(), status_url.clone(), *poll));
    }
    if let (LoadSource::Scoreboard { file, poll }, Some(counters)) = (&c.load, &agent.scoreboard) {
        tokio::spawn(load::scoreboard::poll(counters.clone(), board, file.clone(), *poll));
    }
    if let (Some(kv), Some(read)) = (&c.llm_kv, &agent.kv) {
        tokio::spawn(load::kv::poll(read.clone(), kv.clone(), agent.inflight.clone()));
    }
    tokio::spawn(watch_app(agent.clone()));
    if let Some(addr) = c.agent_check {
        let l = bind_tcp(addr).with_context(|| format!("config key `agent_check`: bind {addr}"))?;
        tokio::spawn(serve_agent_check(l, agent.clone()));
    }
    if let Some(fleet) = agent.fleet.clone() {
        tokio::spawn(fleet.clone().resolve());
        // Each change goes out from the thread that made it; the heartbeat
        // covers what changes without the count (app up or down, stalled).
        let a = Arc::downgrade(&agent);
        let report = move || a.upgrade().map(|a| (crate::insider::busy(a.busy_now()), a.takes_forwards()));
        let f = fleet.clone();
        agent.on_inflight_change(Box::new(move || f.changed()));
        tokio::spawn(fleet.run(Box::new(report)));
    }
    tokio::spawn(serve_admin(admin, agent.clone()));
    tokio::spawn(reload_on_hangup(agent.clone()));
    let (closing, closing_rx) = tokio::sync::watch::channel(false);
    let open = Arc::new(AtomicUsize::new(0));
    tokio::spawn(serve(listener, agent.clone(), closing_rx, open.clone()));
    drain_on_signal(agent, closing, open).await
}

/// The drain's second phase, seen by every connection on `listen`: once
/// `drain_grace` has passed (the fronts have seen the health check fail and
/// send nothing new), idle keep-alive connections close, a busy one closes
/// after its response, and a new one is served one request and closed.
type Closing = tokio::sync::watch::Receiver<bool>;

/// A connection on `listen`, counted while it is open: the drain exits once
/// none is (a response is wholly written before its connection ends).
struct Open(Arc<AtomicUsize>);

impl Open {
    fn new(n: &Arc<AtomicUsize>) -> Self {
        n.fetch_add(1, Ordering::AcqRel);
        Open(n.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Accept loop; at most `max_connections` connections are held at once. With
/// `tls`, each connection first completes a TLS handshake (a client certificate
/// from `tls_client_ca` when set); one that fails is closed before any request.
async fn serve(listener: TcpListener, agent: Arc<Agent>, closing: Closing, open: Arc<AtomicUsize>) {
    let slots = agent.door.slots.clone();
    agent.door.open(&listener);
    let tls = agent.cfg.tls.as_ref().map(|t| {
        let current = Arc::new(tls::Current::new(t.server.clone()));
        tokio::spawn(tls::watch(t.files.clone(), current.clone()));
        (current, Arc::new(tls::FailureLog::default()))
    });
    loop {
        let permit = slots.clone().acquire_owned().await.expect("semaphore never closed");
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                error!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let agent = agent.clone();
        let tls = tls.clone();
        let closing = closing.clone();
        let counted = Open::new(&open);
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, peer, agent, closing).await,
                Some((current, failures)) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(current.get());
                    // the handshake gets the time a request head gets
                    let failed = match tokio::time::timeout(agent.cfg.idle_timeout, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            serve_connection(stream, peer, agent.clone(), closing).await;
                            None
                        }
                        Ok(Err(e)) => Some(e.to_string()),
                        Err(_) => Some("timed out".to_string()),
                    };
                    if let Some(why) = failed {
                        agent.metrics.tls_handshake_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        match failures.admit(std::time::Instant::now()) {
                            (true, 0) => warn!(%peer, error = %why, "TLS handshake failed: connection closed"),
                            (true, unlogged) => warn!(%peer, error = %why, unlogged,
                                "TLS handshake failed: connection closed (and `unlogged` more since the last line)"),
                            (false, _) => {}
                        }
                    }
                }
            }
            drop((permit, counted));
        });
    }
}

/// One proxy connection, plaintext or TLS: HTTP/1.1, or HTTP/2 with prior
/// knowledge (Envoy's http2_protocol_options to the agents) or by ALPN, told
/// apart by the preface.
///
/// `peer`: the connection's remote address, handed to every request on it
/// (`fleet_pass_plain` reads who sent a try from its IP).
async fn serve_connection<I>(io: I, peer: std::net::SocketAddr, agent: Arc<Agent>, mut closing: Closing)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (max_buf, max_headers) = (agent.cfg.max_header_bytes, agent.cfg.max_headers);
    let idle = agent.cfg.idle_timeout;
    // A connection opened after the drain closes connections (a front that has
    // not yet seen the health check fail) gets its request served, then closed:
    // closing it unread would fail a request that reached no app.
    let late = *closing.borrow();
    let svc = service_fn(move |req| agent.clone().handle(req, peer));
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        // hyper's header timer runs from the end of one response to the
        // next request's head: it is the keep-alive idle timeout too,
        // kept longer than every front's (the proxy side closes first).
        .header_read_timeout(idle)
        .max_buf_size(max_buf)
        // hyper's own default is 100: a client's 95 headers plus the
        // front's marks got 431 (the list then lives on the heap)
        .max_headers(max_headers)
        .keep_alive(!late);
    b.http2().timer(TokioTimer::new()).max_header_list_size(max_buf as u32);
    // WebSocket: the agent joins client and app after a 101
    let conn = b.serve_connection_with_upgrades(TokioIo::new(io), svc);
    tokio::pin!(conn);
    if late {
        // HTTP/1.1 ends after its one response; HTTP/2 gets its GOAWAY after a
        // beat (at once, it could go before the client's first stream)
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = tokio::time::sleep(LATE_H2_GRACE) => {}
        }
    } else {
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = closing.wait_for(|c| *c) => {}
        }
    }
    // Idle: closed now (after `drain_grace` no front sends on it). Busy: its
    // response goes out with `Connection: close` (HTTP/2: GOAWAY), then it ends.
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// How long an HTTP/2 connection opened during a drain's closing phase is
/// served before its GOAWAY.
const LATE_H2_GRACE: Duration = Duration::from_secs(1);

/// Connections the admin port holds at once: a scraper or two, never a crowd.
const ADMIN_CONNECTIONS: usize = 64;

async fn serve_admin(listener: TcpListener, agent: Arc<Agent>) {
    let slots = Arc::new(Semaphore::new(ADMIN_CONNECTIONS));
    loop {
        let permit = slots.clone().acquire_owned().await.expect("semaphore never closed");
        let Ok((stream, _)) = listener.accept().await else { continue };
        let agent = agent.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let agent = agent.clone();
                async move {
                    let (status, body) = match req.uri().path() {
                        "/metrics" => (StatusCode::OK, agent.metrics.render(&agent.gauges())),
                        _ => (StatusCode::NOT_FOUND, "try /metrics\n".to_string()),
                    };
                    let mut r = Response::new(Full::new(Bytes::from(body)));
                    *r.status_mut() = status;
                    Ok::<_, std::convert::Infallible>(r)
                }
            });
            // an idle or slow connection is closed after 10 s (it held on 40 s and more)
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// HAProxy agent-check: one line per connection. `ready up` (ready clears a
/// previous drain, up clears a previous down), `drain` after SIGTERM, `down`
/// while the app is unreachable.
async fn serve_agent_check(listener: TcpListener, agent: Arc<Agent>) {
    use tokio::io::AsyncWriteExt;
    loop {
        let Ok((mut stream, _)) = listener.accept().await else { continue };
        let line: &[u8] = if agent.is_draining() {
            b"drain\n"
        } else if !agent.app_is_up() {
            b"down\n"
        } else {
            b"ready up\n"
        };
        tokio::spawn(async move {
            let _ = stream.write_all(line).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Watch the app: notice a stall, and while it is down probe it so offers
/// resume when it is back (offers are refused meanwhile, so no request would
/// discover it).
///
/// Idle (no request waiting, the app up) a look finds nothing to do: one
/// each four `app_probe_ms`, not each (a stall that begins meanwhile is seen
/// up to that much later; a down app is probed at the full pace). Not a
/// wake-up from the request path instead: one on each request that found
/// none waiting cost 2-5% of the agents' CPU under load
/// (bench/data/tier-cost/quiet-ab).
async fn watch_app(agent: Arc<Agent>) {
    loop {
        let idle = agent.app_is_up() && agent.progress.stalled_for().is_none();
        tokio::time::sleep(if idle { agent.cfg.app_probe * 4 } else { agent.cfg.app_probe }).await;
        agent.watch_app().await;
    }
}

/// SIGHUP: read the config again (the same flags over the same file) and take
/// its `fleet_peers`, so a backend joins or leaves a list of addresses without
/// a restart. The key file and the TLS files need no signal (re-read when they
/// change); every other key takes effect at a restart. A config that no longer
/// loads changes nothing: the error names the key, the agent runs on.
/// (Without this handler SIGHUP would end the process.)
async fn reload_on_hangup(agent: Arc<Agent>) {
    use clap::Parser;
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else { return };
    while hup.recv().await.is_some() {
        let new = match crate::config::Raw::try_parse() {
            Ok(flags) => crate::config::Raw::load(flags).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let new = match new {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "SIGHUP: the config does not load; nothing changed");
                continue;
            }
        };
        match (&agent.fleet, &new.fleet) {
            (Some(fleet), Some(f)) => {
                if !fleet.reload_peers(f.peers.clone()).await {
                    info!("SIGHUP: fleet_peers unchanged");
                }
            }
            (None, None) => info!("SIGHUP: no fleet_listen, nothing to reload"),
            _ => warn!("SIGHUP: fleet_listen added or removed: that takes a restart; nothing changed"),
        }
        info!("SIGHUP: only fleet_peers is reloaded; the key and TLS files are re-read when they change; other keys take effect at a restart");
    }
}

/// SIGTERM or SIGINT, in two phases so that no front loses a request:
/// 1. refuse offers and report unhealthy, serving every request as before, for
///    `drain_grace` (the fronts' health checks take the backend out: it must be
///    longer than any front's check interval x fall count);
/// 2. close: idle keep-alive connections now, busy ones after their response,
///    new ones after one request; exit once no connection is open and nothing
///    is in flight, or at `drain_timeout` regardless.
async fn drain_on_signal(agent: Arc<Agent>, closing: tokio::sync::watch::Sender<bool>, open: Arc<AtomicUsize>) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    agent.start_draining();
    let started = Instant::now();
    info!(inflight = agent.inflight(), connections = open.load(Ordering::Acquire), grace_ms = agent.cfg.drain_grace.as_millis() as u64,
          "draining: refusing offers, health reports 503");
    let (grace, timeout) = (agent.cfg.drain_grace, agent.cfg.drain_timeout);
    tokio::time::sleep(grace.min(timeout)).await;
    closing.send_replace(true);
    info!(inflight = agent.inflight(), connections = open.load(Ordering::Acquire), "draining: closing connections (idle ones now, busy ones after their response)");
    loop {
        let waited = started.elapsed();
        if waited >= timeout {
            info!(inflight = agent.inflight(), connections = open.load(Ordering::Acquire), "drain timeout reached: exiting");
            return Ok(());
        }
        if open.load(Ordering::Acquire) == 0 && agent.inflight() == 0 && agent.relaying() == 0 {
            info!(waited_ms = waited.as_millis() as u64, "drained: exiting");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
