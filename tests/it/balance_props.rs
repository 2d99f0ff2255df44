//! Property tests: the planner against an independent brute force on small fleets.
//!
//! The brute force re-implements the rules from their definition (not from the crate) and
//! enumerates every assignment, so `optimal` must match it exactly in Σ load² and in the number
//! of moved channels; `greedy` must be valid and never better than `optimal`.

use std::collections::BTreeMap;

use auto_assign::balance::FleetIndex;
use auto_assign::balance::{self, Planner, Rules, Strategy as Plan};
use proptest::prelude::*;

const PLATFORMS: [&str; 2] = ["onebot", "discord"];

#[derive(Clone, Debug)]
struct Fleet {
    /// (platform, id, online)
    bots: Vec<(usize, String, bool)>,
    /// (platform, id, member bot indices into `bots`)
    channels: Vec<(usize, String, Vec<usize>)>,
    rules: Rules,
    /// channel index → bot index
    previous: BTreeMap<usize, usize>,
}

fn fleet() -> impl Strategy<Value = Fleet> {
    let sizes = prop_oneof![1 => (1usize..=4, 0usize..=8), 4 => (2usize..=4, 5usize..=8)];
    (sizes, any::<u64>()).prop_map(|((nb, nc), seed)| {
        let mut rng = Lcg(seed);
        let bots: Vec<(usize, String, bool)> = (0..nb)
            .map(|i| {
                (
                    usize::from(rng.below(6) == 0),
                    format!("{}", 1001 + i),
                    rng.below(6) != 0,
                )
            })
            .collect();
        let mut channels = Vec::new();
        for i in 0..nc {
            let platform = usize::from(rng.below(6) == 0);
            let members = (0..nb)
                .filter(|&b| bots[b].0 == platform && rng.below(3) != 0)
                .collect();
            channels.push((platform, format!("g{i}"), members));
        }
        let mut rules = Rules::default();
        match rng.below(3) {
            0 => rules.enabled_platforms = vec!["onebot".into()],
            1 => rules.enabled_platforms = vec!["onebot".into(), "discord".into()],
            _ => {}
        }
        for (platform, id, _) in &channels {
            match rng.below(8) {
                0 => rules.exclude.push(id.clone()),
                1 => rules.exclude.push(format!("{}:{id}", PLATFORMS[*platform])),
                2 | 3 => {
                    let list = (0..1 + rng.below(3))
                        .map(|_| {
                            let b = &bots[rng.below(nb)];
                            if rng.below(2) == 0 {
                                b.1.clone()
                            } else {
                                format!("{}:{}", PLATFORMS[b.0], b.1)
                            }
                        })
                        .collect();
                    let key = if rng.below(2) == 0 {
                        id.clone()
                    } else {
                        format!("{}:{id}", PLATFORMS[*platform])
                    };
                    rules.priority.insert(key, list);
                }
                _ => {}
            }
        }
        let mut previous = BTreeMap::new();
        for (c, (platform, _, _)) in channels.iter().enumerate() {
            let same: Vec<usize> = (0..nb).filter(|&b| bots[b].0 == *platform).collect();
            if !same.is_empty() && rng.below(3) != 0 {
                previous.insert(c, same[rng.below(same.len())]);
            }
        }
        Fleet {
            bots,
            channels,
            rules,
            previous,
        }
    })
}

/// Small deterministic generator so one proptest seed expands into a whole fleet.
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

fn build_index(f: &Fleet) -> FleetIndex {
    let mut index = FleetIndex::new();
    for &(p, ref id, online) in &f.bots {
        let pi = index.platform_mut(PLATFORMS[p]);
        let b = pi.add_bot(id);
        pi.set_online(b, online);
    }
    for (p, id, members) in &f.channels {
        let pi = index.platform_mut(PLATFORMS[*p]);
        let c = pi.add_channel(id);
        for &m in members {
            let b = pi.find_bot(&f.bots[m].1).unwrap();
            pi.join(b, c);
        }
    }
    for (&c, &b) in &f.previous {
        let (p, id, _) = &f.channels[c];
        let pi = index.platform_mut(PLATFORMS[*p]);
        let (c, b) = (
            pi.find_channel(id).unwrap(),
            pi.find_bot(&f.bots[b].1).unwrap(),
        );
        pi.set_assignee(c, Some(b));
    }
    for p in index.platforms_mut() {
        p.take_journal();
    }
    index
}

