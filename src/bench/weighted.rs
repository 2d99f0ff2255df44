//! `bench --weighted`: `balanceBy: messages` on the benchmark's fleets with Zipf-distributed
//! channel weights (P(weight = k) ∝ k^−1.1 for k = 1 … 10,000 messages a day: most groups
//! quiet, a few very busy).
//!
//! Per fleet: the weighted plan's time against the count-balanced optimal plan's (the fastest
//! of three each, taken in turn), Σ (weighted load)² against the certified lower bound (the
//! gap), the count-balanced plan's Σ (weighted load)² beside it; then five periodic runs with
//! every weight drifting by a factor drawn from [0.8, 1.2] between two runs: the voluntary
//! moves per run and the gap after each. Checks the goals: gap ≤ 1%, never above the
//! count-balanced Σ, moves per run ≤ 0.5% of the channels with the gap ≤ 2%; the time goal
//! (≤ 2× at 1M channels) is printed, not checked, since the machine's hour moves it.
//!
//! Then operators' fleets (a handful to a hundred accounts, hundreds to thousands of groups,
//! heavy-tailed rates): the plan without its improvement phase (`weights.searchTime: 0`, the
//! planner before it) and with the default second, in turn, each the fastest of three: CPU
//! time, Σ (weighted load)², the bound and the stated gap (`0 (optimal)` where proven); with
//! `--ortools PYTHON`, what CP-SAT started from the plan finds in 60 s
//! (`scripts/ortools_cpsat.py`); then the drift runs. Checks that the search never makes a
//! plan worse and that no bound exceeds its plan.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};

use super::fleets::{self, Fleet, PLATFORM};
use super::{measure, ms, ratio};
use crate::balance::{self, BalanceBy, Certificate, ChanIx, Plan, Rules, Strategy};
use crate::index::FleetIndex;

/// Periodic runs under drift.
const DRIFT_RUNS: usize = 5;

pub fn run(seed: u64, quick: bool, only: Option<&str>, ortools: Option<&Path>) -> bool {
    let mut held = true;
    println!(
        "weights: Zipf, P(k) ∝ k^-1.1 for k = 1 … 10,000 messages a day; drift ×[0.8, 1.2] per run"
    );
    for (name, make) in fleets::all(!quick) {
        if only.is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let mut fleet = make(seed);
        weigh(&mut fleet.index, seed);
        held &= bench_fleet(fleet, seed);
    }
    println!(
        "operators' fleets: each group in 1–4 accounts; rates Pareto, P(w > x) = x^-α, α = 1 (`heavy`: 0.8), at most 100,000 (1,000,000 on 100 × 10,000)"
    );
    for (name, make) in fleets::operators() {
        if only.is_some_and(|o| !name.contains(o)) || (quick && name.contains("10000")) {
            continue;
        }
        held &= bench_operator(make(seed), seed, ortools);
    }
    held
}

/// The certificate's gap as the summary states it.
fn gap(cert: &Certificate) -> String {
    if cert.optimal() {
        "0 (optimal)".to_owned()
    } else {
        format!("{:.3}%", 100.0 * cert.gap())
    }
}

fn bench_operator(mut fleet: Fleet, seed: u64, ortools: Option<&Path>) -> bool {
    let mut held = true;
    let p = fleet
        .index
        .platform(PLATFORM)
        .expect("the fleet's platform");
    let (bots, channels) = (p.bot_count(), p.channel_count());
    let by_messages = rules(&fleet.rules, BalanceBy::Messages);
    let today = Rules {
        search_time: 0.0,
        ..by_messages.clone()
    };
    let heuristic = || balance::plan(&fleet.index, &today, Strategy::Optimal);
    let searched = || balance::plan(&fleet.index, &by_messages, Strategy::Optimal);
    let (mut a, mut b) = (measure(heuristic), measure(searched));
    for _ in 1..3 {
        a = a.or_faster(measure(heuristic));
        b = b.or_faster(measure(searched));
    }
    let cert = |plan: &Plan| {
        plan.platform(PLATFORM)
            .and_then(|p| p.certificate.clone())
            .expect("a weighted plan is certified")
    };
    let (ca, cb) = (cert(&a.value), cert(&b.value));
    println!("{:<20} {bots} bots × {channels} channels", fleet.name);
    println!(
        "  searchTime 0 (the heuristic alone): {:>10} CPU; Σ weighted load² {:.6e}, lower bound {:.6e}, gap {}",
        ms(a.cpu),
        ca.sum_sq,
        ca.lower_bound,
        gap(&ca)
    );
    println!(
        "  searchTime {} s (default):          {:>10} CPU; Σ weighted load² {:.6e} ({:+.3}%), lower bound {:.6e}, gap {}",
        by_messages.search_time,
        ms(b.cpu),
        cb.sum_sq,
        100.0 * (cb.sum_sq - ca.sum_sq) / ca.sum_sq,
        cb.lower_bound,
        gap(&cb)
    );
    if cb.sum_sq > ca.sum_sq * (1.0 + 1e-12) {
        println!("  ✗ the search made the plan worse");
        held = false;
    }
    if ca.lower_bound > ca.sum_sq * (1.0 + 1e-12) || cb.lower_bound > cb.sum_sq * (1.0 + 1e-12) {
        println!("  ✗ a lower bound above its plan");
        held = false;
    }
    if let Some(python) = ortools {
        match cp_sat(&fleet, &b.value, python) {
            Ok(line) => println!("  {line}"),
            Err(e) => println!("  CP-SAT: not measured ({e:#})"),
        }
    }
    apply(&mut fleet.index, &b.value);
    held &= drift(&mut fleet, seed, &by_messages, channels, false);
    held
}

