//! The assignment as everything outside the engine sees it: who is assigned where, which bots
//! are known and online, which channels are excluded. The engine writes it after every plan
//! and fleet event; the API and the Redis publisher read it. Lookups are O(1), so answering
//! "should this bot handle this message?" needs no database or Redis round trip.
//!
//! That question is asked about every group message by every bot, also while the engine
//! writes a start-up's 367k assignments, so what it reads takes no lock: [`Routes`], tables
//! published through an `ArcSwap` and immutable but for atomics (a channel's assignee, as the
//! bot's number; a bot's presence and load; the bot table's free room). A change that touches
//! only channels and bots the tables have (a plan's moves, a bot going on- or offline) is
//! stored into those atomics in place, and so is a new bot while its table has room; new
//! channels (a first plan) and a full bot table go into a grown copy, published once, and a
//! reader keeps the tables it loaded. The writers are serialised by the lock on [`State`];
//! the readers of a whole assignment (the API's listings, the stream's snapshot) take it too,
//! so they never see a change half made.
//!
//! A bot's number is published (in its platform's bot table) before any channel is stored
//! with it. So a reader that finds a number its tables do not have loaded them before that
//! bot appeared, and loads them again; and a number never changes while a channel table that
//! holds it is published (tables are renumbered only into a new pair). A decision reads the
//! channel's assignee and then that bot's presence, each as one atomic: the presence may be a
//! moment newer, as a decision arriving a moment later would see it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arc_swap::ArcSwap;
use parking_lot::RwLock;
use tokio::sync::broadcast;

use crate::model::split_key;

mod tables;
use tables::{Bot, Channels, Exclusions, NoSlot, Presence, Routes, Tables, decode};

/// Assignment changes a stream subscriber may fall behind by before it is cut off (and
/// resyncs from a snapshot).
const UPDATES_BUFFERED: usize = 1024;

/// Forgotten bots a platform's bot table keeps numbered (so that a bot learnt again takes its
/// number back without a new table) before both tables are rebuilt without them: a fleet
/// whose bots come and go under ever new ids must not grow it without bound.
const FORGOTTEN_KEPT: usize = 64;

#[derive(Clone)]
pub struct View {
    /// What is not read by decisions, and the writers' lock (see the module doc).
    inner: Arc<RwLock<State>>,
    /// What a decision reads, without a lock.
    routes: Arc<ArcSwap<Routes>>,
    /// Every assignment change, numbered: what `GET /v1/assignments/stream` follows.
    updates: broadcast::Sender<Arc<Update>>,
    /// Every bot going online or offline: the stream tells its clients at once, so a gate that
    /// decides from the streamed assignment knows an assignee is gone before the assignment
    /// changes (a provisional assignee follows within milliseconds, or with the rebalance).
    presences: broadcast::Sender<Arc<BotPresence>>,
}

impl Default for View {
    fn default() -> Self {
        View {
            inner: Arc::default(),
            routes: Arc::default(),
            updates: broadcast::channel(UPDATES_BUFFERED).0,
            presences: broadcast::channel(UPDATES_BUFFERED).0,
        }
    }
}

/// A bot of `platform` went online or offline.
#[derive(Debug, PartialEq, Eq)]
pub struct BotPresence {
    pub platform: String,
    pub bot: String,
    pub online: bool,
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
    /// Held by an operator with no assignee on purpose: nobody handles it by assignment or
    /// claim.
    Held,
    /// Announced as moving to another bot ([`crate::publication::moving`]): its assignee of
    /// this moment, if online (named here), answers a message only by winning its claim in
    /// Redis, so that the bot it moves to, claiming too once it has it, never answers the
    /// same message; every other bot answers nobody.
    Moving(Option<Arc<str>>),
    /// Assigned to this bot, which is offline now.
    Offline(Arc<str>),
    /// Assigned to this bot, online.
    Online(Arc<str>),
}

