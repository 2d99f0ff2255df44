//! Present groups (`touch_federate_present_group`): the groups this deployment has seen
//! messages from lately. Peers leave a deployment out of a group's ring when the group is
//! not in its heartbeat's `present_group_ids`.
//!
//! Kept locally (window: 300 s, or the heartbeat TTL when longer) and in `{P}:present_groups:{deployment}`, a ZSET shared by
//! every process of the deployment, written at most every 30 s per group.

use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};

use crate::redis_conn::Conn;

/// The default window; upstream's is `max(heartbeat TTL, 300)`.
pub const WINDOW_SEC: f64 = 300.0;
pub const PUBLISH_CAP: usize = 2000;
pub const REMOTE_INTERVAL_SEC: f64 = 30.0;
const THROTTLE_MAP_MAX: usize = 4096;

pub struct PresentGroups {
    /// Seconds a message keeps its group present.
    pub window: f64,
    local: Mutex<HashMap<i64, f64>>,
    last_remote: Mutex<HashMap<i64, f64>>,
}

impl PresentGroups {
    /// The window for a heartbeat TTL, as upstream: `max(ttl, 300)`.
    pub fn new(heartbeat_ttl: u64) -> PresentGroups {
        PresentGroups {
            window: WINDOW_SEC.max(heartbeat_ttl as f64),
            local: Mutex::default(),
            last_remote: Mutex::default(),
        }
    }

    /// Records a message from `group` at `now`; `true` when the ZSET should be written (the
    /// attempt is recorded either way, as upstream).
    pub fn touch(&self, group: i64, now: f64) -> bool {
        {
            let mut local = self.local.lock();
            local.insert(group, now);
            // Upstream prunes on every touch; pruning when the map has doubled keeps the same
            // answers (reads filter by time) at O(1) amortised.
            if local.len() > 2 * PUBLISH_CAP {
                local.retain(|_, ts| *ts >= now - self.window);
            }
        }
        let mut last = self.last_remote.lock();
        if last
            .get(&group)
            .is_some_and(|t| now - t < REMOTE_INTERVAL_SEC)
        {
            return false;
        }
        last.insert(group, now);
        if last.len() > THROTTLE_MAP_MAX {
            let horizon = now - self.window.max(REMOTE_INTERVAL_SEC);
            last.retain(|_, t| *t >= horizon);
        }
        true
    }

    /// `ZADD`, trim to the window, `EXPIRE window + heartbeat TTL`, in one transaction.
    pub async fn write_remote(
        &self,
        conn: &mut Conn,
        key: &str,
        group: i64,
        now: f64,
        key_ttl: u64,
    ) -> redis::RedisResult<()> {
        redis::pipe()
            .atomic()
            .zadd(key, group.to_string(), now)
            .ignore()
            .cmd("ZREMRANGEBYSCORE")
            .arg(key)
            .arg("-inf")
            .arg(now - self.window)
            .ignore()
            .expire(key, key_ttl as i64)
            .ignore()
            .query_async(conn)
            .await
    }

    /// `collect_local_present_group_ids()`: local and (when given) remote groups within the
    /// window, the 2,000 most recently seen locally when there are more, ascending.
    pub async fn collect(&self, remote: Option<(&mut Conn, &str)>, now: f64) -> Vec<i64> {
        let cutoff = now - self.window;
        let local: HashMap<i64, f64> = {
            let local = self.local.lock();
            local
                .iter()
                .filter(|(_, ts)| **ts >= cutoff)
                .map(|(g, ts)| (*g, *ts))
                .collect()
        };
        let mut groups: BTreeSet<i64> = local.keys().copied().collect();
        if let Some((conn, key)) = remote {
            let read: redis::RedisResult<(Vec<String>,)> = redis::pipe()
                .cmd("ZREMRANGEBYSCORE")
                .arg(key)
                .arg("-inf")
                .arg(cutoff)
                .ignore()
                .cmd("ZRANGEBYSCORE")
                .arg(key)
                .arg(cutoff)
                .arg("+inf")
                .query_async(conn)
                .await;
            match read {
                Ok((members,)) => {
                    groups.extend(members.iter().filter_map(|m| m.parse::<i64>().ok()))
                }
                Err(e) => tracing::debug!("federate: present groups unreadable: {e}"),
            }
        }
        let mut groups: Vec<i64> = groups.into_iter().collect();
        if groups.len() > PUBLISH_CAP {
            let rank = |g: &i64| (local.get(g).copied().unwrap_or(0.0), *g);
            groups.sort_by(|a, b| rank(b).partial_cmp(&rank(a)).expect("finite times"));
            groups.truncate(PUBLISH_CAP);
            groups.sort_unstable();
        }
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_writes_are_throttled_per_group() {
        let p = PresentGroups::new(180);
        assert!(p.touch(1, 1000.0));
        assert!(!p.touch(1, 1029.9));
        assert!(p.touch(2, 1029.9));
        assert!(p.touch(1, 1030.0));
    }

    #[tokio::test]
    async fn window_and_cap() {
        let p = PresentGroups::new(180);
        p.touch(5, 100.0);
        p.touch(6, 500.0);
        assert_eq!(p.collect(None, 500.0).await, vec![6]);
        assert_eq!(p.collect(None, 400.0).await, vec![5, 6]);
        for g in 0..(PUBLISH_CAP as i64 + 10) {
            p.touch(10_000 + g, 2800.0 + g as f64 * 0.01);
        }
        let kept = p.collect(None, 3000.0).await;
        assert_eq!(kept.len(), PUBLISH_CAP);
        assert_eq!(kept[0], 10_010, "the oldest ten are dropped");
    }
}
