//! A proxy's own choice from its own view: [`Rule`] and [`pick`].

use rand::Rng;
use std::fmt;
use std::str::FromStr;

/// How a proxy chooses a server from its own view (see [`pick`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Random,
    P2c,
    /// At random among the `k` servers with the fewest (`k = 1`: the least).
    Least { k: usize },
}

impl FromStr for Rule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "random" | "rr" => Ok(Rule::Random),
            "p2c" => Ok(Rule::P2c),
            "least" => Ok(Rule::Least { k: 1 }),
            _ => match s.strip_prefix("least-of-") {
                Some(k) => match k.parse::<usize>() {
                    Ok(k) if k >= 1 && k.to_string() == s["least-of-".len()..] => Ok(Rule::Least { k }),
                    _ => Err(format!("least-of-K: K must be a whole number from 1, not `{k}`")),
                },
                None => Err(format!("unknown rule `{s}` (expected random, p2c, least or least-of-K)")),
            },
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Random => write!(f, "random"),
            Rule::P2c => write!(f, "p2c"),
            Rule::Least { k: 1 } => write!(f, "least"),
            Rule::Least { k } => write!(f, "least-of-{k}"),
        }
    }
}

/// The server a proxy's `rule` chooses from its `view` (the requests it has
/// outstanding at each server), never `exclude`.
///
/// Why a pure function of the proxy's own view: that view is all a real proxy
/// has, so what a rule can and cannot do with it is the whole question. With
/// one proxy, `least` on its own counts is the true state (join-shortest-queue);
/// with several, each count misses the other proxies' requests, and with a
/// stale snapshot every request until the next refresh goes to the same few
/// servers (herding), which picking at random among the `k` least spreads.
/// `exclude` is a refusing first candidate: hunting's final goes to the same
/// rule's choice among the others. Ties go at random so that equal servers
/// share the load instead of the lowest index taking it.
///
/// Without `exclude` and with `k = 1` this draws from `rng` exactly as the
/// simulator did before rules existed, so old runs reproduce bit for bit.
pub fn pick<R: Rng + ?Sized>(rule: Rule, view: &[u32], exclude: Option<usize>, rng: &mut R) -> usize {
    let n = view.len();
    assert!(exclude.map_or(n >= 1, |x| x < n && n >= 2), "pick: no candidate");
    let m = n - usize::from(exclude.is_some());
    // The j-th candidate, skipping the excluded server.
    let idx = move |j: usize| match exclude {
        Some(x) if j >= x => j + 1,
        _ => j,
    };
    match rule {
        Rule::Random => match exclude {
            None => rng.gen_range(0..n),
            Some(x) => (x + 1 + rng.gen_range(0..n - 1)) % n,
        },
        Rule::P2c => {
            if m == 1 {
                return idx(0);
            }
            let a = rng.gen_range(0..m);
            let b = (a + 1 + rng.gen_range(0..m - 1)) % m;
            let (a, b) = (idx(a), idx(b));
            if view[b] < view[a] {
                b
            } else {
                a
            }
        }
        Rule::Least { k } => {
            let k = k.clamp(1, m);
            let cands = (0..m).map(idx);
            // v: the k-th smallest count. The k least are every server below v
            // and, drawn at random, enough of those at v; one of the k uniformly
            // is then: a server below v with probability 1/k each, else one at v.
            let v = if k == 1 {
                cands.clone().map(|i| view[i]).min().expect("a candidate")
            } else {
                let mut loads: Vec<u32> = cands.clone().map(|i| view[i]).collect();
                *loads.select_nth_unstable(k - 1).1
            };
            let r = if k == 1 { 0 } else { rng.gen_range(0..k) };
            let below = cands.clone().filter(|&i| view[i] < v).count();
            if r < below {
                return cands.clone().filter(|&i| view[i] < v).nth(r).expect("counted");
            }
            let ties = cands.clone().filter(|&i| view[i] == v).count();
            let t = rng.gen_range(0..ties);
            cands.filter(|&i| view[i] == v).nth(t).expect("counted")
        }
    }
}
