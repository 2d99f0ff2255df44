//! The SQL store: SQLite (embedded default), PostgreSQL or MySQL/MariaDB, migrations applied
//! at connect.
//!
//! Channel rows are written the way Koishi expects an external writer to write them: ids as
//! decimal strings, and an UPSERT that only ever changes `assignee` of an existing row, so
//! `flag`, `locales`, `permissions` and `createdAt` set by Koishi or an admin survive. Every
//! rebalance is one transaction: its changed rows and its history rows land together or not
//! at all. Channel weights (`auto_assign_channel_weight`, our own table) go in the same
//! transactions, behind the same fence.
//!
//! Koishi's table has another layout on each database (text lists and epoch milliseconds on
//! SQLite, `text[]` and `timestamptz` plus the driver's `_pg_mtime` on PostgreSQL, text lists
//! and `datetime(3)` on MySQL). The migrations create exactly Koishi's layout when the table
//! is missing, and the values written follow the [`Layout`] read back from the database at
//! connect (and again after a rejected write), whoever created the table.

use std::collections::HashMap;
use std::str::FromStr as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use parking_lot::Mutex;
use sqlx::QueryBuilder;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlQueryResult};
use sqlx::postgres::{PgPool, PgPoolOptions, PgQueryResult};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteQueryResult,
    SqliteSynchronous,
};
use tracing::info;

use super::{
    AssignmentRow, Batch, ChannelWrite, DatabaseUrl, Failure, Fence, Store, StoreError, WeightWrite,
};
use crate::clock::Clock;
use crate::operator::Overrides;

/// PostgreSQL ends a session of ours idle inside a transaction for this long (ms).
const IDLE_IN_TRANSACTION: &str = "5000";

/// SQLite: a checkpoint of the write-ahead log waits until no commit has come for this long…
const CHECKPOINT_QUIET: Duration = Duration::from_millis(100);
/// …but not longer than this after it was asked for: under a steady stream of commits it runs
/// beside them, as it did before it waited at all.
const CHECKPOINT_DEFER_MAX: Duration = Duration::from_secs(1);

/// Returns once `commits` (counting the commits made) has not moved for [`CHECKPOINT_QUIET`],
/// or [`CHECKPOINT_DEFER_MAX`] after the call.
async fn until_commits_pause(commits: &AtomicU64) {
    let asked = tokio::time::Instant::now();
    let mut seen = commits.load(Ordering::Acquire);
    loop {
        tokio::time::sleep(CHECKPOINT_QUIET).await;
        let now = commits.load(Ordering::Acquire);
        if now == seen || asked.elapsed() >= CHECKPOINT_DEFER_MAX {
            return;
        }
        seen = now;
    }
}

/// Rows per multi-row UPSERT: as many as the database takes parameters in one statement
/// (SQLite's `SQLITE_MAX_VARIABLE_NUMBER`, 32,766 since 3.32; MySQL's 65,535 placeholders).
/// A MySQL row binds its five values. On SQLite a statement selects from a `VALUES` list
/// of channels and assignees, so it binds the platform and the time once and a row only its
/// channel (taken again as the guild where the two are equal) and its assignee: binding and
/// clearing parameters was half of the writer thread's time on the 367k-row start-up batch.
/// PostgreSQL binds whole columns as arrays (`UNNEST`), so its statements take far more.
fn rows_per_statement(backend: Backend) -> usize {
    match backend {
        Backend::Sqlite => (32_766 - 2) / 2,
        Backend::Mysql => 65_535 / 5,
        Backend::Postgres => 100_000,
    }
}

/// Weight rows per multi-row UPSERT: a row binds its four values, within the same parameter
/// limits as [`rows_per_statement`]; PostgreSQL binds four column arrays per statement.
fn weights_per_statement(backend: Backend) -> usize {
    match backend {
        Backend::Sqlite => 32_766 / 4,
        Backend::Mysql => 65_535 / 4,
        Backend::Postgres => 100_000,
    }
}

