//! A discrete-event simulation of SRLB's Poisson experiment: the limit the real
//! runs sit next to.
//!
//! The servers are the workload app's model, exactly: `workers` slots, a FIFO
//! backlog of `backlog` requests waiting for a slot (full: the request is
//! rejected), and processor sharing of `cores` among the jobs in service (each
//! progresses at `min(1, cores/b)`). Servers may differ in cores and workers (a
//! mixed fleet). Arrivals are Poisson, demands exponential or lognormal
//! ([`Demand`]). There is no network and no proxy cost, except one `hop_s`
//! for a request that takes a second hop (a forward, hunting's final) and a
//! `fleet_delay_s` for a datagram between agents: what is left is the dispatch
//! policy, and the messages it costs ([`Messages`]).
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
//!   decides with [`huntlb_policy::Policy::decide`] on its true in-flight count, as the real
//!   agent does; a refused request goes, as a final, to the same rule's pick
//!   among the other servers.
//! * `jsq`: ideal join-shortest-queue on the true in-flight counts, the limit
//!   no distributed balancer reaches.
//! * `prequal:...`: Prequal at each front ([`prequal`]), probes instead of counts.
//! * `forward-RULE[:peer_margin=M,seen_margin=K]`: the agents' forwarding
//!   tier, with the agent's knobs under the agent's names (`forward_peer_margin`,
//!   `forward_seen_margin`; each by default the agent's, `seen_margin=off`
//!   consults no front's count). The offer goes to the rule's pick as in
//!   hunting; the agents hear their peers' counts ([`tier`]: every peer's, or a
//!   re-drawn sample's; pushed on change `fleet_delay_s` late, or a snapshot
//!   every `fleet_view_s`), and the first agent decides with
//!   `huntlb_policy::forward::route_with`: keep, or forward as a final to the
//!   least loaded peer it knows (what it heard, plus what it forwarded since).
//!   The old form `forward-RULE:SLACK[:seen=K]` still parses, with a warning
//!   ([`Dispatch::warning`]).
//!
//! With `proxies > 1`, arrivals go to the proxies in turn (or at random, see
//! [`Assign`]) and each counts only the requests it sent itself. With
//! `refresh_s > 0` a proxy picks from a snapshot of its counts taken every
//! `refresh_s` (the proxies' refreshes staggered), not from the live counts.
//! With `feedback`, every response (and refusal) tells its proxy the server's
//! true in-flight count, and the proxy's view of a server is the last count it
//! heard plus its own sends minus its own completions since: an upper bound on
//! what load reports from the backends could buy (no front does this).

mod decide;
mod demand;
mod dispatch;
mod engine;
pub mod prequal;
mod rule;
mod server;
mod share;
mod tier;
#[cfg(test)]
mod tests;

pub use demand::Demand;
pub use dispatch::{Assign, Dispatch};
pub use engine::run_with;
pub use prequal::PrequalSpec;
pub use rule::{pick, Rule};
pub use share::{spread_pick, Share, MEMORY_AGE_S, STEAL_TRIES, TOKEN_EXPIRE_S};
pub use tier::{HEARTBEAT_S, WANT_FOR_S};

use rand::{rngs::SmallRng, SeedableRng};
use serde::Serialize;

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
    /// A request passed on by an agent (a forward) or re-sent by its front
    /// (hunting's final) reaches its server this many seconds later (the
    /// server's count rises then); a probe's answer lands this late too.
    pub hop_s: f64,
    /// `forward-*`: each agent hears the counts of this many other servers
    /// only (a sample, re-drawn; see [`tier`]); 0: every peer.
    pub fleet_sample: usize,
    /// `forward-*` with a sample: each agent re-draws it this often (staggered).
    pub fleet_resample_s: f64,
    /// `forward-*` with a sample: members a re-draw keeps (the lowest seen),
    /// the agent's `fleet_sample_keep`.
    pub fleet_sample_keep: usize,
    /// `forward-*`: pull on demand instead: an agent about to decide by
    /// counts asks this many random peers (0: counts are pushed).
    pub fleet_probe: usize,
    /// `forward-*`: how counts are shared beyond the shipped push (filters
    /// on it, or tokens instead; see [`share`]); default: as shipped.
    pub fleet_share: Share,
    pub demand: Demand,
    pub seed: u64,
    /// Sample per-server busy workers this often (seconds); 0: never.
    pub sample_every_s: f64,
    /// One server stopped between two instants: (server, from s, to s). Its
    /// jobs make no progress and nothing it holds completes meanwhile, as a
    /// frozen agent (SIGSTOP) answers nothing; what is sent to it waits there.
    pub freeze: Option<Freeze>,
}