/// The rules, straight from their definition.
struct Truth {
    /// per channel: None = excluded or platform disabled, Some(valid bots)
    valid: Vec<Option<Vec<usize>>>,
    pinned: Vec<Option<usize>>,
}

fn truth(f: &Fleet) -> Truth {
    let enabled = |p: usize| {
        f.rules.enabled_platforms.is_empty()
            || f.rules.enabled_platforms.iter().any(|e| e == PLATFORMS[p])
    };
    let mut valid = Vec::new();
    let mut pinned = Vec::new();
    for (p, id, members) in &f.channels {
        let full = format!("{}:{id}", PLATFORMS[*p]);
        let excluded = f.rules.exclude.iter().any(|e| *e == full || e == id);
        if !enabled(*p) || excluded {
            valid.push(None);
            pinned.push(None);
            continue;
        }
        let active: Vec<usize> = members.iter().copied().filter(|&b| f.bots[b].2).collect();
        let list = f
            .rules
            .priority
            .get(&full)
            .or_else(|| f.rules.priority.get(id));
        let pin = list.and_then(|list| {
            list.iter().find_map(|entry| {
                let bot_id = match entry.split_once(':') {
                    Some((bp, bid)) if bp == PLATFORMS[*p] => bid,
                    Some(_) => return None,
                    None => entry.as_str(),
                };
                active.iter().copied().find(|&b| f.bots[b].1 == bot_id)
            })
        });
        pinned.push(pin);
        valid.push(Some(match pin {
            Some(b) => vec![b],
            None => active,
        }));
    }
    Truth { valid, pinned }
}

/// Least Σ load² per platform and, among those, fewest voluntary moves.
fn brute_force(f: &Fleet, t: &Truth, platform: usize) -> (u64, usize) {
    let chans: Vec<usize> = (0..f.channels.len())
        .filter(|&c| f.channels[c].0 == platform)
        .filter(|&c| t.valid[c].as_ref().is_some_and(|v| !v.is_empty()))
        .collect();
    // Channels that lose their bot for want of a valid one are moves whatever we do.
    let dropped = (0..f.channels.len())
        .filter(|&c| f.channels[c].0 == platform && f.previous.contains_key(&c))
        .filter(|&c| t.valid[c].as_ref().is_some_and(|v| v.is_empty()))
        .count();
    let mut best = (u64::MAX, usize::MAX);
    let mut choice = vec![0usize; chans.len()];
    loop {
        let mut load = vec![0u64; f.bots.len()];
        let mut moves = dropped;
        for (i, &c) in chans.iter().enumerate() {
            let bot = t.valid[c].as_ref().unwrap()[choice[i]];
            load[bot] += 1;
            if f.previous.get(&c).is_some_and(|&p| p != bot) {
                moves += 1;
            }
        }
        let sq = load.iter().map(|l| l * l).sum::<u64>();
        best = best.min((sq, moves));
        // next combination
        let mut i = 0;
        loop {
            if i == chans.len() {
                return best;
            }
            choice[i] += 1;
            if choice[i] < t.valid[chans[i]].as_ref().unwrap().len() {
                break;
            }
            choice[i] = 0;
            i += 1;
        }
    }
}

