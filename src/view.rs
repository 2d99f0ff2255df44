//! The assignment as everything outside the engine sees it: who is assigned where, which bots
//! are known and online, which channels are excluded. The engine writes it after every plan
//! and fleet event; the API and the Redis publisher read it. Lookups are O(1), so answering
//! "should this bot handle this message?" needs no database or Redis round trip.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use parking_lot::RwLock;
use rustc_hash::FxHashMap;
use tokio::sync::broadcast;

use crate::model::{canonical_number, split_key};

/// Assignment changes a stream subscriber may fall behind by before it is cut off (and
/// resyncs from a snapshot).
const UPDATES_BUFFERED: usize = 1024;

#[derive(Clone)]
pub struct View {
    inner: Arc<RwLock<State>>,
    /// Every assignment change, numbered: what `GET /v1/assignments/stream` follows.
    updates: broadcast::Sender<Arc<Update>>,
}

impl Default for View {
    fn default() -> Self {
        View {
            inner: Arc::default(),
            updates: broadcast::channel(UPDATES_BUFFERED).0,
        }
    }
}

/// One change of the assignment: version `version` is version `version - 1` with these
/// channels of `platform` given a new assignee (`None`: unassigned).
#[derive(Debug, PartialEq, Eq)]
pub struct Update {
    pub version: u64,
    pub platform: String,
    pub changes: Vec<(String, Option<String>)>,
}

/// Every platform's assignment (channel → bot).
pub type Assignments = BTreeMap<String, BTreeMap<String, String>>;

/// Where a message in a channel goes, by [`View::route`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Excluded by config: nobody handles it by assignment (a stored assignee is reported,
    /// not followed).
    Excluded {
        assignee: Option<Arc<str>>,
    },
    Unassigned,
    /// Assigned to this bot, which is offline now.
    Offline(Arc<str>),
    /// Assigned to this bot, online.
    Online(Arc<str>),
}

#[derive(Default)]
struct State {
    /// Bumped by every [`Update`].
    version: u64,
    platforms: BTreeMap<String, PlatformView>,
    last_run: Option<RunSummary>,
    /// Excluded channels named with their platform (`platform → channels`).
    excluded_full: HashMap<Box<str>, HashSet<Box<str>>>,
    /// Excluded channels named without a platform: excluded on every platform.
    excluded_short: HashSet<Box<str>>,
}

#[derive(Default)]
struct PlatformView {
    /// Channel → bot; a bot's name is one allocation shared by its channels and `loads`.
    assignee: ChannelMap<Arc<str>>,
    loads: FxHashMap<Arc<str>, u32>,
    /// Every bot known (not forgotten), with whether it is online now. Every ingress
    /// decision looks up its sender here, and its group's assignee.
    bots: FxHashMap<Box<str>, bool>,
    /// Counts from the last plan.
    counts: PlatformCounts,
}

/// The last rebalance, for `GET /v1/status`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RunSummary {
    /// Rebalances since the start; this is the `number`-th.
    pub number: u64,
    pub causes: String,
    pub finished_at_ms: i64,
    pub moved_forced: usize,
    pub moved_voluntary: usize,
}

/// A platform's numbers after the last plan, for `GET /v1/status`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PlatformCounts {
    /// Channels the engine keeps in memory (members or an assignee).
    pub channels_known: usize,
    /// Bots the engine keeps in memory (online, or offline and not yet forgotten).
    pub bots_known: usize,
    pub assigned: usize,
    /// Channels with no valid bot.
    pub unassigned: usize,
    pub excluded: usize,
    pub mean: f64,
    pub stddev: f64,
    pub max_load: u32,
}

/// Channel → `V`, keyed as the index keys ids: a canonical decimal number (a QQ group) by
/// its value, any other id by its text. A start-up's first plan sets every channel (367k in
/// the OneBot benchmark): as numbers they take no allocation each, and a look-up reads no
/// text. Hashed with FxHash, as the index hashes the same ids (SipHash stood out in profiles
/// of that start-up).
struct ChannelMap<V> {
    numbers: FxHashMap<u64, V>,
    texts: FxHashMap<Box<str>, V>,
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
    fn get(&self, channel: &str) -> Option<&V> {
        match canonical_number(channel) {
            Some(n) => self.numbers.get(&n),
            None => self.texts.get(channel),
        }
    }

    fn insert(&mut self, channel: &str, value: V) -> Option<V> {
        match canonical_number(channel) {
            Some(n) => self.numbers.insert(n, value),
            None => self.texts.insert(channel.into(), value),
        }
    }

    fn remove(&mut self, channel: &str) -> Option<V> {
        match canonical_number(channel) {
            Some(n) => self.numbers.remove(&n),
            None => self.texts.remove(channel),
        }
    }

