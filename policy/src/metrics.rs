//! Every metric name huntlb exports, in one table, so "the same names
//! everywhere" holds by construction: the agent renders from [`ALL`], the Wasm
//! sidecar defines from it, and the Lua sidecar's names are held to
//! `policy/vectors/metrics.json`, which a test here keeps equal to [`ALL`].
//!
//! A host that cannot attach labels (proxy-wasm metrics are plain names) puts
//! the label value into the name: [`Metric::flat`].

/// Prometheus metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One exported metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    /// The one label and its values, for a metric split by label (no values:
    /// the value is known only at run time, as `huntlb_build_info`'s version).
    pub label: Option<(&'static str, &'static [&'static str])>,
    /// Exported by the sidecars (Wasm and Lua) too, not only by the agent.
    pub sidecar: bool,
}

impl Metric {
    /// The name with a label value folded in, for hosts without labels:
    /// `huntlb_offers_total` + `accept` is `huntlb_offers_accept_total`.
    pub fn flat(&self, value: &str) -> String {
        match self.name.strip_suffix("_total") {
            Some(stem) => format!("{stem}_{value}_total"),
            None => format!("{}_{value}", self.name),
        }
    }
}

const fn m(name: &'static str, kind: Kind, help: &'static str, sidecar: bool) -> Metric {
    Metric { name, kind, help, label: None, sidecar }
}

pub const OFFERS: Metric = Metric {
    name: "huntlb_offers_total",
    kind: Kind::Counter,
    help: "Offers (tries that may be refused) by decision.",
    label: Some(("decision", &["accept", "refuse"])),
    sidecar: true,
};
pub const REFUSALS: Metric = Metric {
    name: "huntlb_refusals_total",
    kind: Kind::Counter,
    help: "Refused offers by reason.",
    label: Some(("reason", &["policy", "app_down", "draining", "overload"])),
    sidecar: false,
};
pub const REFUSALS_CLOSED: Metric =
    m("huntlb_refusals_closed_total", Kind::Counter, "Refusals whose body was over drain_limit, so the connection was closed.", false);
pub const FINALS: Metric = m("huntlb_finals_total", Kind::Counter, "Tries marked final (never refused).", true);
pub const FINALS_BUSY: Metric = m(
    "huntlb_finals_busy_total",
    Kind::Counter,
    "Tries that could not be refused, served while the load was at or above the refusal threshold c: finals, peers' \
     forwards, and tries the forwarding tier kept here as the least loaded (hunt-pass, fleet_pass_plain). \
     A rising share says the fleet needs another backend (docs/metrics.md#scaling-signal).",
    true,
);
pub const PLAIN: Metric = m(
    "huntlb_plain_total",
    Kind::Counter,
    "Requests without hunt headers, and tries a front passed (hunt-pass, fleet_pass_plain) that were served here.",
    true,
);
pub const MALFORMED: Metric = m("huntlb_malformed_total", Kind::Counter, "Requests with malformed hunt headers (treated as final).", true);
pub const TLS_HANDSHAKE_FAILURES: Metric = m(
    "huntlb_tls_handshake_failures_total",
    Kind::Counter,
    "TLS handshakes that failed or timed out (connection closed before any request).",
    false,
);
pub const HEALTH_CHECKS: Metric = m("huntlb_health_checks_total", Kind::Counter, "Health path requests answered by the agent.", false);
pub const APP_ERRORS: Metric = Metric {
    name: "huntlb_app_errors_total",
    kind: Kind::Counter,
    help: "Failures talking to the app, by kind.",
    label: Some(("kind", &["connect", "timeout", "other"])),
    sidecar: false,
};
pub const APP_RESENDS: Metric = m(
    "huntlb_app_resends_total",
    Kind::Counter,
    "Requests sent to the app once more, on a new connection: the app had closed the pooled one before any of the \
     request was written, so it never saw it.",
    false,
);
pub const APACHE_POLLS: Metric = Metric {
    name: "huntlb_apache_polls_total",
    kind: Kind::Counter,
    help: "Reads of Apache's busy workers (scoreboard or mod_status), by result (with load = apache only).",
    label: Some(("result", &["ok", "failed"])),
    sidecar: false,
};
pub const FORWARDS: Metric = Metric {
    name: "huntlb_forwards_total",
    kind: Kind::Counter,
    help: "Offers forwarded to a peer (fleet_listen), by outcome: sent (the peer took it within \
           fleet_commit_ms and answered), unreachable (no connection to the peer: served here instead), \
           refused (the peer said it could not take it: served here), withdrawn (no word from the peer \
           within fleet_commit_ms: withdrawn, never processed there, served here), failed (an error after \
           the peer took it: never re-sent).",
    label: Some(("outcome", &["sent", "unreachable", "refused", "withdrawn", "failed"])),
    sidecar: false,
};
pub const FORWARDS_IN: Metric = Metric {
    name: "huntlb_forwards_in_total",
    kind: Kind::Counter,
    help: "Forwards from peers that this agent said it would take, by outcome: taken (the peer said go: \
           given to the app), withdrawn (the peer withdrew it before go and served it itself: never given to the app).",
    label: Some(("outcome", &["taken", "withdrawn"])),
    sidecar: false,
};
pub const FLEET_PEERS: Metric = m(
    "huntlb_fleet_peers",
    Kind::Gauge,
    "Peers in this agent's view heard from within fleet_dead_after_ms and taking forwards: its sample (fleet_sample), a member drawn into it counted from its first report on, and the member it replaces standing in until then (never more than the sample).",
    false,
);
pub const FLEET_PEERS_BENCHED: Metric = m(
    "huntlb_fleet_peers_benched",
    Kind::Gauge,
    "Peers in this agent's sample heard from and ready, but benched: a forward there was not taken (unreachable, \
     refused, or no word within fleet_commit_ms), so none goes there for 100 ms, doubling per failure in a row up to 800 ms.",
    false,
);
pub const FLEET_PEERS_UNHEARD: Metric = m(
    "huntlb_fleet_peers_unheard",
    Kind::Gauge,
    "Members this agent asked for their count (drew into its sample) more than fleet_dead_after_ms ago and has \
     not heard from since: stopped, unreachable on fleet_listen, or on another fleet_key_file key or tier version.",
    false,
);
pub const FLEET_MEMBERS: Metric =
    m("huntlb_fleet_members", Kind::Gauge, "Members fleet_peers resolves to, this agent not counted: what samples are drawn from.", false);
pub const FLEET_PEERS_WANTING: Metric = m(
    "huntlb_fleet_peers_wanting",
    Kind::Gauge,
    "Peers that sample this agent and want every change of its count (0 while every front's offers are kept by what it saw).",
    false,
);
pub const FLEET_REPORTS_SENT: Metric =
    m("huntlb_fleet_reports_sent_total", Kind::Counter, "Reports (datagrams) this agent sent to its peers: the tier's cost.", false);
pub const FLEET_REPORTS_TAKEN: Metric =
    m("huntlb_fleet_reports_taken_total", Kind::Counter, "Reports from peers taken (from a member, sealed, newer than the last).", false);
/// Why a datagram on `fleet_listen` was dropped, in the label's order.
pub const FLEET_REPORTS_BAD: Metric = Metric {
    name: "huntlb_fleet_reports_bad_total",
    kind: Kind::Counter,
    help: "Datagrams on fleet_listen dropped, by reason: stranger (its source is no member of fleet_peers), \
           malformed (not a sealed hunt-fleet/3 report), unauthenticated (its MAC matches no key in fleet_key_file), \
           replayed (authentic, but not newer than one taken from that member under the same nonce, or its sender \
           is not its source, or it is for another member), unproven (authentic, but echoing no nonce this agent \
           gave its sender: a first contact, a restart, or a replay; answered with the nonce), version (authentic, \
           from an agent of an earlier tier version, which this one neither hears nor forwards to).",
    label: Some(("reason", &["stranger", "malformed", "unauthenticated", "replayed", "unproven", "version"])),
    sidecar: false,
};
pub const LLM_PREFILL_SEATS: Metric = m(
    "huntlb_llm_prefill_seats",
    Kind::Gauge,
    "With load = llm: the prefill backlog in the load b, in seats (the estimated prompt tokens of requests still waiting \
     for their first response byte, over llm_prefill_tokens_per_seat, rounded up).",
    false,
);
pub const LLM_PREFIX: Metric = Metric {
    name: "huntlb_llm_prefix_total",
    kind: Kind::Counter,
    help: "With llm_prefix_bytes: offers whose body was read for their prompt, by outcome: home (sent to their prefix's \
           home, kept or forwarded), ordinary (the home's count unknown or above the least known plus llm_prefix_bound: \
           decided as without affinity), none (no prompt found: not JSON, no prompt of OpenAI's shapes, or the body \
           not whole within 1 s).",
    label: Some(("outcome", &["home", "ordinary", "none"])),
    sidecar: false,
};
pub const LLM_KV_USAGE: Metric = m(
    "huntlb_llm_kv_usage_ratio",
    Kind::Gauge,
    "With llm_metrics_url: the model server's KV-cache use (0 to 1) at the last good read of its vllm:kv_cache_usage_perc \
     (0 before one).",
    false,
);
pub const LLM_KV_FULL: Metric = m(
    "huntlb_llm_kv_full",
    Kind::Gauge,
    "With llm_metrics_url: 1 while the last good read is fresh and at or past llm_kv_busy_at, so the load b is at least \
     workers (the server counts as full).",
    false,
);
pub const LLM_KV_POLLS: Metric = Metric {
    name: "huntlb_llm_kv_polls_total",
    kind: Kind::Counter,
    help: "With llm_metrics_url: reads of the model server's metrics page, by result: ok, failed (no whole page within \
           1 s and 2 MiB, or not status 200), rejected (read, but no vllm:kv_cache_usage_perc sample, or one that is not \
           a number from 0 to 1).",
    label: Some(("result", &["ok", "failed", "rejected"])),
    sidecar: false,
};
pub const INFLIGHT: Metric = m("huntlb_inflight", Kind::Gauge, "Requests in flight to the app.", false);
pub const BUSY: Metric = m("huntlb_busy", Kind::Gauge, "The load b the policy sees (requests in flight, Apache BusyWorkers, or with load = llm requests plus the prompts waiting for prefill, in seats).", true);
pub const WORKERS: Metric = m("huntlb_workers", Kind::Gauge, "The app's worker count n.", true);
pub const POLICY_C: Metric = m("huntlb_policy_c", Kind::Gauge, "The acceptance threshold c in effect (absent with policy always).", true);
pub const APP_UP: Metric = m("huntlb_app_up", Kind::Gauge, "1 if the app was reachable at last contact.", false);
pub const APP_STALLED: Metric =
    m("huntlb_app_stalled", Kind::Gauge, "1 while the app gives no answer to requests waiting on it (app_stall_ms).", false);
pub const DRAINING: Metric = m("huntlb_draining", Kind::Gauge, "1 after SIGTERM.", false);
pub const CONNECTIONS: Metric = m("huntlb_connections", Kind::Gauge, "Connections held open on listen (each takes one of max_connections slots).", false);
pub const CONNECTIONS_MAX: Metric = m(
    "huntlb_connections_max",
    Kind::Gauge,
    "max_connections: with fewer than 1/64 of these slots free the agent takes no forwards, and with none it accepts no \
     connection until one closes.",
    false,
);
/// Its one label's value is the agent's version, known at build time only.
pub const BUILD_INFO: Metric = Metric {
    name: "huntlb_build_info",
    kind: Kind::Gauge,
    help: "1, labelled with the agent's version.",
    label: Some(("version", &[])),
    sidecar: false,
};
pub const DURATION: Metric =
    m("huntlb_request_duration_seconds", Kind::Histogram, "Time from forwarding to the app's response headers.", false);

/// Every metric, in the order the agent renders them.
pub const ALL: &[Metric] = &[
    OFFERS,
    REFUSALS,
    REFUSALS_CLOSED,
    FINALS,
    FINALS_BUSY,
    PLAIN,
    MALFORMED,
    HEALTH_CHECKS,
    TLS_HANDSHAKE_FAILURES,
    APP_ERRORS,
    APP_RESENDS,
    APACHE_POLLS,
    LLM_PREFILL_SEATS,
    LLM_PREFIX,
    LLM_KV_USAGE,
    LLM_KV_FULL,
    LLM_KV_POLLS,
    FORWARDS,
    FORWARDS_IN,
    FLEET_PEERS,
    FLEET_PEERS_BENCHED,
    FLEET_PEERS_UNHEARD,
    FLEET_MEMBERS,
    FLEET_PEERS_WANTING,
    FLEET_REPORTS_SENT,
    FLEET_REPORTS_TAKEN,
    FLEET_REPORTS_BAD,
    INFLIGHT,
    BUSY,
    WORKERS,
    POLICY_C,
    APP_UP,
    APP_STALLED,
    DRAINING,
    CONNECTIONS,
    CONNECTIONS_MAX,
    BUILD_INFO,
    DURATION,
];

#[cfg(test)]
mod tests;
