use super::*;

#[test]
fn fnv1a_is_the_published_one() {
    // the FNV reference's test vectors (draft-eastlake-fnv)
    assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
    assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
    assert_eq!(fnv1a(b"foobar"), 0x85944171f73967e8);
}

#[test]
fn only_the_first_bytes_count() {
    assert_eq!(prefix_hash(b"system prompt A, question 1", 15), prefix_hash(b"system prompt A, question 2", 15));
    assert_ne!(prefix_hash(b"system prompt A", 15), prefix_hash(b"system prompt B", 15));
    assert_eq!(prefix_hash(b"short", 100), fnv1a(b"short"));
}

#[test]
fn homes_spread_evenly_and_move_only_off_a_member_that_leaves() {
    let ids: Vec<u64> = (0..10).map(|i| member_id(&format!("10.0.0.{i}:9700"))).collect();
    let mut per = [0u32; 10];
    let homes: Vec<usize> = (0..10_000u64).map(|p| rank(fnv1a(&p.to_le_bytes()), &ids).unwrap()).collect();
    for &h in &homes {
        per[h] += 1;
    }
    assert!(per.iter().all(|&n| (850..1150).contains(&n)), "{per:?}");
    // member 3 leaves: only its prefixes move
    let without: Vec<u64> = ids.iter().enumerate().filter(|&(i, _)| i != 3).map(|(_, &id)| id).collect();
    for (p, &h) in homes.iter().enumerate() {
        let now = rank(fnv1a(&(p as u64).to_le_bytes()), &without).unwrap();
        let now = if now >= 3 { now + 1 } else { now };
        if h != 3 {
            assert_eq!(now, h, "prefix {p} moved though its home stayed");
        }
    }
    // the order members are listed in does not matter
    let mut rev = ids.clone();
    rev.reverse();
    for p in 0..1000u64 {
        let h = fnv1a(&p.to_le_bytes());
        assert_eq!(ids[rank(h, &ids).unwrap()], rev[rank(h, &rev).unwrap()]);
    }
}

#[test]
fn the_home_is_kept_within_the_bound_only() {
    let ids = [1, 2, 3];
    let h = (0..).find(|&p| rank(p, &ids) == Some(1)).unwrap();
    let over_counts = |bound| Affinity { bytes: 64, bound, seats: 0 };
    assert_eq!(home(h, over_counts(2), &ids, 0, |_| Some(2)), Some(1));
    assert_eq!(home(h, over_counts(2), &ids, 0, |_| Some(3)), None);
    assert_eq!(home(h, over_counts(2), &ids, 5, |_| Some(7)), Some(1));
    assert_eq!(home(h, over_counts(0), &ids, 0, |_| None), None, "an unknown count is no home");
    assert_eq!(home(h, over_counts(u32::MAX), &ids, u32::MAX, |_| Some(u32::MAX)), Some(1));
    assert_eq!(home(h, over_counts(2), &[], 0, |_| Some(0)), None);
}

#[test]
fn with_seats_a_home_keeps_its_prefixes_while_a_seat_is_free() {
    let ids = [1, 2, 3];
    let h = (0..).find(|&p| rank(p, &ids) == Some(1)).unwrap();
    let four = |bound| Affinity { bytes: 64, bound, seats: 4 };
    // a free seat at the home: it takes it, however idle the least
    assert_eq!(home(h, four(0), &ids, 0, |_| Some(3)), Some(1));
    // every seat taken at the home, one free elsewhere: the ordinary rule
    assert_eq!(home(h, four(0), &ids, 3, |_| Some(4)), None);
    // with a bound of 1, one request's wait is allowed
    assert_eq!(home(h, four(1), &ids, 3, |_| Some(4)), Some(1));
    assert_eq!(home(h, four(1), &ids, 3, |_| Some(5)), None);
    // full everywhere: no longer a queue than the least's
    assert_eq!(home(h, four(0), &ids, 6, |_| Some(6)), Some(1));
    assert_eq!(home(h, four(0), &ids, 6, |_| Some(7)), None);
    assert_eq!(waiting(0, 4), 0);
    assert_eq!(waiting(3, 4), 0);
    assert_eq!(waiting(4, 4), 1);
    assert_eq!(waiting(u32::MAX, 0), u32::MAX);
}