/// A server stopped from `from_s` to `to_s` (see [`Config::freeze`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Freeze {
    pub server: usize,
    pub from_s: f64,
    pub to_s: f64,
}

impl std::str::FromStr for Freeze {
    type Err = String;
    /// `SERVER:FROM_S:TO_S`, e.g. `0:3:7`.
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let bad = || format!("{s:?}: expected SERVER:FROM_S:TO_S, e.g. 0:3:7");
        let [server, from, to] = parts[..] else { return Err(bad()) };
        let f = Freeze {
            server: server.parse().map_err(|_| bad())?,
            from_s: from.parse().map_err(|_| bad())?,
            to_s: to.parse().map_err(|_| bad())?,
        };
        if !(f.from_s >= 0.0 && f.to_s > f.from_s && f.to_s.is_finite()) {
            return Err(format!("{s:?}: need 0 <= FROM_S < TO_S"));
        }
        Ok(f)
    }
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
    pub demand: String,
    /// Messages beyond the requests themselves.
    pub messages: Messages,
}

/// Messages a dispatcher costs beyond each request itself: what a
/// distributed balancer pays for what it knows.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Messages {
    /// Hunting: offers refused (a `425 hunt: busy` each; the final is the request).
    pub refusals: u64,
    /// The tier: offers an agent passed on to a peer.
    pub forwards: u64,
    /// Prequal: probes and their answers (2 per probe).
    pub probes: u64,
    /// The tier: datagrams between agents.
    pub datagrams: Datagrams,
    pub total: u64,
    /// `total` over the requests.
    pub per_request: f64,
}

/// The tier's datagrams, by kind (see [`tier`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Datagrams {
    /// Counts on change, and a new member's first count.
    pub counts: u64,
    pub subscribes: u64,
    pub renewals: u64,
    pub unsubscribes: u64,
    pub heartbeats: u64,
    /// Pull on demand: asks for a peer's count (the answers are counts).
    pub asks: u64,
    /// Tokens ([`share`]): sent on their own.
    pub tokens: u64,
    /// Stealing ([`share`]): a free slot's asks for a held request, and the "none" answers.
    pub steals: u64,
    /// Tokens ([`share`]): ridden on a forward's answer (no datagram; not in `total`).
    pub piggybacked: u64,
    pub total: u64,
}

impl Messages {
    fn close(mut self, requests: u64) -> Messages {
        let d = &mut self.datagrams;
        d.total = d.counts + d.subscribes + d.renewals + d.unsubscribes + d.heartbeats + d.asks + d.tokens + d.steals;
        self.total = self.refusals + self.forwards + self.probes + d.total;
        self.per_request = self.total as f64 / requests.max(1) as f64;
        self
    }
}

/// Jain's index `(sum x)^2 / (n sum x^2)`; `None` when every x is 0.
pub fn jain(xs: &[f64]) -> Option<f64> {
    let s: f64 = xs.iter().sum();
    let s2: f64 = xs.iter().map(|x| x * x).sum();
    (s2 > 0.0).then(|| s * s / (xs.len() as f64 * s2))
}

/// Run `cfg` with a generator seeded from `cfg.seed`.
pub fn run(cfg: &Config) -> Report {
    run_with(cfg, &mut SmallRng::seed_from_u64(cfg.seed))
}
