//! The engine: the one writer of assignments.
//!
//! It owns the index and the planner, applies fleet events as they come, asks the
//! [`Debouncer`] when to rebalance, plans, and commits each plan's changed rows and history
//! record in one transaction. Inputs that arrive during a run wait in their channels and form
//! the next run. A commit that fails (database down) is kept and retried, merged with later
//! plans, so nothing is lost; planning never waits for the database.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::balance::{Plan, Planner};
use crate::config::Config;
use crate::coord::publish::Publisher;
use crate::index::FleetIndex;
use crate::presence::Presence;
use crate::source::FleetEvent;
use crate::store::sql::now_ms;
use crate::store::{Batch, ChannelWrite, PlatformRecord, RunRecord, Store};
use crate::triggers::{Cause, Causes, Debouncer};
use crate::view::View;

/// Control messages for the engine (everything that is not a fleet event).
#[derive(Debug)]
pub enum Control {
    /// A validated new config (from the config watcher).
    Config(Box<Config>),
    /// The cron schedule fired.
    Schedule,
    /// Someone asked for a rebalance now.
    Rebalance,
    /// The sources have reported the fleet: the first rebalance may run.
    Ready,
}

/// Where the engine's results go besides the SQL store.
#[derive(Clone, Default)]
pub struct Outputs {
    /// The assignment and fleet as the API sees it.
    pub view: View,
    /// Redis publication, if configured.
    pub publisher: Option<Publisher>,
    /// Per-bot state; the engine keeps it for bots no live connection reports on.
    pub presence: Presence,
    /// Woken when a bot comes or goes (the presence registry refreshes at once).
    /// Bumped when a bot goes online or offline; every listener sees it.
    pub presence_changed: watch::Sender<()>,
}

pub struct Engine {
    config: Config,
    outputs: Outputs,
    index: FleetIndex,
    planner: Planner,
    store: Store,
    triggers: Debouncer,
    /// Writes and history not yet committed (the database was unavailable).
    pending: Pending,
    retry: Option<(Instant, Duration)>,
    next_periodic: Option<Instant>,
    cron: Option<tokio_cron_scheduler::JobScheduler>,
    /// No rebalance runs before the sources have reported the fleet: a plan of a half-known
    /// fleet would move the channels of every bot not connected yet.
    ready: bool,
    runs: u64,
}

#[derive(Default)]
struct Pending {
    writes: BTreeMap<(String, String), String>,
    runs: Vec<RunRecord>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.runs.is_empty()
    }

    fn merge(&mut self, batch: Batch) {
        for w in batch.writes {
            self.writes.insert((w.platform, w.channel), w.assignee);
        }
        self.runs.extend(batch.runs);
    }

    fn take(&mut self) -> Batch {
        let pending = std::mem::take(self);
        Batch {
            writes: pending
                .writes
                .into_iter()
                .map(|((platform, channel), assignee)| ChannelWrite {
                    platform,
                    channel,
                    assignee,
                })
                .collect(),
            runs: pending.runs,
        }
    }
}

impl Engine {
    /// An engine whose previous assignment is what the store holds.
    pub async fn new(config: Config, store: Store, outputs: Outputs) -> anyhow::Result<Self> {
        let mut index = FleetIndex::new();
        let stored = store.load_assignments().await?;
        let count = stored.len();
        // Every platform's rows, so a platform enabled later still starts from its stored state.
        for (platform, channel, bot) in stored {
            let p = index.platform_mut(&platform);
            let c = p.add_channel(&channel);
            let b = p.add_bot(&bot);
            p.set_assignee(c, Some(b));
        }
        for p in index.platforms_mut() {
            p.take_journal();
            let assignment: Vec<(&str, &str)> = (0..p.channel_count() as u32)
                .filter_map(|c| p.assignee(c).map(|b| (p.channel_id(c), p.bot_id(b))))
                .collect();
            outputs.view.replace(p.name(), assignment);
        }
        outputs.view.set_exclusions(&config.rules.exclude);
        info!("loaded {count} stored assignment(s) as the previous assignment");
        Ok(Self {
            outputs,
            planner: Planner::new(config.strategy),
            config,
            index,
            store,
            triggers: Debouncer::default(),
            pending: Pending::default(),
            retry: None,
            next_periodic: None,
            cron: None,
            ready: false,
            runs: 0,
        })
    }

