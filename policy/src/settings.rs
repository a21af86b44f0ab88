//! The settings every host of the decision shares (the agent, the Wasm sidecar,
//! the Lua sidecar): the policy, the app's worker count and the id sent back
//! as `hunt-served-by`. Defaults and validation live here once; each host reads
//! its own format (TOML and flags, filter JSON, Lua args) into [`RawSettings`]
//! and calls [`RawSettings::validate`]. `policy/vectors/settings.json` holds the
//! Lua port to the same answers and error keys.

use crate::policy::Policy;
use crate::protocol;
use std::fmt;

/// SR_dyn with the paper's parameters: the default everywhere.
pub const DEFAULT_POLICY: &str = "dynamic:seen_margin=1";
pub const DEFAULT_WORKERS: u32 = 32;
/// The most workers a backend may declare: SR_dyn's `c` and the packed state
/// hold 32 bits, but a larger count is always a typo.
pub const MAX_WORKERS: u64 = 65_535;

/// Validated settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub policy: Policy,
    /// The app's worker count n (SR_dyn never raises `c` above it).
    pub workers: u32,
    /// Sent back as `hunt-served-by`.
    pub id: String,
}

/// The settings as a host read them, every field optional.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawSettings<'a> {
    pub policy: Option<&'a str>,
    pub workers: Option<u64>,
    pub id: Option<&'a str>,
}

/// A setting that is not valid; `key` names it (for a policy spec, the spec's
/// own key is in `reason`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError {
    pub key: &'static str,
    pub reason: String,
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: {}", self.key, self.reason)
    }
}

impl std::error::Error for SettingsError {}

impl RawSettings<'_> {
    /// Fill in defaults and validate. `default_id` is the host's (agents and
    /// sidecars name themselves differently when nobody names them).
    pub fn validate(&self, default_id: &str) -> Result<Settings, SettingsError> {
        let policy = self
            .policy
            .unwrap_or(DEFAULT_POLICY)
            .parse::<Policy>()
            .map_err(|e| SettingsError { key: "policy", reason: e.to_string() })?;
        let workers = match self.workers {
            None => DEFAULT_WORKERS,
            Some(w) if (1..=MAX_WORKERS).contains(&w) => w as u32,
            Some(w) => return Err(SettingsError { key: "workers", reason: format!("{w} is out of range (1 to {MAX_WORKERS})") }),
        };
        let id = self.id.unwrap_or(default_id);
        if !protocol::is_token(id.as_bytes()) {
            return Err(SettingsError {
                key: "id",
                reason: format!("`{id}` must be 1-64 token characters (letters, digits, -._~ ...)"),
            });
        }
        Ok(Settings { policy, workers, id: id.to_owned() })
    }
}

/// A worker count written as text (Lua args, vectors): digits only.
pub fn parse_workers(s: &str) -> Result<u64, SettingsError> {
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SettingsError { key: "workers", reason: format!("`{s}` is not a whole number") });
    }
    Ok(s.parse().expect("at most 9 digits"))
}

#[cfg(test)]
mod tests;
