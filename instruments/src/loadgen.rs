//! An open-loop HTTP load generator.
//!
//! Arrivals follow a schedule (Poisson, as SRLB's traffic, or constant, as
//! wrk2's) that never waits for responses. Each request's latency is measured
//! from its *intended* send time, so a stalled server shows up as latency rather
//! than as fewer requests (coordinated omission). The schedule runs on its own
//! thread with `std::thread::sleep` (tens of microseconds of precision; tokio's
//! timer wheel is 1 ms) and hands requests to a tokio runtime.
//!
//! The generator checks itself (seed 003's lesson): it records how late each send
//! started and its own CPU time, and marks a run invalid when it fell behind.

use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use crate::workload::demand::Demand;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrival {
    Poisson,
    Constant,
}

#[derive(Debug, Clone)]
pub struct Plan {
    /// Requests go to these targets in turn (several proxies share one load).
    pub targets: Vec<Uri>,
    pub rate: f64,
    pub duration: Duration,
    pub arrival: Arrival,
    /// Most requests in flight at once; beyond it a request waits (and its wait
    /// counts as latency).
    pub max_inflight: usize,
    pub timeout: Duration,
    pub seed: u64,
    /// Response header naming the backend (per-backend counts).
    pub served_by_header: String,
    /// Marks the run invalid if the 99th percentile of send lateness exceeds this.
    pub max_lateness: Duration,
    /// Optional trace: (offset from start, path) pairs replayed instead of `rate`.
    pub trace: Option<Vec<(Duration, String)>>,
    /// Each request's service demand, drawn here from the seed and sent as
    /// `x-work-ms` (the workload app runs it instead of drawing its own): two
    /// runs with one seed then meet the same arrivals and the same jobs, and
    /// their difference is the balancer's alone (common random numbers).
    pub work: Option<Demand>,
    /// Headers every request carries (a bench that offers straight to an
    /// agent marks its requests as a front would).
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// Keep every request's outcome (`Report::requests`): a replay's figures
    /// bin latencies by send time and by path (seed 002's Figures 6-7), which
    /// one histogram cannot give.
    pub record_each: bool,
}

/// One request's outcome, when the plan asks for them (`record_each`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RequestRecord {
    /// Its place in the schedule (a trace's line order, sorted by time).
    pub index: u32,
    /// Intended send time, microseconds from the start.
    pub offset_us: u64,
    /// From the intended send time to the end of the response body.
    pub latency_us: u64,
    /// The HTTP status, or 0 for an error (timeout, connection).
    pub status: u16,
}

/// A latency summary in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub count: u64,
    pub mean_us: f64,
    pub stdev_us: f64,
    pub min_us: u64,
    pub max_us: u64,
    /// (percentile, microseconds), wrk2's --latency points and more.
    pub percentiles: Vec<(f64, u64)>,
}

impl Summary {
    pub fn of(h: &Histogram<u64>) -> Summary {
        let points = [50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 99.999, 100.0];
        Summary {
            count: h.len(),
            mean_us: h.mean(),
            stdev_us: h.stdev(),
            min_us: h.min(),
            max_us: h.max(),
            percentiles: points.iter().map(|&p| (p, h.value_at_quantile(p / 100.0))).collect(),
        }
    }

