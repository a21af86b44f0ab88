//! Refusing an offer: `425 hunt: busy` at once, its body drained when small,
//! or held until the front surely has all of it (`hold`).

use crate::agent::Agent;
use crate::metrics::Fate;
use crate::respond::{busy_response, plain, AgentBody};
use http::{header, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use huntlb_policy::protocol::{self, Hold};
use huntlb_policy::Reason;
use hyper::body::{Body, Incoming};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tracing::debug;

/// How long a refused request's body may take to drain before the connection is
/// closed instead.
const DRAIN_TIME: Duration = Duration::from_secs(2);
/// How long a refusal of an offer whose body has no declared length (a gRPC
/// call) waits for that body to end before the offer is accepted instead
/// (`Agent::hold`): an open stream costs at most this, and only when refused.
const HOLD_TIME: Duration = Duration::from_millis(100);

impl Agent {
    /// The busy refusal: 425, `hunt: busy`, empty body. A body up to `drain_limit`
    /// is read and dropped first so the connection can carry the next request;
    /// a larger or slower one gets the refusal with `connection: close`.
    pub(crate) async fn refuse(&self, req: Request<Incoming>, why: Reason, named_by_target: bool, front: Option<&[u8]>) -> (Response<AgentBody>, Fate) {
        let h1 = req.version() < http::Version::HTTP_2;
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_none() && !req.body().is_end_stream() {
            return self.hold(req, why, named_by_target, front).await;
        }
        let has_body = declared.is_some_and(|n| n > 0);
        let mut close = false;
        if has_body {
            close = match declared {
                Some(n) if n > self.cfg.drain_limit as u64 => true,
                _ => {
                    let drained = tokio::time::timeout(DRAIN_TIME, Limited::new(req.into_body(), self.cfg.drain_limit).collect()).await;
                    !matches!(drained, Ok(Ok(_)))
                }
            };
        }
        if close {
            self.metrics.refusals_closed.fetch_add(1, Ordering::Relaxed);
        }
        // On HTTP/2 the stream ends with the response (hyper resets it if its
        // body is unread); `connection: close` is for HTTP/1 only.
        (busy_response(close && h1), Fate::Refused(why))
    }

    /// A refusal of an offer whose body has no declared length (a gRPC call, a
    /// chunked upload) is held until the front is known to hold the whole body
    /// (`protocol::held_refusal`): the body is read, and the refusal goes only
    /// once it has ended within `drain_limit` (the front's replay copy). A body
    /// that passes it, or is still open after `HOLD_TIME`, may be one the front
    /// can no longer re-send, so the offer is accepted after all, as a final:
    /// what was read goes to the app first, then the rest as it comes.
    pub(crate) async fn hold(&self, req: Request<Incoming>, why: Reason, named_by_target: bool, front: Option<&[u8]>) -> (Response<AgentBody>, Fate) {
        let h1 = req.version() < http::Version::HTTP_2;
        let (parts, mut body) = req.into_parts();
        let limit = self.cfg.drain_limit as u64;
        let mut held = VecDeque::new();
        let (mut read, mut ended, mut waited_out) = (0u64, false, false);
        let deadline = tokio::time::sleep(HOLD_TIME);
        tokio::pin!(deadline);
        loop {
            match protocol::held_refusal(read, ended, waited_out, limit) {
                Hold::Wait => {}
                Hold::Refuse => return (busy_response(false), Fate::Refused(why)),
                Hold::Accept => break,
            }
            tokio::select! {
                frame = body.frame(), if !ended => match frame {
                    Some(Ok(f)) => {
                        if let Some(d) = f.data_ref() {
                            read += d.len() as u64;
                        }
                        held.push_back(f);
                    }
                    None => ended = true,
                    Some(Err(e)) => {
                        // The front gave up the request: nothing reached the app.
                        debug!(error = %e, "held offer's body failed");
                        return (busy_response(h1), Fate::Refused(why));
                    }
                },
                _ = &mut deadline, if !waited_out => waited_out = true,
            }
        }
        debug!(read, ended, ?why, "held refusal: the front may not hold the whole body, accepted");
        if self.inflight.get() >= self.cfg.max_inflight {
            return (plain(StatusCode::SERVICE_UNAVAILABLE, "huntlb agent: max_inflight reached\n"), Fate::Accepted);
        }
        // Not a try the front may send once more: it may not hold the body.
        // Accepted after all, it counts for its front like any other.
        let counted = front.and_then(|f| self.per_front.enter(f));
        (self.pass_to_app(Request::from_parts(parts, body), held, named_by_target, false, counted).await, Fate::Accepted)
    }
}
