//! Fleet sources turn the outside world into [`FleetEvent`]s; a source knows its protocol and
//! nothing else.

pub mod file;
pub mod http;
pub mod merge;
pub mod onebot;

use std::path::{Path, PathBuf};

use crate::model::ChannelIds;

/// `sources:`: where the fleet is learnt from.
#[derive(Debug, Clone, PartialEq, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// A fleet file (YAML or JSON) that is watched like a live fleet.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// Live OneBot v11 connections.
    #[serde(default)]
    pub onebot: Option<onebot::Settings>,
    /// Fleet reporters over the HTTP API (the Koishi and NoneBot plugins).
    #[serde(default)]
    pub http: Option<http::Settings>,
}

impl Settings {
    /// Makes the fleet file's path relative to the config file's directory.
    pub fn resolve(&mut self, base: &Path) {
        if let Some(file) = &mut self.file {
            *file = base.join(&*file);
        }
        if let Some(onebot) = &mut self.onebot {
            onebot.resolve();
        }
    }
}

/// Something that happened to a bot of the fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FleetEvent {
    /// The bot is online with exactly these channels (its fresh group list).
    BotOnline {
        platform: String,
        bot: String,
        channels: ChannelIds,
        origin: Origin,
    },
    BotOffline {
        platform: String,
        bot: String,
        /// Why, for the log: "connection lost", "no heartbeat for 3 intervals", ...
        reason: String,
        origin: Origin,
    },
    ChannelJoined {
        platform: String,
        bot: String,
        channel: String,
    },
    ChannelLeft {
        platform: String,
        bot: String,
        channel: String,
    },
}

/// What changed: the bot's connection, or its status (health, login) on a live connection.
/// They have their own trigger delays (`botOnline`/`botOffline`, `botStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Connection,
    Status,
}

impl FleetEvent {
    pub fn platform(&self) -> &str {
        match self {
            FleetEvent::BotOnline { platform, .. }
            | FleetEvent::BotOffline { platform, .. }
            | FleetEvent::ChannelJoined { platform, .. }
            | FleetEvent::ChannelLeft { platform, .. } => platform,
        }
    }
}