    pub fn at(&self, p: f64) -> u64 {
        self.percentiles.iter().find(|(q, _)| (*q - p).abs() < 1e-9).map_or(0, |x| x.1)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub targets: Vec<String>,
    pub arrival: Arrival,
    pub rate: f64,
    pub duration_s: f64,
    pub scheduled: u64,
    /// The seed the schedule and the jobs were drawn from.
    pub seed: u64,
    /// When the schedule's offset 0 was, in UNIX seconds: a request's
    /// `--requests` offset and latency place it on the wall clock, where an
    /// orchestrator's events are (the generator starts a moment after its
    /// caller asked, more on a busy machine).
    pub start_unix_s: f64,
    /// A digest (FNV-1a, hex) of what was to be sent: each request's offset,
    /// path and `x-work-ms`. Two runs with equal digests met the same arrivals
    /// and the same jobs, whatever balanced them (the demo's test checks its
    /// strategies are paired by it).
    pub schedule_digest: String,
    pub completed: u64,
    /// Requests answered (2xx or not) before the schedule ended: what the
    /// system kept up with. The rest were still in flight at the end (a few
    /// long jobs of a heavy-tailed demand, or a backlog that grew).
    pub completed_by_end: u64,
    pub errors: u64,
    /// Errors by kind (`timeout`, `connect`, or the innermost error's message), so
    /// a run's failures can be explained, not only counted.
    pub error_kinds: BTreeMap<String, u64>,
    pub achieved_rate: f64,
    pub latency: Summary,
    /// The whole latency distribution: (microseconds, count) per recorded bucket.
    pub histogram: Vec<(u64, u64)>,
    pub status: BTreeMap<u16, u64>,
    pub served_by: BTreeMap<String, u64>,
    /// How late sends started versus their schedule.
    pub send_lateness: Summary,
    pub cpu_s: f64,
    pub cpu_per_request_us: f64,
    /// False when the generator could not keep its schedule: not a result.
    pub valid: bool,
    pub invalid_reason: Option<String>,
    /// Every request's outcome in schedule order, with `record_each` (not in the JSON report).
    #[serde(skip)]
    pub requests: Vec<RequestRecord>,
}

struct Tally {
    completed_by_end: u64,
    latency: Histogram<u64>,
    lateness: Histogram<u64>,
    status: BTreeMap<u16, u64>,
    served_by: BTreeMap<String, u64>,
    errors: u64,
    error_kinds: BTreeMap<String, u64>,
    each: Option<Vec<RequestRecord>>,
}

/// Distinct error kinds kept by name; beyond that they count as `other`.
const MAX_ERROR_KINDS: usize = 16;

/// A short name for why a request failed.
fn error_kind(e: &anyhow::Error) -> String {
    if let Some(c) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
        if c.is_connect() {
            return "connect".into();
        }
    }
    e.chain().last().map_or_else(|| e.to_string(), |root| root.to_string())
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds")
}

fn cpu_seconds() -> f64 {
    // getrusage(RUSAGE_SELF): user + system time of this process.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// FNV-1a over each request's offset (ns), path and job size, as hex: equal
/// for two runs exactly when they were to send the same requests at the same
/// offsets with the same jobs (FNV: no dependency, and stable across builds).
fn schedule_digest(schedule: &[(Duration, Option<String>)], works: &[Option<String>]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for ((t, path), work) in schedule.iter().zip(works) {
        eat(&t.as_nanos().to_le_bytes());
        eat(path.as_deref().unwrap_or("").as_bytes());
        eat(b"\0");
        eat(work.as_deref().unwrap_or("").as_bytes());
        eat(b"\0");
    }
    format!("{h:016x}")
}

/// Each request's `x-work-ms`, in milliseconds, from the seed: a stream of its
/// own, so the arrivals are the same with or without it.
fn draw_works(seed: u64, n: usize, work: Option<Demand>) -> Vec<Option<String>> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x005E_ED0F_10B5);
    (0..n).map(|_| work.map(|d| format!("{:.3}", d.sample(&mut rng).as_secs_f64() * 1000.0))).collect()
}

