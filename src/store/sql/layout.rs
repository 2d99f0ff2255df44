//! How Koishi's `channel` table is laid out on each database, read back at connect.

use super::*;

/// `locales` and `permissions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lists {
    /// Comma-joined text, `''` for the empty list (Koishi on SQLite and MySQL).
    Text,
    /// `text[]` (Koishi on PostgreSQL): `'{}'` for the empty list.
    Array,
}

/// `createdAt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CreatedAt {
    /// Integer milliseconds since the epoch (Koishi on SQLite).
    EpochMs,
    /// `timestamptz` (Koishi on PostgreSQL) or `datetime(3)` (Koishi on MySQL).
    Timestamp,
}

/// The column types of `channel` that decide how a row is written, read back from the
/// database rather than assumed: whoever created the table first decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub(super) backend: Backend,
    pub(super) lists: Lists,
    pub(super) created_at: CreatedAt,
    /// The column `_pg_mtime` exists (Koishi's PostgreSQL driver's modification stamp).
    pub(super) pg_mtime: bool,
}

impl Layout {
    /// Koishi's layout on each database, for a table that cannot be read back.
    pub(super) fn koishi(backend: Backend) -> Layout {
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
    pub(super) fn from_columns(backend: Backend, columns: &[(String, String)]) -> Layout {
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

    pub(super) fn quote(&self, name: &str) -> String {
        match self.backend {
            Backend::Mysql => format!("`{name}`"),
            Backend::Sqlite | Backend::Postgres => format!("\"{name}\""),
        }
    }

    pub(super) fn upsert_head(&self) -> String {
        format!(
            "INSERT INTO channel (id, platform, flag, assignee, {}, locales, permissions, {}) ",
            self.quote("guildId"),
            self.quote("createdAt")
        )
    }

    /// Only `assignee` of an existing row changes (and `_pg_mtime`, as Koishi's own upsert
    /// sets it).
    pub(super) fn upsert_tail(&self, pg_mtime: i64) -> String {
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
    pub(super) fn empty_list(&self) -> &'static str {
        match self.lists {
            Lists::Text => "''",
            Lists::Array => "'{}'",
        }
    }

    /// What goes before and after the bound milliseconds of `createdAt`.
    pub(super) fn created_at(&self) -> (&'static str, &'static str) {
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
