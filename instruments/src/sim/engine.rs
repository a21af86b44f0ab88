//! The event loop: arrivals, dispatch, completions.

use super::server::{reschedule, with_c_min, Event, Job, Server};
use super::{jain, pick, Assign, Config, Dispatch, Report, Rule};
use huntlb_policy::{Load, Policy, Try};
use rand::Rng;
use std::collections::{BinaryHeap, VecDeque};

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
