//! huntlb-delay: a link's delay for the emulated cluster (harness/cluster.py),
//! whose kernel has no netem. It takes the packets an iptables NFQUEUE rule
//! queues to `--queue`, holds each `--delay-us` ± `--jitter-us` (uniform, from
//! a seeded generator) and accepts them in the order they fall due.
//!
//! One job, one thread: receive what the queue holds, accept what is due, sleep
//! (ppoll, nanosecond timeout, 1 ns timer slack) until the next is due or a
//! packet comes. It asks the kernel for the packets' metadata only (copy mode
//! META): their contents never reach it, so it parses nothing a packet says.
//! SIGTERM or SIGINT: every held packet is accepted at once, a line of counts
//! (packets, CPU, how late) goes to stderr, and it exits 0. Dead without that
//! (SIGKILL), the kernel drops what it held; the rule's `--queue-bypass`
//! passes what comes after.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Parser;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The longest hold taken (10 s): longer ones fill the kernel's queue.
const MAX_DELAY_US: u64 = 10_000_000;

#[derive(Parser, Debug)]
#[command(name = "huntlb-delay", version, about = "Hold each packet of an NFQUEUE D ± J microseconds, then accept it (a link's delay)")]
struct Args {
    /// The NFQUEUE number to bind (the iptables rule's --queue-num), in this network namespace.
    #[arg(long)]
    queue: u16,
    /// Mean hold per packet, microseconds (at most 10 s).
    #[arg(long)]
    delay_us: u64,
    /// Each hold is drawn uniformly from delay-jitter..=delay+jitter microseconds.
    #[arg(long, default_value_t = 0)]
    jitter_us: u64,
    /// Seed of the holds' generator (the same seed, the same holds in turn); drawn and printed if not given.
    #[arg(long)]
    seed: Option<u64>,
    /// The kernel's queue accepts (instead of dropping) packets beyond --queue-max-len.
    #[arg(long)]
    fail_open: bool,
    /// Packets the kernel keeps waiting for a verdict (held here or not yet read).
    #[arg(long, default_value_t = 8192)]
    queue_max_len: u32,
}

impl Args {
    /// Errors name the flag, and say why.
    fn validate(&self) -> anyhow::Result<()> {
        if self.delay_us > MAX_DELAY_US {
            bail!("--delay-us {}: at most {MAX_DELAY_US} (10 s); longer holds fill the kernel's queue", self.delay_us);
        }
        if self.jitter_us > self.delay_us {
            bail!(
                "--jitter-us {} is more than --delay-us {}: a hold would be negative",
                self.jitter_us,
                self.delay_us
            );
        }
        if self.queue_max_len == 0 {
            bail!("--queue-max-len 0: the kernel could hold no packet for us");
        }
        Ok(())
    }
}

/// A packet's hold, microseconds: `delay - jitter + draw mod (2 jitter + 1)`,
/// so uniform over `delay - jitter ..= delay + jitter` for a uniform `draw`.
/// Requires `jitter <= delay` (Args::validate).
pub fn hold_us(delay: u64, jitter: u64, draw: u64) -> u64 {
    delay - jitter + draw % (2 * jitter + 1)
}

/// What is held, by due time (microseconds on the delayer's clock); packets
/// due at the same time leave in the order they came.
pub struct Schedule<T> {
    delay: u64,
    jitter: u64,
    rng: SmallRng,
    seq: u64,
    heap: BinaryHeap<Reverse<(u64, u64, Slot<T>)>>,
}

/// A held item; compared by nothing (the heap orders by due time and arrival).
struct Slot<T>(T);
impl<T> PartialEq for Slot<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<T> Eq for Slot<T> {}
impl<T> PartialOrd for Slot<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Slot<T> {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl<T> Schedule<T> {
    pub fn new(delay: u64, jitter: u64, seed: u64) -> Self {
        assert!(jitter <= delay);
        Schedule { delay, jitter, rng: SmallRng::seed_from_u64(seed), seq: 0, heap: BinaryHeap::new() }
    }

    /// Holds `item`, arrived at `now`; returns when it is due.
    pub fn push(&mut self, now: u64, item: T) -> u64 {
        let due = now + hold_us(self.delay, self.jitter, self.rng.gen());
        self.heap.push(Reverse((due, self.seq, Slot(item))));
        self.seq += 1;
        due
    }

