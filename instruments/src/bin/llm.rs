//! huntlb-llm: an emulated LLM model server (see `huntlb_instruments::llm`).

use anyhow::{bail, Context};
use clap::Parser;
use huntlb_instruments::llm::{server::Llm, LlmConfig};
use huntlb_instruments::serve::accept_each;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(name = "huntlb-llm", version, about = "Emulated LLM model server: OpenAI-compatible API, continuous batching, prefix cache, vLLM's metrics")]
struct Args {
    /// Address to listen on (give each instance its own 127.x.y.z).
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    /// The model name it serves and labels its metrics with.
    #[arg(long, default_value = "huntlb/emulated-8b")]
    model: String,
    /// Sequences running at once (vLLM --max-num-seqs).
    #[arg(long, default_value_t = 256)]
    max_num_seqs: usize,
    /// Tokens a step processes, decode first (vLLM --max-num-batched-tokens).
    #[arg(long, default_value_t = 2048)]
    max_num_batched_tokens: u32,
    /// KV-cache blocks of 16 tokens.
    #[arg(long, default_value_t = 27_500)]
    kv_blocks: u32,
    /// Waiting requests past which new ones get 503 (vLLM --max-num-queued-reqs); 0: no cap.
    #[arg(long, default_value_t = 0)]
    max_num_queued_reqs: usize,
    /// Inter-token latency at batch 1, ms.
    #[arg(long, default_value_t = 12.0)]
    itl_ms: f64,
    /// Inter-token latency at max-num-seqs over batch 1's.
    #[arg(long, default_value_t = 2.0)]
    load_factor: f64,
    /// Prefill time per uncached prompt token in a step, ms.
    #[arg(long, default_value_t = 0.04)]
    prefill_ms_per_token: f64,
    /// A request's fixed cost before the engine sees it (HTTP, tokenising), ms.
    #[arg(long, default_value_t = 40.0)]
    prefill_overhead_ms: f64,
    /// Scales every duration (0.1: ten times faster).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Serve nothing: print, one JSON line each, what bursts of these many
    /// requests (256 prompt tokens, 128 out) meet in the engine's virtual time.
    #[arg(long, value_delimiter = ',')]
    table: Option<Vec<usize>>,
}

fn ms(name: &str, v: f64) -> anyhow::Result<Duration> {
    if !(v >= 0.0 && v.is_finite()) {
        bail!("--{name} must be a number >= 0");
    }
    Ok(Duration::from_secs_f64(v / 1000.0))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let cfg = LlmConfig {
        max_num_seqs: a.max_num_seqs,
        max_batched_tokens: a.max_num_batched_tokens,
        kv_blocks: a.kv_blocks,
        max_queued: a.max_num_queued_reqs,
        itl: ms("itl-ms", a.itl_ms)?,
        load_factor: a.load_factor,
        prefill_per_token: ms("prefill-ms-per-token", a.prefill_ms_per_token)?,
        prefill_overhead: ms("prefill-overhead-ms", a.prefill_overhead_ms)?,
        time_scale: a.time_scale,
        model: a.model.clone(),
    };
    if let Err(why) = cfg.validate() {
        bail!(why);
    }
    if let Some(sizes) = a.table {
        for c in sizes.into_iter().filter(|c| *c > 0) {
            let b = huntlb_instruments::llm::engine::burst(&cfg.clone().scaled(), c, 256, 128);
            println!("{}", serde_json::json!({"concurrency": c, "ttft_p50_ms": b.ttft_p50.as_secs_f64() * 1e3,
                "ttft_max_ms": b.ttft_max.as_secs_f64() * 1e3, "tpot_ms": b.tpot.as_secs_f64() * 1e3, "tokens_per_s": b.tokens_per_s}));
        }
        return Ok(());
    }
    let llm = Llm::new(cfg);
    tokio::spawn(llm.clone().drive());
    let listener = tokio::net::TcpListener::bind(a.listen).await.with_context(|| format!("--listen {}", a.listen))?;
    eprintln!("huntlb-llm {} listening on {}", a.model, a.listen);
    accept_each(listener, move |stream| {
        let llm = llm.clone();
        async move {
            let svc = service_fn(move |req| llm.clone().handle(req));
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        }
    })
    .await
}
