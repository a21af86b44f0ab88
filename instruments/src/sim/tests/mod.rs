use super::*;

mod prequal;
mod tier;

fn cfg(dispatch: &str, rho: f64) -> Config {
    let (servers, cores, mean_s) = (12, 2.0, 0.01);
    Config {
        fleet: uniform(servers, 32, cores),
        backlog: 128,
        mean_s,
        rate: rho * servers as f64 * cores / mean_s,
        requests: 60_000,
        dispatch: dispatch.parse().unwrap(),
        proxies: 1,
        assign: Assign::Turn,
        refresh_s: 0.0,
        feedback: false,
        fleet_view_s: 0.0,
        fleet_delay_s: 0.0,
        hop_s: 0.0,
        fleet_sample: 0,
        fleet_resample_s: 0.1,
        fleet_sample_keep: 0,
        fleet_probe: 0,
        fleet_share: Share::default(),
        demand: Demand::Exp,
        seed: 7,
        sample_every_s: 0.0,
        freeze: None,
    }
}

/// How often `pick` returns each server over `draws` calls.
fn histogram(rule: Rule, view: &[u32], exclude: Option<usize>, draws: usize) -> Vec<usize> {
    let mut rng = SmallRng::seed_from_u64(3);
    let mut h = vec![0; view.len()];
    for _ in 0..draws {
        h[pick(rule, view, exclude, &mut rng)] += 1;
    }
    h
}

#[test]
fn light_load_gives_the_service_time() {
    // At rho 0.05 a job almost never shares its cores: mean response = mean demand.
    let r = run(&cfg("random", 0.05));
    assert!((r.mean_ms - 10.0).abs() < 0.5, "{}", r.mean_ms);
    assert_eq!(r.rejected, 0);
    assert_eq!(r.served_per_server.iter().sum::<u64>(), 60_000);
    assert!((r.rho - 0.05).abs() < 1e-9);
}

#[test]
fn one_server_matches_processor_sharing_theory() {
    // M/M/1-PS with one core: mean response = (1/mu) / (1 - rho).
    let mut c = cfg("random", 0.0);
    c.fleet = uniform(2, 32, 1.0); // random over two identical servers = two M/M/1-PS queues
    c.rate = 2.0 * 0.5 / c.mean_s;
    c.requests = 200_000;
    let r = run(&c);
    assert!((r.mean_ms - 20.0).abs() < 1.0, "M/M/1-PS at rho 0.5 wants 20 ms, got {}", r.mean_ms);
}

#[test]
fn hunting_beats_random_under_load_and_jsq_beats_both() {
    let rr = run(&cfg("random", 0.88));
    let sr4 = run(&cfg("hunt:static:4", 0.88));
    let dynamic = run(&cfg("hunt:dynamic", 0.88));
    let jsq = run(&cfg("jsq", 0.88));
    assert!(sr4.mean_ms * 1.3 < rr.mean_ms, "SR_4 {} vs RR {}", sr4.mean_ms, rr.mean_ms);
    assert!(dynamic.mean_ms * 1.3 < rr.mean_ms, "SR_dyn {} vs RR {}", dynamic.mean_ms, rr.mean_ms);
    assert!(jsq.mean_ms < sr4.mean_ms.min(dynamic.mean_ms));
    let acc = dynamic.acceptance.unwrap();
    assert!((0.35..0.65).contains(&acc), "SR_dyn acceptance {acc}");
}

#[test]
fn static_extremes_reduce_to_random() {
    // c = 0: every offer refused, the random second candidate serves all.
    let r = run(&cfg("hunt:static:0", 0.5));
    assert_eq!(r.acceptance, Some(0.0));
    let rr = run(&cfg("random", 0.5));
    assert!((r.mean_ms / rr.mean_ms - 1.0).abs() < 0.1, "{} vs {}", r.mean_ms, rr.mean_ms);
}

#[test]
fn own_view_least_loses_its_edge_with_many_proxies() {
    let mut one = cfg("least", 0.88);
    let mut four = one.clone();
    four.proxies = 4;
    one.requests = 40_000;
    four.requests = 40_000;
    let (a, b) = (run(&one), run(&four));
    assert!(a.mean_ms < b.mean_ms, "1 proxy {} vs 4 proxies {}", a.mean_ms, b.mean_ms);
}

