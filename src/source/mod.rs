//! Fleet sources turn the outside world into [`FleetEvent`]s; a source knows its protocol and
//! nothing else.

pub mod file;

/// Something that happened to a bot of the fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FleetEvent {
    /// The bot is online with exactly these channels (its fresh group list).
    BotOnline {
        platform: String,
        bot: String,
        channels: Vec<String>,
    },
    BotOffline {
        platform: String,
        bot: String,
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
