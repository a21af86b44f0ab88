//! What decides where a request goes: [`Dispatch`], and how arrivals reach the
//! proxies, [`Assign`].

use super::{PrequalSpec, Rule};
use huntlb_policy::forward::Forwarding;
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
    /// Agents that share the fleet's counts and forward an offer to the
    /// least loaded server (see the module docs): the rule, and the agent's
    /// own forwarding knobs, `peer_margin` and `seen_margin` (keep any offer
    /// whose server holds at most the front's own count there plus it: the
    /// front's count is the truth with one front).
    Forward(Rule, Forwarding),
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
            let (rule, margins) = match rest.split_once(':') {
                Some((rule, margins)) => (rule, Some(margins)),
                None => (rest, None),
            };
            let f = match margins {
                None => Forwarding::default(),
                Some(m) => old_margins(m).unwrap_or_else(|| margins_of(m)).map_err(fail)?,
            };
            return Ok(Dispatch::Forward(rule.parse().map_err(fail)?, f));
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

impl Dispatch {
    /// What huntlb-sim prints once about a dispatch that parses but is
    /// written in old names: the forward dispatcher's old form
    /// `forward-RULE:SLACK[:seen=K]`, or a policy key's old name (the policy
    /// crate's [`huntlb_policy::spec_warning`]); `None` in current names.
    pub fn warning(s: &str) -> Option<String> {
        if let Some(rest) = s.strip_prefix("forward-") {
            let (rule, margins) = rest.split_once(':')?;
            let new = Dispatch::Forward(rule.parse().ok()?, old_margins(margins)?.ok()?);
            return Some(format!("dispatch `{s}`: the form forward-RULE:SLACK[:seen=K] is deprecated: write `{new}` (same meaning)"));
        }
        let (head, spec) = s.split_once(':')?;
        let w = (head == "hunt" || head.starts_with("hunt-")).then(|| huntlb_policy::spec_warning(spec)).flatten()?;
        Some(format!("dispatch `{s}`: {w}"))
    }
}

/// The forward dispatcher's knobs, named as the agent's (`forward_peer_margin`,
/// `forward_seen_margin`): `peer_margin=M`, `seen_margin=K` or `seen_margin=off`
/// (the front's count is not consulted), each by default the agent's.
fn margins_of(keys: &str) -> Result<Forwarding, String> {
    let mut f = Forwarding::default();
    let mut given: Vec<&str> = Vec::new();
    for kv in keys.split(',') {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("`{kv}`: expected key=value (peer_margin=M, seen_margin=K or off)"))?;
        if given.contains(&k) {
            return Err(format!("{k}: given twice"));
        }
        given.push(k);
        let whole = || v.parse::<u32>().map_err(|_| format!("{k}: a whole number, not `{v}`"));
        match k {
            "peer_margin" => f.peer_margin = whole()?,
            "seen_margin" if v == "off" => f.seen_margin = None,
            "seen_margin" => f.seen_margin = Some(whole()?),
            _ => return Err(format!("unknown key `{k}` (expected peer_margin, seen_margin)")),
        }
    }
    Ok(f)
}

/// The old form's knobs, `SLACK[:seen=K]`, from before they were named
/// margins: SLACK is `peer_margin`, and without `seen=K` the front's count
/// is not consulted. `None` when `m` is not in the old form (it does not
/// start with SLACK's digits).
fn old_margins(m: &str) -> Option<Result<Forwarding, String>> {
    let (slack, seen) = match m.split_once(':') {
        Some((slack, seen)) => (slack, Some(seen)),
        None => (m, None),
    };
    let peer_margin = slack.parse::<u32>().ok().filter(|_| slack.bytes().all(|b| b.is_ascii_digit()))?;
    let seen_margin = match seen {
        None => Ok(None),
        Some(seen) => match seen.strip_prefix("seen=") {
            Some(k) => k.parse::<u32>().map(Some).map_err(|_| format!("seen=K: K must be a whole number, not `{k}`")),
            None => Err(format!("the old form forward-RULE:SLACK takes only `:seen=K` after SLACK, not `{seen}`: write forward-RULE:peer_margin=M,seen_margin=K")),
        },
    };
    Some(seen_margin.map(|seen_margin| Forwarding { peer_margin, seen_margin }))
}

impl fmt::Display for Dispatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dispatch::Local(r) => write!(f, "{r}"),
            Dispatch::Hunt(Rule::Random, p) => write!(f, "hunt:{p}"),
            Dispatch::Hunt(r, p) => write!(f, "hunt-{r}:{p}"),
            Dispatch::Jsq => write!(f, "jsq"),
            Dispatch::Forward(r, m) => {
                write!(f, "forward-{r}:peer_margin={},seen_margin=", m.peer_margin)?;
                match m.seen_margin {
                    Some(k) => write!(f, "{k}"),
                    None => write!(f, "off"),
                }
            }
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
