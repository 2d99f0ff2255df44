//! `sources.http`: fleet reporters over the HTTP API, for frameworks that know their bots
//! (the Koishi plugin, the NoneBot plugin).
//!
//! A reporter is a named client (`/v1/fleet/reporters/{name}`) that sends its bots' full state
//! once (`PUT`), then events as they happen (`POST .../events`) and a heartbeat
//! (`POST .../heartbeat`). A reporter not heard from for `offlineGrace` is gone: its bots go
//! offline, as a lost OneBot connection's do. The service keeps reporters in memory only, so
//! after a restart (or a grace expiry) events and heartbeats of an unknown reporter get 409
//! and the reporter sends its full state again. How a bot reported by several sources is
//! combined is [`super::merge`]'s business.
//!
//! A reporter that follows the assignment stream naming itself
//! (`GET /v1/assignments/stream?reporter={name}`) is watched through it as well: the kernel
//! closes a dead process's connections at once, so when every stream of a reporter has closed
//! and none comes back within `streamGrace` (half a second), its bots go offline then, not
//! after `offlineGrace` of silence. A process killed (a crash, an OOM kill, `kill -9`) thus
//! costs its groups well under a second; a stream that reconnects within the grace costs
//! nothing.
//!
//! A reporter also sends how many messages each channel received since its last report
//! (`{"type": "messages", "platform": …, "counts": {channel: n}}`, each message counted once
//! however many of its bots saw it): they go to the channel weights (see `crate::traffic`),
//! not to the fleet.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::merge::SourceId;
use super::{FleetEvent, Origin};
use crate::logs::{SHOWN_CHARS, cut, truncate};
use crate::traffic::Counter;
use crate::yaml::{AtLeast, Seconds};

/// `sources.http`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Settings {
    /// A reporter silent this long is gone and its bots offline.
    pub offline_grace: Seconds<1000>,
    /// A reporter whose assignment streams have all closed, and none came back for this long,
    /// is gone and its bots offline.
    pub stream_grace: Seconds<50>,
    /// How long the first rebalance waits for reporters to send their fleets.
    pub startup_wait: Seconds<0>,
    /// Larger bodies on the `/v1/fleet` routes get 413 (a full state carries every group).
    pub max_body_bytes: AtLeast<1024>,
    /// More bots than this in one reporter's state are refused.
    pub max_bots_per_reporter: AtLeast<1>,
    /// More channels than this for one bot are refused.
    pub max_channels_per_bot: AtLeast<1>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            offline_grace: Seconds::secs(30),
            stream_grace: Seconds::millis(500),
            startup_wait: Seconds::secs(10),
            max_body_bytes: AtLeast(16 << 20),
            max_bots_per_reporter: AtLeast(1000),
            max_channels_per_bot: AtLeast(20_000),
        }
    }
}

/// One bot in a reporter's full state.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BotState {
    pub platform: String,
    pub id: String,
    pub online: bool,
    #[serde(default)]
    pub channels: Vec<String>,
}

/// A reporter's full state (`PUT`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FullState {
    pub bots: Vec<BotState>,
}

/// One event (`POST .../events`).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    Online {
        platform: String,
        id: String,
        channels: Vec<String>,
    },
    Offline {
        platform: String,
        id: String,
    },
    Joined {
        platform: String,
        id: String,
        channel: String,
    },
    Left {
        platform: String,
        id: String,
        channel: String,
    },
    /// Messages per channel since the reporter's last `messages` event.
    Messages {
        platform: String,
        counts: std::collections::BTreeMap<String, u64>,
    },
}

/// More messages than this for one channel in one report are refused: no group sends that
/// many between two reports, and a counter gone wrong must not swamp the weights.
const MAX_MESSAGES_PER_REPORT: u64 = 1_000_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Events {
    pub events: Vec<Event>,
}

