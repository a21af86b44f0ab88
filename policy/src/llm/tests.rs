use super::*;

const W: LlmWeights = LlmWeights { bytes_per_token: 4, tokens_per_seat: 512, workers: 4 };

const K: KvBound = KvBound { busy_at: 9500, stale_ms: 1750 };

#[test]
fn kv_values_are_fixed_point_and_impossible_ones_rejected() {
    assert_eq!([0.0, 0.95, 0.123449, 0.12345, 1.0].map(kv_fixed), [Some(0), Some(9500), Some(1234), Some(1235), Some(10_000)]);
    for bad in [f64::NAN, f64::INFINITY, -0.0001, 1.0001, 2.0, -1.0] {
        assert_eq!(kv_fixed(bad), None, "{bad}");
    }
}

#[test]
fn a_fresh_read_at_the_bound_makes_the_server_full_and_a_stale_one_is_ignored() {
    assert_eq!(K.load(1, 4, Some((9500, 0))), 4);
    assert_eq!(K.load(1, 4, Some((10_000, 1750))), 4);
    assert_eq!(K.load(6, 4, Some((9999, 10))), 6); // never lowers b
    assert_eq!(K.load(1, 4, Some((9499, 0))), 1);
    assert_eq!(K.load(1, 4, Some((10_000, 1751))), 1); // stale: the counts alone
    assert_eq!(K.load(1, 4, None), 1);
}

#[test]
fn a_prompt_weighs_its_tokens_rounded_up_and_capped_at_the_servers_seats() {
    assert_eq!(W.prompt_tokens(None), 0);
    assert_eq!(W.prompt_tokens(Some(0)), 0);
    assert_eq!(W.prompt_tokens(Some(1)), 1);
    assert_eq!(W.prompt_tokens(Some(8192)), 2048);
    assert_eq!(W.prompt_tokens(Some(8193)), 2048); // 2049 tokens, past the cap of 4 × 512
    assert_eq!(W.prompt_tokens(Some(u64::MAX)), 2048);
}

#[test]
fn the_load_is_requests_plus_the_backlog_in_seats_rounded_up() {
    // the brief's example: a 2048-token prompt at 512 tokens a seat is 1 + 4 while it waits
    assert_eq!(W.load(1, W.prompt_tokens(Some(8192))), 5);
    assert_eq!(W.load(1, 0), 1);
    assert_eq!(W.load(2, 1), 3);
    assert_eq!(W.load(0, 513), 2);
    assert_eq!(W.load(u32::MAX, 1), u32::MAX);
    let huge = LlmWeights { bytes_per_token: 1, tokens_per_seat: 1, workers: u32::MAX };
    assert_eq!(huge.load(3, u64::MAX), u32::MAX);
}

#[test]
fn zero_weights_cannot_divide_by_zero() {
    let z = LlmWeights { bytes_per_token: 0, tokens_per_seat: 0, workers: 2 };
    assert_eq!((z.prompt_tokens(Some(10)), z.load(0, 5)), (2, 5));
}

#[test]
fn the_fronts_count_stands_only_while_a_seat_is_free() {
    assert_eq!(seen_while_free(3, 4, Some(3)), Some(3));
    assert_eq!(seen_while_free(0, 4, Some(0)), Some(0));
    // every seat taken, or waiting prompts weighing past them: the peers' counts decide
    for busy in [4, 5, 7, u32::MAX] {
        assert_eq!(seen_while_free(busy, 4, Some(busy)), None, "{busy}");
    }
    assert_eq!(seen_while_free(1, 4, None), None);
}
