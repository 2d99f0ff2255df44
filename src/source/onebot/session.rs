//! One connected bot: log in, report its groups, then follow its events, heartbeats, health
//! probes and periodic group-list reconciliation until the connection ends.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::conn::{CallError, Conn};
use super::hub::{Attach, Hub, PLATFORM, RoutineEvent, Ticket};
use super::protocol::{self, Event, FrameError};
use super::settings::HEARTBEAT_MISSES;
use crate::logs::cut;
use crate::presence::ConnectionMode;
use crate::source::Origin;

/// How a session ended.
pub struct Ended {
    /// The bot logged in and reported its groups (so a redial may be immediate).
    pub established: bool,
    /// Why it ended, when that is worth a log line.
    pub error: Option<SessionError>,
}

/// Why a session ended (or never started).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// An answer to no request refused us (NapCat's and LLOneBot's wrong token).
    #[error("authentication failed (retcode {0}): check accessToken")]
    Rejected(i64),
    #[error("{action} {error}")]
    Call {
        action: &'static str,
        error: CallError,
    },
    #[error("{action}: {error}")]
    Answer {
        action: &'static str,
        error: FrameError,
    },
    #[error("X-Self-ID {claimed} but get_login_info says {actual}")]
    WrongSelfId { claimed: String, actual: String },
    #[error("connection closed")]
    Closed,
    #[error("connection closed while standing by")]
    ClosedStandingBy,
    #[error("still failing its status probe while quarantined")]
    StillQuarantined,
    #[error("quarantined; connection reset")]
    Quarantined,
}

/// What a session is started with besides its connection.
pub struct Start {
    pub mode: ConnectionMode,
    /// The id the implementation announced (reverse mode's `X-Self-ID`), checked against
    /// `get_login_info`.
    pub claimed: Option<String>,
    /// Punched once the first attempt is over (forward connections at start-up).
    pub first: Option<Arc<Ticket>>,
    /// How the failures before this connection ended, for the "connected" line
    /// (`after 3 failed attempt(s) in 4.2 s`).
    pub after_outage: Option<String>,
}

/// Runs a session on an open connection.
pub async fn run(
    hub: Arc<Hub>,
    conn: Conn,
    events: mpsc::Receiver<Event>,
    start: Start,
    shutdown: CancellationToken,
) -> Ended {
    let mut established = false;
    let result = run_inner(hub, conn, events, start, shutdown, &mut established).await;
    Ended {
        established,
        error: result.err(),
    }
}

async fn run_inner(
    hub: Arc<Hub>,
    conn: Conn,
    mut events: mpsc::Receiver<Event>,
    start: Start,
    shutdown: CancellationToken,
    established: &mut bool,
) -> Result<(), SessionError> {
    let Start {
        mode,
        claimed,
        first,
        after_outage,
    } = start;
    let timeout = hub.settings.action_timeout.get();
    let login = match conn.call("get_login_info", json!({}), timeout).await {
        Ok(login) => login.into_value(),
        Err(error) => {
            return Err(match conn.rejected() {
                Some(retcode) => SessionError::Rejected(retcode),
                None => SessionError::Call {
                    action: "get_login_info",
                    error,
                },
            });
        }
    };
    let bot = protocol::id(&login, "user_id").map_err(|error| SessionError::Answer {
        action: "get_login_info",
        error,
    })?;
    if let Some(claimed) = claimed.filter(|c| *c != bot) {
        return Err(SessionError::WrongSelfId {
            claimed,
            actual: bot,
        });
    }
    let nickname = crate::logs::truncate(
        login
            .get("nickname")
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim(),
        MAX_NICKNAME_CHARS,
    )
    .to_owned();
    conn.set_label(format!("{PLATFORM}:{bot} ({})", describe(&mode)));
    conn.set_subject(format!("{PLATFORM}:{bot}"));

    let session = shutdown.child_token();
    let Some(generation) =
        take_turn(&hub, &bot, &session, &conn, &mut events, &first, &shutdown).await?
    else {
        return Ok(());
    };
    hub.presence.update(PLATFORM, &bot, |p| {
        p.connected = true;
        p.connections += 1;
        p.mode = Some(mode.clone());
        p.connected_at = Some(hub.clock.system_time());
        p.nickname = nickname;
    });
    let mut s = Session {
        hub: hub.clone(),
        conn: conn.clone(),
        bot: bot.clone(),
        logged_out: false,
    };
    let result = s
        .follow(&mut events, &session, first, after_outage, established)
        .await;
    conn.close();
    hub.detach(&bot, generation);
    result
}

