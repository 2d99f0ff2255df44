//! The tables a decision reads without a lock (see the parent module's doc): per platform, a
//! channel → assignee map and a bot table of atomics, and the excluded channels.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::model::canonical_number;

/// What decisions read (see the module doc). Cloning it shares every table.
#[derive(Clone, Default)]
pub(super) struct Routes {
    pub(super) platforms: FxHashMap<Box<str>, Tables>,
    pub(super) excluded: Arc<Exclusions>,
    /// Channels an operator holds with no assignee (full keys only).
    pub(super) held: Arc<Exclusions>,
    /// The channels the leader announced as moving (full keys only).
    pub(super) moving: Arc<Exclusions>,
    /// The channels just given a new assignee whose messages it claims too, and until when:
    /// `platform → channel → deadline`.
    pub(super) just_moved: Arc<Deadlines>,
}

/// `platform → channel → deadline`.
pub(super) type Deadlines = HashMap<Box<str>, HashMap<Box<str>, std::time::Instant>>;

#[derive(Default)]
pub(super) struct Exclusions {
    /// Excluded channels named with their platform (`platform → channels`).
    pub(super) full: HashMap<Box<str>, HashSet<Box<str>>>,
    /// Excluded channels named without a platform: excluded on every platform.
    pub(super) short: HashSet<Box<str>>,
}

/// One platform's channel and bot tables. Cloning it shares them.
#[derive(Clone, Default)]
pub(super) struct Tables {
    pub(super) channels: Arc<Channels>,
    pub(super) bots: Arc<Bots>,
}

/// Channel → assignee.
#[derive(Default)]
pub(super) struct Channels {
    /// Channel → its slot in `assignee`.
    pub(super) slots: ChannelMap<u32>,
    /// Slot → [`encode`]d number of the channel's assignee in the [`Bots`].
    pub(super) assignee: Vec<AtomicU32>,
}

/// The bots a platform's channels or fleet name, numbered: a table that only grows, has one
/// writer, and is read without a lock. The writer fills a bot's entry and then an index slot
/// that points to it, so a reader that finds a number (here or in a channel table) finds the
/// entry filled. Half full, it is copied into one twice the size, which is published: a new bot
/// costs O(1) amortised (a copy per new bot made 20,000 bots joining one by one take 4.3 s).
#[derive(Default)]
pub(super) struct Bots {
    /// Open addressing by the name's hash, probed linearly: a bot's number plus one; 0 empty.
    pub(super) index: Box<[AtomicU32]>,
    /// Number → bot; the first `len` are filled, in order.
    pub(super) entries: Box<[OnceLock<Bot>]>,
    /// The writer's count of filled entries.
    pub(super) len: AtomicU32,
}

pub(super) struct Bot {
    pub(super) name: Arc<str>,
    /// A [`Presence`].
    pub(super) presence: AtomicU8,
    /// Channels assigned to it.
    pub(super) load: AtomicU32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Presence {
    /// Not a bot of the fleet: only named as an assignee, or forgotten.
    Outside = 0,
    Offline = 1,
    Online = 2,
}

/// A number in a channel table that the bot table loaded with it does not have yet: the
/// reader loaded its tables before that bot appeared.
pub(super) struct Stale;

/// A published channel table has no slot for the channel: it goes into a grown copy.
pub(super) struct NoSlot;

/// A slot's value: a bot's number plus one, 0 for none.
pub(super) fn encode(bot: Option<u32>) -> u32 {
    bot.map_or(0, |n| n + 1)
}

pub(super) fn decode(slot: u32) -> Option<u32> {
    slot.checked_sub(1)
}

/// Channel → `V`, keyed as the index keys ids: a canonical decimal number (a QQ group) by
/// its value, any other id by its text. A start-up's first plan sets every channel (367k in
/// the OneBot benchmark): as numbers they take no allocation each, and a look-up reads no
/// text. Hashed with FxHash, as the index hashes the same ids (SipHash stood out in profiles
/// of that start-up).
pub(super) struct ChannelMap<V> {
    pub(super) numbers: FxHashMap<u64, V>,
    pub(super) texts: FxHashMap<Box<str>, V>,
}

impl<V> Default for ChannelMap<V> {
    fn default() -> Self {
        ChannelMap {
            numbers: FxHashMap::default(),
            texts: FxHashMap::default(),
        }
    }
}

impl<V> ChannelMap<V> {
    pub(super) fn get(&self, channel: &str) -> Option<&V> {
        match canonical_number(channel) {
            Some(n) => self.numbers.get(&n),
            None => self.texts.get(channel),
        }
    }

    pub(super) fn insert(&mut self, channel: &str, value: V) -> Option<V> {
        match canonical_number(channel) {
            Some(n) => self.numbers.insert(n, value),
            None => self.texts.insert(channel.into(), value),
        }
    }