/// Why a report was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// Events or a heartbeat from a reporter the service does not know (restarted, or the
    /// grace period ran out): send the full state.
    #[error("unknown reporter {0:?}: send the full state (PUT) first")]
    UnknownReporter(String),
    #[error("{0}")]
    Invalid(String),
    #[error("the service is shutting down")]
    ShuttingDown,
}

/// The reporters the service has heard from.
#[derive(Clone)]
pub struct Reporters {
    inner: Arc<Mutex<HashMap<Arc<str>, Reporter>>>,
    fleet: mpsc::Sender<(SourceId, FleetEvent)>,
    settings: Arc<Settings>,
    traffic: Counter,
}

struct Reporter {
    /// Bots this reporter reports online: (platform, id).
    online: BTreeSet<(String, String)>,
    last_seen: Instant,
    /// Whether it sent its full state (a stream alone makes no reporter of it).
    reported: bool,
    /// Its assignment streams open now.
    streams: usize,
    /// Since when none is open, once one was.
    streams_lost: Option<Instant>,
}

/// An assignment stream a reporter follows: while one is open the reporter is alive; when
/// the last one drops, its grace starts.
pub struct StreamGuard {
    reporters: Reporters,
    name: Arc<str>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut inner = self.reporters.inner.lock();
        let reporter = inner
            .entry(self.name.clone())
            .or_insert_with(|| Reporter::new(Instant::now()));
        reporter.streams = reporter.streams.saturating_sub(1);
        if reporter.streams == 0 {
            reporter.streams_lost = Some(Instant::now());
        }
    }
}

impl Reporter {
    fn new(last_seen: Instant) -> Reporter {
        Reporter {
            online: BTreeSet::new(),
            last_seen,
            reported: false,
            streams: 0,
            streams_lost: None,
        }
    }
}

