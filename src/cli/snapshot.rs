//! The fleet snapshot read by `auto-assign plan`: bots, channels, rules and a previous
//! assignment, as one JSON document (format in docs/algorithms.md).
//!
//! Parsing is strict: unknown fields, wrong types, duplicate bots or channels and keys without a
//! platform are errors that name the offending entry (`channels[3].bots[1]: ...`). A channel
//! member that is not among `bots` is not an error: it is simply not a *known* bot, so never
//! valid; such entries are reported as warnings.
//!
//! Reading goes at the speed of the bytes: the document is parsed from one slice, strings are
//! borrowed from it and copied once, into the index, and bots, channels and the previous
//! assignment go into the index as they are parsed, with no document in between. Error paths
//! are only put together when there is an error. A document listing `channels` before `bots`
//! (or `previous` before `channels`) is read too: those entries wait, borrowed, until what they
//! refer to is known.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt::{self, Write as _};

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use smallvec::SmallVec;

use crate::balance::Rules;
use crate::index::{ChanIx, FleetIndex, PlatformIndex};
use crate::model::split_key;
use crate::yaml::Quantity;

/// Warnings kept word for word; past this many only their number is.
pub const SHOWN_WARNINGS: usize = 20;

/// A snapshot turned into an index (with the previous assignment applied) and rules.
pub struct Snapshot {
    pub index: FleetIndex,
    pub rules: Rules,
    /// The first [`SHOWN_WARNINGS`] warnings.
    pub warnings: Vec<String>,
    /// How many more there were.
    pub more_warnings: usize,
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

/// Reads and validates a snapshot.
pub fn read(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    // One check of the whole input (almost always valid UTF-8) lets the parser skip checking
    // every string again; invalid input is parsed as bytes, so the error names the string and
    // its line and column as before.
    match std::str::from_utf8(bytes) {
        Ok(text) => parse(serde_json::Deserializer::from_str(text)),
        Err(_) => parse(serde_json::Deserializer::from_slice(bytes)),
    }
}

fn parse<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
) -> Result<Snapshot, SnapshotError> {
    let trail = Trail::default();
    let mut builder = Builder::default();
    let top = Top(Ctx {
        b: &mut builder,
        trail: &trail,
    });
    match top.deserialize(&mut de).and_then(|()| de.end()) {
        Ok(()) => builder.finish(),
        Err(e) => Err(builder
            .failed
            .take()
            .unwrap_or_else(|| error(trail.path(), e.to_string()))),
    }
}

/// A JSON string, borrowed from the input unless it had escapes.
struct Text<'de>(Cow<'de, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(TextVisitor)
    }
}

type Texts<'de> = SmallVec<[Text<'de>; 4]>;

/// One step of the path to an error.
enum Seg {
    Index(usize),
    Key(String),
}

/// Where parsing failed, noted while the error unwinds (innermost first), so the success
/// path costs nothing.
#[derive(Default)]
struct Trail(RefCell<Vec<Seg>>);

impl Trail {
    /// `result`, noting `seg` if it failed.
    fn at<T, E>(&self, seg: impl FnOnce() -> Seg, result: Result<T, E>) -> Result<T, E> {
        if result.is_err() {
            self.0.borrow_mut().push(seg());
        }
        result
    }

    /// The path as `channels[3].bots[1]`.
    fn path(&self) -> String {
        let mut path = String::new();
        for seg in self.0.borrow().iter().rev() {
            match seg {
                Seg::Index(i) => {
                    let _ = write!(path, "[{i}]");
                }
                Seg::Key(k) => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(k);
                }
            }
        }
        path
    }
}

/// Runs `next` for element 0, 1, ... of a list until it returns `None`, noting the index of
/// the element that failed.
fn each<E>(trail: &Trail, mut next: impl FnMut(usize) -> Result<Option<()>, E>) -> Result<(), E> {
    for i in 0.. {
        if trail.at(|| Seg::Index(i), next(i))?.is_none() {
            break;
        }
    }
    Ok(())
}

/// A bot: `"platform:id"` (online), or `{id, platform?, online?}`.
struct RawBot<'de> {
    id: Text<'de>,
    platform: Option<Text<'de>>,
    online: bool,
    capacity: Option<f64>,
}

struct BotSeed<'t>(&'t Trail);

