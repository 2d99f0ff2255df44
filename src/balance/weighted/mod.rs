//! `balanceBy: messages`: least Σ (weighted load)², where a bot's load is the sum of its
//! channels' weights (their message rates), within each bot's capacity, with a certificate.
//!
//! With unequal weights the problem is NP-hard (it contains partition), so the plan comes with
//! a lower bound and its gap to it. The bound is that of the relaxation in which a channel's
//! weight may be split among its valid bots, a convex flow problem, through its dual: for any
//! prices `y` (one per bot),
//!
//! ```text
//!     Σ_b L_b²  ≥  g(y) = Σ_c w_c · min_{b valid for c} y_b  −  Σ_b y_b² / 4
//! ```
//!
//! for every split assignment, hence for every plan (minimise `L_b² − y_b L_b` over `L_b`, and
//! each channel's weight over its cheapest valid bot). At the relaxation's optimum L*, `g(2L*)`
//! equals its value (a channel's weight goes only to its least-loaded valid bots), so prices
//! from a good split give a tight bound. We take them from the plan's own loads and improve
//! them by Frank–Wolfe steps on the relaxation (each one a look at every membership), keeping
//! the best `g` seen: any `g` is a valid bound, so the certificate never depends on the steps
//! having converged.
//!
//! The plan itself: every channel keeps a valid assignee; a channel without one goes to its
//! least-loaded valid bot, heaviest first; then single moves that lower (excess over capacity,
//! Σ L²) lexicographically. A channel on bot `a` with a valid bot `b` such that `L_b + w < L_a`
//! gains by moving; once no channel gains (up to a ten-thousandth of the loads), every channel
//! sits within its own weight of its least-loaded valid bot, which bounds the gap by about
//! `2 Σ_c w_c²` over Σ L² (it is usually far below: 0.01% on the benchmark's fleets).
//! A fresh plan of a small platform also starts from the count-balanced optimum and keeps the
//! better of the two, so it is never worse than the count-balanced plan.
//!
//! Weights drift all the time, so voluntary moves must pay: unless the moves lower Σ L² by at
//! least `minGain` of the kept plan's (or lower the excess over capacities), the kept plan is the
//! plan. Forced and first placements are part of the kept plan and never held back.
//!
//! Small fleets (few enough choices to try them all) are solved exactly by enumeration. Then,
//! within `weights.searchTime` ([`anytime`]), large-neighbourhood search improves the plan and
//! an exact branch and bound ([`search`]) proves it optimal or tightens the bound.

mod anytime;
mod search;

use std::time::Duration;

use crate::balance::rules::Resolved;
use crate::index::{BotIx, ChanIx, PlatformIndex};

/// Channels up to which a fresh plan also starts from the count-balanced optimum.
const SMALL_PLATFORM: usize = 4096;
/// Assignments up to which a platform is solved exactly by trying every one.
const EXACT_CHOICES: u64 = 50_000;
/// Frank–Wolfe steps at most for the lower bound.
const BOUND_STEPS: usize = 16;
/// The least relative narrowing of two loads a move must bring (see [`better_bot`]).
const MOVE_THRESHOLD: f64 = 1e-4;
/// The least relative drop of Σ L² a sweep must bring for another to follow.
const SWEEP_GAIN: f64 = 1e-5;
/// Local search sweeps at most.
const SWEEPS: usize = 200;

/// How good a weighted plan is.
#[derive(Clone, Debug, PartialEq)]
pub struct Certificate {
    /// Σ (weighted load)² of the plan.
    pub sum_sq: f64,
    /// No assignment of the platform has a smaller Σ (weighted load)².
    pub lower_bound: f64,
    /// The best plan is proven optimal (least excess, Σ (weighted load)², then moves): found
    /// by trying every assignment, or by the exact search. The plan itself is that one unless
    /// `held_back`.
    pub exact: bool,
    /// Voluntary moves were found but held back: they gained less than `minGain`.
    pub held_back: bool,
    /// Σ (weighted load)² of the plan with every valid assignee kept (what `minGain` compares).
    pub kept_sum_sq: f64,
}

