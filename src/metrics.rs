//! `GET /metrics`: the service in the Prometheus text format (the `prometheus` crate's
//! registry and encoder, without its protobuf feature).
//!
//! Two kinds of figures. Events are counted where they happen: rebalances by cause and their
//! duration, moves, store commits and failures, ingress decisions, federate owner decisions.
//! State is read when Prometheus scrapes, from the same structures the JSON API reads (the
//! view, presence, the store writer's status, the publisher's), so `/metrics` and the API can
//! never disagree and nothing is kept twice. Every name starts with `auto_assign_`; counters end
//! in `_total`, durations are in seconds.

use std::sync::OnceLock;

use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::pallas::federate::Federate;
use crate::pallas::ingress::Reason;
use crate::presence::Presence;
use crate::publication::publisher::PublishStatus;
use crate::store::fence::Role;
use crate::store::writer::{CommitMetrics, WriteStatus};
use crate::view::View;

pub struct Metrics {
    registry: Registry,
    // Counted as they happen.
    pub rebalance_runs: IntCounterVec,
    pub rebalance_duration: Histogram,
    pub moves: IntCounterVec,
    pub provisional: IntCounterVec,
    /// Set by the engine when they change.
    operator_overrides: IntGaugeVec,
    pub store_commit_duration: Histogram,
    pub store_commit_failures: IntCounterVec,
    ingress_decisions: CounterSet<{ 2 * Reason::KINDS.len() }>,
    federate_owner_decisions: CounterSet<2>,
    // Read at scrape time.
    bot_load: IntGaugeVec,
    bot_weighted_load: GaugeVec,
    bot_capacity: GaugeVec,
    bot_over_capacity: GaugeVec,
    plan_gap: GaugeVec,
    pub messages_counted: IntCounterVec,
    bot_online: IntGaugeVec,
    bot_quarantined: IntGaugeVec,
    bot_connections: IntCounterVec,
    bot_probe_failures: IntCounterVec,
    onebot_connections: IntGaugeVec,
    channels: IntGaugeVec,
    load: GaugeVec,
    store_pending_rows: IntGauge,
    store_commits: IntCounterVec,
    store_last_commit_age: GaugeVec,
    publication_version: IntGauge,
    publication_lag: GaugeVec,
    federate_peers: IntGauge,
    leader: IntGaugeVec,
    leader_term: IntGauge,
}

/// What `/metrics` reads at scrape time.
pub struct State<'a> {
    pub view: &'a View,
    pub presence: &'a Presence,
    pub store: &'a WriteStatus,
    pub publication: Option<&'a PublishStatus>,
    pub federate: Option<&'a Federate>,
    /// This instance's name and role, under leadership.
    pub leadership: Option<(&'a str, Role)>,
}

