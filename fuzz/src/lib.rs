//! The fuzz targets' bodies, written once. `fuzz_targets/*.rs` hand them
//! libFuzzer's inputs (`make fuzz`, nightly); `policy/tests/fuzz_replay.rs`
//! includes this file and replays the committed corpora plus seeded random
//! inputs through them on stable (`make test`). Each body drives the real code
//! of `huntlb-policy` with arbitrary bytes and panics when an invariant fails.
//!
//! * [`spec`]: `Policy::from_str`; a spec that parses prints (`Display`) to one
//!   that parses to the same policy, and an error names a key.
//! * [`settings`]: `RawSettings::validate` and `parse_workers`.
//! * [`policy_fsm`]: a sequence of tries through `Policy::decide`,
//!   `SharedPolicy::{decide, admit}` and `admission::decide_in`.
//! * [`headers`]: the agent's (and the Wasm sidecar's) request classification,
//!   `protocol::{classify, per_try_mark, is_token, is_hunt_header, carry, offerable}`.
//! * [`fleet_report`]: the forwarding tier's sealed datagram,
//!   `forward::{open, seal, Report::parse}`, with a keyed stand-in for the
//!   agent's HMAC (the MAC itself is ring's): nothing of a datagram is parsed
//!   unless its tag checks, and what opens prints and seals back to itself.

use huntlb_policy::admission::{decide_in, StateCell, Write};
use huntlb_policy::protocol::{self, Body, Field, Hold, Mark, NotOffered};
use huntlb_policy::settings::{parse_workers, DEFAULT_POLICY, DEFAULT_WORKERS, MAX_WORKERS};
use huntlb_policy::{Decision, Gates, Load, Policy, RawSettings, Reason, SharedPolicy, State, Try, Verdict};
use std::cell::Cell;

/// Every target by name (the name is its `fuzz/corpus/` directory).
pub const TARGETS: [(&str, fn(&[u8])); 5] =
    [("spec", spec), ("settings", settings), ("policy_fsm", policy_fsm), ("headers", headers), ("fleet_report", fleet_report)];

/// Fuzz bytes read as smaller values; past the end, zeros.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(std::array::from_fn(|_| self.byte()))
    }
    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
    fn rest(&mut self) -> &'a [u8] {
        self.bytes(usize::MAX)
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

// ---------------------------------------------------------------- spec

/// The keys a spec error may name besides an unknown key as written: `policy`,
/// `c`, and the dynamic keys the parser itself lists when it meets an unknown
/// one (so a key added to the grammar is known here without an edit).
fn spec_keys() -> &'static [String] {
    static KEYS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    KEYS.get_or_init(spec_keys_from_parser)
}

fn spec_keys_from_parser() -> Vec<String> {
    let e = "dynamic:?=1".parse::<Policy>().expect_err("`?` is no key");
    let list = e.reason.split_once("(expected ").and_then(|(_, l)| l.strip_suffix(')'));
    let list = list.unwrap_or_else(|| panic!("the unknown-key error no longer lists the keys: {e}"));
    ["policy", "c"].into_iter().map(String::from).chain(list.split(", ").map(String::from)).collect()
}
/// `spec.rs`'s bounds, as `docs/protocol.md` states them.
const MAX_C: u32 = 65_535;
const MAX_WINDOW: u16 = 10_000;

pub fn spec(data: &[u8]) {
    check_spec(&String::from_utf8_lossy(data));
}

