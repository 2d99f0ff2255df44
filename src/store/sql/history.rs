//! Reading the rebalance history back.

use super::*;

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
    /// `balanceBy: messages`: the plan's certified gap (None otherwise).
    pub gap: Option<f64>,
}

impl SqlStore {
    /// The last `limit` rebalances' per-platform records, newest first.
    pub async fn history(&self, limit: u32) -> Result<Vec<HistoryRow>, StoreError> {
        const HEAD: &str = "SELECT r.id, r.finished_at AS finished_at_ms, r.causes, r.term, p.platform, \
             p.moved_forced, p.moved_voluntary, p.mean, p.stddev, p.max_load, p.gap \
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
