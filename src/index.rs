//! The bipartite channel ↔ bot index, one per platform.
//!
//! It replaces the Koishi plugin's four maps (`allChannels`, `botChannels`, `botAssignCount`,
//! `activeBots`) with one structure: ids are interned to dense indices once, so the planner works
//! on integers, and every fleet event costs O(degree) of the bot or channel it touches.
//!
//! Memberships of an offline bot are kept (an offline bot is simply not *active*), so when it
//! returns with a fresh group list only the difference is applied. Every membership or activity
//! change is also written to a small journal, which lets the planner re-plan incrementally
//! instead of rebuilding its state from scratch.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

pub use crate::model::{BotIx, ChanIx};
use crate::model::{ChannelIds, canonical_number};

/// Ids interned to dense indices. The ids share one text buffer and the hash tables hold only
/// indices into it, so an id costs its bytes plus 16–24, with no allocation of its own: a
/// `Box<str>` per id in an `IndexSet` cost some 60 bytes more and a `malloc`, which was most of
/// what reading a 10M-channel snapshot did.
///
/// Most ids are decimal numbers (QQ's users and groups): those are looked up by their value,
/// so a look-up reads one table entry; comparing the text instead read the entry, the id's end
/// and its text, three cache misses on a large fleet (a fifth of the service's start-up CPU).
#[derive(Default)]
struct Interner {
    text: String,
    /// Where each id ends in `text`; it starts where the one before ends.
    ends: Vec<u32>,
    /// Ids that are numbers ([`canonical_number`]) below 2^32, as QQ's groups and users are:
    /// (the number, index). Eight bytes a slot where a `u64` number took sixteen (with its
    /// padding): 134 MB less at 10M channels, whose table has 2^24 slots.
    narrow_numbers: HashTable<(u32, u32)>,
    /// Every other number: (the number, index).
    wide_numbers: HashTable<(u64, u32)>,
    /// Every other id: (index, half of the id's hash, so that growing the table and most
    /// failed comparisons never touch the text).
    table: HashTable<(u32, u32)>,
}

fn interned<'a>(text: &'a str, ends: &[u32], i: u32) -> &'a str {
    let i = i as usize;
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    &text[start..ends[i] as usize]
}

/// Appends an id's text; its index.
fn push(text: &mut String, ends: &mut Vec<u32>, id: &str) -> u32 {
    let next = ends.len() as u32;
    text.push_str(id);
    ends.push(u32::try_from(text.len()).expect("under 4 GiB of ids per platform"));
    next
}

/// The index of number `n` in `table`, and whether it was new (`push_text` then writes its
/// text and gives its index). `hash` is [`number_hash`] of the number as a `u64`.
fn interned_number<N: Copy + Eq + Into<u64>>(
    table: &mut HashTable<(N, u32)>,
    n: N,
    hash: u64,
    push_text: &mut impl FnMut() -> u32,
) -> (u32, bool) {
    match table.entry(hash, |&(m, _)| m == n, |&(m, _)| number_hash(m.into())) {
        Entry::Occupied(e) => (e.get().1, false),
        Entry::Vacant(e) => {
            let next = push_text();
            e.insert((n, next));
            (next, true)
        }
    }
}

fn number_hash(n: u64) -> u64 {
    FxBuildHasher.hash_one(n)
}

/// Half of an id's hash, and the table hash made from it: the table takes its slot from the
/// low bits and its 7-bit tag from the high ones, so both halves carry the same 32 bits.
fn half_hash(id: &str) -> u32 {
    (FxBuildHasher.hash_one(id) >> 32) as u32
}

fn table_hash(half: u32) -> u64 {
    (half as u64) << 32 | half as u64
}

