//! One send's reports, written into buffers the sending thread keeps (no
//! allocation once warm) and handed to the kernel in one `sendmmsg` (Linux),
//! instead of one `sendto` each: a change of this agent's count goes to about
//! K members at once (`Fleet::changed`), and each syscall's entry and exit,
//! per datagram, was a good part of what the tier cost the agents.
//!
//! Each datagram still goes alone, as before: one that the kernel refuses
//! (a full send buffer under `MSG_DONTWAIT`, an address it cannot reach) is
//! dropped and the rest still go; the next change or beat resends.

use socket2::{SockAddr, Socket};
use std::cell::RefCell;
use std::net::SocketAddr;

/// Room for a datagram: the longest report fits (`MAX_REPORT_LEN`), and one
/// that does not (two 64-byte names) is still written whole, as before.
const ROOM: usize = 2 * huntlb_policy::forward::MAX_REPORT_LEN;

/// The datagrams of one send; buffers beyond `len` keep their capacity for the next.
#[derive(Default)]
pub(super) struct Batch {
    datagrams: Vec<(SockAddr, Vec<u8>)>,
    len: usize,
    #[cfg(target_os = "linux")]
    mmsg: Mmsg,
}

thread_local! {
    /// Each thread that sends (the runtime's workers, the reader) keeps its own.
    static BATCH: RefCell<Batch> = RefCell::default();
    /// And a list of receivers (`Fleet::changed`).
    static SCRATCH: RefCell<Vec<SocketAddr>> = const { RefCell::new(Vec::new()) };
}

/// `f` with this thread's list of addresses, emptied (a fresh one if it is in use).
pub(super) fn scratch<R>(f: impl FnOnce(&mut Vec<SocketAddr>) -> R) -> R {
    SCRATCH.with(|v| match v.try_borrow_mut() {
        Ok(mut v) => {
            v.clear();
            f(&mut v)
        }
        Err(_) => f(&mut Vec::new()),
    })
}

impl Batch {
    /// `f` with this thread's batch, emptied (a fresh one if it is in use:
    /// sends do not nest, but nothing breaks if one ever does).
    pub(super) fn with<R>(f: impl FnOnce(&mut Batch) -> R) -> R {
        BATCH.with(|b| match b.try_borrow_mut() {
            Ok(mut b) => {
                b.len = 0;
                f(&mut b)
            }
            Err(_) => f(&mut Batch::default()),
        })
    }

    /// The next datagram, to `to`: an empty buffer to write it into.
    pub(super) fn push(&mut self, to: SocketAddr) -> &mut Vec<u8> {
        if self.len == self.datagrams.len() {
            self.datagrams.push((SockAddr::from(to), Vec::with_capacity(ROOM)));
        } else {
            self.datagrams[self.len].0 = SockAddr::from(to);
        }
        self.len += 1;
        let d = &mut self.datagrams[self.len - 1].1;
        d.clear();
        d
    }

