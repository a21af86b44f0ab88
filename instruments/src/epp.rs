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
//! * prefix-cache-scorer (weight 3): off unless `huntlb-epp --prefix-scorer`
//!   (then Envoy's ext_authz sends the request body with the check); off, it
//!   adds 0 to every endpoint, as GIE's does on prompts that share no prefix.
//!   On, [`PrefixIndex`] and [`hash_prompt`] below copy GIE's approximate
//!   prefix index (see "The prefix-cache-scorer" there);
//! * max-score-picker: the highest weighted sum, ties broken at random
//!   (GIE shuffles the candidates before a stable sort).
//!
//! An endpoint whose last good scrape is older than the staleness bound (GIE's
//! `DefaultMetricsStalenessThreshold`, 2 s, pkg/epp/server/runserver.go) is no
//! candidate: GIE marks such metrics stale; dropping the endpoint is this
//! picker's choice.
//!
//! # The prefix-cache-scorer
//!
//! Read at GIE v1.4.0 (commit 6e787dd396f0228c31cf6fc5187a13c6b4991a0b, the
//! first tag whose `pkg/epp/config/loader/defaults.go` holds the weights
//! above), `pkg/epp/framework/plugins/scheduling/scorer/prefix/plugin.go` and
//! `indexer.go` (v1.3 and earlier: `.../plugins/multi/prefix/`; the same
//! algorithm). What GIE does, and this copies:
//!
//! * the user input: a completion's `prompt`; a chat's `messages` marshalled
//!   back to JSON (`getUserInputBytes`: roles and contents, in order);
//! * cut into blocks of `block size tokens x 4` characters (bytes), 16 tokens
//!   (vLLM's block) unless the server's `vllm:cache_config_info` names its
//!   `block_size` (AutoTune, GIE's default; the first candidate's); at most
//!   256 blocks (`DefaultMaxPrefixBlocks`), a last partial block dropped, an
//!   input shorter than one block no blocks;
//! * hashed with XXH64 (cespare/xxhash), chained: block 0's seed is the hash
//!   of the model name (and `cache_salt`), block i hashes its bytes then
//!   block i-1's hash (8 bytes little-endian) (`hashPrompt`);
//! * per server an LRU of block hashes, of `vllm:cache_config_info`'s
//!   `num_gpu_blocks` entries when the server says (AutoTune), else 31,250
//!   (`DefaultLRUCapacityPerServer`), sized when the server is first
//!   recorded; an eviction removes the server from that hash's holders;
//! * the match (`matchLongestPrefix`): walk the request's hashes in order,
//!   stop at the first no server holds, and count one for each server that
//!   holds each hash before it; the score is that count over the request's
//!   blocks (0 when it has none);
//! * after the pick (GIE's `PreRequest`), the request's hashes are recorded
//!   for the picked server (touching them in its LRU).
//!
//! Simplified, and why: GIE records asynchronously after the pick (a
//! goroutine); here it is done in the same step as the pick, one lock held
//! (a later request never misses an earlier one's record, which GIE's may
//! for microseconds). GIE fills a server's LRU with all of a request's
//! hashes before adding holders, so a request of more blocks than the LRU
//! holds leaves stale holders; here each hash is added then its holder (256
//! blocks against LRUs of thousands: never met). GIE's P/D prefill profile,
//! its idle-pod clean-up (every 2 min; the pickers' servers are fixed here)
//! and the Responses/Conversations APIs are left out. A body that does not
//! parse (not JSON, no string `prompt`, no `messages` array, or cut short
//! by Envoy's `max_request_bytes`) has no blocks: every server scores 0 and
//! the other scorers pick; GIE fails such a request instead.
//!
//! Trust and cost: the body is the client's, untrusted: parsed by serde_json
//! within the bin's size limit, at most 256 blocks hashed. A client can fill
//! the LRUs with prefixes of its own (bounded: capacity x servers entries)
//! or send one prefix to draw others after it, as against GIE; the queue and
//! KV scorers (weight 4 together against 3) still weigh load. Per request:
//! 256 hashes of 64 bytes and 256 map lookups at most, then one score per
//! server; memory about 100 bytes an entry, 31,250 entries a server by
//! default: ~3 MB at 10 servers, 30 MB at 100, 300 MB at 1000 (GIE's the same
//! order).