#[derive(Clone, Debug)]
pub struct SqlStore {
    pool: Pool,
    /// How `channel` stores what we write; read again after a rejected write.
    layout: Arc<Mutex<Layout>>,
    /// Koishi's PostgreSQL driver's per-upsert counter, the low byte of `_pg_mtime`.
    mtime_counter: Arc<AtomicU8>,
    /// `createdAt` of new rows, and `_pg_mtime`.
    clock: Clock,
    /// SQLite: commits whose checkpoint of the write-ahead log is still to run; non-zero
    /// while the checkpointing task runs (it goes again for the commits made meanwhile).
    checkpoints_wanted: Arc<AtomicU64>,
}

#[derive(Clone, Debug)]
enum Pool {
    Sqlite(SqliteFile),
    Postgres(PgPool),
    Mysql(MySqlPool),
}

/// An SQLite file, open on two connections. Every write goes through `writer`, always the
/// same connection, so its page cache stays warm: in WAL mode a connection drops its whole
/// cache when another one has written since its last transaction, and a rebalance's rows are
/// spread over the whole table (a cold cache reads them all again). Reads and checkpoints go
/// through `other`, beside the writer: a passive checkpoint never blocks a commit.
#[derive(Clone, Debug)]
struct SqliteFile {
    writer: SqlitePool,
    other: SqlitePool,
}

/// Runs the same code for every pool type (on SQLite, the connection that does not write).
macro_rules! on_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.pool {
            Pool::Sqlite(SqliteFile { other: $pool, .. }) => $body,
            Pool::Postgres($pool) => $body,
            Pool::Mysql($pool) => $body,
        }
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
    Mysql,
}

mod history;
mod layout;
mod overrides;
mod write;

pub use layout::Layout;
use layout::Lists;
use write::Fenced;

