//! The load of a model server in seats (`load = "llm"`): what it is bound by,
//! in the unit `workers` counts, so the policy's threshold and the forwarding
//! tier's peer counts compare it as they compare requests in flight.
//!
//! ```text
//!  load = requests in flight + ⌈ prompt tokens still in prefill / tokens_per_seat ⌉
//!                                 └─ each request's Content-Length / bytes_per_token (rounded up),
//!                                    at most workers × tokens_per_seat, until its first response byte
//! ```
//!
//! A request counts 1 for its place in the batch from the moment it reaches
//! the server, and its prompt's weight until its first response byte arrives
//! (the prefill is done: a stream's first token). The prompt is estimated from
//! the request's size, without reading its body: an agent that parsed JSON
//! would pay for it on every request and trust what it parsed. Integers only,
//! so every host computes the same number.

/// The weights, validated once (the agent's `llm_bytes_per_token`,
/// `llm_prefill_tokens_per_seat`, and `workers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlmWeights {
    /// Body bytes per prompt token (4: about English text, and what the
    /// emulator `huntlb-llm` counts).
    pub bytes_per_token: u32,
    /// Prompt tokens waiting for prefill that weigh as much as one running sequence.
    pub tokens_per_seat: u32,
    /// The server's seats (`max_num_seqs`): one request's prompt weighs at
    /// most this many, so a forged Content-Length makes one request look like
    /// a full server, never more.
    pub workers: u32,
}

impl LlmWeights {
    /// The prompt tokens a request of this Content-Length is counted for while
    /// it waits for prefill: ⌈length / bytes_per_token⌉, at most
    /// `workers × tokens_per_seat`. No length (a chunked body, or none): 0,
    /// the request counts only its seat.
    pub fn prompt_tokens(&self, content_length: Option<u64>) -> u64 {
        let Some(len) = content_length else { return 0 };
        let cap = u64::from(self.workers) * u64::from(self.tokens_per_seat.max(1));
        len.div_ceil(u64::from(self.bytes_per_token.max(1))).min(cap)
    }

    /// The prefill backlog in seats: ⌈tokens / tokens_per_seat⌉ (rounded up,
    /// so any backlog counts, and a server with one is never taken for idle).
    pub fn prefill_seats(&self, pending_tokens: u64) -> u32 {
        u32::try_from(pending_tokens.div_ceil(u64::from(self.tokens_per_seat.max(1)))).unwrap_or(u32::MAX)
    }

    /// The load `b`: requests in flight plus the prefill backlog in seats,
    /// saturating at `u32::MAX`.
    pub fn load(&self, inflight: u32, pending_tokens: u64) -> u32 {
        inflight.saturating_add(self.prefill_seats(pending_tokens))
    }
}

/// The front's own count here (`seen`, what `forward_seen_margin` compares
/// with), kept only while this server has a free seat: `busy` (the load `b`,
/// this try not counted) below `workers`. At or past it, None: the tier
/// decides the try by the peers' counts alone, whatever its front saw.
///
/// Why: `forward_seen_margin` keeps a try whose front chose knowingly (this
/// load is the front's own), which with one front is every try. A picker
/// that scores prefixes chooses knowingly to queue behind a cache: with
/// prompts waiting for a seat here and a seat free elsewhere, the wait costs
/// more than the cache saves (one prefix-scoring picker over agents without
/// this rule: TTFT p90 up to 5 times least-request's on the same requests;
/// with it, a tie: docs/llm.md § 8). With a seat free the front's count
/// still decides, and the cache hits the picker buys stay where it sent them.
pub fn seen_while_free(busy: u32, workers: u32, seen: Option<u32>) -> Option<u32> {
    seen.filter(|_| busy < workers)
}

/// KV-cache use in parts per `KV_SCALE`: vLLM's `vllm:kv_cache_usage_perc`
/// (a fraction, 0 to 1) × 10 000, rounded to the nearest. Fixed point, so the
/// rule below compares integers and every host decides alike; 1/10 000 is
/// finer than any block count a server has a use for (27 500 blocks: 0.36 each).
pub const KV_SCALE: u32 = 10_000;

/// A sample's value as parts per `KV_SCALE`, or None for a value no KV use
/// can be: NaN, infinite, below 0 or above 1 (a broken or hostile page).
pub fn kv_fixed(v: f64) -> Option<u32> {
    (v.is_finite() && (0.0..=1.0).contains(&v)).then(|| (v * f64::from(KV_SCALE)).round() as u32)
}

/// The KV-cache rule (`llm_metrics_url`, `llm_kv_busy_at`): a server whose KV
/// cache is at or past `busy_at` counts as full, whatever its counts say.
///
/// ```text
///  b' = max(b, workers)   while the last read is at most stale_ms old and its use ≥ busy_at
///  b' = b                 otherwise (no read yet, a read too old, or use below the bound)
/// ```
///
/// Why: the counts see requests, not their lengths. A few long generations
/// can hold a server's whole KV cache with seats to spare by count; a new
/// request there waits for blocks (vLLM admits a prompt only when its blocks
/// fit) or makes the server preempt one that runs (recomputed from scratch).
/// Full, not a weight: `workers` is the load at which the policy refuses and
/// peers see no room, so offers go elsewhere while the cache is full, and the
/// count-based load takes over the moment it is not (or the read is stale: a
/// page that stops answering says nothing about the cache now).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvBound {
    /// KV use (parts per `KV_SCALE`, 1 to `KV_SCALE`) at and above which the server is full.
    pub busy_at: u32,
    /// A read older than this (ms) is ignored.
    pub stale_ms: u64,
}

impl KvBound {
    /// Is the server full by its KV cache? `read`: the last good read (parts
    /// per `KV_SCALE`) and its age in ms; None: no good read yet.
    pub fn full(&self, read: Option<(u32, u64)>) -> bool {
        read.is_some_and(|(use_, age_ms)| age_ms <= self.stale_ms && use_ >= self.busy_at)
    }

    /// The load with the KV rule: `b`, or at least `workers` while full.
    pub fn load(&self, b: u32, workers: u32, read: Option<(u32, u64)>) -> u32 {
        if self.full(read) {
            b.max(workers)
        } else {
            b
        }
    }
}

#[cfg(test)]
mod tests;
