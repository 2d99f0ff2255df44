//! The OneBot v11 source end to end: simulated bots over real WebSockets (both connection
//! modes), the real service binary (what it reports in its log is part of what is tested), a
//! real SQLite file. States are learnt from the database and the API; the log is only checked
//! for what the service says.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::{Db, Service, Sims, TempDir, eventually, free_port};

const WAIT: Duration = Duration::from_secs(30);

/// 1001 in 100001..=100012, 1002 in 100001..=100008, 1003 in 100005..=100012.
fn three() -> Sims {
    Sims::forward(&[
        (1001, 100001..=100012),
        (1002, 100001..=100008),
        (1003, 100005..=100012),
    ])
}

fn config(onebot: &str) -> String {
    format!(
        "balanceInterval: 600
triggerDelays: {{startup: 0, botStatus: 0.3, botOnline: 0.3, botOffline: 0.3, channelJoined: 0.5, channelLeft: 0.3}}
database: {{url: \"sqlite://state.db\"}}
api: {{bind: \"127.0.0.1:API_PORT\"}}
sources:
  onebot:
    actionTimeout: 2
    offlineGrace: 1
    startupWait: 5
    groupListRefresh: 600
    health: {{probeInterval: 600}}
{onebot}"
    )
}

/// The service on `config` in a fresh directory with its own SQLite file, its API on a free
/// port.
fn serve(name: &str, config: &str) -> (TempDir, Db, Service) {
    let dir = TempDir::new(name);
    let port = free_port();
    let path = dir.write(
        "config.yaml",
        &config.replace("API_PORT", &port.to_string()),
    );
    let db = Db::Sqlite(dir.join("state.db"));
    let service = Service::start(&path);
    API.with(|a| *a.borrow_mut() = format!("http://127.0.0.1:{port}"));
    (dir, db, service)
}

thread_local! {
    /// The API of the service this test started.
    static API: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// A bot's presence, from `GET /v1/bots`.
fn presence(bot: u64) -> serde_json::Value {
    let api = API.with(|a| a.borrow().clone());
    let (_, bots) = crate::support::get(&format!("{api}/v1/bots"), None);
    bots.as_array()
        .and_then(|all| {
            all.iter()
                .find(|b| b["bot"].as_str() == Some(bot.to_string().as_str()))
        })
        .map(|b| b["presence"].clone())
        .unwrap_or_default()
}

fn loads(rows: &BTreeMap<String, String>) -> Vec<usize> {
    let mut loads = BTreeMap::new();
    for bot in rows.values().filter(|b| !b.is_empty()) {
        *loads.entry(bot.clone()).or_insert(0) += 1;
    }
    loads.into_values().collect()
}

fn committed(db: &Db, n: usize, service: &Service) {
    let until = Instant::now() + WAIT;
    while db.history().len() < n {
        assert!(
            Instant::now() < until,
            "timed out waiting for {n} rebalances; log:\n{}",
            service.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn heartbeats_offline_recovery_and_membership_notices() {
    let sims = three();
    let (_dir, db, service) = serve(
        "onebot-e2e",
        &config(&format!("    connections:\n{}", sims.connections(""))),
    );

    // Three bots sharing groups: a balanced first assignment.
    committed(&db, 1, &service);
    let first = db.channels("onebot");
    assert_eq!(first.len(), 12);
    assert_eq!(loads(&first), [4, 4, 4], "{first:?}");
    assert!(db.history()[0].0.contains("startup"));

    // 1002 stops heartbeating (after a few, so its interval is known): offline after 3
    // intervals (0.6 s) plus the status delay.
    std::thread::sleep(Duration::from_millis(500));
    let stopped = Instant::now();
    sims.bot(1002).set_heartbeats(false);
    committed(&db, 2, &service);
    // The last heartbeat came up to one interval before the stop: at least 2 intervals + delay.
    assert!(
        stopped.elapsed() >= Duration::from_millis(700),
        "{:?}",
        stopped.elapsed()
    );
    service.expect_log("no heartbeat for 3 intervals");
    let second = db.channels("onebot");
    let moved = first.keys().filter(|c| first[*c] != second[*c]).count();
    let on_1002 = first.values().filter(|b| *b == "1002").count();
    assert_eq!(loads(&second), [6, 6]);
    let history = db.history();
    assert!(history[1].0.contains("bot-status"), "{history:?}");
    // 1002's groups move (forced); the others only as far as balance needs (at most 2 here).
    assert_eq!(history[1].2 as usize, on_1002);
    assert_eq!(moved, on_1002 + history[1].3 as usize);
    assert!(history[1].3 <= 2, "{history:?}");

    // It comes back: rebalanced with the minimum moves (exactly its share).
    sims.bot(1002).set_heartbeats(true);
    committed(&db, 3, &service);
    assert_eq!(loads(&db.channels("onebot")), [4, 4, 4]);
    assert_eq!(
        (db.history()[2].2, db.history()[2].3),
        (0, 4),
        "{:?}",
        db.history()
    );

    // 1003 joins a new group: assigned after the join delay.
    let joined = Instant::now();
    sims.bot(1003).join(100013);
    committed(&db, 4, &service);
    assert!(joined.elapsed() >= Duration::from_millis(500));
    assert_eq!(db.channels("onebot")["100013"], "1003");
    assert!(db.history()[3].0.contains("channel-joined"));

    // 1003 is kicked from a group 1001 is also in: 1001 takes it.
    sims.bot(1003).leave(100009, "kick_me");
    committed(&db, 5, &service);
    assert_eq!(db.channels("onebot")["100009"], "1001");

    // A bot_offline notice, then the account is back.
    sims.bot(1001).bot_offline();
    committed(&db, 6, &service);
    assert!(db.channels("onebot").values().all(|b| b != "1001"));
    service.expect_log("bot_offline notice");
    sims.bot(1001).set_online(true);
    committed(&db, 7, &service);
    assert_eq!(loads(&db.channels("onebot")).iter().sum::<usize>(), 13);
    assert!(db.channels("onebot").values().any(|b| b == "1001"));
    assert!(service.stop().success());
}

#[test]
fn a_lost_connection_counts_after_the_grace_period() {
    let sims = three();
    let (_dir, db, service) = serve(
        "onebot-grace",
        &config(&format!("    connections:\n{}", sims.connections(""))),
    );
    committed(&db, 1, &service);

    // A short drop (the client redials at once): no offline, no rebalance.
    sims.bot(1003).disconnect();
    eventually("1003 reconnected", WAIT, || {
        sims.bot(1003).connections() >= 2
    });
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        db.history().len(),
        1,
        "a quick reconnect caused a rebalance"
    );

    // Gone for good: offline after the grace period.
    sims.bot(1003).stop();
    committed(&db, 2, &service);
    service.expect_log("connection lost for more than");
    assert!(db.channels("onebot").values().all(|b| b != "1003"));
    assert!(service.stop().success());
}

#[test]
fn wrong_tokens_are_refused_and_reported() {
    let sims = three();
    sims.bot(1003).set_token("right");
    let port = free_port();
    let connections: String = sims
        .urls
        .iter()
        .zip([1001, 1002, 1003])
        .map(|(u, id)| {
            let token = if id == 1003 { "wrong" } else { "" };
            format!("      - {{url: \"{u}\", accessToken: \"{token}\"}}\n")
        })
        .collect();
    let reverse = format!("    reverse: {{bind: \"127.0.0.1:{port}\", accessToken: \"secret\"}}\n");
    let (_dir, db, service) = serve(
        "onebot-token",
        &config(&format!("{reverse}    connections:\n{connections}")),
    );

    // A bot dialing the reverse server with a wrong token.
    let intruder = auto_assign::testkit::sim::SimBot::new(1009, [100001]);
    intruder.set_token("nope");
    {
        let _guard = sims.rt.enter();
        intruder.dial(&format!("ws://127.0.0.1:{port}/onebot/v11/ws"));
    }
    service.expect_log("authentication failed (HTTP 401 Unauthorized)");
    service.expect_log("X-Self-ID 1009) refused: wrong access token");
    eventually("intruder refused", WAIT, || intruder.refused() >= 1);
    assert!(sims.bot(1003).refused() >= 1);
    committed(&db, 1, &service);
    let rows = db.channels("onebot");
    assert!(
        rows.values().all(|b| b == "1001" || b == "1002"),
        "{rows:?}"
    );
    assert_eq!(rows.len(), 12);
    intruder.stop();
    assert!(service.stop().success());
}

#[test]
fn reverse_connections_and_a_duplicate_self_id() {
    let port = free_port();
    let (_dir, db, service) = serve(
        "onebot-reverse",
        &config(&format!(
            "    reverse: {{bind: \"127.0.0.1:{port}\", accessToken: \"secret\"}}\n"
        ))
        .replace("startupWait: 5", "startupWait: 1.5"),
    );
    let sims = Sims::forward(&[]);
    let url = format!("ws://127.0.0.1:{port}/onebot/v11/ws");
    let bots: Vec<_> = [
        (1001u64, 100001..=100012),
        (1002, 100001..=100008),
        (1003, 100005..=100012),
    ]
    .into_iter()
    .map(|(id, groups)| {
        let bot = auto_assign::testkit::sim::SimBot::new(id, groups);
        bot.set_token("secret");
        bot.set_heartbeat_interval(Duration::from_millis(200));
        let _guard = sims.rt.enter();
        bot.dial(&url);
        bot
    })
    .collect();
    committed(&db, 1, &service);
    assert_eq!(loads(&db.channels("onebot")), [4, 4, 4]);

    // The same account dials again (say, a second NapCat process): it stands by while the
    // first connection answers, and takes over when that one ends, without the bot ever going
    // offline.
    let twin = auto_assign::testkit::sim::SimBot::new(1002, 100001..=100008);
    twin.set_token("secret");
    twin.set_heartbeat_interval(Duration::from_millis(200));
    {
        let _guard = sims.rt.enter();
        twin.dial(&url);
    }
    eventually("the twin standing by", WAIT, || {
        presence(1002)["standby_connections"] == 1
    });
    service.expect_log("this connection stands by");
    bots[1].stop();
    eventually("the twin taking over", WAIT, || {
        let p = presence(1002);
        p["standby_connections"] == 0 && p["connected"] == true
    });
    service.expect_log("takes over as the bot's connection");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(db.history().len(), 1, "no offline/online flap");
    assert_eq!(service.count("stands by"), 1, "{}", service.log());
    let mut service = service;
    assert!(service.is_running());
    twin.stop();
    for b in bots {
        b.stop();
    }
    assert!(service.stop().success());
}

#[test]
fn misbehaving_bots_do_not_disturb_the_others() {
    let sims = Sims::forward(&[
        (1001, 100001..=100012),
        (1002, 100001..=100008),
        (1003, 100005..=100012),
        (1004, 100001..=100012),
        (1005, 100001..=100012),
    ]);
    sims.bot(1003).set_garbage(true);
    sims.bot(1004).set_silent(true);
    sims.bot(1005).set_slow(Duration::from_millis(300));
    let (_dir, db, service) = serve(
        "onebot-misbehave",
        &config(&format!("    connections:\n{}", sims.connections(""))),
    );
    committed(&db, 1, &service);
    // The silent one never logs in; the garbage one and the slow one are assigned.
    service.expect_log("get_login_info no answer within 2s");
    service.expect_log("ignored frame: malformed JSON");
    let rows = db.channels("onebot");
    assert_eq!(rows.len(), 12);
    assert!(rows.values().all(|b| b != "1004"));
    let l = loads(&rows);
    assert_eq!(l.len(), 4, "{rows:?}");
    assert_eq!(
        l.iter().max().unwrap() - l.iter().min().unwrap(),
        0,
        "{rows:?}"
    );

    // Life goes on: a well-behaved bot goes offline and its groups move.
    sims.bot(1001).set_heartbeats(false);
    committed(&db, 2, &service);
    assert!(db.channels("onebot").values().all(|b| b != "1001"));
    let log = service.log();
    assert!(!log.contains("panicked"), "{log}");
    let noisy = log
        .lines()
        .filter(|l| l.contains("onebot:1003") && l.contains("ignored"))
        .count();
    assert!(
        noisy <= 10,
        "garbage logging is not rate limited: {noisy} lines"
    );
    assert!(service.stop().success());
}

#[test]
fn failing_status_probes_quarantine_the_bot_until_one_succeeds() {
    let sims = three();
    let (_dir, db, service) = serve(
        "onebot-health",
        &config(&format!("    connections:\n{}", sims.connections(""))).replace(
            "health: {probeInterval: 600}",
            "health: {probeInterval: 0.2, failureThreshold: 3}",
        ),
    );
    committed(&db, 1, &service);
    sims.bot(1002).set_status_failing(true);
    eventually("1002 quarantined", WAIT, || {
        presence(1002)["quarantined"] == true
    });
    service.expect_log("onebot:1002: quarantined after 3 failed status probes");
    committed(&db, 2, &service);
    assert!(db.channels("onebot").values().all(|b| b != "1002"));
    // The connection was reset; the client redials, the probe still fails: refused again.
    eventually("1002 redialed", WAIT, || sims.bot(1002).connections() >= 2);
    sims.bot(1002).set_status_failing(false);
    eventually("quarantine lifted", WAIT, || {
        presence(1002)["quarantined"] == false
    });
    service.expect_log("onebot:1002: status probe succeeded, quarantine lifted");
    committed(&db, 3, &service);
    assert_eq!(loads(&db.channels("onebot")), [4, 4, 4]);
    assert!(service.stop().success());
}

#[test]
fn oversized_frames_reset_only_that_connection_and_floods_are_harmless() {
    let sims = Sims::forward(&[
        (1001, 100001..=100012),
        (1002, 100001..=100008),
        (1003, 100001..=100600),
    ]);
    let (_dir, db, service) = serve(
        "onebot-oversized",
        &config(&format!(
            "    maxFrameBytes: 8192\n    connections:\n{}",
            sims.connections("")
        )),
    );
    committed(&db, 1, &service);
    // 1003's group list is far beyond 8 KiB: its connection is closed, again and again, with
    // the close code RFC 6455 has for it.
    eventually("1009 received", WAIT, || {
        sims.bot(1003).close_codes().contains(&1009)
    });
    service.expect_log("closing the connection");
    let log = service.log();
    assert!(
        log.lines().any(|l| l.contains("onebot:1003")
            && l.contains("too long")
            && l.contains("closing the connection")),
        "{log}"
    );
    // Said with the close code RFC 6455 has for it.
    eventually("1009 received", WAIT, || {
        sims.bot(1003).close_codes().contains(&1009)
    });
    let rows = db.channels("onebot");
    assert!(
        rows.values().all(|b| b == "1001" || b == "1002"),
        "{rows:?}"
    );

    // A flood of message events from 1002 changes nothing and costs nothing lasting.
    let message = r#"{"post_type":"message","message_type":"group","sub_type":"normal","self_id":1002,"group_id":100001,"user_id":42,"message":"spam","raw_message":"spam","font":0,"sender":{}}"#;
    for _ in 0..20_000 {
        sims.bot(1002).push_raw(message);
    }
    std::thread::sleep(Duration::from_millis(500)); // a few heartbeats first
    sims.bot(1001).set_heartbeats(false);
    committed(&db, 2, &service);
    // 1001's groups move to 1002 where it is a member; the rest have no valid bot left.
    let rows = db.channels("onebot");
    assert!(
        rows.iter()
            .all(|(c, b)| b == if c.as_str() <= "100008" { "1002" } else { "" }),
        "{rows:?}"
    );
    let mut service = service;
    assert!(service.is_running());
    assert!(service.stop().success());
}

/// NapCat and LLOneBot accept the WebSocket of a wrong token, answer retcode 1403 and close:
/// that is reported as an authentication failure, once per outage, and its end once.
#[test]
fn a_napcat_token_refusal_is_reported_once_per_outage() {
    let sims = Sims::forward(&[(1001, 100001..=100004)]);
    let bot = sims.bot(1001);
    bot.set_token("right");
    bot.refuse_like_napcat();
    let (_dir, db, service) = serve(
        "onebot-1403",
        &config(&format!("    connections:\n{}", sims.connections("wrong"))),
    );
    // Three refused attempts (1 s and 2 s apart, ±25%).
    eventually("three refusals", WAIT, || bot.refused() >= 3);
    let line = "authentication failed (retcode 1403): check accessToken";
    assert_eq!(service.count(line), 1, "{}", service.log());
    assert_eq!(service.count("connection closed"), 0, "{}", service.log());
    // The bot's token is changed to the one configured: the outage ends, said once.
    bot.set_token("wrong");
    service.expect_log("connected after");
    committed(&db, 2, &service);
    assert_eq!(service.count(line), 1);
    assert_eq!(db.channels("onebot").len(), 4);
    assert!(service.stop().success());
}

/// Two connections to one bot (two forward URLs, or a forward and a reverse one) take turns:
/// one is the bot's connection, the other stands by; nothing reconnects in a loop.
#[test]
fn two_connections_to_one_bot_take_turns_without_churn() {
    let sims = Sims::forward(&[(1001, 100001..=100004)]);
    let bot = sims.bot(1001);
    let url = &sims.urls[0];
    let port = free_port();
    let (_dir, db, service) = serve(
        "onebot-twice",
        &config(&format!(
            "    reverse: {{bind: \"127.0.0.1:{port}\"}}\n    connections:\n      - {{url: \"{url}\"}}\n      - {{url: \"{url}\"}}\n"
        ))
        .replace("startupWait: 5", "startupWait: 1"),
    );
    committed(&db, 1, &service);
    eventually("one connection standing by", WAIT, || {
        presence(1001)["standby_connections"] == 1
    });
    let settled = (bot.connections(), bot.calls("get_login_info"));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        (bot.connections(), bot.calls("get_login_info")),
        settled,
        "forward + forward: no reconnects"
    );
    assert_eq!(settled.0, 2);

    // The same bot also dials the reverse server: a third connection that stands by too.
    {
        let _guard = sims.rt.enter();
        bot.dial(&format!("ws://127.0.0.1:{port}/onebot/v11/ws"));
    }
    eventually("two connections standing by", WAIT, || {
        presence(1001)["standby_connections"] == 2
    });
    let settled = (bot.connections(), bot.calls("get_login_info"));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        (bot.connections(), bot.calls("get_login_info")),
        settled,
        "forward + reverse: no reconnects"
    );
    assert_eq!(service.count("replaces"), 0, "{}", service.log());
    assert_eq!(db.history().len(), 1, "no offline/online flap");

    // Every connection drops at once: they come back, one takes the bot, the others stand
    // by, and the bot never went offline (the grace period covers the redial).
    bot.disconnect();
    eventually("reconnected", WAIT, || bot.connections() >= settled.0 + 3);
    std::thread::sleep(Duration::from_secs(2));
    let after = bot.connections();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(bot.connections(), after, "settled again");
    assert_eq!(db.history().len(), 1, "no offline/online flap");
    assert!(service.stop().success());
}

#[test]
fn a_stop_does_not_wait_out_the_offline_grace() {
    // The default offlineGrace (30 s): the stop drops every connection, and the grace timers
    // it starts must not keep the stopping service alive.
    let sims = three();
    let dir = TempDir::new("onebot-stop");
    let path = dir.write(
        "config.yaml",
        &format!(
            "database: {{url: \"sqlite://state.db\"}}\napi: {{bind: \"127.0.0.1:0\"}}\n\
             sources:\n  onebot:\n    connections:\n{}",
            sims.connections("")
        ),
    );
    let db = Db::Sqlite(dir.join("state.db"));
    let service = crate::support::InProcess::start(&path);
    eventually("the first rebalance", WAIT, || !db.history().is_empty());
    let stopping = Instant::now();
    service.stop().unwrap();
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "the stop took {:?}",
        stopping.elapsed()
    );
}
