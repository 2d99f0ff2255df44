//! What the service knows about each bot's connection and health, for the API and the Redis
//! presence registry. Fleet sources write it; everything else reads a snapshot.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;
use std::time::SystemTime;

/// How a bot is connected.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum ConnectionMode {
    /// auto-assign dialed the implementation.
    Forward { url: String },
    /// The implementation dialed auto-assign.
    Reverse { peer: String },
}

/// One bot's state.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BotPresence {
    pub platform: String,
    pub bot: String,
    pub nickname: String,
    /// A connection is open.
    pub connected: bool,
    /// Reported online to the engine (connected, logged in, healthy).
    pub online: bool,
    /// Failed its health probes: treated as offline until a probe succeeds.
    pub quarantined: bool,
    pub mode: Option<ConnectionMode>,
    #[serde(with = "unix_seconds")]
    pub connected_at: Option<SystemTime>,
    #[serde(with = "unix_seconds")]
    pub last_heartbeat: Option<SystemTime>,
    #[serde(with = "unix_seconds")]
    pub last_group_refresh: Option<SystemTime>,
    /// Number of groups in the last group list.
    pub groups: usize,
    /// Further connections to the bot standing by (they take over when the current one ends).
    pub standby_connections: usize,
    /// Connections taken since the start (the first, then every reconnect).
    pub connections: u64,
    /// Failed status probes since the start.
    pub probe_failures: u64,
}

impl BotPresence {
    pub fn new(platform: &str, bot: &str) -> Self {
        Self {
            platform: platform.to_owned(),
            bot: bot.to_owned(),
            nickname: String::new(),
            connected: false,
            online: false,
            quarantined: false,
            mode: None,
            connected_at: None,
            last_heartbeat: None,
            last_group_refresh: None,
            groups: 0,
            standby_connections: 0,
            connections: 0,
            probe_failures: 0,
        }
    }
}

/// The shared registry: cheap to clone, safe to update from any task.
#[derive(Clone, Default)]
pub struct Presence {
    bots: Arc<RwLock<BTreeMap<(String, String), BotPresence>>>,
}

impl Presence {
    /// Changes one bot's record (created on first use).
    pub fn update(&self, platform: &str, bot: &str, change: impl FnOnce(&mut BotPresence)) {
        let mut bots = self.bots.write();
        let entry = bots
            .entry((platform.to_owned(), bot.to_owned()))
            .or_insert_with(|| BotPresence::new(platform, bot));
        change(entry);
    }

    pub fn forget(&self, platform: &str, bot: &str) {
        let mut bots = self.bots.write();
        bots.remove(&(platform.to_owned(), bot.to_owned()));
    }

    pub fn get(&self, platform: &str, bot: &str) -> Option<BotPresence> {
        let bots = self.bots.read();
        bots.get(&(platform.to_owned(), bot.to_owned())).cloned()
    }

    /// Every bot, ordered by platform and id.
    pub fn snapshot(&self) -> Vec<BotPresence> {
        let bots = self.bots.read();
        bots.values().cloned().collect()
    }
}

pub(crate) mod unix_seconds {
    use std::time::{SystemTime, UNIX_EPOCH};

    pub fn serialize<S: serde::Serializer>(
        t: &Option<SystemTime>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match t.and_then(|t| t.duration_since(UNIX_EPOCH).ok()) {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }
}
