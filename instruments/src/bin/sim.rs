//! huntlb-sim: the SRLB Poisson experiment as a discrete-event simulation
//! (see `huntlb_instruments::sim`). Prints one JSON report per line, one per rate.

use anyhow::Context;
use clap::Parser;
use huntlb_instruments::sim::{self, Assign, Dispatch, ServerSpec};
use huntlb_policy::forward::{default_sample_keep, DEFAULT_RESAMPLE_MS, DEFAULT_SAMPLE};

#[derive(Parser, Debug)]
#[command(name = "huntlb-sim", version, about = "Simulate random, p2c, least-request, hunting (over each) and ideal JSQ dispatch")]
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
    /// policy grammar (static:4, dynamic, dynamic:low=0.7,high=0.9);
    /// forward-RULE[:peer_margin=M,seen_margin=K|off], agents that share the fleet's counts and
    /// forward with the agent's knobs, its defaults unless given (see --fleet-delay-ms,
    /// --fleet-sample); prequal[:pool=16,probes=3,q=0.84,reuse=1,age=MS], probes and a pool at
    /// each front.
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
    /// forward-*: each agent hears only K other servers' counts, a sample it re-draws, as the
    /// agent's `fleet_sample` (0: every peer) [default: 8, the agent's; 0 with --fleet-view-ms or
    /// --fleet-probe, which model no sample].
    #[arg(long)]
    fleet_sample: Option<usize>,
    /// forward-* with a sample: each agent re-draws it this often, ms (agents staggered), as the
    /// agent's `fleet_resample_ms`.
    #[arg(long, default_value_t = DEFAULT_RESAMPLE_MS as f64)]
    fleet_resample_ms: f64,
    /// forward-* with a sample: a re-draw keeps this many members, those it sees lowest, as the
    /// agent's `fleet_sample_keep` [default: half the sample, at most 4].
    #[arg(long)]
    fleet_sample_keep: Option<usize>,
    /// Old name of --fleet-sample-keep: taken, with a warning.
    #[arg(long, hide = true)]
    fleet_keep: Option<usize>,
    /// forward-*: pull on demand instead of pushed counts: an agent about to decide by counts asks
    /// D random peers and decides on their answers, a round trip of --fleet-delay-ms later (0: push).
    #[arg(long, default_value_t = 0)]
    fleet_probe: usize,
    /// forward-*: how counts are shared beyond the shipped push, comma separated keys:
    /// over the pushed sample, level=H (a change goes out only across the counts 0..=H+1),
    /// delta=D (only a change of D or more), batch=MS (at most one count every MS), piggy (a
    /// forward's answer carries the peer's count); or instead of the sample, tokens=L[,expire=MS]
    /// (a server below L sends L - count tokens, each to one agent at random; an agent forwards
    /// only on a token); against herding, spread=J (forward at random among the J lowest below the
    /// own count), full (with level: a count at the cap is no target), memory=M[,age=MS] (with
    /// --fleet-probe: keep the M lowest earlier answers) [default: none, as shipped].
    #[arg(long, default_value = "")]
    fleet_share: String,
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
    let (mut cfg, rates, warnings) = setup(Args::parse())?;
    for w in warnings {
        eprintln!("huntlb-sim: warning: {w}");
    }
    for rate in rates {
        cfg.rate = rate;
        println!("{}", serde_json::to_string(&sim::run(&cfg))?);
    }
    Ok(())
}

