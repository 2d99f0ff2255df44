//! Issue 61: the weighted plan's exact search and its bound against brute force, and the
//! rebalance after a provisional pass counting its moves from the assignment before it.
//!
//! * Fleets with more assignments than the planner enumerates (so the branch and bound, not
//!   the enumeration, decides): the plan is the optimum an independent enumeration finds (least
//!   Σ (weighted load)², then fewest moves, with whole weights; Σ within 10⁻⁹ with real ones),
//!   and says so (`optimal`, gap 0).
//! * The bound of the search's passes that branch only the heaviest channels never exceeds the
//!   true optimum, however few channels they branch.
//! * A bot goes offline, its channels get their provisional bots, and the rebalance that follows
//!   moves no more channels, counted from the assignment before the event, than the fewest an
//!   enumeration finds among the assignments of least Σ load² (the differential test's failure:
//!   one voluntary move more than needed, with Σ load² optimal).

use std::collections::HashMap;

use auto_assign::balance::provisional::{self, Stored};
use auto_assign::balance::{self, BalanceBy, Before, FleetIndex, Planner, Rules, Strategy as Plan};
use proptest::prelude::*;

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

#[derive(Clone, Debug)]
struct Fleet {
    bots: usize,
    online: Vec<bool>,
    /// (members, weight)
    channels: Vec<(Vec<usize>, f64)>,
    previous: Vec<Option<usize>>,
}

/// Four online bots; each channel in three of them (two in four), heavy-tailed weights, half
/// the channels with a previous assignee: at least 3^9 · 4² assignments, more than the planner
/// enumerates (50,000), so its search decides.
fn searched_fleet(seed: u64, real: bool) -> Fleet {
    let mut rng = Lcg(seed);
    let bots = 4;
    let n = 11;
    let channels: Vec<(Vec<usize>, f64)> = (0..n)
        .map(|i| {
            let size = if i < 2 { 4 } else { 3 };
            let mut members: Vec<usize> = (0..bots).collect();
            while members.len() > size {
                members.remove(rng.below(members.len()));
            }
            let mut weight = (1 + rng.below(30)) as f64 * [1.0, 1.0, 2.0, 7.0, 40.0][rng.below(5)];
            if real {
                // As the index keeps it (f32).
                weight = (weight + rng.below(1000) as f64 / 997.0) as f32 as f64;
            }
            (members, weight)
        })
        .collect();
    let previous = channels
        .iter()
        .map(|(m, _)| (rng.below(2) == 0).then(|| m[rng.below(m.len())]))
        .collect();
    Fleet {
        bots,
        online: vec![true; bots],
        channels,
        previous,
    }
}

/// Up to five bots (one in six offline), up to eight channels, each bot in a channel with
/// probability 2/3, unit or heavy-tailed weights; every channel with a previous assignee.
fn small_fleet(seed: u64) -> Fleet {
    let mut rng = Lcg(seed);
    let bots = 2 + rng.below(4);
    let online = (0..bots).map(|_| rng.below(6) != 0).collect();
    let n = rng.below(9);
    let channels: Vec<(Vec<usize>, f64)> = (0..n)
        .map(|_| {
            let members = (0..bots).filter(|_| rng.below(3) != 0).collect();
            ((members), (1 + rng.below(20)) as f64)
        })
        .collect();
    let previous = channels
        .iter()
        .map(|(m, _): &(Vec<usize>, f64)| (!m.is_empty()).then(|| m[rng.below(m.len())]))
        .collect();
    Fleet {
        bots,
        online,
        channels,
        previous,
    }
}

fn rules(by: BalanceBy) -> Rules {
    Rules {
        balance_by: by,
        weight_floor: 0.0,
        min_gain: 0.0,
        search_time: 30.0,
        ..Rules::default()
    }
}

fn bot_id(b: usize) -> String {
    format!("{}", 1001 + b)
}

fn index(f: &Fleet) -> FleetIndex {
    let mut index = FleetIndex::new();
    let p = index.platform_mut("onebot");
    for b in 0..f.bots {
        let ix = p.add_bot(&bot_id(b));
        assert_eq!(ix as usize, b);
        p.set_online(ix, f.online[b]);
    }
    for (c, (members, weight)) in f.channels.iter().enumerate() {
        let ci = p.add_channel(&format!("g{c}"));
        assert_eq!(ci as usize, c);
        p.set_weight(ci, *weight);
        for &b in members {
            p.join(b as u32, ci);
        }
        if let Some(b) = f.previous[c] {
            p.set_assignee(ci, Some(b as u32));
        }
    }
    p.take_journal();
    index
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
}

