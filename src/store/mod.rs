//! Outputs of a rebalance. The SQL store is the durable record: Koishi's `channel.assignee`
//! and the rebalance history.

pub mod sql;

pub use sql::Store;

/// One channel row to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelWrite {
    pub platform: String,
    pub channel: String,
    /// The bot's id (Koishi's `selfId`), or `""` for a channel with no valid bot.
    pub assignee: String,
}

/// The record of one rebalance.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    pub started_at_ms: i64,
    pub finished_at_ms: i64,
    pub causes: String,
    pub strategy: String,
    pub platforms: Vec<PlatformRecord>,
}

/// One platform of a rebalance.
#[derive(Clone, Debug, PartialEq)]
pub struct PlatformRecord {
    pub platform: String,
    pub channels: i64,
    pub unassigned: i64,
    pub forced: i64,
    pub voluntary: i64,
    pub bots: i64,
    pub mean: f64,
    pub stddev: f64,
    pub min: i64,
    pub max: i64,
}

/// What one transaction writes: changed channel rows and history records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    pub writes: Vec<ChannelWrite>,
    pub runs: Vec<RunRecord>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.runs.is_empty()
    }
}