    /// Room for `more` channels, taken as numbers (most are).
    fn reserve(&mut self, more: usize) {
        self.numbers.reserve(more);
    }

    /// Every channel with its value, in no order.
    fn iter(&self) -> impl Iterator<Item = (Cow<'_, str>, &V)> {
        let numbers = self
            .numbers
            .iter()
            .map(|(n, v)| (Cow::Owned(n.to_string()), v));
        let texts = self.texts.iter().map(|(c, v)| (Cow::Borrowed(&**c), v));
        numbers.chain(texts)
    }

    /// The channels `keep` refuses, as text. A number is written on the stack to be asked
    /// about, so a mirror of a whole, mostly unchanged assignment allocates only for the few
    /// channels refused.
    fn refused(&self, keep: impl Fn(&str) -> bool) -> Vec<String> {
        let mut text = itoa::Buffer::new();
        let mut refused = Vec::new();
        for &n in self.numbers.keys() {
            let channel = text.format(n);
            if !keep(channel) {
                refused.push(channel.to_owned());
            }
        }
        refused.extend(
            self.texts
                .keys()
                .filter(|c| !keep(c))
                .map(|c| c.to_string()),
        );
        refused
    }
}

impl State {
    fn is_excluded(&self, platform: &str, channel: &str) -> bool {
        self.excluded_short.contains(channel)
            || self
                .excluded_full
                .get(platform)
                .is_some_and(|channels| channels.contains(channel))
    }
}

