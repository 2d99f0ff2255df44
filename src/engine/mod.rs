//! The engine: the one writer of assignments.
//!
//! It owns the index and the planner, applies fleet events as they come, asks the
//! [`Debouncer`] when to rebalance, plans, and hands each plan's changed rows and history
//! record to the [`Writer`], which commits them in one transaction beside the engine. Inputs
//! that arrive during a run wait in their channels and form the next run. A commit that fails
//! (database down) is kept and retried by the writer, merged with later plans, so nothing is
//! lost; planning never waits for the database.
//!
//! Only *voluntary* moves wait for the trigger delays. A channel left without a valid bot (its
//! assignee went offline or left) or given its first valid bot is assigned provisionally after
//! each batch of events and committed at once ([`crate::balance::provisional`]): the delays
//! coalesce bursts into one balanced plan, they must not silence a group meanwhile.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use std::sync::Arc;

use crate::balance::provisional::{self, Provisional, Stored};
use crate::balance::{Plan, Planner};
use crate::clock::Clock;
use crate::config::Config;
use crate::explain::explain;
use crate::index::{ChanIx, FleetIndex};
use crate::leader::Turn;
use crate::leader::duty::Duty;
use crate::metrics::Metrics;
use crate::outputs::follower::Follower;
use crate::outputs::publish::Publisher;
use crate::presence::Presence;
use crate::source::merge::{Merge, SourceId};
use crate::source::{FleetEvent, Origin};
use crate::store::writer::{Unwritten, Writer};
use crate::store::{Batch, ChannelWrite, Fence, PlatformRecord, RunRecord, WeightWrite};
use crate::triggers::{Cause, Causes, Debouncer};
use crate::view::{PlatformCounts, RunSummary, View};
use crate::weights::{Counter, FOLD_EVERY, Traffic};

pub mod control;
pub use control::{Control, Handle};

/// Where the engine's results go besides the SQL store.
#[derive(Clone)]
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
    /// Wall time, for history records and presence.
    pub clock: Clock,
    pub metrics: Arc<Metrics>,
    /// The leader's publication, read by followers (under leadership).
    pub followed: Option<Follower>,
}

pub struct Engine {
    config: Config,
    outputs: Outputs,
    index: FleetIndex,
    planner: Planner,
    writer: Writer,
    triggers: Debouncer,
    next_periodic: Option<Instant>,
    cron: Option<tokio_cron_scheduler::JobScheduler>,
    /// No rebalance runs before the sources have reported the fleet: a plan of a half-known
    /// fleet would move the channels of every bot not connected yet.
    ready: bool,
    runs: u64,
    /// Since when each offline bot has been offline: gone for longer than
    /// `forgetBotsAfter`, it is forgotten (index, view, presence).
    offline_since: HashMap<(String, String), Instant>,
    /// Which source's report of each bot the index follows.
    merge: Merge,
    /// A follower keeps the index current and mirrors the leader's publication; it plans
    /// nothing.
    duty: Duty,
    /// Channels the last events may have left without a valid bot, per platform: given one by
    /// [`Engine::assign_provisionally`] once the events queued so far are applied.
    unattended: HashMap<String, Vec<ChanIx>>,
    /// Moves made at once since the last rebalance, per platform: its history record counts
    /// them with its own forced moves, so the history still holds every move.
    provisional_moves: HashMap<String, usize>,
    /// Bots a source has reported (online or offline) since the start: before the sources
    /// have all reported, only the stored assignees of the others are held.
    reported: std::collections::HashSet<(String, String)>,
    /// The message counts the sources make, folded into the index's channel weights.
    traffic: Traffic,
}

/// Fleet events applied in a row, at most, before the engine looks at its other inputs.
const BURST: usize = 256;

/// Below this many, channels nobody is in cost too little to be worth a rebuild of the index.
const FORGET_CHANNELS_AT: usize = 1024;

