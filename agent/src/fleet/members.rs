//! Who the members are: `fleet_peers` resolved (names again every
//! `fleet_resolve_ms`; the list itself again on SIGHUP), bounded by
//! `MAX_MEMBERS`; the tables keep members only.

use super::{lock, Fleet, BUFFERED_PER_MEMBER, MAX_MEMBERS, MIN_RCVBUF};
use crate::config::Peer as PeerEntry;
use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// The members: each `fleet_peers` entry's addresses (names resolved), all of
/// them as a set (the only senders heard), and every one but this agent, in
/// order (what a sample is drawn from).
#[derive(Default)]
pub(super) struct Members {
    /// `fleet_peers` as last read (at start, or on SIGHUP).
    pub list: Vec<PeerEntry>,
    /// Each entry's addresses, in `list`'s order.
    pub resolved: Vec<Vec<SocketAddr>>,
    pub set: HashSet<SocketAddr>,
    pub others: Vec<SocketAddr>,
    /// The members' IPs, this agent's own included (`fleet_pass_plain`: only
    /// these may mark a try, and a peer's forward comes from one).
    pub ips: HashSet<IpAddr>,
    /// Prefix affinity's ranking: every member, this agent first (None), then
    /// `others`, each with its id (`huntlb_policy::prefix::member_id` of its
    /// address): every agent ranks the same list, whatever its sample.
    pub ranked: Vec<Option<SocketAddr>>,
    pub ids: Vec<u64>,
}

impl Fleet {
    /// Take a new member list: the tables keep only members, and the
    /// socket's buffer is sized for those this agent may hear at once.
    pub(super) fn set_members(&self, list: Vec<PeerEntry>, resolved: Vec<Vec<SocketAddr>>) {
        let mut set = HashSet::new();
        let mut others = Vec::new();
        for a in resolved.iter().flatten() {
            if set.len() == MAX_MEMBERS {
                warn!(max = MAX_MEMBERS, "fleet_peers resolves to more addresses than the tier takes; the rest are no members");
                break;
            }
            if set.insert(*a) && *a != self.cfg.from && *a != self.cfg.listen {
                others.push(*a);
            }
        }
        // Heard at once: the sample, and the members sampling this agent
        // (about as many; four times as many leaves room for the popular).
        let heard = if self.cfg.sample == 0 { set.len() } else { set.len().min(4 * self.cfg.sample) };
        let want = (heard * BUFFERED_PER_MEMBER * 768).max(MIN_RCVBUF);
        if self.sock.recv_buffer_size().is_ok_and(|have| have < want) {
            let _ = self.sock.set_recv_buffer_size(want);
            // Linux doubles what it grants (bookkeeping): half is the data.
            let got = self.sock.recv_buffer_size().unwrap_or(0) / 2;
            if got < want / 2 {
                warn!(asked = want, got, members = set.len(), "fleet_listen: receive buffer capped by net.core.rmem_max; a burst of reports may be dropped (raise it: sysctl -w net.core.rmem_max={want})");
            }
        }
        let ips = set.iter().map(|a| a.ip().to_canonical()).chain([self.cfg.from.ip().to_canonical()]).collect();
        let ranked: Vec<Option<SocketAddr>> = std::iter::once(None).chain(others.iter().copied().map(Some)).collect();
        let ids = ranked.iter().map(|a| huntlb_policy::prefix::member_id(&a.unwrap_or(self.cfg.from).to_string())).collect();
        // The tables and the list change together: no one sees the one without the other.
        let mut st = lock(&self.state);
        st.links.retain(|k, _| set.contains(k));
        st.peers.retain(|k, _| set.contains(k));
        st.listeners.retain(|k, _| set.contains(k));
        st.sample.retain(|k| set.contains(k));
        st.standby.retain(|(k, _)| set.contains(k));
        st.members = Arc::new(Members { list, resolved, set, others, ips, ranked, ids });
    }

    /// Is `ip` a member's (`fleet_pass_plain`: may it mark a try)?
    pub fn is_member_ip(&self, ip: IpAddr) -> bool {
        lock(&self.state).members.ips.contains(&ip.to_canonical())
    }

    /// `fleet_pass_plain`: a try no member marked is passed for its source IP.
    pub fn pass_plain(&self) -> bool {
        self.cfg.pass_plain
    }

    /// Resolve the names in `fleet_peers` again every `fleet_resolve_ms`: a
    /// member that joins is sent our count from then on, one that leaves is
    /// forgotten. A name that does not resolve keeps the addresses it had (a
    /// DNS hiccup is not a fleet change). DNS decides who is a member, so it
    /// is trusted as far as that: a forged answer adds a member, whose reports
    /// still need the key (docs/protocol.md, "Trust").
    pub async fn resolve(self: Arc<Self>) {
        loop {
            tokio::time::sleep(self.cfg.resolve).await;
            // the list a SIGHUP may have changed since the last round
            let (list, old) = {
                let m = lock(&self.state).members.clone();
                if !m.list.iter().any(|p| matches!(p, PeerEntry::Name { .. })) {
                    continue;
                }
                (m.list.clone(), m.resolved.clone())
            };
            let new = resolve_all(&list, &old).await;
            // a reload while this round resolved wins: its list is newer
            if new != old && lock(&self.state).members.list == list {
                info!(members = new.iter().flatten().count(), "fleet_peers resolved to a new set");
                self.set_members(list, new);
            }
        }
    }

    /// A new `fleet_peers` list (a SIGHUP's reload): resolved once and taken
    /// whole; the tables keep the members both lists share, so those are heard
    /// and sent to without a gap. False if the list did not change.
    pub async fn reload_peers(&self, list: Vec<PeerEntry>) -> bool {
        let before = {
            let m = lock(&self.state).members.clone();
            if m.list == list {
                return false;
            }
            // a name both lists have keeps its addresses if DNS fails now
            list.iter().map(|p| m.list.iter().position(|q| q == p).and_then(|j| m.resolved.get(j).cloned()).unwrap_or_default()).collect::<Vec<_>>()
        };
        let resolved = resolve_all(&list, &before).await;
        info!(entries = list.len(), members = resolved.iter().flatten().count(), "fleet_peers reloaded");
        self.set_members(list, resolved);
        true
    }
}

/// Each entry's addresses, in order. A name that does not resolve within 2 s
/// keeps what it had in `before` (same index).
pub(super) async fn resolve_all(peers: &[PeerEntry], before: &[Vec<SocketAddr>]) -> Vec<Vec<SocketAddr>> {
    let mut out = Vec::with_capacity(peers.len());
    for (i, p) in peers.iter().enumerate() {
        out.push(match p {
            PeerEntry::Addr(a) => vec![*a],
            PeerEntry::Name { host, port } => {
                match tokio::time::timeout(Duration::from_secs(2), tokio::net::lookup_host((host.as_str(), *port))).await {
                    Ok(Ok(addrs)) => addrs.collect(),
                    failed => {
                        let why = match failed {
                            Ok(Err(e)) => e.to_string(),
                            _ => "no answer within 2 s".into(),
                        };
                        warn!(name = %host, error = %why, "fleet_peers: name does not resolve; keeping its last addresses");
                        before.get(i).cloned().unwrap_or_default()
                    }
                }
            }
        });
    }
    out
}