/// Run the plan to completion (bounded by its duration plus the timeout).
pub fn run(plan: Plan) -> anyhow::Result<Report> {
    anyhow::ensure!(!plan.targets.is_empty(), "no target");
    anyhow::ensure!(plan.trace.is_some() || (plan.rate > 0.0 && plan.rate.is_finite()), "rate must be positive");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(plan.max_inflight)
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector);
    let tally = Arc::new(Mutex::new(Tally {
        latency: histogram(),
        lateness: histogram(),
        status: BTreeMap::new(),
        served_by: BTreeMap::new(),
        errors: 0,
        error_kinds: BTreeMap::new(),
        completed_by_end: 0,
        each: plan.record_each.then(Vec::new),
    }));
    let slots = Arc::new(Semaphore::new(plan.max_inflight));
    let served_by = http::HeaderName::from_bytes(plan.served_by_header.as_bytes())?;

    // The schedule: offsets from the start.
    let mut rng = SmallRng::seed_from_u64(plan.seed);
    let schedule: Vec<(Duration, Option<String>)> = match &plan.trace {
        Some(trace) => trace.iter().map(|(t, p)| (*t, Some(p.clone()))).collect(),
        None => {
            let mut out = Vec::new();
            let mut t = 0.0f64;
            let mean_gap = 1.0 / plan.rate;
            loop {
                t += match plan.arrival {
                    Arrival::Constant => mean_gap,
                    Arrival::Poisson => -mean_gap * (1.0 - rng.gen::<f64>()).ln(),
                };
                if t >= plan.duration.as_secs_f64() {
                    break;
                }
                out.push((Duration::from_secs_f64(t), None));
            }
            out
        }
    };
    let works = draw_works(plan.seed, schedule.len(), plan.work);
    let scheduled = schedule.len() as u64;
    let digest = schedule_digest(&schedule, &works);
    let cpu0 = cpu_seconds();
    let start = Instant::now() + Duration::from_millis(20);
    let start_unix_s = (std::time::SystemTime::now() + Duration::from_millis(20)).duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let schedule_end = start + schedule.last().map_or(Duration::ZERO, |(t, _)| *t).max(plan.duration);
    let handle = rt.handle().clone();
    let mut tasks = Vec::with_capacity(schedule.len());
    // Far behind schedule the numbers mean nothing: stop sending, report invalid.
    let give_up = (plan.max_lateness * 100).max(Duration::from_secs(1));
    let mut abandoned = 0u64;
    for (i, ((offset, path), work)) in schedule.into_iter().zip(works).enumerate() {
        let intended = start + offset;
        let now = Instant::now();
        if intended > now {
            std::thread::sleep(intended - now);
        }
        let late = Instant::now().saturating_duration_since(intended);
        if late > give_up {
            abandoned = scheduled - i as u64;
            break;
        }
        let base = &plan.targets[i % plan.targets.len()];
        let uri: Uri = match path {
            Some(p) => format!("{}{}", base.to_string().trim_end_matches('/'), p).parse()?,
            None => base.clone(),
        };
        let (client, tally, slots, served_by, timeout) = (client.clone(), tally.clone(), slots.clone(), served_by.clone(), plan.timeout);
        let headers = plan.headers.clone();
        let offset_us = offset.as_micros() as u64;
        tasks.push(handle.spawn(async move {
            let _permit = slots.acquire_owned().await;
            let mut req = Request::get(uri);
            if let Some(ms) = work {
                req = req.header("x-work-ms", ms);
            }
            for (k, v) in headers {
                req = req.header(k, v);
            }
            let req = req.body(Full::new(Bytes::new())).expect("request");
            let res = tokio::time::timeout(timeout, async {
                let resp = client.request(req).await?;
                let status = resp.status().as_u16();
                let by = resp.headers().get(&served_by).and_then(|v| v.to_str().ok()).map(str::to_string);
                resp.into_body().collect().await?;
                Ok::<_, anyhow::Error>((status, by))
            })
            .await;
            let elapsed = intended.elapsed();
            let mut t = tally.lock().unwrap();
            let _ = t.lateness.record(late.as_micros().max(1) as u64);
            let status = match &res {
                Ok(Ok((status, _))) => *status,
                _ => 0,
            };
            if let Some(each) = t.each.as_mut() {
                each.push(RequestRecord { index: i as u32, offset_us, latency_us: elapsed.as_micros() as u64, status });
            }
            match res {
                Ok(Ok((status, by))) => {
                    let _ = t.latency.record(elapsed.as_micros().max(1) as u64);
                    if Instant::now() <= schedule_end {
                        t.completed_by_end += 1;
                    }
                    *t.status.entry(status).or_default() += 1;
                    if let Some(by) = by {
                        *t.served_by.entry(by).or_default() += 1;
                    }
                }
                Ok(Err(e)) => {
                    t.errors += 1;
                    let kind = error_kind(&e);
                    let kind = if t.error_kinds.len() < MAX_ERROR_KINDS || t.error_kinds.contains_key(&kind) { kind } else { "other".into() };
                    *t.error_kinds.entry(kind).or_default() += 1;
                }
                Err(_) => {
                    t.errors += 1;
                    *t.error_kinds.entry("timeout".into()).or_default() += 1;
                }
            }
        }));
    }
    rt.block_on(async {
        if abandoned > 0 {
            // Invalid run: do not wait for a backlog of requests nobody will read.
            tasks.iter().for_each(|t| t.abort());
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    let wall = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let mut t = tally.lock().unwrap();
    let mut requests = t.each.take().unwrap_or_default();
    requests.sort_by_key(|r| r.index);
    let completed = t.latency.len();
    let lateness = Summary::of(&t.lateness);
    let p99_late = Duration::from_micros(lateness.at(99.0));
    let invalid_reason = if abandoned > 0 {
        Some(format!("generator fell more than {} ms behind; {abandoned} scheduled requests not sent", give_up.as_millis()))
    } else if p99_late > plan.max_lateness {
        Some(format!("generator fell behind: p99 send lateness {} us > {} us", p99_late.as_micros(), plan.max_lateness.as_micros()))
    } else {
        None
    };
    Ok(Report {
        targets: plan.targets.iter().map(|u| u.to_string()).collect(),
        arrival: plan.arrival,
        rate: plan.rate,
        duration_s: plan.duration.as_secs_f64(),
        scheduled,
        seed: plan.seed,
        start_unix_s,
        schedule_digest: digest,
        completed,
        completed_by_end: t.completed_by_end,
        errors: t.errors,
        error_kinds: t.error_kinds.clone(),
        achieved_rate: completed as f64 / wall.max(1e-9),
        latency: Summary::of(&t.latency),
        histogram: t.latency.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect(),
        status: t.status.clone(),
        served_by: t.served_by.clone(),
        send_lateness: lateness,
        cpu_s: cpu,
        cpu_per_request_us: cpu / scheduled.max(1) as f64 * 1e6,
        valid: invalid_reason.is_none(),
        invalid_reason,
        requests,
    })
}

fn fmt_us(us: f64) -> String {
    if us >= 1_000_000.0 {
        format!("{:.2}s", us / 1e6)
    } else if us >= 1000.0 {
        format!("{:.2}ms", us / 1e3)
    } else {
        format!("{us:.2}us")
    }
}

/// The report as text, in wrk2's `--latency` layout.
pub fn wrk2_text(r: &Report) -> String {
    let l = &r.latency;
    let mut o = String::new();
    o.push_str(&format!("Running {:.0}s test @ {}\n", r.duration_s, r.targets.join(", ")));
    o.push_str("  Thread Stats   Avg      Stdev     Max   +/- Stdev\n");
    o.push_str(&format!("    Latency {:>9} {:>9} {:>9}\n", fmt_us(l.mean_us), fmt_us(l.stdev_us), fmt_us(l.max_us as f64)));
    o.push_str("  Latency Distribution (HdrHistogram - Recorded Latency)\n");
    for (p, us) in &l.percentiles {
        o.push_str(&format!(" {:>7.3}% {:>9}\n", p, fmt_us(*us as f64)));
    }
    o.push_str(&format!("  {} requests in {:.2}s\n", r.completed, r.duration_s));
    let non2xx: u64 = r.status.iter().filter(|(s, _)| !(200..300).contains(*s)).map(|(_, n)| n).sum();
    if non2xx > 0 {
        o.push_str(&format!("  Non-2xx or 3xx responses: {non2xx}\n"));
    }
    if r.errors > 0 {
        // wrk2's line counts connect/read/write/timeout; we know timeouts and connects apart.
        let timeout = r.error_kinds.get("timeout").copied().unwrap_or(0);
        let connect = r.error_kinds.get("connect").copied().unwrap_or(0);
        o.push_str(&format!("  Socket errors: connect {connect}, read {}, write 0, timeout {timeout}\n", r.errors - timeout - connect));
    }
    o.push_str(&format!("Requests/sec: {:>10.2}\n", r.achieved_rate));
    if !r.valid {
        o.push_str(&format!("INVALID RUN: {}\n", r.invalid_reason.as_deref().unwrap_or("")));
    }
    o
}

/// Parse real wrk2 `--latency` output (for users who have wrk2): the latency
/// percentiles in microseconds and Requests/sec.
pub fn parse_wrk2(text: &str) -> Option<(Vec<(f64, u64)>, f64)> {
    let mut pts = Vec::new();
    let mut rps = None;
    let mut in_dist = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("Latency Distribution") {
            in_dist = true;
            continue;
        }
        if let Some(v) = t.strip_prefix("Requests/sec:") {
            rps = v.trim().parse::<f64>().ok();
        }
        if in_dist {
            match parse_point(t) {
                Some(pt) => pts.push(pt),
                None if pts.is_empty() => {}
                None => in_dist = false,
            }
        }
    }
    Some((pts, rps?))
}

/// `99.000%    2.56ms` -> (99.0, 2560)
fn parse_point(line: &str) -> Option<(f64, u64)> {
    let mut it = line.split_whitespace();
    let p = it.next()?.strip_suffix('%')?.parse::<f64>().ok()?;
    Some((p, parse_duration_us(it.next()?)?))
}

fn parse_duration_us(v: &str) -> Option<u64> {
    let (num, mult) = if let Some(n) = v.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e6)
    } else if let Some(n) = v.strip_suffix('m') {
        (n, 60e6)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|x| (x * mult).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRK2: &str = "Running 30s test @ http://127.0.0.1:80/\n  2 threads and 100 connections\n  Thread calibration: mean lat.: 1.234ms\n  Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency     1.08ms  526.19us   6.40ms   66.67%\n    Req/Sec     1.05k   115.61     1.55k    69.95%\n  Latency Distribution (HdrHistogram - Recorded Latency)\n 50.000%    1.03ms\n 75.000%    1.40ms\n 90.000%    1.75ms\n 99.000%    2.56ms\n 99.900%    3.72ms\n 99.990%    5.26ms\n 99.999%    6.40ms\n100.000%    6.40ms\n\n  Detailed Percentile spectrum:\n       Value   Percentile   TotalCount 1/(1-Percentile)\n\n       0.125     0.000000            1         1.00\n----\n  59992 requests in 30.00s, 20.00MB read\nRequests/sec:   1999.71\nTransfer/sec:    682.52KB\n";

    #[test]
    fn one_seed_draws_the_same_jobs_and_another_seed_others() {
        let exp: Demand = "exp:20".parse().unwrap();
        let a = draw_works(7, 2000, Some(exp));
        assert_eq!(a, draw_works(7, 2000, Some(exp)));
        assert_ne!(a, draw_works(8, 2000, Some(exp)));
        let ms: Vec<f64> = a.iter().map(|w| w.as_deref().unwrap().parse().unwrap()).collect();
        let mean = ms.iter().sum::<f64>() / ms.len() as f64;
        assert!((mean - 20.0).abs() < 2.0, "mean of 2000 draws of exp:20 is {mean}");
        assert!(draw_works(7, 3, None).iter().all(Option::is_none));
    }

    #[test]
    fn digest_changes_with_any_arrival_or_job() {
        let exp: Demand = "exp:20".parse().unwrap();
        let at = |ms: &[u64]| ms.iter().map(|m| (Duration::from_millis(*m), None)).collect::<Vec<_>>();
        let (s, w) = (at(&[1, 5, 9]), draw_works(7, 3, Some(exp)));
        let d = schedule_digest(&s, &w);
        assert_eq!(d, schedule_digest(&at(&[1, 5, 9]), &draw_works(7, 3, Some(exp))));
        assert_ne!(d, schedule_digest(&at(&[1, 5, 10]), &w), "an arrival moved");
        assert_ne!(d, schedule_digest(&s, &draw_works(8, 3, Some(exp))), "other jobs");
        assert_ne!(d, schedule_digest(&s, &draw_works(7, 3, None)), "no jobs");
    }

    #[test]
    fn parses_wrk2_latency_output() {
        let (pts, rps) = parse_wrk2(WRK2).unwrap();
        assert_eq!(rps, 1999.71);
        assert_eq!(pts[0], (50.0, 1030));
        assert_eq!(pts[3], (99.0, 2560));
        assert_eq!(pts.len(), 8);
    }

    #[test]
    fn own_text_parses_as_wrk2() {
        let mut h = histogram();
        for v in [1000u64, 2000, 3000] {
            h.record(v).unwrap();
        }
        let r = Report {
            targets: vec!["http://x/".into()],
            arrival: Arrival::Constant,
            rate: 3.0,
            duration_s: 1.0,
            scheduled: 3,
            seed: 1,
            start_unix_s: 0.0,
            schedule_digest: String::new(),
            completed: 3,
            completed_by_end: 3,
            errors: 0,
            error_kinds: BTreeMap::new(),
            achieved_rate: 3.0,
            latency: Summary::of(&h),
            histogram: vec![],
            status: BTreeMap::new(),
            served_by: BTreeMap::new(),
            send_lateness: Summary::of(&h),
            cpu_s: 0.0,
            cpu_per_request_us: 0.0,
            valid: true,
            invalid_reason: None,
            requests: Vec::new(),
        };
        let (pts, rps) = parse_wrk2(&wrk2_text(&r)).unwrap();
        assert_eq!(rps, 3.0);
        assert_eq!(pts[0].1, 2000);
    }
}
