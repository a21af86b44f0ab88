//! Prequal's pool and hot-cold rule, and the demand option.

use super::*;
use crate::sim::prequal::{hot_cold, Entry, Pool};

fn entry(server: usize, rif: u32, latency: f64, at: f64) -> Entry {
    Entry { server, rif, latency, at, uses: 0 }
}

#[test]
fn hot_cold_takes_the_fastest_cold_entry_or_the_least_loaded() {
    let pool = [entry(0, 1, 0.030, 0.0), entry(1, 2, 0.010, 0.0), entry(2, 3, 0.020, 0.0), entry(3, 9, 0.001, 0.0)];
    // q 0.75: the quantile is 3, so server 3 (RIF 9) is hot however fast it
    // says it is; of the cold, server 1 answers fastest.
    assert_eq!(hot_cold(&pool, 0.75), Some(1));
    // q 0: only the lowest RIF is cold.
    assert_eq!(hot_cold(&pool, 0.0), Some(0));
    // q 1: nothing is hot, the fastest wins.
    assert_eq!(hot_cold(&pool, 1.0), Some(3));
    assert_eq!(hot_cold(&[], 0.84), None);
}

#[test]
fn the_pool_takes_answers_when_they_land_and_drops_used_old_and_replaced_ones() {
    let spec: PrequalSpec = "pool=2,reuse=1,age=10".parse().unwrap();
    let mut p = Pool::default();
    p.answer(0.001, entry(4, 0, 0.02, 0.0));
    assert_eq!(p.select(&spec, 0.0005), None, "not landed yet");
    assert_eq!(p.select(&spec, 0.001), Some(4));
    assert_eq!(p.held(), 0, "used once, reuse 1: gone");
    // The same server again: the newer answer replaces the older.
    p.answer(0.002, entry(5, 3, 0.02, 0.002));
    p.answer(0.003, entry(5, 1, 0.02, 0.003));
    p.answer(0.003, entry(6, 2, 0.02, 0.003));
    p.answer(0.004, entry(7, 0, 0.02, 0.004));
    assert_eq!(p.select(&spec, 0.004), Some(7), "pool of 2: the oldest (server 5) made room");
    assert_eq!(p.held(), 1);
    // Older than 10 ms: dropped, the pool is empty.
    assert_eq!(p.select(&spec, 0.020), None);
}

#[test]
fn prequal_beats_random_at_rho_088_for_six_messages_a_request() {
    let at = |d: &str| run(&Config { proxies: 4, requests: 40_000, hop_s: 0.0002, ..cfg(d, 0.88) });
    let (rr, pq) = (at("random"), at("prequal"));
    assert!(pq.mean_ms * 1.3 < rr.mean_ms, "prequal {} vs random {}", pq.mean_ms, rr.mean_ms);
    assert!((pq.messages.per_request - 6.0).abs() < 1e-9, "{:?}", pq.messages);
    assert_eq!(pq.messages.probes, 6 * 40_000);
    assert_eq!(rr.messages.total, 0);
}

#[test]
fn lognormal_demand_keeps_the_mean_and_lengthens_the_tail() {
    let at = |demand: &str| run(&Config { demand: demand.parse().unwrap(), requests: 100_000, ..cfg("jsq", 0.05) });
    let (exp, ln) = (at("exp"), at("lognormal:1.5"));
    // At rho 0.05 a job almost never shares its cores: mean response = mean demand.
    assert!((ln.mean_ms - 10.0).abs() < 1.0, "lognormal mean {}", ln.mean_ms);
    assert!(ln.p99_ms > 1.5 * exp.p99_ms, "lognormal p99 {} vs exponential {}", ln.p99_ms, exp.p99_ms);
    assert!(ln.p50_ms < 0.6 * exp.p50_ms, "lognormal median {} vs exponential {}", ln.p50_ms, exp.p50_ms);
    assert_eq!(ln.demand, "lognormal:1.5");
    for bad in ["lognormal", "lognormal:0", "lognormal:x", "pareto:2"] {
        assert!(bad.parse::<Demand>().is_err(), "{bad}");
    }
}