/// Checks a plan against the rules; returns (Σ load², moved channels) per enabled platform.
fn check_plan(
    f: &Fleet,
    t: &Truth,
    index: &FleetIndex,
    plan: &balance::Plan,
) -> Vec<(usize, u64, usize)> {
    let mut out = Vec::new();
    for (p, &name) in PLATFORMS.iter().enumerate() {
        let Some(pp) = plan.platform(name) else {
            let enabled = f.rules.enabled_platforms.is_empty()
                || f.rules.enabled_platforms.iter().any(|e| e == PLATFORMS[p]);
            assert!(
                !enabled || index.platform(PLATFORMS[p]).is_none(),
                "enabled platform planned"
            );
            continue;
        };
        let pi = index.platform(PLATFORMS[p]).unwrap();
        let mut load = vec![0u64; f.bots.len()];
        let mut moved = 0;
        for (c, (cp, id, _)) in f.channels.iter().enumerate() {
            if *cp != p {
                continue;
            }
            let ci = pi.find_channel(id).unwrap();
            let after = pp
                .changes
                .iter()
                .find(|&&(x, _)| x == ci)
                .map_or(pi.assignee(ci), |&(_, b)| b);
            let got = after.map(|b| {
                let id = pi.bot_id(b);
                f.bots.iter().position(|x| x.0 == p && x.1 == id).unwrap()
            });
            match &t.valid[c] {
                None => assert_eq!(
                    got,
                    f.previous.get(&c).copied(),
                    "excluded channel {id} untouched"
                ),
                Some(valid) if valid.is_empty() => {
                    assert_eq!(got, None, "channel {id} has no valid bot");
                    moved += usize::from(f.previous.contains_key(&c));
                }
                Some(valid) => {
                    let bot = got.unwrap_or_else(|| panic!("channel {id} unassigned"));
                    assert!(valid.contains(&bot), "channel {id} on invalid bot {bot}");
                    if let Some(pin) = t.pinned[c] {
                        assert_eq!(bot, pin, "pin of {id}");
                    }
                    load[bot] += 1;
                    if f.previous.get(&c).is_some_and(|&prev| prev != bot) {
                        moved += 1;
                    }
                }
            }
        }
        let sq: u64 = load.iter().map(|l| l * l).sum();
        assert_eq!(sq, pp.stats.sum_sq, "reported Σ load²");
        assert_eq!(moved, pp.forced + pp.voluntary, "reported moves");
        out.push((p, sq, moved));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn optimal_matches_brute_force(f in fleet()) {
        let index = build_index(&f);
        let t = truth(&f);
        let plan = balance::plan(&index, &f.rules, Plan::Optimal);
        for (p, sq, moved) in check_plan(&f, &t, &index, &plan) {
            prop_assert_eq!((sq, moved), brute_force(&f, &t, p), "platform {}", PLATFORMS[p]);
        }
        let again = balance::plan(&index, &f.rules, Plan::Optimal);
        for (a, b) in plan.platforms.iter().zip(&again.platforms) {
            prop_assert_eq!(&a.changes, &b.changes, "deterministic");
        }
    }

    #[test]
    fn greedy_is_valid_and_never_better_than_optimal(f in fleet()) {
        let index = build_index(&f);
        let t = truth(&f);
        let greedy = balance::plan(&index, &f.rules, Plan::Greedy);
        let optimal = balance::plan(&index, &f.rules, Plan::Optimal);
        let g = check_plan(&f, &t, &index, &greedy);
        let o = check_plan(&f, &t, &index, &optimal);
        for ((_, gsq, _), (_, osq, _)) in g.iter().zip(&o) {
            prop_assert!(osq <= gsq);
        }
    }
}

/// One fleet event for the incremental test.
#[derive(Clone, Debug)]
enum Event {
    Online(usize, Vec<usize>),
    Offline(usize),
    Join(usize, usize),
    Leave(usize, usize),
}

fn events(nb: usize, nc: usize) -> impl Strategy<Value = Vec<Vec<Event>>> {
    let event = prop_oneof![
        (0..nb, proptest::collection::vec(0..nc, 0..nc)).prop_map(|(b, cs)| Event::Online(b, cs)),
        (0..nb).prop_map(Event::Offline),
        (0..nb, 0..nc).prop_map(|(b, c)| Event::Join(b, c)),
        (0..nb, 0..nc).prop_map(|(b, c)| Event::Leave(b, c)),
    ];
    proptest::collection::vec(proptest::collection::vec(event, 1..4), 1..8)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// The remembering planner re-plans incrementally; after every batch of events it must
    /// still be exact relative to the assignment it made before.
    #[test]
    fn incremental_replans_stay_exact(f in fleet(), batches in events(4, 8)) {
        let mut f = f;
        // one platform, every bot on it, so events can mix freely
        for b in &mut f.bots { b.0 = 0; }
        for c in &mut f.channels { c.0 = 0; }
        f.rules.enabled_platforms.clear();
        f.previous.clear();
        f.rules.exclude.retain(|e| !e.starts_with("discord:"));
        let mut index = build_index(&f);
        let mut planner = Planner::new(Plan::Optimal, f.rules.clone()).with_small_platform(0);
        let t = truth(&f);
        let plan = planner.plan(&mut index);
        check_plan(&f, &t, &index, &plan);
        for batch in batches {
            // the assignment before this batch is the previous one
            f.previous = current_assignment(&f, &index);
            for e in batch {
                apply(&mut f, &mut index, e);
            }
            let t = truth(&f);
            planner.set_rules(&f.rules);
            let plan = planner.plan(&mut index);
            for (p, sq, moved) in check_plan(&f, &t, &index, &plan) {
                prop_assert_eq!((sq, moved), brute_force(&f, &t, p));
            }
        }
    }
}

fn current_assignment(f: &Fleet, index: &FleetIndex) -> BTreeMap<usize, usize> {
    let pi = index.platform("onebot").unwrap();
    let mut out = BTreeMap::new();
    for (c, (_, id, _)) in f.channels.iter().enumerate() {
        if let Some(b) = pi.find_channel(id).and_then(|ci| pi.assignee(ci)) {
            let bid = pi.bot_id(b);
            out.insert(c, f.bots.iter().position(|x| x.1 == bid).unwrap());
        }
    }
    out
}

fn apply(f: &mut Fleet, index: &mut FleetIndex, e: Event) {
    let nc = f.channels.len();
    let bot = match e {
        Event::Online(b, _) | Event::Offline(b) | Event::Join(b, _) | Event::Leave(b, _) => b,
    };
    if bot >= f.bots.len() {
        return;
    }
    match e {
        Event::Online(b, cs) => {
            f.bots[b].2 = true;
            let cs: Vec<usize> = cs.into_iter().filter(|&c| c < nc).collect();
            for (c, ch) in f.channels.iter_mut().enumerate() {
                ch.2.retain(|&m| m != b);
                if cs.contains(&c) {
                    ch.2.push(b);
                }
            }
            let ids: Vec<String> = cs.iter().map(|&c| f.channels[c].1.clone()).collect();
            index.bot_online("onebot", &f.bots[b].1, &ids);
        }
        Event::Offline(b) => {
            f.bots[b].2 = false;
            index.bot_offline("onebot", &f.bots[b].1);
        }
        Event::Join(b, c) if c < nc => {
            if !f.channels[c].2.contains(&b) {
                f.channels[c].2.push(b);
            }
            index.channel_joined("onebot", &f.bots[b].1, &f.channels[c].1);
        }
        Event::Leave(b, c) if c < nc => {
            f.channels[c].2.retain(|&m| m != b);
            index.channel_left("onebot", &f.bots[b].1, &f.channels[c].1);
        }
        _ => {}
    }
}

/// A bot never seen before comes online after the first plan: the remembered state has room
/// for it and the re-plan stays exact.
#[test]
fn a_new_bot_joins_incrementally() {
    let mut index = FleetIndex::new();
    let channels: Vec<String> = (0..30).map(|c| format!("g{c}")).collect();
    index.bot_online("onebot", "1", &channels);
    index.bot_online("onebot", "2", &channels[..20]);
    let mut planner = Planner::new(Plan::Optimal, Rules::default()).with_small_platform(0);
    planner.plan(&mut index);
    index.bot_online("onebot", "3", &channels[10..]);
    let plan = planner.plan(&mut index);
    let p = &plan.platforms[0];
    let loads: Vec<u32> = p.stats.loads.iter().map(|l| l.1).collect();
    assert_eq!(loads, [10, 10, 10]);
    assert_eq!(
        (p.forced, p.voluntary),
        (0, 10),
        "exactly the ten channels the new bot takes"
    );
}

/// The flat fleet of the benchmark, small: alike bots in random groups, so a bot leaving or
/// coming back changes every other bot's load. The re-plans route it incrementally or, with
/// imbalances at most bots or past their budget, solve the levels again on the remembered
/// graph; either way they match a from-scratch plan of the same state in Σ load² and in moves.
#[test]
fn flat_fleet_replans_match_scratch_plans() {
    let mut rng = Lcg(7);
    let mut index = FleetIndex::new();
    let groups: Vec<String> = (0..400).map(|g| format!("g{g}")).collect();
    let mut lists = Vec::new();
    for b in 0..12 {
        let mine: Vec<String> = (0..groups.len())
            .filter(|_| rng.below(5) < 2)
            .map(|g| groups[g].clone())
            .collect();
        index.bot_online("onebot", &format!("{b}"), &mine);
        lists.push(mine);
    }
    let rules = Rules::default();
    let mut planner = Planner::new(Plan::Optimal, rules.clone()).with_small_platform(0);
    planner.plan(&mut index);
    for b in [3, 7, 3] {
        for online in [false, true] {
            let name = format!("{b}");
            if online {
                index.bot_online("onebot", &name, &lists[b]);
            } else {
                index.bot_offline("onebot", &name);
            }
            let scratch = balance::plan(&index, &rules, Plan::Optimal);
            let replan = planner.plan(&mut index);
            let (s, r) = (&scratch.platforms[0], &replan.platforms[0]);
            assert_eq!(
                (r.stats.sum_sq, r.forced, r.voluntary),
                (s.stats.sum_sq, s.forced, s.voluntary),
                "bot {b} online {online}"
            );
        }
    }
}