/// The most channels of one platform [`View::mark_just_moved`] keeps at a time.
pub const MOVED_MARKS: usize = 1 << 16;

/// How long after a move the new assignee claims each message as well (see
/// [`View::just_moved`]): an instance that has not yet seen the move sends the group's
/// messages to the claim (a forced move: the old assignee offline) or had the old assignee
/// claim them (a voluntary one, while announced). The publication reaches a connected
/// instance in milliseconds.
pub const CLAIMS_AFTER_A_MOVE: std::time::Duration = std::time::Duration::from_secs(3);

#[derive(Default)]
struct State {
    /// Bumped by every [`Update`].
    version: u64,
    /// Every platform written to, with its counts from the last plan.
    platforms: BTreeMap<String, PlatformCounts>,
    last_run: Option<RunSummary>,
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
    /// What the plan balanced: `channels` or `messages`.
    pub balance_by: String,
    /// Each online bot's message rate (messages a day: the weights of its channels), when
    /// messages are balanced or measured.
    pub messages: BTreeMap<String, f64>,
    /// Bots with a capacity (in the unit of `balance_by`).
    pub capacity: BTreeMap<String, f64>,
    /// Bots over their capacity, by how much: a capacity that cannot be met never leaves a
    /// channel without a bot, and the excess is the least the plan could make it.
    pub over_capacity: BTreeMap<String, f64>,
    /// `balanceBy: messages`: Σ (weighted load)², its certified lower bound and the gap.
    pub weighted_sum_sq: Option<f64>,
    pub lower_bound: Option<f64>,
    pub gap: Option<f64>,
}

