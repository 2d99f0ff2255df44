//! The fleet snapshot read by `auto-assign plan`: bots, channels, rules and a previous
//! assignment, as one JSON document (format in the README).
//!
//! Parsing is strict: unknown fields, wrong types, duplicate bots or channels and keys without a
//! platform are errors that name the offending entry (`channels[3].bots[1]: ...`). A channel
//! member that is not among `bots` is not an error: it is simply not a *known* bot, so never
//! valid; such entries are reported as warnings.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::io::Read;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

use crate::balance::Rules;
use crate::index::{ChanIx, FleetIndex};
use crate::model::split_key;

/// A snapshot turned into an index (with the previous assignment applied) and rules.
pub struct Snapshot {
    pub index: FleetIndex,
    pub rules: Rules,
    pub warnings: Vec<String>,
    /// Every channel in the snapshot's order: (position of its platform in
    /// `index.platforms()`, channel). The output follows it.
    pub order: Vec<(usize, ChanIx)>,
}

/// What is wrong with a snapshot, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() || self.path == "." {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for SnapshotError {}

fn error(path: impl Into<String>, message: impl Into<String>) -> SnapshotError {
    SnapshotError {
        path: path.into(),
        message: message.into(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    bots: Vec<RawBot>,
    channels: Vec<RawChannel>,
    #[serde(default)]
    enabled_platforms: Vec<String>,
    #[serde(default)]
    priority: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    previous: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChannel {
    id: String,
    bots: Vec<String>,
}

/// A bot: `"platform:id"` (online), or `{id, platform?, online?}`.
struct RawBot {
    id: String,
    platform: Option<String>,
    online: bool,
}

impl<'de> Deserialize<'de> for RawBot {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct BotVisitor;
        impl<'de> Visitor<'de> for BotVisitor {
            type Value = RawBot;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    r#"a bot key like "onebot:1001" or an object {"id", "platform"?, "online"?}"#,
                )
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawBot, E> {
                Ok(RawBot {
                    id: v.to_owned(),
                    platform: None,
                    online: true,
                })
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawBot, A::Error> {
                let (mut id, mut platform, mut online) = (None, None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "id" => id = Some(map.next_value::<String>()?),
                        "platform" => platform = Some(map.next_value::<String>()?),
                        "online" => online = Some(map.next_value::<bool>()?),
                        other => {
                            return Err(de::Error::unknown_field(
                                other,
                                &["id", "platform", "online"],
                            ));
                        }
                    }
                }
                Ok(RawBot {
                    id: id.ok_or_else(|| de::Error::missing_field("id"))?,
                    platform,
                    online: online.unwrap_or(true),
                })
            }
        }
        d.deserialize_any(BotVisitor)
    }
}

/// Reads and validates a snapshot.
pub fn read(reader: impl Read) -> Result<Snapshot, SnapshotError> {
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::new(reader));
    let raw: Raw = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| error(e.path().to_string(), e.inner().to_string()))?;
    de.end().map_err(|e| error("", e.to_string()))?;
    build(raw)
}

