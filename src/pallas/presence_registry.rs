//! The Redis presence registry, in Pallas-Bot's layout (`shard/presence.py`):
//! `pallas:presence:bots` HASH, field = QQ, value = compact JSON with the keys, in order,
//! `qq`, `shard_id`, `connection_key`, `adapter`, `connected_at_unix`, `last_seen_at`,
//! `nickname`; `pallas:presence:updated_at` = the last change (wall-clock seconds).
//!
//! Every 30 s (right after a bot connects or disconnects; every second while Redis cannot be
//! written) the online bots of this service are written with a fresh `last_seen_at`, the ones
//! that went away are removed, and every entry not seen for 120 s, whoever wrote it, is
//! pruned, as upstream's readers do.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::presence::Presence;
use crate::redis_conn::Redis;

pub const BOTS_KEY: &str = "pallas:presence:bots";
pub const UPDATED_KEY: &str = "pallas:presence:updated_at";
const STALE: f64 = 120.0;
const PERIOD: Duration = Duration::from_secs(30);
const RETRY: Duration = Duration::from_secs(1);

/// The registry record of one bot.
pub fn record(qq: i64, connected_at: i64, last_seen: f64, nickname: &str) -> String {
    json!({
        "qq": qq,
        "shard_id": 0,
        "connection_key": qq.to_string(),
        "adapter": "OneBot V11",
        "connected_at_unix": connected_at,
        "last_seen_at": last_seen,
        "nickname": nickname.trim(),
    })
    .to_string()
}

/// Keeps the registry in line with [`Presence`] until `shutdown`; `changed` asks for an
/// immediate refresh.
pub async fn run(
    redis: Redis,
    presence: Presence,
    clock: Clock,
    mut changed: tokio::sync::watch::Receiver<()>,
    shutdown: CancellationToken,
) {
    let mut ours: HashSet<String> = HashSet::new();
    let mut reachable = redis.reachable();
    loop {
        reachable.mark_unchanged();
        let written = match redis.conn().await {
            Some(mut conn) => match refresh(&mut conn, &presence, &mut ours, clock.unix()).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::debug!("presence registry: {e}");
                    false
                }
            },
            None => false,
        };
        // Redis not reached yet (start-up) or down: try again soon, not a whole period later.
        let wait = if written { PERIOD } else { RETRY };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            Ok(()) = changed.changed() => {}
            // Back after an outage, perhaps empty: write the registry again at once.
            Ok(()) = reachable.changed() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

async fn refresh(
    conn: &mut crate::redis_conn::Conn,
    presence: &Presence,
    ours: &mut HashSet<String>,
    now: f64,
) -> redis::RedisResult<()> {
    let mut pipe = redis::pipe();
    let mut current = HashSet::new();
    for bot in presence.snapshot() {
        let Ok(qq) = bot.bot.parse::<i64>() else {
            continue;
        };
        if !bot.online {
            continue;
        }
        let connected = bot
            .connected_at
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(now as i64, |d| d.as_secs() as i64);
        pipe.hset(
            BOTS_KEY,
            qq.to_string(),
            record(qq, connected, now, &bot.nickname),
        )
        .ignore();
        current.insert(qq.to_string());
    }
    for gone in ours.difference(&current) {
        pipe.hdel(BOTS_KEY, gone).ignore();
    }
    // Prune what nobody refreshed for 120 s (ours included, should we ever stall).
    let all: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(BOTS_KEY)
        .query_async(conn)
        .await?;
    for (field, raw) in &all {
        if current.contains(field) {
            continue;
        }
        let last = serde_json::from_str::<Value>(raw).ok().and_then(|v| {
            v.get("last_seen_at")
                .and_then(Value::as_f64)
                .filter(|&t| t > 0.0)
                .or_else(|| v.get("connected_at_unix").and_then(Value::as_f64))
        });
        if last.is_none_or(|t| t <= 0.0 || now - t > STALE) {
            pipe.hdel(BOTS_KEY, field).ignore();
        }
    }
    pipe.set(UPDATED_KEY, now.to_string()).ignore();
    pipe.query_async::<()>(conn).await?;
    *ours = current;
    Ok(())
}

/// The registry's records (with Redis), for the API.
pub async fn read(redis: &Redis) -> Option<BTreeMap<String, Value>> {
    let mut conn = redis.conn().await?;
    let all: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(BOTS_KEY)
        .query_async(&mut conn)
        .await
        .ok()?;
    Some(
        all.into_iter()
            .map(|(k, v)| (k, serde_json::from_str(&v).unwrap_or(Value::String(v))))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_have_upstreams_keys_in_order() {
        assert_eq!(
            record(1001, 1786000000, 1786000030.5, " 牛牛 "),
            r#"{"qq":1001,"shard_id":0,"connection_key":"1001","adapter":"OneBot V11","connected_at_unix":1786000000,"last_seen_at":1786000030.5,"nickname":"牛牛"}"#
        );
    }
}
