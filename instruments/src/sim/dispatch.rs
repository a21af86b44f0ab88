//! What decides where a request goes: [`Dispatch`], and how arrivals reach the
//! proxies, [`Assign`].

use super::{PrequalSpec, Rule};
use huntlb_policy::Policy;
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dispatch {
    /// The proxy's own rule, nothing else.
    Local(Rule),
    /// Hunting: offer to the rule's pick, whose agent may refuse; the final goes
    /// to the rule's pick among the others.
    Hunt(Rule, Policy),
    /// Join-shortest-queue on the true in-flight counts.
    Jsq,
    /// Agents that share the fleet's counts and forward a refused offer to
    /// the least loaded server (see the module docs): the rule, SLACK, and
    /// `seen=K`, keep any offer whose server holds at most the front's own
    /// count there plus K (the front's count is the truth with one front).
    Forward(Rule, u32, Option<u32>),
    /// Prequal at each front: probes, a pool of their answers and the
    /// hot-cold rule (see [`super::prequal`]).
    Prequal(PrequalSpec),
}

impl Dispatch {
    /// The rule, for dispatchers that use a proxy's own view or its draws.
    pub fn rule(&self) -> Option<Rule> {
        match *self {
            Dispatch::Local(r) | Dispatch::Hunt(r, _) | Dispatch::Forward(r, ..) => Some(r),
            Dispatch::Jsq | Dispatch::Prequal(_) => None,
        }
    }

    /// Whether the proxy's own counts matter (so staleness and the number of
    /// proxies can change anything).
    pub fn uses_own_view(&self) -> bool {
        self.rule().is_some_and(|r| r != Rule::Random)
    }
}

impl FromStr for Dispatch {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let fail = |e: String| format!("dispatch `{s}`: {e}");
        if s == "jsq" {
            return Ok(Dispatch::Jsq);
        }
        if s == "prequal" {
            return Ok(Dispatch::Prequal(PrequalSpec::default()));
        }
        if let Some(spec) = s.strip_prefix("prequal:") {
            return spec.parse().map(Dispatch::Prequal).map_err(fail);
        }
        if let Some(rest) = s.strip_prefix("forward-") {
            let (rule, slack) = rest.split_once(':').ok_or_else(|| fail("expected forward-RULE:SLACK[:seen=K]".into()))?;
            let (slack, seen) = match slack.split_once(':') {
                Some((slack, seen)) => {
                    let k = seen.strip_prefix("seen=").ok_or_else(|| fail(format!("expected seen=K after SLACK, not `{seen}`")))?;
                    (slack, Some(k.parse::<u32>().map_err(|_| fail(format!("seen=K: K must be a whole number, not `{k}`")))?))
                }
                None => (slack, None),
            };
            let slack = slack.parse::<u32>().map_err(|_| fail(format!("SLACK must be a whole number, not `{slack}`")))?;
            return Ok(Dispatch::Forward(rule.parse().map_err(fail)?, slack, seen));
        }
        match s.split_once(':') {
            Some((head, spec)) => {
                let rule = match head {
                    "hunt" => Rule::Random,
                    _ => match head.strip_prefix("hunt-") {
                        Some(r) => r.parse().map_err(fail)?,
                        None => return Err(fail(format!("`{head}:` is not hunt: or hunt-RULE:"))),
                    },
                };
                Ok(Dispatch::Hunt(rule, spec.parse().map_err(|e| fail(format!("{e}")))?))
            }
            None if s == "hunt" || s.starts_with("hunt-") => Err(fail("hunting needs a policy: hunt:SPEC or hunt-RULE:SPEC".into())),
            None => s.parse().map(Dispatch::Local).map_err(|e: String| {
                if s.starts_with("least-of-") {
                    fail(e)
                } else {
                    fail("expected random, p2c, least, least-of-K, jsq, hunt:SPEC or hunt-RULE:SPEC".into())
                }
            }),
        }
    }
}

impl fmt::Display for Dispatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dispatch::Local(r) => write!(f, "{r}"),
            Dispatch::Hunt(Rule::Random, p) => write!(f, "hunt:{p}"),
            Dispatch::Hunt(r, p) => write!(f, "hunt-{r}:{p}"),
            Dispatch::Jsq => write!(f, "jsq"),
            Dispatch::Forward(r, slack, None) => write!(f, "forward-{r}:{slack}"),
            Dispatch::Forward(r, slack, Some(k)) => write!(f, "forward-{r}:{slack}:seen={k}"),
            Dispatch::Prequal(p) => write!(f, "prequal:{p}"),
        }
    }
}

/// Which proxy an arrival goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assign {
    /// Round robin (a layer-4 balancer in front of the proxies); draws nothing.
    Turn,
    /// Uniformly at random (ECMP, DNS).
    Random,
}

impl FromStr for Assign {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "turn" => Ok(Assign::Turn),
            "random" => Ok(Assign::Random),
            _ => Err(format!("`{s}`: expected turn or random")),
        }
    }
}
