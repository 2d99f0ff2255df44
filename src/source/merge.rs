//! One bot, several sources: which report the engine follows.
//!
//! A bot can be reported by more than one source at once: a OneBot connection and a Koishi
//! plugin driving the same bot, two Koishi instances, or the fleet file and a live source. The
//! engine follows exactly one report per bot, its *owner*: the online report of the
//! highest-ranked source, OneBot first (it sees the bot's own connection), then HTTP reporters
//! (the framework's view; among several, the first to report the bot), then the fleet file.
//! Reports of other sources are kept aside as *shadows*; when the owner reports the bot
//! offline, the best shadow takes over with its own channel list, so a bot goes offline only
//! when no source reports it online.
//!
//! Only shadows cost memory: the owner's channel list is the index's. With one source per bot,
//! the common case, the merge keeps nothing and passes every event through.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::FleetEvent;

/// Where an event came from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SourceId {
    OneBot,
    /// An HTTP reporter (`/v1/fleet/reporters/{name}`).
    Reporter(Arc<str>),
    File,
}

impl SourceId {
    /// Lower ranks first.
    fn rank(&self) -> u8 {
        match self {
            SourceId::OneBot => 0,
            SourceId::Reporter(_) => 1,
            SourceId::File => 2,
        }
    }
}

impl std::fmt::Display for SourceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceId::OneBot => f.write_str("onebot"),
            SourceId::Reporter(name) => write!(f, "reporter {name}"),
            SourceId::File => f.write_str("fleet file"),
        }
    }
}

#[derive(Default)]
struct Reports {
    /// The source whose online report the index holds.
    owner: Option<SourceId>,
    /// Other sources reporting the bot online, with their channel lists, in arrival order.
    shadows: Vec<(SourceId, BTreeSet<String>)>,
}

/// Combines the sources' reports into one stream of events for the index.
#[derive(Default)]
pub struct Merge {
    bots: HashMap<(String, String), Reports>,
}

impl Merge {
    /// What `event` from `source` changes for the index. `owner_channels` gives the channels
    /// the index holds for the bot, asked for only when a better source takes a bot over (the
    /// old owner's list becomes its shadow).
    pub fn apply(
        &mut self,
        source: SourceId,
        event: FleetEvent,
        owner_channels: impl FnOnce(&str, &str) -> Vec<String>,
    ) -> Vec<FleetEvent> {
        let key = (event.platform().to_owned(), bot_of(&event).to_owned());
        let reports = self.bots.entry(key.clone()).or_default();
        let out = match &reports.owner {
            None => match &event {
                FleetEvent::BotOnline { .. } => {
                    reports.owner = Some(source);
                    vec![event]
                }
                // Offline, or a membership change of a bot nobody reports online: the index
                // keeps memberships of offline bots too.
                _ => vec![event],
            },
            Some(owner) if *owner == source => match event {
                FleetEvent::BotOffline { .. } => match best_shadow(&reports.shadows) {
                    Some(i) => {
                        let (next, channels) = reports.shadows.remove(i);
                        reports.owner = Some(next);
                        vec![online_with(&event, channels)]
                    }
                    None => {
                        reports.owner = None;
                        vec![event]
                    }
                },
                event => vec![event],
            },
            Some(owner) => {
                let takes_over = source.rank() < owner.rank();
                match event {
                    FleetEvent::BotOnline { .. } if takes_over => {
                        let old = reports.owner.replace(source.clone()).expect("an owner");
                        let channels = owner_channels(&key.0, &key.1).into_iter().collect();
                        reports.shadows.retain(|(s, _)| *s != source);
                        reports.shadows.push((old, channels));
                        vec![event]
                    }
                    event => {
                        shadow(&mut reports.shadows, source, event);
                        Vec::new()
                    }
                }
            }
        };
        if reports.owner.is_none() && reports.shadows.is_empty() {
            self.bots.remove(&key);
        }
        out
    }

    /// The source the engine follows for a bot, if any reports it online.
    #[cfg(test)]
    fn owner(&self, platform: &str, bot: &str) -> Option<&SourceId> {
        let key = (platform.to_owned(), bot.to_owned());
        self.bots.get(&key).and_then(|r| r.owner.as_ref())
    }
}

/// Updates a shadow report.
fn shadow(shadows: &mut Vec<(SourceId, BTreeSet<String>)>, source: SourceId, event: FleetEvent) {
    let at = shadows.iter().position(|(s, _)| *s == source);
    match (event, at) {
        (FleetEvent::BotOnline { channels, .. }, Some(i)) => {
            shadows[i].1 = channels.into_iter().collect();
        }
        (FleetEvent::BotOnline { channels, .. }, None) => {
            shadows.push((source, channels.into_iter().collect()));
        }
        (FleetEvent::BotOffline { .. }, Some(i)) => {
            shadows.remove(i);
        }
        (FleetEvent::ChannelJoined { channel, .. }, Some(i)) => {
            shadows[i].1.insert(channel);
        }
        (FleetEvent::ChannelLeft { channel, .. }, Some(i)) => {
            shadows[i].1.remove(&channel);
        }
        // Membership changes of a source that does not report the bot online.
        _ => {}
    }
}