impl<'de> DeserializeSeed<'de> for BotSeed<'_> {
    type Value = RawBot<'de>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<RawBot<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BotSeed<'_> {
    type Value = RawBot<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(
            r#"a bot key like "onebot:1001" or an object {"id", "platform"?, "online"?, "capacity"?}"#,
        )
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<RawBot<'de>, E> {
        Ok(RawBot {
            id: Text(Cow::Borrowed(v)),
            platform: None,
            online: true,
            capacity: None,
        })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawBot<'de>, E> {
        Ok(RawBot {
            id: Text(Cow::Owned(v.to_owned())),
            platform: None,
            online: true,
            capacity: None,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawBot<'de>, A::Error> {
        const FIELDS: &[&str] = &["id", "platform", "online", "capacity"];
        let (mut id, mut platform, mut online, mut capacity) = (None, None, None, None);
        while let Some(key) = map.next_key::<Text<'de>>()? {
            let field = || Seg::Key(key.to_string());
            match &*key {
                "id" => id = Some(self.0.at(field, map.next_value())?),
                "platform" => platform = Some(self.0.at(field, map.next_value())?),
                "online" => online = Some(self.0.at(field, map.next_value())?),
                "capacity" => {
                    capacity = Some(self.0.at(field, map.next_value::<Quantity>())?.get())
                }
                other => {
                    return self
                        .0
                        .at(field, Err(de::Error::unknown_field(other, FIELDS)));
                }
            }
        }
        Ok(RawBot {
            id: id.ok_or_else(|| de::Error::missing_field("id"))?,
            platform,
            online: online.unwrap_or(true),
            capacity,
        })
    }
}

/// A list of strings.
struct TextsSeed<'t>(&'t Trail);

impl<'de> DeserializeSeed<'de> for TextsSeed<'_> {
    type Value = Texts<'de>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Texts<'de>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for TextsSeed<'_> {
    type Value = Texts<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Texts<'de>, A::Error> {
        let mut texts = Texts::new();
        each(self.0, |_| {
            Ok(seq.next_element::<Text<'de>>()?.map(|t| texts.push(t)))
        })?;
        Ok(texts)
    }
}

/// A channel: `{"id", "bots", "weight"?}`.
struct ChannelSeed<'t>(&'t Trail);

impl<'de> DeserializeSeed<'de> for ChannelSeed<'_> {
    type Value = RawChannel<'de>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

/// A channel as parsed: id, members, weight (0 when not given: the floor, 1, applies).
type RawChannel<'de> = (Text<'de>, Texts<'de>, f64);

impl<'de> Visitor<'de> for ChannelSeed<'_> {
    type Value = RawChannel<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(r#"a channel {"id", "bots", "weight"?}"#)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        const FIELDS: &[&str] = &["id", "bots", "weight"];
        let (mut id, mut bots, mut weight) = (None, None, None);
        while let Some(key) = map.next_key::<Text<'de>>()? {
            let field = || Seg::Key(key.to_string());
            match &*key {
                "id" if id.is_some() => return Err(de::Error::duplicate_field("id")),
                "bots" if bots.is_some() => return Err(de::Error::duplicate_field("bots")),
                "id" => id = Some(self.0.at(field, map.next_value())?),
                "bots" => bots = Some(self.0.at(field, map.next_value_seed(TextsSeed(self.0)))?),
                "weight" if weight.is_some() => {
                    return Err(de::Error::duplicate_field("weight"));
                }
                "weight" => weight = Some(self.0.at(field, map.next_value::<Quantity>())?.get()),
                other => {
                    return self
                        .0
                        .at(field, Err(de::Error::unknown_field(other, FIELDS)));
                }
            }
        }
        Ok((
            id.ok_or_else(|| de::Error::missing_field("id"))?,
            bots.ok_or_else(|| de::Error::missing_field("bots"))?,
            weight.unwrap_or(0.0),
        ))
    }
}

/// What the visitors of the streamed parts share: the snapshot being built, and the trail.
struct Ctx<'a, 'de> {
    b: &'a mut Builder<'de>,
    trail: &'a Trail,
}

/// The document.
struct Top<'a, 'de>(Ctx<'a, 'de>);

