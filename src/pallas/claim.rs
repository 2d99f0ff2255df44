//! Message claims: the first bot to claim a message signature handles it.
//!
//! Layers, as in Pallas-Bot (`multi_bot/dedup.py`, `multi_bot/claim.py`):
//! * in-process: `(plugin, key) → owner bot`, bounded at 4,000 keys (over the cap the oldest
//!   2,000 go);
//! * persistent: Redis `SET pallas:msg_claim:{plugin}:{group}:{key} {bot} NX EX 86400`, the
//!   owner being the value; without Redis (or while it is down) a file
//!   `{data}/{plugin}/message_claims/{group}_{key}.claim` created with `O_EXCL`, pruned like
//!   upstream (on a process's first claim, then every 120 s or after 2,500 new files: keep the
//!   newest 500 plus anything younger than a day).
//!
//! Deliberate differences from upstream quirks: the persistent claim always records the
//! claiming bot (upstream's once-claim records owner `0`, so its persistent layer never rejects
//! another process); a Redis outage falls back to the file claim and is retried afterwards
//! (upstream caches Redis availability for the life of the process); plugin names are limited
//! to `[A-Za-z0-9_.:-]` because they become directory names.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use indexmap::IndexMap;

use crate::redis_conn::Redis;
use crate::yaml::{AtLeast, NonEmpty};

const MEMORY_CAP: usize = 4000;
const PRUNE_KEEP: usize = 500;
const PRUNE_INTERVAL: Duration = Duration::from_secs(120);
const PRUNE_FORCE: usize = 2500;
const MAX_AGE: Duration = Duration::from_secs(86400);

/// `claims:`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Settings {
    /// Redis claim keys are `{key_prefix}:{plugin}:{group}:{key}`.
    pub key_prefix: NonEmpty,
    pub ttl: AtLeast<60>,
    /// File claims (no Redis) live under `{data_dir}/{plugin}/message_claims/`.
    pub data_dir: PathBuf,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            key_prefix: NonEmpty("pallas:msg_claim".to_owned()),
            ttl: AtLeast(86_400),
            data_dir: PathBuf::from("data"),
        }
    }
}

impl Settings {
    pub fn resolve(&mut self, base: &Path) {
        self.data_dir = base.join(&self.data_dir);
    }
}

/// Where a claim was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Memory,
    Redis,
    File,
    /// Redis is configured but unavailable: decided by the file claim.
    FileRedisDown,
}

impl Via {
    pub fn describe(self) -> &'static str {
        match self {
            Via::Memory => "in-process claim",
            Via::Redis => "redis claim",
            Via::File => "file claim",
            Via::FileRedisDown => "file claim (redis unavailable)",
        }
    }
}

/// Whether a plugin name may be used (it becomes a key part and a directory name).
pub fn valid_plugin(plugin: &str) -> bool {
    !plugin.is_empty()
        && plugin.len() <= 128
        && plugin != "."
        && plugin != ".."
        && plugin
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
}

pub struct Claims {
    redis: Option<Redis>,
    key_prefix: String,
    ttl: u64,
    data_dir: PathBuf,
    memory: Mutex<IndexMap<(String, u64), i64>>,
    prune: Mutex<HashMap<String, (Option<Instant>, usize)>>,
}

impl Claims {
    /// `key_prefix` is `pallas:msg_claim` upstream; `ttl` in seconds (at least 60).
    pub fn new(redis: Option<Redis>, key_prefix: &str, ttl: u64, data_dir: &Path) -> Claims {
        Claims {
            redis,
            key_prefix: key_prefix.to_owned(),
            ttl: ttl.max(60),
            data_dir: data_dir.to_owned(),
            memory: Mutex::default(),
            prune: Mutex::default(),
        }
    }

    pub fn redis_key(&self, plugin: &str, group: i64, key: u64) -> String {
        format!("{}:{plugin}:{group}:{key}", self.key_prefix)
    }

    /// In-process claim, then the persistent one. Returns (won, where it was decided).
    pub async fn claim(&self, plugin: &str, group: i64, key: u64, bot: i64) -> (bool, Via) {
        {
            let mut memory = self.memory.lock();
            match memory.get(&(plugin.to_owned(), key)) {
                Some(&owner) if owner != bot => return (false, Via::Memory),
                Some(_) => {}
                None => {
                    memory.insert((plugin.to_owned(), key), bot);
                    if memory.len() > MEMORY_CAP {
                        memory.drain(..MEMORY_CAP / 2);
                    }
                }
            }
        }
        self.persistent(plugin, group, key, bot).await
    }

    /// Redis `SET NX EX`, or the file claim.
    pub async fn persistent(&self, plugin: &str, group: i64, key: u64, bot: i64) -> (bool, Via) {
        if let Some(redis) = &self.redis {
            match self.redis_claim(redis, plugin, group, key, bot).await {
                Ok(won) => return (won, Via::Redis),
                Err(e) => tracing::debug!("redis claim failed ({e}); using the file claim"),
            }
            return (
                self.file_claim(plugin, group, key, bot).await,
                Via::FileRedisDown,
            );
        }
        (self.file_claim(plugin, group, key, bot).await, Via::File)
    }

