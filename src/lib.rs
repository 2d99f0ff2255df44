//! auto-assign: coordinates a fleet of chat bots that share groups, giving every group
//! (channel) exactly one bot.
//!
//! Layout, following the data flow:
//!
//! * [`model`]: identifiers and `platform:id` keys.
//! * [`index`]: the bipartite channel ↔ bot index, updated by fleet events in O(degree).
//! * [`balance`]: the pure planner. `optimal` (least Σ load², then fewest moves, both exact)
//!   and `greedy` (the Koishi plugin's algorithm) turn an index and [`balance::Rules`] into a
//!   [`balance::Plan`].
//! * [`snapshot`]: the JSON fleet snapshot read by `auto-assign plan`.
//! * [`bench`]: seeded synthetic fleets and the measurements printed by `auto-assign bench`.
//!
//! The planner never does I/O; everything around it is a thin shell.

pub mod balance;
pub mod bench;
pub mod index;
pub mod model;
pub mod snapshot;
