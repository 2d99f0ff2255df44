//! `auto-assign bench`: both strategies on seeded synthetic fleets, plus the optimal planner's
//! incremental re-plans when one mid-sized bot goes offline and comes back, and its full
//! re-plan when a tenth of the bots go offline at once.
//!
//! Times are for the whole planner call (rule resolution, solving, statistics), as wall clock
//! and as CPU time of the thread; the ratios use CPU time, which other work on a shared machine
//! stretches less, and a full plan counts as the fastest of five runs (the two strategies'
//! runs taken in turn, so that drift in the machine's speed reaches both alike), a re-plan as
//! the fastest of five rounds of the same change. Peak RSS is the
//! process's high-water mark during the call (reset through `/proc/self/clear_refs` before
//! it), so it includes the fleet index itself. Page faults are the planning thread's, so a
//! slow run shows how much of it was the allocator handing out fresh pages.
//!
//! `--huge` measures one fleet of 10,000,000 channels / 20,000 bots / ~28.5M memberships the
//! same way; `--plan-io` the whole `auto-assign plan` process (see `planio`); `--takeover`
//! the leadership takeover time over repeated leader kills (see `takeover`).

mod coord;
mod federate;
mod fleets;
mod onebot;
mod planio;
mod rate;
mod takeover;
mod view;
mod weighted;

use std::time::{Duration, Instant};

use crate::balance::{self, Plan, Planner, Strategy};
use crate::index::{BotIx, ChanIx, PlatformIndex};
use fleets::{Fleet, PLATFORM};

#[derive(clap::Args)]
pub struct Args {
    /// Skip the large fleets (the flat 200 × 5,000 one and the million-channel ones).
    #[arg(long)]
    pub quick: bool,
    /// Seed of the fleet generator.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Only fleets whose name contains this.
    #[arg(long)]
    pub only: Option<String>,
    /// Instead: the service against simulated OneBot bots over loopback.
    #[arg(long)]
    pub onebot: bool,
    /// Simulated bots (with --onebot).
    #[arg(long, default_value_t = 200)]
    pub bots: usize,
    /// Groups per simulated bot (with --onebot).
    #[arg(long, default_value_t = 5000)]
    pub groups: usize,
    /// Instead: ingress decisions and claims per second (HTTP API, Redis).
    #[arg(long)]
    pub coord: bool,
    /// Redis to use with --coord (default: start a redis-server on a free port).
    #[arg(long)]
    pub redis: Option<String>,
    /// Instead: the whole `auto-assign plan` process (read, index, plan, write) on a generated
    /// 1M-channel / 2,000-bot snapshot.
    #[arg(long)]
    pub plan_io: bool,
    /// With --plan-io: also run this binary (an older build) on the same snapshot.
    #[arg(long, requires = "plan_io")]
    pub baseline: Option<std::path::PathBuf>,
    /// With --plan-io: the Python that has OR-Tools (`pip install ortools`; default
    /// `python3`), to solve the same instance with its SimpleMinCostFlow side by side. With
    /// --weighted: CP-SAT, started from the plan, on the operators' fleets for 60 s each.
    #[arg(long)]
    pub ortools: Option<std::path::PathBuf>,
    /// Instead: `balanceBy: messages` on the fleets with Zipf-distributed weights: time against
    /// the count-balanced plan, the certified gap, and moves per run while weights drift.
    #[arg(long)]
    pub weighted: bool,
    /// Instead: one fleet of 10,000,000 channels / 20,000 bots / ~28.5M memberships.
    #[arg(long)]
    pub huge: bool,
    /// Instead: three instances under leadership; the leader is killed (then stopped
    /// cleanly) `--kills` times each and the takeover time measured.
    #[arg(long)]
    pub takeover: bool,
    /// Leader kills (and clean stops) with --takeover.
    #[arg(long, default_value_t = 5)]
    pub kills: usize,
}

