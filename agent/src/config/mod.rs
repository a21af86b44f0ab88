//! Agent configuration: a TOML file (`--config`) and flags with the same names
//! (flags win). Everything is validated once at start; an error names the key.

use huntlb_policy::{Policy, RawSettings, Settings};
use std::net::SocketAddr;
use std::time::Duration;

mod fleet;
mod keys;
mod locate;
mod raw;
pub use fleet::{FleetConfig, Peer, MAX_MEMBERS};
pub use keys::{Key, KeyDefault};
pub use raw::{key_table, Raw};
use raw::Values;

pub use crate::error::ConfigError;
use crate::error::invalid;

/// Where the load `b` comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadSource {
    /// Requests this agent has in flight to the app (default).
    Inflight,
    /// Apache's `BusyWorkers` from `mod_status?auto`, polled.
    Apache { status_url: http::Uri, poll: Duration },
    /// Apache's busy workers read from its scoreboard in shared memory
    /// (`ScoreBoardFile file`), polled.
    Scoreboard { file: std::path::PathBuf, poll: Duration },
    /// A model server: requests in flight plus, until each one's first
    /// response byte, its prompt's estimated tokens in seats
    /// (`huntlb_policy::llm`).
    Llm(huntlb_policy::llm::LlmWeights),
}

/// The KV-cache rule's knobs (`llm_metrics_url` set, with `load = "llm"`).
#[derive(Debug, Clone, PartialEq)]
pub struct LlmKv {
    /// The model server's Prometheus text page, on the app's host.
    pub url: http::Uri,
    pub poll: Duration,
    pub bound: huntlb_policy::llm::KvBound,
}

/// A read of the metrics page gets this long: a page that never ends is cut
/// here (counted failed), as Apache's status page is.
pub const KV_READ_TIMEOUT: Duration = Duration::from_secs(1);

/// The validated configuration the agent runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub id: String,
    /// `hunt-served-by` on the app's answers: only when an `id` was given.
    /// A tier front passes the agents' answers on untouched (removing a
    /// response header costs Envoy about 2% of its throughput), so an agent
    /// nobody named tells clients nothing about the fleet; tests and benches
    /// name theirs to see who served.
    pub served_by: Option<http::HeaderValue>,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub app: SocketAddr,
    /// Speak HTTP/2 (prior knowledge) to the app.
    pub app_h2: bool,
    pub agent_check: Option<SocketAddr>,
    pub policy: Policy,
    pub workers: u32,
    pub load: LoadSource,
    /// With `llm_metrics_url`: the server's KV-cache use counts (None: off).
    pub llm_kv: Option<LlmKv>,
    /// `llm_seen_while_free`: with `load = "llm"`, a front's own count here
    /// keeps a try only while a seat is free (`huntlb_policy::llm::seen_while_free`).
    pub llm_seen_while_free: bool,
    pub health_path: String,
    pub drain_limit: usize,
    pub max_connections: usize,
    /// The runtime's worker threads (`threads`): 1 is a current-thread runtime.
    pub threads: usize,
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
    /// `forwarded_for = "append"` (the default): `X-Forwarded-For` to the app
    /// (`forwarded`); None: `"off"`, the header passes untouched.
    pub forwarded_for: Option<crate::forwarded::ForwardedFor>,
    /// Lines to log once at start: keys taken under an old name (the agent's
    /// own, or one in the policy spec).
    pub warnings: Vec<String>,
}

/// `huntlb-agent --print-defaults`: every key with a value when not given,
/// and that value, as JSON (what the harness and the benches read, not a copy).
pub fn defaults_json() -> String {
    keys::defaults_json(key_table())
}

/// A key's error, placed in the config file it came from: at the key's line
/// and column when the file holds it (under its name or an old one), else
/// naming the file (a key the file lacks but another of its keys needs). A
/// key given as a flag keeps the flag's error.
fn in_file(e: ConfigError, source: Option<&locate::Source>, from_flags: &[&str]) -> ConfigError {
    let (Some(source), ConfigError::Invalid { key, reason }) = (source, &e) else { return e };
    if from_flags.contains(key) {
        return e;
    }
    let names: Vec<&str> = std::iter::once(*key).chain(raw::old_names(key)).collect();
    source.at_key(&names, reason).unwrap_or_else(|| ConfigError::File {
        path: source.path().to_string(),
        key: Some(key.to_string()),
        reason: format!("{reason} (not in the file)"),
    })
}

