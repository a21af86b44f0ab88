use super::*;

#[test]
fn defaults() {
    let s = RawSettings::default().validate("agent").unwrap();
    assert_eq!(s, Settings { policy: DEFAULT_POLICY.parse().unwrap(), workers: 32, id: "agent".into() });
}

#[test]
fn errors_name_the_key() {
    let key = |r: RawSettings| r.validate("x").unwrap_err().key;
    assert_eq!(key(RawSettings { policy: Some("fastest"), ..Default::default() }), "policy");
    assert_eq!(key(RawSettings { workers: Some(0), ..Default::default() }), "workers");
    assert_eq!(key(RawSettings { workers: Some(65_536), ..Default::default() }), "workers");
    assert_eq!(key(RawSettings { id: Some("two words"), ..Default::default() }), "id");
    assert_eq!(parse_workers("8x").unwrap_err().key, "workers");
}
