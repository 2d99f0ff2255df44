//! The engine's outputs besides the SQL store: the assignment published to Redis (and a
//! follower that reads it back, as a bot process would), and Pallas-Bot's presence registry.
//! All of them share one Redis connection ([`redis`]), which comes and goes on its own.

pub mod follower;
pub(crate) mod presence_registry;
pub mod publish;
pub mod redis;
