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

mod interner;
mod members;

use interner::{Interner, Numbers};
use members::MemberLists;

use crate::model::ChannelIds;
pub use crate::model::{BotIx, ChanIx};
pub use interner::Id;

/// No assignee, in [`PlatformIndex`]'s assignee column (half the size of `Option<BotIx>`).
const UNASSIGNED: BotIx = BotIx::MAX;

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
    members: MemberLists,
    assignee: Vec<BotIx>,
    load: Vec<u32>,
    /// Each channel's weight: its message rate as measured (or as a snapshot gives it), 0 when
    /// unknown. Only `balanceBy: messages` plans with it. Empty until a channel has a weight:
    /// a fleet balanced by channel counts never measures one (40 MB at 10M channels).
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
            bots: Interner::new(Numbers::Written),
            online: Vec::new(),
            bot_channels: Vec::new(),
            channels: Interner::new(Numbers::Implied),
            members: MemberLists::default(),
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
        self.bots.text(bot).expect("bots' ids are written")
    }

    /// A channel's id: its text, or (a number) a value that writes it when read.
    pub fn channel_id(&self, channel: ChanIx) -> Id<'_> {
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
        self.members.get(channel)
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
        self.weight.get(channel as usize).map_or(0.0, |&w| w as f64)
    }

    pub fn set_weight(&mut self, channel: ChanIx, weight: f64) {
        if self.weight.is_empty() {
            if weight == 0.0 {
                return;
            }
            self.weight = vec![0.0; self.channels.len()];
        }
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
        self.members.lens().sum()
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
        self.members.push_channel();
        self.assignee.push(UNASSIGNED);
        if !self.weight.is_empty() {
            self.weight.push(0.0);
        }
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
        let members = self.members.get(channel);
        if members.contains(&bot) {
            return false;
        }
        if members.is_empty() && self.assignee[channel as usize] == UNASSIGNED {
            self.forgettable -= 1;
        }
        self.members.push(channel, bot);
        let list = &mut self.bot_channels[bot as usize];
        if list.len() == list.capacity() {
            // An eighth more, not twice as much: the lists hold every membership again (114 MB
            // at 10M channels), and doubling left a quarter of that unused on average.
            list.reserve_exact((list.len() / 8).max(4));
        }
        list.push(channel);
        self.note_channel(channel);
        true
    }

    /// Removes a membership; O(bot degree + channel degree).
    pub fn leave(&mut self, bot: BotIx, channel: ChanIx) -> bool {
        if !self.members.remove(channel, bot) {
            return false;
        }
        if self.members.get(channel).is_empty() && self.assignee[channel as usize] == UNASSIGNED {
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
        if self.members.get(channel).is_empty() {
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
                .filter(|&c| self.members(c as ChanIx).is_empty() && self.assignee[c] == UNASSIGNED)
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
            .map(|b| !self.online[b] && self.load[b] == 0 && forget(self.bot_id(b as BotIx)))
            .collect();
        let mut fresh = PlatformIndex::new(&self.name);
        let mut bot_map: Vec<Option<BotIx>> = vec![None; self.bots.len()];
        let mut forgotten = Vec::new();
        for (b, id) in self.bots.iter().enumerate() {
            if gone[b] {
                forgotten.push(id.to_string());
                continue;
            }
            let nb = fresh.add_bot(&id);
            fresh.online[nb as usize] = self.online[b];
            bot_map[b] = Some(nb);
        }
        let mut dropped = 0;
        for (c, id) in self.channels.iter().enumerate() {
            let members: Vec<BotIx> = self
                .members(c as ChanIx)
                .iter()
                .filter_map(|&b| bot_map[b as usize])
                .collect();
            let assignee = self.assignee(c as ChanIx).and_then(|b| bot_map[b as usize]);
            if members.is_empty() && assignee.is_none() {
                dropped += 1;
                continue;
            }
            let nc = fresh.add_channel(&id);
            for &b in &members {
                fresh.bot_channels[b as usize].push(nc);
            }
            fresh.members.set(nc, &members);
            fresh.set_weight(nc, self.weight(c as ChanIx));
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
    fn channel_names(p: &PlatformIndex, bot: &str) -> Vec<String> {
        let bot = p.find_bot(bot).unwrap();
        let mut names: Vec<String> = p
            .channels_of(bot)
            .iter()
            .map(|&c| p.channel_id(c).to_owned())
            .collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn numbers_keep_no_text_and_weights_no_column_until_one_is_set() {
        let ids = ["300000001", "abc", "4294967296", "7"];
        let mut p = PlatformIndex::new("onebot");
        p.bot_reported("1", &ids.into_iter().collect());
        let channel = |p: &PlatformIndex, id| p.find_channel(id).unwrap();
        for id in ids {
            assert_eq!(p.channel_id(channel(&p, id)), id);
        }
        // Numbers below 2^32 are kept as numbers; the rest as text.
        let written: Vec<bool> = ids
            .iter()
            .map(|id| p.channels.text(channel(&p, id)).is_some())
            .collect();
        assert_eq!(written, [false, true, true, false]);

        p.set_weight(channel(&p, "7"), 0.0);
        assert!(p.weight.is_empty() && !p.has_weights());
        p.set_weight(channel(&p, "7"), 2.5);
        assert_eq!(p.weight.len(), p.channel_count());
        p.channel_joined("1", "8");
        assert_eq!(p.weight(channel(&p, "8")), 0.0);
        assert_eq!(p.weight.len(), p.channel_count());

        // Compaction keeps ids and weights.
        p.channel_left("1", "abc");
        p.compact(|_| false);
        assert_eq!(p.find_channel("abc"), None);
        assert_eq!(p.weight(channel(&p, "7")), 2.5);
        assert_eq!(
            channel_names(&p, "1"),
            ["300000001", "4294967296", "7", "8"]
        );
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
        let touched: Vec<String> = journal
            .channels
            .iter()
            .map(|&c| p.channel_id(c).to_owned())
            .collect();
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
        let ids: Vec<String> = (0..p.channel_count() as u32)
            .map(|c| p.channel_id(c).to_owned())
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
