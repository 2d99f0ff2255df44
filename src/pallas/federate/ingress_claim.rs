//! The federate ingress claim (`claim_federate_group_message_ingress`): one deployment of the
//! pool wins each message, by `SET {P}:ingress:{plugin}:{group}:{key} {deployment} NX EX ttl`.
//!
//! As upstream: a won message is remembered for 8 s (so the deployment's other bots, asking
//! about the same message, need no round trip); concurrent asks for one message share one
//! Redis call; a Redis error or a 3 s timeout loses (fail-closed: better silent than twice);
//! candidates (bots that would handle a hard trigger) register first and only the smallest
//! bot id claims, under `federate_ingress_v2`; outcomes are counted in `{P}:ingress_audit`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use tokio::sync::watch;

use crate::redis_conn::{Redis, not_connected};

pub const PLUGIN: &str = "federate_ingress";
pub const CANDIDATE_PLUGIN: &str = "federate_ingress_v2";
const WIN_CACHE: Duration = Duration::from_secs(8);
const WIN_CACHE_MAX: usize = 20_000;
const CANDIDATE_TTL_SEC: i64 = 2;
const CANDIDATE_WAIT: Duration = Duration::from_millis(150);
const FOLLOWER_WAIT: Duration = Duration::from_millis(500);
const CLAIM_TIMEOUT: Duration = Duration::from_secs(3);
const AUDIT_TTL_SEC: i64 = 300;
const AUDIT_FLUSH_DELAY: Duration = Duration::from_millis(500);

type Key = (String, u64);

/// The claims this deployment won in the last [`WIN_CACHE`], at most [`WIN_CACHE_MAX`] of them:
/// a repeated ask for a won message answers without Redis. Every entry lives equally long, so
/// insertion order is expiry order: a queue drops the expired and, when full, the oldest.
#[derive(Default)]
struct WinCache {
    until: HashMap<Key, Instant>,
    order: VecDeque<(Key, Instant)>,
}

impl WinCache {
    fn contains(&mut self, key: &Key, now: Instant) -> bool {
        self.expire(now);
        self.until.contains_key(key)
    }

    fn insert(&mut self, key: Key, now: Instant) {
        self.expire(now);
        while self.order.len() >= WIN_CACHE_MAX {
            self.pop_oldest();
        }
        let until = now + WIN_CACHE;
        self.until.insert(key.clone(), until);
        self.order.push_back((key, until));
    }

    fn expire(&mut self, now: Instant) {
        while self.order.front().is_some_and(|(_, until)| *until <= now) {
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((key, until)) = self.order.pop_front() {
            // A key won again was queued twice; only its last entry owns the map slot.
            if self.until.get(&key) == Some(&until) {
                self.until.remove(&key);
            }
        }
    }
}

pub struct IngressClaims {
    redis: Redis,
    prefix: String,
    deployment: String,
    ttl: u64,
    wins: Mutex<WinCache>,
    inflight: Mutex<HashMap<Key, watch::Receiver<Option<bool>>>>,
    pub audit: Arc<Audit>,
}

/// What a claim came to, with the words the ingress decision reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Won,
    CachedWin,
    Lost,
    /// Another ask for the same message decided it.
    Shared(bool),
    Timeout,
    RedisError,
    CandidateYield,
    /// A hard trigger without a capability, while a candidate is registered.
    CandidateWaiting,
    RegistrationFailed,
}

impl Outcome {
    pub fn won(self) -> bool {
        matches!(
            self,
            Outcome::Won | Outcome::CachedWin | Outcome::Shared(true)
        )
    }

    pub fn describe(self) -> &'static str {
        match self {
            Outcome::Won => "won the federate claim",
            Outcome::CachedWin => "federate claim already won",
            Outcome::Lost => "another deployment won the federate claim",
            Outcome::Shared(true) => "federate claim won by a concurrent ask",
            Outcome::Shared(false) => "federate claim lost by a concurrent ask",
            Outcome::Timeout => "federate claim timed out",
            Outcome::RedisError => "federate Redis unavailable (fail-closed)",
            Outcome::CandidateYield => "a smaller candidate bot takes it",
            Outcome::CandidateWaiting => "a candidate bot takes it",
            Outcome::RegistrationFailed => "candidate registration failed",
        }
    }
}

/// Removes an in-flight entry when its owner finishes or is dropped mid-way, so a cancelled
/// ask never leaves followers waiting on a dead channel.
struct InflightGuard<'a> {
    claims: &'a IngressClaims,
    key: Key,
    rx: watch::Receiver<Option<bool>>,
}

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        let mut inflight = self.claims.inflight.lock();
        if inflight
            .get(&self.key)
            .is_some_and(|rx| rx.same_channel(&self.rx))
        {
            inflight.remove(&self.key);
        }
    }
}