impl Interner {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, i: u32) -> &str {
        interned(&self.text, &self.ends, i)
    }

    fn find(&self, id: &str) -> Option<u32> {
        if let Some(n) = canonical_number(id) {
            let hash = number_hash(n);
            return match u32::try_from(n) {
                Ok(narrow) => self.narrow_numbers.find(hash, |&(m, _)| m == narrow)?.1,
                Err(_) => self.wide_numbers.find(hash, |&(m, _)| m == n)?.1,
            }
            .into();
        }
        let half = half_hash(id);
        self.table
            .find(table_hash(half), |&(i, h)| h == half && self.get(i) == id)
            .map(|&(i, _)| i)
    }

    /// The index of `id`, and whether it was new.
    fn insert(&mut self, id: &str) -> (u32, bool) {
        if let Some(n) = canonical_number(id) {
            return self.insert_number(n);
        }
        let Self {
            text, ends, table, ..
        } = self;
        let half = half_hash(id);
        let entry = table.entry(
            table_hash(half),
            |&(i, h)| h == half && interned(text, ends, i) == id,
            |&(_, h)| table_hash(h),
        );
        match entry {
            Entry::Occupied(e) => (e.get().0, false),
            Entry::Vacant(e) => {
                let next = push(text, ends, id);
                e.insert((next, half));
                (next, true)
            }
        }
    }

    /// The index of the id `n` writes in decimal, and whether it was new: a source's numbers
    /// are interned without text to read (the text is written only for a new id). `n` is below
    /// 10^19, as [`ChannelIds`] keeps its numbers, so that text is canonical.
    fn insert_number(&mut self, n: u64) -> (u32, bool) {
        let Self {
            text,
            ends,
            narrow_numbers,
            wide_numbers,
            ..
        } = self;
        let mut push_text = || push(text, ends, itoa::Buffer::new().format(n));
        let hash = number_hash(n);
        match u32::try_from(n) {
            Ok(narrow) => interned_number(narrow_numbers, narrow, hash, &mut push_text),
            Err(_) => interned_number(wide_numbers, n, hash, &mut push_text),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.ends.len() as u32).map(|i| self.get(i))
    }
}

/// No assignee, in [`PlatformIndex`]'s assignee column (half the size of `Option<BotIx>`).
const UNASSIGNED: BotIx = BotIx::MAX;

/// Member bots of one channel; almost every channel has at most four.
pub type Members = SmallVec<[BotIx; 4]>;
// One per channel: smallvec's `union` layout keeps it at three words (four without it, 80 MB
// more at 10M channels).
const _: () = assert!(std::mem::size_of::<Members>() == 24);

/// All platforms of the fleet.
#[derive(Default)]
pub struct FleetIndex {
    platforms: Vec<PlatformIndex>,
}

impl FleetIndex {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn platforms(&self) -> &[PlatformIndex] {
        &self.platforms
    }

    pub fn platforms_mut(&mut self) -> &mut [PlatformIndex] {
        &mut self.platforms
    }

    pub fn platform(&self, name: &str) -> Option<&PlatformIndex> {
        self.platforms.iter().find(|p| p.name == name)
    }

    /// Where a platform is (or will be, once added) in [`FleetIndex::platforms`].
    pub fn position(&self, name: &str) -> usize {
        self.platforms
            .iter()
            .position(|p| p.name == name)
            .unwrap_or(self.platforms.len())
    }

    pub fn platform_mut(&mut self, name: &str) -> &mut PlatformIndex {
        match self.platforms.iter().position(|p| p.name == name) {
            Some(i) => &mut self.platforms[i],
            None => {
                self.platforms.push(PlatformIndex::new(name));
                self.platforms.last_mut().expect("just pushed")
            }
        }
    }

    /// A bot is online with exactly these channels (its fresh group list).
    pub fn bot_online<S: AsRef<str>>(&mut self, platform: &str, bot: &str, channels: &[S]) {
        self.platform_mut(platform).bot_online(bot, channels)
    }

    pub fn bot_reported(&mut self, platform: &str, bot: &str, channels: &ChannelIds) {
        self.platform_mut(platform).bot_reported(bot, channels)
    }

    pub fn bot_offline(&mut self, platform: &str, bot: &str) {
        self.platform_mut(platform).bot_offline(bot)
    }

    pub fn channel_joined(&mut self, platform: &str, bot: &str, channel: &str) {
        self.platform_mut(platform).channel_joined(bot, channel)
    }

    pub fn channel_left(&mut self, platform: &str, bot: &str, channel: &str) {
        self.platform_mut(platform).channel_left(bot, channel)
    }
}

