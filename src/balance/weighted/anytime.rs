//! The improvement phase of a weighted plan, within `weights.searchTime`: large-neighbourhood
//! search (the channels of two to four bots re-solved exactly, again and again, from the
//! current plan), then the exact search of the whole platform ([`super::search`]), which
//! either proves the plan optimal or leaves a lower bound that accounts for the heaviest
//! channels being indivisible.
//!
//! Both only ever replace the plan by a better one (Σ L², then moves from the previous
//! assignment), so the result is never worse than the plan they start from.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::Instance;
use super::search::{self, Deadline, Item, Limits, NONE, Problem};
use crate::balance::rules::Interrupt;
use crate::index::{BotIx, PlatformIndex};

/// Platforms up to this many channels are searched (larger ones are within a hundredth of a
/// percent of the bound already, and a second's search would multiply their plan's time).
pub(super) const SEARCH_CHANNELS: usize = 50_000;
/// The exact search branches at most this many channels (deeper, a recursion this deep is
/// no longer worth its stack; the passes before it still bound the optimum).
const MAX_DEPTH: usize = 4096;
/// Nodes per neighbourhood re-solved.
const NEIGHBOURHOOD_NODES: u64 = 3000;
/// Rounds over every bot without a gain before the neighbourhood search gives up.
const IDLE_ROUNDS: usize = 3;

/// What the phase achieved.
pub(super) struct Searched {
    /// The plan is proven optimal (Σ L², then moves).
    pub proven: bool,
    /// A lower bound on Σ L² of any assignment (0 when none was established).
    pub lower_bound: f64,
}

/// Improves `assign` (and `load`) within `time`. Platforms with capacities are left alone.
pub(super) fn improve(
    inst: &Instance,
    p: &PlatformIndex,
    assign: &mut [Option<BotIx>],
    load: &mut [f64],
    time: Duration,
    interrupt: &Interrupt,
) -> Searched {
    let started = Instant::now();
    let deadline = Deadline {
        at: started + time,
        interrupt,
    };
    let none = Searched {
        proven: false,
        lower_bound: 0.0,
    };
    if time.is_zero() || inst.cap.iter().any(|c| c.is_finite()) || inst.channels() > SEARCH_CHANNELS
    {
        return none;
    }
    let flexible = (0..inst.channels())
        .filter(|&c| inst.valid(c).len() > 1 && inst.weight[c] > 0.0)
        .count();
    if flexible == 0 {
        return Searched {
            proven: true,
            lower_bound: load.iter().map(|l| l * l).sum(),
        };
    }
    // Small platforms: a short neighbourhood search for a good incumbent, then the exact
    // search. Others: the neighbourhood search for most of the time, the passes of the exact
    // search (improvements and the bound) for the rest.
    let small = inst.bots <= 64 && flexible <= MAX_DEPTH;
    let share = if small { 0.2 } else { 0.6 };
    let first = Deadline {
        at: started + time.mul_f64(share),
        interrupt,
    };
    neighbourhoods(inst, p, assign, load, first);
    whole(inst, assign, load, deadline)
}

/// The bound of the exact search's passes branching at most `depth` channels, from `assign`.
pub(super) fn bound(inst: &Instance, assign: &[Option<BotIx>], depth: usize) -> f64 {
    let (pr, tags) = problem(inst, assign);
    let start: Vec<u32> = tags
        .iter()
        .map(|&c| assign[c as usize].expect("placed"))
        .collect();
    let limits = Limits {
        deadline: Deadline {
            at: Instant::now() + Duration::from_secs(3600),
            interrupt: &Interrupt::never(),
        },
        nodes: u64::MAX,
        max_depth: depth,
        sweeps: search::EXACT_SWEEPS,
    };
    search::solve(&pr, start, limits).lower_bound
}

/// The whole platform as a search problem: the flexible channels (tagged with their index),
/// every other channel's weight fixed on its bot.
fn problem(inst: &Instance, assign: &[Option<BotIx>]) -> (Problem, Vec<u32>) {
    let mut base = vec![0.0; inst.bots];
    let mut items = Vec::new();
    for (c, a) in assign.iter().enumerate() {
        let Some(a) = *a else { continue };
        let (w, valid) = (inst.weight[c], inst.valid(c));
        if valid.len() > 1 && w > 0.0 {
            items.push(Item {
                weight: w,
                valid: valid.to_vec(),
                home: inst.previous[c].unwrap_or(NONE),
                tag: c as u32,
            });
        } else {
            base[a as usize] += w;
        }
    }
    Problem::new(base, items)
}

/// The exact search of the whole platform from `assign`.
fn whole(
    inst: &Instance,
    assign: &mut [Option<BotIx>],
    load: &mut [f64],
    deadline: Deadline<'_>,
) -> Searched {
    let (pr, tags) = problem(inst, assign);
    let start: Vec<u32> = tags
        .iter()
        .map(|&c| assign[c as usize].expect("placed"))
        .collect();
    let out = search::solve(
        &pr,
        start,
        Limits {
            deadline,
            nodes: u64::MAX,
            max_depth: MAX_DEPTH,
            sweeps: search::EXACT_SWEEPS,
        },
    );
    for (i, &c) in tags.iter().enumerate() {
        let c = c as usize;
        let (old, new) = (assign[c].expect("placed"), out.assign[i]);
        if old != new {
            load[old as usize] -= inst.weight[c];
            load[new as usize] += inst.weight[c];
            assign[c] = Some(new);
        }
    }
    Searched {
        proven: out.proven,
        lower_bound: out.lower_bound,
    }
}

