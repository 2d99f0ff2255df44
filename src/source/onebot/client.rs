//! Forward WebSocket: auto-assign dials the implementation, and keeps redialing with capped
//! exponential backoff and jitter (1 s doubling to 10 s, ±25%), so a bot that comes back is
//! online again within about 13 s. An outage is logged once, with its cause (a refused
//! connection, a wrong token), and its end once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::conn::Conn;
use super::hub::{Hub, Ticket};
use super::session;
use super::settings::Forward;
use crate::backoff::{Backoff, Jitter};
use crate::presence::ConnectionMode;

const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(10);

/// Keeps one forward connection alive until `shutdown`.
/// `first` is punched once the first attempt is over: the bot reported online, or failed.
pub async fn run(hub: Arc<Hub>, target: Forward, first: Arc<Ticket>, shutdown: CancellationToken) {
    let mut backoff = Backoff::new(FIRST_RETRY, MAX_RETRY, Jitter::Quarter);
    let mut outage = Outage::default();
    while !shutdown.is_cancelled() {
        let wait = match connect(&hub, &target).await {
            Ok((conn, events)) => {
                let mode = ConnectionMode::Forward {
                    url: target.url.clone(),
                };
                let start = session::Start {
                    mode,
                    claimed: None,
                    first: Some(first.clone()),
                    after_outage: outage.describe(backoff.failures()),
                };
                let ended =
                    session::run(hub.clone(), conn.clone(), events, start, shutdown.clone()).await;
                if ended.established {
                    outage.over();
                    backoff.succeed();
                    if let Some(e) = ended.error {
                        warn!("{}: {e}", conn.label());
                    }
                    // It worked: the first redial is immediate (a short drop stays within
                    // the offline grace period), then the backoff grows again.
                    Duration::ZERO
                } else {
                    let e = ended
                        .error
                        .map_or_else(|| "connection closed".to_owned(), |e| e.to_string());
                    outage.report(&target.url, &e);
                    backoff.fail()
                }
            }
            Err(e) => {
                outage.report(&target.url, &e);
                backoff.fail()
            }
        };
        first.punch();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// One failure streak of a connection: each distinct cause is logged once, and the end once.
#[derive(Default)]
struct Outage {
    since: Option<Instant>,
    causes: Vec<String>,
}

impl Outage {
    fn report(&mut self, url: &str, cause: &str) {
        self.since.get_or_insert_with(Instant::now);
        if self.causes.iter().any(|c| c == cause) {
            debug!("{url}: {cause} (again)");
            return;
        }
        if self.causes.len() < 8 {
            self.causes.push(cause.to_owned());
        }
        warn!(
            "{url}: {cause}; retrying (up to every {MAX_RETRY:?}), reported once until it connects"
        );
    }

    /// `after 3 failed attempt(s) in 4.2 s`, during an outage.
    fn describe(&self, failures: u32) -> Option<String> {
        self.since.map(|since| {
            format!(
                "after {failures} failed attempt(s) in {:.1} s",
                since.elapsed().as_secs_f64()
            )
        })
    }

    fn over(&mut self) {
        self.since = None;
        self.causes.clear();
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
    if !target.token().is_empty() {
        let value = HeaderValue::from_str(&format!("Bearer {}", target.token()))
            .map_err(|_| "the access token is not a valid header value".to_owned())?;
        request.headers_mut().insert("Authorization", value);
    }
    let config = hub.settings.websocket();
    let connecting = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
    let (ws, _) = tokio::time::timeout(hub.settings.action_timeout.get(), connecting)
        .await
        .map_err(|_| "connection attempt timed out".to_owned())?
        .map_err(|e| match e {
            tungstenite::Error::Http(r) if matches!(r.status().as_u16(), 401 | 403) => format!(
                "authentication failed (HTTP {}): check the connection's accessToken",
                r.status()
            ),
            e => format!("cannot connect: {e}"),
        })?;
    Ok(Conn::start(
        ws,
        target.url.clone(),
        target.url.clone(),
        hub.log.clone(),
    ))
}
