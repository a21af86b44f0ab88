//! The workload app's HTTP side.
//!
//! * `ANY /...`: take a worker slot (waiting in the backlog if none is free; a
//!   full backlog answers 503 at once, like Apache with `tcp_abort_on_overflow`),
//!   read the body, run the service demand on the emulated cores, answer JSON
//!   describing what was received. Query `work_ms=F` (or header `x-work-ms`)
//!   overrides the demand; query `status=N` sets the answer's status, and each
//!   `hdr=NAME:VALUE` adds a response header (an app that sends what it should
//!   not, such as `hunt: busy`, for the exactly-once tests).
//! * `GET /.workload/stats`: counters, including the busy-worker time integral
//!   (the bench derives per-server load and the fairness index from it).
//! * `GET /.workload/health`: 200.
//!
//! With `arrivals` set, each request's path is also appended to that file when a
//! worker takes it: one line, one `write` (O_APPEND), so the count survives a
//! SIGKILL of the app (the exactly-once tests kill apps mid-run).

use crate::workload::{Demand, ProcessorSharing};
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use rand::{rngs::SmallRng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

pub struct Config {
    pub id: String,
    /// Append each arriving request's path here (see the module doc).
    pub arrivals: Option<std::fs::File>,
    pub workers: usize,
    pub backlog: usize,
    pub cores: f64,
    pub demand: Demand,
    pub seed: u64,
    pub max_body: usize,
}

/// Counted paths are capped so a long run cannot grow memory without bound.
const MAX_PATHS: usize = 100_000;

#[derive(Default)]
struct Stats {
    served: u64,
    backlog_rejected: u64,
    busy: u64,
    busy_integral_s: f64,
    busy_max: u64,
    last_change: Option<Instant>,
    bytes_in: u64,
    paths: HashMap<String, u64>,
    paths_dropped: u64,
}

impl Stats {
    fn account(&mut self, now: Instant) {
        if let Some(last) = self.last_change {
            self.busy_integral_s += self.busy as f64 * now.duration_since(last).as_secs_f64();
        }
        self.last_change = Some(now);
    }
}

/// One request on a worker: counted (and its path recorded) when it starts,
/// the worker released when it ends, however it ends.
struct Working<'a> {
    stats: &'a Mutex<Stats>,
}

impl<'a> Working<'a> {
    fn start(app: &'a App, path: &str) -> Self {
        if let Some(mut f) = app.cfg.arrivals.as_ref() {
            use std::io::Write;
            let _ = f.write_all(format!("{path}\n").as_bytes());
        }
        let stats = &app.stats;
        let mut s = stats.lock().unwrap();
        s.account(Instant::now());
        s.busy += 1;
        s.busy_max = s.busy_max.max(s.busy);
        if let Some(n) = s.paths.get_mut(path) {
            *n += 1;
        } else if s.paths.len() < MAX_PATHS {
            s.paths.insert(path.to_string(), 1);
        } else {
            s.paths_dropped += 1;
        }
        Working { stats }
    }

    /// The work is done and answered.
    fn served(self, bytes: u64) {
        let mut s = self.stats.lock().unwrap();
        s.served += 1;
        s.bytes_in += bytes;
    }
}

impl Drop for Working<'_> {
    fn drop(&mut self) {
        let mut s = self.stats.lock().unwrap();
        s.account(Instant::now());
        s.busy -= 1;
    }
}

pub struct App {
    cfg: Config,
    slots: Semaphore,
    waiting: AtomicUsize,
    ps: ProcessorSharing,
    rng: Mutex<SmallRng>,
    stats: Mutex<Stats>,
    started: Instant,
}

type Body = Full<Bytes>;

