//! An operator's pins and drains, their audit log, and the leader's record, in SQL: read at
//! start and at takeover, written inside a plan's fenced transaction.

use super::*;
use crate::operator::{Drain, Made, Overrides, Pin, PinTarget};
use crate::store::{OverrideChange, OverrideWrite};

/// A pin row: (platform, channel, bot, until_ms, note, at_ms, by).
type PinRow = (
    String,
    String,
    Option<String>,
    Option<i64>,
    Option<String>,
    i64,
    String,
);
/// A drain row: (platform, bot, until_ms, note, at_ms, by).
type DrainRow = (String, String, Option<i64>, Option<String>, i64, String);

/// One record of the operators' audit log (`GET /v1/audit`), newest first.
#[derive(Clone, Debug, PartialEq, serde::Serialize, sqlx::FromRow)]
pub struct AuditRow {
    pub id: i64,
    pub at_ms: i64,
    /// The leader's term that wrote it (0 without leadership).
    pub term: i64,
    pub action: String,
    pub platform: String,
    /// The group (pins) or the bot (drains).
    pub target: String,
    /// The pinned bot.
    pub bot: Option<String>,
    pub until_ms: Option<i64>,
    pub note: Option<String>,
    #[sqlx(rename = "by_credential")]
    pub by: String,
}

/// Who leads, as the term row has it: the term, the holder, its API address.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct LeaderRow {
    pub term: i64,
    pub holder: String,
    pub api: Option<String>,
}

impl SqlStore {
    pub(super) async fn read_overrides(&self) -> Result<Overrides, sqlx::Error> {
        const PINS: &str = "SELECT platform, channel, bot, until_ms, note, at_ms, by_credential FROM auto_assign_pin";
        const DRAINS: &str =
            "SELECT platform, bot, until_ms, note, at_ms, by_credential FROM auto_assign_drain";
        let pins: Vec<PinRow> = on_pool!(self, pool => sqlx::query_as(PINS).fetch_all(pool).await)?;
        let drains: Vec<DrainRow> =
            on_pool!(self, pool => sqlx::query_as(DRAINS).fetch_all(pool).await)?;
        let pins = pins
            .into_iter()
            .map(|(platform, channel, bot, until_ms, note, at_ms, by)| Pin {
                platform,
                channel,
                target: bot.map_or(PinTarget::Hold, PinTarget::Bot),
                made: Made {
                    at_ms,
                    by,
                    note,
                    until_ms,
                },
            })
            .collect();
        let drains = drains
            .into_iter()
            .map(|(platform, bot, until_ms, note, at_ms, by)| Drain {
                platform,
                bot,
                made: Made {
                    at_ms,
                    by,
                    note,
                    until_ms,
                },
            })
            .collect();
        Ok(Overrides::new(pins, drains))
    }

    /// The last `limit` records of the operators' audit log, newest first.
    pub async fn audit(&self, limit: u32) -> Result<Vec<AuditRow>, StoreError> {
        const HEAD: &str = "SELECT id, at_ms, term, action, platform, target, bot, until_ms, \
                            note, by_credential FROM auto_assign_operator_log ORDER BY id DESC LIMIT ";
        on_pool!(self, pool => {
            let mut q = QueryBuilder::new(HEAD);
            q.push_bind(i64::from(limit));
            q.build_query_as::<AuditRow>().fetch_all(pool).await
        })
        .map_err(store_error)
    }

    /// Who leads now, as the term row has it.
    pub async fn leader(&self) -> Result<LeaderRow, StoreError> {
        const SQL: &str = "SELECT term, holder, api FROM auto_assign_leader WHERE id = 1";
        on_pool!(self, pool => sqlx::query_as(SQL).fetch_one(pool).await).map_err(store_error)
    }
}

/// The statements of one operator's change and its audit record, in order, as query
/// builders of any backend (`term` is the writing term, 0 alone).
pub(super) fn override_statements<DB: sqlx::Database>(
    write: &OverrideWrite,
    term: i64,
) -> Vec<QueryBuilder<DB>>
where
    <DB as sqlx::Database>::Arguments: Default,
    for<'t> String: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> Option<String>: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> i64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> Option<i64>: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    let mut out = Vec::new();
    // Replacing is a delete and an insert: the same on every backend, inside the transaction.
    let delete = |table: &str, key: &str, platform: &str, id: &str| {
        let mut q = QueryBuilder::new(format!("DELETE FROM {table} WHERE platform = "));
        q.push_bind(platform.to_owned())
            .push(format!(" AND {key} = "))
            .push_bind(id.to_owned());
        q
    };
    match &write.change {
        OverrideChange::Pin(pin) => {
            out.push(delete(
                "auto_assign_pin",
                "channel",
                &pin.platform,
                &pin.channel,
            ));
            let mut q = QueryBuilder::new(
                "INSERT INTO auto_assign_pin \
                 (platform, channel, bot, until_ms, note, at_ms, by_credential) ",
            );
            q.push_values([pin], |mut row, pin| {
                row.push_bind(pin.platform.clone())
                    .push_bind(pin.channel.clone())
                    .push_bind(pin.target.bot().map(str::to_owned))
                    .push_bind(pin.made.until_ms)
                    .push_bind(pin.made.note.clone())
                    .push_bind(pin.made.at_ms)
                    .push_bind(pin.made.by.clone());
            });
            out.push(q);
        }
        OverrideChange::Unpin { platform, channel } => {
            out.push(delete("auto_assign_pin", "channel", platform, channel));
        }
        OverrideChange::Drain(drain) => {
            out.push(delete(
                "auto_assign_drain",
                "bot",
                &drain.platform,
                &drain.bot,
            ));
            let mut q = QueryBuilder::new(
                "INSERT INTO auto_assign_drain \
                 (platform, bot, until_ms, note, at_ms, by_credential) ",
            );
            q.push_values([drain], |mut row, drain| {
                row.push_bind(drain.platform.clone())
                    .push_bind(drain.bot.clone())
                    .push_bind(drain.made.until_ms)
                    .push_bind(drain.made.note.clone())
                    .push_bind(drain.made.at_ms)
                    .push_bind(drain.made.by.clone());
            });
            out.push(q);
        }
        OverrideChange::Undrain { platform, bot } => {
            out.push(delete("auto_assign_drain", "bot", platform, bot));
        }
    }
    let mut q = QueryBuilder::new(
        "INSERT INTO auto_assign_operator_log \
         (at_ms, term, action, platform, target, bot, until_ms, note, by_credential) ",
    );
    let a = &write.audit;
    q.push_values([a], |mut row, a| {
        row.push_bind(a.at_ms)
            .push_bind(term)
            .push_bind(a.action.clone())
            .push_bind(a.platform.clone())
            .push_bind(a.target.clone())
            .push_bind(a.bot.clone())
            .push_bind(a.until_ms)
            .push_bind(a.note.clone())
            .push_bind(a.by.clone());
    });
    out.push(q);
    out
}
