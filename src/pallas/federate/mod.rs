//! The federate layer: one answer per group across the deployments of a Pallas-Bot pool.
//!
//! Every deployment publishes a heartbeat (`{P}:peer_bots:{deployment}`, [`peers`]) and reads
//! everyone else's; from the same heartbeats every deployment computes the same group owner
//! ([`ring`]), and a `SET NX` claim ([`claim`]) lets exactly one deployment take each message.
//! The groups a deployment sees messages from are its present groups ([`present`]). The pool
//! and its key prefix are resolved as upstream ([`settings`]).
//!
//! [`Federate`] ties them together: a background task heartbeats and refreshes the roster,
//! the ingress decision asks [`Federate::owner`] and [`Federate::claims`].

pub mod ingress_claim;
pub(crate) mod peers;
pub(crate) mod present;
pub mod ring;
pub(crate) mod settings;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use parking_lot::RwLock;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use self::ingress_claim::IngressClaims;
use self::peers::{LocalRecord, Peer};
use self::present::PresentGroups;
use self::ring::{AdminOwner, Local, Owner, PeerCommand, PeerView};
use self::settings::Pool;
use self::settings::Settings as FederateConfig;
use crate::clock::Clock;
use crate::presence::Presence;
use crate::redis_conn::Redis;
use crate::view::{Route, View};

/// Why the pool could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RosterError {
    #[error("Redis not connected")]
    NotConnected,
    #[error("{0}")]
    Redis(#[from] redis::RedisError),
}

/// The pool as last read from Redis.
#[derive(Default)]
pub struct Roster {
    pub peers: BTreeMap<String, Peer>,
    /// What the owner computation reads, per peer.
    pub views: BTreeMap<String, PeerView>,
    /// Every peer's bots: their messages are never handled here.
    pub peer_bots: HashSet<i64>,
    /// Records that could not be parsed: key → why. They are skipped, not fatal.
    pub malformed: BTreeMap<String, String>,
    pub refreshed_at: Option<Instant>,
    pub last_error: Option<String>,
}

pub struct Federate {
    pub pool: Pool,
    config: FederateConfig,
    redis: Redis,
    local: Local,
    view: View,
    presence: Presence,
    clock: Clock,
    /// Read on every message, replaced on every refresh: readers never wait for a writer.
    roster: ArcSwap<Roster>,
    present: PresentGroups,
    pub claims: IngressClaims,
    /// The fleet source that observes which of this deployment's bots are group admins.
    group_admins: OnceLock<Arc<dyn GroupAdmins>>,
    /// The last heartbeat published: the local side of the assignment rule uses exactly what
    /// peers can read, so both sides decide from the same data.
    published: ArcSwap<LocalRecord>,
    /// The assigned groups published before the last change, and when it changed: peers see a
    /// change only at their next refresh, so for a while this deployment also takes a group
    /// it owned under the previous record (the claim settles it), and never leaves a group
    /// that nobody takes.
    previous_assigned: RwLock<Option<(BTreeSet<i64>, Instant)>>,
    /// The last heartbeat failed (reported once per outage).
    heartbeat_failing: AtomicBool,
}

/// Role lookups (`get_group_member_info`) per heartbeat: the rest are learnt over the next
/// heartbeats, so a cold start never holds a heartbeat back for long.
const ADMIN_PROBES_PER_HEARTBEAT: usize = 64;
/// ... and the time they may take, so the heartbeat is never held back long.
const ADMIN_PROBING_PER_HEARTBEAT: Duration = Duration::from_secs(2);
/// Role lookups for one group-admin command (upstream probes its group's bots).
const ADMIN_PROBES_PER_ASK: usize = 2;
/// How soon a failed heartbeat or roster read is tried again.
const RETRY: Duration = Duration::from_millis(200);

/// Which of this deployment's online bots are admins of a group (Pallas-Bot's local
/// group-admin observation), as a fleet source that talks to the bots can tell.
pub trait GroupAdmins: Send + Sync {
    /// `None` while a role is unknown; at most `probes` lookups (the budget is shared across
    /// calls).
    fn group_admins<'a>(
        &'a self,
        group: &'a str,
        probes: &'a mut usize,
    ) -> Pin<Box<dyn Future<Output = Option<BTreeSet<i64>>> + Send + 'a>>;
}