use rand::Rng;
use std::collections::{BTreeMap, HashMap};

/// GIE's default weights (pkg/epp/config/loader/defaults.go).
pub const QUEUE_WEIGHT: f64 = 2.0;
pub const KV_WEIGHT: f64 = 2.0;
pub const PREFIX_WEIGHT: f64 = 3.0;
/// GIE's prefix plugin constants (prefix/plugin.go).
pub const DEFAULT_BLOCK_SIZE_TOKENS: usize = 16;
pub const CHARS_PER_TOKEN: usize = 4;
pub const MAX_PREFIX_BLOCKS: usize = 256;
pub const DEFAULT_LRU_CAPACITY_PER_SERVER: usize = 31_250;

/// What one scrape of a model server's `/metrics` says.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Scrape {
    pub waiting: f64,
    pub running: f64,
    pub kv_usage: f64,
    /// `vllm:cache_config_info`'s `block_size` and `num_gpu_blocks` labels
    /// (0: not given), what GIE's AutoTune sizes the prefix index by.
    pub block_size: u32,
    pub num_gpu_blocks: u32,
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
            "vllm:cache_config_info" => {
                let labels = name_labels.split_once('{').map_or("", |(_, l)| l.trim_end_matches('}'));
                s.block_size = label(labels, "block_size").and_then(|v| v.parse().ok()).unwrap_or(0);
                s.num_gpu_blocks = label(labels, "num_gpu_blocks").and_then(|v| v.parse().ok()).unwrap_or(0);
            }
            _ => {}
        }
    }
    seen.then_some(s)
}

/// A label's value in a Prometheus label set (`a="1",b="2"`), no escapes.
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|kv| kv.trim().strip_prefix(key)?.strip_prefix("=\"")?.strip_suffix('"'))
}

/// Each candidate's weighted score (None: no candidate, its scrape stale or
/// failed), as GIE's default profile sums them, the prefix scorer left out.
pub fn scores(c: &[Option<Scrape>]) -> Vec<Option<f64>> {
    scores_with(c, &[])
}

/// The same with the prefix-cache-scorer's score per candidate (0 to 1,
/// [`prefix_scores`]; missing ones 0).
pub fn scores_with(c: &[Option<Scrape>], prefix: &[f64]) -> Vec<Option<f64>> {
    let live = c.iter().flatten();
    let min_q = live.clone().map(|s| s.waiting).fold(f64::INFINITY, f64::min);
    let max_q = live.map(|s| s.waiting).fold(f64::NEG_INFINITY, f64::max);
    c.iter()
        .enumerate()
        .map(|(i, s)| {
            s.map(|s| {
                let queue = if max_q == min_q { 1.0 } else { (max_q - s.waiting) / (max_q - min_q) };
                let kv = 1.0 - s.kv_usage;
                QUEUE_WEIGHT * queue + KV_WEIGHT * kv + PREFIX_WEIGHT * prefix.get(i).copied().unwrap_or(0.0)
            })
        })
        .collect()
}

/// The index of the highest score, ties broken at random; None when no
/// candidate is live.
pub fn pick<R: Rng>(c: &[Option<Scrape>], rng: &mut R) -> Option<usize> {
    pick_with(c, &[], rng)
}

/// [`pick`] with the prefix-cache-scorer's scores.
pub fn pick_with<R: Rng>(c: &[Option<Scrape>], prefix: &[f64], rng: &mut R) -> Option<usize> {
    let s = scores_with(c, prefix);
    let best = s.iter().flatten().copied().fold(f64::NEG_INFINITY, f64::max);
    let top: Vec<usize> = s.iter().enumerate().filter(|(_, v)| **v == Some(best)).map(|(i, _)| i).collect();
    if top.is_empty() {
        return None;
    }
    Some(top[rng.gen_range(0..top.len())])
}