impl SqlStore {
    /// Connects (creating an SQLite file and its directory if needed), migrates, and reads
    /// the layout of `channel` back.
    pub async fn connect(db: &DatabaseUrl, clock: Clock) -> anyhow::Result<SqlStore> {
        let pool = match db {
            DatabaseUrl::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                }
                // One writer (this service): write-ahead log, synced at checkpoints rather
                // than at every commit (`synchronous = NORMAL`: a commit survives a crash of
                // the process, and a power loss can only lose the last commits, never corrupt
                // the file). On a clean stop the file goes back to a rollback journal
                // (`close`), so at rest it is a plain SQLite file for any other reader.
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    // Checkpoints run after each commit on the second connection
                    // (`checkpoint`), not inside the next commit.
                    .pragma("wal_autocheckpoint", "0")
                    // Up to 64 MiB of pages (SQLite's default is 2 MiB): a rebalance's rows
                    // are spread over the whole table.
                    .pragma("cache_size", "-65536")
                    .busy_timeout(Duration::from_secs(5));
                // One connection each, kept for good: a new one starts with a cold cache.
                let one = || {
                    SqlitePoolOptions::new()
                        .max_connections(1)
                        .idle_timeout(None)
                        .max_lifetime(None)
                        .test_before_acquire(false)
                };
                let open = |options| async {
                    one()
                        .connect_with(options)
                        .await
                        .with_context(|| format!("opening SQLite database {}", path.display()))
                };
                let writer = open(options.clone()).await?;
                sqlx::migrate!("./migrations/sqlite")
                    .run(&writer)
                    .await
                    .context("migrating the SQLite database")?;
                let other = open(options).await?;
                Pool::Sqlite(SqliteFile { writer, other })
            }
            DatabaseUrl::Postgres(url) => {
                // Our transactions never wait for us between statements; one that does
                // belongs to a paused or dead process and must not keep rows locked (under
                // leadership it would hold the term row, and the next leader, back).
                let options = sqlx::postgres::PgConnectOptions::from_str(url.expose())
                    .map_err(|e| invalid_url(url, "PostgreSQL", e))?
                    .options([("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION)]);
                let server =
                    server_name(options.get_socket(), options.get_host(), options.get_port());
                let pool = PgPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(3))
                    .connect_with(options)
                    .await
                    .map_err(|e| connect_error("PostgreSQL", &server, e))?;
                sqlx::migrate!("./migrations/postgres")
                    .run(&pool)
                    .await
                    .context("migrating the PostgreSQL database")?;
                Pool::Postgres(pool)
            }
            DatabaseUrl::Mysql(url) => {
                // `mariadb://` is the same protocol. The session keeps the server's time zone
                // (sqlx would set UTC): `createdAt` is a zoneless `datetime(3)`, and Koishi's
                // driver writes it in local time.
                let options = MySqlConnectOptions::from_str(&url.expose().replacen(
                    "mariadb://",
                    "mysql://",
                    1,
                ))
                .map_err(|e| invalid_url(url, "MySQL", e))?
                .timezone(None);
                let server =
                    server_name(options.get_socket(), options.get_host(), options.get_port());
                let pool = MySqlPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(3))
                    .connect_with(options)
                    .await
                    .map_err(|e| connect_error("MySQL", &server, e))?;
                sqlx::migrate!("./migrations/mysql")
                    .run(&pool)
                    .await
                    .context("migrating the MySQL database")?;
                Pool::Mysql(pool)
            }
        };
        let store = SqlStore {
            pool,
            layout: Arc::new(Mutex::new(Layout::koishi(Backend::Sqlite))),
            mtime_counter: Arc::default(),
            clock,
            checkpoints_wanted: Arc::default(),
        };
        let layout = store
            .read_layout()
            .await
            .context("reading the layout of the channel table")?;
        info!("channel table layout: {layout:?}");
        *store.layout.lock() = layout;
        Ok(store)
    }

    /// SQLite: copies the write-ahead log into the file on the connection that does not
    /// write, so the next commit does not pay for the last one's pages. One checkpoint at a
    /// time; a commit made while one runs gets another after it. Without that, the
    /// frames of a commit that came during the start-up's long checkpoint stayed in the log:
    /// SQLite starts the log over only once all of it is in the file, so every later commit
    /// appended to an ever longer log (new file blocks, not cached pages), and took longer.
    ///
    /// A checkpoint first waits for the commits to pause ([`CHECKPOINT_QUIET`], at most
    /// [`CHECKPOINT_DEFER_MAX`] in all): one running beside a commit slowed it (a bot going
    /// offline right after the start-up's 367k-row commit: ~45 ms from its notice to its
    /// rebalance's commit during that checkpoint's ~100 ms, ~26 ms when the store was idle),
    /// and one checkpoint then covers a whole burst of commits.
    fn checkpoint(&self) {
        let Pool::Sqlite(SqliteFile { other: pool, .. }) = &self.pool else {
            return;
        };
        if self.checkpoints_wanted.fetch_add(1, Ordering::AcqRel) > 0 {
            return;
        }
        let (pool, wanted) = (pool.clone(), self.checkpoints_wanted.clone());
        tokio::spawn(async move {
            loop {
                until_commits_pause(&wanted).await;
                let covered = wanted.load(Ordering::Acquire);
                if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                    .execute(&pool)
                    .await
                {
                    tracing::debug!("SQLite checkpoint: {e}");
                }
                // Done unless a commit asked for one while this one ran.
                if wanted
                    .compare_exchange(covered, 0, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    break;
                }
            }
        });
    }

    fn backend(&self) -> Backend {
        match self.pool {
            Pool::Sqlite(_) => Backend::Sqlite,
            Pool::Postgres(_) => Backend::Postgres,
            Pool::Mysql(_) => Backend::Mysql,
        }
    }

    /// The column types of `channel`, as the database reports them.
    async fn read_layout(&self) -> Result<Layout, sqlx::Error> {
        let columns: Vec<(String, String)> = match &self.pool {
            Pool::Sqlite(_) => Vec::new(),
            Pool::Postgres(pool) => {
                sqlx::query_as(
                    "SELECT column_name::text, data_type::text FROM information_schema.columns \
                     WHERE table_schema = current_schema() AND table_name = 'channel'",
                )
                .fetch_all(pool)
                .await?
            }
            Pool::Mysql(pool) => {
                sqlx::query_as(
                    "SELECT CAST(COLUMN_NAME AS CHAR), CAST(DATA_TYPE AS CHAR) \
                     FROM information_schema.COLUMNS \
                     WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'channel'",
                )
                .fetch_all(pool)
                .await?
            }
        };
        Ok(Layout::from_columns(self.backend(), &columns))
    }

    /// Koishi's PostgreSQL driver (`@minatojs/driver-postgres` 2.7, `upsert`) stamps every
    /// row its UPSERT updates with `_pg_mtime = Date.now() * 256 + counter`, the counter
    /// going 1, 2, …, 255, 0 with each upsert call, and leaves `_pg_mtime` NULL on rows the
    /// UPSERT inserts (it reads the value back to tell inserted rows from updated ones). We
    /// stamp the same way, once per UPSERT statement.
    fn next_pg_mtime(&self, now_ms: i64) -> i64 {
        let counter = self
            .mtime_counter
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        now_ms * 256 + i64::from(counter)
    }
}

