//! huntlb-agent: a hunt/1 sidecar in front of one app instance.
//!
//! It answers offers with "accept" (forward to the app) or "busy" (425 at once),
//! per the acceptance policy; see `docs/protocol.md`.

use clap::Parser;
use huntlb_agent::config::Raw;

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let flags = Raw::parse();
    if flags.print_defaults {
        println!("{}", huntlb_agent::config::defaults_json());
        return std::process::ExitCode::SUCCESS;
    }
    let cfg = match Raw::load(flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("huntlb-agent: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    // once, at start: keys taken under an old name, each line naming the new one
    for w in &cfg.warnings {
        tracing::warn!("{w}");
    }
    // One thread by default: at a sidecar's load (a hundred requests a second)
    // every hop found a multi-thread runtime's workers parked, and the wake-ups
    // between them cost more than the requests (docs/agent.md, "Cost").
    let rt = match cfg.threads {
        1 => tokio::runtime::Builder::new_current_thread().enable_all().build(),
        n => tokio::runtime::Builder::new_multi_thread().worker_threads(n).enable_all().build(),
    }
    .expect("tokio runtime");
    match rt.block_on(huntlb_agent::server::run(cfg)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("huntlb-agent: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

