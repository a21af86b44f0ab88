//! The commit handshake of a forward between agents: a forward belongs to the
//! peer only once the peer has said it takes it and the forwarding agent has
//! said go. Until then the forwarding agent may withdraw it and serve it where
//! it landed, and the peer never gives a withdrawn one to its app.
//!
//! ```text
//!  forwarding agent                                   peer agent
//!   head: hunt-commit: N, expect: 100-continue,
//!         content-length: N+1 ─────────────────────►  room? (else 425 hunt: busy: not taken)
//!                          ◄───────── 100 Continue ─  "I take it" (hyper sends it as the body is first read)
//!   within fleet_commit_ms?
//!     yes: body = `G` + the N bytes ───────────────►  `G` first: go, the request is the peer's ──► app
//!     no:  connection closed, nothing more ────────►  end before `G`: withdrawn, never processed
//!          served here
//! ```
//!
//! The commit point is the forwarding agent's decision to send `G`: before it,
//! any failure (no connection, no word in time, the peer's refusal) leaves the
//! request unprocessed by the peer, and it is served here; after it, any
//! failure is an error the client sees (502, 504), never a second try.

use crate::body::Lent;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// On a forward: the length of the request's own body (`none`: it had no
/// `content-length`); the body sent is one byte more, the go byte first.
pub use huntlb_policy::protocol::COMMIT;
/// The first byte of a committed forward's body: go.
pub const GO: u8 = b'G';
/// How long a peer waits for the go byte after saying it takes a forward.
/// A forwarding agent that withdraws closes the connection, which ends the
/// wait at once; this bounds a forwarding agent that stalled in between.
pub const GO_WAIT: Duration = Duration::from_secs(5);

/// The original framing of a forward's body, as `hunt-commit` carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No `content-length` (a request without a body).
    None,
    Length(u64),
}

impl Framing {
    pub fn wire(self) -> String {
        match self {
            Framing::None => "none".into(),
            Framing::Length(n) => n.to_string(),
        }
    }

    /// `hunt-commit`'s value, and the forward's `content-length` one more
    /// than it says; anything else is refused (400), never processed.
    pub fn read(h: &HeaderMap) -> Result<Framing, String> {
        let mut v = h.get_all(COMMIT).iter();
        let (Some(v), None) = (v.next(), v.next()) else { return Err(format!("{COMMIT}: expected exactly one")) };
        let f = match v.as_bytes() {
            b"none" => Framing::None,
            d if !d.is_empty() && d.len() <= 19 && d.iter().all(u8::is_ascii_digit) => {
                Framing::Length(std::str::from_utf8(d).ok().and_then(|s| s.parse().ok()).ok_or_else(|| format!("{COMMIT}: not a length"))?)
            }
            _ => return Err(format!("{COMMIT}: expected `none` or a length")),
        };
        let mut cl = h.get_all(header::CONTENT_LENGTH).iter();
        let sent = match (cl.next(), cl.next()) {
            (Some(v), None) => v.to_str().ok().and_then(|s| s.parse::<u64>().ok()),
            _ => None,
        };
        if sent != Some(f.len() + 1) {
            return Err(format!("{COMMIT}: content-length must be one more than {}", f.len()));
        }
        Ok(f)
    }

    fn len(self) -> u64 {
        match self {
            Framing::None => 0,
            Framing::Length(n) => n,
        }
    }

    /// The head as the app gets it: its own framing back, no `expect`.
    pub fn restore(self, h: &mut HeaderMap) {
        h.remove(COMMIT);
        h.remove(header::EXPECT);
        match self {
            Framing::None => {
                h.remove(header::CONTENT_LENGTH);
            }
            Framing::Length(n) => {
                h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
            }
        }
    }