impl IngressClaims {
    pub fn new(redis: Redis, prefix: &str, deployment: &str, ttl: u64) -> IngressClaims {
        IngressClaims {
            audit: Arc::new(Audit::new(redis.clone(), format!("{prefix}:ingress_audit"))),
            redis,
            prefix: prefix.to_owned(),
            deployment: deployment.to_owned(),
            ttl,
            wins: Mutex::default(),
            inflight: Mutex::default(),
        }
    }

    pub fn claim_key(&self, plugin: &str, group: i64, key: u64) -> String {
        format!("{}:ingress:{plugin}:{group}:{key}", self.prefix)
    }

    pub fn candidate_key(&self, group: i64, key: u64) -> String {
        format!("{}:ingress_candidates:{group}:{key}", self.prefix)
    }

    /// Claims message `key` of `group` for this deployment. `capability` only labels the
    /// audit counts.
    pub async fn claim(&self, plugin: &str, group: i64, key: u64, capability: &str) -> Outcome {
        let cache_key = (plugin.to_owned(), key);
        let joined = {
            // The win cache is read under the in-flight lock: the owner of an ask records its
            // win before it removes its in-flight entry, so an ask that finds neither comes
            // after a loss (or nothing) and never claims a message this deployment won.
            let mut inflight = self.inflight.lock();
            if self.wins.lock().contains(&cache_key, Instant::now()) {
                return Outcome::CachedWin;
            }
            match inflight.get(&cache_key) {
                Some(rx) => Err(rx.clone()),
                None => {
                    let (tx, rx) = watch::channel(None);
                    inflight.insert(cache_key.clone(), rx.clone());
                    Ok((tx, rx))
                }
            }
        };
        match joined {
            Err(mut rx) => {
                let shared = tokio::time::timeout(FOLLOWER_WAIT, rx.wait_for(Option::is_some))
                    .await
                    .map(|r| r.map(|v| v.unwrap_or(false)));
                match shared {
                    Ok(Ok(won)) => Outcome::Shared(won),
                    // The first ask was dropped mid-way (its client went away), perhaps after
                    // its SET landed: ask again; a re-ask by the holder wins.
                    Ok(Err(_)) => {
                        match tokio::time::timeout(
                            CLAIM_TIMEOUT,
                            self.redis_claim(plugin, group, key),
                        )
                        .await
                        {
                            Ok(Ok(won)) => Outcome::Shared(won),
                            Ok(Err(_)) => Outcome::RedisError,
                            Err(_) => Outcome::Timeout,
                        }
                    }
                    Err(_) => {
                        let mut inflight = self.inflight.lock();
                        if inflight
                            .get(&cache_key)
                            .is_some_and(|r| r.same_channel(&rx))
                        {
                            inflight.remove(&cache_key);
                        }
                        self.audit.record(capability, "claim_timeout");
                        Outcome::Timeout
                    }
                }
            }
            Ok((tx, rx)) => {
                let _guard = InflightGuard {
                    claims: self,
                    key: cache_key.clone(),
                    rx,
                };
                let result =
                    tokio::time::timeout(CLAIM_TIMEOUT, self.redis_claim(plugin, group, key)).await;
                let outcome = match result {
                    Err(_) => Outcome::Timeout,
                    Ok(Err(e)) => {
                        tracing::debug!("federate claim: {e}");
                        Outcome::RedisError
                    }
                    Ok(Ok(true)) => Outcome::Won,
                    Ok(Ok(false)) => Outcome::Lost,
                };
                if outcome == Outcome::Won {
                    self.wins.lock().insert(cache_key, Instant::now());
                }
                let _ = tx.send(Some(outcome.won()));
                let audited = match outcome {
                    Outcome::Won => "winner",
                    Outcome::Timeout => "claim_timeout",
                    _ => "lost",
                };
                self.audit.record(capability, audited);
                outcome
            }
        }
    }

    /// `SET NX EX`; when taken, whether the holder is this deployment (a re-ask).
    async fn redis_claim(&self, plugin: &str, group: i64, key: u64) -> redis::RedisResult<bool> {
        let k = self.claim_key(plugin, group, key);
        Ok(
            match self
                .redis
                .set_nx_or_get(&k, &self.deployment, self.ttl)
                .await?
            {
                None => true,
                Some(holder) => holder.to_lowercase() == self.deployment,
            },
        )
    }

