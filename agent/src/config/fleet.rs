//! The forwarding tier's configuration: its members, its key, TLS to peers,
//! and the forwarding knobs, validated once with errors that name the key.

use super::{addr, invalid, ms, ConfigError, Raw};
use huntlb_policy::forward;
use std::net::SocketAddr;
use std::time::Duration;

/// One `fleet_peers` entry: an address, or a DNS name resolved again every
/// `fleet_resolve_ms` to every address it has (Docker's service names, a
/// headless Kubernetes service), so peers come and go with the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    Addr(SocketAddr),
    Name { host: String, port: u16 },
}

impl Peer {
    fn parse(v: &str) -> Option<Peer> {
        if let Ok(a) = v.parse::<SocketAddr>() {
            return Some(Peer::Addr(a));
        }
        let (host, port) = v.rsplit_once(':')?;
        let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
        let label_ok = |l: &str| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') && !l.starts_with('-');
        (host.len() <= 253 && host.split('.').all(label_ok) && !host.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
            .then(|| Peer::Name { host: host.to_string(), port })
    }
}

/// The forwarding tier: this agent's count goes to every peer, theirs come in,
/// and an offer not kept here goes on to the least loaded peer
/// (`huntlb_policy::forward`).
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// UDP: where peers' counts arrive, and ours leave from.
    pub listen: SocketAddr,
    /// Every peer's `fleet_listen` (this agent's own is skipped): the members,
    /// the only senders heard and the only places forwards go.
    pub peers: Vec<Peer>,
    /// This agent as it names itself: `hunt-via` on what it forwards.
    pub advertise: String,
    /// The address our reports come from, as peers see it (and check).
    pub from: SocketAddr,
    /// A member's agent takes forwards at its address on this port.
    pub peer_port: u16,
    /// `fleet_key_file`: the shared key(s) reports are sealed and checked with.
    pub key_file: String,
    pub keys: crate::seal::Keys,
    /// Who may read `key_file` besides its owner (checked at every reload too).
    pub key_readers: crate::seal::Readers,
    /// With `tls_cert`: forwards to peers use TLS (mTLS with our certificate).
    pub tls: Option<crate::tls::PeerTls>,
    pub forwarding: huntlb_policy::forward::Forwarding,
    /// Our count goes out on every change and at least this often.
    pub heartbeat: Duration,
    /// A peer not heard from for this long takes no forwards.
    pub dead_after: Duration,
    /// A peer has this long to say it takes a forward (`commit`); else the
    /// forward is withdrawn and served here.
    pub commit: Duration,
    /// What this agent forwarded to a peer counts in its view of that peer
    /// for this long (until the peer's own count has surely told it).
    pub settle: Duration,
    /// Names in `peers` are resolved again this often.
    pub resolve: Duration,
    /// How many peers this agent hears (0: every member), drawn again every
    /// `resample`, keeping the `keep` least loaded: what the tier costs per
    /// change of a count does not grow with the fleet.
    pub sample: usize,
    pub resample: Duration,
    pub keep: usize,
    /// `fleet_pass_plain`: a try that no member marked (a plain front's, any
    /// try from an IP that is no member's) is passed for its source IP, as a
    /// `hunt-pass` from the front at that IP; only a member's IP may mark one.
    pub pass_plain: bool,
    /// Prefix affinity (`llm_prefix_bytes`, `llm_prefix_bound`): None when off.
    pub affinity: Option<huntlb_policy::prefix::Affinity>,
}

/// At most this many members (addresses `fleet_peers` resolves to): what a
/// DNS answer can add to the tier's tables is bounded (and a sample with them).
pub const MAX_MEMBERS: usize = 4096;

/// `fleet_commit_ms`'s default.
pub const DEFAULT_COMMIT_MS: u64 = 10;

