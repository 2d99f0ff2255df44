//! The store's contract as the engine calls it, for the tests that run the SQL store itself
//! against real SQLite files and PostgreSQL and MariaDB servers (`tests/it/store_weights.rs`):
//! parts of a commit the service cannot be made to write from outside, such as weights
//! before the engine measures them, or a fenced leader's write at a chosen moment.

pub use crate::store::{
    Batch, ChannelWrite, DatabaseUrl, Failure, Fence, PlatformRecord, RunRecord, SqlStore, Store,
    StoreError, WeightWrite,
};
