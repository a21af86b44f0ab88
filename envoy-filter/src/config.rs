//! The filter's JSON configuration, parsed and validated once in
//! `on_configure`. A bad config makes Envoy refuse the filter, with a log line
//! naming the field.
//!
//! ```json
//! {"role": "front", "keep_response_headers": false}
//! {"role": "sidecar", "policy": "dynamic", "workers": 32, "id": "web-1"}
//! ```

use huntlb_policy::{protocol, Policy};
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq)]
pub enum Role {
    /// In a front proxy's HCM chain: strips client hunt*/x-envoy-* headers,
    /// turns a leftover refusal into 503, strips hunt-* response headers.
    Front { keep_response_headers: bool, max_offer_body: u64 },
    /// In a backend's sidecar Envoy: the agent's job, as a filter.
    Sidecar { policy: Policy, workers: u32, id: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    role: Option<String>,
    keep_response_headers: Option<bool>,
    max_offer_body: Option<u64>,
    policy: Option<String>,
    workers: Option<u32>,
    id: Option<String>,
}

/// Parse and validate; the error names the field.
pub fn parse(json: &[u8]) -> Result<Role, String> {
    let raw: Raw = serde_json::from_slice(json).map_err(|e| format!("huntlb filter config: {e}"))?;
    let bad = |field: &str, why: String| Err(format!("huntlb filter config field `{field}`: {why}"));
    match raw.role.as_deref() {
        Some("front") => {
            for (field, set) in [("policy", raw.policy.is_some()), ("workers", raw.workers.is_some()), ("id", raw.id.is_some())] {
                if set {
                    return bad(field, "only meaningful with role \"sidecar\"".into());
                }
            }
            Ok(Role::Front {
                keep_response_headers: raw.keep_response_headers.unwrap_or(false),
                max_offer_body: raw.max_offer_body.unwrap_or(DEFAULT_MAX_OFFER_BODY),
            })
        }
        Some("sidecar") => {
            for (field, set) in [("keep_response_headers", raw.keep_response_headers.is_some()), ("max_offer_body", raw.max_offer_body.is_some())] {
                if set {
                    return bad(field, "only meaningful with role \"front\"".into());
                }
            }
            let policy = match raw.policy.as_deref().unwrap_or("dynamic").parse::<Policy>() {
                Ok(p) => p,
                Err(e) => return bad("policy", e.to_string()),
            };
            let workers = raw.workers.unwrap_or(32);
            if workers == 0 || workers > 65_535 {
                return bad("workers", format!("{workers} is out of range (1 to 65535)"));
            }
            let id = raw.id.unwrap_or_else(|| "sidecar".into());
            if !protocol::is_token(id.as_bytes()) {
                return bad("id", format!("`{id}` must be 1-64 token characters"));
            }
            Ok(Role::Sidecar { policy, workers, id })
        }
        Some(other) => bad("role", format!("`{other}` is not a role (expected front or sidecar)")),
        None => bad("role", "missing (expected front or sidecar)".into()),
    }
}

/// Envoy buffers a request body for retries up to 1 MiB by default; a larger
/// body could not be replayed after a refusal, so it is not offered.
pub const DEFAULT_MAX_OFFER_BODY: u64 = 1 << 20;

/// Request headers a front proxy removes from clients: every `hunt`/`hunt-*`
/// header and every `x-envoy-*` control (a client `x-envoy-retry-on: 5xx` made
/// Envoy replay a POST an app had processed).
pub fn strip_from_client(name: &str) -> bool {
    protocol::is_hunt_header(name) || name.len() > 8 && name[..8].eq_ignore_ascii_case("x-envoy-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles() {
        assert_eq!(parse(br#"{"role":"front"}"#).unwrap(), Role::Front { keep_response_headers: false, max_offer_body: 1 << 20 });
        let s = parse(br#"{"role":"sidecar","policy":"static:4","workers":8,"id":"web-1"}"#).unwrap();
        assert_eq!(s, Role::Sidecar { policy: Policy::Static { c: 4 }, workers: 8, id: "web-1".into() });
    }

    #[test]
    fn errors_name_the_field() {
        for (json, field) in [
            (r#"{"role":"sidecar","policy":"fastest"}"#, "`policy`"),
            (r#"{"role":"sidecar","policy":"dynamic:window=0"}"#, "`window`"),
            (r#"{"role":"sidecar","workers":0}"#, "`workers`"),
            (r#"{"role":"back"}"#, "`role`"),
            (r#"{}"#, "`role`"),
            (r#"{"role":"front","polcy":"x"}"#, "`polcy`"),
            (r#"{"role":"front","policy":"static:4"}"#, "`policy`"),
            (r#"{"role":"sidecar","id":"a b"}"#, "`id`"),
        ] {
            let e = parse(json.as_bytes()).unwrap_err();
            assert!(e.contains(field), "{json}: {e}");
        }
    }

    #[test]
    fn client_headers_stripped() {
        for h in ["hunt", "hunt-offer", "HUNT-TARGET", "x-envoy-retry-on", "X-Envoy-Max-Retries", "x-envoy-retriable-header-names"] {
            assert!(strip_from_client(h), "{h}");
        }
        for h in ["host", "hunter", "x-envoy", "x-request-id", "content-length"] {
            assert!(!strip_from_client(h), "{h}");
        }
    }
}
