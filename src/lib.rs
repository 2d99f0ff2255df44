//! auto-assign: coordinates a fleet of chat bots that share groups, giving every group
//! (channel) exactly one bot.
//!
//! Layout, following the data flow:
//!
//! * [`model`]: identifiers, `platform:id` keys, and a bot's reported channels (numbers kept
//!   as numbers).
//! * [`index`]: the bipartite channel ↔ bot index, updated by fleet events in O(degree).
//! * [`balance`]: the pure planner. `optimal` (least Σ load², then fewest moves, both exact)
//!   and `greedy` (the Koishi plugin's algorithm) turn an index and [`balance::Rules`] into a
//!   [`balance::Plan`].
//! * [`snapshot`]: the JSON fleet snapshot read by `auto-assign plan`.
//! * [`config`]: `config.yaml`, typed and validated; [`watch`] notices edits.
//! * [`source`]: fleet sources turning the outside world into fleet events (`file`, `onebot`).
//! * [`triggers`]: when to rebalance (per-event delays, coalescing).
//! * [`engine`]: the one writer: events → index → triggers → planner → store.
//! * [`store`]: the SQL store (Koishi's `channel` table and the rebalance history).
//! * [`view`], [`api`], [`coord`]: the assignment as seen from outside, the HTTP API, and
//!   per-message coordination (claims, gates, Redis publication, the federate pool).
//! * [`leader`]: several instances, one leader: the lease, terms and fencing.
//! * [`service`]: `auto-assign serve`, wiring it all with a clean shutdown.
//! * [`bench`]: seeded synthetic fleets and the measurements printed by `auto-assign bench`.
//! * [`pages`]: large arrays on transparent huge pages (the planner's graph, a plan's rows).
//!
//! The planner never does I/O; everything around it is a thin shell.

pub(crate) mod api;
pub(crate) mod backoff;
pub mod balance;
#[cfg(feature = "bench")]
pub mod bench;
pub mod cli;
pub mod clock;
pub mod config;
pub(crate) mod engine;
pub(crate) mod explain;
#[cfg(test)]
mod fuzz;
pub mod index;
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
pub mod snapshot;
pub(crate) mod source;
pub(crate) mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
pub(crate) mod triggers;
pub(crate) mod view;
pub(crate) mod watch;
pub mod yaml;
