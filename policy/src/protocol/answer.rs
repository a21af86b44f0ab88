//! What an agent's answer carries upstream: an app's 425 in the carrier form,
//! and whether a refusal takes the backend out of an Envoy front's rotation.

use super::{BUSY_STATUS, CARRIER_STATUS};
use crate::admission::Reason;
#[cfg(doc)]
use super::ENVOY_HC_FAIL;

/// Whether a refusal should take its backend out of an Envoy front's rotation
/// ([`ENVOY_HC_FAIL`]): when the agent cannot reach its app (an `unreachable`
/// answer, or an offer refused as `app_down`) or is draining, every try sent
/// there is refused until its health checks say otherwise. A busy refusal
/// (`policy`, `overload`) is about this moment's load only: never.
pub fn leaves_rotation(why: Reason) -> bool {
    matches!(why, Reason::AppDown | Reason::Draining)
}

/// The agent's side of "the refusal space is the agent's": the status (and the
/// `hunt-status` value, if any) an app response with this status goes upstream
/// as. Every `hunt`/`hunt-*` header the app set is removed as well, so
/// `hunt: busy` on the wire always comes from an agent.
///
/// Only a try that carried `hunt-target` is carried: it came from a front that
/// may retry by status alone (HAProxy). An Envoy front names tries with its
/// attempt count and retries on the `hunt: busy` header only, so an app's 425
/// goes to it, and on to the client, as it is; so does a plain request.
/// The front restores the carried form, `400` with `hunt-status: 425` and
/// nothing else, to 425 (HAProxy: one `http-response set-status` rule in
/// `front.cfg`); an app cannot forge it, its own `hunt-status` is removed.
pub fn carry(app_status: u16, named_by_target: bool) -> (u16, Option<&'static str>) {
    if app_status == BUSY_STATUS && named_by_target {
        (CARRIER_STATUS, Some("425"))
    } else {
        (app_status, None)
    }
}
