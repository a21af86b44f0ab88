//! The emulated engine: vLLM's scheduler reduced to what a balancer can see,
//! as a pure state machine (no clock, no I/O), so its behaviour is tested
//! step by step and the HTTP side only sleeps each step's duration.
//!
//! ```text
//!  submit ──► waiting (FIFO; full at max_queued: refused, 503)
//!               │ a free seat (running < max_num_seqs) and KV blocks for the prompt
//!               ▼
//!  running: prefilling (chunks of the step's token budget; the cached prefix skipped)
//!               │ prompt done: first token at the end of that step (TTFT)
//!               ▼
//!           decoding: one token per step; a new KV block every BLOCK_TOKENS;
//!               │ no block free: the newest running sequence is preempted
//!               │ (its blocks freed, back to the head of waiting, recomputed)
//!               ▼
//!  finished (max_tokens) or aborted (the client left): blocks freed,
//!  its prompt's blocks stay in the prefix cache until evicted (LRU)
//! ```
//!
//! A step's duration: `itl(b) + prefilled_tokens × prefill_per_token`, where
//! `itl(b)` grows linearly from `itl` at one decoding sequence to
//! `itl × load_factor` at `max_num_seqs` (the constants: `LlmConfig`). A
//! request's fixed cost before the engine sees it (HTTP, tokenising:
//! `prefill_overhead`) is the server's, not a step's: it delays that request
//! only.

use super::LlmConfig;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// vLLM's KV block: 16 tokens (its default `--block-size`).
pub const BLOCK_TOKENS: u32 = 16;

pub type SeqId = u64;

/// What one step produced, for the driver to deliver once its duration passed.
#[derive(Debug, Default, PartialEq)]
pub struct Step {
    pub duration: Duration,
    /// (sequence, the index of the token it now has, 0 = its first).
    pub tokens: Vec<(SeqId, u32)>,
    /// Sequences that ended with this step's token.
    pub finished: Vec<SeqId>,
}

#[derive(Debug)]
struct Seq {
    id: SeqId,
    /// Hashes of the prompt's full blocks, chained (a block's hash covers all before it).
    prompt_blocks: Vec<u64>,
    prompt_tokens: u32,
    max_tokens: u32,
    /// Prompt tokens whose KV exists (cached prefix + prefilled).
    computed: u32,
    generated: u32,
    /// KV blocks held.
    blocks: u32,
    started_prefill: bool,
}

/// Counters a `/metrics` page shows (vLLM's names in `server.rs`).
#[derive(Debug, Default, Clone)]
pub struct Counters {
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    pub preemptions: u64,
    pub finished: u64,
    pub aborted: u64,
    pub refused: u64,
}

pub struct Engine {
    cfg: LlmConfig,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    used_blocks: u32,
    /// Prefix cache: block hash -> last use (a step counter); held in the free
    /// blocks, so `cached.len() <= kv_blocks - used_blocks` (evicted LRU).
    cached: HashMap<u64, u64>,
    tick: u64,
    pub counters: Counters,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Submit {
    Queued,
    /// The waiting queue is at `max_queued`: vLLM's `--max-num-queued-reqs` answers 503.
    Full,
    /// The prompt and its output can never fit the KV cache (vLLM answers 400).
    TooLong,
}

impl Engine {
    pub fn new(cfg: LlmConfig) -> Self {
        Engine { cfg, waiting: VecDeque::new(), running: Vec::new(), used_blocks: 0, cached: HashMap::new(), tick: 0, counters: Counters::default() }
    }

    pub fn config(&self) -> &LlmConfig {
        &self.cfg
    }

    /// A request: its prompt as bytes (tokenised as `BYTES_PER_TOKEN` bytes a token).
    pub fn submit(&mut self, id: SeqId, prompt: &[u8], max_tokens: u32) -> Submit {
        let prompt_tokens = tokens_of(prompt);
        if blocks_for(prompt_tokens + max_tokens) > self.cfg.kv_blocks {
            return Submit::TooLong;
        }
        if self.cfg.max_queued > 0 && self.waiting.len() >= self.cfg.max_queued {
            self.counters.refused += 1;
            return Submit::Full;
        }
        self.counters.prompt_tokens += prompt_tokens as u64;
        self.waiting.push_back(Seq {
            id,
            prompt_blocks: block_hashes(prompt),
            prompt_tokens,
            max_tokens: max_tokens.max(1),
            computed: 0,
            generated: 0,
            blocks: 0,
            started_prefill: false,
        });
        Submit::Queued
    }

