//! Prefix affinity (`llm_prefix_bytes`): an offer whose prompt starts like
//! others goes to one home for that start, where the model server's prefix
//! cache holds it, unless the offer would wait there (all its seats taken)
//! longer than at the least loaded server this agent knows, by more than a
//! bound: the issue's "kept unless this server's backlog exceeds the coldest
//! candidate's by a bound".
//!
//! ```text
//!  offer ──► agent: body (Content-Length ≤ 1 MiB) ──► prompt ──► h = hash(first llm_prefix_bytes bytes)
//!               home = the member of highest weight(h, member)   (rendezvous hashing: every agent over
//!                                                                  the same members names the same home)
//!               home's count known, and the wait it would meet there ≤ the wait at the least count
//!               known + llm_prefix_bound (wait(c) = c + 1 - seats, at least 0) ──► the home (kept, or
//!                                                                  forwarded there as a final)
//!               else ──────────────────────────────────────────► the ordinary rule (forward::route)
//! ```
//!
//! No message says where a prefix lives: every agent ranks the same member
//! list with the same hash, so gateways that never talk send a prefix to the
//! same server. The hash is fixed (FNV-1a, then splitmix64's finalizer), not
//! keyed: agents of one fleet must agree without sharing anything more, and a
//! key would not stop a client from steering, since it can find a prefix's home
//! by asking (`hunt-served-by`); what bounds a steering client is the bound.
//! Integers only, so every host computes the same home.

/// The most body the agent reads to find a prompt (1 MiB): a larger one, or
/// one of no declared length, gets no affinity and goes on as it came.
pub const MAX_BODY: u64 = 1 << 20;

/// The most of a prompt hashed (`llm_prefix_bytes`' ceiling).
pub const MAX_PREFIX: usize = 1 << 16;

/// The knobs, validated by the host's config (`llm_prefix_bytes`, `llm_prefix_bound`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Affinity {
    /// The prompt's first this many bytes name its home (1 to [`MAX_PREFIX`]).
    pub bytes: usize,
    /// The home keeps a prompt while the requests it would wait behind there
    /// are at most those it would wait behind at the least loaded plus this.
    pub bound: u32,
    /// A server's seats (the agent's `workers`: its server's `max_num_seqs`;
    /// a fleet of one model on one kind of server has the same everywhere):
    /// a count below it leaves a seat free, and an offer there waits for none.
    /// 0: every count is a wait (the bound is then over counts).
    pub seats: u32,
}

/// `llm_prefix_bound`'s default: 0, a home takes its prefixes while it has a
/// free seat (or, all seats taken everywhere, no longer a queue than the
/// least's). Measured on the bench's shared-prefix workload (docs/llm.md § 7):
/// a bound over counts of 2 seats above the least doubled the hits but queued
/// one request in seven behind full seats, TTFT p90 2.5-5x least-request's;
/// over counts at 0 it took a home only where it was the least (a third of
/// the offers) and hit little more than least-request.
pub const DEFAULT_BOUND: u32 = 0;

/// FNV-1a, 64 bits: a fixed hash, the same on every host and every build.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// splitmix64's finalizer: a bijection that spreads every input bit over the output.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A prompt's prefix hash: FNV-1a of its first `bytes` bytes (all of it when shorter).
pub fn prefix_hash(prompt: &[u8], bytes: usize) -> u64 {
    fnv1a(&prompt[..prompt.len().min(bytes)])
}

/// A member's id in the ranking: FNV-1a of its address as the tier writes it
/// (`ip:port`, `[v6]:port`: a member's `fleet_listen` as `fleet_peers` names it).
pub fn member_id(addr: &str) -> u64 {
    fnv1a(addr.as_bytes())
}

/// A member's weight for a prefix (rendezvous hashing): the home is the member of the highest.
pub fn weight(prefix: u64, member: u64) -> u64 {
    mix(mix(prefix) ^ member)
}

/// The home of a prefix among members (their ids): the index of the highest
/// weight, ties (equal weights: the same id twice) to the first. None: no members.
pub fn rank(prefix: u64, ids: &[u64]) -> Option<usize> {
    let mut best: Option<(u64, usize)> = None;
    for (i, &id) in ids.iter().enumerate() {
        let w = weight(prefix, id);
        if best.is_none_or(|(b, _)| w > b) {
            best = Some((w, i));
        }
    }
    best.map(|(_, i)| i)
}

/// The requests an offer would wait behind at a server of `count` with
/// `seats` seats: none while a seat is free.
pub fn waiting(count: u32, seats: u32) -> u32 {
    count.saturating_add(1).saturating_sub(seats)
}

/// Decide one offer with a prefix. `ids`: every member this agent knows, its
/// own among them; `least`: the least count this agent knows (its own and its
/// view's); `count(i)`: member i's count, if this agent knows it (its own;
/// a peer's heard, ready, within `dead_after`), else None.
///
/// Some(home): the offer goes to the home (kept if it is this agent). None:
/// the home's count is unknown, or the offer would wait there behind more than
/// `bound` requests beyond what it would wait behind at the least ([`waiting`]),
/// and the ordinary rule decides.
pub fn home(prefix: u64, a: Affinity, ids: &[u64], least: u32, count: impl FnOnce(usize) -> Option<u32>) -> Option<usize> {
    let i = rank(prefix, ids)?;
    count(i).filter(|&c| waiting(c, a.seats) <= waiting(least, a.seats).saturating_add(a.bound)).map(|_| i)
}

#[cfg(test)]
mod tests;
