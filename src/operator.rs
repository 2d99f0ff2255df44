//! An operator's overrides, made at runtime: **pins** (a group held on one bot, or on none at
//! all) and **drains** (an account emptied of every group another bot can take). Each has an
//! optional end (`until`), a note, when it was made and by which credential.
//!
//! They outrank the config's rules and balance, but never silence a group: a pin to a bot
//! that is not valid (offline, quarantined, gone from the group) waits, and the plan serves the
//! group meanwhile; a drained bot keeps the groups no other valid bot can take. The planner
//! reads them through [`crate::balance::Rules`]; the store keeps them and an audit record of
//! every change; the engine applies them at once and ends them when their time comes.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

/// What a pin holds a group on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PinTarget {
    /// This bot, while it is valid in the group.
    Bot(String),
    /// No bot: the group has no assignee on purpose (Koishi's `assign -r`).
    Hold,
}

impl PinTarget {
    pub fn bot(&self) -> Option<&str> {
        match self {
            PinTarget::Bot(bot) => Some(bot),
            PinTarget::Hold => None,
        }
    }
}

/// Who made a change, when, why, and until when it lasts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Made {
    /// Milliseconds since the epoch.
    pub at_ms: i64,
    /// The credential that made it (a token's name and role, or `anonymous` when the API has
    /// no token).
    pub by: String,
    pub note: Option<String>,
    /// When it ends by itself (milliseconds since the epoch).
    pub until_ms: Option<i64>,
}

/// A group held on one bot, or on none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    pub platform: String,
    pub channel: String,
    pub target: PinTarget,
    pub made: Made,
}

/// An account emptied of every group another valid bot can take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drain {
    pub platform: String,
    pub bot: String,
    pub made: Made,
}

/// The overrides in force, keyed by (platform, channel) and (platform, bot).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    pins: BTreeMap<(String, String), Pin>,
    drains: BTreeMap<(String, String), Drain>,
}

impl Overrides {
    pub fn new(pins: Vec<Pin>, drains: Vec<Drain>) -> Overrides {
        let mut out = Overrides::default();
        for pin in pins {
            out.pin(pin);
        }
        for drain in drains {
            out.drain(drain);
        }
        out
    }

    pub fn pins(&self) -> impl Iterator<Item = &Pin> {
        self.pins.values()
    }

    pub fn drains(&self) -> impl Iterator<Item = &Drain> {
        self.drains.values()
    }

    pub fn pin_of(&self, platform: &str, channel: &str) -> Option<&Pin> {
        self.pins.get(&(platform.to_owned(), channel.to_owned()))
    }

    /// Sets a pin; returns the one it replaced.
    pub fn pin(&mut self, pin: Pin) -> Option<Pin> {
        self.pins
            .insert((pin.platform.clone(), pin.channel.clone()), pin)
    }

    pub fn unpin(&mut self, platform: &str, channel: &str) -> Option<Pin> {
        self.pins.remove(&(platform.to_owned(), channel.to_owned()))
    }

    /// Sets a drain; returns the one it replaced.
    pub fn drain(&mut self, drain: Drain) -> Option<Drain> {
        self.drains
            .insert((drain.platform.clone(), drain.bot.clone()), drain)
    }

    pub fn undrain(&mut self, platform: &str, bot: &str) -> Option<Drain> {
        self.drains.remove(&(platform.to_owned(), bot.to_owned()))
    }

    /// The earliest `until` of all, if any.
    pub fn next_end(&self) -> Option<i64> {
        let pins = self.pins.values().map(|p| &p.made);
        let drains = self.drains.values().map(|d| &d.made);
        pins.chain(drains).filter_map(|m| m.until_ms).min()
    }

    /// Removes and returns every override whose `until` is at or before `now_ms`.
    pub fn expire(&mut self, now_ms: i64) -> (Vec<Pin>, Vec<Drain>) {
        let over = |m: &Made| m.until_ms.is_some_and(|until| until <= now_ms);
        let pins: Vec<Pin> = self
            .pins
            .values()
            .filter(|p| over(&p.made))
            .cloned()
            .collect();
        for p in &pins {
            self.pins.remove(&(p.platform.clone(), p.channel.clone()));
        }
        let drains: Vec<Drain> = self
            .drains
            .values()
            .filter(|d| over(&d.made))
            .cloned()
            .collect();
        for d in &drains {
            self.drains.remove(&(d.platform.clone(), d.bot.clone()));
        }
        (pins, drains)
    }

    /// The pins as the planner's rules read them: `platform:channel` → the bot, or `None` to
    /// hold the group with no assignee.
    pub fn pin_rules(&self) -> BTreeMap<String, Option<String>> {
        self.pins
            .values()
            .map(|p| {
                (
                    format!("{}:{}", p.platform, p.channel),
                    p.target.bot().map(str::to_owned),
                )
            })
            .collect()
    }

