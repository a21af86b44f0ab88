//! huntlb-workload: an emulated multi-worker HTTP server (see `huntlb_instruments::workload`).

use anyhow::{bail, Context};
use clap::Parser;
use huntlb_instruments::serve::accept_each;
use huntlb_instruments::workload::{server, Demand};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;

#[derive(Parser, Debug)]
#[command(name = "huntlb-workload", version, about = "Emulated multi-worker HTTP server: n workers, a backlog, k emulated cores")]
struct Args {
    /// Address to listen on (give each instance its own 127.x.y.z).
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// Name reported in the `workload-id` header and in stats.
    #[arg(long, default_value = "app")]
    id: String,
    /// Worker slots n (SRLB: Apache prefork with 32 workers).
    #[arg(long, default_value_t = 32)]
    workers: usize,
    /// Requests that may wait for a worker before new ones get a fast 503 (SRLB: 128).
    #[arg(long, default_value_t = 128)]
    backlog: usize,
    /// Emulated cores k shared by busy workers (SRLB: 2-core VMs).
    #[arg(long, default_value_t = 2.0)]
    cores: f64,
    /// Service demand: const:MS, exp:MEAN_MS, lognormal:MEAN_MS:SIGMA, bimodal:SMALL:LARGE:P.
    #[arg(long, default_value = "exp:100")]
    demand: String,
    /// Random seed for the demand sampler.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 16 << 20)]
    max_body: usize,
    /// Append each arriving request's path to this file (survives a SIGKILL).
    #[arg(long)]
    arrivals: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let demand: Demand = args.demand.parse().context("--demand")?;
    if args.workers == 0 {
        bail!("--workers must be at least 1");
    }
    if !(args.cores > 0.0 && args.cores.is_finite()) {
        bail!("--cores must be a positive number");
    }
    let arrivals = match &args.arrivals {
        Some(p) => Some(std::fs::OpenOptions::new().create(true).append(true).open(p).with_context(|| format!("--arrivals {}", p.display()))?),
        None => None,
    };
    let app = server::App::new(server::Config {
        id: args.id.clone(),
        arrivals,
        workers: args.workers,
        backlog: args.backlog,
        cores: args.cores,
        demand,
        seed: args.seed,
        max_body: args.max_body,
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("--listen {}", args.listen))?;
    eprintln!("huntlb-workload {} listening on {}", args.id, args.listen);
    accept_each(listener, move |stream| {
        let app = app.clone();
        async move {
            let svc = service_fn(move |req| app.clone().handle(req));
            // Takes as many headers as the agent passes on (160): the tests send
            // clients' 95 headers plus the fronts' own through to it.
            let _ = http1::Builder::new().max_headers(200).serve_connection(TokioIo::new(stream), svc).await;
        }
    })
    .await
}