/// Parse `text` as a spec and check what came out; the policy if it parsed.
fn check_spec(text: &str) -> Option<Policy> {
    match text.parse::<Policy>() {
        Ok(p) => {
            let canonical = p.to_string();
            let again: Policy = canonical
                .parse()
                .unwrap_or_else(|e| panic!("{text:?} parsed to {p:?}, but its Display {canonical:?} does not: {e}"));
            assert_eq!(again, p, "{text:?} -> {canonical:?} is another policy");
            assert_eq!(again.to_string(), canonical, "Display is not canonical");
            match p {
                Policy::Always => {}
                Policy::Static { c } => assert!(c <= MAX_C, "{text:?}: c {c}"),
                Policy::Dynamic(d) => {
                    assert!((1..=MAX_WINDOW).contains(&d.window), "{text:?}: window {}", d.window);
                    assert!(0.0 <= d.low && d.low < d.high && d.high <= 1.0, "{text:?}: low {} high {}", d.low, d.high);
                    assert!(d.c0 <= MAX_C && d.c_min <= MAX_C, "{text:?}: c0 {} c_min {}", d.c0, d.c_min);
                    assert!(d.seen_margin.map_or(true, |k| k <= MAX_C), "{text:?}: seen_margin {:?}", d.seen_margin);
                    if let Some(m) = d.c_max {
                        assert!(m <= MAX_C && d.c0 <= m && d.c_min <= m, "{text:?}: c0 {} c_min {} c_max {m}", d.c0, d.c_min);
                    }
                }
            }
            Some(p)
        }
        Err(e) => {
            // Named: a key of the grammar, an old name of one the crate still
            // takes (it warns about it: `slack`), or an unknown key as written.
            let named = spec_keys().contains(&e.key)
                || huntlb_policy::spec_warning(&format!("dynamic:{}=0", e.key)).is_some()
                || (e.reason.starts_with("unknown key") && text.contains(e.key.as_str()));
            assert!(named, "{text:?}: error names no key: {e:?}");
            assert!(!e.reason.is_empty(), "{text:?}: error without a reason");
            assert!(e.to_string().contains(&format!("`{}`", e.key)));
            None
        }
    }
}

// ---------------------------------------------------------------- settings

/// Layout: flags (bit 0 policy given, bit 1 workers given, bit 2 id given,
/// bit 3 workers as a number rather than text), 8 bytes of a number of
/// workers, then `policy \n workers-text \n id \n default-id`.
pub fn settings(data: &[u8]) {
    let mut input = Input(data);
    let flags = input.byte();
    let number = input.u64();
    let text = String::from_utf8_lossy(input.rest());
    let mut parts = text.splitn(4, '\n');
    let mut part = || parts.next().unwrap_or("");
    let (policy, workers_text, id, default_id) = (part(), part(), part(), part());

    // parse_workers: digits only, at most 9 of them; the error names `workers`.
    let parsed = parse_workers(workers_text);
    let digits = !workers_text.is_empty() && workers_text.len() <= 9 && workers_text.bytes().all(|b| b.is_ascii_digit());
    match &parsed {
        Ok(n) => {
            assert!(digits, "parse_workers({workers_text:?}) = {n}");
            assert_eq!(Some(*n), workers_text.parse::<u64>().ok());
        }
        Err(e) => {
            assert!(!digits, "parse_workers({workers_text:?}) failed: {e}");
            assert_eq!(e.key, "workers");
        }
    }

    let workers = match (flags & 2 != 0, flags & 8 != 0) {
        (false, _) => None,
        (true, true) => Some(number),
        (true, false) => Some(parsed.unwrap_or(number)),
    };
    let raw = RawSettings { policy: (flags & 1 != 0).then_some(policy), workers, id: (flags & 4 != 0).then_some(id) };
    let want_policy = check_spec(raw.policy.unwrap_or(DEFAULT_POLICY));
    let want_workers = raw.workers.map_or(Some(DEFAULT_WORKERS), |w| (1..=MAX_WORKERS).contains(&w).then_some(w as u32));
    let want_id = raw.id.unwrap_or(default_id);
    let id_ok = protocol::is_token(want_id.as_bytes());
    match raw.validate(default_id) {
        Ok(s) => {
            assert_eq!(Some(s.policy), want_policy, "{raw:?}");
            assert_eq!(Some(s.workers), want_workers, "{raw:?}");
            assert!(id_ok && s.id == want_id, "{raw:?}: id {:?}", s.id);
        }
        Err(e) => {
            // The key it names is one that is wrong.
            let wrong = match e.key {
                "policy" => want_policy.is_none(),
                "workers" => want_workers.is_none(),
                "id" => !id_ok,
                other => panic!("{raw:?}: unknown settings key {other:?}"),
            };
            assert!(wrong, "{raw:?} (default id {default_id:?}): `{}` is valid, yet: {e}", e.key);
        }
    }
}

// ---------------------------------------------------------------- policy state machine

