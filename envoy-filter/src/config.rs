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

/// Parse and validate; the error names the field. With the settings, the line
/// to log once at configure, if any: a policy written with an old key name
/// (`slack` for `seen_margin`), which still means the same policy.
pub fn parse(json: &[u8]) -> Result<(Sidecar, Option<String>), String> {
    let raw: Raw = serde_json::from_slice(json).map_err(|e| format!("huntlb filter config: {e}"))?;
    let bad = |field: &str, why: String| format!("huntlb filter config field `{field}`: {why}");
    match raw.role.as_deref() {
        Some("sidecar") => {}
        // The front was this filter's other role; it is native config now.
        Some("front") => {
            return Err(bad("role", "\"front\" is native Envoy config now, no filter: see envoy-filter/examples/front.yaml".into()))
        }
        Some(other) => return Err(bad("role", format!("`{other}` is not a role (expected sidecar)"))),
        None => return Err(bad("role", "missing (expected sidecar)".into())),
    }
    let settings = RawSettings { policy: raw.policy.as_deref(), workers: raw.workers, id: raw.id.as_deref() }
        .validate("sidecar")
        .map_err(|e| bad(e.key, e.reason))?;
    let warning = raw.policy.as_deref().and_then(huntlb_policy::spec_warning).map(|w| format!("huntlb filter config field `policy`: {w}"));
    Ok((settings, warning))
}

#[cfg(test)]
mod tests {
    use super::*;
    use huntlb_policy::Policy;

    #[test]
    fn sidecar() {
        let s = parse(br#"{"role":"sidecar","policy":"static:4","workers":8,"id":"web-1"}"#).unwrap();
        assert_eq!(s, (Sidecar { policy: Policy::Static { c: 4 }, workers: 8, id: "web-1".into() }, None));
    }

    #[test]
    fn an_old_policy_key_is_taken_with_a_warning() {
        let (old, warning) = parse(br#"{"role":"sidecar","policy":"dynamic:slack=1"}"#).unwrap();
        let (new, none) = parse(br#"{"role":"sidecar","policy":"dynamic:seen_margin=1"}"#).unwrap();
        assert_eq!((old, none), (new, None));
        assert_eq!(
            warning.as_deref(),
            Some("huntlb filter config field `policy`: policy key `slack` is deprecated: write `seen_margin` (same meaning)")
        );
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