    /// The candidate path: register `"{capability}:{bot}"`, wait 150 ms, and go on only as the
    /// smallest registered bot. `Ok(())`: claim under [`CANDIDATE_PLUGIN`].
    pub async fn candidate(
        &self,
        capability: &str,
        bot: i64,
        group: i64,
        key: u64,
    ) -> Result<(), Outcome> {
        self.audit.record(capability, "eligible");
        let set = self.candidate_key(group, key);
        let registered = async {
            if capability.trim().is_empty() {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "empty capability",
                )));
            }
            let mut conn = self.redis.conn().await.ok_or_else(not_connected)?;
            redis::pipe()
                .sadd(&set, format!("{capability}:{bot}"))
                .ignore()
                .expire(&set, CANDIDATE_TTL_SEC)
                .ignore()
                .query_async::<()>(&mut conn)
                .await
        }
        .await;
        if let Err(e) = registered {
            tracing::debug!("federate candidate: {e}");
            self.audit
                .record(capability, "candidate_registration_failed");
            return Err(Outcome::RegistrationFailed);
        }
        self.audit.record(capability, "candidate_registered");
        tokio::time::sleep(CANDIDATE_WAIT).await;
        let smallest = self.candidates(&set).await.into_iter().min();
        if smallest.is_some_and(|min| min != bot) {
            self.audit.record(capability, "candidate_yield");
            return Err(Outcome::CandidateYield);
        }
        Ok(())
    }

    /// A hard trigger without a capability yields at once to any registered candidate.
    pub async fn yields_to_candidates(&self, group: i64, key: u64) -> bool {
        let set = self.candidate_key(group, key);
        if self.candidates(&set).await.is_empty() {
            return false;
        }
        self.audit.record("none", "candidate_yield");
        true
    }

    async fn candidates(&self, set: &str) -> Vec<i64> {
        let Some(mut conn) = self.redis.conn().await else {
            return Vec::new();
        };
        let members: Vec<String> = redis::cmd("SMEMBERS")
            .arg(set)
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        members
            .iter()
            .filter_map(|m| m.split_once(':'))
            .filter(|(_, id)| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
            .filter_map(|(_, id)| id.parse().ok())
            .collect()
    }
}

/// `{P}:ingress_audit`: `"{capability}:{outcome}"` counts, batched for 0.5 s.
pub struct Audit {
    redis: Redis,
    key: String,
    pending: Mutex<BTreeMap<String, i64>>,
    totals: Mutex<BTreeMap<String, i64>>,
    flush_scheduled: AtomicBool,
}

impl Audit {
    fn new(redis: Redis, key: String) -> Audit {
        Audit {
            redis,
            key,
            pending: Mutex::default(),
            totals: Mutex::default(),
            flush_scheduled: AtomicBool::new(false),
        }
    }

    pub fn record(self: &Arc<Self>, capability: &str, outcome: &str) {
        let outcome = outcome.trim();
        if outcome.is_empty() {
            return;
        }
        let capability = match capability.trim() {
            "" => "none",
            c => c,
        };
        let field = format!("{capability}:{outcome}");
        *self.totals.lock().entry(field.clone()).or_default() += 1;
        *self.pending.lock().entry(field).or_default() += 1;
        if !self.flush_scheduled.swap(true, Ordering::AcqRel) {
            let audit = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(AUDIT_FLUSH_DELAY).await;
                audit.flush_scheduled.store(false, Ordering::Release);
                audit.flush().await;
            });
        }
    }

    async fn flush(&self) {
        let batch = std::mem::take(&mut *self.pending.lock());
        if batch.is_empty() {
            return;
        }
        let written = match self.redis.conn().await {
            None => Err(not_connected()),
            Some(mut conn) => {
                let mut pipe = redis::pipe();
                pipe.atomic();
                for (field, n) in &batch {
                    pipe.hincr(&self.key, field, *n).ignore();
                }
                pipe.expire(&self.key, AUDIT_TTL_SEC).ignore();
                pipe.query_async::<()>(&mut conn).await
            }
        };
        if written.is_err() {
            let mut pending = self.pending.lock();
            for (field, n) in batch {
                *pending.entry(field).or_default() += n;
            }
        }
    }

    /// Every count since start, `federate_ingress_`-prefixed as upstream's summary.
    pub fn totals(&self) -> BTreeMap<String, i64> {
        self.totals
            .lock()
            .iter()
            .map(|(k, v)| (format!("federate_ingress_{k}"), *v))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u64) -> Key {
        ("repeater".to_owned(), n)
    }

    #[test]
    fn wins_expire_and_the_cache_stays_bounded() {
        let t0 = Instant::now();
        let mut cache = WinCache::default();
        cache.insert(key(1), t0);
        assert!(cache.contains(&key(1), t0 + WIN_CACHE / 2));
        assert!(!cache.contains(&key(1), t0 + WIN_CACHE));
        assert!(cache.until.is_empty() && cache.order.is_empty());

        for n in 0..WIN_CACHE_MAX as u64 + 10 {
            cache.insert(key(n), t0);
        }
        assert_eq!(cache.order.len(), WIN_CACHE_MAX);
        assert_eq!(cache.until.len(), WIN_CACHE_MAX);
        // The oldest went first; the newest are still answered.
        assert!(!cache.contains(&key(9), t0));
        assert!(cache.contains(&key(10), t0));
        assert!(cache.contains(&key(WIN_CACHE_MAX as u64 + 9), t0));
    }

    #[test]
    fn a_key_won_again_lives_from_its_last_win() {
        let t0 = Instant::now();
        let mut cache = WinCache::default();
        cache.insert(key(1), t0);
        cache.insert(key(1), t0 + WIN_CACHE / 2);
        assert!(cache.contains(&key(1), t0 + WIN_CACHE));
        assert!(!cache.contains(&key(1), t0 + WIN_CACHE * 3 / 2));
    }
}
