use super::*;
use crate::config::Peer as PeerEntry;
use huntlb_policy::forward::{open, seal, Report, Sub};

#[tokio::test]
async fn names_resolve_to_every_address_and_a_failed_lookup_keeps_the_last() {
    let local = PeerEntry::Name { host: "localhost".into(), port: 9700 };
    let fixed: SocketAddr = "127.0.0.9:9700".parse().unwrap();
    let got = resolve_all(&[local, PeerEntry::Addr(fixed)], &[]).await;
    assert!(got[0].contains(&"127.0.0.1:9700".parse().unwrap()), "{got:?}");
    assert_eq!(got[1], vec![fixed]);
    // A name that does not resolve (an empty one fails at once, with no
    // query sent): the addresses it had stay.
    let gone = PeerEntry::Name { host: String::new(), port: 9701 };
    let before: SocketAddr = "127.0.0.7:9701".parse().unwrap();
    assert_eq!(resolve_all(&[PeerEntry::Addr(fixed), gone], &[vec![fixed], vec![before]]).await, vec![vec![fixed], vec![before]]);
}

const KEY: &str = "0123456789abcdef0123456789abcdef-test";

/// Written once: tests run at once, and one must not read it half written.
fn key_file() -> String {
    static FILE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let p = std::env::temp_dir().join(format!("huntlb-fleet-test-{}.key", std::process::id()));
        std::fs::write(&p, KEY).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        p.to_string_lossy().into_owned()
    })
    .clone()
}

fn cfg(listen: &str, peers: &[&str]) -> FleetConfig {
    let key_file = key_file();
    FleetConfig {
        listen: listen.parse().unwrap(),
        peers: peers.iter().map(|p| PeerEntry::Addr(p.parse().unwrap())).collect(),
        advertise: listen.into(),
        from: listen.parse().unwrap(),
        peer_port: 8080,
        keys: Keys::load(&key_file, crate::seal::Readers::Owner).unwrap(),
        key_readers: crate::seal::Readers::Owner,
        tls: None,
        key_file,
        forwarding: huntlb_policy::forward::Forwarding { peer_margin: 0, seen_margin: None },
        heartbeat: Duration::from_secs(60),
        dead_after: Duration::from_secs(120),
        quiet_beat: Duration::from_secs(60),
        commit: Duration::from_millis(10),
        settle: Duration::ZERO,
        resolve: Duration::from_secs(1),
        sample: 8,
        resample: Duration::from_secs(60),
        keep: 4,
        pass_plain: false,
        affinity: None,
    }
}

/// What an agent reports, set by the test: (busy, ready), or gone.
#[derive(Clone, Default)]
struct Count(Arc<Mutex<Option<(u32, bool)>>>);

impl Count {
    fn set(&self, busy: u32, ready: bool) {
        *self.0.lock().unwrap() = Some((busy, ready));
    }
    fn gone(&self) {
        *self.0.lock().unwrap() = None;
    }
}

/// A fleet whose count is `count`'s; nothing runs on a timer (the tests
/// call `redraw`, `changed` and `beat`). Its socket is read by a thread of
/// the test's, every `READ_EVERY` until the fleet is dropped: the tests wait
/// on their runtime's thread (`soon`), where the agent's reader task would
/// never run.
async fn agent(cfg: FleetConfig, count: &Count) -> Arc<Fleet> {
    let f = Fleet::open(cfg).await.unwrap();
    let c = count.clone();
    assert!(f.report.set(Box::new(move || *c.0.lock().unwrap())).is_ok());
    let weak = Arc::downgrade(&f);
    std::thread::spawn(move || {
        while let Some(f) = weak.upgrade() {
            f.drain(&mut lock(&f.inbox), super::READ_AT_MOST);
            drop(f);
            std::thread::sleep(READ_EVERY);
        }
    });
    f
}

