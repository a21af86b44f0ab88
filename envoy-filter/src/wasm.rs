//! proxy-wasm glue. The root context parses the config once and defines the
//! metrics; HTTP contexts are short state machines over request and response
//! headers and never block.

use crate::{config, fronts, reply};
use huntlb_policy::protocol::{self, Field, Mark};
use huntlb_policy::admission::{self, StateCell, Write};
use huntlb_policy::Policy;
use huntlb_policy::metrics as M;
use huntlb_policy::{Gates, Load, State, Try, Verdict};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel, MetricType, Status};
use std::rc::Rc;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root { settings: None, metrics: None }) });
}}

/// Shared-data keys: one counter and one policy state for all worker threads of
/// this Envoy (shared data is per VM id, across threads).
const INFLIGHT_KEY: &str = "huntlb.inflight";
const POLICY_KEY: &str = "huntlb.policy_state";
/// Requests in flight per `hunt-front` name (`fronts`).
const FRONTS_KEY: &str = "huntlb.fronts";
const CAS_TRIES: usize = 64;

/// Sidecar metrics: the names of the policy crate's table (`huntlb_policy::metrics`);
/// proxy-wasm metrics carry no labels, so a label value is folded into the name
/// (`huntlb_offers_total{decision="accept"}` is `huntlb_offers_accept_total`).
struct Metrics {
    offers_accept: u32,
    offers_refuse: u32,
    finals: u32,
    finals_busy: u32,
    plain: u32,
    malformed: u32,
    busy: u32,
    workers: u32,
    policy_c: u32,
}

impl Metrics {
    fn define() -> Result<Metrics, Status> {
        let c = |m: &str| hostcalls::define_metric(MetricType::Counter, m);
        let g = |m: &str| hostcalls::define_metric(MetricType::Gauge, m);
        Ok(Metrics {
            offers_accept: c(&M::OFFERS.flat("accept"))?,
            offers_refuse: c(&M::OFFERS.flat("refuse"))?,
            finals: c(M::FINALS.name)?,
            finals_busy: c(M::FINALS_BUSY.name)?,
            plain: c(M::PLAIN.name)?,
            malformed: c(M::MALFORMED.name)?,
            busy: g(M::BUSY.name)?,
            workers: g(M::WORKERS.name)?,
            policy_c: g(M::POLICY_C.name)?,
        })
    }
}

fn inc(id: u32) {
    let _ = hostcalls::increment_metric(id, 1);
}