/// A policy from a few bytes, through the spec parser (only valid policies:
/// an invalid one, e.g. window 0, is the parser's to reject).
fn policy_from(input: &mut Input) -> Option<Policy> {
    let kind = input.byte();
    let spec = match kind % 4 {
        0 => "always".to_string(),
        1 => format!("static:{}", input.byte()),
        2 => "dynamic".to_string(),
        _ => {
            // Mostly small windows, where c moves; sometimes any.
            let window = if kind & 4 == 0 { 1 + u16::from(input.byte() % 32) } else { input.u16() };
            let ratio = |b: u8| {
                let r = b % 101;
                format!("{}.{:02}", r / 100, r % 100)
            };
            let (low, high) = (ratio(input.byte()), ratio(input.byte()));
            let mut s = format!("dynamic:window={window},low={low},high={high},c0={}", input.byte() % 80);
            if kind & 8 != 0 {
                s += &format!(",c_max={}", input.byte() % 80);
            }
            if kind & 16 != 0 {
                s += &format!(",c_min={}", input.byte() % 80);
            }
            if kind & 32 != 0 {
                s += &format!(",seen_margin={}", input.byte() % 8);
            }
            s
        }
    };
    check_spec(&spec)
}

/// A state cell that cannot be read (`None`) or written.
struct Broken(Option<State>);

impl StateCell for Broken {
    type Version = ();
    fn read(&self) -> Option<(State, ())> {
        self.0.map(|s| (s, ()))
    }
    fn write(&self, _: State, _: ()) -> Write {
        Write::Failed
    }
}

/// A state cell whose first `conflicts` writes find that someone wrote first.
struct Contended {
    state: Cell<State>,
    conflicts: Cell<usize>,
}

impl StateCell for Contended {
    type Version = ();
    const MAX_CONFLICTS: usize = 4;
    fn read(&self) -> Option<(State, ())> {
        Some((self.state.get(), ()))
    }
    fn write(&self, state: State, _: ()) -> Write {
        if self.conflicts.get() > 0 {
            self.conflicts.set(self.conflicts.get() - 1);
            return Write::Conflict;
        }
        self.state.set(state);
        Write::Done
    }
}

