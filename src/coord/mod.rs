//! Per-message coordination, compatible with Pallas-Bot's multi-bot design: signatures and
//! claims, gates, the presence registry, the assignment-aware ingress decision, and the
//! federate pool (one answer per group across deployments).

pub mod claim;
pub mod eval;
pub mod federate;
pub mod follower;
pub mod gate;
pub mod ingress;
pub mod presence_registry;
pub mod publish;
pub mod pystr;
pub mod redis;
pub mod signature;
