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
//! `--workload` picks the shape (after inference-perf's, as the Gateway API
//! Inference Extension's benchmarks run it; `Workload` says where each comes
//! from and what was scaled):
//! * `sharegpt` (the default): the lognormals of the flags below; prompts
//!   unique from their first token (the request's number leads), so no prefix
//!   is shared between requests;
//! * `shared-prefix`: `--groups` system prompts of `--system-len` tokens, each
//!   with `--prompts-per-group` questions of `--question-len` tokens, answers of
//!   `--output-len`; a group's prompts share the system prompt byte for byte (the
//!   server's prefix cache sees it), groups differ within their first KV block;
//! * `long-prompt`: long prompts, short answers (prefill-heavy);
//! * `long-output`: short prompts, long answers (decode-heavy).
//!
//! The engine counts 4 bytes a token. `--salt` changes every prompt's text and
//! nothing else (offsets, lengths and groups stay), so runs one after another
//! on the same servers do not find each other's prompts in the prefix cache.
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
#[command(name = "huntlb-llmload", version, about = "Open-loop Poisson load of streamed /v1/completions: TTFT and end-to-end per request")]
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
    /// The shape of the requests: sharegpt, shared-prefix, long-prompt, long-output.
    #[arg(long, default_value = "sharegpt")]
    workload: String,
    /// shared-prefix: system prompts (inference-perf's num_groups).
    #[arg(long, default_value_t = 32)]
    groups: u32,
    /// shared-prefix: questions a system prompt (inference-perf's num_prompts_per_group).
    #[arg(long, default_value_t = 16)]
    prompts_per_group: u32,
    /// shared-prefix: tokens of a system prompt.
    #[arg(long, default_value_t = 2048)]
    system_len: u32,
    /// shared-prefix: tokens of a question.
    #[arg(long, default_value_t = 256)]
    question_len: u32,
    /// shared-prefix: output tokens.
    #[arg(long, default_value_t = 256)]
    output_len: u32,
    /// Mixed into every prompt's text (letters, digits, '-'; at most 32): the
    /// same schedule with other bytes. Empty: the text of earlier versions.
    #[arg(long, default_value = "")]
    salt: String,
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
    /// shared-prefix: (group, question) of the prompt.
    prefix: Option<(u32, u32)>,
}

/// A lognormal length: median, sigma, and the bounds it is clamped to.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Len {
    median: f64,
    sigma: f64,
    min: u32,
    max: u32,
}

/// The shape of a run's requests.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Workload {
    /// Independent prompt and output lengths, unique prompts.
    Lengths { prompt: Len, output: Len },
    /// inference-perf's `shared_prefix` data: `groups` x `per_group` prompts,
    /// each a group's system prompt then its own question, shuffled once and
    /// sent in turn (request i: prompt i mod groups*per_group), as its
    /// generator does (inference_perf/datagen/shared_prefix_datagen.py).
    /// The defaults are GIE's high-cache run (benchmarking/prefix-cache-aware/
    /// high-cache-values.yaml: system 2048, question 256, output 256 tokens,
    /// 16 prompts a group) with 32 groups for its 256: its 30-s stages at
    /// 100-500 requests/s see each group 12-60 times, and a 40-s run of the
    /// emulated fleet here (~9 requests/s) sees each of 32 about 11 times
    /// (256 groups would be seen about once: no cache to find).
    SharedPrefix { groups: u32, per_group: u32, system: u32, question: u32, output: u32 },
}

