//! The engine: the one writer of assignments.
//!
//! It owns the index and the planner, applies fleet events as they come, asks the
//! [`Debouncer`](crate::triggers::Debouncer) when to rebalance, plans, and hands each plan's
//! changed rows and history record to the [`Writer`], which commits them in one transaction
//! beside the engine. Inputs that arrive during a run wait in their channels and form the next
//! run. A commit that fails (database down) is kept and retried by the writer, merged with
//! later plans, so nothing is lost; planning never waits for the database.
//!
//! Only *voluntary* moves wait for the trigger delays. A channel left without a valid bot (its
//! assignee went offline or left) or given its first valid bot is assigned provisionally after
//! each batch of events and committed at once ([`crate::balance::provisional`]): the delays
//! coalesce bursts into one balanced plan, they must not silence a group meanwhile.
//!
//! No rebalance runs before the sources have reported the fleet ([`Phase`]): a plan of a
//! half-known fleet would move the channels of every bot not connected yet, and move them
//! back a moment later.
//!
//! [`Engine::run`] is the loop; each of its inputs is handled in a file of its own:
//! `events` (fleet events into the index and the view), `provisional` (the assignees given at
//! once), `rebalance` (planning; `record` turns a plan into rows and a history record,
//! `report` into metrics, log lines and the view's figures), `traffic` (message counts into
//! channel weights), `reload` (a new config), `leadership` (leading, following, the
//! leader's publication), `schedule` (the periodic run), `forget` (what only costs memory).

mod control;
mod events;
mod forget;
mod leadership;
mod outputs;
mod overrides;
mod provisional;
mod rebalance;
mod record;
mod reload;
mod report;
mod schedule;
mod traffic;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::balance::{Planner, Rules};
use crate::config::Config;
use crate::dry_run::dry_run;
use crate::engine_handle::Request;
use crate::explain::explain;
use crate::index::FleetIndex;
use crate::operator::Overrides;
use crate::source::FleetEvent;
use crate::source::merge::SourceId;
use crate::store::AssignmentRow;
use crate::store::fence::Duty;
use crate::store::writer::{Unwritten, Writer};
use crate::traffic::{Counter, FOLD_EVERY, Traffic};
use crate::triggers::Cause;

pub use control::Control;
pub use outputs::Outputs;

use events::Events;
use provisional::Unattended;
use schedule::Schedule;

/// Whether the sources have reported the fleet yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Not yet: events are applied and channels without a valid bot get one, but no
    /// rebalance runs, and a stored assignee no source has reported yet is held.
    AwaitingSources,
    /// The sources have reported: rebalances run when the triggers say.
    Planning,
}

pub struct Engine {
    config: Config,
    /// The operators' pins and drains in force.
    overrides: Overrides,
    /// What the planner obeys: the config's rules, then the overrides.
    rules: Rules,
    /// When a plan's search should stop early: fleet events wait.
    search_interrupt: crate::balance::rules::Interrupt,
    index: FleetIndex,
    planner: Planner,
    outputs: Outputs,
    writer: Writer,
    /// A follower keeps the index current and mirrors the leader's publication; it plans
    /// nothing.
    duty: Duty,
    phase: Phase,
    events: Events,
    unattended: Unattended,
    schedule: Schedule,
    /// The message counts the sources make, folded into the index's channel weights.
    traffic: Traffic,
    /// Rebalances run since the start.
    runs: u64,
}

/// Fleet events applied in a row, at most, before the engine looks at its other inputs.
const BURST: usize = 256;

impl Engine {
    /// An engine whose previous assignment is `stored` (what the store holds), writing
    /// through `writer`.
    pub fn new(
        config: Config,
        stored: Vec<AssignmentRow>,
        writer: Writer,
        outputs: Outputs,
        counter: Counter,
    ) -> Self {
        let mut index = FleetIndex::new();
        let count = stored.len();
        leadership::load_assignment(&mut index, &outputs.view, stored);
        outputs.view.set_exclusions(&config.rules.exclude);
        info!("loaded {count} stored assignment(s) as the previous assignment");
        // Only a whole assignment is published: the view holds it from now on.
        if let Some(publisher) = &outputs.publisher {
            publisher.loaded();
        }
        let duty = crate::leader::duty_at_start(config.leadership.as_ref());
        writer.set_duty(duty.clone());
        Self {
            duty,
            outputs,
            planner: Planner::new(config.strategy, config.rules.clone()),
            overrides: Overrides::default(),
            rules: config.rules.clone(),
            search_interrupt: Default::default(),
            index,
            writer,
            phase: Phase::AwaitingSources,
            events: Events::default(),
            unattended: Unattended::default(),
            schedule: Schedule::default(),
            traffic: Traffic::new(counter, &config.weights),
            runs: 0,
            config,
        }
    }

