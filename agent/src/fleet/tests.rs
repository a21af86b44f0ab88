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
        keys: Keys::load(&key_file).unwrap(),
        tls: None,
        key_file,
        forwarding: huntlb_policy::forward::Forwarding { peer_margin: 0, seen_margin: None },
        heartbeat: Duration::from_secs(60),
        dead_after: Duration::from_secs(120),
        settle: Duration::ZERO,
        resolve: Duration::from_secs(1),
        sample: 8,
        resample: Duration::from_secs(60),
        keep: 4,
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
/// call `redraw`, `changed` and `beat`).
async fn agent(cfg: FleetConfig, count: &Count) -> Arc<Fleet> {
    let f = Fleet::bind(cfg).await.unwrap();
    let c = count.clone();
    assert!(f.report.set(Box::new(move || *c.0.lock().unwrap())).is_ok());
    f
}

/// The reader thread takes datagrams as they come: wait (bounded) for it.
fn soon(what: &str, mut ok: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(5);
    while !ok() {
        assert!(Instant::now() < until, "not within 5 s: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn forward_to(member: &str) -> Pick {
    let member: SocketAddr = member.parse().unwrap();
    Pick::Forward(Target { member, authority: SocketAddr::new(member.ip(), 8080).to_string() })
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
    assert_eq!(fa.reports_bad(), [0; 4]);
    assert_eq!(fb.reports_bad(), [0; 4]);
}

/// A change goes only to the members that want it: one whose offers are
/// all kept by `seen` subscribes to beats, until an offer there decides by the counts.
#[tokio::test]
async fn changes_go_to_the_peers_that_want_them() {
    let (a, b) = ("127.77.9.6:9700", "127.77.9.7:9700");
    let seen = |l| FleetConfig { forwarding: huntlb_policy::forward::Forwarding { peer_margin: 0, seen_margin: Some(1) }, ..cfg(l, &[a, b]) };
    let (ca, cb) = (Count::default(), Count::default());
    ca.set(7, true);
    cb.set(3, true);
    let fa = agent(seen(a), &ca).await;
    let fb = agent(seen(b), &cb).await;
    assert!(fa.redraw() && fb.redraw());
    soon("both heard", || fa.ready_peers() == 1 && fb.ready_peers() == 1);
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
    soon("A knows B wants", || fa.peers_wanting() == 1);
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
    let keys = Keys::load(&key_file()).unwrap();
    let socks: Vec<UdpSocket> = others.iter().map(|o| UdpSocket::bind(o.as_str()).unwrap()).collect();
    for s in &socks {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    }
    let mut seq = 100;
    // Member i reports busy 10 + i (member 5 holds the least, 3).
    let mut report = |i: usize, busy: u32| {
        seq += 1;
        let text = Report { from: others[i].clone(), seq, busy, ready: true, sub: Sub::Beats }.to_string();
        socks[i].send_to(seal(&text, &keys.tag(text.as_bytes())).as_bytes(), a).unwrap();
    };
    for i in 0..others.len() {
        report(i, if i == 5 { 3 } else { 10 + i as u32 });
    }
    soon("every member's report taken", || fa.gauges().taken == others.len() as u64);
    let sample = |f: &Fleet| f.sample.lock().unwrap().clone();
    let mut seen_in_sample = std::collections::HashSet::new();
    let mut with_5 = 0;
    for _ in 0..200 {
        let before = sample(&fa);
        let sent = fa.gauges().sent;
        assert!(fa.redraw());
        let after = sample(&fa);
        assert_eq!(after.len(), 3, "{after:?}");
        assert!(!after.contains(&a.parse().unwrap()), "never itself");
        assert!(after.iter().all(|m| after.iter().filter(|x| *x == m).count() == 1), "distinct: {after:?}");
        // Sent: the new sample (renewed) and the dropped (ended), at most 2K.
        let dropped = before.iter().filter(|m| !after.contains(m)).count();
        assert_eq!(fa.gauges().sent - sent, (3 + dropped) as u64);
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
    // What a member hears: a renewal while it is sampled, a leave once dropped.
    let last = sample(&fa);
    let out: Vec<usize> = (0..others.len()).filter(|i| !last.contains(&others[*i].parse().unwrap())).collect();
    let mut buf = [0u8; 256];
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

/// Attackers on the fleet port: a stranger, a member's address without the
/// key, a replay, a report naming another sender. None reaches the table.
#[tokio::test]
async fn only_sealed_new_reports_from_members_are_taken() {
    use std::net::UdpSocket;
    let (a, b, c) = ("127.77.9.3:9700", "127.77.9.4:9700", "127.77.9.5:9700");
    let count = Count::default();
    count.set(2, true);
    let fa = agent(cfg(a, &[a, b, c]), &count).await;
    assert!(fa.redraw(), "A samples B and C");
    let sent = fa.gauges().sent;
    let keys = Keys::load(&key_file()).unwrap();
    let sealed = |from: &str, seq: u64, busy: u32| {
        let text = Report { from: from.into(), seq, busy, ready: true, sub: Sub::Changes }.to_string();
        seal(&text, &keys.tag(text.as_bytes()))
    };
    let stranger = UdpSocket::bind("127.77.9.8:0").unwrap();
    stranger.send_to(sealed("127.77.9.8:9700", 1, 0).as_bytes(), a).unwrap();
    soon("a stranger", || fa.reports_bad()[Bad::Stranger as usize] == 1);
    let pb = UdpSocket::bind(b).unwrap();
    let pc = UdpSocket::bind(c).unwrap();
    pb.send_to(b"not a report", a).unwrap();
    soon("junk", || fa.reports_bad()[Bad::Malformed as usize] == 1);
    // Unsealed, or sealed under another key.
    let text = Report { from: b.into(), seq: 5, busy: 0, ready: true, sub: Sub::Changes }.to_string();
    pb.send_to(seal(&text, &[0; 16]).as_bytes(), a).unwrap();
    soon("a forged tag", || fa.reports_bad()[Bad::Unauthenticated as usize] == 1);
    assert_eq!(fa.ready_peers(), 0);
    // None of them subscribed: nothing was sent to anyone, nobody wants changes.
    assert_eq!((fa.gauges().sent, fa.peers_wanting()), (sent, 0));
    // B's real report, then the same again (a replay), then an older one.
    pb.send_to(sealed(b, 10, 4).as_bytes(), a).unwrap();
    soon("B heard", || fa.ready_peers() == 1);
    // B's subscription is real: A's count goes to B, at B's own address.
    soon("A answers B", || fa.gauges().sent == sent + 1);
    assert_eq!(fa.peers_wanting(), 1);
    pb.send_to(sealed(b, 10, 0).as_bytes(), a).unwrap();
    pb.send_to(sealed(b, 9, 0).as_bytes(), a).unwrap();
    soon("replays", || fa.reports_bad()[Bad::Replayed as usize] == 2);
    // B's report sent from C's address: C is a member, but not its sender.
    pc.send_to(sealed(b, 11, 0).as_bytes(), a).unwrap();
    soon("moved", || fa.reports_bad()[Bad::Replayed as usize] == 3);
    assert_eq!(fa.ready_peers(), 1);
    assert_eq!(fa.pick(5, None), forward_to(b), "B as it really reported (4), at B's own address");
    assert_eq!(fa.pick(3, None), Pick::Keep, "not the replayed 0");
}