impl Certificate {
    /// The plan's relative distance above the lower bound: an upper bound on its distance
    /// from the optimum (0 for an exact plan that was not held back).
    pub fn gap(&self) -> f64 {
        if self.optimal() || self.sum_sq <= self.lower_bound || self.lower_bound <= 0.0 {
            0.0
        } else {
            (self.sum_sq - self.lower_bound) / self.lower_bound
        }
    }
}

impl Certificate {
    /// The plan is proven optimal: its gap is 0 whatever the bound says.
    pub fn optimal(&self) -> bool {
        self.exact && !self.held_back
    }
}

/// One platform's instance: valid bots per channel (CSR), weights, capacities, the previous
/// assignment.
struct Instance {
    bots: usize,
    start: Vec<u32>,
    valid: Vec<BotIx>,
    weight: Vec<f64>,
    cap: Vec<f64>,
    previous: Vec<Option<BotIx>>,
    /// Channels with a valid bot, heaviest first by powers of two (a counting sort: exact
    /// order matters little, and a sort of a million weights cost more than the search).
    order: Vec<u32>,
}

impl Instance {
    fn new(p: &PlatformIndex, resolved: &Resolved) -> Self {
        let channels = p.channel_count();
        let mut start = Vec::with_capacity(channels + 1);
        let mut valid = Vec::with_capacity(p.total_memberships());
        let mut weight = vec![0.0; channels];
        let mut previous = vec![None; channels];
        start.push(0);
        for c in 0..channels as ChanIx {
            let first = valid.len();
            valid.extend(resolved.valid_bots(p, c));
            let mine = &valid[first..];
            if !mine.is_empty() {
                weight[c as usize] = resolved.weight(p, c);
                previous[c as usize] = p.assignee(c).filter(|b| mine.contains(b));
            }
            start.push(valid.len() as u32);
        }
        let cap = (0..p.bot_count() as BotIx)
            .map(|b| resolved.capacity(b).unwrap_or(f64::INFINITY))
            .collect();
        let class = |w: f64| -> usize {
            // 0 for the heaviest (≥ 2^40), 63 for weights below 2^-23 and zero.
            (40 - w.max(1e-7).log2().floor().clamp(-23.0, 40.0) as i64) as usize
        };
        let mut counts = [0u32; 65];
        for c in 0..channels {
            if start[c + 1] > start[c] {
                counts[class(weight[c]) + 1] += 1;
            }
        }
        for i in 1..counts.len() {
            counts[i] += counts[i - 1];
        }
        let mut order = vec![0u32; counts[64] as usize];
        for c in 0..channels {
            if start[c + 1] > start[c] {
                let slot = &mut counts[class(weight[c])];
                order[*slot as usize] = c as u32;
                *slot += 1;
            }
        }
        Instance {
            bots: p.bot_count(),
            start,
            valid,
            weight,
            cap,
            previous,
            order,
        }
    }

    fn valid(&self, c: usize) -> &[BotIx] {
        &self.valid[self.start[c] as usize..self.start[c + 1] as usize]
    }

    fn channels(&self) -> usize {
        self.weight.len()
    }

    fn loads(&self, assign: &[Option<BotIx>]) -> Vec<f64> {
        let mut load = vec![0.0; self.bots];
        for (c, a) in assign.iter().enumerate() {
            if let Some(b) = a {
                load[*b as usize] += self.weight[c];
            }
        }
        load
    }

    /// (Σ excess over capacity, Σ L²).
    fn score(&self, load: &[f64]) -> (f64, f64) {
        let excess = load
            .iter()
            .zip(&self.cap)
            .map(|(&l, &c)| (l - c).max(0.0))
            .sum();
        (excess, load.iter().map(|l| l * l).sum())
    }
}

fn over(load: f64, cap: f64) -> f64 {
    (load - cap).max(0.0)
}

