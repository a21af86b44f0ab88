//! A discrete-event simulation of SRLB's Poisson experiment: the limit the real
//! runs sit next to.
//!
//! The servers are the workload app's model, exactly: `workers` slots, a FIFO
//! backlog of `backlog` requests waiting for a slot (full: the request is
//! rejected), and processor sharing of `cores` among the jobs in service (each
//! progresses at `min(1, cores/b)`). Arrivals are Poisson, demands exponential.
//! There is no network and no proxy cost: what is left is the dispatch policy.
//!
//! Dispatchers:
//! * `random`: the paper's RR baseline.
//! * `hunt:SPEC`: service hunting with the acceptance policy `SPEC` (the policy
//!   crate's grammar: `static:4`, `dynamic`). The first candidate is random; its
//!   agent decides with [`Policy::decide`] on its in-flight count, as the real
//!   agent does; a refused request goes to a different random server as a final.
//! * `least`, `p2c`: what a proxy that counts its own outstanding requests does
//!   (HAProxy `leastconn`; Envoy `LEAST_REQUEST` and HAProxy `random(2)`). With
//!   `proxies > 1`, arrivals go to the proxies in turn and each sees only its own.
//! * `jsq`: ideal join-shortest-queue on the true in-flight counts, the limit
//!   no distributed balancer reaches.

use huntlb_policy::{Load, Policy, State, Try};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use serde::Serialize;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dispatch {
    Random,
    Hunt(Policy),
    Least,
    PowerOfTwo,
    Jsq,
}

impl FromStr for Dispatch {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "random" | "rr" => Dispatch::Random,
            "least" => Dispatch::Least,
            "p2c" => Dispatch::PowerOfTwo,
            "jsq" => Dispatch::Jsq,
            _ => match s.strip_prefix("hunt:") {
                Some(spec) => Dispatch::Hunt(spec.parse().map_err(|e| format!("dispatch `{s}`: {e}"))?),
                None => return Err(format!("dispatch `{s}`: expected random, hunt:SPEC, least, p2c or jsq")),
            },
        })
    }
}

impl fmt::Display for Dispatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dispatch::Random => write!(f, "random"),
            Dispatch::Hunt(p) => write!(f, "hunt:{p}"),
            Dispatch::Least => write!(f, "least"),
            Dispatch::PowerOfTwo => write!(f, "p2c"),
            Dispatch::Jsq => write!(f, "jsq"),
        }
    }
}

/// One simulated experiment.
#[derive(Debug, Clone)]
pub struct Config {
    pub servers: usize,
    pub workers: u32,
    pub cores: f64,
    pub backlog: u32,
    /// Mean of the exponential service demand, in seconds of one core.
    pub mean_s: f64,
    /// Poisson arrival rate, requests per second.
    pub rate: f64,
    pub requests: u64,
    pub dispatch: Dispatch,
    /// Independent proxies (own-view dispatchers only see their share).
    pub proxies: usize,
    pub seed: u64,
    /// Sample per-server busy workers this often (seconds); 0: never.
    pub sample_every_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub dispatch: String,
    pub rate: f64,
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
    v: f64,
    last: f64,
    /// (virtual finish time, request id)
    in_service: Vec<(f64, u64)>,
    queue: VecDeque<Job>,
    state: State,
    version: u64,
    served: u64,
}

impl Server {
    fn inflight(&self) -> u32 {
        (self.in_service.len() + self.queue.len()) as u32
    }

    fn rate(&self, cores: f64) -> f64 {
        let b = self.in_service.len();
        if b == 0 {
            1.0
        } else {
            (cores / b as f64).min(1.0)
        }
    }

    fn advance(&mut self, now: f64, cores: f64) {
        self.v += (now - self.last) * self.rate(cores);
        self.last = now;
    }

