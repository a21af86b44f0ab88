//! The agent's counters: plain atomics bumped on the hot path, rendered as
//! Prometheus text only when /metrics is scraped. Names, types and help come
//! from the policy crate's one table (`huntlb_policy::metrics`), shared with
//! both sidecars.

use huntlb_policy::metrics::{self as M, Metric};
use huntlb_policy::Reason;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the latency histogram, in seconds: from a cache hit
/// (0.1 ms) to the front's 60 s, past `app_timeout_ms` (55 s by default), so
/// an LLM stream's head or a slow report lands in a bucket, not in +Inf.
pub const BUCKETS: [f64; 20] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    60.0,
];

/// What became of an offer: counted once, by `dispatch` (`Metrics::offer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Accepted,
    Refused(Reason),
}

#[derive(Default)]
pub struct Metrics {
    offers_accepted: AtomicU64,
    /// By reason, in `Reason::ALL` order.
    refused: [AtomicU64; Reason::ALL.len()],
    pub refusals_closed: AtomicU64,
    pub finals: AtomicU64,
    /// Finals that arrived at or above the policy's threshold (the scaling signal).
    pub finals_busy: AtomicU64,
    pub plain: AtomicU64,
    pub malformed: AtomicU64,
    pub health_checks: AtomicU64,
    pub tls_handshake_failures: AtomicU64,
    pub app_errors_connect: AtomicU64,
    pub app_errors_timeout: AtomicU64,
    pub app_errors_other: AtomicU64,
    /// Requests sent to the app again: it had closed the pooled connection
    /// before any of the request was written.
    pub app_resends: AtomicU64,
    /// Forwards to peers by outcome, in `FORWARDS`' label order.
    pub forwards_sent: AtomicU64,
    pub forwards_unreachable: AtomicU64,
    pub forwards_refused: AtomicU64,
    pub forwards_withdrawn: AtomicU64,
    pub forwards_failed: AtomicU64,
    /// Offers read for their prompt (`llm_prefix_bytes`), in `LLM_PREFIX`'s label order.
    pub prefix: [AtomicU64; 3],
    /// Peers' forwards given to the app after their go, and withdrawn before it.
    pub taken_here: AtomicU64,
    pub withdrawn_here: AtomicU64,
    latency_buckets: [AtomicU64; BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
}

/// Values read at scrape time from elsewhere.
pub struct Gauges {
    pub inflight: u64,
    pub busy: u64,
    pub c: Option<u32>,
    pub workers: u32,
    pub app_up: bool,
    pub stalled: bool,
    pub draining: bool,
    /// Connections held on `listen`, and `max_connections`.
    pub connections: u64,
    pub connections_max: u64,
    /// With load = apache: (polls, failed polls). A failing status page keeps
    /// the last BusyWorkers, so its failures must be visible.
    pub apache_polls: Option<(u64, u64)>,
    /// With load = llm: the prefill backlog in seats.
    pub llm_prefill_seats: Option<u64>,
    /// With llm_metrics_url: the KV-cache read.
    pub llm_kv: Option<KvGauges>,
    /// With fleet_listen: the tier's gauges and counters.
    pub fleet: Option<crate::fleet::Gauges>,
    /// With llm_prefix_bytes: prefix affinity is on.
    pub prefix: bool,
}

impl Metrics {
    /// An offer's fate: the one place offers are counted.
    pub fn offer(&self, fate: Fate) {
        match fate {
            Fate::Accepted => {
                self.offers_accepted.fetch_add(1, Relaxed);
            }
            Fate::Refused(why) => {
                let i = Reason::ALL.iter().position(|r| *r == why).expect("ALL holds every reason");
                self.refused[i].fetch_add(1, Relaxed);
            }
        }
    }

    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| s <= *b) {
            self.latency_buckets[i].fetch_add(1, Relaxed);
        }
        self.latency_count.fetch_add(1, Relaxed);
        self.latency_sum_us.fetch_add(d.as_micros() as u64, Relaxed);
    }

    pub fn render(&self, g: &Gauges) -> String {
        let mut o = String::with_capacity(4096);
        let v = |a: &AtomicU64| a.load(Relaxed);
        let refused_total: u64 = self.refused.iter().map(v).sum();
        labelled(&mut o, &M::OFFERS, &[v(&self.offers_accepted) as f64, refused_total as f64]);
        labelled(&mut o, &M::REFUSALS, &self.refused.each_ref().map(|a| v(a) as f64));
        for (m, a) in [
            (M::REFUSALS_CLOSED, &self.refusals_closed),
            (M::FINALS, &self.finals),
            (M::FINALS_BUSY, &self.finals_busy),
            (M::PLAIN, &self.plain),
            (M::MALFORMED, &self.malformed),
            (M::HEALTH_CHECKS, &self.health_checks),
            (M::TLS_HANDSHAKE_FAILURES, &self.tls_handshake_failures),
            (M::APP_RESENDS, &self.app_resends),
        ] {
            single(&mut o, &m, v(a) as f64);
        }
        let errors = [&self.app_errors_connect, &self.app_errors_timeout, &self.app_errors_other];
        labelled(&mut o, &M::APP_ERRORS, &errors.map(|a| v(a) as f64));
        if let Some((polls, failed)) = g.apache_polls {
            labelled(&mut o, &M::APACHE_POLLS, &[(polls - failed) as f64, failed as f64]);
        }
        if let Some(seats) = g.llm_prefill_seats {
            single(&mut o, &M::LLM_PREFILL_SEATS, seats as f64);
        }
        if let Some(kv) = &g.llm_kv {
            single(&mut o, &M::LLM_KV_USAGE, f64::from(kv.usage) / f64::from(huntlb_policy::llm::KV_SCALE));
            single(&mut o, &M::LLM_KV_FULL, f64::from(u8::from(kv.full)));
            labelled(&mut o, &M::LLM_KV_POLLS, &kv.polls.map(|n| n as f64));
        }
        if g.prefix {
            labelled(&mut o, &M::LLM_PREFIX, &self.prefix.each_ref().map(|a| v(a) as f64));
        }
        if let Some(f) = &g.fleet {
            let forwards = [&self.forwards_sent, &self.forwards_unreachable, &self.forwards_refused, &self.forwards_withdrawn, &self.forwards_failed];
            labelled(&mut o, &M::FORWARDS, &forwards.map(|a| v(a) as f64));
            labelled(&mut o, &M::FORWARDS_IN, &[v(&self.taken_here) as f64, v(&self.withdrawn_here) as f64]);
            single(&mut o, &M::FLEET_PEERS, f.peers as f64);
            single(&mut o, &M::FLEET_PEERS_BENCHED, f.benched as f64);
            single(&mut o, &M::FLEET_PEERS_UNHEARD, f.unheard as f64);
            single(&mut o, &M::FLEET_MEMBERS, f.members as f64);
            single(&mut o, &M::FLEET_PEERS_WANTING, f.wanting as f64);
            single(&mut o, &M::FLEET_REPORTS_SENT, f.sent as f64);
            single(&mut o, &M::FLEET_REPORTS_TAKEN, f.taken as f64);
            labelled(&mut o, &M::FLEET_REPORTS_BAD, &f.bad.map(|n| n as f64));
        }
        for (m, val) in [
            (M::INFLIGHT, g.inflight as f64),
            (M::BUSY, g.busy as f64),
            (M::WORKERS, f64::from(g.workers)),
            (M::APP_UP, f64::from(u8::from(g.app_up))),
            (M::APP_STALLED, f64::from(u8::from(g.stalled))),
            (M::DRAINING, f64::from(u8::from(g.draining))),
            (M::CONNECTIONS, g.connections as f64),
            (M::CONNECTIONS_MAX, g.connections_max as f64),
        ] {
            single(&mut o, &m, val);
        }
        if let Some(c) = g.c {
            single(&mut o, &M::POLICY_C, f64::from(c));
        }
        head(&mut o, &M::BUILD_INFO);
        let _ = writeln!(o, "{}{{{}=\"{}\"}} 1", M::BUILD_INFO.name, M::BUILD_INFO.label.expect("labelled").0, env!("CARGO_PKG_VERSION"));
        let name = M::DURATION.name;
        head(&mut o, &M::DURATION);
        let mut cum = 0;
        for (b, a) in BUCKETS.iter().zip(&self.latency_buckets) {
            cum += v(a);
            let _ = writeln!(o, "{name}_bucket{{le=\"{b}\"}} {cum}");
        }
        let count = v(&self.latency_count);
        let _ = writeln!(o, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(o, "{name}_sum {}", v(&self.latency_sum_us) as f64 / 1e6);
        let _ = writeln!(o, "{name}_count {count}");
        o
    }
}

fn head(o: &mut String, m: &Metric) {
    let _ = writeln!(o, "# HELP {} {}\n# TYPE {} {}", m.name, m.help, m.name, m.kind.name());
}

fn single(o: &mut String, m: &Metric, val: f64) {
    head(o, m);
    let _ = writeln!(o, "{} {val}", m.name);
}

/// A metric split by its label, values in the table's label order.
fn labelled(o: &mut String, m: &Metric, vals: &[f64]) {
    let (key, names) = m.label.expect("a labelled metric");
    debug_assert_eq!(names.len(), vals.len(), "{}", m.name);
    head(o, m);
    for (n, val) in names.iter().zip(vals) {
        let _ = writeln!(o, "{}{{{key}=\"{n}\"}} {val}", m.name);
    }
}

/// The KV-cache read's gauges (`llm_metrics_url`).
#[derive(Debug, Clone, Copy)]
pub struct KvGauges {
    /// The last good read, parts per `KV_SCALE` (0 before one).
    pub usage: u32,
    /// The rule makes the server full now.
    pub full: bool,
    /// Polls: ok, failed, rejected.
    pub polls: [u64; 3],
}
