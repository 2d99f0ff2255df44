//! Message counts folded into the channel weights (`balanceBy: messages`), and the weights as
//! the API reads them.

use std::time::Duration;

use tracing::info;

use super::Engine;
use crate::engine_handle::ChannelWeight;
use crate::index::ChanIx;
use crate::store::WeightWrite;

impl Engine {
    /// Channel weights as stored (by this instance or the last leader): each decayed by the
    /// time since it was written. A channel not known yet is learnt, so its weight is there
    /// when a source reports it (one nobody reports is forgotten like any other).
    pub fn load_weights(&mut self, rows: Vec<WeightWrite>) {
        let now = self.outputs.clock.unix_ms();
        let count = rows.len();
        for row in rows {
            let age = Duration::from_millis(now.saturating_sub(row.at_ms).max(0) as u64);
            let weight = self.traffic.decayed(row.weight, age);
            let p = self.index.platform_mut(&row.platform);
            let c = p.add_channel(&row.channel);
            p.set_weight(c, weight);
        }
        if count > 0 {
            info!("loaded {count} stored channel weight(s)");
        }
    }

    /// Folds the messages counted since the last fold into the channel weights.
    pub(super) fn fold_traffic(&mut self) {
        let (counted, dropped) = (self.traffic.counted, self.traffic.dropped);
        self.traffic.fold(&mut self.index);
        let metrics = &self.outputs.metrics.messages_counted;
        metrics
            .with_label_values(&["counted"])
            .inc_by(self.traffic.counted - counted);
        metrics
            .with_label_values(&["dropped"])
            .inc_by(self.traffic.dropped - dropped);
    }

    /// Every known channel's weight on `platform` as the plan counts it.
    pub(super) fn weights(&self, platform: &str) -> Vec<ChannelWeight> {
        let Some(p) = self.index.platform(platform) else {
            return Vec::new();
        };
        let resolved = self.rules.resolve(p);
        (0..p.channel_count() as ChanIx)
            .filter(|&c| !resolved.is_excluded(c))
            .map(|c| ChannelWeight {
                channel: p.channel_id(c).to_owned(),
                weight: resolved.weight(p, c),
                pinned: resolved.weight_pinned(c),
            })
            .collect()
    }
}
