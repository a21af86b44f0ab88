//! The agent's counters: plain atomics bumped on the hot path, rendered as
//! Prometheus text only when /metrics is scraped. Names are shared with the
//! Envoy sidecar filter where they mean the same thing (`docs/protocol.md`).

use huntlb_policy::Reason;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

#[derive(Default)]
pub struct Metrics {
    pub offers_accepted: AtomicU64,
    /// By reason, in `Reason::ALL` order.
    refused: [AtomicU64; Reason::ALL.len()],
    pub refusals_closed: AtomicU64,
    pub finals: AtomicU64,
    pub plain: AtomicU64,
    pub malformed: AtomicU64,
    pub health_checks: AtomicU64,
    pub app_errors_connect: AtomicU64,
    pub app_errors_timeout: AtomicU64,
    pub app_errors_other: AtomicU64,
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
    /// With load = apache: (polls, failed polls). A failing status page keeps
    /// the last BusyWorkers, so its failures must be visible.
    pub apache_polls: Option<(u64, u64)>,
}

impl Metrics {
    pub fn refused(&self, why: Reason) {
        let i = Reason::ALL.iter().position(|r| *r == why).expect("ALL holds every reason");
        self.refused[i].fetch_add(1, Relaxed);
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
        let _ = writeln!(o, "# HELP huntlb_offers_total Offers (tries that may be refused) by decision.");
        let _ = writeln!(o, "# TYPE huntlb_offers_total counter");
        let _ = writeln!(o, "huntlb_offers_total{{decision=\"accept\"}} {}", v(&self.offers_accepted));
        let _ = writeln!(o, "huntlb_offers_total{{decision=\"refuse\"}} {refused_total}");
        let _ = writeln!(o, "# HELP huntlb_refusals_total Refused offers by reason.");
        let _ = writeln!(o, "# TYPE huntlb_refusals_total counter");
        for (why, n) in Reason::ALL.iter().zip(&self.refused) {
            let _ = writeln!(o, "huntlb_refusals_total{{reason=\"{}\"}} {}", why.name(), v(n));
        }
        let counters = [
            ("huntlb_refusals_closed_total", "Refusals whose body was over drain_limit, so the connection was closed.", &self.refusals_closed),
            ("huntlb_finals_total", "Tries marked final (never refused).", &self.finals),
            ("huntlb_plain_total", "Requests without hunt headers.", &self.plain),
            ("huntlb_malformed_total", "Requests with malformed hunt headers (treated as final).", &self.malformed),
            ("huntlb_health_checks_total", "Health path requests answered by the agent.", &self.health_checks),
        ];
        for (name, help, a) in counters {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", v(a));
        }
        let _ = writeln!(o, "# HELP huntlb_app_errors_total Failures talking to the app, by kind.");
        let _ = writeln!(o, "# TYPE huntlb_app_errors_total counter");
        for (kind, a) in [("connect", &self.app_errors_connect), ("timeout", &self.app_errors_timeout), ("other", &self.app_errors_other)] {
            let _ = writeln!(o, "huntlb_app_errors_total{{kind=\"{kind}\"}} {}", v(a));
        }
        let gauges = [
            ("huntlb_inflight", "Requests in flight to the app.", g.inflight as f64),
            ("huntlb_busy", "The load b the policy sees (inflight, or Apache BusyWorkers).", g.busy as f64),
            ("huntlb_workers", "The app's worker count n.", f64::from(g.workers)),
            ("huntlb_app_up", "1 if the app was reachable at last contact.", f64::from(u8::from(g.app_up))),
            ("huntlb_app_stalled", "1 while the app gives no answer to requests waiting on it (app_stall_ms).", f64::from(u8::from(g.stalled))),
            ("huntlb_draining", "1 after SIGTERM.", f64::from(u8::from(g.draining))),
        ];
        for (name, help, val) in gauges {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {val}");
        }
        if let Some((polls, failed)) = g.apache_polls {
            let _ = writeln!(o, "# HELP huntlb_apache_polls_total mod_status polls, by result.\n# TYPE huntlb_apache_polls_total counter");
            let _ = writeln!(o, "huntlb_apache_polls_total{{result=\"ok\"}} {}", polls - failed);
            let _ = writeln!(o, "huntlb_apache_polls_total{{result=\"failed\"}} {failed}");
        }
        if let Some(c) = g.c {
            let _ = writeln!(o, "# HELP huntlb_policy_c The acceptance threshold c in effect.\n# TYPE huntlb_policy_c gauge\nhuntlb_policy_c {c}");
        }
        let _ = writeln!(o, "# HELP huntlb_request_duration_seconds Time from forwarding to the app's response headers.");
        let _ = writeln!(o, "# TYPE huntlb_request_duration_seconds histogram");
        let mut cum = 0;
        for (b, a) in BUCKETS.iter().zip(&self.latency_buckets) {
            cum += v(a);
            let _ = writeln!(o, "huntlb_request_duration_seconds_bucket{{le=\"{b}\"}} {cum}");
        }
        let count = v(&self.latency_count);
        let _ = writeln!(o, "huntlb_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(o, "huntlb_request_duration_seconds_sum {}", v(&self.latency_sum_us) as f64 / 1e6);
        let _ = writeln!(o, "huntlb_request_duration_seconds_count {count}");
        o
    }
}
