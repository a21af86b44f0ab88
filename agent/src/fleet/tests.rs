use super::*;
use crate::config::Peer as PeerEntry;

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
        forwarding: huntlb_policy::forward::Forwarding { slack: 0, seen_slack: None },
        heartbeat: Duration::from_secs(60),
        dead_after: Duration::from_secs(120),
        settle: Duration::ZERO,
        resolve: Duration::from_secs(1),
    }
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

/// Counts go out from `announce` alone (no heartbeat runs here); an offer
/// decides on what the reader thread has taken.
#[tokio::test]
async fn an_offer_goes_to_the_least_member_at_its_own_address() {
    let (a, b) = ("127.77.9.1:9700", "127.77.9.2:9700");
    let fa = Fleet::bind(cfg(a, &[a, b])).await.unwrap();
    let fb = Fleet::bind(cfg(b, &[a, b])).await.unwrap();
    assert_eq!(fb.pick(5, None), Pick::NoPeers, "nothing heard yet");
    assert!(fa.announce(To::All, || Some((3, true))));
    soon("A heard at B", || fb.ready_peers() == 1);
    assert_eq!(fb.pick(5, None), forward_to(a), "A holds 3, B 5: to A's agent, at A's address");
    assert!(fa.announce(To::All, || Some((9, true))));
    soon("A's 9", || fb.pick(5, None) == Pick::Keep);
    // A report whose agent is gone is not sent.
    assert!(!fa.announce(To::All, || None));
    assert!(fa.announce(To::All, || Some((9, false))));
    soon("A not ready", || fb.ready_peers() == 0);
    assert_eq!(fb.pick(5, None), Pick::NoPeers, "A takes no forwards");
    // And the other way.
    assert!(fb.announce(To::All, || Some((1, true))));
    soon("B heard at A", || fa.ready_peers() == 1);
    assert_eq!(fa.reports_bad(), [0; 4]);
}

/// A change goes only to the members that want it: one whose offers are
/// all kept by `seen` does not, until an offer there decides by the counts.
#[tokio::test]
async fn changes_go_to_the_peers_that_want_them() {
    let (a, b) = ("127.77.9.6:9700", "127.77.9.7:9700");
    let seen = |l| FleetConfig { forwarding: huntlb_policy::forward::Forwarding { slack: 0, seen_slack: Some(1) }, ..cfg(l, &[a, b]) };
    let fa = Fleet::bind(seen(a)).await.unwrap();
    let fb = Fleet::bind(seen(b)).await.unwrap();
    assert!(fa.announce(To::All, || Some((7, true))));
    assert!(fb.announce(To::All, || Some((3, true))));
    soon("both heard", || fa.ready_peers() == 1 && fb.ready_peers() == 1);
    assert_eq!(fb.pick(3, Some(3)), Pick::Keep, "the front knew B's load");
    // B wants nothing: A's change does not go to it, and B still sees 7.
    assert!(fa.announce(To::Wanting, || Some((1, true))));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(fb.pick(5, None), Pick::Keep, "B holds 5, A as last heard 7");
    // That offer decided by the counts: B's next report says it wants them,
    // and goes to every member, though it is a change.
    assert!(fb.announce(To::Wanting, || Some((5, true))));
    soon("A knows B wants", || fa.peers_wanting() == 1);
    assert!(fa.announce(To::Wanting, || Some((1, true))));
    soon("A's change at B", || fb.pick(5, None) == forward_to(a));
}

/// Attackers on the fleet port: a stranger, a member's address without the
/// key, a replay, a report naming another sender. None reaches the table.
#[tokio::test]
async fn only_sealed_new_reports_from_members_are_taken() {
    use std::net::UdpSocket;
    let (a, b, c) = ("127.77.9.3:9700", "127.77.9.4:9700", "127.77.9.5:9700");
    let fa = Fleet::bind(cfg(a, &[a, b, c])).await.unwrap();
    let keys = Keys::load(&key_file()).unwrap();
    let sealed = |from: &str, seq: u64, busy: u32| {
        let text = Report { from: from.into(), seq, busy, ready: true, wants: true }.to_string();
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
    let text = Report { from: b.into(), seq: 5, busy: 0, ready: true, wants: true }.to_string();
    pb.send_to(seal(&text, &[0; 16]).as_bytes(), a).unwrap();
    soon("a forged tag", || fa.reports_bad()[Bad::Unauthenticated as usize] == 1);
    assert_eq!(fa.ready_peers(), 0);
    // B's real report, then the same again (a replay), then an older one.
    pb.send_to(sealed(b, 10, 4).as_bytes(), a).unwrap();
    soon("B heard", || fa.ready_peers() == 1);
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
