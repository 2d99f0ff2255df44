//! The store: the durable record of the assignment (Koishi's `channel.assignee`), the
//! rebalance history and the channel weights, written under a leader's fence.
//!
//! * [`sql`]: SQLite / PostgreSQL / MySQL (MariaDB);
//! * [`fence`]: the term a leader writes under, and the duty of an instance;
//! * [`memory`]: the same contract in memory, for tests of everything around it;
//! * [`writer`]: the task that commits beside the engine, merging and retrying while the
//!   database is away, so planning never waits for it.

pub mod fence;
#[cfg(test)]
mod memory;
pub mod sql;
pub mod writer;

pub use fence::Fence;

use std::hash::BuildHasher as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
pub use sql::SqlStore;

use crate::operator::{Drain, Overrides, Pin};
use crate::secret::{SecretUrl, redact_url};
use crate::yaml::Seconds;

/// `database:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Settings {
    pub url: DatabaseUrl,
    /// How long a stop may spend writing what is still pending (database down).
    pub shutdown_timeout: Seconds<0>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            url: DatabaseUrl::Sqlite(PathBuf::from("data/auto-assign.db")),
            shutdown_timeout: Seconds::secs(10),
        }
    }
}

impl Settings {
    /// Makes an SQLite path relative to the config file's directory.
    pub fn resolve(&mut self, base: &Path) {
        if let DatabaseUrl::Sqlite(path) = &mut self.url {
            *path = base.join(&*path);
        }
    }
}

/// Which database, from `database.url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// `sqlite://PATH` (relative to the config file).
    Sqlite(PathBuf),
    /// `postgres://user:password@host:port/db`.
    Postgres(SecretUrl),
    /// `mysql://user:password@host:port/db` (or `mariadb://...`).
    Mysql(SecretUrl),
}

impl DatabaseUrl {
    pub fn parse(url: &str) -> Result<DatabaseUrl, String> {
        if let Some(rest) = url.strip_prefix("sqlite:") {
            let path = rest.trim_start_matches("//");
            let path = path.split('?').next().unwrap_or_default();
            if path.is_empty() || path == ":memory:" {
                return Err(format!("{url:?}: an SQLite URL needs a file path"));
            }
            return Ok(DatabaseUrl::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(DatabaseUrl::Postgres(SecretUrl::new(url)));
        }
        if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            return Ok(DatabaseUrl::Mysql(SecretUrl::new(url)));
        }
        Err(format!(
            "expected sqlite://PATH, postgres://user:password@host:port/db or \
             mysql://user:password@host:port/db (got {:?})",
            redact_url(url)
        ))
    }
}

impl DatabaseUrl {
    /// The files the URL names (`sslrootcert`, `sslcert`, `sslkey`, `ssl-ca`, `ssl-cert`,
    /// `ssl-key`), read when the service connects.
    pub fn files(&self) -> Vec<PathBuf> {
        let url = match self {
            DatabaseUrl::Sqlite(_) => return Vec::new(),
            DatabaseUrl::Postgres(url) | DatabaseUrl::Mysql(url) => url.expose(),
        };
        let Some((_, query)) = url.split_once('?') else {
            return Vec::new();
        };
        query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .filter(|(key, _)| {
                matches!(
                    *key,
                    "sslrootcert" | "sslcert" | "sslkey" | "ssl-ca" | "ssl-cert" | "ssl-key"
                )
            })
            .map(|(_, path)| PathBuf::from(path))
            .collect()
    }
}

impl<'de> Deserialize<'de> for DatabaseUrl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::yaml::checked_str(d, DatabaseUrl::parse)
    }
}

/// One channel's assignee as stored (or as the leader published it): the previous assignment
/// a plan starts from.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct AssignmentRow {
    pub platform: String,
    pub channel: String,
    /// The bot's id (never empty: a channel without an assignee has no row here).
    pub bot: String,
}