fn build(raw: Raw) -> Result<Snapshot, SnapshotError> {
    let mut index = FleetIndex::new();
    let mut warnings = Vec::new();
    let mut seen = HashSet::new();
    for (i, bot) in raw.bots.iter().enumerate() {
        let path = format!("bots[{i}]");
        let (platform, id) = match (split_key(&bot.id), &bot.platform) {
            (Some((p, id)), None) => (p.to_owned(), id.to_owned()),
            (Some((p, id)), Some(given)) if p == given => (p.to_owned(), id.to_owned()),
            (Some((p, _)), Some(given)) => {
                return Err(error(
                    path,
                    format!(
                        "bot \"{}\" is on platform \"{p}\" but \"platform\" says \"{given}\"",
                        bot.id
                    ),
                ));
            }
            (None, Some(given)) if !given.is_empty() && !bot.id.is_empty() => {
                (given.clone(), bot.id.clone())
            }
            _ => {
                return Err(error(
                    path,
                    format!(
                        "cannot tell the platform of bot \"{}\": write \"platform:id\" or set \"platform\"",
                        bot.id
                    ),
                ));
            }
        };
        if !seen.insert((platform.clone(), id.clone())) {
            return Err(error(
                path,
                format!("bot \"{platform}:{id}\" is listed twice"),
            ));
        }
        let p = index.platform_mut(&platform);
        let b = p.add_bot(&id);
        p.set_online(b, bot.online);
    }

    let mut seen = HashSet::new();
    let mut order = Vec::with_capacity(raw.channels.len());
    for (i, channel) in raw.channels.iter().enumerate() {
        let path = format!("channels[{i}]");
        let Some((platform, id)) = split_key(&channel.id) else {
            return Err(error(
                format!("{path}.id"),
                format!(
                    "channel \"{}\" has no platform: write \"platform:id\"",
                    channel.id
                ),
            ));
        };
        if !seen.insert(channel.id.as_str()) {
            return Err(error(
                path,
                format!("channel \"{}\" is listed twice", channel.id),
            ));
        }
        let position = index.position(platform);
        let p = index.platform_mut(platform);
        let c = p.add_channel(id);
        order.push((position, c));
        for (j, member) in channel.bots.iter().enumerate() {
            let bot_id = match split_key(member) {
                Some((bp, bid)) if bp == platform => bid,
                Some((bp, _)) => {
                    return Err(error(
                        format!("{path}.bots[{j}]"),
                        format!(
                            "bot \"{member}\" is on platform \"{bp}\", the channel on \"{platform}\""
                        ),
                    ));
                }
                None => member.as_str(),
            };
            match p.find_bot(bot_id) {
                Some(b) => {
                    if !p.join(b, c) {
                        return Err(error(
                            format!("{path}.bots[{j}]"),
                            format!("bot \"{member}\" is listed twice"),
                        ));
                    }
                }
                None => warnings.push(format!(
                    "{path}.bots[{j}]: bot \"{member}\" is not in \"bots\"; it is never assigned"
                )),
            }
        }
    }

    for (channel_key, bot_key) in &raw.previous {
        let path = format!("previous.\"{channel_key}\"");
        let Some((platform, channel_id)) = split_key(channel_key) else {
            return Err(error(path, "the key must be \"platform:channel\""));
        };
        let bot_id = match split_key(bot_key) {
            Some((bp, bid)) if bp == platform => bid,
            Some(_) => {
                return Err(error(
                    path,
                    format!("bot \"{bot_key}\" is on another platform"),
                ));
            }
            None => bot_key.as_str(),
        };
        let p = index.platform_mut(platform);
        let Some(c) = p.find_channel(channel_id) else {
            warnings.push(format!("{path}: channel is not in \"channels\"; ignored"));
            continue;
        };
        // A previous bot that is not in the fleet any more still counts: its channels must move.
        let b = p.add_bot(bot_id);
        p.set_assignee(c, Some(b));
    }

    for (key, bots) in &raw.priority {
        if key.is_empty() || bots.iter().any(|b| b.is_empty()) {
            return Err(error(
                format!("priority.\"{key}\""),
                "empty channel or bot id",
            ));
        }
    }
    if let Some(i) = raw.exclude.iter().position(|k| k.is_empty()) {
        return Err(error(format!("exclude[{i}]"), "empty channel id"));
    }

    for p in index.platforms_mut() {
        p.take_journal();
    }
    Ok(Snapshot {
        index,
        order,
        rules: Rules {
            enabled_platforms: raw.enabled_platforms,
            priority: raw.priority,
            exclude: raw.exclude,
        },
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(json: &str) -> String {
        match read(json.as_bytes()) {
            Ok(_) => panic!("accepted: {json}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn reads_the_documented_example() {
        let s = read(
            r#"{"bots": ["onebot:1001", {"id": "onebot:1002", "platform": "onebot", "online": false}],
                "enabled_platforms": ["onebot"],
                "channels": [{"id": "onebot:g1", "bots": ["onebot:1001", "onebot:1002"]}],
                "priority": {"onebot:g1": ["onebot:1002", "onebot:1001"]},
                "exclude": ["onebot:g7"],
                "previous": {"onebot:g1": "onebot:1001"}}"#
                .as_bytes(),
        )
        .unwrap();
        let p = s.index.platform("onebot").unwrap();
        let (b1, b2) = (p.find_bot("1001").unwrap(), p.find_bot("1002").unwrap());
        assert!(p.is_online(b1) && !p.is_online(b2));
        let g1 = p.find_channel("g1").unwrap();
        assert_eq!(p.members(g1), [b1, b2]);
        assert_eq!(p.assignee(g1), Some(b1));
        assert_eq!(s.rules.exclude, ["onebot:g7"]);
        assert!(s.warnings.is_empty());
    }

    #[test]
    fn errors_name_the_offending_entry() {
        assert!(err(r#"{"channels": []}"#).contains("missing field `bots`"));
        assert!(
            err(r#"{"bots": [], "channels": [], "extra": 1}"#).contains("unknown field `extra`")
        );
        let e = err(r#"{"bots": ["onebot:1", 5], "channels": []}"#);
        assert!(e.starts_with("bots[1]: invalid type: integer `5`"), "{e}");
        let e = err(r#"{"bots": ["1001"], "channels": []}"#);
        assert!(e.starts_with("bots[0]: cannot tell the platform"), "{e}");
        let e =
            err(r#"{"bots": ["onebot:1"], "channels": [{"id": "onebot:g", "bots": "onebot:1"}]}"#);
        assert!(e.starts_with("channels[0].bots: invalid type"), "{e}");
        let e = err(r#"{"bots": ["onebot:1"], "channels": [{"id": "g", "bots": []}]}"#);
        assert!(
            e.starts_with("channels[0].id: channel \"g\" has no platform"),
            "{e}"
        );
        let e = err(r#"{"bots": ["onebot:1", "onebot:1"], "channels": []}"#);
        assert!(e.contains("listed twice"), "{e}");
        let e = err(
            r#"{"bots": ["onebot:1"], "channels": [{"id": "onebot:g", "bots": ["discord:1"]}]}"#,
        );
        assert!(
            e.starts_with("channels[0].bots[0]: bot \"discord:1\" is on platform"),
            "{e}"
        );
        assert!(err(r#"{"bots": [], "channels": []} {}"#).contains("trailing characters"));
        let e = err(r#"{"bots": [{"id": "onebot:1", "online": "yes"}], "channels": []}"#);
        assert!(e.starts_with("bots[0]"), "{e}");
    }

    #[test]
    fn unknown_members_are_warnings_not_errors() {
        let s = read(
            r#"{"bots": ["onebot:1"], "channels": [{"id": "onebot:g", "bots": ["2", "1"]}]}"#
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(s.warnings.len(), 1);
        assert!(s.warnings[0].starts_with("channels[0].bots[0]"));
    }
}
