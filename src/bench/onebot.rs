//! `auto-assign bench --onebot`: the service as operators run it, against simulated bots over
//! loopback. Starts N simulated bots (forward WebSocket servers) with G groups each, starts
//! `auto-assign serve` as a child process on a fresh SQLite file (the default one,
//! `data/auto-assign.db` beside the config), and measures the time from its start to the first
//! assignment committed, its peak RSS, and the time from a bot's `bot_offline` notice to the
//! rebalance that moves its groups being committed (trigger delays set to 0, so this is
//! detection + planning + the write): once right after the start-up, then for five more bots
//! one at a time with the service idle, and their median.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::testkit::procs::TermOnDrop;
use crate::testkit::sim::SimBot;

/// Bots taken offline one at a time once the service is idle.
const IDLE_REACTIONS: usize = 5;

pub fn run(bots: usize, groups_per_bot: usize, seed: u64) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(bench(bots, groups_per_bot, seed))
}

async fn bench(bots: usize, groups_per_bot: usize, seed: u64) -> anyhow::Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // 2.5 bots per group on average.
    let pool = (bots * groups_per_bot * 2 / 5).max(groups_per_bot);
    let mut ids: Vec<u64> = (0..pool as u64).map(|g| 300_000_000 + g).collect();
    let mut sims = Vec::with_capacity(bots);
    let mut urls = Vec::with_capacity(bots);
    let mut channels = std::collections::HashSet::new();
    for i in 0..bots {
        ids.shuffle(&mut rng);
        channels.extend(ids[..groups_per_bot].iter().copied());
        let bot = SimBot::new(
            2_000_000_001 + i as u64,
            ids[..groups_per_bot].iter().copied(),
        );
        bot.set_heartbeat_interval(Duration::from_secs(5));
        urls.push(bot.listen().await?);
        sims.push(bot);
    }
    println!(
        "onebot fleet: {bots} simulated bots × {groups_per_bot} groups = {} memberships over {pool} groups (loopback, forward WebSocket)",
        bots * groups_per_bot
    );
    println!("  {}", super::first_touch_line());

    let dir = std::env::temp_dir().join(format!("auto-assign-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let connections: String = urls
        .iter()
        .map(|u| format!("      - url: \"{u}\"\n"))
        .collect();
    let config = format!(
        "balanceInterval: 3600
triggerDelays: {{startup: 0, botStatus: 0, botOnline: 0, botOffline: 0, channelJoined: 0, channelLeft: 0}}
sources:
  onebot:
    actionTimeout: 60
    startupWait: 300
    health: {{probeInterval: 3600}}
    connections:
{connections}"
    );
    let config_path = dir.join("config.yaml");
    std::fs::write(&config_path, config)?;
    // The embedded default database: `data/auto-assign.db` beside the config file.
    let db = dir.join("data").join("auto-assign.db");

    let started = Instant::now();
    let bots_before = super::proc_counters("self");
    let mut child = TermOnDrop(
        Command::new(std::env::current_exe()?)
            .args(["serve", "--config"])
            .arg(&config_path)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".to_owned()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?,
    );
    let service = child.0.id().to_string();
    let result = async {
        // The first run that covers every bot's groups: a first plan that misses a bot whose
        // report was still on its way to the engine is followed by another (noted).
        let mut n = 1;
        loop {
            wait_for_runs(&db, n, &mut child.0).await?;
            let assigned = last_run(&db).await?.channels;
            let to_first = started.elapsed();
            if assigned as usize == channels.len() {
                println!(
                    "  start → first assignment committed: {:.2} s ({assigned} channels)",
                    to_first.as_secs_f64()
                );
                // The wall clock of a start-up moves with the machine's hour; the CPU and
                // the first touches of memory it took say more about a change.
                if let (Some(service), Some(bots), Some(before)) = (
                    super::proc_counters(&service),
                    super::proc_counters("self"),
                    &bots_before,
                ) {
                    println!(
                        "    the service meanwhile: {:.2} s CPU, {} page faults; the simulated bots (this process): {:.2} s CPU",
                        service.cpu.as_secs_f64(),
                        service.faults,
                        (bots.cpu - before.cpu).as_secs_f64()
                    );
                }
                break;
            }
            println!(
                "  (start → a first plan of part of the fleet committed: {:.2} s, {assigned} channels)",
                to_first.as_secs_f64()
            );
            n += 1;
        }
        // Bots go offline one after another: the first right after the first commit (its
        // 367k rows not yet checkpointed), the others each once the service has been idle for
        // a second. One reaction varies by ±10 ms on a shared machine; the median of the idle
        // ones says more.
        let mut victims = sims.iter().collect::<Vec<_>>();
        victims.shuffle(&mut rng);
        let mut idle = Vec::new();
        for (i, victim) in victims.into_iter().take(1 + IDLE_REACTIONS).enumerate() {
            let when = if i == 0 {
                "right after start-up"
            } else {
                tokio::time::sleep(Duration::from_secs(1)).await;
                "service idle"
            };
            let runs = run_count(&db).await?;
            // One of the bot's channels: its provisional assignee is committed with all the
            // others of the bot, in one transaction.
            let watched = channel_of(&db, victim.id()).await?;
            let offline = Instant::now();
            victim.bot_offline();
            let provisional = match &watched {
                Some(channel) => {
                    row_moved(&db, channel, victim.id(), &mut child.0).await?;
                    Some(offline.elapsed())
                }
                None => None,
            };
            // The first run after the notice that the notice caused (a run of a late start-up
            // report in flight does not count). Its moves are voluntary: the forced ones were
            // made at once.
            let mut n = runs + 1;
            let (forced, voluntary) = loop {
                wait_for_runs(&db, n, &mut child.0).await?;
                let run = last_run(&db).await?;
                if run.causes.contains("bot-offline") || run.causes.contains("bot-status") {
                    break (run.forced, run.voluntary);
                }
                n += 1;
            };
            let reaction = offline.elapsed();
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            println!(
                "  bot {} offline ({when}; bot_offline notice) → provisional assignee committed: {}, rebalance committed: {:.0} ms, moved {forced} forced + {voluntary} voluntary",
                victim.id(),
                provisional.map_or_else(|| "(no channel)".to_owned(), |d| format!("{:.0} ms", ms(d))),
                ms(reaction)
            );
            if i > 0 {
                idle.push((reaction, provisional.unwrap_or(reaction)));
            }
        }
        let median = |mut times: Vec<Duration>| {
            times.sort();
            let ms = |d: &Duration| d.as_secs_f64() * 1e3;
            format!(
                "median {:.0} ms of {} (min {:.0}, max {:.0})",
                ms(&times[times.len() / 2]),
                times.len(),
                ms(&times[0]),
                ms(&times[times.len() - 1])
            )
        };
        if !idle.is_empty() {
            println!(
                "  bot offline → provisional assignee committed, service idle: {}",
                median(idle.iter().map(|t| t.1).collect())
            );
            println!(
                "  bot offline → rebalance committed, service idle: {}",
                median(idle.iter().map(|t| t.0).collect())
            );
        }
        println!("  service peak RSS: {}", super::mb(super::peak_rss_mb_of(&service)));
        anyhow::Ok(())
    }
    .await;
    drop(child);
    for bot in &sims {
        bot.stop();
    }
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Polls every 2 ms (the resolution of the reaction times) on one read-only connection.
async fn wait_for_runs(db: &Path, n: i64, child: &mut Child) -> anyhow::Result<()> {
    let mut pool = None;
    loop {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("the service exited: {status}");
        }
        if pool.is_none() && db.exists() {
            pool = Some(open(db).await?);
        }
        if let Some(pool) = &pool {
            let count: Result<i64, _> =
                sqlx::query_scalar("SELECT COUNT(*) FROM auto_assign_rebalance")
                    .fetch_one(pool)
                    .await;
            if count.is_ok_and(|c| c >= n) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    if let Some(pool) = pool {
        pool.close().await;
    }
    Ok(())
}

/// Rebalances recorded so far.
async fn run_count(db: &Path) -> anyhow::Result<i64> {
    let pool = open(db).await?;
    let count = sqlx::query_scalar("SELECT COUNT(*) FROM auto_assign_rebalance")
        .fetch_one(&pool)
        .await?;
    pool.close().await;
    Ok(count)
}

/// The last rebalance record: its channels, causes, forced and voluntary moves.
struct LastRun {
    channels: i64,
    causes: String,
    forced: i64,
    voluntary: i64,
}

async fn last_run(db: &Path) -> anyhow::Result<LastRun> {
    let pool = open(db).await?;
    let (channels, causes, forced, voluntary) = sqlx::query_as(
        "SELECT channels, causes, moved_forced, moved_voluntary FROM auto_assign_rebalance ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&pool)
    .await?;
    pool.close().await;
    Ok(LastRun {
        channels,
        causes,
        forced,
        voluntary,
    })
}

/// A channel assigned to `bot`, if any.
async fn channel_of(db: &Path, bot: u64) -> anyhow::Result<Option<String>> {
    let pool = open(db).await?;
    let channel = sqlx::query_scalar("SELECT id FROM channel WHERE assignee = ? LIMIT 1")
        .bind(bot.to_string())
        .fetch_optional(&pool)
        .await?;
    pool.close().await;
    Ok(channel)
}

/// Polls every 2 ms until `channel`'s row names another bot than `bot`.
async fn row_moved(db: &Path, channel: &str, bot: u64, child: &mut Child) -> anyhow::Result<()> {
    let pool = open(db).await?;
    let bot = bot.to_string();
    loop {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("the service exited: {status}");
        }
        let assignee: String =
            sqlx::query_scalar("SELECT assignee FROM channel WHERE platform = 'onebot' AND id = ?")
                .bind(channel)
                .fetch_one(&pool)
                .await?;
        if assignee != bot {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    pool.close().await;
    Ok(())
}

async fn open(db: &Path) -> anyhow::Result<sqlx::SqlitePool> {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(db)
        .read_only(true)
        .busy_timeout(Duration::from_secs(30));
    Ok(sqlx::SqlitePool::connect_with(options).await?)
}