fn best_shadow(shadows: &[(SourceId, BTreeSet<String>)]) -> Option<usize> {
    // `min_by_key` keeps the first of equals: the earliest of several reporters.
    (0..shadows.len()).min_by_key(|&i| shadows[i].0.rank())
}

fn online_with(offline: &FleetEvent, channels: BTreeSet<String>) -> FleetEvent {
    let FleetEvent::BotOffline {
        platform,
        bot,
        origin,
        ..
    } = offline
    else {
        unreachable!("called with the owner's offline event")
    };
    FleetEvent::BotOnline {
        platform: platform.clone(),
        bot: bot.clone(),
        channels: channels.into_iter().collect(),
        origin: *origin,
    }
}

fn bot_of(event: &FleetEvent) -> &str {
    match event {
        FleetEvent::BotOnline { bot, .. }
        | FleetEvent::BotOffline { bot, .. }
        | FleetEvent::ChannelJoined { bot, .. }
        | FleetEvent::ChannelLeft { bot, .. } => bot,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::Origin;

    fn online(bot: &str, channels: &[&str]) -> FleetEvent {
        FleetEvent::BotOnline {
            platform: "onebot".into(),
            bot: bot.into(),
            channels: channels.iter().map(|c| c.to_string()).collect(),
            origin: Origin::Connection,
        }
    }

    fn offline(bot: &str) -> FleetEvent {
        FleetEvent::BotOffline {
            platform: "onebot".into(),
            bot: bot.into(),
            reason: "gone".into(),
            origin: Origin::Connection,
        }
    }

    fn joined(bot: &str, channel: &str) -> FleetEvent {
        FleetEvent::ChannelJoined {
            platform: "onebot".into(),
            bot: bot.into(),
            channel: channel.into(),
        }
    }

    fn koishi() -> SourceId {
        SourceId::Reporter("koishi".into())
    }

    fn never(_: &str, _: &str) -> Vec<String> {
        panic!("the owner's channels were not needed")
    }

    #[test]
    fn one_source_passes_through_and_keeps_nothing() {
        let mut merge = Merge::default();
        for event in [online("1", &["a"]), joined("1", "b"), offline("1")] {
            assert_eq!(merge.apply(koishi(), event.clone(), never), [event]);
        }
        assert!(merge.bots.is_empty());
    }

    #[test]
    fn onebot_takes_over_and_the_reporter_takes_back_when_it_goes() {
        let mut merge = Merge::default();
        merge.apply(koishi(), online("1", &["a", "b"]), never);
        // OneBot outranks the reporter; the reporter's list (read from the index) is kept.
        let out = merge.apply(SourceId::OneBot, online("1", &["a"]), |_, _| {
            vec!["a".into(), "b".into()]
        });
        assert_eq!(out, [online("1", &["a"])]);
        assert_eq!(merge.owner("onebot", "1"), Some(&SourceId::OneBot));
        // The reporter's own changes are kept aside while OneBot owns the bot.
        assert!(merge.apply(koishi(), joined("1", "c"), never).is_empty());
        // OneBot loses the bot: the reporter's list comes back, with its join.
        let out = merge.apply(SourceId::OneBot, offline("1"), never);
        assert_eq!(out, [online("1", &["a", "b", "c"])]);
        assert_eq!(merge.owner("onebot", "1"), Some(&koishi()));
        // The last source lets go: the bot is offline and nothing is kept.
        assert_eq!(merge.apply(koishi(), offline("1"), never), [offline("1")]);
        assert!(merge.bots.is_empty());
    }

    #[test]
    fn a_lower_source_never_displaces_the_owner() {
        let mut merge = Merge::default();
        merge.apply(SourceId::OneBot, online("1", &["a"]), never);
        assert!(
            merge
                .apply(SourceId::File, online("1", &["z"]), never)
                .is_empty()
        );
        assert!(merge.apply(koishi(), online("1", &["y"]), never).is_empty());
        // Shadows leave quietly.
        assert!(merge.apply(koishi(), offline("1"), never).is_empty());
        // The best remaining shadow is the file.
        assert_eq!(
            merge.apply(SourceId::OneBot, offline("1"), never),
            [online("1", &["z"])]
        );
    }

    #[test]
    fn the_first_of_two_reporters_owns_the_bot() {
        let (a, b) = (
            SourceId::Reporter("a".into()),
            SourceId::Reporter("b".into()),
        );
        let mut merge = Merge::default();
        merge.apply(a.clone(), online("1", &["x"]), never);
        assert!(
            merge
                .apply(b.clone(), online("1", &["y"]), never)
                .is_empty()
        );
        assert_eq!(merge.owner("onebot", "1"), Some(&a));
        assert_eq!(merge.apply(a, offline("1"), never), [online("1", &["y"])]);
        assert_eq!(merge.owner("onebot", "1"), Some(&b));
    }
}