    /// `f` on each datagram written so far (sealing them, once written).
    pub(super) fn each(&mut self, mut f: impl FnMut(&mut Vec<u8>)) {
        for (_, d) in &mut self.datagrams[..self.len] {
            f(d);
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Send every datagram, `MSG_DONTWAIT` (never waits); how many the kernel took.
    #[cfg(not(target_os = "linux"))]
    pub(super) fn send(&mut self, sock: &Socket) -> usize {
        self.datagrams[..self.len].iter().filter(|(to, d)| sock.send_to_with_flags(d, to, libc::MSG_DONTWAIT).is_ok()).count()
    }

    /// Send every datagram, `MSG_DONTWAIT` (never waits); how many the kernel took.
    #[cfg(target_os = "linux")]
    pub(super) fn send(&mut self, sock: &Socket) -> usize {
        use std::os::fd::AsRawFd;
        let Batch { datagrams, len, mmsg } = self;
        let n = mmsg.point_at(&datagrams[..*len]);
        let (mut at, mut sent) = (0, 0);
        while at < n {
            let vlen = (n - at).min(MAX_VLEN);
            // SAFETY: `mmsg.hdrs[at..at + vlen]` are initialised headers
            // (`point_at`), each naming one address and one iovec that point
            // into `datagrams`, which is borrowed, unchanged, for this whole
            // call; the kernel reads those and writes only each header's
            // `msg_len`, within the slice. `vlen` is within the slice and at
            // most UIO_MAXIOV.
            let r = unsafe { libc::sendmmsg(sock.as_raw_fd(), mmsg.hdrs.as_mut_ptr().add(at), vlen as _, libc::MSG_DONTWAIT as _) };
            if r > 0 {
                (at, sent) = (at + r as usize, sent + r as usize);
            } else {
                // The datagram at `at` was refused (as its own `sendto` would
                // have been): dropped, and the rest still go.
                at += 1;
            }
        }
        sent
    }
}

/// The kernel takes at most this many messages a call (UIO_MAXIOV).
#[cfg(target_os = "linux")]
const MAX_VLEN: usize = 1024;

/// `sendmmsg`'s headers and iovecs, kept with the batch so that a send
/// allocates nothing once warm. They hold raw pointers into the datagrams,
/// rewritten at each send (`point_at`), never read between sends.
#[cfg(target_os = "linux")]
#[derive(Default)]
struct Mmsg {
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

#[cfg(target_os = "linux")]
impl Mmsg {
    /// One header and one iovec per datagram, pointing at it; how many.
    fn point_at(&mut self, datagrams: &[(SockAddr, Vec<u8>)]) -> usize {
        self.iovs.clear();
        self.hdrs.clear();
        self.iovs.extend(datagrams.iter().map(|(_, d)| libc::iovec { iov_base: d.as_ptr().cast_mut().cast(), iov_len: d.len() }));
        // Every iovec is in place (no push after this moves them).
        let iovs = self.iovs.as_mut_ptr();
        for (i, (to, _)) in datagrams.iter().enumerate() {
            // SAFETY: msghdr is a C struct of integers and pointers (and, on
            // some libcs, private padding), for which all zeroes is a valid
            // value: no name, no iovec, no control data, no flags.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_name = to.as_ptr().cast_mut().cast();
            h.msg_namelen = to.len();
            // SAFETY: i < datagrams.len() == iovs' length.
            h.msg_iov = unsafe { iovs.add(i) };
            h.msg_iovlen = 1;
            self.hdrs.push(libc::mmsghdr { msg_hdr: h, msg_len: 0 });
        }
        datagrams.len()
    }
}

/// The reader's side (one a fleet, held by whoever reads: `Fleet::inbox`):
/// up to `INBOX` datagrams a call (`recvmmsg`, Linux),
/// each into a buffer of its own one byte longer than a report may be (a
/// longer datagram shows as too long, not cut to fit), with its source.
pub(super) struct Inbox {
    bufs: Vec<[u8; RECV_ROOM]>,
    #[cfg(target_os = "linux")]
    names: Vec<libc::sockaddr_storage>,
    #[cfg(target_os = "linux")]
    iovs: Vec<libc::iovec>,
    #[cfg(target_os = "linux")]
    hdrs: Vec<libc::mmsghdr>,
    /// (length, source) of each datagram the last call took.
    got: Vec<(usize, Option<SocketAddr>)>,
}

// SAFETY: the raw pointers in `iovs` and `hdrs` point into this inbox's own
// `bufs` and `names` (heap buffers, which a move of the inbox does not move),
// are written at each `recv` before the kernel reads them, and are never read
// between calls: the inbox may go to whichever thread reads next.
#[cfg(target_os = "linux")]
unsafe impl Send for Inbox {}

const RECV_ROOM: usize = huntlb_policy::forward::MAX_REPORT_LEN + 1;
/// Datagrams a call takes at most: what a few changes of a sample's counts
/// bring between two reads, in one syscall instead of one each.
pub(super) const INBOX: usize = 64;

impl Default for Inbox {
    fn default() -> Inbox {
        Inbox {
            bufs: vec![[0; RECV_ROOM]; INBOX],
            #[cfg(target_os = "linux")]
            // SAFETY: all zeroes is a valid sockaddr_storage (family AF_UNSPEC).
            names: vec![unsafe { std::mem::zeroed() }; INBOX],
            #[cfg(target_os = "linux")]
            iovs: Vec::with_capacity(INBOX),
            #[cfg(target_os = "linux")]
            hdrs: Vec::with_capacity(INBOX),
            got: Vec::with_capacity(INBOX),
        }
    }
}

impl Inbox {
    /// Take what is queued, at most `most` (and `INBOX`) datagrams, never
    /// waiting: how many, and whether that was all that was queued.
    /// `WouldBlock` when nothing was.
    #[cfg(target_os = "linux")]
    pub(super) fn recv(&mut self, sock: &Socket, most: usize) -> std::io::Result<(usize, bool)> {
        use std::os::fd::AsRawFd;
        let vlen = most.clamp(1, INBOX);
        let Inbox { bufs, names, iovs, hdrs, got } = self;
        iovs.clear();
        hdrs.clear();
        got.clear();
        iovs.extend(bufs[..vlen].iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() }));
        let iov = iovs.as_mut_ptr();
        for (i, name) in names[..vlen].iter_mut().enumerate() {
            // SAFETY: as in `Mmsg::point_at`: all zeroes is a valid msghdr.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_name = (name as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            // SAFETY: i < vlen == iovs' length.
            h.msg_iov = unsafe { iov.add(i) };
            h.msg_iovlen = 1;
            hdrs.push(libc::mmsghdr { msg_hdr: h, msg_len: 0 });
        }
        // SAFETY: `hdrs` holds `vlen` initialised headers, each pointing at
        // its own buffer (`iovs[i]`, `bufs[i]`, of the length it says) and
        // its own address storage (`names[i]`, of the size it says), all
        // borrowed mutably for this call and not moved during it; the kernel
        // writes within those and each header's `msg_len` and
        // `msg_namelen`. No timeout (null): with MSG_DONTWAIT it never waits.
        let r = unsafe { libc::recvmmsg(sock.as_raw_fd(), hdrs.as_mut_ptr(), vlen as _, libc::MSG_DONTWAIT as _, std::ptr::null_mut()) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = r as usize;
        for (h, name) in hdrs[..n].iter().zip(&names[..n]) {
            let mut storage = socket2::SockAddrStorage::zeroed();
            // SAFETY: `sockaddr_storage` is the platform's own type, which
            // `view_as` asks for; the kernel wrote `msg_namelen` bytes of a
            // socket address into `name` (at most its size), which is what
            // `SockAddr::new` is told.
            let from = unsafe {
                *storage.view_as::<libc::sockaddr_storage>() = *name;
                SockAddr::new(storage, h.msg_hdr.msg_namelen.min(std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t))
            };
            got.push(((h.msg_len as usize).min(RECV_ROOM), from.as_socket()));
        }
        Ok((n, n < vlen))
    }

    /// One datagram a call where there is no `recvmmsg`.
    #[cfg(not(target_os = "linux"))]
    pub(super) fn recv(&mut self, sock: &Socket, _most: usize) -> std::io::Result<(usize, bool)> {
        use std::mem::MaybeUninit;
        self.got.clear();
        // SAFETY: a byte buffer seen as possibly uninitialised bytes: recv_from only writes to it.
        let buf = unsafe { &mut *(self.bufs[0].as_mut_slice() as *mut [u8] as *mut [MaybeUninit<u8>]) };
        let (n, from) = sock.recv_from_with_flags(buf, libc::MSG_DONTWAIT)?;
        self.got.push((n, from.as_socket()));
        Ok((1, false))
    }

    /// The `i`th datagram the last call took, and its source (None: not an IP socket address).
    pub(super) fn get(&self, i: usize) -> (&[u8], Option<SocketAddr>) {
        let (len, from) = self.got[i];
        (&self.bufs[i][..len], from)
    }
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