/// One channel row to write. Shared strings: a plan's rows share their platform and their
/// bots' ids, and binding them to a statement copies no text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelWrite {
    pub platform: Arc<str>,
    pub channel: Arc<str>,
    /// The bot's id (Koishi's `selfId`), or `""` for a channel with no valid bot.
    pub assignee: Arc<str>,
}

/// One channel's measured weight: its decayed message rate (messages per day) as of `at_ms`
/// (milliseconds since the epoch). A reader decays it further by the time since `at_ms`.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightWrite {
    pub platform: String,
    pub channel: String,
    pub weight: f64,
    pub at_ms: i64,
}

/// What a store offers the engine.
pub trait Store: Send + Sync + 'static {
    /// Every stored non-empty assignee.
    fn load_assignments(
        &self,
    ) -> impl Future<Output = Result<Vec<AssignmentRow>, StoreError>> + Send;
    /// Every stored channel weight, as last written (a reader decays each by the time since
    /// its `at_ms`).
    fn load_weights(&self) -> impl Future<Output = Result<Vec<WeightWrite>, StoreError>> + Send;
    /// An operator's pins and drains in force (ended ones are removed as they end).
    fn load_overrides(&self) -> impl Future<Output = Result<Overrides, StoreError>> + Send;
    /// Writes a batch in one transaction: all of it or nothing. With a `fence`, the
    /// transaction first raises the stored term to the fence's, and fails with
    /// [`Failure::Fenced`] (writing nothing) when the stored term is already higher: a newer
    /// leader has written.
    fn commit(
        &self,
        batch: &Batch,
        fence: Option<&Fence>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The highest term that has written (0 when none has).
    fn current_term(&self) -> impl Future<Output = Result<i64, StoreError>> + Send;
    fn close(&self) -> impl Future<Output = ()> + Send;
}

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    pub kind: Failure,
    pub message: String,
}

/// Whether trying again can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// The database is unreachable or busy: retrying will succeed once it is back.
    Outage,
    /// The database refuses the write itself (a column of another type, a missing table):
    /// retrying cannot help until someone fixes the table.
    Rejected,
    /// A newer leader has written: this instance's term is over and its writes are void.
    Fenced,
}

impl Failure {
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Outage => "outage",
            Failure::Rejected => "rejected",
            Failure::Fenced => "fenced",
        }
    }
}

/// The record of one rebalance.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    pub started_at_ms: i64,
    pub finished_at_ms: i64,
    pub causes: String,
    pub strategy: String,
    /// The leader's term that planned it (0 without leadership).
    pub term: i64,
    pub platforms: Vec<PlatformRecord>,
}

/// One platform of a rebalance.
#[derive(Clone, Debug, PartialEq)]
pub struct PlatformRecord {
    pub platform: String,
    pub channels: i64,
    pub unassigned: i64,
    pub forced: i64,
    pub voluntary: i64,
    pub bots: i64,
    pub mean: f64,
    pub stddev: f64,
    pub min: i64,
    pub max: i64,
    /// The plan's certified relative gap to its lower bound (`balanceBy: messages` only;
    /// one that is not a finite number is stored as NULL, as `None` is).
    pub gap: Option<f64>,
}

/// What an operator changed: a pin or a drain set (replacing any before it) or ended.
#[derive(Clone, Debug, PartialEq)]
pub enum OverrideChange {
    Pin(Pin),
    Unpin { platform: String, channel: String },
    Drain(Drain),
    Undrain { platform: String, bot: String },
}

/// The audit record of an operator's change: when, what, by which credential, with the note.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditRecord {
    pub at_ms: i64,
    /// `pin`, `hold`, `unpin`, `pin-expired`, `drain`, `undrain`, `drain-expired`.
    pub action: String,
    pub platform: String,
    /// The group (pins) or the bot (drains).
    pub target: String,
    /// The pinned bot.
    pub bot: Option<String>,
    pub until_ms: Option<i64>,
    pub note: Option<String>,
    pub by: String,
}

/// An operator's change and its audit record, written together.
#[derive(Clone, Debug, PartialEq)]
pub struct OverrideWrite {
    pub change: OverrideChange,
    pub audit: AuditRecord,
}

