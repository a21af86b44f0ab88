//! Which peers an agent hears: a sample of the fleet, drawn again now and then.

use super::DEFAULT_SAMPLE_KEEP;

/// `fleet_sample_keep`'s default for a sample of `sample` peers: half of it,
/// at most [`DEFAULT_SAMPLE_KEEP`], so every draw brings in a new peer.
pub fn default_sample_keep(sample: usize) -> usize {
    DEFAULT_SAMPLE_KEEP.min(sample / 2)
}

/// Draw a sample again: keep the `keep` least loaded of `kept_from` (the old
/// sample's members a host may keep, each with its load as the host knows it:
/// the agent passes those ready and heard within `dead_after`), ties in random
/// order, then fill it to `sample` members drawn uniformly from `others` (the
/// fleet but this agent) not kept, by a partial Fisher-Yates shuffle; fewer
/// when `others` runs out. The kept come first, least first, then the drawn,
/// in the order drawn.
///
/// Why keep the least loaded: they are where this agent's forwards go, and a
/// peer dropped while idle is a good forward lost. Why random ties and a
/// uniform fill: a fixed order would put the same peers in every agent's
/// sample, and herd the fleet's forwards onto them.
///
/// `draw` gives a uniform random `u64` at each call: one per member of
/// `kept_from` (in its order, for the ties), then one per member drawn. Hosts
/// pass their random source, the vectors (`policy/vectors/sample.json`) a list.
pub fn redraw<M: Copy + PartialEq>(kept_from: &[(M, u32)], others: &[M], sample: usize, keep: usize, mut draw: impl FnMut() -> u64) -> Vec<M> {
    let mut ranked: Vec<(u32, u64, M)> = kept_from.iter().map(|&(m, load)| (load, draw(), m)).collect();
    // Stable, and the draws tell ties apart: the order is the draws', whatever M is.
    ranked.sort_by_key(|&(load, tie, _)| (load, tie));
    ranked.truncate(keep.min(sample));
    let mut new: Vec<M> = ranked.into_iter().map(|(_, _, m)| m).collect();
    let mut pool: Vec<M> = others.iter().copied().filter(|m| !new.contains(m)).collect();
    let need = (sample - new.len()).min(pool.len());
    for i in 0..need {
        let j = i + (draw() % (pool.len() - i) as u64) as usize;
        pool.swap(i, j);
        new.push(pool[i]);
    }
    new
}
