//! Per-bot state that outlives any one connection: what the engine was last told (online or
//! not, which groups), the health record, and which connection is current.
//!
//! Sessions report what they see; the hub turns it into fleet events, sending each change
//! once: a second connection of the same bot replaces the first without an offline/online
//! flap, a lost connection only makes the bot offline after the grace period, and a fresh group
//! list becomes joins and leaves relative to the last one.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::conn::Conn;
use super::settings::Settings;
use crate::presence::Presence;
use crate::source::FleetEvent;

pub const PLATFORM: &str = "onebot";
const ADMIN_PROBE_TIMEOUT: Duration = Duration::from_secs(2);
const ADMIN_RETRY: Duration = Duration::from_secs(60);

pub struct Hub {
    pub settings: Settings,
    pub presence: Presence,
    events: mpsc::Sender<FleetEvent>,
    bots: Mutex<HashMap<String, BotState>>,
    /// At most `health.concurrency` status probes at once.
    pub probe_slots: Semaphore,
    /// Reconciliation refreshes one or two bots at a time, never all at once.
    pub refresh_slots: Semaphore,
}

#[derive(Default)]
struct BotState {
    generation: u64,
    session: Option<CancellationToken>,
    /// The current connection, for actions asked from outside the session.
    conn: Option<Conn>,
    reported_online: bool,
    groups: BTreeSet<String>,
    /// Group → whether this bot is an admin there, as last observed.
    admin_of: HashMap<String, bool>,
    /// Group → when asking for this bot's role there last failed (not asked again for a while).
    admin_failed: HashMap<String, std::time::Instant>,
    quarantined: bool,
    failures: u32,
}

impl Hub {
    pub fn new(
        settings: Settings,
        presence: Presence,
        events: mpsc::Sender<FleetEvent>,
    ) -> Arc<Hub> {
        let concurrency = settings.health_concurrency.max(1);
        Arc::new(Hub {
            settings,
            presence,
            events,
            bots: Mutex::default(),
            probe_slots: Semaphore::new(concurrency),
            refresh_slots: Semaphore::new(2),
        })
    }

    fn with<T>(&self, bot: &str, f: impl FnOnce(&mut BotState) -> T) -> T {
        let mut bots = self.bots.lock().unwrap_or_else(|e| e.into_inner());
        f(bots.entry(bot.to_owned()).or_default())
    }

    /// A new connection for `bot` becomes the current one; an older one is told to close.
    pub fn attach(&self, bot: &str, session: CancellationToken, conn: Conn) -> u64 {
        let (generation, old) = self.with(bot, |s| {
            s.generation += 1;
            s.conn = Some(conn);
            (s.generation, s.session.replace(session))
        });
        if let Some(old) = old {
            info!("{PLATFORM}:{bot}: a new connection replaces the previous one");
            old.cancel();
        }
        generation
    }

