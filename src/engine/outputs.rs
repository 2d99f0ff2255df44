//! Where the engine's results go besides the SQL store: the view the API reads, the Redis
//! publication, presence, metrics.

use std::sync::Arc;

use tokio::sync::watch;

use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::presence::Presence;
use crate::publication::follower::Follower;
use crate::publication::moving::{self, Moves};
use crate::publication::publisher::{Changes, Publisher};
use crate::store::fence::Duty;
use crate::view::{MOVED_MARKS, Route, RunSummary, View};
use std::time::Instant;

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
    /// Under leadership, the voluntary moves a leader has planned and not made yet: the
    /// publisher makes them once every follower has seen them announced
    /// ([`crate::publication::moving`]).
    pub moves: Option<Moves>,
}

impl Outputs {
    /// Shows a run in `GET /v1/status`: under leadership once the voluntary moves it held are
    /// made, so that a run shown is in force in the view.
    pub(super) fn show_run(&self, duty: &Duty, run: RunSummary) {
        match (duty, &self.moves) {
            (Duty::Leader(_), Some(moves)) if self.publisher.is_some() => {
                moves.show_run(&self.view, run)
            }
            _ => self.view.set_last_run(run),
        }
    }

    /// Changes to show, platform by platform, then publish at once; a leader's voluntary
    /// moves wait for its followers.
    pub(super) fn changes(&self, duty: &Duty) -> Shown<'_> {
        let moves = match duty {
            Duty::Leader(_) if self.publisher.is_some() => self.moves.as_ref(),
            Duty::Leader(_) | Duty::Alone | Duty::Follower => None,
        };
        Shown {
            outputs: self,
            moves,
            published: Vec::new(),
            moving_changed: false,
        }
    }
}

/// Changes shown in the view as they are added, and published together by
/// [`Shown::publish`] (one Redis version for a pass or a plan).
pub(super) struct Shown<'a> {
    outputs: &'a Outputs,
    /// Where voluntary moves wait, when they do.
    moves: Option<&'a Moves>,
    published: Changes,
    /// Whether a voluntary move was held, or a held one given up for a newer change: the
    /// followers are to hear what moves now.
    moving_changed: bool,
}

impl Shown<'_> {
    /// One platform's changed channels with their new bots.
    pub(super) fn add<'r>(
        &mut self,
        platform: &str,
        rows: impl Iterator<Item = (&'r str, Option<&'r str>)> + Clone,
    ) {
        let view = &self.outputs.view;
        let Some(moves) = self.moves else {
            view.apply(platform, rows.clone());
            self.publish_rows(platform, rows);
            return;
        };
        // Under the moves' lock: a move the publisher is about to make yields to this newer
        // change of its channel.
        let mut held = moves.lock();
        let pending = &mut held.moves;
        let mut now = Vec::new();
        let mut forced = Vec::new();
        for (channel, bot) in rows {
            let change = Change::of(&view.route(platform, channel), bot);
            if change == Change::Forced && forced.len() < MOVED_MARKS {
                forced.push(channel);
            }
            if change == Change::Voluntary {
                let key = (platform.to_owned(), channel.to_owned());
                pending.insert(key, bot.map(str::to_owned));
                self.moving_changed = true;
            } else {
                if !pending.is_empty() {
                    let key = (platform.to_owned(), channel.to_owned());
                    self.moving_changed |= pending.remove(&key).is_some();
                }
                now.push((channel, bot));
            }
        }
        // Marked first: no ask in between finds a new assignee answering without its claim.
        if !forced.is_empty() {
            view.mark_just_moved(
                platform,
                forced,
                Instant::now() + moving::CLAIMS_AFTER_A_MOVE,
            );
        }
        view.apply(platform, now.iter().copied());
        drop(held);
        self.publish_rows(platform, now.into_iter());
    }

    fn publish_rows<'r>(
        &mut self,
        platform: &str,
        rows: impl Iterator<Item = (&'r str, Option<&'r str>)>,
    ) {
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
            if self.moving_changed {
                publisher.held();
            }
        }
    }
}

/// How a channel's change of assignee is made under leadership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// Its assignee of this moment is online, and could still answer: it waits for the
    /// followers ([`crate::publication::moving`]).
    Voluntary,
    /// A bot in place of an offline one, or of none: made at once, and claimed for a while.
    Forced,
    /// Made at once: no bot given (or the same), or a channel nobody handles by assignment.
    Plain,
}

impl Change {
    /// `route` is the channel's now; `bot` its new assignee. A channel announced as moving
    /// still names its assignee of this moment (the leader routes its own announced channels
    /// so): a newer plan's change of it waits like any voluntary move.
    fn of(route: &Route, bot: Option<&str>) -> Change {
        match route {
            Route::Online(old) | Route::Moving(Some(old)) if bot != Some(&**old) => {
                Change::Voluntary
            }
            Route::Offline(_) | Route::Unassigned | Route::Moving(None) if bot.is_some() => {
                Change::Forced
            }
            _ => Change::Plain,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_announced_as_moving_changes_as_its_assignee_would() {
        let one: Arc<str> = Arc::from("1");
        for (route, bot, want) in [
            (Route::Online(one.clone()), Some("2"), Change::Voluntary),
            (Route::Online(one.clone()), None, Change::Voluntary),
            (Route::Online(one.clone()), Some("1"), Change::Plain),
            (
                Route::Moving(Some(one.clone())),
                Some("2"),
                Change::Voluntary,
            ),
            (Route::Moving(Some(one.clone())), Some("1"), Change::Plain),
            (Route::Offline(one.clone()), Some("2"), Change::Forced),
            (Route::Unassigned, Some("2"), Change::Forced),
            (Route::Moving(None), Some("2"), Change::Forced),
            (Route::Moving(None), None, Change::Plain),
            (Route::Held, Some("2"), Change::Plain),
            (Route::Excluded { assignee: None }, Some("2"), Change::Plain),
        ] {
            assert_eq!(Change::of(&route, bot), want, "{route:?} to {bot:?}");
        }
    }
}
