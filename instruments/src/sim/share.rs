//! Ways to share counts at a fraction of the shipped tier's datagrams, each
//! off by default: `--fleet-share SPEC` (huntlb-sim), comma
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
//!
//! Against herding and for a view larger than the messages (after the
//! diagnosis at ρ 0.95 on 96 backends; each off by default):
//! * `spread=J` (any view): an agent that forwards picks at random among the
//!   J peers it sees lowest below its own count, not always the least
//!   (power-of-choices within the view): agents that hear the same least do
//!   not all send to it within one datagram's delay.
//! * `full` (with `level=H`): a count heard at the cap (H+1: "H+1 or more",
//!   the level's only word for it) is no forward target: an agent forwards
//!   only to a peer it knows below the cap (a free core when H+1 is the
//!   cores), plus its own forwards there since (JIQ with a threshold over the
//!   sample, as sparse feedback with a threshold).
//! * `memory=M[,age=MS]` (with `--fleet-probe D`, JSQ(d) with memory): an
//!   agent keeps the M lowest answers of its earlier pulls (its own forwards
//!   there added) for at most `age` ms (default 10) and decides over them and
//!   the D fresh answers: a larger view at the pull's 2D datagrams.
//!
//! Instead of counts, **stealing** (`steal=C[,tries=T]`, late binding): no
//! count is sent and no offer forwarded on arrival; an agent lets at most C
//! requests into its app and holds the rest (FIFO, at most the backlog); an
//! agent whose app has a free slot (below C, nothing held) asks one peer at
//! random for a held request ("give me one": a datagram), which answers with
//! its oldest held request (a forward) or "none" (a datagram), upon which the
//! asker tries another, T more times at most. With `hold=H` (at least C) the
//! app takes up to H, shared by its cores, and only the rest is held; a slot
//! below C still asks. The decision is made where the
//! free core is, by its own count, so there is nothing stale to herd on.

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
    /// Forward at random among this many lowest peers below the own count (0, 1: the least).
    pub spread: usize,
    /// With `level`: a count heard at the cap is no forward target.
    pub full: bool,
    /// Pull only: answers of earlier pulls kept (0: none), and for how long.
    pub memory: usize,
    pub memory_s: f64,
    /// Stealing: requests an agent lets into its app (None: off).
    pub steal: Option<u32>,
    /// Stealing: more peers asked after a "none" (default [`STEAL_TRIES`]).
    pub tries: u32,
    /// Stealing: the app takes requests up to this many (at least C; None: C),
    /// shared by its cores; above it they are held.
    pub hold: Option<u32>,
}

/// Peers a free slot asks after the first said "none", unless `tries=T` says otherwise.
pub const STEAL_TRIES: u32 = 1;

/// How long a remembered answer is believed unless `age=MS` says otherwise.
pub const MEMORY_AGE_S: f64 = 0.01;

/// `spread=J`: where an agent with count `busy` forwards, given that the
/// policy crate's rule chose to forward (to the least): uniformly among the
/// `j` peers of `counts` it sees lowest that are below `busy` (ties for the
/// j-th place drawn at random, as [`super::pick`]'s least-of-K). Why below
/// `busy`: a forward to a peer no less loaded than this backend is what the
/// rule exists to avoid; with `j` 0 or 1 this is the least, as the rule says.
pub fn spread_pick<R: rand::Rng + ?Sized>(counts: &[u32], busy: u32, j: usize, rng: &mut R) -> Option<usize> {
    let below: Vec<usize> = (0..counts.len()).filter(|&i| counts[i] < busy).collect();
    if below.is_empty() {
        return None;
    }
    let view: Vec<u32> = below.iter().map(|&i| counts[i]).collect();
    Some(below[super::pick(super::Rule::Least { k: j.max(1) }, &view, None, rng)])
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
        let mut out = Share { expire_s: TOKEN_EXPIRE_S, memory_s: MEMORY_AGE_S, tries: STEAL_TRIES, ..Share::default() };
        if s.is_empty() {
            return Ok(out);
        }
        let (mut expire, mut age, mut tries) = (false, false, false);
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
                "steal" => match whole()? {
                    0 => return Err("steal: C from 1".into()),
                    c => out.steal = Some(c),
                },
                "hold" => out.hold = Some(whole()?),
                "tries" => {
                    out.tries = whole()?;
                    tries = true;
                }
                "spread" => out.spread = whole()? as usize,
                "full" if v.is_empty() => out.full = true,
                "memory" => out.memory = whole()? as usize,
                "age" => {
                    out.memory_s = ms()?;
                    age = true;
                }
                "expire" => {
                    out.expire_s = ms()?;
                    expire = true;
                }
                _ => return Err(format!("unknown key `{kv}` (expected level=H, delta=D, batch=MS, piggy, tokens=L, expire=MS, spread=J, full, memory=M, age=MS, steal=C, tries=T)")),
            }
        }
        if out.tokens.is_some() && (out.level.is_some() || out.delta > 1 || out.batch_s > 0.0) {
            return Err("tokens replace the pushed counts: not with level, delta or batch".into());
        }
        if expire && out.tokens.is_none() {
            return Err("expire: only with tokens".into());
        }
        if out.full && out.level.is_none() {
            return Err("full: only with level=H (the cap it refuses to forward to)".into());
        }
        if age && out.memory == 0 {
            return Err("age: only with memory=M".into());
        }
        if tries && out.steal.is_none() {
            return Err("tries: only with steal=C".into());
        }
        if out.steal.is_some() && s.split(',').any(|kv| !kv.starts_with("steal=") && !kv.starts_with("tries=") && !kv.starts_with("hold=")) {
            return Err("steal replaces counts and forwards: only with tries=T and hold=H".into());
        }
        if out.hold.is_some_and(|h| out.steal.is_none_or(|c| h < c)) {
            return Err("hold: only with steal=C, and at least C".into());
        }
        if out.memory > 0 && out.tokens.is_some() {
            return Err("memory: remembers pulled answers, not with tokens".into());
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
        if self.full {
            keys.push("full".into());
        }
        if let Some(c) = self.steal {
            keys.push(format!("steal={c}"));
            keys.push(format!("tries={}", self.tries));
            if let Some(h) = self.hold {
                keys.push(format!("hold={h}"));
            }
        }
        if self.spread > 1 {
            keys.push(format!("spread={}", self.spread));
        }
        if self.memory > 0 {
            keys.push(format!("memory={}", self.memory));
            keys.push(format!("age={}", self.memory_s * 1e3));
        }
        write!(f, "{}", keys.join(","))
    }
}
