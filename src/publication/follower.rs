//! Follows a published assignment from Redis, as a bot process would: subscribe to the
//! changes, apply each next version, and re-read the hashes whenever a version is missed, a
//! republish is announced or the subscription had to be renewed. Under leadership it also
//! follows the leader's announcements of voluntary moves, and acknowledges each once this
//! instance's view serves it ([`super::moving`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::Keys;
use super::moving::{self, Announcement};
use crate::redis_conn::{Conn, Redis, not_connected};

/// platform → channel → bot
pub type Assignment = BTreeMap<String, BTreeMap<String, String>>;

/// What is followed: the version, its assignment, and the leader's last announcement.
#[derive(Default)]
struct Followed {
    version: i64,
    assignment: Assignment,
    moving: Announcement,
}

#[derive(Clone)]
pub struct Follower {
    state: Arc<RwLock<Followed>>,
    resyncs: Arc<AtomicU64>,
    /// The version followed, bumped after every change of `state`.
    changed: Arc<tokio::sync::watch::Sender<i64>>,
    /// The announcement this instance's view serves, to acknowledge; `None` while it leads.
    served: Arc<tokio::sync::watch::Sender<Option<String>>>,
}

impl Default for Follower {
    fn default() -> Self {
        Follower {
            state: Arc::default(),
            resyncs: Arc::default(),
            changed: Arc::new(tokio::sync::watch::channel(0).0),
            served: Arc::new(tokio::sync::watch::channel(None).0),
        }
    }
}

/// This instance's entry among the followers: its name, and how long an acknowledgement
/// lasts unrenewed.
#[derive(Clone, Debug)]
pub struct Entry {
    pub instance: String,
    pub ttl: Duration,
}

const READ_ALL: &str = r#"
local out = {redis.call('GET', KEYS[1]) or '0', redis.call('GET', KEYS[2]) or ''}
for _, key in ipairs(redis.call('KEYS', ARGV[1])) do
  if not string.find(key, ':republish', 1, true) then
    table.insert(out, key)
    table.insert(out, redis.call('HGETALL', key))
  end
end
return out
"#;

impl Follower {
    /// Starts following until `shutdown`; with an `entry`, acknowledges the announcements
    /// this instance serves.
    pub fn start(
        redis: Redis,
        keys: Keys,
        entry: Option<Entry>,
        shutdown: CancellationToken,
    ) -> Follower {
        let follower = Follower::default();
        if let Some(entry) = entry {
            let served = follower.served.subscribe();
            let (redis, keys, shutdown) = (redis.clone(), keys.clone(), shutdown.clone());
            tokio::spawn(acknowledge(redis, keys, entry, served, shutdown));
        }
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
        let state = self.state.read();
        (state.version, state.assignment.clone())
    }

    /// Reads the assignment followed so far, and the moves announced with it, without
    /// copying them.
    pub fn read<T>(&self, f: impl FnOnce(&Assignment, &Announcement) -> T) -> T {
        let state = self.state.read();
        f(&state.assignment, &state.moving)
    }

    /// This instance's view serves announcement `token` now (`None`: it leads, and
    /// acknowledges nothing).
    pub fn serve(&self, token: Option<String>) {
        self.served.send_if_modified(|served| {
            let changed = *served != token;
            *served = token;
            changed
        });
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
        pubsub.subscribe(keys.moving()).await?;
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
            if msg.get_channel_name() == keys.moving() {
                match Announcement::parse(&payload) {
                    Some(announced) => {
                        self.state.write().moving = announced;
                        let version = self.state.read().version;
                        self.changed.send_replace(version);
                    }
                    None => self.resync(&mut conn, keys).await?,
                }
                continue;
            }
            let Ok(message) = serde_json::from_str::<Value>(&payload) else {
                self.resync(&mut conn, keys).await?;
                continue;
            };
            let version = message["version"].as_i64().unwrap_or(-1);
            let current = self.state.read().version;
            if version <= current {
                continue; // already included in what was read
            }
            match message.get("changes").and_then(Value::as_object) {
                Some(changes) if version == current + 1 && message.get("resync").is_none() => {
                    let mut state = self.state.write();
                    for (platform, entries) in changes {
                        let p = state.assignment.entry(platform.clone()).or_default();
                        for (channel, bot) in entries.as_object().into_iter().flatten() {
                            match bot.as_str() {
                                Some(bot) => p.insert(channel.clone(), bot.to_owned()),
                                None => p.remove(channel),
                            };
                        }
                    }
                    state.version = version;
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
            .key(keys.moving())
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
        let moving: String = it
            .next()
            .map(redis::from_redis_value::<String>)
            .transpose()?
            .unwrap_or_default();
        // Nothing announced yet (or not by a leader of this build): nothing moving.
        let moving = Announcement::parse(&moving).unwrap_or_default();
        let prefix = format!("{}:assignment:", keys.prefix);
        let mut assignment = Assignment::new();
        while let (Some(key), Some(hash)) = (it.next(), it.next()) {
            let key: String = redis::from_redis_value(key)?;
            let hash: BTreeMap<String, String> = redis::from_redis_value(hash)?;
            let platform = key.strip_prefix(&prefix).unwrap_or(&key).to_owned();
            assignment.insert(platform, hash);
        }
        *self.state.write() = Followed {
            version,
            assignment,
            moving,
        };
        self.resyncs.fetch_add(1, Ordering::Relaxed);
        self.changed.send_replace(version);
        Ok(())
    }
}

/// Keeps this instance's entry among the followers: the announcement its view serves, renewed
/// every third of the entry's life; removed while it leads and when it stops.
async fn acknowledge(
    redis: Redis,
    keys: Keys,
    entry: Entry,
    mut served: tokio::sync::watch::Receiver<Option<String>>,
    shutdown: CancellationToken,
) {
    let ttl_ms = entry.ttl.as_millis() as u64;
    let mut renew = tokio::time::interval(entry.ttl / 3);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut listed = false;
    loop {
        let stopping = tokio::select! {
            _ = shutdown.cancelled() => true,
            result = served.changed() => result.is_err(),
            _ = renew.tick() => false,
        };
        let token = served.borrow_and_update().clone();
        let Some(mut conn) = redis.conn().await else {
            continue;
        };
        let result = match token.filter(|_| !stopping) {
            Some(token) => {
                listed = true;
                moving::acknowledge(&mut conn, &keys, &entry.instance, &token, ttl_ms).await
            }
            None if listed => {
                listed = false;
                moving::depart(&mut conn, &keys, &entry.instance).await
            }
            None => Ok(()),
        };
        if let Err(e) = result {
            tracing::debug!("redis: renewing this follower's entry failed ({e})");
        }
        if stopping {
            return;
        }
    }
}
