//! The Redis connection, shared by every Redis user of the service.
//!
//! Redis is optional and may be down: the handle connects in the background and keeps
//! retrying, and the connection manager reconnects after an outage, so callers simply get no
//! connection (or an error) while Redis is away and fall back or retry. Only the first
//! attempt is waited for (at most [`CONNECT_TIMEOUT`]): a claim made in the service's first
//! moments would otherwise be decided from a file that the other instances and Pallas-Bot
//! peers, all claiming in Redis, never see, and two bots would answer the same message.
//! Timeouts follow Pallas-Bot's client (1 s to connect, 2 s per command).

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::backoff::{Backoff, Jitter};
use crate::secret::SecretUrl;
use crate::yaml::NonEmpty;

/// `redis:`: the service's Redis (publication, claims, gates, presence registry).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    #[serde(deserialize_with = "redis_url")]
    pub url: SecretUrl,
    /// Prefix of the assignment publication keys.
    #[serde(default = "default_prefix")]
    pub prefix: NonEmpty,
}

fn default_prefix() -> NonEmpty {
    NonEmpty("auto-assign".to_owned())
}

/// `redis://host:port[/db]` (or `unix://`), with any password kept out of messages.
pub fn redis_url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SecretUrl, D::Error> {
    crate::yaml::checked_str(d, |url| {
        if url.starts_with("redis://") || url.starts_with("unix://") {
            Ok(SecretUrl::new(url))
        } else {
            Err(format!(
                "expected redis://host:port[/db], got {:?}",
                crate::secret::redact_url(url)
            ))
        }
    })
}

#[derive(Clone)]
pub struct Redis {
    client: redis::Client,
    link: tokio::sync::watch::Receiver<Link>,
    /// Bumped at the first connection and whenever Redis answers again after a failed check:
    /// whoever keeps state in Redis (heartbeats, the presence registry, the publication)
    /// writes it again at once, since a restarted Redis may have come back empty.
    reachable: tokio::sync::watch::Receiver<u64>,
}

/// The connection, or why there is none.
enum Link {
    /// The first attempt to connect is under way.
    FirstAttempt,
    /// Attempts failed so far; more are made in the background.
    Unreached,
    /// Connected once; the manager reconnects by itself after an outage.
    Connected(ConnectionManager),
}

/// How long one attempt to connect may take (Pallas-Bot's client: 1 s).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Attempts to reach Redis at start-up: frequent, because they are cheap (a refused
/// connection fails at once) and everything waits for the first one.
const FIRST_CONNECT_RETRY: Duration = Duration::from_millis(50);
const MAX_CONNECT_RETRY: Duration = Duration::from_millis(250);
/// How often a connected Redis is checked (a PING), so an outage and its end are noticed
/// within this time rather than at the next write of some periodic task.
const CHECK_EVERY: Duration = Duration::from_millis(250);

impl Redis {
    /// Parses the URL and starts connecting in the background.
    pub fn connect(url: &str, shutdown: CancellationToken) -> redis::RedisResult<Redis> {
        let client = redis::Client::open(url)?;
        let (reachable_tx, reachable) = tokio::sync::watch::channel(0);
        let (link_tx, link) = tokio::sync::watch::channel(Link::FirstAttempt);
        let redis = Redis {
            client,
            link,
            reachable,
        };
        let client = redis.client.clone();
        tokio::spawn(async move {
            let mut backoff = Backoff::new(FIRST_CONNECT_RETRY, MAX_CONNECT_RETRY, Jitter::None);
            let mut reported = false;
            loop {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(Duration::from_secs(2)))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_secs(2));
                let attempt = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    attempt = ConnectionManager::new_with_config(client.clone(), config) => attempt,
                };
                match attempt {
                    Ok(conn) => {
                        info!("redis: connected");
                        link_tx.send_replace(Link::Connected(conn.clone()));
                        reachable_tx.send_modify(|n| *n += 1);
                        watch(conn, reachable_tx, shutdown).await;
                        return;
                    }
                    Err(e) => {
                        link_tx.send_replace(Link::Unreached);
                        if !reported {
                            warn!("redis: cannot connect ({e}); retrying in the background");
                            reported = true;
                        }
                        tokio::select! {
                            _ = shutdown.cancelled() => return,
                            _ = tokio::time::sleep(backoff.fail()) => {}
                        }
                    }
                }
            }
        });
        Ok(redis)
    }

    /// A connection, if Redis has been reached (it may still fail while Redis is down). While
    /// the first attempt to connect is under way, waits for its end, at most
    /// [`CONNECT_TIMEOUT`]; after it, never waits.
    pub async fn conn(&self) -> Option<ConnectionManager> {
        if matches!(*self.link.borrow(), Link::FirstAttempt) {
            let mut link = self.link.clone();
            // A closed channel (the background task ended at shutdown) ends the wait as well.
            let _ = tokio::time::timeout(
                CONNECT_TIMEOUT,
                link.wait_for(|link| !matches!(link, Link::FirstAttempt)),
            )
            .await;
        }
        self.conn_now()
    }

    /// A connection, if Redis has been reached; never waits (health checks).
    pub fn conn_now(&self) -> Option<ConnectionManager> {
        match &*self.link.borrow() {
            Link::Connected(conn) => Some(conn.clone()),
            Link::FirstAttempt | Link::Unreached => None,
        }
    }

    /// Changes when Redis becomes reachable: at the first connection and after every outage.
    pub fn reachable(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reachable.clone()
    }

    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    /// `SET key value NX EX ttl`, the claim primitive: `Ok(None)` when this call set it, else
    /// `Ok(Some(holder))` (empty when the key vanished in between).
    pub async fn set_nx_or_get(
        &self,
        key: &str,
        value: &str,
        ttl: u64,
    ) -> redis::RedisResult<Option<String>> {
        let mut conn = self.conn().await.ok_or_else(not_connected)?;
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("NX")
            .arg("EX")
            .arg(ttl)
            .query_async(&mut conn)
            .await?;
        if set.is_some() {
            return Ok(None);
        }
        let holder: Option<String> = redis::cmd("GET").arg(key).query_async(&mut conn).await?;
        Ok(Some(holder.unwrap_or_default()))
    }
}

/// PINGs a connected Redis every [`CHECK_EVERY`] until `shutdown`; bumps `reachable` when it
/// answers again after failing. A restart breaks the connection, so it always shows as at
/// least one failed check, however fast the new server is up.
async fn watch(
    mut conn: ConnectionManager,
    reachable: tokio::sync::watch::Sender<u64>,
    shutdown: CancellationToken,
) {
    let mut failing = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
        let ping = tokio::time::timeout(
            Duration::from_secs(1),
            redis::cmd("PING").query_async::<String>(&mut conn),
        )
        .await;
        match ping {
            Ok(Ok(_)) if failing => {
                failing = false;
                info!("redis: reachable again");
                reachable.send_modify(|n| *n += 1);
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) if !failing => {
                failing = true;
                warn!("redis: unreachable ({e})");
            }
            Err(_) if !failing => {
                failing = true;
                warn!("redis: unreachable (no answer to PING within 1 s)");
            }
            _ => {}
        }
    }
}

/// The error of a call made while Redis has not been reached.
pub fn not_connected() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, "not connected"))
}