impl Store for SqlStore {
    async fn load_assignments(&self) -> Result<Vec<AssignmentRow>, StoreError> {
        const SQL: &str = "SELECT platform, id AS channel, assignee AS bot FROM channel \
                           WHERE assignee IS NOT NULL AND assignee <> ''";
        on_pool!(self, pool => sqlx::query_as(SQL).fetch_all(pool).await).map_err(store_error)
    }

    async fn load_weights(&self) -> Result<Vec<WeightWrite>, StoreError> {
        const SQL: &str =
            "SELECT platform, channel, weight, updated_at FROM auto_assign_channel_weight";
        let rows: Vec<(String, String, f64, i64)> =
            on_pool!(self, pool => sqlx::query_as(SQL).fetch_all(pool).await)
                .map_err(store_error)?;
        Ok(rows
            .into_iter()
            .map(|(platform, channel, weight, at_ms)| WeightWrite {
                platform,
                channel,
                weight,
                at_ms,
            })
            .collect())
    }

    async fn load_overrides(&self) -> Result<Overrides, StoreError> {
        self.read_overrides().await.map_err(store_error)
    }

    async fn commit(&self, batch: &Batch, fence: Option<&Fence>) -> Result<(), StoreError> {
        let result = match self.commit_batch(batch, fence).await {
            Ok(Fenced::No) => Ok(()),
            Ok(Fenced::Yes { stored }) => Err(StoreError {
                kind: Failure::Fenced,
                message: format!(
                    "term {} is over: term {stored} has written",
                    fence.map_or(0, |f| f.term)
                ),
            }),
            Err(e) => Err(store_error(e)),
        };
        if result.is_ok() {
            self.checkpoint();
        }
        if let Err(e) = &result
            && e.kind == Failure::Rejected
        {
            // Someone may have changed the table under us (Koishi converting it, an admin):
            // the next attempt writes what the table holds now.
            if let Ok(layout) = self.read_layout().await {
                let mut current = self.layout.lock();
                if *current != layout {
                    info!("channel table layout changed: {layout:?}");
                    *current = layout;
                }
            }
        }
        result
    }

    async fn current_term(&self) -> Result<i64, StoreError> {
        const SQL: &str = "SELECT term FROM auto_assign_leader WHERE id = 1";
        on_pool!(self, pool => sqlx::query_scalar(SQL).fetch_one(pool).await).map_err(store_error)
    }

    async fn close(&self) {
        on_pool!(self, pool => pool.close().await);
        if let Pool::Sqlite(SqliteFile { writer: pool, .. }) = &self.pool {
            pool.close().await;
            // Alone on the file now: back to a rollback journal, so at rest it is a plain
            // SQLite file. Not waiting for a reader that holds it open (then it stays in WAL
            // mode, which the next start checkpoints and leaves again).
            let options = (*pool.connect_options())
                .clone()
                .journal_mode(SqliteJournalMode::Delete)
                .busy_timeout(Duration::ZERO);
            match sqlx::ConnectOptions::connect(&options).await {
                Ok(conn) => {
                    let _ = sqlx::Connection::close(conn).await;
                }
                Err(e) => tracing::debug!("SQLite file left in WAL mode: {e}"),
            }
        }
    }
}

/// Where a connection goes, for its errors (which name neither the URL nor its password):
/// `host:port`, or the Unix socket.
fn server_name(socket: Option<&std::path::PathBuf>, host: &str, port: u16) -> String {
    match socket {
        Some(socket) => socket.display().to_string(),
        None if host.contains(':') => format!("[{host}]:{port}"),
        None => format!("{host}:{port}"),
    }
}