    pub fn index(&self) -> &FleetIndex {
        &self.index
    }

    /// Applies a fleet event to the index and asks for a rebalance when it can matter.
    pub fn apply(&mut self, event: FleetEvent) {
        let enabled = self.config.rules.platform_enabled(event.platform());
        let cause = match &event {
            FleetEvent::BotOnline {
                platform,
                bot,
                channels,
                status,
            } => {
                self.index.bot_online(platform, bot, channels);
                info!(
                    "bot {platform}:{bot} online in {} channel(s)",
                    channels.len()
                );
                Some(if *status {
                    Cause::BotStatus
                } else {
                    Cause::BotOnline
                })
            }
            FleetEvent::BotOffline {
                platform,
                bot,
                reason,
                status,
            } => {
                self.index.bot_offline(platform, bot);
                info!("bot {platform}:{bot} offline ({reason})");
                Some(if *status {
                    Cause::BotStatus
                } else {
                    Cause::BotOffline
                })
            }
            FleetEvent::ChannelJoined {
                platform,
                bot,
                channel,
            } => {
                self.index.channel_joined(platform, bot, channel);
                debug!("bot {platform}:{bot} joined channel {channel}");
                Some(Cause::ChannelJoined)
            }
            FleetEvent::ChannelLeft {
                platform,
                bot,
                channel,
            } => {
                self.index.channel_left(platform, bot, channel);
                debug!("bot {platform}:{bot} left channel {channel}");
                // The plugin's rule: only worth a rebalance if someone is left to take over.
                let p = self.index.platform_mut(platform);
                let someone = p
                    .find_channel(channel)
                    .is_some_and(|c| p.members(c).iter().any(|&b| p.is_online(b)));
                someone.then_some(Cause::ChannelLeft)
            }
        };
        self.reflect(&event);
        if let Some(cause) = cause.filter(|_| enabled) {
            self.request(cause);
        }
    }

    /// Mirrors an event into the view and, for bots no live connection reports on (the fleet
    /// file), into the presence registry.
    fn reflect(&self, event: &FleetEvent) {
        let (platform, bot, online) = match event {
            FleetEvent::BotOnline { platform, bot, .. } => (platform, bot, Some(true)),
            FleetEvent::BotOffline { platform, bot, .. } => (platform, bot, Some(false)),
            FleetEvent::ChannelJoined { platform, bot, .. }
            | FleetEvent::ChannelLeft { platform, bot, .. } => (platform, bot, None),
        };
        let online = online.unwrap_or_else(|| {
            self.index
                .platform(platform)
                .and_then(|p| p.find_bot(bot).map(|b| p.is_online(b)))
                .unwrap_or(false)
        });
        self.outputs.view.set_bot(platform, bot, online);
        let unmanaged = self
            .outputs
            .presence
            .get(platform, bot)
            .is_none_or(|p| p.mode.is_none());
        if unmanaged {
            self.outputs.presence.update(platform, bot, |p| {
                if online && !p.online {
                    p.connected_at = Some(std::time::SystemTime::now());
                }
                p.online = online;
            });
        }
        if matches!(
            event,
            FleetEvent::BotOnline { .. } | FleetEvent::BotOffline { .. }
        ) {
            self.outputs.presence_changed.send_replace(());
        }
    }

    fn request(&mut self, cause: Cause) {
        let delay = cause.delay(&self.config.delays);
        self.triggers.request(cause, delay, Instant::now());
    }

