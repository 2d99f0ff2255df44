//! Per-bot state that outlives any one connection: what the engine was last told (online or
//! not, which groups), the health record, and which connection is current.
//!
//! Sessions report what they see; the hub turns it into fleet events, sending each change
//! once: a second connection of the same bot replaces the first without an offline/online
//! flap, a lost connection only makes the bot offline after the grace period, and a fresh group
//! list becomes joins and leaves relative to the last one.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::conn::Conn;
use super::protocol;
use super::settings::Settings;
use crate::clock::Clock;
use crate::logs::Limiter;
use crate::model::ChannelIds;
use crate::presence::Presence;
use crate::source::{FleetEvent, Origin};
use crate::traffic::Counter;

pub const PLATFORM: &str = "onebot";
const ADMIN_PROBE_TIMEOUT: Duration = Duration::from_secs(2);
const ADMIN_RETRY: Duration = Duration::from_secs(60);

pub struct Hub {
    pub settings: Settings,
    pub presence: Presence,
    pub clock: Clock,
    /// Group messages counted for the channel weights.
    pub traffic: Counter,
    events: mpsc::Sender<FleetEvent>,
    bots: Mutex<HashMap<String, BotState>>,
    /// Repeated warnings about bots and addresses, limited.
    pub log: Arc<Limiter>,
    /// Joins, leaves and admin changes since the last summary line.
    routine: Mutex<Routine>,
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
    /// Woken when the current connection ends, so one standing by takes over at once.
    vacancy: Arc<Notify>,
    reported_online: bool,
    /// Its groups' numbers: 8 bytes each, where a million strings would be ~50 MB.
    groups: BTreeSet<i64>,
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
        clock: Clock,
        traffic: Counter,
    ) -> Arc<Hub> {
        let concurrency = settings.health.concurrency.get() as usize;
        Arc::new(Hub {
            settings,
            presence,
            clock,
            traffic,
            events,
            bots: Mutex::default(),
            log: Arc::default(),
            routine: Mutex::default(),
            probe_slots: Semaphore::new(concurrency),
            refresh_slots: Semaphore::new(2),
        })
    }

    fn with<T>(&self, bot: &str, f: impl FnOnce(&mut BotState) -> T) -> T {
        let mut bots = self.bots.lock();
        f(bots.entry(bot.to_owned()).or_default())
    }

    /// What wakes a connection standing by for `bot` (take it before trying to attach, so a
    /// vacancy in between is not missed).
    pub fn vacancy(&self, bot: &str) -> Arc<Notify> {
        self.with(bot, |s| s.vacancy.clone())
    }

    /// Makes `conn` the bot's current connection, unless another live one is current: then it
    /// must stand by (several connections to one bot — two forward URLs, or a forward and a
    /// reverse one — take turns instead of replacing each other in a loop).
    pub fn attach(&self, bot: &str, session: CancellationToken, conn: Conn) -> Attach {
        self.with(bot, |s| {
            if let (Some(current), Some(_)) = (&s.conn, &s.session)
                && !current.is_closed()
            {
                return Attach::Busy(current.clone());
            }
            s.generation += 1;
            s.conn = Some(conn);
            s.session = Some(session);
            Attach::Current(s.generation)
        })
    }

    /// Ends the bot's current connection if it is still `stale` (it stopped answering).
    pub fn evict(&self, bot: &str, stale: &Conn) {
        let session = self.with(bot, |s| {
            if s.conn.as_ref().is_some_and(|c| c.same(stale)) {
                s.session.clone()
            } else {
                None
            }
        });
        if let Some(session) = session {
            session.cancel();
        }
        stale.close();
    }

    /// The connection of `generation` is gone; unless another takes over within the grace
    /// period, the bot goes offline.
    pub fn detach(self: &Arc<Self>, bot: &str, generation: u64) {
        let current = self.with(bot, |s| {
            if s.generation == generation {
                s.session = None;
                s.conn = None;
                s.vacancy.notify_waiters();
                true
            } else {
                false
            }
        });
        if !current {
            return;
        }
        self.presence.update(PLATFORM, bot, |p| p.connected = false);
        // The wait holds the hub weakly: a service stopping meanwhile drops the hub, and with
        // it the sender of its fleet events, at once (held, the stop waited out the grace).
        let weak = Arc::downgrade(self);
        let grace = self.settings.offline_grace.get();
        let bot = bot.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let Some(hub) = weak.upgrade() else {
                return;
            };
            let still_gone = hub.with(&bot, |s| s.generation == generation && s.session.is_none());
            if still_gone {
                let reason = format!(
                    "connection lost for more than {:?}",
                    hub.settings.offline_grace.get()
                );
                hub.offline(&bot, &reason, Origin::Connection).await;
                // Nothing left to remember but a quarantine: the state of a bot that may
                // never come back (or never existed: reverse clients name themselves) goes.
                let mut bots = hub.bots.lock();
                if bots.get(&bot).is_some_and(|s| {
                    s.generation == generation && s.session.is_none() && !s.quarantined
                }) {
                    bots.remove(&bot);
                }
            }
        });
    }

    /// Counts a routine event (a join, a leave, an admin change) for the minute's summary.
    pub fn routine(&self, kind: RoutineEvent) {
        let mut r = self.routine.lock();
        match kind {
            RoutineEvent::Joined => r.joins += 1,
            RoutineEvent::Left => r.leaves += 1,
            RoutineEvent::AdminChanged => r.admin_changes += 1,
        }
    }

    /// Summarises routine events and reports suppressed warnings, every minute and at the
    /// stop: one line instead of one per event.
    pub async fn run_log(self: Arc<Self>, shutdown: CancellationToken) {
        let flusher = {
            let log = self.log.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move { log.run(shutdown).await })
        };
        loop {
            let stop = tokio::select! {
                _ = shutdown.cancelled() => true,
                _ = tokio::time::sleep(Duration::from_secs(60)) => false,
            };
            let r = std::mem::take(&mut *self.routine.lock());
            if r.joins + r.leaves + r.admin_changes > 0 {
                info!(
                    "{PLATFORM}: {} group join(s), {} leave(s), {} admin change(s) of the bots themselves since the last summary",
                    r.joins, r.leaves, r.admin_changes
                );
            }
            if stop {
                break;
            }
        }
        let _ = flusher.await;
    }

    /// The bot is online with this group list: online if it was not, else joins and leaves.
    pub async fn online(&self, bot: &str, groups: Vec<i64>, origin: Origin) {
        let reported = groups.len();
        let mut fresh: BTreeSet<i64> = groups.into_iter().collect();
        let cap = self.settings.max_groups_per_bot.get() as usize;
        if fresh.len() > cap {
            // Keep a stable part (the smallest numbers), so a capped bot does not flap.
            fresh = fresh.into_iter().take(cap).collect();
            self.log
                .warn("too many groups", &format!("{PLATFORM}:{bot}"), || {
                    format!(
                        "{PLATFORM}:{bot} reported {reported} groups; only {cap} are used \
                     (sources.onebot.maxGroupsPerBot)"
                    )
                });
        }
        let count = fresh.len();
        let events = self.with(bot, |s| {
            let was_online = s.reported_online;
            let old = std::mem::replace(&mut s.groups, fresh.clone());
            s.reported_online = true;
            if !was_online {
                // Exact: the protocol keeps only positive group ids.
                return vec![FleetEvent::BotOnline {
                    platform: PLATFORM.to_owned(),
                    bot: bot.to_owned(),
                    channels: ChannelIds::from_numbers(fresh.iter().map(|&g| g as u64).collect()),
                    origin,
                }];
            }
            let left = old.difference(&fresh).map(|g| FleetEvent::ChannelLeft {
                platform: PLATFORM.to_owned(),
                bot: bot.to_owned(),
                channel: g.to_string(),
            });
            let joined = fresh.difference(&old).map(|g| FleetEvent::ChannelJoined {
                platform: PLATFORM.to_owned(),
                bot: bot.to_owned(),
                channel: g.to_string(),
            });
            left.chain(joined).collect()
        });
        self.presence.update(PLATFORM, bot, |p| {
            p.online = true;
            p.groups = count;
            p.last_group_refresh = Some(self.clock.system_time());
        });
        self.send(events).await;
    }

    pub async fn offline(&self, bot: &str, reason: &str, origin: Origin) {
        let was = self.with(bot, |s| {
            // Its groups are asked again when it is back: nothing to keep meanwhile.
            s.groups.clear();
            s.admin_of.clear();
            s.admin_failed.clear();
            std::mem::replace(&mut s.reported_online, false)
        });
        self.presence.update(PLATFORM, bot, |p| p.online = false);
        if was {
            self.send(vec![FleetEvent::BotOffline {
                platform: PLATFORM.to_owned(),
                bot: bot.to_owned(),
                reason: reason.to_owned(),
                origin,
            }])
            .await;
        }
    }

    /// The bot joined (`joined`) or left a group, by its own notice.
    pub async fn membership(&self, bot: &str, group: &str, joined: bool) {
        // Always a number: notices' ids are read by `protocol::id`.
        let Some(number) = protocol::group_number(group) else {
            return;
        };
        let cap = self.settings.max_groups_per_bot.get() as usize;
        let event = self.with(bot, |s| {
            let changed = if joined {
                if s.groups.len() >= cap && !s.groups.contains(&number) {
                    self.log.warn("too many groups", &format!("{PLATFORM}:{bot}"), || {
                        format!(
                            "{PLATFORM}:{bot} joined group {group} beyond {cap} groups; ignored \
                             (sources.onebot.maxGroupsPerBot)"
                        )
                    });
                    return None;
                }
                s.groups.insert(number)
            } else {
                s.admin_of.remove(group);
                s.groups.remove(&number)
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
        let number = protocol::group_number(group)?;
        let bots: Vec<(String, Option<bool>, Option<Conn>)> = {
            let all = self.bots.lock();
            all.iter()
                .filter(|(_, s)| {
                    s.reported_online && s.conn.is_some() && s.groups.contains(&number)
                })
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
                    let params = serde_json::json!({"group_id": number, "user_id": bot.parse::<i64>().ok()?});
                    let timeout = self.settings.action_timeout.get().min(ADMIN_PROBE_TIMEOUT);
                    let asked = conn.call("get_group_member_info", params, timeout).await;
                    let answer = asked.ok().map(|a| a.into_value());
                    let role = answer.and_then(|a| {
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

    /// Whether `user` is a bot this source knows (its messages are replies, not traffic).
    pub fn is_bot(&self, user: &str) -> bool {
        self.bots.lock().contains_key(user)
    }

    pub fn is_quarantined(&self, bot: &str) -> bool {
        self.with(bot, |s| s.quarantined)
    }

    /// Records a health probe (Pallas's rule): a success clears the failure count and lifts a
    /// quarantine; the `failure_threshold`-th failure in a row quarantines. Returns whether the
    /// bot is quarantined now.
    pub fn probe_result(&self, bot: &str, healthy: bool) -> bool {
        let threshold = self.settings.health.failure_threshold.get() as u32;
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
        self.presence.update(PLATFORM, bot, |p| {
            p.quarantined = quarantined;
            p.probe_failures += u64::from(!healthy);
        });
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

impl crate::pallas::federate::GroupAdmins for Hub {
    fn group_admins<'a>(
        &'a self,
        group: &'a str,
        probes: &'a mut usize,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<BTreeSet<i64>>> + Send + 'a>>
    {
        Box::pin(Hub::group_admins(self, group, probes))
    }
}

/// Routine events, summarised once a minute.
#[derive(Default)]
struct Routine {
    joins: u64,
    leaves: u64,
    admin_changes: u64,
}

#[derive(Clone, Copy, Debug)]
pub enum RoutineEvent {
    Joined,
    Left,
    AdminChanged,
}

/// The outcome of [`Hub::attach`].
pub enum Attach {
    /// This connection is now the bot's current one, with this generation.
    Current(u64),
    /// Another live connection is current: this one stands by.
    Busy(Conn),
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
        let mut r = self.remaining.lock();
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