    /// The connection of `generation` is gone; unless another takes over within the grace
    /// period, the bot goes offline.
    pub fn detach(self: &Arc<Self>, bot: &str, generation: u64) {
        let current = self.with(bot, |s| {
            if s.generation == generation {
                s.session = None;
                s.conn = None;
                true
            } else {
                false
            }
        });
        if !current {
            return;
        }
        self.presence.update(PLATFORM, bot, |p| p.connected = false);
        let hub = self.clone();
        let bot = bot.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(hub.settings.offline_grace).await;
            let still_gone = hub.with(&bot, |s| s.generation == generation && s.session.is_none());
            if still_gone {
                let reason = format!(
                    "connection lost for more than {:?}",
                    hub.settings.offline_grace
                );
                hub.offline(&bot, &reason, false).await;
            }
        });
    }

    /// Whether `generation` is still the bot's current connection.
    pub fn is_current(&self, bot: &str, generation: u64) -> bool {
        self.with(bot, |s| s.generation == generation)
    }

    /// The bot is online with this group list: online if it was not, else joins and leaves.
    pub async fn online(&self, bot: &str, groups: Vec<String>, status: bool) {
        let fresh: BTreeSet<String> = groups.into_iter().collect();
        let count = fresh.len();
        let events = self.with(bot, |s| {
            let was_online = s.reported_online;
            let old = std::mem::replace(&mut s.groups, fresh.clone());
            s.reported_online = true;
            if !was_online {
                return vec![FleetEvent::BotOnline {
                    platform: PLATFORM.to_owned(),
                    bot: bot.to_owned(),
                    channels: fresh.into_iter().collect(),
                    status,
                }];
            }
            let left = old.difference(&fresh).map(|g| FleetEvent::ChannelLeft {
                platform: PLATFORM.to_owned(),
                bot: bot.to_owned(),
                channel: g.clone(),
            });
            let joined = fresh.difference(&old).map(|g| FleetEvent::ChannelJoined {
                platform: PLATFORM.to_owned(),
                bot: bot.to_owned(),
                channel: g.clone(),
            });
            left.chain(joined).collect()
        });
        self.presence.update(PLATFORM, bot, |p| {
            p.online = true;
            p.groups = count;
            p.last_group_refresh = Some(SystemTime::now());
        });
        self.send(events).await;
    }

    pub async fn offline(&self, bot: &str, reason: &str, status: bool) {
        let was = self.with(bot, |s| std::mem::replace(&mut s.reported_online, false));
        self.presence.update(PLATFORM, bot, |p| p.online = false);
        if was {
            self.send(vec![FleetEvent::BotOffline {
                platform: PLATFORM.to_owned(),
                bot: bot.to_owned(),
                reason: reason.to_owned(),
                status,
            }])
            .await;
        }
    }

    /// The bot joined (`joined`) or left a group, by its own notice.
    pub async fn membership(&self, bot: &str, group: &str, joined: bool) {
        let event = self.with(bot, |s| {
            let changed = if joined {
                s.groups.insert(group.to_owned())
            } else {
                s.admin_of.remove(group);
                s.groups.remove(group)
            };
            (changed && s.reported_online).then(|| {
                let (platform, bot, channel) =
                    (PLATFORM.to_owned(), bot.to_owned(), group.to_owned());
                if joined {
                    FleetEvent::ChannelJoined {
                        platform,
                        bot,
                        channel,
                    }
                } else {
                    FleetEvent::ChannelLeft {
                        platform,
                        bot,
                        channel,
                    }
                }
            })
        });
        self.send(event.into_iter().collect()).await;
    }

    /// Records (`Some`) or forgets (`None`) whether `bot` is an admin of `group`.
    pub fn set_admin(&self, bot: &str, group: &str, admin: Option<bool>) {
        self.with(bot, |s| match admin {
            Some(a) => s.admin_of.insert(group.to_owned(), a),
            None => s.admin_of.remove(group),
        });
    }

    /// Which of the connected, online bots in `group` are its admins (Pallas-Bot's local
    /// group-admin observation): `None` when there is no such bot or a role stays unknown.
    /// Unknown roles are asked with `get_group_member_info` (at most `probes` calls, the budget
    /// shared across calls, each given at most 2 s); a failed ask is not repeated for a minute.
    pub async fn group_admins(&self, group: &str, probes: &mut usize) -> Option<BTreeSet<i64>> {
        let bots: Vec<(String, Option<bool>, Option<Conn>)> = {
            let all = self.bots.lock().unwrap_or_else(|e| e.into_inner());
            all.iter()
                .filter(|(_, s)| s.reported_online && s.conn.is_some() && s.groups.contains(group))
                .map(|(bot, s)| {
                    let resting = s
                        .admin_failed
                        .get(group)
                        .is_some_and(|t| t.elapsed() < ADMIN_RETRY);
                    let conn = if resting { None } else { s.conn.clone() };
                    (bot.clone(), s.admin_of.get(group).copied(), conn)
                })
                .collect()
        };
        if bots.is_empty() {
            return None;
        }
        let mut admins = BTreeSet::new();
        for (bot, known, conn) in bots {
            let admin = match (known, conn) {
                (Some(a), _) => a,
                (None, Some(conn)) if *probes > 0 => {
                    *probes -= 1;
                    let params = serde_json::json!({"group_id": group.parse::<i64>().ok()?, "user_id": bot.parse::<i64>().ok()?});
                    let timeout = self.settings.action_timeout.min(ADMIN_PROBE_TIMEOUT);
                    let asked = conn.call("get_group_member_info", params, timeout).await;
                    let role = asked.ok().and_then(|a| {
                        match a.get("role")?.as_str()?.trim().to_lowercase().as_str() {
                            "admin" | "owner" => Some(true),
                            "member" => Some(false),
                            _ => None,
                        }
                    });
                    let Some(admin) = role else {
                        self.with(&bot, |s| {
                            s.admin_failed
                                .insert(group.to_owned(), std::time::Instant::now())
                        });
                        return None;
                    };
                    self.set_admin(&bot, group, Some(admin));
                    admin
                }
                _ => return None,
            };
            if admin {
                admins.insert(bot.parse().ok()?);
            }
        }
        Some(admins)
    }

    pub fn is_quarantined(&self, bot: &str) -> bool {
        self.with(bot, |s| s.quarantined)
    }

    /// Records a health probe (Pallas's rule): a success clears the failure count and lifts a
    /// quarantine; the `failure_threshold`-th failure in a row quarantines. Returns whether the
    /// bot is quarantined now.
    pub fn probe_result(&self, bot: &str, healthy: bool) -> bool {
        let threshold = self.settings.failure_threshold.max(1);
        let (quarantined, lifted) = self.with(bot, |s| {
            if healthy {
                s.failures = 0;
                let lifted = std::mem::replace(&mut s.quarantined, false);
                (false, lifted)
            } else {
                s.failures += 1;
                if s.failures >= threshold {
                    s.quarantined = true;
                }
                (s.quarantined, false)
            }
        });
        if lifted {
            info!("{PLATFORM}:{bot}: status probe succeeded, quarantine lifted");
        }
        if quarantined && !healthy {
            warn!("{PLATFORM}:{bot}: quarantined after {threshold} failed status probes");
        }
        self.presence
            .update(PLATFORM, bot, |p| p.quarantined = quarantined);
        quarantined
    }

    async fn send(&self, events: Vec<FleetEvent>) {
        for event in events {
            if self.events.send(event).await.is_err() {
                return;
            }
        }
    }
}

