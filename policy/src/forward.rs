//! The forwarding tier: agents that share their in-flight counts keep an offer
//! only if their backend is the fleet's least loaded, and otherwise send it on,
//! as a final, to the least loaded peer they know of.
//!
//! ```text
//!  front ──offer──► agent A ── busy <= seen + seen_margin, or busy <= least peer + peer_margin ──► app A
//!                      │ else
//!                      └──final──► agent B (the least peer, ties at random) ──► app B
//!  agent A ──"hunt-fleet/3 <from> <to> <boot> <seq> <busy> <ready> <sub> <mine> <yours> <mac>"──► the K peers A samples (sub: 1 changes, 0 beats, 2 leave)
//!  each of them ──its count, on each change (sub 1) or as a heartbeat──► A
//! ```
//!
//! Why: a front counts only its own requests, so with several fronts its least
//! is not the fleet's. An agent hears every peer's count within a fraction of a
//! millisecond on a LAN, which is the fresh, shared view several fronts lack.
//! In `huntlb-sim` (12 × 32 workers, ρ 0.88) forwarding over 4 fronts' own least
//! is 0.81× least-request's mean with counts 0.2 ms old and 0.85× at 1 ms.
//!
//! Two rules in one pure function, [`route`]; the wire format of a count,
//! [`Report`] sealed with a MAC ([`seal`], [`open`]), is here too so that every
//! host reads it alike (the MAC itself is the host's: HMAC-SHA256).
//! `policy/vectors/forward.json` holds both.

use std::fmt;

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

/// Peers each agent hears by default (the agent's `fleet_sample`, the
/// simulator's `--fleet-sample`), so what the tier sends per change of a count
/// does not grow with the fleet. In `huntlb-sim` 8, keeping 4 at each draw,
/// costs about 19 messages per request and is within 1.05x JSQ's mean on 12
/// backends, 1.12x on 96; 4 peers miss twice as far (1.24x on 96 backends):
/// docs/results/many-fronts-sim.md.
pub const DEFAULT_SAMPLE: usize = 8;
/// The most of a sample's least loaded peers a draw keeps by default.
pub const DEFAULT_SAMPLE_KEEP: usize = 4;
/// How often a sample is drawn again by default, in ms (`fleet_resample_ms`,
/// `--fleet-resample-ms`).
pub const DEFAULT_RESAMPLE_MS: u64 = 100;

/// `fleet_sample_keep`'s default for a sample of `sample` peers: half of it,
/// at most [`DEFAULT_SAMPLE_KEEP`], so every draw brings in a new peer.
pub fn default_sample_keep(sample: usize) -> usize {
    DEFAULT_SAMPLE_KEEP.min(sample / 2)
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

/// Longest datagram a sealed [`Report`] may take: two 64-byte addresses, the
/// numbers, the flags, two nonces and the tag fit with room.
pub const MAX_REPORT_LEN: usize = 256;
const MAGIC: &str = "hunt-fleet/3";
/// Earlier versions of the datagram: authentic ones are told apart from junk
/// (`Rejected::Version`), so a fleet mid-upgrade says so in its logs instead of
/// calling its own members malformed.
const OLDER: &[&str] = &["hunt-fleet/1", "hunt-fleet/2"];
/// Bytes of the report's MAC (HMAC-SHA256, truncated as RFC 2104 allows; 128
/// bits leave a forger one chance in 2^128 a datagram).
pub const TAG_LEN: usize = 16;

/// One agent's count as it goes to one peer, facts about its sender only:
/// who sends it (`from`: the address its reports come from, which the
/// receiver checks against the datagram's source and its own list of
/// members), who it is for (`to`: the receiver's own address, so a report
/// captured on its way to one member is taken by no other), its count,
/// whether it takes forwards at all (not draining, app up, connections to
/// spare), and what its sender asks of the receiver ([`Sub`]).
///
/// Freshness is the receiver's to prove, not the sender's clock's: each side
/// of a pair of members draws a random nonce for the other (`mine`, drawn
/// again whenever it hears the other under a new `boot`) and echoes the
/// other's (`yours`, 0 while unknown). A receiver takes a report only if it
/// echoes the nonce the receiver gave, and, among reports of one boot echoing
/// it, only a higher `seq` (a counter from 1 at each boot): so a report
/// recorded before the receiver's last draw (or its restart) is taken
/// nowhere, ever, and a restarted sender, whatever its clock, is heard one
/// round trip after it learns the receiver's nonce (docs/protocol.md § 8a).
///
/// A report never says where to send a request: a forward goes to a member of
/// the receiver's own configured peer set, at the address it configured.
/// On the wire it is sealed ([`seal`]): its text, a space, and the hex of a
/// MAC over that text under the fleet's shared key ([`open`] checks it before
/// anything else of the datagram is believed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub from: String,
    pub to: String,
    /// The sender's boot: random, drawn when it starts. Never 0.
    pub boot: u64,
    pub seq: u64,
    pub busy: u32,
    pub ready: bool,
    pub sub: Sub,
    /// The sender's nonce for this receiver: what the receiver's reports must echo. Never 0.
    pub mine: u64,
    /// The receiver's nonce for the sender, as the sender last heard it (0: not yet).
    pub yours: u64,
}