/// CP-SAT started from `plan`, 60 s (`scripts/ortools_cpsat.py`): what it finds and proves.
fn cp_sat(fleet: &Fleet, plan: &Plan, python: &Path) -> anyhow::Result<String> {
    let dir = std::env::temp_dir().join(format!(
        "auto-assign-cpsat-{}-{}",
        std::process::id(),
        fleet.name
    ));
    std::fs::create_dir_all(&dir)?;
    let result = cp_sat_in(&dir, fleet, plan, python);
    std::fs::remove_dir_all(&dir).ok();
    result
}

fn cp_sat_in(dir: &Path, fleet: &Fleet, plan: &Plan, python: &Path) -> anyhow::Result<String> {
    let p = fleet
        .index
        .platform(PLATFORM)
        .expect("the fleet's platform");
    let resolved = rules(&fleet.rules, BalanceBy::Messages).resolve(p);
    let pp = plan.platform(PLATFORM).expect("the fleet's platform");
    let changed: std::collections::HashMap<ChanIx, Option<u32>> =
        pp.changes.iter().copied().collect();
    let mut text = format!("{}\n", p.bot_count());
    for c in 0..p.channel_count() as ChanIx {
        if resolved.is_excluded(c) {
            continue;
        }
        let valid: Vec<u32> = resolved.valid_bots(p, c).collect();
        let Some(bot) = changed.get(&c).copied().unwrap_or_else(|| p.assignee(c)) else {
            continue;
        };
        let w = resolved.weight(p, c);
        anyhow::ensure!(w.fract() == 0.0, "CP-SAT needs whole weights");
        text.push_str(&format!("{}", w as i64));
        for b in std::iter::once(bot).chain(valid) {
            text.push_str(&format!(" {b}"));
        }
        text.push('\n');
    }
    let instance = dir.join("instance.txt");
    std::fs::write(&instance, text)?;
    let script = dir.join("ortools_cpsat.py");
    std::fs::write(&script, include_str!("../../scripts/ortools_cpsat.py"))?;
    let out = Command::new(python)
        .arg(&script)
        .arg(&instance)
        .arg("60")
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "ortools_cpsat.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let planned = report["plan_sum_sq"].as_f64().unwrap_or(f64::NAN);
    let found = report["sum_sq"].as_f64().unwrap_or(f64::NAN);
    let bound = report["bound"].as_f64().unwrap_or(f64::NAN);
    Ok(format!(
        "CP-SAT from the plan, 60 s: Σ {found:.6e} ({:+.3}% against the plan's {planned:.6e}), its bound {bound:.6e} ({:+.3}%), {} after {:.1} s",
        100.0 * (found - planned) / planned,
        100.0 * (bound - planned) / planned,
        report["status"].as_str().unwrap_or("?"),
        report["wall_s"].as_f64().unwrap_or(f64::NAN),
    ))
}

fn weigh(index: &mut FleetIndex, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let zipf = Zipf::new(10_000.0, 1.1).expect("valid Zipf parameters");
    let p = index.platform_mut(PLATFORM);
    for c in 0..p.channel_count() as ChanIx {
        let w: f64 = zipf.sample(&mut rng);
        p.set_weight(c, w);
    }
}

fn rules(base: &Rules, by: BalanceBy) -> Rules {
    Rules {
        balance_by: by,
        ..base.clone()
    }
}

