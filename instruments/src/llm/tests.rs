//! The engine step by step: what a balancer in front of it would see.

use super::engine::{Engine, Step, Submit, BLOCK_TOKENS, BYTES_PER_TOKEN};
use super::LlmConfig;
use std::time::Duration;

fn prompt(tokens: usize, seed: u8) -> Vec<u8> {
    (0..tokens * BYTES_PER_TOKEN).map(|i| seed.wrapping_add((i % 251) as u8)).collect()
}

/// Steps until every sequence ended (bounded); the steps, and each
/// sequence's first-token time and end time.
fn run(e: &mut Engine) -> (Vec<Step>, std::collections::HashMap<u64, (Duration, Duration)>) {
    let (mut steps, mut t, mut at) = (Vec::new(), Duration::ZERO, std::collections::HashMap::new());
    for _ in 0..100_000 {
        if e.idle() {
            break;
        }
        let s = e.step();
        t += s.duration;
        for (id, idx) in &s.tokens {
            if *idx == 0 {
                at.insert(*id, (t, Duration::ZERO));
            }
        }
        for id in &s.finished {
            at.get_mut(id).expect("a first token before the end").1 = t;
        }
        steps.push(s);
    }
    assert!(e.idle(), "the engine drained");
    (steps, at)
}

#[test]
fn one_request_takes_prefill_then_a_token_a_step() {
    let mut e = Engine::new(LlmConfig::default());
    assert_eq!(e.submit(1, &prompt(256, 0), 4), Submit::Queued);
    let (steps, at) = run(&mut e);
    // a decode step and 256 x 0.04 ms of prefill (the server adds the request's 40 ms before)
    assert_eq!(steps[0].duration, Duration::from_micros(12_000 + 10_240));
    assert_eq!(steps.len(), 4);
    assert!(steps[1..].iter().all(|s| s.duration == Duration::from_millis(12)));
    assert_eq!(at[&1], (Duration::from_micros(22_240), Duration::from_micros(22_240 + 3 * 12_000)));
    let alone = super::engine::burst(&LlmConfig::default(), 1, 256, 4);
    // inside the published 60-120 ms TTFT of an 8B model on an H100
    assert_eq!(alone.ttft_p50, Duration::from_micros(62_240));
    assert_eq!(e.counters.generation_tokens, 4);
    assert_eq!(e.kv_usage(), 0.0);
}

#[test]
fn decode_steps_slow_down_with_the_batch_but_tokens_per_second_grow() {
    let cfg = LlmConfig { max_num_seqs: 64, ..LlmConfig::default() };
    let mut e = Engine::new(cfg);
    for id in 0..64 {
        e.submit(id, &prompt(16, id as u8), 50);
    }
    let (steps, _) = run(&mut e);
    let decode: Vec<&Step> = steps.iter().filter(|s| s.tokens.len() == 64).collect();
    let full = decode.last().expect("a step with all 64 decoding").duration;
    assert_eq!(full, Duration::from_millis(24)); // itl x load_factor at max_num_seqs
    let tps_full = 64.0 / full.as_secs_f64();
    let tps_one = 1.0 / 0.012;
    assert!(tps_full > 30.0 * tps_one, "{tps_full} tokens/s at 64 against {tps_one} at 1");
}

#[test]
fn a_queue_behind_full_seats_waits_for_a_seat() {
    let fresh = || {
        let mut e = Engine::new(LlmConfig { max_num_seqs: 2, ..LlmConfig::default() });
        for id in 1..=4 {
            e.submit(id, &prompt(32, id as u8), 10);
        }
        e
    };
    let mut e = fresh();
    assert_eq!(e.waiting(), 4);
    let first = e.step();
    assert_eq!((e.running(), e.waiting()), (2, 2));
    assert_eq!(first.tokens.len(), 2);
    let (_, at) = run(&mut fresh());
    // 3 and 4 start only when 1 and 2 ended: their first token after those ends
    let ends_12 = at[&1].1.max(at[&2].1);
    assert!(at[&3].0 > ends_12 && at[&4].0 > ends_12, "{at:?}");
}

#[test]
fn a_full_queue_refuses_as_vllm_max_num_queued_reqs_does() {
    let cfg = LlmConfig { max_queued: 2, ..LlmConfig::default() };
    let mut e = Engine::new(cfg);
    assert_eq!(e.submit(1, b"a", 1), Submit::Queued);
    assert_eq!(e.submit(2, b"b", 1), Submit::Queued);
    assert_eq!(e.submit(3, b"c", 1), Submit::Full);
    assert_eq!(e.counters.refused, 1);
    e.step(); // both admitted: the queue has room again
    assert_eq!(e.submit(4, b"d", 1), Submit::Queued);
}