#[test]
fn load_feedback_is_exact_with_one_proxy_and_closes_the_gap_with_many() {
    // One proxy: the count it hears plus its own changes since is the truth,
    // which its own count already was, so the runs are identical.
    let mut base = cfg("least", 0.88);
    base.requests = 40_000;
    let mut fed = base.clone();
    fed.feedback = true;
    let (a, b) = (run(&base), run(&fed));
    assert_eq!(a.served_per_server, b.served_per_server);
    assert_eq!(a.mean_ms, b.mean_ms);
    // Sixteen proxies: what the others sent reaches each one with every
    // response, so least-request moves towards JSQ.
    base.proxies = 16;
    fed.proxies = 16;
    let (own, heard, jsq) = (run(&base), run(&fed), run(&Config { proxies: 16, ..cfg("jsq", 0.88) }));
    assert!(heard.mean_ms < 0.9 * own.mean_ms, "feedback {} vs own view {}", heard.mean_ms, own.mean_ms);
    assert!(jsq.mean_ms < heard.mean_ms, "JSQ {} vs feedback {}", jsq.mean_ms, heard.mean_ms);
}

#[test]
fn fairness_index() {
    assert_eq!(jain(&[1.0, 1.0, 1.0]), Some(1.0));
    assert_eq!(jain(&[3.0, 0.0, 0.0]), Some(1.0 / 3.0));
    assert_eq!(jain(&[0.0, 0.0]), None);
}

#[test]
fn forwarding_agents_need_a_fresh_fleet_view_to_come_near_jsq() {
    // Four proxies over least by own view: agents that know the whole fleet
    // live and forward what is not theirs to the least are JSQ up to
    // the first offer; a view a few ms old herds the forwards onto
    // the snapshot's least and loses what it gained.
    let base = |d: &str, view_ms: f64| Config { proxies: 4, requests: 40_000, fleet_view_s: view_ms / 1e3, ..cfg(d, 0.88) };
    let (least, jsq) = (run(&base("least", 0.0)), run(&base("jsq", 0.0)));
    let (live, stale) = (run(&base("forward-least:seen_margin=off", 0.0)), run(&base("forward-least:seen_margin=off", 5.0)));
    assert!(live.mean_ms < 1.05 * jsq.mean_ms, "live view {} vs JSQ {}", live.mean_ms, jsq.mean_ms);
    assert!(live.mean_ms < 0.9 * least.mean_ms, "live view {} vs least {}", live.mean_ms, least.mean_ms);
    assert!(stale.mean_ms > least.mean_ms, "5 ms view {} vs least {}", stale.mean_ms, least.mean_ms);
    let acc = live.acceptance.unwrap();
    assert!((0.2..0.8).contains(&acc), "first agents kept {acc} of the offers");
}

#[test]
fn counts_pushed_on_change_and_the_fronts_own_count_keep_forwarding_near_jsq() {
    // What the agent ships (`fleet_listen`): every count change reaches the
    // agents 0.2 ms later, and an offer whose server holds no more than its
    // front's count there plus 1 is kept. One front: its count is the truth,
    // so nothing is forwarded and it is least-request exactly. Four fronts:
    // within a few percent of JSQ, far below least-request.
    let base = |d: &str, proxies: usize, delay_ms: f64| Config { proxies, requests: 40_000, fleet_delay_s: delay_ms / 1e3, ..cfg(d, 0.88) };
    let one = run(&base("forward-least", 1, 0.2));
    let least1 = run(&base("least", 1, 0.0));
    assert_eq!(one.acceptance, Some(1.0));
    assert_eq!(one.mean_ms, least1.mean_ms);
    let (four, least4, jsq) = (run(&base("forward-least", 4, 0.2)), run(&base("least", 4, 0.0)), run(&base("jsq", 4, 0.0)));
    assert!(four.mean_ms < 0.87 * least4.mean_ms, "forward {} vs least {}", four.mean_ms, least4.mean_ms);
    assert!(four.mean_ms < 1.05 * jsq.mean_ms, "forward {} vs JSQ {}", four.mean_ms, jsq.mean_ms);
    // Older counts herd forwards onto a stale least.
    let late = run(&base("forward-least", 4, 5.0));
    assert!(late.mean_ms > four.mean_ms, "5 ms {} vs 0.2 ms {}", late.mean_ms, four.mean_ms);
}