/// Σ (weighted load)² of a plan, from the index's weights and the plan's changes.
fn weighted_sum_sq(plan: &Plan) -> f64 {
    plan.platforms
        .iter()
        .flat_map(|p| p.weighted_loads.iter().map(|&(_, l)| l * l))
        .sum()
}

fn bench_fleet(mut fleet: Fleet, seed: u64) -> bool {
    let mut held = true;
    let channels = fleet
        .index
        .platform(PLATFORM)
        .map_or(0, |p| p.channel_count());
    let by_count = rules(&fleet.rules, BalanceBy::Channels);
    let by_messages = rules(&fleet.rules, BalanceBy::Messages);
    let count_plan = || balance::plan(&fleet.index, &by_count, Strategy::Optimal);
    let weighted_plan = || balance::plan(&fleet.index, &by_messages, Strategy::Optimal);
    let (mut counted, mut weighted) = (measure(count_plan), measure(weighted_plan));
    for _ in 1..3 {
        counted = counted.or_faster(measure(count_plan));
        weighted = weighted.or_faster(measure(weighted_plan));
    }
    let counted_sq = weighted_sum_sq(&counted.value);
    let p = weighted
        .value
        .platform(PLATFORM)
        .expect("the fleet's platform");
    let cert = p.certificate.clone().expect("a weighted plan is certified");
    let times = ratio(weighted.cpu, counted.cpu);
    println!(
        "{:<20} {:>9} channels: weighted {} vs count-balanced {} ({times:.2}×); Σ weighted load² {:.4e}, lower bound {:.4e}, gap {}; count-balanced {:.4e} ({:+.1}%)",
        fleet.name,
        channels,
        ms(weighted.cpu),
        ms(counted.cpu),
        cert.sum_sq,
        cert.lower_bound,
        gap(&cert),
        counted_sq,
        100.0 * (counted_sq - cert.sum_sq) / cert.sum_sq,
    );
    if cert.gap() > 0.01 {
        println!("  ✗ gap above 1%");
        held = false;
    }
    if cert.sum_sq > counted_sq * (1.0 + 1e-9) {
        println!("  ✗ above the count-balanced plan's Σ (weighted load)²");
        held = false;
    }

    // Periodic runs under drift, from the weighted plan applied.
    apply(&mut fleet.index, &weighted.value);
    held &= drift(&mut fleet, seed, &by_messages, channels, true);
    held
}

/// Periodic runs, every weight drifting by a factor from [0.8, 1.2] before each.
/// `gap_goal`: the gap after each run is checked (≤ 2%), as on the benchmark's Zipf fleets; on
/// the operators' heavy-tailed fleets it is printed (the bound is what it is there: CP-SAT's
/// is no better).
fn drift(
    fleet: &mut Fleet,
    seed: u64,
    by_messages: &Rules,
    channels: usize,
    gap_goal: bool,
) -> bool {
    let mut held = true;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xd21f7);
    let mut line = Vec::new();
    let mut worst_moves = 0.0f64;
    let mut worst_gap = 0.0f64;
    let mut slowest = Duration::ZERO;
    for _ in 0..DRIFT_RUNS {
        let p = fleet.index.platform_mut(PLATFORM);
        for c in 0..p.channel_count() as ChanIx {
            let factor: f64 = rng.random_range(0.8..1.2);
            p.set_weight(c, p.weight(c) * factor);
        }
        let started = std::time::Instant::now();
        let plan = balance::plan(&fleet.index, by_messages, Strategy::Optimal);
        slowest = slowest.max(started.elapsed());
        let p = plan.platform(PLATFORM).expect("the fleet's platform");
        let cert = p.certificate.clone().expect("certified");
        let share = p.voluntary as f64 / channels.max(1) as f64;
        worst_moves = worst_moves.max(share);
        worst_gap = worst_gap.max(cert.gap());
        line.push(format!(
            "{} moves ({:.3}%), gap {}{}",
            p.voluntary,
            100.0 * share,
            gap(&cert),
            if cert.held_back { " held" } else { "" }
        ));
        apply(&mut fleet.index, &plan);
    }
    println!(
        "  drift runs (slowest {}): {}",
        ms(slowest),
        line.join("; ")
    );
    if worst_moves > 0.005 || (gap_goal && worst_gap > 0.02) {
        println!("  ✗ under drift: moves above 0.5% of channels or gap above 2%");
        held = false;
    }
    held
}

fn apply(index: &mut FleetIndex, plan: &Plan) {
    for pp in &plan.platforms {
        let p = index.platform_mut(&pp.platform);
        for &(c, bot) in &pp.changes {
            p.set_assignee(c, bot);
        }
        p.take_journal();
    }
}
