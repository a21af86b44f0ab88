//! Where one arrival goes, by each dispatcher: the front's choice, the
//! agents' answer, and the messages it took.

use super::engine::Sim;
use super::prequal::Entry;
use super::{pick, Dispatch, Rule};
use huntlb_policy::forward::{kept_by_seen, route_with, Route};
use huntlb_policy::{Load, Try};
use rand::{seq::index, Rng};

/// Where a request goes.
pub(super) struct Choice {
    /// The server that serves it.
    pub server: usize,
    /// The server its front counts it at (its offer's, when forwarded).
    pub counted: usize,
    /// It takes a second hop (a forward, or hunting's final) before it gets there.
    pub second_hop: bool,
    /// Pull on demand: its agent (`server`) asked these peers for their counts
    /// and decides when they answer; the front's count there (`seen`).
    pub asked: Option<(Vec<usize>, u32)>,
}

impl Sim<'_> {
    /// Where proxy `proxy`'s arrival at `now` goes; `own` is what the proxy
    /// sees (its counts, a snapshot of them, or its feedback estimate).
    pub(super) fn choose<R: Rng + ?Sized>(&mut self, proxy: usize, own: &[u32], now: f64, rng: &mut R) -> Choice {
        let direct = |s: usize| Choice { server: s, counted: s, second_hop: false, asked: None };
        match self.cfg.dispatch {
            Dispatch::Local(rule) => direct(pick(rule, own, None, rng)),
            Dispatch::Hunt(rule, p) => {
                let first = pick(rule, own, None, rng);
                self.offers += 1;
                let srv = &mut self.servers[first];
                // The front sends its own count with the offer (hunt-seen), as
                // the HAProxy front does; a policy without `seen_margin` ignores it.
                let load = Load { busy: srv.inflight(), workers: srv.workers, seen: Some(own[first]) };
                let out = srv.policy.unwrap_or(p).decide(srv.state, Try::Offer, load);
                srv.state = out.state;
                if out.decision.is_accept() {
                    self.accepted += 1;
                    direct(first)
                } else {
                    self.msgs.refusals += 1;
                    if self.cfg.feedback {
                        self.heard[proxy][first] = (load.busy, self.view[proxy][first]);
                    }
                    let s = pick(rule, own, Some(first), rng);
                    Choice { server: s, counted: s, second_hop: true, asked: None }
                }
            }
            Dispatch::Jsq => {
                // The ideal knows the truth, a frozen server's too: it sends it nothing.
                let true_load: Vec<u32> = self.servers.iter().map(|s| if s.frozen { u32::MAX } else { s.inflight() }).collect();
                direct(pick(Rule::Least { k: 1 }, &true_load, None, rng))
            }
            Dispatch::Prequal(spec) => {
                let n = self.servers.len();
                let s = self.pools[proxy].select(&spec, now).unwrap_or_else(|| rng.gen_range(0..n));
                // This query's probes: distinct random servers, read now,
                // their answers in the pool a hop later.
                let lat = self.latencies.as_ref().expect("prequal keeps latencies");
                for target in index::sample(rng, n, spec.probes.min(n)) {
                    let rif = self.servers[target].inflight();
                    let e = Entry { server: target, rif, latency: lat.estimate(target, rif), at: now, uses: 0 };
                    self.pools[proxy].answer(now + self.cfg.hop_s, e);
                }
                self.msgs.probes += 2 * spec.probes.min(n) as u64;
                direct(s)
            }
            Dispatch::Forward(rule, _) if self.cfg.fleet_share.steal.is_some() => {
                // Stealing: the agent keeps every offer (runs it or holds it).
                self.offers += 1;
                self.accepted += 1;
                direct(pick(rule, own, None, rng))
            }
            Dispatch::Forward(rule, f) => {
                let first = pick(rule, own, None, rng);
                self.offers += 1;
                let busy = self.servers[first].inflight();
                let seen = Some(own[first]);
                let tier = self.tier.as_mut().expect("forward keeps a tier");
                // An offer the front's count keeps needs no peers' counts; any
                // other decides by them, and from then on its agent wants them.
                let by_seen = kept_by_seen(f, busy, seen);
                if !by_seen && tier.probes() {
                    let peers = tier.ask(first);
                    return Choice { server: first, counted: first, second_hop: false, asked: Some((peers, own[first])) };
                }
                if !by_seen {
                    tier.consult(first, now);
                }
                let servers = &self.servers;
                let (peers, counts) = tier.view(first, now, |s| servers[s].inflight());
                // The decision is the agent's own, `huntlb_policy::forward`
                // (ties drawn from this run's stream).
                match route_with(f, busy, seen, &counts, |ties| rng.gen_range(0..ties)) {
                    Route::Keep => {
                        self.accepted += 1;
                        direct(first)
                    }
                    Route::Forward(j) => {
                        let j = spread(self.cfg.fleet_share, &counts, busy, j, rng);
                        let to = peers[j];
                        tier.forwarded(first, to, now);
                        self.msgs.forwards += 1;
                        Choice { server: to, counted: first, second_hop: true, asked: None }
                    }
                }
            }
        }
    }

    /// Pull on demand: agent `a` has its `peers`' answers at `now` and decides
    /// the offer it held: (where it goes, whether it takes a hop to get there).
    pub(super) fn decide_pulled<R: Rng + ?Sized>(&mut self, a: usize, peers: &[usize], seen: u32, now: f64, rng: &mut R) -> (usize, bool) {
        let Dispatch::Forward(_, f) = self.cfg.dispatch else { unreachable!("only the tier asks") };
        let busy = self.servers[a].inflight();
        let tier = self.tier.as_mut().expect("forward keeps a tier");
        let (peers, counts) = tier.answers(a, peers, now);
        match route_with(f, busy, Some(seen), &counts, |ties| rng.gen_range(0..ties)) {
            Route::Keep => {
                self.accepted += 1;
                (a, false)
            }
            Route::Forward(j) => {
                let j = spread(self.cfg.fleet_share, &counts, busy, j, rng);
                tier.forwarded(a, peers[j], now);
                self.msgs.forwards += 1;
                (peers[j], true)
            }
        }
    }
}

/// `spread=J` ([`super::share::spread_pick`]) over the rule's forward to `j`;
/// off (J 0 or 1), the rule's choice and no draw.
fn spread<R: Rng + ?Sized>(share: super::Share, counts: &[u32], busy: u32, j: usize, rng: &mut R) -> usize {
    if share.spread <= 1 {
        return j;
    }
    super::share::spread_pick(counts, busy, share.spread, rng).unwrap_or(j)
}
