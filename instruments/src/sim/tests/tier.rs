//! The forwarding tier with a bounded sample of peers, its messages, and the
//! second hop.

use super::*;
use crate::sim::tier::{Tier, TierSpec};

fn tier_cfg(proxies: usize, servers: usize, sample: usize, keep: usize) -> Config {
    let mut c = cfg("forward-least", 0.88);
    c.fleet = uniform(servers, 32, 2.0);
    c.rate = 0.88 * c.capacity();
    c.proxies = proxies;
    c.requests = 40_000;
    c.fleet_sample = sample;
    c.fleet_sample_keep = keep;
    c
}

#[test]
fn a_sample_of_every_other_server_is_the_all_peers_tier() {
    // With counts live (no delay) a sample of N-1 is every peer: the same
    // peers in the same order, so the same choices, draw for draw.
    let (all, sample) = (run(&tier_cfg(4, 12, 0, 0)), run(&tier_cfg(4, 12, 11, 0)));
    assert_eq!(all.served_per_server, sample.served_per_server);
    assert_eq!(all.mean_ms, sample.mean_ms);
    assert_eq!(all.acceptance, sample.acceptance);
    assert_eq!(all.messages.forwards, sample.messages.forwards);
    // Counts 0.2 ms late: the sample's first counts come a round trip after
    // subscribing, the rest is the same tier.
    let late = |k| run(&Config { fleet_delay_s: 0.0002, ..tier_cfg(4, 12, k, 0) });
    let (all, sample) = (late(0), late(11));
    assert!((sample.mean_ms / all.mean_ms - 1.0).abs() < 0.05, "{} vs {}", sample.mean_ms, all.mean_ms);
}

#[test]
fn messages_per_request_with_a_sample_do_not_grow_with_the_fleet() {
    let per_request = |servers, k| {
        let r = run(&Config { fleet_delay_s: 0.0002, hop_s: 0.0002, ..tier_cfg(16, servers, k, 0) });
        (r.messages.datagrams.total as f64 / r.requests as f64, r.messages.per_request)
    };
    let (small, large) = (per_request(12, 4), per_request(48, 4));
    // Two changes a request, each to about K subscribers, plus re-draws.
    assert!(small.0 < 2.0 * 4.0 + 3.0 && large.0 < 2.0 * 4.0 + 3.0, "{small:?} {large:?}");
    assert!(large.1 < 1.1 * small.1, "K=4: {} a request on 48 servers vs {} on 12", large.1, small.1);
    // Every peer: 2 (N-1) a request.
    let (all_small, all_large) = (per_request(12, 0), per_request(48, 0));
    assert!((all_small.0 / 22.0 - 1.0).abs() < 0.1 && (all_large.0 / 94.0 - 1.0).abs() < 0.1, "{all_small:?} {all_large:?}");
}

#[test]
fn with_one_front_nobody_wants_changes() {
    // Samples are drawn and renewed, and members beat to their listeners,
    // but no change of a count goes anywhere: every offer is kept by `seen`.
    let one = run(&Config { fleet_delay_s: 0.0002, ..tier_cfg(1, 12, 4, 2) });
    let d = &one.messages.datagrams;
    let secs = 40_000.0 / one.rate;
    assert_eq!(one.acceptance, Some(1.0));
    assert_eq!(d.counts, d.subscribes, "only a new member's first count: {d:?}");
    let (renewals, beats) = ((d.renewals + d.subscribes) as f64, d.heartbeats as f64);
    assert!((renewals / (12.0 * 4.0 * secs / 0.1) - 1.0).abs() < 0.05, "{d:?}");
    assert!((beats / (12.0 * 4.0 * secs / HEARTBEAT_S) - 1.0).abs() < 0.05, "{d:?}");
    assert!(one.messages.per_request < 3.0, "{:?}", one.messages);
    // Every peer, one front: heartbeats only, every 50 ms to the 11 others.
    let all = run(&Config { fleet_delay_s: 0.0002, ..tier_cfg(1, 12, 0, 0) });
    let beats = all.messages.datagrams.heartbeats as f64;
    let expected = 12.0 * 11.0 * (40_000.0 / all.rate) / HEARTBEAT_S;
    assert!((beats / expected - 1.0).abs() < 0.05, "{beats} heartbeats, about {expected} expected");
    assert_eq!(all.messages.datagrams.counts, 0);
}