/// Attaches the connection as the bot's current one, or stands by while another live one is
/// current and takes over when it ends. `Ok(None)`: stopped while standing by.
async fn take_turn(
    hub: &Hub,
    bot: &str,
    session: &CancellationToken,
    conn: &Conn,
    events: &mut mpsc::Receiver<Event>,
    first: &Option<Arc<Ticket>>,
    shutdown: &CancellationToken,
) -> Result<Option<u64>, SessionError> {
    let mut standing_by = StandingBy::new(hub, bot);
    loop {
        let vacancy = hub.vacancy(bot);
        let vacated = vacancy.notified();
        tokio::pin!(vacated);
        vacated.as_mut().enable();
        let current = match hub.attach(bot, session.clone(), conn.clone()) {
            Attach::Current(generation) => {
                if standing_by.is() {
                    info!("{}: takes over as the bot's connection", conn.label());
                }
                return Ok(Some(generation));
            }
            Attach::Busy(current) => current,
        };
        // A current connection that no longer answers (half-open) gives way at once.
        let check = hub.settings.action_timeout.get().min(STANDBY_CHECK);
        if current
            .call("get_status", json!({}), check)
            .await
            .is_err_and(|e| {
                matches!(
                    e,
                    super::conn::CallError::Timeout(_) | super::conn::CallError::Closed
                )
            })
        {
            warn!(
                "{}: the bot's current connection ({}) does not answer; replacing it",
                conn.label(),
                current.label()
            );
            hub.evict(bot, &current);
            continue;
        }
        if !standing_by.is() {
            standing_by.start();
            info!(
                "{}: the bot is already connected ({}); this connection stands by",
                conn.label(),
                current.label()
            );
            if let Some(first) = first {
                first.punch();
            }
        }
        loop {
            tokio::select! {
                _ = &mut vacated => break,
                _ = conn.closed() => return Err(SessionError::ClosedStandingBy),
                _ = shutdown.cancelled() => return Ok(None),
                // Nothing of a standby connection is acted on; its events are drained.
                event = events.recv() => if event.is_none() {
                    return Err(SessionError::ClosedStandingBy);
                },
            }
        }
    }
}

/// Nicknames are cut to this many characters before they are stored and served.
pub const MAX_NICKNAME_CHARS: usize = 64;

/// Counts this connection in the bot's presence while it stands by (and no longer once it
/// takes over, closes or the session ends, whichever way).
struct StandingBy<'a> {
    hub: &'a Hub,
    bot: &'a str,
    counted: bool,
}

impl<'a> StandingBy<'a> {
    fn new(hub: &'a Hub, bot: &'a str) -> Self {
        StandingBy {
            hub,
            bot,
            counted: false,
        }
    }

    fn is(&self) -> bool {
        self.counted
    }

    fn start(&mut self) {
        self.counted = true;
        self.hub
            .presence
            .update(PLATFORM, self.bot, |p| p.standby_connections += 1);
    }
}

impl Drop for StandingBy<'_> {
    fn drop(&mut self) {
        if self.counted {
            self.hub.presence.update(PLATFORM, self.bot, |p| {
                p.standby_connections = p.standby_connections.saturating_sub(1)
            });
        }
    }
}