/// XXH64 (the hash GIE's prefix plugin takes from cespare/xxhash, seed 0 there).
pub fn xxh64(input: &[u8], seed: u64) -> u64 {
    const P1: u64 = 0x9E37_79B1_85EB_CA87;
    const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    const P3: u64 = 0x1656_67B1_9E37_79F9;
    const P4: u64 = 0x85EB_CA77_C2B2_AE63;
    const P5: u64 = 0x27D4_EB2F_1656_67C5;
    fn round(acc: u64, lane: u64) -> u64 {
        acc.wrapping_add(lane.wrapping_mul(P2)).rotate_left(31).wrapping_mul(P1)
    }
    fn merge(acc: u64, v: u64) -> u64 {
        (acc ^ round(0, v)).wrapping_mul(P1).wrapping_add(P4)
    }
    let u64_at = |b: &[u8]| u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let mut p = input;
    let mut h = if p.len() >= 32 {
        let mut v = [seed.wrapping_add(P1).wrapping_add(P2), seed.wrapping_add(P2), seed, seed.wrapping_sub(P1)];
        while p.len() >= 32 {
            for (k, lane) in v.iter_mut().enumerate() {
                *lane = round(*lane, u64_at(&p[8 * k..]));
            }
            p = &p[32..];
        }
        let mut h = v[0].rotate_left(1).wrapping_add(v[1].rotate_left(7)).wrapping_add(v[2].rotate_left(12)).wrapping_add(v[3].rotate_left(18));
        for lane in v {
            h = merge(h, lane);
        }
        h
    } else {
        seed.wrapping_add(P5)
    };
    h = h.wrapping_add(input.len() as u64);
    while p.len() >= 8 {
        h = (h ^ round(0, u64_at(p))).rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
        p = &p[8..];
    }
    if p.len() >= 4 {
        let k = u32::from_le_bytes(p[..4].try_into().expect("4 bytes")) as u64;
        h = (h ^ k.wrapping_mul(P1)).rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
        p = &p[4..];
    }
    for &b in p {
        h = (h ^ (b as u64).wrapping_mul(P5)).rotate_left(11).wrapping_mul(P1);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
}

/// What GIE's prefix plugin reads of an OpenAI request body: (model,
/// cache_salt, user input), or None when it is neither a completion with a
/// string `prompt` nor a chat with a `messages` array (`getUserInputBytes`).
/// A chat's input is its messages marshalled back to JSON, `role` then
/// `content` as Go's encoding/json writes GIE's Message struct.
pub fn user_input(body: &[u8]) -> Option<(String, String, Vec<u8>)> {
    use serde_json::Value;
    let v: Value = serde_json::from_slice(body).ok()?;
    let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let input = if let Some(msgs) = v.get("messages") {
        let mut out = Vec::with_capacity(body.len());
        out.push(b'[');
        for (i, m) in msgs.as_array()?.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.push(b'{');
            let role = m.get("role").and_then(Value::as_str).unwrap_or("");
            if !role.is_empty() {
                out.extend_from_slice(b"\"role\":");
                out.extend_from_slice(Value::from(role).to_string().as_bytes());
            }
            match m.get("content") {
                None | Some(Value::Null) => {}
                Some(c) => {
                    if !role.is_empty() {
                        out.push(b',');
                    }
                    out.extend_from_slice(b"\"content\":");
                    out.extend_from_slice(c.to_string().as_bytes());
                }
            }
            out.push(b'}');
        }
        out.push(b']');
        out
    } else {
        v.get("prompt")?.as_str()?.as_bytes().to_vec()
    };
    Some((text("model"), text("cache_salt"), input))
}

/// GIE's `hashPrompt`: the input cut into blocks of `block_chars` bytes (at
/// most `max_blocks`, a last partial block dropped), each block's XXH64 taken
/// over its bytes then the previous block's hash (little-endian); block 0's
/// "previous" is the hash of the model name and salt.
pub fn hash_prompt(model: &str, salt: &str, input: &[u8], block_chars: usize, max_blocks: usize) -> Vec<u64> {
    if block_chars == 0 || input.len() < block_chars {
        return Vec::new();
    }
    let input = &input[..input.len().min(block_chars * max_blocks)];
    let mut prev = xxh64(&[model.as_bytes(), salt.as_bytes()].concat(), 0);
    let mut buf = Vec::with_capacity(block_chars + 8);
    input
        .chunks_exact(block_chars)
        .map(|block| {
            buf.clear();
            buf.extend_from_slice(block);
            buf.extend_from_slice(&prev.to_le_bytes());
            prev = xxh64(&buf, 0);
            prev
        })
        .collect()
}