/// The tier's knobs, taken from `Raw` before the rest is validated.
pub(super) struct Knobs {
    fleet_listen: Option<String>,
    fleet_peers: Option<String>,
    fleet_advertise: Option<String>,
    fleet_key_file: Option<String>,
    fleet_peer_port: Option<u16>,
    fleet_tls_ca: Option<String>,
    fleet_tls_name: Option<String>,
    forward_peer_margin: Option<u32>,
    forward_seen_margin: Option<u32>,
    fleet_heartbeat_ms: Option<u64>,
    fleet_dead_after_ms: Option<u64>,
    fleet_commit_ms: Option<u64>,
    fleet_key_readable_by_others: Option<bool>,
    fleet_settle_ms: Option<u64>,
    fleet_resolve_ms: Option<u64>,
    fleet_sample: Option<u32>,
    fleet_resample_ms: Option<u64>,
    fleet_sample_keep: Option<u32>,
    fleet_pass_plain: Option<bool>,
}

impl Knobs {
    pub(super) fn take(raw: &mut Raw) -> Knobs {
        Knobs {
            fleet_listen: raw.fleet_listen.take(),
            fleet_peers: raw.fleet_peers.take(),
            fleet_advertise: raw.fleet_advertise.take(),
            fleet_key_file: raw.fleet_key_file.take(),
            fleet_peer_port: raw.fleet_peer_port.take(),
            fleet_tls_ca: raw.fleet_tls_ca.take(),
            fleet_tls_name: raw.fleet_tls_name.take(),
            forward_peer_margin: raw.forward_peer_margin.take(),
            forward_seen_margin: raw.forward_seen_margin.take(),
            fleet_heartbeat_ms: raw.fleet_heartbeat_ms.take(),
            fleet_dead_after_ms: raw.fleet_dead_after_ms.take(),
            fleet_commit_ms: raw.fleet_commit_ms.take(),
            fleet_key_readable_by_others: raw.fleet_key_readable_by_others.take(),
            fleet_settle_ms: raw.fleet_settle_ms.take(),
            fleet_resolve_ms: raw.fleet_resolve_ms.take(),
            fleet_sample: raw.fleet_sample.take(),
            fleet_resample_ms: raw.fleet_resample_ms.take(),
            fleet_sample_keep: raw.fleet_sample_keep.take(),
            fleet_pass_plain: raw.fleet_pass_plain.take(),
        }
    }
}

