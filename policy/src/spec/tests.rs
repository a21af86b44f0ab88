use super::*;

#[test]
fn the_old_name_is_the_same_policy_and_warns() {
    let old: Policy = "dynamic:c0=2,slack=1".parse().unwrap();
    let new: Policy = "dynamic:c0=2,seen_margin=1".parse().unwrap();
    assert_eq!(old, new);
    assert_eq!(old.to_string(), "dynamic:window=50,low=0.4,high=0.6,c0=2,seen_margin=1", "Display writes the new name");
    assert_eq!(
        spec_warning(" dynamic:c0=2, slack =1").as_deref(),
        Some("policy key `slack` is deprecated: write `seen_margin` (same meaning)")
    );
    for quiet in ["dynamic:seen_margin=1", "dynamic", "static:4", "always", "dynamic:slackness=1", "fastest:slack=1"] {
        assert_eq!(spec_warning(quiet), None, "{quiet}");
    }
}

#[test]
fn old_and_new_name_together_are_one_key_given_twice() {
    let e = parse("dynamic:slack=1,seen_margin=2").unwrap_err();
    assert_eq!(e.key, "seen_margin");
    assert!(e.reason.contains("`slack`") && e.reason.contains("twice"), "{e}");
    assert_eq!(parse("dynamic:seen_margin=1,slack=2").unwrap_err().key, "seen_margin", "in either order");
    // an error in a value names the key as it was written
    assert_eq!(parse("dynamic:slack=x").unwrap_err().key, "slack");
}

#[test]
fn display_round_trips() {
    for spec in ["always", "static:0", "static:33", "dynamic", "dynamic:window=10,low=0.3,high=0.7,c0=2,c_max=8"] {
        let p: Policy = spec.parse().unwrap();
        let again: Policy = p.to_string().parse().unwrap();
        assert_eq!(p, again, "{spec}");
    }
}
