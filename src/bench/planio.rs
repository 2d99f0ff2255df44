//! `auto-assign bench --plan-io`: the whole `auto-assign plan` process, exactly as operators
//! run it (a child process of this binary: read, index, plan, write), on a generated snapshot
//! of 1,000,000 channels / 2,000 bots / 2.85M memberships with a previous assignee for every
//! channel. `--baseline BIN` runs another build on the same file, side by side.
//!
//! Each child runs under GNU time (`/usr/bin/time`, when installed) for its wall clock, CPU time,
//! peak RSS and page faults from the kernel, the same for every build; without it, this build's
//! own report (its `plan: ...` lines) gives all but the faults. The ratios compare CPU time,
//! which other work on a shared machine stretches less than the wall clock.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::fleets::{self, Fleet, PLATFORM};
use crate::index::BotIx;

const BOTS: usize = 2_000;
const CHANNELS: usize = 1_000_000;

pub fn run(seed: u64, baseline: Option<&Path>, ortools: &Path) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("auto-assign-plan-io-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = bench(&dir, seed, baseline, ortools);
    std::fs::remove_dir_all(&dir).ok();
    result
}

fn bench(dir: &Path, seed: u64, baseline: Option<&Path>, ortools: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    let input = dir.join("snapshot.json");
    let instance = dir.join("instance.txt");
    let fleet = fleets::zipf(seed, "plan-io", BOTS, CHANNELS, fleets::REDUNDANT);
    let previous = previous_assignment(&fleet, seed);
    write_snapshot(&fleet, &previous, &input).context("writing the snapshot")?;
    write_instance(&fleet, &previous, &instance).context("writing the flow instance")?;
    let previous = {
        let p = fleet.index.platform(PLATFORM).expect("fleet platform");
        previous
            .iter()
            .enumerate()
            .filter_map(|(c, b)| {
                let key = |kind: &str| format!("{PLATFORM}:{kind}");
                b.map(|b| (key(&p.channel_id(c as u32)), key(p.bot_id(b))))
            })
            .collect::<std::collections::HashMap<String, String>>()
    };
    drop(fleet);
    let size = std::fs::metadata(&input)?.len();
    println!(
        "plan I/O: `auto-assign plan` as a child process on a {:.0} MB snapshot \
         ({CHANNELS} channels, {BOTS} bots, every channel with a previous assignee; generated in {:.1} s)",
        size as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    let current = std::env::current_exe()?;
    let mut binaries = vec![("this build", current)];
    if let Some(b) = baseline {
        binaries.push(("baseline", b.to_path_buf()));
    }
    for strategy in ["greedy", "optimal"] {
        let mut cpus = Vec::new();
        let mut walls = Vec::new();
        for (i, (label, bin)) in binaries.iter().enumerate() {
            let run = run_plan(bin, strategy, &input, &output(dir, i))
                .with_context(|| format!("{label} {}", bin.display()))?;
            println!(
                "  {strategy:<8} {label:<10} wall {:>6.0} ms, CPU {:>6}, peak RSS {:>7}, page faults {:>6}",
                run.wall.as_secs_f64() * 1e3,
                run.cpu
                    .map_or_else(|| "n/a".to_owned(), |c| format!("{:.0} ms", c * 1e3)),
                run.peak_mb
                    .map_or_else(|| "n/a".to_owned(), |m| format!("{m:.0} MB")),
                run.faults
                    .map_or_else(|| "n/a".to_owned(), |f| format!("{:.0}k", f / 1e3))
            );
            for phase in &run.phases {
                println!("      {phase}");
            }
            cpus.push(run.cpu);
            walls.push(run.wall);
        }
        if let [Some(now), Some(before)] = cpus[..] {
            println!(
                "  {strategy:<8} this build / baseline: CPU time {:.2}×",
                now / before.max(1e-9)
            );
        }
        if strategy == "optimal" {
            // This build's plan and time, whatever a baseline wrote after it.
            let plan_wall = walls[0];
            side_by_side(
                ortools,
                dir,
                &instance,
                &output(dir, 0),
                &previous,
                plan_wall,
            )?;
        }
    }
    Ok(())
}

/// Where the `i`th of the compared binaries (this build first) writes its assignment: each
/// its own file, so that the optimum checked below is this build's and not a baseline's.
fn output(dir: &Path, i: usize) -> std::path::PathBuf {
    dir.join(format!("out-{i}.json"))
}

/// OR-Tools' `SimpleMinCostFlow` on the same instance (`scripts/ortools_mcf.py`), when the
/// Python at `python` has it: its time next to the whole `plan` process's, and both optima
/// compared (least Σ load², then fewest moves: equal when both are exact); `plan_output` is
/// the file the plan wrote.
fn side_by_side(
    python: &Path,
    dir: &Path,
    instance: &Path,
    plan_output: &Path,
    previous: &std::collections::HashMap<String, String>,
    plan_wall: Duration,
) -> anyhow::Result<()> {
    let has_ortools = Command::new(python)
        .args(["-c", "import ortools"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_ortools {
        println!(
            "  OR-Tools: not measured ({} has no `ortools`; e.g. `python3 -m venv v && \
             v/bin/pip install ortools`, then `--ortools v/bin/python`)",
            python.display()
        );
        return Ok(());
    }
    let script = dir.join("ortools_mcf.py");
    std::fs::write(&script, include_str!("../../scripts/ortools_mcf.py"))?;
    let out = Command::new(python).arg(&script).arg(instance).output()?;
    anyhow::ensure!(
        out.status.success(),
        "ortools_mcf.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let solved =
        report["build_s"].as_f64().unwrap_or(0.0) + report["solve_s"].as_f64().unwrap_or(0.0);
    // The plan's own answer, read back from its output.
    let planned: std::collections::HashMap<String, String> =
        serde_json::from_slice(&std::fs::read(plan_output)?)?;
    let mut loads: std::collections::HashMap<&str, i64> = std::collections::HashMap::new();
    for bot in planned.values() {
        *loads.entry(bot.as_str()).or_default() += 1;
    }
    let sum_sq: i64 = loads.values().map(|l| l * l).sum();
    let moves = planned
        .iter()
        .filter(|(c, b)| previous.get(*c) != Some(*b))
        .count() as i64;
    let same = report["sum_sq"].as_i64() == Some(sum_sq) && report["moves"].as_i64() == Some(moves);
    println!(
        "  OR-Tools SimpleMinCostFlow, same instance ({} arcs): add arcs {:.2} s + solve {:.2} s \
         = {solved:.2} s ({}); Σ load² {} vs plan's {sum_sq}, moves {} vs {moves} {}",
        report["arcs"],
        report["build_s"].as_f64().unwrap_or(0.0),
        report["solve_s"].as_f64().unwrap_or(0.0),
        report["status"].as_str().unwrap_or("?"),
        report["sum_sq"],
        report["moves"],
        if same { "✓" } else { "✗ DIFFERENT" }
    );
    println!(
        "  OR-Tools (build + solve) / whole `plan` process (read + plan + write, wall {:.2} s): {:.1}×",
        plan_wall.as_secs_f64(),
        solved / plan_wall.as_secs_f64().max(1e-9)
    );
    anyhow::ensure!(same, "OR-Tools and the planner disagree on the optimum");
    Ok(())
}

/// A uniformly random member of every channel as its previous assignee (some offline, so
/// some moves are forced), so the planner has real work to do.
fn previous_assignment(fleet: &Fleet, seed: u64) -> Vec<Option<BotIx>> {
    let p = fleet.index.platform(PLATFORM).expect("fleet platform");
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    (0..p.channel_count() as u32)
        .map(|c| {
            let members = p.members(c);
            (!members.is_empty()).then(|| members[rng.random_range(0..members.len())])
        })
        .collect()
}

/// The instance as the planner sees it once the rules are resolved, for `ortools_mcf.py`:
/// the bot count, then one line per channel that can be assigned (excluded ones and those
/// with no online member left out): its previous bot (or -1), then the bots it may go to.
fn write_instance(fleet: &Fleet, previous: &[Option<BotIx>], path: &Path) -> std::io::Result<()> {
    let p = fleet.index.platform(PLATFORM).expect("fleet platform");
    let rules = fleet.rules.resolve(p);
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "{}", p.bot_count())?;
    for c in 0..p.channel_count() as u32 {
        let mut valid = rules.valid_bots(p, c).peekable();
        if valid.peek().is_none() {
            continue;
        }
        write!(out, "{}", previous[c as usize].map_or(-1, i64::from))?;
        for b in valid {
            write!(out, " {b}")?;
        }
        writeln!(out)?;
    }
    out.flush()
}

struct Run {
    wall: Duration,
    /// Seconds of CPU, user and system.
    cpu: Option<f64>,
    peak_mb: Option<f64>,
    /// Minor page faults: pages first touched (GNU time only).
    faults: Option<f64>,
    /// The child's progress lines (`plan: ...`).
    phases: Vec<String>,
}

const GNU_TIME: &str = "/usr/bin/time";

fn run_plan(bin: &Path, strategy: &str, input: &Path, output: &Path) -> anyhow::Result<Run> {
    let timed = Path::new(GNU_TIME).exists();
    let mut command = if timed {
        let mut c = Command::new(GNU_TIME);
        c.args(["-f", "rusage %U %S %M %R"]).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    command
        .arg("plan")
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(output)
        .args(["--strategy", strategy]);
    let started = Instant::now();
    let out = command.output()?;
    let wall = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(out.status.success(), "plan failed: {stderr}");
    let phases: Vec<String> = stderr
        .lines()
        .filter(|l| l.starts_with("plan: "))
        .map(str::to_owned)
        .collect();
    // GNU time's line: user and system seconds, peak RSS in kB, minor page faults.
    let rusage: Option<Vec<f64>> = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("rusage "))
        .and_then(|l| l.split_whitespace().map(|v| v.parse().ok()).collect());
    // Else this build's own last line: "plan: done in 1.99 s, CPU 1.91 s, peak RSS 266 MB".
    let reported = |key: &str| {
        phases.iter().find_map(|l| {
            let (_, rest) = l.split_once(key)?;
            rest.split_whitespace().next()?.parse::<f64>().ok()
        })
    };
    let (cpu, peak_mb, faults) = match rusage.as_deref() {
        Some(&[user, system, kb, faults]) => (Some(user + system), Some(kb / 1024.0), Some(faults)),
        _ => (reported("CPU "), reported("peak RSS "), None),
    };
    Ok(Run {
        wall,
        cpu,
        peak_mb,
        faults,
        phases,
    })
}

/// The fleet as a snapshot (full keys everywhere) with `previous` as its previous assignment.
fn write_snapshot(
    fleet: &Fleet,
    previous: &[Option<BotIx>],
    path: &PathBuf,
) -> std::io::Result<()> {
    let p = fleet.index.platform(PLATFORM).expect("fleet platform");
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    out.write_all(b"{\"bots\": [")?;
    for b in 0..p.bot_count() as BotIx {
        let sep = if b == 0 { "\n  " } else { ",\n  " };
        if p.is_online(b) {
            write!(out, "{sep}\"{PLATFORM}:{}\"", p.bot_id(b))?;
        } else {
            write!(
                out,
                "{sep}{{\"id\": \"{PLATFORM}:{}\", \"online\": false}}",
                p.bot_id(b)
            )?;
        }
    }
    write!(
        out,
        "],\n\"enabled_platforms\": [\"{PLATFORM}\"],\n\"channels\": ["
    )?;
    for c in 0..p.channel_count() as u32 {
        let sep = if c == 0 { "\n  " } else { ",\n  " };
        write!(
            out,
            "{sep}{{\"id\": \"{PLATFORM}:{}\", \"bots\": [",
            p.channel_id(c)
        )?;
        for (i, &b) in p.members(c).iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(out, "{sep}\"{PLATFORM}:{}\"", p.bot_id(b))?;
        }
        out.write_all(b"]}")?;
    }
    out.write_all(b"],\n\"priority\": {")?;
    for (i, (key, bots)) in fleet.rules.priority.iter().enumerate() {
        let sep = if i == 0 { "\n  " } else { ",\n  " };
        let list: Vec<String> = bots.iter().map(|b| format!("\"{b}\"")).collect();
        write!(out, "{sep}\"{key}\": [{}]", list.join(", "))?;
    }
    out.write_all(b"},\n\"exclude\": [")?;
    for (i, key) in fleet.rules.exclude.iter().enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        write!(out, "{sep}\"{key}\"")?;
    }
    out.write_all(b"],\n\"previous\": {")?;
    let mut first = true;
    for (c, bot) in previous.iter().enumerate() {
        let Some(b) = *bot else { continue };
        let sep = if first { "\n  " } else { ",\n  " };
        first = false;
        write!(
            out,
            "{sep}\"{PLATFORM}:{}\": \"{PLATFORM}:{}\"",
            p.channel_id(c as u32),
            p.bot_id(b)
        )?;
    }
    out.write_all(b"}}\n")?;
    out.flush()
}
