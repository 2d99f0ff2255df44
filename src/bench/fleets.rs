//! Seeded synthetic fleets, shaped as in the reference measurements.

use rand::distr::Distribution;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::weighted::WeightedAliasIndex;

use crate::balance::Rules;
use crate::index::FleetIndex;

pub const PLATFORM: &str = "onebot";

pub struct Fleet {
    pub name: &'static str,
    pub index: FleetIndex,
    pub rules: Rules,
}

/// A named fleet generator taking a seed.
pub type Generator = (&'static str, fn(u64) -> Fleet);

/// The fleets of the benchmark, in order; `large` adds the million-channel ones.
pub fn all(large: bool) -> Vec<Generator> {
    let mut fleets: Vec<Generator> = vec![
        ("seed", |s| seed(s, false)),
        ("seed-minus-1", |s| seed(s, true)),
        ("nested-2", |s| nested(s, "nested-2", &[1.0, 0.9], 1000)),
        ("nested-10", |s| {
            let fractions: Vec<f64> = (0..10).map(|i| 0.9 + 0.1 * i as f64 / 9.0).collect();
            nested(s, "nested-10", &fractions, 2000)
        }),
        ("zipf-200k", |s| zipf(s, "zipf-200k", 500, 200_000, SINGLES)),
        ("zipf-200k-redundant", |s| {
            zipf(s, "zipf-200k-redundant", 500, 200_000, REDUNDANT)
        }),
    ];
    if large {
        fleets.push(("uniform-200x5000", |s| {
            uniform(s, "uniform-200x5000", 200, 5000)
        }));
        fleets.push(("zipf-1m", |s| zipf(s, "zipf-1m", 2000, 1_000_000, SINGLES)));
        fleets.push(("zipf-1m-redundant", |s| {
            zipf(s, "zipf-1m-redundant", 2000, 1_000_000, REDUNDANT)
        }));
    }
    fleets
}

fn bot_id(i: usize) -> String {
    format!("{}", 1_000_001 + i)
}

fn channel_id(i: usize) -> String {
    format!("{}", 100_000_001 + i)
}

/// The plugin's example: 3 bots in all 288 channels (optionally one membership short).
fn seed(s: u64, minus_one: bool) -> Fleet {
    let mut rng = ChaCha8Rng::seed_from_u64(s);
    let mut index = FleetIndex::new();
    let p = index.platform_mut(PLATFORM);
    let bots: Vec<u32> = (0..3).map(|i| p.add_bot(&bot_id(i))).collect();
    for c in 0..288 {
        let channel = p.add_channel(&channel_id(c));
        let mut members = bots.clone();
        if minus_one && c == 287 {
            members.retain(|&b| b != bots[2]);
        }
        members.shuffle(&mut rng);
        for b in members {
            p.join(b, channel);
        }
    }
    let name = if minus_one { "seed-minus-1" } else { "seed" };
    all_online(name, index, &bots)
}

/// Nested memberships: bot i is in a channel iff its fraction exceeds the channel's draw.
fn nested(s: u64, name: &'static str, fractions: &[f64], channels: usize) -> Fleet {
    let mut rng = ChaCha8Rng::seed_from_u64(s);
    let mut index = FleetIndex::new();
    let p = index.platform_mut(PLATFORM);
    let bots: Vec<u32> = (0..fractions.len())
        .map(|i| p.add_bot(&bot_id(i)))
        .collect();
    for c in 0..channels {
        let channel = p.add_channel(&channel_id(c));
        let u: f64 = rng.random();
        let mut members: Vec<u32> = bots
            .iter()
            .zip(fractions)
            .filter(|&(_, &f)| f > u)
            .map(|(&b, _)| b)
            .collect();
        if members.is_empty() {
            members.push(bots[0]);
        }
        members.shuffle(&mut rng);
        for b in members {
            p.join(b, channel);
        }
    }
    all_online(name, index, &bots)
}

/// A fleet whose `bots` are all online, with no rules and nothing journalled yet.
fn all_online(name: &'static str, mut index: FleetIndex, bots: &[u32]) -> Fleet {
    let p = index.platform_mut(PLATFORM);
    for &b in bots {
        p.set_online(b, true);
    }
    p.take_journal();
    Fleet {
        name,
        index,
        rules: Rules::default(),
    }
}

/// The OneBot benchmark's shape: every bot in `groups` groups drawn uniformly from a pool of
/// 2.5 memberships per group (so almost every group has several bots and all bots are alike).
fn uniform(s: u64, name: &'static str, bots: usize, groups: usize) -> Fleet {
    let mut rng = ChaCha8Rng::seed_from_u64(s);
    let mut index = FleetIndex::new();
    let p = index.platform_mut(PLATFORM);
    let pool = bots * groups * 2 / 5;
    let mut ids: Vec<usize> = (0..pool).collect();
    for b in 0..bots {
        ids.shuffle(&mut rng);
        let channels: Vec<String> = ids[..groups].iter().map(|&g| channel_id(g)).collect();
        p.bot_online(&bot_id(b), &channels);
    }
    p.take_journal();
    Fleet {
        name,
        index,
        rules: Rules::default(),
    }
}

/// Channel size distributions: (size, percent).
const SINGLES: &[(usize, u32)] = &[(1, 45), (2, 25), (3, 15), (4, 10), (5, 5)];
pub(super) const REDUNDANT: &[(usize, u32)] = &[(2, 50), (3, 25), (4, 15), (5, 10)];

/// Zipf bot popularity (weight ∝ 1/rank, ranks shuffled over bots), with operations noise:
/// 1% of channels with a priority list, 0.5% excluded, 2% of bots offline.
pub(super) fn zipf(
    s: u64,
    name: &'static str,
    bots: usize,
    channels: usize,
    sizes: &[(usize, u32)],
) -> Fleet {
    let mut rng = ChaCha8Rng::seed_from_u64(s);
    let mut index = FleetIndex::new();
    let mut rules = Rules::default();
    let p = index.platform_mut(PLATFORM);
    let ids: Vec<u32> = (0..bots).map(|i| p.add_bot(&bot_id(i))).collect();
    let mut ranks: Vec<usize> = (1..=bots).collect();
    ranks.shuffle(&mut rng);
    let popularity =
        WeightedAliasIndex::new(ranks.iter().map(|&r| 1.0 / r as f64).collect()).expect("weights");
    let size_of = WeightedAliasIndex::new(sizes.iter().map(|&(_, w)| w).collect()).expect("sizes");
    let mut members = Vec::with_capacity(5);
    for c in 0..channels {
        let channel = p.add_channel(&channel_id(c));
        let k = sizes[size_of.sample(&mut rng)].0;
        members.clear();
        for _ in 0..16 {
            let b = ids[popularity.sample(&mut rng)];
            if !members.contains(&b) {
                members.push(b);
                if members.len() == k {
                    break;
                }
            }
        }
        for &b in &members {
            p.join(b, channel);
        }
        let roll: f64 = rng.random();
        if roll < 0.01 {
            let mut list: Vec<String> = members.iter().map(|&b| p.bot_id(b).to_owned()).collect();
            list.shuffle(&mut rng);
            list.truncate(if rng.random_bool(0.8) { 1 } else { 2 });
            if rng.random_bool(0.2) {
                list.insert(0, bot_id(rng.random_range(0..bots)));
            }
            rules
                .priority
                .insert(format!("{PLATFORM}:{}", channel_id(c)), list);
        } else if roll < 0.015 {
            rules.exclude.push(format!("{PLATFORM}:{}", channel_id(c)));
        }
    }
    for &b in &ids {
        p.set_online(b, !rng.random_bool(0.02));
    }
    p.take_journal();
    Fleet { name, index, rules }
}

/// Operators' fleets: a handful to a hundred accounts, each group with 1–4 of them (accounts
/// drawn by popularity ∝ 1/rank^skew), message rates from a Pareto law (P(w > x) = x^−α,
/// whole, at most a cap): a few groups carry most of the messages.
pub fn operators() -> Vec<Generator> {
    vec![
        ("op-8x600", |s| pareto(s, "op-8x600", 8, 600, 1.0, 1e5, 0.0)),
        ("op-20x2000", |s| {
            pareto(s, "op-20x2000", 20, 2000, 1.0, 1e5, 0.5)
        }),
        ("op-40x1500-heavy", |s| {
            pareto(s, "op-40x1500-heavy", 40, 1500, 0.8, 1e5, 0.5)
        }),
        ("op-100x10000-heavy", |s| {
            pareto(s, "op-100x10000-heavy", 100, 10_000, 0.8, 1e6, 0.5)
        }),
    ]
}

/// Pareto rates (P(w > x) = x^-alpha, whole, at most `cap`), accounts chosen by popularity
/// ∝ 1/rank^skew.
fn pareto(
    s: u64,
    name: &'static str,
    bots: usize,
    groups: usize,
    alpha: f64,
    cap: f64,
    skew: f64,
) -> Fleet {
    let mut rng = ChaCha8Rng::seed_from_u64(s ^ 0x0be7);
    let mut index = FleetIndex::new();
    let p = index.platform_mut(PLATFORM);
    let ids: Vec<u32> = (0..bots).map(|i| p.add_bot(&bot_id(i))).collect();
    let popularity =
        WeightedAliasIndex::new((1..=bots).map(|r| (r as f64).powf(-skew)).collect()).expect("w");
    let mut members = Vec::new();
    for g in 0..groups {
        let channel = p.add_channel(&channel_id(g));
        let k = rng.random_range(1..=4usize.min(bots));
        members.clear();
        for _ in 0..64 {
            let b = ids[popularity.sample(&mut rng)];
            if !members.contains(&b) {
                members.push(b);
                if members.len() == k {
                    break;
                }
            }
        }
        for &b in &members {
            p.join(b, channel);
        }
        let u: f64 = rng.random::<f64>().max(1e-300);
        p.set_weight(channel, u.powf(-1.0 / alpha).ceil().min(cap));
    }
    all_online(name, index, &ids)
}