/// Runs the measurements; `false` when one failed or a check did not hold (the planner's
/// incremental answer against the from-scratch one), so the command can exit non-zero.
pub fn run(args: &Args) -> bool {
    if args.coord {
        return coord::run(args.redis.as_deref())
            .inspect_err(|e| eprintln!("error: {e:#}"))
            .is_ok();
    }
    if args.onebot {
        return onebot::run(args.bots, args.groups, args.seed)
            .inspect_err(|e| eprintln!("error: {e:#}"))
            .is_ok();
    }
    if args.takeover {
        return takeover::run(args.kills)
            .inspect_err(|e| eprintln!("error: {e:#}"))
            .is_ok();
    }
    if args.weighted {
        return weighted::run(
            args.seed,
            args.quick,
            args.only.as_deref(),
            args.ortools.as_deref(),
        );
    }
    if args.plan_io {
        return planio::run(
            args.seed,
            args.baseline.as_deref(),
            args.ortools
                .as_deref()
                .unwrap_or(std::path::Path::new("python3")),
        )
        .inspect_err(|e| eprintln!("error: {e:#}"))
        .is_ok();
    }
    let mut all_held = true;
    if cfg!(debug_assertions) {
        println!("note: debug build; run `cargo run --release -- bench` for meaningful times");
    }
    println!("{}", first_touch_line());
    let fleets: Vec<fleets::Generator> = if args.huge {
        vec![("zipf-10m-redundant", |s| {
            fleets::zipf(
                s,
                "zipf-10m-redundant",
                20_000,
                10_000_000,
                fleets::REDUNDANT,
            )
        })]
    } else {
        fleets::all(!args.quick)
    };
    for (name, make) in fleets {
        if args
            .only
            .as_ref()
            .is_some_and(|o| !name.contains(o.as_str()))
        {
            continue;
        }
        let started = Instant::now();
        let fleet = make(args.seed);
        let generated = started.elapsed();
        all_held &= bench_fleet(fleet, generated);
    }
    all_held
}

struct Measured<T> {
    value: T,
    time: Duration,
    /// CPU time of this thread: what the ratios use, since other work on the machine stretches
    /// the wall clock but not this.
    cpu: Duration,
    /// Page faults the thread took: first touches of memory the allocator fetched from the
    /// kernel anew, each a trip into it. Whether a plan's arrays come from memory the last
    /// plan freed or from fresh pages is the allocator's choice, and moves a plan's time by
    /// about a tenth from one run to the next.
    faults: Option<u64>,
    peak_mb: Option<f64>,
}

fn measure<T>(f: impl FnOnce() -> T) -> Measured<T> {
    reset_peak_rss();
    let (started, cpu, faults) = (Instant::now(), thread_cpu(), thread_faults());
    let value = f();
    let time = started.elapsed();
    let cpu = thread_cpu().saturating_sub(cpu);
    Measured {
        value,
        time,
        cpu,
        faults: thread_faults()
            .zip(faults)
            .map(|(after, before)| after - before),
        peak_mb: peak_rss_mb(),
    }
}

/// Runs of a repeatable measurement: the fastest one is reported (other work on a shared
/// machine only ever adds time). On a 2-core VM single runs of the same plan differ by up to
/// 1.5×, and the fastest of three still varied by a third from one bench run to the next.
const REPEATS: usize = 5;

/// The fastest of [`REPEATS`] runs, with the highest peak RSS.
fn best_of<T>(mut f: impl FnMut() -> T) -> Measured<T> {
    let mut best = measure(&mut f);
    for _ in 1..REPEATS {
        best = best.or_faster(measure(&mut f));
    }
    best
}

/// [`best_of`] for two strategies in turn, one run of each per round: the machine's speed
/// drifts over a bench run (by a fifth within minutes on the 2-core CI machine), and runs
/// taken in turn meet the same drift, where five of one and then five of the other did not.
/// Each run keeps only its load statistics. The peak RSS is each strategy's first run's: later
/// runs of the first start with the memory the second's runs left with the allocator, which
/// RSS counts.
fn best_of_in_turn(
    mut first: impl FnMut() -> Plan,
    mut second: impl FnMut() -> Plan,
) -> (Measured<balance::LoadStats>, Measured<balance::LoadStats>) {
    let measured = |f: &mut dyn FnMut() -> Plan| measure(f).map(|plan| stats(&plan).clone());
    let (mut a, mut b) = (measured(&mut first), measured(&mut second));
    let first_peaks = (a.peak_mb, b.peak_mb);
    for _ in 1..REPEATS {
        a = a.or_faster(measured(&mut first));
        b = b.or_faster(measured(&mut second));
    }
    (a.peak_mb, b.peak_mb) = first_peaks;
    (a, b)
}

