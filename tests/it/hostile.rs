//! Bots that misbehave (or a stranger with a token) cannot grow the log or the service's memory
//! without bound: floods of notices, huge values, refused handshakes, a bot reporting a new
//! set of groups at every reconnect. Each test prints the figures it measured.

use std::time::{Duration, Instant};

use crate::support::{Db, Service, Sims, TempDir, eventually, free_port, get};
use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const WAIT: Duration = Duration::from_secs(30);

fn config(onebot: &str, extra: &str) -> String {
    format!(
        "balanceInterval: 600
triggerDelays: {{startup: 0, botStatus: 0.2, botOnline: 0.2, botOffline: 0.2, channelJoined: 0.2, channelLeft: 0.2}}
database: {{url: \"sqlite://state.db\"}}
api: {{bind: \"127.0.0.1:API_PORT\"}}
{extra}sources:
  onebot:
    actionTimeout: 5
    offlineGrace: 1
    startupWait: 3
    health: {{probeInterval: 600}}
{onebot}"
    )
}

/// The binary (its log is under test) on `config`, its API on a free port; returns the API's
/// base URL too.
fn serve(name: &str, config: &str) -> (TempDir, Db, Service, String) {
    let dir = TempDir::new(name);
    let port = free_port();
    let path = dir.write(
        "config.yaml",
        &config.replace("API_PORT", &port.to_string()),
    );
    let db = Db::Sqlite(dir.join("state.db"));
    let service = Service::start(&path);
    (dir, db, service, format!("http://127.0.0.1:{port}"))
}

fn committed(db: &Db, n: usize) {
    eventually(&format!("{n} committed rebalances"), WAIT, || {
        db.history().len() >= n
    });
}

/// Floods from a connected bot: huge `bot_offline` texts, ids of 200 KB, hundreds of join
/// notices. The log grows by kilobytes, not megabytes, and what was not shown is counted.
#[test]
fn floods_from_a_bot_leave_a_bounded_log() {
    let sims = Sims::forward(&[(1001, 100001..=100004)]);
    let bot = sims.bot(1001);
    let (_dir, db, service, _api) = serve(
        "hostile-floods",
        &config(&format!("    connections:\n{}", sims.connections("")), ""),
    );
    committed(&db, 1);
    let before = (service.log().len(), service.log().lines().count());
    let started = Instant::now();
    let huge = "下".repeat(100_000 / 3);
    for _ in 0..100 {
        bot.push_raw(
            &json!({"post_type": "notice", "notice_type": "bot_offline", "self_id": 1001,
                    "user_id": 1001, "tag": "x", "message": huge})
            .to_string(),
        );
    }
    let long_id = "9".repeat(200_000);
    for _ in 0..50 {
        bot.push_raw(
            &json!({"post_type": "notice", "notice_type": "group_increase", "self_id": 1001,
                    "user_id": 1001, "group_id": long_id})
            .to_string(),
        );
    }
    bot.set_online(true);
    for g in 0..500u64 {
        bot.join(200_000 + g);
    }
    eventually("the joins applied", WAIT, || {
        db.channels("onebot").len() >= 504
    });
    let elapsed = started.elapsed().as_secs_f64();
    let (bytes, lines) = (
        service.log().len() - before.0,
        service.log().lines().count() - before.1,
    );
    println!(
        "flood of 100 × 100 KB bot_offline texts, 50 × 200 KB ids, 500 joins: {bytes} log bytes, \
         {lines} lines in {elapsed:.1} s ({:.0} bytes/s, {:.1} lines/s)",
        bytes as f64 / elapsed,
        lines as f64 / elapsed
    );
    assert!(bytes < 30_000, "{bytes} bytes of log:\n{}", service.log());
    assert!(lines < 60, "{lines} lines:\n{}", service.log());
    // Every value from the bot is cut, with its length.
    let log = service.log();
    assert!(log.lines().all(|l| l.chars().count() < 700), "{log}");
    assert!(log.contains("bytes)"), "{log}");
    let mut service = service;
    assert!(service.is_running());
    let log = service.log_handle();
    assert!(service.stop().success());
    // Stopped: the suppressed lines are counted, whatever their window.
    eventually("the count of lines not shown", WAIT, || {
        log.lock().unwrap().iter().any(|l| l.contains("not shown"))
    });
}

/// Handshakes refused without any token (200 connection attempts from one address) give a
/// handful of lines, the rest counted.
#[test]
fn refused_handshakes_are_limited_per_address() {
    let port = free_port();
    let (_dir, _db, service, api) = serve(
        "hostile-handshakes",
        &config(
            &format!("    reverse: {{bind: \"127.0.0.1:{port}\", accessToken: \"secret\"}}\n"),
            "",
        ),
    );
    eventually("the API answering", WAIT, || {
        crate::support::http()
            .get(&format!("{api}/healthz"))
            .call()
            .is_ok()
    });
    let before = service.log().lines().count();
    let started = Instant::now();
    for i in 0..200 {
        let mut request = format!("ws://127.0.0.1:{port}/onebot/v11/ws")
            .into_client_request()
            .unwrap();
        request
            .headers_mut()
            .insert("X-Self-ID", (1000 + i).to_string().parse().unwrap());
        let _ = tokio_tungstenite::tungstenite::connect(request);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let lines = service.log().lines().count() - before;
    println!(
        "200 refused handshakes from one address in {elapsed:.1} s: {lines} log lines ({:.1}/s)",
        lines as f64 / elapsed
    );
    assert!(lines <= 6, "{}", service.log());
    assert_eq!(get(&format!("{api}/healthz"), None).0, 200);
    assert!(service.stop().success());
}

/// A bot that reports 15,000 new groups at each of eight reconnects: the groups it left are
/// forgotten in memory (the service's RSS stays flat), a bot over the cap is cut with a
/// warning, and a bot gone for longer than `forgetBotsAfter` leaves the API.
#[test]
fn a_bot_reporting_new_groups_at_every_reconnect_costs_bounded_memory() {
    let sims = Sims::forward(&[(1001, 1..=15_000), (1002, 7..=7)]);
    let bot = sims.bot(1001);
    let (_dir, db, service, _api) = serve(
        "hostile-growth",
        &config(
            &format!(
                "    maxGroupsPerBot: 20000\n    connections:\n{}",
                sims.connections("")
            ),
            "forgetBotsAfter: 1\n",
        ),
    );
    committed(&db, 1);
    let api = _api;
    let rss = || crate::support::rss_kib(service.pid());
    let mut rss_after = Vec::new();
    for round in 1..=8u64 {
        let runs = db.history().len();
        let first = 1 + round * 15_000;
        bot.set_groups(first..first + 15_000);
        bot.disconnect();
        eventually("the new groups assigned", WAIT, || {
            db.history().len() > runs
                && db
                    .channels("onebot")
                    .get(&first.to_string())
                    .is_some_and(|a| a == "1001")
        });
        std::thread::sleep(Duration::from_millis(300));
        rss_after.push(rss());
    }
    let rows = db.channels("onebot").len();
    println!(
        "8 reconnects × 15,000 new groups: service RSS after each {:?} KiB; {rows} channel rows \
         (rows are never deleted: the table is shared with Koishi)",
        rss_after
    );
    // What the engine keeps: the bot's current 15,000 groups (and 1002's one), not 135,000.
    let status = get(&format!("{api}/v1/status"), None).1;
    let known = status["platforms"]["onebot"]["channels_known"]
        .as_u64()
        .unwrap();
    println!("channels kept in memory: {known}");
    assert!(known <= 15_001 + 15_000, "{status}");
    let (first, last) = (rss_after[0], rss_after[7]);
    assert!(last < first * 2, "RSS grew from {first} to {last} KiB");

    // Over the cap: the first 20,000 groups (by id) are used, with one clear warning.
    let runs = db.history().len();
    bot.set_groups(500_001..=525_000);
    bot.disconnect();
    service.expect_log("reported 25000 groups; only 20000 are used");
    // Its groups leave and join in more than one batch of events, so more than one run may
    // come before the last: wait for what the last one writes.
    let assigned = || {
        db.channels("onebot")
            .into_iter()
            .filter(|(c, a)| a == "1001" && c.as_str() >= "500001")
            .count()
    };
    eventually("capped list assigned", WAIT, || {
        db.history().len() > runs && assigned() >= 20_000
    });
    assert_eq!(assigned(), 20_000);

    // 1002 goes away for good: forgotten after forgetBotsAfter (1 s) at the next run.
    let bots = |api: &str| get(&format!("{api}/v1/bots"), None).1;
    assert!(
        bots(&api)
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["bot"] == "1002")
    );
    sims.bot(1002).stop();
    // Forgetting happens at a run: each look asks for one, until a run comes after 1002 has
    // been offline for longer than forgetBotsAfter.
    eventually("1002 forgotten", WAIT, || {
        crate::support::post(&format!("{api}/v1/rebalance"), None, &json!({}));
        std::thread::sleep(Duration::from_millis(200));
        !bots(&api)
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["bot"] == "1002")
    });
    service.expect_log("forgot");
    assert!(service.stop().success());
}
