//! huntlb-loadgen: open-loop HTTP load (see `huntlb_instruments::loadgen`).

use anyhow::Context;
use clap::Parser;
use huntlb_instruments::loadgen::{self, Arrival, Plan};
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(name = "huntlb-loadgen", version, about = "Open-loop HTTP load generator with coordinated-omission-corrected latency")]
struct Args {
    /// Target URL; repeat to spread requests over several proxies in turn.
    #[arg(long = "target", required = true)]
    targets: Vec<String>,
    /// Requests per second (ignored with --trace).
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Seconds of load.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// poisson (SRLB) or constant (wrk2).
    #[arg(long, default_value = "poisson")]
    arrival: String,
    /// Most requests in flight at once.
    #[arg(long, default_value_t = 1024)]
    max_inflight: usize,
    /// Per-request timeout, ms (a timeout counts as an error).
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Response header that names the serving backend.
    #[arg(long, default_value = "hunt-served-by")]
    served_by_header: String,
    /// A run whose p99 send lateness exceeds this is invalid, in microseconds.
    #[arg(long, default_value_t = 2_000)]
    max_lateness_us: u64,
    /// Replay a trace: lines of `SECONDS PATH` (offset from start, request path).
    #[arg(long)]
    trace: Option<String>,
    /// Write every request's outcome here, one line each, in schedule order:
    /// `INDEX OFFSET_US LATENCY_US STATUS` (status 0: an error), INDEX being its
    /// place in the schedule (with --trace, the trace's requests sorted by time).
    #[arg(long)]
    requests: Option<String>,
    /// Write the full report (histogram included) as JSON here.
    #[arg(long)]
    json: Option<String>,
    /// Draw each request's service demand here (`exp:20`, as the workload's
    /// `--demand`) from --seed, sent as `x-work-ms`: runs with one seed meet the
    /// same jobs.
    #[arg(long)]
    work: Option<String>,
    /// Pin the generator to this CPU (isolate it from what it measures).
    #[arg(long)]
    pin: Option<usize>,
    /// A header every request carries, `NAME:VALUE`; repeat for more.
    #[arg(long = "header")]
    headers: Vec<String>,
}

fn read_trace(path: &str) -> anyhow::Result<Vec<(Duration, String)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("--trace {path}"))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#')) {
        let (t, p) = line.trim().split_once(char::is_whitespace).with_context(|| format!("{path}:{}: want `SECONDS PATH`", n + 1))?;
        let t: f64 = t.parse().with_context(|| format!("{path}:{}: bad time `{t}`", n + 1))?;
        anyhow::ensure!(t >= 0.0 && p.trim().starts_with('/'), "{path}:{}: want `SECONDS /path`", n + 1);
        out.push((Duration::from_secs_f64(t), p.trim().to_string()));
    }
    out.sort_by_key(|x| x.0);
    Ok(out)
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if let Some(cpu) = a.pin {
        // sched_setaffinity on this process; threads created later inherit it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            anyhow::ensure!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0, "--pin {cpu}: sched_setaffinity failed");
        }
    }
    let arrival = match a.arrival.as_str() {
        "poisson" => Arrival::Poisson,
        "constant" => Arrival::Constant,
        other => anyhow::bail!("--arrival `{other}`: expected poisson or constant"),
    };
    let targets = a.targets.iter().map(|t| t.parse().with_context(|| format!("--target {t}"))).collect::<anyhow::Result<Vec<_>>>()?;
    let trace = a.trace.as_deref().map(read_trace).transpose()?;
    let duration = match &trace {
        Some(t) => t.last().map_or(Duration::ZERO, |x| x.0),
        None => Duration::from_secs_f64(a.duration),
    };
    let report = loadgen::run(Plan {
        targets,
        rate: a.rate,
        duration,
        arrival,
        max_inflight: a.max_inflight,
        timeout: Duration::from_millis(a.timeout_ms),
        seed: a.seed,
        served_by_header: a.served_by_header,
        max_lateness: Duration::from_micros(a.max_lateness_us),
        trace,
        work: a.work.as_deref().map(|w| w.parse().map_err(|e| anyhow::anyhow!("--work: {e}"))).transpose()?,
        headers: a
            .headers
            .iter()
            .map(|h| {
                let (k, v) = h.split_once(':').with_context(|| format!("--header `{h}`: want NAME:VALUE"))?;
                Ok((k.trim().parse().with_context(|| format!("--header `{h}`: bad name"))?, v.trim().parse().with_context(|| format!("--header `{h}`: bad value"))?))
            })
            .collect::<anyhow::Result<_>>()?,
        record_each: a.requests.is_some(),
    })?;
    if let Some(path) = &a.requests {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(path).with_context(|| format!("--requests {path}"))?);
        for r in &report.requests {
            writeln!(f, "{} {} {} {}", r.index, r.offset_us, r.latency_us, r.status).with_context(|| format!("--requests {path}"))?;
        }
        f.flush().with_context(|| format!("--requests {path}"))?;
    }
    print!("{}", loadgen::wrk2_text(&report));
    if let Some(path) = a.json {
        std::fs::write(&path, serde_json::to_string_pretty(&report)?).with_context(|| format!("--json {path}"))?;
    }
    std::process::exit(if report.valid { 0 } else { 3 });
}
