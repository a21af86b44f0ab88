//! The agent's connections upstream, to its app and to its peers: each watched
//! for a close before a request is written on it (the body goes again: `body`).
//!
//! ```text
//!  pooled connection, idle ──► next request's first write ──► peek: closed by the app (FIN, RST)?
//!        │ no: write as usual                                    │ yes: nothing written, the write fails
//!        ▼                                                       ▼
//!  the app has the request: any failure now is an error   `closed_before_write` ──► the agent sends it
//!  (it may have been processed), never sent again           again on a fresh connection (the body: `Lent`)
//! ```
//!
//! An app closes an idle keep-alive connection after its own timeout
//! (gunicorn 2 s, Node and Apache 5 s). A request that the pool hands that
//! connection at the moment the app closes it failed as "may have reached the
//! app" (502), and the front may not re-send it: 41 of 400 requests with gaps
//! near a 0.1 s keep-alive were lost so. The app's close is in the socket
//! before our first byte is: the connection is looked at (a non-blocking
//! peek) before a request is written on it, and a closed one fails the write
//! with nothing written, which the agent knows by the request's own error
//! (`closed_before_write`).
//!
//! What the peek cannot see is an app that closes while our request is on
//! its way (Python's http.server takes about half a millisecond between its
//! timeout and its close: 3 of 160 requests with gaps within 15 ms of its
//! keep-alive). So the agent also learns the app's keep-alive: each time the
//! app closes an idle connection, after idle time `t`, connections idle for
//! `3/4 t` or more are not written on again (the write is refused the same
//! way, and the request goes on a fresh connection). One close teaches it;
//! `pool_idle_ms` (1 s by default, under gunicorn's 2 s, Node's and Apache's 5
//! s) bounds it before that.

use crate::body::Lent;
use crate::commit::Gated;
use crate::config::Config;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::net::SocketAddr;
use crate::tls::PeerTls;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Connects like `HttpConnector`, and watches each connection for a close by
/// the other side before a request is written on it again.
#[derive(Clone)]
pub struct Watched {
    inner: HttpConnector,
    keep_alive: Arc<KeepAlive>,
    /// TLS on each connection (forwards to peers, with `tls_cert`).
    tls: Option<PeerTls>,
    /// HTTP/1.1 only: one request at a time on a connection, so a write after
    /// a read starts a request. Over HTTP/2 (`app_protocol = "h2"`) streams
    /// interleave, a close fails them all, and none is sent again.
    watch: bool,
}

impl Watched {
    /// HTTP/1.1 connections, watched.
    pub fn http1(inner: HttpConnector) -> Self {
        Watched { inner, keep_alive: Arc::default(), tls: None, watch: true }
    }

    /// HTTP/2 connections: not watched.
    pub fn http2(inner: HttpConnector) -> Self {
        Watched { watch: false, ..Watched::http1(inner) }
    }

    /// HTTP/1.1 connections, each TLS, checked as `tls` says.
    pub fn http1_tls(inner: HttpConnector, tls: Option<PeerTls>) -> Self {
        Watched { tls, ..Watched::http1(inner) }
    }
}

/// The other side's keep-alive as seen so far: the shortest idle time after
/// which it closed a connection, in microseconds (0: none seen).
#[derive(Default)]
struct KeepAlive(AtomicU64);

/// A close sooner than this after a response is not a keep-alive timeout (a
/// server's last request on a connection, a crash): not learnt from, or one
/// such close would end reuse altogether.
const KEEP_ALIVE_AT_LEAST: Duration = Duration::from_millis(20);

impl KeepAlive {
    fn closed_after(&self, idle: Duration) {
        if idle < KEEP_ALIVE_AT_LEAST {
            return;
        }
        let us = idle.as_micros().min(u128::from(u64::MAX)) as u64;
        let before = self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| (v == 0 || us < v).then_some(us));
        if before.is_ok() {
            tracing::info!(idle_ms = idle.as_millis() as u64, "upstream closes idle connections: not reusing any idle 3/4 of that");
        }
    }

    /// Idle this long, a connection may be closing as we write on it.
    fn too_old(&self, idle: Duration) -> bool {
        let us = self.0.load(Ordering::Acquire);
        us != 0 && idle.as_micros() >= u128::from(us / 4 * 3)
    }
}