/// Rebalance and commit durations: 1 ms to ~16 s.
const DURATION_BUCKETS: [f64; 15] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0,
];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry =
            Registry::new_custom(Some("auto_assign".into()), None).expect("a valid prefix");
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid names");
            registry
                .register(Box::new(c.clone()))
                .expect("registered once");
            c
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid names");
            registry
                .register(Box::new(g.clone()))
                .expect("registered once");
            g
        };
        let float_gauge = |name: &str, help: &str, labels: &[&str]| {
            let g = GaugeVec::new(Opts::new(name, help), labels).expect("valid names");
            registry
                .register(Box::new(g.clone()))
                .expect("registered once");
            g
        };
        let single = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("valid names");
            registry
                .register(Box::new(g.clone()))
                .expect("registered once");
            g
        };
        let histogram = |name: &str, help: &str| {
            let opts = HistogramOpts::new(name, help).buckets(DURATION_BUCKETS.to_vec());
            let h = HistogramVec::new(opts, &[]).expect("valid names");
            registry
                .register(Box::new(h.clone()))
                .expect("registered once");
            h.with_label_values::<&str>(&[])
        };
        Metrics {
            rebalance_runs: counter(
                "rebalance_runs_total",
                "Rebalances, by cause (a run with several causes counts under each)",
                &["cause"],
            ),
            rebalance_duration: histogram(
                "rebalance_duration_seconds",
                "Time to plan a rebalance and apply it in memory",
            ),
            moves: counter(
                "moves_total",
                "Channels given another bot: forced (their bot left) or voluntary (balance)",
                &["platform", "kind"],
            ),
            provisional: counter(
                "provisional_assignments_total",
                "Channels given a bot at once, before the rebalance: forced (their bot left) or \
                 first (they had none)",
                &["platform", "kind"],
            ),
            operator_overrides: gauge(
                "operator_overrides",
                "An operator's overrides in force: pins (a group on one bot), holds (a group \
                 with no assignee on purpose) and drains (a bot emptied)",
                &["kind"],
            ),
            store_commit_duration: histogram(
                "store_commit_duration_seconds",
                "Time to commit one batch of rows and history to the database",
            ),
            store_commit_failures: counter(
                "store_commit_failures_total",
                "Failed commits: outage (retried) or rejected (the table needs a fix)",
                &["failure"],
            ),
            ingress_decisions: CounterSet::new(counter(
                "ingress_decisions_total",
                "POST /v1/ingress decisions, by reason and whether the bot handles the message",
                &["reason", "handle"],
            )),
            federate_owner_decisions: CounterSet::new(counter(
                "federate_owner_decisions_total",
                "Federate group-owner decisions: this deployment processes the message or not",
                &["processes"],
            )),
            bot_load: gauge(
                "bot_load",
                "Channels assigned to the bot",
                &["platform", "bot"],
            ),
            bot_weighted_load: float_gauge(
                "bot_weighted_load",
                "Messages a day of the channels assigned to the bot (their measured weights)",
                &["platform", "bot"],
            ),
            bot_capacity: float_gauge(
                "bot_capacity",
                "The bot's capacity (botCapacity), in the unit of balanceBy",
                &["platform", "bot"],
            ),
            bot_over_capacity: float_gauge(
                "bot_over_capacity",
                "How far the bot's load is over its capacity (0 within it)",
                &["platform", "bot"],
            ),
            plan_gap: float_gauge(
                "plan_gap_ratio",
                "balanceBy: messages: the last plan's relative gap to its certified lower bound",
                &["platform"],
            ),
            messages_counted: counter(
                "messages_counted_total",
                "Messages counted into channel weights (counted), or not for want of room (dropped)",
                &["outcome"],
            ),
            bot_online: gauge(
                "bot_online",
                "1 when the bot is online (counts for the plan)",
                &["platform", "bot"],
            ),
            bot_quarantined: gauge(
                "bot_quarantined",
                "1 when the bot failed its status probes",
                &["platform", "bot"],
            ),
            bot_connections: counter(
                "onebot_bot_connections_total",
                "OneBot connections taken per bot (the first, then every reconnect)",
                &["platform", "bot"],
            ),
            bot_probe_failures: counter(
                "onebot_probe_failures_total",
                "Failed OneBot status probes per bot",
                &["platform", "bot"],
            ),
            onebot_connections: gauge(
                "onebot_connections",
                "Bots by OneBot connection state (connected, standby, disconnected)",
                &["state"],
            ),
            channels: gauge(
                "channels",
                "Channels of the last plan: assigned, unassigned (no valid bot), excluded",
                &["platform", "state"],
            ),
            load: float_gauge(
                "load",
                "Load statistics of the last plan (channels per online bot): mean, stddev, max",
                &["platform", "statistic"],
            ),
            store_pending_rows: single("store_pending_rows", "Rows planned but not committed yet"),
            store_commits: counter(
                "store_commits_total",
                "Successful commits to the database",
                &[],
            ),
            store_last_commit_age: float_gauge(
                "store_last_commit_age_seconds",
                "Seconds since the last successful commit (absent before the first)",
                &[],
            ),
            publication_version: single(
                "redis_publication_version",
                "Version of the assignment last published to Redis",
            ),
            publication_lag: float_gauge(
                "redis_publication_lag_seconds",
                "Age of the oldest change not yet published to Redis (0 when up to date)",
                &[],
            ),
            federate_peers: single(
                "federate_peers",
                "Other deployments of the federate pool seen in the last roster",
            ),
            leader: gauge(
                "leader",
                "1 while this instance leads (under leadership), else 0",
                &["instance"],
            ),
            leader_term: single(
                "leader_term",
                "The newest leadership term this instance knows (0 before it knows one)",
            ),
            registry,
        }
    }

    /// The operators' overrides in force: `pins` (pins and holds) and how many bots drained.
    pub fn set_overrides<'a>(
        &self,
        pins: impl Iterator<Item = &'a crate::operator::Pin>,
        drains: usize,
    ) {
        let (mut to_bot, mut held) = (0, 0);
        for pin in pins {
            match pin.target {
                crate::operator::PinTarget::Bot(_) => to_bot += 1,
                crate::operator::PinTarget::Hold => held += 1,
            }
        }
        for (kind, n) in [("pin", to_bot), ("hold", held), ("drain", drains)] {
            self.operator_overrides
                .with_label_values(&[kind])
                .set(n as i64);
        }
    }

    /// The store writer's counters, registered here.
    pub fn commits(&self) -> CommitMetrics {
        CommitMetrics {
            duration: self.store_commit_duration.clone(),
            failures: self.store_commit_failures.clone(),
        }
    }

    pub fn count_ingress_decision(&self, reason: &Reason, handle: bool) {
        let handle_label = if handle { "true" } else { "false" };
        self.ingress_decisions
            .get(2 * reason.kind_index() + handle as usize, || {
                [reason.kind(), handle_label]
            })
            .inc();
    }

    /// One federate group-owner decision: this deployment processes the message or not.
    pub fn count_owner_decision(&self, processes: bool) {
        let label = if processes { "true" } else { "false" };
        self.federate_owner_decisions
            .get(processes as usize, || [label])
            .inc();
    }

    /// The text exposition, with the state read now.
    pub fn render(&self, state: &State) -> String {
        self.read_state(state);
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("the text encoder writes to memory");
        String::from_utf8(out).expect("the text format is UTF-8")
    }

    fn read_state(&self, state: &State) {
        // Bots come and go: start the per-bot series afresh so forgotten bots disappear.
        for family in [&self.bot_load, &self.bot_online, &self.bot_quarantined] {
            family.reset();
        }
        self.bot_connections.reset();
        self.bot_probe_failures.reset();
        self.channels.reset();
        self.load.reset();
        for family in [
            &self.bot_weighted_load,
            &self.bot_capacity,
            &self.bot_over_capacity,
            &self.plan_gap,
        ] {
            family.reset();
        }
        for platform in state.view.platforms() {
            for (bot, online, load) in state.view.bots(&platform) {
                let labels = [platform.as_str(), bot.as_str()];
                self.bot_load
                    .with_label_values(&labels)
                    .set(i64::from(load));
                self.bot_online
                    .with_label_values(&labels)
                    .set(i64::from(online));
            }
            let counts = state.view.counts(&platform);
            for (family, values) in [
                (&self.bot_weighted_load, &counts.messages),
                (&self.bot_capacity, &counts.capacity),
            ] {
                for (bot, value) in values {
                    family
                        .with_label_values(&[platform.as_str(), bot.as_str()])
                        .set(*value);
                }
            }
            for bot in counts.capacity.keys() {
                let over = counts.over_capacity.get(bot).copied().unwrap_or(0.0);
                self.bot_over_capacity
                    .with_label_values(&[platform.as_str(), bot.as_str()])
                    .set(over);
            }
            if let Some(gap) = counts.gap {
                self.plan_gap
                    .with_label_values(&[platform.as_str()])
                    .set(gap);
            }
            for (name, value) in [
                ("assigned", counts.assigned),
                ("unassigned", counts.unassigned),
                ("excluded", counts.excluded),
            ] {
                self.channels
                    .with_label_values(&[platform.as_str(), name])
                    .set(value as i64);
            }
            for (name, value) in [
                ("mean", counts.mean),
                ("stddev", counts.stddev),
                ("max", f64::from(counts.max_load)),
            ] {
                self.load
                    .with_label_values(&[platform.as_str(), name])
                    .set(value);
            }
        }
        let (mut connected, mut standby, mut disconnected) = (0, 0, 0);
        for p in state.presence.snapshot() {
            let labels = [p.platform.as_str(), p.bot.as_str()];
            self.bot_quarantined
                .with_label_values(&labels)
                .set(i64::from(p.quarantined));
            self.bot_connections
                .with_label_values(&labels)
                .inc_by(p.connections);
            self.bot_probe_failures
                .with_label_values(&labels)
                .inc_by(p.probe_failures);
            if p.connected {
                connected += 1;
            } else if p.mode.is_some() {
                disconnected += 1;
            }
            standby += p.standby_connections as i64;
        }
        for (name, value) in [
            ("connected", connected),
            ("standby", standby),
            ("disconnected", disconnected),
        ] {
            self.onebot_connections
                .with_label_values(&[name])
                .set(value);
        }
        self.store_pending_rows.set(state.store.pending_rows as i64);
        self.store_commits.reset();
        self.store_commits
            .with_label_values::<&str>(&[])
            .inc_by(state.store.commits);
        self.store_last_commit_age.reset();
        if let Some(age) = state.store.last_commit.and_then(|t| t.elapsed().ok()) {
            self.store_last_commit_age
                .with_label_values::<&str>(&[])
                .set(age.as_secs_f64());
        }
        self.publication_lag.reset();
        if let Some(publication) = state.publication {
            let (version, lag) = publication.read();
            self.publication_version.set(version);
            self.publication_lag
                .with_label_values::<&str>(&[])
                .set(lag.as_secs_f64());
        }
        if let Some(federate) = state.federate {
            self.federate_peers
                .set(federate.roster().peers.len() as i64);
        }
        self.leader.reset();
        if let Some((instance, role)) = &state.leadership {
            let leads = matches!(role, Role::Leader { .. });
            self.leader
                .with_label_values(&[*instance])
                .set(i64::from(leads));
            self.leader_term.set(role.term().unwrap_or(0));
        }
    }
}

