//! An emulated LLM model server (`huntlb-llm`): what a balancer in front of
//! vLLM meets, without a GPU. OpenAI-compatible `/v1/completions` and
//! `/v1/chat/completions` (SSE streaming or whole), continuous batching, a
//! prefix cache, a KV-cache capacity, vLLM's metric names on `/metrics`, and
//! vLLM's admission cap (`--max-num-queued-reqs`: 503 when the queue is full).
//!
//! The engine ([`engine`]) is a pure state machine; [`server`] drives it in
//! real time. The defaults model an 8B model in BF16 on one H100, from the
//! published figures collected in llm-d-inference-sim's
//! `docs/latency-defaults.md` (vLLM, MLPerf and vendor benchmarks) and vLLM's
//! own defaults; each constant says where it comes from.

pub mod engine;
pub mod server;

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct LlmConfig {
    /// Sequences running at once (vLLM `--max-num-seqs`, default 256).
    pub max_num_seqs: usize,
    /// Tokens one step may process, decode tokens first (vLLM `--max-num-batched-tokens`
    /// with chunked prefill; 2048 is vLLM V1's default for online serving).
    pub max_batched_tokens: u32,
    /// KV blocks of 16 tokens. 80 GB H100, 0.9 `--gpu-memory-utilization`, 16 GB of
    /// 8B weights: ~56 GB of KV at 128 KB a token (Llama-3 8B: 32 layers, 8 KV heads,
    /// head_dim 128, BF16) = ~440k tokens = 27500 blocks.
    pub kv_blocks: u32,
    /// Waiting requests past which new ones get 503 (vLLM `--max-num-queued-reqs`); 0: no cap.
    pub max_queued: usize,
    /// Inter-token latency with one sequence decoding (8B, H100, batch 1: 10-15 ms).
    pub itl: Duration,
    /// `itl` at `max_num_seqs` over `itl` at one, linear between (llm-d-inference-sim's
    /// `time-factor-under-load`: 1.5-2.0 latency-optimised, 2.5-3.5 throughput-optimised).
    pub load_factor: f64,
    /// Per uncached prompt token, in a step. Prefill is compute-bound: 2 FLOPs a
    /// parameter a token (16 GFLOP for 8B) at ~400 TFLOP/s (40% of an H100's
    /// 989 dense BF16) is 0.04 ms. (llm-d's 0.15-0.30 ms is a lone request's,
    /// overheads included, which `prefill_overhead` carries here.)
    pub prefill_per_token: Duration,
    /// A request's fixed cost before the engine sees it (HTTP, tokenising,
    /// scheduling): llm-d's `prefill-overhead`, 25-40 ms for 8B. It delays that
    /// request only, so a 256-token prompt alone lands at 40 + 12 + 10 = 62 ms,
    /// inside the published 60-120 ms TTFT of an 8B model on an H100.
    pub prefill_overhead: Duration,
    /// Scales every duration (0.1: ten times faster), for tests and small machines.
    pub time_scale: f64,
    pub model: String,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            max_num_seqs: 256,
            max_batched_tokens: 2048,
            kv_blocks: 27_500,
            max_queued: 0,
            itl: Duration::from_millis(12),
            load_factor: 2.0,
            prefill_per_token: Duration::from_micros(40),
            prefill_overhead: Duration::from_millis(40),
            time_scale: 1.0,
            model: "huntlb/emulated-8b".into(),
        }
    }
}

impl LlmConfig {
    /// Every duration scaled by `time_scale`.
    pub fn scaled(mut self) -> Self {
        let k = self.time_scale;
        self.itl = self.itl.mul_f64(k);
        self.prefill_per_token = self.prefill_per_token.mul_f64(k);
        self.prefill_overhead = self.prefill_overhead.mul_f64(k);
        self
    }

    /// Names the first setting that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_num_seqs == 0 {
            return Err("--max-num-seqs must be at least 1".into());
        }
        if self.max_batched_tokens == 0 {
            return Err("--max-num-batched-tokens must be at least 1".into());
        }
        if self.kv_blocks == 0 {
            return Err("--kv-blocks must be at least 1".into());
        }
        if !(self.load_factor >= 1.0 && self.load_factor.is_finite()) {
            return Err("--load-factor must be a number >= 1".into());
        }
        if !(self.time_scale > 0.0 && self.time_scale.is_finite()) {
            return Err("--time-scale must be a positive number".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
