//! Ways to share counts at a fraction of the shipped tier's datagrams (issue
//! 42), each off by default: `--fleet-share SPEC` (huntlb-sim), comma
//! separated keys.
//!
//! Over the pushed sample (`--fleet-sample K`), filters on what a member sends
//! its listeners (a heartbeat, the member's true count, still goes after
//! [`super::HEARTBEAT_S`] of silence):
//! * `level=H`: a change goes out only if it changes what a listener would
//!   see of the count capped at H+1 (the count becomes, or stops being, one
//!   of 0..=H): a count above H+1 moves no decision of an agent whose own
//!   count is at most H+1 and only delays a busier one's.
//! * `delta=D`: only a change of at least D from the count last sent.
//! * `batch=T` (ms): at most one count every T ms, the last change of the
//!   interval (coalesced).
//! * `piggy`: a forward's answer (the peer's `100 Continue`) carries the
//!   peer's count after it took the forward: the forwarder's view of its
//!   target is exact a round trip later, at no datagram.
//!
//! Instead of the sample, **tokens** (`tokens=L`, JIQ with a threshold): a
//! server with count c below L keeps L - c tokens out, each a datagram to one
//! agent drawn at random among those deciding by counts ("send me one: I hold
//! c"); an agent not kept by the front's count forwards to the token of least
//! count below its own (the policy crate's rule over its tokens) and uses it
//! up; a token lapses after `expire=E` ms (default 20). One token, one agent:
//! no two agents herd on one server's word. With `piggy`, a token the server
//! owes right after taking a forward rides on that forward's answer.

use std::fmt;
use std::str::FromStr;

/// See the module docs; `Share::default()` is the shipped tier.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Share {
    pub level: Option<u32>,
    /// 0: every change (as 1).
    pub delta: u32,
    /// 0: no coalescing.
    pub batch_s: f64,
    pub piggy: bool,
    pub tokens: Option<u32>,
    /// Token lifetime (tokens only).
    pub expire_s: f64,
}

/// A token's lifetime unless `expire=E` says otherwise.
pub const TOKEN_EXPIRE_S: f64 = 0.02;

impl Share {
    /// A filter on the pushed sample's counts is on.
    pub fn filtered(&self) -> bool {
        self.tokens.is_none() && (self.level.is_some() || self.delta > 1 || self.batch_s > 0.0 || self.piggy)
    }

    /// Whether a count `now` goes out to the listeners that last heard
    /// `last` (ignoring `batch`, which only delays it).
    pub fn worth_sending(&self, last: u32, now: u32) -> bool {
        let capped = |c: u32| self.level.map_or(c, |h| c.min(h.saturating_add(1)));
        let by_level = self.level.is_some() && capped(last) != capped(now);
        let by_delta = self.delta > 1 && last.abs_diff(now) >= self.delta;
        if self.level.is_none() && self.delta <= 1 {
            last != now
        } else {
            by_level || by_delta
        }
    }
}

impl FromStr for Share {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut out = Share { expire_s: TOKEN_EXPIRE_S, ..Share::default() };
        if s.is_empty() {
            return Ok(out);
        }
        let mut expire = false;
        for kv in s.split(',') {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let whole = || v.parse::<u32>().map_err(|_| format!("{k}: a whole number, not `{v}`"));
            let ms = || match v.parse::<f64>() {
                Ok(x) if x > 0.0 && x.is_finite() => Ok(x / 1e3),
                _ => Err(format!("{k}: a positive number of ms, not `{v}`")),
            };
            match k {
                "level" => out.level = Some(whole()?),
                "delta" => out.delta = whole()?,
                "batch" => out.batch_s = ms()?,
                "piggy" if v.is_empty() => out.piggy = true,
                "tokens" => match whole()? {
                    0 => return Err("tokens: L from 1".into()),
                    l => out.tokens = Some(l),
                },
                "expire" => {
                    out.expire_s = ms()?;
                    expire = true;
                }
                _ => return Err(format!("unknown key `{kv}` (expected level=H, delta=D, batch=MS, piggy, tokens=L, expire=MS)")),
            }
        }
        if out.tokens.is_some() && (out.level.is_some() || out.delta > 1 || out.batch_s > 0.0) {
            return Err("tokens replace the pushed counts: not with level, delta or batch".into());
        }
        if expire && out.tokens.is_none() {
            return Err("expire: only with tokens".into());
        }
        Ok(out)
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut keys: Vec<String> = Vec::new();
        if let Some(l) = self.tokens {
            keys.push(format!("tokens={l}"));
            keys.push(format!("expire={}", self.expire_s * 1e3));
        }
        if let Some(h) = self.level {
            keys.push(format!("level={h}"));
        }
        if self.delta > 1 {
            keys.push(format!("delta={}", self.delta));
        }
        if self.batch_s > 0.0 {
            keys.push(format!("batch={}", self.batch_s * 1e3));
        }
        if self.piggy {
            keys.push("piggy".into());
        }
        write!(f, "{}", keys.join(","))
    }
}