    /// Real time of the next completion, if any job is in service.
    fn next_done(&self, cores: f64) -> Option<f64> {
        let min_v = self.in_service.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
        min_v.is_finite().then(|| self.last + ((min_v - self.v).max(0.0)) / self.rate(cores))
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

pub fn run(cfg: &Config) -> Report {
    assert!(cfg.servers >= 2 && cfg.proxies >= 1 && cfg.rate > 0.0 && cfg.mean_s > 0.0);
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let n = cfg.servers;
    let policy = match cfg.dispatch {
        Dispatch::Hunt(p) => p,
        _ => Policy::Always,
    };
    let mut servers: Vec<Server> = (0..n)
        .map(|_| Server { v: 0.0, last: 0.0, in_service: Vec::new(), queue: VecDeque::new(), state: policy.initial_state(), version: 0, served: 0 })
        .collect();
    // Own view per proxy: outstanding requests it sent to each server.
    let mut view = vec![vec![0u32; n]; cfg.proxies];
    let mut owner: Vec<(usize, usize)> = Vec::with_capacity(cfg.requests as usize); // (proxy, server) per request
    let mut arrived_at: Vec<f64> = Vec::with_capacity(cfg.requests as usize);
    let mut times: Vec<f64> = Vec::with_capacity(cfg.requests as usize);
    let mut heap = BinaryHeap::new();
    let (mut offers, mut accepted, mut rejected) = (0u64, 0u64, 0u64);
    let mut samples = Vec::new();
    let mut next_sample = if cfg.sample_every_s > 0.0 { 0.0 } else { f64::INFINITY };
    let mut fair_sum = (0.0, 0u64);

    let exp = |rng: &mut SmallRng, mean: f64| -mean * (1.0 - rng.gen::<f64>()).ln();
    let mut next_arrival = exp(&mut rng, 1.0 / cfg.rate);
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
        if next_arrival <= next_done {
            // An arrival: choose a server.
            let proxy = (id as usize) % cfg.proxies;
            let pick = |rng: &mut SmallRng| rng.gen_range(0..n);
            let other = |rng: &mut SmallRng, not: usize| (not + 1 + rng.gen_range(0..n - 1)) % n;
            let s = match cfg.dispatch {
                Dispatch::Random => pick(&mut rng),
                Dispatch::Hunt(p) => {
                    let first = pick(&mut rng);
                    offers += 1;
                    let srv = &mut servers[first];
                    let out = p.decide(srv.state, Try::Offer, Load { busy: srv.inflight(), workers: cfg.workers });
                    srv.state = out.state;
                    if out.decision.is_accept() {
                        accepted += 1;
                        first
                    } else {
                        other(&mut rng, first)
                    }
                }
                Dispatch::Least => least(&view[proxy], &mut rng),
                Dispatch::PowerOfTwo => {
                    let a = pick(&mut rng);
                    let b = other(&mut rng, a);
                    if view[proxy][b] < view[proxy][a] {
                        b
                    } else {
                        a
                    }
                }
                Dispatch::Jsq => {
                    let true_load: Vec<u32> = servers.iter().map(Server::inflight).collect();
                    least(&true_load, &mut rng)
                }
            };
            let demand = exp(&mut rng, cfg.mean_s);
            owner.push((proxy, s));
            arrived_at.push(now);
            let srv = &mut servers[s];
            srv.advance(now, cfg.cores);
            if srv.in_service.len() < cfg.workers as usize {
                srv.in_service.push((srv.v + demand, id));
                view[proxy][s] += 1;
                reschedule(srv, s, cfg.cores, &mut heap);
            } else if srv.queue.len() < cfg.backlog as usize {
                srv.queue.push_back(Job { id, demand });
                view[proxy][s] += 1;
            } else {
                rejected += 1;
            }
            id += 1;
            next_arrival = if id < cfg.requests { now + exp(&mut rng, 1.0 / cfg.rate) } else { f64::INFINITY };
        } else {
            let ev = heap.pop().expect("peeked");
            let srv = &mut servers[ev.server];
            if ev.version != srv.version {
                continue; // superseded by a later reschedule
            }
            srv.advance(now, cfg.cores);
            // Finish every job whose virtual deadline has come.
            let mut i = 0;
            while i < srv.in_service.len() {
                if srv.in_service[i].0 <= srv.v + 1e-12 {
                    let (_, rid) = srv.in_service.swap_remove(i);
                    times.push(now - arrived_at[rid as usize]);
                    srv.served += 1;
                    let (p, _) = owner[rid as usize];
                    view[p][ev.server] -= 1;
                } else {
                    i += 1;
                }
            }
            while srv.in_service.len() < cfg.workers as usize {
                let Some(job) = srv.queue.pop_front() else { break };
                srv.in_service.push((srv.v + job.demand, job.id));
            }
            reschedule(srv, ev.server, cfg.cores, &mut heap);
        }
    }

    times.sort_by(f64::total_cmp);
    let q = |p: f64| times.get(((times.len() as f64 * p) as usize).min(times.len().saturating_sub(1))).copied().unwrap_or(0.0) * 1e3;
    Report {
        dispatch: cfg.dispatch.to_string(),
        rate: cfg.rate,
        requests: cfg.requests,
        mean_ms: times.iter().sum::<f64>() / times.len().max(1) as f64 * 1e3,
        p50_ms: q(0.50),
        p90_ms: q(0.90),
        p99_ms: q(0.99),
        rejected,
        acceptance: matches!(cfg.dispatch, Dispatch::Hunt(_)).then(|| accepted as f64 / offers.max(1) as f64),
        served_per_server: servers.iter().map(|s| s.served).collect(),
        fairness: (fair_sum.1 > 0).then(|| fair_sum.0 / fair_sum.1 as f64),
        samples,
    }
}

fn reschedule(srv: &mut Server, idx: usize, cores: f64, heap: &mut BinaryHeap<Event>) {
    srv.version += 1;
    if let Some(t) = srv.next_done(cores) {
        heap.push(Event { t, server: idx, version: srv.version });
    }
}

/// The index with the least load, ties broken at random.
fn least(load: &[u32], rng: &mut SmallRng) -> usize {
    let min = *load.iter().min().expect("servers");
    let ties = load.iter().filter(|&&l| l == min).count();
    let mut k = rng.gen_range(0..ties);
    for (i, &l) in load.iter().enumerate() {
        if l == min {
            if k == 0 {
                return i;
            }
            k -= 1;
        }
    }
    unreachable!()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dispatch: &str, rho: f64) -> Config {
        let (servers, cores, mean_s) = (12, 2.0, 0.01);
        Config {
            servers,
            workers: 32,
            cores,
            backlog: 128,
            mean_s,
            rate: rho * servers as f64 * cores / mean_s,
            requests: 60_000,
            dispatch: dispatch.parse().unwrap(),
            proxies: 1,
            seed: 7,
            sample_every_s: 0.0,
        }
    }

    #[test]
    fn light_load_gives_the_service_time() {
        // At rho 0.05 a job almost never shares its cores: mean response = mean demand.
        let r = run(&cfg("random", 0.05));
        assert!((r.mean_ms - 10.0).abs() < 0.5, "{}", r.mean_ms);
        assert_eq!(r.rejected, 0);
        assert_eq!(r.served_per_server.iter().sum::<u64>(), 60_000);
    }

    #[test]
    fn one_server_matches_processor_sharing_theory() {
        // M/M/1-PS with one core: mean response = (1/mu) / (1 - rho).
        let mut c = cfg("random", 0.0);
        c.servers = 2; // random over two identical servers = two M/M/1-PS queues
        c.cores = 1.0;
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
    fn fairness_index() {
        assert_eq!(jain(&[1.0, 1.0, 1.0]), Some(1.0));
        assert_eq!(jain(&[3.0, 0.0, 0.0]), Some(1.0 / 3.0));
        assert_eq!(jain(&[0.0, 0.0]), None);
    }
}