/// (Σ load², moves from `previous`) of the best assignment by enumeration, loads counting
/// channels or weights, over the online members.
fn brute_force(f: &Fleet, by: BalanceBy, previous: &[Option<usize>]) -> (f64, usize) {
    let valid: Vec<Vec<usize>> = f
        .channels
        .iter()
        .map(|(m, _)| m.iter().copied().filter(|&b| f.online[b]).collect())
        .collect();
    let chans: Vec<usize> = (0..f.channels.len())
        .filter(|&c| !valid[c].is_empty())
        .collect();
    let dropped = (0..f.channels.len())
        .filter(|&c| valid[c].is_empty() && previous[c].is_some())
        .count();
    let size = |c: usize| match by {
        BalanceBy::Channels => 1.0,
        BalanceBy::Messages => f.channels[c].1,
    };
    let mut best: Option<(f64, usize)> = None;
    let mut choice = vec![0usize; chans.len()];
    let mut load = vec![0.0; f.bots];
    loop {
        load.iter_mut().for_each(|l| *l = 0.0);
        let mut moves = dropped;
        for (i, &c) in chans.iter().enumerate() {
            let b = valid[c][choice[i]];
            load[b] += size(c);
            moves += usize::from(previous[c].is_some_and(|p| p != b));
        }
        let sq: f64 = load.iter().map(|l| l * l).sum();
        let better = match best {
            None => true,
            // Never a larger Σ, even within rounding: ties must not creep upward.
            Some((s, m)) => sq < s && !close(sq, s) || sq <= s && moves < m,
        };
        if better {
            best = Some((sq, moves));
        }
        let mut i = 0;
        loop {
            if i == chans.len() {
                return best.expect("one assignment at least");
            }
            choice[i] += 1;
            if choice[i] < valid[chans[i]].len() {
                break;
            }
            choice[i] = 0;
            i += 1;
        }
    }
}

/// Every channel's bot after `plan` (applied to a copy of nothing: read from the changes).
fn after(index: &FleetIndex, plan: &balance::Plan) -> Vec<Option<usize>> {
    let p = index.platform("onebot").unwrap();
    let pp = plan.platform("onebot").unwrap();
    let changed: HashMap<u32, Option<u32>> = pp.changes.iter().copied().collect();
    (0..p.channel_count() as u32)
        .map(|c| {
            changed
                .get(&c)
                .copied()
                .unwrap_or_else(|| p.assignee(c))
                .map(|b| b as usize)
        })
        .collect()
}

/// (Σ load², moves from `previous`), the assignment checked valid.
fn measure(
    f: &Fleet,
    by: BalanceBy,
    assign: &[Option<usize>],
    previous: &[Option<usize>],
) -> (f64, usize) {
    let mut load = vec![0.0; f.bots];
    let mut moves = 0;
    for (c, (members, weight)) in f.channels.iter().enumerate() {
        let valid: Vec<usize> = members.iter().copied().filter(|&b| f.online[b]).collect();
        match assign[c] {
            None => assert!(valid.is_empty(), "g{c} left without a bot"),
            Some(b) => {
                assert!(valid.contains(&b), "g{c} on an invalid bot");
                load[b] += match by {
                    BalanceBy::Channels => 1.0,
                    BalanceBy::Messages => *weight,
                };
            }
        }
        moves += usize::from(previous[c].is_some_and(|p| Some(p) != assign[c]));
    }
    (load.iter().map(|l| l * l).sum(), moves)
}

proptest! {
    #![proptest_config(crate::support::fleets::config(200))]

    #[test]
    fn the_search_proves_the_optimum_with_whole_weights(seed in any::<u64>()) {
        let f = searched_fleet(seed, false);
        let index = index(&f);
        let plan = balance::plan(&index, &rules(BalanceBy::Messages), Plan::Optimal);
        let got = measure(&f, BalanceBy::Messages, &after(&index, &plan), &f.previous);
        let want = brute_force(&f, BalanceBy::Messages, &f.previous);
        prop_assert!(close(got.0, want.0) && got.1 == want.1, "plan {:?}, brute force {:?}", got, want);
        let cert = plan.platform("onebot").unwrap().certificate.clone().unwrap();
        prop_assert!(cert.optimal(), "{:?}", cert);
        prop_assert_eq!(cert.gap(), 0.0);
        prop_assert!(cert.lower_bound <= want.0 * (1.0 + 1e-12));
    }

    #[test]
    fn the_search_proves_the_optimum_with_real_weights(seed in any::<u64>()) {
        let f = searched_fleet(seed, true);
        let index = index(&f);
        let plan = balance::plan(&index, &rules(BalanceBy::Messages), Plan::Optimal);
        let got = measure(&f, BalanceBy::Messages, &after(&index, &plan), &f.previous);
        let want = brute_force(&f, BalanceBy::Messages, &f.previous);
        // Σ within 10⁻⁹ (what "optimal" promises when weights are not whole numbers).
        prop_assert!((got.0 - want.0).abs() <= 1e-9 * want.0, "plan {:?}, brute force {:?}", got, want);
        let cert = plan.platform("onebot").unwrap().certificate.clone().unwrap();
        prop_assert!(cert.optimal(), "{:?}", cert);
        prop_assert!(cert.lower_bound <= want.0 * (1.0 + 1e-12));
    }

    #[test]
    fn the_branched_bound_never_exceeds_the_optimum(seed in any::<u64>(), depth in 0usize..6, real in any::<bool>()) {
        let mut f = searched_fleet(seed, real);
        f.previous.iter_mut().for_each(|p| *p = None);
        let index = index(&f);
        let p = index.platform("onebot").unwrap();
        let resolved = rules(BalanceBy::Messages).resolve(p);
        let bound = balance::weighted::branched_lower_bound_of(p, &resolved, depth);
        let plain = balance::weighted::lower_bound_of(p, &resolved);
        let want = brute_force(&f, BalanceBy::Messages, &f.previous);
        prop_assert!(bound <= want.0 * (1.0 + 1e-12) + 1e-9, "bound {} above the optimum {}", bound, want.0);
        prop_assert!(bound >= plain * (1.0 - 1e-12), "bound {} below the plain one {}", bound, plain);
    }
}

