use super::*;
use crate::Try;
use Field::*;

#[test]
fn a_pass_names_its_front_once_or_lets_nothing_pass() {
    assert_eq!(pass_front(One(b"10.0.0.7:80")), Some(&b"10.0.0.7:80"[..]));
    assert_eq!(pass_front(One(b"1")), Some(&b"1"[..]));
    for no in [Absent, Repeated, One(b""), One(b"a,b"), One(b"a b"), One(&[b'x'; 65])] {
        assert_eq!(pass_front(no), None, "{no:?}");
    }
}

#[test]
fn classification() {
    assert_eq!(classify(One(b"1"), One(b"1")), Mark::Offer);
    assert_eq!(classify(One(b"web3"), One(b"web3")), Mark::Offer);
    assert_eq!(classify(One(b"1"), One(b"2")), Mark::Final);
    assert_eq!(classify(One(b"web3"), One(b"web7")), Mark::Final);
    assert_eq!(classify(Absent, One(b"2")), Mark::Final);
    assert_eq!(classify(One(b"1"), Absent), Mark::Final);
    assert_eq!(classify(Absent, Absent), Mark::Plain);
    assert_eq!(classify(Repeated, One(b"1")), Mark::Malformed);
    assert_eq!(classify(One(b""), One(b"")), Mark::Malformed);
    assert_eq!(classify(One(b"a b"), One(b"a b")), Mark::Malformed);
    assert_eq!(classify(One(&[b'x'; 65]), One(&[b'x'; 65])), Mark::Malformed);
    assert_eq!(classify(One(b"1"), Repeated), Mark::Malformed);
    assert_eq!(Mark::Malformed.as_try(), Try::Final);
}

#[test]
fn an_apps_425_is_carried_to_status_only_fronts() {
    assert_eq!(carry(425, true), (400, Some("425")));
    assert_eq!(carry(425, false), (425, None));
    for s in [200, 400, 404, 500, 503] {
        assert_eq!(carry(s, true), (s, None));
    }
    assert!(is_hunt_header(APP_STATUS));
}

#[test]
fn only_refusals_about_the_whole_backend_leave_rotation() {
    use crate::Reason;
    assert!(leaves_rotation(Reason::AppDown) && leaves_rotation(Reason::Draining));
    assert!(!leaves_rotation(Reason::Policy) && !leaves_rotation(Reason::Overload));
    assert!(!is_hunt_header(ENVOY_HC_FAIL));
    assert!(is_reserved_response_header(ENVOY_HC_FAIL) && is_reserved_response_header("X-Envoy-Degraded"));
    assert!(is_reserved_response_header(BUSY_HEADER) && is_reserved_response_header(APP_STATUS));
    assert!(!is_reserved_response_header("x-envoy") && !is_reserved_response_header("x-envoyish") && !is_reserved_response_header("set-cookie"));
}

#[test]
fn a_held_refusal_goes_only_when_the_proxy_holds_the_whole_body() {
    assert_eq!(held_refusal(0, true, false, 1024), Hold::Refuse);
    assert_eq!(held_refusal(1024, true, true, 1024), Hold::Refuse);
    assert_eq!(held_refusal(1025, true, false, 1024), Hold::Accept);
    assert_eq!(held_refusal(1025, false, false, 1024), Hold::Accept);
    assert_eq!(held_refusal(10, false, false, 1024), Hold::Wait);
    assert_eq!(held_refusal(10, false, true, 1024), Hold::Accept);
    assert_eq!(offerable(Body::Held, 0), Ok(()));
}

#[test]
fn hunt_headers() {
    for h in ["hunt", "hunt-offer", "Hunt-Target", "hunt-served-by"] {
        assert!(is_hunt_header(h), "{h}");
    }
    // cargo fuzz (fuzz/, target headers) found the first one panicking on a str slice
    for h in ["hun\u{fffd}", "hunt\u{e9}", "h\u{e9}nt-x", "hunter", "x-hunt", "hun", "huntlb"] {
        assert!(!is_hunt_header(h), "{h}");
    }
}
