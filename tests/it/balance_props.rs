//! Property tests: the planner against an independent brute force on small fleets.
//!
//! The brute force re-implements the rules from their definition (not from the crate) and
//! enumerates every assignment, so `optimal` must match it exactly in Σ load² and in the number
//! of moved channels; `greedy` must be valid and never better than `optimal`.
//!
//! The fleets come from the shared generator ([`crate::support::fleets`]), on two platforms; the
//! brute force reads their rules as written (keys and entries as text), not the fleet's lists.

use auto_assign::balance::FleetIndex;
use auto_assign::balance::{self, Planner, Rules, Strategy as Plan};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::support::fleets::{Bot, Channel, Fleet, Knobs, Lcg, PLATFORMS, config, fleets};

/// Small fleets on two platforms (a bot or a channel in six on the second) under every rule:
/// `enabledPlatforms` in two fleets out of three, a channel in two with a priority list (of any
/// bots, of either platform), a channel in four excluded, keys and entries short and full, and a
/// channel in two previously on a bot that is not a member.
const KNOBS: Knobs = Knobs {
    offline: 6,
    pin: 2,
    stranger: 1,
    exclude: 4,
    empty: 24,
    degree: 4,
    connected: false,
    second: 6,
    enabled: true,
    forced: 2,
    capacity: 0,
    weights: false,
};

/// Up to 4 bots × 8 channels, mostly at least 2 × 5.
fn fleet() -> impl Strategy<Value = Fleet> {
    let sizes = prop_oneof![1 => (1usize..=4, 0usize..=8), 4 => (2usize..=4, 5usize..=8)];
    fleets(KNOBS, (4, 8), sizes)
}

/// The rules, straight from their definition.
struct Truth {
    /// per channel: None = excluded or platform disabled, Some(valid bots)
    valid: Vec<Option<Vec<usize>>>,
    pinned: Vec<Option<usize>>,
}

