//! Agent configuration: a TOML file (`--config`) and flags with the same names
//! (flags win). Everything is validated once at start; an error names the key.

use clap::Parser;
use huntlb_policy::{Policy, RawSettings, Settings};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config key `{key}`: {reason}")]
    Invalid { key: &'static str, reason: String },
    #[error("config file {path}: {reason}")]
    File { path: String, reason: String },
}

fn invalid(key: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key, reason: reason.into() }
}

/// Where the load `b` comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadSource {
    /// Requests this agent has in flight to the app (default).
    Inflight,
    /// Apache's scoreboard: `BusyWorkers` from `mod_status?auto`, polled.
    Apache { status_url: http::Uri, poll: Duration },
}

/// The validated configuration the agent runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub id: String,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub app: SocketAddr,
    /// Speak HTTP/2 (prior knowledge) to the app.
    pub app_h2: bool,
    pub agent_check: Option<SocketAddr>,
    pub policy: Policy,
    pub workers: u32,
    pub load: LoadSource,
    pub health_path: String,
    pub drain_limit: usize,
    pub max_connections: usize,
    pub max_inflight: u32,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub app_timeout: Duration,
    pub app_stall: Duration,
    pub app_probe: Duration,
    pub idle_timeout: Duration,
    pub pool_idle: Duration,
    pub drain_grace: Duration,
    pub drain_timeout: Duration,
    /// TLS on `listen` (`tls_cert` and `tls_key`, mTLS with `tls_client_ca`);
    /// None: plaintext.
    pub tls: Option<crate::tls::Tls>,
    /// The forwarding tier (`fleet_listen` set); None: off.
    pub fleet: Option<FleetConfig>,
}

/// One `fleet_peers` entry: an address, or a DNS name resolved again every
/// `fleet_resolve_ms` to every address it has (Docker's service names, a
/// headless Kubernetes service), so peers come and go with the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    Addr(SocketAddr),
    Name { host: String, port: u16 },
}

impl Peer {
    fn parse(v: &str) -> Option<Peer> {
        if let Ok(a) = v.parse::<SocketAddr>() {
            return Some(Peer::Addr(a));
        }
        let (host, port) = v.rsplit_once(':')?;
        let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
        let label_ok = |l: &str| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') && !l.starts_with('-');
        (host.len() <= 253 && host.split('.').all(label_ok) && !host.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
            .then(|| Peer::Name { host: host.to_string(), port })
    }
}

/// The forwarding tier: this agent's count goes to every peer, theirs come in,
/// and an offer not kept here goes on to the least loaded peer
/// (`huntlb_policy::forward`).
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// UDP: where peers' counts arrive, and ours leave from.
    pub listen: SocketAddr,
    /// Every peer's `fleet_listen` (this agent's own is skipped): the members,
    /// the only senders heard and the only places forwards go.
    pub peers: Vec<Peer>,
    /// This agent as it names itself: `hunt-via` on what it forwards.
    pub advertise: String,
    /// The address our reports come from, as peers see it (and check).
    pub from: SocketAddr,
    /// A member's agent takes forwards at its address on this port.
    pub peer_port: u16,
    /// `fleet_key_file`: the shared key(s) reports are sealed and checked with.
    pub key_file: String,
    pub keys: crate::seal::Keys,
    /// With `tls_cert`: forwards to peers use TLS (mTLS with our certificate).
    pub tls: Option<crate::tls::PeerTls>,
    pub forwarding: huntlb_policy::forward::Forwarding,
    /// Our count goes out on every change and at least this often.
    pub heartbeat: Duration,
    /// A peer not heard from for this long takes no forwards.
    pub dead_after: Duration,
    /// What this agent forwarded to a peer counts in its view of that peer
    /// for this long (until the peer's own count has surely told it).
    pub settle: Duration,
    /// Names in `peers` are resolved again this often.
    pub resolve: Duration,
}