/// What one transaction writes: changed channel rows, channel weights, an operator's changes
/// and history records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    pub writes: Vec<ChannelWrite>,
    pub runs: Vec<RunRecord>,
    /// At most one per (platform, channel) is written: the last one.
    pub weights: Vec<WeightWrite>,
    /// In the order they were made.
    pub overrides: Vec<OverrideWrite>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
            && self.runs.is_empty()
            && self.weights.is_empty()
            && self.overrides.is_empty()
    }
}

/// Writes not committed yet: the last assignee and the last weight of each channel, and every
/// history record, in order. Merging keeps only the latest value of a row, so an outage costs
/// memory in the number of channels, not of plans. A batch merged into nothing pending is kept
/// as it is (a plan's rows are distinct): the row table is built only when a second batch
/// arrives.
#[derive(Debug, Default)]
pub struct Pending {
    /// Each (platform, channel) at most once.
    writes: Vec<ChannelWrite>,
    /// Positions in `writes` by (platform, channel); empty until a second batch is merged.
    rows: hashbrown::HashTable<usize>,
    runs: Vec<RunRecord>,
    weights: PendingWeights,
    /// Every operator's change, in order (each is a few rows: kept as made).
    overrides: Vec<OverrideWrite>,
}

/// Weights not committed yet, the last of each channel, kept the way the rows are: a batch
/// merged into nothing pending is kept as it is, and the table is built only when a second
/// batch arrives (a weights batch can carry every measured channel).
#[derive(Debug, Default)]
struct PendingWeights {
    /// Each (platform, channel) at most once, once `rows` is built.
    weights: Vec<WeightWrite>,
    /// Positions in `weights` by (platform, channel); empty until a second batch is merged.
    rows: hashbrown::HashTable<usize>,
}

impl PendingWeights {
    fn merge(&mut self, weights: Vec<WeightWrite>) {
        if weights.is_empty() {
            return;
        }
        if self.weights.is_empty() {
            self.weights = weights;
            self.rows.clear();
            return;
        }
        if self.rows.is_empty() {
            // Put back one by one: a channel in the first batch twice keeps its later value.
            let first = std::mem::take(&mut self.weights);
            self.weights.reserve(first.len() + weights.len());
            self.rows.reserve(first.len() + weights.len(), |_| {
                unreachable!("the table is empty")
            });
            for w in first {
                self.upsert(w);
            }
        }
        for w in weights {
            self.upsert(w);
        }
    }

    fn upsert(&mut self, w: WeightWrite) {
        let hash = row_hash(&w.platform, &w.channel);
        let weights = &mut self.weights;
        match self.rows.entry(
            hash,
            |&j| weights[j].platform == w.platform && weights[j].channel == w.channel,
            |&j| row_hash(&weights[j].platform, &weights[j].channel),
        ) {
            hashbrown::hash_table::Entry::Occupied(e) => weights[*e.get()] = w,
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(weights.len());
                weights.push(w);
            }
        }
    }
}

