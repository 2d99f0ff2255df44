//! The file fleet source: a YAML (or JSON) list of bots, watched. An edit becomes the events
//! a live fleet would have produced: a bot coming online (with its channel list), going
//! offline, joining or leaving a channel.
//!
//! ```yaml
//! bots:
//!   - id: 1001            # quoted or not; QQ numbers are ids, not arithmetic
//!     platform: onebot    # default onebot
//!     online: true        # default true
//!     channels: [100001, 100002]
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{FleetEvent, Origin};
use crate::file_watch::FileWatch;
use crate::yaml::FileError;

/// The fleet as a file describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fleet {
    /// (platform, bot) → (online, channels)
    bots: BTreeMap<(String, String), (bool, BTreeSet<String>)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFleet {
    #[serde(default)]
    bots: Vec<RawBot>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBot {
    id: Id,
    #[serde(default = "onebot")]
    platform: String,
    #[serde(default = "yes")]
    online: bool,
    #[serde(default)]
    channels: Vec<Id>,
}

fn onebot() -> String {
    "onebot".to_owned()
}

fn yes() -> bool {
    true
}

/// An id exactly as written: `1001` and `"1001"` are the same id. Something YAML would read as
/// a number in another notation (`0x3E9`, `0b1111101001`, `1e3`, `007`, `+5`) is refused
/// rather than silently turned into a different decimal string: ids are the decimal strings
/// the platform reports.
struct Id(String);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::yaml::checked_str(d, |v| {
            if v.is_empty() {
                return Err("empty id".to_owned());
            }
            if looks_numeric(v) && !is_decimal(v) {
                return Err(format!(
                    "{v:?} is not a decimal id: write ids as the platform reports them (e.g. 1001)"
                ));
            }
            Ok(Id(v.to_owned()))
        })
    }
}

/// Canonical decimal: `0`, `1001`, `-100123` (no sign, leading zero or separator).
fn is_decimal(v: &str) -> bool {
    let digits = v.strip_prefix('-').unwrap_or(v);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
}

/// What YAML might read as a number (the cheap test first, then YAML itself).
fn looks_numeric(v: &str) -> bool {
    let first = v.trim_start_matches(['+', '-']).bytes().next();
    matches!(first, Some(b'0'..=b'9' | b'.'))
        && serde_norway::from_str::<serde_norway::Value>(v).is_ok_and(|n| n.is_number())
}

impl Fleet {
    /// Parses fleet file content (YAML; JSON is YAML too).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Fleet, FileError> {
        let fail = |message: String| FileError::new(path, message);
        let raw: RawFleet = crate::yaml::from_slice(path, bytes)?;
        let mut bots = BTreeMap::new();
        for (i, bot) in raw.bots.into_iter().enumerate() {
            if bot.platform.is_empty() {
                return Err(fail(format!("bots[{i}].platform: empty platform")));
            }
            let channels = bot.channels.into_iter().map(|c| c.0).collect();
            let key = (bot.platform, bot.id.0);
            if bots.insert(key.clone(), (bot.online, channels)).is_some() {
                return Err(fail(format!(
                    "bots[{i}]: bot {}:{} is listed twice",
                    key.0, key.1
                )));
            }
        }
        Ok(Fleet { bots })
    }

    pub fn load(path: &Path) -> Result<(Fleet, Vec<u8>), FileError> {
        let bytes =
            std::fs::read(path).map_err(|e| FileError::new(path, format!("cannot read: {e}")))?;
        Ok((Self::parse(path, &bytes)?, bytes))
    }

    /// The events that turn a fleet described by `self` into one described by `new`.
    pub fn diff(&self, new: &Fleet) -> Vec<FleetEvent> {
        let mut events = Vec::new();
        for ((platform, bot), (online, channels)) in &new.bots {
            let (platform, bot) = (platform.clone(), bot.clone());
            match self.bots.get(&(platform.clone(), bot.clone())) {
                Some((true, old)) if *online => {
                    for channel in old.difference(channels) {
                        events.push(FleetEvent::ChannelLeft {
                            platform: platform.clone(),
                            bot: bot.clone(),
                            channel: channel.clone(),
                        });
                    }
                    for channel in channels.difference(old) {
                        events.push(FleetEvent::ChannelJoined {
                            platform: platform.clone(),
                            bot: bot.clone(),
                            channel: channel.clone(),
                        });
                    }
                }
                Some((true, _)) => events.push(offline(platform, bot)),
                _ if *online => events.push(FleetEvent::BotOnline {
                    platform,
                    bot,
                    channels: channels.iter().cloned().collect(),
                    origin: Origin::Connection,
                }),
                Some((false, _)) => {}
                None => events.push(offline(platform, bot)),
            }
        }
        for ((platform, bot), (online, _)) in &self.bots {
            if *online && !new.bots.contains_key(&(platform.clone(), bot.clone())) {
                events.push(offline(platform.clone(), bot.clone()));
            }
        }
        events
    }
}