impl View {
    fn read(&self) -> parking_lot::RwLockReadGuard<'_, State> {
        self.inner.read()
    }

    fn write(&self) -> parking_lot::RwLockWriteGuard<'_, State> {
        self.inner.write()
    }

    /// Records assignee changes (`None`: unassigned).
    pub fn apply<'a>(
        &self,
        platform: &str,
        changes: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) {
        let mut state = self.write();
        // Nobody follows the stream (subscribers take their snapshot under the read lock,
        // so none can arrive before this update is published): the update's copies of the
        // ids are not made, two allocations a row on a start-up's 367k rows.
        let followed = self.updates.receiver_count() > 0;
        let p = state.platforms.entry(platform.to_owned()).or_default();
        let changes = changes.into_iter();
        p.assignee.reserve(changes.size_hint().0);
        let mut update = Vec::new();
        let mut changed = false;
        for (channel, bot) in changes {
            let (old, shared) = match bot {
                Some(bot) => {
                    let shared = match p.loads.get_key_value(bot) {
                        Some((shared, _)) => shared.clone(),
                        None => Arc::from(bot),
                    };
                    (p.assignee.insert(channel, shared.clone()), Some(shared))
                }
                None => (p.assignee.remove(channel), None),
            };
            if old.as_deref() == bot {
                continue;
            }
            if let Some(load) = old.and_then(|old| p.loads.get_mut(&old)) {
                *load = load.saturating_sub(1);
            }
            if let Some(shared) = shared {
                *p.loads.entry(shared).or_insert(0) += 1;
            }
            changed = true;
            if followed {
                update.push((channel.to_owned(), bot.map(str::to_owned)));
            }
        }
        if changed {
            self.publish(&mut state, platform, update);
        }
    }

    /// Replaces a platform's whole assignment.
    pub fn replace<'a>(
        &self,
        platform: &str,
        assignment: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) {
        let assignment: HashMap<&str, &str> = assignment.into_iter().collect();
        let gone: Vec<String> = {
            let state = self.read();
            state.platforms.get(platform).map_or_else(Vec::new, |p| {
                p.assignee.refused(|c| assignment.contains_key(c))
            })
        };
        // The engine is the only writer: nothing changes between the read and the write.
        let changes = gone
            .iter()
            .map(|c| (c.as_str(), None))
            .chain(assignment.iter().map(|(c, b)| (*c, Some(*b))));
        self.apply(platform, changes);
    }

    /// Numbers and sends an update while the state is locked for writing, so a subscriber
    /// that took its snapshot under the read lock sees every later update exactly once.
    fn publish(&self, state: &mut State, platform: &str, changes: Vec<(String, Option<String>)>) {
        state.version += 1;
        // No subscribers is not an error.
        let _ = self.updates.send(Arc::new(Update {
            version: state.version,
            platform: platform.to_owned(),
            changes,
        }));
    }

    /// The whole assignment at some version, and every update after it.
    pub fn subscribe(&self) -> (u64, Assignments, broadcast::Receiver<Arc<Update>>) {
        let state = self.read();
        let receiver = self.updates.subscribe();
        let assignments = state
            .platforms
            .iter()
            .map(|(name, p)| {
                let a = p
                    .assignee
                    .iter()
                    .map(|(c, b)| (c.into_owned(), b.to_string()))
                    .collect();
                (name.clone(), a)
            })
            .collect();
        (state.version, assignments, receiver)
    }

    pub fn set_bot(&self, platform: &str, bot: &str, online: bool) {
        let mut state = self.write();
        let p = state.platforms.entry(platform.to_owned()).or_default();
        p.bots.insert(bot.into(), online);
    }

    pub fn set_last_run(&self, run: RunSummary) {
        self.write().last_run = Some(run);
    }

    pub fn last_run(&self) -> Option<RunSummary> {
        self.read().last_run.clone()
    }

    pub fn set_counts(&self, platform: &str, counts: PlatformCounts) {
        let mut state = self.write();
        state
            .platforms
            .entry(platform.to_owned())
            .or_default()
            .counts = counts;
    }

    pub fn counts(&self, platform: &str) -> PlatformCounts {
        let state = self.read();
        state
            .platforms
            .get(platform)
            .map(|p| p.counts.clone())
            .unwrap_or_default()
    }

    /// Forgets a bot (gone for long); it must hold no channel.
    pub fn forget_bot(&self, platform: &str, bot: &str) {
        let mut state = self.write();
        if let Some(p) = state.platforms.get_mut(platform) {
            p.bots.remove(bot);
            p.loads.remove(bot);
        }
    }

    /// Excluded channel keys, full (`platform:channel`) or short (`channel`).
    pub fn set_exclusions(&self, keys: &[String]) {
        let mut state = self.write();
        state.excluded_full.clear();
        state.excluded_short.clear();
        for key in keys {
            match split_key(key) {
                Some((platform, channel)) => {
                    state
                        .excluded_full
                        .entry(platform.into())
                        .or_default()
                        .insert(channel.into());
                }
                None => {
                    state.excluded_short.insert(key.as_str().into());
                }
            }
        }
    }

    pub fn assignee(&self, platform: &str, channel: &str) -> Option<String> {
        let state = self.read();
        state
            .platforms
            .get(platform)?
            .assignee
            .get(channel)
            .map(|b| b.to_string())
    }

    /// Where a message in `channel` goes: excluded, unassigned, or its assignee and whether
    /// that bot is online. What every ingress decision asks, so: one read of the state and no
    /// allocation (the assignee is the view's own shared name).
    pub fn route(&self, platform: &str, channel: &str) -> Route {
        let state = self.read();
        let p = state.platforms.get(platform);
        let assignee = p.and_then(|p| p.assignee.get(channel)).cloned();
        if state.is_excluded(platform, channel) {
            return Route::Excluded { assignee };
        }
        match assignee {
            None => Route::Unassigned,
            Some(bot) => {
                let online = p.and_then(|p| p.bots.get(&*bot)).copied().unwrap_or(false);
                if online {
                    Route::Online(bot)
                } else {
                    Route::Offline(bot)
                }
            }
        }
    }

    pub fn is_online(&self, platform: &str, bot: &str) -> bool {
        let state = self.read();
        state
            .platforms
            .get(platform)
            .and_then(|p| p.bots.get(bot))
            .copied()
            .unwrap_or(false)
    }

    /// A bot of this fleet (known, online or not).
    pub fn is_fleet_bot(&self, platform: &str, bot: &str) -> bool {
        let state = self.read();
        state
            .platforms
            .get(platform)
            .is_some_and(|p| p.bots.contains_key(bot))
    }

    pub fn is_excluded(&self, platform: &str, channel: &str) -> bool {
        self.read().is_excluded(platform, channel)
    }

    pub fn platforms(&self) -> Vec<String> {
        self.read().platforms.keys().cloned().collect()
    }

    /// A platform's assignment, sorted by channel.
    pub fn assignment(&self, platform: &str) -> Vec<(String, String)> {
        let state = self.read();
        let mut out: Vec<(String, String)> = state
            .platforms
            .get(platform)
            .map(|p| {
                p.assignee
                    .iter()
                    .map(|(c, b)| (c.into_owned(), b.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        out.sort_unstable();
        out
    }

    /// (bot, online, load) for every known bot of a platform, sorted by bot.
    pub fn bots(&self, platform: &str) -> Vec<(String, bool, u32)> {
        let state = self.read();
        let Some(p) = state.platforms.get(platform) else {
            return Vec::new();
        };
        let mut out: Vec<(String, bool, u32)> = p
            .bots
            .iter()
            .map(|(b, &online)| {
                (
                    b.to_string(),
                    online,
                    p.loads.get(&**b).copied().unwrap_or(0),
                )
            })
            .collect();
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_keep_loads_exact() {
        let v = View::default();
        v.set_bot("onebot", "1", true);
        v.set_bot("onebot", "2", false);
        v.apply("onebot", [("a", Some("1")), ("b", Some("1"))]);
        v.apply("onebot", [("a", Some("2")), ("b", None)]);
        assert_eq!(v.assignee("onebot", "a").as_deref(), Some("2"));
        assert_eq!(v.assignee("onebot", "b"), None);
        assert_eq!(
            v.bots("onebot"),
            [("1".into(), true, 0), ("2".into(), false, 1)]
        );
        assert!(v.is_fleet_bot("onebot", "2") && !v.is_online("onebot", "2"));
        v.set_exclusions(&["onebot:x".into(), "y".into()]);
        assert!(
            v.is_excluded("onebot", "x")
                && v.is_excluded("discord", "y")
                && !v.is_excluded("discord", "x")
        );
        assert_eq!(v.route("onebot", "a"), Route::Offline("2".into()));
        assert_eq!(v.route("onebot", "b"), Route::Unassigned);
        assert_eq!(v.route("discord", "a"), Route::Unassigned);
        v.apply("onebot", [("b", Some("1")), ("x", Some("1"))]);
        assert_eq!(v.route("onebot", "b"), Route::Online("1".into()));
        assert_eq!(
            v.route("onebot", "x"),
            Route::Excluded {
                assignee: Some("1".into())
            }
        );
        v.replace("onebot", [("c", "1")]);
        assert_eq!(v.assignment("onebot"), [("c".into(), "1".into())]);
        assert_eq!(v.bots("onebot")[0].2, 1);
    }

    #[test]
    fn channels_keyed_by_number_or_text_are_never_confused() {
        let mut map = ChannelMap::default();
        for (i, channel) in ["7", "007", "a", "18446744073709551615", "100001"]
            .into_iter()
            .enumerate()
        {
            assert_eq!(map.insert(channel, i), None);
        }
        assert_eq!(map.insert("100001", 9), Some(4));
        assert_eq!(
            (map.get("7"), map.get("007"), map.get("07")),
            (Some(&0), Some(&1), None)
        );
        assert_eq!(map.remove("7"), Some(0));
        assert_eq!((map.get("7"), map.get("007")), (None, Some(&1)));
        let mut all: Vec<(String, usize)> = map.iter().map(|(c, &v)| (c.into_owned(), v)).collect();
        all.sort();
        assert_eq!(
            all,
            [
                ("007".into(), 1),
                ("100001".into(), 9),
                ("18446744073709551615".into(), 3),
                ("a".into(), 2)
            ]
        );
        let v = View::default();
        v.set_bot("onebot", "1", true);
        v.apply("onebot", [("100001", Some("1")), ("0100001", Some("1"))]);
        assert_eq!(v.route("onebot", "100001"), Route::Online("1".into()));
        v.replace("onebot", [("0100001", "1")]);
        assert_eq!(v.route("onebot", "100001"), Route::Unassigned);
        assert_eq!(v.assignment("onebot"), [("0100001".into(), "1".into())]);
    }

    #[test]
    fn subscribers_see_every_update_after_their_snapshot_once() {
        let v = View::default();
        v.apply("onebot", [("a", Some("1")), ("b", Some("1"))]);
        let (version, snapshot, mut updates) = v.subscribe();
        assert_eq!(version, 1);
        assert_eq!(snapshot["onebot"].len(), 2);
        // A change to the same bot is no change and no update.
        v.apply("onebot", [("a", Some("1")), ("b", Some("2"))]);
        v.replace("onebot", [("b", "2"), ("c", "1")]);
        let first = updates.try_recv().unwrap();
        assert_eq!(
            (first.version, first.changes.clone()),
            (2, vec![("b".into(), Some("2".into()))])
        );
        let second = updates.try_recv().unwrap();
        let mut changes = second.changes.clone();
        changes.sort();
        assert_eq!(
            (second.version, changes),
            (3, vec![("a".into(), None), ("c".into(), Some("1".into()))])
        );
        assert!(updates.try_recv().is_err());
        // Unfollowed, a change is still numbered (only its copy for the stream is not made)
        // and a change to the same bot is still none.
        drop(updates);
        v.apply("onebot", [("a", Some("2"))]);
        v.apply("onebot", [("a", Some("2"))]);
        let (version, snapshot, _) = v.subscribe();
        assert_eq!(version, 4);
        assert_eq!(snapshot["onebot"]["a"], "2");
        v.set_bot("onebot", "1", true);
        v.set_bot("onebot", "2", true);
        assert_eq!(
            v.bots("onebot"),
            [("1".into(), true, 1), ("2".into(), true, 2)]
        );
    }
}