impl Federate {
    /// Joins `pool`; [`Federate::run`] then keeps the heartbeat and the roster going.
    pub fn new(
        config: &FederateConfig,
        pool: Pool,
        redis: Redis,
        view: View,
        presence: Presence,
        clock: Clock,
    ) -> Arc<Federate> {
        let local = Local {
            mine: pool.deployment.clone(),
            caps: config.command_capabilities.clone(),
            plaintext_to_id: config.command_ids.clone(),
            permission_levels: config
                .command_permission_levels
                .iter()
                .map(|(k, v)| (k.clone(), v.trim().to_lowercase()))
                .collect(),
            rotate_sec: config.owner_rotate_sec,
            prefer_local: config.prefer_local_owner,
        };
        info!(
            "federate: pool {:?} as deployment {} under {}:*",
            pool.id, pool.deployment, pool.prefix
        );
        Arc::new(Federate {
            claims: IngressClaims::new(
                redis.clone(),
                &pool.prefix,
                &pool.deployment,
                pool.claim_ttl,
            ),
            pool,
            config: config.clone(),
            redis,
            local,
            view,
            presence,
            clock,
            roster: ArcSwap::default(),
            present: PresentGroups::new(config.heartbeat_ttl.get()),
            published: ArcSwap::default(),
            previous_assigned: RwLock::default(),
            group_admins: OnceLock::new(),
            heartbeat_failing: AtomicBool::new(false),
        })
    }

    /// Publishes `group_admin_bot_ids` from a fleet source's observations.
    pub fn observe_group_admins(&self, source: Arc<dyn GroupAdmins>) {
        let _ = self.group_admins.set(source);
    }

    /// `federate_group_admin_owner` for a command that needs an admin bot: the deployment and
    /// bot that take it, `None` while anything is unknown (the caller falls back).
    pub async fn group_admin_owner(&self, group: i64, plain: &str) -> Option<AdminOwner> {
        let mut probes = ADMIN_PROBES_PER_ASK;
        let local = match self.group_admins.get() {
            Some(hub) => hub.group_admins(&group.to_string(), &mut probes).await,
            None => None,
        };
        let roster = self.roster();
        let (_, owner) =
            self.local
                .group_admin_owner(&roster.views, group, Some(plain), local.as_ref());
        owner
    }

    fn peer_key(&self, deployment: &str) -> String {
        format!("{}:peer_bots:{deployment}", self.pool.prefix)
    }

    fn present_key(&self) -> String {
        format!(
            "{}:present_groups:{}",
            self.pool.prefix, self.pool.deployment
        )
    }

    /// What the last heartbeat published.
    fn published(&self) -> Arc<LocalRecord> {
        self.published.load_full()
    }

    pub fn roster(&self) -> Arc<Roster> {
        self.roster.load_full()
    }

    /// Whether `user` is a bot of another deployment of the pool.
    pub fn is_peer_bot(&self, user: i64) -> bool {
        self.roster().peer_bots.contains(&user)
    }

    /// Upstream's "peers exist" for claims: some peer has bots.
    pub fn has_peer_bots(&self) -> bool {
        !self.roster().peer_bots.is_empty()
    }

    /// Whether peers declare `plain` as a command, and whether this deployment must yield it.
    pub fn peer_command(&self, group: i64, plain: &str) -> PeerCommand {
        self.local
            .peer_command(&self.roster().views, group, Some(plain))
    }

    /// The group's owning deployment for this text, now.
    pub fn owner(&self, group: i64, plain: &str) -> Owner {
        let now = self.clock.unix();
        let roster = self.roster();
        let mut owner = self.local.owner(&roster.views, group, Some(plain), now);
        if !self.config.respect_assignment {
            return owner;
        }
        let upstream = owner.clone();
        let published = self.published();
        let mine = published.assigned_group_ids.clone().unwrap_or_default();
        self.local
            .respect_assignment(&mut owner, &roster.views, group, &mine, now);
        if owner.should_process {
            return owner;
        }
        let grace = 2 * self.config.refresh_interval.get() + Duration::from_secs(1);
        let previous = self.previous_assigned.read().clone();
        if let Some((before, changed)) = previous
            && changed.elapsed() < grace
        {
            let mut then = upstream;
            self.local
                .respect_assignment(&mut then, &roster.views, group, &before, now);
            if then.should_process {
                return then;
            }
        }
        owner
    }