impl tower_service::Service<http::Uri> for Watched {
    type Response = TokioIo<WatchedStream>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: http::Uri) -> Self::Future {
        let host = dst.host().map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string());
        let connecting = self.inner.call(dst);
        let keep_alive = self.keep_alive.clone();
        let (tls, watch) = (self.tls.clone(), self.watch);
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            let tcp = match tls {
                None => Stream::Plain(tcp),
                Some(t) => {
                    // The name the peer's certificate must carry: the
                    // configured one, else the address we dialled.
                    let name = match (t.name, host.as_deref().and_then(|h| h.parse::<std::net::IpAddr>().ok())) {
                        (Some(n), _) => n,
                        (None, Some(ip)) => ServerName::IpAddress(ip.into()),
                        (None, None) => return Err(io::Error::new(io::ErrorKind::InvalidInput, "TLS to a peer with no address and no fleet_tls_name").into()),
                    };
                    let stream = tokio_rustls::TlsConnector::from(t.client).connect(name, tcp).await?;
                    Stream::Tls(Box::new(stream))
                }
            };
            Ok(TokioIo::new(WatchedStream {
                tcp,
                watch,
                read_any: false,
                wrote_since_read: false,
                last_read: Instant::now(),
                keep_alive,
            }))
        })
    }
}

/// The error of a write refused on a connection the other side had closed
/// (or may be closing) before any of the request was written: the request
/// reached no one. It travels in the request's own error (hyper keeps a write's
/// `io::Error` as the cause), so knowing it costs a request nothing: no
/// captured connection, no extension on every response (a connection's
/// `Connected::extra` is copied into each response's extensions).
#[derive(Debug)]
pub struct ClosedBeforeWrite;

impl std::fmt::Display for ClosedBeforeWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("closed by the other side before the request was written")
    }
}

impl std::error::Error for ClosedBeforeWrite {}

/// Did the request that failed with `e` fail before any of it was written
/// (the other side had closed its connection)? An `io::Error` hides its own
/// payload from `source()`, so each link is looked into.
pub fn closed_before_write(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if err.is::<ClosedBeforeWrite>() || err.downcast_ref::<io::Error>().and_then(|io| io.get_ref()).is_some_and(|p| p.is::<ClosedBeforeWrite>()) {
            return true;
        }
        next = err.source();
    }
    false
}

/// A connection upstream: plain TCP, or TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(t) => t,
            Stream::Tls(s) => s.get_ref().0,
        }
    }
}

pub struct WatchedStream {
    tcp: Stream,
    watch: bool,
    /// A response has been read on it: a later write starts another request
    /// on a reused connection (HTTP/1.1 does not pipeline here).
    read_any: bool,
    wrote_since_read: bool,
    /// When bytes last came in: a response's end, for an idle connection.
    last_read: Instant,
    keep_alive: Arc<KeepAlive>,
}

impl WatchedStream {
    /// Before the first byte of a request on a reused connection: has the
    /// other side closed it (EOF or reset waiting in the socket), or has it
    /// been idle so long that it may be closing now?
    fn closed_by_peer(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.watch || !self.read_any || self.wrote_since_read {
            return false;
        }
        let idle = self.last_read.elapsed();
        // Idle this briefly, it is no keep-alive timeout that could be closing
        // it (nor is a request body going on after an interim `100 Continue`,
        // which a close must not make us send again): written as is, and busy
        // connections cost no look at the socket.
        if idle < KEEP_ALIVE_AT_LEAST {
            return false;
        }
        if self.keep_alive.too_old(idle) {
            return true;
        }
        let mut one = [0u8; 1];
        let mut buf = ReadBuf::new(&mut one);
        // Data waiting (an unsolicited answer such as a 408) is not a close:
        // the request is written and the answer read as usual.
        matches!(self.tcp.tcp().poll_peek(cx, &mut buf), Poll::Ready(Ok(0)) | Poll::Ready(Err(_)))
    }

    fn refuse_write(&mut self) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionReset, ClosedBeforeWrite)))
    }
}

impl AsyncRead for WatchedStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = match &mut self.tcp {
            Stream::Plain(t) => Pin::new(t).poll_read(cx, buf),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_read(cx, buf),
        };
        match &r {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                self.read_any = true;
                self.wrote_since_read = false;
                self.last_read = Instant::now();
            }
            // Closed (EOF or reset) while idle: the other side's keep-alive.
            Poll::Ready(_) if self.watch && self.read_any && !self.wrote_since_read => {
                self.keep_alive.closed_after(self.last_read.elapsed())
            }
            _ => {}
        }
        r
    }
}

