//! What the service tells the engine besides fleet events and the API's requests: a new
//! config, the schedule, the sources' readiness, leadership turns and the leader's publication.

use crate::config::Config;
use crate::leader::Turn;

/// Control messages for the engine, from the service's own tasks.
#[derive(Debug)]
pub enum Control {
    /// A validated new config (from the config watcher).
    Config(Box<Config>),
    /// The cron schedule fired.
    Schedule,
    /// The sources have reported the fleet: the first rebalance may run.
    Ready,
    /// This instance leads now, or another does (from the leadership campaign).
    Turn(Turn),
    /// The leader published a new version of the assignment.
    Followed,
    /// The pins and drains the leader stored (read by a follower, which shows them).
    Overrides(crate::operator::Overrides),
}
