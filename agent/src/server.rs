//! The agent's processes around a request: its listeners (offers, admin,
//! agent-check), the tasks that watch its app and keep its fleet, and the drain
//! on SIGTERM. `run` is all a binary calls.

use crate::config::LoadSource;
use crate::dispatch::Agent;
use crate::{fleet, load, tls};
use anyhow::Context;
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
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
    tokio::spawn(serve(listener, agent.clone()));
    drain_on_signal(agent).await
}

/// Accept loop; at most `max_connections` connections are held at once. With
/// `tls`, each connection first completes a TLS handshake (a client certificate
/// from `tls_client_ca` when set); one that fails is closed before any request.
async fn serve(listener: TcpListener, agent: Arc<Agent>) {
    let slots = agent.connections.clone();
    agent.listen_fd.store(std::os::fd::AsRawFd::as_raw_fd(&listener), std::sync::atomic::Ordering::Release);
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
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, peer, agent).await,
                Some((current, failures)) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(current.get());
                    // the handshake gets the time a request head gets
                    let failed = match tokio::time::timeout(agent.cfg.idle_timeout, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            serve_connection(stream, peer, agent.clone()).await;
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
            drop(permit);
        });
    }
}

/// A listening TCP socket's accept queue: (connections waiting, its backlog),
/// from Linux's TCP_INFO (which reports them as `tcpi_unacked` and
/// `tcpi_sacked` for a socket in LISTEN).
pub fn accept_queue(fd: std::os::fd::RawFd) -> Option<(u32, u32)> {
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: a valid buffer of `len` bytes for the kernel to fill.
    let r = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, (&mut info as *mut libc::tcp_info).cast(), &mut len) };
    (r == 0 && info.tcpi_state == 10 /* TCP_LISTEN */).then_some((info.tcpi_unacked, info.tcpi_sacked))
}

/// A listening socket as tokio's `bind` makes one (SO_REUSEADDR, backlog
/// 1024), but an IPv6 one takes IPv4 too (IPV6_V6ONLY off): `[::]:8080`
/// serves a dual-stack fleet whatever the host's `net.ipv6.bindv6only`.
pub(crate) fn bind_tcp(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(false)?;
    }
    s.bind(&addr.into())?;
    s.listen(1024)?;
    s.set_nonblocking(true)?;
    TcpListener::from_std(s.into())
}

/// One proxy connection, plaintext or TLS: HTTP/1.1, or HTTP/2 with prior
/// knowledge (Envoy's http2_protocol_options to the agents) or by ALPN, told
/// apart by the preface.
///
/// `peer`: the connection's remote address, handed to every request on it
/// (`fleet_pass_plain` reads who sent a try from its IP).
async fn serve_connection<I>(io: I, peer: std::net::SocketAddr, agent: Arc<Agent>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (max_buf, max_headers) = (agent.cfg.max_header_bytes, agent.cfg.max_headers);
    let idle = agent.cfg.idle_timeout;
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
        .max_headers(max_headers);
    b.http2().timer(TokioTimer::new()).max_header_list_size(max_buf as u32);
    // WebSocket: the agent joins client and app after a 101
    let _ = b.serve_connection_with_upgrades(TokioIo::new(io), svc).await;
}

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
async fn watch_app(agent: Arc<Agent>) {
    loop {
        tokio::time::sleep(agent.cfg.app_probe).await;
        agent.watch_app().await;
    }
}

/// SIGTERM or SIGINT: refuse offers and report unhealthy; exit once nothing is in
/// flight and `drain_grace` has passed (so health checkers have noticed), or at
/// `drain_timeout` regardless.
async fn drain_on_signal(agent: Arc<Agent>) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    agent.start_draining();
    let started = Instant::now();
    info!(inflight = agent.inflight(), "draining: refusing offers, health reports 503");
    loop {
        let waited = started.elapsed();
        if waited >= agent.cfg.drain_timeout {
            info!(inflight = agent.inflight(), "drain timeout reached: exiting");
            return Ok(());
        }
        if waited >= agent.cfg.drain_grace && agent.inflight() == 0 && agent.relaying() == 0 {
            info!(waited_ms = waited.as_millis() as u64, "drained: exiting");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    /// `[::]` takes IPv4 too, whatever net.ipv6.bindv6only says.
    #[tokio::test]
    async fn an_ipv6_any_listener_is_dual_stack() {
        let l = super::bind_tcp("[::]:0".parse().unwrap()).unwrap();
        assert!(!socket2::SockRef::from(&l).only_v6().unwrap());
        let port = l.local_addr().unwrap().port();
        let (v4, _) = tokio::join!(tokio::net::TcpStream::connect(("127.0.0.1", port)), l.accept());
        assert!(v4.is_ok());
    }
}
