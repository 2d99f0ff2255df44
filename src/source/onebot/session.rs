//! One connected bot: log in, report its groups, then follow its events, heartbeats, health
//! probes and periodic group-list reconciliation until the connection ends.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::conn::Conn;
use super::hub::{Hub, PLATFORM, Ticket};
use super::protocol::{self, Event};
use super::settings::HEARTBEAT_MISSES;
use crate::presence::ConnectionMode;

/// How a session ended.
pub struct Ended {
    /// The bot logged in and reported its groups (so a redial may be immediate).
    pub established: bool,
    /// Why it ended, when that is worth a log line.
    pub error: Option<String>,
}

/// Runs a session on an open connection. `claimed` is the id the implementation announced
/// (reverse mode's `X-Self-ID`), checked against `get_login_info`.
pub async fn run(
    hub: Arc<Hub>,
    conn: Conn,
    events: mpsc::Receiver<Event>,
    mode: ConnectionMode,
    claimed: Option<String>,
    first: Option<Arc<Ticket>>,
    shutdown: CancellationToken,
) -> Ended {
    let mut established = false;
    let result = run_inner(
        hub,
        conn,
        events,
        mode,
        claimed,
        first,
        shutdown,
        &mut established,
    )
    .await;
    Ended {
        established,
        error: result.err(),
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_inner(
    hub: Arc<Hub>,
    conn: Conn,
    mut events: mpsc::Receiver<Event>,
    mode: ConnectionMode,
    claimed: Option<String>,
    first: Option<Arc<Ticket>>,
    shutdown: CancellationToken,
    established: &mut bool,
) -> Result<(), String> {
    let timeout = hub.settings.action_timeout;
    let login = conn
        .call("get_login_info", json!({}), timeout)
        .await
        .map_err(|e| format!("get_login_info {e}"))?;
    let bot = protocol::id(&login, "user_id").map_err(|e| format!("get_login_info: {e}"))?;
    if let Some(claimed) = claimed.filter(|c| *c != bot) {
        return Err(format!("X-Self-ID {claimed} but get_login_info says {bot}"));
    }
    let nickname = login
        .get("nickname")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_owned();
    conn.set_label(format!("{PLATFORM}:{bot} ({})", describe(&mode)));

    let session = shutdown.child_token();
    let generation = hub.attach(&bot, session.clone(), conn.clone());
    hub.presence.update(PLATFORM, &bot, |p| {
        p.connected = true;
        p.mode = Some(mode.clone());
        p.connected_at = Some(SystemTime::now());
        p.nickname = nickname;
    });
    let mut s = Session {
        hub: hub.clone(),
        conn: conn.clone(),
        bot: bot.clone(),
        logged_out: false,
    };
    let result = s.follow(&mut events, &session, first, established).await;
    conn.close();
    hub.detach(&bot, generation);
    result
}

struct Session {
    hub: Arc<Hub>,
    conn: Conn,
    bot: String,
    /// The implementation says the account is logged out (heartbeat, `bot_offline`), or its
    /// heartbeats stopped: offline while the connection stays.
    logged_out: bool,
}

impl Session {
    async fn follow(
        &mut self,
        events: &mut mpsc::Receiver<Event>,
        session: &CancellationToken,
        first: Option<Arc<Ticket>>,
        established: &mut bool,
    ) -> Result<(), String> {
        let settings = self.hub.settings.clone();
        if self.hub.is_quarantined(&self.bot) {
            // Pallas's rule: a quarantined bot that reconnects must pass a probe first.
            if !self.probe().await {
                return Err("still failing its status probe while quarantined".to_owned());
            }
        }
        self.refresh(false).await?;
        *established = true;
        info!("{}: connected", self.conn.label());
        if let Some(first) = first {
            first.punch();
        }

        let mut heartbeat_due: Option<Instant> = None;
        let mut next_refresh = Instant::now() + hub_spread(settings.group_list_refresh);
        let mut next_probe = Instant::now() + hub_spread(settings.probe_interval);
        loop {
            tokio::select! {
                _ = session.cancelled() => return Ok(()),
                _ = self.conn.closed() => return Err("connection closed".to_owned()),
                event = events.recv() => {
                    let Some(event) = event else { return Err("connection closed".to_owned()) };
                    if let Some(due) = self.handle(event).await? {
                        heartbeat_due = Some(due);
                    }
                }
                _ = sleep_until(heartbeat_due.unwrap_or(next_refresh)), if heartbeat_due.is_some() => {
                    heartbeat_due = None;
                    self.logged_out = true;
                    let reason = format!("no heartbeat for {HEARTBEAT_MISSES} intervals");
                    warn!("{}: {reason}", self.conn.label());
                    self.hub.offline(&self.bot, &reason, true).await;
                }
                _ = sleep_until(next_refresh) => {
                    next_refresh = Instant::now() + settings.group_list_refresh;
                    if !self.logged_out {
                        let hub = self.hub.clone();
                        let _slot = hub.refresh_slots.acquire().await;
                        self.reconcile().await;
                    }
                }
                _ = sleep_until(next_probe) => {
                    next_probe = Instant::now() + settings.probe_interval;
                    if !self.probe().await && self.hub.is_quarantined(&self.bot) {
                        self.hub.offline(&self.bot, "quarantined: status probes failing", true).await;
                        return Err("quarantined; connection reset".to_owned());
                    }
                }
            }
            if self.conn.lost_events.swap(false, Ordering::Relaxed) && !self.logged_out {
                // Some notice may be lost: the group list is the truth.
                self.reconcile().await;
            }
        }
    }

    /// Acts on one event; returns the new heartbeat deadline when it was a heartbeat.
    async fn handle(&mut self, event: Event) -> Result<Option<Instant>, String> {
        match event {
            Event::Heartbeat {
                interval_ms,
                online,
            } => {
                self.hub.presence.update(PLATFORM, &self.bot, |p| {
                    p.last_heartbeat = Some(SystemTime::now())
                });
                if online == Some(false) {
                    if !self.logged_out {
                        self.logged_out = true;
                        warn!(
                            "{}: heartbeat says the account is offline",
                            self.conn.label()
                        );
                        self.hub
                            .offline(&self.bot, "heartbeat status.online = false", true)
                            .await;
                    }
                } else if self.logged_out {
                    // Back: online again with a fresh group list (retried on the next
                    // heartbeat if that fails).
                    if self.reconcile().await {
                        info!("{}: back online", self.conn.label());
                        self.logged_out = false;
                    }
                }
                let interval =
                    Duration::from_millis(interval_ms.unwrap_or(30_000).clamp(100, 3_600_000));
                return Ok(Some(Instant::now() + interval * HEARTBEAT_MISSES));
            }
            Event::Joined { group } => {
                info!("{}: joined group {group}", self.conn.label());
                self.hub.membership(&self.bot, &group, true).await;
            }
            Event::Left { group, sub_type } => {
                info!("{}: left group {group} ({sub_type})", self.conn.label());
                self.hub.membership(&self.bot, &group, false).await;
            }
            Event::AdminChanged { group, admin } => {
                info!("{}: admin of group {group}: {admin}", self.conn.label());
                self.hub.set_admin(&self.bot, &group, Some(admin));
            }
            Event::BotOffline { message } => {
                self.logged_out = true;
                warn!("{}: bot_offline notice: {message}", self.conn.label());
                self.hub
                    .offline(&self.bot, "bot_offline notice", true)
                    .await;
            }
            Event::Lifecycle { .. } | Event::Other => {}
        }
        Ok(None)
    }

    /// Fetches the group list and reports the bot online with it.
    async fn refresh(&mut self, status: bool) -> Result<(), String> {
        let timeout = self.hub.settings.action_timeout;
        let data = self
            .conn
            .call("get_group_list", json!({}), timeout)
            .await
            .map_err(|e| format!("get_group_list {e}"))?;
        let groups = protocol::group_ids(&data).map_err(|e| e.to_string())?;
        self.hub.online(&self.bot, groups, status).await;
        Ok(())
    }

    /// A refresh that may fail without ending the session.
    async fn reconcile(&mut self) -> bool {
        match self.refresh(true).await {
            Ok(()) => true,
            Err(e) => {
                warn!("{}: {e}", self.conn.label());
                false
            }
        }
    }

    /// One `get_status` probe (at most `health.concurrency` at once); true when healthy.
    async fn probe(&mut self) -> bool {
        let hub = self.hub.clone();
        let _slot = hub.probe_slots.acquire().await;
        let timeout = self.hub.settings.probe_timeout;
        let healthy = match self.conn.call("get_status", json!({}), timeout).await {
            Ok(data) => protocol::status_healthy(&data),
            Err(e) => {
                warn!("{}: get_status {e}", self.conn.label());
                false
            }
        };
        self.hub.probe_result(&self.bot, healthy);
        healthy
    }
}

/// A first deadline spread over `[period / 2, period)`, so bots that connect together do not
/// refresh or probe together.
fn hub_spread(period: Duration) -> Duration {
    use rand::RngExt;
    period.mul_f64(rand::rng().random_range(0.5..1.0))
}

fn describe(mode: &ConnectionMode) -> String {
    match mode {
        ConnectionMode::Forward { url } => url.clone(),
        ConnectionMode::Reverse { peer } => format!("reverse from {peer}"),
    }
}
