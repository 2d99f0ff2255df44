//! The property tests' fleets, shared by `balance_props`, `certified` and `weighted_props`: one
//! model ([`Fleet`]: bots, channels, priority lists, exclusions, enabled platforms and the
//! previous assignment, in the tests' own terms of bot and channel indices), one seeded
//! generator with knobs ([`Fleet::generate`], [`Knobs`]), and what a fleet stands for in the
//! crate: its [`FleetIndex`] ([`Fleet::index`]) and its [`Rules`] ([`Fleet::rules`], keys short
//! and full). Each test module keeps its own oracle (a brute force, petgraph certificates),
//! which derives what the rules mean from their definition, never from the crate.
//!
//! A case is a seed and a size: [`Lcg`] expands the seed into a fleet at the largest size, and
//! [`Fleet::truncated`] cuts it down to the size drawn ([`fleets`]), so that proptest shrinks a
//! failure by size without changing the rest, and a case replays exactly. A failing case is
//! recorded beside its module ([`config`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use auto_assign::balance::{FleetIndex, Rules};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

/// The platforms a fleet spreads over: every bot and channel is on the first unless
/// [`Knobs::second`] puts it on the second.
pub const PLATFORMS: [&str; 2] = ["onebot", "discord"];

/// Small deterministic generator so one proptest seed expands into a whole fleet.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }

    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// [`Lcg::one_in`], where 0 means never (and draws nothing).
    fn chance(&mut self, n: usize) -> bool {
        n != 0 && self.one_in(n)
    }

    /// An independent generator, for draws whose number varies with the fleet's size.
    pub fn fork(&mut self) -> Lcg {
        self.below(1);
        Lcg(self.0 ^ 0x9e37_79b9_7f4a_7c15)
    }
}

#[derive(Clone, Debug)]
pub struct Bot {
    /// Index into [`PLATFORMS`].
    pub platform: usize,
    pub id: String,
    pub online: bool,
    /// `botCapacity`, in the unit of `balanceBy`.
    pub capacity: Option<f64>,
}

#[derive(Clone, Debug)]
pub struct Channel {
    /// Index into [`PLATFORMS`].
    pub platform: usize,
    pub id: String,
    /// Member bots (indices into [`Fleet::bots`], on the channel's platform), online or not.
    pub members: Vec<usize>,
    /// The measured message rate; 0 when nothing was measured.
    pub weight: f64,
}

/// A fleet on one or two platforms, in the tests' own terms.
#[derive(Clone, Debug, Default)]
pub struct Fleet {
    pub bots: Vec<Bot>,
    pub channels: Vec<Channel>,
    /// Channel → priority list: bot indices in order of preference, members or not, on the
    /// channel's platform or not.
    pub priority: BTreeMap<usize, Vec<usize>>,
    pub excluded: BTreeSet<usize>,
    /// `enabledPlatforms` (indices into [`PLATFORMS`]); empty means every platform.
    pub enabled: Vec<usize>,
    /// The assignee of every channel before the (first) plan: a bot of its platform, mostly a
    /// member.
    pub previous: Vec<Option<usize>>,
}

/// What [`Fleet::generate`] draws. Rates are "one in …", 0 for never.
#[derive(Clone, Copy, Debug)]
pub struct Knobs {
    /// Bots offline.
    pub offline: usize,
    /// Channels with a priority list of 1–3 bots.
    pub pin: usize,
    /// Entries of a priority list naming any bot of the fleet (on the channel's platform or
    /// not) rather than a member; at least 1.
    pub stranger: usize,
    /// Channels excluded (independently of their priority list).
    pub exclude: usize,
    /// Channels left without a member (not with `connected`).
    pub empty: usize,
    /// The most members a channel draws (at least 1): uniformly, skewed towards a few popular
    /// bots, or from a window of neighbouring bots (long chains of exchanges), one mode per
    /// channel.
    pub degree: usize,
    /// Channel j also holds its platform's bots j and j + 1, so bots and channels form one
    /// connected membership graph.
    pub connected: bool,
    /// Bots and channels on the second platform (0: one platform).
    pub second: usize,
    /// Whether `enabledPlatforms` is drawn: empty, the first platform, or both.
    pub enabled: bool,
    /// Channels whose previous assignee is a bot of their platform that is not a member (a forced
    /// move), whatever the fleet's mode of previous assignment.
    pub forced: usize,
    /// Half the bots get a capacity below this (0: no capacities).
    pub capacity: usize,
    /// Whether channels weigh their messages: 1–20, mostly light, now and then ×5 or ×20.
    pub weights: bool,
}

/// Bot ids alternate between text and QQ-like numbers, which the index interns apart: `b0`,
/// `1002`, `b2`, `1004`, …
fn bot_id(prefix: &str, i: usize) -> String {
    if i.is_multiple_of(2) {
        format!("{prefix}b{i}")
    } else {
        format!("{prefix}{}", 1001 + i)
    }
}