impl<'de> DeserializeSeed<'de> for Top<'_, 'de> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Top<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(r#"a snapshot {"bots", "channels", ...}"#)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        const FIELDS: &[&str] = &[
            "bots",
            "channels",
            "enabled_platforms",
            "priority",
            "exclude",
            "previous",
        ];
        let Ctx { b, trail } = self.0;
        let mut seen = [false; FIELDS.len()];
        while let Some(key) = map.next_key::<Text<'de>>()? {
            let Some(field) = FIELDS.iter().position(|f| *f == &*key) else {
                return trail.at(
                    || Seg::Key(key.to_string()),
                    Err(de::Error::unknown_field(&key, FIELDS)),
                );
            };
            if std::mem::replace(&mut seen[field], true) {
                return Err(de::Error::duplicate_field(FIELDS[field]));
            }
            let ctx = Ctx { b: &mut *b, trail };
            let parsed = match FIELDS[field] {
                "bots" => map.next_value_seed(Bots(ctx)),
                "channels" => map.next_value_seed(Channels(ctx)),
                "previous" => map.next_value_seed(Previous(ctx)),
                "priority" => map.next_value_seed(Priority(ctx)),
                "enabled_platforms" => map.next_value_seed(TextsSeed(trail)).map(|list| {
                    b.rules.enabled_platforms = list.iter().map(|p| p.to_string()).collect();
                }),
                _ => map
                    .next_value_seed(TextsSeed(trail))
                    .and_then(|list| b.check(|b| b.exclude(&list))),
            };
            trail.at(|| Seg::Key(FIELDS[field].to_owned()), parsed)?;
            match FIELDS[field] {
                "bots" => b.bots_known = true,
                "channels" => b.channels_listed = true,
                _ => {}
            }
            b.check(Builder::catch_up)?;
        }
        for required in ["bots", "channels"] {
            if !seen[FIELDS.iter().position(|f| *f == required).expect("a field")] {
                return Err(de::Error::missing_field(required));
            }
        }
        Ok(())
    }
}

/// `bots`, indexed as they come.
struct Bots<'a, 'de>(Ctx<'a, 'de>);

impl<'de> DeserializeSeed<'de> for Bots<'_, 'de> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Bots<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Ctx { b, trail } = self.0;
        each(trail, |i| {
            let Some(bot) = seq.next_element_seed(BotSeed(trail))? else {
                return Ok(None);
            };
            b.check(|b| b.bot(i, bot)).map(Some)
        })
    }
}

/// `channels`, indexed as they come once the bots are known.
struct Channels<'a, 'de>(Ctx<'a, 'de>);

impl<'de> DeserializeSeed<'de> for Channels<'_, 'de> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Channels<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Ctx { b, trail } = self.0;
        each(trail, |i| {
            let Some((id, members, weight)) = seq.next_element_seed(ChannelSeed(trail))? else {
                return Ok(None);
            };
            if b.bots_known {
                b.check(|b| b.channel(i, &id, &members, weight))?;
            } else {
                b.waiting_channels.push((id, members, weight));
            }
            Ok(Some(()))
        })
    }
}

/// `previous`, applied as it comes once the channels are indexed.
struct Previous<'a, 'de>(Ctx<'a, 'de>);

impl<'de> DeserializeSeed<'de> for Previous<'_, 'de> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Previous<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Ctx { b, trail } = self.0;
        while let Some(channel) = map.next_key::<Text<'de>>()? {
            let bot: Text = trail.at(|| Seg::Key(channel.to_string()), map.next_value())?;
            if b.channels_indexed() {
                b.check(|b| b.previous(&channel, &bot))?;
            } else {
                b.waiting_previous.push((channel, bot));
            }
        }
        Ok(())
    }
}

/// `priority`.
struct Priority<'a, 'de>(Ctx<'a, 'de>);

impl<'de> DeserializeSeed<'de> for Priority<'_, 'de> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Priority<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Ctx { b, trail } = self.0;
        while let Some(channel) = map.next_key::<Text<'de>>()? {
            let bots = trail.at(
                || Seg::Key(channel.to_string()),
                map.next_value_seed(TextsSeed(trail)),
            )?;
            b.check(|b| b.priority(&channel, &bots))?;
        }
        Ok(())
    }
}