impl<T> Measured<T> {
    /// The faster of two runs of the same measurement, with the higher peak RSS.
    fn or_faster(self, next: Measured<T>) -> Measured<T> {
        let peak_mb = higher(self.peak_mb, next.peak_mb);
        let mut best = if next.cpu < self.cpu { next } else { self };
        best.peak_mb = peak_mb;
        best
    }

    /// The same measurement of what `f` makes of the value (outside the timed call).
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Measured<U> {
        let Measured {
            value,
            time,
            cpu,
            faults,
            peak_mb,
        } = self;
        Measured {
            value: f(value),
            time,
            cpu,
            faults,
            peak_mb,
        }
    }

    /// The measurement without its value.
    fn timing(&self) -> Measured<()> {
        Measured {
            value: (),
            time: self.time,
            cpu: self.cpu,
            faults: self.faults,
            peak_mb: self.peak_mb,
        }
    }
}

/// The higher of two peak RSS readings, either of which may be missing.
fn higher(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// CPU time this thread has run.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Page faults this thread has taken that needed no disk.
fn thread_faults() -> Option<u64> {
    proc_counters("thread-self").map(|c| c.faults)
}

/// Memory the process touches for the first time comes fresh from the kernel, and on a VM
/// the kernel may have to ask its host for it: on the CI machine, whose kernel hands freed
/// memory back to the host (virtio-balloon free page reporting), first touches ran anywhere
/// from ~0.3 to ~3 GB/s as the hour went, and a start-up touches ~270 MB. This measures it
/// now (64 MB on base pages, one write a page), so that a figure can be read beside it.
fn first_touch_line() -> String {
    const SIZE: usize = 64 << 20;
    const PAGE: usize = 4096;
    // Zeroed memory this large is a fresh mapping: none of its pages is touched yet.
    let mut memory = vec![0u8; SIZE];
    let started = Instant::now();
    for page in memory.chunks_mut(PAGE) {
        page[0] = 1;
    }
    let elapsed = started.elapsed();
    std::hint::black_box(&memory);
    format!(
        "this machine now: fresh memory first touched at {:.2} GB/s ({} MB, {} pages in {})",
        SIZE as f64 / elapsed.as_secs_f64() / 1e9,
        SIZE >> 20,
        SIZE / PAGE,
        ms(elapsed)
    )
}

/// What the kernel counts of a process (`self`, `thread-self` or a pid) in `/proc/…/stat`.
struct ProcCounters {
    /// Page faults that needed no disk (`minflt`): first touches of memory, each a trip into
    /// the kernel, which on a VM may have to ask its host for the page.
    faults: u64,
    /// User and system CPU time of all its threads, counted in the kernel's clock ticks.
    cpu: Duration,
}

fn proc_counters(process: &str) -> Option<ProcCounters> {
    let stat = std::fs::read_to_string(format!("/proc/{process}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold anything:
    // `state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime`.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let number = |i: usize| fields.get(i)?.parse::<u64>().ok();
    let ticks = number(11)? + number(12)?;
    let per_second = rustix::param::clock_ticks_per_second().max(1);
    Some(ProcCounters {
        faults: number(7)?,
        cpu: Duration::from_secs_f64(ticks as f64 / per_second as f64),
    })
}

/// Whether every check held.
fn bench_fleet(mut fleet: Fleet, generated: Duration) -> bool {
    let p = fleet.index.platform(PLATFORM).expect("fleet platform");
    let online = (0..p.bot_count() as BotIx)
        .filter(|&b| p.is_online(b))
        .count();
    println!(
        "\nfleet {}: {} bots ({} online), {} channels, {} memberships (generated in {})",
        fleet.name,
        p.bot_count(),
        online,
        p.channel_count(),
        p.total_memberships(),
        ms(generated)
    );
    println!(
        "  {:<10} {:>11} {:>11} {:>8} {:>10} {:>16} {:>10} {:>8}",
        "strategy", "time", "cpu", "faults", "peak RSS", "Σ load²", "stddev", "max"
    );
    let (greedy, optimal) = best_of_in_turn(
        || balance::plan(&fleet.index, &fleet.rules, Strategy::Greedy),
        || balance::plan(&fleet.index, &fleet.rules, Strategy::Optimal),
    );
    print_row("greedy", &greedy);
    print_row("optimal", &optimal);
    let (g, o) = (&greedy.value, &optimal.value);
    println!(
        "  optimal/greedy: cpu time {:.2}×, Σ load² {:.4}×, max load {:.3}×",
        ratio(optimal.cpu, greedy.cpu),
        o.sum_sq as f64 / g.sum_sq.max(1) as f64,
        o.max as f64 / g.max.max(1) as f64,
    );
    drop((greedy, optimal));

    // Incremental re-plans: prime the remembering planner with a full plan.
    let mut planner = Planner::new(Strategy::Optimal, fleet.rules.clone());
    let primed = planner.plan(&mut fleet.index);
    let Some(bot) = mid_sized_bot(&primed) else {
        return true;
    };
    drop(primed);
    let p = fleet.index.platform(PLATFORM).expect("fleet platform");
    let bot_name = p.bot_id(bot).to_owned();
    let channels = channel_ids(p, bot);
    let load = p.load(bot);

    // The bot leaves and comes back REPEATS times and the fastest of each re-plan counts, as
    // the fastest of five one-off plans does: a single re-plan of well under a millisecond
    // measured against the best of five full plans showed the machine's hiccups (0.4 to
    // 1.0 ms for the same re-plan in runs a minute apart). Every round is the last one's
    // shape, which `replan` checks: a full plan of the same state first, then the re-plan.
    // Without the full plan in between, a re-plan finds its data still in the CPU's caches
    // from the round before and takes as little as a quarter of the time, which a service
    // woken by one bot's notice after a quiet spell does not see.
    let mut round = |fleet: &mut Fleet, earlier: &mut Option<Measured<()>>| {
        drop(balance::plan(&fleet.index, &fleet.rules, Strategy::Optimal));
        let timed = measure(|| planner.plan(&mut fleet.index)).map(drop);
        *earlier = Some(earlier.take().into_iter().fold(timed, Measured::or_faster));
    };
    let mut earlier_offline = None;
    let mut earlier_back = None;
    for _ in 1..REPEATS {
        fleet.index.bot_offline(PLATFORM, &bot_name);
        round(&mut fleet, &mut earlier_offline);
        fleet.index.bot_online(PLATFORM, &bot_name, &channels);
        round(&mut fleet, &mut earlier_back);
    }
    fleet.index.bot_offline(PLATFORM, &bot_name);
    let offline = replan(
        &mut fleet,
        &mut planner,
        &format!("bot {bot_name} (load {load}) offline"),
        earlier_offline,
    );
    fleet.index.bot_online(PLATFORM, &bot_name, &channels);
    let back = replan(
        &mut fleet,
        &mut planner,
        &format!("bot {bot_name} back online"),
        earlier_back,
    );

    // A change too large for an incremental re-plan: every tenth online bot goes offline at
    // once, so the journal touches more than a sixteenth of the channels and the planner
    // plans from scratch (its peak RSS is that of a rebuild with a graph remembered). The
    // planner's state moves on with every plan, so this re-plan cannot be run five times as
    // it stands: as for the one bot above, the bots go offline and come back five times, and
    // the fastest of the five re-plans after they left counts.
    let p = fleet.index.platform(PLATFORM).expect("fleet platform");
    let online: Vec<BotIx> = (0..p.bot_count() as BotIx)
        .filter(|&b| p.is_online(b))
        .collect();
    // Their channels by index, not as ids: 2.8M strings were 134 MB of the bench's own in
    // every peak it measured after.
    let leaving: Vec<(String, Vec<ChanIx>)> = online
        .iter()
        .step_by(10)
        .map(|&b| (p.bot_id(b).to_owned(), p.channels_of(b).to_vec()))
        .collect();
    let what = format!(
        "{} of {} online bots offline at once (a full re-plan)",
        leaving.len(),
        online.len()
    );
    // The fastest CPU time and the highest peak RSS of the re-plans before the last.
    let mut earlier: Option<Measured<()>> = None;
    for round in 0..REPEATS {
        if round > 0 {
            for (bot, channels) in &leaving {
                let p = fleet.index.platform(PLATFORM).expect("fleet platform");
                let ids: Vec<String> = channels
                    .iter()
                    .map(|&c| p.channel_id(c).to_owned())
                    .collect();
                fleet.index.bot_online(PLATFORM, bot, &ids);
            }
            planner.plan(&mut fleet.index);
        }
        for (bot, _) in &leaving {
            fleet.index.bot_offline(PLATFORM, bot);
        }
        if round + 1 < REPEATS {
            let timed = measure(|| planner.plan(&mut fleet.index)).map(drop);
            earlier = Some(earlier.into_iter().fold(timed, Measured::or_faster));
        }
    }
    let many = replan(&mut fleet, &mut planner, &what, earlier);
    offline && back && many
}

/// Times an incremental re-plan next to a from-scratch plan of the same state (the fallback it
/// must never be slower than), and checks its moves against that plan's, the exact minimum.
/// `earlier`: earlier re-plans of the same change, whose fastest CPU time and highest peak RSS
/// count with this one's. Returns whether they agree.
fn replan(
    fleet: &mut Fleet,
    planner: &mut Planner,
    what: &str,
    earlier: Option<Measured<()>>,
) -> bool {
    // What the re-plan is checked against, without the full plan itself: the bench's own
    // memory would count in the re-plan's peak.
    let moves = |plan: &Plan| {
        let p = plan.platform(PLATFORM).expect("planned");
        (p.forced, p.voluntary, p.stats.sum_sq)
    };
    let exact = best_of(|| {
        moves(&balance::plan(
            &fleet.index,
            &fleet.rules,
            Strategy::Optimal,
        ))
    });
    let last = measure(|| planner.plan(&mut fleet.index));
    let Measured { cpu, peak_mb, .. } =
        earlier.into_iter().fold(last.timing(), Measured::or_faster);
    let (e, i) = (exact.value, moves(&last.value));
    let agree = e == i;
    println!(
        "  {what}: incremental {} cpu ({:.1}% of the full plan's {}), peak RSS {}; \
         moved {} = {} forced + {} voluntary, full plan {} + {}, Σ load² {}",
        ms(cpu),
        100.0 * ratio(cpu, exact.cpu),
        ms(exact.cpu),
        mb(peak_mb),
        i.0 + i.1,
        i.0,
        i.1,
        e.0,
        e.1,
        if agree { "equal ✓" } else { "✗ MISMATCH" },
    );
    agree
}

/// The ids of a bot's channels, to bring it back online with.
fn channel_ids(p: &PlatformIndex, bot: BotIx) -> Vec<String> {
    let channels = p.channels_of(bot).iter();
    channels.map(|&c| p.channel_id(c).to_owned()).collect()
}

/// The bot with the median load among bots that have channels.
fn mid_sized_bot(plan: &Plan) -> Option<BotIx> {
    let mut loaded: Vec<(u32, BotIx)> = plan
        .platform(PLATFORM)?
        .stats
        .loads
        .iter()
        .filter(|&&(_, l)| l > 0)
        .map(|&(b, l)| (l, b))
        .collect();
    loaded.sort_unstable();
    loaded.get(loaded.len() / 2).map(|&(_, b)| b)
}

fn stats(plan: &Plan) -> &balance::LoadStats {
    &plan.platform(PLATFORM).expect("planned").stats
}

fn print_row(name: &str, m: &Measured<balance::LoadStats>) {
    let s = &m.value;
    println!(
        "  {:<10} {:>11} {:>11} {:>8} {:>10} {:>16} {:>10.2} {:>8}",
        name,
        ms(m.time),
        ms(m.cpu),
        m.faults.map_or_else(|| "n/a".to_owned(), |f| f.to_string()),
        mb(m.peak_mb),
        s.sum_sq,
        s.stddev,
        s.max
    );
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn mb(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.0} MB"))
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

/// Resets the kernel's peak-RSS counter for this process (Linux ≥ 4.0).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn peak_rss_mb() -> Option<f64> {
    peak_rss_mb_of("self")
}

/// The peak RSS of a process (`self` or a pid), in MB.
fn peak_rss_mb_of(process: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{process}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