    /// The earliest item due at or before `now`, if any.
    pub fn pop_due(&mut self, now: u64) -> Option<(u64, T)> {
        match self.heap.peek() {
            Some(Reverse((due, _, _))) if *due <= now => self.heap.pop().map(|Reverse((due, _, Slot(t)))| (due, t)),
            _ => None,
        }
    }

    /// Every item, earliest due first (on the way out).
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        std::iter::from_fn(|| self.heap.pop().map(|Reverse((_, _, Slot(t)))| t))
    }

    pub fn next_due(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((due, _, _))| *due)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Opens the queue and finds its netlink socket, which the nfq crate keeps
/// private: socket(2) returns the lowest free descriptor (POSIX), and nothing
/// else opens one meanwhile (one thread); it is checked to be a netfilter
/// netlink socket before it is used.
fn open_queue() -> anyhow::Result<(nfq::Queue, RawFd)> {
    let probe = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
    if probe < 0 {
        return Err(io::Error::last_os_error()).context("open /dev/null");
    }
    unsafe { libc::close(probe) };
    let queue = nfq::Queue::open().context("opening a netfilter queue socket (root, in the namespace?)")?;
    let opt = |name| {
        let mut v: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let r = unsafe { libc::getsockopt(probe, libc::SOL_SOCKET, name, &mut v as *mut _ as *mut libc::c_void, &mut len) };
        if r == 0 { v } else { -1 }
    };
    if opt(libc::SO_DOMAIN) != libc::AF_NETLINK || opt(libc::SO_PROTOCOL) != libc::NETLINK_NETFILTER {
        bail!("could not find the queue's socket (descriptor {probe} is not a netfilter netlink socket)");
    }
    Ok((queue, probe))
}

/// Waits until `fd` is readable, a signal comes, or `timeout_us` passes (None:
/// 1 s); returns whether there is something to read.
fn wait(fd: RawFd, timeout_us: Option<u64>) -> bool {
    let us = timeout_us.unwrap_or(1_000_000);
    let ts = libc::timespec { tv_sec: (us / 1_000_000) as libc::time_t, tv_nsec: ((us % 1_000_000) * 1000) as libc::c_long };
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let n = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
    n != 0 // an error (EINTR) reads too: cheap, and never misses a packet
}

fn cpu_us() -> u64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Err(e) = args.validate() {
        eprintln!("huntlb-delay: {e}");
        std::process::exit(2);
    }
    let seed = args.seed.unwrap_or_else(|| rand::thread_rng().gen());
    let q = args.queue;
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong); // wake at the due time, not 50 us later
    }
    let (mut queue, fd) = open_queue()?;
    queue.bind(q).with_context(|| format!("--queue {q}: binding (is another process bound to it?)"))?;
    queue.set_copy_range(q, 0).context("metadata-only copy mode")?;
    queue.set_recv_gso(q, true).context("taking GSO packets whole")?; // no segmenting or checksumming for us
    queue.set_fail_open(q, args.fail_open).context("fail-open")?;
    queue.set_queue_max_len(q, args.queue_max_len).context("--queue-max-len")?;
    queue.set_nonblocking(true);
    eprintln!(
        "huntlb-delay: queue {q} bound: {} +- {} us, seed {seed}, fail-open {}",
        args.delay_us, args.jitter_us, args.fail_open
    );

    let clock = Instant::now();
    let now = || clock.elapsed().as_micros() as u64;
    let mut sched = Schedule::new(args.delay_us, args.jitter_us, seed);
    let mut late = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
    let (mut packets, mut most) = (0u64, 0usize);
    let cpu0 = cpu_us();
    let mut readable = true;
    while !STOP.load(Ordering::Relaxed) {
        // what the kernel queued since the last wait, until it would block
        if readable {
            loop {
                match queue.recv() {
                    Ok(msg) => {
                        sched.push(now(), msg);
                        packets += 1;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => break,
                    Err(e) => return Err(e).context("reading the queue"),
                }
            }
        }
        most = most.max(sched.len());
        let t = now();
        while let Some((due, mut msg)) = sched.pop_due(t) {
            msg.set_verdict(nfq::Verdict::Accept);
            queue.verdict(msg).context("accepting a packet")?;
            let _ = late.record(t - due);
        }
        readable = wait(fd, sched.next_due().map(|d| d.saturating_sub(now())));
    }
    let held = sched.len();
    for mut msg in sched.drain() {
        msg.set_verdict(nfq::Verdict::Accept);
        let _ = queue.verdict(msg);
    }
    let cpu = cpu_us() - cpu0;
    eprintln!(
        "huntlb-delay: queue {q} done: packets {packets} cpu_us {cpu} us_per_packet {:.2} held_most {most} \
         released_at_exit {held} late_us_p50 {} late_us_p99 {} late_us_max {}",
        cpu as f64 / packets.max(1) as f64,
        late.value_at_quantile(0.5),
        late.value_at_quantile(0.99),
        late.max()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> anyhow::Result<Args> {
        let a = Args::try_parse_from(["huntlb-delay"].iter().chain(v))?;
        a.validate()?;
        Ok(a)
    }

    #[test]
    fn holds_stay_within_delay_plus_minus_jitter_and_cover_it() {
        let (d, j) = (250, 50);
        let mut s = Schedule::new(d, j, 7);
        let holds: Vec<u64> = (0..20_000).map(|i| s.push(i, ()) - i).collect();
        assert!(holds.iter().all(|&h| (d - j..=d + j).contains(&h)));
        assert_eq!(*holds.iter().min().unwrap(), d - j);
        assert_eq!(*holds.iter().max().unwrap(), d + j);
        let mean = holds.iter().sum::<u64>() as f64 / holds.len() as f64;
        assert!((mean - d as f64).abs() < 2.0, "mean {mean}");
    }

    #[test]
    fn the_hold_is_a_pure_function_of_the_draw() {
        assert_eq!(hold_us(250, 50, 0), 200);
        assert_eq!(hold_us(250, 50, 100), 300);
        assert_eq!(hold_us(250, 50, 101), 200);
        assert_eq!(hold_us(250, 0, 12345), 250);
        assert_eq!(hold_us(0, 0, u64::MAX), 0);
        assert_eq!(hold_us(10, 10, u64::MAX), u64::MAX % 21);
    }

    #[test]
    fn one_seed_one_schedule() {
        let run = |seed| {
            let mut s = Schedule::new(250, 50, seed);
            (0..100).map(|i| s.push(i * 10, ())).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn released_in_due_order_never_early_ties_in_arrival_order() {
        let mut s = Schedule::new(250, 50, 3);
        let mut due = Vec::new();
        for i in 0..1000u64 {
            due.push((s.push(i * 3, i), i)); // packets 3 us apart: holds reorder them
        }
        let mut out = Vec::new();
        for t in 0..5000u64 {
            while let Some((d, i)) = s.pop_due(t) {
                assert!(d <= t, "released before due");
                assert_eq!(d, due[i as usize].0);
                out.push((d, i));
            }
        }
        assert_eq!(s.len(), 0);
        due.sort(); // by due time, then arrival
        assert_eq!(out, due);
        // without jitter nothing is reordered
        let mut s = Schedule::new(250, 0, 3);
        for i in 0..10u64 {
            s.push(i / 2, i); // pairs arriving together
        }
        let order: Vec<u64> = std::iter::from_fn(|| s.pop_due(1000).map(|(_, i)| i)).collect();
        assert_eq!(order, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn nothing_due_before_its_time_and_drain_gives_all() {
        let mut s = Schedule::new(100, 0, 1);
        s.push(0, 'a');
        s.push(5, 'b');
        assert_eq!(s.next_due(), Some(100));
        assert!(s.pop_due(99).is_none());
        assert_eq!(s.pop_due(100), Some((100, 'a')));
        assert!(s.pop_due(104).is_none());
        s.push(1, 'c');
        assert_eq!(s.drain().collect::<String>(), "cb");
    }

    #[test]
    fn flags_are_checked_and_errors_name_them() {
        let a = args(&["--queue", "3", "--delay-us", "250", "--jitter-us", "50", "--seed", "9", "--fail-open"]).unwrap();
        assert_eq!((a.queue, a.delay_us, a.jitter_us, a.seed, a.fail_open), (3, 250, 50, Some(9), true));
        let err = |v: &[&str]| args(v).unwrap_err().to_string();
        assert!(err(&["--queue", "1", "--delay-us", "250", "--jitter-us", "300"]).contains("--jitter-us 300 is more than --delay-us 250"));
        assert!(err(&["--queue", "1", "--delay-us", "20000000"]).contains("--delay-us 20000000"));
        assert!(err(&["--queue", "1", "--delay-us", "1", "--queue-max-len", "0"]).contains("--queue-max-len"));
        assert!(err(&["--queue", "70000", "--delay-us", "1"]).contains("--queue"));
        assert!(err(&["--queue", "1", "--delay-us", "-5"]).contains("--delay-us"));
        assert!(err(&["--delay-us", "1"]).contains("--queue"));
    }
}
