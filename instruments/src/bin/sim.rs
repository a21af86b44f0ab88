//! huntlb-sim: the SRLB Poisson experiment as a discrete-event simulation
//! (see `huntlb_instruments::sim`). Prints one JSON report per line, one per rate.

use anyhow::Context;
use clap::Parser;
use huntlb_instruments::sim::{self, Assign, Dispatch, ServerSpec};

#[derive(Parser, Debug)]
#[command(version, about = "Simulate random, p2c, least-request, hunting (over each) and ideal JSQ dispatch")]
struct Args {
    /// Identical servers [default: 12]; with --cores-list, its length.
    #[arg(long)]
    servers: Option<usize>,
    /// Workers per server.
    #[arg(long, default_value_t = 32)]
    workers: u32,
    /// Workers per server = round(W × its cores), at least 1, instead of --workers.
    #[arg(long, conflicts_with = "workers")]
    workers_per_core: Option<f64>,
    /// Emulated cores per server (processor sharing).
    #[arg(long, default_value_t = 2.0)]
    cores: f64,
    /// Cores of each server, comma separated, for a mixed fleet (e.g. 1,1,2,2,4,4,8,8).
    #[arg(long, value_delimiter = ',', conflicts_with = "cores")]
    cores_list: Vec<f64>,
    #[arg(long, default_value_t = 128)]
    backlog: u32,
    /// Capacity-aware SR_dyn: each server's c_min is its cores (rounded up), as an
    /// agent configured `dynamic:c_min=<cores>` has.
    #[arg(long)]
    c_min_cores: bool,
    /// Mean exponential service demand, ms of one core.
    #[arg(long, default_value_t = 100.0)]
    mean_ms: f64,
    /// Arrival rates (req/s), comma separated.
    #[arg(long, value_delimiter = ',', required_unless_present = "rho", conflicts_with = "rho")]
    rate: Vec<f64>,
    /// Loads instead of rates: each ρ is a fraction of the nominal capacity (total cores / mean demand).
    #[arg(long, value_delimiter = ',')]
    rho: Vec<f64>,
    #[arg(long, default_value_t = 20_000)]
    requests: u64,
    /// random, p2c, least, least-of-K, jsq, or hunting over a rule: hunt:SPEC (random
    /// offer), hunt-p2c:SPEC, hunt-least:SPEC, hunt-least-of-K:SPEC, with SPEC the
    /// policy grammar (static:4, dynamic, dynamic:low=0.7,high=0.9); forward-RULE:SLACK[:seen=K],
    /// agents that share the fleet's counts (see --fleet-delay-ms, --fleet-sample); prequal[:pool=16,
    /// probes=3,q=0.84,reuse=1,age=MS], probes and a pool at each front.
    #[arg(long)]
    dispatch: String,
    /// Independent proxies (each rule's counts are only its own requests).
    #[arg(long, default_value_t = 1)]
    proxies: usize,
    /// How arrivals reach the proxies: turn (round robin) or random.
    #[arg(long, default_value = "turn")]
    assign: String,
    /// Proxies pick from a snapshot of their own counts refreshed every this many ms (0: live).
    #[arg(long, default_value_t = 0.0)]
    refresh_ms: f64,
    /// Load feedback: responses carry the server's true in-flight count (see huntlb_instruments::sim)
    #[arg(long)]
    feedback: bool,
    /// forward-*: the agents' shared view of the fleet is refreshed every this many ms (0: live).
    #[arg(long, default_value_t = 0.0)]
    fleet_view_ms: f64,
    /// forward-*: instead, every change of a server's count reaches the agents this many ms later.
    #[arg(long, default_value_t = 0.0)]
    fleet_delay_ms: f64,
    /// A forwarded request (agent to agent) and hunting's final reach their server this many ms
    /// after the decision; a Prequal probe's answer lands this late too.
    #[arg(long, default_value_t = 0.0)]
    hop_ms: f64,
    /// forward-*: each agent hears only K other servers' counts, a sample it re-draws (0: every peer).
    #[arg(long, default_value_t = 0)]
    fleet_sample: usize,
    /// forward-* with --fleet-sample: each agent re-draws its sample this often, ms (agents staggered).
    #[arg(long, default_value_t = 100.0)]
    fleet_resample_ms: f64,
    /// forward-* with --fleet-sample: a re-draw keeps this many members, those it sees lowest.
    #[arg(long, default_value_t = 0)]
    fleet_keep: usize,
    /// forward-*: pull on demand instead of pushed counts: an agent about to decide by counts asks
    /// D random peers and decides on their answers, a round trip of --fleet-delay-ms later (0: push).
    #[arg(long, default_value_t = 0)]
    fleet_probe: usize,
    /// Service demand: exp (exponential) or lognormal:SIGMA, both of mean --mean-ms.
    #[arg(long, default_value = "exp")]
    demand: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Sample busy workers per server this often, seconds (0: never).
    #[arg(long, default_value_t = 0.0)]
    sample_every: f64,
    /// Stop one server for a while: SERVER:FROM_S:TO_S (e.g. 0:3:7); its jobs wait, as under SIGSTOP.
    #[arg(long)]
    freeze: Option<sim::Freeze>,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let dispatch: Dispatch = a.dispatch.parse().map_err(anyhow::Error::msg).context("--dispatch")?;
    let assign: Assign = a.assign.parse().map_err(anyhow::Error::msg).context("--assign")?;
    anyhow::ensure!(a.workers >= 1, "--workers: need at least 1");
    if let Some(w) = a.workers_per_core {
        anyhow::ensure!(w > 0.0 && w.is_finite(), "--workers-per-core: must be positive");
    }
    anyhow::ensure!(a.cores > 0.0 && a.cores.is_finite(), "--cores: must be positive");
    let cores: Vec<f64> = if a.cores_list.is_empty() {
        vec![a.cores; a.servers.unwrap_or(12)]
    } else {
        anyhow::ensure!(a.cores_list.iter().all(|c| *c > 0.0 && c.is_finite()), "--cores-list: every entry must be positive");
        if let Some(s) = a.servers {
            anyhow::ensure!(s == a.cores_list.len(), "--servers: {s}, but --cores-list has {} entries", a.cores_list.len());
        }
        a.cores_list.clone()
    };
    anyhow::ensure!(cores.len() >= 2, "--servers: need at least 2 (hunting needs a second candidate)");
    let fleet: Vec<ServerSpec> = cores
        .iter()
        .map(|&c| ServerSpec {
            cores: c,
            workers: a.workers_per_core.map_or(a.workers, |w| ((w * c).round() as u32).max(1)),
            c_min: a.c_min_cores.then(|| c.ceil() as u32),
        })
        .collect();
    anyhow::ensure!(a.mean_ms > 0.0 && a.mean_ms.is_finite(), "--mean-ms: must be positive");
    anyhow::ensure!(a.proxies >= 1, "--proxies: need at least 1");
    anyhow::ensure!(a.refresh_ms >= 0.0 && a.refresh_ms.is_finite(), "--refresh-ms: must be 0 or positive");
    anyhow::ensure!(
        a.refresh_ms == 0.0 || dispatch.uses_own_view(),
        "--refresh-ms: --dispatch {dispatch} does not use the proxy's own counts, so a stale view changes nothing"
    );
    anyhow::ensure!(a.fleet_view_ms >= 0.0 && a.fleet_view_ms.is_finite(), "--fleet-view-ms: must be 0 or positive");
    anyhow::ensure!(
        a.fleet_view_ms == 0.0 || matches!(dispatch, Dispatch::Forward(..)),
        "--fleet-view-ms: only forward-RULE:SLACK has agents that share a view of the fleet"
    );
    anyhow::ensure!(a.fleet_delay_ms >= 0.0 && a.fleet_delay_ms.is_finite(), "--fleet-delay-ms: must be 0 or positive");
    anyhow::ensure!(
        a.fleet_delay_ms == 0.0 || (a.fleet_view_ms == 0.0 && matches!(dispatch, Dispatch::Forward(..))),
        "--fleet-delay-ms: only with forward-RULE:SLACK, and not with --fleet-view-ms"
    );
    anyhow::ensure!(a.hop_ms >= 0.0 && a.hop_ms.is_finite(), "--hop-ms: must be 0 or positive");
    let demand: sim::Demand = a.demand.parse().map_err(anyhow::Error::msg).context("--demand")?;
    let forward = matches!(dispatch, Dispatch::Forward(..));
    anyhow::ensure!(a.fleet_sample == 0 || forward, "--fleet-sample: only forward-RULE:SLACK has agents that hear their peers");
    anyhow::ensure!(a.fleet_sample == 0 || a.fleet_view_ms == 0.0, "--fleet-sample: counts are pushed to subscribers (--fleet-delay-ms), not --fleet-view-ms snapshots");
    anyhow::ensure!(a.hop_ms == 0.0 || a.fleet_view_ms == 0.0, "--hop-ms: not with --fleet-view-ms (use --fleet-delay-ms)");
    anyhow::ensure!(a.fleet_probe == 0 || (forward && a.fleet_sample == 0 && a.fleet_view_ms == 0.0), "--fleet-probe: only forward-RULE:SLACK, and not with --fleet-sample or --fleet-view-ms");
    anyhow::ensure!(a.fleet_probe < cores.len(), "--fleet-probe: {} peers, but there are only {} other servers", a.fleet_probe, cores.len() - 1);
    anyhow::ensure!(a.fleet_resample_ms > 0.0 && a.fleet_resample_ms.is_finite(), "--fleet-resample-ms: must be positive");
    anyhow::ensure!(a.fleet_keep <= a.fleet_sample, "--fleet-keep: {} is more than --fleet-sample {}", a.fleet_keep, a.fleet_sample);
    anyhow::ensure!(a.fleet_sample < cores.len(), "--fleet-sample: {} peers, but there are only {} other servers", a.fleet_sample, cores.len() - 1);
    anyhow::ensure!(a.rate.iter().all(|r| *r > 0.0 && r.is_finite()), "--rate: every rate must be positive");
    anyhow::ensure!(a.rho.iter().all(|r| *r > 0.0 && r.is_finite()), "--rho: every load must be positive");
    if let Some(f) = a.freeze {
        anyhow::ensure!(f.server < cores.len(), "--freeze: server {} of {}", f.server, cores.len());
    }
    let mut cfg = sim::Config {
        fleet,
        backlog: a.backlog,
        mean_s: a.mean_ms / 1e3,
        rate: 0.0,
        requests: a.requests,
        dispatch,
        proxies: a.proxies,
        assign,
        refresh_s: a.refresh_ms / 1e3,
        feedback: a.feedback,
        fleet_view_s: a.fleet_view_ms / 1e3,
        fleet_delay_s: a.fleet_delay_ms / 1e3,
        hop_s: a.hop_ms / 1e3,
        fleet_sample: a.fleet_sample,
        fleet_resample_s: a.fleet_resample_ms / 1e3,
        fleet_keep: a.fleet_keep,
        fleet_probe: a.fleet_probe,
        demand,
        seed: a.seed,
        sample_every_s: a.sample_every,
        freeze: a.freeze,
    };
    let rates: Vec<f64> = if a.rate.is_empty() { a.rho.iter().map(|r| r * cfg.capacity()).collect() } else { a.rate };
    for rate in rates {
        cfg.rate = rate;
        println!("{}", serde_json::to_string(&sim::run(&cfg))?);
    }
    Ok(())
}
