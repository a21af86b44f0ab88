//! huntlb-epp: an endpoint picker in the style of the Gateway API Inference
//! Extension's (scoring in `huntlb_instruments::epp`), the baseline huntlb's
//! LLM gateways are measured against.
//!
//! It scrapes every model server's `/metrics` each `--interval-ms` (GIE's
//! `--refresh-metrics-interval`, 50 ms) and answers any request (Envoy's
//! `ext_authz` check in HTTP-service mode) with 200 and
//! `x-gateway-destination-endpoint: ip:port`, the endpoint its scores rank
//! first; 503 when no server has a fresh scrape (`x-epp-error` says so). GIE's EPP speaks ext_proc
//! (gRPC) and reads the body too; an HTTP check keeps the same round trip per
//! request without gRPC's protos. With `--prefix-scorer` it scores GIE's
//! prefix-cache-scorer too, from the body the check carries (Envoy's
//! `with_request_body`; at most MAX_BODY read, a longer one not parsed) and
//! records each pick in its prefix index. Its own counters: `GET /.epp/metrics`.

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Parser;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full, Limited};
use huntlb_instruments::epp::{
    hash_prompt, parse_metrics, pick_with, prefix_scores, user_input, PrefixIndex, Scrape, CHARS_PER_TOKEN, DEFAULT_BLOCK_SIZE_TOKENS,
    MAX_PREFIX_BLOCKS,
};
use huntlb_instruments::serve::accept_each;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::{rngs::SmallRng, SeedableRng};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(name = "huntlb-epp", version, about = "Endpoint picker (GIE EPP style): scrapes model servers' /metrics, answers ext_authz checks with x-gateway-destination-endpoint")]
struct Args {
    /// Address the checks come to.
    #[arg(long, default_value = "127.0.0.1:9002")]
    listen: SocketAddr,
    /// The model servers, ip:port each (comma-separated or repeated): where
    /// requests go, and whose /metrics are scraped.
    #[arg(long = "server", value_delimiter = ',', required = true)]
    servers: Vec<SocketAddr>,
    /// Scrape each server's /metrics at its IP and this port instead of its
    /// own (GIE's --model-server-metrics-port): with an agent beside each
    /// model server, requests go to the agent's port and the engine's gauges
    /// are read from the engine's.
    #[arg(long)]
    metrics_port: Option<u16>,
    /// Scrape interval, ms (GIE's --refresh-metrics-interval: 50 ms).
    #[arg(long, default_value_t = 50)]
    interval_ms: u64,
    /// A server whose last good scrape is older than this is no candidate, ms
    /// (GIE calls metrics this old stale: 2 s).
    #[arg(long, default_value_t = 2000)]
    stale_ms: u64,
    /// The response header that names the endpoint.
    #[arg(long, default_value = "x-gateway-destination-endpoint")]
    header: String,
    /// Seed of the random tie-break.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Score GIE's prefix-cache-scorer (weight 3) from the request body the
    /// check carries, and record each pick in the prefix index.
    #[arg(long)]
    prefix_scorer: bool,
}

/// Largest check body read (the bench's Envoys send at most 1 MiB:
/// bench/benchlib/llmfleet.py's WITH_REQUEST_BODY): past it, no prefix score.
const MAX_BODY: usize = 4 << 20;

struct Endpoint {
    addr: SocketAddr,
    // where its /metrics is read: addr, or addr's IP at --metrics-port
    metrics: SocketAddr,
    last: Mutex<Option<(Scrape, Instant)>>,
    picked: AtomicU64,
}

struct State {
    eps: Vec<Endpoint>,
    stale: Duration,
    header: http::HeaderName,
    rng: Mutex<SmallRng>,
    scrapes: AtomicU64,
    scrape_errors: AtomicU64,
    scrape_bytes: AtomicU64,
    no_endpoint: AtomicU64,
    /// GIE's prefix index, when --prefix-scorer.
    prefix: Option<Mutex<PrefixIndex>>,
    prefix_unparsed: AtomicU64,
    prefix_blocks: AtomicU64,
    prefix_blocks_matched: AtomicU64,
}