/// The raw knobs: every field optional, from the file and from flags alike.
#[derive(Debug, Default, Deserialize, Parser)]
#[serde(deny_unknown_fields)]
#[command(version, about = "huntlb agent: accepts or refuses hunt/1 offers beside one app instance")]
pub struct Raw {
    /// TOML file with any of the keys below (flags override it).
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Agent id, sent back as `hunt-served-by` [default: agent].
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
    /// Acceptance policy: always | static:C | dynamic[:window=50,low=0.4,high=0.6,c0=1,c_max=N,c_min=M,slack=K] [default: dynamic:slack=1].
    #[arg(long)]
    pub policy: Option<String>,
    /// The app's worker count n [default: 32].
    #[arg(long)]
    pub workers: Option<u32>,
    /// Load source: inflight | apache [default: inflight].
    #[arg(long)]
    pub load: Option<String>,
    /// With load=apache: the mod_status URL, e.g. http://127.0.0.1:80/server-status?auto.
    #[arg(long)]
    pub apache_status_url: Option<String>,
    /// With load=apache: poll period in ms [default: 10].
    #[arg(long)]
    pub apache_poll_ms: Option<u64>,
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
    /// This agent as peers reach it (`hunt-via` on its forwards); with
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
    pub forward_slack: Option<u32>,
    /// Keep an offer when this backend's count is at most the front's own count
    /// here (`hunt-seen` or `hunt-front`) plus this: with one front, never forward [default: 1].
    #[arg(long)]
    pub forward_seen_slack: Option<u32>,
    /// Send this agent's count at least this often, in ms, changed or not [default: 50].
    #[arg(long)]
    pub fleet_heartbeat_ms: Option<u64>,
    /// A peer not heard from for this long, in ms, takes no forwards [default: 250].
    #[arg(long)]
    pub fleet_dead_after_ms: Option<u64>,
    /// This agent's own forwards count in its view of a peer for this long, in ms [default: 2].
    #[arg(long)]
    pub fleet_settle_ms: Option<u64>,
    /// Resolve the DNS names in `fleet_peers` again this often, in ms [default: 1000].
    #[arg(long)]
    pub fleet_resolve_ms: Option<u64>,
}

macro_rules! overlay {
    ($into:ident, $from:ident, $($f:ident),*) => { $( if $from.$f.is_some() { $into.$f = $from.$f; } )* };
}

