//! An endpoint picker in the style of the Gateway API Inference Extension's
//! (GIE) EPP: what users put in front of a fleet of model servers today, one
//! per gateway. `huntlb-epp` (src/bin/epp.rs) scrapes every model server's
//! `/metrics` on a fixed interval and answers each request with the endpoint
//! the scores below rank first.
//!
//! The scoring copies GIE's default scheduling profile
//! (`pkg/epp/config/loader/defaults.go`: queue-scorer weight 2,
//! kv-cache-utilization-scorer weight 2, prefix-cache-scorer weight 3, no
//! filter, max-score-picker):
//!
//! * queue-scorer (`.../scorer/queue.go`): `(max_q - q) / (max_q - min_q)`
//!   over the candidates' `vllm:num_requests_waiting`, 1.0 for all when every
//!   queue is the same length;
//! * kv-cache-utilization-scorer (`.../scorer/kvcache_utilization.go`):
//!   `1 - vllm:kv_cache_usage_perc`;
//! * prefix-cache-scorer: left out (a weight given, its score 0): it needs the
//!   request's prompt, which an HTTP ext_authz check does not carry, and on
//!   prompts that share no prefix it scores every endpoint 0, which ranks
//!   nothing;
//! * max-score-picker: the highest weighted sum, ties broken at random
//!   (GIE shuffles the candidates before a stable sort).
//!
//! An endpoint whose last good scrape is older than the staleness bound (GIE's
//! `DefaultMetricsStalenessThreshold`, 2 s, pkg/epp/server/runserver.go) is no
//! candidate: GIE marks such metrics stale; dropping the endpoint is this
//! picker's choice.

use rand::Rng;

/// GIE's default weights (pkg/epp/config/loader/defaults.go).
pub const QUEUE_WEIGHT: f64 = 2.0;
pub const KV_WEIGHT: f64 = 2.0;

/// What one scrape of a model server's `/metrics` says.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Scrape {
    pub waiting: f64,
    pub running: f64,
    pub kv_usage: f64,
}

/// The three gauges from a Prometheus text exposition (vLLM's names), or
/// None when `vllm:num_requests_waiting` is missing (not a model server).
/// Several series of one name (one a model) add up; the KV use is their
/// largest.
pub fn parse_metrics(text: &str) -> Option<Scrape> {
    let mut s = Scrape::default();
    let mut seen = false;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let (name_labels, value) = match line.rsplit_once(' ') {
            Some(p) => p,
            None => continue,
        };
        let name = name_labels.split('{').next().unwrap_or("");
        let Ok(v) = value.trim().parse::<f64>() else { continue };
        match name {
            "vllm:num_requests_waiting" => {
                s.waiting += v;
                seen = true;
            }
            "vllm:num_requests_running" => s.running += v,
            // vLLM before 0.10 named it gpu_cache_usage_perc
            "vllm:kv_cache_usage_perc" | "vllm:gpu_cache_usage_perc" => s.kv_usage = s.kv_usage.max(v),
            _ => {}
        }
    }
    seen.then_some(s)
}

/// Each candidate's weighted score (None: no candidate, its scrape stale or
/// failed), as GIE's default profile sums them.
pub fn scores(c: &[Option<Scrape>]) -> Vec<Option<f64>> {
    let live = c.iter().flatten();
    let min_q = live.clone().map(|s| s.waiting).fold(f64::INFINITY, f64::min);
    let max_q = live.map(|s| s.waiting).fold(f64::NEG_INFINITY, f64::max);
    c.iter()
        .map(|s| {
            s.map(|s| {
                let queue = if max_q == min_q { 1.0 } else { (max_q - s.waiting) / (max_q - min_q) };
                let kv = 1.0 - s.kv_usage;
                QUEUE_WEIGHT * queue + KV_WEIGHT * kv
            })
        })
        .collect()
}