/// Channel ids likewise, in pairs (not in step with [`Fleet::channel_key`]): `g0`, `g1`,
/// `100003`, `100004`, `g4`, …
fn channel_id(prefix: &str, j: usize) -> String {
    if (j / 2).is_multiple_of(2) {
        format!("{prefix}g{j}")
    } else {
        format!("{prefix}{}", 100_001 + j)
    }
}

impl Fleet {
    /// A random fleet of `nb` bots and `nc` channels, ids prefixed with `prefix` (unique across
    /// the fleets of one test).
    pub fn generate(rng: &mut Lcg, prefix: &str, nb: usize, nc: usize, knobs: &Knobs) -> Fleet {
        let bots: Vec<Bot> = (0..nb)
            .map(|i| {
                let online = !rng.chance(knobs.offline);
                let platform = usize::from(rng.chance(knobs.second));
                let capacity = (knobs.capacity != 0 && rng.one_in(2))
                    .then(|| rng.below(knobs.capacity) as f64);
                Bot {
                    platform,
                    id: bot_id(prefix, i),
                    online,
                    capacity,
                }
            })
            .collect();
        // Each platform's bots.
        let on: Vec<Vec<usize>> = (0..PLATFORMS.len())
            .map(|p| (0..nb).filter(|&b| bots[b].platform == p).collect())
            .collect();
        let mut channels = Vec::with_capacity(nc);
        let mut priority = BTreeMap::new();
        let mut excluded = BTreeSet::new();
        for j in 0..nc {
            let platform = usize::from(rng.chance(knobs.second));
            let (mut members, n) = (Vec::new(), on[platform].len());
            if n > 0 {
                if knobs.connected && j + 1 < n {
                    members.extend([j, j + 1]);
                }
                let degree = (1 + rng.below(knobs.degree)).min(n);
                let mode = rng.below(3);
                let start = rng.below(n);
                let mut attempts = 0;
                while members.len() < degree && attempts < 64 {
                    attempts += 1;
                    let b = match mode {
                        0 => rng.below(n),
                        1 => {
                            let u = rng.below(1000);
                            n * u * u / 1_000_000
                        }
                        _ => (start + rng.below(5)) % n,
                    };
                    if !members.contains(&b) {
                        members.push(b);
                    }
                }
                // From positions among the platform's bots to bot indices.
                for m in &mut members {
                    *m = on[platform][*m];
                }
            }
            if !knobs.connected && rng.chance(knobs.empty) {
                members.clear();
            }
            if rng.chance(knobs.pin) {
                let list = (0..1 + rng.below(3))
                    .map(|_| {
                        if members.is_empty() || rng.one_in(knobs.stranger) {
                            rng.below(nb)
                        } else {
                            members[rng.below(members.len())]
                        }
                    })
                    .collect();
                priority.insert(j, list);
            }
            if rng.chance(knobs.exclude) {
                excluded.insert(j);
            }
            let weight = if knobs.weights {
                (1 + rng.below(20)) as f64 * [1.0, 1.0, 1.0, 5.0, 20.0][rng.below(5)]
            } else {
                0.0
            };
            channels.push(Channel {
                platform,
                id: channel_id(prefix, j),
                members,
                weight,
            });
        }
        // The previous assignment: scattered over members, concentrated on first members,
        // sparse, or half on arbitrary bots of the platform (mostly not members: forced moves).
        let mode = rng.below(4);
        let previous = channels
            .iter()
            .map(|ch| {
                let member = |rng: &mut Lcg| -> Option<usize> {
                    (!ch.members.is_empty()).then(|| ch.members[rng.below(ch.members.len())])
                };
                let same = &on[ch.platform];
                let any = |rng: &mut Lcg| (!same.is_empty()).then(|| same[rng.below(same.len())]);
                let drawn = match mode {
                    0 => (!rng.one_in(5)).then(|| member(rng)).flatten(),
                    1 => ch.members.first().copied(),
                    2 => rng.one_in(5).then(|| member(rng)).flatten(),
                    _ if rng.one_in(2) => any(rng),
                    _ => member(rng),
                };
                if !rng.chance(knobs.forced) {
                    return drawn;
                }
                let outside: Vec<usize> = same
                    .iter()
                    .copied()
                    .filter(|b| !ch.members.contains(b))
                    .collect();
                (!outside.is_empty())
                    .then(|| outside[rng.below(outside.len())])
                    .or(drawn)
            })
            .collect();
        let enabled = match knobs.enabled.then(|| rng.below(3)) {
            Some(1) => vec![0],
            Some(2) => vec![0, 1],
            _ => Vec::new(),
        };
        Fleet {
            bots,
            channels,
            priority,
            excluded,
            enabled,
            previous,
        }
    }

    /// The first `nb` bots and `nc` channels: the same fleet, cut down, so that proptest shrinks
    /// a failure by size without changing everything else.
    pub fn truncated(mut self, nb: usize, nc: usize) -> Fleet {
        self.bots.truncate(nb);
        self.channels.truncate(nc);
        for ch in &mut self.channels {
            ch.members.retain(|&b| b < nb);
        }
        self.priority = std::mem::take(&mut self.priority)
            .into_iter()
            .filter(|&(c, _)| c < nc)
            .map(|(c, list)| (c, list.into_iter().filter(|&b| b < nb).collect()))
            .collect();
        self.excluded.retain(|&c| c < nc);
        self.previous.truncate(nc);
        for p in &mut self.previous {
            *p = p.filter(|&b| b < nb);
        }
        self
    }

