//! Outputs of a rebalance. The SQL store is the durable record: Koishi's `channel.assignee`
//! and the rebalance history.
//!
//! * [`sql`]: SQLite / PostgreSQL / MySQL (MariaDB);
//! * [`memory`]: the same contract in memory, for tests of everything around it;
//! * [`writer`]: the task that commits beside the engine, merging and retrying while the
//!   database is away, so planning never waits for it.

#[cfg(test)]
mod memory;
pub mod sql;
pub mod writer;

use std::hash::BuildHasher as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
pub use sql::SqlStore;

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

impl<'de> Deserialize<'de> for DatabaseUrl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::yaml::checked_str(d, DatabaseUrl::parse)
    }
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

/// A leader's fencing token: its term, and who holds it (for the record and the logs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub term: i64,
    pub holder: String,
}

/// What a store offers the engine.
pub trait Store: Send + Sync + 'static {
    /// Every stored non-empty assignee: (platform, channel, bot).
    fn load_assignments(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, String, String)>, StoreError>> + Send;
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
}

/// What one transaction writes: changed channel rows and history records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    pub writes: Vec<ChannelWrite>,
    pub runs: Vec<RunRecord>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.runs.is_empty()
    }
}

/// Writes not committed yet: the last assignee of each channel, and every history record, in
/// order. Merging keeps only the latest value of a row, so an outage costs memory in the
/// number of channels, not of plans. A batch merged into nothing pending is kept as it is (a
/// plan's rows are distinct): the row table is built only when a second batch arrives.
#[derive(Debug, Default)]
pub struct Pending {
    /// Each (platform, channel) at most once.
    writes: Vec<ChannelWrite>,
    /// Positions in `writes` by (platform, channel); empty until a second batch is merged.
    rows: hashbrown::HashTable<usize>,
    runs: Vec<RunRecord>,
}

fn row_hash(platform: &str, channel: &str) -> u64 {
    rustc_hash::FxBuildHasher.hash_one((platform, channel))
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.runs.is_empty()
    }

    pub fn rows(&self) -> usize {
        self.writes.len()
    }

    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Adds a later batch: its rows replace earlier values of the same rows.
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
        });
        self.runs.extend(newer.runs);
    }

    pub fn take(&mut self) -> Batch {
        let pending = std::mem::take(self);
        Batch {
            writes: pending.writes,
            runs: pending.runs,
        }
    }

    /// `onebot:100001 → 1002, onebot:100002 → (none), …`: the first `n` rows in order of
    /// platform and channel, for a report.
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