    /// The client left: the sequence goes, wherever it is, and frees its blocks.
    pub fn abort(&mut self, id: SeqId) {
        if let Some(i) = self.waiting.iter().position(|s| s.id == id) {
            self.waiting.remove(i);
            self.counters.aborted += 1;
        } else if let Some(i) = self.running.iter().position(|s| s.id == id) {
            let s = self.running.remove(i);
            self.release(&s);
            self.counters.aborted += 1;
        }
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The KV cache in use by running sequences, 0 to 1 (`vllm:kv_cache_usage_perc`).
    pub fn kv_usage(&self) -> f64 {
        self.used_blocks as f64 / self.cfg.kv_blocks as f64
    }

    pub fn idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// One engine step: decode a token for every decoding sequence, admit and
    /// prefill within the token budget, and say how long that took.
    pub fn step(&mut self) -> Step {
        self.tick += 1;
        let mut out = Step::default();
        // 1. decoding sequences each need room for their next token
        let mut i = 0;
        while i < self.running.len() {
            let s = &self.running[i];
            if decoding(s) && needs_block(s) {
                if !self.take_blocks(1) {
                    // preempt the newest (vLLM's recompute policy): maybe this one
                    let victim = self.running.pop().expect("running is not empty");
                    self.preempt(victim);
                    continue;
                }
                self.running[i].blocks += 1;
            }
            i += 1;
        }
        let decoding = self.running.iter().filter(|s| decoding(s)).count() as u32;
        // 2. admit into free seats while the prompt's blocks fit (cached prefix counted free)
        while self.running.len() < self.cfg.max_num_seqs {
            let Some(s) = self.waiting.front() else { break };
            let (free_hits, shared_hits) = self.cached_prefix(&s.prompt_blocks);
            // a block another running sequence holds is shared, not taken again
            let need = blocks_for(s.prompt_tokens + 1) - shared_hits;
            if !self.take_blocks(need) {
                break;
            }
            let mut s = self.waiting.pop_front().expect("front exists");
            let hit = free_hits + shared_hits;
            self.counters.prefix_queries += s.prompt_tokens as u64;
            self.counters.prefix_hits += (hit * BLOCK_TOKENS).min(s.prompt_tokens) as u64;
            s.blocks = need;
            // a fully cached prompt still computes its last token (as vLLM does)
            s.computed = (hit * BLOCK_TOKENS).min(s.prompt_tokens.saturating_sub(1));
            for h in &s.prompt_blocks {
                self.cached.remove(h); // in use now, not free
            }
            self.running.push(s);
        }
        // 3. prefill within the budget left after the decode tokens, oldest first
        let mut budget = self.cfg.max_batched_tokens.saturating_sub(decoding);
        let mut prefilled = 0u32;
        for s in self.running.iter_mut().filter(|s| s.computed < s.prompt_tokens) {
            if budget == 0 {
                break;
            }
            let chunk = (s.prompt_tokens - s.computed).min(budget);
            s.started_prefill = true;
            s.computed += chunk;
            budget -= chunk;
            prefilled += chunk;
        }
        // 4. this step's tokens: every decoding sequence, and every prompt completed now
        for s in self.running.iter_mut() {
            if s.computed == s.prompt_tokens && (s.generated > 0 || s.started_prefill) {
                out.tokens.push((s.id, s.generated));
                s.generated += 1;
            }
        }
        self.counters.generation_tokens += out.tokens.len() as u64;
        let (done, rest): (Vec<Seq>, Vec<Seq>) = std::mem::take(&mut self.running).into_iter().partition(|s| s.generated >= s.max_tokens);
        self.running = rest;
        for s in done {
            out.finished.push(s.id);
            self.counters.finished += 1;
            self.release(&s);
        }
        let busy = decoding > 0 || prefilled > 0;
        out.duration = if busy {
            self.itl(decoding.max(1)) + self.cfg.prefill_per_token * prefilled
        } else {
            Duration::ZERO
        };
        out
    }

    /// Inter-token latency with `b` sequences decoding: `itl` at one, growing
    /// linearly to `itl × load_factor` at `max_num_seqs`.
    fn itl(&self, b: u32) -> Duration {
        let full = self.cfg.max_num_seqs.max(2) as f64 - 1.0;
        let f = 1.0 + (self.cfg.load_factor - 1.0) * ((b as f64 - 1.0) / full).min(1.0);
        self.cfg.itl.mul_f64(f)
    }

    /// Leading prompt blocks already computed: (in the free cache, held by a running sequence).
    fn cached_prefix(&self, blocks: &[u64]) -> (u32, u32) {
        let held = |h: &u64| {
            self.running.iter().any(|s| s.prompt_blocks.iter().position(|x| x == h).is_some_and(|j| s.computed >= (j as u32 + 1) * BLOCK_TOKENS))
        };
        let (mut free, mut shared) = (0, 0);
        for h in blocks {
            if self.cached.contains_key(h) {
                free += 1;
            } else if held(h) {
                shared += 1;
            } else {
                break;
            }
        }
        (free, shared)
    }

    /// Take `n` free blocks, evicting the least recently used cached ones as needed.
    fn take_blocks(&mut self, n: u32) -> bool {
        if self.used_blocks + n > self.cfg.kv_blocks {
            return false;
        }
        self.used_blocks += n;
        let free = (self.cfg.kv_blocks - self.used_blocks) as usize;
        while self.cached.len() > free {
            let lru = *self.cached.iter().min_by_key(|(_, t)| **t).expect("non-empty").0;
            self.cached.remove(&lru);
        }
        true
    }

    fn release(&mut self, s: &Seq) {
        self.used_blocks -= s.blocks;
        // its prompt's computed blocks stay cached (free, reusable) until evicted
        let full = (s.computed / BLOCK_TOKENS) as usize;
        for h in s.prompt_blocks.iter().take(full) {
            self.cached.insert(*h, self.tick);
        }
        let free = (self.cfg.kv_blocks - self.used_blocks) as usize;
        while self.cached.len() > free {
            let lru = *self.cached.iter().min_by_key(|(_, t)| **t).expect("non-empty").0;
            self.cached.remove(&lru);
        }
    }

    fn preempt(&mut self, mut s: Seq) {
        self.counters.preemptions += 1;
        self.release(&s);
        // recomputed from scratch (what it generated so far is kept by the driver)
        s.computed = 0;
        s.blocks = 0;
        s.started_prefill = false;
        self.waiting.push_front(s);
    }
}

/// The emulator's tokeniser: 4 bytes a token (OpenAI's rule of thumb for English).
pub const BYTES_PER_TOKEN: usize = 4;

pub fn tokens_of(prompt: &[u8]) -> u32 {
    prompt.len().div_ceil(BYTES_PER_TOKEN).max(1) as u32
}

fn blocks_for(tokens: u32) -> u32 {
    tokens.div_ceil(BLOCK_TOKENS)
}

/// Past its prompt and its first token: one token a step from here.
fn decoding(s: &Seq) -> bool {
    s.computed == s.prompt_tokens && s.generated > 0
}

/// A decoding sequence needs a new block when its next token starts one.
fn needs_block(s: &Seq) -> bool {
    (s.prompt_tokens + s.generated).is_multiple_of(BLOCK_TOKENS)
}

/// Chained hashes of the prompt's full blocks (a partial last block is never cached, as in vLLM).
fn block_hashes(prompt: &[u8]) -> Vec<u64> {
    use std::hash::{Hash, Hasher};
    let per = BLOCK_TOKENS as usize * BYTES_PER_TOKEN;
    let mut prev = 0u64;
    prompt
        .chunks_exact(per)
        .map(|c| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            prev.hash(&mut h);
            c.hash(&mut h);
            prev = h.finish();
            prev
        })
        .collect()
}

/// What a burst of `concurrency` equal requests meets in virtual time (no
/// clock): each one's first token and the steady decode rate. The
/// characterisation `huntlb-llm --table` prints and docs/results/llm.md shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Burst {
    pub concurrency: usize,
    pub ttft_p50: Duration,
    pub ttft_max: Duration,
    /// Mean time between a sequence's tokens after its first.
    pub tpot: Duration,
    /// Output tokens per second over the burst.
    pub tokens_per_s: f64,
}