impl Workload {
    /// The workload `--workload` names. The lengths of long-prompt and
    /// long-output are ours, shaped after the Gateway API Inference
    /// Extension's inference-perf runs (benchmarking/single-workload/
    /// prefill-heavy-values.yaml: billsum, bills and their short summaries;
    /// decode-heavy-values.yaml: infinity_instruct, short instructions and long
    /// answers; both cap input and output at 1024 tokens): those datasets are
    /// not here, their shape is.
    fn from_args(a: &Args) -> anyhow::Result<Workload> {
        Ok(match a.workload.as_str() {
            "sharegpt" => Workload::Lengths {
                prompt: Len { median: a.prompt_median, sigma: a.prompt_sigma, min: 8, max: a.prompt_max },
                output: Len { median: a.output_median, sigma: a.output_sigma, min: 4, max: a.output_max },
            },
            "long-prompt" => Workload::Lengths {
                prompt: Len { median: 768.0, sigma: 0.3, min: 256, max: 1024 },
                output: Len { median: 48.0, sigma: 0.5, min: 8, max: 128 },
            },
            "long-output" => Workload::Lengths {
                prompt: Len { median: 64.0, sigma: 0.6, min: 8, max: 256 },
                output: Len { median: 512.0, sigma: 0.4, min: 128, max: 1024 },
            },
            "shared-prefix" => {
                if a.groups == 0 || a.prompts_per_group == 0 || a.system_len == 0 || a.question_len == 0 || a.output_len == 0 {
                    bail!("--groups, --prompts-per-group, --system-len, --question-len and --output-len must be > 0");
                }
                Workload::SharedPrefix {
                    groups: a.groups,
                    per_group: a.prompts_per_group,
                    system: a.system_len,
                    question: a.question_len,
                    output: a.output_len,
                }
            }
            w => bail!("--workload {w:?}: one of sharegpt, shared-prefix, long-prompt, long-output"),
        })
    }
}