#[test]
fn a_redraw_keeps_the_lowest_members_and_pays_for_the_changes() {
    let spec = TierSpec { delay_s: 0.0, hop_s: 0.0, view_s: 0.0, sample: 4, resample_s: 0.1, keep: 2, probe: 0, seed: 5, share: Default::default() };
    let mut t = Tier::new(spec, 10);
    assert_eq!((t.sent.subscribes, t.sent.counts), (40, 40), "at start, a subscribe and a first count per member");
    t.consult(0, 0.0);
    assert_eq!((t.sent.subscribes, t.sent.counts), (44, 44), "wanting changes: told at once, answered at once");
    let before = t.sample(0).to_vec();
    // Agent 0's members hold 9, 1, 5, 0 (in sample order): 0 and 1 are kept.
    for (&m, c) in before.iter().zip([9, 1, 5, 0]) {
        t.changed(m, 0.001, c);
    }
    let low = [before[1], before[3]];
    let sent = t.sent.clone();
    t.redraw(0.1); // agent 0's turn comes first
    let after = t.sample(0).to_vec();
    assert_eq!(after.len(), 4);
    assert!(!after.contains(&0), "{after:?}");
    assert!(low.iter().all(|m| after.contains(m)), "kept {low:?}, got {after:?}");
    let added = after.iter().filter(|m| !before.contains(m)).count() as u64;
    assert_eq!(t.sent.subscribes - sent.subscribes, added);
    assert_eq!(t.sent.unsubscribes - sent.unsubscribes, added);
    assert_eq!(t.sent.renewals - sent.renewals, 4 - added);
}

#[test]
fn a_second_hop_costs_its_latency() {
    // Forwarded requests reach their server a hop later: the mean pays about
    // the hop times the share forwarded.
    let at = |hop_ms: f64| run(&Config { hop_s: hop_ms / 1e3, fleet_delay_s: 0.0002, ..tier_cfg(4, 12, 0, 0) });
    let (near, far) = (at(0.0), at(2.0));
    let forwarded = far.messages.forwards as f64 / far.requests as f64;
    assert!(forwarded > 0.3, "{forwarded}");
    assert!(far.mean_ms > near.mean_ms + 0.5 * 2.0 * forwarded, "{} vs {}", far.mean_ms, near.mean_ms);
    assert_eq!(far.served_per_server.iter().sum::<u64>() + far.rejected, far.requests);
}

#[test]
fn pulling_counts_on_demand_costs_two_datagrams_a_peer_asked_and_a_round_trip() {
    let at = |servers, probe| run(&Config { fleet_delay_s: 0.0002, hop_s: 0.0002, fleet_probe: probe, ..tier_cfg(16, servers, 0, 0) });
    let (small, large, least) = (at(12, 4), at(48, 4), run(&Config { proxies: 16, requests: 40_000, ..cfg("least", 0.88) }));
    let d = &small.messages.datagrams;
    assert_eq!(d.asks, d.counts, "{d:?}");
    assert_eq!((d.subscribes, d.renewals, d.heartbeats), (0, 0, 0), "{d:?}");
    // Every offer not kept by `seen` asks 4 peers: at most 8 datagrams a request.
    assert!(d.total as f64 <= 8.0 * small.requests as f64 && d.asks > 0, "{d:?}");
    assert!(large.messages.per_request < 1.1 * small.messages.per_request, "{} vs {}", large.messages.per_request, small.messages.per_request);
    assert!(small.mean_ms < 0.8 * least.mean_ms, "pull {} vs least {}", small.mean_ms, least.mean_ms);
}

fn share_spec(sample: usize, share: &str) -> TierSpec {
    TierSpec { delay_s: 0.0002, hop_s: 0.0002, view_s: 0.0, sample, resample_s: 0.1, keep: 0, probe: 0, seed: 5, share: share.parse().unwrap() }
}

#[test]
fn a_share_spec_parses_and_says_what_is_worth_sending() {
    let s: Share = "level=2".parse().unwrap();
    // Counts capped at 3: a change among 0..=3 goes, one above does not.
    assert!(s.worth_sending(0, 1) && s.worth_sending(3, 2) && s.worth_sending(4, 2));
    assert!(!s.worth_sending(3, 4) && !s.worth_sending(5, 4));
    let d: Share = "delta=2".parse().unwrap();
    assert!(!d.worth_sending(3, 4) && d.worth_sending(3, 5) && d.worth_sending(3, 1));
    let every: Share = "batch=5,piggy".parse().unwrap();
    assert!(every.worth_sending(3, 4) && !every.worth_sending(4, 4) && every.filtered());
    assert!(!Share::default().filtered() && "".parse::<Share>().unwrap().tokens.is_none());
    let t: Share = "tokens=3,expire=5,piggy".parse().unwrap();
    assert_eq!((t.tokens, t.expire_s, t.piggy, t.filtered()), (Some(3), 0.005, true, false));
    assert_eq!(t.to_string(), "tokens=3,expire=5,piggy");
    assert_eq!("tokens=3".parse::<Share>().unwrap().expire_s, TOKEN_EXPIRE_S);
    for bad in ["level=x", "tokens=0", "tokens=2,level=1", "expire=5", "batch=0", "nope"] {
        assert!(bad.parse::<Share>().is_err(), "{bad}");
    }
}

