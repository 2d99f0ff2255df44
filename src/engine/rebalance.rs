//! A rebalance: plan every enabled platform, hand the rows to the writer, show and publish the
//! changes, report the run.

use crate::balance::{Before, Plan, Planner};
use crate::index::FleetIndex;

use super::Engine;

impl Engine {
    pub(super) async fn rebalance(&mut self) {
        let Some(term) = self.duty.writing_term() else {
            return;
        };
        let causes = self.schedule.take();
        // The plan weighs the messages counted up to now.
        self.fold_traffic();
        let started_at_ms = self.outputs.clock.unix_ms();
        let planning = std::time::Instant::now();
        let before = self.unattended.take_before();
        let plan = plan_off_the_runtime(&mut self.planner, &mut self.index, &before);
        self.runs += 1;
        self.report_plan(&plan, &causes, planning.elapsed());
        // The rows go to the writer first, handed over: it commits beside the engine while
        // the view and the publication take theirs from the plan and the index (a copy of a
        // start-up's 367k rows was 18 MB of fresh memory on the way to the first commit).
        // The weights that grew since the last plan go with it (one that only decayed is
        // decayed again by whoever reads it).
        let weights = self.traffic.take_dirty(&self.index);
        self.writer
            .submit(self.batch(&plan, &causes, started_at_ms, term, weights));
        let provisional = self.unattended.take_moves();
        let mut shown = self.outputs.changes(&self.duty);
        for p in &plan.platforms {
            let Some(index) = self.index.platform(&p.platform) else {
                continue;
            };
            let rows: Vec<_> = p
                .changes
                .iter()
                .map(|&(c, bot)| (index.channel_id(c), bot.map(|b| index.bot_id(b))))
                .collect();
            shown.add(&p.platform, rows.iter().map(|(c, bot)| (&**c, *bot)));
        }
        shown.publish();
        self.show_run(&plan, &causes, provisional);
        self.forget();
        self.show_counts(&plan);
    }
}

/// Plans without stalling the runtime's other tasks, counting moves from the assignment
/// before the last events (`before`: the groups' bots before their provisional ones).
fn plan_off_the_runtime(planner: &mut Planner, index: &mut FleetIndex, before: &Before) -> Plan {
    off_the_runtime(|| planner.plan_counting_from(index, before))
}

/// Runs a long computation without stalling the runtime's other tasks (on a multi-thread
/// runtime the worker hands them over while it runs).
pub(super) fn off_the_runtime<T>(run: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(run),
        _ => run(),
    }
}
