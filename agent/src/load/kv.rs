//! The model server's KV-cache use (`llm_metrics_url`): its Prometheus page,
//! read every `llm_metrics_poll_ms`, for `vllm:kv_cache_usage_perc` alone.
//! The rule it feeds is `huntlb_policy::llm::KvBound`.
//!
//! The page is the app's, trusted as the app is (it could refuse every request
//! anyway), but read defensively: a page that is huge is cut at `MAX_PAGE`, one
//! that never ends at `KV_READ_TIMEOUT`, and a value no KV use can be (NaN,
//! below 0, above 1) is rejected. Each such read is counted and changes
//! nothing; the last good read holds until it is stale, then the counts alone
//! decide.

use super::Inflight;
use crate::config::{LlmKv, KV_READ_TIMEOUT};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use huntlb_policy::llm::kv_fixed;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A page past this is not read further (counted failed). vLLM's, with its
/// histograms, is ~100 KB a model; 2 MiB is room for many models or LoRA
/// adapters, and what one agent holds at most for a poll.
pub const MAX_PAGE: usize = 2 << 20;

/// The metric read; every other line is skipped unparsed.
pub const METRIC: &str = "vllm:kv_cache_usage_perc";

/// Why a page gave no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// No sample of `METRIC`.
    Missing,
    /// A sample of it that is no number from 0 to 1 (NaN, negative, 2.0,
    /// text), or a line of it that is not a sample: the whole page is
    /// rejected, since a page that lies once says nothing sure.
    Bad,
}

/// `vllm:kv_cache_usage_perc` in parts per `KV_SCALE` from a Prometheus
/// text page: the largest of its samples (one per model or engine: the
/// fullest cache is the one a new request may wait on). Labels are skipped
/// with their quoted values (which may hold spaces, braces and escapes); an
/// optional timestamp after the value is ignored.
pub fn parse_kv(page: &str) -> Result<u32, Rejected> {
    let mut most: Option<u32> = None;
    for line in page.lines() {
        let Some(rest) = line.strip_prefix(METRIC) else { continue };
        // `vllm:kv_cache_usage_perc_foo` is another metric
        let rest = match rest.as_bytes().first() {
            Some(b'{') => after_labels(rest).ok_or(Rejected::Bad)?,
            Some(b' ' | b'\t') => rest,
            _ => continue,
        };
        let value = rest.split_ascii_whitespace().next().ok_or(Rejected::Bad)?;
        let v = kv_fixed(value.parse::<f64>().map_err(|_| Rejected::Bad)?).ok_or(Rejected::Bad)?;
        most = Some(most.map_or(v, |m| m.max(v)));
    }
    most.ok_or(Rejected::Missing)
}

/// What follows `{...}`, the quotes and escapes within respected; None if it never closes.
fn after_labels(s: &str) -> Option<&str> {
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in s.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(&s[i + 1..]),
            _ => {}
        }
    }
    None
}

/// The last good read, and the polls by result.
#[derive(Debug)]
pub struct KvRead {
    epoch: Instant,
    /// `(ms since epoch << 16) | parts per KV_SCALE` of the last good read,
    /// one word so the pair is read whole; `NEVER` before one.
    last: AtomicU64,
    /// Polls by result, in `LLM_KV_POLLS`' label order: ok, failed, rejected.
    pub polls: [AtomicU64; 3],
}

const NEVER: u64 = u64::MAX;

impl Default for KvRead {
    fn default() -> Self {
        KvRead { epoch: Instant::now(), last: AtomicU64::new(NEVER), polls: Default::default() }
    }
}

impl KvRead {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The last good read (parts per `KV_SCALE`) and its age in ms; None before one.
    pub fn read(&self) -> Option<(u32, u64)> {
        let w = self.last.load(Ordering::Acquire);
        (w != NEVER).then(|| ((w & 0xffff) as u32, self.now_ms().saturating_sub(w >> 16)))
    }

    pub fn store(&self, fixed: u32) {
        self.last.store((self.now_ms() << 16) | u64::from(fixed.min(0xffff)), Ordering::Release);
    }
}

