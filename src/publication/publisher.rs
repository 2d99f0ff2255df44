//! The publisher: the task that writes the engine's changes to Redis (see [`super`] for the
//! keys and the guarantees).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// First wait after a failed publication; doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(200);
const MAX_RETRY: Duration = Duration::from_secs(5);

use super::Keys;
use super::moving::{self, Announcement, Moves, Pending};
use crate::backoff::{Backoff, Jitter};
use crate::redis_conn::{Conn, Redis};
use crate::store::fence::Duty;
use crate::view::View;

/// Above this many changes a full republish is cheaper than one huge script call.
const MAX_INCREMENTAL: usize = 4000;
/// Field/value pairs per HSET of a republish.
const CHUNK: usize = 1000;

/// Changes of one plan: (platform, channel, new bot or `None`).
pub type Changes = Vec<(String, String, Option<String>)>;

enum Job {
    Changes(Changes),
    /// A new duty: a new leader publishes everything at once; a follower nothing.
    Duty(Duty),
    /// The view holds the whole assignment (the stored one, loaded at start): publishing may
    /// begin. Before, the view may be empty or half loaded, and a full republish of it would
    /// replace the published hashes with too little.
    Loaded,
    /// The engine holds new voluntary moves: announce them ([`moving`]).
    Held,
}

/// How often a leader looks whether its followers have acknowledged an announcement.
const POLL: Duration = Duration::from_millis(10);

#[derive(Clone)]
pub struct Publisher {
    tx: mpsc::UnboundedSender<Job>,
    pub status: Arc<PublishStatus>,
}

/// How far the publication is: the version in Redis, and since when changes wait.
#[derive(Default)]
pub struct PublishStatus {
    inner: Mutex<(i64, Option<Instant>)>,
    /// Times the published hashes were found not to hold the view's assignment (and were
    /// published again).
    repaired: std::sync::atomic::AtomicU64,
    /// The voluntary moves announced and waiting, and the followers that have not yet
    /// acknowledged them.
    moving: Mutex<(usize, Vec<String>)>,
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

    /// Times the published hashes differed from the assignment and were published again.
    pub fn repaired(&self) -> u64 {
        self.repaired.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many voluntary moves wait for followers, and which followers they wait for.
    pub fn moving(&self) -> (usize, Vec<String>) {
        self.moving.lock().clone()
    }
}

impl Publisher {
    /// Queues a plan's changes; never waits.
    pub fn publish(&self, changes: Changes) {
        self.status.queued();
        let _ = self.tx.send(Job::Changes(changes));
    }

    /// From now on publishes as `duty` says.
    pub fn set_duty(&self, duty: Duty) {
        let _ = self.tx.send(Job::Duty(duty));
    }

    /// The view holds the whole assignment now: nothing is published before.
    pub fn loaded(&self) {
        let _ = self.tx.send(Job::Loaded);
    }

    /// The engine holds new voluntary moves (or gave some up) in the [`Moves`] it shares with
    /// this task: announce what moves now.
    pub fn held(&self) {
        let _ = self.tx.send(Job::Held);
    }

