//! Under leadership: taking over from what the database holds, following, and a follower's
//! mirror of the leader's publication.

use tracing::info;

use super::Engine;
use crate::balance::Planner;
use crate::index::FleetIndex;
use crate::leader::Turn;
use crate::store::AssignmentRow;
use crate::store::fence::{Duty, Fence};
use crate::triggers::Cause;
use crate::view::View;

impl Engine {
    pub(super) fn take_turn(&mut self, turn: Turn) {
        match turn {
            Turn::Lead {
                fence,
                stored,
                weights,
                overrides,
            } => {
                self.load_weights(weights);
                self.set_overrides(overrides);
                self.lead(fence, stored);
            }
            Turn::Follow => self.follow(),
        }
    }

    /// Takes over: plans from what the database holds, fenced by the new term. Nothing moves
    /// when the fleet is what the previous leader planned for.
    fn lead(&mut self, fence: Fence, stored: Vec<AssignmentRow>) {
        let term = fence.term;
        let count = stored.len();
        load_assignment(&mut self.index, &self.outputs.view, stored);
        // A leader answers every channel itself, and acknowledges no announcement.
        self.outputs.view.set_moving([]);
        if let Some(followed) = &self.outputs.followed {
            followed.serve(None);
        }
        // The incremental planner's state belongs to the assignment it last planned.
        self.planner = Planner::new(self.config.strategy, self.rules.clone());
        self.set_duty(Duty::Leader(fence));
        info!("leading in term {term} from {count} stored assignment(s)");
        self.request(Cause::Takeover);
    }

    fn follow(&mut self) {
        if self.duty == Duty::Follower {
            return;
        }
        self.set_duty(Duty::Follower);
        // Moves this instance announced as a leader are the new leader's to make, or not.
        if let Some(moves) = &self.outputs.moves {
            moves.clear();
        }
        info!("following");
        self.mirror_publication();
    }

    /// The writer and the publication follow the engine's duty.
    fn set_duty(&mut self, duty: Duty) {
        self.writer.set_duty(duty.clone());
        if let Some(publisher) = &self.outputs.publisher {
            publisher.set_duty(duty.clone());
        }
        self.duty = duty;
    }

    /// A follower's index and view take the leader's published assignment, so its API
    /// answers as the leader's does.
    pub(super) fn mirror_publication(&mut self) {
        if self.duty != Duty::Follower {
            return;
        }
        let Some(followed) = &self.outputs.followed else {
            return;
        };
        let (published, moving) = followed.read(|published, moving| {
            let rows = published.iter().flat_map(|(platform, channels)| {
                channels.iter().map(|(channel, bot)| AssignmentRow {
                    platform: platform.clone(),
                    channel: channel.clone(),
                    bot: bot.clone(),
                })
            });
            (rows.collect(), moving.clone())
        });
        let view = &self.outputs.view;
        load_assignment(&mut self.index, view, published);
        // After the assignment: a channel no longer moving is answered from the version that
        // made its move, never from the one before.
        view.set_moving(moving.channels.iter().flat_map(|(platform, channels)| {
            channels.iter().map(|c| (platform.as_str(), c.as_str()))
        }));
        followed.serve(Some(moving.token));
    }
}

/// Makes `stored` the index's and the view's assignment (what the database holds, or what the
/// leader published): every platform's rows, so a platform enabled later still starts from its
/// stored state.
pub(super) fn load_assignment(index: &mut FleetIndex, view: &View, stored: Vec<AssignmentRow>) {
    for p in index.platforms_mut() {
        for c in 0..p.channel_count() as u32 {
            if p.assignee(c).is_some() {
                p.set_assignee(c, None);
            }
        }
    }
    for row in stored {
        let p = index.platform_mut(&row.platform);
        let c = p.add_channel(&row.channel);
        let b = p.add_bot(&row.bot);
        p.set_assignee(c, Some(b));
    }
    for p in index.platforms_mut() {
        p.take_journal();
        let assignment: Vec<_> = (0..p.channel_count() as u32)
            .filter_map(|c| p.assignee(c).map(|b| (p.channel_id(c), p.bot_id(b))))
            .collect();
        view.replace(p.name(), assignment.iter().map(|(c, b)| (&**c, *b)));
    }
}