#[test]
fn a_level_filter_sends_only_crossings_and_heartbeats_carry_the_rest() {
    let mut t = Tier::new(share_spec(11, "level=1"), 12);
    t.consult(0, 0.0); // agent 0 hears every other server's changes
    let base = t.sent.clone();
    // Server 5 goes 0 -> 1 -> 2 -> 3 -> 2 -> 1: capped at 2, only 0->1, 1->2 and 2->1 go.
    for (i, c) in [1, 2, 3, 2, 1].into_iter().enumerate() {
        t.changed(5, 0.001 * (i + 1) as f64, c);
    }
    assert_eq!(t.sent.counts - base.counts, 3, "{:?}", t.sent);
    // Agent 0 sees 1 (the last crossing) once it has landed.
    let (peers, counts) = t.view(0, 0.0056, |_| 0);
    assert_eq!(counts[peers.iter().position(|&p| p == 5).unwrap()], 1);
    // Up at 4 and silent: the next heartbeat, 50 ms after the last send, says 4.
    t.changed(5, 0.006, 2);
    t.changed(5, 0.007, 3);
    t.changed(5, 0.008, 4);
    let (peers, counts) = t.view(0, 0.057, |_| 0);
    assert_eq!(counts[peers.iter().position(|&p| p == 5).unwrap()], 4);
    assert!(t.sent.heartbeats > base.heartbeats);
}

#[test]
fn a_batch_coalesces_changes_into_one_count_per_interval() {
    let mut t = Tier::new(share_spec(11, "batch=5"), 12);
    t.consult(0, 0.0);
    let base = t.sent.counts;
    // Four changes within 5 ms of the first send: the first goes, the last goes at 5 ms.
    for (i, c) in [1, 2, 3, 4].into_iter().enumerate() {
        t.changed(5, 0.010 + 0.001 * i as f64, c);
    }
    assert_eq!(t.sent.counts - base, 1);
    let (peers, counts) = t.view(0, 0.0149, |_| 0);
    assert_eq!(counts[peers.iter().position(|&p| p == 5).unwrap()], 1, "the batch's end not yet");
    let (peers, counts) = t.view(0, 0.0153, |_| 0);
    assert_eq!(counts[peers.iter().position(|&p| p == 5).unwrap()], 4, "the coalesced count, a datagram after the batch's end");
    assert_eq!(t.sent.counts - base, 2);
}

#[test]
fn tokens_go_one_agent_each_and_a_forward_uses_one_up() {
    let mut t = Tier::new(share_spec(0, "tokens=2,expire=10"), 4);
    // Nobody decides by counts: nothing is sent.
    t.changed(0, 0.0, 0);
    assert_eq!(t.sent.tokens, 0);
    t.consult(1, 0.0);
    t.changed(0, 0.001, 0);
    assert_eq!(t.sent.tokens, 2, "L - count tokens, all to the only agent that wants them");
    assert_eq!(t.held(1).len(), 2);
    t.changed(0, 0.002, 1);
    assert_eq!(t.sent.tokens, 2, "two out already cover L - 1");
    assert_eq!(t.view(1, 0.0011, |_| 0).0, Vec::<usize>::new(), "a datagram on the way");
    let (peers, counts) = t.view(1, 0.0013, |_| 0);
    assert_eq!((peers, counts), (vec![0, 0], vec![0, 0]));
    t.forwarded(1, 0, 0.0013);
    assert_eq!(t.held(1).len(), 1);
    let (_, counts) = t.view(1, 0.0014, |_| 0);
    assert_eq!(counts, [1], "the other token, with the forward sent since it came");
    // Lapsed after 10 ms: the server owes tokens again at its next change.
    assert!(t.view(1, 0.0115, |_| 0).0.is_empty());
    t.changed(0, 0.012, 0);
    assert_eq!(t.sent.tokens, 4);
    t.finish(1.0);
    assert_eq!(t.sent.heartbeats, 0, "a token is its own liveness");
}

#[test]
fn spread_picks_among_the_j_lowest_below_the_own_count_only() {
    let mut rng = SmallRng::seed_from_u64(9);
    let counts = [5, 1, 2, 7, 3, 2];
    let mut hits = [0usize; 6];
    for _ in 0..3000 {
        hits[spread_pick(&counts, 5, 3, &mut rng).unwrap()] += 1;
    }
    // The 3 lowest below 5 are servers 1, 2 and 5 (counts 1, 2, 2): each about a third.
    assert_eq!((hits[0], hits[3], hits[4]), (0, 0, 0), "{hits:?}");
    assert!([1, 2, 5].iter().all(|&i| hits[i] > 800), "{hits:?}");
    // J 1 is the least; nobody below the own count: no forward.
    assert_eq!(spread_pick(&counts, 5, 1, &mut rng), Some(1));
    assert_eq!(spread_pick(&counts, 1, 3, &mut rng), None);
    let s: Share = "spread=4".parse().unwrap();
    assert_eq!((s.spread, s.filtered(), s.to_string()), (4, false, "spread=4".to_string()));
    for bad in ["full", "age=5", "memory=2,tokens=2", "spread=x"] {
        assert!(bad.parse::<Share>().is_err(), "{bad}");
    }
}

