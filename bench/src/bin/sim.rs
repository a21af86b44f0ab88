//! huntlb-sim: the SRLB Poisson experiment as a discrete-event simulation
//! (see `huntlb_bench::sim`). Prints one JSON report per line, one per rate.

use anyhow::Context;
use clap::Parser;
use huntlb_bench::sim::{self, Dispatch};

#[derive(Parser, Debug)]
#[command(version, about = "Simulate random, hunting (SR_c, SR_dyn), least-request and ideal JSQ dispatch")]
struct Args {
    #[arg(long, default_value_t = 12)]
    servers: usize,
    #[arg(long, default_value_t = 32)]
    workers: u32,
    /// Emulated cores per server (processor sharing).
    #[arg(long, default_value_t = 2.0)]
    cores: f64,
    #[arg(long, default_value_t = 128)]
    backlog: u32,
    /// Mean exponential service demand, ms of one core.
    #[arg(long, default_value_t = 100.0)]
    mean_ms: f64,
    /// Arrival rates (req/s), comma separated.
    #[arg(long, value_delimiter = ',', required = true)]
    rate: Vec<f64>,
    #[arg(long, default_value_t = 20_000)]
    requests: u64,
    /// random, hunt:SPEC (hunt:static:4, hunt:dynamic), least, p2c or jsq.
    #[arg(long)]
    dispatch: String,
    /// Independent proxies (least and p2c see only their own requests).
    #[arg(long, default_value_t = 1)]
    proxies: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Sample busy workers per server this often, seconds (0: never).
    #[arg(long, default_value_t = 0.0)]
    sample_every: f64,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let dispatch: Dispatch = a.dispatch.parse().map_err(anyhow::Error::msg).context("--dispatch")?;
    anyhow::ensure!(a.servers >= 2, "--servers: need at least 2 (hunting needs a second candidate)");
    anyhow::ensure!(a.workers >= 1, "--workers: need at least 1");
    anyhow::ensure!(a.cores > 0.0 && a.cores.is_finite(), "--cores: must be positive");
    anyhow::ensure!(a.mean_ms > 0.0 && a.mean_ms.is_finite(), "--mean-ms: must be positive");
    anyhow::ensure!(a.proxies >= 1, "--proxies: need at least 1");
    anyhow::ensure!(a.rate.iter().all(|r| *r > 0.0 && r.is_finite()), "--rate: every rate must be positive");
    for rate in a.rate {
        let report = sim::run(&sim::Config {
            servers: a.servers,
            workers: a.workers,
            cores: a.cores,
            backlog: a.backlog,
            mean_s: a.mean_ms / 1e3,
            rate,
            requests: a.requests,
            dispatch,
            proxies: a.proxies,
            seed: a.seed,
            sample_every_s: a.sample_every,
        });
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(())
}