/// One server's LRU of block hashes (GIE: hashicorp/golang-lru per pod).
#[derive(Debug)]
struct Lru {
    cap: usize,
    tick: u64,
    at: HashMap<u64, u64>,
    order: BTreeMap<u64, u64>,
}

impl Lru {
    /// Adds or refreshes `h`; the hash it evicted, if any.
    fn touch(&mut self, h: u64) -> Option<u64> {
        self.tick += 1;
        if let Some(old) = self.at.insert(h, self.tick) {
            self.order.remove(&old);
            self.order.insert(self.tick, h);
            return None;
        }
        self.order.insert(self.tick, h);
        if self.at.len() > self.cap {
            let (_, gone) = self.order.pop_first().expect("over capacity: not empty");
            self.at.remove(&gone);
            return Some(gone);
        }
        None
    }
}

/// GIE's approximate prefix index (prefix/indexer.go): which servers may hold
/// each block hash, an LRU of hashes per server.
#[derive(Debug)]
pub struct PrefixIndex {
    lrus: Vec<Option<Lru>>,
    holders: HashMap<u64, Vec<u32>>,
}

impl PrefixIndex {
    pub fn new(servers: usize) -> Self {
        PrefixIndex { lrus: (0..servers).map(|_| None).collect(), holders: HashMap::new() }
    }

    /// GIE's `matchLongestPrefix`: per server, the blocks it holds among the
    /// request's leading blocks that some server holds.
    pub fn matched(&self, hashes: &[u64]) -> Vec<usize> {
        let mut m = vec![0; self.lrus.len()];
        for h in hashes {
            match self.holders.get(h) {
                Some(s) if !s.is_empty() => s.iter().for_each(|&i| m[i as usize] += 1),
                _ => break,
            }
        }
        m
    }

    /// GIE's `PreRequest`: the request's hashes recorded for the server it was
    /// sent to, the server's LRU made of `capacity` entries (0: GIE's default)
    /// the first time.
    pub fn record(&mut self, hashes: &[u64], server: usize, capacity: usize) {
        let cap = if capacity == 0 { DEFAULT_LRU_CAPACITY_PER_SERVER } else { capacity };
        let lru = self.lrus[server].get_or_insert_with(|| Lru { cap, tick: 0, at: HashMap::new(), order: BTreeMap::new() });
        for &h in hashes {
            if let Some(gone) = lru.touch(h) {
                if let Some(s) = self.holders.get_mut(&gone) {
                    s.retain(|&i| i as usize != server);
                    if s.is_empty() {
                        self.holders.remove(&gone);
                    }
                }
            }
            let s = self.holders.entry(h).or_default();
            if !s.contains(&(server as u32)) {
                s.push(server as u32);
            }
        }
    }

    /// Entries in a server's LRU.
    pub fn len(&self, server: usize) -> usize {
        self.lrus[server].as_ref().map_or(0, |l| l.at.len())
    }
}

