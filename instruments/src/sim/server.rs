//! One server of the model: workers, a FIFO backlog and processor sharing of
//! its cores, on a virtual clock.

use huntlb_policy::{Policy, State};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

pub(super) struct Job {
    pub(super) id: u64,
    pub(super) demand: f64,
}

/// One server: processor sharing over `in_service` on a virtual clock `v` that
/// advances at `min(1, cores/b)` per second.
pub(super) struct Server {
    pub(super) cores: f64,
    pub(super) workers: u32,
    pub(super) v: f64,
    pub(super) last: f64,
    /// (virtual finish time, request id)
    pub(super) in_service: Vec<(f64, u64)>,
    pub(super) queue: VecDeque<Job>,
    pub(super) state: State,
    /// This server's own policy when its spec sets `c_min`.
    pub(super) policy: Option<Policy>,
    pub(super) version: u64,
    pub(super) served: u64,
    /// Stopped (see `Config::freeze`): no progress, no completion.
    pub(super) frozen: bool,
}

impl Server {
    pub(super) fn inflight(&self) -> u32 {
        (self.in_service.len() + self.queue.len()) as u32
    }

    fn rate(&self) -> f64 {
        let b = self.in_service.len();
        if self.frozen {
            0.0
        } else if b == 0 {
            1.0
        } else {
            (self.cores / b as f64).min(1.0)
        }
    }

    pub(super) fn advance(&mut self, now: f64) {
        self.v += (now - self.last) * self.rate();
        self.last = now;
    }

    /// Real time of the next completion, if any job is in service.
    pub(super) fn next_done(&self) -> Option<f64> {
        let min_v = self.in_service.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
        (min_v.is_finite() && !self.frozen).then(|| self.last + ((min_v - self.v).max(0.0)) / self.rate())
    }
}

#[derive(PartialEq)]
pub(super) struct Event {
    pub(super) t: f64,
    pub(super) server: usize,
    pub(super) version: u64,
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
pub(super) fn with_c_min(policy: Policy, c_min: u32) -> Policy {
    match policy {
        Policy::Dynamic(d) => Policy::Dynamic(huntlb_policy::DynamicParams { c_min, ..d }),
        other => other,
    }
}

pub(super) fn reschedule(srv: &mut Server, idx: usize, heap: &mut BinaryHeap<Event>) {
    srv.version += 1;
    if let Some(t) = srv.next_done() {
        heap.push(Event { t, server: idx, version: srv.version });
    }
}