/// Plans one platform. `balanced` gives the count-balanced optimum (asked for only when there
/// is no previous assignment to start from). Excluded channels and channels without a valid
/// bot get `None`.
pub(crate) fn plan(
    p: &PlatformIndex,
    resolved: &Resolved,
    balanced: impl FnOnce() -> Vec<Option<BotIx>>,
) -> (Vec<Option<BotIx>>, Certificate) {
    let inst = Instance::new(p, resolved);
    let fresh = inst.previous.iter().all(Option::is_none);
    // The kept plan: every valid assignee stays, the other channels placed as well as they
    // can be around them (placing a channel that has no assignee is not a voluntary move).
    let (kept, kept_load) = if fresh {
        // Nothing to keep: every channel is placed heaviest first, then improved.
        let mut start = keep(&inst, vec![None; inst.channels()]);
        let mut load = inst.loads(&start);
        improve(&inst, p, &mut start, &mut load, Frozen::Nothing);
        if inst.channels() <= SMALL_PLATFORM {
            // There the count-balanced optimum costs next to nothing: improved too, the better
            // of the two is the plan, never worse than the count-balanced one. (On larger
            // fleets it would double the time; `bench --weighted` checks the promise there.)
            let mut other = balanced();
            other.resize(inst.channels(), None);
            for (c, a) in other.iter_mut().enumerate() {
                if a.is_some_and(|b| !inst.valid(c).contains(&b)) {
                    *a = None;
                }
            }
            let mut other = keep(&inst, other);
            let mut other_load = inst.loads(&other);
            improve(&inst, p, &mut other, &mut other_load, Frozen::Nothing);
            if lexi_less(inst.score(&other_load), inst.score(&load)) {
                (start, load) = (other, other_load);
            }
        }
        (start, load)
    } else {
        let mut kept = keep(&inst, inst.previous.clone());
        let mut load = inst.loads(&kept);
        improve(&inst, p, &mut kept, &mut load, Frozen::Previous);
        (kept, load)
    };
    let kept_score = inst.score(&kept_load);

    let (mut best, mut best_load, mut exact) = match exact(&inst) {
        Some(optimum) => {
            let load = inst.loads(&optimum);
            (optimum, load, true)
        }
        None if fresh => (kept.clone(), kept_load.clone(), false),
        None => {
            let mut assign = kept.clone();
            let mut load = kept_load.clone();
            improve(&inst, p, &mut assign, &mut load, Frozen::Nothing);
            (assign, load, false)
        }
    };
    // Any prices give a bound; the best plan's loads are nearest the relaxation's optimum.
    let mut lower_bound = if exact {
        inst.score(&best_load).1
    } else {
        lower_bound(&inst, &best_load)
    };
    if !exact {
        let searched = anytime::improve(
            &inst,
            p,
            &mut best,
            &mut best_load,
            Duration::from_secs_f64(resolved.search_time),
            &resolved.search_interrupt,
        );
        best_load = inst.loads(&best);
        exact = searched.proven;
        lower_bound = lower_bound.max(searched.lower_bound);
    }
    let best_score = inst.score(&best_load);

    let gains_excess = best_score.0 < kept_score.0 - 1e-9 * (1.0 + kept_score.0);
    let gains_enough = kept_score.1 - best_score.1 >= resolved.min_gain * kept_score.1;
    // Only a channel taken from its valid previous assignee is a voluntary move (the kept plan
    // keeps every one); a plan that differs elsewhere only places channels that had none.
    let voluntary = best
        .iter()
        .zip(&inst.previous)
        .any(|(b, prev)| prev.is_some() && b != prev);
    let held_back = !gains_excess && !gains_enough && voluntary;
    let (plan, score) = if held_back {
        (kept, kept_score)
    } else {
        (best, best_score)
    };
    (
        plan,
        Certificate {
            sum_sq: score.1,
            lower_bound: lower_bound.min(score.1),
            exact,
            held_back,
            kept_sum_sq: kept_score.1,
        },
    )
}

