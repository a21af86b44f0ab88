//! The agent's own listening sockets: bound so that `[::]` serves IPv4 too
//! (`bind_tcp`), and the room left on `listen` for a new connection
//! (`Door`): its connection slots and the kernel's accept queue, which a
//! report to peers reads (a peer forwards here only while there is room).

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

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

/// Room on `listen` for a new connection.
pub(crate) struct Door {
    /// Connection slots (`max_connections`): the accept loop holds one a connection.
    pub(crate) slots: Arc<Semaphore>,
    max: usize,
    /// The `listen` socket, once bound (-1 before): its accept queue is read
    /// for readiness.
    fd: AtomicI32,
    /// When the accept queue was last read (microseconds, even), and whether
    /// it was over half full (the low bit).
    checked: AtomicU64,
}

impl Door {
    pub(crate) fn new(max_connections: usize) -> Door {
        Door { slots: Arc::new(Semaphore::new(max_connections)), max: max_connections, fd: AtomicI32::new(-1), checked: AtomicU64::new(0) }
    }

    /// `listen` is bound: its accept queue can be read.
    pub(crate) fn open(&self, listener: &TcpListener) {
        self.fd.store(listener.as_raw_fd(), Ordering::Release);
    }

    /// Connections held now.
    pub(crate) fn held(&self) -> usize {
        self.max - self.slots.available_permits()
    }

    /// Room for a new connection: slots to spare (1/64 of
    /// `max_connections`, at least one: idle connections held by anyone, a
    /// slowloris, fill them), and an accept queue under half full (the
    /// kernel's, which fills once the slots are gone). `now_us`: a clock in
    /// microseconds.
    pub(crate) fn takes_connections(&self, now_us: u64) -> bool {
        let spare = (self.max / 64).max(1);
        if self.slots.available_permits() < spare {
            return false;
        }
        // The accept queue is read at most every millisecond (a syscall;
        // reports go out thousands of times a second).
        let last = self.checked.load(Ordering::Relaxed);
        if now_us.saturating_sub(last & !1) >= 1000 {
            let fd = self.fd.load(Ordering::Acquire);
            let full = fd >= 0 && accept_queue(fd).is_some_and(|(queued, max)| queued * 2 > max);
            self.checked.store((now_us & !1) | u64::from(full), Ordering::Relaxed);
            return !full;
        }
        last & 1 == 0
    }
}

#[cfg(test)]
#[path = "listen_tests.rs"]
mod tests;