impl Reporters {
    pub fn new(
        settings: Settings,
        fleet: mpsc::Sender<(SourceId, FleetEvent)>,
        traffic: Counter,
    ) -> Reporters {
        Reporters {
            inner: Arc::default(),
            fleet,
            settings: Arc::new(settings),
            traffic,
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Replaces a reporter's whole state: listed online bots come online with exactly their
    /// channels; bots it reported before and no longer does go offline.
    pub async fn put(&self, name: &str, state: FullState) -> Result<usize, ReportError> {
        self.check_state(&state)?;
        let source = SourceId::Reporter(name.into());
        let now_online: BTreeSet<(String, String)> = state
            .bots
            .iter()
            .filter(|b| b.online)
            .map(|b| (b.platform.clone(), b.id.clone()))
            .collect();
        let gone: Vec<(String, String)> = {
            let mut inner = self.inner.lock();
            let reporter = inner.entry(name.into()).or_insert_with(|| {
                info!("fleet reporter {}: connected", cut(name));
                Reporter::new(Instant::now())
            });
            reporter.last_seen = Instant::now();
            reporter.reported = true;
            let gone = reporter.online.difference(&now_online).cloned().collect();
            reporter.online = now_online;
            gone
        };
        let mut events = Vec::with_capacity(state.bots.len());
        for bot in state.bots {
            events.push(if bot.online {
                FleetEvent::BotOnline {
                    platform: bot.platform,
                    bot: bot.id,
                    channels: bot.channels.into_iter().collect(),
                    origin: Origin::Connection,
                }
            } else {
                offline(bot.platform, bot.id, "reported offline")
            });
        }
        for (platform, id) in gone {
            events.push(offline(platform, id, "no longer reported"));
        }
        let count = events.len();
        self.send(&source, events).await?;
        Ok(count)
    }

    /// Applies events of a known reporter.
    pub async fn events(&self, name: &str, events: Events) -> Result<usize, ReportError> {
        for (i, event) in events.events.iter().enumerate() {
            self.check_event(event)
                .map_err(|e| ReportError::Invalid(format!("events[{i}].{e}")))?;
        }
        let source = SourceId::Reporter(name.into());
        let mut out = Vec::with_capacity(events.events.len());
        {
            let mut inner = self.inner.lock();
            let reporter = inner
                .get_mut(name)
                .filter(|r| r.reported)
                .ok_or_else(|| ReportError::UnknownReporter(cut(name).to_string()))?;
            reporter.last_seen = Instant::now();
            for event in events.events {
                out.push(match event {
                    Event::Messages { platform, counts } => {
                        for (channel, n) in counts {
                            self.traffic.add(&platform, &channel, n);
                        }
                        continue;
                    }
                    Event::Online {
                        platform,
                        id,
                        channels,
                    } => {
                        reporter.online.insert((platform.clone(), id.clone()));
                        FleetEvent::BotOnline {
                            platform,
                            bot: id,
                            channels: channels.into_iter().collect(),
                            origin: Origin::Connection,
                        }
                    }
                    Event::Offline { platform, id } => {
                        reporter.online.remove(&(platform.clone(), id.clone()));
                        offline(platform, id, "reported offline")
                    }
                    Event::Joined {
                        platform,
                        id,
                        channel,
                    } => FleetEvent::ChannelJoined {
                        platform,
                        bot: id,
                        channel,
                    },
                    Event::Left {
                        platform,
                        id,
                        channel,
                    } => FleetEvent::ChannelLeft {
                        platform,
                        bot: id,
                        channel,
                    },
                });
            }
        }
        let count = out.len();
        self.send(&source, out).await?;
        Ok(count)
    }

    /// A known reporter is still there.
    pub fn heartbeat(&self, name: &str) -> Result<(), ReportError> {
        let mut inner = self.inner.lock();
        let reporter = inner
            .get_mut(name)
            .filter(|r| r.reported)
            .ok_or_else(|| ReportError::UnknownReporter(cut(name).to_string()))?;
        reporter.last_seen = Instant::now();
        Ok(())
    }

    /// An assignment stream follows reporter `name` (which may not have reported yet): it is
    /// alive while the stream is open.
    pub fn stream_opened(&self, name: &str) -> StreamGuard {
        let mut inner = self.inner.lock();
        let reporter = inner
            .entry(name.into())
            .or_insert_with(|| Reporter::new(Instant::now()));
        reporter.streams += 1;
        reporter.streams_lost = None;
        StreamGuard {
            reporters: self.clone(),
            name: name.into(),
        }
    }

    /// A reporter stops cleanly: its bots go offline now, not after the grace period.
    pub async fn remove(&self, name: &str, why: &str) -> Result<bool, ReportError> {
        let reporter = {
            let mut inner = self.inner.lock();
            if !inner.get(name).is_some_and(|r| r.reported) {
                // Never reported (a stream alone): nothing to take offline. Its entry goes
                // once no stream is open either.
                if inner.get(name).is_some_and(|r| r.streams == 0) {
                    inner.remove(name);
                }
                return Ok(false);
            }
            let reporter = inner.remove(name).expect("just looked up");
            // A stream still open keeps watching it: it comes back with its next full state.
            if reporter.streams > 0 {
                let mut watched = Reporter::new(Instant::now());
                watched.streams = reporter.streams;
                inner.insert(name.into(), watched);
            }
            reporter
        };
        info!("fleet reporter {}: {why}", cut(name));
        let events = reporter
            .online
            .into_iter()
            .map(|(platform, id)| offline(platform, id, why))
            .collect();
        self.send(&SourceId::Reporter(name.into()), events).await?;
        Ok(true)
    }

    /// Takes reporters offline when they have been silent for longer than `offlineGrace`, or
    /// their streams have all been closed for longer than `streamGrace`, until `shutdown`.
    pub async fn expire(self, shutdown: CancellationToken) {
        let grace = self.settings.offline_grace.get();
        let stream_grace = self.settings.stream_grace.get();
        // Often enough to see a closed stream's grace end within a tenth of it.
        let every = Duration::from_secs(1)
            .min(grace)
            .min(stream_grace / 10)
            .max(Duration::from_millis(10));
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let gone: Vec<(Arc<str>, String)> = {
                let inner = self.inner.lock();
                inner
                    .iter()
                    .filter_map(|(name, r)| {
                        let why = if r.streams_lost.is_some_and(|t| t.elapsed() > stream_grace) {
                            format!(
                                "its assignment stream closed and did not come back within \
                                 {stream_grace:?}; its bots are offline"
                            )
                        } else if r.reported && r.last_seen.elapsed() > grace {
                            format!("silent for more than {grace:?}; its bots are offline")
                        } else {
                            return None;
                        };
                        Some((name.clone(), why))
                    })
                    .collect()
            };
            for (name, why) in gone {
                if self.remove(&name, &why).await.is_err() {
                    return;
                }
            }
        }
    }

    async fn send(&self, source: &SourceId, events: Vec<FleetEvent>) -> Result<(), ReportError> {
        for event in events {
            self.fleet
                .send((source.clone(), event))
                .await
                .map_err(|_| ReportError::ShuttingDown)?;
        }
        Ok(())
    }

    fn check_state(&self, state: &FullState) -> Result<(), ReportError> {
        let max_bots = self.settings.max_bots_per_reporter.get() as usize;
        if state.bots.len() > max_bots {
            return Err(ReportError::Invalid(format!(
                "bots: {} bots, more than maxBotsPerReporter ({max_bots})",
                state.bots.len()
            )));
        }
        let mut seen = BTreeSet::new();
        for (i, bot) in state.bots.iter().enumerate() {
            let at = |e: String| ReportError::Invalid(format!("bots[{i}].{e}"));
            check_id("platform", &bot.platform).map_err(at)?;
            check_id("id", &bot.id).map_err(at)?;
            self.check_channels(&bot.channels).map_err(at)?;
            if !seen.insert((&bot.platform, &bot.id)) {
                return Err(at(format!(
                    "id: bot {}:{} is listed twice",
                    cut(&bot.platform),
                    cut(&bot.id)
                )));
            }
        }
        Ok(())
    }

    fn check_event(&self, event: &Event) -> Result<(), String> {
        let (platform, id) = match event {
            Event::Online {
                platform,
                id,
                channels,
            } => {
                self.check_channels(channels)?;
                (platform, id)
            }
            Event::Offline { platform, id } => (platform, id),
            Event::Messages { platform, counts } => {
                check_id("platform", platform)?;
                for (channel, &n) in counts {
                    check_id(&format!("counts.{channel:?}"), channel)?;
                    if n > MAX_MESSAGES_PER_REPORT {
                        return Err(format!(
                            "counts.{:?}: {n} messages, more than {MAX_MESSAGES_PER_REPORT} in one report",
                            truncate(channel, SHOWN_CHARS)
                        ));
                    }
                }
                return Ok(());
            }
            Event::Joined {
                platform,
                id,
                channel,
            }
            | Event::Left {
                platform,
                id,
                channel,
            } => {
                check_id("channel", channel)?;
                (platform, id)
            }
        };
        check_id("platform", platform)?;
        check_id("id", id)
    }

    fn check_channels(&self, channels: &[String]) -> Result<(), String> {
        let max = self.settings.max_channels_per_bot.get() as usize;
        if channels.len() > max {
            return Err(format!(
                "channels: {} channels, more than maxChannelsPerBot ({max})",
                channels.len()
            ));
        }
        for (i, channel) in channels.iter().enumerate() {
            check_id(&format!("channels[{i}]"), channel)?;
        }
        Ok(())
    }
}

/// Ids are what Koishi stores in `varchar(255)` columns: 1 to 255 bytes, no control
/// characters; a platform has no `:` (keys are `platform:id`).
fn check_id(field: &str, value: &str) -> Result<(), String> {
    let why = if value.is_empty() {
        "is empty"
    } else if value.len() > 255 {
        "is longer than 255 bytes"
    } else if value.chars().any(char::is_control) {
        "has a control character"
    } else if field == "platform" && value.contains(':') {
        "has a ':'"
    } else {
        return Ok(());
    };
    Err(format!("{field}: {:?} {why}", truncate(value, SHOWN_CHARS)))
}

fn offline(platform: String, bot: String, reason: &str) -> FleetEvent {
    FleetEvent::BotOffline {
        platform,
        bot,
        reason: reason.to_owned(),
        origin: Origin::Connection,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reporters() -> (Reporters, mpsc::Receiver<(SourceId, FleetEvent)>) {
        let (tx, rx) = mpsc::channel(64);
        (
            Reporters::new(Settings::default(), tx, Counter::default()),
            rx,
        )
    }

    fn bot(id: &str, online: bool, channels: &[&str]) -> BotState {
        BotState {
            platform: "onebot".into(),
            id: id.into(),
            online,
            channels: channels.iter().map(|c| c.to_string()).collect(),
        }
    }

    fn drain(rx: &mut mpsc::Receiver<(SourceId, FleetEvent)>) -> Vec<FleetEvent> {
        std::iter::from_fn(|| rx.try_recv().ok().map(|(_, e)| e)).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn full_state_then_events_then_silence() {
        let (reporters, mut rx) = reporters();
        let events = Events {
            events: vec![Event::Offline {
                platform: "onebot".into(),
                id: "1".into(),
            }],
        };
        // Events before a full state: the reporter must resend it.
        assert_eq!(
            reporters.events("koishi", events).await,
            Err(ReportError::UnknownReporter("koishi".into()))
        );
        let state = FullState {
            bots: vec![bot("1", true, &["a", "b"]), bot("2", true, &["b"])],
        };
        assert_eq!(reporters.put("koishi", state).await, Ok(2));
        assert_eq!(drain(&mut rx).len(), 2);
        // Bot 2 is no longer listed: it goes offline.
        let state = FullState {
            bots: vec![bot("1", true, &["a"])],
        };
        reporters.put("koishi", state).await.unwrap();
        let events = drain(&mut rx);
        assert!(matches!(&events[1], FleetEvent::BotOffline { bot, .. } if bot == "2"));

        // Silence beyond the grace period takes bot 1 offline and forgets the reporter.
        tokio::spawn(reporters.clone().expire(CancellationToken::new()));
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(drain(&mut rx).is_empty());
        reporters.heartbeat("koishi").unwrap();
        tokio::time::sleep(Duration::from_secs(32)).await;
        let events = drain(&mut rx);
        assert!(
            matches!(&events[..], [FleetEvent::BotOffline { bot, .. }] if bot == "1"),
            "{events:?}"
        );
        assert!(reporters.heartbeat("koishi").is_err());
    }

    #[tokio::test]
    async fn bad_reports_name_what_was_wrong() {
        let (reporters, mut rx) = reporters();
        let state = FullState {
            bots: vec![bot("1", true, &["a"]), bot("1", true, &[""])],
        };
        let e = reporters.put("koishi", state).await.unwrap_err();
        assert_eq!(e.to_string(), r#"bots[1].channels[0]: "" is empty"#);
        let state = FullState {
            bots: vec![bot("1", true, &["a"]), bot("1", false, &[])],
        };
        let e = reporters.put("koishi", state).await.unwrap_err();
        assert_eq!(e.to_string(), "bots[1].id: bot onebot:1 is listed twice");
        let mut bad = bot("1", true, &[]);
        bad.platform = "a:b".into();
        let e = reporters
            .put("koishi", FullState { bots: vec![bad] })
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), r#"bots[0].platform: "a:b" has a ':'"#);
        // Nothing of a refused report reaches the engine.
        assert!(drain(&mut rx).is_empty());
    }
}
