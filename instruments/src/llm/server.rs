//! The emulated model server's HTTP side: the engine driven in real time.
//!
//! * `POST /v1/completions` (`prompt`, `max_tokens` (16), `stream`) and
//!   `POST /v1/chat/completions` (`messages`): OpenAI's shapes; streamed as
//!   SSE, one `data:` event a token, then `data: [DONE]`. A full queue answers
//!   503, a prompt that can never fit the KV cache 400, a bad body 400 naming
//!   what is wrong.
//! * `GET /metrics`: vLLM's metric names (`vllm:num_requests_running`,
//!   `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`, ...).
//! * `GET /health`, `GET /v1/models`.
//!
//! A client that leaves (its connection closed, mid-stream or still queued)
//! aborts its sequence at once: its seat and KV blocks are free for the next.

use super::engine::{Engine, SeqId, Submit};
use super::LlmConfig;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, Limited};
use hyper::body::{Body, Frame, Incoming};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::sync::{mpsc, Notify};

pub type LlmBody = UnsyncBoxBody<Bytes, std::convert::Infallible>;

/// vLLM's buckets for `vllm:time_to_first_token_seconds`.
const TTFT_BUCKETS: [f64; 16] = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
/// Largest request body taken (a long prompt is a few hundred KB).
const MAX_BODY: usize = 4 << 20;
const WORDS: [&str; 8] = [" the", " fleet", " hunts", " for", " a", " free", " server", "."];

enum Event {
    /// A token's index, and whether it is the sequence's last.
    Token(u32, bool),
    Done,
}

struct Inner {
    engine: Engine,
    streams: HashMap<SeqId, mpsc::UnboundedSender<Event>>,
    submitted: HashMap<SeqId, Instant>,
    ttft_counts: [u64; TTFT_BUCKETS.len()],
    ttft_sum: f64,
    ttft_n: u64,
    success: u64,
}

pub struct Llm {
    inner: Mutex<Inner>,
    overhead: std::time::Duration,
    wake: Notify,
    next_id: AtomicU64,
    model: String,
    kv_blocks: u32,
}

impl Llm {
    pub fn new(cfg: LlmConfig) -> Arc<Self> {
        let model = cfg.model.clone();
        let cfg = cfg.scaled();
        let overhead = cfg.prefill_overhead;
        let kv_blocks = cfg.kv_blocks;
        let inner = Inner {
            engine: Engine::new(cfg),
            streams: HashMap::new(),
            submitted: HashMap::new(),
            ttft_counts: [0; TTFT_BUCKETS.len()],
            ttft_sum: 0.0,
            ttft_n: 0,
            success: 0,
        };
        Arc::new(Llm { inner: Mutex::new(inner), overhead, wake: Notify::new(), next_id: AtomicU64::new(1), model, kv_blocks })
    }

    /// The engine's clock: a step, then its duration, then its tokens out.
    pub async fn drive(self: Arc<Self>) {
        // Steps run back to back on the model's clock: each starts when the
        // last was due to end, so the timer's late wake-ups do not add up.
        let mut due: Option<Instant> = None;
        loop {
            let step = {
                let mut g = self.inner.lock().expect("llm state");
                (!g.engine.idle()).then(|| g.engine.step())
            };
            // idle: until a request arrives (notify_one keeps a permit for a late waiter)
            let Some(step) = step else {
                due = None;
                self.wake.notified().await;
                continue;
            };
            let start = match due {
                Some(d) if d > Instant::now() - std::time::Duration::from_millis(5) => d,
                _ => Instant::now(), // fell behind (a busy machine): start afresh
            };
            due = Some(start + step.duration);
            tokio::time::sleep_until((start + step.duration).into()).await;
            let mut g = self.inner.lock().expect("llm state");
            let now = Instant::now();
            let mut gone = Vec::new();
            for (id, idx) in &step.tokens {
                if *idx == 0 {
                    if let Some(t0) = g.submitted.remove(id) {
                        let s = now.duration_since(t0).as_secs_f64();
                        g.ttft_sum += s;
                        g.ttft_n += 1;
                        for (i, b) in TTFT_BUCKETS.iter().enumerate() {
                            if s <= *b {
                                g.ttft_counts[i] += 1;
                            }
                        }
                    }
                }
                if let Some(tx) = g.streams.get(id) {
                    if tx.send(Event::Token(*idx, step.finished.contains(id))).is_err() {
                        gone.push(*id);
                    }
                }
            }
            for id in &step.finished {
                if let Some(tx) = g.streams.remove(id) {
                    let _ = tx.send(Event::Done);
                    g.success += 1;
                }
            }
            for id in gone {
                g.streams.remove(&id);
                g.engine.abort(id);
            }
        }
    }