#[test]
fn full_makes_a_count_at_the_cap_no_target() {
    let mut t = Tier::new(share_spec(11, "level=1,full"), 12);
    t.consult(0, 0.0);
    t.changed(5, 0.001, 1);
    t.changed(6, 0.001, 1);
    t.changed(6, 0.002, 2); // at the cap: "2 or more"
    let (peers, counts) = t.view(0, 0.0030, |_| 0);
    assert!(peers.contains(&5) && !peers.contains(&6), "{peers:?}");
    assert_eq!(counts[peers.iter().position(|&p| p == 5).unwrap()], 1);
    // Without full, the capped count is a target like any other.
    let mut t = Tier::new(share_spec(11, "level=1"), 12);
    t.consult(0, 0.0);
    t.changed(6, 0.002, 2);
    assert!(t.view(0, 0.0030, |_| 0).0.contains(&6));
}

#[test]
fn memory_keeps_the_lowest_answers_for_their_age_with_own_forwards() {
    let spec = TierSpec { probe: 2, share: "memory=2,age=10".parse().unwrap(), ..share_spec(0, "") };
    let mut t = Tier::new(spec, 12);
    for (s, c) in [(3, 1), (4, 5), (7, 2), (8, 6)] {
        t.changed(s, 0.0, c);
    }
    let (peers, counts) = t.answers(0, &[3, 4], 0.001);
    assert_eq!((peers, counts), (vec![3, 4], vec![1, 5]));
    t.forwarded(0, 3, 0.001);
    // The next pull asks 7 and 8; it decides over them and the remembered 3 (1 + its forward) and 4.
    let (peers, counts) = t.answers(0, &[7, 8], 0.002);
    assert_eq!((peers, counts), (vec![7, 8, 3, 4], vec![2, 6, 2, 5]));
    // Remembered now: the two lowest (3 and 7, both at 2); after 10 ms, forgotten.
    let (peers, _) = t.answers(0, &[4], 0.0115);
    assert_eq!(peers, vec![4, 7], "3 was heard at 0.8 ms, 7 at 1.8 ms");
    let (peers, _) = t.answers(0, &[4], 0.05);
    assert_eq!(peers, vec![4]);
}

#[test]
fn steal_holds_beyond_c_and_free_slots_take_held_requests() {
    let mut c = tier_cfg(16, 12, 0, 0);
    c.rate = 0.95 * c.capacity();
    c.fleet_delay_s = 0.0002;
    c.hop_s = 0.0002;
    c.fleet_share = "steal=2,tries=6".parse().unwrap();
    let r = run(&c);
    let d = &r.messages.datagrams;
    // No count goes anywhere; asks and "none" are the only datagrams, each request stolen is a forward.
    assert_eq!((d.counts, d.subscribes, d.heartbeats), (0, 0, 0), "{d:?}");
    assert!(d.steals > 0 && r.messages.forwards > 0, "{:?}", r.messages);
    // At most 1 + T asks (and their "none") per completion.
    assert!(d.steals <= 2 * 7 * r.requests, "{d:?}");
    assert_eq!(r.served_per_server.iter().sum::<u64>() + r.rejected, r.requests);
    // Late binding beats the fronts' own least-request by far.
    let least = run(&Config { proxies: 16, requests: 40_000, ..{ let mut l = cfg("least", 0.95); l.fleet = c.fleet.clone(); l.rate = c.rate; l } });
    assert!(r.mean_ms < 0.8 * least.mean_ms, "steal {} vs least {}", r.mean_ms, least.mean_ms);
    for bad in ["steal=0", "tries=3", "steal=2,level=1", "steal=2,spread=2"] {
        assert!(bad.parse::<Share>().is_err(), "{bad}");
    }
    assert_eq!("steal=2".parse::<Share>().unwrap().to_string(), "steal=2,tries=1");
    assert_eq!("steal=2,hold=3".parse::<Share>().unwrap().hold, Some(3));
    for bad in ["steal=2,hold=1", "hold=3"] {
        assert!(bad.parse::<Share>().is_err(), "{bad}");
    }
    // hold=H above C: the app shares its cores among up to H, fewer are held (and fewer stolen).
    let held = run(&Config { fleet_share: "steal=2,tries=6,hold=4".parse().unwrap(), ..c.clone() });
    assert!(held.messages.forwards < r.messages.forwards, "{} vs {}", held.messages.forwards, r.messages.forwards);
}