/// Validates the configuration once and hands each HTTP context its typed
/// settings and the metric ids.
struct Root {
    settings: Option<Rc<config::Sidecar>>,
    metrics: Option<Rc<Metrics>>,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let bytes = self.get_plugin_configuration().unwrap_or_default();
        let settings = match config::parse(&bytes) {
            Ok((s, warning)) => {
                // once, at configure: a key taken under its old name
                if let Some(w) = warning {
                    proxy_wasm::hostcalls::log(LogLevel::Warn, &w).ok();
                }
                s
            }
            Err(e) => {
                proxy_wasm::hostcalls::log(LogLevel::Error, &e).ok();
                return false;
            }
        };
        // Seed both keys before any traffic: compare-and-swap only protects a
        // key that exists (an absent key is written unconditionally), so two
        // threads creating it at once would lose an update.
        if let (None, cas) = self.get_shared_data(POLICY_KEY) {
            let _ = self.set_shared_data(POLICY_KEY, Some(&settings.policy.initial_state().to_bits().to_le_bytes()), cas);
        }
        if let (None, cas) = self.get_shared_data(INFLIGHT_KEY) {
            let _ = self.set_shared_data(INFLIGHT_KEY, Some(&0u32.to_le_bytes()), cas);
        }
        if let (None, cas) = self.get_shared_data(FRONTS_KEY) {
            let _ = self.set_shared_data(FRONTS_KEY, Some(b""), cas);
        }
        match Metrics::define() {
            Ok(m) => {
                let _ = hostcalls::record_metric(m.workers, u64::from(settings.workers));
                if let (Some(c), true) = (SharedState { policy_c: m.policy_c }.read(), settings.policy != Policy::Always) {
                    let _ = hostcalls::record_metric(m.policy_c, u64::from(c.0.c));
                }
                self.metrics = Some(Rc::new(m))
            }
            Err(e) => {
                proxy_wasm::hostcalls::log(LogLevel::Error, &format!("huntlb filter: define metrics: {e:?}")).ok();
                return false;
            }
        }
        proxy_wasm::hostcalls::log(LogLevel::Info, &format!("huntlb filter configured: {settings:?}")).ok();
        self.settings = Some(Rc::new(settings));
        true
    }

    fn create_http_context(&self, _id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Sidecar {
            settings: self.settings.clone()?,
            metrics: self.metrics.clone()?,
            counted: false,
            front: None,
            refused: false,
            named_by_target: false,
            hunt_try: false,
            from_envoy: false,
            unreachable: false,
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// SR_dyn's state in proxy-wasm shared data: one word for every worker thread
/// of this Envoy; a write presents the CAS token of its read.
struct SharedState {
    policy_c: u32,
}

impl StateCell for SharedState {
    type Version = Option<u32>;
    // A host call must not spin; 64 is far beyond what a few workers contend.
    const MAX_CONFLICTS: usize = CAS_TRIES;

    fn read(&self) -> Option<(State, Option<u32>)> {
        let (bytes, cas) = hostcalls::get_shared_data(POLICY_KEY).ok()?;
        let word = bytes?.try_into().ok().map(u64::from_le_bytes)?;
        Some((State::from_bits(word), cas))
    }

    fn write(&self, state: State, cas: Option<u32>) -> Write {
        match hostcalls::set_shared_data(POLICY_KEY, Some(&state.to_bits().to_le_bytes()), cas) {
            Ok(()) => {
                let _ = hostcalls::record_metric(self.policy_c, u64::from(state.c));
                Write::Done
            }
            Err(Status::CasMismatch) => Write::Conflict,
            Err(_) => Write::Failed,
        }
    }
}

struct Sidecar {
    settings: Rc<config::Sidecar>,
    metrics: Rc<Metrics>,
    counted: bool,
    /// The `hunt-front` name this try is counted under, until `on_log`.
    front: Option<Vec<u8>>,
    refused: bool,
    /// The try carried `hunt-target` (its front may retry a 425 by status alone).
    named_by_target: bool,
    /// An offer or a final: its front holds the request and may send it once
    /// more, to another backend, if it reached no app.
    hunt_try: bool,
    /// The try came from an Envoy front (named by `x-envoy-attempt-count`, no `hunt-target`).
    from_envoy: bool,
    /// This Envoy's own reply for a hunt try no app saw, answered as
    /// `425 hunt: unreachable`: its body is dropped.
    unreachable: bool,
}

impl Sidecar {
    /// Add `delta` to the shared in-flight counter; returns the new value.
    fn add_inflight(&self, delta: i64) -> u32 {
        for _ in 0..CAS_TRIES {
            let (bytes, cas) = self.get_shared_data(INFLIGHT_KEY);
            let cur = bytes.and_then(|b| b.try_into().ok()).map(u32::from_le_bytes).unwrap_or(0);
            let next = (i64::from(cur) + delta).max(0) as u32;
            match self.set_shared_data(INFLIGHT_KEY, Some(&next.to_le_bytes()), cas) {
                Ok(()) => {
                    // Add, not record: snapshots written by two worker threads can
                    // land out of order and leave the gauge stale.
                    let _ = hostcalls::increment_metric(self.metrics.busy, i64::from(next) - i64::from(cur));
                    return next;
                }
                Err(Status::CasMismatch) => continue,
                Err(_) => break,
            }
        }
        0
    }

    /// Move `name`'s count in the fronts table by `delta`; false when it could
    /// not (a new name and a full table, or shared data failing).
    fn add_front(&self, name: &[u8], delta: i32) -> bool {
        for _ in 0..CAS_TRIES {
            let (bytes, cas) = self.get_shared_data(FRONTS_KEY);
            let Some(next) = fronts::add(bytes.as_deref().unwrap_or_default(), name, delta) else { return false };
            match self.set_shared_data(FRONTS_KEY, Some(&next), cas) {
                Ok(()) => return true,
                Err(Status::CasMismatch) => continue,
                Err(_) => break,
            }
        }
        false
    }

    /// The stream's response flags (`reply`); 0 when Envoy gives none.
    fn response_flags(&self) -> u64 {
        hostcalls::get_property(vec!["response", "flags"]).ok().flatten().and_then(|b| reply::parse_flags(&b)).unwrap_or(0)
    }

    fn inflight(&self) -> u32 {
        match self.get_shared_data(INFLIGHT_KEY) {
            (Some(b), _) => b.try_into().map(u32::from_le_bytes).unwrap_or(0),
            _ => 0,
        }
    }

    fn field(&self, headers: &[(String, String)], name: &str) -> Option<(usize, String)> {
        let mut it = headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case(name));
        let first = it.next()?;
        Some((1 + it.count(), first.1.clone()))
    }
}

fn as_field(f: &Option<(usize, String)>) -> Field<'_> {
    match f {
        None => Field::Absent,
        Some((1, v)) => Field::One(v.as_bytes()),
        Some(_) => Field::Repeated,
    }
}

impl Context for Sidecar {}