type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>;

impl State {
    /// The endpoint to send a request to; `body` is its body as the check
    /// carried it (None when not read: the prefix scorer off).
    fn choose(&self, body: Option<&[u8]>) -> Option<&Endpoint> {
        let now = Instant::now();
        let c: Vec<Option<Scrape>> = self
            .eps
            .iter()
            .map(|e| e.last.lock().expect("scrape").filter(|(_, at)| now.duration_since(*at) <= self.stale).map(|(s, _)| s))
            .collect();
        let Some(ix) = &self.prefix else {
            let i = pick_with(&c, &[], &mut *self.rng.lock().expect("rng"))?;
            return Some(&self.eps[i]);
        };
        // GIE's AutoTune: the block size the first candidate's server reports
        let block_tokens = match c.iter().flatten().next() {
            Some(s) if s.block_size > 0 => s.block_size as usize,
            _ => DEFAULT_BLOCK_SIZE_TOKENS,
        };
        let hashes = match body.and_then(user_input) {
            Some((model, salt, input)) => hash_prompt(&model, &salt, &input, block_tokens * CHARS_PER_TOKEN, MAX_PREFIX_BLOCKS),
            None => {
                self.prefix_unparsed.fetch_add(1, Ordering::Relaxed);
                Vec::new()
            }
        };
        let mut ix = ix.lock().expect("prefix index");
        let matched = ix.matched(&hashes);
        let i = pick_with(&c, &prefix_scores(&matched, hashes.len()), &mut *self.rng.lock().expect("rng"))?;
        // GIE's PreRequest: the picked server holds these blocks now, its LRU
        // as large as its KV cache when it says (AutoTune)
        ix.record(&hashes, i, c[i].map_or(0, |s| s.num_gpu_blocks as usize));
        self.prefix_blocks.fetch_add(hashes.len() as u64, Ordering::Relaxed);
        self.prefix_blocks_matched.fetch_add(matched[i] as u64, Ordering::Relaxed);
        Some(&self.eps[i])
    }

    fn answer(&self, path: &str, body: Option<&[u8]>) -> Response<Body> {
        if path == "/.epp/metrics" {
            let mut s = String::new();
            s.push_str(&format!("huntlb_epp_scrapes_total {}\n", self.scrapes.load(Ordering::Relaxed)));
            s.push_str(&format!("huntlb_epp_scrape_errors_total {}\n", self.scrape_errors.load(Ordering::Relaxed)));
            s.push_str(&format!("huntlb_epp_scrape_bytes_total {}\n", self.scrape_bytes.load(Ordering::Relaxed)));
            s.push_str(&format!("huntlb_epp_no_endpoint_total {}\n", self.no_endpoint.load(Ordering::Relaxed)));
            if self.prefix.is_some() {
                // GIE's prefix_indexer_hit_ratio in blocks: matched at the picked server over the prompts'
                s.push_str(&format!("huntlb_epp_prefix_unparsed_total {}\n", self.prefix_unparsed.load(Ordering::Relaxed)));
                s.push_str(&format!("huntlb_epp_prefix_blocks_total {}\n", self.prefix_blocks.load(Ordering::Relaxed)));
                s.push_str(&format!("huntlb_epp_prefix_blocks_matched_total {}\n", self.prefix_blocks_matched.load(Ordering::Relaxed)));
            }
            for e in &self.eps {
                s.push_str(&format!("huntlb_epp_picks_total{{endpoint=\"{}\"}} {}\n", e.addr, e.picked.load(Ordering::Relaxed)));
            }
            return Response::new(Full::new(Bytes::from(s)).boxed_unsync());
        }
        match self.choose(body) {
            Some(e) => {
                e.picked.fetch_add(1, Ordering::Relaxed);
                let mut r = Response::new(Empty::new().boxed_unsync());
                r.headers_mut().insert(self.header.clone(), e.addr.to_string().parse().expect("an address is a header value"));
                r
            }
            None => {
                self.no_endpoint.fetch_add(1, Ordering::Relaxed);
                let mut r = Response::new(Full::new(Bytes::from_static(b"no model server with a fresh scrape\n")).boxed_unsync());
                *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                // Envoy's ext_authz passes a denial's allowed headers to the client, not its body
                r.headers_mut().insert("x-epp-error", http::HeaderValue::from_static("no model server with a fresh scrape"));
                r
            }
        }
    }
}

