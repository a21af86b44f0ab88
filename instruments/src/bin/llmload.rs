//! huntlb-llmload: open-loop load of streamed LLM completions.
//!
//! Arrivals are Poisson at `--rate`; each request's prompt and output lengths
//! are drawn from lognormals (medians and sigmas given; ShareGPT-like in
//! shape: most prompts and answers short, a long tail), all from `--seed`, so
//! two runs with one seed send the same requests at the same offsets, whatever
//! is behind the targets. Request i goes to target i mod n (several gateways
//! share one load). Each is a streamed `POST /v1/completions`; its time to
//! first token (TTFT: the first SSE event) and its end (`[DONE]`) count from
//! its *intended* send time, so a late send is latency, not a lighter load.
//!
//! Prompts are unique from their first token (the request's number leads), so
//! no prefix is shared between requests. The engine counts 4 bytes a token.
//!
//! Writes one JSON line per request (`--out`) and prints a summary (JSON).

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Parser;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use serde::Serialize;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(version, about = "Open-loop Poisson load of streamed /v1/completions: TTFT and end-to-end per request")]
struct Args {
    /// host:port of a gateway (repeat: request i goes to target i mod n).
    #[arg(long = "target", required = true)]
    targets: Vec<String>,
    /// Requests per second (Poisson arrivals).
    #[arg(long)]
    rate: f64,
    /// Seconds of arrivals.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Prompt tokens: lognormal median, sigma, and bounds.
    #[arg(long, default_value_t = 192.0)]
    prompt_median: f64,
    #[arg(long, default_value_t = 0.9)]
    prompt_sigma: f64,
    #[arg(long, default_value_t = 2048)]
    prompt_max: u32,
    /// Output tokens (max_tokens): lognormal median, sigma, and bounds.
    #[arg(long, default_value_t = 96.0)]
    output_median: f64,
    #[arg(long, default_value_t = 0.8)]
    output_sigma: f64,
    #[arg(long, default_value_t = 512)]
    output_max: u32,
    /// A request not done within this many ms is an error.
    #[arg(long, default_value_t = 120_000)]
    timeout_ms: u64,
    /// Per-request outcomes, one JSON line each, in schedule order.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Print the schedule (offset, prompt and output tokens) and send nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Debug, Clone, Copy)]
struct Job {
    offset: Duration,
    prompt: u32,
    output: u32,
}

#[derive(Debug, Clone, Serialize, Default)]
struct Outcome {
    i: usize,
    target: usize,
    offset_us: u64,
    prompt: u32,
    output: u32,
    /// HTTP status; 0: no response (connection, timeout).
    status: u16,
    /// From the intended send time to the first token; null if none came.
    ttft_us: Option<u64>,
    /// From the intended send time to the end of the stream.
    e2e_us: Option<u64>,
    /// Tokens received (SSE events before `[DONE]`).
    tokens: u32,
    /// Sent this late after its intended time.
    late_us: u64,
    error: Option<String>,
}

fn lognormal(rng: &mut SmallRng, median: f64, sigma: f64, lo: u32, hi: u32) -> u32 {
    // Box-Muller: a standard normal from two uniforms
    let u1: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
    let u2: f64 = rng.gen();
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    ((median.ln() + sigma * z).exp().round() as u32).clamp(lo, hi)
}

fn schedule(a: &Args) -> Vec<Job> {
    let mut rng = SmallRng::seed_from_u64(a.seed);
    let mut t = 0.0;
    let mut out = Vec::new();
    loop {
        let u: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
        t += -u.ln() / a.rate;
        if t >= a.duration {
            break;
        }
        let prompt = lognormal(&mut rng, a.prompt_median, a.prompt_sigma, 8, a.prompt_max);
        let output = lognormal(&mut rng, a.output_median, a.output_sigma, 4, a.output_max);
        out.push(Job { offset: Duration::from_secs_f64(t), prompt, output });
    }
    out
}

fn prompt_text(seed: u64, i: usize, tokens: u32) -> String {
    let mut s = format!("{seed:x}-{i:08}:");
    let n = tokens as usize * 4;
    let mut k = i;
    while s.len() < n {
        k = k.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        s.push((b'a' + (k >> 59) as u8 % 26) as char);
    }
    s.truncate(n.max(1));
    s
}

fn cpu_seconds() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Counts `data: ` events in a stream cut into frames anywhere.
#[derive(Default)]
struct Events {
    tail: Vec<u8>,
    tokens: u32,
    done: bool,
}

impl Events {
    fn feed(&mut self, chunk: &[u8]) {
        let mut buf = std::mem::take(&mut self.tail);
        buf.extend_from_slice(chunk);
        let mut start = 0;
        while let Some(nl) = buf[start..].iter().position(|b| *b == b'\n') {
            let line = &buf[start..start + nl];
            if let Some(d) = line.strip_prefix(b"data: ") {
                if d.starts_with(b"[DONE]") {
                    self.done = true;
                } else {
                    self.tokens += 1;
                }
            }
            start += nl + 1;
        }
        self.tail = buf[start..].to_vec();
    }
}

async fn one(client: Client<HttpConnector, Full<Bytes>>, uri: Uri, body: Bytes, t0: Instant, mut o: Outcome, timeout: Duration) -> Outcome {
    let intended = t0 + Duration::from_micros(o.offset_us);
    let since = |t: Instant| t.saturating_duration_since(intended).as_micros() as u64;
    o.late_us = since(Instant::now());
    let req = Request::post(uri).header("content-type", "application/json").body(Full::new(body)).expect("request");
    let run = async {
        let r = client.request(req).await.context("request")?;
        o.status = r.status().as_u16();
        let mut body = r.into_body();
        let mut ev = Events::default();
        while let Some(f) = body.frame().await {
            let f = f.context("body")?;
            if let Some(d) = f.data_ref() {
                let before = ev.tokens;
                ev.feed(d);
                if before == 0 && ev.tokens > 0 && o.ttft_us.is_none() {
                    o.ttft_us = Some(since(Instant::now()));
                }
            }
        }
        o.tokens = ev.tokens;
        if o.status == 200 && !ev.done {
            bail!("stream ended without [DONE] after {} tokens", ev.tokens);
        }
        o.e2e_us = Some(since(Instant::now()));
        Ok::<_, anyhow::Error>(())
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => o.error = Some(format!("{e:#}")),
        Err(_) => o.error = Some("timeout".into()),
    }
    o
}

fn pct(v: &mut [u64], p: f64) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[((p / 100.0) * (v.len() - 1) as f64).round() as usize])
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if !(a.rate > 0.0) || !(a.duration > 0.0) {
        bail!("--rate and --duration must be > 0");
    }
    let jobs = schedule(&a);
    if a.dry_run {
        for j in &jobs {
            println!("{:.6} {} {}", j.offset.as_secs_f64(), j.prompt, j.output);
        }
        return Ok(());
    }
    let uris: Vec<Uri> = a
        .targets
        .iter()
        .map(|t| format!("http://{}/v1/completions", t.trim_start_matches("http://").trim_end_matches('/')).parse())
        .collect::<Result<_, _>>()
        .context("--target")?;
    let mut conn = HttpConnector::new();
    conn.set_nodelay(true);
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).pool_max_idle_per_host(4096).pool_idle_timeout(Duration::from_secs(30)).build(conn);
    let cpu0 = cpu_seconds();
    let t0 = Instant::now() + Duration::from_millis(50);
    let results = Arc::new(Mutex::new(Vec::with_capacity(jobs.len())));
    let mut handles = Vec::with_capacity(jobs.len());
    let timeout = Duration::from_millis(a.timeout_ms);
    for (i, j) in jobs.iter().enumerate() {
        let target = i % uris.len();
        let body = Bytes::from(serde_json::json!({"prompt": prompt_text(a.seed, i, j.prompt), "max_tokens": j.output, "stream": true}).to_string());
        let o = Outcome { i, target, offset_us: j.offset.as_micros() as u64, prompt: j.prompt, output: j.output, ..Default::default() };
        tokio::time::sleep_until((t0 + j.offset).into()).await;
        let (client, uri, results) = (client.clone(), uris[target].clone(), results.clone());
        handles.push(tokio::spawn(async move {
            let o = one(client, uri, body, t0, o, timeout).await;
            results.lock().expect("results").push(o);
        }));
    }
    let done_by_end = results.lock().expect("results").len();
    for h in handles {
        let _ = h.await;
    }
    let wall = Instant::now().saturating_duration_since(t0).as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let mut rs = std::mem::take(&mut *results.lock().expect("results"));
    rs.sort_by_key(|o| o.i);
    if let Some(path) = &a.out {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path).with_context(|| format!("--out {}", path.display()))?);
        for o in &rs {
            serde_json::to_writer(&mut f, o)?;
            f.write_all(b"\n")?;
        }
    }
    let ok: Vec<&Outcome> = rs.iter().filter(|o| o.status == 200 && o.error.is_none()).collect();
    let mut ttft: Vec<u64> = ok.iter().filter_map(|o| o.ttft_us).collect();
    let e2e: Vec<u64> = ok.iter().filter_map(|o| o.e2e_us).collect();
    let mut late: Vec<u64> = rs.iter().map(|o| o.late_us).collect();
    let summary = serde_json::json!({
        "scheduled": rs.len(), "ok": ok.len(), "errors": rs.len() - ok.len(),
        "ttft_p50_ms": pct(&mut ttft, 50.0).map(|v| v as f64 / 1e3), "ttft_p99_ms": pct(&mut ttft, 99.0).map(|v| v as f64 / 1e3),
        "e2e_mean_ms": if e2e.is_empty() { None } else { Some(e2e.iter().sum::<u64>() as f64 / e2e.len() as f64 / 1e3) },
        "send_late_p99_ms": pct(&mut late, 99.0).map(|v| v as f64 / 1e3), "cpu_s": cpu, "wall_s": wall,
        "done_before_schedule_end": done_by_end, "tokens": rs.iter().map(|o| o.tokens as u64).sum::<u64>(),
    });
    println!("{summary}");
    Ok(())
}