/// A failed connection: where to, and why, on one line (sqlx's error alone, not its sources
/// too, which repeat it), with what to check when the server's certificate is not trusted.
fn connect_error(database: &str, server: &str, e: sqlx::Error) -> anyhow::Error {
    use rustls::CertificateError as C;
    let certificate = match &e {
        sqlx::Error::Io(io) => io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>()),
        _ => None,
    };
    let hint = match certificate {
        Some(rustls::Error::InvalidCertificate(C::UnknownIssuer)) => {
            " (the server's certificate is not signed by the CA of `sslrootcert` / `ssl-ca`, \
             nor by one the system trusts)"
        }
        Some(rustls::Error::InvalidCertificate(
            C::NotValidForName | C::NotValidForNameContext { .. },
        )) => " (the server's certificate is not for the host in the URL)",
        _ => "",
    };
    anyhow::anyhow!("connecting to {database} at {server}: {e}{hint}")
}

/// A URL sqlx cannot read: shown without its password, with sqlx's reason (an unknown
/// `sslmode`, a bad port), which quotes no part of the URL's user information.
fn invalid_url(url: &crate::secret::SecretUrl, database: &str, e: sqlx::Error) -> anyhow::Error {
    let reason = match e {
        sqlx::Error::Configuration(reason) => reason.to_string(),
        other => other.to_string(),
    };
    anyhow::anyhow!("{url}: not a valid {database} URL ({reason})")
}

/// An SQL error as a store error: outage (retry) or rejection (the table is not as expected).
fn store_error(e: sqlx::Error) -> StoreError {
    let kind = match &e {
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            let message = db.message();
            // MySQL/MariaDB error numbers: 1054 unknown column, 1146 unknown table, 1406 data
            // too long, 1366/1292 incorrect value for a column, 1264 out of range, 1048/1364
            // a column that cannot be NULL / has no default.
            let mysql_rejects = db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|m| {
                    matches!(
                        m.number(),
                        1048 | 1054 | 1146 | 1264 | 1292 | 1364 | 1366 | 1406
                    )
                });
            // SQLSTATE classes 22 (data exception) and 42 (syntax error or access rule
            // violation: a missing column, a column of another type) on PostgreSQL and MySQL;
            // SQLite's "datatype mismatch", "no such column/table".
            if mysql_rejects
                || code.starts_with("22")
                || code.starts_with("42")
                || message.contains("datatype mismatch")
                || message.contains("no such column")
                || message.contains("no such table")
                || message.contains("has no column")
            {
                Failure::Rejected
            } else {
                Failure::Outage
            }
        }
        sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::TypeNotFound { .. } => Failure::Rejected,
        _ => Failure::Outage,
    };
    StoreError {
        kind,
        message: e.to_string(),
    }
}

/// The id of the row an INSERT created, where the database reports it without `RETURNING`.
trait InsertedId {
    fn inserted_id(&self) -> Option<i64>;
}

impl InsertedId for SqliteQueryResult {
    fn inserted_id(&self) -> Option<i64> {
        Some(self.last_insert_rowid())
    }
}

impl InsertedId for MySqlQueryResult {
    fn inserted_id(&self) -> Option<i64> {
        i64::try_from(self.last_insert_id()).ok()
    }
}

impl InsertedId for PgQueryResult {
    fn inserted_id(&self) -> Option<i64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::layout::CreatedAt;
    use super::write::{in_key_order, statement_sizes, weights_in_key_order};
    use super::*;

