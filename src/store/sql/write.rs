//! The write path: one rebalance's rows, weights and history in one fenced transaction, in key
//! order, in statements of bounded size.

use tracing::warn;

use super::*;

impl SqlStore {
    /// Writes a batch in one transaction, fenced by `fence` (see [`Store::commit`]): the
    /// channel rows as multi-row UPSERTs (on PostgreSQL one `INSERT ... SELECT FROM UNNEST` of
    /// column arrays per statement), then the channel weights the same way, then the history
    /// records.
    ///
    /// The fence is the transaction's first statement: it raises the term row to ours unless
    /// it is higher. The row stays locked until the commit, so a newer leader's first write
    /// (which raises the term) waits for this transaction and every later one of ours finds
    /// the higher term. `commits` changes on every write so MySQL, which counts only rows
    /// actually changed, reports the row as affected too.
    pub(super) async fn commit_batch(
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
        let weights = weights_in_key_order(&batch.weights);
        let not_numbers = batch
            .weights
            .iter()
            .filter(|w| !w.weight.is_finite())
            .count();
        if not_numbers > 0 {
            warn!("left out {not_numbers} channel weight(s) that are not finite numbers");
        }
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
        // SQLite and MySQL: `VALUES (...), (...)`, four parameters a row, the full statements
        // first and then powers of two, as the channel rows (a few texts, each prepared once).
        macro_rules! weight_values {
            ($tx:ident) => {
                let mut rest = &weights[..];
                let (mut text, mut text_rows) = (String::new(), 0);
                for size in statement_sizes(weights.len(), weights_per_statement(layout.backend)) {
                    let (chunk, after) = rest.split_at(size);
                    rest = after;
                    if text_rows != size {
                        (text, text_rows) = (weight_upsert(layout.backend, size), size);
                    }
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(text.as_str()));
                    for w in chunk {
                        q = q
                            .bind(w.platform.as_str())
                            .bind(w.channel.as_str())
                            .bind(w.weight)
                            .bind(w.at_ms);
                    }
                    q.execute(&mut *$tx).await?;
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
                        .push(", api = ")
                        .push_bind(fence.api.clone())
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
                // An operator's changes, each with its audit record, after the plan's rows.
                let term = fence.map_or(0, |f| f.term);
                for write in &batch.overrides {
                    for mut q in overrides::override_statements(write, term) {
                        q.build().execute(&mut *$tx).await?;
                    }
                }
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
                    // A run that planned no platform (nothing reported yet) has no rows here:
                    // sqlx refuses to build a VALUES list of none.
                    if !run.platforms.is_empty() {
                        let mut q = QueryBuilder::new(
                            "INSERT INTO auto_assign_rebalance_platform \
                             (rebalance_id, platform, channels, unassigned, moved_forced, moved_voluntary, \
                              bots, mean, stddev, min_load, max_load, gap) ",
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
                                .push_bind(p.max)
                                // MySQL has no infinity (a lower bound of 0), SQLite no NaN: no gap
                                // to record, rather than a transaction that fails on every retry.
                                .push_bind(p.gap.filter(|gap| gap.is_finite()));
                        });
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
                weight_values!(tx);
            }),
            Pool::Mysql(pool) => commit!(pool, |tx| {
                values!(tx);
                weight_values!(tx);
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
                for chunk in weights.chunks(weights_per_statement(Backend::Postgres)) {
                    let text = |f: fn(&WeightWrite) -> &str| -> Vec<&str> {
                        chunk.iter().map(|w| f(w)).collect()
                    };
                    sqlx::query(WEIGHT_UNNEST)
                        .bind(text(|w| &w.platform))
                        .bind(text(|w| &w.channel))
                        .bind(chunk.iter().map(|w| w.weight).collect::<Vec<f64>>())
                        .bind(chunk.iter().map(|w| w.at_ms).collect::<Vec<i64>>())
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
pub(super) fn statement_sizes(rows: usize, per_statement: usize) -> impl Iterator<Item = usize> {
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
pub(super) fn in_key_order(writes: &[ChannelWrite]) -> Vec<&ChannelWrite> {
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

/// A string's first 16 bytes as an integer that sorts as they do (shorter strings padded with
/// zeros: strings equal in these bytes must be compared in full).
fn prefix(id: &str) -> u128 {
    let mut bytes = [0u8; 16];
    let n = id.len().min(16);
    bytes[..n].copy_from_slice(&id.as_bytes()[..n]);
    u128::from_be_bytes(bytes)
}

/// The weights to write, in primary key order `(platform, channel)` (sorted on integers first,
/// as [`in_key_order`] does, for the same reasons), the last of each channel only (PostgreSQL
/// refuses an UPSERT that changes a row twice), and only finite numbers: SQLite stores a NaN
/// as NULL, and MySQL takes neither NaN nor infinities, so one such weight would fail the
/// whole transaction on every retry.
pub(super) fn weights_in_key_order(weights: &[WeightWrite]) -> Vec<&WeightWrite> {
    let mut keyed: Vec<(u128, u128, usize, &WeightWrite)> =
        crate::pages::with_capacity(weights.len());
    keyed.extend(
        weights
            .iter()
            .enumerate()
            .filter(|(_, w)| w.weight.is_finite())
            .map(|(i, w)| (prefix(&w.platform), prefix(&w.channel), i, w)),
    );
    // Of equal keys, the later weight first, which `dedup_by` keeps.
    keyed.sort_unstable_by(|(pa, ca, ia, a), (pb, cb, ib, b)| {
        (pa, ca)
            .cmp(&(pb, cb))
            .then_with(|| (&a.platform, &a.channel).cmp(&(&b.platform, &b.channel)))
            .then_with(|| ib.cmp(ia))
    });
    keyed.dedup_by(|(.., w), (.., kept)| w.platform == kept.platform && w.channel == kept.channel);
    keyed.into_iter().map(|(.., w)| w).collect()
}

/// The SQLite or MySQL UPSERT of `rows` weights: a later weight of a channel replaces the
/// stored one.
fn weight_upsert(backend: Backend, rows: usize) -> String {
    const HEAD: &str =
        "INSERT INTO auto_assign_channel_weight (platform, channel, weight, updated_at) VALUES ";
    const ROW: &str = "(?, ?, ?, ?)";
    let tail = match backend {
        Backend::Mysql => {
            " ON DUPLICATE KEY UPDATE weight = VALUES(weight), updated_at = VALUES(updated_at)"
        }
        Backend::Sqlite | Backend::Postgres => {
            " ON CONFLICT (platform, channel) DO UPDATE \
             SET weight = excluded.weight, updated_at = excluded.updated_at"
        }
    };
    let mut sql = String::with_capacity(HEAD.len() + rows * (ROW.len() + 2) + tail.len());
    sql.push_str(HEAD);
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(ROW);
    }
    sql.push_str(tail);
    sql
}

/// PostgreSQL's weights UPSERT: four column arrays however many rows.
const WEIGHT_UNNEST: &str = "INSERT INTO auto_assign_channel_weight \
     (platform, channel, weight, updated_at) \
     SELECT * FROM UNNEST($1::text[], $2::text[], $3::float8[], $4::int8[]) \
     ON CONFLICT (platform, channel) DO UPDATE \
     SET weight = excluded.weight, updated_at = excluded.updated_at";

/// Whether a fenced transaction found a newer term.
pub(super) enum Fenced {
    No,
    Yes { stored: i64 },
}

/// OneBot groups have `guildId = id`, as Koishi's OneBot adapter sets it; other platforms are
/// left for Koishi to fill in on the next message.
pub(super) fn guild_is_channel(platform: &str) -> bool {
    platform == "onebot"
}