/// An address of this host (it can be bound).
fn local_ip(ip: std::net::IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// `None` without `fleet_listen` (and then no other tier key may be set).
pub(super) fn validate(k: Knobs, listen: SocketAddr, tls: Option<&crate::tls::Tls>, client_ca: Option<&str>) -> Result<Option<FleetConfig>, ConfigError> {
    Ok(match k.fleet_listen {
        None => {
            for (key, set) in [
                ("fleet_peers", k.fleet_peers.is_some()),
                ("fleet_advertise", k.fleet_advertise.is_some()),
                ("fleet_key_file", k.fleet_key_file.is_some()),
                ("fleet_peer_port", k.fleet_peer_port.is_some()),
                ("fleet_tls_ca", k.fleet_tls_ca.is_some()),
                ("fleet_tls_name", k.fleet_tls_name.is_some()),
                ("forward_peer_margin", k.forward_peer_margin.is_some()),
                ("forward_seen_margin", k.forward_seen_margin.is_some()),
                ("fleet_heartbeat_ms", k.fleet_heartbeat_ms.is_some()),
                ("fleet_dead_after_ms", k.fleet_dead_after_ms.is_some()),
                ("fleet_commit_ms", k.fleet_commit_ms.is_some()),
                ("fleet_key_readable_by_others", k.fleet_key_readable_by_others.is_some()),
                ("fleet_settle_ms", k.fleet_settle_ms.is_some()),
                ("fleet_resolve_ms", k.fleet_resolve_ms.is_some()),
                ("fleet_sample", k.fleet_sample.is_some()),
                ("fleet_resample_ms", k.fleet_resample_ms.is_some()),
                ("fleet_sample_keep", k.fleet_sample_keep.is_some()),
                // No tier, nothing to pass a try on to: an agent alone is
                // what its front sends it (and `true` here would silently do nothing).
                ("fleet_pass_plain", k.fleet_pass_plain.is_some()),
            ] {
                if set {
                    return Err(invalid(key, "only meaningful with fleet_listen"));
                }
            }
            None
        }
        Some(l) => {
            // With TLS on `listen`, forwards to peers use it too: a peer
            // with mTLS takes nothing else, and requests do not cross
            // between backends in clear.
            let peer_tls = match (tls, k.fleet_tls_ca.as_deref().or(client_ca)) {
                (None, _) => {
                    for (key, set) in [("fleet_tls_ca", k.fleet_tls_ca.is_some()), ("fleet_tls_name", k.fleet_tls_name.is_some())] {
                        if set {
                            return Err(invalid(key, "only meaningful with tls_cert"));
                        }
                    }
                    None
                }
                (Some(_), None) => {
                    return Err(invalid("fleet_tls_ca", "required with tls_cert and fleet_listen (or tls_client_ca): the CA the peers' certificates chain to"))
                }
                (Some(t), Some(ca)) => {
                    let key = if k.fleet_tls_ca.is_some() { "fleet_tls_ca" } else { "tls_client_ca" };
                    Some(crate::tls::peer_config(&t.files.cert, &t.files.key, (key, ca), k.fleet_tls_name.as_deref())?)
                }
            };
            let listen_udp = addr("fleet_listen", Some(l), "")?;
            let peers_raw = k.fleet_peers.ok_or_else(|| invalid("fleet_peers", "required with fleet_listen"))?;
            let peers = peers_raw
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| Peer::parse(p).ok_or_else(|| invalid("fleet_peers", format!("`{p}` is not ip:port or name:port"))))
                .collect::<Result<Vec<_>, _>>()?;
            if peers.iter().all(|p| *p == Peer::Addr(listen_udp)) {
                return Err(invalid("fleet_peers", "names no peer but this agent"));
            }
            // Peers forward here: an address they can reach, which an
            // unspecified one (0.0.0.0, [::]) is not.
            let advertise = match k.fleet_advertise {
                // A bare IP takes listen's port, bracketed when IPv6: a pod's
                // IP from the downward API needs no port pasted on, which an
                // IPv6 one would need brackets for (`$(POD_IP):8080` is
                // `fd00::5:8080`, itself an IPv6 address).
                Some(a) => match a.parse::<std::net::IpAddr>() {
                    Ok(ip) => {
                        let text = a.as_str();
                        if ip.is_ipv6() && text.rsplit_once(':').is_some_and(|(_, last)| last == listen.port().to_string()) && !local_ip(ip) {
                            return Err(invalid(
                                "fleet_advertise",
                                format!("`{a}` reads as an IPv6 address, not this host's; with a port, bracket it (`[{}]:{}`), or give the IP alone", text.rsplit_once(':').map_or(text, |(h, _)| h), listen.port()),
                            ));
                        }
                        SocketAddr::new(ip, listen.port()).to_string()
                    }
                    Err(_) => a,
                },
                None if listen.ip().is_unspecified() => {
                    return Err(invalid("fleet_advertise", format!("required when listen is {listen}: the address peers reach this agent at")))
                }
                None => listen.to_string(),
            };
            if !forward::is_forward_addr(&advertise) {
                return Err(invalid("fleet_advertise", format!("`{advertise}` is not host:port (at most 64 bytes)")));
            }
            if advertise.parse::<SocketAddr>().is_ok_and(|a| a.ip().is_unspecified()) {
                return Err(invalid("fleet_advertise", format!("`{advertise}`: peers cannot reach an unspecified address")));
            }
            // Peers take a report only from the member it says sent it:
            // bound to every address, this agent names its own by
            // fleet_advertise's IP.
            let from = if listen_udp.ip().is_unspecified() {
                match advertise.parse::<SocketAddr>() {
                    Ok(a) => SocketAddr::new(a.ip(), listen_udp.port()),
                    Err(_) => {
                        return Err(invalid(
                            "fleet_advertise",
                            format!("`{advertise}` is a name, but fleet_listen binds every address: give this agent's IP, which its reports come from"),
                        ))
                    }
                }
            } else {
                listen_udp
            };
            let key_file = k.fleet_key_file.ok_or_else(|| {
                invalid("fleet_key_file", "required with fleet_listen: reports are sealed with a shared key (`openssl rand -hex 32 > fleet.key`)")
            })?;
            let key_readers = if k.fleet_key_readable_by_others == Some(true) { crate::seal::Readers::Any } else { crate::seal::Readers::Owner };
            let keys = crate::seal::Keys::load(&key_file, key_readers).map_err(|e| invalid("fleet_key_file", e))?;
            let peer_port = match k.fleet_peer_port {
                Some(0) => return Err(invalid("fleet_peer_port", "0 is no port")),
                Some(p) => p,
                None => listen.port(),
            };
            let heartbeat = ms("fleet_heartbeat_ms", k.fleet_heartbeat_ms, 50, 1)?;
            let dead_after = ms("fleet_dead_after_ms", k.fleet_dead_after_ms, 250, 1)?;
            if dead_after <= heartbeat {
                return Err(invalid("fleet_dead_after_ms", "must be longer than fleet_heartbeat_ms, or every peer is dead between beats"));
            }
            // A LAN's round trip and a loaded agent's wakeup, with room: a
            // peer slower than this to say it takes a forward costs that
            // forward this long, then it is served here.
            let commit = ms("fleet_commit_ms", k.fleet_commit_ms, DEFAULT_COMMIT_MS, 1)?;
            if commit >= dead_after {
                return Err(invalid("fleet_commit_ms", "must be shorter than fleet_dead_after_ms"));
            }
            let settle = ms("fleet_settle_ms", k.fleet_settle_ms, 2, 0)?;
            if settle > dead_after {
                return Err(invalid("fleet_settle_ms", "must not be longer than fleet_dead_after_ms"));
            }
            // A subscription lasts fleet_dead_after_ms and is renewed at each
            // draw: a draw must come within it, with room for one lost renewal.
            let resample = ms("fleet_resample_ms", k.fleet_resample_ms, forward::DEFAULT_RESAMPLE_MS, 1)?;
            if resample * 2 > dead_after {
                return Err(invalid("fleet_resample_ms", "must be at most half of fleet_dead_after_ms: each draw renews the sample's subscriptions, which last that long"));
            }
            // The sample's defaults are the policy crate's, which the simulator uses too.
            let sample = k.fleet_sample.map_or(forward::DEFAULT_SAMPLE, |v| v as usize);
            if sample > MAX_MEMBERS {
                return Err(invalid("fleet_sample", format!("at most {} (0: every member)", MAX_MEMBERS)));
            }
            let keep = k.fleet_sample_keep.map_or(forward::default_sample_keep(sample), |v| v as usize);
            if sample == 0 && k.fleet_sample_keep.is_some() {
                return Err(invalid("fleet_sample_keep", "only meaningful with a sample (fleet_sample above 0)"));
            }
            if sample > 0 && keep >= sample {
                return Err(invalid("fleet_sample_keep", format!("must be below fleet_sample ({sample}): each draw brings in at least one new peer")));
            }
            if k.fleet_resolve_ms.is_some() && !peers.iter().any(|p| matches!(p, Peer::Name { .. })) {
                return Err(invalid("fleet_resolve_ms", "only meaningful with a name in fleet_peers"));
            }
            Some(FleetConfig {
                listen: listen_udp,
                peers,
                advertise,
                from,
                peer_port,
                key_file,
                keys,
                key_readers,
                tls: peer_tls,
                forwarding: forward::Forwarding {
                    // The policy crate's defaults, written once there.
                    peer_margin: k.forward_peer_margin.unwrap_or(forward::Forwarding::default().peer_margin),
                    seen_margin: k.forward_seen_margin.or(forward::Forwarding::default().seen_margin),
                },
                heartbeat,
                dead_after,
                commit,
                settle,
                resolve: ms("fleet_resolve_ms", k.fleet_resolve_ms, 1000, 100)?,
                sample,
                resample,
                keep,
                pass_plain: k.fleet_pass_plain.unwrap_or(false),
                affinity: None,
            })
        }
    })
}
