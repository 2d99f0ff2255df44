//! `bench --coord`'s in-process part: what an ingress decision's look-up in the view costs
//! while the engine commits a plan into it.
//!
//! The decisions arrive at a fixed pace (open loop) and each one's latency counts from when
//! it was due, not from when it started: a reader that waited on a writer for 40 ms then
//! misses 4,000 arrivals, and a closed loop would record only the one call that waited.

use std::time::{Duration, Instant};

use super::rate::Rate;
use crate::view::{Route, View};

const BOTS: usize = 200;
/// A start-up's first plan in `bench --onebot`.
const CHANNELS: usize = 367_649;
/// Between the starts of two commits.
const COMMIT_EVERY: Duration = Duration::from_millis(250);
const DURATION: Duration = Duration::from_secs(3);
/// Between two decisions due: 100k a second, about what `--coord` serves over HTTP.
const PACE: Duration = Duration::from_micros(10);

/// The decisions' latency and rate, the longest wait among them, and the median commit.
struct Figures {
    decisions: Rate,
    longest: Duration,
    commit: Duration,
    commits: usize,
}

/// Measures and prints.
pub(super) fn report() {
    let f = decisions_while_committing();
    println!(
        "view, in-process: a decision due every {} µs while the engine commits {CHANNELS} rows every {} ms:",
        PACE.as_micros(),
        COMMIT_EVERY.as_millis()
    );
    println!(
        "  fleet-bot check + route: {:>9.0} /s   {}, longest wait {:.1} µs   (commit: median {:.0} ms of {})",
        f.decisions.per_s,
        f.decisions.latency(),
        f.longest.as_secs_f64() * 1e6,
        f.commit.as_secs_f64() * 1e3,
        f.commits
    );
}

/// One thread commits the whole assignment every [`COMMIT_EVERY`], moving every channel to
/// the next bot (each commit rewrites all [`CHANNELS`] rows, as a start-up's first plan
/// does); this one decides as the ingress does: is the sender a fleet bot, where does the
/// group go.
fn decisions_while_committing() -> Figures {
    let view = View::default();
    let bots: Vec<String> = (0..BOTS).map(|b| (2_000_000_000 + b).to_string()).collect();
    for bot in &bots {
        view.set_bot("onebot", bot, true);
    }
    let channels: Vec<String> = (0..CHANNELS).map(|c| (100_000 + c).to_string()).collect();
    let commit = |turn: usize| {
        view.apply(
            "onebot",
            channels
                .iter()
                .enumerate()
                .map(|(c, channel)| (channel.as_str(), Some(bots[(c + turn) % BOTS].as_str()))),
        );
    };
    commit(0);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut times = Vec::new();
            let started = Instant::now();
            while started.elapsed() < DURATION {
                let t = Instant::now();
                commit(times.len() + 1);
                times.push(t.elapsed());
                std::thread::sleep(COMMIT_EVERY.saturating_sub(t.elapsed()));
            }
            times
        });
        let mut latencies = Vec::new();
        let mut longest = Duration::ZERO;
        let started = Instant::now();
        let mut due = started;
        let (mut id, mut group) = (itoa::Buffer::new(), itoa::Buffer::new());
        let mut n = 0usize;
        while due - started < DURATION {
            while Instant::now() < due {
                std::hint::spin_loop();
            }
            let sender = id.format(900_000 + n % 1000);
            let fleet = view.is_fleet_bot("onebot", sender);
            let route = view.route("onebot", group.format(100_000 + (n * 7919) % CHANNELS));
            // Every group is assigned to an online bot, before, during and after a commit;
            // no sender is a fleet bot.
            assert!(matches!(route, Route::Online(_)) && !fleet, "{route:?}");
            let waited = due.elapsed();
            longest = longest.max(waited);
            latencies.push(waited.as_nanos() as u64);
            due += PACE;
            n += 1;
        }
        let elapsed = started.elapsed();
        let mut times = writer.join().expect("writer");
        times.sort_unstable();
        Figures {
            decisions: Rate::new(latencies, elapsed),
            longest,
            commit: times[times.len() / 2],
            commits: times.len(),
        }
    })
}
