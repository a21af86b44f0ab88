//! A report's text: one agent's count as it goes to one peer, and its parser.

use std::fmt;

/// Longest datagram a sealed [`Report`] may take: two 64-byte addresses, the
/// numbers, the flags, two nonces and the tag fit with room.
pub const MAX_REPORT_LEN: usize = 256;
const MAGIC: &str = "hunt-fleet/3";

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
/// On the wire it is sealed ([`seal`](fn@super::seal)): its text, a space, and the hex of a
/// MAC over that text under the fleet's shared key ([`open`](super::open) checks it before
/// anything else of the datagram is believed).
///
/// `A`, the addresses' type: a [`Report`] owns them, a [`ReportRef`] borrows
/// them; the fields, the text and the checks are the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportOf<A> {
    pub from: A,
    pub to: A,
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

pub(super) const HEX: &[u8; 16] = b"0123456789abcdef";

/// A lowercase hex digit's value (`HEX`'s index of it).
pub(super) fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
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

/// A report owning its addresses: what a host keeps.
pub type Report = ReportOf<String>;

/// A [`Report`] whose addresses are borrowed: from a datagram ([`open_ref`](super::open_ref),
/// `ReportRef::parse`), or from the sender's own texts as it writes one
/// (`ReportRef::write_text`). The same report, the same text: no
/// allocation on either side of the wire.
pub type ReportRef<'a> = ReportOf<&'a str>;

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
        Self::from_fields(fields, f, decimal, hex16)
    }

    /// A report from its text's fields (`fields`: how many the text had, the
    /// first ten in `f`), its numbers read by `num` (decimal) and `hex` (16
    /// lowercase hex digits), each saying what is wrong in its own words: the
    /// checks shared by any way of splitting a text and reading its numbers
    /// (the tests hold std's ways to the hand-written ones).
    pub(super) fn from_fields(
        fields: usize,
        f: [&'a str; 10],
        num: impl Fn(&str, &str) -> Result<u64, String>,
        hex: impl Fn(&str, &str) -> Result<u64, String>,
    ) -> Result<ReportRef<'a>, String> {
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

/// A report's decimal field (`what`: its name, for the error), by hand: past
/// u64, `parse` says why in its own words.
fn decimal(what: &str, v: &str) -> Result<u64, String> {
    if v.is_empty() || v.len() > 20 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} `{v}`: not a plain decimal number"));
    }
    v.bytes()
        .try_fold(0u64, |n, b| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))
        .map_or_else(|| v.parse::<u64>().map_err(|e| format!("{what} `{v}`: {e}")), Ok)
}

/// A report's 16-hex-digit field (`what`: its name, for the error).
fn hex16(what: &str, v: &str) -> Result<u64, String> {
    let n = if v.len() == 16 { v.bytes().try_fold(0u64, |n, b| Some(n << 4 | u64::from(nibble(b)?))) } else { None };
    n.ok_or_else(|| format!("{what} `{v}`: expected 16 lowercase hex digits"))
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