    async fn redis_claim(
        &self,
        redis: &Redis,
        plugin: &str,
        group: i64,
        key: u64,
        bot: i64,
    ) -> redis::RedisResult<bool> {
        let k = self.redis_key(plugin, group, key);
        Ok(
            match redis.set_nx_or_get(&k, &bot.to_string(), self.ttl).await? {
                None => true,
                Some(owner) => owner.trim().parse::<i64>().ok() == Some(bot),
            },
        )
    }

    fn claim_dir(&self, plugin: &str) -> PathBuf {
        self.data_dir.join(plugin).join("message_claims")
    }

    async fn file_claim(&self, plugin: &str, group: i64, key: u64, bot: i64) -> bool {
        let dir = self.claim_dir(plugin);
        let path = dir.join(format!("{group}_{key}.claim"));
        let created = tokio::task::spawn_blocking(move || -> std::io::Result<Result<(), i64>> {
            std::fs::create_dir_all(&dir)?;
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut f) => {
                    f.write_all(bot.to_string().as_bytes())?;
                    Ok(Ok(()))
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let owner = std::fs::read_to_string(&path)?
                        .trim()
                        .parse()
                        .unwrap_or(i64::MIN);
                    Ok(Err(owner))
                }
                Err(e) => Err(e),
            }
        })
        .await;
        match created {
            Ok(Ok(Ok(()))) => {
                self.maybe_prune(plugin).await;
                true
            }
            Ok(Ok(Err(owner))) => owner == bot,
            Ok(Err(e)) => {
                tracing::warn!("file claim in {}: {e}", self.claim_dir(plugin).display());
                false
            }
            Err(_) => false,
        }
    }

    /// Upstream's throttle: the first claim of a process prunes, then every 120 s or after
    /// 2,500 new files.
    async fn maybe_prune(&self, plugin: &str) {
        let due = {
            let mut state = self.prune.lock();
            let entry = state.entry(plugin.to_owned()).or_insert((None, 0));
            entry.1 += 1;
            let due =
                entry.0.is_none_or(|t| t.elapsed() >= PRUNE_INTERVAL) || entry.1 >= PRUNE_FORCE;
            if due {
                *entry = (Some(Instant::now()), 0);
            }
            due
        };
        if due {
            let dir = self.claim_dir(plugin);
            let remaining = tokio::task::spawn_blocking(move || prune(&dir))
                .await
                .unwrap_or(0);
            let mut state = self.prune.lock();
            if let Some(entry) = state.get_mut(plugin) {
                entry.1 = remaining.saturating_sub(PRUNE_KEEP).min(entry.1);
            }
        }
    }
}

/// Keeps the newest 500 claim files and anything younger than a day; returns what remains.
pub fn prune(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut files: Vec<(SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "claim"))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            meta.is_file()
                .then(|| (meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), e.path()))
        })
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    let now = SystemTime::now();
    let mut remaining = files.len();
    // Up to 500 files: every old one goes; beyond: the newest 500 stay whatever their age.
    let keep_newest = if files.len() <= PRUNE_KEEP {
        0
    } else {
        PRUNE_KEEP
    };
    for (mtime, path) in files.iter().skip(keep_newest) {
        let old = now.duration_since(*mtime).unwrap_or_default() > MAX_AGE;
        if old && std::fs::remove_file(path).is_ok() {
            remaining -= 1;
        }
    }
    remaining
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names_cannot_escape_the_data_directory() {
        assert!(valid_plugin("ingress_gate") && valid_plugin("draw:deployment:abc-1"));
        for bad in ["", ".", "..", "../x", "a/b", "a b", "牛"] {
            assert!(!valid_plugin(bad), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn memory_then_file_claims_have_one_owner() {
        let dir = std::env::temp_dir().join(format!("aa-claims-{}", std::process::id()));
        let claims = Claims::new(None, "pallas:msg_claim", 86400, &dir);
        assert_eq!(claims.claim("p", 7, 42, 1001).await, (true, Via::File));
        assert_eq!(claims.claim("p", 7, 42, 1002).await, (false, Via::Memory));
        assert_eq!(
            claims.claim("p", 7, 42, 1001).await,
            (true, Via::File),
            "re-entry by the owner"
        );
        // Another process (a fresh instance) sees the file.
        let other = Claims::new(None, "pallas:msg_claim", 86400, &dir);
        assert_eq!(other.claim("p", 7, 42, 1002).await, (false, Via::File));
        assert_eq!(
            std::fs::read_to_string(dir.join("p/message_claims/7_42.claim")).unwrap(),
            "1001"
        );
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn pruning_keeps_the_newest_500_and_the_young() {
        let dir = std::env::temp_dir().join(format!("aa-prune-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let day_and_more = SystemTime::now() - Duration::from_secs(90_000);
        for i in 0..520 {
            let p = dir.join(format!("1_{i}.claim"));
            std::fs::write(&p, "1").unwrap();
            let f = std::fs::File::options().write(true).open(&p).unwrap();
            // 510 old files, 10 young ones
            let t = if i < 510 {
                day_and_more - Duration::from_secs(i)
            } else {
                SystemTime::now()
            };
            f.set_modified(t).unwrap();
        }
        assert_eq!(prune(&dir), 500);
        assert!(dir.join("1_519.claim").exists(), "young files stay");
        assert!(!dir.join("1_509.claim").exists(), "the oldest go");
        std::fs::remove_dir_all(dir).ok();
    }
}