/// Cases proptest found (real weights): a bound above the optimum, once the incumbent had crept
/// up within ties, and the plan's Σ taken for the bound.
#[test]
fn found_cases_hold() {
    for (seed, depth) in [
        (10114767228173095845u64, 2),
        (3247461947724345659, usize::MAX),
    ] {
        let f = searched_fleet(seed, true);
        let index = index(&f);
        let want = brute_force(&f, BalanceBy::Messages, &f.previous);
        let p = index.platform("onebot").unwrap();
        let resolved = rules(BalanceBy::Messages).resolve(p);
        let bound = balance::weighted::branched_lower_bound_of(p, &resolved, depth);
        assert!(
            bound <= want.0 * (1.0 + 1e-12),
            "bound {bound} above {}",
            want.0
        );
        let plan = balance::plan(&index, &rules(BalanceBy::Messages), Plan::Optimal);
        let cert = plan
            .platform("onebot")
            .unwrap()
            .certificate
            .clone()
            .unwrap();
        assert!(
            cert.lower_bound <= want.0 * (1.0 + 1e-12),
            "{cert:?} against {}",
            want.0
        );
    }
}

/// A bot goes offline; the provisional pass gives its channels bots at once; the rebalance
/// (counting from the assignment before the event) must reach least Σ load² with the fewest
/// moves from that assignment.
fn check_provisional_then_rebalance(
    f: &Fleet,
    by: BalanceBy,
    gone: usize,
) -> Result<(), TestCaseError> {
    let rules = rules(by);
    let mut index = index(f);
    let mut planner = Planner::new(Plan::Optimal, rules.clone()).with_small_platform(0);
    // The assignment before the event: an optimal plan of the fleet as it is.
    planner.plan(&mut index);
    let p = index.platform("onebot").unwrap();
    let before_event: Vec<Option<usize>> = (0..p.channel_count() as u32)
        .map(|c| p.assignee(c).map(|b| b as usize))
        .collect();
    // The event, and the provisional pass over the departed bot's channels.
    let mut g = f.clone();
    g.online[gone] = false;
    let p = index.platform_mut("onebot");
    let mut candidates: Vec<u32> = p.channels_of(gone as u32).to_vec();
    p.set_online(gone as u32, false);
    let resolved = rules.resolve(p);
    let done = provisional::assign(p, &resolved, &mut candidates, Stored::Replace);
    let mut before = Before::default();
    let earlier = before.entry("onebot".to_owned()).or_default();
    for (&(c, _), &was) in done.changes.iter().zip(&done.earlier) {
        earlier.entry(c).or_insert(was);
        prop_assert_eq!(was.map(|b| b as usize), before_event[c as usize]);
    }
    let plan = planner.plan_counting_from(&mut index, &before);
    let p = index.platform("onebot").unwrap();
    let final_assignment: Vec<Option<usize>> = (0..p.channel_count() as u32)
        .map(|c| p.assignee(c).map(|b| b as usize))
        .collect();
    prop_assert_eq!(
        &after(&index, &plan),
        &final_assignment,
        "the plan was applied"
    );
    let got = measure(&g, by, &final_assignment, &before_event);
    let want = brute_force(&g, by, &before_event);
    prop_assert!(
        close(got.0, want.0),
        "Σ load² {} vs the optimum {}",
        got.0,
        want.0
    );
    prop_assert_eq!(got.1, want.1, "moves from before the event (plan, fewest)");
    Ok(())
}

/// The case proptest found against the rebalance that counted from the provisional bots: one
/// voluntary move more than needed.
#[test]
fn the_found_provisional_case_holds() {
    let mut f = small_fleet(16006874839224926177);
    f.online.iter_mut().for_each(|o| *o = true);
    let gone = 3 % f.bots;
    check_provisional_then_rebalance(&f, BalanceBy::Messages, gone).unwrap();
}

proptest! {
    #![proptest_config(crate::support::fleets::config(1500))]

    #[test]
    fn a_rebalance_after_a_provisional_pass_moves_the_fewest_from_before_the_event(
        seed in any::<u64>(), gone in 0usize..5, messages in any::<bool>()
    ) {
        let mut f = small_fleet(seed);
        f.online.iter_mut().for_each(|o| *o = true);
        let gone = gone % f.bots;
        let by = if messages { BalanceBy::Messages } else { BalanceBy::Channels };
        check_provisional_then_rebalance(&f, by, gone)?;
    }
}
