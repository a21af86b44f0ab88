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

#[cfg(test)]
mod tests {
    use super::*;

    const W: LlmWeights = LlmWeights { bytes_per_token: 4, tokens_per_seat: 512, workers: 4 };

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
}
