//! Forward WebSocket: auto-assign dials the implementation, and keeps redialing with capped
//! exponential backoff and jitter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{self, protocol::WebSocketConfig};
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use super::conn::Conn;
use super::hub::{Hub, Ticket, jittered};
use super::session;
use super::settings::Forward;
use crate::presence::ConnectionMode;

const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Keeps one forward connection alive until `shutdown`.
/// `first` is punched once the first attempt is over: the bot reported online, or failed.
pub async fn run(hub: Arc<Hub>, target: Forward, first: Arc<Ticket>, shutdown: CancellationToken) {
    let mut backoff = Duration::from_secs(1);
    while !shutdown.is_cancelled() {
        let started = Instant::now();
        match connect(&hub, &target).await {
            Ok((conn, events)) => {
                let mode = ConnectionMode::Forward {
                    url: target.url.clone(),
                };
                let ended = session::run(
                    hub.clone(),
                    conn.clone(),
                    events,
                    mode,
                    None,
                    Some(first.clone()),
                    shutdown.clone(),
                )
                .await;
                if let Some(e) = ended.error {
                    warn!("{}: {e}", conn.label());
                }
                if ended.established || started.elapsed() > MAX_BACKOFF {
                    // It worked: the first redial is immediate (a short drop stays within
                    // the offline grace period), then the backoff grows again.
                    backoff = Duration::ZERO;
                }
            }
            Err(e) => error!("{}: {e}", target.url),
        }
        first.punch();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(jittered(backoff)) => {}
        }
        backoff = (backoff * 2).clamp(Duration::from_secs(1), MAX_BACKOFF);
    }
}

async fn connect(
    hub: &Hub,
    target: &Forward,
) -> Result<(Conn, tokio::sync::mpsc::Receiver<super::protocol::Event>), String> {
    let mut request = target
        .url
        .as_str()
        .into_client_request()
        .map_err(|e| format!("invalid url: {e}"))?;
    if !target.access_token.is_empty() {
        let value = HeaderValue::from_str(&format!("Bearer {}", target.access_token))
            .map_err(|_| "the access token is not a valid header value".to_owned())?;
        request.headers_mut().insert("Authorization", value);
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(hub.settings.max_frame_bytes))
        .max_frame_size(Some(hub.settings.max_frame_bytes));
    let connecting = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
    let (ws, _) = tokio::time::timeout(hub.settings.action_timeout, connecting)
        .await
        .map_err(|_| "connection attempt timed out".to_owned())?
        .map_err(|e| match e {
            tungstenite::Error::Http(r) if matches!(r.status().as_u16(), 401 | 403) => format!(
                "authentication failed (HTTP {}): check the connection's accessToken",
                r.status()
            ),
            e => format!("cannot connect: {e}"),
        })?;
    Ok(Conn::start(ws, target.url.clone()))
}
