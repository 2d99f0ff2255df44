//! Leadership: several instances share one database and one Redis; one of them leads.
//!
//! Only the leader plans and writes. Followers run the same sources (their index stays
//! current), follow the leader's Redis publication (their API serves what the leader
//! decided), and one of them takes over when the leader's lease runs out.
//!
//! # The lease
//!
//! By default a Redis key set with `SET NX PX` and renewed every third of its TTL
//! (`lease: redis`). Time bounds it: a leader that is paused (GC, SIGSTOP, a stalled VM) or
//! cut off loses it when the TTL passes, whatever its TCP connections look like, and it
//! steps down by its own clock before that (it counts the TTL from the moment it *sent* the
//! renewal, less a tenth for clock drift). The instances already share this Redis for the
//! publication. `lease: postgres` holds a session-level advisory lock on a dedicated
//! connection instead, for deployments that want leadership to follow the database; there
//! the server's `idle_session_timeout` ends a paused leader's session, and the lock with it,
//! after the TTL.
//!
//! # Terms and fencing
//!
//! Every new lease starts a term, a number larger than every earlier one: Redis's `INCR`,
//! floored by the term the database has seen, so it never goes back even when Redis lost
//! its data. The term is the fencing token: every write transaction of a leader first
//! raises `auto_assign_leader.term` to its own or finds it higher and writes nothing
//! (`store::Store::commit`), and the Redis publication's script does the same against the
//! term key (`outputs::publish`). A new leader writes its term at once, before it plans, so
//! from then on a leader whose term is over writes nothing, however long it slept.

use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::operator::Overrides;
use crate::redis_conn::{Conn, Redis};
use crate::secret::SecretUrl;
use crate::store::writer::WriteStatus;
use crate::store::{
    AssignmentRow, Batch, Failure, Fence, SqlStore, Store as _, StoreError, WeightWrite,
};

pub mod settings;

use crate::store::fence::{Duty, Role, term_key};
use settings::{LeaseStore, Settings};

/// A change of this instance's turn, for the engine: lead from `stored` (what the database
/// holds, the previous assignment the first plan starts from), fenced by `fence`; or follow.
#[derive(Debug)]
pub enum Turn {
    Lead {
        fence: Fence,
        stored: Vec<AssignmentRow>,
        /// The channel weights the last leader stored.
        weights: Vec<WeightWrite>,
        /// The operators' pins and drains in force.
        overrides: Overrides,
    },
    Follow,
}

/// What an instance does at start: under leadership, a follower until the lease says
/// otherwise; alone, it writes unfenced.
pub fn duty_at_start(leadership: Option<&Settings>) -> Duty {
    match leadership {
        Some(_) => Duty::Follower,
        None => Duty::Alone,
    }
}

/// The leadership task's handle: who leads, and the stop that hands over.
pub struct Leadership {
    pub instance: String,
    pub role: watch::Receiver<Role>,
    release: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Leadership {
    /// Gives the lease up (when leading) and ends the task. Called after the engine and the
    /// writer have stopped, so the next leader starts from everything this one wrote.
    pub async fn release(self) {
        self.release.cancel();
        let _ = self.task.await;
    }
}

/// Everything the lease needs.
pub struct Parts {
    pub settings: Settings,
    /// The publication's key prefix: the lease is `{prefix}:leader`, the term
    /// `{prefix}:leader:term`.
    pub prefix: String,
    pub redis: Option<Redis>,
    pub database: Option<SecretUrl>,
    pub store: SqlStore,
    pub turns: mpsc::Sender<Turn>,
    /// The writer's status: a fenced commit means this term is over.
    pub writes: watch::Receiver<WriteStatus>,
    /// This instance's API address, recorded with each term it leads (followers name it).
    pub api: Option<String>,
}

/// Starts campaigning.
pub fn start(parts: Parts) -> Result<Leadership, String> {
    let instance = parts.settings.instance();
    let lease = match parts.settings.lease {
        LeaseStore::Redis => {
            let redis = parts
                .redis
                .clone()
                .ok_or("leadership.lease: redis needs the redis: section")?;
            Lease::Redis(RedisLease {
                redis,
                key: format!("{}:leader", parts.prefix),
                term_key: term_key(&parts.prefix),
                value: None,
            })
        }
        LeaseStore::Postgres => {
            let url = parts
                .database
                .clone()
                .ok_or("leadership.lease: postgres needs database.url to be PostgreSQL")?;
            Lease::Postgres(PgLease {
                url,
                conn: None,
                probe: None,
                instance: instance.clone(),
            })
        }
    };
    let (role_tx, role) = watch::channel(Role::Follower {
        leader: None,
        term: None,
    });
    let release = CancellationToken::new();
    let campaign = Campaign {
        instance: instance.clone(),
        api: parts.api,
        ttl: parts.settings.lease_ttl.get(),
        lease,
        store: parts.store,
        turns: parts.turns,
        writes: parts.writes,
        role: role_tx,
        release: release.clone(),
    };
    let task = tokio::spawn(campaign.run());
    Ok(Leadership {
        instance,
        role,
        release,
        task,
    })
}

struct Campaign {
    instance: String,
    /// This instance's API address, recorded with its terms.
    api: Option<String>,
    ttl: Duration,
    lease: Lease,
    store: SqlStore,
    turns: mpsc::Sender<Turn>,
    writes: watch::Receiver<WriteStatus>,
    role: watch::Sender<Role>,
    release: CancellationToken,
}

/// Why a term ended.
#[derive(Debug)]
enum Ended {
    Released,
    Lost(String),
}

impl Campaign {
    /// How often a follower looks at the lease: a clean stop hands over within this.
    fn poll(&self) -> Duration {
        (self.ttl / 20).clamp(Duration::from_millis(100), Duration::from_millis(500))
    }

