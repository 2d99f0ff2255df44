//! The `sources.onebot` section of config.yaml, typed (parsed and validated in `config`).

use std::net::SocketAddr;
use std::time::Duration;

/// A bot missing this many heartbeat intervals in a row counts as offline.
pub const HEARTBEAT_MISSES: u32 = 3;

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Forward WebSocket connections: auto-assign dials each implementation.
    pub connections: Vec<Forward>,
    /// The reverse WebSocket server implementations dial, if enabled.
    pub reverse: Option<Reverse>,
    /// How long an action may take to answer.
    pub action_timeout: Duration,
    /// How often each bot's group list is fetched again to repair missed notices.
    pub group_list_refresh: Duration,
    /// How long a lost connection may take to come back before the bot counts as offline.
    pub offline_grace: Duration,
    /// How long the first rebalance waits for bots to connect.
    pub startup_wait: Duration,
    /// Larger frames reset the connection.
    pub max_frame_bytes: usize,
    pub probe_interval: Duration,
    pub probe_timeout: Duration,
    pub failure_threshold: u32,
    pub health_concurrency: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Forward {
    /// `ws://host:port[/path]`
    pub url: String,
    /// Sent as `Authorization: Bearer <token>` when not empty.
    pub access_token: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Reverse {
    pub bind: SocketAddr,
    pub path: String,
    /// Required from every implementation that dials in, when not empty.
    pub access_token: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            connections: Vec::new(),
            reverse: None,
            action_timeout: Duration::from_secs(10),
            group_list_refresh: Duration::from_secs(600),
            offline_grace: Duration::from_secs(30),
            startup_wait: Duration::from_secs(10),
            max_frame_bytes: 16 << 20,
            probe_interval: Duration::from_secs(60),
            probe_timeout: Duration::from_secs(5),
            failure_threshold: 3,
            health_concurrency: 8,
        }
    }
}