    /// Notes a message from `group` (present groups); writes the ZSET in the background.
    pub fn touch(self: &Arc<Self>, group: i64) {
        let now = self.clock.unix();
        if self.present.touch(group, now) {
            let federate = self.clone();
            tokio::spawn(async move {
                if let Some(mut conn) = federate.redis.conn().await {
                    let present = &federate.present;
                    let ttl = present.window as u64 + federate.config.heartbeat_ttl.get();
                    let key = federate.present_key();
                    if let Err(e) = present.write_remote(&mut conn, &key, group, now, ttl).await {
                        tracing::debug!("federate: present group {group}: {e}");
                    }
                }
            });
        }
    }

    /// Heartbeats and refreshes the roster every `refreshInterval` and at once when a bot goes
    /// online or offline; on shutdown leaves the pool by deleting the heartbeat.
    pub async fn run(
        self: Arc<Self>,
        mut presence_changed: watch::Receiver<()>,
        shutdown: CancellationToken,
    ) {
        let mut reachable = self.redis.reachable();
        loop {
            reachable.mark_unchanged();
            let published = self.heartbeat().await;
            let read = self.refresh().await;
            // Until both worked (Redis not reached yet, or away), try again soon; and at once
            // when Redis is back (maybe empty): peers must see this deployment, and it them,
            // within a second of Redis being reachable, or both answer the same messages.
            let wait = if published && read {
                self.config.refresh_interval.get()
            } else {
                RETRY
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Ok(()) = presence_changed.changed() => {}
                Ok(()) = reachable.changed() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
        // Leaving cleanly: peers take the groups over at their next refresh, not after the TTL.
        let own = self.peer_key(&self.pool.deployment);
        if let Some(mut conn) = self.redis.conn().await {
            let deleted = tokio::time::timeout(
                Duration::from_secs(2),
                redis::cmd("DEL").arg(&own).query_async::<i64>(&mut conn),
            )
            .await;
            if !matches!(deleted, Ok(Ok(_))) {
                warn!("federate: could not remove {own}; peers drop it after its TTL");
            }
        }
    }

    /// The record this deployment publishes now.
    async fn local_record(&self) -> LocalRecord {
        let platform = &self.config.platform;
        let mut record = LocalRecord {
            deployment_id: self.pool.deployment.clone(),
            deployment_name: self.config.deployment_name.clone(),
            command_capabilities: self.config.command_capabilities.iter().cloned().collect(),
            command_permission_levels: self.local.permission_levels.clone().into_iter().collect(),
            public_bot_ids: self.config.public_bot_ids.iter().copied().collect(),
            ..LocalRecord::default()
        };
        for (bot, online, _) in self.view.bots(platform) {
            let Ok(id) = bot.parse::<i64>() else { continue };
            record.bot_ids.insert(id);
            if online {
                record.online_bot_ids.insert(id);
                if let Some(p) = self.presence.get(platform, &bot) {
                    record.names.insert(id, p.nickname);
                }
            }
        }
        let key = self.present_key();
        let mut conn = self.redis.conn().await;
        record.present_group_ids = self
            .present
            .collect(conn.as_mut().map(|c| (c, key.as_str())), self.clock.unix())
            .await;
        if let Some(hub) = self.group_admins.get() {
            let mut probes = ADMIN_PROBES_PER_HEARTBEAT;
            let started = Instant::now();
            for group in &record.present_group_ids {
                if started.elapsed() > ADMIN_PROBING_PER_HEARTBEAT {
                    probes = 0;
                }
                if let Some(admins) = hub.group_admins(&group.to_string(), &mut probes).await {
                    record.group_admin_bot_ids.insert(*group, admins);
                }
            }
        }
        record.updated_at = self.clock.unix() as i64;
        if self.config.respect_assignment {
            let assigned = record
                .present_group_ids
                .iter()
                .filter(|g| {
                    let mut channel = itoa::Buffer::new();
                    match self.view.route(platform, channel.format(**g)) {
                        Route::Online(bot) | Route::Offline(bot) => bot
                            .parse::<i64>()
                            .is_ok_and(|b| record.online_bot_ids.contains(&b)),
                        // Moving between two bots of this deployment: still its own.
                        Route::Moving(_) => true,
                        Route::Excluded { .. } | Route::Unassigned | Route::Held => false,
                    }
                })
                .copied()
                .collect();
            record.assigned_group_ids = Some(assigned);
        }
        record
    }

    /// `SET {P}:peer_bots:{deployment} <json> EX ttl`; whether it was written.
    async fn heartbeat(&self) -> bool {
        let record = self.local_record().await;
        let Some(mut conn) = self.redis.conn().await else {
            return false;
        };
        let written = redis::cmd("SET")
            .arg(self.peer_key(&self.pool.deployment))
            .arg(record.payload())
            .arg("EX")
            .arg(self.config.heartbeat_ttl.get())
            .query_async::<()>(&mut conn)
            .await;
        match written {
            Ok(()) => {
                // Only this task writes `published`, so reading then storing is not a race.
                let published = self.published.load();
                if published.assigned_group_ids != record.assigned_group_ids {
                    let before = published.assigned_group_ids.clone().unwrap_or_default();
                    *self.previous_assigned.write() = Some((before, Instant::now()));
                }
                self.published.store(Arc::new(record));
                if self.heartbeat_failing.swap(false, Ordering::Relaxed) {
                    info!("federate: heartbeat published again");
                }
                true
            }
            Err(e) => {
                if !self.heartbeat_failing.swap(true, Ordering::Relaxed) {
                    warn!("federate: heartbeat not published: {e}; retrying every {RETRY:?}");
                }
                false
            }
        }
    }

    /// Reads every peer record. A record that does not parse is reported and skipped (upstream
    /// would keep its whole previous roster instead); when Redis stays unreadable longer than
    /// the heartbeat TTL, the peers are forgotten as their keys would have expired. Returns
    /// whether the pool was read.
    async fn refresh(&self) -> bool {
        match self.read_roster().await {
            Ok(mut roster) => {
                let previous = self.roster();
                for (key, why) in &roster.malformed {
                    if previous.malformed.get(key) != Some(why) {
                        warn!("federate: ignoring malformed peer record {key}: {why}");
                    }
                }
                self.warn_incompatible(&roster, &previous);
                roster.refreshed_at = Some(Instant::now());
                self.roster.store(Arc::new(roster));
                true
            }
            Err(e) => {
                let e = e.to_string();
                let previous = self.roster();
                let expired = previous
                    .refreshed_at
                    .is_none_or(|t| t.elapsed().as_secs() > self.config.heartbeat_ttl.get());
                if previous.last_error.as_deref() != Some(e.as_str()) {
                    warn!("federate: cannot read the pool: {e}");
                }
                let next = Roster {
                    peers: if expired {
                        BTreeMap::new()
                    } else {
                        previous.peers.clone()
                    },
                    views: if expired {
                        BTreeMap::new()
                    } else {
                        previous.views.clone()
                    },
                    peer_bots: if expired {
                        HashSet::new()
                    } else {
                        previous.peer_bots.clone()
                    },
                    malformed: previous.malformed.clone(),
                    refreshed_at: previous.refreshed_at,
                    last_error: Some(e),
                };
                self.roster.store(Arc::new(next));
                false
            }
        }
    }

    async fn read_roster(&self) -> Result<Roster, RosterError> {
        let mut conn = self.redis.conn().await.ok_or(RosterError::NotConnected)?;
        let pattern = format!("{}:peer_bots:*", self.pool.prefix);
        let own = self.peer_key(&self.pool.deployment).into_bytes();
        // Bytes, not strings: one key or record that is not UTF-8 is one malformed record,
        // not a failed refresh.
        let mut keys = conn.scan_match(&pattern).await?;
        keys.retain(|k| *k != own);
        let mut roster = Roster::default();
        for chunk in keys.chunks(100) {
            let values: Vec<Option<Vec<u8>>> =
                redis::cmd("MGET").arg(chunk).query_async(&mut conn).await?;
            for (key, value) in chunk.iter().zip(values) {
                let Some(bytes) = value else { continue };
                let key = String::from_utf8_lossy(key).into_owned();
                let parsed = String::from_utf8(bytes)
                    .map_err(|_| peers::Malformed::NotUtf8)
                    .and_then(|text| peers::parse(&key, &text));
                match parsed {
                    Err(why) => {
                        roster.malformed.insert(key, why.to_string());
                    }
                    Ok(peer) if peer.deployment_id == self.pool.deployment => {}
                    Ok(peer) => {
                        roster.peer_bots.extend(&peer.bot_ids);
                        roster
                            .views
                            .insert(peer.deployment_id.clone(), peer.view.clone());
                        roster.peers.insert(peer.deployment_id.clone(), peer);
                    }
                }
            }
        }
        Ok(roster)
    }

    /// Upstream warns about peers of another protocol only when they share a present group.
    fn warn_incompatible(&self, roster: &Roster, previous: &Roster) {
        let published = self.published();
        let mine: BTreeSet<i64> = published.present_group_ids.iter().copied().collect();
        for (dep, peer) in &roster.peers {
            let shared = peer
                .view
                .present_groups
                .as_ref()
                .is_some_and(|g| !g.is_disjoint(&mine));
            let known = previous.peers.get(dep).is_some_and(|p| !p.compatible());
            if !peer.compatible() && shared && !known {
                warn!(
                    "federate: peer {dep} speaks capability protocol {:?} / ingress protocol {:?}, \
                     not {}",
                    peer.capability_protocol,
                    peer.ingress_protocol,
                    peers::PROTOCOL
                );
            }
        }
    }

    /// `GET /v1/federate/peers`.
    pub fn describe(&self) -> Value {
        let roster = self.roster();
        let published = self.published();
        let now = self.clock.unix();
        let peers: Vec<Value> = roster
            .peers
            .values()
            .map(|p| {
                json!({
                    "deployment_id": p.deployment_id,
                    "deployment_name": p.deployment_name,
                    "bot_ids": p.bot_ids,
                    "online_bot_ids": p.online_bot_ids,
                    "public_bot_ids": p.public_bot_ids,
                    "public_online_bot_names": p.public_names,
                    "present_group_ids": p.view.present_groups,
                    "assigned_group_ids": p.view.assigned_groups,
                    "command_capabilities": p.view.capabilities,
                    "command_permission_levels": p.view.permission_levels,
                    "group_admin_bot_ids": p.view.group_admin_bot_ids,
                    "ingress_capabilities": p.ingress_capabilities,
                    "command_capability_protocol": p.capability_protocol,
                    "ingress_protocol": p.ingress_protocol,
                    "compatible": p.compatible(),
                    "updated_at": p.updated_at,
                    "heartbeat_age_sec": p.updated_at.map(|t| (now - t as f64).max(0.0).round()),
                })
            })
            .collect();
        let malformed: Vec<Value> = roster
            .malformed
            .iter()
            .map(|(key, error)| json!({ "key": key, "error": error }))
            .collect();
        json!({
            "pool": self.pool.id,
            "prefix": self.pool.prefix,
            "deployment_id": self.pool.deployment,
            "local": {
                "deployment_name": published.deployment_name,
                "bot_ids": published.bot_ids,
                "online_bot_ids": published.online_bot_ids,
                "present_group_ids": published.present_group_ids,
                "assigned_group_ids": published.assigned_group_ids,
                "command_capabilities": published.command_capabilities,
                "updated_at": published.updated_at,
            },
            "peers": peers,
            "malformed": malformed,
            "last_refresh_age_sec": roster.refreshed_at.map(|t| t.elapsed().as_secs_f64()),
            "last_error": roster.last_error,
            "audit": self.claims.audit.totals(),
        })
    }
}
