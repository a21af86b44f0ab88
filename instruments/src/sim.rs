//! A discrete-event simulation of SRLB's Poisson experiment: the limit the real
//! runs sit next to.
//!
//! The servers are the workload app's model, exactly: `workers` slots, a FIFO
//! backlog of `backlog` requests waiting for a slot (full: the request is
//! rejected), and processor sharing of `cores` among the jobs in service (each
//! progresses at `min(1, cores/b)`). Servers may differ in cores and workers (a
//! mixed fleet). Arrivals are Poisson, demands exponential. There is no network
//! and no proxy cost: what is left is the dispatch policy.
//!
//! A proxy's own choice is a [`Rule`] applied by [`pick`] to what it alone sees,
//! the requests it has outstanding at each server:
//! * `random`: uniform, the view unused (the paper's RR; Envoy `RANDOM`, HAProxy
//!   `random(1)`).
//! * `p2c`: two distinct random servers, the one with fewer (Envoy
//!   `LEAST_REQUEST`, HAProxy `random(2)`).
//! * `least`: the fewest, ties at random (HAProxy `leastconn`, unweighted);
//!   `least-of-K`: at random among the K fewest.
//!
//! Dispatchers ([`Dispatch`]):
//! * `RULE` (`random`, `p2c`, `least`, `least-of-K`): the proxy's rule alone.
//! * `hunt:SPEC`, `hunt-RULE:SPEC`: service hunting with the acceptance policy
//!   `SPEC` (the policy crate's grammar: `static:4`, `dynamic`,
//!   `dynamic:low=0.7,high=0.9`). The offer goes to the rule's pick (`hunt:` is
//!   `hunt-random:`, the paper's random first candidate); that server's agent
//!   decides with [`Policy::decide`] on its true in-flight count, as the real
//!   agent does; a refused request goes, as a final, to the same rule's pick
//!   among the other servers.
//! * `jsq`: ideal join-shortest-queue on the true in-flight counts, the limit
//!   no distributed balancer reaches.
//! * `forward-RULE:SLACK`: what it would take to come near JSQ with several
//!   proxies (no host does this). The offer goes to the rule's pick as in
//!   hunting, but the agents share a view of the whole fleet's in-flight counts,
//!   refreshed every `fleet_view_s` (0: live): the first agent keeps the
//!   request if its own count is at most the fleet's least plus `SLACK`, else
//!   it forwards it, as a final, to the least loaded other server by its view
//!   (the snapshot plus what it forwarded since).
//!
//! With `proxies > 1`, arrivals go to the proxies in turn (or at random, see
//! [`Assign`]) and each counts only the requests it sent itself. With
//! `refresh_s > 0` a proxy picks from a snapshot of its counts taken every
//! `refresh_s` (the proxies' refreshes staggered), not from the live counts.
//! With `feedback`, every response (and refusal) tells its proxy the server's
//! true in-flight count, and the proxy's view of a server is the last count it
//! heard plus its own sends minus its own completions since: an upper bound on
//! what load reports from the backends could buy (no front does this).

use huntlb_policy::{Load, Policy, State, Try};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use serde::Serialize;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
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
}