/// What changed since the planner last looked: channels whose member set changed and bots
/// whose online state changed. `overflow` means too much changed to be worth replaying.
#[derive(Default, Debug, Clone)]
pub struct Journal {
    pub channels: Vec<ChanIx>,
    pub bots: Vec<BotIx>,
    pub overflow: bool,
}

impl Journal {
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty() && self.bots.is_empty() && !self.overflow
    }
}

/// The index of one platform.
pub struct PlatformIndex {
    name: String,
    bots: Interner,
    online: Vec<bool>,
    bot_channels: Vec<Vec<ChanIx>>,
    channels: Interner,
    members: Vec<Members>,
    assignee: Vec<BotIx>,
    load: Vec<u32>,
    /// Each channel's weight: its message rate as measured (or as a snapshot gives it), 0 when
    /// unknown. Only `balanceBy: messages` plans with it.
    weight: Vec<f32>,
    /// Channels nobody is in and nobody is assigned, counted as they change: the engine asks
    /// after every plan, and a scan of every channel cost more than the rest of its work.
    forgettable: usize,
    assignee_version: u64,
    journal: Journal,
}

impl PlatformIndex {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            bots: Interner::default(),
            online: Vec::new(),
            bot_channels: Vec::new(),
            channels: Interner::default(),
            members: Vec::new(),
            assignee: Vec::new(),
            load: Vec::new(),
            weight: Vec::new(),
            forgettable: 0,
            assignee_version: 0,
            journal: Journal::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn bot_count(&self) -> usize {
        self.bots.len()
    }

    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    pub fn bot_id(&self, bot: BotIx) -> &str {
        self.bots.get(bot)
    }

    pub fn channel_id(&self, channel: ChanIx) -> &str {
        self.channels.get(channel)
    }

    pub fn find_bot(&self, id: &str) -> Option<BotIx> {
        self.bots.find(id)
    }

    pub fn find_channel(&self, id: &str) -> Option<ChanIx> {
        self.channels.find(id)
    }

    pub fn is_online(&self, bot: BotIx) -> bool {
        self.online[bot as usize]
    }

    /// Member bots of a channel, online or not, in the order they were first seen.
    pub fn members(&self, channel: ChanIx) -> &[BotIx] {
        &self.members[channel as usize]
    }

    /// Channels a bot is in, online or not.
    pub fn channels_of(&self, bot: BotIx) -> &[ChanIx] {
        &self.bot_channels[bot as usize]
    }

    /// The current (last applied) assignee of a channel.
    pub fn assignee(&self, channel: ChanIx) -> Option<BotIx> {
        Some(self.assignee[channel as usize]).filter(|&b| b != UNASSIGNED)
    }

    /// Number of channels currently assigned to a bot.
    /// The channel's measured weight (0 when nothing was measured).
    pub fn weight(&self, channel: ChanIx) -> f64 {
        self.weight[channel as usize] as f64
    }

    pub fn set_weight(&mut self, channel: ChanIx, weight: f64) {
        self.weight[channel as usize] = weight as f32;
    }

    /// Multiplies every channel's weight by `factor` (a decay).
    pub fn scale_weights(&mut self, factor: f64) {
        let factor = factor as f32;
        for w in &mut self.weight {
            *w *= factor;
        }
    }

    /// Whether any channel has a measured weight.
    pub fn has_weights(&self) -> bool {
        self.weight.iter().any(|&w| w > 0.0)
    }

    pub fn load(&self, bot: BotIx) -> u32 {
        self.load[bot as usize]
    }

    pub fn total_memberships(&self) -> usize {
        self.members.iter().map(|m| m.len()).sum()
    }

    /// Interns a bot (offline until told otherwise).
    pub fn add_bot(&mut self, id: &str) -> BotIx {
        self.try_add_bot(id).unwrap_or_else(|known| known)
    }

    /// Interns a new bot (offline); `Err` with its index if it was known.
    pub fn try_add_bot(&mut self, id: &str) -> Result<BotIx, BotIx> {
        let (ix, new) = self.bots.insert(id);
        if !new {
            return Err(ix);
        }
        self.online.push(false);
        self.bot_channels.push(Vec::new());
        self.load.push(0);
        Ok(ix)
    }