/// Layout: a policy (see [`policy_from`]), then steps of 5 bytes:
/// `op` (bit 0 final, bits 1-3 the gates draining/app_down/at_capacity,
/// bits 4-5 the path: `SharedPolicy::decide`, `SharedPolicy::admit`, a broken
/// cell, a contended cell; bit 6 huge worker counts), busy, workers, extra,
/// and the front's `hunt-seen` (below 0x40 none, 0xff `u32::MAX`).
pub fn policy_fsm(data: &[u8]) {
    let mut input = Input(data);
    let Some(policy) = policy_from(&mut input) else { return };
    let shared = SharedPolicy::new(policy);
    assert_eq!(*shared.policy(), policy);
    let init = policy.initial_state();
    assert_eq!(State::from_bits(init.to_bits()), init);
    let mut state = init;
    // The most c may ever be: its start (max(c0, c_min)), or the highest
    // ceiling (min(workers, c_max)) seen.
    let mut bound = init.c;
    while !input.is_empty() {
        let (op, busy_b, workers_b, extra, seen_b) = (input.byte(), input.byte(), input.byte(), input.byte(), input.byte());
        let try_ = if op & 1 == 0 { Try::Offer } else { Try::Final };
        let gates = Gates { draining: op & 2 != 0, app_down: op & 4 != 0, at_capacity: op & 8 != 0 };
        let busy = if busy_b & 0x80 == 0 { u32::from(busy_b) } else { u32::MAX - u32::from(busy_b & 0x7f) };
        let workers = if op & 0x40 == 0 { u32::from(workers_b) } else { u32::MAX - u32::from(workers_b) };
        let seen = match seen_b {
            0..=0x3f => None,
            0xff => Some(u32::MAX),
            b => Some(u32::from(b & 0x3f)),
        };
        let load = Load { busy, workers, seen };
        // SR_dyn's seen_margin: the front's count is right, so the offer is accepted
        // outside the window.
        let margin_accepts = match (policy, seen) {
            (Policy::Dynamic(p), Some(s)) => p.seen_margin.is_some_and(|k| busy <= s.saturating_add(k)),
            _ => false,
        };

        assert_eq!(shared.state(), state, "the shared state is the pure one");
        assert_eq!(State::from_bits(state.to_bits()), state);
        let busy_now = policy.is_busy(state, load);
        assert_eq!(busy_now, !matches!(policy, Policy::Always) && busy >= state.c);
        assert_eq!(shared.is_busy(load), busy_now);

        let out = policy.decide(state, try_, load);
        assert_eq!(policy.decide(state, try_, load), out, "decide is pure");
        if try_ == Try::Final || margin_accepts {
            assert_eq!(out, huntlb_policy::Outcome { decision: Decision::Accept, state }, "{try_:?} (seen_margin {margin_accepts})");
        }

        let before = state;
        let mut decided = false; // the policy was asked, and its state moved to out.state
        match (op >> 4) & 3 {
            0 => {
                assert_eq!(shared.decide(try_, load), out.decision);
                decided = true;
            }
            1 => {
                let verdict = shared.admit(try_, gates, load);
                let gate = [(gates.draining, Reason::Draining), (gates.app_down, Reason::AppDown), (gates.at_capacity, Reason::Overload)]
                    .into_iter()
                    .find_map(|(closed, why)| closed.then_some(why));
                let want = match (try_, gate) {
                    (Try::Final, _) if gates.at_capacity => Verdict::Overloaded,
                    (Try::Final, _) => Verdict::Accept,
                    (Try::Offer, Some(why)) => Verdict::Refuse(why),
                    (Try::Offer, None) => {
                        decided = true;
                        match out.decision {
                            Decision::Accept => Verdict::Accept,
                            Decision::Refuse => Verdict::Refuse(Reason::Policy),
                        }
                    }
                };
                assert_eq!(verdict, want, "{gates:?} {try_:?} {load:?}");
                assert!(!matches!(verdict, Verdict::Refuse(_)) || try_ == Try::Offer, "a final was refused");
                assert!(!Reason::ALL.iter().any(|r| r.name().is_empty()));
            }
            2 => {
                // A cell that fails: never refuse, and nothing to advance.
                let cell = Broken((extra & 1 != 0).then_some(state));
                assert_eq!(decide_in(&policy, &cell, try_, load), if matches!(policy, Policy::Dynamic(_)) {
                    Decision::Accept
                } else {
                    out.decision
                });
            }
            _ => {
                // A contended cell: retried up to its bound, then accepted.
                let conflicts = usize::from(extra % 6);
                let cell = Contended { state: Cell::new(state), conflicts: Cell::new(conflicts) };
                let d = decide_in(&policy, &cell, try_, load);
                let stateful = matches!(policy, Policy::Dynamic(_)) && try_ == Try::Offer;
                if stateful && conflicts >= Contended::MAX_CONFLICTS {
                    assert_eq!(d, Decision::Accept, "gave up yet refused");
                    assert_eq!(cell.state.get(), state);
                } else {
                    assert_eq!(d, out.decision);
                    assert_eq!(cell.state.get(), if stateful { out.state } else { state });
                }
            }
        }
        if decided {
            state = out.state;
        }
        assert_eq!(shared.state(), state);

        // The state's invariants.
        match policy {
            Policy::Always | Policy::Static { .. } => assert_eq!(state, init, "a stateless policy's state moved"),
            Policy::Dynamic(p) => {
                let ceiling = p.c_max.map_or(workers, |m| m.min(workers));
                bound = bound.max(ceiling);
                assert!(state.attempt < p.window, "{state:?} window {}", p.window);
                assert!(state.c >= p.c_min, "c {} below c_min {}", state.c, p.c_min);
                assert!(state.accepted <= state.attempt + 1, "{state:?}");
                if state.c != before.c {
                    assert!(decided && before.attempt + 1 == p.window, "c moved mid-window: {before:?} -> {state:?}");
                    assert_eq!(state.attempt, 0);
                    let up = state.c == before.c + 1 && state.c <= ceiling;
                    let down = state.c + 1 == before.c;
                    assert!(up || down, "{before:?} -> {state:?} (ceiling {ceiling})");
                }
                assert!(state.c <= bound, "c {} above every bound (c0 {}, ceilings <= {bound})", state.c, p.c0);
            }
        }
        if decided && try_ == Try::Offer && !margin_accepts && !matches!(policy, Policy::Always) {
            assert_eq!(out.decision.is_accept(), busy < state.c, "not SR_c on the c in effect: {state:?} busy {busy}");
        }
    }
}

// ---------------------------------------------------------------- headers

/// RFC 9110 `tchar`.
fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A header as the agent's `field()` reports it: absent, one value, repeated.
fn field<'a>(input: &mut Input<'a>) -> Field<'a> {
    match input.byte() % 4 {
        0 => Field::Absent,
        1 => Field::Repeated,
        _ => {
            let len = usize::from(input.byte() % 80);
            Field::One(input.bytes(len))
        }
    }
}

