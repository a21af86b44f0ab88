//! The request path's rules, in process: a try's headers in, the `Try`
//! read, the verdict and the counters out. No socket is opened: the agent
//! is built from a config, its load held by guards as requests hold it.

use super::*;
use crate::config::Raw;
use huntlb_policy::Reason;

fn agent(f: impl FnOnce(&mut Raw)) -> Arc<Agent> {
    let mut r = Raw::default();
    f(&mut r);
    Agent::new(Raw::load(r).expect("a valid config"), None)
}

/// A busy agent: `static:1` (busy at one in flight), one held.
fn busy_agent(f: impl FnOnce(&mut Raw)) -> (Arc<Agent>, crate::load::InflightGuard) {
    let a = agent(|r| {
        r.policy = Some("static:1".into());
        f(r)
    });
    let held = a.inflight.enter();
    (a, held)
}

fn head(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_static(v));
    }
    h
}

const REMOTE: &str = "127.0.0.9:40000";
const OFFER: [(&str, &str); 2] = [("hunt-offer", "1"), ("hunt-target", "1")];
const FINAL: [(&str, &str); 2] = [("hunt-offer", "1"), ("hunt-target", "2")];

fn read(a: &Agent, pairs: &[(&'static str, &'static str)]) -> Try {
    a.read_try(&mut head(pairs), REMOTE.parse().unwrap()).expect("not refused")
}

/// The verdict on a try that stays, and the counters it moved: (finals, plain, malformed, finals_busy).
fn decide(a: &Agent, t: &Try, pick: Pick) -> (Verdict, [u64; 4]) {
    let (verdict, load) = a.decide(t, &pick);
    a.count(t, &pick, verdict, load, &HeaderMap::new());
    let m = &a.metrics;
    (verdict, [&m.finals, &m.plain, &m.malformed, &m.finals_busy].map(|n| n.load(Ordering::Relaxed)))
}

/// A front that names itself but sends no `hunt-seen` is taken to count
/// here what this agent holds from it (nothing yet: 0); one that sends it,
/// what it says.
#[tokio::test]
async fn a_try_is_read_with_what_its_front_counts_here() {
    let a = agent(|_| {});
    let t = read(&a, &[OFFER[0], OFFER[1], ("hunt-front", "f1")]);
    assert_eq!((t.mark, t.front.as_deref(), t.seen, t.pass, t.commit), (Mark::Offer, Some(&b"f1"[..]), Some(0), false, false));
    let _held: Vec<_> = (0..2).map(|_| a.per_front.enter(b"f1")).collect();
    assert_eq!(read(&a, &[OFFER[0], OFFER[1], ("hunt-front", "f1")]).seen, Some(2), "what f1 holds here");
    assert_eq!(read(&a, &[OFFER[0], OFFER[1], ("hunt-front", "f1"), ("hunt-seen", "7")]).seen, Some(7), "what f1 says");
    let t = read(&a, &[("hunt-pass", "10.0.0.7:80")]);
    assert_eq!((t.mark, t.pass, t.front.as_deref()), (Mark::Plain, true, Some(&b"10.0.0.7:80"[..])));
}

/// Busy, an offer is refused (its front tries elsewhere) and counted by its
/// fate alone; a final, a plain try and a malformed one are served, each in
/// its own counter, and a final served while busy is the scaling signal.
#[tokio::test]
async fn busy_an_offer_is_refused_and_every_other_try_served() {
    let (a, _held) = busy_agent(|_| {});
    let (v, n) = decide(&a, &read(&a, &OFFER), Pick::NoPeers);
    assert!(matches!(v, Verdict::Refuse(_)), "{v:?}");
    assert_eq!(n, [0, 0, 0, 0]);
    let (v, n) = decide(&a, &read(&a, &FINAL), Pick::NoPeers);
    assert_eq!((v, n), (Verdict::Accept, [1, 0, 0, 1]), "a final served while busy");
    let (v, n) = decide(&a, &read(&a, &[]), Pick::NoPeers);
    assert_eq!((v, n), (Verdict::Accept, [1, 1, 0, 1]), "a plain try: no scaling signal");
    let (v, n) = decide(&a, &read(&a, &[("hunt-offer", "1"), ("hunt-offer", "2")]), Pick::NoPeers);
    assert_eq!((v, n), (Verdict::Accept, [1, 1, 1, 1]), "malformed: served as a final, counted apart");
    // Idle, the offer is accepted.
    drop(_held);
    let (v, _) = decide(&a, &read(&a, &OFFER), Pick::NoPeers);
    assert_eq!(v, Verdict::Accept);
}

/// A try its front lets pass (`hunt-pass`) is never refused; kept by the
/// tier (no peer less loaded) while busy it is the scaling signal, as a
/// final is; with no peer heard it is plain to the policy, and is not.
#[tokio::test]
async fn a_passed_try_kept_by_the_tier_counts_in_the_scaling_signal() {
    let (a, _held) = busy_agent(|_| {});
    let pass = read(&a, &[("hunt-pass", "10.0.0.7:80")]);
    assert_eq!(decide(&a, &pass, Pick::NoPeers), (Verdict::Accept, [0, 1, 0, 0]));
    assert_eq!(decide(&a, &pass, Pick::Keep), (Verdict::Accept, [0, 2, 0, 1]));
    // An offer the tier kept is accepted whatever the policy would say.
    assert_eq!(decide(&a, &read(&a, &OFFER), Pick::Keep).0, Verdict::Accept);
}

/// At `max_inflight` nothing more is taken: an offer is refused (its front
/// tries elsewhere), a final finds no room (503, or `hunt: busy` to a peer).
#[tokio::test]
async fn at_max_inflight_an_offer_is_refused_and_a_final_finds_no_room() {
    let (a, _held) = busy_agent(|r| r.max_inflight = Some(1));
    assert_eq!(decide(&a, &read(&a, &OFFER), Pick::NoPeers).0, Verdict::Refuse(Reason::Overload));
    assert_eq!(decide(&a, &read(&a, &FINAL), Pick::NoPeers).0, Verdict::Overloaded);
}