/// Reads the rules as written (keys and entries as text), not the fleet's own lists.
fn truth(f: &Fleet, rules: &Rules) -> Truth {
    let enabled = |p: usize| {
        rules.enabled_platforms.is_empty()
            || rules.enabled_platforms.iter().any(|e| e == PLATFORMS[p])
    };
    let mut valid = Vec::new();
    let mut pinned = Vec::new();
    for ch in &f.channels {
        let (p, id) = (ch.platform, &ch.id);
        let full = format!("{}:{id}", PLATFORMS[p]);
        let excluded = rules.exclude.iter().any(|e| *e == full || e == id);
        if !enabled(p) || excluded {
            valid.push(None);
            pinned.push(None);
            continue;
        }
        let active: Vec<usize> = ch
            .members
            .iter()
            .copied()
            .filter(|&b| f.bots[b].online)
            .collect();
        let list = rules.priority.get(&full).or_else(|| rules.priority.get(id));
        let pin = list.and_then(|list| {
            list.iter().find_map(|entry| {
                let bot_id = match entry.split_once(':') {
                    Some((bp, bid)) if bp == PLATFORMS[p] => bid,
                    Some(_) => return None,
                    None => entry.as_str(),
                };
                active.iter().copied().find(|&b| f.bots[b].id == bot_id)
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
        .filter(|&c| f.channels[c].platform == platform)
        .filter(|&c| t.valid[c].as_ref().is_some_and(|v| !v.is_empty()))
        .collect();
    // Channels that lose their bot for want of a valid one are moves whatever we do.
    let dropped = (0..f.channels.len())
        .filter(|&c| f.channels[c].platform == platform && f.previous[c].is_some())
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
            if f.previous[c].is_some_and(|p| p != bot) {
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
    rules: &Rules,
    t: &Truth,
    index: &FleetIndex,
    plan: &balance::Plan,
) -> Vec<(usize, u64, usize)> {
    let mut out = Vec::new();
    for (p, &name) in PLATFORMS.iter().enumerate() {
        let Some(pp) = plan.platform(name) else {
            let enabled = rules.enabled_platforms.is_empty()
                || rules.enabled_platforms.iter().any(|e| e == PLATFORMS[p]);
            assert!(
                !enabled || index.platform(PLATFORMS[p]).is_none(),
                "enabled platform planned"
            );
            continue;
        };
        let pi = index.platform(PLATFORMS[p]).unwrap();
        let mut load = vec![0u64; f.bots.len()];
        let mut moved = 0;
        for (c, ch) in f.channels.iter().enumerate() {
            if ch.platform != p {
                continue;
            }
            let id = &ch.id;
            let ci = pi.find_channel(id).unwrap();
            let after = pp
                .changes
                .iter()
                .find(|&&(x, _)| x == ci)
                .map_or(pi.assignee(ci), |&(_, b)| b);
            let got = after.map(|b| {
                let id = pi.bot_id(b);
                f.bots
                    .iter()
                    .position(|x| x.platform == p && x.id == id)
                    .unwrap()
            });
            match &t.valid[c] {
                None => assert_eq!(got, f.previous[c], "excluded channel {id} untouched"),
                Some(valid) if valid.is_empty() => {
                    assert_eq!(got, None, "channel {id} has no valid bot");
                    moved += usize::from(f.previous[c].is_some());
                }
                Some(valid) => {
                    let bot = got.unwrap_or_else(|| panic!("channel {id} unassigned"));
                    assert!(valid.contains(&bot), "channel {id} on invalid bot {bot}");
                    if let Some(pin) = t.pinned[c] {
                        assert_eq!(bot, pin, "pin of {id}");
                    }
                    load[bot] += 1;
                    if f.previous[c].is_some_and(|prev| prev != bot) {
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

/// `optimal` matches the brute force on every platform, and plans the same twice.
fn optimal_matches_brute(f: &Fleet, rules: &Rules) -> Result<(), TestCaseError> {
    let index = f.index();
    let t = truth(f, rules);
    let plan = balance::plan(&index, rules, Plan::Optimal);
    for (p, sq, moved) in check_plan(f, rules, &t, &index, &plan) {
        prop_assert_eq!(
            (sq, moved),
            brute_force(f, &t, p),
            "platform {}",
            PLATFORMS[p]
        );
    }
    let again = balance::plan(&index, rules, Plan::Optimal);
    for (a, b) in plan.platforms.iter().zip(&again.platforms) {
        prop_assert_eq!(&a.changes, &b.changes, "deterministic");
    }
    Ok(())
}

/// `greedy` obeys the rules and never beats `optimal`.
fn greedy_valid_not_better(f: &Fleet, rules: &Rules) -> Result<(), TestCaseError> {
    let index = f.index();
    let t = truth(f, rules);
    let greedy = balance::plan(&index, rules, Plan::Greedy);
    let optimal = balance::plan(&index, rules, Plan::Optimal);
    let g = check_plan(f, rules, &t, &index, &greedy);
    let o = check_plan(f, rules, &t, &index, &optimal);
    for ((_, gsq, _), (_, osq, _)) in g.iter().zip(&o) {
        prop_assert!(osq <= gsq);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn optimal_matches_brute_force(f in fleet()) {
        optimal_matches_brute(&f, &f.rules())?;
    }

    #[test]
    fn greedy_is_valid_and_never_better_than_optimal(f in fleet()) {
        greedy_valid_not_better(&f, &f.rules())?;
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

/// One platform, every bot on it, so events can mix freely; no previous assignment. The rules
/// stay as they were written for two platforms (entries and keys naming `discord` now match
/// nothing), without `enabledPlatforms` and the exclusions of `discord` channels.
fn on_one_platform(mut f: Fleet, mut rules: Rules) -> (Fleet, Rules) {
    for b in &mut f.bots {
        b.platform = 0;
    }
    for c in &mut f.channels {
        c.platform = 0;
    }
    rules.enabled_platforms.clear();
    f.previous.iter_mut().for_each(|p| *p = None);
    rules.exclude.retain(|e| !e.starts_with("discord:"));
    (f, rules)
}

/// The remembering planner re-plans incrementally; after every batch of events it must still
/// be exact relative to the assignment it made before.
fn replans_stay_exact(
    (mut f, rules): (Fleet, Rules),
    batches: Vec<Vec<Event>>,
) -> Result<(), TestCaseError> {
    let mut index = f.index();
    let mut planner = Planner::new(Plan::Optimal, rules.clone()).with_small_platform(0);
    let t = truth(&f, &rules);
    let plan = planner.plan(&mut index);
    check_plan(&f, &rules, &t, &index, &plan);
    for batch in batches {
        // the assignment before this batch is the previous one
        f.previous = current_assignment(&f, &index);
        for e in batch {
            apply(&mut f, &mut index, e);
        }
        let t = truth(&f, &rules);
        planner.set_rules(&rules);
        let plan = planner.plan(&mut index);
        for (p, sq, moved) in check_plan(&f, &rules, &t, &index, &plan) {
            prop_assert_eq!((sq, moved), brute_force(&f, &t, p));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn incremental_replans_stay_exact(f in fleet(), batches in events(4, 8)) {
        let rules = f.rules();
        replans_stay_exact(on_one_platform(f, rules), batches)?;
    }
}

fn current_assignment(f: &Fleet, index: &FleetIndex) -> Vec<Option<usize>> {
    let pi = index.platform("onebot").unwrap();
    let bots = f.bot_ids();
    f.channels
        .iter()
        .map(|ch| {
            let b = pi.find_channel(&ch.id).and_then(|ci| pi.assignee(ci));
            b.map(|b| bots[pi.bot_id(b)])
        })
        .collect()
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
            f.bots[b].online = true;
            let cs: Vec<usize> = cs.into_iter().filter(|&c| c < nc).collect();
            for (c, ch) in f.channels.iter_mut().enumerate() {
                ch.members.retain(|&m| m != b);
                if cs.contains(&c) {
                    ch.members.push(b);
                }
            }
            let ids: Vec<String> = cs.iter().map(|&c| f.channels[c].id.clone()).collect();
            index.bot_online("onebot", &f.bots[b].id, &ids);
        }
        Event::Offline(b) => {
            f.bots[b].online = false;
            index.bot_offline("onebot", &f.bots[b].id);
        }
        Event::Join(b, c) if c < nc => {
            if !f.channels[c].members.contains(&b) {
                f.channels[c].members.push(b);
            }
            index.channel_joined("onebot", &f.bots[b].id, &f.channels[c].id);
        }
        Event::Leave(b, c) if c < nc => {
            f.channels[c].members.retain(|&m| m != b);
            index.channel_left("onebot", &f.bots[b].id, &f.channels[c].id);
        }
        _ => {}
    }
}

/// The cases proptest recorded in `balance_props.proptest-regressions` before the fleets were
/// shared (their seeds draw other fleets now), written out with their rules.
#[test]
fn recorded_cases() {
    // (platform, id, online) per bot; (platform, id, members, previous) per channel.
    type Written<'a> = (
        &'a [(usize, &'a str, bool)],
        &'a [(usize, &'a str, &'a [usize], Option<usize>)],
    );
    let fleet = |(bots, channels): Written| Fleet {
        bots: bots
            .iter()
            .map(|&(platform, id, online)| Bot {
                platform,
                id: id.into(),
                online,
                capacity: None,
            })
            .collect(),
        channels: channels
            .iter()
            .map(|&(platform, id, members, _)| Channel {
                platform,
                id: id.into(),
                members: members.to_vec(),
                weight: 0.0,
            })
            .collect(),
        previous: channels.iter().map(|c| c.3).collect(),
        ..Fleet::default()
    };
    let rules = |enabled: &[&str], priority: &[(&str, &[&str])], exclude: &[&str]| Rules {
        enabled_platforms: enabled.iter().map(|&p| p.into()).collect(),
        priority: priority
            .iter()
            .map(|&(c, list)| (c.into(), list.iter().map(|&b| b.into()).collect()))
            .collect(),
        exclude: exclude.iter().map(|&c| c.into()).collect(),
        ..Rules::default()
    };
    let fail = |e: TestCaseError| panic!("{e}");

    // A discord bot in two discord channels, one pinned to it; an onebot channel pinned to it too.
    let f = fleet((
        &[(1, "1001", true)],
        &[
            (1, "g0", &[0], Some(0)),
            (1, "g1", &[], Some(0)),
            (0, "g2", &[], None),
        ],
    ));
    let r = rules(
        &[],
        &[
            (
                "discord:g0",
                &["discord:1001", "discord:1001", "discord:1001"],
            ),
            ("g2", &["discord:1001"]),
        ],
        &[],
    );
    optimal_matches_brute(&f, &r).unwrap_or_else(fail);
    greedy_valid_not_better(&f, &r).unwrap_or_else(fail);

    // An event for a bot the fleet does not have.
    let f = fleet((&[(1, "1001", true)], &[]));
    let r = rules(&["onebot", "discord"], &[], &[]);
    let batches = vec![vec![Event::Online(1, vec![])]];
    replans_stay_exact(on_one_platform(f, r), batches).unwrap_or_else(fail);

    // A bot with most of the channels goes offline and comes back in one.
    let f = fleet((
        &[
            (0, "1001", true),
            (0, "1002", true),
            (0, "1003", true),
            (0, "1004", false),
        ],
        &[
            (0, "g0", &[0, 1, 3], Some(1)),
            (0, "g1", &[0, 2, 3], Some(0)),
            (0, "g2", &[0, 1, 2, 3], Some(1)),
            (0, "g3", &[0, 1, 3], Some(1)),
            (0, "g4", &[1, 2, 3], None),
            (0, "g5", &[3], Some(0)),
            (0, "g6", &[3], Some(0)),
        ],
    ));
    let r = rules(
        &[],
        &[
            ("g4", &["onebot:1004", "1003"]),
            ("onebot:g2", &["1002", "1002", "onebot:1001"]),
        ],
        &["g6"],
    );
    let batches = vec![vec![Event::Offline(0)], vec![Event::Online(0, vec![2])]];
    replans_stay_exact(on_one_platform(f, r), batches).unwrap_or_else(fail);
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