    /// The forward's head: `hunt-commit`, `expect: 100-continue`, and a
    /// `content-length` one more than the body's own.
    pub fn mark(self, h: &mut HeaderMap) {
        h.insert(COMMIT, HeaderValue::try_from(self.wire()).expect("a number is a header value"));
        h.insert(header::EXPECT, HeaderValue::from_static("100-continue"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(self.len() + 1));
        h.remove(header::TRANSFER_ENCODING);
    }
}

/// A forward's body on the forwarding side: nothing until `go` says so (the
/// go byte, then the request's own body); an error if `go` is dropped
/// (withdrawn), so hyper abandons the request and closes the connection.
pub struct Gated {
    go: Option<tokio::sync::oneshot::Receiver<()>>,
    len: u64,
    inner: Lent,
}

impl Gated {
    pub fn new(go: tokio::sync::oneshot::Receiver<()>, framing: Framing, inner: Lent) -> Self {
        Gated { go: Some(go), len: framing.len() + 1, inner }
    }
}

#[derive(Debug)]
pub struct Withdrawn;

impl std::fmt::Display for Withdrawn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("forward withdrawn before go")
    }
}

impl std::error::Error for Withdrawn {}

impl Body for Gated {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(go) = self.go.as_mut() {
            return match std::future::Future::poll(Pin::new(go), cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Ok(())) => {
                    self.go = None;
                    Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&[GO])))))
                }
                Poll::Ready(Err(_)) => Poll::Ready(Some(Err(Box::new(Withdrawn)))),
            };
        }
        Pin::new(&mut self.inner).poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        false
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}

/// What the peer gets before it may process a forward.
pub enum Go {
    /// Go: what came after the go byte, to go to the app first.
    Given(VecDeque<Frame<Bytes>>),
    /// The forwarding agent withdrew it (the connection ended, or no go in
    /// `GO_WAIT`): never given to the app.
    Withdrawn,
    /// Something else than the go byte came first: refused, never processed.
    Malformed,
}

/// On the peer: read the forward's first body bytes. Reading them is what
/// makes hyper send `100 Continue` (the forward said `expect`): the peer's
/// "I take it". Then the go byte must come first.
pub async fn await_go(body: &mut Incoming) -> Go {
    let first = loop {
        match tokio::time::timeout(GO_WAIT, body.frame()).await {
            Ok(Some(Ok(f))) => match f.into_data() {
                Ok(d) if d.is_empty() => continue,
                Ok(d) => break d,
                Err(_) => return Go::Malformed,
            },
            _ => return Go::Withdrawn,
        }
    };
    if first[0] != GO {
        return Go::Malformed;
    }
    let rest = first.slice(1..);
    Go::Given(if rest.is_empty() { VecDeque::new() } else { VecDeque::from([Frame::data(rest)]) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_round_trips_and_rejects_what_does_not_add_up() {
        for f in [Framing::None, Framing::Length(0), Framing::Length(1234)] {
            let mut h = HeaderMap::new();
            h.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
            f.mark(&mut h);
            assert_eq!(Framing::read(&h), Ok(f));
            assert!(h.get(header::TRANSFER_ENCODING).is_none());
            f.restore(&mut h);
            assert!(h.get(COMMIT).is_none() && h.get(header::EXPECT).is_none());
            assert_eq!(h.get(header::CONTENT_LENGTH).map(|v| v.to_str().unwrap().to_string()), match f {
                Framing::None => None,
                Framing::Length(n) => Some(n.to_string()),
            });
        }
        let with = |commit: &[&str], cl: &[&str]| {
            let mut h = HeaderMap::new();
            for v in commit {
                h.append(COMMIT, HeaderValue::from_str(v).unwrap());
            }
            for v in cl {
                h.append(header::CONTENT_LENGTH, HeaderValue::from_str(v).unwrap());
            }
            Framing::read(&h)
        };
        assert_eq!(with(&["5"], &["6"]), Ok(Framing::Length(5)));
        for (commit, cl) in [(&["5"][..], &["5"][..]), (&["none"], &["0"]), (&["5", "5"], &["6"]), (&["-1"], &["0"]), (&["0x5"], &["6"]), (&[""], &["1"]), (&["5"], &[][..]), (&["5"], &["6", "6"])] {
            assert!(with(commit, cl).is_err(), "{commit:?} {cl:?}");
        }
    }
}