/// Poll the page forever. A read that fails or is rejected is counted and
/// changes nothing (the last good one ages until stale). When the rule's
/// verdict flips (a read crosses the bound, or the last one goes stale),
/// `inflight`'s hook runs: the tier tells peers the new load, as for any
/// change of the count.
pub async fn poll(read: Arc<KvRead>, kv: LlmKv, inflight: Arc<Inflight>) {
    let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1).build_http();
    let mut tick = tokio::time::interval(kv.poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut full = false;
    loop {
        tick.tick().await;
        let got = tokio::time::timeout(KV_READ_TIMEOUT, fetch(&client, &kv.url)).await.unwrap_or(Err(Failed));
        let result = match got {
            Ok(page) => match std::str::from_utf8(&page).map_err(|_| Rejected::Bad).and_then(parse_kv) {
                Ok(v) => {
                    read.store(v);
                    0
                }
                Err(_) => 2,
            },
            Err(Failed) => 1,
        };
        read.polls[result].fetch_add(1, Ordering::Relaxed);
        let now = kv.bound.full(read.read());
        if now != full {
            full = now;
            tracing::info!(full, kv = ?read.read().map(|(v, _)| v), "KV-cache use crossed llm_kv_busy_at (or its read went stale)");
            inflight.changed();
        }
    }
}

struct Failed;