    /// Interns a channel (no members, unassigned until told otherwise).
    pub fn add_channel(&mut self, id: &str) -> ChanIx {
        self.try_add_channel(id).unwrap_or_else(|known| known)
    }

    /// Interns a new channel (no members, unassigned); `Err` with its index if it was known.
    pub fn try_add_channel(&mut self, id: &str) -> Result<ChanIx, ChanIx> {
        let interned = self.channels.insert(id);
        self.channel_interned(interned)
    }

    /// Interns the channel whose id `n` writes in decimal.
    fn add_number_channel(&mut self, n: u64) -> ChanIx {
        let interned = self.channels.insert_number(n);
        self.channel_interned(interned)
            .unwrap_or_else(|known| known)
    }

    /// Makes room for a channel just interned, if new.
    fn channel_interned(&mut self, (ix, new): (u32, bool)) -> Result<ChanIx, ChanIx> {
        if !new {
            return Err(ix);
        }
        self.members.push(Members::new());
        self.assignee.push(UNASSIGNED);
        self.weight.push(0.0);
        self.forgettable += 1;
        Ok(ix)
    }

    pub fn set_online(&mut self, bot: BotIx, online: bool) {
        if self.online[bot as usize] != online {
            self.online[bot as usize] = online;
            self.note_bot(bot);
        }
    }

    /// Adds a membership; O(channel degree).
    pub fn join(&mut self, bot: BotIx, channel: ChanIx) -> bool {
        let members = &mut self.members[channel as usize];
        if members.contains(&bot) {
            return false;
        }
        if members.is_empty() && self.assignee[channel as usize] == UNASSIGNED {
            self.forgettable -= 1;
        }
        members.push(bot);
        self.bot_channels[bot as usize].push(channel);
        self.note_channel(channel);
        true
    }

    /// Removes a membership; O(bot degree + channel degree).
    pub fn leave(&mut self, bot: BotIx, channel: ChanIx) -> bool {
        let members = &mut self.members[channel as usize];
        let Some(pos) = members.iter().position(|&b| b == bot) else {
            return false;
        };
        members.remove(pos);
        if members.is_empty() && self.assignee[channel as usize] == UNASSIGNED {
            self.forgettable += 1;
        }
        let list = &mut self.bot_channels[bot as usize];
        if let Some(pos) = list.iter().position(|&c| c == channel) {
            list.swap_remove(pos);
        }
        self.note_channel(channel);
        true
    }

    /// The bot is online in exactly these channels.
    pub fn bot_online<S: AsRef<str>>(&mut self, bot: &str, channels: &[S]) {
        let fresh = channels
            .iter()
            .map(|c| self.add_channel(c.as_ref()))
            .collect();
        self.online_in(bot, fresh);
    }

    /// The same for a source's report, whose numbers are interned by value.
    pub fn bot_reported(&mut self, bot: &str, channels: &ChannelIds) {
        let mut fresh = Vec::with_capacity(channels.len());
        fresh.extend(
            channels
                .numbers()
                .iter()
                .map(|&n| self.add_number_channel(n)),
        );
        fresh.extend(channels.texts().iter().map(|c| self.add_channel(c)));
        self.online_in(bot, fresh);
    }

    fn online_in(&mut self, bot: &str, mut fresh: Vec<ChanIx>) {
        let bot = self.add_bot(bot);
        fresh.sort_unstable();
        fresh.dedup();
        let mut old = self.bot_channels[bot as usize].clone();
        old.sort_unstable();
        for &c in &old {
            if fresh.binary_search(&c).is_err() {
                self.leave(bot, c);
            }
        }
        for &c in &fresh {
            if old.binary_search(&c).is_err() {
                self.join(bot, c);
            }
        }
        self.set_online(bot, true);
    }

    pub fn bot_offline(&mut self, bot: &str) {
        let bot = self.add_bot(bot);
        self.set_online(bot, false);
    }

    pub fn channel_joined(&mut self, bot: &str, channel: &str) {
        let bot = self.add_bot(bot);
        let channel = self.add_channel(channel);
        self.join(bot, channel);
    }