fn offline(platform: String, bot: String) -> FleetEvent {
    FleetEvent::BotOffline {
        platform,
        bot,
        reason: "fleet file".to_owned(),
        origin: Origin::Connection,
    }
}

/// Watches the fleet file and sends the events of every valid edit; an invalid edit is
/// reported and ignored (the last good fleet stays in force).
pub async fn watch(
    path: PathBuf,
    mut fleet: Fleet,
    content: Vec<u8>,
    events: mpsc::Sender<FleetEvent>,
    shutdown: CancellationToken,
) {
    let mut watch = match FileWatch::new(&path, Some(content)) {
        Ok(w) => w,
        Err(e) => {
            tracing::error!("{}: cannot watch the fleet file: {e}", path.display());
            return;
        }
    };
    loop {
        let bytes = tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = watch.changed() => changed,
        };
        let bytes = match bytes {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("{}: cannot read the fleet file: {e}", path.display());
                continue;
            }
        };
        match Fleet::parse(&path, &bytes) {
            Ok(new) => {
                let changes = fleet.diff(&new);
                tracing::info!(
                    "{}: fleet file changed: {} event(s)",
                    path.display(),
                    changes.len()
                );
                fleet = new;
                for event in changes {
                    if events.send(event).await.is_err() {
                        return;
                    }
                }
            }
            Err(e) => tracing::error!("{e}; keeping the previous fleet"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ChannelIds;

    fn fleet(yaml: &str) -> Fleet {
        Fleet::parse(Path::new("fleet.yaml"), yaml.as_bytes()).unwrap()
    }

    #[test]
    fn edits_become_the_events_a_live_fleet_would_send() {
        let before = fleet(
            "bots:\n- {id: 1, channels: [a, b]}\n- {id: 2, channels: [a]}\n- {id: 3, online: false}\n",
        );
        let after = fleet(
            "bots:\n- {id: 1, channels: [b, c]}\n- {id: 2, online: false, channels: [a]}\n- {id: 3, channels: [a]}\n- {id: 4, platform: discord}\n",
        );
        let events = before.diff(&after);
        let p = || "onebot".to_owned();
        assert_eq!(
            events,
            [
                FleetEvent::BotOnline {
                    platform: "discord".into(),
                    bot: "4".into(),
                    channels: ChannelIds::default(),
                    origin: Origin::Connection
                },
                FleetEvent::ChannelLeft {
                    platform: p(),
                    bot: "1".into(),
                    channel: "a".into()
                },
                FleetEvent::ChannelJoined {
                    platform: p(),
                    bot: "1".into(),
                    channel: "c".into()
                },
                offline(p(), "2".into()),
                FleetEvent::BotOnline {
                    platform: p(),
                    bot: "3".into(),
                    channels: ["a"].into_iter().collect(),
                    origin: Origin::Connection
                },
            ]
        );
        // A bot removed from the file goes offline.
        let gone = fleet("bots: []");
        assert_eq!(after.diff(&gone).len(), 3);
        assert!(after.diff(&after).is_empty());
    }

    #[test]
    fn errors_name_the_file_and_entry() {
        let err = |yaml: &str| {
            Fleet::parse(Path::new("fleet.yaml"), yaml.as_bytes())
                .unwrap_err()
                .to_string()
        };
        let e = err("bots:\n- {id: 1, online: maybe}\n");
        assert!(
            e.starts_with("fleet.yaml: bots[0].online: invalid type"),
            "{e}"
        );
        assert!(err("bots:\n- {id: 1}\n- {id: 1}\n").contains("listed twice"));
        assert!(err("bots:\n- {name: 1}\n").contains("unknown field `name`"));
        assert!(err("bots: [\n").contains("line"));
        for bad in ["0x3E9", "0b1111101001", "1e3", "+5", "0o17"] {
            let e = err(&format!("bots:\n- {{id: 1, channels: [{bad}]}}\n"));
            assert!(
                e.contains("is not a decimal id") && e.contains("line 2"),
                "{bad}: {e}"
            );
        }
        assert!(err("bots:\n- {id: 0x3E9}\n").contains("bots[0].id"));
        assert!(err("").contains("the file is empty"));
        let ok = fleet("bots:\n- {id: 1001, channels: [\"100001\", 100002, -1001234, abc]}\n");
        let events = Fleet::default().diff(&ok);
        assert!(
            matches!(&events[0], FleetEvent::BotOnline { bot, channels, .. }
            if bot == "1001"
                && channels.numbers() == [100001, 100002]
                && channels.texts() == ["-1001234", "abc"])
        );
    }
}
