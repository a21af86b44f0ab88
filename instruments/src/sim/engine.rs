//! The event loop: arrivals, requests on a second hop, the agents' re-draws,
//! completions.

use super::demand::exp;
use super::prequal::{Latencies, Pool};
use super::server::{reschedule, with_c_min, Event, Job, Server};
use super::tier::{Tier, TierSpec};
use super::{jain, Assign, Config, Dispatch, Messages, Report};
use huntlb_policy::Policy;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// A request on its way: it reaches `server` at `t` (a second hop), or, with
/// `asked`, its agent `server` has its peers' answers then and decides.
struct Transit {
    t: f64,
    server: usize,
    id: u64,
    demand: f64,
    asked: Option<(Vec<usize>, u32)>,
    kind: Kind,
}

/// What is on its way (stealing, [`super::share`], adds the last three).
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// A request (its first hop done), to `server`.
    Job,
    /// A free slot at `thief` asks `server` for a held request.
    Steal { thief: usize, tries: u32 },
    /// `server`'s ask found nothing held; it may ask `tries` more.
    Nothing { tries: u32 },
    /// A held request on its way to the free slot at `server` that asked.
    Stolen,
}

impl PartialEq for Transit {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Transit {}
impl Ord for Transit {
    fn cmp(&self, o: &Self) -> Ordering {
        // A max-heap: earliest first, then the older request.
        o.t.total_cmp(&self.t).then_with(|| o.id.cmp(&self.id))
    }
}
impl PartialOrd for Transit {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// The state of one run (the dispatchers' part is in `decide`).
pub(super) struct Sim<'a> {
    pub(super) cfg: &'a Config,
    pub(super) servers: Vec<Server>,
    /// Own view per proxy: outstanding requests it sent to each server.
    pub(super) view: Vec<Vec<u32>>,
    /// Feedback: per proxy and server, (true count heard, own count then).
    pub(super) heard: Vec<Vec<(u32, u32)>>,
    pub(super) tier: Option<Tier>,
    /// Prequal: each front's pool, and the servers' latency estimates.
    pub(super) pools: Vec<Pool>,
    pub(super) latencies: Option<Latencies>,
    pub(super) offers: u64,
    pub(super) accepted: u64,
    pub(super) msgs: Messages,
    /// (proxy, server it counts the request at) per request: a forwarded
    /// request counts at the server its front sent it to, as a real front's does.
    owner: Vec<(usize, usize)>,
    arrived_at: Vec<f64>,
    /// Prequal: each request's RIF at its server when it arrived (itself included).
    rif_at: Vec<u32>,
    times: Vec<f64>,
    heap: BinaryHeap<Event>,
    transit: BinaryHeap<Transit>,
    rejected: u64,
    /// Stealing: requests each agent holds (id, demand), oldest first, and
    /// its asks out or requests on their way to it.
    held: Vec<VecDeque<(u64, f64)>>,
    stealing: Vec<u32>,
    /// Stealing: whom a free slot asks (its own stream: no other draw moves).
    steal_rng: SmallRng,
}

impl Sim<'_> {
    /// Stealing: a free slot at `s` asks a random peer for a held request.
    fn steal(&mut self, s: usize, now: f64, tries: u32) {
        let n = self.servers.len();
        let p = (s + 1 + self.steal_rng.gen_range(0..n - 1)) % n;
        self.stealing[s] += 1;
        self.msgs.datagrams.steals += 1;
        let t = now + self.cfg.fleet_delay_s;
        self.transit.push(Transit { t, server: p, id: 0, demand: 0.0, asked: None, kind: Kind::Steal { thief: s, tries } });
    }

    /// Stealing: server `s` has room at `now`: its own held requests first,
    /// then an ask for each slot still free and not already asked for.
    fn refill(&mut self, s: usize, now: f64, tries: u32) {
        let Some(c) = self.cfg.fleet_share.steal else { return };
        while self.servers[s].inflight() < self.cfg.fleet_share.hold.unwrap_or(c) {
            let Some((id, demand)) = self.held[s].pop_front() else { break };
            self.admit(s, id, demand, now);
        }
        let busy = self.servers[s].inflight() + self.stealing[s];
        if self.held[s].is_empty() {
            for _ in busy..c {
                self.steal(s, now, tries);
            }
        }
    }

