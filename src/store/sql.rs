//! The SQL store: SQLite (embedded default), PostgreSQL or MySQL/MariaDB, migrations applied
//! at connect.
//!
//! Channel rows are written the way Koishi expects an external writer to write them: ids as
//! decimal strings, and an UPSERT that only ever changes `assignee` of an existing row, so
//! `flag`, `locales`, `permissions` and `createdAt` set by Koishi or an admin survive. Every
//! rebalance is one transaction: its changed rows and its history rows land together or not
//! at all.
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

use super::{Batch, ChannelWrite, DatabaseUrl, Failure, Fence, Store, StoreError};
use crate::clock::Clock;

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

/// `locales` and `permissions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lists {
    /// Comma-joined text, `''` for the empty list (Koishi on SQLite and MySQL).
    Text,
    /// `text[]` (Koishi on PostgreSQL): `'{}'` for the empty list.
    Array,
}

/// `createdAt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CreatedAt {
    /// Integer milliseconds since the epoch (Koishi on SQLite).
    EpochMs,
    /// `timestamptz` (Koishi on PostgreSQL) or `datetime(3)` (Koishi on MySQL).
    Timestamp,
}

/// The column types of `channel` that decide how a row is written, read back from the
/// database rather than assumed: whoever created the table first decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    backend: Backend,
    lists: Lists,
    created_at: CreatedAt,
    /// The column `_pg_mtime` exists (Koishi's PostgreSQL driver's modification stamp).
    pg_mtime: bool,
}

impl Layout {
    /// Koishi's layout on each database, for a table that cannot be read back.
    fn koishi(backend: Backend) -> Layout {
        match backend {
            Backend::Sqlite => Layout {
                backend,
                lists: Lists::Text,
                created_at: CreatedAt::EpochMs,
                pg_mtime: false,
            },
            Backend::Postgres => Layout {
                backend,
                lists: Lists::Array,
                created_at: CreatedAt::Timestamp,
                pg_mtime: true,
            },
            Backend::Mysql => Layout {
                backend,
                lists: Lists::Text,
                created_at: CreatedAt::Timestamp,
                pg_mtime: false,
            },
        }
    }

    /// From `(column name, data type)` pairs as `information_schema.columns` gives them.
    /// SQLite has one layout (every column TEXT but `flag` and `createdAt`, INTEGER).
    fn from_columns(backend: Backend, columns: &[(String, String)]) -> Layout {
        if columns.is_empty() || backend == Backend::Sqlite {
            return Layout::koishi(backend);
        }
        let type_of = |name: &str| {
            columns
                .iter()
                .find(|(c, _)| c == name)
                .map(|(_, t)| t.to_ascii_lowercase())
                .unwrap_or_default()
        };
        let lists = if type_of("locales") == "array" || type_of("locales").ends_with("[]") {
            Lists::Array
        } else {
            Lists::Text
        };
        let created = type_of("createdAt");
        let created_at = if created.contains("time") || created.starts_with("date") {
            CreatedAt::Timestamp
        } else {
            CreatedAt::EpochMs
        };
        Layout {
            backend,
            lists,
            created_at,
            pg_mtime: backend == Backend::Postgres && columns.iter().any(|(c, _)| c == "_pg_mtime"),
        }
    }

    fn quote(&self, name: &str) -> String {
        match self.backend {
            Backend::Mysql => format!("`{name}`"),
            Backend::Sqlite | Backend::Postgres => format!("\"{name}\""),
        }
    }

    fn upsert_head(&self) -> String {
        format!(
            "INSERT INTO channel (id, platform, flag, assignee, {}, locales, permissions, {}) ",
            self.quote("guildId"),
            self.quote("createdAt")
        )
    }

    /// Only `assignee` of an existing row changes (and `_pg_mtime`, as Koishi's own upsert
    /// sets it).
    fn upsert_tail(&self, pg_mtime: i64) -> String {
        match self.backend {
            Backend::Mysql => " ON DUPLICATE KEY UPDATE assignee = VALUES(assignee)".into(),
            Backend::Sqlite | Backend::Postgres => {
                let mut tail = String::from(
                    " ON CONFLICT (id, platform) DO UPDATE SET assignee = excluded.assignee",
                );
                if self.pg_mtime {
                    tail.push_str(&format!(", {} = {pg_mtime}", self.quote("_pg_mtime")));
                }
                tail
            }
        }
    }

