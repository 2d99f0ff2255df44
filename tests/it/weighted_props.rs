//! Property tests of capacities and message weights: the planner against an independent brute
//! force on small fleets, and the certificate's promises on larger ones.
//!
//! * `balanceBy: channels` with capacities is exact: least excess over capacities, then least
//!   Σ load², then fewest moves, as an enumeration of every assignment finds.
//! * `balanceBy: messages` on small fleets is exact too (gap 0); its lower bound never exceeds
//!   the true optimum; on larger fleets the bound never exceeds the plan, and a fresh plan is
//!   never worse in Σ (weighted load)² than the count-balanced plan of the same fleet.

use auto_assign::balance::{self, BalanceBy, FleetIndex, Rules, Strategy as Plan};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Fleet {
    /// (id, online, capacity)
    bots: Vec<(String, bool, Option<f64>)>,
    /// (id, members, weight)
    channels: Vec<(String, Vec<usize>, f64)>,
    /// channel → previous bot
    previous: Vec<Option<usize>>,
}

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

fn fleet(max_bots: usize, max_channels: usize, capacities: bool) -> impl Strategy<Value = Fleet> {
    (1..=max_bots, 0..=max_channels, any::<u64>()).prop_map(move |(nb, nc, seed)| {
        let mut rng = Lcg(seed);
        let bots: Vec<_> = (0..nb)
            .map(|i| {
                let cap =
                    (capacities && rng.below(2) == 0).then(|| rng.below(4 * max_channels) as f64);
                (format!("{}", 1001 + i), rng.below(6) != 0, cap)
            })
            .collect();
        let channels: Vec<_> = (0..nc)
            .map(|i| {
                let members = (0..nb).filter(|_| rng.below(3) != 0).collect();
                // Zipf-like: mostly light, now and then heavy.
                let weight = (1 + rng.below(20)) as f64 * [1.0, 1.0, 1.0, 5.0, 20.0][rng.below(5)];
                (format!("g{i}"), members, weight)
            })
            .collect();
        let previous = channels
            .iter()
            .map(|(_, members, _): &(String, Vec<usize>, f64)| {
                (!members.is_empty() && rng.below(2) == 0)
                    .then(|| members[rng.below(members.len())])
            })
            .collect();
        Fleet {
            bots,
            channels,
            previous,
        }
    })
}

fn rules(f: &Fleet, by: BalanceBy) -> Rules {
    Rules {
        balance_by: by,
        capacity: f
            .bots
            .iter()
            .filter_map(|(id, _, cap)| cap.map(|c| (id.clone(), c)))
            .collect(),
        weight_floor: 0.0,
        min_gain: 0.0,
        ..Rules::default()
    }
}