#[test]
fn dispatch_specs_round_trip_and_old_ones_still_parse() {
    for s in ["random", "p2c", "least", "least-of-3", "jsq", "hunt:static:4", "hunt-p2c:static:4", "hunt-least:static:0",
        "hunt-least-of-3:static:8", "hunt-random:static:4", "forward-least", "forward-p2c:peer_margin=2,seen_margin=off",
        "forward-least:seen_margin=3", "forward-least:0", "forward-p2c:2", "forward-least:0:seen=1",
        "prequal", "prequal:pool=8,probes=2,q=0.5,reuse=2,age=20"]
    {
        let d: Dispatch = s.parse().unwrap();
        assert_eq!(d.to_string().parse::<Dispatch>().unwrap(), d, "{s}");
        assert_eq!(Dispatch::warning(&d.to_string()), None, "{s} is written back in current names");
    }
    assert_eq!("rr".parse::<Dispatch>().unwrap(), Dispatch::Local(Rule::Random));
    assert_eq!("hunt-random:static:4".parse::<Dispatch>().unwrap().to_string(), "hunt:static:4");
    let d: Dispatch = "hunt-least:dynamic:low=0.7,high=0.9".parse().unwrap();
    let Dispatch::Hunt(Rule::Least { k: 1 }, huntlb_policy::Policy::Dynamic(p)) = d else { panic!("{d:?}") };
    assert_eq!((p.low, p.high), (0.7, 0.9));
    for bad in ["fastest", "hunt", "hunt-least", "least-of-0", "least-of-x", "least-of-+2", "hunt-fast:static:4",
        "jsq:static:4", "hunt:static:x", "hunt-least:dynamic:low=0.9,high=0.7", "forward-least:", "forward-least:x", "forward-least:0:seen", "forward-least:0:k=1",
        "forward-least:peer_margin=-1", "forward-least:seen_margin=1,seen_margin=2", "forward-least:slack=1", "forward-least:0:seen_margin=1",
        "forward-least:0,seen_margin=1", "forward-fast", "forward-fast:0", "prequal:q=2", "prequal:pool=0", "prequal:size=3", "prequal:age=-1"]
    {
        let e = bad.parse::<Dispatch>().unwrap_err();
        assert!(e.starts_with(&format!("dispatch `{bad}`")), "{bad}: {e}");
    }
}

/// The forward dispatcher's knobs are the agent's, by the agent's names and
/// defaults; its old form (`forward-RULE:SLACK[:seen=K]`, without `seen=K`
/// consulting no front's count) is the same dispatcher, with a warning
/// naming the new spelling. A policy's old key warns as the policy crate does.
#[test]
fn the_forward_dispatchers_knobs_are_the_agents_and_old_forms_warn() {
    use huntlb_policy::forward::Forwarding;
    let least = Rule::Least { k: 1 };
    let parse = |s: &str| s.parse::<Dispatch>().unwrap();
    assert_eq!(parse("forward-least"), Dispatch::Forward(least, Forwarding::default()));
    assert_eq!(parse("forward-least:seen_margin=2,peer_margin=1"), Dispatch::Forward(least, Forwarding { peer_margin: 1, seen_margin: Some(2) }));
    for (old, new) in [
        ("forward-least:0", "forward-least:peer_margin=0,seen_margin=off"),
        ("forward-least:1:seen=1", "forward-least:peer_margin=1,seen_margin=1"),
        ("forward-p2c:0:seen=1", "forward-p2c:peer_margin=0,seen_margin=1"),
    ] {
        assert_eq!(parse(old), parse(new), "{old}");
        assert_eq!(parse(old).to_string(), new, "written back in the new form");
        assert_eq!(
            Dispatch::warning(old).as_deref(),
            Some(format!("dispatch `{old}`: the form forward-RULE:SLACK[:seen=K] is deprecated: write `{new}` (same meaning)").as_str())
        );
        assert_eq!(Dispatch::warning(new), None);
    }
    assert_eq!(
        Dispatch::warning("hunt-least-of-3:dynamic:slack=1").as_deref(),
        Some("dispatch `hunt-least-of-3:dynamic:slack=1`: policy key `slack` is deprecated: write `seen_margin` (same meaning)")
    );
    for quiet in ["hunt-least:dynamic:seen_margin=1", "forward-least:x", "least", "prequal:pool=8", "jsq"] {
        assert_eq!(Dispatch::warning(quiet), None, "{quiet}");
    }
    // a key given twice, or the old form mixed with the new keys, is refused
    let e = "forward-least:seen_margin=1,seen_margin=2".parse::<Dispatch>().unwrap_err();
    assert!(e.contains("seen_margin: given twice"), "{e}");
    let e = "forward-least:0:seen_margin=1".parse::<Dispatch>().unwrap_err();
    assert!(e.contains("peer_margin=M,seen_margin=K"), "{e}");
}

