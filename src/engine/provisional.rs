//! Provisional assignees: after each batch of events, the channels those events may have left
//! without a valid bot get one at once, committed and published before any debounced
//! rebalance ([`crate::balance::provisional`] chooses the bots).

use std::collections::HashMap;
use std::sync::Arc;

use tracing::info;

use super::{Engine, Phase, record};
use crate::balance::Before;
use crate::balance::provisional::{self, Stored};
use crate::index::{ChanIx, FleetIndex};
use crate::operator::{Drain, Pin};
use crate::source::FleetEvent;
use crate::store::{Batch, OverrideChange};

/// Channels the last events may have left without a valid bot, and the moves made at once
/// since the last rebalance.
#[derive(Default)]
pub(super) struct Unattended {
    /// Per platform, in the order noted (duplicates allowed).
    channels: HashMap<String, Vec<ChanIx>>,
    /// Moves made at once since the last rebalance, per platform: its history record counts
    /// them with its own forced moves, so the history still holds every move.
    moves: HashMap<String, usize>,
    /// Per platform, the channels given a bot at once since the last rebalance, with the
    /// assignee each had before the first of those: the rebalance counts its moves from the
    /// assignment before the events.
    before: Before,
}

impl Unattended {
    /// Notes the channels an event may have left without a valid bot: a bot's channels when
    /// it comes (those with no bot, or a bot that is gone) or goes (those it was assigned),
    /// and the channel a bot joined or left. O(degree), like the event itself.
    pub(super) fn note(&mut self, index: &FleetIndex, event: &FleetEvent) {
        let Some(p) = index.platform(event.platform()) else {
            return;
        };
        let mut noted = Vec::new();
        match event {
            FleetEvent::BotOnline { bot, .. } => {
                if let Some(b) = p.find_bot(bot) {
                    noted.extend_from_slice(p.channels_of(b));
                }
            }
            FleetEvent::BotOffline { bot, .. } => {
                if let Some(b) = p.find_bot(bot) {
                    let assigned = p.channels_of(b).iter().copied();
                    noted.extend(assigned.filter(|&c| p.assignee(c) == Some(b)));
                }
            }
            FleetEvent::ChannelJoined { channel, .. } | FleetEvent::ChannelLeft { channel, .. } => {
                noted.extend(p.find_channel(channel));
            }
        }
        if !noted.is_empty() {
            self.channels
                .entry(event.platform().to_owned())
                .or_default()
                .extend(noted);
        }
    }

    /// Notes the channels an operator's change concerns: a pinned or released group, a drained
    /// or undrained bot's groups.
    pub(super) fn note_override(&mut self, index: &FleetIndex, change: &OverrideChange) {
        let (platform, noted) = match change {
            OverrideChange::Pin(Pin {
                platform, channel, ..
            })
            | OverrideChange::Unpin { platform, channel } => {
                let Some(p) = index.platform(platform) else {
                    return;
                };
                (platform, p.find_channel(channel).into_iter().collect())
            }
            OverrideChange::Drain(Drain { platform, bot, .. })
            | OverrideChange::Undrain { platform, bot } => {
                let Some(p) = index.platform(platform) else {
                    return;
                };
                let channels = p.find_bot(bot).map(|b| p.channels_of(b).to_vec());
                (platform, channels.unwrap_or_default())
            }
        };
        if !noted.is_empty() {
            self.channels
                .entry(platform.clone())
                .or_default()
                .extend(noted);
        }
    }

    /// The moves made at once on `platform` since the last rebalance.
    pub(super) fn moves(&self, platform: &str) -> usize {
        self.moves.get(platform).copied().unwrap_or(0)
    }

    /// Every platform's moves made at once since the last rebalance, which starts now.
    pub(super) fn take_moves(&mut self) -> usize {
        self.moves.drain().map(|(_, n)| n).sum()
    }

    /// The assignment before the provisional passes since the last rebalance (see
    /// [`Unattended::before`]), for the rebalance that starts now.
    pub(super) fn take_before(&mut self) -> Before {
        std::mem::take(&mut self.before)
    }
}

impl Engine {
    /// Gives every channel noted since the last call that still lacks a valid bot its
    /// provisional one, and commits and publishes it at once; the debounced rebalance that
    /// the same events asked for improves the balance later, counting its moves from the
    /// assignment before them.
    /// Before the sources have reported, a stored assignee that no source has reported yet is
    /// held (it may still be connecting); one reported offline is replaced like later.
    pub(super) fn assign_provisionally(&mut self) {
        if self.unattended.channels.is_empty() {
            return;
        }
        let unattended = std::mem::take(&mut self.unattended.channels);
        if self.duty.writing_term().is_none() {
            return;
        }
        let mut batch = Batch::default();
        let mut shown = self.outputs.changes(&self.duty);
        for (platform, mut channels) in unattended {
            if self.index.platform(&platform).is_none() || !self.rules.platform_enabled(&platform) {
                continue;
            }
            let p = self.index.platform_mut(&platform);
            let resolved = self.rules.resolve(p);
            let reported: Vec<bool> = match self.phase {
                Phase::Planning => Vec::new(),
                Phase::AwaitingSources => (0..p.bot_count() as u32)
                    .map(|b| self.events.reported(&platform, p.bot_id(b)))
                    .collect(),
            };
            let stored = match self.phase {
                Phase::Planning => Stored::Replace,
                Phase::AwaitingSources => Stored::Hold {
                    reported: &reported,
                },
            };
            let done = provisional::assign(p, &resolved, &mut channels, stored);
            if done.changes.is_empty() {
                continue;
            }
            let earlier = self.unattended.before.entry(platform.clone()).or_default();
            for (&(c, _), &was) in done.changes.iter().zip(&done.earlier) {
                earlier.entry(c).or_insert(was);
            }
            let p = &*p;
            let changes: Vec<_> = done.changes.iter().map(|&(c, b)| (c, Some(b))).collect();
            let rows: Vec<_> = changes
                .iter()
                .map(|&(c, b)| (p.channel_id(c), b.map(|b| p.bot_id(b))))
                .collect();
            shown.add(&platform, rows.iter().map(|(c, b)| (&**c, *b)));
            batch.writes.extend(record::channel_writes(
                Arc::from(platform.as_str()),
                p,
                &changes,
            ));
            *self.unattended.moves.entry(platform.clone()).or_default() += done.forced;
            let metrics = &self.outputs.metrics;
            for (kind, n) in [("forced", done.forced), ("first", done.first)] {
                metrics
                    .provisional
                    .with_label_values(&[platform.as_str(), kind])
                    .inc_by(n as u64);
            }
            // Moves are moves, made at once or by a rebalance.
            metrics
                .moves
                .with_label_values(&[platform.as_str(), "forced"])
                .inc_by(done.forced as u64);
            info!(
                "platform {platform}: {} channel(s) given a bot at once ({} whose bot is gone, \
                 {} that had none); the rebalance follows",
                done.changes.len(),
                done.forced,
                done.first
            );
        }
        self.writer.submit(batch);
        shown.publish();
    }
}