    pub fn channel_left(&mut self, bot: &str, channel: &str) {
        if let (Some(bot), Some(channel)) = (self.find_bot(bot), self.find_channel(channel)) {
            self.leave(bot, channel);
        }
    }

    /// Records the assignee a plan chose (or the stored one at start-up), keeping loads exact.
    pub fn set_assignee(&mut self, channel: ChanIx, bot: Option<BotIx>) {
        if let Some(old) = self.assignee(channel) {
            self.load[old as usize] -= 1;
        }
        if let Some(new) = bot {
            self.load[new as usize] += 1;
        }
        if self.members[channel as usize].is_empty() {
            match (self.assignee[channel as usize] == UNASSIGNED, bot.is_none()) {
                (true, false) => self.forgettable -= 1,
                (false, true) => self.forgettable += 1,
                _ => {}
            }
        }
        self.assignee[channel as usize] = bot.unwrap_or(UNASSIGNED);
        self.assignee_version += 1;
    }

    /// Bumped by every [`PlatformIndex::set_assignee`]; lets a planner notice assignments it
    /// did not make.
    pub fn assignee_version(&self) -> u64 {
        self.assignee_version
    }

    /// Channels nobody is in and nobody is assigned: kept only because ids are never reused
    /// in place. [`PlatformIndex::compact`] forgets them.
    pub fn forgettable_channels(&self) -> usize {
        debug_assert_eq!(
            self.forgettable,
            (0..self.channels.len())
                .filter(|&c| self.members[c].is_empty() && self.assignee[c] == UNASSIGNED)
                .count()
        );
        self.forgettable
    }

    /// Rebuilds the index without the channels nobody is in or assigned and without the bots
    /// `forget` names (with their memberships; a bot still assigned somewhere, or online, is
    /// kept). Indices change, so the journal overflows: the next plan starts from scratch.
    /// Returns the ids of the bots forgotten and how many channels were.
    pub fn compact(&mut self, forget: impl Fn(&str) -> bool) -> (Vec<String>, usize) {
        let gone: Vec<bool> = (0..self.bots.len())
            .map(|b| !self.online[b] && self.load[b] == 0 && forget(self.bots.get(b as u32)))
            .collect();
        let mut fresh = PlatformIndex::new(&self.name);
        let mut bot_map: Vec<Option<BotIx>> = vec![None; self.bots.len()];
        let mut forgotten = Vec::new();
        for (b, id) in self.bots.iter().enumerate() {
            if gone[b] {
                forgotten.push(id.to_string());
                continue;
            }
            let nb = fresh.add_bot(id);
            fresh.online[nb as usize] = self.online[b];
            bot_map[b] = Some(nb);
        }
        let mut dropped = 0;
        for (c, id) in self.channels.iter().enumerate() {
            let members: Members = self.members[c]
                .iter()
                .filter_map(|&b| bot_map[b as usize])
                .collect();
            let assignee = self.assignee(c as ChanIx).and_then(|b| bot_map[b as usize]);
            if members.is_empty() && assignee.is_none() {
                dropped += 1;
                continue;
            }
            let nc = fresh.add_channel(id);
            for &b in &members {
                fresh.bot_channels[b as usize].push(nc);
            }
            fresh.members[nc as usize] = members;
            fresh.weight[nc as usize] = self.weight[c];
            if let Some(b) = assignee {
                fresh.assignee[nc as usize] = b;
                fresh.load[b as usize] += 1;
            }
        }
        // Every channel kept has a member or an assignee.
        fresh.forgettable = 0;
        fresh.assignee_version = self.assignee_version + 1;
        fresh.journal.overflow = true;
        *self = fresh;
        (forgotten, dropped)
    }

    /// Records that everything may have changed, so the next plan starts from scratch, and
    /// stops recording until the journal is taken: for a bulk load, where a journal would
    /// only cost time and memory.
    pub fn overflow_journal(&mut self) {
        self.journal = Journal {
            overflow: true,
            ..Journal::default()
        };
    }

    /// Hands the journal to the planner and starts a new one.
    pub fn take_journal(&mut self) -> Journal {
        std::mem::take(&mut self.journal)
    }

