//! The filter's JSON configuration, parsed and validated once in
//! `on_configure`. A bad config makes Envoy refuse the filter, with a log line
//! naming the field.
//!
//! ```json
//! {"role": "sidecar", "policy": "dynamic", "workers": 32, "id": "web-1"}
//! ```

use huntlb_policy::{RawSettings, Settings};
use serde::Deserialize;

/// The sidecar's settings (the agent's job, as a filter in a backend's Envoy):
/// the ones every host shares, defaults and validation in the policy crate.
pub type Sidecar = Settings;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    role: Option<String>,
    policy: Option<String>,
    workers: Option<u64>,
    id: Option<String>,
}

/// Parse and validate; the error names the field.
pub fn parse(json: &[u8]) -> Result<Sidecar, String> {
    let raw: Raw = serde_json::from_slice(json).map_err(|e| format!("huntlb filter config: {e}"))?;
    let bad = |field: &str, why: String| Err(format!("huntlb filter config field `{field}`: {why}"));
    match raw.role.as_deref() {
        Some("sidecar") => {}
        // The front was this filter's other role; it is native config now.
        Some("front") => {
            return bad("role", "\"front\" is native Envoy config now, no filter: see envoy-filter/examples/front.yaml".into())
        }
        Some(other) => return bad("role", format!("`{other}` is not a role (expected sidecar)")),
        None => return bad("role", "missing (expected sidecar)".into()),
    }
    RawSettings { policy: raw.policy.as_deref(), workers: raw.workers, id: raw.id.as_deref() }
        .validate("sidecar")
        .or_else(|e| bad(e.key, e.reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use huntlb_policy::Policy;

    #[test]
    fn sidecar() {
        let s = parse(br#"{"role":"sidecar","policy":"static:4","workers":8,"id":"web-1"}"#).unwrap();
        assert_eq!(s, Sidecar { policy: Policy::Static { c: 4 }, workers: 8, id: "web-1".into() });
    }

    #[test]
    fn errors_name_the_field() {
        for (json, field) in [
            (r#"{"role":"sidecar","policy":"fastest"}"#, "`policy`"),
            (r#"{"role":"sidecar","policy":"dynamic:window=0"}"#, "`window`"),
            (r#"{"role":"sidecar","workers":0}"#, "`workers`"),
            (r#"{"role":"back"}"#, "`role`"),
            (r#"{"role":"front"}"#, "`role`"),
            (r#"{}"#, "`role`"),
            (r#"{"role":"sidecar","polcy":"x"}"#, "`polcy`"),
            (r#"{"role":"sidecar","id":"a b"}"#, "`id`"),
        ] {
            let e = parse(json.as_bytes()).unwrap_err();
            assert!(e.contains(field), "{json}: {e}");
        }
    }
}
