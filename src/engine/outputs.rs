//! Where the engine's results go besides the SQL store: the view the API reads, the Redis
//! publication, presence, metrics.

use std::sync::Arc;

use tokio::sync::watch;

use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::presence::Presence;
use crate::publication::follower::Follower;
use crate::publication::publisher::{Changes, Publisher};
use crate::view::View;

pub struct Outputs {
    /// The assignment and fleet as the API sees it.
    pub view: View,
    /// Redis publication, if configured.
    pub publisher: Option<Publisher>,
    /// Per-bot state; the engine keeps it for bots no live connection reports on.
    pub presence: Presence,
    /// Bumped when a bot goes online or offline; every listener sees it (the presence
    /// registry refreshes at once).
    pub presence_changed: watch::Sender<()>,
    /// Wall time, for history records and presence.
    pub clock: Clock,
    pub metrics: Arc<Metrics>,
    /// The leader's publication, read by followers (under leadership).
    pub followed: Option<Follower>,
}

impl Outputs {
    /// Changes to show, platform by platform, then publish at once.
    pub(super) fn changes(&self) -> Shown<'_> {
        Shown {
            outputs: self,
            published: Vec::new(),
        }
    }
}

/// Changes shown in the view as they are added, and published together by
/// [`Shown::publish`] (one Redis version for a pass or a plan).
pub(super) struct Shown<'a> {
    outputs: &'a Outputs,
    published: Changes,
}

impl Shown<'_> {
    /// One platform's changed channels with their new bots.
    pub(super) fn add<'r>(
        &mut self,
        platform: &str,
        rows: impl Iterator<Item = (&'r str, Option<&'r str>)> + Clone,
    ) {
        self.outputs.view.apply(platform, rows.clone());
        if self.outputs.publisher.is_some() {
            self.published.extend(rows.map(|(channel, bot)| {
                (
                    platform.to_owned(),
                    channel.to_owned(),
                    bot.map(str::to_owned),
                )
            }));
        }
    }

    pub(super) fn publish(self) {
        if let Some(publisher) = &self.outputs.publisher {
            publisher.publish(self.published);
        }
    }
}
