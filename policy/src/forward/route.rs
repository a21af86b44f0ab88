//! Where an offer goes: kept, or forwarded as a final to the least loaded peer.

/// The forwarding knobs, validated by the host's config (`forward_peer_margin`,
/// `forward_seen_margin`; once `forward_slack`, `forward_seen_slack`). Both are
/// margins over a count: over the least peer's, and over the front's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forwarding {
    /// Keep an offer when this backend's count is at most the least peer's
    /// plus this. 0 is JSQ's rule; more keeps more at home, fewer hops.
    pub peer_margin: u32,
    /// Keep an offer when this backend's count is at most the front's own
    /// count here (`hunt-seen`, or what its `hunt-front` holds here) plus this:
    /// the front then knew this backend's load, and with one front its least
    /// is the fleet's. None: the front's count is not consulted.
    pub seen_margin: Option<u32>,
}

impl Default for Forwarding {
    fn default() -> Self {
        Forwarding { peer_margin: 0, seen_margin: Some(1) }
    }
}

/// Where an offer goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To this backend's app.
    Keep,
    /// To the peer at this index of the `peers` given to [`route`], as a final.
    Forward(usize),
}

/// Is an offer kept whatever the peers hold? The front knew this backend's
/// load (`seen` within `seen_margin`). A host may decide on this alone, before
/// it brings its view of the peers up to date.
pub fn kept_by_seen(f: Forwarding, busy: u32, seen: Option<u32>) -> bool {
    f.seen_margin.zip(seen).is_some_and(|(k, s)| busy <= s.saturating_add(k))
}

/// Decide one offer. `busy`: this backend's count now; `seen`: the front's own
/// count here, if it told; `peers`: each ready peer's count as this agent knows
/// it (last heard, plus what this agent forwarded there since); `draw`: a
/// uniform random number, which picks among peers tied for least (a fixed
/// choice would herd every agent's forwards onto one peer).
///
/// No peers: keep (the host falls back to its acceptance policy).
pub fn route(f: Forwarding, busy: u32, seen: Option<u32>, peers: &[u32], draw: u64) -> Route {
    route_with(f, busy, seen, peers, |ties| (draw % ties as u64) as usize)
}

/// [`route`] with the tie-break as a function: given how many peers tie for
/// least, which of them (0-based, below that number). The simulator hands it
/// its own random stream, so its runs keep their draws.
pub fn route_with(f: Forwarding, busy: u32, seen: Option<u32>, peers: &[u32], tie: impl FnOnce(usize) -> usize) -> Route {
    let Some(&least) = peers.iter().min() else { return Route::Keep };
    if kept_by_seen(f, busy, seen) || busy <= least.saturating_add(f.peer_margin) {
        return Route::Keep;
    }
    let ties = peers.iter().filter(|&&c| c == least).count();
    let nth = tie(ties).min(ties - 1);
    let i = peers.iter().enumerate().filter(|&(_, &c)| c == least).nth(nth).map(|(i, _)| i).expect("nth < ties");
    Route::Forward(i)
}