    /// Every channel with its value, in no order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (Cow<'_, str>, &V)> {
        let numbers = self
            .numbers
            .iter()
            .map(|(n, v)| (Cow::Owned(n.to_string()), v));
        let texts = self.texts.iter().map(|(c, v)| (Cow::Borrowed(&**c), v));
        numbers.chain(texts)
    }

    /// The channels for which `map` gives a value, with it, and room for `more` channels
    /// (taken as numbers: most are). The numbers are copied as numbers, not as text.
    pub(super) fn filter_map<W>(
        &self,
        more: usize,
        mut map: impl FnMut(&V) -> Option<W>,
    ) -> ChannelMap<W> {
        let mut out = ChannelMap::default();
        out.numbers.reserve(self.numbers.len() + more);
        out.numbers
            .extend(self.numbers.iter().filter_map(|(&n, v)| Some((n, map(v)?))));
        out.texts.extend(
            self.texts
                .iter()
                .filter_map(|(c, v)| Some((c.clone(), map(v)?))),
        );
        out
    }

    /// The channels `keep` refuses, as text. A number is written on the stack to be asked
    /// about, so a mirror of a whole, mostly unchanged assignment allocates only for the few
    /// channels refused.
    pub(super) fn refused(&self, keep: impl Fn(&str, &V) -> bool) -> Vec<String> {
        let mut text = itoa::Buffer::new();
        let mut refused = Vec::new();
        for (&n, v) in &self.numbers {
            let channel = text.format(n);
            if !keep(channel, v) {
                refused.push(channel.to_owned());
            }
        }
        refused.extend(
            self.texts
                .iter()
                .filter(|(c, v)| !keep(c, v))
                .map(|(c, _)| c.to_string()),
        );
        refused
    }
}

impl Exclusions {
    pub(super) fn contains(&self, platform: &str, channel: &str) -> bool {
        self.short.contains(channel)
            || self
                .full
                .get(platform)
                .is_some_and(|channels| channels.contains(channel))
    }
}

impl Routes {
    /// The bot assigned `channel`, if any.
    pub(super) fn assignee(&self, platform: &str, channel: &str) -> Result<Option<&Bot>, Stale> {
        let Some(tables) = self.platforms.get(platform) else {
            return Ok(None);
        };
        match tables.channels.get(channel) {
            None => Ok(None),
            Some(n) => tables.bots.entry(n).map(Some).ok_or(Stale),
        }
    }

    pub(super) fn bot(&self, platform: &str, bot: &str) -> Option<&Bot> {
        self.platforms.get(platform)?.bots.get(bot)
    }
}

impl Tables {
    /// These tables without the bots that are unused (outside the fleet, assigned nothing),
    /// renumbered, and without the channels that are unassigned.
    pub(super) fn compacted(&self) -> Tables {
        let live = self.bots.iter().filter(|b| !b.unused()).count();
        let bots = Bots::with_capacity(live);
        let mut renumbered = vec![0; self.bots.len()];
        for (bot, new) in self.bots.iter().zip(&mut renumbered) {
            if !bot.unused() {
                *new = bots.push(bot.copy()).expect("room for the live bots");
            }
        }
        let channels = self.channels.copy(0, |n| renumbered[n as usize]);
        Tables {
            channels: Arc::new(channels),
            bots: Arc::new(bots),
        }
    }
}

impl Channels {
    /// The number of `channel`'s assignee.
    pub(super) fn get(&self, channel: &str) -> Option<u32> {
        let slot = *self.slots.get(channel)?;
        decode(self.assignee[slot as usize].load(Ordering::Acquire))
    }

    /// Sets a channel of a published table in place, returning its previous assignee.
    pub(super) fn swap(&self, channel: &str, bot: Option<u32>) -> Result<Option<u32>, NoSlot> {
        match self.slots.get(channel) {
            Some(&slot) => Ok(decode(
                self.assignee[slot as usize].swap(encode(bot), Ordering::AcqRel),
            )),
            None if bot.is_none() => Ok(None),
            None => Err(NoSlot),
        }
    }

    /// Sets a channel of a table not published yet, returning its previous assignee.
    pub(super) fn set(&mut self, channel: &str, bot: Option<u32>) -> Option<u32> {
        match self.slots.get(channel) {
            Some(&slot) => decode(std::mem::replace(
                self.assignee[slot as usize].get_mut(),
                encode(bot),
            )),
            None => {
                if bot.is_some() {
                    let slot = u32::try_from(self.assignee.len()).expect("under 2^32 channels");
                    self.slots.insert(channel, slot);
                    self.assignee.push(AtomicU32::new(encode(bot)));
                }
                None
            }
        }
    }