/// The snapshot as it is read.
#[derive(Default)]
struct Builder<'de> {
    index: FleetIndex,
    rules: Rules,
    order: Vec<(usize, ChanIx)>,
    warnings: Vec<String>,
    more_warnings: usize,
    /// The first error found in what parsed well; the parse stops there.
    failed: Option<SnapshotError>,
    /// `bots` is read: channels can be indexed.
    bots_known: bool,
    /// `channels` is read (possibly not indexed yet).
    channels_listed: bool,
    /// Channels listed before `bots`, and the previous assignment listed before the channels.
    waiting_channels: Vec<RawChannel<'de>>,
    waiting_previous: Vec<(Text<'de>, Text<'de>)>,
    /// Where in `order` the next channel of `previous` is expected.
    next_previous: usize,
}

impl<'de> Builder<'de> {
    /// Runs a step that may find the snapshot invalid; its error is kept here, and the parse
    /// stops.
    fn check<E: de::Error>(
        &mut self,
        step: impl FnOnce(&mut Self) -> Result<(), SnapshotError>,
    ) -> Result<(), E> {
        step(self).map_err(|e| {
            self.failed = Some(e);
            E::custom("invalid snapshot")
        })
    }

    fn channels_indexed(&self) -> bool {
        self.channels_listed && self.bots_known && self.waiting_channels.is_empty()
    }

