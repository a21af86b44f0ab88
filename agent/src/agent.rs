//! The agent beside one app: what it holds (its config, policy, load, the
//! clients to its app and peers, its fleet) and what it says of itself (its
//! load, its gates, whether it takes forwards, its gauges). A request's way
//! through it is `dispatch`'s.

use crate::config::{Config, LoadSource};
use crate::fleet::Fleet;
use crate::listen::Door;
use crate::load::{Inflight, PerFront, Progress, Relaying, Scoreboard};
use crate::metrics::{Gauges, Metrics};
use crate::upstream::Clients;
use huntlb_policy::{Gates, Policy, SharedPolicy};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub struct Agent {
    pub cfg: Config,
    pub(crate) policy: SharedPolicy,
    pub(crate) inflight: Arc<Inflight>,
    pub(crate) per_front: Arc<PerFront>,
    pub scoreboard: Option<Arc<Scoreboard>>,
    /// With `llm_metrics_url`: the server's KV-cache use, as last read.
    pub kv: Option<Arc<crate::load::kv::KvRead>>,
    pub metrics: Metrics,
    /// To the app, and to peers (`Clients`).
    pub(crate) clients: Clients,
    /// The forwarding tier (`fleet_listen`).
    pub fleet: Option<Arc<Fleet>>,
    pub(crate) relaying: Arc<Relaying>,
    pub(crate) app_authority: http::uri::Authority,
    pub(crate) app_up: AtomicBool,
    /// No sign of life from the app for `app_stall` while requests waited on it
    /// (a frozen process still completes TCP handshakes). Cleared by any answer.
    pub(crate) stalled: AtomicBool,
    pub(crate) progress: Arc<Progress>,
    pub(crate) draining: AtomicBool,
    /// Room on `listen`: its connection slots (`max_connections`) and its
    /// accept queue.
    pub(crate) door: Door,
}

impl Agent {
    pub fn new(cfg: Config, fleet: Option<Arc<Fleet>>) -> Arc<Self> {
        let scoreboard = matches!(cfg.load, LoadSource::Apache { .. } | LoadSource::Scoreboard { .. }).then(|| Arc::new(Scoreboard::default()));
        Arc::new(Agent {
            policy: SharedPolicy::new(cfg.policy),
            inflight: Arc::new(Inflight::default()),
            per_front: Arc::new(PerFront::default()),
            scoreboard,
            kv: cfg.llm_kv.as_ref().map(|_| Arc::default()),
            metrics: Metrics::default(),
            clients: Clients::new(&cfg),
            fleet,
            relaying: Arc::new(Relaying::default()),
            app_authority: cfg.app.to_string().parse().expect("a socket address is an authority"),
            app_up: AtomicBool::new(true),
            stalled: AtomicBool::new(false),
            progress: Arc::new(Progress::default()),
            draining: AtomicBool::new(false),
            door: Door::new(cfg.max_connections),
            cfg,
        })
    }

    /// The load `b` the policy sees now.
    pub(crate) fn busy(&self) -> u32 {
        match (&self.scoreboard, &self.cfg.load) {
            (Some(board), _) => board.busy.load(Ordering::Acquire),
            (None, LoadSource::Llm(w)) => {
                let b = w.load(self.inflight.get(), self.inflight.prefill_tokens());
                match (&self.cfg.llm_kv, &self.kv) {
                    (Some(k), Some(read)) => k.bound.load(b, w.workers, read.read()),
                    _ => b,
                }
            }
            (None, _) => self.inflight.get(),
        }
    }

    /// With `load = "llm"`: count this request's prompt (its Content-Length,
    /// estimated in tokens and capped) until the guard drops, at its first
    /// response byte. A forged length weighs at most the server's seats.
    /// `tell`: peers hear of it now; else with the next change (the request's
    /// seat, counted right after: one report for both).
    pub(crate) fn prefill(&self, headers: &http::HeaderMap, tell: bool) -> Option<crate::load::PrefillGuard> {
        let LoadSource::Llm(w) = &self.cfg.load else { return None };
        // hyper refuses a request with two different or unparsable lengths
        // before it gets here; one left unreadable counts as none
        let len = headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        self.inflight.prefill(w.prompt_tokens(len), tell)
    }

    pub fn inflight(&self) -> u32 {
        self.inflight.get()
    }

    /// Tries being relayed to peers: a drain waits for them too.
    pub fn relaying(&self) -> u32 {
        self.relaying.get()
    }

    /// The load the policy sees, as the forwarding tier reports it to peers.
    pub fn busy_now(&self) -> u32 {
        self.busy()
    }

    /// Called on every change of the in-flight count, and on a drain.
    pub fn on_inflight_change(&self, f: Box<dyn Fn() + Send + Sync>) {
        self.inflight.on_change(f);
    }

    /// Whether peers may forward here: not draining, app up and answering,
    /// and connections to spare (a forward needs one).
    pub fn takes_forwards(&self) -> bool {
        self.gates() == Gates::OPEN && !self.stalled.load(Ordering::Acquire) && self.takes_connections()
    }

    /// Room for a new connection on `listen`: slots to spare (1/64 of
    /// `max_connections`, at least one: idle connections held by anyone, a
    /// slowloris, fill them), and an accept queue under half full (the
    /// kernel's, which fills once the slots are gone).
    pub fn takes_connections(&self) -> bool {
        self.door.takes_connections(self.progress.now_us())
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
        // Peers hear at once that this agent takes no more forwards.
        self.inflight.changed();
    }

    pub fn gauges(&self) -> Gauges {
        Gauges {
            inflight: u64::from(self.inflight.get()),
            busy: u64::from(self.busy()),
            c: match self.policy.policy() {
                Policy::Always => None,
                _ => Some(self.policy.state().c),
            },
            workers: self.cfg.workers,
            app_up: self.app_up.load(Ordering::Acquire),
            stalled: self.stalled.load(Ordering::Acquire),
            draining: self.draining.load(Ordering::Acquire),
            connections: self.door.held() as u64,
            connections_max: self.cfg.max_connections as u64,
            llm_prefill_seats: match &self.cfg.load {
                LoadSource::Llm(w) => Some(u64::from(w.prefill_seats(self.inflight.prefill_tokens()))),
                _ => None,
            },
            llm_kv: match (&self.cfg.llm_kv, &self.kv) {
                (Some(k), Some(read)) => {
                    let last = read.read();
                    Some(crate::metrics::KvGauges {
                        usage: last.map_or(0, |(v, _)| v),
                        full: k.bound.full(last),
                        polls: read.polls.each_ref().map(|a| a.load(Ordering::Relaxed)),
                    })
                }
                _ => None,
            },
            apache_polls: self.scoreboard.as_ref().map(|b| (b.polls.load(Ordering::Relaxed), b.errors.load(Ordering::Relaxed))),
            fleet: self.fleet.as_ref().map(|f| f.gauges()),
            prefix: self.fleet.as_ref().is_some_and(|f| f.prefix_bytes().is_some()),
        }
    }

    pub(crate) fn gates(&self) -> Gates {
        Gates {
            draining: self.draining.load(Ordering::Acquire),
            app_down: !self.app_up.load(Ordering::Acquire),
            at_capacity: self.inflight.get() >= self.cfg.max_inflight,
        }
    }
}