/// The prefix-cache-scorer's score per server: matched blocks over the
/// request's blocks, 0 for all when it has none.
pub fn prefix_scores(matched: &[usize], total: usize) -> Vec<f64> {
    matched.iter().map(|&m| if total == 0 { 0.0 } else { m as f64 / total as f64 }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, SeedableRng};

    fn s(waiting: f64, kv: f64) -> Option<Scrape> {
        Some(Scrape { waiting, kv_usage: kv, ..Default::default() })
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
        assert_eq!(parse_metrics(text), Some(Scrape { waiting: 7.0, running: 4.0, kv_usage: 0.25, ..Default::default() }));
        assert_eq!(parse_metrics("huntlb_busy 3\n"), None);
        assert_eq!(parse_metrics("vllm:num_requests_waiting 2\nvllm:gpu_cache_usage_perc 0.5\n"),
                   Some(Scrape { waiting: 2.0, kv_usage: 0.5, ..Default::default() }));
    }

    #[test]
    fn reads_the_cache_config_gies_autotune_sizes_by() {
        let text = "vllm:num_requests_waiting 0\nvllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",num_gpu_blocks=\"3437\"} 1.0\n";
        let s = parse_metrics(text).unwrap();
        assert_eq!((s.block_size, s.num_gpu_blocks), (16, 3437));
        let s = parse_metrics("vllm:num_requests_waiting 0\nvllm:cache_config_info{num_gpu_blocks=\"None\"} 1\n").unwrap();
        assert_eq!((s.block_size, s.num_gpu_blocks), (0, 0));
    }

    #[test]
    fn xxh64_is_xxhash64() {
        // python's xxhash 4.1 (xxhash.xxh64(b).intdigest())
        assert_eq!(xxh64(b"", 0), 0xef46db3751d8e999);
        assert_eq!(xxh64(b"a", 0), 0xd24ec4f1a98c6e5b);
        assert_eq!(xxh64(b"abc", 0), 0x44bc2cf5ad770999);
        assert_eq!(xxh64(b"Nobody inspects the spammish repetition", 0), 0xfbcea83c8a378bf1);
        assert_eq!(xxh64(&(0..200u8).collect::<Vec<_>>(), 0), 0x50dc1079b99e879c);
    }

    const BLOCK: usize = DEFAULT_BLOCK_SIZE_TOKENS * CHARS_PER_TOKEN;

    fn text(blocks: &[&str]) -> Vec<u8> {
        // one 64-byte block per name
        blocks.iter().flat_map(|b| format!("{b:-<64}").into_bytes()).collect()
    }

    #[test]
    fn block_hashes_are_chained_as_gies() {
        // the chain GIE's hashPrompt gives (model "m", no salt), computed with
        // python's xxhash: xxh64(block + prev.to_bytes(8, "little"))
        let input = [b"0123456789abcdef".repeat(8), b"tail".to_vec()].concat();
        assert_eq!(hash_prompt("m", "", &input, BLOCK, MAX_PREFIX_BLOCKS), vec![0xbf975c093687c5f3, 0x684b012a0ee471a8]);
        // a block's hash depends on every block before it, and on the model
        let a = hash_prompt("m", "", &text(&["x", "same"]), BLOCK, 256);
        let b = hash_prompt("m", "", &text(&["y", "same"]), BLOCK, 256);
        assert_ne!(a[1], b[1]);
        assert_ne!(hash_prompt("other", "", &text(&["x"]), BLOCK, 256)[0], a[0]);
        assert_ne!(hash_prompt("m", "salt", &text(&["x"]), BLOCK, 256)[0], a[0]);
        // shorter than a block: nothing; longer than the cap: cut
        assert!(hash_prompt("m", "", &[b'z'; BLOCK - 1], BLOCK, 256).is_empty());
        assert_eq!(hash_prompt("m", "", &[b'z'; BLOCK * 300], BLOCK, 256).len(), 256);
    }

    #[test]
    fn the_score_is_the_leading_blocks_a_server_holds_over_the_prompts() {
        let mut ix = PrefixIndex::new(3);
        let warm = hash_prompt("", "", &text(&["sys", "tem", "q1", "a"]), BLOCK, 256);
        ix.record(&warm, 1, 0);
        // same two leading blocks, then another question: 2 of 5 blocks
        let req = hash_prompt("", "", &text(&["sys", "tem", "q2", "b", "c"]), BLOCK, 256);
        assert_eq!(ix.matched(&req), vec![0, 2, 0]);
        assert_eq!(prefix_scores(&ix.matched(&req), req.len()), vec![0.0, 0.4, 0.0]);
        // a prompt starting elsewhere matches nothing, even where a later block is the same bytes
        let other = hash_prompt("", "", &text(&["zzz", "tem"]), BLOCK, 256);
        assert_eq!(ix.matched(&other), vec![0, 0, 0]);
        // no blocks: 0 for all
        assert_eq!(prefix_scores(&[0, 0], 0), vec![0.0, 0.0]);
        // two holders of the first block, one of the second: the walk counts each
        ix.record(&req[..1], 2, 0);
        assert_eq!(ix.matched(&req), vec![0, 2, 1]);
    }

    #[test]
    fn each_servers_lru_evicts_its_least_recent_hash() {
        let mut ix = PrefixIndex::new(2);
        let h = hash_prompt("", "", &text(&["a", "b", "c", "d"]), BLOCK, 256);
        ix.record(&h[..2], 0, 3); // a b
        ix.record(&h[..1], 0, 3); // a touched: b is the least recent
        ix.record(&h[2..3], 0, 3); // c: a b c, full
        ix.record(&h[3..4], 0, 3); // d evicts b
        assert_eq!(ix.len(0), 3);
        // b gone: the walk stops after a
        assert_eq!(ix.matched(&h), vec![1, 0]);
        // the capacity is set when the server is first recorded (0: GIE's default)
        ix.record(&h, 1, 0);
        // GIE's walk stops only at a block no server holds: with b at server
        // 1, server 0 counts for c and d again (3 of 4), as in GIE
        assert_eq!(ix.matched(&h), vec![3, 4]);
        ix.record(&hash_prompt("", "", &[b'q'; BLOCK * 256], BLOCK, 256), 1, 2);
        assert_eq!(ix.len(1), 4 + 256);
    }

    #[test]
    fn the_pick_is_recorded_and_draws_the_prefix_back_while_queues_are_level() {
        let mut r = SmallRng::seed_from_u64(6);
        let mut ix = PrefixIndex::new(4);
        let c = [s(1.0, 0.1), s(1.0, 0.1), s(1.0, 0.1), s(1.0, 0.1)];
        let first = hash_prompt("", "", &text(&["system", "prompt", "q0"]), BLOCK, 256);
        let i = pick_with(&c, &prefix_scores(&ix.matched(&first), first.len()), &mut r).unwrap();
        ix.record(&first, i, 0);
        for q in 1..20 {
            let name = format!("q{q}");
            let h = hash_prompt("", "", &text(&["system", "prompt", &name]), BLOCK, 256);
            let p = prefix_scores(&ix.matched(&h), h.len());
            assert_eq!(pick_with(&c, &p, &mut r), Some(i));
            ix.record(&h, i, 0);
        }
        // half of a prompt's blocks warm (3 x 1/2 = 1.5): it wins while queues are level...
        let h = hash_prompt("", "", &text(&["system", "prompt", "q99", "more"]), BLOCK, 256);
        let p = prefix_scores(&ix.matched(&h), h.len());
        assert_eq!(p[i], 0.5);
        assert_eq!(pick_with(&c, &p, &mut r), Some(i));
        // ...but not with one waiting more than the rest (queue 0 against 1, x 2)
        let mut busy = c;
        busy[i] = s(2.0, 0.1);
        let v = scores_with(&busy, &p);
        assert!((v[i].unwrap() - (0.0 + 1.8 + 1.5)).abs() < 1e-9, "{v:?}");
        for _ in 0..20 {
            assert_ne!(pick_with(&busy, &p, &mut r), Some(i));
        }
    }

    #[test]
    fn reads_the_user_input_as_gie_does_and_nothing_from_other_bodies() {
        let (m, salt, input) = user_input(br#"{"model":"llama","prompt":"hello","max_tokens":3}"#).unwrap();
        assert_eq!((m.as_str(), salt.as_str(), input.as_slice()), ("llama", "", &b"hello"[..]));
        let (_, salt, input) =
            user_input(br#"{"messages":[{"role":"system","content":"be \"brief\""},{"content":"hi","role":"user"}],"cache_salt":"s1"}"#).unwrap();
        assert_eq!(salt, "s1");
        assert_eq!(String::from_utf8(input).unwrap(), r#"[{"role":"system","content":"be \"brief\""},{"role":"user","content":"hi"}]"#);
        for bad in [&b"not json"[..], br#"{"prompt":["a","b"]}"#, br#"{"messages":"x"}"#, br#"{"max_tokens":3}"#, br#"{"prompt":"cut sh"#] {
            assert_eq!(user_input(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
