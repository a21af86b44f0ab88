//! hunt/1 on the wire: header names, the refusal, and how a backend classifies a
//! try from its headers. Pure functions over byte slices, so the agent (hyper) and
//! the Wasm sidecar (proxy-wasm) classify identically. The spec is
//! `docs/protocol.md`.
//!
//! The names are here; the rest, one job a module: `classify` (a try's mark
//! from its headers, which headers are the hunt's), `answer` (what an answer
//! carries upstream), `body` (which requests are offered, and when a held
//! refusal may go).

/// Set once per request by the front proxy: names the try that may be refused.
pub const OFFER: &str = "hunt-offer";
/// Set on every try by the front proxy: names this try.
pub const TARGET: &str = "hunt-target";
/// Envoy's own per-try header (`include_request_attempt_count`: `1`, `2`, ...).
/// An Envoy front names its tries with it instead of `hunt-target`, natively,
/// with no upstream filter: see [`per_try_mark`].
pub const ENVOY_ATTEMPT: &str = "x-envoy-attempt-count";
/// On an offer, optional: the front's own count of its requests outstanding at
/// this backend when it chose it (HAProxy: `srv_conn`). The policy's `seen_margin`
/// reads it (`Load::seen`); see [`parse_seen`].
pub const SEEN: &str = "hunt-seen";
/// Longest `hunt-seen` value: 9 digits always fit a `u32`.
pub const MAX_SEEN_DIGITS: usize = 9;
/// Optional on every try from a front that cannot send `hunt-seen` (Envoy: its
/// least-request count at the chosen host is not visible to its config): the
/// front's own name. The agent counts the requests it holds from each name,
/// which is that front's own count at this backend, and uses it as `hunt-seen`.
pub const FRONT: &str = "hunt-front";
/// Set on every try by a front that never re-sends a refused try (no copy of
/// the request, no retry on 425), its value the front's own name as in
/// [`FRONT`]: `hunt-pass: 10.0.0.7:80`. The backend may pass such a try on to
/// a peer through the forwarding tier (which commits it only when the peer
/// takes it, and otherwise serves it where it landed), never refuses it, and
/// counts it for that front. So the front is the proxy's own balancer plus one
/// header, whatever the fleet's size. See [`pass_front`]; hosts without a tier
/// (the sidecars) need not read it: to them such a try is plain, never
/// refused either.
pub const PASS: &str = "hunt-pass";
/// On a refusal: `hunt: busy`.
pub const BUSY_HEADER: &str = "hunt";
pub const BUSY_VALUE: &str = "busy";
/// On a final the agent could not even connect to its app for: `hunt:
/// unreachable`, with the refusal's status. The request reached no app, so the
/// front may send it once more, to another backend (`docs/protocol.md` § 4).
pub const UNREACHABLE_VALUE: &str = "unreachable";
/// A refusal's status: 425 Too Early, "not processed, safe to replay".
pub const BUSY_STATUS: u16 = 425;
/// Envoy's own response header: the host that answers it is taken out of its
/// cluster's load balancing at once (clusters with active health checks), and
/// back only when its health checks pass again. The agent adds it to a refusal
/// that is about the whole backend, not this offer ([`leaves_rotation`]), for
/// a try from an Envoy front: a backend that refuses fast holds the fewest
/// requests, and a least-request front would send it everything until its
/// health checks caught up. Not a hunt header: the Envoy front removes it from
/// what clients see.
pub const ENVOY_HC_FAIL: &str = "x-envoy-immediate-health-check-fail";
/// On a try one agent forwarded to another (the forwarding tier): the
/// forwarding agent's address. Such a try is a final (it carries only
/// `hunt-target: forwarded`) that the receiving agent refuses only when it
/// could not take it at all (`max_inflight`), as no app has seen it then; the
/// forwarding agent turns that into a refusal its front re-sends.
pub const VIA: &str = "hunt-via";
/// Only on a forward between agents: the request's own body length (`none`
/// without one); the body is one byte longer, the go byte first (the agent's
/// `commit`). Fronts remove a client's, as they remove `hunt-via`.
pub const COMMIT: &str = "hunt-commit";
/// Optional on an accepted response: which agent served it.
pub const SERVED_BY: &str = "hunt-served-by";
/// The agent's own health path.
pub const HEALTH_PATH: &str = "/.hunt/health";
/// Longest accepted `hunt-offer` / `hunt-target` value.
pub const MAX_MARK_LEN: usize = 64;

/// An app's own 425 travels from agent to front as this status, with
/// `hunt-status: 425`: HAProxy's `retry-on 425` retries by status alone and
/// cannot look at `hunt: busy`, so between agent and front 425 means only the
/// refusal. A 4xx, like 425, so no proxy retries it and no 5xx outlier or
/// layer-7 health check counts it.
pub const CARRIER_STATUS: u16 = 400;
/// On a carried response: the app's own status.
pub const APP_STATUS: &str = "hunt-status";

mod answer;
mod body;
mod classify;

pub use answer::{carry, leaves_rotation};
pub use body::{held_refusal, offerable, Body, Hold, NotOffered};
pub use classify::{classify, is_hunt_header, is_reserved_response_header, is_token, parse_front, parse_seen, pass_front, per_try_mark, Field, Mark};

#[cfg(test)]
mod tests;
