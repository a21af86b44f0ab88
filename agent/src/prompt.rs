//! Prefix affinity's input (`llm_prefix_bytes`): an offer's body, read whole
//! before it is decided, and the prompt in it (OpenAI's JSON), whose first
//! bytes name its home (`huntlb_policy::prefix`).
//!
//! ```text
//!  offer, Content-Length ≤ 1 MiB ──► body read whole (≤ READ_FOR) ──► frames held, sent on as they came
//!                                          └─► JSON: `messages` ("role: content\n" each, in order)
//!                                                    or `prompt` (a string, or a list of one) ──► first N bytes ──► hash
//!  anything else (chunked, bigger, slow, not JSON, no prompt) ──► no prefix: decided as without affinity
//! ```
//!
//! The body is the client's: it is parsed only to hash, never believed for
//! anything else, and goes to the app or the peer as the frames it came in.

use bytes::Bytes;
use http::{header, HeaderMap, Method};
use http_body_util::BodyExt;
use huntlb_policy::prefix::{prefix_hash, MAX_BODY};
use hyper::body::{Frame, Incoming};
use serde::Deserialize;
use serde_json::Value;
use std::collections::VecDeque;
use std::time::Duration;

/// A body not whole within this gets no affinity: what came is held, the rest
/// follows as it comes (a slow client holds its own connection, not a decision).
const READ_FOR: Duration = Duration::from_secs(1);

/// What reading an offer's body gave: the frames read (sent on first), and
/// the prompt's prefix hash if the body was whole and held one.
pub struct Read {
    pub held: VecDeque<Frame<Bytes>>,
    pub prefix: Option<u64>,
}

/// Is this request one whose body is read for its prompt? A POST whose
/// Content-Length is declared, above 0 and at most `MAX_BODY`.
pub fn readable(method: &Method, headers: &HeaderMap) -> bool {
    let len = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    method == Method::POST && len.is_some_and(|n| (1..=MAX_BODY).contains(&n))
}

/// Read `body` whole (it is `readable`), at most `MAX_BODY` bytes and
/// `READ_FOR`, and hash its prompt's first `bytes` bytes. Err: the body
/// failed (the client gave the request up): nothing was sent anywhere.
pub async fn read(body: &mut Incoming, bytes: usize) -> Result<Read, hyper::Error> {
    let mut held = VecDeque::new();
    let mut whole = Vec::new();
    let deadline = tokio::time::sleep(READ_FOR);
    tokio::pin!(deadline);
    let ended = loop {
        tokio::select! {
            frame = body.frame() => match frame {
                None => break true,
                Some(Err(e)) => return Err(e),
                Some(Ok(f)) => {
                    if let Some(d) = f.data_ref() {
                        whole.extend_from_slice(d);
                    }
                    held.push_back(f);
                    // hyper holds a body to its Content-Length, which is at most MAX_BODY
                    if whole.len() as u64 > MAX_BODY {
                        break false;
                    }
                }
            },
            _ = &mut deadline => break false,
        }
    };
    let prefix = if ended { prompt_prefix(&whole, bytes).map(|p| prefix_hash(&p, bytes)) } else { None };
    Ok(Read { held, prefix })
}

/// The fields looked at; the rest of the body is skipped unread into values.
#[derive(Deserialize)]
struct OpenAi {
    #[serde(default)]
    prompt: Option<Value>,
    #[serde(default)]
    messages: Option<Vec<Message>>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<Value>,
}