/// What a report's sender asks of its receiver.
/// Why three: the sender samples a few peers and hears only them, so it
/// subscribes to each (renewing with every report it sends there), wants
/// every change only while its offers decide by the counts (with one front
/// they are all kept by `seen`, and heartbeats keep the peer known alive),
/// and ends a subscription at once when it re-draws its sample, rather than
/// leaving the peer sending to it until the subscription would expire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    /// `0`: send me heartbeats (your count at least every heartbeat).
    Beats,
    /// `1`: send me every change of your count.
    Changes,
    /// `2`: send me nothing more.
    Leave,
}

impl Sub {
    fn wire(self) -> char {
        match self {
            Sub::Beats => '0',
            Sub::Changes => '1',
            Sub::Leave => '2',
        }
    }
}

impl fmt::Display for Report {
    /// The text the MAC covers: `hunt-fleet/3 FROM TO BOOT SEQ BUSY READY SUB MINE YOURS`,
    /// the boot and the nonces as 16 lowercase hex digits each.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{MAGIC} {} {} {:016x} {} {} {} {} {:016x} {:016x}",
            self.from,
            self.to,
            self.boot,
            self.seq,
            self.busy,
            u8::from(self.ready),
            self.sub.wire(),
            self.mine,
            self.yours
        )
    }
}

/// Why a datagram was not taken as a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// Not the shape of a sealed report (what is wrong with it).
    Malformed(String),
    /// Its MAC does not match under any key held: not from a key holder, or
    /// changed on the way.
    Unauthenticated,
    /// Authentic, but an earlier version of the datagram (which one): an
    /// agent of an older huntlb, which this one neither hears nor forwards to.
    Version(String),
}

/// A report's text and its tag, as one datagram.
pub fn seal(text: &str, tag: &[u8; TAG_LEN]) -> String {
    let mut out = Vec::with_capacity(text.len() + 1 + 2 * TAG_LEN);
    out.extend_from_slice(text.as_bytes());
    append_tag(&mut out, tag);
    String::from_utf8(out).expect("text and hex digits are UTF-8")
}