    /// How long the lease itself lasts unrenewed: the TTL less one follower poll, so a
    /// follower that looks right after it ran out leads within the TTL of the leader's end.
    fn lease(&self) -> Duration {
        self.ttl - self.poll()
    }

    /// How long a lease renewed at `sent` is ours by our own clock: the lease less a tenth,
    /// so a leader steps down before anyone else can take over even with some clock drift.
    fn valid_until(&self, sent: Instant) -> Instant {
        sent + self.lease() - self.lease() / 10
    }

    async fn run(mut self) {
        loop {
            tokio::select! {
                _ = self.release.cancelled() => return,
                _ = sleep(self.poll()) => {}
            }
            let sent = Instant::now();
            let Some(term) = self.try_acquire().await else {
                continue;
            };
            let ended = self.lead(term, sent).await;
            match ended {
                Ended::Released => {
                    self.lease.release().await;
                    info!("leadership: term {term} released");
                    return;
                }
                Ended::Lost(why) => {
                    warn!("leadership: term {term} is over ({why}); following");
                    self.lease.release().await;
                    let _ = self.turns.send(Turn::Follow).await;
                    self.role.send_replace(Role::Follower {
                        leader: None,
                        term: None,
                    });
                }
            }
        }
    }

    /// One look at the lease: takes it when free (returns the new term), else records who
    /// holds it.
    async fn try_acquire(&mut self) -> Option<i64> {
        match timeout(self.poll() * 4, self.lease.holder()).await {
            Ok(Ok(Some((term, leader)))) => {
                self.role.send_if_modified(|role| {
                    let new = Role::Follower {
                        leader: Some(leader),
                        term: Some(term),
                    };
                    (*role != new).then(|| *role = new).is_some()
                });
                return None;
            }
            Ok(Ok(None)) => {}
            Ok(Err(_)) | Err(_) => return None,
        }
        // The database's term floors the new one, so terms never go back (Redis may have
        // lost its counter). Unreadable: Redis's counter alone; a term that turns out too
        // low is fenced at its first write and campaigns again with the floor raised.
        let floor = timeout(self.poll() * 4, self.store.current_term())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(0);
        let lease = self.lease();
        match timeout(
            self.poll() * 4,
            self.lease.acquire(&self.instance, lease, floor),
        )
        .await
        {
            Ok(Ok(term)) => term,
            Ok(Err(e)) => {
                warn!("leadership: campaigning failed: {e}");
                None
            }
            Err(_) => None,
        }
    }