pub fn burst(cfg: &LlmConfig, concurrency: usize, prompt_tokens: u32, max_tokens: u32) -> Burst {
    let mut e = Engine::new(cfg.clone());
    for id in 0..concurrency as u64 {
        // distinct prompts: no prefix shared
        let p: Vec<u8> = (0..prompt_tokens as usize * BYTES_PER_TOKEN).map(|i| (id as usize * 7919 + i) as u8).collect();
        e.submit(id, &p, max_tokens);
    }
    let (mut t, mut first, mut last) = (Duration::ZERO, Vec::new(), std::collections::HashMap::new());
    while !e.idle() {
        let s = e.step();
        t += s.duration;
        for (id, idx) in &s.tokens {
            if *idx == 0 {
                first.push((*id, t));
            }
            last.insert(*id, t);
        }
    }
    // each request's fixed cost before the engine saw it
    let mut ttft: Vec<Duration> = first.iter().map(|(_, d)| *d + cfg.prefill_overhead).collect();
    ttft.sort();
    let decode: Duration = first.iter().map(|(id, d)| last[id] - *d).sum();
    let gaps = concurrency as u32 * (max_tokens - 1).max(1);
    Burst {
        concurrency,
        ttft_p50: ttft[ttft.len() / 2],
        ttft_max: *ttft.last().expect("a burst of at least one"),
        tpot: decode / gaps,
        tokens_per_s: (concurrency as f64 * max_tokens as f64) / t.as_secs_f64(),
    }
}