/// The index of the highest score, ties broken at random; None when no
/// candidate is live.
pub fn pick<R: Rng>(c: &[Option<Scrape>], rng: &mut R) -> Option<usize> {
    let s = scores(c);
    let best = s.iter().flatten().copied().fold(f64::NEG_INFINITY, f64::max);
    let top: Vec<usize> = s.iter().enumerate().filter(|(_, v)| **v == Some(best)).map(|(i, _)| i).collect();
    if top.is_empty() {
        return None;
    }
    Some(top[rng.gen_range(0..top.len())])
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, SeedableRng};

    fn s(waiting: f64, kv: f64) -> Option<Scrape> {
        Some(Scrape { waiting, running: 0.0, kv_usage: kv })
    }

    #[test]
    fn the_shortest_queue_wins() {
        let mut r = SmallRng::seed_from_u64(1);
        for _ in 0..50 {
            assert_eq!(pick(&[s(3.0, 0.1), s(0.0, 0.1), s(5.0, 0.1)], &mut r), Some(1));
        }
    }

    #[test]
    fn queue_score_is_min_max_normalised_and_kv_is_one_minus_use() {
        let v = scores(&[s(4.0, 0.5), s(0.0, 0.0), s(2.0, 1.0)]);
        assert_eq!(v, vec![Some(0.0 + 1.0), Some(2.0 + 2.0), Some(1.0 + 0.0)]);
    }

    #[test]
    fn equal_queues_score_one_each_and_kv_decides() {
        let v = scores(&[s(2.0, 0.4), s(2.0, 0.2)]);
        assert_eq!(v, vec![Some(2.0 + 1.2), Some(2.0 + 1.6)]);
        let mut r = SmallRng::seed_from_u64(2);
        assert_eq!(pick(&[s(2.0, 0.4), s(2.0, 0.2)], &mut r), Some(1));
    }

    #[test]
    fn kv_use_can_outweigh_a_queue_as_in_gie() {
        // one more waiting (queue score 0.9 against 1, the range set by a
        // third's 10) but a far emptier cache
        let mut r = SmallRng::seed_from_u64(3);
        assert_eq!(pick(&[s(0.0, 0.9), s(1.0, 0.0), s(10.0, 0.0)], &mut r), Some(1));
        // with two, a queue's whole range (2) is the KV's whole range: the shorter queue wins
        assert_eq!(pick(&[s(0.0, 0.9), s(1.0, 0.0)], &mut r), Some(0));
    }

    #[test]
    fn ties_are_broken_at_random_among_the_best_only() {
        let mut r = SmallRng::seed_from_u64(4);
        let c = [s(0.0, 0.0), s(1.0, 0.0), s(0.0, 0.0), s(0.0, 0.0)];
        let mut hits = [0u32; 4];
        for _ in 0..4000 {
            hits[pick(&c, &mut r).unwrap()] += 1;
        }
        assert_eq!(hits[1], 0);
        for i in [0, 2, 3] {
            assert!(hits[i] > 1000, "{hits:?}");
        }
    }

    #[test]
    fn stale_endpoints_are_no_candidates_and_none_live_is_no_pick() {
        let mut r = SmallRng::seed_from_u64(5);
        assert_eq!(pick(&[None, s(9.0, 0.9), None], &mut r), Some(1));
        assert_eq!(pick(&[None, None], &mut r), None);
        assert_eq!(pick(&[], &mut r), None);
        // a stale endpoint's old numbers do not set the queue's range
        assert_eq!(scores(&[None, s(3.0, 0.0), s(3.0, 0.0)])[1], Some(4.0));
    }

    #[test]
    fn parses_vllm_metrics_and_rejects_what_is_not_a_model_server() {
        let text = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 4\n\
                    vllm:num_requests_waiting{model_name=\"m\"} 7\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n\
                    vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.1\"} 3\n";
        assert_eq!(parse_metrics(text), Some(Scrape { waiting: 7.0, running: 4.0, kv_usage: 0.25 }));
        assert_eq!(parse_metrics("huntlb_busy 3\n"), None);
        assert_eq!(parse_metrics("vllm:num_requests_waiting 2\nvllm:gpu_cache_usage_perc 0.5\n"),
                   Some(Scrape { waiting: 2.0, running: 0.0, kv_usage: 0.5 }));
    }
}