/// Large-neighbourhood search: for each bot in turn (heaviest first), it and one to three bots
/// sharing channels with it; their channels that may go to two of them or more are re-solved
/// by the exact search (node-limited) with the other bots' loads fixed, and kept when better.
fn neighbourhoods(
    inst: &Instance,
    p: &PlatformIndex,
    assign: &mut [Option<BotIx>],
    load: &mut [f64],
    deadline: Deadline<'_>,
) {
    let bots = inst.bots;
    // Channels on each bot, kept up to date.
    let mut on: Vec<Vec<u32>> = vec![Vec::new(); bots];
    for (c, a) in assign.iter().enumerate() {
        if let Some(a) = a {
            on[*a as usize].push(c as u32);
        }
    }
    // Bots sharing a channel with each bot.
    let mut near: Vec<Vec<u32>> = vec![Vec::new(); bots];
    let mut seen = vec![u32::MAX; bots];
    for (b, near) in near.iter_mut().enumerate() {
        for &c in p.channels_of(b as BotIx) {
            let valid = inst.valid(c as usize);
            if !valid.contains(&(b as BotIx)) {
                continue;
            }
            for &o in valid {
                if o as usize != b && seen[o as usize] != b as u32 {
                    seen[o as usize] = b as u32;
                    near.push(o);
                }
            }
        }
    }
    let mut rng = StdRng::seed_from_u64(0x61);
    let mut idle = 0;
    let mut in_set = vec![false; bots];
    while idle < IDLE_ROUNDS {
        let mut gained = false;
        let mut order: Vec<usize> = (0..bots).filter(|&b| !near[b].is_empty()).collect();
        order.sort_by(|&a, &b| load[b].total_cmp(&load[a]).then(a.cmp(&b)));
        for (round, &a) in order.iter().enumerate() {
            if deadline.reached() {
                return;
            }
            // The neighbourhood: a, its least-loaded neighbour, and up to two at random.
            let size = 2 + (round + idle) % 3;
            let mut set = vec![a as u32];
            let least = near[a]
                .iter()
                .copied()
                .min_by(|&x, &y| load[x as usize].total_cmp(&load[y as usize]))
                .expect("a neighbour");
            set.push(least);
            for _ in 0..8 {
                if set.len() >= size {
                    break;
                }
                let from = set[rng.random_range(0..set.len())] as usize;
                if near[from].is_empty() {
                    continue;
                }
                let o = near[from][rng.random_range(0..near[from].len())];
                if !set.contains(&o) {
                    set.push(o);
                }
            }
            if resolve(inst, &set, &mut on, &mut in_set, assign, load, deadline) {
                gained = true;
            }
        }
        idle = if gained { 0 } else { idle + 1 };
    }
}

/// Re-solves the channels of the bots of `set`; true when the plan improved.
fn resolve(
    inst: &Instance,
    set: &[u32],
    on: &mut [Vec<u32>],
    in_set: &mut [bool],
    assign: &mut [Option<BotIx>],
    load: &mut [f64],
    deadline: Deadline<'_>,
) -> bool {
    for &b in set {
        in_set[b as usize] = true;
    }
    let local = |b: BotIx| set.iter().position(|&x| x == b).map(|i| i as u32);
    let mut base: Vec<f64> = set.iter().map(|&b| load[b as usize]).collect();
    let mut items = Vec::new();
    for (i, &b) in set.iter().enumerate() {
        for &c in &on[b as usize] {
            let c = c as usize;
            let w = inst.weight[c];
            if w <= 0.0 {
                continue;
            }
            let valid: Vec<u32> = inst
                .valid(c)
                .iter()
                .filter(|&&v| in_set[v as usize])
                .filter_map(|&v| local(v))
                .collect();
            if valid.len() < 2 {
                continue;
            }
            base[i] -= w;
            items.push(Item {
                weight: w,
                valid,
                home: inst.previous[c].and_then(local).unwrap_or(NONE),
                tag: c as u32,
            });
        }
    }
    for &b in set {
        in_set[b as usize] = false;
    }
    if items.len() < 2 {
        return false;
    }
    // Rounding: the fixed part is what remains of each load.
    for b in &mut base {
        if b.abs() < 1e-9 {
            *b = 0.0;
        }
    }
    let (pr, tags) = Problem::new(base, items);
    let start: Vec<u32> = tags
        .iter()
        .map(|&c| local(assign[c as usize].expect("placed")).expect("in the set"))
        .collect();
    let before = pr.score(&start);
    let out = search::solve(
        &pr,
        start,
        Limits {
            deadline,
            nodes: NEIGHBOURHOOD_NODES,
            max_depth: usize::MAX,
            sweeps: search::NEIGHBOURHOOD_SWEEPS,
        },
    );
    let eps = if pr.integral() {
        0.5
    } else {
        search::TIE * before.0
    };
    let gain = out.sum_sq < before.0 - eps || (out.sum_sq <= before.0 && out.moves < before.1);
    if !gain {
        return false;
    }
    for (i, &c) in tags.iter().enumerate() {
        let c = c as usize;
        let old = assign[c].expect("placed");
        let new = set[out.assign[i] as usize];
        if old != new {
            let w = inst.weight[c];
            load[old as usize] -= w;
            load[new as usize] += w;
            assign[c] = Some(new);
            let list = &mut on[old as usize];
            let at = list.iter().position(|&x| x as usize == c).expect("listed");
            list.swap_remove(at);
            on[new as usize].push(c as u32);
        }
    }
    true
}