/// The test's reader takes datagrams as they come: wait (bounded) for it.
fn soon(what: &str, mut ok: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(5);
    while !ok() {
        assert!(Instant::now() < until, "not within 5 s: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Two agents that each sample the other, counting `busy` each (ready), both
/// heard, and the handshakes' last answers (a count still on its way) settled.
async fn heard_both_ways(a: (FleetConfig, &Count, u32), b: (FleetConfig, &Count, u32)) -> (Arc<Fleet>, Arc<Fleet>) {
    a.1.set(a.2, true);
    b.1.set(b.2, true);
    let fa = agent(a.0, a.1).await;
    let fb = agent(b.0, b.1).await;
    assert!(fa.redraw() && fb.redraw());
    soon("both heard", || fa.ready_peers() == 1 && fb.ready_peers() == 1);
    let mut last = (0, 0);
    soon("the handshakes settled", || {
        std::thread::sleep(Duration::from_millis(30));
        let now = (fa.gauges().sent, fb.gauges().sent);
        std::mem::replace(&mut last, now) == now
    });
    (fa, fb)
}

/// As if an offer had just decided by the counts: the agent is not quiet
/// (for `WANT_FOR`), so its draws draw anew.
fn deciding(f: &Fleet) {
    f.consulted_us.store(f.micros() + 1, Ordering::Relaxed);
}

fn forward_to(member: &str) -> Pick {
    let member: SocketAddr = member.parse().unwrap();
    Pick::Forward(Target { member, authority: SocketAddr::new(member.ip(), 8080).to_string(), outstanding: Arc::default() })
}

/// A member played by the test over a plain socket, speaking the handshake:
/// it learns the agent's nonce from every datagram that echoes its own.
struct Fake {
    sock: std::net::UdpSocket,
    addr: String,
    to: String,
    boot: u64,
    seq: u64,
    mine: u64,
    theirs: u64,
    keys: Keys,
    /// Every datagram it sent, as sent (a recording to replay).
    sent: Vec<Vec<u8>>,
}

impl Fake {
    fn new(addr: &str, to: &str) -> Fake {
        let sock = std::net::UdpSocket::bind(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let keys = Keys::load(&key_file(), crate::seal::Readers::Owner).unwrap();
        Fake { sock, addr: addr.into(), to: to.into(), boot: nonce(), seq: 0, mine: nonce(), theirs: 0, keys, sent: Vec::new() }
    }

    /// A restart: a new boot and nonce, its sequence from 1 again (lower than
    /// before, as a clock stepped back would make it), the agent's nonce forgotten.
    fn restart(&mut self) {
        (self.boot, self.seq, self.mine, self.theirs) = (nonce(), 0, nonce(), 0);
    }

    fn datagram(&mut self, busy: u32, seq: u64) -> Vec<u8> {
        let text = Report { from: self.addr.clone(), to: self.to.clone(), boot: self.boot, seq, busy, ready: true, sub: Sub::Beats, mine: self.mine, yours: self.theirs }.to_string();
        seal(&text, &self.keys.tag(text.as_bytes())).into_bytes()
    }

    fn send(&mut self, busy: u32) -> Vec<u8> {
        self.seq += 1;
        let d = self.datagram(busy, self.seq);
        self.raw(&d);
        d
    }

    fn raw(&mut self, d: &[u8]) {
        self.sock.send_to(d, self.to.as_str()).unwrap();
        self.sent.push(d.to_vec());
    }

    /// Read what the agent sent until one echoes our nonce (or 5 s): its nonce learnt.
    fn hear(&mut self) -> Report {
        let mut buf = [0u8; 512];
        loop {
            let (n, _) = self.sock.recv_from(&mut buf).expect("the agent answers within 5 s");
            let r = open(&buf[..n], |t, tag| self.keys.verify(t, tag)).unwrap();
            if r.yours == self.mine {
                self.theirs = r.mine;
                return r;
            }
        }
    }

    /// Drop what the agent sent so far.
    fn drain(&mut self) {
        let mut buf = [0u8; 512];
        self.sock.set_nonblocking(true).unwrap();
        while let Ok((n, _)) = self.sock.recv_from(&mut buf) {
            if let Ok(r) = open(&buf[..n], |t, tag| self.keys.verify(t, tag)) {
                if r.yours == self.mine {
                    self.theirs = r.mine;
                }
            }
        }
        self.sock.set_nonblocking(false).unwrap();
    }

    /// First contact (or after a restart): unproven, answered; proven, taken
    /// (a new boot: the agent draws its nonce again and answers with it).
    fn handshake(&mut self, busy: u32) {
        self.send(busy);
        self.hear();
        self.send(busy);
        self.hear();
    }
}

/// An offer decides on what the reader thread has taken from the sample;
/// counts go out on subscription, on `changed` and on `beat` (no timer runs here).
#[tokio::test]
async fn an_offer_goes_to_the_least_member_at_its_own_address() {
    let (a, b) = ("127.77.9.1:9700", "127.77.9.2:9700");
    let (ca, cb) = (Count::default(), Count::default());
    ca.set(3, true);
    cb.set(5, true);
    let fa = agent(cfg(a, &[a, b]), &ca).await;
    let fb = agent(cfg(b, &[a, b]), &cb).await;
    assert_eq!(fb.pick(5, None), Pick::NoPeers, "nothing heard yet");
    // B samples A: A answers the subscription with its count at once.
    assert!(fb.redraw());
    soon("A heard at B", || fb.ready_peers() == 1);
    assert_eq!(fb.pick(5, None), forward_to(a), "A holds 3, B 5: to A's agent, at A's address");
    // That offer decided by the counts: B's next report asks for A's every change.
    fb.changed();
    soon("A knows B wants changes", || fa.peers_wanting() == 1);
    ca.set(9, true);
    fa.changed();
    soon("A's 9", || fb.pick(5, None) == Pick::Keep);
    ca.set(9, false);
    fa.changed();
    soon("A not ready", || fb.ready_peers() == 0);
    assert_eq!(fb.pick(5, None), Pick::NoPeers, "A takes no forwards");
    // A report whose agent is gone is not sent.
    ca.gone();
    let sent = fa.gauges().sent;
    assert!(!fa.send(&[b.parse().unwrap()]));
    assert_eq!(fa.gauges().sent, sent);
    // Nothing dropped but the handshake's first reports (each echoed no nonce yet).
    for f in [&fa, &fb] {
        let bad = f.reports_bad();
        assert_eq!((bad[..4].to_vec(), bad[Bad::Version as usize]), (vec![0; 4], 0), "{bad:?}");
    }
}

/// A change goes only to the members that want it: one whose offers are
/// all kept by `seen` subscribes to beats, until an offer there decides by the counts.
#[tokio::test]
async fn changes_go_to_the_peers_that_want_them() {
    let (a, b) = ("127.77.9.6:9700", "127.77.9.7:9700");
    let seen = |l| FleetConfig { forwarding: huntlb_policy::forward::Forwarding { peer_margin: 0, seen_margin: Some(1) }, ..cfg(l, &[a, b]) };
    let (ca, cb) = (Count::default(), Count::default());
    let (fa, fb) = heard_both_ways((seen(a), &ca, 7), (seen(b), &cb, 3)).await;
    assert_eq!(fb.pick(3, Some(3)), Pick::Keep, "the front knew B's load");
    assert_eq!(fa.peers_wanting(), 0, "B subscribed to beats only");
    // B wants nothing: A's change does not go to it, and B still sees 7.
    ca.set(1, true);
    let sent = fa.gauges().sent;
    fa.changed();
    assert_eq!(fa.gauges().sent, sent, "nothing sent for a change nobody wants");
    assert_eq!(fb.pick(5, None), Pick::Keep, "B holds 5, A as last heard 7");
    // That offer decided by the counts: B's next report says it wants them.
    fb.changed();
    // Both drew at once, so each answered the other's first report while its
    // own was on the way: a report may echo a nonce drawn again since, and
    // its answer wait out ANSWER_EVERY. In a running agent the next beat or
    // renewal carries it; here, the next report does.
    let to_a = [a.parse().unwrap()];
    soon("A knows B wants", || {
        std::thread::sleep(super::ANSWER_EVERY);
        fa.peers_wanting() == 1 || !fb.send(&to_a)
    });
    soon("A's 1 at B (sent on the upgrade)", || fb.pick(5, None) == forward_to(a));
}

/// The sample: K members drawn from many, the least loaded kept at each
/// draw, every report to a member no longer sampled ending its
/// subscription; what a draw sends does not depend on how many members there are.
#[tokio::test]
async fn the_sample_is_bounded_keeps_the_least_and_ends_what_it_drops() {
    use std::net::UdpSocket;
    let a = "127.77.11.1:9700";
    let others: Vec<String> = (2..=13).map(|i| format!("127.77.11.{i}:9700")).collect();
    let mut all: Vec<&str> = vec![a];
    all.extend(others.iter().map(String::as_str));
    let count = Count::default();
    count.set(0, true);
    let fa = agent(FleetConfig { sample: 3, keep: 1, ..cfg(a, &all) }, &count).await;
    let keys = Keys::load(&key_file(), crate::seal::Readers::Owner).unwrap();
    let mut fakes: Vec<Fake> = others.iter().map(|o| Fake::new(o, a)).collect();
    // Member i reports busy 10 + i (member 5 holds the least, 3).
    for (i, f) in fakes.iter_mut().enumerate() {
        f.handshake(if i == 5 { 3 } else { 10 + i as u32 });
    }
    soon("every member's report taken", || fa.gauges().taken == others.len() as u64);
    // Two answers each (the unproven first report's, the new boot's), counted just after they leave.
    soon("every handshake answered", || fa.gauges().sent == 2 * others.len() as u64);
    let socks: Vec<&UdpSocket> = fakes.iter().map(|f| &f.sock).collect();
    let sample = |f: &Fleet| lock(&f.state).sample.clone();
    let mut seen_in_sample = std::collections::HashSet::new();
    let mut with_5 = 0;
    deciding(&fa);
    for _ in 0..200 {
        let before = sample(&fa);
        // the members renewed before: the sample and those standing in for it
        let renewed: Vec<SocketAddr> = lock(&fa.state).subscribed().copied().collect();
        let sent = fa.gauges().sent;
        assert!(fa.redraw());
        let after = sample(&fa);
        assert_eq!(after.len(), 3, "{after:?}");
        assert!(!after.contains(&a.parse().unwrap()), "never itself");
        assert!(after.iter().all(|m| after.iter().filter(|x| *x == m).count() == 1), "distinct: {after:?}");
        // Sent: the new sample (renewed) and the dropped (ended, or renewed
        // while standing in for a member drawn), at most 2K.
        let dropped = renewed.iter().filter(|m| !after.contains(m)).count();
        assert_eq!(fa.gauges().sent - sent, (3 + dropped) as u64, "{before:?} -> {after:?}");
        // The least of the old sample stays.
        let five: SocketAddr = others[5].parse().unwrap();
        if before.contains(&five) {
            assert!(after.contains(&five), "the least loaded is kept: {before:?} -> {after:?}");
            with_5 += 1;
        }
        seen_in_sample.extend(after);
    }
    assert_eq!(seen_in_sample.len(), others.len(), "every member drawn at some point");
    assert!(with_5 > 150, "once drawn, the least stays: {with_5} of 200");
    fa.consulted_us.store(0, Ordering::Relaxed); // quiet again: beats are asked for
    // What a member hears: a renewal while it is sampled (or stands in for a
    // member drawn), a leave once dropped.
    let last: Vec<SocketAddr> = lock(&fa.state).subscribed().copied().collect();
    let out: Vec<usize> = (0..others.len()).filter(|i| !last.contains(&others[*i].parse().unwrap())).collect();
    let mut buf = [0u8; 512];
    for s in &socks {
        s.set_nonblocking(true).unwrap();
        while s.recv_from(&mut buf).is_ok() {}
        s.set_nonblocking(false).unwrap();
    }
    fa.send(&others.iter().map(|o| o.parse().unwrap()).collect::<Vec<_>>());
    for (i, s) in socks.iter().enumerate() {
        let (n, _) = s.recv_from(&mut buf).unwrap();
        let r = open(&buf[..n], |t, tag| keys.verify(t, tag)).unwrap();
        assert_eq!(r.sub, if out.contains(&i) { Sub::Leave } else { Sub::Beats }, "member {i}");
    }
}

/// Quiet (no offer here or at a listener decides by counts), a draw keeps
/// all of its sample but one and draws one member anew: each draw renews the
/// sample, K reports, and drops one member (a leave) where a busy draw drops
/// all but `keep` (a leave, a subscription and its answer each, every quiet
/// beat, at every idle agent). Not none: in time every member is drawn, a
/// dead one too, and counted unheard. The first offer that decides by counts
/// makes draws draw anew.
#[tokio::test]
async fn a_quiet_draw_keeps_all_of_its_sample_but_one() {
    let a = "127.77.19.1:9700";
    let others: Vec<String> = (2..=13).map(|i| format!("127.77.19.{i}:9700")).collect();
    let mut all: Vec<&str> = vec![a];
    all.extend(others.iter().map(String::as_str));
    let count = Count::default();
    count.set(0, true);
    let fa = agent(FleetConfig { sample: 4, keep: 1, ..cfg(a, &all) }, &count).await;
    let mut fakes: Vec<Fake> = others.iter().map(|o| Fake::new(o, a)).collect();
    for (i, f) in fakes.iter_mut().enumerate() {
        f.handshake(10 + i as u32);
    }
    soon("every member's report taken", || fa.gauges().taken == others.len() as u64);
    soon("every handshake answered", || fa.gauges().sent == 2 * others.len() as u64);
    let sample = |f: &Fleet| {
        let mut s = lock(&f.state).sample.clone();
        s.sort();
        s
    };
    assert!(fa.redraw());
    assert!(fa.quiet());
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        let before = sample(&fa);
        let sent = fa.gauges().sent;
        assert!(fa.redraw());
        let after = sample(&fa);
        assert_eq!(after.len(), 4);
        let kept = after.iter().filter(|m| before.contains(m)).count();
        assert!(kept >= 3, "quiet: all but one kept, {before:?} -> {after:?}");
        // the sample renewed (one of it new, asked), the one dropped standing
        // in for it (these fakes never answer), the last draw's stand-in
        // ended: K + 2 at most
        let n = fa.gauges().sent - sent;
        assert!(n <= 6, "{n} sent: {before:?} -> {after:?}");
        seen.extend(after);
    }
    assert_eq!(seen.len(), others.len(), "quiet too, every member drawn in time");
    // An offer decides by counts: draws keep `keep` (1) and draw the rest anew.
    deciding(&fa);
    let churned = (0..50).any(|_| {
        let before = sample(&fa);
        assert!(fa.redraw());
        sample(&fa).iter().filter(|m| before.contains(m)).count() < 3
    });
    assert!(churned, "deciding, a draw replaces more than one");
}

/// Attackers on the fleet port: a stranger, a member's address without the
/// key, an older agent, a replay, a report naming another sender or for
/// another member. None reaches the table.
#[tokio::test]
async fn only_sealed_fresh_reports_from_members_for_us_are_taken() {
    use std::net::UdpSocket;
    let (a, b, c) = ("127.77.9.3:9700", "127.77.9.4:9700", "127.77.9.5:9700");
    let count = Count::default();
    count.set(2, true);
    let fa = agent(cfg(a, &[a, b, c]), &count).await;
    let keys = Keys::load(&key_file(), crate::seal::Readers::Owner).unwrap();
    let bad = |why: Bad| fa.reports_bad()[why as usize];
    let stranger = UdpSocket::bind("127.77.9.8:0").unwrap();
    let mut fb = Fake::new(b, a);
    let d = fb.datagram(0, 1);
    stranger.send_to(&d, a).unwrap();
    soon("a stranger", || bad(Bad::Stranger) == 1);
    fb.raw(b"not a report");
    soon("junk", || bad(Bad::Malformed) == 1);
    // Unsealed, or sealed under another key.
    let text = String::from_utf8(d[..d.len() - 33].to_vec()).unwrap();
    fb.raw(seal(&text, &[0; 16]).as_bytes());
    soon("a forged tag", || bad(Bad::Unauthenticated) == 1);
    // An older agent's report, sealed: told apart, not taken.
    let old = "hunt-fleet/2 127.77.9.4:9700 7 0 1 1";
    fb.raw(seal(old, &keys.tag(old.as_bytes())).as_bytes());
    soon("an older agent", || bad(Bad::Version) == 1);
    assert_eq!((fa.ready_peers(), fa.peers_wanting(), fa.gauges().sent), (0, 0, 0), "none of them heard, none answered");
    // B's first report echoes no nonce of A's: not taken, answered with A's nonce.
    fb.send(4);
    let answer = fb.hear();
    assert_eq!((answer.from.as_str(), answer.to.as_str(), answer.yours), (a, b, fb.mine));
    assert_eq!((bad(Bad::Unproven), fa.gauges().taken), (1, 0));
    // Echoing it: taken.
    fb.send(4);
    soon("B heard", || fa.gauges().taken == 1);
    fb.hear();
    assert_eq!(fa.peers_wanting(), 0, "B asked for beats");
    // The same datagram again, and an older one: replays.
    let last = fb.send(4);
    soon("taken", || fa.gauges().taken == 2);
    fb.raw(&last);
    let older = fb.datagram(0, fb.seq - 1);
    fb.raw(&older);
    soon("replays", || bad(Bad::Replayed) == 2);
    // B's report sent from C's address: C is a member, but not its sender.
    let pc = UdpSocket::bind(c).unwrap();
    pc.send_to(&fb.datagram(0, fb.seq + 1), a).unwrap();
    soon("moved", || bad(Bad::Replayed) == 3);
    // B's report for C, replayed to A from B's address: for another member.
    let for_c = { let mut f = Fake { to: c.into(), ..Fake::new("127.77.9.9:9700", a) }; (f.addr, f.boot, f.mine, f.theirs) = (b.into(), fb.boot, fb.mine, fb.theirs); f.datagram(0, fb.seq + 1) };
    fb.raw(&for_c);
    soon("for C", || bad(Bad::Replayed) == 4);
    assert_eq!(fa.gauges().taken, 2);
    assert!(fa.redraw(), "A samples B and C");
    soon("B in A's view", || fa.ready_peers() == 1);
    assert_eq!(fa.pick(5, None), forward_to(b), "B as it really reported (4), at B's own address");
    assert_eq!(fa.pick(3, None), Pick::Keep, "not the replayed 0");
}

/// A member that restarts starts its sequence again from 1 (as a clock
/// stepped back would), and is heard one round trip later; what was recorded
/// from its earlier boot is never taken again.
#[tokio::test]
async fn a_restarted_member_is_heard_at_once_and_its_old_reports_never_again() {
    let (a, b) = ("127.77.12.1:9700", "127.77.12.2:9700");
    let count = Count::default();
    count.set(2, true);
    let fa = agent(cfg(a, &[a, b]), &count).await;
    let mut fb = Fake::new(b, a);
    fb.seq = 1 << 40; // the old boot had counted far
    fb.handshake(7);
    for busy in 8..12 {
        fb.send(busy);
    }
    soon("B's reports taken", || fa.gauges().taken == 5);
    let recorded = fb.sent.clone();
    // An unproven report is answered at most once an ANSWER_EVERY: the
    // restart's first one must not fall in the first contact's.
    std::thread::sleep(ANSWER_EVERY);
    fb.restart();
    fb.handshake(1);
    soon("B heard again, from sequence 2", || fa.gauges().taken == 6);
    let before = fa.reports_bad();
    for d in &recorded {
        fb.raw(d);
    }
    soon("every recording dropped", || {
        let now = fa.reports_bad();
        now[Bad::Unproven as usize] + now[Bad::Replayed as usize] - before[Bad::Unproven as usize] - before[Bad::Replayed as usize] == recorded.len() as u64
    });
    assert_eq!(fa.gauges().taken, 6, "none of the old boot's reports taken");
    fb.drain();
    fb.send(3);
    soon("B's new boot still heard", || fa.gauges().taken == 7);
}

/// A key holder forges B's report with the highest sequence there is (an
/// insider can: the key is shared). B's own reports are then dropped as old,
/// but only until B has gone unheard for half of dead_after: A draws its
/// nonce again and B is heard from its next report, well within dead_after.
#[tokio::test]
async fn a_forged_sequence_locks_a_member_out_for_less_than_dead_after() {
    let (a, b) = ("127.77.12.5:9700", "127.77.12.6:9700");
    let count = Count::default();
    count.set(2, true);
    let dead_after = Duration::from_millis(400);
    let fa = agent(FleetConfig { dead_after, ..cfg(a, &[a, b]) }, &count).await;
    assert!(fa.redraw());
    let mut fb = Fake::new(b, a);
    fb.handshake(1);
    soon("B in view", || fa.ready_peers() == 1);
    fb.drain();
    let forged = fb.datagram(0, u64::MAX);
    fb.raw(&forged);
    soon("the forgery taken", || fa.gauges().taken == 2);
    let locked = Instant::now();
    // B reports every 20 ms, as a heartbeat would.
    let mut heard_again = None;
    while locked.elapsed() < Duration::from_secs(3) {
        let taken = fa.gauges().taken;
        fb.drain();
        fb.send(1);
        std::thread::sleep(Duration::from_millis(20));
        if fa.gauges().taken > taken {
            heard_again = Some(locked.elapsed());
            break;
        }
    }
    let back = heard_again.expect("B heard again");
    assert!(back < dead_after, "B out for {back:?}, dead_after {dead_after:?}");
    assert!(fa.ready_peers() == 1, "B never left A's view");
    // The forgery, sent again, echoes a nonce A no longer holds.
    let unproven = fa.reports_bad()[Bad::Unproven as usize];
    fb.raw(&forged);
    soon("dropped", || fa.reports_bad()[Bad::Unproven as usize] == unproven + 1);
}

/// A member that always reports 0 (an insider): each agent takes it to hold
/// at least its own forwards there that are not answered yet, so it stops
/// drawing this agent's offers once those pass the others' counts.
#[tokio::test]
async fn a_member_reporting_zero_is_held_to_the_forwards_it_has_not_answered() {
    let (a, b, c) = ("127.77.13.1:9700", "127.77.13.2:9700", "127.77.13.3:9700");
    let count = Count::default();
    count.set(5, true);
    let fa = agent(cfg(a, &[a, b, c]), &count).await;
    assert!(fa.redraw());
    let (mut fb, mut fc) = (Fake::new(b, a), Fake::new(c, a));
    fb.handshake(0);
    fc.handshake(2);
    soon("B and C in view", || fa.ready_peers() == 2);
    // B says 0 whatever it holds: A's offers go there, until A's own
    // unanswered forwards there pass C's 2 (the settle window is 0 here).
    let Pick::Forward(to_b) = fa.pick(5, None) else { panic!("forwarded") };
    assert_eq!(to_b.member, b.parse::<SocketAddr>().unwrap());
    let held: Vec<Outstanding> = (0..3).map(|_| fa.took(&to_b)).collect();
    let Pick::Forward(t) = fa.pick(5, None) else { panic!("forwarded") };
    assert_eq!(t.member, c.parse::<SocketAddr>().unwrap(), "B holds at least A's 3 unanswered, more than C's 2");
    // Answered: B is back to what it says.
    drop(held);
    let Pick::Forward(t) = fa.pick(5, None) else { panic!("forwarded") };
    assert_eq!(t.member, b.parse::<SocketAddr>().unwrap());
}

/// An offer decides on the reports the kernel already holds, even when the
/// reader thread is late to wake (docs/llm.md § 6: on a loaded 2-core box it
/// took up to 0.9 ms, and an offer waiting at most 0.5 ms for it decided on
/// a count the socket held a newer one of). Here there is no reader at all:
/// the test reads for it during the handshake, then only offers read.
#[tokio::test]
async fn an_offer_decides_on_what_is_queued_even_with_the_reader_late() {
    let (a, b) = ("127.77.14.1:9700", "127.77.14.2:9700");
    let count = Count::default();
    count.set(1, true);
    let fa = Fleet::open(cfg(a, &[a, b])).await.unwrap();
    let c = count.clone();
    assert!(fa.report.set(Box::new(move || *c.0.lock().unwrap())).is_ok());
    assert!(fa.redraw());
    let mut fb = Fake::new(b, a);
    // The handshake, with the test reading where the reader would (not by
    // `gauges`: a scrape takes what is queued itself).
    let read = |f: &Fleet| {
        let until = Instant::now() + Duration::from_secs(5);
        let seen = |f: &Fleet| f.taken.load(Ordering::Relaxed) + f.reports_bad()[Bad::Unproven as usize];
        let taken = seen(f);
        while seen(f) == taken {
            assert!(Instant::now() < until, "a datagram within 5 s");
            f.drain(&mut lock(&f.inbox), super::READ_AT_MOST);
        }
    };
    fb.send(1);
    read(&fa);
    fb.hear();
    fb.send(1);
    read(&fa);
    fb.hear();
    assert_eq!(fa.ready_peers(), 1, "B in view");
    assert_eq!(fa.pick(1, None), Pick::Keep, "B holds 1, as A does: a tie, kept");
    fb.send(0);
    assert_eq!(fa.pick(1, None), forward_to(b), "B's 0 was queued before the offer");
    fb.send(1);
    assert_eq!(fa.pick(1, None), Pick::Keep, "and B's 1 after it");
    assert_eq!(fa.reports_bad()[Bad::Replayed as usize], 0, "taken in order");
}

/// The first offer that decides by the counts asks the sample for every
/// change there and then: a forward changes no count here, so waiting for a
/// change (`changed`) or the next beat left the sample sending beats only,
/// and the next offers deciding on counts a heartbeat old (docs/llm.md § 6).
#[tokio::test]
async fn an_offer_deciding_by_the_counts_asks_for_every_change_at_once() {
    let (a, b) = ("127.77.15.1:9700", "127.77.15.2:9700");
    let count = Count::default();
    count.set(1, true);
    let fa = agent(cfg(a, &[a, b]), &count).await;
    assert!(fa.redraw());
    let mut fb = Fake::new(b, a);
    fb.handshake(0);
    soon("B in view", || fa.ready_peers() == 1);
    fb.drain();
    assert_eq!(fa.pick(1, None), forward_to(b));
    // No timer runs here (no beat, no draw): this report is the offer's.
    assert_eq!(fb.hear().sub, Sub::Changes);
    // Told once: the next offers send nothing more.
    let sent = fa.gauges().sent;
    assert_eq!(fa.pick(1, None), forward_to(b));
    assert_eq!(fa.gauges().sent, sent);
}

/// Quiet, a listener that asked for beats only (it decides by no count)
/// hears us each quiet beat, not each heartbeat: the fixed cost of a
/// fleet at idle or behind one front. One that wants every change gets its
/// beat each heartbeat, as before.
#[tokio::test]
async fn a_listener_of_beats_only_hears_us_each_quiet_beat() {
    let (a, b) = ("127.77.9.16:9700", "127.77.9.17:9700");
    let timed = |l| FleetConfig {
        heartbeat: Duration::from_millis(20),
        dead_after: Duration::from_millis(600),
        quiet_beat: Duration::from_millis(300),
        forwarding: huntlb_policy::forward::Forwarding { peer_margin: 0, seen_margin: Some(1) },
        ..cfg(l, &[a, b])
    };
    let (ca, cb) = (Count::default(), Count::default());
    let (fa, fb) = heard_both_ways((timed(a), &ca, 7), (timed(b), &cb, 3)).await;
    assert!(fa.quiet(), "no offer decided by counts anywhere");
    assert_eq!(fa.quiet_beat(), Duration::from_millis(300));
    // Well past a heartbeat, well before a quiet beat (the last report went
    // at most 30 ms before the settling ended): no beat to B.
    std::thread::sleep(Duration::from_millis(60));
    let sent = fa.gauges().sent;
    let next = fa.beat().expect("A runs").expect("B listens");
    assert_eq!(fa.gauges().sent, sent, "a beats-only listener waits a quiet beat");
    // The sample's task sleeps until then, not a tick: due when B was last
    // told plus a quiet beat, so at most that far ahead, and not yet.
    let now = Instant::now();
    assert!(next > now && next <= now + fa.quiet_beat(), "next beat {:?} from now", next - now);
    soon("a beat at a quiet beat", || {
        std::thread::sleep(Duration::from_millis(10));
        fa.beat().is_some() && fa.gauges().sent == sent + 1
    });
    // B decides by the counts: it wants every change, and A is no longer quiet.
    assert_eq!(fb.pick(5, None), Pick::Keep, "B holds 5, A 7: kept");
    let to_a = [a.parse().unwrap()];
    soon("A knows B wants", || {
        std::thread::sleep(super::ANSWER_EVERY);
        fa.peers_wanting() == 1 || !fb.send(&to_a)
    });
    assert!(!fa.quiet());
    let sent = fa.gauges().sent;
    std::thread::sleep(Duration::from_millis(40));
    assert!(fa.beat().is_some());
    assert_eq!(fa.gauges().sent, sent + 1, "a listener of changes hears us each heartbeat");
}

/// Quiet, a member asked for beats only stays in the view for a quiet beat
/// and half a dead_after after its last report, and no longer: what sets that
/// is this agent's own setting and what it asked (beats only, or every
/// change), never the datagram. Once the member dies, its recorded reports
/// replayed and reports forged without the key neither keep it in the view
/// past that nor bring it back; and once this agent wants every change, a
/// member's report keeps it alive for dead_after only.
#[tokio::test]
async fn a_replayed_or_forged_beat_keeps_no_dead_member_alive_nor_revives_it() {
    let (a, b) = ("127.77.16.9:9700", "127.77.16.10:9700");
    let count = Count::default();
    count.set(1, true);
    let (dead_after, quiet_beat) = (Duration::from_millis(200), Duration::from_millis(300));
    let c = FleetConfig { heartbeat: Duration::from_millis(20), dead_after, quiet_beat, sample: 0, ..cfg(a, &[a, b]) };
    let alive = c.beats_alive();
    assert_eq!(alive, Duration::from_millis(400));
    let fa = agent(c, &count).await;
    assert!(fa.redraw());
    let mut fb = Fake::new(b, a);
    fb.handshake(1);
    for busy in 2..5 {
        fb.send(busy);
    }
    soon("B's reports taken", || fa.gauges().taken == 4);
    let last = Instant::now();
    assert!(fa.quiet() && fa.ready_peers() == 1);
    let recorded = fb.sent.clone();
    // Newer than any B sent and echoing A's nonce, but sealed without the key.
    let text = Report { from: b.into(), to: a.into(), boot: fb.boot, seq: u64::MAX, busy: 0, ready: true, sub: Sub::Beats, mine: fb.mine, yours: fb.theirs }.to_string();
    let forged = seal(&text, &[7; 16]).into_bytes();
    // B is dead; every 20 ms an attacker replays all it recorded of B, and the forgery.
    let mut replay = || {
        for d in &recorded {
            fb.raw(d);
        }
        fb.raw(&forged);
    };
    let mut gone = None;
    while last.elapsed() < alive + Duration::from_millis(600) {
        replay();
        std::thread::sleep(Duration::from_millis(20));
        let (peers, at) = (fa.ready_peers(), last.elapsed());
        if at < dead_after + Duration::from_millis(50) {
            assert_eq!(peers, 1, "B alive past dead_after while A is quiet ({at:?})");
        }
        if peers == 0 && gone.is_none() {
            gone = Some(at);
        }
        if gone.is_some() {
            assert_eq!(peers, 0, "B back in the view at {at:?}, after it left at {gone:?}");
        }
    }
    let gone = gone.expect("B leaves the view");
    assert!(gone <= alive + Duration::from_millis(60), "B in the view {gone:?} after its last report; its window {alive:?}");
    assert_eq!(fa.gauges().taken, 4, "no replay nor forgery taken");
    assert!(fa.reports_bad()[Bad::Unauthenticated as usize] > 0 && fa.reports_bad()[Bad::Replayed as usize] > 0);
    // A decides by the counts now: a report of B's keeps it alive for dead_after only.
    assert_eq!(fa.pick(1, None), Pick::NoPeers);
    assert!(!fa.quiet());
    fb.drain();
    fb.send(1);
    soon("B heard again", || fa.ready_peers() == 1);
    let heard = Instant::now();
    soon("B out after dead_after", || fa.ready_peers() == 0);
    let out = heard.elapsed();
    assert!(out <= dead_after + Duration::from_millis(60), "B in view {out:?} after its report while A wants every change");
}

/// A quiet agent's sample task sleeps until its next quiet beat; a listener
/// that starts wanting every change takes the agent for dead after
/// dead_after, so the task wakes: after its answer, the next beat comes
/// within a few heartbeats, not at the quiet beat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_starts_wanting_changes_hears_each_heartbeat_at_once() {
    let (a, b) = ("127.77.16.12:9700", "127.77.16.13:9700");
    let c = FleetConfig {
        heartbeat: Duration::from_millis(20),
        dead_after: Duration::from_millis(200),
        quiet_beat: Duration::from_secs(5),
        resample: Duration::from_millis(100),
        sample: 0,
        ..cfg(a, &[a, b])
    };
    let fa = Fleet::open(c).await.unwrap();
    let weak = Arc::downgrade(&fa);
    std::thread::spawn(move || {
        while let Some(f) = weak.upgrade() {
            f.drain(&mut lock(&f.inbox), super::READ_AT_MOST);
            drop(f);
            std::thread::sleep(READ_EVERY);
        }
    });
    let count = Count::default();
    count.set(1, true);
    let c2 = count.clone();
    let run = tokio::spawn(fa.clone().run(Box::new(move || *c2.0.lock().unwrap())));
    // Until its task has started, A has no count to answer with (and B's
    // handshake, answered by nothing, would wait on A's renewals for ever).
    soon("A's task started", || fa.report.get().is_some());
    let mut fb = Fake::new(b, a);
    fb.handshake(1);
    // Quiet: B asked for beats only, and A's task sleeps for its quiet beat.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(fa.quiet());
    fb.drain();
    fb.changes();
    // A's answer (B is a new listener of changes), then its beats each heartbeat.
    let first = fb.hear();
    let answered = Instant::now();
    assert_eq!(first.from, a);
    let mut buf = [0u8; 512];
    fb.sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let next = fb.sock.recv_from(&mut buf).map(|_| answered.elapsed());
    count.gone();
    run.abort();
    let next = next.expect("a beat within 2 s");
    assert!(next < Duration::from_millis(150), "the next beat {next:?} after the answer: heartbeat 20 ms, quiet beat 5 s");
}

/// `fleet_listen = "[::]:port"` hears IPv4 members too (IPV6_V6ONLY off):
/// their datagrams arrive from ::ffff:a.b.c.d, taken as the member a.b.c.d.
#[tokio::test]
async fn a_dual_stack_fleet_listen_hears_an_ipv4_member() {
    let (a, b) = ("127.77.9.21:9721", "127.77.9.22:9722");
    let count = Count::default();
    count.set(7, true);
    // bound to every address, named by its IPv4 one, as fleet_advertise makes it
    let fa = agent(FleetConfig { listen: "[::]:9721".parse().unwrap(), from: a.parse().unwrap(), ..cfg(a, &[a, b]) }, &count).await;
    let mut fb = Fake::new(b, a);
    fb.handshake(2);
    soon("B's report taken", || fa.gauges().taken >= 1);
    assert!(fa.redraw());
    soon("B in A's view", || fa.ready_peers() == 1);
    assert_eq!(fa.pick(7, None), forward_to(b), "B as it reported (2), at its IPv4 address");
    assert_eq!(fa.reports_bad()[Bad::Stranger as usize], 0);
}

/// `huntlb_fleet_peers_unheard` counts a member asked for its count (drawn,
/// or renewed after dead_after of silence) that does not answer within
/// dead_after; a kept member's renewal asks nothing (it answers at its next
/// beat), so a late beat is no member that does not answer.
#[tokio::test]
async fn a_late_beat_is_not_counted_unheard_and_a_silent_member_is() {
    let (a, b, c) = ("127.77.16.1:9700", "127.77.16.2:9700", "127.77.16.3:9700");
    let count = Count::default();
    count.set(1, true);
    let dead_after = Duration::from_millis(200);
    // Quiet (A decides by no count): B, asked for beats only, is alive for a
    // quiet beat and half a dead_after: dead_after itself with this quiet beat.
    let fa = agent(FleetConfig { dead_after, quiet_beat: dead_after / 2, sample: 0, ..cfg(a, &[a, b, c]) }, &count).await;
    assert!(fa.redraw());
    let mut fb = Fake::new(b, a);
    fb.handshake(1);
    soon("B heard", || fa.ready_peers() == 1);
    // B falls silent; A renews its sample every 50 ms for 1.5 dead_after.
    let silent = Instant::now();
    while silent.elapsed() < dead_after * 3 / 2 {
        assert!(fa.redraw());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(fa.unheard_peers(), 1, "C, drawn and never answering, is counted; B's renewals asked nothing");
    // Silent over dead_after, B is asked again; silent a dead_after more, it is counted.
    assert!(fa.renew_unheard().is_some());
    std::thread::sleep(dead_after + Duration::from_millis(50));
    assert_eq!(fa.unheard_peers(), 2, "B asked and silent for dead_after");
    fb.drain();
    fb.send(1);
    soon("B heard again", || fa.unheard_peers() == 1);
}

/// An agent (its count 5) whose eight members (each 10) are in view and
/// want its every change, for the benches; `net`: the third byte of their
/// addresses (127.77.net.x).
async fn eight_wanting(net: u8) -> (Arc<Fleet>, Vec<Fake>, Count) {
    let a = format!("127.77.{net}.1:9700");
    let others: Vec<String> = (2..=9).map(|i| format!("127.77.{net}.{i}:9700")).collect();
    let all: Vec<&str> = std::iter::once(a.as_str()).chain(others.iter().map(String::as_str)).collect();
    let count = Count::default();
    count.set(5, true);
    let fa = agent(cfg(&a, &all), &count).await;
    assert!(fa.redraw());
    let mut fakes: Vec<Fake> = others.iter().map(|o| Fake::new(o, &a)).collect();
    for f in fakes.iter_mut() {
        f.handshake(10);
        f.drain();
        f.changes();
    }
    soon("eight in view, eight wanting", || fa.ready_peers() == 8 && fa.peers_wanting() == 8);
    (fa, fakes, count)
}

impl Fake {
    /// A report asking for every change (a member whose offers decide by the
    /// counts), sent but not recorded.
    fn changes(&mut self) {
        self.seq += 1;
        let text = Report { from: self.addr.clone(), to: self.to.clone(), boot: self.boot, seq: self.seq, busy: 10, ready: true, sub: Sub::Changes, mine: self.mine, yours: self.theirs }.to_string();
        self.sock.send_to(seal(&text, &self.keys.tag(text.as_bytes())).as_bytes(), self.to.as_str()).unwrap();
    }
}

/// The offer path's cost, in process: `pick` with eight members in view
/// (kept here: each holds more), `changed` to eight listeners that want every
/// change (eight sealed datagrams, one `sendmmsg`), and a scrape's `gauges`.
/// Prints the median ns/op of 7 rounds; run it alone, optimized:
/// `cargo test -p huntlb-agent --release --lib bench_ -- --ignored --nocapture --test-threads=1`
/// (or, building only this crate and the policy's optimized,
/// `--config 'profile.dev.package.huntlb-agent.opt-level=3' --config 'profile.dev.package.huntlb-policy.opt-level=3'`).
#[tokio::test]
#[ignore]
async fn bench_offer_path() {
    let (fa, mut fakes, _count) = eight_wanting(30).await;
    assert_eq!(fa.pick(5, None), Pick::Keep);
    let median = |what: &str, n: u32, f: &mut dyn FnMut()| {
        let mut runs: Vec<f64> = (0..7)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..n {
                    f();
                }
                t.elapsed().as_nanos() as f64 / f64::from(n)
            })
            .collect();
        runs.sort_by(|x, y| x.partial_cmp(y).unwrap());
        println!("BENCH {what}: median {:.0} ns/op (min {:.0}, max {:.0}, 7 rounds of {n})", runs[3], runs[0], runs[6]);
    };
    median("pick (8 in view)", 200_000, &mut || assert_eq!(std::hint::black_box(fa.pick(5, None)), Pick::Keep));
    median("changed (8 listeners)", 20_000, &mut || fa.changed());
    median("gauges", 200_000, &mut || {
        std::hint::black_box(fa.gauges());
    });
    for f in &mut fakes {
        f.drain();
    }
}

/// The reader's cost a report: eight members send 64 reports each (sealed,
/// newer, for us), held queued, then taken in one drain (`recvmmsg`, the
/// MAC, the tables). Prints the median ns a report of 15 rounds; run it
/// alone, optimized, as `bench_offer_path`.
#[tokio::test]
#[ignore]
async fn bench_take_path() {
    let (fa, mut fakes, _count) = eight_wanting(31).await;
    let mut runs = Vec::new();
    for _ in 0..15 {
        let taken = fa.gauges().taken;
        let took = drain_held(&fa, || {
            for _ in 0..64 {
                for f in fakes.iter_mut() {
                    f.changes();
                }
            }
        });
        let n = fa.gauges().taken - taken;
        assert_eq!(n, 512, "every report taken");
        runs.push(took.as_nanos() as f64 / n as f64);
    }
    runs.sort_by(|x, y| x.partial_cmp(y).unwrap());
    println!("BENCH take (a report): median {:.0} ns/op (min {:.0}, max {:.0}, 15 rounds of 512)", runs[7], runs[0], runs[14]);
}

/// `send` with the socket's reader held off, then one drain, timed.
fn drain_held(f: &Fleet, send: impl FnOnce()) -> Duration {
    let mut inbox = lock(&f.inbox);
    send();
    std::thread::sleep(Duration::from_millis(5));
    let t = Instant::now();
    assert!(f.drain(&mut inbox, usize::MAX));
    t.elapsed()
}

/// The reader is a task on the agent's runtime, not a thread: with no offer
/// deciding, what members send is taken within `READ_QUIET_MAX` while the
/// runtime awaits; and a flood of junk from a stranger is taken a batch at
/// a time without keeping that runtime's other tasks from running.
#[tokio::test]
async fn the_reader_task_takes_reports_on_the_runtime_and_a_flood_shares_it() {
    let (a, b) = ("127.77.15.1:9700", "127.77.15.2:9700");
    let count = Count::default();
    count.set(2, true);
    let fa = Fleet::bind(cfg(a, &[a, b])).await.unwrap();
    let c = count.clone();
    assert!(fa.report.set(Box::new(move || *c.0.lock().unwrap())).is_ok());
    assert!(fa.redraw());
    let mut fb = Fake::new(b, a);
    fb.sock.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
    // The handshake, every read by the reader task: the test only awaits.
    let until = Instant::now() + Duration::from_secs(5);
    while fa.ready_peers() == 0 {
        assert!(Instant::now() < until, "B not heard through the reader task within 5 s");
        fb.send(1);
        tokio::time::sleep(READ_QUIET_MAX).await;
        let mut buf = [0u8; 512];
        while let Ok((n, _)) = fb.sock.recv_from(&mut buf) {
            if let Ok(r) = open(&buf[..n], |t, tag| fb.keys.verify(t, tag)) {
                if r.yours == fb.mine {
                    fb.theirs = r.mine;
                }
            }
        }
    }
    assert_eq!(fa.ready_peers(), 1);
    // A flood from a stranger: 4 passes' worth, sent at once.
    let stranger = std::net::UdpSocket::bind("127.77.15.3:9700").unwrap();
    for _ in 0..4 * READ_AT_MOST {
        let _ = stranger.send_to(b"junk", a);
    }
    // Another task on the same runtime keeps running while the reader reads.
    let ticks = Arc::new(AtomicU64::new(0));
    let t = ticks.clone();
    let ticker = tokio::spawn(async move {
        loop {
            t.fetch_add(1, Ordering::Relaxed);
            tokio::task::yield_now().await;
        }
    });
    let until = Instant::now() + Duration::from_secs(5);
    while fa.reports_bad()[Bad::Stranger as usize] < 1000 {
        assert!(Instant::now() < until, "the flood not read within 5 s: {:?}", fa.reports_bad());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    ticker.abort();
    assert!(ticks.load(Ordering::Relaxed) > 10, "the other task ran while the flood was read");
}

/// What a member's socket holds from the agent, newest last: each report's `sub`.
fn subs_heard(f: &Fake) -> Vec<Sub> {
    let mut buf = [0u8; 512];
    let mut out = Vec::new();
    f.sock.set_nonblocking(true).unwrap();
    while let Ok((n, _)) = f.sock.recv_from(&mut buf) {
        if let Ok(r) = open(&buf[..n], |t, tag| f.keys.verify(t, tag)) {
            out.push(r.sub);
        }
    }
    f.sock.set_nonblocking(false).unwrap();
    out
}

/// A draw never empties a slot of the view that was heard. A member drawn in
/// that this agent has not heard within dead_after is out of the view until
/// its answer is read, a round trip (on a busy host, a reader's tick on each
/// side: up to 20 ms); the heard member it replaces stays in the view, and
/// subscribed, until then (make before break), and is told to leave once it
/// is heard. Without this, at each such draw the view read one short for that
/// round trip (`huntlb_fleet_peers` under its sample in a fleet where every
/// member answers), and the offers decided meanwhile compared one count fewer.
#[tokio::test]
async fn a_draw_keeps_the_member_it_drops_in_view_until_its_replacement_is_heard() {
    let (a, b, c, d) = ("127.77.17.1:9700", "127.77.17.2:9700", "127.77.17.3:9700", "127.77.17.4:9700");
    let count = Count::default();
    count.set(9, true);
    let fa = agent(FleetConfig { sample: 2, keep: 1, ..cfg(a, &[a, b, c, d]) }, &count).await;
    let (mut fb, mut fc, mut fd) = (Fake::new(b, a), Fake::new(c, a), Fake::new(d, a));
    // B holds the least (always kept), C is heard, D has never been.
    fb.handshake(1);
    fc.handshake(5);
    soon("B and C taken", || fa.gauges().taken == 2);
    let [b, c, d]: [SocketAddr; 3] = [b, c, d].map(|m| m.parse().unwrap());
    let sample = |f: &Fleet| {
        let mut s = lock(&f.state).sample.clone();
        s.sort();
        s
    };
    deciding(&fa);
    let draw_until = |want: [SocketAddr; 2]| {
        for _ in 0..200 {
            assert!(fa.redraw());
            if sample(&fa) == want {
                return;
            }
        }
        panic!("sample never {want:?} in 200 draws: {:?}", sample(&fa));
    };
    draw_until([b, c]);
    assert_eq!(fa.ready_peers(), 2, "B and C heard: the view full");
    subs_heard(&fc);
    // The draw that drops C (heard) for D (never heard): D answers a round trip later.
    draw_until([b, d]);
    assert_eq!(fa.gauges().peers, 2, "C stays in the view until D is heard");
    assert_eq!(fa.pick(9, None), forward_to(&b.to_string()), "the least of the view");
    assert!(subs_heard(&fc).last().is_some_and(|s| *s != Sub::Leave), "C's subscription renewed, not ended, by the draw");
    // Only a report taken from D releases C: one sealed under another key
    // from D's address, or D's first (echoing no nonce of ours), does not.
    let bad = fa.reports_bad();
    let forged = Report { from: fd.addr.clone(), to: a.into(), boot: fd.boot, seq: 1, busy: 0, ready: true, sub: Sub::Beats, mine: fd.mine, yours: 0 }.to_string();
    fd.sock.send_to(seal(&forged, &[7u8; huntlb_policy::forward::TAG_LEN]).as_bytes(), a).unwrap();
    fd.send(3);
    soon("both dropped", || {
        let now = fa.reports_bad();
        now[Bad::Unauthenticated as usize] == bad[Bad::Unauthenticated as usize] + 1 && now[Bad::Unproven as usize] > bad[Bad::Unproven as usize]
    });
    assert_eq!((fa.gauges().peers, lock(&fa.state).standby.clone()), (2, vec![(c, d)]), "C still stands in for D");
    // D learns our nonce from our answer to its first report, and reports:
    // taken, in the view, and C is released (told to leave).
    fd.hear();
    fd.send(3);
    soon("D heard", || fa.gauges().taken == 3);
    assert_eq!(fa.gauges().peers, 2, "B and D: C out of the view");
    soon("C told to leave", || subs_heard(&fc).last() == Some(&Sub::Leave));
    assert!(lock(&fa.state).standby.is_empty());
    // The draw that drops D for C, heard within dead_after but no longer
    // subscribed (its count goes stale unless it answers): D stands in for C,
    // not counted while C is in view (the view never holds more than the sample).
    draw_until([b, c]);
    assert_eq!((fa.gauges().peers, lock(&fa.state).standby.clone()), (2, vec![(d, c)]));
    subs_heard(&fd);
    fc.send(5);
    soon("C heard: D released", || lock(&fa.state).standby.is_empty());
    soon("D told to leave", || subs_heard(&fd).last() == Some(&Sub::Leave));
    assert_eq!(fa.gauges().peers, 2);
}

/// A key file replaced whole, as the kubelet swaps a Secret's version in.
fn write_keys(path: &std::path::Path, keys: &[&str]) {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, keys.join("\n") + "\n").unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The key rotated in docs/kubernetes.md's steps (old + new, new + old, new),
/// the agent's file changed before its member's: each reload swaps the keys
/// and nothing else (no nonce, no sequence, no view is reset), so the member
/// stays in the view and each of its reports is taken, none refused.
#[tokio::test]
async fn a_key_rotation_keeps_the_view_and_takes_every_report() {
    let (a, b) = ("127.77.18.1:9700", "127.77.18.2:9700");
    let dir = std::env::temp_dir().join(format!("huntlb-fleet-rotate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (file, old, new) = (dir.join("fleet.key"), "o".repeat(64), "n".repeat(64));
    write_keys(&file, &[&old]);
    let path = file.to_string_lossy().into_owned();
    let load = |p: &std::path::Path| Keys::load(&p.to_string_lossy(), crate::seal::Readers::Owner).unwrap();
    let count = Count::default();
    count.set(1, true);
    let fa = agent(FleetConfig { key_file: path.clone(), keys: load(&file), ..cfg(a, &[a, b]) }, &count).await;
    assert!(fa.redraw());
    let mut fb = Fake::new(b, a);
    let member = dir.join("member.key");
    write_keys(&member, &[&old]);
    fb.keys = load(&member);
    fb.handshake(2);
    soon("B in view", || fa.ready_peers() == 1);
    for (step, keys) in [[old.as_str(), new.as_str()].as_slice(), &[&new, &old], &[&new]].into_iter().enumerate() {
        let taken = fa.gauges().taken;
        write_keys(&file, keys);
        fa.reload_keys();
        assert_eq!(lock(&fa.state).keys.len(), keys.len(), "step {}: read", step + 2);
        assert_eq!(fa.ready_peers(), 1, "step {}: B still in view", step + 2);
        // then the member's file, as its kubelet writes it later
        write_keys(&member, keys);
        fb.keys = load(&member);
        fb.drain();
        fb.send(2);
        soon("B's report taken", || fa.gauges().taken == taken + 1);
        assert!(fa.send(&[b.parse().unwrap()]));
        fb.hear();
    }
    assert_eq!(fa.reports_bad()[Bad::Unauthenticated as usize], 0);
    assert_eq!(fa.ready_peers(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}