impl Dispatch {
    /// The rule, for dispatchers that use a proxy's own view or its draws.
    pub fn rule(&self) -> Option<Rule> {
        match *self {
            Dispatch::Local(r) | Dispatch::Hunt(r, _) | Dispatch::Forward(r, ..) => Some(r),
            Dispatch::Jsq => None,
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

/// One server of the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ServerSpec {
    pub cores: f64,
    pub workers: u32,
    /// SR_dyn's floor `c_min` for this server, overriding the dispatch's
    /// policy's (a capacity-aware fleet sets it to each server's cores).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub c_min: Option<u32>,
}

/// `servers` identical servers.
pub fn uniform(servers: usize, workers: u32, cores: f64) -> Vec<ServerSpec> {
    vec![ServerSpec { cores, workers, c_min: None }; servers]
}

/// One simulated experiment.
#[derive(Debug, Clone)]
pub struct Config {
    /// One entry per server.
    pub fleet: Vec<ServerSpec>,
    pub backlog: u32,
    /// Mean of the exponential service demand, in seconds of one core.
    pub mean_s: f64,
    /// Poisson arrival rate, requests per second.
    pub rate: f64,
    pub requests: u64,
    pub dispatch: Dispatch,
    /// Independent proxies (own-view dispatchers only see their share).
    pub proxies: usize,
    pub assign: Assign,
    /// Own views are snapshots refreshed every this many seconds; 0: live.
    pub refresh_s: f64,
    /// Load feedback: every response (and refusal) carries the server's true
    /// in-flight count; a proxy's view of a server is the last count it heard
    /// plus its own sends and minus its own completions since.
    pub feedback: bool,
    /// `forward-*` only: the agents' shared view of every server's in-flight
    /// count is a snapshot refreshed every this many seconds; 0: live.
    pub fleet_view_s: f64,
    /// `forward-*` only, instead of snapshots: every change of a server's
    /// count reaches every agent this many seconds later (pushed on change,
    /// as a gossip of counts would); 0: use `fleet_view_s`.
    pub fleet_delay_s: f64,
    pub seed: u64,
    /// Sample per-server busy workers this often (seconds); 0: never.
    pub sample_every_s: f64,
}

impl Config {
    /// Nominal capacity in requests per second: total cores / mean demand.
    pub fn capacity(&self) -> f64 {
        self.fleet.iter().map(|s| s.cores).sum::<f64>() / self.mean_s
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub dispatch: String,
    pub rate: f64,
    /// `rate` over the nominal capacity.
    pub rho: f64,
    pub proxies: usize,
    pub requests: u64,
    /// Served requests' response times.
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    /// Rejected because the chosen server's backlog was full.
    pub rejected: u64,
    /// Offers accepted by the first candidate / offers (hunting only).
    pub acceptance: Option<f64>,
    pub served_per_server: Vec<u64>,
    /// Jain's fairness index of busy workers, averaged over samples with load.
    pub fairness: Option<f64>,
    /// (t seconds, busy workers per server), if sampled.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<(f64, Vec<u32>)>,
}

/// Jain's index `(sum x)^2 / (n sum x^2)`; `None` when every x is 0.
pub fn jain(xs: &[f64]) -> Option<f64> {
    let s: f64 = xs.iter().sum();
    let s2: f64 = xs.iter().map(|x| x * x).sum();
    (s2 > 0.0).then(|| s * s / (xs.len() as f64 * s2))
}

struct Job {
    id: u64,
    demand: f64,
}

/// One server: processor sharing over `in_service` on a virtual clock `v` that
/// advances at `min(1, cores/b)` per second.
struct Server {
    cores: f64,
    workers: u32,
    v: f64,
    last: f64,
    /// (virtual finish time, request id)
    in_service: Vec<(f64, u64)>,
    queue: VecDeque<Job>,
    state: State,
    /// This server's own policy when its spec sets `c_min`.
    policy: Option<Policy>,
    version: u64,
    served: u64,
}

impl Server {
    fn inflight(&self) -> u32 {
        (self.in_service.len() + self.queue.len()) as u32
    }

    fn rate(&self) -> f64 {
        let b = self.in_service.len();
        if b == 0 {
            1.0
        } else {
            (self.cores / b as f64).min(1.0)
        }
    }

    fn advance(&mut self, now: f64) {
        self.v += (now - self.last) * self.rate();
        self.last = now;
    }

    /// Real time of the next completion, if any job is in service.
    fn next_done(&self) -> Option<f64> {
        let min_v = self.in_service.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
        min_v.is_finite().then(|| self.last + ((min_v - self.v).max(0.0)) / self.rate())
    }
}

#[derive(PartialEq)]
struct Event {
    t: f64,
    server: usize,
    version: u64,
}

impl Eq for Event {}
impl Ord for Event {
    fn cmp(&self, o: &Self) -> Ordering {
        // BinaryHeap is a max-heap: earliest first.
        o.t.total_cmp(&self.t).then_with(|| o.server.cmp(&self.server))
    }
}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// `policy` with SR_dyn's floor set to `c_min` (other policies have none).
fn with_c_min(policy: Policy, c_min: u32) -> Policy {
    match policy {
        Policy::Dynamic(d) => Policy::Dynamic(huntlb_policy::DynamicParams { c_min, ..d }),
        other => other,
    }
}

/// Run `cfg` with a generator seeded from `cfg.seed`.
pub fn run(cfg: &Config) -> Report {
    run_with(cfg, &mut SmallRng::seed_from_u64(cfg.seed))
}

/// Run `cfg` drawing every random number (arrivals, demands, picks) from `rng`.
pub fn run_with<R: Rng + ?Sized>(cfg: &Config, rng: &mut R) -> Report {
    let n = cfg.fleet.len();
    assert!(n >= 2 && cfg.proxies >= 1 && cfg.rate > 0.0 && cfg.mean_s > 0.0);
    assert!(cfg.refresh_s >= 0.0 && cfg.refresh_s.is_finite());
    assert!(cfg.fleet.iter().all(|s| s.cores > 0.0 && s.workers >= 1));
    let policy = match cfg.dispatch {
        Dispatch::Hunt(_, p) => p,
        _ => Policy::Always,
    };
    let mut servers: Vec<Server> = cfg
        .fleet
        .iter()
        .map(|f| Server {
            cores: f.cores,
            workers: f.workers,
            v: 0.0,
            last: 0.0,
            in_service: Vec::new(),
            queue: VecDeque::new(),
            policy: f.c_min.map(|m| with_c_min(policy, m)),
            state: f.c_min.map_or(policy, |m| with_c_min(policy, m)).initial_state(),
            version: 0,
            served: 0,
        })
        .collect();
    // Own view per proxy: outstanding requests it sent to each server.
    let mut view = vec![vec![0u32; n]; cfg.proxies];
    // Stale views: proxy p refreshes its snapshot at (j + p/proxies) * refresh_s.
    let stale = cfg.refresh_s > 0.0;
    let mut snap = if stale { view.clone() } else { Vec::new() };
    let refresh_step = cfg.refresh_s / cfg.proxies as f64;
    let mut refreshes = 0u64;
    let mut next_refresh = if stale { 0.0 } else { f64::INFINITY };
    // Feedback: per proxy and server, (true count heard, own count then).
    let mut heard = vec![vec![(0u32, 0u32); n]; cfg.proxies];
    let mut est = vec![0u32; n];
    // Forward: the agents' fleet snapshot, when it was taken, and what each
    // agent forwarded to each server since.
    let mut fleet_snap = vec![0u32; n];
    let mut fleet_snap_t = f64::NEG_INFINITY;
    let mut forwarded = if matches!(cfg.dispatch, Dispatch::Forward(..)) { vec![vec![0u32; n]; n] } else { Vec::new() };
    // Delayed pushes: each server's count changes, (time, count), kept back to
    // the one in force `fleet_delay_s` ago; and each agent's own forwards that
    // recent (not yet in what it heard).
    let delayed = cfg.fleet_delay_s > 0.0;
    let mut history: Vec<VecDeque<(f64, u32)>> = if delayed { vec![VecDeque::from([(f64::NEG_INFINITY, 0)]); n] } else { Vec::new() };
    let mut recent: Vec<VecDeque<(f64, usize)>> = if delayed { vec![VecDeque::new(); n] } else { Vec::new() };
    // (proxy, server it counts the request at) per request: a forwarded
    // request counts at the server its front sent it to, as a real front's does.
    let mut owner: Vec<(usize, usize)> = Vec::with_capacity(cfg.requests as usize);
    let mut arrived_at: Vec<f64> = Vec::with_capacity(cfg.requests as usize);
    let mut times: Vec<f64> = Vec::with_capacity(cfg.requests as usize);
    let mut heap = BinaryHeap::new();
    let (mut offers, mut accepted, mut rejected) = (0u64, 0u64, 0u64);
    let mut samples = Vec::new();
    let mut next_sample = if cfg.sample_every_s > 0.0 { 0.0 } else { f64::INFINITY };
    let mut fair_sum = (0.0, 0u64);

    let exp = |rng: &mut R, mean: f64| -mean * (1.0 - rng.gen::<f64>()).ln();
    let mut next_arrival = exp(rng, 1.0 / cfg.rate);
    let mut id = 0u64;

    loop {
        let next_done = heap.peek().map_or(f64::INFINITY, |e: &Event| e.t);
        let now = next_arrival.min(next_done);
        if !now.is_finite() {
            break;
        }
        while next_sample <= now {
            let busy: Vec<u32> = servers.iter().map(|s| s.in_service.len() as u32).collect();
            if let Some(f) = jain(&busy.iter().map(|&b| f64::from(b)).collect::<Vec<_>>()) {
                fair_sum = (fair_sum.0 + f, fair_sum.1 + 1);
            }
            samples.push((next_sample, busy));
            next_sample += cfg.sample_every_s;
        }
        while next_refresh <= now {
            let p = (refreshes % cfg.proxies as u64) as usize;
            snap[p].copy_from_slice(&view[p]);
            refreshes += 1;
            next_refresh = refreshes as f64 * refresh_step;
        }
        if next_arrival <= next_done {
            // An arrival: its proxy chooses a server.
            let proxy = match cfg.assign {
                Assign::Turn => (id as usize) % cfg.proxies,
                Assign::Random => rng.gen_range(0..cfg.proxies),
            };
            if cfg.feedback {
                for (k, e) in est.iter_mut().enumerate() {
                    let (t, at) = heard[proxy][k];
                    *e = (i64::from(t) + i64::from(view[proxy][k]) - i64::from(at)).max(0) as u32;
                }
            }
            let own: &[u32] = if cfg.feedback { &est } else if stale { &snap[proxy] } else { &view[proxy] };
            let mut counted = usize::MAX; // the server chosen, unless forwarded
            let s = match cfg.dispatch {
                Dispatch::Local(rule) => pick(rule, own, None, rng),
                Dispatch::Hunt(rule, p) => {
                    let first = pick(rule, own, None, rng);
                    offers += 1;
                    let srv = &mut servers[first];
                    // The front sends its own count with the offer (hunt-seen), as
                    // the HAProxy front does; a policy without `slack` ignores it.
                    let load = Load { busy: srv.inflight(), workers: srv.workers, seen: Some(own[first]) };
                    let out = srv.policy.unwrap_or(p).decide(srv.state, Try::Offer, load);
                    srv.state = out.state;
                    if out.decision.is_accept() {
                        accepted += 1;
                        first
                    } else {
                        if cfg.feedback {
                            heard[proxy][first] = (load.busy, view[proxy][first]);
                        }
                        pick(rule, own, Some(first), rng)
                    }
                }
                Dispatch::Jsq => {
                    let true_load: Vec<u32> = servers.iter().map(Server::inflight).collect();
                    pick(Rule::Least { k: 1 }, &true_load, None, rng)
                }
                Dispatch::Forward(rule, slack, seen_slack) => {
                    let first = pick(rule, own, None, rng);
                    counted = first;
                    offers += 1;
                    let seen: Vec<u32> = if delayed {
                        let at = now - cfg.fleet_delay_s;
                        let r = &mut recent[first];
                        while r.front().is_some_and(|&(t, _)| t <= at) {
                            r.pop_front();
                        }
                        let mut v: Vec<u32> = history
                            .iter_mut()
                            .map(|h| {
                                while h.len() >= 2 && h[1].0 <= at {
                                    h.pop_front();
                                }
                                h[0].1
                            })
                            .collect();
                        for &(_, to) in r.iter() {
                            v[to] += 1;
                        }
                        v
                    } else {
                        if cfg.fleet_view_s == 0.0 || now >= fleet_snap_t + cfg.fleet_view_s {
                            for (v, srv) in fleet_snap.iter_mut().zip(&servers) {
                                *v = srv.inflight();
                            }
                            fleet_snap_t = now;
                            forwarded.iter_mut().for_each(|f| f.fill(0));
                        }
                        // The snapshot plus the agent's own forwards since.
                        fleet_snap.iter().zip(&forwarded[first]).map(|(a, b)| a + b).collect()
                    };
                    // Its own count it knows live. The decision is the agent's
                    // own, `huntlb_policy::forward::route` (ties drawn from this
                    // run's stream), over every other server's count as seen.
                    let busy = servers[first].inflight();
                    let others: Vec<u32> = seen.iter().enumerate().filter(|&(i, _)| i != first).map(|(_, &v)| v).collect();
                    let rule = huntlb_policy::forward::Forwarding { slack, seen_slack };
                    match huntlb_policy::forward::route_with(rule, busy, Some(own[first]), &others, |ties| rng.gen_range(0..ties)) {
                        huntlb_policy::forward::Route::Keep => {
                            accepted += 1;
                            first
                        }
                        huntlb_policy::forward::Route::Forward(j) => {
                            // The j-th other server, skipping the first.
                            let to = if j >= first { j + 1 } else { j };
                            if delayed {
                                recent[first].push_back((now, to));
                            } else {
                                forwarded[first][to] += 1;
                            }
                            to
                        }
                    }
                }
            };
            if counted == usize::MAX {
                counted = s;
            }
            let demand = exp(rng, cfg.mean_s);
            owner.push((proxy, counted));
            arrived_at.push(now);
            let srv = &mut servers[s];
            srv.advance(now);
            if srv.in_service.len() < srv.workers as usize {
                srv.in_service.push((srv.v + demand, id));
                view[proxy][counted] += 1;
                reschedule(srv, s, &mut heap);
            } else if srv.queue.len() < cfg.backlog as usize {
                srv.queue.push_back(Job { id, demand });
                view[proxy][counted] += 1;
            } else {
                rejected += 1;
            }
            if delayed {
                history[s].push_back((now, servers[s].inflight()));
            }
            id += 1;
            next_arrival = if id < cfg.requests { now + exp(rng, 1.0 / cfg.rate) } else { f64::INFINITY };
        } else {
            let ev = heap.pop().expect("peeked");
            let srv = &mut servers[ev.server];
            if ev.version != srv.version {
                continue; // superseded by a later reschedule
            }
            srv.advance(now);
            // Finish every job whose virtual deadline has come.
            let mut i = 0;
            while i < srv.in_service.len() {
                if srv.in_service[i].0 <= srv.v + 1e-12 {
                    let (_, rid) = srv.in_service.swap_remove(i);
                    times.push(now - arrived_at[rid as usize]);
                    srv.served += 1;
                    let (p, at) = owner[rid as usize];
                    view[p][at] -= 1;
                    if cfg.feedback {
                        heard[p][ev.server] = (u32::MAX, view[p][ev.server]); // count filled in below
                    }
                } else {
                    i += 1;
                }
            }
            while srv.in_service.len() < srv.workers as usize {
                let Some(job) = srv.queue.pop_front() else { break };
                srv.in_service.push((srv.v + job.demand, job.id));
            }
            if cfg.feedback {
                let now_in = srv.inflight();
                for h in heard.iter_mut() {
                    if h[ev.server].0 == u32::MAX {
                        h[ev.server].0 = now_in;
                    }
                }
            }
            if delayed {
                history[ev.server].push_back((now, srv.inflight()));
            }
            reschedule(srv, ev.server, &mut heap);
        }
    }

    times.sort_by(f64::total_cmp);
    let q = |p: f64| times.get(((times.len() as f64 * p) as usize).min(times.len().saturating_sub(1))).copied().unwrap_or(0.0) * 1e3;
    Report {
        dispatch: cfg.dispatch.to_string(),
        rate: cfg.rate,
        rho: cfg.rate / cfg.capacity(),
        proxies: cfg.proxies,
        requests: cfg.requests,
        mean_ms: times.iter().sum::<f64>() / times.len().max(1) as f64 * 1e3,
        p50_ms: q(0.50),
        p90_ms: q(0.90),
        p99_ms: q(0.99),
        rejected,
        acceptance: matches!(cfg.dispatch, Dispatch::Hunt(..) | Dispatch::Forward(..)).then(|| accepted as f64 / offers.max(1) as f64),
        served_per_server: servers.iter().map(|s| s.served).collect(),
        fairness: (fair_sum.1 > 0).then(|| fair_sum.0 / fair_sum.1 as f64),
        samples,
    }
}

fn reschedule(srv: &mut Server, idx: usize, heap: &mut BinaryHeap<Event>) {
    srv.version += 1;
    if let Some(t) = srv.next_done() {
        heap.push(Event { t, server: idx, version: srv.version });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dispatch: &str, rho: f64) -> Config {
        let (servers, cores, mean_s) = (12, 2.0, 0.01);
        Config {
            fleet: uniform(servers, 32, cores),
            backlog: 128,
            mean_s,
            rate: rho * servers as f64 * cores / mean_s,
            requests: 60_000,
            dispatch: dispatch.parse().unwrap(),
            proxies: 1,
            assign: Assign::Turn,
            refresh_s: 0.0,
            feedback: false,
            fleet_view_s: 0.0,
            fleet_delay_s: 0.0,
            seed: 7,
            sample_every_s: 0.0,
        }
    }

    /// How often `pick` returns each server over `draws` calls.
    fn histogram(rule: Rule, view: &[u32], exclude: Option<usize>, draws: usize) -> Vec<usize> {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut h = vec![0; view.len()];
        for _ in 0..draws {
            h[pick(rule, view, exclude, &mut rng)] += 1;
        }
        h
    }

    #[test]
    fn light_load_gives_the_service_time() {
        // At rho 0.05 a job almost never shares its cores: mean response = mean demand.
        let r = run(&cfg("random", 0.05));
        assert!((r.mean_ms - 10.0).abs() < 0.5, "{}", r.mean_ms);
        assert_eq!(r.rejected, 0);
        assert_eq!(r.served_per_server.iter().sum::<u64>(), 60_000);
        assert!((r.rho - 0.05).abs() < 1e-9);
    }

    #[test]
    fn one_server_matches_processor_sharing_theory() {
        // M/M/1-PS with one core: mean response = (1/mu) / (1 - rho).
        let mut c = cfg("random", 0.0);
        c.fleet = uniform(2, 32, 1.0); // random over two identical servers = two M/M/1-PS queues
        c.rate = 2.0 * 0.5 / c.mean_s;
        c.requests = 200_000;
        let r = run(&c);
        assert!((r.mean_ms - 20.0).abs() < 1.0, "M/M/1-PS at rho 0.5 wants 20 ms, got {}", r.mean_ms);
    }

    #[test]
    fn hunting_beats_random_under_load_and_jsq_beats_both() {
        let rr = run(&cfg("random", 0.88));
        let sr4 = run(&cfg("hunt:static:4", 0.88));
        let dynamic = run(&cfg("hunt:dynamic", 0.88));
        let jsq = run(&cfg("jsq", 0.88));
        assert!(sr4.mean_ms * 1.3 < rr.mean_ms, "SR_4 {} vs RR {}", sr4.mean_ms, rr.mean_ms);
        assert!(dynamic.mean_ms * 1.3 < rr.mean_ms, "SR_dyn {} vs RR {}", dynamic.mean_ms, rr.mean_ms);
        assert!(jsq.mean_ms < sr4.mean_ms.min(dynamic.mean_ms));
        let acc = dynamic.acceptance.unwrap();
        assert!((0.35..0.65).contains(&acc), "SR_dyn acceptance {acc}");
    }

    #[test]
    fn static_extremes_reduce_to_random() {
        // c = 0: every offer refused, the random second candidate serves all.
        let r = run(&cfg("hunt:static:0", 0.5));
        assert_eq!(r.acceptance, Some(0.0));
        let rr = run(&cfg("random", 0.5));
        assert!((r.mean_ms / rr.mean_ms - 1.0).abs() < 0.1, "{} vs {}", r.mean_ms, rr.mean_ms);
    }

    #[test]
    fn own_view_least_loses_its_edge_with_many_proxies() {
        let mut one = cfg("least", 0.88);
        let mut four = one.clone();
        four.proxies = 4;
        one.requests = 40_000;
        four.requests = 40_000;
        let (a, b) = (run(&one), run(&four));
        assert!(a.mean_ms < b.mean_ms, "1 proxy {} vs 4 proxies {}", a.mean_ms, b.mean_ms);
    }

    #[test]
    fn load_feedback_is_exact_with_one_proxy_and_closes_the_gap_with_many() {
        // One proxy: the count it hears plus its own changes since is the truth,
        // which its own count already was, so the runs are identical.
        let mut base = cfg("least", 0.88);
        base.requests = 40_000;
        let mut fed = base.clone();
        fed.feedback = true;
        let (a, b) = (run(&base), run(&fed));
        assert_eq!(a.served_per_server, b.served_per_server);
        assert_eq!(a.mean_ms, b.mean_ms);
        // Sixteen proxies: what the others sent reaches each one with every
        // response, so least-request moves towards JSQ.
        base.proxies = 16;
        fed.proxies = 16;
        let (own, heard, jsq) = (run(&base), run(&fed), run(&Config { proxies: 16, ..cfg("jsq", 0.88) }));
        assert!(heard.mean_ms < 0.9 * own.mean_ms, "feedback {} vs own view {}", heard.mean_ms, own.mean_ms);
        assert!(jsq.mean_ms < heard.mean_ms, "JSQ {} vs feedback {}", jsq.mean_ms, heard.mean_ms);
    }

    #[test]
    fn fairness_index() {
        assert_eq!(jain(&[1.0, 1.0, 1.0]), Some(1.0));
        assert_eq!(jain(&[3.0, 0.0, 0.0]), Some(1.0 / 3.0));
        assert_eq!(jain(&[0.0, 0.0]), None);
    }

    #[test]
    fn forwarding_agents_need_a_fresh_fleet_view_to_come_near_jsq() {
        // Four proxies over least by own view: agents that know the whole fleet
        // live and forward what is not theirs to the least are JSQ up to
        // the first offer; a view a few ms old herds the forwards onto
        // the snapshot's least and loses what it gained.
        let base = |d: &str, view_ms: f64| Config { proxies: 4, requests: 40_000, fleet_view_s: view_ms / 1e3, ..cfg(d, 0.88) };
        let (least, jsq) = (run(&base("least", 0.0)), run(&base("jsq", 0.0)));
        let (live, stale) = (run(&base("forward-least:0", 0.0)), run(&base("forward-least:0", 5.0)));
        assert!(live.mean_ms < 1.05 * jsq.mean_ms, "live view {} vs JSQ {}", live.mean_ms, jsq.mean_ms);
        assert!(live.mean_ms < 0.9 * least.mean_ms, "live view {} vs least {}", live.mean_ms, least.mean_ms);
        assert!(stale.mean_ms > least.mean_ms, "5 ms view {} vs least {}", stale.mean_ms, least.mean_ms);
        let acc = live.acceptance.unwrap();
        assert!((0.2..0.8).contains(&acc), "first agents kept {acc} of the offers");
    }

    #[test]
    fn counts_pushed_on_change_and_the_fronts_own_count_keep_forwarding_near_jsq() {
        // What the agent ships (`fleet_listen`): every count change reaches the
        // agents 0.2 ms later, and an offer whose server holds no more than its
        // front's count there plus 1 is kept. One front: its count is the truth,
        // so nothing is forwarded and it is least-request exactly. Four fronts:
        // within a few percent of JSQ, far below least-request.
        let base = |d: &str, proxies: usize, delay_ms: f64| Config { proxies, requests: 40_000, fleet_delay_s: delay_ms / 1e3, ..cfg(d, 0.88) };
        let one = run(&base("forward-least:0:seen=1", 1, 0.2));
        let least1 = run(&base("least", 1, 0.0));
        assert_eq!(one.acceptance, Some(1.0));
        assert_eq!(one.mean_ms, least1.mean_ms);
        let (four, least4, jsq) = (run(&base("forward-least:0:seen=1", 4, 0.2)), run(&base("least", 4, 0.0)), run(&base("jsq", 4, 0.0)));
        assert!(four.mean_ms < 0.87 * least4.mean_ms, "forward {} vs least {}", four.mean_ms, least4.mean_ms);
        assert!(four.mean_ms < 1.05 * jsq.mean_ms, "forward {} vs JSQ {}", four.mean_ms, jsq.mean_ms);
        // Older counts herd forwards onto a stale least.
        let late = run(&base("forward-least:0:seen=1", 4, 5.0));
        assert!(late.mean_ms > four.mean_ms, "5 ms {} vs 0.2 ms {}", late.mean_ms, four.mean_ms);
    }

    #[test]
    fn dispatch_specs_round_trip_and_old_ones_still_parse() {
        for s in ["random", "p2c", "least", "least-of-3", "jsq", "hunt:static:4", "hunt-p2c:static:4", "hunt-least:static:0",
            "hunt-least-of-3:static:8", "hunt-random:static:4", "forward-least:0", "forward-p2c:2", "forward-least:0:seen=1"]
        {
            let d: Dispatch = s.parse().unwrap();
            assert_eq!(d.to_string().parse::<Dispatch>().unwrap(), d, "{s}");
        }
        assert_eq!("rr".parse::<Dispatch>().unwrap(), Dispatch::Local(Rule::Random));
        assert_eq!("hunt-random:static:4".parse::<Dispatch>().unwrap().to_string(), "hunt:static:4");
        let d: Dispatch = "hunt-least:dynamic:low=0.7,high=0.9".parse().unwrap();
        let Dispatch::Hunt(Rule::Least { k: 1 }, huntlb_policy::Policy::Dynamic(p)) = d else { panic!("{d:?}") };
        assert_eq!((p.low, p.high), (0.7, 0.9));
        for bad in ["fastest", "hunt", "hunt-least", "least-of-0", "least-of-x", "least-of-+2", "hunt-fast:static:4",
            "jsq:static:4", "hunt:static:x", "hunt-least:dynamic:low=0.9,high=0.7", "forward-least", "forward-least:x", "forward-least:0:seen", "forward-least:0:k=1",
            "forward-fast:0"]
        {
            let e = bad.parse::<Dispatch>().unwrap_err();
            assert!(e.starts_with(&format!("dispatch `{bad}`")), "{bad}: {e}");
        }
    }

    #[test]
    fn pick_random_is_uniform_over_the_others() {
        let h = histogram(Rule::Random, &[9, 0, 5, 0], Some(2), 30_000);
        assert_eq!(h[2], 0);
        assert!(h.iter().enumerate().filter(|(i, _)| *i != 2).all(|(_, &c)| (9_000..11_000).contains(&c)), "{h:?}");
    }

    #[test]
    fn pick_p2c_takes_the_lower_of_two_distinct() {
        // Server 0 (the least) wins every pair it is in, 3 of the 6 pairs;
        // server 3 (the most) never wins one.
        let h = histogram(Rule::P2c, &[0, 4, 4, 9], None, 60_000);
        assert_eq!(h[3], 0, "{h:?}");
        assert!((28_000..32_000).contains(&h[0]), "{h:?}");
        // Excluding server 0 of two: the other, whatever the counts.
        assert_eq!(histogram(Rule::P2c, &[0, 9], Some(0), 100), vec![0, 100]);
        // Excluding the least: the lower of two among the rest.
        let h = histogram(Rule::P2c, &[0, 1, 5, 5], Some(0), 30_000);
        assert_eq!(h[0], 0);
        assert!((19_000..21_000).contains(&h[1]), "{h:?}");
    }

    #[test]
    fn pick_least_breaks_ties_at_random_and_skips_the_excluded() {
        let h = histogram(Rule::Least { k: 1 }, &[3, 1, 7, 1, 1], None, 30_000);
        assert_eq!((h[0], h[2]), (0, 0));
        assert!([1, 3, 4].iter().all(|&i| (9_000..11_000).contains(&h[i])), "{h:?}");
        let h = histogram(Rule::Least { k: 1 }, &[3, 1, 7, 2], Some(1), 1_000);
        assert_eq!(h, vec![0, 0, 0, 1_000]);
    }

    #[test]
    fn pick_least_of_k_is_uniform_over_the_k_least() {
        // The 3 least of [0, 5, 1, 5, 2, 9] are servers 0, 2, 4.
        let h = histogram(Rule::Least { k: 3 }, &[0, 5, 1, 5, 2, 9], None, 30_000);
        assert_eq!((h[1], h[3], h[5]), (0, 0, 0), "{h:?}");
        assert!([0, 2, 4].iter().all(|&i| (9_000..11_000).contains(&h[i])), "{h:?}");
        // A tie at the cut: server 0, then one of 1, 2, 3 drawn at random as the
        // second: 0 gets 1/2, the others 1/6 each.
        let h = histogram(Rule::Least { k: 2 }, &[0, 4, 4, 4], None, 60_000);
        assert!((28_500..31_500).contains(&h[0]) && h[1..].iter().all(|&c| (9_000..11_000).contains(&c)), "{h:?}");
        // k beyond the candidates: every candidate, uniformly; never the excluded.
        let h = histogram(Rule::Least { k: 10 }, &[0, 5, 1], Some(0), 20_000);
        assert!(h[0] == 0 && h[1..].iter().all(|&c| (9_000..11_000).contains(&c)), "{h:?}");
    }

    #[test]
    fn pick_is_a_function_of_its_inputs() {
        let view = [2, 0, 0, 3, 1];
        for rule in [Rule::Random, Rule::P2c, Rule::Least { k: 1 }, Rule::Least { k: 2 }] {
            let draw = |seed| {
                let mut rng = SmallRng::seed_from_u64(seed);
                (0..50).map(|_| pick(rule, &view, Some(1), &mut rng)).collect::<Vec<_>>()
            };
            assert_eq!(draw(11), draw(11), "{rule}");
        }
    }

    #[test]
    fn one_proxys_least_is_jsq_and_hunting_over_it_stays_close() {
        let least = run(&cfg("least", 0.88));
        let jsq = run(&cfg("jsq", 0.88));
        let hunt_least = run(&cfg("hunt-least:dynamic", 0.88));
        let hunt = run(&cfg("hunt:dynamic", 0.88));
        // One proxy sees every request: its own counts are the true ones.
        assert!((least.mean_ms / jsq.mean_ms - 1.0).abs() < 0.05, "least {} vs jsq {}", least.mean_ms, jsq.mean_ms);
        assert!(hunt_least.mean_ms < 1.15 * jsq.mean_ms, "hunt-least {} vs jsq {}", hunt_least.mean_ms, jsq.mean_ms);
        assert!(hunt_least.mean_ms * 1.2 < hunt.mean_ms, "hunt-least {} vs random offer {}", hunt_least.mean_ms, hunt.mean_ms);
    }

    #[test]
    fn hunting_corrects_own_view_least_with_many_proxies() {
        let at = |d: &str| {
            let mut c = cfg(d, 0.88);
            c.proxies = 16;
            run(&c)
        };
        let (least, hunt_least) = (at("least"), at("hunt-least:dynamic"));
        assert!(hunt_least.mean_ms * 1.1 < least.mean_ms, "16 proxies: hunt-least {} vs least {}", hunt_least.mean_ms, least.mean_ms);
    }

    #[test]
    fn random_assignment_spreads_arrivals_over_the_proxies() {
        let mut c = cfg("least", 0.6);
        c.proxies = 8;
        c.assign = Assign::Random;
        c.requests = 20_000;
        let r = run(&c);
        assert_eq!(r.served_per_server.iter().sum::<u64>() + r.rejected, 20_000);
        assert_eq!(r.proxies, 8);
    }

    #[test]
    fn mixed_fleet_random_offers_overflow_small_servers_hunting_over_least_does_not() {
        let mixed = |d: &str| {
            let mut c = cfg(d, 0.0);
            c.fleet = [1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 8.0, 8.0].iter().map(|&cores| ServerSpec { cores, workers: 32, c_min: None }).collect();
            c.rate = 0.88 * c.capacity();
            c.requests = 40_000;
            run(&c)
        };
        let (hunt, hunt_least) = (mixed("hunt:dynamic"), mixed("hunt-least:dynamic"));
        assert!(hunt.rejected > 1_000, "random offers: {} rejected", hunt.rejected);
        assert_eq!(hunt_least.rejected, 0);
        assert!(hunt_least.mean_ms * 3.0 < hunt.mean_ms, "{} vs {}", hunt_least.mean_ms, hunt.mean_ms);
        // The big servers serve more: 8 cores take more than 1 core.
        assert!(hunt_least.served_per_server[7] > 3 * hunt_least.served_per_server[0], "{:?}", hunt_least.served_per_server);
    }

    #[test]
    fn a_stale_view_herds_and_the_k_least_spread_it() {
        let at = |d: &str, refresh_s: f64| {
            let mut c = cfg(d, 0.88);
            c.refresh_s = refresh_s;
            c.requests = 40_000;
            run(&c).mean_ms
        };
        let (fresh, stale, stale3) = (at("least", 0.0), at("least", 0.05), at("least-of-3", 0.05));
        assert!(stale > 1.5 * fresh, "refresh 50 ms {stale} vs live {fresh}");
        assert!(stale3 < stale, "least-of-3 {stale3} vs least {stale} at 50 ms");
        // A refresh period far below the inter-arrival time (0.47 ms) is nearly the live view.
        let tiny = at("least", 1e-5);
        assert!((tiny / fresh - 1.0).abs() < 0.05, "{tiny} vs {fresh}");
    }
}
