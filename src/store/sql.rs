//! The SQL store: SQLite (embedded default) or PostgreSQL, migrations applied at connect.
//!
//! Channel rows are written the way Koishi expects an external writer to write them: ids as
//! decimal strings, and an UPSERT that only ever changes `assignee` of an existing row, so
//! `flag`, `locales`, `permissions` and `createdAt` set by Koishi or an admin survive. Every
//! rebalance is one transaction: its changed rows and its history rows land together or not
//! at all.

use std::time::Duration;

use anyhow::Context as _;
use sqlx::QueryBuilder;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

use super::{Batch, ChannelWrite, DatabaseUrl, Failure, Store, StoreError};
use crate::clock::Clock;

/// Rows per UPSERT statement (5 parameters each, far below both databases' limits).
const CHUNK: usize = 1000;

#[derive(Clone, Debug)]
pub struct SqlStore {
    pool: Pool,
    /// `createdAt` of new rows.
    clock: Clock,
}

#[derive(Clone, Debug)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs the same code for either pool type.
macro_rules! on_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.pool {
            Pool::Sqlite($pool) => $body,
            Pool::Postgres($pool) => $body,
        }
    };
}

const UPSERT_HEAD: &str = r#"INSERT INTO channel (id, platform, flag, assignee, "guildId", locales, permissions, "createdAt") "#;
const UPSERT_TAIL: &str = " ON CONFLICT (id, platform) DO UPDATE SET assignee = excluded.assignee";

impl SqlStore {
    /// Connects (creating an SQLite file and its directory if needed) and migrates.
    pub async fn connect(db: &DatabaseUrl, clock: Clock) -> anyhow::Result<SqlStore> {
        match db {
            DatabaseUrl::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                }
                // Rollback journal, never WAL: safe even if someone points this at a file
                // another SQLite user reads (see the README's warning).
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Delete)
                    .busy_timeout(Duration::from_secs(5));
                let pool = SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect_with(options)
                    .await
                    .with_context(|| format!("opening SQLite database {}", path.display()))?;
                sqlx::migrate!("./migrations/sqlite")
                    .run(&pool)
                    .await
                    .context("migrating the SQLite database")?;
                Ok(SqlStore {
                    pool: Pool::Sqlite(pool),
                    clock,
                })
            }
            DatabaseUrl::Postgres(url) => {
                let pool = PgPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(Duration::from_secs(3))
                    .connect(url.expose())
                    .await
                    .context("connecting to PostgreSQL")?;
                sqlx::migrate!("./migrations/postgres")
                    .run(&pool)
                    .await
                    .context("migrating the PostgreSQL database")?;
                Ok(SqlStore {
                    pool: Pool::Postgres(pool),
                    clock,
                })
            }
        }
    }
}

impl Store for SqlStore {
    async fn load_assignments(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        const SQL: &str = "SELECT platform, id, assignee FROM channel \
                           WHERE assignee IS NOT NULL AND assignee <> ''";
        on_pool!(self, pool => sqlx::query_as(SQL).fetch_all(pool).await).map_err(store_error)
    }

    async fn commit(&self, batch: &Batch) -> Result<(), StoreError> {
        self.commit_batch(batch).await.map_err(store_error)
    }

    async fn close(&self) {
        on_pool!(self, pool => pool.close().await)
    }
}

/// An SQL error as a store error: outage (retry) or rejection (the table is not as expected).
fn store_error(e: sqlx::Error) -> StoreError {
    let kind = match &e {
        // SQLSTATE classes 22 (data exception) and 42 (syntax error or access rule violation:
        // a missing column, a column of another type) on PostgreSQL; SQLite's "datatype
        // mismatch", "no such column/table" and constraint errors.
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            let message = db.message();
            if code.starts_with("22")
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

impl SqlStore {
    /// Writes a batch in one transaction.
    async fn commit_batch(&self, batch: &Batch) -> Result<(), sqlx::Error> {
        let now_ms = self.clock.unix_ms();
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            for chunk in batch.writes.chunks(CHUNK) {
                let mut q = QueryBuilder::new(UPSERT_HEAD);
                q.push_values(chunk, |mut row, w: &ChannelWrite| {
                    row.push_bind(w.channel.clone())
                        .push_bind(w.platform.clone())
                        .push("0")
                        .push_bind(w.assignee.clone())
                        .push_bind(guild_id(w))
                        .push("''")
                        .push("''")
                        .push_bind(now_ms);
                });
                q.push(UPSERT_TAIL);
                // Not cached: the statement text varies with the chunk size, and a cache of
                // thousand-row statements costs megabytes.
                q.build().persistent(false).execute(&mut *tx).await?;
            }
            for run in &batch.runs {
                let forced: i64 = run.platforms.iter().map(|p| p.forced).sum();
                let voluntary: i64 = run.platforms.iter().map(|p| p.voluntary).sum();
                let channels: i64 = run.platforms.iter().map(|p| p.channels).sum();
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO auto_assign_rebalance \
                     (started_at, finished_at, causes, strategy, channels, moved_forced, moved_voluntary) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                )
                .bind(run.started_at_ms)
                .bind(run.finished_at_ms)
                .bind(run.causes.clone())
                .bind(run.strategy.clone())
                .bind(channels)
                .bind(forced)
                .bind(voluntary)
                .fetch_one(&mut *tx)
                .await?;
                for p in &run.platforms {
                    sqlx::query(
                        "INSERT INTO auto_assign_rebalance_platform \
                         (rebalance_id, platform, channels, unassigned, moved_forced, moved_voluntary, \
                          bots, mean, stddev, min_load, max_load) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                    )
                    .bind(id)
                    .bind(p.platform.clone())
                    .bind(p.channels)
                    .bind(p.unassigned)
                    .bind(p.forced)
                    .bind(p.voluntary)
                    .bind(p.bots)
                    .bind(p.mean)
                    .bind(p.stddev)
                    .bind(p.min)
                    .bind(p.max)
                    .execute(&mut *tx)
                    .await?;
                }
            }
            tx.commit().await
        })
    }
}

/// OneBot groups have `guildId = id`, as Koishi's OneBot adapter sets it; other platforms are
/// left for Koishi to fill in on the next message.
fn guild_id(w: &ChannelWrite) -> String {
    if w.platform == "onebot" {
        w.channel.clone()
    } else {
        String::new()
    }
}