    fn note_channel(&mut self, channel: ChanIx) {
        if !self.journal.overflow {
            self.journal.channels.push(channel);
            self.check_journal();
        }
    }

    fn note_bot(&mut self, bot: BotIx) {
        if !self.journal.overflow {
            self.journal.bots.push(bot);
            // An activity change touches every channel of the bot.
            let channels = &self.bot_channels[bot as usize];
            self.journal.channels.extend_from_slice(channels);
            self.check_journal();
        }
    }

    /// Past this size a replay costs about as much as a rebuild: stop recording.
    fn check_journal(&mut self) {
        if self.journal.channels.len() > 4096 + self.channels.len() / 2 {
            self.overflow_journal();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_and_other_ids_are_interned_apart_and_never_confused() {
        let ids = [
            "7",
            "007",
            "0",
            "00",
            "-7",
            "+7",
            "7 ",
            "",
            "9999999999999999999",
            "18446744073709551615",
            "99999999999999999999",
            "\u{661}",
            "onebot:7",
            "300000001",
            // Either side of 2^32, where numbers change tables; the wide one's number whose
            // low half is the narrow one's.
            "4294967295",
            "4294967296",
            "4294967297",
            "1",
        ];
        let mut interner = Interner::default();
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(interner.insert(id), (i as u32, true), "{id:?}");
        }
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(interner.insert(id), (i as u32, false), "{id:?}");
            assert_eq!(interner.find(id), Some(i as u32), "{id:?}");
            assert_eq!(interner.get(i as u32), *id);
        }
        assert_eq!(interner.find("07"), None);
        assert_eq!(interner.find("8"), None);
        // A number names the id its decimal text writes, whichever way it came in.
        assert_eq!(interner.insert_number(7), (0, false));
        assert_eq!(interner.insert_number(70), (ids.len() as u32, true));
        assert_eq!(interner.find("70"), Some(ids.len() as u32));
        assert_eq!(interner.get(ids.len() as u32), "70");
    }

    #[test]
    fn a_reported_list_is_the_same_membership_as_its_ids_as_text() {
        let ids = ["300000001", "abc", "007", "42", "300000001"];
        let mut by_text = PlatformIndex::new("onebot");
        by_text.bot_online("1", &ids);
        let mut reported = PlatformIndex::new("onebot");
        reported.bot_reported("1", &ids.into_iter().collect());
        for index in [&by_text, &reported] {
            assert_eq!(channel_names(index, "1"), ["007", "300000001", "42", "abc"]);
            assert!(index.is_online(index.find_bot("1").unwrap()));
        }
        // Back with a shorter list: only the difference changes.
        reported.bot_reported("1", &["42"].into_iter().collect());
        assert_eq!(channel_names(&reported, "1"), ["42"]);
    }

