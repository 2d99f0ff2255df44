//! `sources.onebot`: read, defaulted and validated here (a new key touches this file and
//! docs/configuration.md, which `tests/it/config_reference.rs` keeps in step).

use std::net::SocketAddr;

use serde::Deserialize;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::secret::Secret;
use crate::yaml::{AtLeast, Seconds, checked_str, socket_addr};

/// A bot missing this many heartbeat intervals in a row counts as offline.
pub const HEARTBEAT_MISSES: u32 = 3;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Settings {
    /// Default token of every connection.
    pub access_token: Secret,
    /// Forward WebSocket connections: auto-assign dials each implementation.
    pub connections: Vec<Forward>,
    /// The reverse WebSocket server implementations dial, if enabled.
    pub reverse: Option<Reverse>,
    /// How long an action may take to answer.
    pub action_timeout: Seconds<100>,
    /// How often each bot's group list is fetched again to repair missed notices.
    pub group_list_refresh: Seconds<1000>,
    /// How long a lost connection may take to come back before the bot counts as offline.
    pub offline_grace: Seconds<0>,
    /// How long the first rebalance waits for bots to connect.
    pub startup_wait: Seconds<0>,
    /// Larger frames close the connection (1009).
    pub max_frame_bytes: AtLeast<1024>,
    /// More groups than this from one bot are cut (with a warning): a bot cannot grow the
    /// service's memory without bound.
    pub max_groups_per_bot: AtLeast<1>,
    pub health: Health,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            access_token: Secret::default(),
            connections: Vec::new(),
            reverse: None,
            action_timeout: Seconds::secs(10),
            group_list_refresh: Seconds::secs(600),
            offline_grace: Seconds::secs(30),
            startup_wait: Seconds::secs(10),
            max_frame_bytes: AtLeast(16 << 20),
            max_groups_per_bot: AtLeast(20_000),
            health: Health::default(),
        }
    }
}

impl Settings {
    /// The WebSocket settings of every connection, forward or reverse.
    pub fn websocket(&self) -> WebSocketConfig {
        let max = self.max_frame_bytes.get() as usize;
        WebSocketConfig::default()
            .max_message_size(Some(max))
            .max_frame_size(Some(max))
            // tungstenite zero-fills this much of its buffer before every read from the
            // socket: at its default of 128 KiB, a start-up's 200 group lists (~500 KB
            // each) zero-filled ~220 MB and left ~11 MB more resident. A group list now
            // takes ~30 reads of at most 16 KiB instead of ~4: a few µs each.
            .read_buffer_size(16 * 1024)
    }

    /// Connections without their own token use the section's.
    pub fn resolve(&mut self) {
        for c in &mut self.connections {
            if c.access_token.is_none() {
                c.access_token = Some(self.access_token.clone());
            }
        }
        if let Some(r) = &mut self.reverse
            && r.access_token.is_none()
        {
            r.access_token = Some(self.access_token.clone());
        }
    }
}

/// `health`: Pallas-Bot's status probes and quarantine.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Health {
    pub probe_interval: Seconds<100>,
    pub probe_timeout: Seconds<100>,
    /// Consecutive failed probes that quarantine a bot.
    pub failure_threshold: AtLeast<1>,
    /// Probes at once.
    pub concurrency: AtLeast<1>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            probe_interval: Seconds::secs(60),
            probe_timeout: Seconds::secs(5),
            failure_threshold: AtLeast(3),
            concurrency: AtLeast(8),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Forward {
    /// `ws://host:port[/path]`
    #[serde(deserialize_with = "ws_url")]
    pub url: String,
    /// Sent as `Authorization: Bearer <token>` when not empty (default: the section's).
    #[serde(default)]
    pub access_token: Option<Secret>,
}

impl Forward {
    pub fn token(&self) -> &str {
        self.access_token.as_ref().map_or("", Secret::expose)
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Reverse {
    #[serde(deserialize_with = "socket_addr")]
    pub bind: SocketAddr,
    #[serde(default = "default_path", deserialize_with = "path")]
    pub path: String,
    /// Required from every implementation that dials in, when not empty.
    #[serde(default)]
    pub access_token: Option<Secret>,
}

impl Reverse {
    pub fn token(&self) -> &str {
        self.access_token.as_ref().map_or("", Secret::expose)
    }
}

fn default_path() -> String {
    "/onebot/v11/ws".to_owned()
}

fn ws_url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked_str(d, |url| {
        if url.starts_with("wss://") {
            return Err(
                "wss:// is not supported; use ws:// (behind a TLS-terminating proxy if needed)"
                    .to_owned(),
            );
        }
        if !url.starts_with("ws://") || url.len() <= "ws://".len() {
            return Err(format!(
                "expected ws://host:port[/path], got {:?}",
                crate::secret::redact_url(url)
            ));
        }
        Ok(url.to_owned())
    })
}

fn path<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked_str(d, |p| {
        if p.starts_with('/') {
            Ok(p.to_owned())
        } else {
            Err(format!("must start with / (got {p:?})"))
        }
    })
}
