//! Prequal (Wydrowski et al., "Load is not what you should balance:
//! Introducing Prequal", NSDI 2024), the strongest probe-based balancer a
//! front could run instead of counting its own requests.
//!
//! ```text
//!  query ──► front: pool of probe answers (server, RIF, latency, age)
//!              │  hot: RIF above the pool's q-quantile; pick the cold entry with the
//!              │  lowest latency (all hot: the lowest RIF); empty pool: random
//!              └──► r probes to random servers ──(hop)──► answers join the pool
//! ```
//!
//! Each front keeps at most `pool` answers; every query sends `probes` probes
//! to distinct random servers, whose answers (the server's requests in flight
//! and its latency estimate then) join the pool after the hop. An answer leaves
//! the pool when it is older than `age`, when it has been used `reuse` times,
//! or, the pool full, when a newer one comes (the oldest goes); a newer answer
//! from the same server replaces the older. A used answer's RIF goes up by one
//! (the request just sent there).
//!
//! The server's latency estimate is the paper's: recent response times of
//! requests that arrived at about the RIF it has now (here an EWMA per RIF at
//! arrival, the nearest RIF below with data when its own has none).

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

/// `prequal:pool=16,probes=3,q=0.84,reuse=1,age=50` (age in ms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrequalSpec {
    pub pool: usize,
    pub probes: usize,
    pub q: f64,
    pub reuse: u32,
    pub age_s: f64,
}

impl Default for PrequalSpec {
    fn default() -> Self {
        PrequalSpec { pool: 16, probes: 3, q: 0.84, reuse: 1, age_s: 0.05 }
    }
}

impl FromStr for PrequalSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut p = PrequalSpec::default();
        for kv in s.split(',').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| format!("`{kv}`: expected key=value"))?;
            let whole = |min: usize| v.parse::<usize>().ok().filter(|&x| x >= min).ok_or_else(|| format!("{k}: a whole number from {min}, not `{v}`"));
            match k {
                "pool" => p.pool = whole(1)?,
                "probes" => p.probes = whole(0)?,
                "reuse" => p.reuse = whole(1)? as u32,
                "q" => p.q = v.parse::<f64>().ok().filter(|q| (0.0..=1.0).contains(q)).ok_or_else(|| format!("q: a quantile in 0..1, not `{v}`"))?,
                "age" => p.age_s = v.parse::<f64>().ok().filter(|a| *a > 0.0 && a.is_finite()).ok_or_else(|| format!("age: milliseconds above 0, not `{v}`"))? / 1e3,
                _ => return Err(format!("unknown key `{k}` (expected pool, probes, q, reuse, age)")),
            }
        }
        Ok(p)
    }
}

impl fmt::Display for PrequalSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pool={},probes={},q={},reuse={},age={}", self.pool, self.probes, self.q, self.reuse, self.age_s * 1e3)
    }
}

/// One probe's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Entry {
    pub server: usize,
    pub rif: u32,
    pub latency: f64,
    /// When the server answered.
    pub at: f64,
    pub uses: u32,
}

/// One front's pool, and the answers still on their way.
#[derive(Debug, Default)]
pub struct Pool {
    entries: Vec<Entry>,
    pending: VecDeque<(f64, Entry)>,
}

impl Pool {
    /// A probe's answer, in the pool from `lands` on.
    pub fn answer(&mut self, lands: f64, e: Entry) {
        self.pending.push_back((lands, e));
    }

    /// The server for a query at `now` by the hot-cold rule, or None (pool
    /// empty: the caller draws at random).
    pub fn select(&mut self, spec: &PrequalSpec, now: f64) -> Option<usize> {
        while self.pending.front().is_some_and(|&(t, _)| t <= now) {
            let (_, e) = self.pending.pop_front().expect("peeked");
            // A newer answer from the same server replaces the older.
            if let Some(i) = self.entries.iter().position(|o| o.server == e.server) {
                self.entries.swap_remove(i);
            }
            if self.entries.len() >= spec.pool {
                let oldest = (0..self.entries.len()).min_by(|&i, &j| self.entries[i].at.total_cmp(&self.entries[j].at)).expect("full");
                self.entries.swap_remove(oldest);
            }
            self.entries.push(e);
        }
        self.entries.retain(|e| now - e.at <= spec.age_s);
        let i = hot_cold(&self.entries, spec.q)?;
        let e = &mut self.entries[i];
        let server = e.server;
        e.uses += 1;
        e.rif += 1;
        if e.uses >= spec.reuse {
            self.entries.swap_remove(i);
        }
        Some(server)
    }

    /// Answers in the pool (landed, not yet used up or aged out).
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.entries.len()
    }
}

/// Prequal's hot-cold lexicographic rule: an entry is hot if its RIF is above
/// the pool's `q`-quantile of RIF; the cold entry with the lowest latency
/// wins (ties: lower RIF, then the first), or, all hot, the lowest RIF.
pub fn hot_cold(entries: &[Entry], q: f64) -> Option<usize> {
    if entries.is_empty() {
        return None;
    }
    let mut rifs: Vec<u32> = entries.iter().map(|e| e.rif).collect();
    rifs.sort_unstable();
    let at = ((q * rifs.len() as f64).ceil() as usize).clamp(1, rifs.len()) - 1;
    let threshold = rifs[at];
    let cold = (0..entries.len()).filter(|&i| entries[i].rif <= threshold);
    let best = cold.min_by(|&i, &j| entries[i].latency.total_cmp(&entries[j].latency).then(entries[i].rif.cmp(&entries[j].rif)));
    best.or_else(|| (0..entries.len()).min_by_key(|&i| entries[i].rif))
}

/// Each server's latency estimate: an EWMA of response times per RIF at arrival.
///
/// Why per RIF: one EWMA over all of a server's requests herds every front onto
/// the server that was fast a while ago (tried: 1240 ms mean at 1 front, 12
/// servers, rho 0.88, against 50 ms per RIF); the paper's estimate is
/// conditioned on the load the next request would find.
pub struct Latencies {
    by_rif: Vec<Vec<Option<f64>>>,
}

/// Weight of the newest response time in the EWMA.
const ALPHA: f64 = 0.1;
/// RIFs at and above this share one estimate.
const RIF_CAP: usize = 64;

impl Latencies {
    pub fn new(n: usize) -> Latencies {
        Latencies { by_rif: vec![vec![None; RIF_CAP + 1]; n] }
    }

    /// A request that arrived at `server` with `rif` in flight (itself
    /// included) took `latency` seconds.
    pub fn record(&mut self, server: usize, rif: u32, latency: f64) {
        let e = &mut self.by_rif[server][(rif as usize).min(RIF_CAP)];
        *e = Some(e.map_or(latency, |old| old + ALPHA * (latency - old)));
    }

    /// What `server` answers a probe with, holding `rif`: its estimate for a
    /// request arriving now (at `rif + 1`), or the nearest RIF below with
    /// data, or above; 0 before any request completed.
    pub fn estimate(&self, server: usize, rif: u32) -> f64 {
        let row = &self.by_rif[server];
        let at = (rif as usize + 1).min(RIF_CAP);
        row[..=at].iter().rev().chain(row[at + 1..].iter()).find_map(|e| *e).unwrap_or(0.0)
    }
}
