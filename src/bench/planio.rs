//! `auto-assign bench --plan-io`: the whole `auto-assign plan` process, exactly as operators
//! run it (a child process of this binary: read, index, plan, write), on a generated snapshot
//! of 1,000,000 channels / 2,000 bots / 2.85M memberships with a previous assignee for every
//! channel. `--baseline BIN` runs another build on the same file, side by side.
//!
//! Each child runs under GNU time (`/usr/bin/time`, when installed) for its wall clock, CPU time
//! and peak RSS from the kernel, the same for every build; without it, this build's own report
//! (its `plan: ...` lines) gives them. The ratios compare CPU time, which other work on a
//! shared machine stretches less than the wall clock.

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

pub fn run(seed: u64, baseline: Option<&Path>, ortools: Option<&Path>) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("auto-assign-plan-io-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = bench(&dir, seed, baseline, ortools);
    std::fs::remove_dir_all(&dir).ok();
    result
}

fn bench(
    dir: &Path,
    seed: u64,
    baseline: Option<&Path>,
    ortools: Option<&Path>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let input = dir.join("snapshot.json");
    let fleet = fleets::zipf(seed, "plan-io", BOTS, CHANNELS, fleets::REDUNDANT);
    write_snapshot(&fleet, seed, &input).context("writing the snapshot")?;
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
        for (label, bin) in &binaries {
            let run = run_plan(bin, strategy, &input, &dir.join("out.json"))
                .with_context(|| format!("{label} {}", bin.display()))?;
            println!(
                "  {strategy:<8} {label:<10} wall {:>6.0} ms, CPU {:>6}, peak RSS {:>7}",
                run.wall.as_secs_f64() * 1e3,
                run.cpu
                    .map_or_else(|| "n/a".to_owned(), |c| format!("{:.0} ms", c * 1e3)),
                run.peak_mb
                    .map_or_else(|| "n/a".to_owned(), |m| format!("{m:.0} MB"))
            );
            for phase in &run.phases {
                println!("      {phase}");
            }
            if strategy == "optimal" && *label == "this build" {
                side_by_side(ortools, &input, &dir.join("out.json"), &run)?;
            }
            cpus.push(run.cpu);
        }
        if let [Some(now), Some(before)] = cpus[..] {
            println!(
                "  {strategy:<8} this build / baseline: CPU time {:.2}×",
                now / before.max(1e-9)
            );
        }
    }
    Ok(())
}

/// OR-Tools' `SimpleMinCostFlow` on the same snapshot (`scripts/ortools_mcf.py`): its model
/// building and solving time against the whole `plan` process, and its Σ load² against the
/// plan's (they must be equal: both are the exact minimum). Without OR-Tools, says how to get
/// it and carries on.
fn side_by_side(
    python: Option<&Path>,
    input: &Path,
    output: &Path,
    plan: &Run,
) -> anyhow::Result<()> {
    let python = python.map_or_else(
        || {
            std::env::var_os("AUTO_ASSIGN_ORTOOLS_PYTHON")
                .map_or_else(|| PathBuf::from("python3"), PathBuf::from)
        },
        Path::to_path_buf,
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ortools_mcf.py");
    let hint = || {
        println!(
            "  OR-Tools side by side: skipped ({} has no ortools). To compare: \
             python3 -m venv target/ortools && target/ortools/bin/pip install ortools, \
             then --ortools target/ortools/bin/python",
            python.display()
        );
    };
    let out = match Command::new(&python)
        .arg(&script)
        .arg(input)
        .arg("--assignment")
        .arg(output)
        .output()
    {
        Ok(out) => out,
        Err(_) => {
            hint();
            return Ok(());
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let answer: serde_json::Value = match stdout.lines().last().map(serde_json::from_str) {
        Some(Ok(v)) => v,
        _ => {
            anyhow::ensure!(
                out.status.code() != Some(1),
                "ortools_mcf.py failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            hint();
            return Ok(());
        }
    };
    if answer.get("error").is_some() {
        hint();
        return Ok(());
    }
    let seconds = |k: &str| answer[k].as_f64().unwrap_or(f64::NAN);
    let (build, solve) = (seconds("build_s"), seconds("solve_s"));
    let (theirs, ours) = (
        answer["sum_sq"].as_u64(),
        answer["assignment_sum_sq"].as_u64(),
    );
    let equal = theirs.is_some() && theirs == ours;
    println!(
        "  OR-Tools SimpleMinCostFlow, same snapshot: build {:.0} ms + solve {:.0} ms = {:.2} s \
         (snapshot parsing not counted); whole `plan` process {:.2} s wall: {:.1}× faster; \
         Σ load² {} vs plan {} {}",
        build * 1e3,
        solve * 1e3,
        build + solve,
        plan.wall.as_secs_f64(),
        (build + solve) / plan.wall.as_secs_f64(),
        theirs.map_or("?".to_owned(), |v| v.to_string()),
        ours.map_or("?".to_owned(), |v| v.to_string()),
        if equal { "equal ✓" } else { "✗ MISMATCH" },
    );
    anyhow::ensure!(equal, "OR-Tools and the plan disagree on the least Σ load²");
    Ok(())
}

struct Run {
    wall: Duration,
    /// Seconds of CPU, user and system.
    cpu: Option<f64>,
    peak_mb: Option<f64>,
    /// The child's progress lines (`plan: ...`).
    phases: Vec<String>,
}

const GNU_TIME: &str = "/usr/bin/time";

fn run_plan(bin: &Path, strategy: &str, input: &Path, output: &Path) -> anyhow::Result<Run> {
    let timed = Path::new(GNU_TIME).exists();
    let mut command = if timed {
        let mut c = Command::new(GNU_TIME);
        c.args(["-f", "rusage %U %S %M"]).arg(bin);
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
    // GNU time's line: user and system seconds, peak RSS in kB.
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
    let (cpu, peak_mb) = match rusage.as_deref() {
        Some(&[user, system, kb]) => (Some(user + system), Some(kb / 1024.0)),
        _ => (reported("CPU "), reported("peak RSS ")),
    };
    Ok(Run {
        wall,
        cpu,
        peak_mb,
        phases,
    })
}

/// The fleet as a snapshot (full keys everywhere), with a uniformly random member of every
/// channel as its previous assignee, so the planner has real work to do.
fn write_snapshot(fleet: &Fleet, seed: u64, path: &PathBuf) -> std::io::Result<()> {
    let p = fleet.index.platform(PLATFORM).expect("fleet platform");
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
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
    for c in 0..p.channel_count() as u32 {
        let members = p.members(c);
        if members.is_empty() {
            continue;
        }
        let b = members[rng.random_range(0..members.len())];
        let sep = if first { "\n  " } else { ",\n  " };
        first = false;
        write!(
            out,
            "{sep}\"{PLATFORM}:{}\": \"{PLATFORM}:{}\"",
            p.channel_id(c),
            p.bot_id(b)
        )?;
    }
    out.write_all(b"}}\n")?;
    out.flush()
}