    /// Request `id` reaches server `s` at `now`: served, queued or rejected.
    fn admit(&mut self, s: usize, id: u64, demand: f64, now: f64) -> bool {
        if let Some(c) = self.cfg.fleet_share.steal {
            if self.servers[s].inflight() >= self.cfg.fleet_share.hold.unwrap_or(c) {
                // Held by the agent, stealable, until its app has room.
                if self.held[s].len() >= self.cfg.backlog as usize {
                    return false;
                }
                self.held[s].push_back((id, demand));
                return true;
            }
        }
        let srv = &mut self.servers[s];
        srv.advance(now);
        let admitted = if srv.in_service.len() < srv.workers as usize {
            srv.in_service.push((srv.v + demand, id));
            reschedule(srv, s, &mut self.heap);
            true
        } else if srv.queue.len() < self.cfg.backlog as usize {
            srv.queue.push_back(Job { id, demand });
            true
        } else {
            false
        };
        if admitted {
            let count = self.servers[s].inflight();
            if let Some(t) = self.tier.as_mut() {
                t.changed(s, now, count);
            }
            if self.latencies.is_some() {
                self.rif_at[id as usize] = count;
            }
        }
        admitted
    }

    /// Server `s`'s next completion event.
    fn complete(&mut self, ev: Event, now: f64) {
        let feedback = self.cfg.feedback;
        let srv = &mut self.servers[ev.server];
        if ev.version != srv.version {
            return; // superseded by a later reschedule
        }
        srv.advance(now);
        // Finish every job whose virtual deadline has come.
        let mut i = 0;
        while i < srv.in_service.len() {
            if srv.in_service[i].0 <= srv.v + 1e-12 {
                let (_, rid) = srv.in_service.swap_remove(i);
                let took = now - self.arrived_at[rid as usize];
                self.times.push(took);
                srv.served += 1;
                let (p, at) = self.owner[rid as usize];
                self.view[p][at] -= 1;
                if feedback {
                    self.heard[p][ev.server] = (u32::MAX, self.view[p][ev.server]); // count filled in below
                }
                if let Some(l) = self.latencies.as_mut() {
                    l.record(ev.server, self.rif_at[rid as usize], took);
                }
            } else {
                i += 1;
            }
        }
        while srv.in_service.len() < srv.workers as usize {
            let Some(job) = srv.queue.pop_front() else { break };
            srv.in_service.push((srv.v + job.demand, job.id));
        }
        let now_in = srv.inflight();
        if feedback {
            for h in self.heard.iter_mut() {
                if h[ev.server].0 == u32::MAX {
                    h[ev.server].0 = now_in;
                }
            }
        }
        if let Some(t) = self.tier.as_mut() {
            t.changed(ev.server, now, now_in);
        }
        reschedule(&mut self.servers[ev.server], ev.server, &mut self.heap);
        self.refill(ev.server, now, self.cfg.fleet_share.tries);
    }
}