/// Which channels the local search may not move.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Frozen {
    Nothing,
    /// Channels on their valid previous assignee.
    Previous,
}

fn lexi_less(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 < b.0 - 1e-9 * (1.0 + b.0) || (a.0 <= b.0 + 1e-9 * (1.0 + b.0) && a.1 < b.1)
}

/// The lower bound alone (from the kept plan's loads): what a plan of this platform is
/// certified against.
pub fn lower_bound_of(p: &PlatformIndex, resolved: &Resolved) -> f64 {
    let inst = Instance::new(p, resolved);
    let kept = keep(&inst, inst.previous.clone());
    lower_bound(&inst, &inst.loads(&kept))
}

/// The lower bound of the exact search's passes that branch at most `depth` channels, the
/// heaviest (the split relaxation at the leaves of a branching on the heaviest channels),
/// from the heuristic plan: what a plan of this platform is certified against when its search
/// time ends after those passes. Platforms with capacities get the plain bound.
pub fn branched_lower_bound_of(p: &PlatformIndex, resolved: &Resolved, depth: usize) -> f64 {
    let inst = Instance::new(p, resolved);
    let mut assign = keep(&inst, inst.previous.clone());
    let mut load = inst.loads(&assign);
    improve(&inst, p, &mut assign, &mut load, Frozen::Nothing);
    let plain = lower_bound(&inst, &load);
    if inst.cap.iter().any(|c| c.is_finite()) {
        return plain;
    }
    plain.max(anytime::bound(&inst, &assign, depth))
}

/// `assign` completed: every channel without a bot, heaviest first, to the valid bot where
/// it adds the least excess over capacity, then the least-loaded.
fn keep(inst: &Instance, mut assign: Vec<Option<BotIx>>) -> Vec<Option<BotIx>> {
    let mut load = inst.loads(&assign);
    for &c in &inst.order {
        let c = c as usize;
        if assign[c].is_some() {
            continue;
        }
        let w = inst.weight[c];
        let cost = |b: BotIx| {
            let (l, cap) = (load[b as usize], inst.cap[b as usize]);
            (over(l + w, cap) - over(l, cap), l)
        };
        let mut best = inst.valid(c)[0];
        for &b in &inst.valid(c)[1..] {
            let ((eb, lb), (e, l)) = (cost(best), cost(b));
            if e < eb || (e == eb && l < lb) {
                best = b;
            }
        }
        assign[c] = Some(best);
        load[best as usize] += w;
    }
    assign
}

/// Single moves that lower (excess, Σ L²): a first sweep over every movable channel,
/// heaviest first; then sweeps over the channels of the bots whose load the last sweep changed
/// (only there can a new gain have appeared: a channel gains by moving from `a` to `b` only
/// once `L_a` has grown or `L_b` shrunk), until a sweep moves nothing, or lowers neither the
/// excess nor Σ L² by [`SWEEP_GAIN`] of it (later sweeps only trade light channels for gains
/// far below what the certificate can tell).
fn improve(
    inst: &Instance,
    p: &PlatformIndex,
    assign: &mut [Option<BotIx>],
    load: &mut [f64],
    frozen: Frozen,
) {
    let movable = |c: usize| {
        inst.valid(c).len() > 1
            && inst.weight[c] > 0.0
            && !(frozen == Frozen::Previous && inst.previous[c].is_some())
    };
    let capped = inst.cap.iter().any(|c| c.is_finite());
    let mut sweep: Vec<u32> = inst
        .order
        .iter()
        .copied()
        .filter(|&c| movable(c as usize))
        .collect();
    let mut touched = vec![false; inst.bots];
    let mut marked = vec![false; inst.channels()];
    let (mut excess, mut sum_sq) = inst.score(load);
    for _ in 0..SWEEPS {
        let mut moved = Vec::new();
        let before = (excess, sum_sq);
        for &c in &sweep {
            let c = c as usize;
            let Some(a) = assign[c] else { continue };
            if let Some(b) = better_bot(inst, c, a, load, capped) {
                let w = inst.weight[c];
                let (la, lb) = (load[a as usize], load[b as usize]);
                let (ca, cb) = (inst.cap[a as usize], inst.cap[b as usize]);
                excess += over(la - w, ca) + over(lb + w, cb) - over(la, ca) - over(lb, cb);
                sum_sq += 2.0 * w * (lb - la + w);
                assign[c] = Some(b);
                load[a as usize] -= w;
                load[b as usize] += w;
                for bot in [a, b] {
                    if !touched[bot as usize] {
                        touched[bot as usize] = true;
                        moved.push(bot);
                    }
                }
            }
        }
        let worth_another = before.0 - excess > 1e-9 * (1.0 + before.0)
            || before.1 - sum_sq > SWEEP_GAIN * before.1;
        if moved.is_empty() || !worth_another {
            break;
        }
        for b in moved {
            touched[b as usize] = false;
            for &c in p.channels_of(b) {
                marked[c as usize] = true;
            }
        }
        // In channel order: the valid lists are read front to back.
        sweep.clear();
        for (c, mark) in marked.iter_mut().enumerate() {
            if std::mem::take(mark) && movable(c) {
                sweep.push(c as u32);
            }
        }
    }
}

