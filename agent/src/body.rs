//! Request bodies lent to a try upstream: what a try took comes back with the
//! rest when it reached no one, so the request goes again with nothing lost.

use bytes::Bytes;
use http::HeaderMap;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

/// How much of a body is kept, as it is sent, for sending it once more: a
/// resend happens only when none of the request was written, so what hyper
/// had taken is still in its buffer, at most this much in practice.
const KEEP_AT_MOST: usize = 64 * 1024;

/// A request body lent to one try upstream: frames already read (a held
/// refusal that became an accept) go first, then the rest as it comes. Each
/// frame it yields is kept (by reference count, up to `KEEP_AT_MOST`) until the
/// try is over; if the try is dropped with the body unfinished or kept whole,
/// what it took and the rest go back through `back`, so a try that reached no
/// one (no connection, or `closed_before_write`) is sent again with nothing
/// lost. `back: None`: a last try, nothing is kept.
pub struct Lent {
    held: VecDeque<Frame<Bytes>>,
    taken: Vec<Kept>,
    taken_bytes: usize,
    rest: Option<Incoming>,
    back: Option<tokio::sync::oneshot::Sender<Returned>>,
}

enum Kept {
    Data(Bytes),
    Trailers(HeaderMap),
}

/// A lent body, back: what the try took, and the rest.
pub struct Returned {
    pub held: VecDeque<Frame<Bytes>>,
    pub rest: Incoming,
}

impl Lent {
    pub fn new(held: VecDeque<Frame<Bytes>>, rest: Incoming, back: Option<tokio::sync::oneshot::Sender<Returned>>) -> Self {
        Lent { held, taken: Vec::new(), taken_bytes: 0, rest: Some(rest), back }
    }

    fn keep(&mut self, f: &Frame<Bytes>) {
        if self.back.is_none() {
            return;
        }
        let kept = match (f.data_ref(), f.trailers_ref()) {
            (Some(d), _) => {
                self.taken_bytes += d.len();
                Kept::Data(d.clone())
            }
            (_, Some(t)) => Kept::Trailers(t.clone()),
            _ => return,
        };
        if self.taken_bytes > KEEP_AT_MOST {
            // Too much to keep: this try is the last.
            self.back = None;
            self.taken = Vec::new();
            return;
        }
        self.taken.push(kept);
    }
}

impl Body for Lent {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let got = match self.held.pop_front() {
            Some(f) => Poll::Ready(Some(Ok(f))),
            None => match self.rest.as_mut() {
                Some(b) => Pin::new(b).poll_frame(cx),
                None => Poll::Ready(None),
            },
        };
        if let Poll::Ready(Some(Ok(f))) = &got {
            self.keep(f);
        }
        got
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_empty() && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self.rest.as_ref().map_or_else(|| SizeHint::with_exact(0), Body::size_hint);
        if self.held.is_empty() {
            return rest;
        }
        let held: u64 = self.held.iter().filter_map(Frame::data_ref).map(|d| d.len() as u64).sum();
        let mut hint = SizeHint::new();
        hint.set_lower(held + rest.lower());
        if let Some(upper) = rest.upper() {
            hint.set_upper(held + upper);
        }
        hint
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let (Some(back), Some(rest)) = (self.back.take(), self.rest.take()) {
            let mut held: VecDeque<Frame<Bytes>> = std::mem::take(&mut self.taken)
                .into_iter()
                .map(|k| match k {
                    Kept::Data(d) => Frame::data(d),
                    Kept::Trailers(t) => Frame::trailers(t),
                })
                .collect();
            held.append(&mut self.held);
            let _ = back.send(Returned { held, rest });
        }
    }
}