impl AsyncWrite for WatchedStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if self.closed_by_peer(cx) {
            return self.refuse_write();
        }
        let r = match &mut self.tcp {
            Stream::Plain(t) => Pin::new(t).poll_write(cx, data),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_write(cx, data),
        };
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.wrote_since_read = true;
        }
        r
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        if self.closed_by_peer(cx) {
            return self.refuse_write();
        }
        let r = match &mut self.tcp {
            Stream::Plain(t) => Pin::new(t).poll_write_vectored(cx, bufs),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_write_vectored(cx, bufs),
        };
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.wrote_since_read = true;
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        match &self.tcp {
            Stream::Plain(t) => t.is_write_vectored(),
            Stream::Tls(t) => t.is_write_vectored(),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.tcp {
            Stream::Plain(t) => Pin::new(t).poll_flush(cx),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.tcp {
            Stream::Plain(t) => Pin::new(t).poll_shutdown(cx),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_shutdown(cx),
        }
    }
}

impl Connection for WatchedStream {
    fn connected(&self) -> Connected {
        self.tcp.tcp().connected()
    }
}

/// The agent's HTTP clients: to its app (pooled, and `fresh`, unpooled), and
/// to its peers (HTTP/1.1, TLS with `fleet_tls_ca`).
pub(crate) struct Clients {
    pub(crate) app: Client<Watched, Lent>,
    /// No pool: a request whose pooled connection the app had closed before
    /// any of it was written goes again on a connection of its own.
    pub(crate) fresh: Client<Watched, Lent>,
    pub(crate) peer: Client<Watched, Gated>,
}

impl Clients {
    pub(crate) fn new(cfg: &Config) -> Clients {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(1)));
        // A peer that does not take the connection within this took nothing:
        // the offer is refused to its front, which re-sends it (a connect
        // error, never a timeout after the try may have been sent).
        let mut peer_connector = connector.clone();
        peer_connector.set_connect_timeout(Some(cfg.fleet.as_ref().map_or(Duration::from_secs(1), |f| f.dead_after.min(Duration::from_secs(1)))));
        // Forwards leave from this agent's member IP (its reports' source):
        // a peer with `fleet_pass_plain` takes a forward only from a member's
        // IP, and a socket left unbound leaves by the route's address (on
        // loopback 127.0.0.1 for every agent). An IP this host cannot bind (a
        // NAT's, a published port's) is left to the route, and said.
        if let Some(f) = &cfg.fleet {
            let ip = f.from.ip();
            if std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok() {
                peer_connector.set_local_address(Some(ip));
            } else if f.pass_plain {
                tracing::warn!(%ip, "fleet_pass_plain: forwards to peers cannot leave from this agent's member IP (not this host's); peers with fleet_pass_plain take them for a plain front's tries unless the route's source is a member's");
            }
        }
        let peer = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(cfg.pool_idle)
            .pool_timer(TokioTimer::new())
            .build(Watched::http1_tls(peer_connector, cfg.fleet.as_ref().and_then(|f| f.tls.clone())));
        let app = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(cfg.pool_idle)
            // Without a timer the pool never reaps: an idle connection goes only
            // when a checkout meets it, so the pool stayed as deep as the
            // busiest moment so far (the soak's fds crept up 330 -> 360).
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(cfg.max_inflight as usize)
            .http2_only(cfg.app_h2)
            .build(if cfg.app_h2 { Watched::http2(connector.clone()) } else { Watched::http1(connector.clone()) });
        let fresh = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(0).http2_only(cfg.app_h2).build(Watched::http1(connector));
        Clients { app, fresh, peer }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that wraps another as its source, as hyper's and hyper-util's do.
    #[derive(Debug)]
    struct Wrap(io::Error);

    impl std::fmt::Display for Wrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("wrapped")
        }
    }

    impl std::error::Error for Wrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_refused_write_is_told_from_any_other_failure_through_the_wrapping() {
        let refused = io::Error::new(io::ErrorKind::ConnectionReset, ClosedBeforeWrite);
        assert!(closed_before_write(&refused));
        assert!(closed_before_write(&Wrap(refused)));
        // The same kind from the kernel (a reset while the request was on its
        // way) may have reached the app: never sent again.
        assert!(!closed_before_write(&Wrap(io::Error::from(io::ErrorKind::ConnectionReset))));
        assert!(!closed_before_write(&Wrap(io::Error::new(io::ErrorKind::ConnectionReset, "closed by the other side before the request was written"))));
    }
}
