//! `X-Forwarded-For` to the app: the address the agent took the request from,
//! appended as proxies do (HAProxy's `option forwardfor`, Envoy's
//! `use_remote_address`), so the app keeps a client's address that the
//! agent's hop would otherwise hide, and what its fronts wrote before it.
//!
//! The agent reads nothing from the header: the entry it adds is an address
//! it saw (the connection's source), and an app walking the list from the
//! right, skipping its own proxies, stops at the first address no proxy of
//! its own wrote. With `forwarded_for_trusted`, what came in is kept only
//! from the peers it names (by the connection's source IP, never a header);
//! from anyone else it is replaced, so a value a client wrote never reaches
//! the app at all. Pure functions over a `HeaderMap`.

use http::{HeaderMap, HeaderValue};
use std::net::IpAddr;

pub const XFF: &str = "x-forwarded-for";

/// An IP prefix (`10.0.0.0/8`, `fd00::/8`, or one address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    net: IpAddr,
    len: u8,
}

impl Prefix {
    /// `ip` or `ip/len`; the host bits must be zero (`10.0.0.5/8` is a typo
    /// for something, and silently widening it would trust more than meant).
    pub fn parse(s: &str) -> Result<Prefix, String> {
        let (ip, len) = match s.split_once('/') {
            Some((ip, len)) => (ip, Some(len)),
            None => (s, None),
        };
        let ip: IpAddr = ip.trim_start_matches('[').trim_end_matches(']').parse().map_err(|_| format!("`{s}` is not an IP or IP/prefix"))?;
        let ip = ip.to_canonical();
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => l.parse::<u8>().ok().filter(|l| *l <= max).ok_or_else(|| format!("`{s}`: the prefix length must be 0 to {max}"))?,
        };
        let p = Prefix { net: ip, len };
        if mask(ip, len) != bits(ip) {
            return Err(format!("`{s}` has bits set past /{len} (write the network, e.g. {})", p.network()));
        }
        Ok(p)
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip.is_ipv4() == self.net.is_ipv4() && mask(ip, self.len) == mask(self.net, self.len)
    }

    fn network(&self) -> String {
        let m = mask(self.net, self.len);
        let ip = match self.net {
            IpAddr::V4(_) => IpAddr::from((m as u32).to_be_bytes()),
            IpAddr::V6(_) => IpAddr::from(m.to_be_bytes()),
        };
        format!("{ip}/{}", self.len)
    }
}

fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v) => u128::from(u32::from(v)),
        IpAddr::V6(v) => u128::from(v),
    }
}

fn mask(ip: IpAddr, len: u8) -> u128 {
    let width = if ip.is_ipv4() { 32 } else { 128 };
    let keep = u32::from(len);
    if keep == 0 {
        return 0;
    }
    bits(ip) & (u128::MAX << (width - keep)) & (u128::MAX >> (128 - width))
}

/// `forwarded_for = "append"`: the peers whose `X-Forwarded-For` is kept
/// (None: every peer's, as a proxy's append keeps it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForwardedFor {
    pub trusted: Option<Vec<Prefix>>,
}

impl ForwardedFor {
    /// `forwarded_for_trusted`: IPs and prefixes, comma separated.
    pub fn parse_trusted(list: &str) -> Result<Vec<Prefix>, String> {
        list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(Prefix::parse).collect()
    }

    pub fn trusts(&self, peer: IpAddr) -> bool {
        self.trusted.as_ref().is_none_or(|t| t.iter().any(|p| p.contains(peer)))
    }