/// The valid bot channel `c` (on `a`) gains most by moving to, if any move gains.
fn better_bot(inst: &Instance, c: usize, a: BotIx, load: &[f64], capped: bool) -> Option<BotIx> {
    let w = inst.weight[c];
    let la = load[a as usize];
    // A move must narrow the two loads by more than a ten-thousandth of the larger: below
    // that the gain is negligible (it bounds the gap's growth by about 2 · 10⁻⁴) and light
    // channels would trade places for rounds on end, while rounding could make two bots trade
    // a channel forever.
    let tol = MOVE_THRESHOLD * la + 1e-9 * w;
    if !capped {
        // Σ L² changes by 2w(L_b − L_a + w): a gain when L_b + w < L_a; the most on the
        // least-loaded bot.
        let mut best = a;
        let mut least = f64::INFINITY;
        for &b in inst.valid(c) {
            if b != a && load[b as usize] < least {
                least = load[b as usize];
                best = b;
            }
        }
        return (least + w - la < -tol).then_some(best);
    }
    let ca = inst.cap[a as usize];
    let mut best: Option<(f64, f64, BotIx)> = None;
    for &b in inst.valid(c) {
        if b == a {
            continue;
        }
        let (lb, cb) = (load[b as usize], inst.cap[b as usize]);
        let d_excess = over(la - w, ca) + over(lb + w, cb) - over(la, ca) - over(lb, cb);
        let d_sq = lb + w - la;
        if best.is_none_or(|(e, s, _)| (d_excess, d_sq) < (e, s)) {
            best = Some((d_excess, d_sq, b));
        }
    }
    let (d_excess, d_sq, b) = best?;
    let tiny = 1e-9 * (la + w);
    (d_excess < -tiny || (d_excess <= tiny && d_sq < -tol)).then_some(b)
}