    /// Channel `c`'s key in the rules: short (`g0`, that channel on any platform) for even `c`,
    /// full (`onebot:g1`) for odd.
    pub fn channel_key(&self, c: usize) -> String {
        let ch = &self.channels[c];
        if c.is_multiple_of(2) {
            ch.id.clone()
        } else {
            format!("{}:{}", PLATFORMS[ch.platform], ch.id)
        }
    }

    /// Bot `b`'s key in the rules: full (`discord:b2`, the bot's own platform) or short (`b2`).
    pub fn bot_key(&self, b: usize, full: bool) -> String {
        let bot = &self.bots[b];
        if full {
            format!("{}:{}", PLATFORMS[bot.platform], bot.id)
        } else {
            bot.id.clone()
        }
    }

    /// The rules: enabled platforms, priority lists, exclusions and capacities, with channel
    /// keys ([`Fleet::channel_key`]) and bot entries both short and full (every other entry of a
    /// list, the first full for every other pair of channels; capacities of one bot in three).
    /// A priority entry naming a bot of the other platform matches nothing on the channel's.
    pub fn rules(&self) -> Rules {
        let priority = self.priority.iter().map(|(&c, list)| {
            let bots = list.iter().enumerate();
            let bots = bots.map(|(i, &b)| self.bot_key(b, (c / 2 + i) % 2 == 1));
            (self.channel_key(c), bots.collect())
        });
        let capacity = (0..self.bots.len())
            .filter_map(|b| Some((self.bot_key(b, b % 3 == 0), self.bots[b].capacity?)));
        Rules {
            enabled_platforms: self.enabled.iter().map(|&p| PLATFORMS[p].into()).collect(),
            priority: priority.collect(),
            exclude: self.excluded.iter().map(|&c| self.channel_key(c)).collect(),
            capacity: capacity.collect(),
            ..Rules::default()
        }
    }

    /// The index: bots and channels interned in order (each on its platform), weights,
    /// memberships, `previous` as the current assignment, the journal taken.
    pub fn index(&self) -> FleetIndex {
        let mut index = FleetIndex::new();
        for bot in &self.bots {
            let p = index.platform_mut(PLATFORMS[bot.platform]);
            let b = p.add_bot(&bot.id);
            p.set_online(b, bot.online);
        }
        for ch in &self.channels {
            let p = index.platform_mut(PLATFORMS[ch.platform]);
            let c = p.add_channel(&ch.id);
            p.set_weight(c, ch.weight);
            for &m in &ch.members {
                let b = p.find_bot(&self.bots[m].id).expect("bot interned");
                p.join(b, c);
            }
        }
        for (ch, prev) in self.channels.iter().zip(&self.previous) {
            if let Some(b) = *prev {
                let p = index.platform_mut(PLATFORMS[ch.platform]);
                let c = p.find_channel(&ch.id).expect("channel interned");
                let b = p.find_bot(&self.bots[b].id).expect("bot interned");
                p.set_assignee(c, Some(b));
            }
        }
        for p in index.platforms_mut() {
            p.take_journal();
        }
        index
    }

    /// Bot id → index (ids are unique across platforms).
    pub fn bot_ids(&self) -> HashMap<&str, usize> {
        self.bots
            .iter()
            .enumerate()
            .map(|(i, b)| (b.id.as_str(), i))
            .collect()
    }

    /// Channel id → index.
    pub fn channel_ids(&self) -> HashMap<&str, usize> {
        self.channels
            .iter()
            .enumerate()
            .map(|(i, c)| (c.id.as_str(), i))
            .collect()
    }
}

/// A proptest configuration of `cases` cases that records failures beside the test's module
/// (`tests/it/certified.proptest-regressions`, checked in) and replays them first. Proptest's
/// default looks for the directory with a `main.rs` and records in a `proptest-regressions`
/// folder beside it instead, named after the module: `tests/it` is that directory.
pub fn config(cases: u32) -> ProptestConfig {
    let persistence = FileFailurePersistence::WithSource("proptest-regressions");
    ProptestConfig {
        failure_persistence: Some(Box::new(persistence)),
        ..ProptestConfig::with_cases(cases)
    }
}

/// Fleets as a proptest strategy: a seed expanded at `max` (bots, channels), cut down to the
/// `sizes` drawn.
pub fn fleets(
    knobs: Knobs,
    max: (usize, usize),
    sizes: impl Strategy<Value = (usize, usize)>,
) -> impl Strategy<Value = Fleet> {
    (any::<u64>(), sizes).prop_map(move |(seed, (nb, nc))| {
        Fleet::generate(&mut Lcg(seed), "", max.0, max.1, &knobs).truncated(nb, nc)
    })
}