#[test]
fn pick_random_is_uniform_over_the_others() {
    let h = histogram(Rule::Random, &[9, 0, 5, 0], Some(2), 30_000);
    assert_eq!(h[2], 0);
    assert!(h.iter().enumerate().filter(|(i, _)| *i != 2).all(|(_, &c)| (9_000..11_000).contains(&c)), "{h:?}");
}

#[test]
fn pick_p2c_takes_the_lower_of_two_distinct() {
    // Server 0 (the least) wins every pair it is in, 3 of the 6 pairs;
    // server 3 (the most) never wins one.
    let h = histogram(Rule::P2c, &[0, 4, 4, 9], None, 60_000);
    assert_eq!(h[3], 0, "{h:?}");
    assert!((28_000..32_000).contains(&h[0]), "{h:?}");
    // Excluding server 0 of two: the other, whatever the counts.
    assert_eq!(histogram(Rule::P2c, &[0, 9], Some(0), 100), vec![0, 100]);
    // Excluding the least: the lower of two among the rest.
    let h = histogram(Rule::P2c, &[0, 1, 5, 5], Some(0), 30_000);
    assert_eq!(h[0], 0);
    assert!((19_000..21_000).contains(&h[1]), "{h:?}");
}

#[test]
fn pick_least_breaks_ties_at_random_and_skips_the_excluded() {
    let h = histogram(Rule::Least { k: 1 }, &[3, 1, 7, 1, 1], None, 30_000);
    assert_eq!((h[0], h[2]), (0, 0));
    assert!([1, 3, 4].iter().all(|&i| (9_000..11_000).contains(&h[i])), "{h:?}");
    let h = histogram(Rule::Least { k: 1 }, &[3, 1, 7, 2], Some(1), 1_000);
    assert_eq!(h, vec![0, 0, 0, 1_000]);
}

#[test]
fn pick_least_of_k_is_uniform_over_the_k_least() {
    // The 3 least of [0, 5, 1, 5, 2, 9] are servers 0, 2, 4.
    let h = histogram(Rule::Least { k: 3 }, &[0, 5, 1, 5, 2, 9], None, 30_000);
    assert_eq!((h[1], h[3], h[5]), (0, 0, 0), "{h:?}");
    assert!([0, 2, 4].iter().all(|&i| (9_000..11_000).contains(&h[i])), "{h:?}");
    // A tie at the cut: server 0, then one of 1, 2, 3 drawn at random as the
    // second: 0 gets 1/2, the others 1/6 each.
    let h = histogram(Rule::Least { k: 2 }, &[0, 4, 4, 4], None, 60_000);
    assert!((28_500..31_500).contains(&h[0]) && h[1..].iter().all(|&c| (9_000..11_000).contains(&c)), "{h:?}");
    // k beyond the candidates: every candidate, uniformly; never the excluded.
    let h = histogram(Rule::Least { k: 10 }, &[0, 5, 1], Some(0), 20_000);
    assert!(h[0] == 0 && h[1..].iter().all(|&c| (9_000..11_000).contains(&c)), "{h:?}");
}