/// Layout: `hunt-offer`, `hunt-target`, `x-envoy-attempt-count`, `hunt-seen`
/// (each a tag byte: absent, repeated or one value with a length byte), an app
/// status (2 bytes), a replay limit (8), a body (tag + 8), a held refusal's
/// progress (8 + flags), then header names separated by `\n`.
pub fn headers(data: &[u8]) {
    let mut input = Input(data);
    let (offer, target, attempt, seen) = (field(&mut input), field(&mut input), field(&mut input), field(&mut input));

    for f in [offer, target, attempt, seen] {
        if let Field::One(v) = f {
            let want = (1..=protocol::MAX_MARK_LEN).contains(&v.len()) && v.iter().all(|&b| tchar(b));
            assert_eq!(protocol::is_token(v), want, "is_token({v:?})");
        }
    }

    // The agent's and the Wasm sidecar's call: hunt-target, else Envoy's attempt count.
    let mark_field = protocol::per_try_mark(target, attempt);
    assert_eq!(mark_field, if target == Field::Absent { attempt } else { target });
    let mark = protocol::classify(offer, mark_field);
    let ok = |f: Field| match f {
        Field::Absent => true,
        Field::One(v) => protocol::is_token(v),
        Field::Repeated => false,
    };
    match mark {
        Mark::Offer => assert!(
            matches!((offer, mark_field), (Field::One(o), Field::One(t)) if o == t && protocol::is_token(o)),
            "offer from {offer:?} {mark_field:?}"
        ),
        Mark::Plain => assert!(offer == Field::Absent && mark_field == Field::Absent),
        Mark::Final => {
            assert!(ok(offer) && ok(mark_field), "final from {offer:?} {mark_field:?}");
            assert!(offer != Field::Absent || mark_field != Field::Absent);
            assert!(!matches!((offer, mark_field), (Field::One(o), Field::One(t)) if o == t));
        }
        Mark::Malformed => assert!(!(ok(offer) && ok(mark_field)), "malformed from {offer:?} {mark_field:?}"),
    }
    assert_eq!(mark.as_try() == Try::Offer, mark == Mark::Offer, "only an offer may be refused");

    // hunt-seen: once, 1-9 digits, else no value at all.
    let want = match seen {
        Field::One(v) if (1..=protocol::MAX_SEEN_DIGITS).contains(&v.len()) && v.iter().all(u8::is_ascii_digit) => {
            std::str::from_utf8(v).ok().and_then(|t| t.parse::<u32>().ok())
        }
        _ => None,
    };
    assert_eq!(protocol::parse_seen(seen), want, "hunt-seen {seen:?}");

    // An app's response status on its way to the front: to a front that retries
    // by status alone (named by hunt-target), 425 is the agent's alone.
    let status = input.u16();
    let named_by_target = target != Field::Absent;
    let (sent, app_status) = protocol::carry(status, named_by_target);
    if named_by_target {
        assert_ne!(sent, protocol::BUSY_STATUS, "an app's {status} went out as a refusal");
    }
    match app_status {
        Some(s) => {
            assert!(status == protocol::BUSY_STATUS && named_by_target && sent == protocol::CARRIER_STATUS);
            assert_eq!(s.parse::<u16>().ok(), Some(status));
        }
        None => assert_eq!(sent, status),
    }

    // Whether a front may offer a request with this body.
    let limit = input.u64();
    let body = match input.byte() % 4 {
        0 => Body::Empty,
        1 => Body::Length(input.u64()),
        2 => Body::Unknown,
        _ => Body::Held,
    };
    let r = protocol::offerable(body, limit);
    match r {
        Ok(()) => assert!(matches!(body, Body::Empty | Body::Held) || matches!(body, Body::Length(n) if n <= limit)),
        Err(NotOffered::TooBig) => assert!(matches!(body, Body::Length(n) if n > limit)),
        Err(NotOffered::UnknownLength) => assert_eq!(body, Body::Unknown),
    }
    if let Err(why) = r {
        assert!(!why.name().is_empty());
    }

    // A held refusal goes only once the proxy holds the whole body; past its
    // copy, or waited out, the offer is accepted.
    let read = input.u64() % limit.saturating_add(2).max(1);
    let flags = input.byte();
    let (ended, waited_out) = (flags & 1 != 0, flags & 2 != 0);
    let hold = protocol::held_refusal(read, ended, waited_out, limit);
    match hold {
        Hold::Refuse => assert!(ended && read <= limit, "refused: read {read} of {limit}, ended {ended}"),
        Hold::Wait => assert!(!ended && !waited_out && read <= limit),
        Hold::Accept => assert!(read > limit || (waited_out && !ended)),
    }
    assert!(!hold.name().is_empty());

    // Header names the agent strips (requests and app responses) and the Wasm
    // sidecar strips: `hunt` and `hunt-*`, any case.
    let names = String::from_utf8_lossy(input.rest());
    for name in names.split('\n') {
        let lower = name.to_ascii_lowercase();
        let want = lower == "hunt" || lower.starts_with("hunt-");
        assert_eq!(protocol::is_hunt_header(name), want, "is_hunt_header({name:?})");
    }
}