    /// A bot's channels by id, sorted.
    fn channel_names<'a>(p: &'a PlatformIndex, bot: &str) -> Vec<&'a str> {
        let bot = p.find_bot(bot).unwrap();
        let mut names: Vec<&str> = p
            .channels_of(bot)
            .iter()
            .map(|&c| p.channel_id(c))
            .collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn online_with_a_fresh_list_applies_only_the_difference() {
        let mut p = PlatformIndex::new("onebot");
        p.bot_online("1", &["a", "b", "c"]);
        p.take_journal();
        p.bot_online("1", &["b", "c", "d"]);
        assert_eq!(channel_names(&p, "1"), ["b", "c", "d"]);
        let a = p.find_channel("a").unwrap();
        assert!(p.members(a).is_empty());
        let journal = p.take_journal();
        let touched: Vec<&str> = journal.channels.iter().map(|&c| p.channel_id(c)).collect();
        assert_eq!(
            touched,
            ["a", "d"],
            "only changed memberships are journaled"
        );
    }

    #[test]
    fn offline_keeps_memberships_and_journals_every_channel() {
        let mut p = PlatformIndex::new("onebot");
        p.bot_online("1", &["a", "b"]);
        p.take_journal();
        p.bot_offline("1");
        let bot = p.find_bot("1").unwrap();
        assert!(!p.is_online(bot));
        assert_eq!(p.channels_of(bot).len(), 2);
        let journal = p.take_journal();
        assert_eq!(journal.bots, [bot]);
        assert_eq!(journal.channels.len(), 2);
    }

    #[test]
    fn assignee_changes_keep_loads_exact() {
        let mut p = PlatformIndex::new("onebot");
        p.bot_online("1", &["a", "b"]);
        p.bot_online("2", &["a"]);
        let (b1, b2) = (p.find_bot("1").unwrap(), p.find_bot("2").unwrap());
        let a = p.find_channel("a").unwrap();
        p.set_assignee(a, Some(b1));
        p.set_assignee(a, Some(b2));
        assert_eq!((p.load(b1), p.load(b2)), (0, 1));
        p.set_assignee(a, None);
        assert_eq!(p.load(b2), 0);
    }

    #[test]
    fn compaction_forgets_empty_channels_and_gone_bots_only() {
        let mut p = PlatformIndex::new("onebot");
        p.bot_online("1", &["a", "b", "c"]);
        p.bot_online("2", &["b", "d"]);
        p.bot_online("3", &["e"]);
        let e = p.find_channel("e").unwrap();
        p.set_assignee(e, p.find_bot("3"));
        p.bot_online("1", &["a"]); // left b and c: nobody is in c now
        p.bot_offline("2");
        p.bot_offline("3");
        assert_eq!(p.forgettable_channels(), 1);
        let version = p.assignee_version();
        // 2 and 3 are offline; 3 still holds a channel, so only 2 goes, and with it the
        // channels only 2 was in.
        let (bots, channels) = p.compact(|id| id != "1");
        assert_eq!((bots, channels), (vec!["2".to_owned()], 3));
        let ids: Vec<&str> = (0..p.channel_count() as u32)
            .map(|c| p.channel_id(c))
            .collect();
        assert_eq!(ids, ["a", "e"]);
        assert_eq!(p.bot_count(), 2);
        assert!(p.assignee_version() > version);
        assert!(p.take_journal().overflow);
        let e = p.find_channel("e").unwrap();
        assert_eq!(p.assignee(e), p.find_bot("3"));
        assert_eq!(p.load(p.find_bot("3").unwrap()), 1);
        let one = p.find_bot("1").unwrap();
        assert_eq!(p.members(p.find_channel("a").unwrap()), [one]);
        assert_eq!(p.channels_of(one), [p.find_channel("a").unwrap()]);
    }

    /// The count kept as channels change equals a count of every channel (which
    /// `forgettable_channels` also checks in debug builds).
    #[test]
    fn forgettable_channels_are_counted_as_they_change() {
        let mut p = PlatformIndex::new("onebot");
        let a = p.add_channel("a");
        let bot = p.add_bot("1");
        assert_eq!(p.forgettable_channels(), 1);
        assert!(p.join(bot, a));
        assert!(!p.join(bot, a));
        assert_eq!(p.forgettable_channels(), 0);
        p.set_assignee(a, Some(bot));
        assert!(p.leave(bot, a));
        assert!(!p.leave(bot, a));
        assert_eq!(p.forgettable_channels(), 0, "assigned: kept");
        p.set_assignee(a, Some(bot));
        assert_eq!(p.forgettable_channels(), 0);
        p.set_assignee(a, None);
        assert_eq!(p.forgettable_channels(), 1);
        p.set_assignee(a, None);
        assert_eq!(p.forgettable_channels(), 1);
        p.bot_online("1", &["a", "b"]);
        assert_eq!(p.forgettable_channels(), 0);
        p.bot_online("1", &["b"]);
        assert_eq!(p.forgettable_channels(), 1);
        p.compact(|_| false);
        assert_eq!(p.forgettable_channels(), 0);
        assert_eq!(p.channel_count(), 1);
    }

    #[test]
    fn joins_and_leaves_are_idempotent() {
        let mut p = PlatformIndex::new("onebot");
        p.channel_joined("1", "a");
        p.channel_joined("1", "a");
        let a = p.find_channel("a").unwrap();
        assert_eq!(p.members(a).len(), 1);
        p.channel_left("1", "a");
        p.channel_left("1", "a");
        p.channel_left("9", "zz");
        assert!(p.members(a).is_empty());
    }
}