    /// Leads until the lease is lost, a write is fenced, or the service stops.
    async fn lead(&mut self, term: i64, sent: Instant) -> Ended {
        let mut valid_until = self.valid_until(sent);
        info!(
            "leadership: {} leads, term {term} (lease {:?})",
            self.instance, self.ttl
        );
        self.role.send_replace(Role::Leader { term });
        let fenced_before = self.writes.borrow().fenced;
        let fence = Fence {
            term,
            holder: self.instance.clone(),
            api: self.api.clone(),
        };
        let renew_every = self.ttl / 3;
        let mut next_renewal = Instant::now() + renew_every;
        // The new leader plans from what the database holds; it waits for the database
        // rather than plan from a guess. Its term is written first: from then on no older
        // term's transaction can commit, so what it reads next is final (a transaction of
        // the old leader still in flight holds the term row, and this waits for its end).
        let mut told_engine = false;
        loop {
            if !told_engine {
                let read = async {
                    self.store.commit(&Batch::default(), Some(&fence)).await?;
                    let stored = self.store.load_assignments().await?;
                    let weights = self.store.load_weights().await?;
                    Ok::<_, StoreError>((stored, weights, self.store.load_overrides().await?))
                };
                match timeout(renew_every, read).await {
                    Ok(Err(e)) if e.kind == Failure::Fenced => {
                        return Ended::Lost(e.message);
                    }
                    Ok(Ok((stored, weights, overrides))) => {
                        let lead = Turn::Lead {
                            fence: fence.clone(),
                            stored,
                            weights,
                            overrides,
                        };
                        if self.turns.send(lead).await.is_err() {
                            return Ended::Released;
                        }
                        told_engine = true;
                    }
                    Ok(Err(e)) => warn!(
                        "leadership: term {term} cannot read the stored assignment yet ({e}); \
                         retrying"
                    ),
                    Err(_) => {}
                }
            }
            let wait = if told_engine {
                next_renewal
            } else {
                next_renewal.min(Instant::now() + Duration::from_millis(500))
            };
            tokio::select! {
                _ = self.release.cancelled() => return Ended::Released,
                _ = tokio::time::sleep_until(wait) => {}
                _ = self.writes.wait_for(|s| s.fenced > fenced_before) => {
                    return Ended::Lost("a newer term has written".to_owned());
                }
            }
            if Instant::now() < next_renewal {
                continue;
            }
            let sent = Instant::now();
            match timeout(renew_every, self.lease.renew(self.lease())).await {
                Ok(Ok(true)) => valid_until = self.valid_until(sent),
                Ok(Ok(false)) => return Ended::Lost("the lease is someone else's".to_owned()),
                Ok(Err(e)) => warn!("leadership: renewing the lease failed: {e}"),
                Err(_) => warn!("leadership: renewing the lease timed out"),
            }
            if Instant::now() >= valid_until {
                return Ended::Lost("the lease ran out unrenewed".to_owned());
            }
            // Retry a failed renewal soon, while the lease still lasts.
            next_renewal = if valid_until - Instant::now() > renew_every {
                sent + renew_every
            } else {
                Instant::now() + self.poll()
            };
        }
    }
}

enum Lease {
    Redis(RedisLease),
    Postgres(PgLease),
}

impl Lease {
    /// The current holder's term and name, `None` when the lease is free.
    async fn holder(&mut self) -> anyhow::Result<Option<(i64, String)>> {
        match self {
            Lease::Redis(l) => l.holder().await,
            Lease::Postgres(l) => l.holder().await,
        }
    }

    /// Takes the lease if free; the new term.
    async fn acquire(
        &mut self,
        instance: &str,
        ttl: Duration,
        floor: i64,
    ) -> anyhow::Result<Option<i64>> {
        match self {
            Lease::Redis(l) => l.acquire(instance, ttl, floor).await,
            Lease::Postgres(l) => l.acquire(ttl, floor).await,
        }
    }

    /// `false`: the lease is no longer ours.
    async fn renew(&mut self, ttl: Duration) -> anyhow::Result<bool> {
        match self {
            Lease::Redis(l) => l.renew(ttl).await,
            Lease::Postgres(l) => l.renew().await,
        }
    }

    async fn release(&mut self) {
        match self {
            Lease::Redis(l) => l.release().await,
            Lease::Postgres(l) => l.release().await,
        }
    }
}

struct RedisLease {
    redis: Redis,
    key: String,
    term_key: String,
    /// `"{term} {instance}"` while we hold it.
    value: Option<String>,
}

/// Takes a free lease and starts a term above both the counter and the floor.
const ACQUIRE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local term = redis.call('INCR', KEYS[2])
local floor = tonumber(ARGV[3])
if term <= floor then
  term = floor + 1
  redis.call('SET', KEYS[2], term)
end
redis.call('SET', KEYS[1], term .. ' ' .. ARGV[1], 'PX', ARGV[2])
return term
"#;

const RENEW: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"#;

const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"#;

impl RedisLease {
    async fn conn(&self) -> anyhow::Result<Conn> {
        self.redis
            .conn()
            .await
            .ok_or_else(|| anyhow::anyhow!("Redis not connected"))
    }

    async fn holder(&mut self) -> anyhow::Result<Option<(i64, String)>> {
        let mut conn = self.conn().await?;
        let value: Option<String> = redis::cmd("GET")
            .arg(&self.key)
            .query_async(&mut conn)
            .await?;
        Ok(value.map(|v| parse_lease(&v)))
    }