    fn abort(&self, id: SeqId) {
        let mut g = self.inner.lock().expect("llm state");
        if g.streams.remove(&id).is_some() {
            g.submitted.remove(&id);
            g.engine.abort(id);
        }
    }

    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Result<Response<LlmBody>, std::convert::Infallible> {
        let path = req.uri().path().to_string();
        Ok(match (req.method(), path.as_str()) {
            (&Method::GET, "/health") => text(StatusCode::OK, "ok\n"),
            (&Method::GET, "/metrics") => text(StatusCode::OK, &self.metrics()),
            (&Method::GET, "/v1/models") => json_response(StatusCode::OK, &json!({"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "huntlb"}]})),
            (&Method::POST, "/v1/completions") => self.complete(req, false).await,
            (&Method::POST, "/v1/chat/completions") => self.complete(req, true).await,
            _ => error(StatusCode::NOT_FOUND, &format!("no route {path}")),
        })
    }

    async fn complete(self: Arc<Self>, req: Request<Incoming>, chat: bool) -> Response<LlmBody> {
        let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return error(StatusCode::BAD_REQUEST, &format!("request body: {e}")),
        };
        let (prompt, max_tokens, stream) = match parse(&body, chat) {
            Ok(p) => p,
            Err(why) => return error(StatusCode::BAD_REQUEST, &why),
        };
        // the request's fixed cost (HTTP, tokenising) before the engine sees it
        let t0 = Instant::now();
        tokio::time::sleep(self.overhead).await;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        {
            let mut g = self.inner.lock().expect("llm state");
            match g.engine.submit(id, prompt.as_bytes(), max_tokens) {
                Submit::Queued => {}
                Submit::Full => return error(StatusCode::SERVICE_UNAVAILABLE, "the waiting queue is full (max-num-queued-reqs)"),
                Submit::TooLong => return error(StatusCode::BAD_REQUEST, "prompt and max_tokens exceed the KV cache"),
            }
            g.streams.insert(id, tx);
            g.submitted.insert(id, t0);
        }
        self.wake.notify_one();
        let guard = AbortOnDrop { llm: self.clone(), id, done: false };
        let shape = Shape { chat, id, model: self.model.clone() };
        if stream {
            let body = Sse { rx, guard, shape, ended: false };
            let mut r = Response::new(body.boxed_unsync());
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            return r;
        }
        whole(rx, guard, shape, tokens(prompt.as_bytes())).await
    }

    fn metrics(&self) -> String {
        let g = self.inner.lock().expect("llm state");
        let c = &g.engine.counters;
        let m = format!("model_name=\"{}\"", self.model);
        let mut s = String::new();
        let mut put = |name: &str, kind: &str, v: String| {
            s.push_str(&format!("# TYPE {name} {kind}\n{name}{{{m}}} {v}\n"));
        };
        put("vllm:num_requests_running", "gauge", g.engine.running().to_string());
        put("vllm:num_requests_waiting", "gauge", g.engine.waiting().to_string());
        put("vllm:kv_cache_usage_perc", "gauge", format!("{:.6}", g.engine.kv_usage()));
        put("vllm:prefix_cache_queries_total", "counter", c.prefix_queries.to_string());
        put("vllm:prefix_cache_hits_total", "counter", c.prefix_hits.to_string());
        put("vllm:prompt_tokens_total", "counter", c.prompt_tokens.to_string());
        put("vllm:generation_tokens_total", "counter", c.generation_tokens.to_string());
        put("vllm:num_preemptions_total", "counter", c.preemptions.to_string());
        put("vllm:request_success_total", "counter", g.success.to_string());
        put("huntlb_llm_refused_total", "counter", c.refused.to_string());
        put("huntlb_llm_aborted_total", "counter", c.aborted.to_string());
        // vLLM's cache config, as labels of a gauge of 1 (what GIE's AutoTune
        // sizes its prefix index by: block_size, num_gpu_blocks)
        s.push_str(&format!(
            "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{block_size=\"{}\",num_gpu_blocks=\"{}\"}} 1.0\n",
            super::engine::BLOCK_TOKENS,
            self.kv_blocks
        ));
        s.push_str("# TYPE vllm:time_to_first_token_seconds histogram\n");
        for (b, n) in TTFT_BUCKETS.iter().zip(g.ttft_counts.iter()) {
            s.push_str(&format!("vllm:time_to_first_token_seconds_bucket{{{m},le=\"{b}\"}} {n}\n"));
        }
        s.push_str(&format!("vllm:time_to_first_token_seconds_bucket{{{m},le=\"+Inf\"}} {}\n", g.ttft_n));
        s.push_str(&format!("vllm:time_to_first_token_seconds_sum{{{m}}} {:.6}\n", g.ttft_sum));
        s.push_str(&format!("vllm:time_to_first_token_seconds_count{{{m}}} {}\n", g.ttft_n));
        s
    }
}

fn tokens(prompt: &[u8]) -> u32 {
    super::engine::tokens_of(prompt)
}

/// (prompt, max_tokens, stream) of an OpenAI request body, or what is wrong with it.
fn parse(body: &[u8], chat: bool) -> Result<(String, u32, bool), String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let prompt = if chat {
        let msgs = v.get("messages").and_then(Value::as_array).ok_or("`messages` must be an array")?;
        let mut p = String::new();
        for m in msgs {
            let role = m.get("role").and_then(Value::as_str).ok_or("each message needs a string `role`")?;
            let content = m.get("content").and_then(Value::as_str).ok_or("each message needs a string `content`")?;
            p.push_str(role);
            p.push_str(": ");
            p.push_str(content);
            p.push('\n');
        }
        p
    } else {
        match v.get("prompt") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => a[0].as_str().unwrap_or_default().to_string(),
            _ => return Err("`prompt` must be a string".into()),
        }
    };
    let max_tokens = match v.get("max_tokens").or_else(|| v.get("max_completion_tokens")) {
        None | Some(Value::Null) => 16,
        Some(n) => n.as_u64().filter(|n| (1..=1_000_000).contains(n)).ok_or("`max_tokens` must be an integer from 1")? as u32,
    };
    let stream = match v.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        _ => return Err("`stream` must be a boolean".into()),
    };
    Ok((prompt, max_tokens, stream))
}