    /// The header the app gets from a request whose connection came from
    /// `peer`: what came in (its lines joined into one, in order: many apps
    /// read only the first line), then `peer`; `peer` alone when
    /// `forwarded_for_trusted` does not name it.
    pub fn apply(&self, h: &mut HeaderMap, peer: IpAddr) {
        // An IPv4 client of a dual-stack socket shows as ::ffff:a.b.c.d.
        let peer = peer.to_canonical();
        // one buffer a request, written in place (no String for the address)
        let mut value = Vec::with_capacity(64);
        if self.trusts(peer) {
            for v in h.get_all(XFF) {
                let v = v.as_bytes().trim_ascii();
                if !v.is_empty() {
                    value.extend_from_slice(v);
                    value.extend_from_slice(b", ");
                }
            }
        }
        let _ = std::io::Write::write_fmt(&mut value, format_args!("{peer}"));
        h.remove(XFF);
        // Bytes that came in as header values, commas and an IP's text: valid.
        if let Ok(v) = HeaderValue::from_bytes(&value) {
            h.insert(XFF, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(ff: &ForwardedFor, incoming: &[&'static str], peer: &str) -> Vec<String> {
        let mut h = HeaderMap::new();
        for v in incoming {
            h.append(XFF, HeaderValue::from_static(v));
        }
        ff.apply(&mut h, peer.parse().unwrap());
        h.get_all(XFF).iter().map(|v| v.to_str().unwrap().to_string()).collect()
    }

    #[test]
    fn by_default_every_peers_header_is_appended_to() {
        let ff = ForwardedFor::default();
        assert_eq!(applied(&ff, &["6.6.6.6, 203.0.113.7"], "10.0.9.1"), ["6.6.6.6, 203.0.113.7, 10.0.9.1"]);
        assert_eq!(applied(&ff, &["6.6.6.6", " 203.0.113.7 "], "10.0.9.1"), ["6.6.6.6, 203.0.113.7, 10.0.9.1"]);
        assert_eq!(applied(&ff, &[], "10.0.9.1"), ["10.0.9.1"]);
        // IPv6 bare, as Envoy and HAProxy write it; a mapped IPv4 as IPv4
        assert_eq!(applied(&ff, &["2001:db8::5"], "fd00::7"), ["2001:db8::5, fd00::7"]);
        assert_eq!(applied(&ff, &[], "::ffff:10.0.9.1"), ["10.0.9.1"]);
    }

    #[test]
    fn trusting_no_peer_replaces_every_header_by_its_address() {
        let ff = ForwardedFor { trusted: Some(Vec::new()) };
        // a client's forgery, sent straight or through a front the agent does not trust
        assert_eq!(applied(&ff, &["6.6.6.6"], "10.0.9.1"), ["10.0.9.1"]);
        assert_eq!(applied(&ff, &["6.6.6.6", "7.7.7.7, 8.8.8.8"], "10.0.9.1"), ["10.0.9.1"]);
        assert_eq!(applied(&ff, &[], "10.0.9.1"), ["10.0.9.1"]);
        // IPv6 bare, as Envoy and HAProxy write it; a mapped IPv4 as IPv4
        assert_eq!(applied(&ff, &[], "fd00::7"), ["fd00::7"]);
        assert_eq!(applied(&ff, &[], "::ffff:10.0.9.1"), ["10.0.9.1"]);
    }

    #[test]
    fn only_a_trusted_peers_header_is_kept_when_peers_are_named() {
        let ff = ForwardedFor { trusted: Some(ForwardedFor::parse_trusted("10.0.9.0/24, fd00::1").unwrap()) };
        assert_eq!(applied(&ff, &["6.6.6.6, 203.0.113.7"], "10.0.9.1"), ["6.6.6.6, 203.0.113.7, 10.0.9.1"]);
        // lines joined in order into one
        assert_eq!(applied(&ff, &["6.6.6.6", "203.0.113.7"], "10.0.9.1"), ["6.6.6.6, 203.0.113.7, 10.0.9.1"]);
        assert_eq!(applied(&ff, &["2001:db8::5"], "fd00::1"), ["2001:db8::5, fd00::1"]);
        assert_eq!(applied(&ff, &["203.0.113.7"], "::ffff:10.0.9.200"), ["203.0.113.7, 10.0.9.200"]);
        // just outside the prefix: replaced
        assert_eq!(applied(&ff, &["6.6.6.6"], "10.0.10.1"), ["10.0.10.1"]);
        assert_eq!(applied(&ff, &["6.6.6.6"], "fd00::2"), ["fd00::2"]);
    }

    #[test]
    fn prefixes_parse_strictly() {
        for ok in ["10.0.0.0/8", "10.0.0.5", "0.0.0.0/0", "::/0", "fd00::/8", "[::1]", "127.0.0.1/32"] {
            assert!(Prefix::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["10.0.0.5/8", "10.0.0.0/33", "fd00::/129", "host", "10.0.0.0/x", ""] {
            assert!(Prefix::parse(bad).is_err(), "{bad}");
        }
        assert!(Prefix::parse("10.0.0.5/8").unwrap_err().contains("10.0.0.0/8"));
        let any4 = Prefix::parse("0.0.0.0/0").unwrap();
        assert!(any4.contains("1.2.3.4".parse().unwrap()) && !any4.contains("::1".parse().unwrap()));
    }
}