#[test]
fn a_warm_prefix_skips_its_prefill() {
    let mut e = Engine::new(LlmConfig::default());
    let shared = prompt(1024, 7); // a long system prompt
    e.submit(1, &shared, 2);
    let (cold, _) = run(&mut e);
    let mut question = shared.clone();
    question.extend_from_slice(&prompt(16, 99)); // one more block: a new question
    e.submit(2, &question, 2);
    let (warm, _) = run(&mut e);
    assert_eq!(cold[0].duration, Duration::from_micros(12_000 + 1024 * 40));
    // only the question's 16 tokens are computed
    assert_eq!(warm[0].duration, Duration::from_micros(12_000 + 16 * 40));
    assert_eq!(e.counters.prefix_hits, 1024);
    assert_eq!(e.counters.prefix_queries, 1024 + 1040);
}

#[test]
fn the_prefix_cache_evicts_the_least_recently_used_when_blocks_are_needed() {
    // 100 blocks: two 40-block prompts fit as cache, a third evicts the older
    let cfg = LlmConfig { kv_blocks: 100, ..LlmConfig::default() };
    let mut e = Engine::new(cfg);
    let (a, b, c) = (prompt(40 * 16, 1), prompt(40 * 16, 2), prompt(40 * 16, 3));
    for (id, p) in [(1, &a), (2, &b), (3, &c)] {
        e.submit(id, p, 1);
        run(&mut e);
    }
    let hits = e.counters.prefix_hits;
    e.submit(4, &c, 1); // the newest: still cached
    run(&mut e);
    assert_eq!(e.counters.prefix_hits - hits, 40 * 16);
    let hits = e.counters.prefix_hits;
    e.submit(5, &a, 1); // the oldest: evicted
    run(&mut e);
    assert_eq!(e.counters.prefix_hits, hits);
}

#[test]
fn a_full_kv_cache_preempts_the_newest_and_every_request_still_ends() {
    // 20 blocks; 4 requests of 2-block prompts that grow to 6 blocks each
    let cfg = LlmConfig { kv_blocks: 20, ..LlmConfig::default() };
    let mut e = Engine::new(cfg);
    for id in 1..=4 {
        e.submit(id, &prompt(2 * BLOCK_TOKENS as usize, id as u8), 4 * BLOCK_TOKENS);
    }
    let (steps, at) = run(&mut e);
    assert!(e.counters.preemptions >= 1);
    assert_eq!(at.len(), 4);
    let per: u64 = steps.iter().map(|s| s.finished.len() as u64).sum();
    assert_eq!(per, 4);
    assert_eq!(e.kv_usage(), 0.0);
}

#[test]
fn an_abort_frees_the_seat_and_the_blocks() {
    let cfg = LlmConfig { max_num_seqs: 1, ..LlmConfig::default() };
    let mut e = Engine::new(cfg);
    e.submit(1, &prompt(64, 1), 1000);
    e.submit(2, &prompt(64, 2), 1);
    e.step();
    assert!(e.kv_usage() > 0.0);
    assert_eq!(e.waiting(), 1);
    e.abort(1);
    assert_eq!((e.running(), e.kv_usage()), (0, 0.0));
    let s = e.step();
    assert_eq!(s.tokens, vec![(2, 0)]);
    assert_eq!(e.counters.aborted, 1);
}

#[test]
fn a_request_that_can_never_fit_is_refused_not_queued() {
    let cfg = LlmConfig { kv_blocks: 4, ..LlmConfig::default() };
    let mut e = Engine::new(cfg);
    assert_eq!(e.submit(1, &prompt(64, 1), 1), Submit::TooLong);
    assert!(e.idle());
}

#[test]
fn settings_that_cannot_work_are_named() {
    assert!(LlmConfig::default().validate().is_ok());
    let bad = LlmConfig { max_num_seqs: 0, ..LlmConfig::default() };
    assert!(bad.validate().unwrap_err().contains("--max-num-seqs"));
    let bad = LlmConfig { load_factor: 0.5, ..LlmConfig::default() };
    assert!(bad.validate().unwrap_err().contains("--load-factor"));
}
