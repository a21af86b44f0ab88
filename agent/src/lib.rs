//! huntlb-agent: a hunt/1 agent in front of one app instance, as a library
//! (the binary, `main.rs`, loads the config and calls [`server::run`]).
//!
//! It answers offers with "accept" (forward to the app) or "busy" (425 at once),
//! per the acceptance policy; see `docs/protocol.md`. One room per job:
//!
//! ```text
//!  server ──► dispatch (read the try, decide: the policy, or the fleet's pick)
//!               ├── refuse ───── 425 hunt: busy (respond)
//!               ├── app ──────── the app, through upstream (watched connections, lent bodies)
//!               └── relay ────── a member's agent, through upstream (TLS with tls_cert)
//!  agent: what it holds, and says of itself        listen: its sockets, room for a connection
//!  health: the fronts' checks, the app watched      headers: what is stripped and read
//!  fleet: members' counts (seal: their MAC)         config, tls, load, metrics
//! ```

pub mod agent;
pub mod app;
pub mod body;
pub mod commit;
pub mod config;
pub mod dispatch;
pub mod error;
pub mod fleet;
pub mod forwarded;
pub mod headers;
pub mod health;
pub mod insider;
pub mod listen;
pub mod load;
pub mod metrics;
pub mod prompt;
pub mod refuse;
pub mod relay;
pub mod respond;
pub mod seal;
pub mod server;
mod sync;
pub mod tls;
pub mod upstream;