/// [`seal`] in place: a space and the tag's hex after the text already in
/// `out`, so a host that formats into a buffer it keeps allocates nothing.
pub fn append_tag(out: &mut Vec<u8>, tag: &[u8; TAG_LEN]) {
    out.push(b' ');
    for b in tag {
        out.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A lowercase hex digit's value (`HEX`'s index of it).
fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Check a datagram's tag with `verify(text, tag)` (the host's MAC, under each
/// key it accepts), then parse the text. Nothing but the length and the tag's
/// shape is looked at before the tag is checked.
pub fn open(d: &[u8], verify: impl FnOnce(&[u8], &[u8; TAG_LEN]) -> bool) -> Result<Report, Rejected> {
    open_ref(d, verify).map(|r| r.owned())
}

/// [`open`], the report borrowing its addresses from the datagram: what a
/// host's reader takes at every datagram, with no allocation when it opens.
pub fn open_ref(d: &[u8], verify: impl FnOnce(&[u8], &[u8; TAG_LEN]) -> bool) -> Result<ReportRef<'_>, Rejected> {
    if d.len() > MAX_REPORT_LEN {
        return Err(Rejected::Malformed(format!("{} bytes, more than {MAX_REPORT_LEN}", d.len())));
    }
    let hex_len = 2 * TAG_LEN;
    if d.len() < hex_len + 1 || d[d.len() - hex_len - 1] != b' ' {
        return Err(Rejected::Malformed(format!("no tag: a report ends with a space and {hex_len} hex digits")));
    }
    let (text, hex) = (&d[..d.len() - hex_len - 1], &d[d.len() - hex_len..]);
    let mut tag = [0u8; TAG_LEN];
    for (i, pair) in hex.chunks(2).enumerate() {
        match (nibble(pair[0]), nibble(pair[1])) {
            (Some(hi), Some(lo)) => tag[i] = hi << 4 | lo,
            _ => return Err(Rejected::Malformed(format!("tag: expected {hex_len} lowercase hex digits"))),
        }
    }
    if !verify(text, &tag) {
        return Err(Rejected::Unauthenticated);
    }
    // A key holder sent it: an older agent's report is said to be one.
    if let Some(old) = OLDER.iter().find(|m| text.starts_with(m.as_bytes()) && text.get(m.len()) == Some(&b' ')) {
        return Err(Rejected::Version(old.to_string()));
    }
    // Its text is still checked like any input.
    ReportRef::parse(text).map_err(Rejected::Malformed)
}

impl Report {
    /// Parse a report's text (the part the tag covers); the error says what
    /// is wrong with it.
    pub fn parse(d: &[u8]) -> Result<Report, String> {
        ReportRef::parse(d).map(|r| r.owned())
    }

    /// This report, its addresses borrowed.
    pub fn borrowed(&self) -> ReportRef<'_> {
        let Report { ref from, ref to, boot, seq, busy, ready, sub, mine, yours } = *self;
        ReportRef { from, to, boot, seq, busy, ready, sub, mine, yours }
    }
}

/// A [`Report`] whose addresses are borrowed: from a datagram ([`open_ref`],
/// [`ReportRef::parse`]), or from the sender's own texts as it writes one
/// ([`ReportRef::write_text`]). The same report, the same text: no
/// allocation on either side of the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportRef<'a> {
    pub from: &'a str,
    pub to: &'a str,
    pub boot: u64,
    pub seq: u64,
    pub busy: u32,
    pub ready: bool,
    pub sub: Sub,
    pub mine: u64,
    pub yours: u64,
}

impl<'a> ReportRef<'a> {
    /// The report, owning its addresses.
    pub fn owned(&self) -> Report {
        let ReportRef { from, to, boot, seq, busy, ready, sub, mine, yours } = *self;
        Report { from: from.to_string(), to: to.to_string(), boot, seq, busy, ready, sub, mine, yours }
    }