    /// Starts the publishing task; under leadership it makes the voluntary moves in `moving`
    /// once announced and acknowledged.
    pub fn start(
        redis: Redis,
        view: View,
        keys: Keys,
        duty: Duty,
        moving: Moving,
        shutdown: CancellationToken,
    ) -> Publisher {
        let (tx, rx) = mpsc::unbounded_channel();
        let status = Arc::new(PublishStatus::default());
        let task = Task {
            redis,
            view,
            keys,
            status: status.clone(),
            moving,
        };
        tokio::spawn(run(task, duty, rx, shutdown));
        Publisher { tx, status }
    }
}

/// Under leadership: the voluntary moves the engine holds, and this instance's name (a
/// leader does not wait for itself).
#[derive(Clone, Default)]
pub struct Moving {
    pub moves: Moves,
    pub instance: String,
}

/// What the publishing task works with.
struct Task {
    redis: Redis,
    view: View,
    keys: Keys,
    status: Arc<PublishStatus>,
    moving: Moving,
}

/// The announcement the leader waits on: its token, the moves it announced, and since when
/// every follower has acknowledged it.
struct Round {
    token: String,
    moves: Pending,
    acknowledged: Option<Instant>,
}

/// The fence both scripts start with (KEYS[2] the term key, ARGV[3] our term, 0 = none).
const FENCE: &str = r#"
local term = tonumber(ARGV[3])
if term > 0 then
  local current = tonumber(redis.call('GET', KEYS[2]) or '0')
  if term < current then
    return redis.error_reply('FENCED term ' .. term .. ' is over: term ' .. current .. ' leads')
  end
  if term > current then redis.call('SET', KEYS[2], term) end
end
"#;

const INCREMENTAL: &str = r#"
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[2])
if v < floor then v = floor end
v = v + 1
redis.call('SET', KEYS[1], v)
for i = 3, #KEYS do
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
for i = 3, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i + 1]) == 1 then
    redis.call('RENAME', KEYS[i + 1], KEYS[i])
    redis.call('PERSIST', KEYS[i])
  else
    redis.call('DEL', KEYS[i])
  end
end
redis.call('PUBLISH', ARGV[1], '{"version":' .. v .. ',"resync":true}')
return v
"#;