    /// A copy of the assigned channels, their assignees' numbers mapped by `renumber`, with
    /// room for `more`: to grow or renumber and then publish.
    pub(super) fn copy(&self, more: usize, renumber: impl Fn(u32) -> u32) -> Channels {
        let mut assignee = Vec::with_capacity(self.assignee.len() + more);
        let slots = self.slots.filter_map(more, |&slot| {
            let bot = decode(self.assignee[slot as usize].load(Ordering::Relaxed))?;
            assignee.push(AtomicU32::new(encode(Some(renumber(bot)))));
            Some(assignee.len() as u32 - 1)
        });
        Channels { slots, assignee }
    }

    /// Every assigned channel with its assignee's number, in no order.
    pub(super) fn assigned(&self) -> impl Iterator<Item = (Cow<'_, str>, u32)> {
        self.slots.iter().filter_map(|(channel, &slot)| {
            let bot = decode(self.assignee[slot as usize].load(Ordering::Acquire))?;
            Some((channel, bot))
        })
    }
}

impl Bots {
    /// Room for `bots` before a copy is needed.
    pub(super) fn with_capacity(bots: usize) -> Bots {
        let bots = bots.max(8);
        Bots {
            index: (0..2 * bots.next_power_of_two())
                .map(|_| AtomicU32::new(0))
                .collect(),
            entries: (0..bots.next_power_of_two())
                .map(|_| OnceLock::new())
                .collect(),
            len: AtomicU32::new(0),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed) as usize
    }

    /// The filled entries, by number.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Bot> {
        self.entries.iter().map_while(OnceLock::get)
    }

    pub(super) fn entry(&self, number: u32) -> Option<&Bot> {
        self.entries.get(number as usize)?.get()
    }

    /// The index slots to probe for `name`, in order.
    pub(super) fn probe(&self, name: &str) -> impl Iterator<Item = &AtomicU32> {
        let start = FxBuildHasher.hash_one(name) as usize;
        let mask = self.index.len().wrapping_sub(1);
        (0..self.index.len()).map(move |i| &self.index[(start + i) & mask])
    }

    pub(super) fn number(&self, name: &str) -> Option<u32> {
        for slot in self.probe(name) {
            let number = decode(slot.load(Ordering::Acquire))?;
            if self.entry(number).is_some_and(|b| *b.name == *name) {
                return Some(number);
            }
        }
        None
    }

    pub(super) fn get(&self, name: &str) -> Option<&Bot> {
        self.entry(self.number(name)?)
    }

    /// The bot of a number this table gave (a writer's, or a reader's under the state lock).
    pub(super) fn numbered(&self, number: u32) -> &Bot {
        self.entry(number).expect("a number this table gave")
    }

    /// Numbers a new bot in place (the writer's), or `None` when the table is half full.
    pub(super) fn push(&self, bot: Bot) -> Option<u32> {
        let number = self.len.load(Ordering::Relaxed);
        if 2 * (number as usize + 1) > self.index.len() {
            return None;
        }
        let slot = self
            .probe(&bot.name)
            .find(|slot| slot.load(Ordering::Relaxed) == 0)
            .expect("an empty slot in a table at most half full");
        self.entries[number as usize]
            .set(bot)
            .unwrap_or_else(|_| unreachable!("entry {number} filled twice"));
        self.len.store(number + 1, Ordering::Relaxed);
        slot.store(encode(Some(number)), Ordering::Release);
        Some(number)
    }

    /// A copy twice the size, to publish.
    pub(super) fn grown(&self) -> Bots {
        let grown = Bots::with_capacity(2 * self.len());
        for bot in self.iter() {
            grown
                .push(bot.copy())
                .expect("room in a table twice the size");
        }
        grown
    }
}

impl Bot {
    pub(super) fn new(name: &str) -> Bot {
        Bot {
            name: name.into(),
            presence: AtomicU8::new(Presence::Outside as u8),
            load: AtomicU32::new(0),
        }
    }

    pub(super) fn copy(&self) -> Bot {
        Bot {
            name: self.name.clone(),
            presence: AtomicU8::new(self.presence.load(Ordering::Relaxed)),
            load: AtomicU32::new(self.load.load(Ordering::Relaxed)),
        }
    }

    pub(super) fn presence(&self) -> Presence {
        match self.presence.load(Ordering::Relaxed) {
            2 => Presence::Online,
            1 => Presence::Offline,
            _ => Presence::Outside,
        }
    }

    pub(super) fn set_presence(&self, presence: Presence) {
        self.presence.store(presence as u8, Ordering::Relaxed);
    }

    pub(super) fn load(&self) -> u32 {
        self.load.load(Ordering::Relaxed)
    }

    /// Nothing refers to it but its number: forgotten, or never in the fleet, and assigned
    /// nothing.
    pub(super) fn unused(&self) -> bool {
        self.presence() == Presence::Outside && self.load() == 0
    }
}