/// One GET: status 200 and a whole body of at most `MAX_PAGE`.
async fn fetch(client: &Client<HttpConnector, Empty<Bytes>>, url: &http::Uri) -> Result<Bytes, Failed> {
    let resp = client.get(url.clone()).await.map_err(|_| Failed)?;
    if resp.status() != http::StatusCode::OK {
        return Err(Failed);
    }
    let body = Limited::new(resp.into_body(), MAX_PAGE).collect().await.map_err(|_| Failed)?;
    Ok(body.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_metric_plain_labelled_and_timestamped_and_takes_the_largest() {
        let page = "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n\
                    # TYPE vllm:kv_cache_usage_perc gauge\n\
                    vllm:kv_cache_usage_perc_other 0.99\n\
                    vllm:num_requests_running{model_name=\"m\"} 3.0\n\
                    vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"a } b \\\" c\"} 0.25\n\
                    vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.5 1712345678000\n";
        assert_eq!(parse_kv(page), Ok(5000));
        assert_eq!(parse_kv("vllm:kv_cache_usage_perc 1\n"), Ok(10_000));
        assert_eq!(parse_kv("vllm:kv_cache_usage_perc 0.0\r\n"), Ok(0));
    }

    #[test]
    fn a_missing_metric_or_an_impossible_value_gives_nothing() {
        assert_eq!(parse_kv(""), Err(Rejected::Missing));
        assert_eq!(parse_kv("vllm:num_requests_running 3\nvllm:kv_cache_usage_percent 0.5\n"), Err(Rejected::Missing));
        for bad in ["NaN", "-0.1", "2.0", "+Inf", "x", ""] {
            assert_eq!(parse_kv(&format!("vllm:kv_cache_usage_perc {bad}\n")), Err(Rejected::Bad), "{bad}");
        }
        // one bad sample among good ones spoils the page
        assert_eq!(parse_kv("vllm:kv_cache_usage_perc{e=\"0\"} 0.2\nvllm:kv_cache_usage_perc{e=\"1\"} NaN\n"), Err(Rejected::Bad));
        // labels that never close
        assert_eq!(parse_kv("vllm:kv_cache_usage_perc{e=\"} 0.2\n"), Err(Rejected::Bad));
    }

    #[test]
    fn the_last_read_is_kept_with_its_age() {
        let r = KvRead::default();
        assert_eq!(r.read(), None);
        r.store(9500);
        let (v, age) = r.read().unwrap();
        assert_eq!(v, 9500);
        assert!(age < 60_000);
    }

    /// A loopback server answering every GET with `page` as it is then; its URL.
    async fn serve(page: Arc<std::sync::Mutex<Bytes>>) -> http::Uri {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/metrics", l.local_addr().unwrap()).parse().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else { return };
                let page = page.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    // one request a read (a GET with no body fits), until the client hangs up
                    while !matches!(s.read(&mut buf).await, Ok(0) | Err(_)) {
                        let body = page.lock().unwrap().clone();
                        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                        if s.write_all(head.as_bytes()).await.is_err() || s.write_all(&body).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        url
    }

    #[test]
    fn the_poll_tells_peers_when_the_verdict_flips_and_not_on_every_read() {
        use huntlb_policy::llm::KvBound;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let page = Arc::new(std::sync::Mutex::new(Bytes::from_static(b"vllm:kv_cache_usage_perc 0.5\n")));
            let url = serve(page.clone()).await;
            let inflight = Arc::new(Inflight::default());
            let told = Arc::new(AtomicU64::new(0));
            let t = told.clone();
            inflight.on_change(Box::new(move || {
                t.fetch_add(1, Ordering::Relaxed);
            }));
            let read = Arc::new(KvRead::default());
            let kv = LlmKv { url, poll: std::time::Duration::from_millis(10), bound: KvBound { busy_at: 9000, stale_ms: 60_000 } };
            tokio::spawn(poll(read.clone(), kv, inflight));
            // wait (at most 10 s) until `n` more good reads have happened, each at `v`
            let reads = |n: u64, v: u32| {
                let read = read.clone();
                async move {
                    let start = read.polls[0].load(Ordering::Relaxed);
                    for _ in 0..1000 {
                        if read.polls[0].load(Ordering::Relaxed) >= start + n && read.read().map(|r| r.0) == Some(v) {
                            return;
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                    panic!("no {n} reads of {v}");
                }
            };
            reads(3, 5000).await;
            assert_eq!(told.load(Ordering::Relaxed), 0); // below the bound: b unchanged, nothing to tell
            *page.lock().unwrap() = Bytes::from_static(b"vllm:kv_cache_usage_perc{model_name=\"m\"} 0.93\n");
            reads(3, 9300).await;
            assert_eq!(told.load(Ordering::Relaxed), 1); // crossed: told once, not per read
            *page.lock().unwrap() = Bytes::from_static(b"vllm:kv_cache_usage_perc 2.0\n"); // rejected: changes nothing
            let rejected = read.polls[2].load(Ordering::Relaxed);
            for _ in 0..1000 {
                if read.polls[2].load(Ordering::Relaxed) >= rejected + 3 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(read.polls[2].load(Ordering::Relaxed) >= rejected + 3);
            assert_eq!((read.read().map(|r| r.0), told.load(Ordering::Relaxed)), (Some(9300), 1));
            *page.lock().unwrap() = Bytes::from_static(b"vllm:kv_cache_usage_perc 0.1\n");
            reads(3, 1000).await;
            assert_eq!(told.load(Ordering::Relaxed), 2); // back below: told again
        });
    }

    /// The cost quoted in docs/llm.md: one parse of a vLLM-sized page (~120 KB:
    /// histograms of 2 models). `cargo test -p huntlb-agent --release kv_parse_cost -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn kv_parse_cost() {
        let mut page = String::new();
        for model in ["a", "b"] {
            for h in 0..40 {
                for le in 0..30 {
                    page.push_str(&format!("vllm:histogram_{h}_bucket{{model_name=\"{model}\",le=\"{le}.0\"}} {}\n", le * 7));
                }
            }
            page.push_str(&format!("vllm:kv_cache_usage_perc{{model_name=\"{model}\"}} 0.42\n"));
        }
        let n = 200;
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(parse_kv(std::hint::black_box(&page)).ok());
        }
        let per = t.elapsed() / n;
        println!("page {} bytes: one parse {:.1} us", page.len(), per.as_secs_f64() * 1e6);
        // and a whole poll: a GET of it from a loopback server, then the parse
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let url = serve(Arc::new(std::sync::Mutex::new(Bytes::from(page)))).await;
            let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1).build_http();
            let n = 200;
            let t = Instant::now();
            for _ in 0..n {
                let page = fetch(&client, &url).await.ok().unwrap();
                assert_eq!(parse_kv(std::str::from_utf8(&page).unwrap()), Ok(4200));
            }
            println!("one poll (GET over loopback + parse) {:.1} us", (t.elapsed() / n).as_secs_f64() * 1e6);
        });
    }
}