    /// The empty list, as the list columns store it.
    fn empty_list(&self) -> &'static str {
        match self.lists {
            Lists::Text => "''",
            Lists::Array => "'{}'",
        }
    }

    /// What goes before and after the bound milliseconds of `createdAt`.
    fn created_at(&self) -> (&'static str, &'static str) {
        match (self.created_at, self.backend) {
            (CreatedAt::EpochMs, _) => ("", ""),
            // Exact to the millisecond: the bound integer becomes a float8 exactly (< 2^53).
            (CreatedAt::Timestamp, Backend::Postgres) => {
                ("('epoch'::timestamptz + ", " * INTERVAL '1 millisecond')")
            }
            // In the session's time zone, which is the server's (see `connect`): a datetime
            // has no zone, and Koishi's MySQL driver writes its host's local time.
            (CreatedAt::Timestamp, Backend::Mysql) => ("FROM_UNIXTIME(", " / 1000)"),
            // Never read back from SQLite (Koishi's SQLite layout is fixed).
            (CreatedAt::Timestamp, Backend::Sqlite) => ("", ""),
        }
    }
}

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
                    .map_err(|_| anyhow::anyhow!("{url}: not a valid PostgreSQL URL"))?
                    .options([("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION)]);
                let pool = PgPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(3))
                    .connect_with(options)
                    .await
                    .context("connecting to PostgreSQL")?;
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
                .map_err(|_| anyhow::anyhow!("{url}: not a valid MySQL URL"))?
                .timezone(None);
                let pool = MySqlPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(3))
                    .connect_with(options)
                    .await
                    .context("connecting to MySQL")?;
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
    async fn load_assignments(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        const SQL: &str = "SELECT platform, id, assignee FROM channel \
                           WHERE assignee IS NOT NULL AND assignee <> ''";
        on_pool!(self, pool => sqlx::query_as(SQL).fetch_all(pool).await).map_err(store_error)
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

impl SqlStore {
    /// Writes a batch in one transaction, fenced by `fence` (see [`Store::commit`]): the
    /// channel rows as multi-row UPSERTs (on PostgreSQL one `INSERT ... SELECT FROM UNNEST` of
    /// column arrays per statement), then the history records.
    ///
    /// The fence is the transaction's first statement: it raises the term row to ours unless
    /// it is higher. The row stays locked until the commit, so a newer leader's first write
    /// (which raises the term) waits for this transaction and every later one of ours finds
    /// the higher term. `commits` changes on every write so MySQL, which counts only rows
    /// actually changed, reports the row as affected too.
    async fn commit_batch(
        &self,
        batch: &Batch,
        fence: Option<&Fence>,
    ) -> Result<Fenced, sqlx::Error> {
        let now_ms = self.clock.unix_ms();
        let layout = *self.layout.lock();
        let head = layout.upsert_head();
        let list = layout.empty_list();
        let (created_before, created_after) = layout.created_at();
        let returning = layout.backend == Backend::Postgres;
        let per_statement = rows_per_statement(layout.backend);
        // In key order, one platform after another: every insert lands next to the previous
        // one in the primary key's B-tree, instead of at random pages (which spill the page
        // cache on a large batch).
        let rows = in_key_order(&batch.writes);
        // SQLite and MySQL: `VALUES (...), (...)` with bound parameters. A statement's text
        // depends only on its row count (and on SQLite whether the guild is the channel), and
        // the connection prepares each text once and keeps it: full statements, then the rest
        // in powers of two ([`statement_sizes`]), so every batch reuses the same few prepared
        // statements.
        let mut texts: HashMap<(usize, bool), Arc<str>> = HashMap::new();
        let mut statement = |rows: usize, guild_is_channel: bool| -> Arc<str> {
            let text = texts.entry((rows, guild_is_channel)).or_insert_with(|| {
                let (select, row) = match layout.backend {
                    // The platform and the time once, then two parameters per row. No
                    // parameter appears twice: SQLite looks a repeated `?NNN` up in a linear
                    // list, which made preparing a 16k-row statement quadratic. `WHERE true`
                    // tells SQLite's parser the `ON CONFLICT` belongs to the INSERT.
                    Backend::Sqlite => {
                        let guild = if guild_is_channel { "column1" } else { "''" };
                        (
                            format!(
                                "SELECT column1, ?, 0, column2, {guild}, {list}, {list}, \
                                 {created_before}?{created_after} FROM (VALUES "
                            ),
                            "(?, ?)".to_owned(),
                        )
                    }
                    _ => (
                        "VALUES ".to_owned(),
                        format!(
                            "(?, ?, 0, ?, ?, {list}, {list}, {created_before}?{created_after})"
                        ),
                    ),
                };
                let mut sql =
                    String::with_capacity(head.len() + select.len() + rows * (row.len() + 2) + 100);
                sql.push_str(&head);
                sql.push_str(&select);
                for i in 0..rows {
                    if i > 0 {
                        sql.push_str(", ");
                    }
                    sql.push_str(&row);
                }
                if layout.backend == Backend::Sqlite {
                    sql.push_str(") WHERE true");
                }
                // No `_pg_mtime` here (PostgreSQL's, which takes the path below), so the text
                // has no per-statement stamp.
                debug_assert!(!layout.pg_mtime);
                sql.push_str(&layout.upsert_tail(0));
                Arc::from(sql)
            });
            text.clone()
        };
        // Binding shared strings copies them once, into the database's buffers (no `String`
        // on our side).
        let empty: Arc<str> = Arc::from("");
        macro_rules! values {
            ($tx:ident) => {
                // Each statement's rows, a platform's rows after another's.
                let mut chunks = rows
                    .chunk_by(|a, b| a.platform == b.platform)
                    .flat_map(|group| {
                        let mut rest = group;
                        statement_sizes(group.len(), per_statement).map(move |size| {
                            let (chunk, after) = rest.split_at(size);
                            rest = after;
                            chunk
                        })
                    });
                let mut bind = |chunk: &[&ChannelWrite]| {
                    let platform = &chunk[0].platform;
                    let guild_is_channel = guild_is_channel(platform);
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(statement(
                        chunk.len(),
                        guild_is_channel,
                    )));
                    if layout.backend == Backend::Sqlite {
                        q = q.bind(platform.clone()).bind(now_ms);
                        for w in chunk {
                            q = q.bind(w.channel.clone()).bind(w.assignee.clone());
                        }
                    } else {
                        for w in chunk {
                            let guild = if guild_is_channel {
                                w.channel.clone()
                            } else {
                                empty.clone()
                            };
                            q = q
                                .bind(w.channel.clone())
                                .bind(platform.clone())
                                .bind(w.assignee.clone())
                                .bind(guild)
                                .bind(now_ms);
                        }
                    }
                    q
                };
                // The next statement's rows are bound while this one runs (on SQLite's worker
                // thread, or in MySQL's server): one after the other, binding was a fifth of
                // the start-up commit's 367k rows, the database waiting meanwhile.
                let mut next = chunks.next().map(&mut bind);
                while let Some(q) = next {
                    let (done, following) =
                        tokio::join!(q.execute(&mut *$tx), async { chunks.next().map(&mut bind) });
                    done?;
                    next = following;
                }
            };
        }
        macro_rules! commit {
            ($pool:expr, |$tx:ident| $rows:block) => {{
                let mut $tx = $pool.begin().await?;
                if let Some(fence) = fence {
                    let mut q = QueryBuilder::new("UPDATE auto_assign_leader SET term = ");
                    q.push_bind(fence.term)
                        .push(", holder = ")
                        .push_bind(fence.holder.clone())
                        .push(", commits = commits + 1 WHERE id = 1 AND term <= ")
                        .push_bind(fence.term);
                    if q.build().execute(&mut *$tx).await?.rows_affected() == 0 {
                        let stored: i64 =
                            sqlx::query_scalar("SELECT term FROM auto_assign_leader WHERE id = 1")
                                .fetch_one(&mut *$tx)
                                .await?;
                        $tx.rollback().await?;
                        return Ok(Fenced::Yes { stored });
                    }
                }
                $rows
                let tx = &mut $tx;
                for run in &batch.runs {
                    let forced: i64 = run.platforms.iter().map(|p| p.forced).sum();
                    let voluntary: i64 = run.platforms.iter().map(|p| p.voluntary).sum();
                    let channels: i64 = run.platforms.iter().map(|p| p.channels).sum();
                    let mut q = QueryBuilder::new(
                        "INSERT INTO auto_assign_rebalance \
                         (started_at, finished_at, causes, strategy, term, channels, moved_forced, moved_voluntary) ",
                    );
                    q.push_values([run], |mut row, run| {
                        row.push_bind(run.started_at_ms)
                            .push_bind(run.finished_at_ms)
                            .push_bind(run.causes.clone())
                            .push_bind(run.strategy.clone())
                            .push_bind(run.term)
                            .push_bind(channels)
                            .push_bind(forced)
                            .push_bind(voluntary);
                    });
                    let id: i64 = if returning {
                        q.push(" RETURNING id");
                        q.build_query_scalar().fetch_one(&mut **tx).await?
                    } else {
                        q.build()
                            .execute(&mut **tx)
                            .await?
                            .inserted_id()
                            .ok_or_else(|| sqlx::Error::Protocol("no id for the inserted rebalance".into()))?
                    };
                    let mut q = QueryBuilder::new(
                        "INSERT INTO auto_assign_rebalance_platform \
                         (rebalance_id, platform, channels, unassigned, moved_forced, moved_voluntary, \
                          bots, mean, stddev, min_load, max_load) ",
                    );
                    q.push_values(&run.platforms, |mut row, p| {
                        row.push_bind(id)
                            .push_bind(p.platform.clone())
                            .push_bind(p.channels)
                            .push_bind(p.unassigned)
                            .push_bind(p.forced)
                            .push_bind(p.voluntary)
                            .push_bind(p.bots)
                            .push_bind(p.mean)
                            .push_bind(p.stddev)
                            .push_bind(p.min)
                            .push_bind(p.max);
                    });
                    if !run.platforms.is_empty() {
                        q.build().execute(&mut **tx).await?;
                    }
                }
                $tx.commit().await?;
                Ok(Fenced::No)
            }};
        }
        match &self.pool {
            Pool::Sqlite(SqliteFile { writer: pool, .. }) => commit!(pool, |tx| {
                values!(tx);
            }),
            Pool::Mysql(pool) => commit!(pool, |tx| {
                values!(tx);
            }),
            Pool::Postgres(pool) => commit!(pool, |tx| {
                // Column arrays: four parameters per statement however many rows. The same
                // expressions as the VALUES form, typed for a SELECT list: the empty list
                // literal is cast to the column's array type, which a SELECT does not infer.
                let list = match layout.lists {
                    Lists::Array => "'{}'::text[]",
                    Lists::Text => "''::text",
                };
                for chunk in rows.chunks(per_statement) {
                    let mut sql = head.clone();
                    sql.push_str(&format!(
                        "SELECT t.id, t.platform, 0, t.assignee, t.guild, {list}, {list}, \
                         {created_before}$5{created_after} \
                         FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[]) \
                         AS t(id, platform, assignee, guild)"
                    ));
                    sql.push_str(&layout.upsert_tail(self.next_pg_mtime(now_ms)));
                    let column = |f: fn(&ChannelWrite) -> &str| -> Vec<&str> {
                        chunk.iter().map(|w| f(w)).collect()
                    };
                    // Built from the layout's fixed fragments; every value is bound.
                    sqlx::query(sqlx::AssertSqlSafe(sql))
                        .bind(column(|w| &w.channel))
                        .bind(column(|w| &w.platform))
                        .bind(column(|w| &w.assignee))
                        .bind(column(|w| {
                            if guild_is_channel(&w.platform) {
                                &w.channel
                            } else {
                                ""
                            }
                        }))
                        .bind(now_ms)
                        .persistent(false)
                        .execute(&mut *tx)
                        .await?;
                }
            }),
        }
    }
}

/// The row counts of the statements that write `rows` rows: as many full statements as fit,
/// then the rest in descending powers of two. A statement of exactly the rest was parsed and
/// planned anew for every batch (~3.5 ms of the ~15 ms the 1,850 rows of a bot-offline re-plan
/// took); these few sizes are prepared once per connection and kept.
fn statement_sizes(rows: usize, per_statement: usize) -> impl Iterator<Item = usize> {
    let full = rows / per_statement;
    let rest = rows % per_statement;
    std::iter::repeat_n(per_statement, full).chain(
        (0..usize::BITS)
            .rev()
            .map(|bit| 1usize << bit)
            .filter(move |size| rest & size != 0),
    )
}

/// The rows grouped by platform, each group in primary key order, `(id, platform)` (the
/// statements of a group share its platform). Sorted on integers side by side with the rows:
/// the platform's rank among the batch's few platforms, then the id's first 16 bytes packed
/// into an integer. Comparing strings through their pointers missed the cache on nearly every
/// comparison (with the statement text once per batch, the 367k-row start-up batch's first
/// statement is bound ~150 ms sooner), and comparing even the shared platform strings first
/// cost ~70 ms on that batch. Ids equal in those bytes are compared in full.
fn in_key_order(writes: &[ChannelWrite]) -> Vec<&ChannelWrite> {
    fn prefix(id: &str) -> u128 {
        let mut bytes = [0u8; 16];
        let n = id.len().min(16);
        bytes[..n].copy_from_slice(&id.as_bytes()[..n]);
        u128::from_be_bytes(bytes)
    }
    let mut platforms: Vec<&str> = Vec::new();
    for w in writes {
        if !platforms.contains(&&*w.platform) {
            platforms.push(&w.platform);
        }
    }
    platforms.sort_unstable();
    let rank = |platform: &str| platforms.binary_search(&platform).expect("listed") as u32;
    // Fresh memory nearly as large as the rows themselves: on huge pages (see [`crate::pages`]).
    let mut keyed: Vec<(u32, u128, &ChannelWrite)> = crate::pages::with_capacity(writes.len());
    keyed.extend(
        writes
            .iter()
            .map(|w| (rank(&w.platform), prefix(&w.channel), w)),
    );
    keyed.sort_unstable_by(|(ra, pa, a), (rb, pb, b)| {
        (ra, pa)
            .cmp(&(rb, pb))
            .then_with(|| a.channel.cmp(&b.channel))
    });
    let mut rows = crate::pages::with_capacity(keyed.len());
    rows.extend(keyed.into_iter().map(|(_, _, w)| w));
    rows
}

/// Whether a fenced transaction found a newer term.
enum Fenced {
    No,
    Yes { stored: i64 },
}

/// OneBot groups have `guildId = id`, as Koishi's OneBot adapter sets it; other platforms are
/// left for Koishi to fill in on the next message.
fn guild_is_channel(platform: &str) -> bool {
    platform == "onebot"
}

/// One platform of one rebalance, from the history tables (`GET /v1/history`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, sqlx::FromRow)]
pub struct HistoryRow {
    pub id: i64,
    pub finished_at_ms: i64,
    pub causes: String,
    /// The leader's term that planned it (0 without leadership).
    pub term: i64,
    pub platform: String,
    pub moved_forced: i64,
    pub moved_voluntary: i64,
    pub mean: f64,
    pub stddev: f64,
    pub max_load: i64,
}

impl SqlStore {
    /// The last `limit` rebalances' per-platform records, newest first.
    pub async fn history(&self, limit: u32) -> Result<Vec<HistoryRow>, StoreError> {
        const HEAD: &str = "SELECT r.id, r.finished_at AS finished_at_ms, r.causes, r.term, p.platform, \
             p.moved_forced, p.moved_voluntary, p.mean, p.stddev, p.max_load \
             FROM auto_assign_rebalance r \
             JOIN auto_assign_rebalance_platform p ON p.rebalance_id = r.id \
             ORDER BY r.id DESC LIMIT ";
        on_pool!(self, pool => {
            let mut q = QueryBuilder::new(HEAD);
            q.push_bind(i64::from(limit));
            q.build_query_as::<HistoryRow>().fetch_all(pool).await
        })
        .map_err(store_error)
    }
}

#[cfg(test)]
mod tests {
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
        };
        let write = |assignee: &str| Batch {
            writes: vec![ChannelWrite {
                platform: "onebot".into(),
                channel: "1".into(),
                assignee: assignee.into(),
            }],
            runs: vec![],
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
        assert_eq!(rows, [("onebot".into(), "1".into(), "b".into())]);
        store.commit(&write("c"), Some(&fence(4))).await.unwrap();
        assert_eq!(store.current_term().await.unwrap(), 4);
        store.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