/// The run's configuration (its rate still to set), the rates to run it at,
/// and what was taken but should be written otherwise (an old name), each a
/// line to print once.
fn setup(a: Args) -> anyhow::Result<(sim::Config, Vec<f64>, Vec<String>)> {
    let mut warnings: Vec<String> = Dispatch::warning(&a.dispatch).into_iter().collect();
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
        "--fleet-view-ms: only forward-RULE has agents that share a view of the fleet"
    );
    anyhow::ensure!(a.fleet_delay_ms >= 0.0 && a.fleet_delay_ms.is_finite(), "--fleet-delay-ms: must be 0 or positive");
    anyhow::ensure!(
        a.fleet_delay_ms == 0.0 || (a.fleet_view_ms == 0.0 && matches!(dispatch, Dispatch::Forward(..))),
        "--fleet-delay-ms: only with forward-RULE, and not with --fleet-view-ms"
    );
    anyhow::ensure!(a.hop_ms >= 0.0 && a.hop_ms.is_finite(), "--hop-ms: must be 0 or positive");
    let demand: sim::Demand = a.demand.parse().map_err(anyhow::Error::msg).context("--demand")?;
    let forward = matches!(dispatch, Dispatch::Forward(..));
    let given = a.fleet_sample.unwrap_or(0);
    anyhow::ensure!(given == 0 || forward, "--fleet-sample: only forward-RULE has agents that hear their peers");
    anyhow::ensure!(given == 0 || a.fleet_view_ms == 0.0, "--fleet-sample: counts are pushed to subscribers (--fleet-delay-ms), not --fleet-view-ms snapshots");
    anyhow::ensure!(a.hop_ms == 0.0 || a.fleet_view_ms == 0.0, "--hop-ms: not with --fleet-view-ms (use --fleet-delay-ms)");
    anyhow::ensure!(a.fleet_probe == 0 || (forward && given == 0 && a.fleet_view_ms == 0.0), "--fleet-probe: only forward-RULE, and not with --fleet-sample or --fleet-view-ms");
    anyhow::ensure!(a.fleet_probe < cores.len(), "--fleet-probe: {} peers, but there are only {} other servers", a.fleet_probe, cores.len() - 1);
    anyhow::ensure!(given < cores.len(), "--fleet-sample: {given} peers, but there are only {} other servers", cores.len() - 1);
    anyhow::ensure!(a.fleet_resample_ms > 0.0 && a.fleet_resample_ms.is_finite(), "--fleet-resample-ms: must be positive");
    // The agent's sample by default (its defaults are the policy crate's, one
    // place for both): the pushed counts the agent sends. Snapshots and pulls
    // model no sample, and other dispatchers have no tier. A default sample
    // above the other servers is all of them, as in the agent.
    let share: sim::Share = a.fleet_share.parse().map_err(anyhow::Error::msg).context("--fleet-share")?;
    anyhow::ensure!(a.fleet_share.is_empty() || forward, "--fleet-share: only forward-RULE has agents that share counts");
    anyhow::ensure!(
        share.tokens.is_none() || (given == 0 && a.fleet_probe == 0 && a.fleet_view_ms == 0.0),
        "--fleet-share: tokens replace the sample: not with --fleet-sample, --fleet-probe or --fleet-view-ms"
    );
    anyhow::ensure!(
        share.steal.is_none() || (a.fleet_sample == Some(0) && a.fleet_probe == 0 && a.fleet_view_ms == 0.0),
        "--fleet-share: steal shares no counts: need --fleet-sample 0, and not --fleet-probe or --fleet-view-ms"
    );
    anyhow::ensure!(share.memory == 0 || a.fleet_probe > 0, "--fleet-share: memory remembers pulled answers: need --fleet-probe above 0");
    let pushed = forward && a.fleet_view_ms == 0.0 && a.fleet_probe == 0 && share.tokens.is_none();
    let sample = a.fleet_sample.unwrap_or(if pushed { DEFAULT_SAMPLE } else { 0 });
    let keep = match (a.fleet_sample_keep, a.fleet_keep) {
        (Some(_), Some(_)) => anyhow::bail!("--fleet-sample-keep: given twice, as --fleet-keep (its old name) and as --fleet-sample-keep"),
        (None, Some(k)) => {
            warnings.push("--fleet-keep is deprecated: write --fleet-sample-keep (same meaning)".into());
            Some(k)
        }
        (k, None) => k,
    };
    anyhow::ensure!(sample > 0 || keep.is_none(), "--fleet-sample-keep: only meaningful with a sample (--fleet-sample above 0)");
    let keep = keep.unwrap_or_else(|| default_sample_keep(sample));
    anyhow::ensure!(!share.filtered() || (sample > 0 && a.fleet_delay_ms > 0.0), "--fleet-share: level, delta, batch and piggy filter the pushed sample: need --fleet-sample above 0 and --fleet-delay-ms");
    anyhow::ensure!(sample == 0 || keep < sample, "--fleet-sample-keep: {keep} must be below --fleet-sample ({sample}): each draw brings in at least one new peer");
    anyhow::ensure!(a.rate.iter().all(|r| *r > 0.0 && r.is_finite()), "--rate: every rate must be positive");
    anyhow::ensure!(a.rho.iter().all(|r| *r > 0.0 && r.is_finite()), "--rho: every load must be positive");
    if let Some(f) = a.freeze {
        anyhow::ensure!(f.server < cores.len(), "--freeze: server {} of {}", f.server, cores.len());
    }
    let cfg = sim::Config {
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
        fleet_sample: sample,
        fleet_resample_s: a.fleet_resample_ms / 1e3,
        fleet_sample_keep: keep,
        fleet_probe: a.fleet_probe,
        fleet_share: share,
        demand,
        seed: a.seed,
        sample_every_s: a.sample_every,
        freeze: a.freeze,
    };
    let rates: Vec<f64> = if a.rate.is_empty() { a.rho.iter().map(|r| r * cfg.capacity()).collect() } else { a.rate };
    Ok((cfg, rates, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use huntlb_policy::forward::Forwarding;

    fn setup_of(args: &[&str]) -> anyhow::Result<(sim::Config, Vec<f64>, Vec<String>)> {
        let argv = ["huntlb-sim", "--rate", "100"].iter().chain(args);
        setup(Args::try_parse_from(argv)?)
    }

    /// The tier's defaults are the agent's, from the policy crate (one place
    /// for both); `--help` quotes them.
    #[test]
    fn the_tier_defaults_are_the_agents() {
        let (c, _, w) = setup_of(&["--dispatch", "forward-least"]).unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(c.dispatch, Dispatch::Forward(sim::Rule::Least { k: 1 }, Forwarding::default()));
        assert_eq!((c.fleet_sample, c.fleet_sample_keep), (DEFAULT_SAMPLE, default_sample_keep(DEFAULT_SAMPLE)));
        assert_eq!(c.fleet_resample_s, DEFAULT_RESAMPLE_MS as f64 / 1e3);
        let (c, _, _) = setup_of(&["--dispatch", "forward-least", "--fleet-sample", "6"]).unwrap();
        assert_eq!((c.fleet_sample, c.fleet_sample_keep), (6, default_sample_keep(6)));
        // Snapshots and pulls model no sample; other dispatchers have no tier.
        for args in [&["--dispatch", "forward-least", "--fleet-probe", "4"][..], &["--dispatch", "forward-least", "--fleet-view-ms", "1"], &["--dispatch", "least"]] {
            let (c, _, _) = setup_of(args).unwrap();
            assert_eq!((c.fleet_sample, c.fleet_sample_keep), (0, 0), "{args:?}");
        }
        let help = <Args as clap::CommandFactory>::command().render_help().to_string();
        assert!(help.contains(&format!("[default: {DEFAULT_SAMPLE}, the agent's;")), "{help}");
        assert!(help.contains(&format!("[default: half the sample, at most {}]", huntlb_policy::forward::DEFAULT_SAMPLE_KEEP)), "{help}");
        assert!(help.contains(&format!("[default: {DEFAULT_RESAMPLE_MS}]")), "{help}");
    }

    /// `--fleet-keep`, the keep count's old name: taken with a warning naming
    /// the new one; both at once refused, naming the new one.
    #[test]
    fn the_old_keep_flag_is_taken_with_a_warning() {
        let tier = ["--dispatch", "forward-least", "--fleet-sample", "6"];
        let (old, _, w) = setup_of(&[&tier[..], &["--fleet-keep", "2"]].concat()).unwrap();
        assert_eq!(old.fleet_sample_keep, 2);
        assert_eq!(w, ["--fleet-keep is deprecated: write --fleet-sample-keep (same meaning)"]);
        let (new, _, w) = setup_of(&[&tier[..], &["--fleet-sample-keep", "2"]].concat()).unwrap();
        assert_eq!((new.fleet_sample_keep, w.len()), (2, 0));
        let e = setup_of(&[&tier[..], &["--fleet-keep", "2", "--fleet-sample-keep", "2"]].concat()).unwrap_err().to_string();
        assert!(e.starts_with("--fleet-sample-keep: given twice"), "{e}");
        // the agent's rules: below the sample, and only with one
        let e = setup_of(&[&tier[..], &["--fleet-sample-keep", "6"]].concat()).unwrap_err().to_string();
        assert!(e.starts_with("--fleet-sample-keep:"), "{e}");
        let e = setup_of(&["--dispatch", "forward-least", "--fleet-sample", "0", "--fleet-sample-keep", "1"]).unwrap_err().to_string();
        assert!(e.starts_with("--fleet-sample-keep:"), "{e}");
    }

    /// The forward dispatcher's old form and a policy's old key: the same run,
    /// and one warning naming the new spelling.
    #[test]
    fn old_dispatch_names_are_taken_with_a_warning() {
        for (old, new) in [
            ("forward-least:0:seen=1", "forward-least:peer_margin=0,seen_margin=1"),
            ("forward-least:2", "forward-least:peer_margin=2,seen_margin=off"),
            ("hunt-least:dynamic:slack=1", "hunt-least:dynamic:seen_margin=1"),
        ] {
            let (o, _, w) = setup_of(&["--dispatch", old]).unwrap();
            let (n, _, quiet) = setup_of(&["--dispatch", new]).unwrap();
            assert_eq!((o.dispatch, o.fleet_sample, quiet.len()), (n.dispatch, n.fleet_sample, 0), "{old}");
            assert_eq!(w.len(), 1, "{old}: {w:?}");
            assert!(w[0].starts_with(&format!("dispatch `{old}`: ")) && w[0].contains("deprecated"), "{}", w[0]);
            let named = if old.starts_with("forward") { new } else { "seen_margin" };
            assert!(w[0].contains(&format!("write `{named}`")), "{}", w[0]);
        }
    }
}