/// Run `cfg` drawing every random number (arrivals, demands, picks) from `rng`
/// (the agents' sample draws come from a stream of their own, seeded by
/// `cfg.seed`, so the size of the sample changes no other draw).
pub fn run_with<R: Rng + ?Sized>(cfg: &Config, rng: &mut R) -> Report {
    let n = cfg.fleet.len();
    assert!(n >= 2 && cfg.proxies >= 1 && cfg.rate > 0.0 && cfg.mean_s > 0.0);
    assert!(cfg.refresh_s >= 0.0 && cfg.refresh_s.is_finite() && cfg.hop_s >= 0.0 && cfg.hop_s.is_finite());
    assert!(cfg.fleet.iter().all(|s| s.cores > 0.0 && s.workers >= 1));
    let policy = match cfg.dispatch {
        Dispatch::Hunt(_, p) => p,
        _ => Policy::Always,
    };
    let servers: Vec<Server> = cfg
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
            frozen: false,
        })
        .collect();
    let prequal = matches!(cfg.dispatch, Dispatch::Prequal(_));
    let tier = (matches!(cfg.dispatch, Dispatch::Forward(..)) && cfg.fleet_share.steal.is_none()).then(|| {
        let spec = TierSpec {
            delay_s: cfg.fleet_delay_s,
            hop_s: cfg.hop_s,
            view_s: cfg.fleet_view_s,
            sample: cfg.fleet_sample,
            resample_s: cfg.fleet_resample_s,
            keep: cfg.fleet_sample_keep,
            probe: cfg.fleet_probe,
            seed: cfg.seed,
            share: cfg.fleet_share,
        };
        Tier::new(spec, n)
    });
    let mut sim = Sim {
        cfg,
        servers,
        view: vec![vec![0u32; n]; cfg.proxies],
        heard: vec![vec![(0u32, 0u32); n]; cfg.proxies],
        tier,
        pools: if prequal { (0..cfg.proxies).map(|_| Pool::default()).collect() } else { Vec::new() },
        latencies: prequal.then(|| Latencies::new(n)),
        offers: 0,
        accepted: 0,
        msgs: Messages::default(),
        owner: Vec::with_capacity(cfg.requests as usize),
        arrived_at: Vec::with_capacity(cfg.requests as usize),
        rif_at: if prequal { vec![0; cfg.requests as usize] } else { Vec::new() },
        times: Vec::with_capacity(cfg.requests as usize),
        heap: BinaryHeap::new(),
        transit: BinaryHeap::new(),
        rejected: 0,
        held: vec![VecDeque::new(); n],
        stealing: vec![0; n],
        steal_rng: SmallRng::seed_from_u64(cfg.seed ^ 0x7374_6561_6c73),
    };
    // Stale views: proxy p refreshes its snapshot at (j + p/proxies) * refresh_s.
    let stale = cfg.refresh_s > 0.0;
    let mut snap = if stale { sim.view.clone() } else { Vec::new() };
    let refresh_step = cfg.refresh_s / cfg.proxies as f64;
    let mut refreshes = 0u64;
    let mut next_refresh = if stale { 0.0 } else { f64::INFINITY };
    let mut own = vec![0u32; n];
    let mut samples = Vec::new();
    let mut next_sample = if cfg.sample_every_s > 0.0 { 0.0 } else { f64::INFINITY };
    let mut fair_sum = (0.0, 0u64);
    let mut next_arrival = exp(rng, 1.0 / cfg.rate);
    let mut id = 0u64;
    let mut last_arrival = 0.0;
    // The freeze's two instants, each taken once (INFINITY when done or none).
    if let Some(f) = cfg.freeze {
        assert!(f.server < n && f.to_s > f.from_s);
    }
    let (mut freeze_at, mut thaw_at) = cfg.freeze.map_or((f64::INFINITY, f64::INFINITY), |f| (f.from_s, f.to_s));

    loop {
        let next_done = sim.heap.peek().map_or(f64::INFINITY, |e: &Event| e.t);
        let next_transit = sim.transit.peek().map_or(f64::INFINITY, |t| t.t);
        let next_freeze = freeze_at.min(thaw_at);
        // A frozen server's jobs wait for the thaw even after the last arrival.
        let work = next_arrival.min(next_done).min(next_transit).min(if sim.servers.iter().any(|s| s.frozen) { thaw_at } else { f64::INFINITY });
        if next_freeze <= work && next_freeze.is_finite() {
            let f = cfg.freeze.expect("an instant is set only with a freeze");
            let srv = &mut sim.servers[f.server];
            srv.advance(next_freeze);
            srv.frozen = freeze_at <= thaw_at;
            if srv.frozen {
                freeze_at = f64::INFINITY;
            } else {
                thaw_at = f64::INFINITY;
            }
            // Frozen: its pending completion is void; thawed: due again.
            reschedule(srv, f.server, &mut sim.heap);
            continue;
        }
        if !work.is_finite() {
            break; // every request served: re-draws alone go on forever
        }
        // Re-draws while requests arrive: the messages counted are what the
        // arrivals cost, not what an idle fleet sends while the last jobs drain.
        let next_redraw = if next_arrival.is_finite() { sim.tier.as_ref().map_or(f64::INFINITY, Tier::next_redraw) } else { f64::INFINITY };
        let now = work.min(next_redraw);
        while next_sample <= now {
            let busy: Vec<u32> = sim.servers.iter().map(|s| s.in_service.len() as u32).collect();
            if let Some(f) = jain(&busy.iter().map(|&b| f64::from(b)).collect::<Vec<_>>()) {
                fair_sum = (fair_sum.0 + f, fair_sum.1 + 1);
            }
            samples.push((next_sample, busy));
            next_sample += cfg.sample_every_s;
        }
        while next_refresh <= now {
            let p = (refreshes % cfg.proxies as u64) as usize;
            snap[p].copy_from_slice(&sim.view[p]);
            refreshes += 1;
            next_refresh = refreshes as f64 * refresh_step;
        }
        if next_redraw < work {
            sim.tier.as_mut().expect("a re-draw is due").redraw(now);
        } else if next_transit < next_arrival.min(next_done) {
            let mut t = sim.transit.pop().expect("peeked");
            match t.kind {
                Kind::Steal { thief, tries } => {
                    let kind = match sim.held[t.server].pop_front() {
                        Some((id, demand)) => {
                            sim.msgs.forwards += 1;
                            let at = now + cfg.hop_s;
                            sim.transit.push(Transit { t: at, server: thief, id, demand, asked: None, kind: Kind::Stolen });
                            continue;
                        }
                        None => Kind::Nothing { tries },
                    };
                    sim.msgs.datagrams.steals += 1;
                    let at = now + cfg.fleet_delay_s;
                    sim.transit.push(Transit { t: at, server: thief, id: 0, demand: 0.0, asked: None, kind });
                    continue;
                }
                Kind::Nothing { tries } => {
                    sim.stealing[t.server] -= 1;
                    if tries > 0 {
                        sim.refill(t.server, now, tries - 1);
                    }
                    continue;
                }
                Kind::Stolen => sim.stealing[t.server] -= 1,
                Kind::Job => {}
            }
            if let Some((peers, seen)) = t.asked.take() {
                let (to, hop) = sim.decide_pulled(t.server, &peers, seen, now, rng);
                if hop && cfg.hop_s > 0.0 {
                    sim.transit.push(Transit { t: now + cfg.hop_s, server: to, ..t });
                    continue;
                }
                t.server = to;
            }
            // A forward (the tier's second hop, from the agent its front offered it to).
            let from = sim.owner[t.id as usize].1;
            let forward = sim.tier.is_some() && from != t.server;
            if forward {
                sim.tier.as_mut().expect("a tier").landing(from);
            }
            let taken = sim.admit(t.server, t.id, t.demand, now);
            if forward {
                let count = sim.servers[t.server].inflight();
                sim.tier.as_mut().expect("a tier").landed(from, t.server, now, count);
            }
            if !taken {
                let (p, at) = sim.owner[t.id as usize];
                sim.view[p][at] -= 1;
                sim.rejected += 1;
            }
        } else if next_arrival <= next_done {
            // An arrival: its proxy chooses a server.
            let proxy = match cfg.assign {
                Assign::Turn => (id as usize) % cfg.proxies,
                Assign::Random => rng.gen_range(0..cfg.proxies),
            };
            if cfg.feedback {
                for (k, e) in own.iter_mut().enumerate() {
                    let (t, at) = sim.heard[proxy][k];
                    *e = (i64::from(t) + i64::from(sim.view[proxy][k]) - i64::from(at)).max(0) as u32;
                }
            } else {
                own.copy_from_slice(if stale { &snap[proxy] } else { &sim.view[proxy] });
            }
            let c = sim.choose(proxy, &own, now, rng);
            let demand = cfg.demand.draw(rng, cfg.mean_s);
            sim.owner.push((proxy, c.counted));
            sim.arrived_at.push(now);
            if c.asked.is_some() {
                // Held by its agent until the answers are back, a round trip.
                sim.view[proxy][c.counted] += 1;
                sim.transit.push(Transit { t: now + 2.0 * cfg.fleet_delay_s, server: c.server, id, demand, asked: c.asked, kind: Kind::Job });
            } else if c.second_hop && cfg.hop_s > 0.0 {
                // Its front counts it now; the server, when it gets there.
                sim.view[proxy][c.counted] += 1;
                sim.transit.push(Transit { t: now + cfg.hop_s, server: c.server, id, demand, asked: None, kind: Kind::Job });
            } else if sim.admit(c.server, id, demand, now) {
                sim.view[proxy][c.counted] += 1;
            } else {
                sim.rejected += 1;
            }
            id += 1;
            last_arrival = now;
            next_arrival = if id < cfg.requests { now + exp(rng, 1.0 / cfg.rate) } else { f64::INFINITY };
        } else {
            let ev = sim.heap.pop().expect("peeked");
            sim.complete(ev, now);
        }
    }
    if let Some(t) = sim.tier.as_mut() {
        t.finish(last_arrival);
        sim.msgs.datagrams = t.sent.clone();
    }

    let Sim { mut times, servers, offers, accepted, rejected, msgs, .. } = sim;
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
        demand: cfg.demand.to_string(),
        messages: msgs.close(cfg.requests),
    }
}
