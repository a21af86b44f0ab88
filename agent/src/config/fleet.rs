//! The forwarding tier's configuration: its members, its key, TLS to peers,
//! and the forwarding knobs, validated once with errors that name the key.

use super::{invalid, keys::addr, ConfigError, Raw};
use super::raw::Values;
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
    /// Quiet, a subscription of beats only (`Sub::Beats`) is beaten and
    /// renewed this often; such a member is alive for this plus half of
    /// `dead_after` after its last report (`FleetConfig::beats_alive`).
    pub quiet_beat: Duration,
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

impl FleetConfig {
    /// How long a member this agent hears under a subscription of beats only
    /// stays alive after its last report: a quiet beat, and half of
    /// `dead_after` for a late tick and a lazy read (as `dead_after` is for a
    /// beat each half of it). Never less than `dead_after`. Every agent's
    /// own setting, not the member's word: nothing on the wire stretches it.
    pub fn beats_alive(&self) -> Duration {
        self.dead_after.max(self.quiet_beat + self.dead_after / 2)
    }
}

/// At most this many members (addresses `fleet_peers` resolves to): what a
/// DNS answer can add to the tier's tables is bounded (and a sample with them).
pub const MAX_MEMBERS: usize = 4096;

/// An address of this host (it can be bound).
fn local_ip(ip: std::net::IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// `None` without `fleet_listen` (and then no other tier key may be set).
/// The strings it keeps (`fleet_peers`, `fleet_advertise`, `fleet_key_file`)
/// are moved out of `raw`.
pub(super) fn validate(raw: &mut Raw, listen: SocketAddr, tls: Option<&crate::tls::Tls>) -> Result<Option<FleetConfig>, ConfigError> {
    raw.only_with("fleet_listen", raw.fleet_listen.is_some())?;
    Ok(match raw.fleet_listen.take() {
        None => None,
        Some(l) => {
            // With TLS on `listen`, forwards to peers use it too: a peer
            // with mTLS takes nothing else, and requests do not cross
            // between backends in clear.
            raw.only_with("tls_cert", tls.is_some())?;
            let peer_tls = match (tls, raw.fleet_tls_ca.as_deref().or(raw.tls_client_ca.as_deref())) {
                (None, _) => None,
                (Some(_), None) => {
                    return Err(invalid("fleet_tls_ca", "required with tls_cert and fleet_listen (or tls_client_ca): the CA the peers' certificates chain to"))
                }
                (Some(t), Some(ca)) => {
                    let key = if raw.fleet_tls_ca.is_some() { "fleet_tls_ca" } else { "tls_client_ca" };
                    Some(crate::tls::peer_config(&t.files.cert, &t.files.key, (key, ca), raw.fleet_tls_name.as_deref())?)
                }
            };
            let listen_udp = addr("fleet_listen", &l)?;
            let peers_raw = raw.fleet_peers.take().ok_or_else(|| invalid("fleet_peers", "required with fleet_listen"))?;
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
            let advertise = match raw.fleet_advertise.take() {
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
            let key_file = raw.fleet_key_file.take().ok_or_else(|| {
                invalid("fleet_key_file", "required with fleet_listen: reports are sealed with a shared key (`openssl rand -hex 32 > fleet.key`)")
            })?;
            let key_readers = if raw.fleet_key_readable_by_others() { crate::seal::Readers::Any } else { crate::seal::Readers::Owner };
            let keys = crate::seal::Keys::load(&key_file, key_readers).map_err(|e| invalid("fleet_key_file", e))?;
            let peer_port = match raw.fleet_peer_port {
                Some(0) => return Err(invalid("fleet_peer_port", "0 is no port")),
                Some(p) => p,
                None => listen.port(),
            };
            let heartbeat = raw.fleet_heartbeat_ms()?;
            let dead_after = raw.fleet_dead_after_ms()?;
            if dead_after <= heartbeat {
                return Err(invalid("fleet_dead_after_ms", "must be longer than fleet_heartbeat_ms, or every peer is dead between beats"));
            }
            // Unset, never below the heartbeat (a fleet that beats each 2 s
            // beats no faster when quiet); set below it, a contradiction.
            let quiet_beat = raw.fleet_quiet_beat_ms()?;
            let quiet_beat = match raw.fleet_quiet_beat_ms {
                None => quiet_beat.max(heartbeat),
                Some(_) if quiet_beat < heartbeat => {
                    return Err(invalid("fleet_quiet_beat_ms", "must be at least fleet_heartbeat_ms: it is the slower beat, for when nothing decides by counts"))
                }
                Some(_) => quiet_beat,
            };
            let commit = raw.fleet_commit_ms()?;
            if commit >= dead_after {
                return Err(invalid("fleet_commit_ms", "must be shorter than fleet_dead_after_ms"));
            }
            let settle = raw.fleet_settle_ms()?;
            if settle > dead_after {
                return Err(invalid("fleet_settle_ms", "must not be longer than fleet_dead_after_ms"));
            }
            // A subscription lasts fleet_dead_after_ms and is renewed at each
            // draw: a draw must come within it, with room for one lost renewal.
            let resample = raw.fleet_resample_ms()?;
            if resample * 2 > dead_after {
                return Err(invalid("fleet_resample_ms", "must be at most half of fleet_dead_after_ms: each draw renews the sample's subscriptions, which last that long"));
            }
            // The sample's defaults are the policy crate's, which the simulator uses too.
            let sample = raw.fleet_sample()? as usize;
            let keep = raw.fleet_sample_keep.map_or(forward::default_sample_keep(sample), |v| v as usize);
            if sample == 0 && raw.fleet_sample_keep.is_some() {
                return Err(invalid("fleet_sample_keep", "only meaningful with a sample (fleet_sample above 0)"));
            }
            if sample > 0 && keep >= sample {
                return Err(invalid("fleet_sample_keep", format!("must be below fleet_sample ({sample}): each draw brings in at least one new peer")));
            }
            if raw.fleet_resolve_ms.is_some() && !peers.iter().any(|p| matches!(p, Peer::Name { .. })) {
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
                    peer_margin: raw.forward_peer_margin(),
                    seen_margin: raw.forward_seen_margin.or(forward::Forwarding::default().seen_margin),
                },
                heartbeat,
                dead_after,
                quiet_beat,
                commit,
                settle,
                resolve: raw.fleet_resolve_ms()?,
                sample,
                resample,
                keep,
                pass_plain: raw.fleet_pass_plain(),
                affinity: None,
            })
        }
    })
}
