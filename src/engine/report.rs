//! What a rebalance tells the operator: its metrics, its log lines, and the figures the view
//! shows (the last run, each platform's counts and balance).

use std::time::Duration;

use tracing::{info, warn};

use super::Engine;
use crate::balance::Plan;
use crate::triggers::Causes;
use crate::view::{PlatformCounts, RunSummary};

impl Engine {
    /// The run's metrics and one log line per platform (and a warning for capacities that
    /// cannot be met).
    pub(super) fn report_plan(&self, plan: &Plan, causes: &Causes, planning: Duration) {
        let metrics = &self.outputs.metrics;
        metrics.rebalance_duration.observe(planning.as_secs_f64());
        for cause in causes.kinds() {
            metrics
                .rebalance_runs
                .with_label_values(&[cause.as_str()])
                .inc();
        }
        for p in &plan.platforms {
            for (kind, n) in [("forced", p.forced), ("voluntary", p.voluntary)] {
                metrics
                    .moves
                    .with_label_values(&[p.platform.as_str(), kind])
                    .inc_by(n as u64);
            }
        }
        for p in &plan.platforms {
            let Some(index) = self.index.platform(&p.platform) else {
                continue;
            };
            info!("rebalance #{} ({causes}): {}", self.runs, p.summary(index));
            if !p.excess.is_empty() {
                let bots: Vec<String> = p
                    .excess
                    .iter()
                    .map(|&(b, e)| format!("{} (+{e:.1})", index.bot_id(b)))
                    .collect();
                warn!(
                    "platform {}: capacities cannot all be met; over capacity by {:.1} {} \
                     in all: {}",
                    p.platform,
                    p.total_excess(),
                    p.balance_by,
                    bots.join(", ")
                );
            }
        }
    }

    /// The run as the view shows it; `provisional` moves were made at once before it.
    pub(super) fn show_run(&self, plan: &Plan, causes: &Causes, provisional: usize) {
        let run = RunSummary {
            number: self.runs,
            causes: causes.to_string(),
            finished_at_ms: self.outputs.clock.unix_ms(),
            moved_forced: provisional + plan.platforms.iter().map(|p| p.forced).sum::<usize>(),
            moved_voluntary: plan.platforms.iter().map(|p| p.voluntary).sum(),
        };
        self.outputs.show_run(&self.duty, run);
    }

    /// Each planned platform's counts, loads and capacities as the view shows them.
    pub(super) fn show_counts(&self, plan: &Plan) {
        for p in &plan.platforms {
            let Some(index) = self.index.platform(&p.platform) else {
                continue;
            };
            let by_bot = |rows: &[(u32, f64)]| {
                rows.iter()
                    .map(|&(b, x)| (index.bot_id(b).to_owned(), x))
                    .collect()
            };
            self.outputs.view.set_counts(
                &p.platform,
                PlatformCounts {
                    channels_known: index.channel_count(),
                    bots_known: index.bot_count(),
                    assigned: p.assigned,
                    unassigned: p.unassigned,
                    excluded: p.excluded.len(),
                    mean: p.stats.mean,
                    stddev: p.stats.stddev,
                    max_load: p.stats.max,
                    balance_by: p.balance_by.to_string(),
                    messages: by_bot(&p.weighted_loads),
                    capacity: by_bot(&p.capacities),
                    over_capacity: by_bot(&p.excess),
                    weighted_sum_sq: p.certificate.as_ref().map(|c| c.sum_sq),
                    lower_bound: p.certificate.as_ref().map(|c| c.lower_bound),
                    gap: p.certificate.as_ref().map(|c| c.gap()),
                },
            );
        }
    }
}
