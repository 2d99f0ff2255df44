//! Follows a published assignment from Redis, as a bot process would: subscribe to the
//! changes, apply each next version, and re-read the hashes whenever a version is missed, a
//! republish is announced or the subscription had to be renewed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::Keys;
use crate::redis_conn::{Conn, Redis, not_connected};

/// platform → channel → bot
pub type Assignment = BTreeMap<String, BTreeMap<String, String>>;

#[derive(Clone)]
pub struct Follower {
    state: Arc<RwLock<(i64, Assignment)>>,
    resyncs: Arc<AtomicU64>,
    /// The version followed, bumped after every change of `state`.
    changed: Arc<tokio::sync::watch::Sender<i64>>,
}

impl Default for Follower {
    fn default() -> Self {
        Follower {
            state: Arc::default(),
            resyncs: Arc::default(),
            changed: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }
}

const READ_ALL: &str = r#"
local out = {redis.call('GET', KEYS[1]) or '0'}
for _, key in ipairs(redis.call('KEYS', ARGV[1])) do
  if not string.find(key, ':republish', 1, true) then
    table.insert(out, key)
    table.insert(out, redis.call('HGETALL', key))
  end
end
return out
"#;

impl Follower {
    /// Starts following until `shutdown`.
    pub fn start(redis: Redis, keys: Keys, shutdown: CancellationToken) -> Follower {
        let follower = Follower::default();
        let f = follower.clone();
        tokio::spawn(async move {
            while !shutdown.is_cancelled() {
                if let Err(e) = f.follow(&redis, &keys, &shutdown).await {
                    tracing::debug!("follower: {e}; resubscribing");
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        });
        follower
    }

    /// The version and assignment followed so far.
    pub fn snapshot(&self) -> (i64, Assignment) {
        self.state.read().clone()
    }

    /// Reads the version and assignment followed so far without copying them.
    pub fn read<T>(&self, f: impl FnOnce(i64, &Assignment) -> T) -> T {
        let state = self.state.read();
        f(state.0, &state.1)
    }

    /// Changes whenever what is followed changes (the value is the version).
    pub fn changed(&self) -> tokio::sync::watch::Receiver<i64> {
        self.changed.subscribe()
    }

    /// How many times the hashes were re-read.
    pub fn resyncs(&self) -> u64 {
        self.resyncs.load(Ordering::Relaxed)
    }

    async fn follow(
        &self,
        redis: &Redis,
        keys: &Keys,
        shutdown: &CancellationToken,
    ) -> redis::RedisResult<()> {
        let mut pubsub = redis.subscriber().await?;
        pubsub.subscribe(keys.channel()).await?;
        let mut conn = redis.conn().await.ok_or_else(not_connected)?;
        // Subscribed first, then read: nothing published in between can be missed.
        self.resync(&mut conn, keys).await?;
        let mut messages = pubsub.on_message();
        loop {
            let msg = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                msg = messages.next() => msg,
            };
            let Some(msg) = msg else {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "subscription ended",
                )));
            };
            let payload: String = msg.get_payload()?;
            let Ok(message) = serde_json::from_str::<Value>(&payload) else {
                self.resync(&mut conn, keys).await?;
                continue;
            };
            let version = message["version"].as_i64().unwrap_or(-1);
            let current = self.snapshot().0;
            if version <= current {
                continue; // already included in what was read
            }
            match message.get("changes").and_then(Value::as_object) {
                Some(changes) if version == current + 1 && message.get("resync").is_none() => {
                    let mut state = self.state.write();
                    for (platform, entries) in changes {
                        let p = state.1.entry(platform.clone()).or_default();
                        for (channel, bot) in entries.as_object().into_iter().flatten() {
                            match bot.as_str() {
                                Some(bot) => p.insert(channel.clone(), bot.to_owned()),
                                None => p.remove(channel),
                            };
                        }
                    }
                    state.0 = version;
                    drop(state);
                    self.changed.send_replace(version);
                }
                _ => self.resync(&mut conn, keys).await?,
            }
        }
    }

    async fn resync(&self, conn: &mut Conn, keys: &Keys) -> redis::RedisResult<()> {
        let pattern = format!("{}:assignment:*", keys.prefix);
        let values: Vec<redis::Value> = redis::Script::new(READ_ALL)
            .key(keys.version())
            .arg(pattern)
            .invoke_async(conn)
            .await?;
        let mut it = values.into_iter();
        let version: i64 = it
            .next()
            .map(redis::from_redis_value::<String>)
            .transpose()?
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let prefix = format!("{}:assignment:", keys.prefix);
        let mut assignment = Assignment::new();
        while let (Some(key), Some(hash)) = (it.next(), it.next()) {
            let key: String = redis::from_redis_value(key)?;
            let hash: BTreeMap<String, String> = redis::from_redis_value(hash)?;
            let platform = key.strip_prefix(&prefix).unwrap_or(&key).to_owned();
            assignment.insert(platform, hash);
        }
        *self.state.write() = (version, assignment);
        self.resyncs.fetch_add(1, Ordering::Relaxed);
        self.changed.send_replace(version);
        Ok(())
    }
}
