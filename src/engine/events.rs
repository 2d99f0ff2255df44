//! Fleet events: each source's report combined with the others' ([`Merge`]), applied to the
//! index, mirrored into the view and presence, and turned into a request for a rebalance when
//! it can matter.

use std::collections::{HashMap, HashSet};

use tokio::time::Instant;
use tracing::{debug, info};

use super::{Engine, Phase};
use crate::balance::provisional::Provisional;
use crate::source::merge::{Merge, SourceId};
use crate::source::{FleetEvent, Origin};
use crate::triggers::Cause;

/// What the engine remembers of the events it applied.
#[derive(Default)]
pub(super) struct Events {
    /// Which source's report of each bot the index follows.
    merge: Merge,
    /// Since when each offline bot has been offline: gone for longer than
    /// `forgetBotsAfter`, it is forgotten (index, view, presence).
    pub(super) offline_since: HashMap<(String, String), Instant>,
    /// Bots a source has reported (online or offline) since the start: before the sources
    /// have all reported, only the stored assignees of the others are held.
    reported: HashSet<(String, String)>,
}

impl Events {
    /// Whether a source has reported `bot` since the start (asked only before the sources
    /// have all reported).
    pub(super) fn reported(&self, platform: &str, bot: &str) -> bool {
        self.reported
            .contains(&(platform.to_owned(), bot.to_owned()))
    }

    /// The sources have reported: who did no longer matters.
    pub(super) fn sources_reported(&mut self) {
        self.reported = HashSet::new();
    }
}

impl Engine {
    /// Takes a source's event: what it changes once combined with the other sources' reports
    /// of the same bot goes to the index.
    pub fn report(&mut self, source: SourceId, event: FleetEvent) {
        let index = &self.index;
        let events = self.events.merge.apply(source, event, |platform, bot| {
            let Some(p) = index.platform(platform) else {
                return Vec::new();
            };
            p.find_bot(bot).map_or_else(Vec::new, |b| {
                p.channels_of(b)
                    .iter()
                    .map(|&c| p.channel_id(c).to_owned())
                    .collect()
            })
        });
        for event in events {
            self.apply(event);
        }
    }

    /// Applies a fleet event to the index and asks for a rebalance when it can matter.
    fn apply(&mut self, event: FleetEvent) {
        let enabled = self.rules.platform_enabled(event.platform());
        let awaiting = self.phase == Phase::AwaitingSources;
        let cause = match &event {
            FleetEvent::BotOnline {
                platform,
                bot,
                channels,
                origin,
            } => {
                if awaiting {
                    self.events.reported.insert((platform.clone(), bot.clone()));
                }
                self.events
                    .offline_since
                    .remove(&(platform.clone(), bot.clone()));
                self.index.bot_reported(platform, bot, channels);
                info!(
                    "bot {platform}:{bot} online in {} channel(s)",
                    channels.len()
                );
                Some(match origin {
                    Origin::Status => Cause::BotStatus,
                    Origin::Connection => Cause::BotOnline,
                })
            }
            FleetEvent::BotOffline {
                platform,
                bot,
                reason,
                origin,
            } => {
                if awaiting {
                    self.events.reported.insert((platform.clone(), bot.clone()));
                }
                self.events
                    .offline_since
                    .entry((platform.clone(), bot.clone()))
                    .or_insert_with(Instant::now);
                self.index.bot_offline(platform, bot);
                info!("bot {platform}:{bot} offline ({reason})");
                Some(match origin {
                    Origin::Status => Cause::BotStatus,
                    Origin::Connection => Cause::BotOffline,
                })
            }
            FleetEvent::ChannelJoined {
                platform,
                bot,
                channel,
            } => {
                self.index.channel_joined(platform, bot, channel);
                debug!("bot {platform}:{bot} joined channel {channel}");
                Some(Cause::ChannelJoined)
            }
            FleetEvent::ChannelLeft {
                platform,
                bot,
                channel,
            } => {
                let p = self.index.platform_mut(platform);
                let was_assignee = p
                    .find_channel(channel)
                    .and_then(|c| p.assignee(c))
                    .is_some_and(|a| p.find_bot(bot) == Some(a));
                self.index.channel_left(platform, bot, channel);
                debug!("bot {platform}:{bot} left channel {channel}");
                // The plugin's rule: worth a rebalance if someone is left to take over; and
                // when the departed bot was the assignee, also to unassign a channel nobody
                // is left in (its row must not keep naming a bot that is gone).
                let p = self.index.platform_mut(platform);
                let someone = p
                    .find_channel(channel)
                    .is_some_and(|c| p.members(c).iter().any(|&b| p.is_online(b)));
                (someone || was_assignee).then_some(Cause::ChannelLeft)
            }
        };
        self.reflect(&event);
        if let Some(cause) = cause.filter(|_| enabled) {
            if self.config.provisional == Provisional::Immediate {
                self.unattended.note(&self.index, &event);
            }
            self.request(cause);
        }
    }

    /// Mirrors an event into the view and, for bots no live connection reports on (the fleet
    /// file), into the presence registry.
    fn reflect(&self, event: &FleetEvent) {
        let (platform, bot, online) = match event {
            FleetEvent::BotOnline { platform, bot, .. } => (platform, bot, Some(true)),
            FleetEvent::BotOffline { platform, bot, .. } => (platform, bot, Some(false)),
            FleetEvent::ChannelJoined { platform, bot, .. }
            | FleetEvent::ChannelLeft { platform, bot, .. } => (platform, bot, None),
        };
        let online = online.unwrap_or_else(|| {
            self.index
                .platform(platform)
                .and_then(|p| p.find_bot(bot).map(|b| p.is_online(b)))
                .unwrap_or(false)
        });
        let outputs = &self.outputs;
        outputs.view.set_bot(platform, bot, online);
        let unmanaged = outputs
            .presence
            .get(platform, bot)
            .is_none_or(|p| p.mode.is_none());
        if unmanaged {
            outputs.presence.update(platform, bot, |p| {
                if online && !p.online {
                    p.connected_at = Some(outputs.clock.system_time());
                }
                p.online = online;
            });
        }
        if matches!(
            event,
            FleetEvent::BotOnline { .. } | FleetEvent::BotOffline { .. }
        ) {
            outputs.presence_changed.send_replace(());
        }
    }
}