/// Counts down the connections whose first attempt has not finished; `done` is cancelled at 0.
pub struct Countdown {
    remaining: Mutex<usize>,
    pub done: CancellationToken,
}

impl Countdown {
    pub fn new(n: usize) -> Arc<Countdown> {
        let c = Arc::new(Countdown {
            remaining: Mutex::new(n),
            done: CancellationToken::new(),
        });
        if n == 0 {
            c.done.cancel();
        }
        c
    }

    pub fn tick(&self) {
        let mut r = self.remaining.lock().unwrap_or_else(|e| e.into_inner());
        *r = r.saturating_sub(1);
        if *r == 0 {
            self.done.cancel();
        }
    }
}

/// One connection's share of a [`Countdown`]: punching it more than once counts once.
pub struct Ticket {
    countdown: Arc<Countdown>,
    used: std::sync::atomic::AtomicBool,
}

impl Ticket {
    pub fn new(countdown: Arc<Countdown>) -> Arc<Ticket> {
        Arc::new(Ticket {
            countdown,
            used: Default::default(),
        })
    }

    pub fn punch(&self) {
        if !self.used.swap(true, std::sync::atomic::Ordering::Relaxed) {
            self.countdown.tick();
        }
    }
}

/// How long a wait of `d` with ±25% jitter lasts.
pub fn jittered(d: Duration) -> Duration {
    use rand::RngExt;
    d.mul_f64(rand::rng().random_range(0.75..1.25))
}