/// A keyed stand-in for the agent's HMAC-SHA256: FNV-1a over a key and the
/// text, spread to 16 bytes. Not a MAC; it lets the fuzzer reach both sides of
/// the check (an input that carries the right tag, and one that does not).
fn toy_tag(text: &[u8]) -> [u8; huntlb_policy::forward::TAG_LEN] {
    let mut out = [0u8; huntlb_policy::forward::TAG_LEN];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ i as u64;
        for &b in b"fuzz-key".iter().chain(text) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        chunk.copy_from_slice(&h.to_le_bytes()[..chunk.len()]);
    }
    out
}

/// The first byte picks how the rest is used: as a whole datagram (mostly
/// rejected), or as a report's text sealed with the right tag (so the parser
/// behind the check is reached), with one byte then perhaps flipped.
pub fn fleet_report(data: &[u8]) {
    use huntlb_policy::forward::{open, open_ref, seal, Rejected, Report, MAX_REPORT_LEN};
    let Some((&mode, rest)) = data.split_first() else { return };
    let datagram: Vec<u8> = match mode % 3 {
        0 => rest.to_vec(),
        _ => {
            let text = String::from_utf8_lossy(rest).into_owned();
            let mut d = seal(&text, &toy_tag(text.as_bytes())).into_bytes();
            if mode % 3 == 2 && !d.is_empty() {
                let i = usize::from(mode) % d.len();
                d[i] ^= 1;
            }
            d
        }
    };
    let mut verified = None;
    let got = open(&datagram, |text, tag| {
        verified = Some(text.to_vec());
        *tag == toy_tag(text)
    });
    match &got {
        Ok(r) => {
            // Opened: the tag was checked over exactly the bytes before it.
            let text = verified.clone().expect("opened without the tag being checked");
            assert_eq!(datagram.len(), text.len() + 1 + 2 * huntlb_policy::forward::TAG_LEN);
            assert_eq!(&datagram[..text.len()], &text[..]);
            // What opened prints as a report that parses to itself, and
            // sealed again, opens to the same report.
            let printed = r.to_string();
            assert_eq!(Report::parse(printed.as_bytes()).as_ref(), Ok(r), "{printed}");
            // The hand-written text (the agent's sender) is Display's, and the
            // borrowing opener (the agent's reader) opens the same report.
            let mut written = Vec::new();
            r.borrowed().write_text(&mut written);
            assert_eq!(written, printed.as_bytes());
            assert_eq!(open_ref(&datagram, |t, tag| *tag == toy_tag(t)).map(|b| b.owned()).as_ref(), Ok(r));
            let again = seal(&printed, &toy_tag(printed.as_bytes()));
            assert!(again.len() <= MAX_REPORT_LEN || printed.len() > text.len(), "a report that fit no longer fits: {again}");
            assert_eq!(open(again.as_bytes(), |t, tag| *tag == toy_tag(t)).as_ref(), Ok(r));
        }
        Err(Rejected::Unauthenticated) => assert!(verified.is_some(), "unauthenticated without a check"),
        Err(Rejected::Malformed(e)) => assert!(!e.is_empty()),
        // Only an authentic datagram is said to be an older agent's.
        Err(Rejected::Version(v)) => assert!(verified.is_some() && v.starts_with("hunt-fleet/") && datagram.starts_with(v.as_bytes())),
    }
    // Oversized datagrams are refused before any check.
    if datagram.len() > MAX_REPORT_LEN {
        assert!(verified.is_none() && matches!(got, Err(Rejected::Malformed(_))));
    }
}