async fn scrape_loop(st: Arc<State>, i: usize, every: Duration) {
    let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let uri: http::Uri = format!("http://{}/metrics", st.eps[i].metrics).parse().expect("uri");
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let got = tokio::time::timeout(every.max(Duration::from_millis(500)), async {
            let r = client.get(uri.clone()).await?;
            if !r.status().is_success() {
                anyhow::bail!("status {}", r.status());
            }
            Ok::<_, anyhow::Error>(r.into_body().collect().await?.to_bytes())
        })
        .await;
        st.scrapes.fetch_add(1, Ordering::Relaxed);
        match got {
            Ok(Ok(body)) => {
                st.scrape_bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                match std::str::from_utf8(&body).ok().and_then(parse_metrics) {
                    Some(s) => *st.eps[i].last.lock().expect("scrape") = Some((s, Instant::now())),
                    None => {
                        st.scrape_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            _ => {
                st.scrape_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if a.interval_ms == 0 {
        bail!("--interval-ms must be at least 1");
    }
    if a.metrics_port == Some(0) {
        bail!("--metrics-port must be a port (1-65535)");
    }
    let header: http::HeaderName = a.header.parse().context("--header")?;
    let st = Arc::new(State {
        eps: a
            .servers
            .iter()
            .map(|&addr| Endpoint {
                addr,
                metrics: a.metrics_port.map_or(addr, |port| SocketAddr::new(addr.ip(), port)),
                last: Mutex::new(None),
                picked: AtomicU64::new(0),
            })
            .collect(),
        stale: Duration::from_millis(a.stale_ms),
        header,
        rng: Mutex::new(SmallRng::seed_from_u64(a.seed)),
        scrapes: AtomicU64::new(0),
        scrape_errors: AtomicU64::new(0),
        scrape_bytes: AtomicU64::new(0),
        no_endpoint: AtomicU64::new(0),
        prefix: a.prefix_scorer.then(|| Mutex::new(PrefixIndex::new(a.servers.len()))),
        prefix_unparsed: AtomicU64::new(0),
        prefix_blocks: AtomicU64::new(0),
        prefix_blocks_matched: AtomicU64::new(0),
    });
    for i in 0..st.eps.len() {
        tokio::spawn(scrape_loop(st.clone(), i, Duration::from_millis(a.interval_ms)));
    }
    let listener = tokio::net::TcpListener::bind(a.listen).await.with_context(|| format!("--listen {}", a.listen))?;
    eprintln!("huntlb-epp listening on {}, {} model servers scraped every {} ms{}", a.listen, st.eps.len(), a.interval_ms,
              if a.prefix_scorer { ", prefix-cache-scorer on" } else { "" });
    accept_each(listener, move |stream| {
        let st = st.clone();
        async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let st = st.clone();
                async move {
                    let path = req.uri().path().to_string();
                    if st.prefix.is_none() || path == "/.epp/metrics" {
                        return Ok::<_, std::convert::Infallible>(st.answer(&path, None));
                    }
                    // the client's body as Envoy forwards it: untrusted, bounded; one
                    // that fails to arrive whole is no prompt (scores 0), still answered
                    let body = Limited::new(req.into_body(), MAX_BODY).collect().await.ok().map(|b| b.to_bytes());
                    Ok(st.answer(&path, Some(body.as_deref().unwrap_or(b""))))
                }
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        }
    })
    .await
}