async fn run(
    task: Task,
    mut duty: Duty,
    mut rx: mpsc::UnboundedReceiver<Job>,
    shutdown: CancellationToken,
) {
    let Task {
        redis,
        view,
        keys,
        status,
        moving,
    } = &task;
    let incremental_script = redis::Script::new(&format!("{FENCE}{INCREMENTAL}"));
    let swap_script = redis::Script::new(&format!("{FENCE}{SWAP}"));
    let announce_script = redis::Script::new(&format!("{FENCE}{}", moving::ANNOUNCE));
    let mut dirty = true;
    let mut loaded = false;
    // A platform whose hash did not hold the assignment at the last check: repaired when it
    // still does not at the next one (a change in flight between the two reads is no fault).
    let mut suspect: Option<String> = None;
    let mut back = false;
    let mut version: i64 = 0;
    let mut retry = Backoff::new(FIRST_RETRY, MAX_RETRY, Jitter::None);
    let mut merged: BTreeMap<(String, String), Option<String>> = BTreeMap::new();
    let mut check = tokio::time::interval(Duration::from_secs(2));
    let mut reachable = redis.reachable();
    // Voluntary moves: the announcement waited on, whether a new one is due (moves held or
    // made since the last), and a counter making each announcement's token unique in a term.
    let mut round: Option<Round> = None;
    let mut announce_due = false;
    let mut announcements: u64 = 0;
    loop {
        let polling = round.is_some() || announce_due;
        let mut take = |job: Job, merged: &mut BTreeMap<(String, String), Option<String>>| {
            match job {
                Job::Changes(changes) => merge(merged, changes),
                Job::Duty(new) => {
                    // A new leader announces what moves (nothing yet): a leader that died
                    // between announcing and making its moves left the followers not
                    // answering those groups.
                    announce_due = matches!(new, Duty::Leader(_));
                    duty = new;
                    // A new leader publishes everything: its view is the truth now.
                    dirty = true;
                    merged.clear();
                    version = 0;
                    round = None;
                }
                Job::Loaded => loaded = true,
                Job::Held => announce_due = true,
            }
        };
        // Woken only to look at the followers: the published version and hashes are checked
        // at the check's pace, not at the poll's.
        let mut poll_only = false;
        tokio::select! {
            _ = shutdown.cancelled() => return,
            job = rx.recv() => match job {
                Some(job) => take(job, &mut merged),
                None => return,
            },
            // Back after an outage: Redis may have lost the hashes; publish everything.
            Ok(()) = reachable.changed() => back = true,
            _ = check.tick() => {}
            _ = tokio::time::sleep(POLL), if polling => poll_only = true,
        }
        while let Ok(job) = rx.try_recv() {
            take(job, &mut merged);
        }
        dirty |= std::mem::take(&mut back);
        if !loaded {
            // Everything is published in full once the view is whole.
            merged.clear();
            continue;
        }
        let Some(term) = duty.writing_term() else {
            merged.clear();
            round = None;
            announce_due = false;
            status.published(version);
            continue;
        };
        let Some(mut conn) = redis.conn().await else {
            dirty = true;
            merged.clear();
            continue;
        };
        // Moves every follower has acknowledged are made once the asks a follower answered
        // before it had the announcement are all in (`ASK_SPREAD`), and published with the rest.
        if let Some(r) = &mut round {
            match moving::lagging(&mut conn, keys, &moving.instance, &r.token).await {
                Ok(lagging) if lagging.is_empty() => {
                    let since = *r.acknowledged.get_or_insert_with(Instant::now);
                    if since.elapsed() >= moving::ASK_SPREAD {
                        make(&moving.moves, &r.moves, view, &mut merged);
                        round = None;
                        announce_due = true;
                    }
                }
                Ok(lagging) => {
                    r.acknowledged = None;
                    *status.moving.lock() = (r.moves.len(), lagging);
                }
                Err(e) => tracing::debug!("redis: reading the followers failed ({e})"),
            }
        }
        let only_polled = poll_only && merged.is_empty();
        if !dirty && !only_polled {
            // Redis restarted empty, or someone else wrote: our version is the truth.
            let stored: redis::RedisResult<Option<i64>> = redis::cmd("GET")
                .arg(keys.version())
                .query_async(&mut conn)
                .await;
            match stored {
                Ok(v) if v == Some(version) => {
                    // The version is ours: do the hashes hold the view's assignment? (An
                    // outside write, or a bug: repaired, and counted for `/healthz`.)
                    let differing = if merged.is_empty() {
                        differing_platform(&mut conn, view, keys).await
                    } else {
                        None
                    };
                    let confirmed = differing.is_some() && differing == suspect;
                    suspect = differing;
                    if confirmed && let Some(platform) = suspect.take() {
                        warn!(
                            "redis: {} does not hold the assignment; republishing everything",
                            keys.assignment(&platform)
                        );
                        status
                            .repaired
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        dirty = true;
                    }
                }
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
            Some(republish(&mut conn, &swap_script, view, keys, version, term).await)
        } else if !merged.is_empty() {
            Some(incremental(&mut conn, &incremental_script, keys, &merged, version, term).await)
        } else {
            None
        };
        match result {
            None => {}
            Some(Ok(v)) => {
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
            Some(Err(e)) if e.code() == Some("FENCED") => {
                warn!("redis: publication refused ({e}); another instance leads");
                duty = Duty::Follower;
                merged.clear();
                round = None;
                continue;
            }
            Some(Err(e)) => {
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
                continue;
            }
        }
        // After the version that made the last round's moves: announce what moves now (a new
        // token for everything still waiting, or nothing, which lets the followers answer the
        // moved channels again).
        if announce_due {
            announcements += 1;
            let pending = {
                let mut held = moving.moves.lock();
                // Nothing waits any more (made, or given up for newer changes): the run that
                // held them is in force.
                held.show_run_if_made(view);
                held.moves.clone()
            };
            let announcement = Announcement {
                token: format!("{term}.{announcements}"),
                channels: moving::marks(&pending),
            };
            let json = serde_json::to_string(&announcement).expect("an announcement is JSON");
            let announced: redis::RedisResult<()> = announce_script
                .key(keys.moving())
                .key(keys.term())
                .arg(keys.moving())
                .arg(json)
                .arg(term)
                .invoke_async(&mut conn)
                .await;
            match announced {
                Ok(()) => {
                    announce_due = false;
                    // The leader answers the announced channels as its followers do.
                    view.set_moving(announcement.channels.iter().flat_map(|(p, channels)| {
                        channels.iter().map(|c| (p.as_str(), c.as_str()))
                    }));
                    *status.moving.lock() = (pending.len(), Vec::new());
                    round = (!pending.is_empty()).then_some(Round {
                        token: announcement.token,
                        moves: pending,
                        acknowledged: None,
                    });
                }
                Err(e) if e.code() == Some("FENCED") => {
                    warn!("redis: announcement refused ({e}); another instance leads");
                    duty = Duty::Follower;
                    round = None;
                }
                Err(e) => tracing::debug!("redis: announcing the moves failed ({e})"),
            }
        }
    }
}

/// Makes the announced `moves` that still wait (a later change of the channel wins): into the
/// view, and into `merged` for the publication.
fn make(
    moves: &Moves,
    announced: &Pending,
    view: &View,
    merged: &mut BTreeMap<(String, String), Option<String>>,
) {
    let mut held = moves.lock();
    let pending = &mut held.moves;
    let mut by_platform: BTreeMap<&str, Vec<(&str, Option<&str>)>> = BTreeMap::new();
    for (key, bot) in announced {
        if pending.get(key) == Some(bot) {
            pending.remove(key);
            by_platform
                .entry(&key.0)
                .or_default()
                .push((&key.1, bot.as_deref()));
            merged.insert(key.clone(), bot.clone());
        }
    }
    for (platform, rows) in by_platform {
        view.apply(platform, rows);
    }
    held.show_run_if_made(view);
}

/// A platform whose published hash does not hold as many channels as the view assigns, if
/// any (one `HLEN` per platform: cheap enough for every check).
async fn differing_platform(conn: &mut Conn, view: &View, keys: &Keys) -> Option<String> {
    for platform in view.platforms() {
        let published: redis::RedisResult<usize> = redis::cmd("HLEN")
            .arg(keys.assignment(&platform))
            .query_async(conn)
            .await;
        match published {
            Ok(n) if n != view.assigned_count(&platform) => return Some(platform),
            _ => {}
        }
    }
    None
}

fn merge(merged: &mut BTreeMap<(String, String), Option<String>>, changes: Changes) {
    for (platform, channel, bot) in changes {
        merged.insert((platform, channel), bot);
    }
}

async fn incremental(
    conn: &mut Conn,
    script: &redis::Script,
    keys: &Keys,
    merged: &BTreeMap<(String, String), Option<String>>,
    floor: i64,
    term: i64,
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
    let mut call = script.prepare_invoke();
    call.key(keys.version())
        .key(keys.term())
        .arg(keys.channel())
        .arg(floor)
        .arg(term);
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
    conn: &mut Conn,
    script: &redis::Script,
    view: &View,
    keys: &Keys,
    floor: i64,
    term: i64,
) -> redis::RedisResult<i64> {
    let mut swap = script.prepare_invoke();
    swap.key(keys.version())
        .key(keys.term())
        .arg(keys.channel())
        .arg(floor)
        .arg(term);
    for platform in view.platforms() {
        let live = keys.assignment(&platform);
        // Per term: a stale leader filling its own temporary hash cannot mix into ours (its
        // swap is fenced, and the leftover expires).
        let temp = format!("{live}:republish:{term}");
        let mut pipe = redis::pipe();
        pipe.del(&temp).ignore();
        for chunk in view.assignment(&platform).chunks(CHUNK) {
            pipe.hset_multiple(&temp, chunk).ignore();
        }
        pipe.pexpire(&temp, 60_000).ignore();
        pipe.query_async::<()>(conn).await?;
        swap.key(live).key(temp);
    }
    swap.invoke_async(conn).await
}