/// The best `g(y)` found: prices from the plan's loads, then from Frank–Wolfe steps on the
/// split relaxation.
fn lower_bound(inst: &Instance, plan_load: &[f64]) -> f64 {
    let mut load = plan_load.to_vec();
    let mut best = f64::NEG_INFINITY;
    let mut stalled = 0;
    let mut target = vec![0.0; inst.bots];
    for _ in 0..BOUND_STEPS {
        // g(2L), and where every channel would go at these prices.
        target.iter_mut().for_each(|t| *t = 0.0);
        let mut dual = 0.0;
        for c in 0..inst.channels() {
            let w = inst.weight[c];
            let valid = inst.valid(c);
            if w == 0.0 || valid.is_empty() {
                continue;
            }
            let mut cheapest = valid[0];
            for &b in &valid[1..] {
                if load[b as usize] < load[cheapest as usize] {
                    cheapest = b;
                }
            }
            dual += 2.0 * w * load[cheapest as usize];
            target[cheapest as usize] += w;
        }
        let primal: f64 = load.iter().map(|l| l * l).sum();
        dual -= primal;
        if dual > best {
            best = dual;
            stalled = 0;
        } else {
            // Frank–Wolfe zig-zags near a plan whose loads are already level: stop soon.
            stalled += 1;
            if stalled == 3 {
                break;
            }
        }
        // Close enough that more steps could not change what the gap says.
        if primal - best <= 1e-4 * primal {
            break;
        }
        // The exact line search of Σ (L + γ(D − L))² over γ ∈ [0, 1].
        let (mut num, mut den) = (0.0, 0.0);
        for (l, t) in load.iter().zip(&target) {
            num += l * (l - t);
            den += (l - t) * (l - t);
        }
        if den <= 0.0 {
            break;
        }
        let step = (num / den).clamp(0.0, 1.0);
        for (l, t) in load.iter_mut().zip(&target) {
            *l += step * (t - *l);
        }
    }
    best.max(0.0)
}

/// The best assignment found so far, with its (excess, Σ L², moves).
type Found = ((f64, f64, usize), Vec<Option<BotIx>>);

/// The optimum by trying every assignment, when there are few enough; lexicographic on
/// (excess, Σ L², moves from the previous assignment).
fn exact(inst: &Instance) -> Option<Vec<Option<BotIx>>> {
    let mut choices: u64 = 1;
    let mut free = Vec::new();
    let mut assign: Vec<Option<BotIx>> = vec![None; inst.channels()];
    for (c, slot) in assign.iter_mut().enumerate() {
        match inst.valid(c) {
            [] => {}
            [only] => *slot = Some(*only),
            more => {
                choices = choices.saturating_mul(more.len() as u64);
                if choices > EXACT_CHOICES {
                    return None;
                }
                free.push(c);
            }
        }
    }
    let mut load = inst.loads(&assign);
    let mut best: Option<Found> = None;
    search(inst, &free, 0, &mut assign, &mut load, &mut best);
    best.map(|(_, a)| a)
}