impl App {
    pub fn new(cfg: Config) -> Arc<Self> {
        Arc::new(App {
            slots: Semaphore::new(cfg.workers),
            waiting: AtomicUsize::new(0),
            ps: ProcessorSharing::new(cfg.cores),
            rng: Mutex::new(SmallRng::seed_from_u64(cfg.seed)),
            stats: Mutex::new(Stats::default()),
            started: Instant::now(),
            cfg,
        })
    }

    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Result<Response<Body>, hyper::Error> {
        match (req.method(), req.uri().path()) {
            (&Method::GET, "/.workload/stats") => return Ok(self.stats_response()),
            (&Method::GET, "/.workload/health") => return Ok(text(StatusCode::OK, "ok\n")),
            _ => {}
        }
        // A worker slot, or a place in the backlog, or a fast refusal.
        let permit = match self.slots.try_acquire() {
            Ok(p) => p,
            Err(_) => {
                if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.cfg.backlog {
                    self.waiting.fetch_sub(1, Ordering::AcqRel);
                    self.stats.lock().unwrap().backlog_rejected += 1;
                    let mut r = text(StatusCode::SERVICE_UNAVAILABLE, "workload: backlog full\n");
                    r.headers_mut().insert("workload", HeaderValue::from_static("backlog-full"));
                    r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                    return Ok(r);
                }
                let p = self.slots.acquire().await.expect("semaphore never closed");
                self.waiting.fetch_sub(1, Ordering::AcqRel);
                p
            }
        };
        let (parts, body) = req.into_parts();
        // Counted on arrival at a worker, not on completion: a request whose
        // client went away mid-work was still processed (the exactly-once tests
        // count it), and its worker is freed by the guard even if hyper drops
        // this future.
        let working = Working::start(&self, parts.uri.path());
        let body = Limited::new(body, self.cfg.max_body).collect().await;
        let demand = self.demand_for(&parts);
        let status = query(&parts.uri, "status")
            .and_then(|s| s.parse::<u16>().ok())
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::OK);
        let body = match body {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                drop(working);
                drop(permit);
                return Ok(text(StatusCode::PAYLOAD_TOO_LARGE, &format!("workload: body: {e}\n")));
            }
        };
        self.ps.run(demand).await;
        working.served(body.len() as u64);
        drop(permit);

        let hunt_seen: Vec<String> = parts
            .headers
            .keys()
            .filter(|k| k.as_str().starts_with("hunt"))
            .map(|k| k.as_str().to_string())
            .collect();
        // What the proxies in front said the client was, line by line: the
        // client-address tests read it (docs/agent.md, "The client's address").
        let forwarded_for: Vec<&str> = parts.headers.get_all("x-forwarded-for").iter().filter_map(|v| v.to_str().ok()).collect();
        let out = serde_json::json!({
            "id": self.cfg.id,
            "method": parts.method.as_str(),
            "path": parts.uri.path(),
            "len": body.len(),
            "fnv64": format!("{:016x}", fnv64(&body)),
            "work_ms": demand.as_secs_f64() * 1000.0,
            "hunt_headers_seen": hunt_seen,
            "x_forwarded_for": forwarded_for,
        });
        let mut r = Response::new(Full::new(Bytes::from(out.to_string() + "\n")));
        *r.status_mut() = status;
        let h = r.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Ok(v) = HeaderValue::from_str(&self.cfg.id) {
            h.insert("workload-id", v);
        }
        for (name, value) in query_all(&parts.uri, "hdr").filter_map(|kv| kv.split_once(':')) {
            if let (Ok(n), Ok(v)) = (header::HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
                h.append(n, v);
            }
        }
        Ok(r)
    }

    fn demand_for(&self, parts: &http::request::Parts) -> Duration {
        let given = query(&parts.uri, "work_ms")
            .or_else(|| parts.headers.get("x-work-ms").and_then(|v| v.to_str().ok()).map(str::to_string))
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0);
        match given {
            Some(ms) => Duration::from_secs_f64(ms / 1000.0),
            None => self.cfg.demand.sample(&mut *self.rng.lock().unwrap()),
        }
    }

    fn stats_response(&self) -> Response<Body> {
        let mut s = self.stats.lock().unwrap();
        s.account(Instant::now());
        let out = serde_json::json!({
            "id": self.cfg.id,
            "workers": self.cfg.workers,
            "backlog": self.cfg.backlog,
            "cores": self.cfg.cores,
            "demand_mean_ms": self.cfg.demand.mean_ms(),
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "served": s.served,
            "busy": s.busy,
            "busy_max": s.busy_max,
            "waiting": self.waiting.load(Ordering::Acquire),
            "backlog_rejected": s.backlog_rejected,
            "busy_integral_s": s.busy_integral_s,
            "bytes_in": s.bytes_in,
            "paths": s.paths,
            "paths_dropped": s.paths_dropped,
        });
        let mut r = Response::new(Full::new(Bytes::from(out.to_string() + "\n")));
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        r
    }
}

fn text(status: StatusCode, body: &str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

fn query(uri: &http::Uri, key: &str) -> Option<String> {
    query_all(uri, key).next().map(str::to_string)
}

fn query_all<'a>(uri: &'a http::Uri, key: &'a str) -> impl Iterator<Item = &'a str> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(move |(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// FNV-1a, 64 bit: enough to tell a body arrived intact, no dependency.
pub fn fnv64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}