    /// Runs until `shutdown`; a rebalance in progress always completes (or its transaction
    /// is rolled back as a whole).
    pub async fn run(
        mut self,
        mut fleet: mpsc::Receiver<FleetEvent>,
        control_tx: mpsc::Sender<Control>,
        mut control: mpsc::Receiver<Control>,
        shutdown: CancellationToken,
    ) {
        self.reschedule(&control_tx).await;
        loop {
            let due = self.triggers.due().filter(|_| self.ready);
            let retry = self.retry.map(|(at, _)| at);
            let periodic = self.next_periodic;
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                Some(event) = fleet.recv() => self.apply(event),
                Some(msg) = control.recv() => self.control(msg, &control_tx).await,
                _ = sleep_until(due.unwrap_or_else(far_future)), if due.is_some() => self.rebalance().await,
                _ = sleep_until(periodic.unwrap_or_else(far_future)), if periodic.is_some() => {
                    self.next_periodic = Some(Instant::now() + self.config.balance_interval);
                    self.request(Cause::Schedule);
                }
                _ = sleep_until(retry.unwrap_or_else(far_future)), if retry.is_some() => self.flush().await,
            }
        }
        if !self.pending.is_empty() {
            self.flush().await;
        }
        if let Some(mut cron) = self.cron.take() {
            let _ = cron.shutdown().await;
        }
        self.store.close().await;
        info!("stopped after {} rebalance(s)", self.runs);
    }

    async fn control(&mut self, msg: Control, control_tx: &mpsc::Sender<Control>) {
        match msg {
            Control::Ready => {
                if !self.ready {
                    self.ready = true;
                    self.request(Cause::Startup);
                }
            }
            Control::Schedule => self.request(Cause::Schedule),
            Control::Rebalance => self.request(Cause::Requested),
            Control::Config(new) => {
                if *new == self.config {
                    return;
                }
                let mut new = *new;
                let restart_only = (
                    &new.database,
                    &new.sources,
                    &new.redis,
                    &new.claims,
                    &new.api,
                    &new.federate,
                ) != (
                    &self.config.database,
                    &self.config.sources,
                    &self.config.redis,
                    &self.config.claims,
                    &self.config.api,
                    &self.config.federate,
                );
                if restart_only {
                    warn!(
                        "{}: database, sources, redis, claims, api and federate changes take effect after a restart",
                        new.path.display()
                    );
                    new.federate = self.config.federate.clone();
                    new.database = self.config.database.clone();
                    new.sources = self.config.sources.clone();
                    new.redis = self.config.redis.clone();
                    new.claims = self.config.claims.clone();
                    new.api = self.config.api.clone();
                }
                let schedule_changed = (new.balance_interval, &new.balance_cron)
                    != (self.config.balance_interval, &self.config.balance_cron);
                if new.strategy != self.config.strategy {
                    self.planner = Planner::new(new.strategy);
                }
                self.config = new;
                self.outputs.view.set_exclusions(&self.config.rules.exclude);
                info!("{}: config reloaded", self.config.path.display());
                if schedule_changed {
                    self.reschedule(control_tx).await;
                }
                self.request(Cause::ConfigChanged);
            }
        }
    }

    /// (Re)arms the periodic rebalance: the cron job if configured, else the interval.
    async fn reschedule(&mut self, control_tx: &mpsc::Sender<Control>) {
        if let Some(mut old) = self.cron.take() {
            let _ = old.shutdown().await;
        }
        self.next_periodic = None;
        match &self.config.balance_cron {
            None => self.next_periodic = Some(Instant::now() + self.config.balance_interval),
            Some(expr) => match start_cron(expr, control_tx.clone()).await {
                Ok(scheduler) => self.cron = Some(scheduler),
                Err(e) => {
                    error!("balanceCron {expr:?}: {e}; using balanceInterval instead");
                    self.next_periodic = Some(Instant::now() + self.config.balance_interval);
                }
            },
        }
    }

    async fn rebalance(&mut self) {
        let causes = self.triggers.take();
        let started_at_ms = now_ms();
        let plan = plan_off_the_runtime(&mut self.planner, &mut self.index, &self.config);
        self.runs += 1;
        for p in &plan.platforms {
            if let Some(index) = self.index.platform(&p.platform) {
                info!("rebalance #{} ({causes}): {}", self.runs, p.summary(index));
            }
        }
        let batch = self.batch(&plan, &causes, started_at_ms);
        let mut published = Vec::with_capacity(batch.writes.len());
        for w in &batch.writes {
            let bot = (!w.assignee.is_empty()).then_some(w.assignee.as_str());
            self.outputs
                .view
                .apply(&w.platform, [(w.channel.as_str(), bot)]);
            published.push((
                w.platform.clone(),
                w.channel.clone(),
                bot.map(str::to_owned),
            ));
        }
        if let Some(publisher) = &self.outputs.publisher {
            publisher.publish(published);
        }
        self.pending.merge(batch);
        self.flush().await;
    }

    /// The rows and the history record of a plan.
    fn batch(&self, plan: &Plan, causes: &Causes, started_at_ms: i64) -> Batch {
        let mut batch = Batch::default();
        let mut platforms = Vec::new();
        for p in &plan.platforms {
            let Some(index) = self.index.platform(&p.platform) else {
                continue;
            };
            batch
                .writes
                .extend(p.changes.iter().map(|&(c, bot)| ChannelWrite {
                    platform: p.platform.clone(),
                    channel: index.channel_id(c).to_owned(),
                    assignee: bot.map_or_else(String::new, |b| index.bot_id(b).to_owned()),
                }));
            let s = &p.stats;
            platforms.push(PlatformRecord {
                platform: p.platform.clone(),
                channels: p.assigned as i64,
                unassigned: p.unassigned as i64,
                forced: p.forced as i64,
                voluntary: p.voluntary as i64,
                bots: s.loads.len() as i64,
                mean: s.mean,
                stddev: s.stddev,
                min: s.min as i64,
                max: s.max as i64,
            });
        }
        batch.runs.push(RunRecord {
            started_at_ms,
            finished_at_ms: now_ms(),
            causes: causes.to_string(),
            strategy: plan.strategy.to_string(),
            platforms,
        });
        batch
    }

    /// Commits everything pending; on failure keeps it and retries with backoff.
    async fn flush(&mut self) {
        let batch = self.pending.take();
        match self.store.commit(&batch).await {
            Ok(()) => {
                if self.retry.take().is_some() {
                    info!(
                        "database available again: {} pending row(s) written",
                        batch.writes.len()
                    );
                }
            }
            Err(e) => {
                let backoff = self.retry.map_or(Duration::from_secs(1), |(_, b)| {
                    (b * 2).min(Duration::from_secs(60))
                });
                error!(
                    "writing {} row(s) and {} history record(s) failed: {e}; retrying in {backoff:?}",
                    batch.writes.len(),
                    batch.runs.len()
                );
                self.pending.merge(batch);
                self.retry = Some((Instant::now() + backoff, backoff));
            }
        }
    }
}

/// Plans without stalling the runtime's other tasks (on a multi-thread runtime the worker
/// hands them over while the planner runs).
fn plan_off_the_runtime(planner: &mut Planner, index: &mut FleetIndex, config: &Config) -> Plan {
    let mut run = || planner.plan(index, &config.rules);
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(run),
        _ => run(),
    }
}

async fn start_cron(
    expr: &str,
    control_tx: mpsc::Sender<Control>,
) -> Result<tokio_cron_scheduler::JobScheduler, tokio_cron_scheduler::JobSchedulerError> {
    use tokio_cron_scheduler::{Job, JobScheduler};
    let scheduler = JobScheduler::new().await?;
    let job = Job::new_async(expr, move |_, _| {
        let tx = control_tx.clone();
        Box::pin(async move {
            let _ = tx.send(Control::Schedule).await;
        })
    })?;
    scheduler.add(job).await?;
    scheduler.start().await?;
    Ok(scheduler)
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86400 * 365)
}