fn row_hash(platform: &str, channel: &str) -> u64 {
    rustc_hash::FxBuildHasher.hash_one((platform, channel))
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
            && self.runs.is_empty()
            && self.weights.weights.is_empty()
            && self.overrides.is_empty()
    }

    pub fn rows(&self) -> usize {
        self.writes.len()
    }

    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Channel weights (one per channel once a second batch has been merged).
    pub fn weights(&self) -> usize {
        self.weights.weights.len()
    }

    /// Adds a later batch: its rows and weights replace earlier values of the same rows.
    pub fn merge(&mut self, batch: Batch) {
        if self.writes.is_empty() {
            self.writes = batch.writes;
            self.rows.clear();
        } else {
            if self.rows.is_empty() {
                self.index_rows();
            }
            for w in batch.writes {
                self.upsert(w);
            }
        }
        self.runs.extend(batch.runs);
        self.weights.merge(batch.weights);
        self.overrides.extend(batch.overrides);
    }

    fn index_rows(&mut self) {
        self.rows.clear();
        self.rows.reserve(self.writes.len(), |_| 0);
        for i in 0..self.writes.len() {
            let w = &self.writes[i];
            let hash = row_hash(&w.platform, &w.channel);
            let writes = &self.writes;
            match self.rows.entry(
                hash,
                |&j| writes[j].platform == w.platform && writes[j].channel == w.channel,
                |&j| row_hash(&writes[j].platform, &writes[j].channel),
            ) {
                // Only `restore` can put a row in twice; the later one (higher index) wins.
                hashbrown::hash_table::Entry::Occupied(mut e) => *e.get_mut() = i,
                hashbrown::hash_table::Entry::Vacant(e) => {
                    e.insert(i);
                }
            }
        }
        if self.rows.len() < self.writes.len() {
            // Drop the rows a later one replaced, and index again.
            let keep: Vec<bool> = {
                let mut keep = vec![false; self.writes.len()];
                for &i in &self.rows {
                    keep[i] = true;
                }
                keep
            };
            let mut i = 0;
            self.writes.retain(|_| {
                i += 1;
                keep[i - 1]
            });
            self.index_rows();
        }
    }

    fn upsert(&mut self, w: ChannelWrite) {
        let hash = row_hash(&w.platform, &w.channel);
        let writes = &mut self.writes;
        match self.rows.entry(
            hash,
            |&j| writes[j].platform == w.platform && writes[j].channel == w.channel,
            |&j| row_hash(&writes[j].platform, &writes[j].channel),
        ) {
            hashbrown::hash_table::Entry::Occupied(e) => writes[*e.get()].assignee = w.assignee,
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(writes.len());
                writes.push(w);
            }
        }
    }

    /// Puts back a batch taken earlier under anything merged since (which is newer).
    pub fn restore(&mut self, batch: Batch) {
        let newer = std::mem::take(self);
        self.merge(batch);
        self.merge(Batch {
            writes: newer.writes,
            runs: Vec::new(),
            weights: newer.weights.weights,
            overrides: newer.overrides,
        });
        self.runs.extend(newer.runs);
    }

    pub fn take(&mut self) -> Batch {
        let pending = std::mem::take(self);
        Batch {
            writes: pending.writes,
            runs: pending.runs,
            weights: pending.weights.weights,
            overrides: pending.overrides,
        }
    }

    /// `onebot:100001 → 1002, onebot:100002 → (none), …`: the first `n` rows in order of
    /// platform and channel, then how many weights, for a report.
    pub fn describe_rows(&self, n: usize) -> String {
        let mut sorted: Vec<&ChannelWrite> = self.writes.iter().collect();
        sorted.sort_unstable_by(|a, b| (&a.platform, &a.channel).cmp(&(&b.platform, &b.channel)));
        let mut shown: Vec<String> = sorted
            .iter()
            .take(n)
            .map(|w| {
                let a = if w.assignee.is_empty() {
                    "(none)"
                } else {
                    &*w.assignee
                };
                format!("{}:{} → {a}", w.platform, w.channel)
            })
            .collect();
        if self.writes.len() > n {
            shown.push(format!("… {} more", self.writes.len() - n));
        }
        if self.weights() > 0 {
            shown.push(format!("{} weight row(s)", self.weights()));
        }
        for o in &self.overrides {
            let a = &o.audit;
            shown.push(format!(
                "{} {}:{} by {}",
                a.action, a.platform, a.target, a.by
            ));
        }
        shown.join(", ")
    }

    /// The history records' start times and causes, for a report.
    pub fn describe_runs(&self) -> String {
        self.runs
            .iter()
            .map(|r| format!("run at {} ms ({})", r.started_at_ms, r.causes))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weight(channel: &str, weight: f64, at_ms: i64) -> WeightWrite {
        WeightWrite {
            platform: "onebot".into(),
            channel: channel.into(),
            weight,
            at_ms,
        }
    }

    fn weights(batch: &[(&str, f64, i64)]) -> Batch {
        Batch {
            weights: batch.iter().map(|&(c, w, at)| weight(c, w, at)).collect(),
            ..Batch::default()
        }
    }

    /// (channel, weight, at_ms) of what `take` hands the store, by channel.
    fn taken(pending: &mut Pending) -> Vec<(String, f64, i64)> {
        let mut rows: Vec<(String, f64, i64)> = pending
            .take()
            .weights
            .into_iter()
            .map(|w| (w.channel, w.weight, w.at_ms))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    }

    fn rows(list: &[(&str, f64, i64)]) -> Vec<(String, f64, i64)> {
        list.iter()
            .map(|&(c, w, at)| (c.to_owned(), w, at))
            .collect()
    }

    /// Merged batches keep one weight per channel, the latest; a channel twice in the first
    /// batch keeps its later value once a second batch is merged.
    #[test]
    fn merged_weights_keep_the_latest_of_each_channel() {
        let mut pending = Pending::default();
        pending.merge(weights(&[("a", 1.0, 10), ("b", 2.0, 10), ("a", 1.5, 11)]));
        assert!(!pending.is_empty());
        pending.merge(weights(&[("b", 3.0, 20), ("c", 4.0, 20)]));
        pending.merge(weights(&[("c", 5.0, 30)]));
        assert_eq!(pending.weights(), 3);
        assert_eq!(
            taken(&mut pending),
            rows(&[("a", 1.5, 11), ("b", 3.0, 20), ("c", 5.0, 30)])
        );
        assert!(pending.is_empty());
    }

    /// An outage's memory grows with the channels, not with the batches.
    #[test]
    fn many_weight_batches_cost_one_row_per_channel() {
        let mut pending = Pending::default();
        for round in 0..50 {
            pending.merge(Batch {
                weights: (0..1_000)
                    .map(|c| weight(&c.to_string(), f64::from(round), i64::from(round)))
                    .collect(),
                ..Batch::default()
            });
        }
        assert_eq!(pending.weights(), 1_000);
        let batch = pending.take();
        assert!(
            batch
                .weights
                .iter()
                .all(|w| (w.weight, w.at_ms) == (49.0, 49))
        );
    }

    /// A batch put back after a failed commit goes under what was merged since.
    #[test]
    fn restored_weights_go_under_newer_ones() {
        let mut pending = Pending::default();
        pending.merge(weights(&[("a", 1.0, 10), ("b", 2.0, 10)]));
        let failed = pending.take();
        pending.merge(weights(&[("b", 3.0, 20)]));
        pending.restore(failed);
        assert_eq!(taken(&mut pending), rows(&[("a", 1.0, 10), ("b", 3.0, 20)]));
    }

    /// Weights and channel rows merge side by side: neither replaces the other, and a batch of
    /// weights alone is something to write.
    #[test]
    fn weights_and_rows_merge_side_by_side() {
        let write = |channel: &str, bot: &str| ChannelWrite {
            platform: "onebot".into(),
            channel: channel.into(),
            assignee: bot.into(),
        };
        assert!(!weights(&[("a", 1.0, 1)]).is_empty());
        let mut pending = Pending::default();
        pending.merge(Batch {
            writes: vec![write("a", "1"), write("b", "2")],
            ..Batch::default()
        });
        pending.merge(weights(&[("a", 7.0, 5)]));
        pending.merge(Batch {
            writes: vec![write("a", "3")],
            weights: vec![weight("z", 1.0, 6)],
            ..Batch::default()
        });
        assert_eq!((pending.rows(), pending.weights()), (2, 2));
        assert_eq!(
            pending.describe_rows(10),
            "onebot:a → 3, onebot:b → 2, 2 weight row(s)"
        );
        let batch = pending.take();
        assert_eq!(batch.writes, [write("a", "3"), write("b", "2")]);
        assert_eq!(batch.weights, [weight("a", 7.0, 5), weight("z", 1.0, 6)]);
    }
}
