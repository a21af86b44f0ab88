//! The policy spec grammar, one string everywhere (agent flag `--policy`, agent
//! file key `policy`, filter JSON `"policy"`, Lua arg `policy=`):
//!
//! ```text
//! always
//! static:C                      C in 0..=65535
//! dynamic[:k=v{,k=v}]           k in window, low, high, c0, c_max, c_min, seen_margin
//! ```
//!
//! `slack` is `seen_margin`'s old name: it still parses, to the same policy,
//! and [`spec_warning`] gives the line a host logs once at load about it.

use crate::policy::{DynamicParams, Policy};
use std::fmt;
use std::str::FromStr;

/// A spec that does not parse. `key` names the offending part (`policy`, `c`,
/// `window`, ...) so a config error can point at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub key: String,
    pub reason: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "policy key `{}`: {}", self.key, self.reason)
    }
}

impl std::error::Error for SpecError {}

fn err(key: &str, reason: impl Into<String>) -> SpecError {
    SpecError { key: key.to_string(), reason: reason.into() }
}

/// Keys renamed since specs were first written, (old, new). A spec with the
/// old name parses to the same policy (it names the same idea); the host warns
/// once at load ([`spec_warning`]) so configs move to the new one.
const RENAMED: &[(&str, &str)] = &[("slack", "seen_margin")];

/// The key's current name (itself unless it is an old one).
fn current(k: &str) -> &str {
    RENAMED.iter().find(|(old, _)| *old == k).map_or(k, |(_, new)| new)
}

/// What a host logs once, at load, about a spec that parses but uses an old
/// key name; `None` for a spec in current names. The crate does no I/O: the
/// agent, the filter and the Lua module each log this text their own way.
pub fn spec_warning(spec: &str) -> Option<String> {
    let (name, args) = spec.trim().split_once(':')?;
    if name != "dynamic" {
        return None;
    }
    let old: Vec<String> = args
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, _)| k.trim())
        .filter_map(|k| RENAMED.iter().find(|(o, _)| *o == k))
        .map(|(o, new)| format!("policy key `{o}` is deprecated: write `{new}` (same meaning)"))
        .collect();
    (!old.is_empty()).then(|| old.join("; "))
}

const MAX_C: u32 = 65_535;
const MAX_WINDOW: u16 = 10_000;

pub(crate) fn parse(spec: &str) -> Result<Policy, SpecError> {
    let spec = spec.trim();
    let (name, args) = match spec.split_once(':') {
        Some((n, a)) => (n, Some(a)),
        None => (spec, None),
    };
    match (name, args) {
        ("always", None) => Ok(Policy::Always),
        ("always", Some(_)) => Err(err("policy", "`always` takes no parameters")),
        ("static", None) => Err(err("c", "missing: write static:C, e.g. static:4")),
        ("static", Some(c)) => Ok(Policy::Static { c: parse_c("c", c)? }),
        ("dynamic", None) => Ok(Policy::Dynamic(DynamicParams::default())),
        ("dynamic", Some(args)) => parse_dynamic(args).map(Policy::Dynamic),
        _ => Err(err(
            "policy",
            format!("unknown policy `{name}` (expected always, static:C or dynamic[:k=v,...])"),
        )),
    }
}

/// Plain decimal digits only (no sign, no exponent), so that Rust and Lua accept
/// exactly the same strings.
fn is_digits(v: &str) -> bool {
    !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())
}

/// Digits with an optional fraction: `0`, `0.4`, `1.0`.
fn is_decimal(v: &str) -> bool {
    match v.split_once('.') {
        Some((i, f)) => is_digits(i) && is_digits(f),
        None => is_digits(v),
    }
}

fn parse_c(key: &str, v: &str) -> Result<u32, SpecError> {
    let v = v.trim();
    match v.parse::<u32>() {
        Ok(c) if is_digits(v) && c <= MAX_C => Ok(c),
        _ => Err(err(key, format!("`{v}` is not a whole number from 0 to {MAX_C}"))),
    }
}

fn parse_ratio(key: &str, v: &str) -> Result<f64, SpecError> {
    let v = v.trim();
    match v.parse::<f64>() {
        Ok(r) if is_decimal(v) && (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(err(key, format!("`{v}` is not a ratio from 0 to 1"))),
    }
}

fn parse_dynamic(args: &str) -> Result<DynamicParams, SpecError> {
    let mut p = DynamicParams::default();
    // each key by its current name, with the name it was written under
    let mut given: Vec<(&str, &str)> = Vec::new();
    for kv in args.split(',') {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(err("policy", format!("`{kv}` is not key=value")));
        };
        let k = k.trim();
        if k.is_empty() {
            // an error must name a key: the whole spec's, as for a piece without `=`
            return Err(err("policy", format!("`{kv}` has no key before `=`")));
        }
        // an old name and its new one are one key: given both, it is given
        // twice, and the error names the key by its current name
        let name = current(k);
        if let Some(&(_, first)) = given.iter().find(|(n, _)| *n == name) {
            return Err(if first == k {
                err(k, "given twice")
            } else {
                err(name, format!("given twice, as `{first}` and as `{k}` (one key, renamed)"))
            });
        }
        given.push((name, k));
        match name {
            "window" => {
                let v = v.trim();
                p.window = match v.parse::<u16>() {
                    Ok(w) if is_digits(v) && (1..=MAX_WINDOW).contains(&w) => w,
                    _ => return Err(err(k, format!("`{v}` is not a whole number from 1 to {MAX_WINDOW}"))),
                }
            }
            "low" => p.low = parse_ratio(k, v)?,
            "high" => p.high = parse_ratio(k, v)?,
            "c0" => p.c0 = parse_c(k, v)?,
            "c_max" => p.c_max = Some(parse_c(k, v)?),
            "c_min" => p.c_min = parse_c(k, v)?,
            "seen_margin" => p.seen_margin = Some(parse_c(k, v)?),
            _ => return Err(err(k, "unknown key (expected window, low, high, c0, c_max, c_min, seen_margin)")),
        }
    }
    if p.low >= p.high {
        return Err(err("low", format!("low ({}) must be below high ({})", p.low, p.high)));
    }
    if let Some(m) = p.c_max {
        if p.c0 > m {
            return Err(err("c0", format!("c0 ({}) is above c_max ({m})", p.c0)));
        }
        if p.c_min > m {
            return Err(err("c_min", format!("c_min ({}) is above c_max ({m})", p.c_min)));
        }
    }
    Ok(p)
}

impl FromStr for Policy {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        parse(s)
    }
}

impl fmt::Display for Policy {
    /// The canonical spec: parsing it gives the same policy back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Always => write!(f, "always"),
            Policy::Static { c } => write!(f, "static:{c}"),
            Policy::Dynamic(p) => {
                write!(f, "dynamic:window={},low={},high={},c0={}", p.window, p.low, p.high, p.c0)?;
                if let Some(m) = p.c_max {
                    write!(f, ",c_max={m}")?;
                }
                if p.c_min > 0 {
                    write!(f, ",c_min={}", p.c_min)?;
                }
                if let Some(k) = p.seen_margin {
                    write!(f, ",seen_margin={k}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests;