#[test]
fn pick_is_a_function_of_its_inputs() {
    let view = [2, 0, 0, 3, 1];
    for rule in [Rule::Random, Rule::P2c, Rule::Least { k: 1 }, Rule::Least { k: 2 }] {
        let draw = |seed| {
            let mut rng = SmallRng::seed_from_u64(seed);
            (0..50).map(|_| pick(rule, &view, Some(1), &mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(11), draw(11), "{rule}");
    }
}

#[test]
fn one_proxys_least_is_jsq_and_hunting_over_it_stays_close() {
    let least = run(&cfg("least", 0.88));
    let jsq = run(&cfg("jsq", 0.88));
    let hunt_least = run(&cfg("hunt-least:dynamic", 0.88));
    let hunt = run(&cfg("hunt:dynamic", 0.88));
    // One proxy sees every request: its own counts are the true ones.
    assert!((least.mean_ms / jsq.mean_ms - 1.0).abs() < 0.05, "least {} vs jsq {}", least.mean_ms, jsq.mean_ms);
    assert!(hunt_least.mean_ms < 1.15 * jsq.mean_ms, "hunt-least {} vs jsq {}", hunt_least.mean_ms, jsq.mean_ms);
    assert!(hunt_least.mean_ms * 1.2 < hunt.mean_ms, "hunt-least {} vs random offer {}", hunt_least.mean_ms, hunt.mean_ms);
}

#[test]
fn hunting_corrects_own_view_least_with_many_proxies() {
    let at = |d: &str| {
        let mut c = cfg(d, 0.88);
        c.proxies = 16;
        run(&c)
    };
    let (least, hunt_least) = (at("least"), at("hunt-least:dynamic"));
    assert!(hunt_least.mean_ms * 1.1 < least.mean_ms, "16 proxies: hunt-least {} vs least {}", hunt_least.mean_ms, least.mean_ms);
}

#[test]
fn random_assignment_spreads_arrivals_over_the_proxies() {
    let mut c = cfg("least", 0.6);
    c.proxies = 8;
    c.assign = Assign::Random;
    c.requests = 20_000;
    let r = run(&c);
    assert_eq!(r.served_per_server.iter().sum::<u64>() + r.rejected, 20_000);
    assert_eq!(r.proxies, 8);
}

#[test]
fn mixed_fleet_random_offers_overflow_small_servers_hunting_over_least_does_not() {
    let mixed = |d: &str| {
        let mut c = cfg(d, 0.0);
        c.fleet = [1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 8.0, 8.0].iter().map(|&cores| ServerSpec { cores, workers: 32, c_min: None }).collect();
        c.rate = 0.88 * c.capacity();
        c.requests = 40_000;
        run(&c)
    };
    let (hunt, hunt_least) = (mixed("hunt:dynamic"), mixed("hunt-least:dynamic"));
    assert!(hunt.rejected > 1_000, "random offers: {} rejected", hunt.rejected);
    assert_eq!(hunt_least.rejected, 0);
    assert!(hunt_least.mean_ms * 3.0 < hunt.mean_ms, "{} vs {}", hunt_least.mean_ms, hunt.mean_ms);
    // The big servers serve more: 8 cores take more than 1 core.
    assert!(hunt_least.served_per_server[7] > 3 * hunt_least.served_per_server[0], "{:?}", hunt_least.served_per_server);
}

#[test]
fn a_stale_view_herds_and_the_k_least_spread_it() {
    let at = |d: &str, refresh_s: f64| {
        let mut c = cfg(d, 0.88);
        c.refresh_s = refresh_s;
        c.requests = 40_000;
        run(&c).mean_ms
    };
    let (fresh, stale, stale3) = (at("least", 0.0), at("least", 0.05), at("least-of-3", 0.05));
    assert!(stale > 1.5 * fresh, "refresh 50 ms {stale} vs live {fresh}");
    assert!(stale3 < stale, "least-of-3 {stale3} vs least {stale} at 50 ms");
    // A refresh period far below the inter-arrival time (0.47 ms) is nearly the live view.
    let tiny = at("least", 1e-5);
    assert!((tiny / fresh - 1.0).abs() < 0.05, "{tiny} vs {fresh}");
}

#[test]
fn a_frozen_server_holds_its_jobs_and_the_ideal_sends_it_nothing() {
    // 60,000 requests at rho 0.7 (1,680 a second, 140 a server) last about
    // 36 s; server 0 stops from 2 to 12 s.
    let freeze = Some(Freeze { server: 0, from_s: 2.0, to_s: 12.0 });
    let plain = run(&cfg("jsq", 0.7));
    let frozen = run(&Config { freeze, ..cfg("jsq", 0.7) });
    // Everything is served; server 0 loses about its 10 s share (1,400).
    assert_eq!(frozen.served_per_server.iter().sum::<u64>(), 60_000);
    let lost = plain.served_per_server[0] as i64 - frozen.served_per_server[0] as i64;
    assert!((1_000..1_600).contains(&lost), "server 0 served {lost} fewer");
    // Random keeps sending it a twelfth of the load: 160 fill its workers and
    // backlog and wait for the thaw, the other ~1,200 are rejected.
    let random = run(&Config { freeze, ..cfg("random", 0.7) });
    assert!((1_000..1_500).contains(&random.rejected), "random rejected {}", random.rejected);
    assert_eq!(frozen.rejected, 0);
    // The ideal sends it nothing meanwhile: only the capacity is lost.
    assert!(frozen.p99_ms < 2.0 * plain.p99_ms, "{} against {}", frozen.p99_ms, plain.p99_ms);
}

#[test]
fn a_freeze_spec_parses_and_a_bad_one_is_refused_by_its_shape() {
    assert_eq!("0:3:7".parse::<Freeze>(), Ok(Freeze { server: 0, from_s: 3.0, to_s: 7.0 }));
    for bad in ["0:3", "x:1:2", "0:5:4", "0:-1:2", "0:1:inf"] {
        let e = bad.parse::<Freeze>().unwrap_err();
        assert!(e.contains(bad), "{bad}: {e}");
    }
}