/// The counters of one vector that a hot path counts, each looked up once, on first use (so
/// `/metrics` lists only label sets that happened, as with the vector alone). The vector's own
/// look-up hashes the labels under a read lock; an ingress decision takes a few microseconds
/// and should not take a lock for its statistics.
struct CounterSet<const N: usize> {
    vec: IntCounterVec,
    resolved: [OnceLock<IntCounter>; N],
}

impl<const N: usize> CounterSet<N> {
    fn new(vec: IntCounterVec) -> Self {
        Self {
            vec,
            resolved: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    /// The counter in `slot`; `labels` gives its label values the first time (a slot always
    /// stands for the same ones).
    fn get<const L: usize>(
        &self,
        slot: usize,
        labels: impl FnOnce() -> [&'static str; L],
    ) -> &IntCounter {
        self.resolved[slot].get_or_init(|| self.vec.with_label_values(&labels()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_state_are_rendered() {
        let metrics = Metrics::new();
        metrics.rebalance_runs.with_label_values(&["startup"]).inc();
        let view = View::default();
        // The view alone: no presence, store, publication or federate pool.
        let render = |view: &View| {
            metrics.render(&State {
                view,
                presence: &Presence::default(),
                store: &WriteStatus::default(),
                publication: None,
                federate: None,
                leadership: Some(("a", Role::Leader { term: 3 })),
            })
        };
        view.set_bot("onebot", "1001", true);
        view.apply("onebot", [("100", Some("1001")), ("200", Some("1001"))]);
        let text = render(&view);
        assert!(text.contains("auto_assign_rebalance_runs_total{cause=\"startup\"} 1\n"));
        assert!(text.contains("auto_assign_bot_load{bot=\"1001\",platform=\"onebot\"} 2\n"));
        assert!(text.contains("auto_assign_bot_online{bot=\"1001\",platform=\"onebot\"} 1\n"));
        assert!(
            text.contains("auto_assign_leader{instance=\"a\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("auto_assign_leader_term 3\n"), "{text}");
        // A forgotten bot's series go away.
        view.forget_bots("onebot", ["1001"]);
        view.apply("onebot", [("100", None), ("200", None)]);
        let text = render(&view);
        assert!(!text.contains("bot=\"1001\""), "{text}");
    }

    #[test]
    fn decisions_count_under_their_labels_and_only_those_that_happened() {
        let metrics = Metrics::new();
        for _ in 0..2 {
            metrics.count_ingress_decision(&Reason::Assignee, true);
        }
        metrics.count_ingress_decision(&Reason::AssignedToAnotherBot, false);
        metrics.count_ingress_decision(&Reason::OwnedByDeployment("b".into()), false);
        metrics.count_owner_decision(false);
        let text = metrics.render(&State {
            view: &View::default(),
            presence: &Presence::default(),
            store: &WriteStatus::default(),
            publication: None,
            federate: None,
            leadership: None,
        });
        let decisions = |labels: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("auto_assign_{labels} ")))
                .map(|v| v.to_owned())
        };
        let ingress = |reason: &str, handle: &str| {
            decisions(&format!(
                "ingress_decisions_total{{handle=\"{handle}\",reason=\"{reason}\"}}"
            ))
        };
        assert_eq!(ingress("assignee", "true").as_deref(), Some("2"), "{text}");
        assert_eq!(ingress("assigned_elsewhere", "false").as_deref(), Some("1"));
        assert_eq!(ingress("owned_elsewhere", "false").as_deref(), Some("1"));
        assert_eq!(ingress("assignee", "false"), None, "{text}");
        assert_eq!(
            decisions("federate_owner_decisions_total{processes=\"false\"}").as_deref(),
            Some("1")
        );
        assert_eq!(
            decisions("federate_owner_decisions_total{processes=\"true\"}"),
            None
        );
        // Every reason has its own label.
        let kinds: std::collections::HashSet<_> = Reason::KINDS.iter().collect();
        assert_eq!(kinds.len(), Reason::KINDS.len());
    }
}