impl Raw {
    /// Flags over file over defaults.
    pub fn load(flags: Raw) -> Result<Config, ConfigError> {
        let mut raw = match &flags.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| ConfigError::File { path: path.display().to_string(), reason: e.to_string() })?;
                toml::from_str::<Raw>(&text)
                    .map_err(|e| ConfigError::File { path: path.display().to_string(), reason: e.message().to_string() })?
            }
            None => Raw::default(),
        };
        overlay!(raw, flags, id, listen, admin, app, app_protocol, agent_check, policy, workers, load, apache_status_url, apache_poll_ms,
            health_path, drain_limit, max_connections, max_inflight, max_header_bytes, max_headers, app_timeout_ms,
            app_stall_ms, idle_timeout_ms, app_probe_ms, pool_idle_ms, drain_grace_ms, drain_timeout_ms, tls_cert, tls_key, tls_client_ca,
            fleet_listen, fleet_peers, fleet_advertise, fleet_key_file, fleet_peer_port, fleet_tls_ca, fleet_tls_name, forward_slack, forward_seen_slack, fleet_heartbeat_ms, fleet_dead_after_ms,
            fleet_settle_ms, fleet_resolve_ms);
        raw.validate()
    }

    fn validate(self) -> Result<Config, ConfigError> {
        let addr = |key: &'static str, v: Option<String>, default: &str| -> Result<SocketAddr, ConfigError> {
            let v = v.unwrap_or_else(|| default.to_string());
            v.parse().map_err(|_| invalid(key, format!("`{v}` is not an ip:port address")))
        };
        let ms = |key: &'static str, v: Option<u64>, default: u64, min: u64| -> Result<Duration, ConfigError> {
            let v = v.unwrap_or(default);
            if v < min || v > 86_400_000 {
                return Err(invalid(key, format!("{v} is out of range ({min} to 86400000 ms)")));
            }
            Ok(Duration::from_millis(v))
        };
        // the settings the sidecars share: validated by the policy crate, once for every host
        let shared = RawSettings { policy: self.policy.as_deref(), workers: self.workers.map(u64::from), id: self.id.as_deref() }
            .validate("agent")
            .map_err(|e| invalid(e.key, e.reason))?;
        let Settings { policy, workers, id } = shared;
        let load = match self.load.as_deref().unwrap_or("inflight") {
            "inflight" => {
                if self.apache_status_url.is_some() {
                    return Err(invalid("apache_status_url", "only meaningful with load = \"apache\""));
                }
                LoadSource::Inflight
            }
            "apache" => {
                let url = self.apache_status_url.ok_or_else(|| invalid("apache_status_url", "required with load = \"apache\""))?;
                let status_url: http::Uri = url.parse().map_err(|_| invalid("apache_status_url", format!("`{url}` is not a URL")))?;
                if status_url.scheme_str() != Some("http") || status_url.authority().is_none() {
                    return Err(invalid("apache_status_url", format!("`{url}` must be an http:// URL")));
                }
                LoadSource::Apache { status_url, poll: ms("apache_poll_ms", self.apache_poll_ms, 10, 1)? }
            }
            other => return Err(invalid("load", format!("`{other}` is not a load source (expected inflight or apache)"))),
        };
        let health_path = self.health_path.unwrap_or_else(|| huntlb_policy::protocol::HEALTH_PATH.into());
        if !health_path.starts_with('/') || health_path.contains(char::is_whitespace) {
            return Err(invalid("health_path", format!("`{health_path}` must be a path starting with /")));
        }
        let max_connections = self.max_connections.unwrap_or(10_000);
        if max_connections == 0 {
            return Err(invalid("max_connections", "must be at least 1"));
        }
        let max_inflight = self.max_inflight.unwrap_or(4096);
        if max_inflight == 0 {
            return Err(invalid("max_inflight", "must be at least 1"));
        }
        let max_header_bytes = self.max_header_bytes.unwrap_or(65_536);
        if !(8192..=1 << 20).contains(&max_header_bytes) {
            return Err(invalid("max_header_bytes", format!("{max_header_bytes} is out of range (8192 to 1048576)")));
        }
        let max_headers = self.max_headers.unwrap_or(160);
        if !(16..=10_000).contains(&max_headers) {
            return Err(invalid("max_headers", format!("{max_headers} is out of range (16 to 10000)")));
        }
        let drain_limit = self.drain_limit.unwrap_or(1 << 20);
        if drain_limit > 64 << 20 {
            return Err(invalid("drain_limit", format!("{drain_limit} is above 64 MiB")));
        }
        let app_h2 = match self.app_protocol.as_deref().unwrap_or("http1") {
            "http1" => false,
            "h2" => true,
            other => return Err(invalid("app_protocol", format!("`{other}` is not http1 or h2"))),
        };
        let tls = match (self.tls_cert.as_deref(), self.tls_key.as_deref(), self.tls_client_ca.as_deref()) {
            (Some(cert), Some(key), ca) => Some(crate::tls::server_config(cert, key, ca)?),
            (Some(_), None, _) => return Err(invalid("tls_key", "required with tls_cert")),
            (None, Some(_), _) => return Err(invalid("tls_cert", "required with tls_key")),
            (None, None, Some(_)) => return Err(invalid("tls_client_ca", "only meaningful with tls_cert and tls_key")),
            (None, None, None) => None,
        };
        let listen = addr("listen", self.listen, "127.0.0.1:8080")?;
        let fleet = match self.fleet_listen {
            None => {
                for (key, set) in [
                    ("fleet_peers", self.fleet_peers.is_some()),
                    ("fleet_advertise", self.fleet_advertise.is_some()),
                    ("fleet_key_file", self.fleet_key_file.is_some()),
                    ("fleet_peer_port", self.fleet_peer_port.is_some()),
                    ("fleet_tls_ca", self.fleet_tls_ca.is_some()),
                    ("fleet_tls_name", self.fleet_tls_name.is_some()),
                    ("forward_slack", self.forward_slack.is_some()),
                    ("forward_seen_slack", self.forward_seen_slack.is_some()),
                    ("fleet_heartbeat_ms", self.fleet_heartbeat_ms.is_some()),
                    ("fleet_dead_after_ms", self.fleet_dead_after_ms.is_some()),
                    ("fleet_settle_ms", self.fleet_settle_ms.is_some()),
                    ("fleet_resolve_ms", self.fleet_resolve_ms.is_some()),
                ] {
                    if set {
                        return Err(invalid(key, "only meaningful with fleet_listen"));
                    }
                }
                None
            }
            Some(l) => {
                // With TLS on `listen`, forwards to peers use it too: a peer
                // with mTLS takes nothing else, and requests do not cross
                // between backends in clear.
                let peer_tls = match (&tls, self.fleet_tls_ca.as_deref().or(self.tls_client_ca.as_deref())) {
                    (None, _) => {
                        for (key, set) in [("fleet_tls_ca", self.fleet_tls_ca.is_some()), ("fleet_tls_name", self.fleet_tls_name.is_some())] {
                            if set {
                                return Err(invalid(key, "only meaningful with tls_cert"));
                            }
                        }
                        None
                    }
                    (Some(_), None) => {
                        return Err(invalid("fleet_tls_ca", "required with tls_cert and fleet_listen (or tls_client_ca): the CA the peers' certificates chain to"))
                    }
                    (Some(t), Some(ca)) => {
                        let key = if self.fleet_tls_ca.is_some() { "fleet_tls_ca" } else { "tls_client_ca" };
                        Some(crate::tls::peer_config(&t.files.cert, &t.files.key, (key, ca), self.fleet_tls_name.as_deref())?)
                    }
                };
                let listen_udp = addr("fleet_listen", Some(l), "")?;
                let peers_raw = self.fleet_peers.ok_or_else(|| invalid("fleet_peers", "required with fleet_listen"))?;
                let peers = peers_raw
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(|p| Peer::parse(p).ok_or_else(|| invalid("fleet_peers", format!("`{p}` is not ip:port or name:port"))))
                    .collect::<Result<Vec<_>, _>>()?;
                if peers.iter().all(|p| *p == Peer::Addr(listen_udp)) {
                    return Err(invalid("fleet_peers", "names no peer but this agent"));
                }
                // Peers forward here: an address they can reach, which an
                // unspecified one (0.0.0.0, [::]) is not.
                let advertise = match self.fleet_advertise {
                    Some(a) => a,
                    None if listen.ip().is_unspecified() => {
                        return Err(invalid("fleet_advertise", format!("required when listen is {listen}: the address peers reach this agent at")))
                    }
                    None => listen.to_string(),
                };
                if !huntlb_policy::forward::is_forward_addr(&advertise) {
                    return Err(invalid("fleet_advertise", format!("`{advertise}` is not host:port (at most 64 bytes)")));
                }
                if advertise.parse::<SocketAddr>().is_ok_and(|a| a.ip().is_unspecified()) {
                    return Err(invalid("fleet_advertise", format!("`{advertise}`: peers cannot reach an unspecified address")));
                }
                // Peers take a report only from the member it says sent it:
                // bound to every address, this agent names its own by
                // fleet_advertise's IP.
                let from = if listen_udp.ip().is_unspecified() {
                    match advertise.parse::<SocketAddr>() {
                        Ok(a) => SocketAddr::new(a.ip(), listen_udp.port()),
                        Err(_) => {
                            return Err(invalid(
                                "fleet_advertise",
                                format!("`{advertise}` is a name, but fleet_listen binds every address: give this agent's IP, which its reports come from"),
                            ))
                        }
                    }
                } else {
                    listen_udp
                };
                let key_file = self.fleet_key_file.ok_or_else(|| {
                    invalid("fleet_key_file", "required with fleet_listen: reports are sealed with a shared key (`openssl rand -hex 32 > fleet.key`)")
                })?;
                let keys = crate::seal::Keys::load(&key_file).map_err(|e| invalid("fleet_key_file", e))?;
                let peer_port = match self.fleet_peer_port {
                    Some(0) => return Err(invalid("fleet_peer_port", "0 is no port")),
                    Some(p) => p,
                    None => listen.port(),
                };
                let heartbeat = ms("fleet_heartbeat_ms", self.fleet_heartbeat_ms, 50, 1)?;
                let dead_after = ms("fleet_dead_after_ms", self.fleet_dead_after_ms, 250, 1)?;
                if dead_after <= heartbeat {
                    return Err(invalid("fleet_dead_after_ms", "must be longer than fleet_heartbeat_ms, or every peer is dead between beats"));
                }
                let settle = ms("fleet_settle_ms", self.fleet_settle_ms, 2, 0)?;
                if settle > dead_after {
                    return Err(invalid("fleet_settle_ms", "must not be longer than fleet_dead_after_ms"));
                }
                if self.fleet_resolve_ms.is_some() && !peers.iter().any(|p| matches!(p, Peer::Name { .. })) {
                    return Err(invalid("fleet_resolve_ms", "only meaningful with a name in fleet_peers"));
                }
                Some(FleetConfig {
                    listen: listen_udp,
                    peers,
                    advertise,
                    from,
                    peer_port,
                    key_file,
                    keys,
                    tls: peer_tls,
                    forwarding: huntlb_policy::forward::Forwarding {
                        slack: self.forward_slack.unwrap_or(0),
                        seen_slack: Some(self.forward_seen_slack.unwrap_or(1)),
                    },
                    heartbeat,
                    dead_after,
                    settle,
                    resolve: ms("fleet_resolve_ms", self.fleet_resolve_ms, 1000, 100)?,
                })
            }
        };
        Ok(Config {
            fleet,
            tls,
            app_h2,
            listen,
            admin: addr("admin", self.admin, "127.0.0.1:9901")?,
            app: addr("app", self.app, "127.0.0.1:9000")?,
            agent_check: match self.agent_check {
                Some(v) => Some(addr("agent_check", Some(v), "")?),
                None => None,
            },
            id,
            policy,
            workers,
            load,
            health_path,
            drain_limit,
            max_connections,
            max_inflight,
            max_header_bytes,
            max_headers,
            app_timeout: ms("app_timeout_ms", self.app_timeout_ms, 55_000, 1)?,
            app_stall: ms("app_stall_ms", self.app_stall_ms, 10_000, 0)?,
            app_probe: ms("app_probe_ms", self.app_probe_ms, 250, 10)?,
            idle_timeout: ms("idle_timeout_ms", self.idle_timeout_ms, 120_000, 1_000)?,
            pool_idle: ms("pool_idle_ms", self.pool_idle_ms, 1_000, 100)?,
            drain_grace: ms("drain_grace_ms", self.drain_grace_ms, 2_000, 0)?,
            drain_timeout: ms("drain_timeout_ms", self.drain_timeout_ms, 30_000, 0)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(f: impl FnOnce(&mut Raw)) -> Result<Config, ConfigError> {
        let mut r = Raw::default();
        f(&mut r);
        r.validate()
    }

    fn key_of(r: Result<Config, ConfigError>) -> String {
        match r {
            Err(ConfigError::Invalid { key, .. }) => key.to_string(),
            other => panic!("expected an invalid key, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid() {
        let c = raw(|_| {}).unwrap();
        assert_eq!(c.workers, 32);
        assert_eq!(c.load, LoadSource::Inflight);
        assert_eq!(c.policy.to_string(), "dynamic:window=50,low=0.4,high=0.6,c0=1,slack=1");
    }

    #[test]
    fn bad_values_name_their_key() {
        assert_eq!(key_of(raw(|r| r.policy = Some("fastest".into()))), "policy");
        assert_eq!(key_of(raw(|r| r.listen = Some("nowhere".into()))), "listen");
        assert_eq!(key_of(raw(|r| r.workers = Some(0))), "workers");
        assert_eq!(key_of(raw(|r| r.load = Some("cpu".into()))), "load");
        assert_eq!(key_of(raw(|r| r.load = Some("apache".into()))), "apache_status_url");
        assert_eq!(key_of(raw(|r| r.id = Some("two words".into()))), "id");
        assert_eq!(key_of(raw(|r| r.health_path = Some("health".into()))), "health_path");
        assert_eq!(key_of(raw(|r| r.app_timeout_ms = Some(0))), "app_timeout_ms");
        assert_eq!(key_of(raw(|r| r.idle_timeout_ms = Some(10))), "idle_timeout_ms");
        assert_eq!(key_of(raw(|r| r.max_headers = Some(4))), "max_headers");
    }

    #[test]
    fn fleet_keys_are_checked_and_named() {
        assert!(raw(|_| {}).unwrap().fleet.is_none());
        assert_eq!(key_of(raw(|r| r.fleet_peers = Some("127.0.0.2:9700".into()))), "fleet_peers");
        assert_eq!(key_of(raw(|r| r.forward_slack = Some(1))), "forward_slack");
        let key = std::env::temp_dir().join(format!("huntlb-config-test-{}.key", std::process::id()));
        std::fs::write(&key, "k".repeat(40)).unwrap();
        let key = key.to_string_lossy().into_owned();
        let fleet = |peers: &str| {
            let (peers, key) = (peers.to_string(), key.clone());
            move |r: &mut Raw| {
                r.fleet_listen = Some("127.0.0.1:9700".into());
                r.fleet_peers = Some(peers);
                r.fleet_key_file = Some(key);
            }
        };
        let c = raw(fleet("127.0.0.1:9700, 127.0.0.2:9700,")).unwrap().fleet.unwrap();
        assert_eq!(c.peers.len(), 2);
        assert_eq!(c.advertise, "127.0.0.1:8080");
        assert_eq!((c.from, c.peer_port), ("127.0.0.1:9700".parse().unwrap(), 8080), "reports come from fleet_listen; forwards go to listen's port");
        // Reports are sealed: no key, no tier.
        assert_eq!(key_of(raw(|r| {
            fleet("127.0.0.2:9700")(r);
            r.fleet_key_file = None;
        })), "fleet_key_file");
        assert_eq!(key_of(raw(|r| {
            fleet("127.0.0.2:9700")(r);
            r.fleet_key_file = Some("/nonexistent/fleet.key".into());
        })), "fleet_key_file");
        assert_eq!(key_of(raw(|r| r.fleet_key_file = Some(key.clone()))), "fleet_key_file", "only meaningful with fleet_listen");
        // Bound to every address: the sender it names is fleet_advertise's IP.
        let any = raw(|r| {
            fleet("127.0.0.2:9700")(r);
            r.fleet_listen = Some("0.0.0.0:9700".into());
            r.fleet_advertise = Some("10.1.2.3:8080".into());
        })
        .unwrap()
        .fleet
        .unwrap();
        assert_eq!(any.from, "10.1.2.3:9700".parse().unwrap());
        assert_eq!(key_of(raw(|r| {
            fleet("127.0.0.2:9700")(r);
            r.fleet_listen = Some("0.0.0.0:9700".into());
            r.fleet_advertise = Some("backend-1:8080".into());
        })), "fleet_advertise");
        assert_eq!(c.forwarding, huntlb_policy::forward::Forwarding { slack: 0, seen_slack: Some(1) });
        assert_eq!(key_of(raw(fleet("127.0.0.1:9700"))), "fleet_peers");
        assert_eq!(key_of(raw(fleet("nowhere"))), "fleet_peers");
        assert_eq!(key_of(raw(fleet("backends:0"))), "fleet_peers");
        assert_eq!(key_of(raw(fleet("bad_name:9700"))), "fleet_peers");
        assert_eq!(key_of(raw(fleet("127.0.0.300:9700"))), "fleet_peers");
        let c = raw(fleet("backends:9700,[::1]:9700")).unwrap().fleet.unwrap();
        assert_eq!(c.peers, [Peer::Name { host: "backends".into(), port: 9700 }, Peer::Addr("[::1]:9700".parse().unwrap())]);
        assert_eq!(key_of(raw(|r| {
            fleet("127.0.0.2:9700")(r);
            r.fleet_dead_after_ms = Some(10);
            r.fleet_heartbeat_ms = Some(10);
        })), "fleet_dead_after_ms");
        for bad in ["a,b", "a/b:8080", "host", "0.0.0.0:8080"] {
            assert_eq!(key_of(raw(|r| {
                fleet("127.0.0.2:9700")(r);
                r.fleet_advertise = Some(bad.into());
            })), "fleet_advertise", "{bad}");
        }
        assert_eq!(key_of(raw(|r| {
            fleet("127.0.0.2:9700")(r);
            r.listen = Some("0.0.0.0:8080".into());
        })), "fleet_advertise");
        assert_eq!(key_of(raw(|r| {
            fleet("127.0.0.2:9700")(r);
            r.fleet_settle_ms = Some(1000);
        })), "fleet_settle_ms");
        assert_eq!(key_of(raw(|r| {
            fleet("127.0.0.2:9700")(r);
            r.fleet_resolve_ms = Some(500);
        })), "fleet_resolve_ms");
        assert_eq!(key_of(raw(|r| {
            fleet("127.0.0.2:9700")(r);
            r.fleet_listen = Some("udp".into());
        })), "fleet_listen");
    }

    #[test]
    fn tls_keys_come_together_and_bad_files_are_named() {
        assert!(raw(|_| {}).unwrap().tls.is_none());
        assert_eq!(key_of(raw(|r| r.tls_cert = Some("c.pem".into()))), "tls_key");
        assert_eq!(key_of(raw(|r| r.tls_key = Some("k.pem".into()))), "tls_cert");
        assert_eq!(key_of(raw(|r| r.tls_client_ca = Some("ca.pem".into()))), "tls_client_ca");
        let dir = std::env::temp_dir().join(format!("huntlb-agent-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a pem file\n").unwrap();
        let junk = junk.display().to_string();
        let missing = dir.join("missing.pem").display().to_string();
        let both = |c: &str, k: &str| {
            let (c, k) = (c.to_string(), k.to_string());
            move |r: &mut Raw| {
                r.tls_cert = Some(c);
                r.tls_key = Some(k);
            }
        };
        assert_eq!(key_of(raw(both(&missing, &junk))), "tls_cert");
        assert_eq!(key_of(raw(both(&junk, &junk))), "tls_cert");
        let e = raw(both(&missing, &junk)).unwrap_err().to_string();
        assert!(e.contains("missing.pem"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn policy_error_carries_inner_key() {
        let e = raw(|r| r.policy = Some("dynamic:window=0".into())).unwrap_err().to_string();
        assert!(e.contains("`policy`") && e.contains("`window`"), "{e}");
    }

    #[test]
    fn unknown_file_key_is_named() {
        let e = toml::from_str::<Raw>("polcy = \"static:4\"").unwrap_err();
        assert!(e.message().contains("polcy"), "{}", e.message());
    }
}