    /// The text the MAC covers, byte for byte what [`Report`]'s `Display`
    /// writes, appended to `out` by hand (no `fmt` machinery: the agent
    /// writes one per receiver at every change of its count).
    pub fn write_text(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.from.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.to.as_bytes());
        out.push(b' ');
        push_hex16(out, self.boot);
        out.push(b' ');
        push_decimal(out, self.seq);
        out.push(b' ');
        push_decimal(out, u64::from(self.busy));
        out.extend_from_slice(&[b' ', b'0' + u8::from(self.ready), b' ', self.sub.wire() as u8, b' ']);
        push_hex16(out, self.mine);
        out.push(b' ');
        push_hex16(out, self.yours);
    }

    /// Parse a report's text (the part the tag covers), borrowing its
    /// addresses; the error says what is wrong with it.
    pub fn parse(d: &'a [u8]) -> Result<ReportRef<'a>, String> {
        if d.len() > MAX_REPORT_LEN {
            return Err(format!("{} bytes, more than {MAX_REPORT_LEN}", d.len()));
        }
        let s = std::str::from_utf8(d).map_err(|_| "not UTF-8".to_string())?;
        // Split at spaces by hand (`str::split` is a good part of a report's
        // cost at the agent's rate); a space is ASCII, so each field is
        // whole characters.
        let mut f = [""; 10];
        let (mut fields, mut start) = (0, 0);
        for end in d.iter().enumerate().filter(|&(_, &b)| b == b' ').map(|(i, _)| i).chain([d.len()]) {
            if let Some(slot) = f.get_mut(fields) {
                *slot = &s[start..end];
            }
            (fields, start) = (fields + 1, end + 1);
        }
        let [magic, from, to, boot, seq, busy, ready, sub, mine, yours] = f;
        if fields != f.len() {
            return Err(format!("{fields} fields, expected 10: `{MAGIC} FROM TO BOOT SEQ BUSY READY SUB MINE YOURS`"));
        }
        if magic != MAGIC {
            return Err(format!("starts `{magic}`, expected `{MAGIC}`"));
        }
        for (what, a) in [("from", from), ("to", to)] {
            if !is_forward_addr(a) {
                return Err(format!("{what} `{a}`: expected host:port (a name, an IPv4 address or [IPv6]), at most 64 bytes"));
            }
        }
        let num = |what: &str, v: &str| -> Result<u64, String> {
            if v.is_empty() || v.len() > 20 || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{what} `{v}`: not a plain decimal number"));
            }
            // By hand; past u64, `parse` says why in its own words.
            v.bytes()
                .try_fold(0u64, |n, b| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))
                .map_or_else(|| v.parse::<u64>().map_err(|e| format!("{what} `{v}`: {e}")), Ok)
        };
        let hex = |what: &str, v: &str| -> Result<u64, String> {
            let n = if v.len() == 16 { v.bytes().try_fold(0u64, |n, b| Some(n << 4 | u64::from(nibble(b)?))) } else { None };
            n.ok_or_else(|| format!("{what} `{v}`: expected 16 lowercase hex digits"))
        };
        let boot = hex("boot", boot)?;
        if boot == 0 {
            return Err("boot `0000000000000000`: a boot is never 0".into());
        }
        let seq = num("seq", seq)?;
        let busy = u32::try_from(num("busy", busy)?).map_err(|_| format!("busy `{busy}`: more than a u32"))?;
        let flag = |what: &str, v: &str| match v {
            "1" => Ok(true),
            "0" => Ok(false),
            other => Err(format!("{what} `{other}`: expected 0 or 1")),
        };
        let sub = match sub {
            "0" => Sub::Beats,
            "1" => Sub::Changes,
            "2" => Sub::Leave,
            other => return Err(format!("sub `{other}`: expected 0 (beats), 1 (changes) or 2 (leave)")),
        };
        let mine = hex("mine", mine)?;
        if mine == 0 {
            return Err("mine `0000000000000000`: a sender's nonce is never 0 (0 is `not yet heard`)".into());
        }
        let yours = hex("yours", yours)?;
        Ok(ReportRef { from, to, boot, seq, busy, ready: flag("ready", ready)?, sub, mine, yours })
    }
}

/// `v` as `{:016x}` writes it.
fn push_hex16(out: &mut Vec<u8>, v: u64) {
    let mut d = [0u8; 16];
    for (i, c) in d.iter_mut().enumerate() {
        *c = HEX[((v >> (60 - 4 * i)) & 15) as usize];
    }
    out.extend_from_slice(&d);
}

/// `v` as `{}` writes it.
fn push_decimal(out: &mut Vec<u8>, mut v: u64) {
    let mut d = [0u8; 20];
    let mut i = d.len();
    loop {
        i -= 1;
        d[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&d[i..]);
}

/// An address as the tier writes it (a report's `from`, `fleet_advertise`):
/// `host:port`, at most 64 bytes, the host a DNS name, an IPv4 address or a
/// bracketed IPv6 address, the port 1 to 65535.
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
mod tests;