impl Engine {
    /// An engine whose previous assignment is `stored` (what the store holds:
    /// platform, channel, bot), writing through `writer`.
    pub fn new(
        config: Config,
        stored: Vec<(String, String, String)>,
        writer: Writer,
        outputs: Outputs,
        counter: Counter,
    ) -> Self {
        let mut index = FleetIndex::new();
        let count = stored.len();
        load_assignment(&mut index, &outputs.view, stored);
        outputs.view.set_exclusions(&config.rules.exclude);
        info!("loaded {count} stored assignment(s) as the previous assignment");
        let duty = Duty::at_start(config.leadership.as_ref());
        writer.set_duty(duty.clone());
        Self {
            duty,
            outputs,
            planner: Planner::new(config.strategy, config.rules.clone()),
            index,
            writer,
            triggers: Debouncer::default(),
            next_periodic: None,
            cron: None,
            ready: false,
            runs: 0,
            offline_since: HashMap::new(),
            merge: Merge::default(),
            unattended: HashMap::new(),
            provisional_moves: HashMap::new(),
            reported: std::collections::HashSet::new(),
            traffic: Traffic::new(counter, &config.weights),
            config,
        }
    }

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

    /// Takes a source's event: what it changes once combined with the other sources' reports
    /// of the same bot goes to the index.
    pub fn report(&mut self, source: SourceId, event: FleetEvent) {
        let index = &self.index;
        let events = self.merge.apply(source, event, |platform, bot| {
            let Some(p) = index.platform(platform) else {
                return Vec::new();
            };
            p.find_bot(bot).map_or_else(Vec::new, |b| {
                p.channels_of(b)
                    .iter()
                    .map(|&c| p.channel_id(c).to_owned())
                    .collect()
            })
        });
        for event in events {
            self.apply(event);
        }
    }

