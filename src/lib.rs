//! auto-assign: coordinates a fleet of chat bots that share groups, giving every group
//! (channel) exactly one bot.
//!
//! The modules stand on floors and import only what stands below them (`tests/it/architecture.rs`
//! holds the floors and checks every import), from the ground up:
//!
//! * **Helpers**: [`model`] (ids, `platform:id` keys), [`yaml`], [`secret`], [`logs`],
//!   [`clock`], [`backoff`], [`pages`], [`presence`], [`file_watch`].
//! * **Shared infrastructure and the core's data**: [`redis_conn`] (the one Redis connection:
//!   one server, Cluster or Sentinel, plain or TLS), [`store`] (the [`store::Store`] trait, SQL
//!   on SQLite, PostgreSQL and MySQL, the writer beside the engine, and the leader's
//!   [`store::fence`]), [`index`] (the bipartite channel ↔ bot index, updated in O(degree)),
//!   [`view`] (the assignment as the API and ingress read it, without a lock), [`triggers`]
//!   (when to rebalance).
//! * **The planner and what it weighs**: [`balance`] (`optimal`, exact, within capacities;
//!   `weighted`, by messages, with a certified gap; `greedy`, the Koishi plugin's;
//!   `provisional`, the assignees given at once; [`balance::Rules`] is where a constraint
//!   goes), [`traffic`] (each channel's message rate, counted by the sources), [`publication`]
//!   (the assignment in Redis, and a follower's view of it).
//! * **Parts**, each owning its settings: [`explain`], [`pallas`] (claims, gates, ingress
//!   decisions, the federate pool, the presence registry), [`leader`] (lease, terms), [`cli`]
//!   (the client side of the binary and the snapshot `plan` reads), [`source`] (fleet sources
//!   turning the outside world into [`source::FleetEvent`]s: `file`, `onebot`, `http`
//!   reporters), [`metrics`], [`status`] (what the API shows of the parts, behind one
//!   read-only handle), [`engine_handle`] (what the API asks of the engine).
//! * **Shell**: [`api`] serves HTTP; [`config`] gathers the parts' settings and validates them
//!   once per load; [`engine`] is the one writer (events → index → triggers → planner →
//!   store); [`service`] wires it all with a clean shutdown.
//! * [`testkit`] (feature `testkit`) and [`bench`] (feature `bench`) drive the whole service.
//!
//! The public surface is what the binary, the benchmarks and the tests need; everything else
//! is internal.

pub(crate) mod api;
pub(crate) mod backoff;
pub mod balance;
#[cfg(feature = "bench")]
pub mod bench;
pub mod cli;
pub(crate) mod clock;
pub mod config;
pub(crate) mod dry_run;
pub(crate) mod engine;
pub(crate) mod engine_handle;
pub(crate) mod explain;
pub(crate) mod file_watch;
#[cfg(test)]
mod fuzz;
pub(crate) mod index;
pub(crate) mod leader;
pub(crate) mod logs;
pub(crate) mod metrics;
pub(crate) mod model;
pub(crate) mod operator;
pub mod pages;
pub mod pallas;
pub(crate) mod presence;
pub mod publication;
pub mod redis_conn;
pub(crate) mod secret;
pub mod service;
pub(crate) mod source;
pub(crate) mod status;
pub(crate) mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
pub(crate) mod traffic;
pub(crate) mod triggers;
pub(crate) mod view;
pub(crate) mod yaml;