    /// Runs until `shutdown`; a rebalance in progress always completes (or its transaction
    /// is rolled back as a whole). Returns what could not be written before the stop.
    pub async fn run(
        mut self,
        mut fleet: mpsc::Receiver<(SourceId, FleetEvent)>,
        control_tx: mpsc::Sender<Control>,
        mut control: mpsc::Receiver<Control>,
        mut requests: mpsc::Receiver<Request>,
        shutdown: CancellationToken,
    ) -> Unwritten {
        self.schedule.rearm(&self.config, &control_tx).await;
        let mut fold = tokio::time::interval(FOLD_EVERY);
        fold.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Every event already applied has been looked at: channels it left without a bot
            // get one now, whatever the triggers say.
            self.assign_provisionally();
            // A follower's triggers wait: they run if it takes over.
            let due = self
                .schedule
                .due()
                .filter(|_| self.phase == Phase::Planning && self.duty != Duty::Follower);
            let periodic = self.schedule.next_periodic();
            let override_end = self.next_override_end();
            // A run already due (a zero delay) starts at once, after the events and messages
            // already queued (the select is biased towards them): a timer set to now fires only
            // at the timer's next tick, up to a millisecond later.
            let due_run = async move {
                match due {
                    Some(at) if at > Instant::now() => sleep_until(at).await,
                    _ => {}
                }
            };
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                Some((source, event)) = fleet.recv() => {
                    self.report(source, event);
                    // The events already queued join this batch: one provisional pass and one
                    // commit for a burst (a restarted NapCat's bots, a fleet file's edit).
                    for _ in 0..BURST {
                        let Ok((source, event)) = fleet.try_recv() else { break };
                        self.report(source, event);
                    }
                }
                Some(msg) = control.recv() => self.control(msg, &control_tx).await,
                Some(request) = requests.recv() => self.answer(request),
                _ = fold.tick() => self.fold_traffic(),
                _ = due_run, if due.is_some() => self.rebalance().await,
                _ = sleep_until(periodic.unwrap_or_else(schedule::far_future)), if periodic.is_some() => {
                    self.schedule.periodic_fired(&self.config);
                    self.request(Cause::Schedule);
                }
                _ = sleep_until(override_end.unwrap_or_else(schedule::far_future)), if override_end.is_some() => {
                    self.expire_overrides();
                }
            }
        }
        self.schedule.stop().await;
        info!("stopped after {} rebalance(s)", self.runs);
        self.writer.finish().await
    }

    async fn control(&mut self, msg: Control, control_tx: &mpsc::Sender<Control>) {
        match msg {
            Control::Ready => {
                if self.phase == Phase::AwaitingSources {
                    self.phase = Phase::Planning;
                    self.events.sources_reported();
                    self.request(Cause::Startup);
                }
            }
            Control::Turn(turn) => self.take_turn(turn),
            Control::Followed => self.mirror_publication(),
            Control::Overrides(overrides) => {
                if self.duty == Duty::Follower && overrides != self.overrides {
                    self.set_overrides(overrides);
                }
            }
            Control::Schedule => self.request(Cause::Schedule),
            Control::Config(new) => self.reload(*new, control_tx).await,
        }
    }

    /// Answers the API from the engine's own index.
    fn answer(&mut self, request: Request) {
        match request {
            Request::Rebalance => self.request(Cause::Requested),
            Request::Weights { platform, reply } => {
                self.fold_traffic();
                let _ = reply.send(self.weights(&platform));
            }
            Request::Explain {
                platform,
                channel,
                reply,
            } => {
                let explanation = explain(
                    &self.index,
                    &self.rules,
                    &self.overrides,
                    &platform,
                    &channel,
                );
                let _ = reply.send(explanation);
            }
            Request::Override { change, by, reply } => {
                let _ = reply.send(self.change_override(change, by));
            }
            Request::Overrides { reply } => {
                let _ = reply.send(self.overrides_now());
            }
            Request::DryRun { reply } => {
                self.fold_traffic();
                let (index, rules, strategy) = (&self.index, &self.rules, self.config.strategy);
                let run = rebalance::off_the_runtime(|| dry_run(index, rules, strategy));
                let _ = reply.send(run);
            }
        }
    }

    /// A plan's search stops early when `waiting` says fleet events wait behind it, so that
    /// their provisional assignees come at once (`weights.searchTime` is an upper bound).
    pub fn interrupt_searches_when(&mut self, waiting: impl Fn() -> bool + Send + Sync + 'static) {
        self.search_interrupt = crate::balance::rules::Interrupt::new(waiting);
        self.rules_changed();
    }

    /// Asks for a rebalance after `cause`'s delay.
    fn request(&mut self, cause: Cause) {
        self.schedule.request(cause, &self.config.delays);
    }
}