/// How long the current connection of a bot may take to answer when another one arrives.
const STANDBY_CHECK: Duration = Duration::from_secs(5);

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
        after_outage: Option<String>,
        established: &mut bool,
    ) -> Result<(), SessionError> {
        let settings = self.hub.settings.clone();
        if self.hub.is_quarantined(&self.bot) {
            // Pallas's rule: a quarantined bot that reconnects must pass a probe first.
            if !self.probe().await {
                return Err(SessionError::StillQuarantined);
            }
        }
        self.refresh(Origin::Connection).await?;
        *established = true;
        match after_outage {
            Some(after) => info!("{}: connected {after}", self.conn.label()),
            None => info!("{}: connected", self.conn.label()),
        }
        if let Some(first) = first {
            first.punch();
        }

        let mut heartbeat_due: Option<Instant> = None;
        let mut next_refresh = Instant::now() + hub_spread(settings.group_list_refresh.get());
        let mut next_probe = Instant::now() + hub_spread(settings.health.probe_interval.get());
        loop {
            tokio::select! {
                _ = session.cancelled() => return Ok(()),
                _ = self.conn.closed() => return Err(SessionError::Closed),
                event = events.recv() => {
                    let Some(event) = event else { return Err(SessionError::Closed) };
                    if let Some(due) = self.handle(event).await? {
                        heartbeat_due = Some(due);
                    }
                }
                _ = sleep_until(heartbeat_due.unwrap_or(next_refresh)), if heartbeat_due.is_some() => {
                    heartbeat_due = None;
                    self.logged_out = true;
                    let reason = format!("no heartbeat for {HEARTBEAT_MISSES} intervals");
                    warn!("{}: {reason}", self.conn.label());
                    self.hub.offline(&self.bot, &reason, Origin::Status).await;
                }
                _ = sleep_until(next_refresh) => {
                    next_refresh = Instant::now() + settings.group_list_refresh.get();
                    if !self.logged_out {
                        let hub = self.hub.clone();
                        let _slot = hub.refresh_slots.acquire().await;
                        self.reconcile().await;
                    }
                }
                _ = sleep_until(next_probe) => {
                    next_probe = Instant::now() + settings.health.probe_interval.get();
                    if !self.probe().await && self.hub.is_quarantined(&self.bot) {
                        self.hub.offline(&self.bot, "quarantined: status probes failing", Origin::Status).await;
                        return Err(SessionError::Quarantined);
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
    async fn handle(&mut self, event: Event) -> Result<Option<Instant>, SessionError> {
        match event {
            Event::Heartbeat {
                interval_ms,
                online,
            } => {
                self.hub.presence.update(PLATFORM, &self.bot, |p| {
                    p.last_heartbeat = Some(self.hub.clock.system_time())
                });
                if online == Some(false) {
                    if !self.logged_out {
                        self.logged_out = true;
                        warn!(
                            "{}: heartbeat says the account is offline",
                            self.conn.label()
                        );
                        self.hub
                            .offline(&self.bot, "heartbeat status.online = false", Origin::Status)
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
            // Routine and possibly frequent: one line per event at debug, a summary at info.
            Event::Joined { group } => {
                debug!("{}: joined group {group}", self.conn.label());
                self.hub.routine(RoutineEvent::Joined);
                self.hub.membership(&self.bot, &group, true).await;
            }
            Event::Left { group, sub_type } => {
                debug!(
                    "{}: left group {group} ({})",
                    self.conn.label(),
                    cut(&sub_type)
                );
                self.hub.routine(RoutineEvent::Left);
                self.hub.membership(&self.bot, &group, false).await;
            }
            Event::AdminChanged { group, admin } => {
                debug!("{}: admin of group {group}: {admin}", self.conn.label());
                self.hub.routine(RoutineEvent::AdminChanged);
                self.hub.set_admin(&self.bot, &group, Some(admin));
            }
            Event::BotOffline { message } => {
                self.logged_out = true;
                self.conn.warn("bot_offline notice", || {
                    format!("bot_offline notice: {}", cut(&message))
                });
                self.hub
                    .offline(&self.bot, "bot_offline notice", Origin::Status)
                    .await;
            }
            Event::GroupMessage {
                group,
                user,
                signature,
            } => {
                // The fleet's own replies are not what the weights measure (the plugins and
                // the ingress leave them out too).
                if !self.hub.is_bot(&user) {
                    self.hub.traffic.message_seen(PLATFORM, &group, signature);
                }
            }
            Event::Lifecycle { .. } | Event::Other => {}
        }
        Ok(None)
    }

    /// Fetches the group list and reports the bot online with it.
    async fn refresh(&mut self, origin: Origin) -> Result<(), SessionError> {
        let timeout = self.hub.settings.action_timeout.get();
        let data = self
            .conn
            .call("get_group_list", json!({}), timeout)
            .await
            .map_err(|error| SessionError::Call {
                action: "get_group_list",
                error,
            })?;
        let (groups, bad) = protocol::group_ids(data).map_err(|error| SessionError::Answer {
            action: "get_group_list",
            error,
        })?;
        if bad > 0 {
            self.conn.warn("not a group", || {
                format!("get_group_list: {bad} entr(ies) without a positive group_id left out")
            });
        }
        self.hub.online(&self.bot, groups, origin).await;
        Ok(())
    }

    /// A refresh that may fail without ending the session.
    async fn reconcile(&mut self) -> bool {
        match self.refresh(Origin::Status).await {
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
        let timeout = self.hub.settings.health.probe_timeout.get();
        let healthy = match self.conn.call("get_status", json!({}), timeout).await {
            Ok(data) => protocol::status_healthy(&data.into_value()),
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