/// The first `n` bytes of an OpenAI request's prompt: a chat's messages as
/// "role: content\n" each, in order (as `huntlb-llm` renders them; a content
/// given as parts is its text parts' text), else `prompt` as a string or a
/// list of one string. None: not JSON, or no prompt of those shapes (token
/// lists, several prompts).
pub fn prompt_prefix(body: &[u8], n: usize) -> Option<Vec<u8>> {
    let req: OpenAi = serde_json::from_slice(body).ok()?;
    let mut out = Vec::with_capacity(n.min(body.len()));
    let mut put = |s: &str| {
        let room = n.saturating_sub(out.len());
        out.extend_from_slice(&s.as_bytes()[..s.len().min(room)]);
        out.len() < n
    };
    if let Some(msgs) = req.messages {
        for m in &msgs {
            let role = m.role.as_deref()?;
            let more = put(role) && put(": ");
            if !more {
                break;
            }
            let more = match &m.content {
                Some(Value::String(s)) => put(s),
                Some(Value::Array(parts)) => parts.iter().filter_map(|p| p.get("text")?.as_str()).all(&mut put),
                _ => return None,
            };
            if !more || !put("\n") {
                break;
            }
        }
        return (!msgs.is_empty()).then_some(out);
    }
    let text = match req.prompt? {
        Value::String(s) => s,
        Value::Array(mut a) if a.len() == 1 => match a.pop() {
            Some(Value::String(s)) => s,
            _ => return None,
        },
        _ => return None,
    };
    put(&text);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completions_prompt_is_its_first_bytes() {
        assert_eq!(prompt_prefix(br#"{"model":"m","prompt":"You are terse. What is 2+2?","max_tokens":4}"#, 14), Some(b"You are terse.".to_vec()));
        assert_eq!(prompt_prefix(br#"{"prompt":["short"]}"#, 100), Some(b"short".to_vec()));
        assert_eq!(prompt_prefix(br#"{"prompt":"caf\u00e9 au lait"}"#, 5), Some("café".as_bytes().to_vec()), "bytes, not characters; escapes decoded");
    }

    #[test]
    fn a_chat_is_its_messages_in_order() {
        let chat = br#"{"messages":[{"role":"system","content":"Be terse."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"image_url","image_url":{"url":"x"}}]}]}"#;
        assert_eq!(prompt_prefix(chat, 1000), Some(b"system: Be terse.\nuser: Hi\n".to_vec()));
        assert_eq!(prompt_prefix(chat, 12), Some(b"system: Be t".to_vec()));
        // a system prompt shared by two chats: the same prefix, whatever the question
        let q = |s: &str| format!(r#"{{"messages":[{{"role":"system","content":"Be terse."}},{{"role":"user","content":"{s}"}}]}}"#);
        assert_eq!(prompt_prefix(q("one").as_bytes(), 17), prompt_prefix(q("two").as_bytes(), 17));
    }

    #[test]
    fn anything_else_has_no_prompt() {
        for body in [
            &b"not json"[..],
            b"{\"prompt\":",
            b"[1,2]",
            b"{}",
            br#"{"prompt":[1,2,3]}"#,
            br#"{"prompt":["a","b"]}"#,
            br#"{"prompt":7}"#,
            br#"{"messages":[]}"#,
            br#"{"messages":[{"content":"no role"}]}"#,
            br#"{"messages":[{"role":"user","content":7}]}"#,
            br#"{"messages":"text"}"#,
        ] {
            assert_eq!(prompt_prefix(body, 64), None, "{}", String::from_utf8_lossy(body));
        }
    }

    /// What finding the prompt costs an offer (`cargo test --release -p
    /// huntlb-agent prompt_cost -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn prompt_cost() {
        for kb in [1usize, 16, 256, 1024] {
            let text = "w".repeat(kb * 1024 - 64);
            let body = format!(r#"{{"model":"m","prompt":"{text}","max_tokens":16,"stream":true}}"#);
            let n = (200_000 / kb).max(20);
            let at = std::time::Instant::now();
            for _ in 0..n {
                let p = prompt_prefix(std::hint::black_box(body.as_bytes()), 1024).unwrap();
                std::hint::black_box(prefix_hash(&p, 1024));
            }
            println!("{kb} KiB body: {:.1} us an offer", at.elapsed().as_secs_f64() * 1e6 / n as f64);
        }
        for members in [10usize, 100, 1000] {
            let ids: Vec<u64> = (0..members).map(|i| huntlb_policy::prefix::member_id(&format!("10.0.{}.{}:9700", i / 250, i % 250))).collect();
            let n = 2_000_000 / members;
            let at = std::time::Instant::now();
            for p in 0..n as u64 {
                std::hint::black_box(huntlb_policy::prefix::rank(std::hint::black_box(p), &ids));
            }
            println!("{members} members: {:.2} us to rank an offer's home", at.elapsed().as_secs_f64() * 1e6 / n as f64);
        }
    }
}
