//! What the store writes of a plan: the changed channels' rows, the history record, and the
//! weights that grew since the last plan.

use std::sync::Arc;

use super::Engine;
use crate::balance::Plan;
use crate::index::{BotIx, ChanIx, PlatformIndex};
use crate::store::{Batch, ChannelWrite, PlatformRecord, RunRecord, WeightWrite};
use crate::triggers::Causes;

/// The rows of one platform's changed channels. Shared strings: the platform and each bot's
/// id once per call, whatever the number of rows.
pub(super) fn channel_writes<'a>(
    platform: Arc<str>,
    index: &'a PlatformIndex,
    changes: &'a [(ChanIx, Option<BotIx>)],
) -> impl Iterator<Item = ChannelWrite> + 'a {
    let none: Arc<str> = Arc::from("");
    let mut bots: Vec<Option<Arc<str>>> = vec![None; index.bot_count()];
    changes.iter().map(move |&(c, bot)| ChannelWrite {
        platform: platform.clone(),
        channel: Arc::from(&*index.channel_id(c)),
        assignee: bot.map_or_else(
            || none.clone(),
            |b| {
                bots[b as usize]
                    .get_or_insert_with(|| Arc::from(index.bot_id(b)))
                    .clone()
            },
        ),
    })
}

/// The channel weights to write: (platform, channel, weight) as of `at_ms`.
pub(super) fn weight_writes(weights: Vec<(String, String, f64)>, at_ms: i64) -> Vec<WeightWrite> {
    weights
        .into_iter()
        .map(|(platform, channel, weight)| WeightWrite {
            platform,
            channel,
            weight,
            at_ms,
        })
        .collect()
}

impl Engine {
    /// The rows and the history record of a plan.
    pub(super) fn batch(
        &self,
        plan: &Plan,
        causes: &Causes,
        started_at_ms: i64,
        term: i64,
        weights: Vec<(String, String, f64)>,
    ) -> Batch {
        // A start-up's rows are ~18 MB of fresh memory: on huge pages (see [`crate::pages`]).
        let mut batch = Batch {
            writes: crate::pages::with_capacity(
                plan.platforms.iter().map(|p| p.changes.len()).sum(),
            ),
            runs: Vec::new(),
            weights: weight_writes(weights, self.outputs.clock.unix_ms()),
            overrides: Vec::new(),
        };
        let mut platforms = Vec::new();
        for p in &plan.platforms {
            let Some(index) = self.index.platform(&p.platform) else {
                continue;
            };
            batch.writes.extend(channel_writes(
                Arc::from(p.platform.as_str()),
                index,
                &p.changes,
            ));
            let s = &p.stats;
            platforms.push(PlatformRecord {
                platform: p.platform.clone(),
                channels: p.assigned as i64,
                unassigned: p.unassigned as i64,
                forced: (p.forced + self.unattended.moves(&p.platform)) as i64,
                voluntary: p.voluntary as i64,
                bots: s.loads.len() as i64,
                mean: s.mean,
                stddev: s.stddev,
                min: s.min as i64,
                max: s.max as i64,
                gap: p.certificate.as_ref().map(|c| c.gap()),
            });
        }
        batch.runs.push(RunRecord {
            started_at_ms,
            finished_at_ms: self.outputs.clock.unix_ms(),
            causes: causes.to_string(),
            strategy: plan.strategy.to_string(),
            term,
            platforms,
        });
        batch
    }
}
