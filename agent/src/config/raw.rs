//! The raw knobs, from the file and from flags alike (clap and serde read
//! this one struct; `Raw::load` lays flags over the file over the defaults).

use clap::Parser;
use serde::Deserialize;
use std::path::PathBuf;

/// The raw knobs: every field optional, from the file and from flags alike.
#[derive(Debug, Default, Deserialize, Parser)]
#[serde(deny_unknown_fields)]
#[command(version, about = "huntlb agent: accepts or refuses hunt/1 offers beside one app instance")]
pub struct Raw {
    /// TOML file with any of the keys below (flags override it).
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Agent id, in its logs and, only when given, sent back as `hunt-served-by` [default: agent].
    #[arg(long)]
    pub id: Option<String>,
    /// Address proxies send requests to [default: 127.0.0.1:8080].
    #[arg(long)]
    pub listen: Option<String>,
    /// Address of /metrics [default: 127.0.0.1:9901].
    #[arg(long)]
    pub admin: Option<String>,
    /// The app instance this agent fronts [default: 127.0.0.1:9000].
    #[arg(long)]
    pub app: Option<String>,
    /// How the agent speaks to the app: http1, or h2 (HTTP/2 with prior
    /// knowledge, for gRPC servers) [default: http1].
    #[arg(long)]
    pub app_protocol: Option<String>,
    /// Optional address for HAProxy's agent-check: answers `ready up`, `drain` or `down`.
    #[arg(long)]
    pub agent_check: Option<String>,
    /// Acceptance policy: always | static:C | dynamic[:window=50,low=0.4,high=0.6,c0=1,c_max=N,c_min=M,seen_margin=K] [default: dynamic:seen_margin=1].
    #[arg(long)]
    pub policy: Option<String>,
    /// The app's worker count n [default: 32].
    #[arg(long)]
    pub workers: Option<u32>,
    /// Load source: inflight | apache | llm [default: inflight].
    #[arg(long)]
    pub load: Option<String>,
    /// With load=apache: the mod_status URL, e.g. http://127.0.0.1:80/server-status?auto
    /// (or apache_scoreboard).
    #[arg(long)]
    pub apache_status_url: Option<String>,
    /// With load=apache: Apache's ScoreBoardFile (absolute path), read from
    /// shared memory instead of polling mod_status; the agent must be able to
    /// read it (docs/agent.md, "Apache scoreboard").
    #[arg(long)]
    pub apache_scoreboard: Option<String>,
    /// With load=apache: poll period in ms [default: 10].
    #[arg(long)]
    pub apache_poll_ms: Option<u64>,
    /// With load=llm: request body bytes per prompt token, to estimate a
    /// prompt's tokens from its Content-Length [default: 4].
    #[arg(long)]
    pub llm_bytes_per_token: Option<u32>,
    /// With load=llm: prompt tokens waiting for prefill that weigh as much as
    /// one running sequence (docs/llm.md, "The load of a model server") [default: 512].
    #[arg(long)]
    pub llm_prefill_tokens_per_seat: Option<u32>,
    /// With load=llm and fleet_listen: prefix affinity. An offer's prompt (its
    /// JSON body, Content-Length at most 1 MiB) is hashed over its first this
    /// many bytes, and goes to that prefix's home among the members, whose
    /// prefix cache holds it, while an offer would wait there no longer than
    /// at the least loaded, plus `llm_prefix_bound` (docs/llm.md, "Prefix
    /// affinity"); 0 is off [default: 0].
    #[arg(long)]
    pub llm_prefix_bytes: Option<u32>,
    /// With llm_prefix_bytes: the home keeps a prefix while the requests an
    /// offer would wait behind there (its load past its `workers` seats) are
    /// at most those at the least loaded this agent knows plus this [default: 0:
    /// while a seat is free at the home].
    #[arg(long)]
    pub llm_prefix_bound: Option<u32>,
    /// With load=llm: the model server's Prometheus page, e.g.
    /// http://127.0.0.1:8000/metrics, on the app's own host; its
    /// `vllm:kv_cache_usage_perc` is polled and a server whose KV cache is at
    /// or past `llm_kv_busy_at` counts as full (docs/llm.md, "KV-cache use").
    #[arg(long)]
    pub llm_metrics_url: Option<String>,
    /// With llm_metrics_url: poll period in ms [default: 250].
    #[arg(long)]
    pub llm_metrics_poll_ms: Option<u64>,
    /// With llm_metrics_url: the KV-cache use (above 0, at most 1) at and past
    /// which the server counts as full [default: 0.95].
    #[arg(long)]
    pub llm_kv_busy_at: Option<f64>,
    /// Path the agent answers itself for health checks [default: /.hunt/health].
    #[arg(long)]
    pub health_path: Option<String>,
    /// A refused request's body up to this many bytes is drained so the connection
    /// stays open; a larger one gets the refusal and the connection closes [default: 1048576].
    #[arg(long)]
    pub drain_limit: Option<usize>,
    /// Client connections held at once [default: 10000].
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Threads that run the agent's requests: 1 runs them all on one thread (no
    /// wake-ups between threads: the cheapest per request at a sidecar's load);
    /// more for an agent that must carry more than a core's worth, 1 to 64 [default: 1].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Requests in flight to the app at once; past it offers are refused, others get 503 [default: 4096].
    #[arg(long)]
    pub max_inflight: Option<u32>,
    /// Largest request head (line and headers) in bytes [default: 65536].
    #[arg(long)]
    pub max_header_bytes: Option<usize>,
    /// Most request headers; more get 431. Above every front's own limit plus
    /// the headers it adds (Envoy takes 100 from a client, HAProxy 101) [default: 160].
    #[arg(long)]
    pub max_headers: Option<usize>,
    /// Time the app has to answer, in ms; shorter than the fronts' (60 s), so
    /// the client gets the agent's 504 naming the app [default: 55000].
    #[arg(long)]
    pub app_timeout_ms: Option<u64>,
    /// The app is stalled (health 503, offers refused) when requests have waited
    /// this long with no answer from it; 0 turns it off [default: 10000].
    #[arg(long)]
    pub app_stall_ms: Option<u64>,
    /// Idle keep-alive connections from proxies are closed after this many ms
    /// (also the time a request head may take); keep it above every front's
    /// upstream idle timeout, so the proxy side closes first [default: 120000].
    #[arg(long)]
    pub idle_timeout_ms: Option<u64>,
    /// While the app is unreachable, probe it this often, in ms [default: 250].
    #[arg(long)]
    pub app_probe_ms: Option<u64>,
    /// Idle keep-alive connections to the app (and to peers) are closed after
    /// this many ms; keep it under the app's own keep-alive timeout (gunicorn
    /// 2 s, Node and Apache 5 s), so this side closes first [default: 1000].
    #[arg(long)]
    pub pool_idle_ms: Option<u64>,
    /// On SIGTERM, report unhealthy for at least this long before exiting, in ms [default: 2000].
    #[arg(long)]
    pub drain_grace_ms: Option<u64>,
    /// On SIGTERM, exit after this long even with requests in flight, in ms [default: 30000].
    #[arg(long)]
    pub drain_timeout_ms: Option<u64>,
    /// PEM certificate chain (leaf first) for TLS on `listen`; needs `tls_key`.
    /// Without both the port is plaintext [default: none].
    #[arg(long)]
    pub tls_cert: Option<String>,
    /// PEM private key of `tls_cert` (PKCS#8, PKCS#1 or SEC1).
    #[arg(long)]
    pub tls_key: Option<String>,
    /// PEM CA certificate(s): with TLS, require a client certificate signed by
    /// one of them (mTLS), so only the fronts holding one reach the agent [default: none].
    #[arg(long)]
    pub tls_client_ca: Option<String>,
    /// UDP address for the forwarding tier's counts: set, this agent sends its
    /// in-flight count to every peer on each change, hears theirs, and forwards
    /// an offer it is not the fleet's least for to the least peer, as a final
    /// (docs/agent.md, "Forwarding") [default: off].
    #[arg(long)]
    pub fleet_listen: Option<String>,
    /// The peers' `fleet_listen` addresses, comma separated (this agent's own may
    /// be listed); a host:port entry is a DNS name resolved every
    /// `fleet_resolve_ms` to all its addresses.
    #[arg(long)]
    pub fleet_peers: Option<String>,
    /// This agent as peers reach it, host:port or an IP alone (listen's
    /// port; an IPv6 one bracketed) (`hunt-via` on its forwards); with
    /// `fleet_listen` on every address, its host (an IP) is also where its
    /// reports come from [default: listen].
    #[arg(long)]
    pub fleet_advertise: Option<String>,
    /// A file holding the fleet's shared key (a line of at least 32
    /// characters, e.g. `openssl rand -hex 32`), a second line during a
    /// rotation: reports are sealed with the first, taken under either. Read
    /// again when it changes [required with fleet_listen].
    #[arg(long)]
    pub fleet_key_file: Option<String>,
    /// The port members' agents take forwards on, at each member's address [default: listen's port].
    #[arg(long)]
    pub fleet_peer_port: Option<u16>,
    /// With TLS: PEM CA certificate(s) the peers' certificates chain to;
    /// forwards to peers use TLS, presenting this agent's own certificate [default: tls_client_ca].
    #[arg(long)]
    pub fleet_tls_ca: Option<String>,
    /// With TLS: the name every peer's certificate carries (a DNS SAN) [default: the peer's IP].
    #[arg(long)]
    pub fleet_tls_name: Option<String>,
    /// Keep an offer when this backend's count is at most the least peer's plus this [default: 0].
    #[arg(long)]
    pub forward_peer_margin: Option<u32>,
    /// Keep an offer when this backend's count is at most the front's own count
    /// here (`hunt-seen` or `hunt-front`) plus this: with one front, never forward [default: 1].
    #[arg(long)]
    pub forward_seen_margin: Option<u32>,
    /// Old name of `forward_peer_margin`: taken, with a warning at start.
    #[arg(long, hide = true)]
    pub forward_slack: Option<u32>,
    /// Old name of `forward_seen_margin`: taken, with a warning at start.
    #[arg(long, hide = true)]
    pub forward_seen_slack: Option<u32>,
    /// Send this agent's count at least this often, in ms, changed or not [default: 50].
    #[arg(long)]
    pub fleet_heartbeat_ms: Option<u64>,
    /// A peer not heard from for this long, in ms, takes no forwards [default: 250].
    #[arg(long)]
    pub fleet_dead_after_ms: Option<u64>,
    /// Take a `fleet_key_file` that group or others may read (a secret store that mounts files 0444) [default: false].
    #[arg(long)]
    pub fleet_key_readable_by_others: Option<bool>,
    /// A peer has this long, in ms, to say it takes a forward; else it is withdrawn and served here [default: 10].
    #[arg(long)]
    pub fleet_commit_ms: Option<u64>,
    /// This agent's own forwards count in its view of a peer for this long, in ms [default: 2].
    #[arg(long)]
    pub fleet_settle_ms: Option<u64>,
    /// Resolve the DNS names in `fleet_peers` again this often, in ms [default: 1000].
    #[arg(long)]
    pub fleet_resolve_ms: Option<u64>,
    /// Hear this many peers, drawn from the members (0: every member) [default: 8].
    #[arg(long)]
    pub fleet_sample: Option<u32>,
    /// Draw the sample again this often, in ms [default: 100].
    #[arg(long)]
    pub fleet_resample_ms: Option<u64>,
    /// At each draw, keep this many of the sample's least loaded peers [default: half the sample, at most 4].
    #[arg(long)]
    pub fleet_sample_keep: Option<u32>,
    /// Pass on every try that no fleet member marked, counted for the front
    /// at its TCP source IP: plain least-request fronts with no hunting line.
    /// From an IP that is no member's, every hunt header is ignored
    /// (docs/protocol.md § 8a, "Plain fronts") [default: false].
    #[arg(long)]
    pub fleet_pass_plain: Option<bool>,
    /// `append`: the agent appends the address it took a request from to the
    /// app's `X-Forwarded-For` (a peer's forward keeps its member's); `off`:
    /// the header passes untouched [default: append].
    #[arg(long)]
    pub forwarded_for: Option<String>,
    /// IPs and prefixes (`10.0.0.0/8`), comma separated: only these peers'
    /// `X-Forwarded-For` is kept and appended to; from any other it is
    /// replaced by the peer's address ("": none kept) [default: every peer's kept].
    #[arg(long)]
    pub forwarded_for_trusted: Option<String>,
    /// What was taken but should be written otherwise (an old key name),
    /// logged once at start.
    #[arg(skip)]
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// Keys renamed since configs were first written, (old, new). The old name is
/// taken, with a warning naming the new one; both in one file (or both as
/// flags) is an error naming the new key.
const RENAMED: [(&str, &str); 2] = [("forward_slack", "forward_peer_margin"), ("forward_seen_slack", "forward_seen_margin")];

/// The old names of `key`, if it was renamed.
pub(super) fn old_names(key: &str) -> impl Iterator<Item = &'static str> + '_ {
    RENAMED.iter().filter(move |(_, new)| *new == key).map(|(old, _)| *old)
}

impl Raw {
    /// Move what was given under an old key name to its new one, noting a
    /// warning; run on the file and on the flags each before one is laid over
    /// the other, so a flag with the new name overrides a file's old one.
    pub(super) fn take_renamed(&mut self) -> Result<(), crate::error::ConfigError> {
        let pairs = [
            (&mut self.forward_slack, &mut self.forward_peer_margin),
            (&mut self.forward_seen_slack, &mut self.forward_seen_margin),
        ];
        for ((old_v, new_v), (old, new)) in pairs.into_iter().zip(RENAMED) {
            let Some(v) = old_v.take() else { continue };
            if new_v.is_some() {
                return Err(crate::error::invalid(new, format!("given twice, as `{old}` (its old name) and as `{new}`")));
            }
            *new_v = Some(v);
            self.warnings.push(format!("config key `{old}` is deprecated: write `{new}` (same meaning)"));
        }
        Ok(())
    }
}