fn search(
    inst: &Instance,
    free: &[usize],
    i: usize,
    assign: &mut Vec<Option<BotIx>>,
    load: &mut Vec<f64>,
    best: &mut Option<Found>,
) {
    if i == free.len() {
        let (excess, sq) = inst.score(load);
        let moves = free
            .iter()
            .filter(|&&c| inst.previous[c].is_some_and(|p| assign[c] != Some(p)))
            .count();
        let better = match best {
            None => true,
            Some(((e, s, m), _)) => {
                let tol = |x: f64| 1e-9 * (1.0 + x.abs());
                excess < *e - tol(*e)
                    || (excess <= *e + tol(*e)
                        && (sq < *s - tol(*s) || (sq <= *s + tol(*s) && moves < *m)))
            }
        };
        if better {
            *best = Some(((excess, sq, moves), assign.clone()));
        }
        return;
    }
    let c = free[i];
    let w = inst.weight[c];
    for &b in inst.valid(c) {
        assign[c] = Some(b);
        load[b as usize] += w;
        search(inst, free, i + 1, assign, load, best);
        load[b as usize] -= w;
    }
    assign[c] = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::rules::{BalanceBy, Rules};

    fn platform(bots: &[(&str, &[&str])]) -> PlatformIndex {
        let mut p = PlatformIndex::new("onebot");
        for (bot, channels) in bots {
            p.bot_online(bot, channels);
        }
        p
    }

    fn weigh(p: &mut PlatformIndex, weights: &[(&str, f64)]) {
        for &(c, w) in weights {
            let c = p.find_channel(c).unwrap();
            p.set_weight(c, w);
        }
    }

    fn rules() -> Rules {
        Rules {
            balance_by: BalanceBy::Messages,
            min_gain: 0.0,
            ..Rules::default()
        }
    }

    #[test]
    fn the_bound_holds_for_every_split_and_is_tight_when_weights_split_evenly() {
        // Two bots in the same four channels of weight 10: the split optimum is 20 + 20.
        let mut p = platform(&[("1", &["a", "b", "c", "d"]), ("2", &["a", "b", "c", "d"])]);
        weigh(
            &mut p,
            &[("a", 10.0), ("b", 10.0), ("c", 10.0), ("d", 10.0)],
        );
        let (assign, cert) = plan(&p, &rules().resolve(&p), Vec::new);
        assert_eq!(assign.iter().flatten().count(), 4);
        assert_eq!(cert.sum_sq, 800.0);
        assert!(cert.exact);
        assert_eq!(cert.gap(), 0.0);
        let inst = Instance::new(&p, &rules().resolve(&p));
        // Prices from a lopsided plan still give a bound no higher than the optimum.
        let lb = lower_bound(&inst, &[40.0, 0.0]);
        assert!(lb <= 800.0 + 1e-6, "{lb}");
        assert!(
            lb >= 800.0 * 0.999,
            "Frank–Wolfe reaches the even split: {lb}"
        );
    }

    #[test]
    fn a_heavy_channel_gets_a_bot_to_itself() {
        let mut p = platform(&[("1", &["big", "x", "y"]), ("2", &["big", "x", "y"])]);
        weigh(&mut p, &[("big", 100.0), ("x", 1.0), ("y", 1.0)]);
        let (assign, cert) = plan(&p, &rules().resolve(&p), Vec::new);
        let big = assign[p.find_channel("big").unwrap() as usize];
        let x = assign[p.find_channel("x").unwrap() as usize];
        let y = assign[p.find_channel("y").unwrap() as usize];
        assert!(x == y && x != big);
        assert_eq!(cert.sum_sq, 100.0 * 100.0 + 4.0);
    }

    #[test]
    fn min_gain_holds_back_small_voluntary_moves_but_not_first_placements() {
        let mut p = platform(&[("1", &["a", "b", "c", "d"]), ("2", &["a", "b", "c", "d"])]);
        weigh(&mut p, &[("a", 10.0), ("b", 10.0), ("c", 18.0), ("d", 1.0)]);
        let one = p.find_bot("1").unwrap();
        for c in ["a", "b", "d"] {
            let c = p.find_channel(c).unwrap();
            p.set_assignee(c, Some(one));
        }
        // c has no assignee: it goes to bot 2 at once (21² + 18² = 765); moving d over as well
        // would gain 0.5% (20² + 19² = 761), less than 5%: held back.
        let held = Rules {
            min_gain: 0.05,
            ..rules()
        };
        let (assign, cert) = plan(&p, &held.resolve(&p), Vec::new);
        let at = |assign: &[Option<BotIx>], c: &str| assign[p.find_channel(c).unwrap() as usize];
        assert_eq!(at(&assign, "c"), p.find_bot("2"));
        assert_eq!(at(&assign, "d"), Some(one));
        assert!(cert.held_back);
        assert_eq!((cert.sum_sq, cert.kept_sum_sq), (765.0, 765.0));
        let (assign, cert) = plan(&p, &rules().resolve(&p), Vec::new);
        assert_eq!(at(&assign, "d"), p.find_bot("2"));
        assert!(!cert.held_back);
        assert_eq!(cert.sum_sq, 761.0);
    }

    #[test]
    fn capacities_come_before_balance() {
        let mut p = platform(&[("1", &["a", "b"]), ("2", &["a", "b"])]);
        weigh(&mut p, &[("a", 5.0), ("b", 5.0)]);
        let rules = Rules {
            capacity: [("2".to_owned(), 0.0)].into(),
            ..rules()
        };
        let (assign, _) = plan(&p, &rules.resolve(&p), Vec::new);
        assert!(assign.iter().all(|a| *a == p.find_bot("1")));
    }
}