impl HttpContext for Sidecar {
    fn on_http_request_headers(&mut self, _n: usize, _eos: bool) -> Action {
        let config::Sidecar { policy, workers, .. } = &*self.settings;
        let headers = self.get_http_request_headers();
        let offer = self.field(&headers, protocol::OFFER);
        let target = self.field(&headers, protocol::TARGET);
        let attempt = self.field(&headers, protocol::ENVOY_ATTEMPT);
        let front_name = self.field(&headers, protocol::FRONT);
        self.named_by_target = target.is_some();
        // An Envoy front names its tries by its own attempt count, never by hunt-target.
        self.from_envoy = target.is_none() && attempt.is_some();
        let mark = protocol::classify(as_field(&offer), protocol::per_try_mark(as_field(&target), as_field(&attempt)));
        match mark {
            Mark::Offer => {
                // The sidecar knows no gate: its Envoy drains and health-checks.
                let seen = self.field(&headers, protocol::SEEN);
                // A front that cannot say what it counts here names itself:
                // what it counts is what this Envoy holds from it.
                let seen = protocol::parse_seen(as_field(&seen)).or_else(|| {
                    let name = protocol::parse_front(as_field(&front_name))?;
                    Some(fronts::get(self.get_shared_data(FRONTS_KEY).0.as_deref().unwrap_or_default(), name))
                });
                let load = Load { busy: self.inflight(), workers: *workers, seen };
                let cell = SharedState { policy_c: self.metrics.policy_c };
                if let Verdict::Refuse(_) = admission::admit(policy, &cell, Try::Offer, Gates::OPEN, load) {
                    inc(self.metrics.offers_refuse);
                    self.refused = true;
                    self.send_http_response(
                        u32::from(protocol::BUSY_STATUS),
                        vec![(protocol::BUSY_HEADER, protocol::BUSY_VALUE)],
                        None,
                    );
                    return Action::Pause;
                }
                inc(self.metrics.offers_accept);
            }
            Mark::Final => {
                inc(self.metrics.finals);
                let load = Load::new(self.inflight(), *workers);
                let cell = SharedState { policy_c: self.metrics.policy_c };
                if cell.read().is_some_and(|(state, _)| policy.is_busy(state, load)) {
                    inc(self.metrics.finals_busy); // accepted while busy: the scaling signal
                }
            }
            Mark::Plain => inc(self.metrics.plain),
            Mark::Malformed => inc(self.metrics.malformed),
        }
        self.hunt_try = matches!(mark, Mark::Offer | Mark::Final);
        for (name, _) in &headers {
            if protocol::is_hunt_header(name) {
                self.set_http_request_header(name, None);
            }
        }
        self.add_inflight(1);
        self.counted = true;
        if let Some(name) = protocol::parse_front(as_field(&front_name)) {
            if self.add_front(name, 1) {
                self.front = Some(name.to_vec());
            }
        }
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _n: usize, _eos: bool) -> Action {
        if self.refused {
            return Action::Continue;
        }
        let status = self.get_http_response_header(":status").and_then(|s| s.parse::<u16>().ok()).unwrap_or(0);
        // This Envoy's own 503 for a hunt try it could not even connect to the
        // app for: no app saw it, so it is answered as the agent answers it,
        // and the front sends it to another backend (and an Envoy front takes
        // this backend out of rotation until its health checks pass).
        if self.hunt_try && reply::reached_no_app(status, self.response_flags()) {
            self.unreachable = true;
            let status = protocol::BUSY_STATUS.to_string();
            let mut headers = vec![(":status", status.as_str()), (protocol::BUSY_HEADER, protocol::UNREACHABLE_VALUE), ("content-length", "0")];
            if self.from_envoy {
                headers.push((protocol::ENVOY_HC_FAIL, "true"));
            }
            self.set_http_response_headers(headers);
            return Action::Continue;
        }
        let id = &self.settings.id;
        // The refusal space is the sidecar's: no app response may look like a
        // refusal, or the front would re-send a request the app processed; nor
        // carry Envoy's own controls (`x-envoy-immediate-health-check-fail`
        // would eject this backend at an Envoy front), where the sidecar runs
        // without the example's upstream header filter (an Istio WasmPlugin).
        for (name, _) in self.get_http_response_headers() {
            if protocol::is_reserved_response_header(&name) {
                self.set_http_response_header(&name, None);
            }
        }
        if let (carrier, Some(app_status)) = protocol::carry(status, self.named_by_target) {
            self.set_http_response_header(":status", Some(&carrier.to_string()));
            self.set_http_response_header(protocol::APP_STATUS, Some(app_status));
        }
        self.set_http_response_header(protocol::SERVED_BY, Some(id));
        Action::Continue
    }

    fn on_http_response_body(&mut self, body_size: usize, _eos: bool) -> Action {
        if self.unreachable && body_size > 0 {
            // the refusal's empty body, as its content-length says
            let _ = hostcalls::set_buffer(proxy_wasm::types::BufferType::HttpResponseBody, 0, body_size, &[]);
        }
        Action::Continue
    }

    fn on_log(&mut self) {
        if self.counted {
            self.counted = false;
            self.add_inflight(-1);
        }
        if let Some(name) = self.front.take() {
            self.add_front(&name, -1);
        }
    }
}