    /// Applies a fleet event to the index and asks for a rebalance when it can matter.
    fn apply(&mut self, event: FleetEvent) {
        let enabled = self.config.rules.platform_enabled(event.platform());
        let cause = match &event {
            FleetEvent::BotOnline {
                platform,
                bot,
                channels,
                origin,
            } => {
                if !self.ready {
                    self.reported.insert((platform.clone(), bot.clone()));
                }
                self.offline_since.remove(&(platform.clone(), bot.clone()));
                self.index.bot_reported(platform, bot, channels);
                info!(
                    "bot {platform}:{bot} online in {} channel(s)",
                    channels.len()
                );
                Some(match origin {
                    Origin::Status => Cause::BotStatus,
                    Origin::Connection => Cause::BotOnline,
                })
            }
            FleetEvent::BotOffline {
                platform,
                bot,
                reason,
                origin,
            } => {
                if !self.ready {
                    self.reported.insert((platform.clone(), bot.clone()));
                }
                self.offline_since
                    .entry((platform.clone(), bot.clone()))
                    .or_insert_with(Instant::now);
                self.index.bot_offline(platform, bot);
                info!("bot {platform}:{bot} offline ({reason})");
                Some(match origin {
                    Origin::Status => Cause::BotStatus,
                    Origin::Connection => Cause::BotOffline,
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
                let p = self.index.platform_mut(platform);
                let was_assignee = p
                    .find_channel(channel)
                    .and_then(|c| p.assignee(c))
                    .is_some_and(|a| p.find_bot(bot) == Some(a));
                self.index.channel_left(platform, bot, channel);
                debug!("bot {platform}:{bot} left channel {channel}");
                // The plugin's rule: worth a rebalance if someone is left to take over; and
                // when the departed bot was the assignee, also to unassign a channel nobody
                // is left in (its row must not keep naming a bot that is gone).
                let p = self.index.platform_mut(platform);
                let someone = p
                    .find_channel(channel)
                    .is_some_and(|c| p.members(c).iter().any(|&b| p.is_online(b)));
                (someone || was_assignee).then_some(Cause::ChannelLeft)
            }
        };
        self.reflect(&event);
        if let Some(cause) = cause.filter(|_| enabled) {
            if self.config.provisional == Provisional::Immediate {
                self.note_unattended(&event);
            }
            self.request(cause);
        }
    }

    /// Notes the channels an event may have left without a valid bot: a bot's channels when
    /// it comes (those with no bot, or a bot that is gone) or goes (those it was assigned),
    /// and the channel a bot joined or left. O(degree), like the event itself.
    fn note_unattended(&mut self, event: &FleetEvent) {
        let Some(p) = self.index.platform(event.platform()) else {
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
            self.unattended
                .entry(event.platform().to_owned())
                .or_default()
                .extend(noted);
        }
    }

    /// Gives every channel noted since the last call that still lacks a valid bot its
    /// provisional one, and commits and publishes it at once; the debounced rebalance that
    /// the same events asked for improves the balance later, counting its moves from here.
    /// Before the sources have reported, a stored assignee that no source has reported yet is
    /// held (it may still be connecting); one reported offline is replaced like later.
    fn assign_provisionally(&mut self) {
        if self.unattended.is_empty() {
            return;
        }
        let unattended = std::mem::take(&mut self.unattended);
        if self.duty.writing_term().is_none() {
            return;
        }
        let mut batch = Batch::default();
        let mut published = Vec::new();
        for (platform, mut channels) in unattended {
            if self.index.platform(&platform).is_none()
                || !self.config.rules.platform_enabled(&platform)
            {
                continue;
            }
            let p = self.index.platform_mut(&platform);
            let resolved = self.config.rules.resolve(p);
            let reported: Vec<bool> = if self.ready {
                Vec::new()
            } else {
                (0..p.bot_count() as u32)
                    .map(|b| {
                        self.reported
                            .contains(&(platform.clone(), p.bot_id(b).to_owned()))
                    })
                    .collect()
            };
            let stored = if self.ready {
                Stored::Replace
            } else {
                Stored::Hold {
                    reported: &reported,
                }
            };
            let done = provisional::assign(p, &resolved, &mut channels, stored);
            if done.changes.is_empty() {
                continue;
            }
            let p = &*p;
            let rows = || {
                done.changes
                    .iter()
                    .map(|&(c, b)| (p.channel_id(c), Some(p.bot_id(b))))
            };
            self.outputs.view.apply(&platform, rows());
            let shared: Arc<str> = Arc::from(platform.as_str());
            batch
                .writes
                .extend(rows().map(|(channel, bot)| ChannelWrite {
                    platform: shared.clone(),
                    channel: Arc::from(channel),
                    assignee: Arc::from(bot.unwrap_or_default()),
                }));
            if self.outputs.publisher.is_some() {
                published.extend(rows().map(|(channel, bot)| {
                    (platform.clone(), channel.to_owned(), bot.map(str::to_owned))
                }));
            }
            *self.provisional_moves.entry(platform.clone()).or_default() += done.forced;
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
        if let Some(publisher) = &self.outputs.publisher {
            publisher.publish(published);
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
                    p.connected_at = Some(self.outputs.clock.system_time());
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
    /// is rolled back as a whole). Returns what could not be written before the stop.
    pub async fn run(
        mut self,
        mut fleet: mpsc::Receiver<(SourceId, FleetEvent)>,
        control_tx: mpsc::Sender<Control>,
        mut control: mpsc::Receiver<Control>,
        shutdown: CancellationToken,
    ) -> Unwritten {
        self.reschedule(&control_tx).await;
        let mut fold = tokio::time::interval(FOLD_EVERY);
        fold.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Every event already applied has been looked at: channels it left without a bot
            // get one now, whatever the triggers say.
            self.assign_provisionally();
            // A follower's triggers wait: they run if it takes over.
            let due = self
                .triggers
                .due()
                .filter(|_| self.ready && self.duty != Duty::Follower);
            let periodic = self.next_periodic;
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
                _ = fold.tick() => self.fold_traffic(),
                _ = due_run, if due.is_some() => self.rebalance().await,
                _ = sleep_until(periodic.unwrap_or_else(far_future)), if periodic.is_some() => {
                    self.next_periodic = Some(Instant::now() + self.config.balance_interval);
                    self.request(Cause::Schedule);
                }
            }
        }
        if let Some(mut cron) = self.cron.take() {
            let _ = cron.shutdown().await;
        }
        info!("stopped after {} rebalance(s)", self.runs);
        self.writer.finish().await
    }

    async fn control(&mut self, msg: Control, control_tx: &mpsc::Sender<Control>) {
        match msg {
            Control::Ready => {
                if !self.ready {
                    self.ready = true;
                    self.reported = Default::default();
                    self.request(Cause::Startup);
                }
            }
            Control::Turn(Turn::Lead {
                fence,
                stored,
                weights,
            }) => {
                self.load_weights(weights);
                self.lead(fence, stored)
            }
            Control::Turn(Turn::Follow) => self.follow(),
            Control::Followed => self.mirror_publication(),
            Control::Schedule => self.request(Cause::Schedule),
            Control::Rebalance => self.request(Cause::Requested),
            Control::Weights { platform, reply } => {
                self.fold_traffic();
                let _ = reply.send(self.weights(&platform));
            }
            Control::Explain {
                platform,
                channel,
                reply,
            } => {
                let _ = reply.send(explain(
                    &self.index,
                    &self.config.rules,
                    &platform,
                    &channel,
                ));
            }
            Control::Config(new) => {
                if *new == self.config {
                    return;
                }
                let restart_only = self.config.restart_only_changes(&new);
                if !restart_only.is_empty() {
                    let keys: Vec<&str> = restart_only.iter().map(|s| s.key()).collect();
                    warn!(
                        "{}: changes of {} take effect after a restart",
                        new.path.display(),
                        keys.join(", ")
                    );
                }
                let new = self.config.reloadable_part_of(*new);
                if new == self.config {
                    return;
                }
                let schedule_changed = (new.balance_interval, &new.balance_cron)
                    != (self.config.balance_interval, &self.config.balance_cron);
                if new.strategy != self.config.strategy {
                    self.planner = Planner::new(new.strategy, new.rules.clone());
                } else {
                    self.planner.set_rules(&new.rules);
                }
                self.traffic.set_settings(&new.weights);
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

    /// Every known channel's weight on `platform` as the plan counts it (measured, pinned,
    /// at least the floor), with whether an admin pinned it: (channel, weight, pinned).
    fn weights(&self, platform: &str) -> Vec<(String, f64, bool)> {
        let Some(p) = self.index.platform(platform) else {
            return Vec::new();
        };
        let resolved = self.config.rules.resolve(p);
        (0..p.channel_count() as ChanIx)
            .filter(|&c| !resolved.is_excluded(c))
            .map(|c| {
                (
                    p.channel_id(c).to_owned(),
                    resolved.weight(p, c),
                    resolved.weight_pinned(c),
                )
            })
            .collect()
    }

    /// Folds the messages counted since the last fold into the channel weights.
    fn fold_traffic(&mut self) {
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

    /// Takes over: plans from what the database holds, fenced by the new term. Nothing moves
    /// when the fleet is what the previous leader planned for.
    fn lead(&mut self, fence: Fence, stored: Vec<(String, String, String)>) {
        let term = fence.term;
        let count = stored.len();
        load_assignment(&mut self.index, &self.outputs.view, stored);
        // The incremental planner's state belongs to the assignment it last planned.
        self.planner = Planner::new(self.config.strategy, self.config.rules.clone());
        self.set_duty(Duty::Leader(fence));
        info!("leading in term {term} from {count} stored assignment(s)");
        self.request(Cause::Takeover);
    }

    fn follow(&mut self) {
        if self.duty == Duty::Follower {
            return;
        }
        self.set_duty(Duty::Follower);
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
    fn mirror_publication(&mut self) {
        if self.duty != Duty::Follower {
            return;
        }
        let Some(followed) = &self.outputs.followed else {
            return;
        };
        let published = followed.read(|_, published| {
            let rows = published.iter().flat_map(|(platform, channels)| {
                channels
                    .iter()
                    .map(|(channel, bot)| (platform.clone(), channel.clone(), bot.clone()))
            });
            rows.collect()
        });
        load_assignment(&mut self.index, &self.outputs.view, published);
    }

    /// (Re)arms the periodic rebalance: the cron job if configured, else the interval.
    async fn reschedule(&mut self, control_tx: &mpsc::Sender<Control>) {
        if let Some(mut old) = self.cron.take() {
            let _ = old.shutdown().await;
        }
        self.next_periodic = None;
        match &self.config.balance_cron {
            None => self.next_periodic = Some(Instant::now() + self.config.balance_interval),
            Some(expr) => match start_cron(expr.as_str(), control_tx.clone()).await {
                Ok(scheduler) => self.cron = Some(scheduler),
                Err(e) => {
                    error!("balanceCron {expr:?}: {e}; using balanceInterval instead");
                    self.next_periodic = Some(Instant::now() + self.config.balance_interval);
                }
            },
        }
    }

    async fn rebalance(&mut self) {
        let Some(term) = self.duty.writing_term() else {
            return;
        };
        let causes = self.triggers.take();
        // The plan weighs the messages counted up to now.
        self.fold_traffic();
        let started_at_ms = self.outputs.clock.unix_ms();
        let planning = std::time::Instant::now();
        let plan = plan_off_the_runtime(&mut self.planner, &mut self.index);
        self.runs += 1;
        let metrics = &self.outputs.metrics;
        metrics
            .rebalance_duration
            .observe(planning.elapsed().as_secs_f64());
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
            if let Some(index) = self.index.platform(&p.platform) {
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
        // The rows go to the writer first, handed over: it commits beside the engine while
        // the view and the publication take theirs from the plan and the index (a copy of a
        // start-up's 367k rows was 18 MB of fresh memory on the way to the first commit).
        // The weights that grew since the last plan go with it (one that only decayed is
        // decayed again by whoever reads it).
        let weights = self.traffic.take_dirty(&self.index);
        self.writer
            .submit(self.batch(&plan, &causes, started_at_ms, term, weights));
        let provisional: usize = self.provisional_moves.drain().map(|(_, n)| n).sum();
        let mut published = Vec::new();
        for p in &plan.platforms {
            let Some(index) = self.index.platform(&p.platform) else {
                continue;
            };
            let changes = p
                .changes
                .iter()
                .map(|&(c, bot)| (index.channel_id(c), bot.map(|b| index.bot_id(b))));
            self.outputs.view.apply(&p.platform, changes.clone());
            if self.outputs.publisher.is_some() {
                published.extend(changes.map(|(channel, bot)| {
                    (
                        p.platform.clone(),
                        channel.to_owned(),
                        bot.map(str::to_owned),
                    )
                }));
            }
        }
        if let Some(publisher) = &self.outputs.publisher {
            publisher.publish(published);
        }
        self.outputs.view.set_last_run(RunSummary {
            number: self.runs,
            causes: causes.to_string(),
            finished_at_ms: self.outputs.clock.unix_ms(),
            moved_forced: provisional + plan.platforms.iter().map(|p| p.forced).sum::<usize>(),
            moved_voluntary: plan.platforms.iter().map(|p| p.voluntary).sum(),
        });
        self.forget();
        for p in &plan.platforms {
            if let Some(index) = self.index.platform(&p.platform) {
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
                        messages: p
                            .weighted_loads
                            .iter()
                            .map(|&(b, l)| (index.bot_id(b).to_owned(), l))
                            .collect(),
                        capacity: p
                            .capacities
                            .iter()
                            .map(|&(b, c)| (index.bot_id(b).to_owned(), c))
                            .collect(),
                        over_capacity: p
                            .excess
                            .iter()
                            .map(|&(b, e)| (index.bot_id(b).to_owned(), e))
                            .collect(),
                        weighted_sum_sq: p.certificate.as_ref().map(|c| c.sum_sq),
                        lower_bound: p.certificate.as_ref().map(|c| c.lower_bound),
                        gap: p.certificate.as_ref().map(|c| c.gap()),
                    },
                );
            }
        }
    }

    /// Forgets what only costs memory: channels nobody is in and nobody is assigned, once
    /// there are many, and bots offline for longer than `forgetBotsAfter` (a bot that comes
    /// back is learnt again). Rows are never deleted: the table is shared with Koishi.
    fn forget(&mut self) {
        let retention = self.config.forget_bots_after;
        let now = Instant::now();
        for p in self.index.platforms_mut() {
            let name = p.name().to_owned();
            let expired: std::collections::HashSet<String> = self
                .offline_since
                .iter()
                .filter(|((platform, _), since)| *platform == name && now - **since >= retention)
                .map(|((_, bot), _)| bot.clone())
                .collect();
            let forgettable = p.forgettable_channels();
            let worth = forgettable >= FORGET_CHANNELS_AT.max(p.channel_count() / 4);
            if expired.is_empty() && !worth {
                continue;
            }
            let (bots, channels) = p.compact(|bot| expired.contains(bot));
            for bot in &bots {
                self.offline_since.remove(&(name.clone(), bot.clone()));
                self.outputs.presence.forget(&name, bot);
            }
            // Forgotten channels hold no bot, so the view changes only when bots were forgotten
            // (telling it takes its write lock and a pass over its bots).
            if !bots.is_empty() {
                self.outputs
                    .view
                    .forget_bots(&name, bots.iter().map(String::as_str));
            }
            if !bots.is_empty() || channels > 0 {
                info!(
                    "platform {name}: forgot {channels} channel(s) nobody is in and {} bot(s) \
                     offline for more than {retention:?}",
                    bots.len()
                );
            }
        }
    }

    /// The rows and the history record of a plan.
    fn batch(
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
            weights: Vec::new(),
        };
        let at_ms = self.outputs.clock.unix_ms();
        let mut platforms = Vec::new();
        for p in &plan.platforms {
            let Some(index) = self.index.platform(&p.platform) else {
                continue;
            };
            // Shared strings: the platform and each bot's id once per plan.
            let platform: Arc<str> = Arc::from(p.platform.as_str());
            let none: Arc<str> = Arc::from("");
            let mut bots: Vec<Option<Arc<str>>> = vec![None; index.bot_count()];
            batch
                .writes
                .extend(p.changes.iter().map(|&(c, bot)| ChannelWrite {
                    platform: platform.clone(),
                    channel: Arc::from(index.channel_id(c)),
                    assignee: bot.map_or_else(
                        || none.clone(),
                        |b| {
                            bots[b as usize]
                                .get_or_insert_with(|| Arc::from(index.bot_id(b)))
                                .clone()
                        },
                    ),
                }));
            let s = &p.stats;
            let provisional = self.provisional_moves.get(&p.platform).copied();
            platforms.push(PlatformRecord {
                platform: p.platform.clone(),
                channels: p.assigned as i64,
                unassigned: p.unassigned as i64,
                forced: (p.forced + provisional.unwrap_or(0)) as i64,
                voluntary: p.voluntary as i64,
                bots: s.loads.len() as i64,
                mean: s.mean,
                stddev: s.stddev,
                min: s.min as i64,
                max: s.max as i64,
                gap: p.certificate.as_ref().map(|c| c.gap()),
            });
        }
        batch.weights = weights
            .into_iter()
            .map(|(platform, channel, weight)| WeightWrite {
                platform,
                channel,
                weight,
                at_ms,
            })
            .collect();
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

/// Makes `stored` (platform, channel, bot) the index's and the view's assignment (what the
/// database holds, or what the leader published): every platform's rows, so a platform
/// enabled later still starts from its stored state.
fn load_assignment(index: &mut FleetIndex, view: &View, stored: Vec<(String, String, String)>) {
    for p in index.platforms_mut() {
        for c in 0..p.channel_count() as u32 {
            if p.assignee(c).is_some() {
                p.set_assignee(c, None);
            }
        }
    }
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
        view.replace(p.name(), assignment);
    }
}

/// Plans without stalling the runtime's other tasks (on a multi-thread runtime the worker
/// hands them over while the planner runs).
fn plan_off_the_runtime(planner: &mut Planner, index: &mut FleetIndex) -> Plan {
    let mut run = || planner.plan(index);
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