    fn columns(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(c, t)| (c.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn statements_cover_every_row_once_in_few_sizes() {
        for per_statement in [1, 7, 6_553] {
            for rows in [0, 1, 6, 7, 8, 1_850, 6_553, 6_554, 367_649] {
                let sizes: Vec<usize> = statement_sizes(rows, per_statement).collect();
                assert_eq!(
                    sizes.iter().sum::<usize>(),
                    rows,
                    "{rows} rows, {per_statement} per statement"
                );
                assert!(sizes.iter().all(|&n| n > 0 && n <= per_statement));
                // Full ones first, then distinct powers of two, largest first.
                let rest = &sizes[rows / per_statement..];
                assert!(
                    sizes[..rows / per_statement]
                        .iter()
                        .all(|&n| n == per_statement)
                );
                assert!(rest.iter().all(|n| n.is_power_of_two()));
                assert!(rest.windows(2).all(|w| w[0] > w[1]));
            }
        }
    }

    #[test]
    fn rows_are_written_by_platform_in_key_order() {
        let ids = [
            "300000001",
            "30000000",
            "300000000",
            "1234567890123456789",
            "1234567890123456",
            "12345678901234567",
            "1234567890123456\u{0}",
            "",
            "\u{0}",
            "群",
            "z",
        ];
        let writes: Vec<ChannelWrite> = ids
            .iter()
            .flat_map(|id| {
                ["qq", "onebot", "discord"].map(|platform| ChannelWrite {
                    platform: platform.into(),
                    channel: (*id).into(),
                    assignee: "".into(),
                })
            })
            .collect();
        let keys = |rows: Vec<&ChannelWrite>| -> Vec<(String, String)> {
            rows.iter()
                .map(|w| (w.platform.to_string(), w.channel.to_string()))
                .collect()
        };
        let mut expected = keys(writes.iter().collect());
        expected.sort();
        assert_eq!(keys(in_key_order(&writes)), expected);
    }

    /// Weights go out in primary key order, the last of each channel once (PostgreSQL refuses
    /// an UPSERT that changes a row twice), and never a weight that is not a number.
    #[test]
    fn weights_are_written_in_key_order_the_last_of_each_channel() {
        let weight = |platform: &str, channel: &str, weight: f64| WeightWrite {
            platform: platform.into(),
            channel: channel.into(),
            weight,
            at_ms: 0,
        };
        let long = "1234567890123456789";
        let weights = [
            weight("qq", "2", 1.0),
            weight("onebot", long, 1.0),
            weight("onebot", "1", 1.0),
            weight("qq", "2", 2.0),
            weight("onebot", "1234567890123456", 1.0),
            weight("onebot", "nan", f64::NAN),
            weight("onebot", "infinite", f64::INFINITY),
            weight("onebot", long, 2.0),
            weight("onebot", "1", 3.0),
            weight("onebot", "1", f64::NAN),
        ];
        let written: Vec<(&str, &str, f64)> = weights_in_key_order(&weights)
            .into_iter()
            .map(|w| (w.platform.as_str(), w.channel.as_str(), w.weight))
            .collect();
        assert_eq!(
            written,
            [
                ("onebot", "1", 3.0),
                ("onebot", "1234567890123456", 1.0),
                ("onebot", long, 2.0),
                ("qq", "2", 2.0),
            ]
        );
        // Four parameters a row, within SQLite's and MySQL's limits.
        assert!(weights_per_statement(Backend::Sqlite) * 4 <= 32_766);
        assert!(weights_per_statement(Backend::Mysql) * 4 <= 65_535);
    }

    #[test]
    fn layouts_are_read_from_the_column_types() {
        let koishi_pg = columns(&[
            ("locales", "ARRAY"),
            ("createdAt", "timestamp with time zone"),
            ("_pg_mtime", "bigint"),
        ]);
        assert_eq!(
            Layout::from_columns(Backend::Postgres, &koishi_pg),
            Layout::koishi(Backend::Postgres)
        );
        let old_pg = columns(&[("locales", "text"), ("createdAt", "bigint")]);
        let old = Layout::from_columns(Backend::Postgres, &old_pg);
        assert_eq!(
            (old.lists, old.created_at, old.pg_mtime),
            (Lists::Text, CreatedAt::EpochMs, false)
        );
        assert_eq!(old.empty_list(), "''");
        assert!(!old.upsert_tail(7).contains("_pg_mtime"));
        let mysql = columns(&[("locales", "text"), ("createdAt", "datetime")]);
        assert_eq!(
            Layout::from_columns(Backend::Mysql, &mysql),
            Layout::koishi(Backend::Mysql)
        );
        assert_eq!(Layout::koishi(Backend::Sqlite).created_at(), ("", ""));
        let pg = Layout::koishi(Backend::Postgres);
        assert_eq!(pg.empty_list(), "'{}'");
        assert!(pg.upsert_tail(7).ends_with(r#", "_pg_mtime" = 7"#));
        assert!(
            Layout::koishi(Backend::Mysql)
                .upsert_tail(7)
                .contains("ON DUPLICATE KEY UPDATE assignee = VALUES(assignee)")
        );
    }

    /// A checkpoint waits for a pause in the commits, but not for ever.
    #[tokio::test(start_paused = true)]
    async fn a_checkpoint_waits_for_the_commits_to_pause_at_most_a_second() {
        use tokio::time::{Instant, advance};
        let commits = Arc::new(AtomicU64::new(1));
        let waiting = |commits: &Arc<AtomicU64>| {
            let commits = commits.clone();
            tokio::spawn(async move {
                until_commits_pause(&commits).await;
                Instant::now()
            })
        };
        let start = Instant::now();
        until_commits_pause(&commits).await;
        assert_eq!(
            start.elapsed(),
            CHECKPOINT_QUIET,
            "no commit came: one quiet period"
        );

        // Five commits 60 ms apart: the wait ends within two quiet periods of the last.
        let start = Instant::now();
        let done = waiting(&commits);
        tokio::task::yield_now().await;
        for _ in 0..5 {
            advance(Duration::from_millis(60)).await;
            commits.fetch_add(1, Ordering::AcqRel);
        }
        let last = Instant::now();
        let done = done.await.unwrap();
        assert_eq!(last - start, Duration::from_millis(300));
        assert!(
            done > last && done - last <= 2 * CHECKPOINT_QUIET,
            "done {:?} after the last commit",
            done - last
        );

        // A commit every 60 ms for good: the wait ends a second after it began anyway.
        let start = Instant::now();
        let done = waiting(&commits);
        tokio::task::yield_now().await;
        let done = loop {
            advance(Duration::from_millis(60)).await;
            commits.fetch_add(1, Ordering::AcqRel);
            if done.is_finished() {
                break done.await.unwrap();
            }
            assert!(
                start.elapsed() < 3 * CHECKPOINT_DEFER_MAX,
                "still waiting under steady commits"
            );
        };
        assert!(
            done - start >= CHECKPOINT_DEFER_MAX
                && done - start <= CHECKPOINT_DEFER_MAX + 2 * CHECKPOINT_QUIET,
            "waited {:?}",
            done - start
        );
    }

    /// A commit made while the last one's checkpoint runs is checkpointed too, so once the
    /// store is idle the whole log is in the file and the next commit starts the log over
    /// instead of appending to it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commits_during_a_checkpoint_are_checkpointed_too() {
        let dir = std::env::temp_dir().join(format!("aa-checkpoint-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let url = DatabaseUrl::Sqlite(dir.join("x.db"));
        let store = SqlStore::connect(&url, Clock::system()).await.unwrap();
        let batch = |from: usize, rows: usize, bot: &str| Batch {
            writes: (from..from + rows)
                .map(|c| ChannelWrite {
                    platform: "onebot".into(),
                    channel: format!("{}", 300_000_000 + c).into(),
                    assignee: bot.into(),
                })
                .collect(),
            runs: vec![],
            weights: vec![],
            overrides: vec![],
        };
        let idle = || async {
            while store.checkpoints_wanted.load(Ordering::Acquire) != 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let log = dir.join("x.db-wal");
        // A long checkpoint (thousands of pages), and a commit right behind it.
        store.commit(&batch(0, 200_000, "1"), None).await.unwrap();
        store.commit(&batch(0, 5_000, "2"), None).await.unwrap();
        idle().await;
        let size = std::fs::metadata(&log).unwrap().len();
        // Everything is in the file: the next commits write the log from its start.
        for bot in ["3", "4"] {
            store
                .commit(&batch(100_000, 5_000, bot), None)
                .await
                .unwrap();
            idle().await;
            assert_eq!(std::fs::metadata(&log).unwrap().len(), size, "the log grew");
        }
        store.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A real SQLite file: a batch of two platforms, one of them more than a statement's
    /// worth of rows, lands whole with Koishi's values (the guild is the channel only on
    /// OneBot, `createdAt` the commit's time); a later batch changes only the assignees.
    #[tokio::test]
    async fn batches_of_several_platforms_land_whole() {
        let dir = std::env::temp_dir().join(format!("aa-platforms-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let url = DatabaseUrl::Sqlite(dir.join("x.db"));
        let store = SqlStore::connect(&url, Clock::starting_at(1_786_000_000.0))
            .await
            .unwrap();
        let write = |platform: &str, channel: usize, bot: &str| ChannelWrite {
            platform: platform.into(),
            channel: format!("{}", 300_000_000 + channel).into(),
            assignee: bot.into(),
        };
        let onebot = rows_per_statement(Backend::Sqlite) + 3;
        // The platforms interleaved, as merged pending batches can be.
        let mut first: Vec<ChannelWrite> = (0..onebot).map(|c| write("onebot", c, "a")).collect();
        first.splice(100..100, (0..5).map(|c| write("discord", c, "b")));
        let before = store.clock.unix_ms();
        store
            .commit(
                &Batch {
                    writes: first,
                    runs: vec![],
                    weights: vec![],
                    overrides: vec![],
                },
                None,
            )
            .await
            .unwrap();
        let between = store.clock.unix_ms();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let later = (0..10)
            .map(|c| write("onebot", c, "c"))
            .chain((0..2).map(|c| write("discord", c, "")));
        store
            .commit(
                &Batch {
                    writes: later.collect(),
                    runs: vec![],
                    weights: vec![],
                    overrides: vec![],
                },
                None,
            )
            .await
            .unwrap();
        type Row = (String, String, i64, String, String, String, String, i64);
        let Pool::Sqlite(SqliteFile { other, .. }) = &store.pool else {
            unreachable!()
        };
        let rows: Vec<Row> = sqlx::query_as(
            r#"SELECT platform, id, flag, assignee, "guildId", locales, permissions, "createdAt"
               FROM channel ORDER BY platform, id"#,
        )
        .fetch_all(other)
        .await
        .unwrap();
        assert_eq!(rows.len(), onebot + 5);
        for (platform, id, flag, assignee, guild, locales, permissions, created) in &rows {
            let n: usize = id.parse::<usize>().unwrap() - 300_000_000;
            let expected = match (platform.as_str(), n) {
                ("onebot", 0..10) => "c",
                ("onebot", _) => "a",
                ("discord", 0..2) => "",
                ("discord", _) => "b",
                _ => panic!("unexpected platform {platform}"),
            };
            assert_eq!(assignee, expected, "{platform}:{id}");
            let expected_guild = if platform == "onebot" {
                id.as_str()
            } else {
                ""
            };
            assert_eq!(guild, expected_guild, "{platform}:{id}");
            assert_eq!((*flag, locales.as_str(), permissions.as_str()), (0, "", ""));
            // Written by the first commit, not touched by the second.
            assert!(
                (before..=between).contains(created),
                "{platform}:{id} createdAt {created}"
            );
        }
        store.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A real SQLite file: a term's writes land until a newer term has written; then they
    /// are refused whole (no row, no history record), and the newer term's go on.
    #[tokio::test]
    async fn stale_terms_are_fenced_in_the_database() {
        let dir = std::env::temp_dir().join(format!("aa-fence-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let url = DatabaseUrl::Sqlite(dir.join("x.db"));
        let store = SqlStore::connect(&url, Clock::system()).await.unwrap();
        let fence = |term: i64| Fence {
            term,
            holder: format!("i{term}"),
            api: None,
        };
        let write = |assignee: &str| Batch {
            writes: vec![ChannelWrite {
                platform: "onebot".into(),
                channel: "1".into(),
                assignee: assignee.into(),
            }],
            runs: vec![],
            weights: vec![],
            overrides: vec![],
        };
        assert_eq!(store.current_term().await.unwrap(), 0);
        store.commit(&write("a"), Some(&fence(3))).await.unwrap();
        store.commit(&write("b"), Some(&fence(3))).await.unwrap();
        store
            .commit(&Batch::default(), Some(&fence(4)))
            .await
            .unwrap();
        let e = store
            .commit(&write("stale"), Some(&fence(3)))
            .await
            .unwrap_err();
        assert_eq!(e.kind, Failure::Fenced);
        assert_eq!(e.message, "term 3 is over: term 4 has written");
        let rows = store.load_assignments().await.unwrap();
        assert_eq!(
            rows,
            [AssignmentRow {
                platform: "onebot".into(),
                channel: "1".into(),
                bot: "b".into()
            }]
        );
        store.commit(&write("c"), Some(&fence(4))).await.unwrap();
        assert_eq!(store.current_term().await.unwrap(), 4);
        store.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
