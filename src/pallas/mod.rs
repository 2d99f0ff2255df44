//! Per-message coordination, compatible with Pallas-Bot v4.3.9 byte for byte where the wire is
//! shared: message signatures and claims, gates and activities, the assignment-aware ingress
//! decision, and the federate pool (one answer per group across deployments).
//!
//! * [`signature`], [`pystr`]: the message key and Python's string rules it depends on;
//! * [`claim`], [`gate`]: first-claimer-wins and owned gates, in Redis or in process;
//! * [`ingress`], [`given`]: should this bot handle this message, and which bot has it already;
//! * [`federate`]: the pool across deployments;
//! * [`eval`]: the golden vectors' functions, for `auto-assign coord eval`.

pub(crate) mod claim;
pub mod eval;
pub mod federate;
pub(crate) mod gate;
pub(crate) mod given;
pub(crate) mod ingress;
pub(crate) mod presence_registry;
pub(crate) mod pystr;
pub mod signature;