    /// The drained bots as the planner's rules read them: `platform:bot`.
    pub fn drain_rules(&self) -> std::collections::BTreeSet<String> {
        self.drains
            .values()
            .map(|d| format!("{}:{}", d.platform, d.bot))
            .collect()
    }
}

/// `until`, as an operator writes it: an RFC 3339 time (`2026-12-24T18:00:00+08:00`) or a
/// duration from now (`2h`, `90m`, `1d 12h`, as humantime reads it). Milliseconds since the
/// epoch; an end already past is refused.
pub fn parse_until(text: &str, now_ms: i64) -> Result<i64, String> {
    let text = text.trim();
    let until = match chrono::DateTime::parse_from_rfc3339(text) {
        Ok(time) => time.timestamp_millis(),
        Err(_) => {
            let duration: Duration = humantime::parse_duration(text).map_err(|e| {
                format!(
                    "{text:?} is neither an RFC 3339 time (2026-12-24T18:00:00+08:00) nor a \
                     duration (2h, 90m, 1d): {e}"
                )
            })?;
            let ms = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
            now_ms.saturating_add(ms)
        }
    };
    if until <= now_ms {
        return Err(format!("{text:?} is already past"));
    }
    Ok(until)
}

/// Milliseconds since the epoch as RFC 3339 in UTC, to the second.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| ms.to_string())
}

/// A pin or a drain as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Shown {
    pub platform: String,
    /// The group (pins) or the bot (drains).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The pinned bot (`null` for a hold), or the drained bot.
    pub bot: Option<String>,
    pub until: Option<String>,
    pub note: Option<String>,
    pub at: String,
    pub by: String,
}

impl From<&Pin> for Shown {
    fn from(p: &Pin) -> Shown {
        Shown {
            platform: p.platform.clone(),
            channel: Some(p.channel.clone()),
            bot: p.target.bot().map(str::to_owned),
            until: p.made.until_ms.map(rfc3339),
            note: p.made.note.clone(),
            at: rfc3339(p.made.at_ms),
            by: p.made.by.clone(),
        }
    }
}

impl From<&Drain> for Shown {
    fn from(d: &Drain) -> Shown {
        Shown {
            platform: d.platform.clone(),
            channel: None,
            bot: Some(d.bot.clone()),
            until: d.made.until_ms.map(rfc3339),
            note: d.made.note.clone(),
            at: rfc3339(d.made.at_ms),
            by: d.made.by.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn made(until_ms: Option<i64>) -> Made {
        Made {
            at_ms: NOW,
            by: "test".into(),
            note: None,
            until_ms,
        }
    }

    #[test]
    fn until_takes_times_and_durations() {
        assert_eq!(parse_until("2h", NOW), Ok(NOW + 7_200_000));
        assert_eq!(parse_until("1d 12h", NOW), Ok(NOW + 129_600_000));
        assert_eq!(parse_until("90m", NOW), Ok(NOW + 5_400_000));
        let at = parse_until("2027-03-01T16:00:00+08:00", NOW).unwrap();
        assert_eq!(rfc3339(at), "2027-03-01T08:00:00Z");
        let past = parse_until("2020-01-01T00:00:00Z", NOW).unwrap_err();
        assert!(past.contains("already past"), "{past}");
        let wrong = parse_until("tomorrow", NOW).unwrap_err();
        assert!(
            wrong.contains("RFC 3339") && wrong.contains("tomorrow"),
            "{wrong}"
        );
    }

    #[test]
    fn expiry_removes_only_what_is_over() {
        let mut o = Overrides::default();
        let pin = |c: &str, until| Pin {
            platform: "onebot".into(),
            channel: c.into(),
            target: PinTarget::Bot("1".into()),
            made: made(until),
        };
        o.pin(pin("a", Some(NOW + 10)));
        o.pin(pin("b", None));
        o.drain(Drain {
            platform: "onebot".into(),
            bot: "2".into(),
            made: made(Some(NOW + 5)),
        });
        assert_eq!(o.next_end(), Some(NOW + 5));
        let (pins, drains) = o.expire(NOW + 5);
        assert!(pins.is_empty());
        assert_eq!(drains.len(), 1);
        assert_eq!(o.next_end(), Some(NOW + 10));
        let (pins, _) = o.expire(NOW + 10);
        assert_eq!(pins[0].channel, "a");
        assert_eq!(o.next_end(), None);
        assert_eq!(
            o.pin_rules(),
            BTreeMap::from([("onebot:b".to_owned(), Some("1".to_owned()))])
        );
    }
}
