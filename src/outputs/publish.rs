//! Publishes the assignment to Redis for bot processes to follow.
//!
//! Keys (prefix `P`, default `auto-assign`):
//! * `P:assignment:{platform}`: HASH channel → bot;
//! * `P:version`: the version of what the hashes hold, strictly increasing;
//! * channel `P:changes`: one message per version, `{"version":N,"changes":{platform:
//!   {channel: bot | null}}}`, or `{"version":N,"resync":true}` after a full republish.
//!
//! Every publication is one Lua script: the version bump, the hash writes and the message
//! happen together or not at all. A follower that sees anything but `last + 1` re-reads the
//! hashes (they always match the version). A full republish (at start, after an outage, when
//! Redis lost its data, or for very large change sets) fills temporary hashes, then swaps
//! them in with the version bump atomically.
//!
//! Publishing never blocks planning: the engine hands changes to this task, which merges
//! whatever queued up while it was busy; during an outage it only remembers that a full
//! republish is due, retried with backoff, and the shared [`View`] supplies the state.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::ConnectionManager;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// First wait after a failed publication; doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(200);
const MAX_RETRY: Duration = Duration::from_secs(5);

use super::redis::Redis;
use crate::backoff::{Backoff, Jitter};
use crate::view::View;

/// Above this many changes a full republish is cheaper than one huge script call.
const MAX_INCREMENTAL: usize = 4000;
/// Field/value pairs per HSET of a republish.
const CHUNK: usize = 1000;

/// Key names under a prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    pub prefix: String,
}

impl Keys {
    pub fn version(&self) -> String {
        format!("{}:version", self.prefix)
    }

    pub fn assignment(&self, platform: &str) -> String {
        format!("{}:assignment:{platform}", self.prefix)
    }

    pub fn channel(&self) -> String {
        format!("{}:changes", self.prefix)
    }
}

/// Changes of one plan: (platform, channel, new bot or `None`).
pub type Changes = Vec<(String, String, Option<String>)>;

#[derive(Clone)]
pub struct Publisher {
    tx: mpsc::UnboundedSender<Changes>,
    pub status: Arc<PublishStatus>,
}

/// How far the publication is: the version in Redis, and since when changes wait.
#[derive(Default)]
pub struct PublishStatus {
    inner: Mutex<(i64, Option<Instant>)>,
}

impl PublishStatus {
    /// The version last published, and how long the oldest unpublished change has waited.
    pub fn read(&self) -> (i64, Duration) {
        let (version, waiting) = *self.inner.lock();
        (version, waiting.map_or(Duration::ZERO, |t| t.elapsed()))
    }

    fn queued(&self) {
        self.inner.lock().1.get_or_insert_with(Instant::now);
    }

    fn published(&self, version: i64) {
        *self.inner.lock() = (version, None);
    }
}

impl Publisher {
    /// Queues a plan's changes; never waits.
    pub fn publish(&self, changes: Changes) {
        self.status.queued();
        let _ = self.tx.send(changes);
    }

    /// Starts the publishing task.
    pub fn start(redis: Redis, view: View, keys: Keys, shutdown: CancellationToken) -> Publisher {
        let (tx, rx) = mpsc::unbounded_channel();
        let status = Arc::new(PublishStatus::default());
        tokio::spawn(run(redis, view, keys, rx, status.clone(), shutdown));
        Publisher { tx, status }
    }
}

const INCREMENTAL: &str = r#"
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[2])
if v < floor then v = floor end
v = v + 1
redis.call('SET', KEYS[1], v)
for i = 2, #KEYS do
  local changes = cjson.decode(ARGV[i + 1])
  for channel, bot in pairs(changes) do
    if bot == cjson.null then
      redis.call('HDEL', KEYS[i], channel)
    else
      redis.call('HSET', KEYS[i], channel, bot)
    end
  end
end
redis.call('PUBLISH', ARGV[1], '{"version":' .. v .. ',"changes":{' .. ARGV[#ARGV] .. '}}')
return v
"#;

const SWAP: &str = r#"
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[2])
if v < floor then v = floor end
v = v + 1
redis.call('SET', KEYS[1], v)
for i = 2, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i + 1]) == 1 then
    redis.call('RENAME', KEYS[i + 1], KEYS[i])
  else
    redis.call('DEL', KEYS[i])
  end
end
redis.call('PUBLISH', ARGV[1], '{"version":' .. v .. ',"resync":true}')
return v
"#;