impl Raw {
    /// Flags over file over defaults.
    pub fn load(mut flags: Raw) -> Result<Config, ConfigError> {
        let (mut raw, source) = match &flags.config {
            Some(path) => {
                let shown = path.display().to_string();
                let text = std::fs::read_to_string(path)
                    .map_err(|e| ConfigError::File { path: shown.clone(), key: None, reason: e.to_string() })?;
                let source = locate::Source::new(shown, text);
                let raw = toml::from_str::<Raw>(source.text()).map_err(|e| source.parse_error(&e))?;
                (raw, Some(source))
            }
            None => (Raw::default(), None),
        };
        // old key names become new ones in each source first: a flag's new
        // name then overrides a file's old one, as any flag overrides the file
        if let Err(e) = raw.take_renamed() {
            return Err(in_file(e, source.as_ref(), &[]));
        }
        flags.take_renamed()?;
        raw.warnings.append(&mut flags.warnings);
        // the keys given as flags: an error in one of them is the flag's, not the file's
        let from_flags = raw.overlay(flags);
        raw.validate().map_err(|e| in_file(e, source.as_ref(), &from_flags))
    }

    fn validate(mut self) -> Result<Config, ConfigError> {
        self.take_renamed()?;
        let mut warnings = std::mem::take(&mut self.warnings);
        if let Some(w) = self.policy.as_deref().and_then(huntlb_policy::spec_warning) {
            warnings.push(format!("config key `policy`: {w}"));
        }
        // the settings the sidecars share: validated by the policy crate, once for every host
        let named = self.id.is_some();
        let (policy, id) = (self.policy(), self.id());
        let shared = RawSettings { policy: Some(&policy), workers: Some(self.workers()?.into()), id: Some(&id) }
            .validate(&id)
            .map_err(|e| invalid(e.key, e.reason))?;
        let Settings { policy, workers, id } = shared;
        self.only_with(LLM, self.load.as_deref() == Some("llm"))?;
        let app = self.app()?;
        let load = match self.load().as_str() {
            "inflight" => {
                self.only_with(APACHE, false)?;
                LoadSource::Inflight
            }
            "apache" => {
                let poll = self.apache_poll_ms()?;
                match (self.apache_scoreboard.take(), self.apache_status_url.take()) {
                    (Some(_), Some(_)) => return Err(invalid("apache_scoreboard", "give apache_scoreboard or apache_status_url, not both")),
                    (None, None) => {
                        return Err(invalid("apache_scoreboard", "required with load = \"apache\" (or apache_status_url, to poll mod_status)"))
                    }
                    (Some(file), None) => {
                        // Apache resolves a relative ScoreBoardFile against its ServerRoot, which the agent does not know
                        if !file.starts_with('/') {
                            return Err(invalid("apache_scoreboard", format!("`{file}` must be an absolute path (Apache's ScoreBoardFile, resolved against its ServerRoot)")));
                        }
                        LoadSource::Scoreboard { file: file.into(), poll }
                    }
                    (None, Some(url)) => LoadSource::Apache { status_url: app_page("apache_status_url", &url, app)?, poll },
                }
            }
            "llm" => {
                self.only_with(APACHE, false)?;
                let (bytes_per_token, tokens_per_seat) = (self.llm_bytes_per_token()?, self.llm_prefill_tokens_per_seat()?);
                LoadSource::Llm(huntlb_policy::llm::LlmWeights { bytes_per_token, tokens_per_seat, workers })
            }
            other => return Err(invalid("load", format!("`{other}` is not a load source (expected inflight, apache or llm)"))),
        };
        let llm_kv = kv(&self, app)?;
        let health_path = self.health_path();
        if !health_path.starts_with('/') || health_path.contains(char::is_whitespace) {
            return Err(invalid("health_path", format!("`{health_path}` must be a path starting with /")));
        }
        let app_h2 = match self.app_protocol().as_str() {
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
        let listen = self.listen()?;
        let mut fleet = fleet::validate(&mut self, listen, tls.as_ref())?;
        if let Some(f) = fleet.as_mut() {
            f.affinity = affinity(&self, workers)?;
        }
        if let Some(f) = &fleet {
            warnings.extend(f.keys.warnings(&f.key_file));
        }
        let forwarded_for = forwarded_for(&self.forwarded_for(), self.forwarded_for_trusted.as_deref())?;
        // the limits and the timeouts: each its declared default, its range checked
        let (drain_limit, max_connections, threads) = (self.drain_limit()?, self.max_connections()?, self.threads()?);
        let (max_inflight, max_header_bytes, max_headers) = (self.max_inflight()?, self.max_header_bytes()?, self.max_headers()?);
        let (app_timeout, app_stall, app_probe) = (self.app_timeout_ms()?, self.app_stall_ms()?, self.app_probe_ms()?);
        let (idle_timeout, pool_idle) = (self.idle_timeout_ms()?, self.pool_idle_ms()?);
        let (drain_grace, drain_timeout) = (self.drain_grace_ms()?, self.drain_timeout_ms()?);
        Ok(Config {
            fleet,
            forwarded_for,
            warnings,
            tls,
            app_h2,
            listen,
            admin: self.admin()?,
            app,
            llm_kv,
            llm_seen_while_free: matches!(load, LoadSource::Llm(_)) && self.llm_seen_while_free(),
            agent_check: self.agent_check.as_deref().map(|v| keys::addr("agent_check", v)).transpose()?,
            served_by: if named { Some(http::HeaderValue::from_str(&id).map_err(|_| invalid("id", "must be a header value"))?) } else { None },
            id,
            policy,
            workers,
            load,
            health_path,
            drain_limit,
            max_connections,
            threads,
            max_inflight,
            max_header_bytes,
            max_headers,
            app_timeout,
            app_stall,
            app_probe,
            idle_timeout,
            pool_idle,
            drain_grace,
            drain_timeout,
        })
    }
}

/// What the llm keys and the apache keys need (`needs` in the table).
const LLM: &str = "load = \"llm\"";
const APACHE: &str = "load = \"apache\"";

/// Prefix affinity's knobs (`load = "llm"` and a fleet already checked: a
/// home among members needs members): None when off. The seats: the agent's
/// `workers`, its server's (a free one means no wait).
fn affinity(raw: &Raw, seats: u32) -> Result<Option<huntlb_policy::prefix::Affinity>, ConfigError> {
    let bytes = raw.llm_prefix_bytes()? as usize;
    raw.only_with("llm_prefix_bytes above 0", bytes > 0)?;
    if bytes == 0 {
        return Ok(None);
    }
    Ok(Some(huntlb_policy::prefix::Affinity { bytes, bound: raw.llm_prefix_bound()?, seats }))
}

/// A page the agent polls for its server's load (`apache_status_url`,
/// `llm_metrics_url`): an http:// URL on the app's own IP. The page is
/// trusted as the app is, and only the app's: an agent sent to another host
/// would let that host set this server's load (and poll it from every
/// agent). An IP, the app's: no name to resolve, nor to point elsewhere later.
fn app_page(key: &'static str, url: &str, app: SocketAddr) -> Result<http::Uri, ConfigError> {
    let parsed: http::Uri = url.parse().map_err(|_| invalid(key, format!("`{url}` is not a URL")))?;
    if parsed.scheme_str() != Some("http") || parsed.authority().is_none() {
        return Err(invalid(key, format!("`{url}` must be an http:// URL")));
    }
    let host = parsed.host().unwrap_or("").trim_start_matches('[').trim_end_matches(']');
    if host.parse::<std::net::IpAddr>().ok() != Some(app.ip()) {
        return Err(invalid(key, format!("`{url}` must be on the app's host, {} (an IP, not a name)", app.ip())));
    }
    Ok(parsed)
}

/// The KV-cache rule's keys (already known to come with `load = "llm"`): None without a URL.
fn kv(raw: &Raw, app: SocketAddr) -> Result<Option<LlmKv>, ConfigError> {
    let Some(url) = raw.llm_metrics_url.as_deref() else {
        raw.only_with("llm_metrics_url", false)?;
        return Ok(None);
    };
    let parsed = app_page("llm_metrics_url", url, app)?;
    let poll = raw.llm_metrics_poll_ms()?;
    let busy_at = raw.llm_kv_busy_at();
    let fixed = huntlb_policy::llm::kv_fixed(busy_at).filter(|&f| f > 0);
    let Some(busy_at_fixed) = fixed else {
        return Err(invalid("llm_kv_busy_at", format!("{busy_at} is out of range (above 0, at most 1: a fraction of the KV cache)")));
    };
    // Stale after three polls missed, plus a read's whole time: one slow or
    // failed read keeps the last value, a page that stopped answering does not.
    let stale_ms = 3 * poll.as_millis() as u64 + KV_READ_TIMEOUT.as_millis() as u64;
    Ok(Some(LlmKv { url: parsed, poll, bound: huntlb_policy::llm::KvBound { busy_at: busy_at_fixed, stale_ms } }))
}

/// `forwarded_for` and `forwarded_for_trusted`: None when off.
fn forwarded_for(mode: &str, trusted: Option<&str>) -> Result<Option<crate::forwarded::ForwardedFor>, ConfigError> {
    use crate::forwarded::ForwardedFor;
    match mode {
        "append" => {
            let trusted = trusted.map(ForwardedFor::parse_trusted).transpose().map_err(|e| invalid("forwarded_for_trusted", e))?;
            Ok(Some(ForwardedFor { trusted }))
        }
        "off" if trusted.is_some() => Err(invalid("forwarded_for_trusted", "only meaningful with forwarded_for = \"append\"")),
        "off" => Ok(None),
        other => Err(invalid("forwarded_for", format!("`{other}` is not append or off"))),
    }
}

#[cfg(test)]
mod tests;