fn index(f: &Fleet) -> FleetIndex {
    let mut index = FleetIndex::new();
    let p = index.platform_mut("onebot");
    for (id, online, _) in &f.bots {
        let b = p.add_bot(id);
        p.set_online(b, *online);
    }
    for (c, (id, members, weight)) in f.channels.iter().enumerate() {
        let ci = p.add_channel(id);
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

/// (excess, Σ load², moves) of the best assignment, by enumeration; loads count channels or
/// weights.
fn brute_force(f: &Fleet, by: BalanceBy) -> (f64, f64, usize) {
    let valid: Vec<Vec<usize>> = f
        .channels
        .iter()
        .map(|(_, m, _)| m.iter().copied().filter(|&b| f.bots[b].1).collect())
        .collect();
    let chans: Vec<usize> = (0..f.channels.len())
        .filter(|&c| !valid[c].is_empty())
        .collect();
    let dropped = (0..f.channels.len())
        .filter(|&c| valid[c].is_empty() && f.previous[c].is_some())
        .count();
    let size = |c: usize| match by {
        BalanceBy::Channels => 1.0,
        BalanceBy::Messages => f.channels[c].2,
    };
    let cap = |b: usize| match by {
        BalanceBy::Channels => f.bots[b].2.map(f64::floor),
        BalanceBy::Messages => f.bots[b].2,
    };
    let mut best: Option<(f64, f64, usize)> = None;
    let mut choice = vec![0usize; chans.len()];
    loop {
        let mut load = vec![0.0; f.bots.len()];
        let mut moves = dropped;
        for (i, &c) in chans.iter().enumerate() {
            let b = valid[c][choice[i]];
            load[b] += size(c);
            moves += usize::from(f.previous[c].is_some_and(|p| p != b));
        }
        let excess: f64 = (0..f.bots.len())
            .map(|b| cap(b).map_or(0.0, |c| (load[b] - c).max(0.0)))
            .sum();
        let sq: f64 = load.iter().map(|l| l * l).sum();
        let candidate = (excess, sq, moves);
        if best.is_none_or(|b| less(candidate, b)) {
            best = Some(candidate);
        }
        let mut i = 0;
        loop {
            if i == chans.len() {
                return best.unwrap();
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

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * (1.0 + a.abs().max(b.abs()))
}

fn less(a: (f64, f64, usize), b: (f64, f64, usize)) -> bool {
    if !close(a.0, b.0) {
        return a.0 < b.0;
    }
    if !close(a.1, b.1) {
        return a.1 < b.1;
    }
    a.2 < b.2
}

/// The plan's (excess, Σ load², moves), checked for validity.
fn measure(
    f: &Fleet,
    index: &FleetIndex,
    plan: &balance::Plan,
    by: BalanceBy,
) -> (f64, f64, usize) {
    let p = index.platform("onebot").unwrap();
    let pp = plan.platform("onebot").unwrap();
    let mut load = vec![0.0; f.bots.len()];
    let mut moves = 0;
    for (c, (id, members, weight)) in f.channels.iter().enumerate() {
        let ci = p.find_channel(id).unwrap();
        let after = pp
            .changes
            .iter()
            .find(|&&(x, _)| x == ci)
            .map_or(p.assignee(ci), |&(_, b)| b)
            .map(|b| b as usize);
        let valid: Vec<usize> = members.iter().copied().filter(|&b| f.bots[b].1).collect();
        match after {
            None => assert!(valid.is_empty(), "{id} left without a bot"),
            Some(b) => {
                assert!(valid.contains(&b), "{id} on an invalid bot");
                load[b] += match by {
                    BalanceBy::Channels => 1.0,
                    BalanceBy::Messages => *weight,
                };
            }
        }
        moves += usize::from(f.previous[c].is_some_and(|p| Some(p) != after));
    }
    let excess: f64 = pp.excess.iter().map(|&(_, e)| e).sum();
    let computed: f64 = (0..f.bots.len())
        .filter_map(|b| {
            let cap = f.bots[b].2?;
            let cap = if by == BalanceBy::Channels {
                cap.floor()
            } else {
                cap
            };
            Some((load[b] - cap).max(0.0))
        })
        .sum();
    assert!(
        close(excess, computed),
        "reported excess {excess} vs {computed}"
    );
    assert_eq!(moves, pp.forced + pp.voluntary, "reported moves");
    (excess, load.iter().map(|l| l * l).sum(), moves)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn capacities_in_channels_are_exact(f in fleet(4, 8, true)) {
        let index = index(&f);
        let plan = balance::plan(&index, &rules(&f, BalanceBy::Channels), Plan::Optimal);
        let got = measure(&f, &index, &plan, BalanceBy::Channels);
        let want = brute_force(&f, BalanceBy::Channels);
        prop_assert!(close(got.0, want.0) && close(got.1, want.1) && got.2 == want.2,
            "plan {:?}, brute force {:?}", got, want);
    }

    #[test]
    fn weighted_plans_of_small_fleets_are_exact(f in fleet(4, 7, true)) {
        let index = index(&f);
        let plan = balance::plan(&index, &rules(&f, BalanceBy::Messages), Plan::Optimal);
        let got = measure(&f, &index, &plan, BalanceBy::Messages);
        let want = brute_force(&f, BalanceBy::Messages);
        prop_assert!(close(got.0, want.0) && close(got.1, want.1) && got.2 == want.2,
            "plan {:?}, brute force {:?}", got, want);
        let cert = plan.platform("onebot").unwrap().certificate.clone().unwrap();
        prop_assert!(cert.exact);
        prop_assert_eq!(cert.gap(), 0.0);
        prop_assert!(close(cert.sum_sq, got.1));
    }

    #[test]
    fn the_lower_bound_never_exceeds_the_optimum(f in fleet(4, 7, false)) {
        // The bound alone, as a large fleet would get it: checked against the true optimum.
        let index = index(&f);
        let resolved = rules(&f, BalanceBy::Messages).resolve(index.platform("onebot").unwrap());
        let bound = balance::weighted::lower_bound_of(index.platform("onebot").unwrap(), &resolved);
        let want = brute_force(&f, BalanceBy::Messages);
        prop_assert!(bound <= want.1 * (1.0 + 1e-9) + 1e-9, "bound {} above the optimum {}", bound, want.1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn larger_weighted_plans_are_certified_and_beat_count_balance(f in fleet(8, 60, false)) {
        let mut f = f;
        f.previous.iter_mut().for_each(|p| *p = None);
        let index = index(&f);
        let plan = balance::plan(&index, &rules(&f, BalanceBy::Messages), Plan::Optimal);
        let got = measure(&f, &index, &plan, BalanceBy::Messages);
        let cert = plan.platform("onebot").unwrap().certificate.clone().unwrap();
        prop_assert!(cert.lower_bound <= got.1 * (1.0 + 1e-9) + 1e-9);
        prop_assert!(close(cert.sum_sq, got.1));
        let counted = balance::plan(&index, &rules(&f, BalanceBy::Channels), Plan::Optimal);
        let by_count = measure(&f, &index, &counted, BalanceBy::Messages);
        prop_assert!(got.1 <= by_count.1 * (1.0 + 1e-9) + 1e-9,
            "weighted {} worse than count-balanced {}", got.1, by_count.1);
    }
}