#[derive(Debug, Clone, Serialize, Default)]
struct Outcome {
    i: usize,
    target: usize,
    offset_us: u64,
    prompt: u32,
    output: u32,
    /// shared-prefix: the request's group (absent in other workloads).
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<u32>,
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

/// The requests of a run, from the seed alone. For sharegpt the random
/// numbers are drawn as before workloads existed (arrival, prompt, output), so
/// a seed gives the schedule it always gave.
fn schedule(w: &Workload, rate: f64, duration: f64, seed: u64) -> Vec<Job> {
    let mut rng = SmallRng::seed_from_u64(seed);
    // shared-prefix: the prompts' order, shuffled once (Fisher-Yates) before the arrivals
    let order: Vec<(u32, u32)> = match *w {
        Workload::SharedPrefix { groups, per_group, .. } => {
            let mut v: Vec<(u32, u32)> = (0..groups).flat_map(|g| (0..per_group).map(move |q| (g, q))).collect();
            for i in (1..v.len()).rev() {
                let j = rng.gen_range(0..=i);
                v.swap(i, j);
            }
            v
        }
        Workload::Lengths { .. } => Vec::new(),
    };
    let mut t = 0.0;
    let mut out = Vec::new();
    loop {
        let u: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
        t += -u.ln() / rate;
        if t >= duration {
            break;
        }
        let offset = Duration::from_secs_f64(t);
        out.push(match *w {
            Workload::Lengths { prompt, output } => Job {
                offset,
                prompt: lognormal(&mut rng, prompt.median, prompt.sigma, prompt.min, prompt.max),
                output: lognormal(&mut rng, output.median, output.sigma, output.min, output.max),
                prefix: None,
            },
            Workload::SharedPrefix { system, question, output, .. } => {
                let gq = order[out.len() % order.len()];
                Job { offset, prompt: system + question, output, prefix: Some(gq) }
            }
        });
    }
    out
}

/// `n` bytes of lowercase letters from a generator seeded by `k` (the text
/// is filler: the emulator reads only its length and its bytes' identity).
fn filler(s: &mut String, n: usize, mut k: u64) {
    while s.len() < n {
        k = k.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        s.push((b'a' + (k >> 59) as u8 % 26) as char);
    }
    s.truncate(n.max(1));
}

/// Request i's prompt, 4 bytes a token. Unique prompts (no prefix) lead with
/// the request's number; a shared-prefix prompt is its group's system prompt
/// (system tokens, the same bytes for every question of the group) then its
/// question, each leading with what names it so that two groups, or two
/// questions, differ within their first KV block (16 tokens, 64 bytes).
fn prompt_text(w: &Workload, seed: u64, salt: &str, i: usize, job: &Job) -> String {
    match (*w, job.prefix) {
        (Workload::SharedPrefix { system, question, .. }, Some((g, q))) => {
            let mut s = format!("{seed:x}{salt}-system-{g:06}:");
            filler(&mut s, system as usize * 4, (seed ^ 0x5157_3a00) + g as u64);
            let mut t = format!("{g:06}-question-{q:06}:");
            filler(&mut t, question as usize * 4, (seed ^ 0x7175_6500).wrapping_mul(31) + ((g as u64) << 32) + q as u64);
            s + &t
        }
        _ => {
            let mut s = format!("{seed:x}{salt}-{i:08}:");
            filler(&mut s, job.prompt as usize * 4, i as u64);
            s
        }
    }
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
    // the salt goes into JSON and into the prompt: a short plain word only
    if a.salt.len() > 32 || !a.salt.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        bail!("--salt {:?}: at most 32 letters, digits or '-'", a.salt);
    }
    let workload = Workload::from_args(&a)?;
    let jobs = schedule(&workload, a.rate, a.duration, a.seed);
    if a.dry_run {
        for j in &jobs {
            match j.prefix {
                None => println!("{:.6} {} {}", j.offset.as_secs_f64(), j.prompt, j.output),
                Some((g, q)) => println!("{:.6} {} {} {} {}", j.offset.as_secs_f64(), j.prompt, j.output, g, q),
            }
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
        let text = prompt_text(&workload, a.seed, &a.salt, i, j);
        let body = Bytes::from(serde_json::json!({"prompt": text, "max_tokens": j.output, "stream": true}).to_string());
        let o = Outcome { i, target, offset_us: j.offset.as_micros() as u64, prompt: j.prompt, output: j.output, group: j.prefix.map(|p| p.0), ..Default::default() };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut v = vec!["huntlb-llmload", "--target", "x:1", "--rate", "20", "--duration", "60"];
        v.extend_from_slice(extra);
        Args::parse_from(v)
    }

    fn jobs(extra: &[&str], seed: u64) -> (Workload, Vec<Job>) {
        let a = args(extra);
        let w = Workload::from_args(&a).unwrap();
        let j = schedule(&w, a.rate, a.duration, seed);
        (w, j)
    }

    /// The prompt text before workloads existed, kept here to hold sharegpt to it.
    fn old_prompt_text(seed: u64, i: usize, tokens: u32) -> String {
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

    #[test]
    fn sharegpt_is_the_default_and_its_text_is_unchanged() {
        let (w, js) = jobs(&[], 7);
        assert_eq!(w, Workload::from_args(&args(&["--workload", "sharegpt"])).unwrap());
        assert!(js.len() > 1000);
        for (i, j) in js.iter().enumerate().take(200) {
            assert_eq!(prompt_text(&w, 7, "", i, j), old_prompt_text(7, i, j.prompt));
            assert!(j.prefix.is_none());
        }
    }

    #[test]
    fn same_seed_same_schedule_other_seed_other() {
        for w in ["sharegpt", "shared-prefix", "long-prompt", "long-output"] {
            let (wl, a) = jobs(&["--workload", w], 3);
            let (_, b) = jobs(&["--workload", w], 3);
            let (_, c) = jobs(&["--workload", w], 4);
            let key = |js: &[Job]| js.iter().map(|j| (j.offset, j.prompt, j.output, j.prefix)).collect::<Vec<_>>();
            assert_eq!(key(&a), key(&b), "{w}");
            assert_ne!(key(&a), key(&c), "{w}");
            let ta: Vec<String> = a.iter().enumerate().map(|(i, j)| prompt_text(&wl, 3, "", i, j)).collect();
            let tb: Vec<String> = b.iter().enumerate().map(|(i, j)| prompt_text(&wl, 3, "", i, j)).collect();
            assert_eq!(ta, tb, "{w}");
        }
    }

    #[test]
    fn lengths_stay_within_their_bounds_and_shapes_differ() {
        let (_, lp) = jobs(&["--workload", "long-prompt"], 11);
        let (_, lo) = jobs(&["--workload", "long-output"], 11);
        assert!(lp.iter().all(|j| (256..=1024).contains(&j.prompt) && (8..=128).contains(&j.output)));
        assert!(lo.iter().all(|j| (8..=256).contains(&j.prompt) && (128..=1024).contains(&j.output)));
        let median = |mut v: Vec<u32>| {
            v.sort_unstable();
            v[v.len() / 2]
        };
        // long prompts and short answers, then the other way round
        assert!(median(lp.iter().map(|j| j.prompt).collect()) > 10 * median(lp.iter().map(|j| j.output).collect()));
        assert!(median(lo.iter().map(|j| j.output).collect()) > 4 * median(lo.iter().map(|j| j.prompt).collect()));
        let (w, sp) = jobs(&["--workload", "shared-prefix", "--groups", "4", "--prompts-per-group", "3"], 11);
        for (i, j) in sp.iter().enumerate() {
            assert_eq!((j.prompt, j.output), (2048 + 256, 256));
            assert_eq!(prompt_text(&w, 11, "", i, j).len(), (2048 + 256) * 4);
        }
    }

    #[test]
    fn a_groups_prompts_share_the_system_prompt_byte_for_byte_and_groups_do_not() {
        let (w, sp) = jobs(&["--workload", "shared-prefix", "--groups", "5", "--prompts-per-group", "4", "--system-len", "64", "--question-len", "16"], 9);
        let sys = 64 * 4;
        let text: Vec<(u32, u32, String)> =
            sp.iter().enumerate().map(|(i, j)| (j.prefix.unwrap().0, j.prefix.unwrap().1, prompt_text(&w, 9, "s1", i, j))).collect();
        // every (group, question) comes up, each group's questions in turn: 20 prompts in the first 20 requests
        let first: std::collections::HashSet<(u32, u32)> = text.iter().take(20).map(|(g, q, _)| (*g, *q)).collect();
        assert_eq!(first.len(), 20);
        for (g1, q1, t1) in &text {
            for (g2, q2, t2) in &text {
                let common = t1.bytes().zip(t2.bytes()).take_while(|(a, b)| a == b).count();
                if g1 != g2 {
                    // apart within the header naming the group: the first KV block (64 bytes) differs
                    assert!(common < 64, "groups {g1} and {g2} share {common} bytes");
                } else if q1 != q2 {
                    // the whole system prompt, and the question's first KV block differs
                    assert!(common >= sys && common < sys + 64, "group {g1}: questions {q1} and {q2} share {common}");
                } else {
                    assert_eq!(t1, t2);
                }
            }
        }
        // the system prompt fills whole 16-token KV blocks (64 bytes): the cache keeps all of it
        assert_eq!(sys % 64, 0);
    }

    #[test]
    fn the_salt_changes_the_text_not_the_schedule() {
        for w in ["sharegpt", "shared-prefix"] {
            let (wl, a) = jobs(&["--workload", w], 5);
            let t1 = prompt_text(&wl, 5, "", 0, &a[0]);
            let t2 = prompt_text(&wl, 5, "arm-2", 0, &a[0]);
            assert_eq!(t1.len(), t2.len());
            assert_ne!(t1[..64], t2[..64], "{w}: the first KV block differs");
        }
    }

    #[test]
    fn unknown_workloads_and_bad_salts_are_refused() {
        assert!(Workload::from_args(&args(&["--workload", "chat"])).is_err());
        assert!(Workload::from_args(&args(&["--workload", "shared-prefix", "--groups", "0"])).is_err());
    }
}
