//! Acceptance policies for service hunting (hunt/1).
//!
//! A front proxy *offers* a request to a first candidate; the agent beside that
//! candidate accepts it or refuses it ("busy"), and a refused request goes to a
//! second candidate as a *final* try, which must accept. This crate holds the
//! only decision code: which offers to refuse. It does no I/O, so the agent, the
//! proxy-wasm filter and the bench simulator all call the same function, and the
//! Lua port in `haproxy-lua/` is held to the same JSON vectors (`policy/vectors`).
//!
//! The policies are the SRLB paper's (Desmouceaux et al.):
//! * [`Policy::Static`] is SR_c (Algorithm 1): accept an offer iff fewer than `c`
//!   workers are busy.
//! * [`Policy::Dynamic`] is SR_dyn (Algorithm 2): SR_c whose `c` moves by one at the
//!   end of every window of offers to keep the acceptance ratio between `low` and
//!   `high` (near 1/2).
//! * [`Policy::Always`] accepts everything: behind a random proxy this is the
//!   paper's RR baseline.
//!
//! Finals are never refused, whatever the policy and the load.
//!
//! Where things are, one job a module:
//!
//! | module | its job |
//! | --- | --- |
//! | `decision` | the vocabulary: [`Try`], [`Load`], [`State`], [`Decision`], [`Outcome`] |
//! | `policy` | [`Policy`] and its pure step [`Policy::decide`] (SR_c, SR_dyn) |
//! | `spec` | the spec grammar both ways (`"dynamic:window=50"` to [`Policy`] and back) |
//! | [`admission`] | the host's gates before the policy ([`admit`]); where the state lives is a trait ([`admission::StateCell`]), the part each host varies |
//! | `shared` | [`SharedPolicy`]: one policy for a host's threads, without a lock |
//! | [`settings`] | the settings every host shares, validated once |
//! | [`protocol`] | hunt/1 on the wire: header names, how a try is classified, the offer rule |
//! | [`forward`] | the forwarding tier: where an offer goes, the sample of peers, the sealed report |
//! | [`prefix`], [`llm`] | prompt-prefix affinity and a model server's load in seats |
//! | [`metrics`] | every metric name, once |

pub mod admission;
mod decision;
pub mod forward;
pub mod llm;
pub mod metrics;
mod policy;
pub mod prefix;
pub mod protocol;
pub mod settings;
mod shared;
mod spec;

pub use admission::{admit, Gates, Reason, Verdict};
pub use decision::{Decision, Load, Outcome, State, Try};
pub use policy::{DynamicParams, Policy};
pub use settings::{RawSettings, Settings, SettingsError};
pub use shared::SharedPolicy;
pub use spec::{spec_warning, SpecError};