async fn run(
    redis: Redis,
    view: View,
    keys: Keys,
    mut rx: mpsc::UnboundedReceiver<Changes>,
    status: Arc<PublishStatus>,
    shutdown: CancellationToken,
) {
    let mut dirty = true;
    let mut version: i64 = 0;
    let mut retry = Backoff::new(FIRST_RETRY, MAX_RETRY, Jitter::None);
    let mut merged: BTreeMap<(String, String), Option<String>> = BTreeMap::new();
    let mut check = tokio::time::interval(Duration::from_secs(2));
    let mut reachable = redis.reachable();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            job = rx.recv() => match job {
                Some(changes) => merge(&mut merged, changes),
                None => return,
            },
            // Back after an outage: Redis may have lost the hashes; publish everything.
            Ok(()) = reachable.changed() => dirty = true,
            _ = check.tick() => {}
        }
        while let Ok(changes) = rx.try_recv() {
            merge(&mut merged, changes);
        }
        let Some(mut conn) = redis.conn().await else {
            dirty = true;
            merged.clear();
            continue;
        };
        if !dirty {
            // Redis restarted empty, or someone else wrote: our version is the truth.
            let stored: redis::RedisResult<Option<i64>> = redis::cmd("GET")
                .arg(keys.version())
                .query_async(&mut conn)
                .await;
            match stored {
                Ok(v) if v == Some(version) => {}
                Ok(_) => {
                    warn!(
                        "redis: {} is not what was published last; republishing everything",
                        keys.version()
                    );
                    dirty = true;
                }
                Err(_) => dirty = true,
            }
        }
        let result = if dirty || merged.len() > MAX_INCREMENTAL {
            republish(&mut conn, &view, &keys, version).await
        } else if !merged.is_empty() {
            incremental(&mut conn, &keys, &merged, version).await
        } else {
            continue;
        };
        match result {
            Ok(v) => {
                if retry.succeed() > 0 {
                    info!("redis: available again; assignment republished as version {v}");
                }
                version = v;
                if rx.is_empty() {
                    status.published(v);
                }
                dirty = false;
                merged.clear();
            }
            Err(e) => {
                if retry.failures() == 0 {
                    warn!(
                        "redis: publishing the assignment failed ({e}); retrying in the background"
                    );
                }
                dirty = true;
                merged.clear();
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(retry.fail()) => {}
                }
            }
        }
    }
}

fn merge(merged: &mut BTreeMap<(String, String), Option<String>>, changes: Changes) {
    for (platform, channel, bot) in changes {
        merged.insert((platform, channel), bot);
    }
}

async fn incremental(
    conn: &mut ConnectionManager,
    keys: &Keys,
    merged: &BTreeMap<(String, String), Option<String>>,
    floor: i64,
) -> redis::RedisResult<i64> {
    let mut by_platform: BTreeMap<&str, serde_json::Map<String, serde_json::Value>> =
        BTreeMap::new();
    for ((platform, channel), bot) in merged {
        by_platform.entry(platform).or_default().insert(
            channel.clone(),
            bot.clone()
                .map_or(serde_json::Value::Null, serde_json::Value::String),
        );
    }
    let script = redis::Script::new(INCREMENTAL);
    let mut call = script.prepare_invoke();
    call.key(keys.version()).arg(keys.channel()).arg(floor);
    let mut message = Vec::new();
    for (platform, changes) in &by_platform {
        call.key(keys.assignment(platform));
        let json = serde_json::Value::Object(changes.clone()).to_string();
        call.arg(&json);
        message.push(format!(
            "{}:{json}",
            serde_json::Value::String((*platform).to_owned())
        ));
    }
    call.arg(message.join(","));
    call.invoke_async(conn).await
}

async fn republish(
    conn: &mut ConnectionManager,
    view: &View,
    keys: &Keys,
    floor: i64,
) -> redis::RedisResult<i64> {
    let script = redis::Script::new(SWAP);
    let mut swap = script.prepare_invoke();
    swap.key(keys.version()).arg(keys.channel()).arg(floor);
    for platform in view.platforms() {
        let live = keys.assignment(&platform);
        let temp = format!("{live}:republish");
        let mut pipe = redis::pipe();
        pipe.del(&temp).ignore();
        for chunk in view.assignment(&platform).chunks(CHUNK) {
            pipe.hset_multiple(&temp, chunk).ignore();
        }
        pipe.query_async::<()>(conn).await?;
        swap.key(live).key(temp);
    }
    swap.invoke_async(conn).await
}
