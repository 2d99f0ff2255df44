//! When to rebalance: each event asks for a run after its kind's delay, and every request
//! made before the run starts joins it.
//!
//! The run is due at the *earliest* requested time, so a burst never postpones a run that is
//! already due (50 joins within 10 s → one run, 10 s after the first), and a quiet fleet never
//! waits longer than the shortest delay it asked for. Requests that arrive while a run is in
//! progress simply wait in the engine's queue and form exactly one follow-up run.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

use crate::yaml::Seconds;

/// `triggerDelays`: how long after an event of each kind the rebalance runs (the plugin's
/// table; fractions of a second allowed).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct TriggerDelays {
    pub startup: Seconds<0>,
    pub bot_status: Seconds<0>,
    pub bot_online: Seconds<0>,
    pub bot_offline: Seconds<0>,
    pub channel_joined: Seconds<0>,
    pub channel_left: Seconds<0>,
}

impl Default for TriggerDelays {
    fn default() -> Self {
        Self {
            startup: Seconds::secs(0),
            bot_status: Seconds::secs(5),
            bot_online: Seconds::secs(5),
            bot_offline: Seconds::secs(5),
            channel_joined: Seconds::secs(10),
            channel_left: Seconds::secs(5),
        }
    }
}

/// `balanceCron`: a cron expression, seconds first, as tokio-cron-scheduler reads it; checked
/// when the config is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronExpr(String);

impl CronExpr {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for CronExpr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::yaml::checked_str(d, |text| {
            tokio_cron_scheduler::Job::new(text, |_, _| {})
                .map(|_| CronExpr(text.to_owned()))
                .map_err(|e| format!("invalid cron expression {text:?}: {e}"))
        })
    }
}

/// Why a rebalance runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    Startup,
    Schedule,
    ConfigChanged,
    BotOnline,
    BotOffline,
    BotStatus,
    ChannelJoined,
    ChannelLeft,
    Requested,
    /// This instance took over the leadership.
    Takeover,
    /// An operator pinned, held or released a group, or drained or undrained a bot (or one
    /// of those ended by itself).
    Operator,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Startup => "startup",
            Cause::Schedule => "schedule",
            Cause::ConfigChanged => "config-changed",
            Cause::BotOnline => "bot-online",
            Cause::BotOffline => "bot-offline",
            Cause::BotStatus => "bot-status",
            Cause::ChannelJoined => "channel-joined",
            Cause::ChannelLeft => "channel-left",
            Cause::Requested => "requested",
            Cause::Takeover => "takeover",
            Cause::Operator => "operator",
        }
    }

    /// The configured delay for this cause; the schedule, config edits, admin requests and an
    /// operator's overrides run at once.
    pub fn delay(self, delays: &TriggerDelays) -> Duration {
        match self {
            Cause::Startup => delays.startup.get(),
            Cause::BotOnline => delays.bot_online.get(),
            Cause::BotOffline => delays.bot_offline.get(),
            Cause::BotStatus => delays.bot_status.get(),
            Cause::ChannelJoined => delays.channel_joined.get(),
            Cause::ChannelLeft => delays.channel_left.get(),
            Cause::Schedule
            | Cause::ConfigChanged
            | Cause::Requested
            | Cause::Takeover
            | Cause::Operator => Duration::ZERO,
        }
    }
}

/// The causes of one run, with how many events of each kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Causes(BTreeMap<Cause, usize>);

impl Causes {
    /// Each cause of the run, once.
    pub fn kinds(&self) -> impl Iterator<Item = Cause> + '_ {
        self.0.keys().copied()
    }

    #[cfg(test)]
    fn count(&self, cause: Cause) -> usize {
        self.0.get(&cause).copied().unwrap_or(0)
    }
}

impl fmt::Display for Causes {
    /// `bot-offline, channel-joined ×50`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (cause, n) in &self.0 {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            f.write_str(cause.as_str())?;
            if *n > 1 {
                write!(f, " ×{n}")?;
            }
        }
        Ok(())
    }
}

/// Pending rebalance requests.
#[derive(Debug, Default)]
pub struct Debouncer {
    due: Option<Instant>,
    causes: Causes,
}

impl Debouncer {
    /// Asks for a run `delay` after `now`.
    pub fn request(&mut self, cause: Cause, delay: Duration, now: Instant) {
        let at = now + delay;
        self.due = Some(self.due.map_or(at, |due| due.min(at)));
        *self.causes.0.entry(cause).or_insert(0) += 1;
    }

    /// When the next run is due, if any is pending.
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// Starts the run: returns its causes and clears the requests.
    pub fn take(&mut self) -> Causes {
        self.due = None;
        std::mem::take(&mut self.causes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_coalesces_into_one_run_at_the_earliest_due_time() {
        let mut d = Debouncer::default();
        let start = Instant::now();
        for _ in 0..50 {
            d.request(
                Cause::ChannelJoined,
                Duration::from_secs(10),
                Instant::now(),
            );
            tokio::time::advance(Duration::from_millis(100)).await;
        }
        assert_eq!(d.due(), Some(start + Duration::from_secs(10)));
        d.request(Cause::BotOffline, Duration::from_secs(5), Instant::now());
        assert_eq!(
            d.due(),
            Some(start + Duration::from_secs(10)),
            "never postponed"
        );
        let causes = d.take();
        assert_eq!(causes.count(Cause::ChannelJoined), 50);
        assert_eq!(causes.to_string(), "bot-offline, channel-joined ×50");
        assert_eq!(d.due(), None);
        assert_eq!(d.take(), Causes::default());
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_delay_brings_the_run_forward() {
        let mut d = Debouncer::default();
        let start = Instant::now();
        d.request(Cause::ChannelJoined, Duration::from_secs(10), start);
        d.request(Cause::BotOffline, Duration::from_secs(5), start);
        assert_eq!(d.due(), Some(start + Duration::from_secs(5)));
    }
}