impl View {
    fn read(&self) -> parking_lot::RwLockReadGuard<'_, State> {
        self.inner.read()
    }

    fn write(&self) -> parking_lot::RwLockWriteGuard<'_, State> {
        self.inner.write()
    }

    /// A platform's tables as published (none yet: empty), for a writer (who holds `state`).
    fn tables(&self, state: &mut State, platform: &str) -> Tables {
        if !state.platforms.contains_key(platform) {
            state
                .platforms
                .insert(platform.to_owned(), PlatformCounts::default());
        }
        let routes = self.routes.load();
        routes.platforms.get(platform).cloned().unwrap_or_default()
    }

    /// Publishes new routes: the current ones changed by `change` (a writer's; the clone is of
    /// a handful of platforms' shared tables).
    fn publish_routes(&self, change: impl FnOnce(&mut Routes)) {
        let mut routes = Routes::clone(&self.routes.load());
        change(&mut routes);
        self.routes.store(Arc::new(routes));
    }

    fn publish_tables(&self, platform: &str, tables: &Tables) {
        self.publish_routes(|routes| {
            routes.platforms.insert(platform.into(), tables.clone());
        });
    }

    /// `bot`'s number, given (and published) if it has none.
    fn number(&self, platform: &str, tables: &mut Tables, bot: &str) -> u32 {
        if let Some(number) = tables.bots.number(bot) {
            return number;
        }
        if let Some(number) = tables.bots.push(Bot::new(bot)) {
            return number;
        }
        let bots = tables.bots.grown();
        let number = bots.push(Bot::new(bot)).expect("room in a grown table");
        tables.bots = Arc::new(bots);
        self.publish_tables(platform, tables);
        number
    }

    /// Finds the bot assigned `channel` and answers from it, loading the routes again when
    /// they were stale (see the module doc).
    fn with_assignee<T>(
        &self,
        platform: &str,
        channel: &str,
        answer: impl Fn(&Routes, Option<&Bot>) -> T,
    ) -> T {
        loop {
            let routes = self.routes.load();
            if let Ok(bot) = routes.assignee(platform, channel) {
                return answer(&routes, bot);
            }
        }
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
        let mut tables = self.tables(&mut state, platform);
        let changes = changes.into_iter();
        let more = changes.size_hint().0;
        // The channel table grown by the channels it had no slot for: published at the end,
        // so that the copy is made once.
        let mut grown: Option<Channels> = None;
        let mut update = Vec::new();
        let mut changed = false;
        for (channel, bot) in changes {
            let new = bot.map(|bot| self.number(platform, &mut tables, bot));
            let old = if let Some(grown) = grown.as_mut() {
                grown.set(channel, new)
            } else {
                match tables.channels.swap(channel, new) {
                    Ok(old) => old,
                    Err(NoSlot) => grown
                        .insert(tables.channels.copy(more, |n| n))
                        .set(channel, new),
                }
            };
            if old == new {
                continue;
            }
            let bots = &tables.bots;
            if let Some(old) = old {
                bots.numbered(old).load.fetch_sub(1, Ordering::Relaxed);
            }
            if let Some(new) = new {
                bots.numbered(new).load.fetch_add(1, Ordering::Relaxed);
            }
            changed = true;
            if followed {
                update.push((channel.to_owned(), bot.map(str::to_owned)));
            }
        }
        if let Some(grown) = grown {
            tables.channels = Arc::new(grown);
            self.publish_tables(platform, &tables);
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
            let routes = self.routes.load();
            routes.platforms.get(platform).map_or_else(Vec::new, |t| {
                let channels = &t.channels;
                channels.slots.refused(|c, &slot| {
                    assignment.contains_key(c)
                        || decode(channels.assignee[slot as usize].load(Ordering::Acquire))
                            .is_none()
                })
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

    /// A platform's assignment as (channel, bot) pairs in no order; the caller holds the lock.
    fn assignment_of(&self, _state: &State, platform: &str) -> Vec<(String, String)> {
        let routes = self.routes.load();
        let Some(tables) = routes.platforms.get(platform) else {
            return Vec::new();
        };
        tables
            .channels
            .assigned()
            .map(|(c, n)| (c.into_owned(), tables.bots.numbered(n).name.to_string()))
            .collect()
    }

    /// The whole assignment at some version, and every update after it.
    pub fn subscribe(&self) -> (u64, Assignments, broadcast::Receiver<Arc<Update>>) {
        let state = self.read();
        let receiver = self.updates.subscribe();
        let assignments = state
            .platforms
            .keys()
            .map(|name| {
                let a = self.assignment_of(&state, name).into_iter().collect();
                (name.clone(), a)
            })
            .collect();
        (state.version, assignments, receiver)
    }

    pub fn set_bot(&self, platform: &str, bot: &str, online: bool) {
        let mut state = self.write();
        let mut tables = self.tables(&mut state, platform);
        let number = self.number(platform, &mut tables, bot);
        let presence = if online {
            Presence::Online
        } else {
            Presence::Offline
        };
        let entry = tables.bots.numbered(number);
        if entry.presence() != presence {
            entry.set_presence(presence);
            let _ = self.presences.send(Arc::new(BotPresence {
                platform: platform.to_owned(),
                bot: bot.to_owned(),
                online,
            }));
        }
    }

    /// Every change of a bot's presence from now on.
    pub fn subscribe_presence(&self) -> broadcast::Receiver<Arc<BotPresence>> {
        self.presences.subscribe()
    }

    pub fn set_last_run(&self, run: RunSummary) {
        self.write().last_run = Some(run);
    }

    pub fn last_run(&self) -> Option<RunSummary> {
        self.read().last_run.clone()
    }

    pub fn set_counts(&self, platform: &str, counts: PlatformCounts) {
        let mut state = self.write();
        state.platforms.insert(platform.to_owned(), counts);
    }

    pub fn counts(&self, platform: &str) -> PlatformCounts {
        let state = self.read();
        state.platforms.get(platform).cloned().unwrap_or_default()
    }

    /// Forgets bots (gone for long); they should hold no channel.
    pub fn forget_bots<'a>(&self, platform: &str, bots: impl IntoIterator<Item = &'a str>) {
        let _state = self.write();
        let routes = self.routes.load();
        let Some(tables) = routes.platforms.get(platform) else {
            return;
        };
        for bot in bots {
            if let Some(bot) = tables.bots.get(bot) {
                bot.set_presence(Presence::Outside);
            }
        }
        let unused = tables.bots.iter().filter(|b| b.unused()).count();
        if unused > FORGOTTEN_KEPT.max(tables.bots.len() - unused) {
            let compacted = tables.compacted();
            self.publish_tables(platform, &compacted);
        }
    }

    /// Excluded channel keys, full (`platform:channel`) or short (`channel`).
    pub fn set_exclusions(&self, keys: &[String]) {
        let _state = self.write();
        let mut excluded = Exclusions::default();
        for key in keys {
            match split_key(key) {
                Some((platform, channel)) => {
                    excluded
                        .full
                        .entry(platform.into())
                        .or_default()
                        .insert(channel.into());
                }
                None => {
                    excluded.short.insert(key.as_str().into());
                }
            }
        }
        let excluded = Arc::new(excluded);
        self.publish_routes(|routes| routes.excluded = excluded);
    }

    /// The channels an operator holds with no assignee, as (platform, channel).
    pub fn set_holds<'a>(&self, holds: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let _state = self.write();
        let mut held = Exclusions::default();
        for (platform, channel) in holds {
            held.full
                .entry(platform.into())
                .or_default()
                .insert(channel.into());
        }
        let held = Arc::new(held);
        self.publish_routes(|routes| routes.held = held);
    }

    /// The channels the leader announced as moving (as (platform, channel)), on every
    /// instance. A channel no longer announced has had its move made (or given up): its
    /// assignee claims each message for [`CLAIMS_AFTER_A_MOVE`] more, since another instance
    /// may still have given it to the old assignee by claim.
    pub fn set_moving<'a>(&self, moving: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let _state = self.write();
        let mut marks = Exclusions::default();
        for (platform, channel) in moving {
            marks
                .full
                .entry(platform.into())
                .or_default()
                .insert(channel.into());
        }
        // Marked as just moved before they stop being moving: no ask in between finds such a
        // channel answered by its assignee without a claim.
        let before = self.routes.load().moving.clone();
        let until = std::time::Instant::now() + CLAIMS_AFTER_A_MOVE;
        for (platform, channels) in &before.full {
            let moved = channels
                .iter()
                .filter(|c| !marks.contains(platform, c))
                .map(|c| &**c);
            self.publish_just_moved(platform, moved, until);
        }
        let marks = Arc::new(marks);
        self.publish_routes(|routes| routes.moving = marks);
    }

    /// `channels` were just given a new assignee (on a leader, a bot in place of an offline
    /// one or of none; anywhere, a voluntary move made): an instance that has not seen it yet
    /// sends their messages to the claim, or had the old assignee claim them, so until `until`
    /// the assignee claims too (see [`View::just_moved`]). At most [`MOVED_MARKS`] channels a
    /// platform are marked at a time: the first start of a large fleet gives every group its
    /// first bot at once, and a mark each would cost memory and a copy of them all at every
    /// pass; the groups past the limit are answered by the assignment alone (only bots of one
    /// group asking different instances can tell).
    pub fn mark_just_moved<'a>(
        &self,
        platform: &str,
        channels: impl IntoIterator<Item = &'a str>,
        until: std::time::Instant,
    ) {
        let _state = self.write();
        self.publish_just_moved(platform, channels, until);
    }

    /// [`View::mark_just_moved`], for a writer (who holds the state's lock).
    fn publish_just_moved<'a>(
        &self,
        platform: &str,
        channels: impl IntoIterator<Item = &'a str>,
        until: std::time::Instant,
    ) {
        let mut channels = channels.into_iter().peekable();
        if channels.peek().is_none() {
            return;
        }
        let now = std::time::Instant::now();
        self.publish_routes(|routes| {
            let mut just_moved = HashMap::clone(&routes.just_moved);
            for marks in just_moved.values_mut() {
                marks.retain(|_, deadline| *deadline > now);
            }
            just_moved.retain(|_, marks| !marks.is_empty());
            let marks = just_moved.entry(platform.into()).or_default();
            for channel in channels {
                if let Some(deadline) = marks.get_mut(channel) {
                    *deadline = until;
                } else if marks.len() < MOVED_MARKS {
                    marks.insert(channel.into(), until);
                }
            }
            routes.just_moved = Arc::new(just_moved);
        });
    }

    /// Whether `channel` was given its assignee so recently that another instance may not
    /// have it yet.
    pub fn just_moved(&self, platform: &str, channel: &str) -> bool {
        let routes = self.routes.load();
        routes
            .just_moved
            .get(platform)
            .and_then(|marks| marks.get(channel))
            .is_some_and(|deadline| *deadline > std::time::Instant::now())
    }

    pub fn assignee(&self, platform: &str, channel: &str) -> Option<String> {
        self.with_assignee(platform, channel, |_, bot| bot.map(|b| b.name.to_string()))
    }

    /// Where a message in `channel` goes: excluded, unassigned, or its assignee and whether
    /// that bot is online. What every ingress decision asks, so: no lock (see the module doc)
    /// and no allocation (the assignee is the view's own shared name).
    pub fn route(&self, platform: &str, channel: &str) -> Route {
        self.with_assignee(platform, channel, |routes, bot| {
            if routes.excluded.contains(platform, channel) {
                return Route::Excluded {
                    assignee: bot.map(|b| b.name.clone()),
                };
            }
            if routes.moving.contains(platform, channel) {
                let online = bot.filter(|b| b.presence() == Presence::Online);
                return Route::Moving(online.map(|b| b.name.clone()));
            }
            match bot {
                None if routes.held.contains(platform, channel) => Route::Held,
                None => Route::Unassigned,
                Some(b) if b.presence() == Presence::Online => Route::Online(b.name.clone()),
                Some(b) => Route::Offline(b.name.clone()),
            }
        })
    }

    pub fn is_online(&self, platform: &str, bot: &str) -> bool {
        let routes = self.routes.load();
        routes
            .bot(platform, bot)
            .is_some_and(|b| b.presence() == Presence::Online)
    }

    /// A bot of this fleet (known, online or not). Asked by every ingress decision: no lock.
    pub fn is_fleet_bot(&self, platform: &str, bot: &str) -> bool {
        let routes = self.routes.load();
        routes
            .bot(platform, bot)
            .is_some_and(|b| b.presence() != Presence::Outside)
    }

    pub fn is_excluded(&self, platform: &str, channel: &str) -> bool {
        self.routes.load().excluded.contains(platform, channel)
    }

    pub fn platforms(&self) -> Vec<String> {
        self.read().platforms.keys().cloned().collect()
    }

    /// A platform's assignment, sorted by channel.
    pub fn assignment(&self, platform: &str) -> Vec<(String, String)> {
        let state = self.read();
        let mut out = self.assignment_of(&state, platform);
        out.sort_unstable();
        out
    }

    /// How many channels of `platform` have an assignee.
    pub fn assigned_count(&self, platform: &str) -> usize {
        let _state = self.read();
        let routes = self.routes.load();
        routes
            .platforms
            .get(platform)
            .map_or(0, |tables| tables.channels.assigned().count())
    }

    /// (bot, online, load) for every known bot of a platform, sorted by bot.
    pub fn bots(&self, platform: &str) -> Vec<(String, bool, u32)> {
        let _state = self.read();
        let routes = self.routes.load();
        let Some(tables) = routes.platforms.get(platform) else {
            return Vec::new();
        };
        let mut out: Vec<(String, bool, u32)> = tables
            .bots
            .iter()
            .filter(|b| b.presence() != Presence::Outside)
            .map(|b| {
                (
                    b.name.to_string(),
                    b.presence() == Presence::Online,
                    b.load(),
                )
            })
            .collect();
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::tables::ChannelMap;
    use super::*;

    #[test]
    fn moved_marks_expire_and_are_bounded() {
        let v = View::default();
        let later = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let names: Vec<String> = (0..MOVED_MARKS + 10).map(|i| i.to_string()).collect();
        v.mark_just_moved("onebot", names.iter().map(String::as_str), later);
        assert!(v.just_moved("onebot", "0"));
        assert!(v.just_moved("onebot", &(MOVED_MARKS - 1).to_string()));
        assert!(
            !v.just_moved("onebot", &MOVED_MARKS.to_string()),
            "past the limit"
        );
        assert!(!v.just_moved("qq", "0"));
        // Full, a marked channel still takes a new deadline; one whose time is up is gone at
        // the next marking, which makes room.
        v.mark_just_moved("onebot", ["0", "new"], std::time::Instant::now());
        assert!(!v.just_moved("onebot", "0"));
        assert!(v.just_moved("onebot", "1"));
        v.mark_just_moved("onebot", ["new"], later);
        assert!(v.just_moved("onebot", "new"));
    }

    #[test]
    fn moving_channels_name_their_online_assignee_and_are_claimed_once_unmarked() {
        let v = View::default();
        v.set_bot("onebot", "1", true);
        v.set_bot("onebot", "2", false);
        v.apply(
            "onebot",
            [("a", Some("1")), ("b", Some("1")), ("c", Some("2"))],
        );
        v.set_moving([("onebot", "a"), ("onebot", "c")]);
        assert_eq!(v.route("onebot", "a"), Route::Moving(Some("1".into())));
        assert_eq!(v.route("onebot", "c"), Route::Moving(None), "offline");
        assert_eq!(v.route("onebot", "b"), Route::Online("1".into()));
        assert!(!v.just_moved("onebot", "a"));
        // The move made, then no longer announced: its new assignee claims for a while.
        v.apply("onebot", [("a", Some("2"))]);
        v.set_bot("onebot", "2", true);
        assert_eq!(v.route("onebot", "a"), Route::Moving(Some("2".into())));
        v.set_moving([("onebot", "c")]);
        assert_eq!(v.route("onebot", "a"), Route::Online("2".into()));
        assert!(v.just_moved("onebot", "a"));
        assert!(!v.just_moved("onebot", "b") && !v.just_moved("onebot", "c"));
    }

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
        // What a copy of a channel table does with unassigned channels: "7" (0) goes.
        let map = map.filter_map(0, |&v| (v != 0).then_some(v));
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

    #[test]
    fn decisions_read_while_a_writer_holds_the_lock() {
        let v = View::default();
        v.set_bot("onebot", "1", true);
        v.apply("onebot", [("100", Some("1"))]);
        // A writer in the middle of a start-up's 367k rows holds the lock for a while; a
        // decision must not wait for it.
        let writing = v.write();
        let reader = v.clone();
        let (done, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let route = reader.route("onebot", "100");
            done.send((route, reader.is_fleet_bot("onebot", "1")))
                .unwrap();
        });
        let answered = answer.recv_timeout(std::time::Duration::from_secs(10));
        drop(writing);
        assert_eq!(answered, Ok((Route::Online("1".into()), true)));
    }

    /// Readers racing a writer that numbers a new bot for every change, grows the channel
    /// table and forgets bots (so that the tables are rebuilt and renumbered) never miss the
    /// assignee and see only assignees the channel really had, in the order it had them.
    #[test]
    fn readers_racing_new_bots_and_renumbering_see_real_assignees_in_order() {
        const STEPS: usize = 600;
        let v = View::default();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let v = v.clone();
                std::thread::spawn(move || {
                    let mut seen = 0;
                    let mut last = None;
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                    while last != Some(STEPS - 1) {
                        assert!(std::time::Instant::now() < deadline, "b{last:?} last seen");
                        let step = match v.route("onebot", "c") {
                            Route::Unassigned if last.is_none() => continue,
                            // The bot's presence is read a moment after the channel's
                            // assignee: it may be forgotten by then.
                            Route::Online(bot) | Route::Offline(bot) => {
                                bot[1..].parse::<usize>().unwrap()
                            }
                            other => panic!("after b{last:?}: {other:?}"),
                        };
                        assert!(last <= Some(step), "b{step} after b{last:?}");
                        last = Some(step);
                        seen += 1;
                    }
                    seen
                })
            })
            .collect();
        for step in 0..STEPS {
            let bot = format!("b{step}");
            let channel = format!("x{step}");
            v.set_bot("onebot", &bot, true);
            v.apply(
                "onebot",
                [("c", Some(bot.as_str())), (&channel, Some(&bot))],
            );
            if step > 0 {
                let before = format!("x{}", step - 1);
                v.apply("onebot", [(before.as_str(), None)]);
                v.forget_bots("onebot", [format!("b{}", step - 1).as_str()]);
            }
        }
        for reader in readers {
            assert!(reader.join().unwrap() > 0);
        }
        let routes = v.routes.load();
        let tables = &routes.platforms["onebot"];
        assert!(tables.bots.len() <= 2 * FORGOTTEN_KEPT + 1);
        assert!(tables.channels.assignee.len() <= 2 * FORGOTTEN_KEPT + 2);
        let last = format!("b{}", STEPS - 1);
        assert_eq!(v.bots("onebot"), [(last.clone(), true, 2)]);
        let mut assignment = v.assignment("onebot");
        assignment.sort();
        assert_eq!(
            assignment,
            [
                ("c".into(), last.clone()),
                (format!("x{}", STEPS - 1), last)
            ]
        );
    }

    #[test]
    fn a_forgotten_bot_learnt_again_keeps_its_exact_load() {
        let v = View::default();
        v.set_bot("onebot", "1", false);
        v.apply("onebot", [("a", Some("1")), ("b", Some("1"))]);
        v.forget_bots("onebot", ["1"]);
        assert!(!v.is_fleet_bot("onebot", "1") && v.bots("onebot").is_empty());
        // Still named as the assignee until a plan moves its channels.
        assert_eq!(v.route("onebot", "a"), Route::Offline("1".into()));
        v.set_bot("onebot", "1", true);
        assert_eq!(v.bots("onebot"), [("1".into(), true, 2)]);
        assert_eq!(v.route("onebot", "a"), Route::Online("1".into()));
    }

    /// The bot table grows in place and by copies while it is read: a reader that has seen a
    /// bot sees it ever after, and every bot the writer added before it.
    #[test]
    fn bots_added_while_read_stay_found() {
        const BOTS: usize = 3000;
        let v = View::default();
        let name = |k: usize| format!("{}", 2_000_000_000 + k);
        let reader = {
            let v = v.clone();
            std::thread::spawn(move || {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                for k in 0..BOTS {
                    while !v.is_fleet_bot("onebot", &name(k)) {
                        assert!(std::time::Instant::now() < deadline, "{k} never found");
                        std::hint::spin_loop();
                    }
                    for j in [0, k / 3, k / 2, k.saturating_sub(1)] {
                        assert!(v.is_fleet_bot("onebot", &name(j)), "{j} lost after {k}");
                    }
                    assert!(!v.is_online("onebot", &name(k)) || k % 2 == 0);
                }
            })
        };
        for k in 0..BOTS {
            v.set_bot("onebot", &name(k), k % 2 == 0);
        }
        reader.join().unwrap();
        let routes = v.routes.load();
        let bots = &routes.platforms["onebot"].bots;
        assert_eq!(bots.len(), BOTS);
        for k in 0..BOTS {
            assert_eq!(bots.number(&name(k)), Some(k as u32));
        }
        assert_eq!(bots.number("1"), None);
        assert_eq!(
            v.bots("onebot")
                .iter()
                .filter(|(_, online, _)| *online)
                .count(),
            BOTS / 2
        );
    }
}
