//! auto-assign: coordinates a fleet of chat bots that share groups, giving every group
//! (channel) exactly one bot.
//!
//! The arrows run one way: `main → service → {engine, api} → parts → core`, with no circle
//! among the files (`tests/architecture.rs` checks it).
//!
//! * **Core**, pure and synchronous: [`model`] (ids, `platform:id` keys), [`index`] (the
//!   bipartite channel ↔ bot index, updated in O(degree)), [`balance`] (the planner:
//!   `optimal`, exact, within capacities; `weighted`, by messages, with a certified gap;
//!   `greedy`, the Koishi plugin's; `provisional`, the assignees given at once to channels left
//!   without a valid bot; [`balance::Rules`] is where a constraint goes),
//!   [`triggers`] (when to rebalance), [`explain`].
//! * **Parts**, each owning its settings: [`source`] (fleet sources turning the outside world
//!   into [`source::FleetEvent`]s: `file`, `onebot`, `http` reporters), [`store`] (the
//!   [`store::Store`] trait, SQL on SQLite, PostgreSQL and MySQL, and the writer beside the
//!   engine), [`outputs`] (Redis publication, the follower's view of it, presence), [`view`]
//!   (the assignment as the API and ingress read it, without a lock), [`pallas`] (claims,
//!   gates, ingress decisions, the federate pool), [`leader`] (lease, terms, fencing; `duty`
//!   is what the other parts need of it), [`weights`] (each channel's message rate, counted by
//!   the sources and folded by the engine, for `balanceBy: messages`), [`metrics`], [`status`]
//!   (what the API shows of the parts, behind one read-only handle), [`watch`], and the helpers [`yaml`], [`secret`],
//!   [`logs`], [`clock`], [`backoff`], [`pages`], [`presence`].
//! * **Shell**: [`config`] gathers the parts' settings and validates them once per load;
//!   [`engine`] is the one writer (events → index → triggers → planner → store), told what to
//!   do through [`engine::control`]; [`api`] serves HTTP; [`service`] wires it all with a clean
//!   shutdown; [`cli`] is the client side of the binary (`status`, `explain`, the snapshot
//!   `plan` reads).
//! * [`bench`] (feature `bench`) and [`testkit`] (feature `testkit`) drive the whole service.
//!
//! The public surface is what the binary, the benchmarks and the tests need: at most these
//! eight `pub mod`s; everything else is internal.

pub(crate) mod api;
pub(crate) mod backoff;
pub mod balance;
#[cfg(feature = "bench")]
pub mod bench;
pub mod cli;
pub(crate) mod clock;
pub mod config;
pub(crate) mod engine;
pub(crate) mod explain;
#[cfg(test)]
mod fuzz;
pub(crate) mod index;
pub(crate) mod leader;
pub(crate) mod logs;
pub(crate) mod metrics;
pub(crate) mod model;
pub mod outputs;
pub(crate) mod pages;
pub mod pallas;
pub(crate) mod presence;
pub(crate) mod secret;
pub mod service;
pub(crate) mod source;
pub(crate) mod status;
pub(crate) mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
pub(crate) mod triggers;
pub(crate) mod view;
pub(crate) mod watch;
pub(crate) mod weights;
pub(crate) mod yaml;