/// Aborts its sequence if dropped before the sequence ended (the client left).
struct AbortOnDrop {
    llm: Arc<Llm>,
    id: SeqId,
    done: bool,
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if !self.done {
            self.llm.abort(self.id);
        }
    }
}

struct Shape {
    chat: bool,
    id: SeqId,
    model: String,
}

impl Shape {
    fn chunk(&self, idx: u32, finish: Option<&str>) -> Value {
        let word = WORDS[idx as usize % WORDS.len()];
        if self.chat {
            let delta = if idx == 0 { json!({"role": "assistant", "content": word}) } else { json!({"content": word}) };
            json!({"id": format!("chatcmpl-{}", self.id), "object": "chat.completion.chunk", "created": 0, "model": self.model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        } else {
            json!({"id": format!("cmpl-{}", self.id), "object": "text_completion", "created": 0, "model": self.model,
                   "choices": [{"index": 0, "text": word, "logprobs": null, "finish_reason": finish}]})
        }
    }
}

/// The SSE stream: a `data:` event per token as the engine makes it.
struct Sse {
    rx: mpsc::UnboundedReceiver<Event>,
    guard: AbortOnDrop,
    shape: Shape,
    ended: bool,
}

impl Body for Sse {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Event::Token(idx, last))) => {
                let ev = format!("data: {}\n\n", self.shape.chunk(idx, last.then_some("length")));
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(ev)))))
            }
            Poll::Ready(Some(Event::Done)) | Poll::Ready(None) => {
                self.ended = true;
                self.guard.done = true;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"data: [DONE]\n\n")))))
            }
        }
    }
}

async fn whole(mut rx: mpsc::UnboundedReceiver<Event>, mut guard: AbortOnDrop, shape: Shape, prompt_tokens: u32) -> Response<LlmBody> {
    let mut text = String::new();
    let mut n = 0u32;
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token(idx, _) => {
                text.push_str(WORDS[idx as usize % WORDS.len()]);
                n += 1;
            }
            Event::Done => break,
        }
    }
    guard.done = true;
    let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n});
    let v = if shape.chat {
        json!({"id": format!("chatcmpl-{}", shape.id), "object": "chat.completion", "created": 0, "model": shape.model,
               "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}], "usage": usage})
    } else {
        json!({"id": format!("cmpl-{}", shape.id), "object": "text_completion", "created": 0, "model": shape.model,
               "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": "length"}], "usage": usage})
    };
    json_response(StatusCode::OK, &v)
}

fn text(status: StatusCode, s: &str) -> Response<LlmBody> {
    let mut r = Response::new(Full::new(Bytes::from(s.to_string())).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    r
}

fn json_response(status: StatusCode, v: &Value) -> Response<LlmBody> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// OpenAI's error shape.
fn error(status: StatusCode, msg: &str) -> Response<LlmBody> {
    json_response(status, &json!({"error": {"message": msg, "type": "invalid_request_error", "code": status.as_u16()}}))
}
