use super::*;
use crate::Reason;

#[test]
fn names_are_unique_and_prometheus_shaped() {
    for (i, a) in ALL.iter().enumerate() {
        assert!(a.name.starts_with("huntlb_") && a.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{}", a.name);
        assert_eq!(a.kind == Kind::Counter, a.name.ends_with("_total"), "{}: counters and only counters end in _total", a.name);
        assert!(ALL[i + 1..].iter().all(|b| b.name != a.name), "{} twice", a.name);
        // the unit in the name (Prometheus' naming): a share is a _ratio, a time _seconds
        assert_eq!(a.help.contains("(0 to 1)"), a.name.ends_with("_ratio"), "{}: a 0-to-1 value is a _ratio", a.name);
        assert!(!a.name.contains("_ms") && !a.name.contains("millis"), "{}: times in seconds", a.name);
    }
}

#[test]
fn refusal_labels_are_the_reasons() {
    let (_, values) = REFUSALS.label.unwrap();
    assert_eq!(values, Reason::ALL.map(Reason::name));
}

#[test]
fn flat_names() {
    assert_eq!(OFFERS.flat("accept"), "huntlb_offers_accept_total");
    assert_eq!(BUSY.flat("x"), "huntlb_busy_x");
}
