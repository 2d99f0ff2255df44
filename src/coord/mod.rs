//! Per-message coordination, compatible with Pallas-Bot's multi-bot design: signatures and
//! claims, gates, the presence registry, and the assignment-aware ingress decision.

pub mod eval;
pub mod signature;