    /// Indexes what waited, once what it refers to is known.
    fn catch_up(&mut self) -> Result<(), SnapshotError> {
        if self.bots_known && !self.waiting_channels.is_empty() {
            let waiting = std::mem::take(&mut self.waiting_channels);
            for (i, (id, members, weight)) in waiting.iter().enumerate() {
                self.channel(i, id, members, *weight)?;
            }
        }
        if self.channels_indexed() && !self.waiting_previous.is_empty() {
            for (channel, bot) in std::mem::take(&mut self.waiting_previous) {
                self.previous(&channel, &bot)?;
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Snapshot, SnapshotError> {
        self.catch_up()?;
        for p in self.index.platforms_mut() {
            p.take_journal();
        }
        Ok(Snapshot {
            index: self.index,
            rules: self.rules,
            warnings: self.warnings,
            more_warnings: self.more_warnings,
            order: self.order,
        })
    }

    fn warn(&mut self, warning: impl FnOnce() -> String) {
        if self.warnings.len() < SHOWN_WARNINGS {
            self.warnings.push(warning());
        } else {
            self.more_warnings += 1;
        }
    }

    /// A platform's index and its position, created (with its journal off: a bulk load)
    /// when it is new.
    fn platform(&mut self, name: &str) -> (usize, &mut PlatformIndex) {
        let position = self.index.position(name);
        let new = position == self.index.platforms().len();
        let p = self.index.platform_mut(name);
        if new {
            p.overflow_journal();
        }
        (position, p)
    }

    fn bot(&mut self, i: usize, bot: RawBot) -> Result<(), SnapshotError> {
        let path = || format!("bots[{i}]");
        let (platform, id) = match (split_key(&bot.id), bot.platform.as_deref()) {
            (Some((p, id)), None) => (p, id),
            (Some((p, id)), Some(given)) if p == given => (p, id),
            (Some((p, _)), Some(given)) => {
                return Err(error(
                    path(),
                    format!(
                        "bot \"{}\" is on platform \"{p}\" but \"platform\" says \"{given}\"",
                        &*bot.id
                    ),
                ));
            }
            (None, Some(given)) if !given.is_empty() && !bot.id.is_empty() => (given, &*bot.id),
            _ => {
                return Err(error(
                    path(),
                    format!(
                        "cannot tell the platform of bot \"{}\": write \"platform:id\" or set \"platform\"",
                        &*bot.id
                    ),
                ));
            }
        };
        let (_, p) = self.platform(platform);
        let Ok(b) = p.try_add_bot(id) else {
            return Err(error(
                path(),
                format!("bot \"{platform}:{id}\" is listed twice"),
            ));
        };
        p.set_online(b, bot.online);
        if let Some(capacity) = bot.capacity {
            self.rules
                .capacity
                .insert(format!("{platform}:{id}"), capacity);
        }
        Ok(())
    }

    fn channel(
        &mut self,
        i: usize,
        key: &str,
        members: &[Text],
        weight: f64,
    ) -> Result<(), SnapshotError> {
        let Some((platform, id)) = split_key(key) else {
            return Err(error(
                format!("channels[{i}].id"),
                format!("channel \"{key}\" has no platform: write \"platform:id\""),
            ));
        };
        let (position, p) = self.platform(platform);
        let Ok(c) = p.try_add_channel(id) else {
            return Err(error(
                format!("channels[{i}]"),
                format!("channel \"{key}\" is listed twice"),
            ));
        };
        if weight > 0.0 {
            p.set_weight(c, weight);
        }
        self.order.push((position, c));
        for (j, member) in members.iter().enumerate() {
            let p = &mut self.index.platforms_mut()[position];
            // Most members are full keys on the channel's platform: no need to look for the
            // colon (this is what `split_key` gives for them).
            let full = member
                .strip_prefix(platform)
                .and_then(|id| id.strip_prefix(':'))
                .filter(|id| !id.is_empty());
            let bot_id = match full.map_or_else(|| split_key(member), |id| Some((platform, id))) {
                Some((bp, bid)) if bp == platform => bid,
                Some((bp, _)) => {
                    return Err(error(
                        format!("channels[{i}].bots[{j}]"),
                        format!(
                            "bot \"{}\" is on platform \"{bp}\", the channel on \"{platform}\"",
                            &**member
                        ),
                    ));
                }
                None => member,
            };
            match p.find_bot(bot_id) {
                Some(b) if p.join(b, c) => {}
                Some(_) => {
                    return Err(error(
                        format!("channels[{i}].bots[{j}]"),
                        format!("bot \"{}\" is listed twice", &**member),
                    ));
                }
                None => self.warn(|| {
                    format!(
                        "channels[{i}].bots[{j}]: bot \"{}\" is not in \"bots\"; it is never assigned",
                        &**member
                    )
                }),
            }
        }
        Ok(())
    }

    fn previous(&mut self, channel_key: &str, bot_key: &str) -> Result<(), SnapshotError> {
        let path = || format!("previous.\"{channel_key}\"");
        let Some((platform, channel_id)) = split_key(channel_key) else {
            return Err(error(path(), "the key must be \"platform:channel\""));
        };
        let bot_id = match split_key(bot_key) {
            Some((bp, bid)) if bp == platform => bid,
            Some(_) => {
                return Err(error(
                    path(),
                    format!("bot \"{bot_key}\" is on another platform"),
                ));
            }
            None => bot_key,
        };
        let position = self.index.position(platform);
        let channel = match self.hinted_channel(position, channel_id) {
            Some(c) => Some((&mut self.index.platforms_mut()[position], c)),
            None => self.index.platforms_mut().get_mut(position).and_then(|p| {
                let c = p.find_channel(channel_id)?;
                Some((p, c))
            }),
        };
        let Some((p, c)) = channel else {
            self.warn(|| format!("{}: channel is not in \"channels\"; ignored", path()));
            return Ok(());
        };
        // A previous bot that is not in the fleet any more still counts: its channels must move.
        let b = p.add_bot(bot_id);
        p.set_assignee(c, Some(b));
        Ok(())
    }

    /// A previous assignment usually lists its channels in the snapshot's order (a plan's own
    /// output does), so the next few channels in that order are tried before the hash table,
    /// whose look-ups miss the cache at a million channels.
    fn hinted_channel(&mut self, position: usize, id: &str) -> Option<ChanIx> {
        let platforms = self.index.platforms();
        let ahead = self.order.get(self.next_previous..)?.iter().take(8);
        let (skipped, &(_, c)) = ahead
            .enumerate()
            .find(|&(_, &(pos, c))| pos == position && platforms[pos].channel_id(c) == id)?;
        self.next_previous += skipped + 1;
        Some(c)
    }

    fn priority(&mut self, key: &str, bots: &[Text]) -> Result<(), SnapshotError> {
        if key.is_empty() || bots.iter().any(|b| b.is_empty()) {
            return Err(error(
                format!("priority.\"{key}\""),
                "empty channel or bot id",
            ));
        }
        self.rules
            .priority
            .insert(key.to_owned(), bots.iter().map(|b| b.to_string()).collect());
        Ok(())
    }

    fn exclude(&mut self, keys: &[Text]) -> Result<(), SnapshotError> {
        if let Some(i) = keys.iter().position(|k| k.is_empty()) {
            return Err(error(format!("exclude[{i}]"), "empty channel id"));
        }
        self.rules.exclude = keys.iter().map(|k| k.to_string()).collect();
        Ok(())
    }
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

    /// What a snapshot says, independent of index numbering: bots with online state, members
    /// and assignee per channel, in snapshot order.
    fn facts(s: &Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        for p in s.index.platforms() {
            for b in 0..p.bot_count() as u32 {
                out.push(format!(
                    "bot {}:{} {}",
                    p.name(),
                    p.bot_id(b),
                    p.is_online(b)
                ));
            }
        }
        for &(position, c) in &s.order {
            let p = &s.index.platforms()[position];
            let members: Vec<&str> = p.members(c).iter().map(|&b| p.bot_id(b)).collect();
            let assignee = p.assignee(c).map(|b| p.bot_id(b));
            out.push(format!(
                "{}:{} {members:?} {assignee:?}",
                p.name(),
                p.channel_id(c)
            ));
        }
        out
    }

    #[test]
    fn any_field_order_reads_the_same() {
        let bots = r#""bots": ["onebot:1", {"id": "2", "platform": "onebot", "online": false}]"#;
        let channels = r#""channels": [{"bots": ["1", "onebot:2"], "id": "onebot:a"},
                                      {"id": "onebot:b", "bots": ["onebot:2"]}]"#;
        let previous = r#""previous": {"onebot:b": "2", "onebot:a": "onebot:9"}"#;
        let read_in = |parts: [&str; 3]| read(format!("{{{}}}", parts.join(",")).as_bytes());
        let expected = facts(&read_in([bots, channels, previous]).unwrap());
        assert!(expected.contains(&r#"onebot:a ["1", "2"] Some("9")"#.to_owned()));
        for parts in [
            [channels, bots, previous],
            [previous, channels, bots],
            [previous, bots, channels],
        ] {
            assert_eq!(facts(&read_in(parts).unwrap()), expected, "{parts:?}");
        }
        // Errors keep their paths when the entries had to wait.
        let e = err(r#"{"channels": [{"id": "onebot:a", "bots": ["discord:1"]}], "bots": []}"#);
        assert!(
            e.starts_with("channels[0].bots[0]: bot \"discord:1\""),
            "{e}"
        );
    }

    #[test]
    fn escaped_strings_are_read_and_misplaced_fields_named() {
        let s = read(
            r#"{"bots": ["onebot:\u0031"], "channels": [{"id": "onebot:\"q\"", "bots": ["1"]}]}"#
                .as_bytes(),
        )
        .unwrap();
        let p = s.index.platform("onebot").unwrap();
        let c = p.find_channel("\"q\"").unwrap();
        assert_eq!(p.members(c), [p.find_bot("1").unwrap()]);

        let e =
            err(r#"{"bots": [], "channels": [{"id": "onebot:a", "id": "onebot:b", "bots": []}]}"#);
        assert!(e.starts_with("channels[0]: duplicate field `id`"), "{e}");
        let e = err(r#"{"bots": [], "bots": [], "channels": []}"#);
        assert!(e.starts_with("duplicate field `bots`"), "{e}");
        let e = err(r#"{"bots": [], "channels": [], "previous": {"onebot:a": 1}}"#);
        assert!(
            e.starts_with("previous.onebot:a: invalid type: integer `1`"),
            "{e}"
        );
        let e = err(r#"{"bots": [], "channels": [], "priority": {"a": ["1", 2]}}"#);
        assert!(
            e.starts_with("priority.a[1]: invalid type: integer `2`"),
            "{e}"
        );
        let e = err(r#"{"bots": [{"platform": "onebot"}], "channels": []}"#);
        assert!(e.starts_with("bots[0]: missing field `id`"), "{e}");
        let e = err(r#"{"bots": [], "channels": [{"id": "onebot:a"}]}"#);
        assert!(e.starts_with("channels[0]: missing field `bots`"), "{e}");
        let e = err(r#"{"bots": [], "channels": [], "exclude": ["a", ""]}"#);
        assert!(e.starts_with("exclude[1]: empty channel id"), "{e}");
    }

    #[test]
    fn warnings_past_the_first_few_are_counted() {
        let members: Vec<String> = (0..SHOWN_WARNINGS + 5)
            .map(|i| format!("\"x{i}\""))
            .collect();
        let json = format!(
            r#"{{"bots": ["onebot:1"], "channels": [{{"id": "onebot:g", "bots": [{}]}}]}}"#,
            members.join(", ")
        );
        let s = read(json.as_bytes()).unwrap();
        assert_eq!((s.warnings.len(), s.more_warnings), (SHOWN_WARNINGS, 5));
    }
}
