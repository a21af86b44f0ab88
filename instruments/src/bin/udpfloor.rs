//! huntlb-udpfloor: what one loopback UDP datagram costs the kernel, both
//! ends, on this machine, at best. One thread sends `--datagrams` datagrams of
//! `--bytes` bytes, `--batch` at a time to as many receiving sockets (one
//! `sendmmsg` a batch, as an agent sends a count change to its listeners), and
//! drains each socket after each batch (`recvmmsg`, up to 64), so no buffer
//! overflows and every cache stays warm. No seal, no parse, no wake-up: the
//! floor under what a forwarding tier's datagram can cost (docs/results/
//! tier-cost.md, "The floor of a forwarding tier"). Prints one JSON line.

use clap::Parser;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;

#[derive(Parser, Debug)]
#[command(name = "huntlb-udpfloor", version, about = "The kernel's CPU per loopback UDP datagram, both ends, batched as the agents send")]
struct Args {
    /// Datagrams to send (rounded up to whole batches).
    #[arg(long, default_value_t = 400_000)]
    datagrams: usize,
    /// Datagrams a sendmmsg, each to its own receiving socket.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    batch: u32,
    /// Bytes a datagram (a sealed report is 140-141).
    #[arg(long, default_value_t = 141, value_parser = clap::value_parser!(u32).range(1..=1400))]
    bytes: u32,
    /// The loopback address block's third octet: the sender binds 127.99.N.1, the receivers .2 on.
    #[arg(long, default_value_t = 0)]
    block: u8,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let k = a.batch as usize;
    let ip = |last: u8| Ipv4Addr::new(127, 99, a.block, last);
    let rx: Vec<UdpSocket> = (0..k).map(|i| UdpSocket::bind(SocketAddrV4::new(ip(2 + i as u8), 0))).collect::<Result<_, _>>()?;
    let tx = UdpSocket::bind(SocketAddrV4::new(ip(1), 0))?;
    let mut to: Vec<libc::sockaddr_in> = rx
        .iter()
        .map(|s| match s.local_addr() {
            Ok(std::net::SocketAddr::V4(v)) => Ok(libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(v.ip().octets()) },
                sin_zero: [0; 8],
            }),
            other => anyhow::bail!("a receiving socket has no IPv4 address: {other:?}"),
        })
        .collect::<anyhow::Result<_>>()?;
    let payload = vec![b'x'; a.bytes as usize];
    let mut iov = libc::iovec { iov_base: payload.as_ptr() as *mut libc::c_void, iov_len: payload.len() };
    // SAFETY (zeroed): mmsghdr is plain data; every pointer set below outlives the calls.
    let mut out: Vec<libc::mmsghdr> = (0..k).map(|_| unsafe { std::mem::zeroed() }).collect();
    for (h, addr) in out.iter_mut().zip(to.iter_mut()) {
        h.msg_hdr.msg_name = addr as *mut libc::sockaddr_in as *mut libc::c_void;
        h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        h.msg_hdr.msg_iov = &mut iov;
        h.msg_hdr.msg_iovlen = 1;
    }
    let mut bufs = vec![[0u8; 2048]; 64];
    let mut riov: Vec<libc::iovec> = bufs.iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr() as *mut libc::c_void, iov_len: b.len() }).collect();
    // SAFETY (zeroed): as above.
    let mut inb: Vec<libc::mmsghdr> = (0..64).map(|_| unsafe { std::mem::zeroed() }).collect();
    for (h, v) in inb.iter_mut().zip(riov.iter_mut()) {
        h.msg_hdr.msg_iov = v;
        h.msg_hdr.msg_iovlen = 1;
    }
    let (mut sent, mut got, mut send_ns, mut recv_ns) = (0usize, 0usize, 0u64, 0u64);
    let wall = std::time::Instant::now();
    while sent < a.datagrams {
        let c0 = thread_cpu_ns();
        // SAFETY: `out` holds k initialised headers whose buffers live for the call.
        let n = unsafe { libc::sendmmsg(tx.as_raw_fd(), out.as_mut_ptr(), k as libc::c_uint, 0) };
        anyhow::ensure!(n == k as i32, "sendmmsg sent {n} of {k}: {}", std::io::Error::last_os_error());
        sent += k;
        let c1 = thread_cpu_ns();
        for s in &rx {
            // SAFETY: `inb` holds 64 headers over buffers that live for the call.
            let r = unsafe { libc::recvmmsg(s.as_raw_fd(), inb.as_mut_ptr(), 64, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
            if r > 0 {
                got += r as usize;
            }
        }
        send_ns += c1 - c0;
        recv_ns += thread_cpu_ns() - c1;
    }
    let per = |ns: u64, n: usize| ns as f64 / n.max(1) as f64 / 1e3;
    println!(
        "{}",
        serde_json::json!({
            "datagrams_sent": sent, "datagrams_received": got, "bytes": a.bytes, "batch": k,
            "send_us": per(send_ns, sent), "receive_us": per(recv_ns, got), "both_us": per(send_ns + recv_ns, got),
            "wall_s": wall.elapsed().as_secs_f64(),
        })
    );
    anyhow::ensure!(got == sent, "{} of {sent} datagrams lost on loopback", sent - got);
    Ok(())
}