    async fn acquire(
        &mut self,
        instance: &str,
        ttl: Duration,
        floor: i64,
    ) -> anyhow::Result<Option<i64>> {
        let mut conn = self.conn().await?;
        let term: Option<i64> = redis::Script::new(ACQUIRE)
            .key(&self.key)
            .key(&self.term_key)
            .arg(instance)
            .arg(ttl.as_millis() as u64)
            .arg(floor)
            .invoke_async(&mut conn)
            .await?;
        self.value = term.map(|t| format!("{t} {instance}"));
        Ok(term)
    }

    async fn renew(&mut self, ttl: Duration) -> anyhow::Result<bool> {
        let Some(value) = &self.value else {
            return Ok(false);
        };
        let mut conn = self.conn().await?;
        let renewed: i64 = redis::Script::new(RENEW)
            .key(&self.key)
            .arg(value)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut conn)
            .await?;
        Ok(renewed == 1)
    }

    async fn release(&mut self) {
        let Some(value) = self.value.take() else {
            return;
        };
        if let Ok(mut conn) = self.conn().await {
            let _: redis::RedisResult<i64> = redis::Script::new(RELEASE)
                .key(&self.key)
                .arg(value)
                .invoke_async(&mut conn)
                .await;
        }
    }
}

/// `"{term} {instance}"` → (term, instance).
fn parse_lease(value: &str) -> (i64, String) {
    match value.split_once(' ') {
        Some((term, instance)) => (term.parse().unwrap_or(0), instance.to_owned()),
        None => (0, value.to_owned()),
    }
}

/// The advisory lock's key: any constant that no other application on the database uses.
const ADVISORY_KEY: i64 = 0x6175_746f_2d61_7373; // "auto-ass"

struct PgLease {
    url: SecretUrl,
    /// The dedicated session holding the lock, while we lead.
    conn: Option<sqlx::PgConnection>,
    /// A follower's session for looking at the lock.
    probe: Option<sqlx::PgConnection>,
    instance: String,
}

impl PgLease {
    async fn connect(&self) -> anyhow::Result<sqlx::PgConnection> {
        use sqlx::Connection as _;
        Ok(sqlx::PgConnection::connect(self.url.expose()).await?)
    }

    /// Who holds the lock, as the term row names it.
    async fn holder(&mut self) -> anyhow::Result<Option<(i64, String)>> {
        let mut conn = match self.probe.take() {
            Some(conn) => conn,
            None => self.connect().await?,
        };
        let held: Option<(i64, String)> = sqlx::query_as(
            "SELECT term, holder FROM auto_assign_leader WHERE id = 1 AND EXISTS ( \
               SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted \
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND ((classid::bigint << 32) | objid::bigint) = $1)",
        )
        .bind(ADVISORY_KEY)
        .fetch_optional(&mut conn)
        .await?;
        // Kept only after a successful query: a broken session is dropped.
        self.probe = Some(conn);
        Ok(held)
    }

    /// Takes the lock on a session of its own, which the server ends after `ttl` idle (a
    /// paused leader stops renewing, i.e. querying); the term is the stored one plus one,
    /// raised at once so every older term is fenced.
    async fn acquire(&mut self, ttl: Duration, floor: i64) -> anyhow::Result<Option<i64>> {
        let mut conn = self.connect().await?;
        sqlx::query("SELECT set_config('idle_session_timeout', $1, false)")
            .bind(ttl.as_millis().max(1).to_string())
            .execute(&mut conn)
            .await?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(ADVISORY_KEY)
            .fetch_one(&mut conn)
            .await?;
        if !locked {
            return Ok(None);
        }
        let term: i64 = sqlx::query_scalar(
            "UPDATE auto_assign_leader SET term = GREATEST(term, $1) + 1, holder = $2 \
             WHERE id = 1 RETURNING term",
        )
        .bind(floor)
        .bind(&self.instance)
        .fetch_one(&mut conn)
        .await?;
        self.conn = Some(conn);
        Ok(Some(term))
    }

    async fn renew(&mut self) -> anyhow::Result<bool> {
        let Some(conn) = &mut self.conn else {
            return Ok(false);
        };
        match sqlx::query_scalar::<_, i32>("SELECT 1")
            .fetch_one(conn)
            .await
        {
            Ok(_) => Ok(true),
            // The session is gone, and the lock with it.
            Err(sqlx::Error::Io(_)) | Err(sqlx::Error::Protocol(_)) => {
                self.conn = None;
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn release(&mut self) {
        use sqlx::Connection as _;
        if let Some(conn) = self.conn.take() {
            let _ = conn.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_values_name_term_and_instance() {
        assert_eq!(parse_lease("7 host-a-12"), (7, "host-a-12".to_owned()));
        assert_eq!(parse_lease("7 name with spaces").1, "name with spaces");
    }
}
