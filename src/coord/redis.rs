//! The Redis connection, shared by every Redis user of the service.
//!
//! Redis is optional and may be down: the handle connects in the background and keeps
//! retrying, and the connection manager reconnects after an outage, so callers simply get no
//! connection (or an error) while Redis is away and fall back or retry; nothing waits for it.
//! Timeouts follow Pallas-Bot's client (1 s to connect, 2 s per command).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::RwLock;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

#[derive(Clone)]
pub struct Redis {
    client: redis::Client,
    conn: Arc<RwLock<Option<ConnectionManager>>>,
}

impl Redis {
    /// Parses the URL and starts connecting in the background.
    pub fn connect(url: &str, shutdown: CancellationToken) -> redis::RedisResult<Redis> {
        let client = redis::Client::open(url)?;
        let redis = Redis {
            client,
            conn: Arc::default(),
        };
        let background = redis.clone();
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(200);
            let mut reported = false;
            loop {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(1)))
                    .set_response_timeout(Some(Duration::from_secs(2)))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_secs(2));
                let attempt = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    attempt = ConnectionManager::new_with_config(background.client.clone(), config) => attempt,
                };
                match attempt {
                    Ok(conn) => {
                        info!("redis: connected");
                        *background.conn.write().await = Some(conn);
                        return;
                    }
                    Err(e) => {
                        if !reported {
                            warn!("redis: cannot connect ({e}); retrying in the background");
                            reported = true;
                        }
                        tokio::select! {
                            _ = shutdown.cancelled() => return,
                            _ = tokio::time::sleep(delay) => {}
                        }
                        delay = (delay * 2).min(Duration::from_secs(5));
                    }
                }
            }
        });
        Ok(redis)
    }

    /// A connection, if Redis has been reached (it may still fail while Redis is down).
    pub async fn conn(&self) -> Option<ConnectionManager> {
        self.conn.read().await.clone()
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

/// The error of a call made while Redis has not been reached.
pub fn not_connected() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, "not connected"))
}
