//! The forwarding tier: agents that share their in-flight counts keep an offer
//! only if their backend is the fleet's least loaded, and otherwise send it on,
//! as a final, to the least loaded peer they know of.
//!
//! ```text
//!  front ──offer──► agent A ── busy <= seen + seen_slack, or busy <= least peer + slack ──► app A
//!                      │ else
//!                      └──final──► agent B (the least peer, ties at random) ──► app B
//!  every agent ──"hunt-fleet/1 <addr> <seq> <busy> <ready> <wants>"──► peers that want (UDP, on each change)
//!                                                                     └──► every peer (a heartbeat)
//! ```
//!
//! Why: a front counts only its own requests, so with several fronts its least
//! is not the fleet's. An agent hears every peer's count within a fraction of a
//! millisecond on a LAN, which is the fresh, shared view several fronts lack.
//! In `huntlb-sim` (12 × 32 workers, ρ 0.88) forwarding over 4 fronts' own least
//! is 0.81× least-request's mean with counts 0.2 ms old and 0.85× at 1 ms.
//!
//! Two rules in one pure function, [`route`]; the wire format of a count,
//! [`Report`], is here too so that every host reads it alike.
//! `policy/vectors/forward.json` holds both.

use std::fmt;

/// The forwarding knobs, validated by the host's config (`forward_slack`,
/// `forward_seen_slack`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forwarding {
    /// Keep an offer when this backend's count is at most the least peer's
    /// plus `slack`. 0 is JSQ's rule; more keeps more at home, fewer hops.
    pub slack: u32,
    /// Keep an offer when this backend's count is at most the front's own
    /// count here (`hunt-seen`, or what its `hunt-front` holds here) plus this:
    /// the front then knew this backend's load, and with one front its least
    /// is the fleet's. None: the front's count is not consulted.
    pub seen_slack: Option<u32>,
}

impl Default for Forwarding {
    fn default() -> Self {
        Forwarding { slack: 0, seen_slack: Some(1) }
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
/// load (`seen` within `seen_slack`). A host may decide on this alone, before
/// it brings its view of the peers up to date.
pub fn kept_by_seen(f: Forwarding, busy: u32, seen: Option<u32>) -> bool {
    f.seen_slack.zip(seen).is_some_and(|(k, s)| busy <= s.saturating_add(k))
}

/// Decide one offer. `busy`: this backend's count now; `seen`: the front's own
/// count here, if it told; `peers`: each ready peer's count as this agent knows
/// it (last heard, plus what this agent forwarded there since); `draw`: a
/// uniform random number, which picks among peers tied for least (a fixed
/// choice would herd every agent's forwards onto one peer).
///
/// No peers: keep (the host falls back to its acceptance policy).
pub fn route(f: Forwarding, busy: u32, seen: Option<u32>, peers: &[u32], draw: u64) -> Route {
    let Some(&least) = peers.iter().min() else { return Route::Keep };
    if kept_by_seen(f, busy, seen) || busy <= least.saturating_add(f.slack) {
        return Route::Keep;
    }
    let ties = peers.iter().filter(|&&c| c == least).count() as u64;
    let nth = (draw % ties) as usize;
    let i = peers.iter().enumerate().filter(|&(_, &c)| c == least).nth(nth).map(|(i, _)| i).expect("nth < ties");
    Route::Forward(i)
}

/// Longest datagram a [`Report`] may take: a name of 64 bytes and three
/// numbers fit with room.
pub const MAX_REPORT_LEN: usize = 160;
const MAGIC: &str = "hunt-fleet/1";

/// One agent's count as it goes to its peers: where to forward to (its
/// `listen` address, a name of at most 64 visible bytes), a sequence number
/// (a datagram older than one already heard is dropped: UDP may reorder), its
/// count, whether it takes forwards at all (not draining, app up), and
/// whether it *wants* every change of its peers' counts: it decides offers by
/// them. An agent whose offers are all kept by `seen` (one front) does not, and
/// its peers send it their heartbeats only. A report of five fields, without
/// `wants`, comes from an agent that wants every change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub addr: String,
    pub seq: u64,
    pub busy: u32,
    pub ready: bool,
    pub wants: bool,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{MAGIC} {} {} {} {} {}", self.addr, self.seq, self.busy, u8::from(self.ready), u8::from(self.wants))
    }
}

impl Report {
    /// Parse one datagram; the error says what is wrong with it.
    pub fn parse(d: &[u8]) -> Result<Report, String> {
        if d.len() > MAX_REPORT_LEN {
            return Err(format!("{} bytes, more than {MAX_REPORT_LEN}", d.len()));
        }
        let s = std::str::from_utf8(d).map_err(|_| "not UTF-8".to_string())?;
        let f: Vec<&str> = s.split(' ').collect();
        let (magic, addr, seq, busy, ready, wants) = match f[..] {
            [m, a, s, b, r, w] => (m, a, s, b, r, w),
            [m, a, s, b, r] => (m, a, s, b, r, "1"),
            _ => return Err(format!("{} fields, expected 6: `{MAGIC} ADDR SEQ BUSY READY WANTS` (or 5, without WANTS)", f.len())),
        };
        if magic != MAGIC {
            return Err(format!("starts `{magic}`, expected `{MAGIC}`"));
        }
        if !is_forward_addr(addr) {
            return Err(format!("address `{addr}`: expected host:port (a name, an IPv4 address or [IPv6]), at most 64 bytes"));
        }
        let num = |what: &str, v: &str| -> Result<u64, String> {
            if v.is_empty() || v.len() > 20 || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{what} `{v}`: not a plain decimal number"));
            }
            v.parse::<u64>().map_err(|e| format!("{what} `{v}`: {e}"))
        };
        let seq = num("seq", seq)?;
        let busy = u32::try_from(num("busy", busy)?).map_err(|_| format!("busy `{busy}`: more than a u32"))?;
        let flag = |what: &str, v: &str| match v {
            "1" => Ok(true),
            "0" => Ok(false),
            other => Err(format!("{what} `{other}`: expected 0 or 1")),
        };
        Ok(Report { addr: addr.to_string(), seq, busy, ready: flag("ready", ready)?, wants: flag("wants", wants)? })
    }
}

/// Where a forward may go: `host:port`, at most 64 bytes, the host a DNS name,
/// an IPv4 address or a bracketed IPv6 address, the port 1 to 65535. Nothing
/// else can become a request's authority: a report naming `a/b` or `x@y`
/// would turn every forward there into an error instead of a try.
pub fn is_forward_addr(a: &str) -> bool {
    let Some((host, port)) = a.rsplit_once(':') else { return false };
    let port_ok = !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p));
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => !v6.is_empty() && v6.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.'),
        None => !host.is_empty() && host.split('.').all(|l| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')),
    };
    a.len() <= crate::protocol::MAX_MARK_LEN && port_ok && host_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_round_trips() {
        let r = Report { addr: "127.0.1.2:8080".into(), seq: 7, busy: 31, ready: true, wants: false };
        assert_eq!(r.to_string(), "hunt-fleet/1 127.0.1.2:8080 7 31 1 0");
        assert_eq!(Report::parse(r.to_string().as_bytes()), Ok(r));
    }

    #[test]
    fn ties_are_drawn_among_the_least_only() {
        let f = Forwarding { slack: 0, seen_slack: None };
        let peers = [5, 2, 9, 2, 2];
        let picked: Vec<Route> = (0..6).map(|d| route(f, 4, None, &peers, d)).collect();
        assert_eq!(picked, [1, 3, 4, 1, 3, 4].map(Route::Forward));
    }
}
