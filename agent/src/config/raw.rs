//! The agent's keys, each declared once below (name, type, default, range,
//! what it needs, help line: `keys.rs` says how a row reads), and the raw
//! knobs they make, from the file and from flags alike (clap and serde read
//! this one struct; `Raw::load` lays flags over the file over the defaults).

use clap::Parser;
use serde::Deserialize;
use std::path::PathBuf;

use super::keys::keys;
use huntlb_policy::{forward, prefix, settings};

keys! {
    /// The raw knobs: every field optional, from the file and from flags alike.
    #[derive(Debug, Default, Deserialize, Parser)]
    #[serde(deny_unknown_fields)]
    #[command(version, about = "huntlb agent: accepts or refuses hunt/1 offers beside one app instance")]
    pub struct Raw {
        /// TOML file with any of the keys below (flags override it).
        #[arg(long)]
        #[serde(skip)]
        pub config: Option<PathBuf>,
        /// Print the default of every key that has one, as JSON, and exit.
        #[arg(long, exclusive = true)]
        #[serde(skip)]
        pub print_defaults: bool,
        /// Old name of `forward_peer_margin`: taken, with a warning at start.
        #[arg(long, hide = true)]
        pub forward_slack: Option<u32>,
        /// Old name of `forward_seen_margin`: taken, with a warning at start.
        #[arg(long, hide = true)]
        pub forward_seen_slack: Option<u32>,
        /// What was taken but should be written otherwise (an old key name),
        /// logged once at start.
        #[arg(skip)]
        #[serde(skip)]
        pub warnings: Vec<String>,
    }

    /// Agent id, in its logs and, only when given, sent back as `hunt-served-by`.
    id: String = Value("agent");
    /// Address proxies send requests to.
    listen: String = Addr("127.0.0.1:8080");
    /// Address of /metrics.
    admin: String = Addr("127.0.0.1:9901");
    /// The app instance this agent fronts.
    app: String = Addr("127.0.0.1:9000");
    /// How the agent speaks to the app: http1, or h2 (HTTP/2 with prior
    /// knowledge, for gRPC servers).
    app_protocol: String = Value("http1");
    /// Optional address for HAProxy's agent-check: answers `ready up`, `drain` or `down`.
    agent_check: String = Words("off");
    /// Acceptance policy: always | static:C | dynamic[:window=50,low=0.4,high=0.6,c0=1,c_max=N,c_min=M,seen_margin=K].
    policy: String = Value(settings::DEFAULT_POLICY);
    /// The app's worker count n.
    workers: u32 = Num(settings::DEFAULT_WORKERS), in 1 to settings::MAX_WORKERS;
    /// Load source: inflight | apache | llm.
    load: String = Value("inflight");
    /// With load=apache: the mod_status URL, e.g. http://127.0.0.1:80/server-status?auto
    /// (or apache_scoreboard).
    apache_status_url: String = Words(""), needs ["load = \"apache\""];
    /// With load=apache: Apache's ScoreBoardFile (absolute path), read from
    /// shared memory instead of polling mod_status; the agent must be able to
    /// read it (docs/agent.md, "Apache scoreboard").
    apache_scoreboard: String = Words(""), needs ["load = \"apache\""];
    /// With load=apache: poll period in ms.
    apache_poll_ms: u64 = Ms(10), at least 1;
    // 1 to 64 bytes a token: tokenizers give 2-5 for text; past 64 the estimate is no estimate
    /// With load=llm: request body bytes per prompt token, to estimate a
    /// prompt's tokens from its Content-Length.
    llm_bytes_per_token: u32 = Num(4), in 1 to 64, needs ["load = \"llm\""];
    /// With load=llm: prompt tokens waiting for prefill that weigh as much as
    /// one running sequence (docs/llm.md, "The load of a model server").
    llm_prefill_tokens_per_seat: u32 = Num(512), in 1 to 1000000, needs ["load = \"llm\""];
    /// With load=llm and fleet_listen: prefix affinity. An offer's prompt (its
    /// JSON body, Content-Length at most 1 MiB) is hashed over its first this
    /// many bytes, and goes to that prefix's home among the members, whose
    /// prefix cache holds it, while an offer would wait there no longer than
    /// at the least loaded, plus `llm_prefix_bound` (docs/llm.md, "Prefix
    /// affinity"); 0 is off.
    llm_prefix_bytes: u32 = Num(0), in 0 to prefix::MAX_PREFIX, needs ["load = \"llm\"", "fleet_listen"];
    /// With llm_prefix_bytes: the home keeps a prefix while the requests an
    /// offer would wait behind there (its load past its `workers` seats) are
    /// at most those at the least loaded this agent knows plus this (0: while
    /// a seat is free at the home).
    llm_prefix_bound: u32 = Num(prefix::DEFAULT_BOUND), in 0 to 1000000, needs ["load = \"llm\"", "fleet_listen", "llm_prefix_bytes above 0"];
    /// With load=llm and fleet_listen: a front's own count here
    /// (`forward_seen_margin`) keeps a try only while the server has a seat
    /// free; past that the tier passes it to a less loaded member, whatever
    /// its front saw (docs/llm.md, "Under your endpoint picker").
    llm_seen_while_free: bool = Value(true), needs ["load = \"llm\"", "fleet_listen"];
    /// With load=llm: the model server's Prometheus page, e.g.
    /// http://127.0.0.1:8000/metrics, on the app's own host; its
    /// `vllm:kv_cache_usage_perc` is polled and a server whose KV cache is at
    /// or past `llm_kv_busy_at` counts as full (docs/llm.md, "KV-cache use").
    llm_metrics_url: String = Words("off"), needs ["load = \"llm\""];
    // 10 ms at least: a poll is a GET and a parse of a page of up to 2 MiB
    /// With llm_metrics_url: poll period in ms.
    llm_metrics_poll_ms: u64 = Ms(250), at least 10, needs ["load = \"llm\"", "llm_metrics_url"];
    /// With llm_metrics_url: the KV-cache use (above 0, at most 1) at and past
    /// which the server counts as full.
    llm_kv_busy_at: f64 = Value(0.95), needs ["load = \"llm\"", "llm_metrics_url"];
    /// Path the agent answers itself for health checks.
    health_path: String = Value(huntlb_policy::protocol::HEALTH_PATH);
    /// A refused request's body up to this many bytes is drained so the connection
    /// stays open; a larger one gets the refusal and the connection closes.
    drain_limit: usize = Num(1048576), in 0 to 67108864;
    /// Client connections held at once.
    max_connections: usize = Num(10000), at least 1;
    /// Threads that run the agent's requests: 1 runs them all on one thread (no
    /// wake-ups between threads: the cheapest per request at a sidecar's load);
    /// more for an agent that must carry more than a core's worth, 1 to 64.
    threads: usize = Num(1), in 1 to 64;
    /// Requests in flight to the app at once; past it offers are refused, others get 503.
    max_inflight: u32 = Num(4096), at least 1;
    /// Largest request head (line and headers) in bytes.
    max_header_bytes: usize = Num(65536), in 8192 to 1048576;
    /// Most request headers; more get 431. Above every front's own limit plus
    /// the headers it adds (Envoy takes 100 from a client, HAProxy 101).
    max_headers: usize = Num(160), in 16 to 10000;
    /// Time the app has to answer, in ms; shorter than the fronts' (60 s), so
    /// the client gets the agent's 504 naming the app.
    app_timeout_ms: u64 = Ms(55000), at least 1;
    /// The app is stalled (health 503, offers refused) when requests have waited
    /// this long with no answer from it; 0 turns it off.
    app_stall_ms: u64 = Ms(10000), at least 0;
    /// Idle keep-alive connections from proxies are closed after this many ms
    /// (also the time a request head may take); keep it above every front's
    /// upstream idle timeout, so the proxy side closes first.
    idle_timeout_ms: u64 = Ms(120000), at least 1000;
    /// While the app is unreachable, probe it this often, in ms.
    app_probe_ms: u64 = Ms(250), at least 10;
    /// Idle keep-alive connections to the app (and to peers) are closed after
    /// this many ms; keep it under the app's own keep-alive timeout (gunicorn
    /// 2 s, Node and Apache 5 s), so this side closes first.
    pool_idle_ms: u64 = Ms(1000), at least 100;
    /// On SIGTERM, report unhealthy for at least this long before exiting, in ms.
    drain_grace_ms: u64 = Ms(2000), at least 0;
    /// On SIGTERM, exit after this long even with requests in flight, in ms.
    drain_timeout_ms: u64 = Ms(30000), at least 0;
    /// PEM certificate chain (leaf first) for TLS on `listen`; needs `tls_key`.
    /// Without both the port is plaintext.
    tls_cert: String = Words("off");
    /// PEM private key of `tls_cert` (PKCS#8, PKCS#1 or SEC1).
    tls_key: String = Words("off");
    /// PEM CA certificate(s): with TLS, require a client certificate signed by
    /// one of them (mTLS), so only the fronts holding one reach the agent.
    tls_client_ca: String = Words("off");
    /// UDP address for the forwarding tier's counts: set, this agent sends its
    /// in-flight count to every peer on each change, hears theirs, and forwards
    /// an offer it is not the fleet's least for to the least peer, as a final
    /// (docs/agent.md, "Forwarding").
    fleet_listen: String = Words("off");
    /// The peers' `fleet_listen` addresses, comma separated (this agent's own may
    /// be listed); a host:port entry is a DNS name resolved every
    /// `fleet_resolve_ms` to all its addresses.
    fleet_peers: String = Words(""), needs ["fleet_listen"];
    /// This agent as peers reach it, host:port or an IP alone (listen's
    /// port; an IPv6 one bracketed) (`hunt-via` on its forwards); with
    /// `fleet_listen` on every address, its host (an IP) is also where its
    /// reports come from.
    fleet_advertise: String = Words("listen"), needs ["fleet_listen"];
    /// A file holding the fleet's shared key (a line of at least 32
    /// characters, e.g. `openssl rand -hex 32`), a second line during a
    /// rotation: reports are sealed with the first, taken under either. Read
    /// again when it changes.
    fleet_key_file: String = Words("required"), needs ["fleet_listen"];
    /// Take a `fleet_key_file` that group or others may read (a secret store that mounts files 0444).
    fleet_key_readable_by_others: bool = Value(false), needs ["fleet_listen"];
    /// The port members' agents take forwards on, at each member's address.
    fleet_peer_port: u16 = Words("listen's port"), needs ["fleet_listen"];
    /// With TLS: PEM CA certificate(s) the peers' certificates chain to;
    /// forwards to peers use TLS, presenting this agent's own certificate.
    fleet_tls_ca: String = Words("tls_client_ca"), needs ["fleet_listen", "tls_cert"];
    /// With TLS: the name every peer's certificate carries (a DNS SAN).
    fleet_tls_name: String = Words("the peer's IP"), needs ["fleet_listen", "tls_cert"];
    /// Keep an offer when this backend's count is at most the least peer's plus this.
    forward_peer_margin: u32 = Value(forward::Forwarding::default().peer_margin), needs ["fleet_listen"];
    /// Keep an offer when this backend's count is at most the front's own count
    /// here (`hunt-seen` or `hunt-front`) plus this: with one front, never forward.
    forward_seen_margin: u32 = Words(forward::Forwarding::default().seen_margin.map_or("off".into(), |m| m.to_string())), needs ["fleet_listen"];
    /// Send this agent's count at least this often, in ms, changed or not.
    fleet_heartbeat_ms: u64 = Ms(50), at least 1, needs ["fleet_listen"];
    /// A peer not heard from for this long, in ms, takes no forwards.
    fleet_dead_after_ms: u64 = Ms(250), at least 1, needs ["fleet_listen"];
    /// Quiet (no offer here or at a listener decides by counts), beat and
    /// renew a subscription of beats only this often, in ms: the fixed cost at idle.
    fleet_quiet_beat_ms: u64 = Ms(1000), at least 1, needs ["fleet_listen"];
    // A LAN's round trip and a loaded agent's wakeup, with room: a peer slower
    // than this to say it takes a forward costs that forward this long, then
    // it is served here.
    /// A peer has this long, in ms, to say it takes a forward; else it is withdrawn and served here.
    fleet_commit_ms: u64 = Ms(10), at least 1, needs ["fleet_listen"];
    /// This agent's own forwards count in its view of a peer for this long, in ms.
    fleet_settle_ms: u64 = Ms(2), at least 0, needs ["fleet_listen"];
    /// Resolve the DNS names in `fleet_peers` again this often, in ms.
    fleet_resolve_ms: u64 = Ms(1000), at least 100, needs ["fleet_listen"];
    /// Hear this many peers, drawn from the members (0: every member).
    fleet_sample: u32 = Num(forward::DEFAULT_SAMPLE as u32), in 0 to super::MAX_MEMBERS, needs ["fleet_listen"];
    /// Draw the sample again this often, in ms.
    fleet_resample_ms: u64 = Ms(forward::DEFAULT_RESAMPLE_MS), at least 1, needs ["fleet_listen"];
    /// At each draw, keep this many of the sample's least loaded peers.
    fleet_sample_keep: u32 = Words(format!("half the sample, at most {}", forward::DEFAULT_SAMPLE_KEEP)), needs ["fleet_listen"];
    /// Pass on every try that no fleet member marked, counted for the front
    /// at its TCP source IP: plain least-request fronts with no hunting line.
    /// From an IP that is no member's, every hunt header is ignored
    /// (docs/protocol.md § 8a, "Plain fronts").
    // No tier, nothing to pass a try on to: an agent alone is what its front
    // sends it (and `true` here would silently do nothing).
    fleet_pass_plain: bool = Value(false), needs ["fleet_listen"];
    /// `append`: the agent appends the address it took a request from to the
    /// app's `X-Forwarded-For` (a peer's forward keeps its member's); `off`:
    /// the header passes untouched.
    forwarded_for: String = Value("append");
    /// IPs and prefixes (`10.0.0.0/8`), comma separated: only these peers'
    /// `X-Forwarded-For` is kept and appended to; from any other it is
    /// replaced by the peer's address ("": none kept).
    forwarded_for_trusted: String = Words("every peer");
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
