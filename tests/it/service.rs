//! The service end to end: started in process (`service::start`) on a real SQLite file or
//! PostgreSQL server with real file edits, its state read from the database and the API; the
//! real binary where the process itself is under test (exit codes, signals, what it logs).
//! Delays are configured short (fractions of a second) so the tests run on real time
//! without long sleeps.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::{
    Db, FLEET, InProcess, Postgres, Service, TempDir, eventually, fleet_with_offline, free_port,
};

const WAIT: Duration = Duration::from_secs(30);

fn config(database: &str, extra: &str) -> String {
    format!(
        "balanceInterval: 600
enabledPlatforms: [onebot]
triggerDelays: {{startup: 0, botStatus: 0.2, botOnline: 0.2, botOffline: 0.4, channelJoined: 0.6, channelLeft: 0.2}}
database: {{url: \"{database}\"}}
sources: {{file: fleet.yaml}}
api: {{bind: \"127.0.0.1:0\"}}
{extra}"
    )
}

/// Waits until the store holds `n` rebalance records (the log line comes before the commit).
fn committed(db: &Db, n: usize) {
    eventually(&format!("{n} committed rebalances"), WAIT, || {
        db.history().len() >= n
    });
}

fn loads(rows: &BTreeMap<String, String>) -> BTreeMap<String, usize> {
    let mut loads = BTreeMap::new();
    for bot in rows.values() {
        *loads.entry(bot.clone()).or_insert(0) += 1;
    }
    loads
}

fn koishi_table_sqlite(db: &Db) {
    // As Koishi's SQLite driver creates it, with a row Koishi auto-assigned and decorated.
    db.execute(
        "CREATE TABLE `channel` (`id` TEXT NULL DEFAULT '', `platform` TEXT NULL DEFAULT '', `flag` INTEGER NULL DEFAULT 0, \
         `assignee` TEXT NULL DEFAULT '', `guildId` TEXT NULL DEFAULT '', `locales` TEXT NULL DEFAULT '', \
         `permissions` TEXT NULL DEFAULT '', `createdAt` INTEGER NULL, PRIMARY KEY (`id`, `platform`))",
    );
}

/// First assignment, a bot going offline, Koishi's columns preserved, restart without churn.
fn end_to_end(db: Db, dir: &TempDir) {
    dir.write("fleet.yaml", FLEET);
    db.execute(
        "INSERT INTO channel (id, platform, flag, assignee, \"guildId\", locales, permissions, \"createdAt\") \
         VALUES ('100003', 'onebot', 4, '9999', '100003', 'zh-CN', '', 123)",
    );
    let config = dir.join("config.yaml");

    let service = InProcess::start(&config);
    committed(&db, 1);
    let first = db.channels("onebot");
    assert_eq!(first.len(), 12, "{first:?}");
    assert_eq!(
        loads(&first).values().copied().collect::<Vec<_>>(),
        [4, 4, 4],
        "balanced: {first:?}"
    );
    assert_eq!(
        db.koishi_columns("onebot", "100003"),
        (4, "zh-CN".into(), Some(123))
    );
    let history = db.history();
    assert_eq!(history.len(), 1);
    assert!(history[0].0.contains("startup"), "{history:?}");
    assert_eq!(history[0].1, 12);
    // 9999 is no valid bot: one forced move. The other channels had no row: they got a
    // provisional bot as soon as the fleet was known, and the first rebalance moves as few of
    // them as balance needs.
    assert_eq!(history[0].2, 1, "{history:?}");
    assert!(history[0].3 <= 2, "{history:?}");

    // Bot 1002 goes offline in the fleet file.
    let edited = Instant::now();
    dir.write("fleet.yaml", &fleet_with_offline(1002));
    committed(&db, 2);
    assert!(
        edited.elapsed() >= Duration::from_millis(400),
        "ran before the offline delay"
    );
    let second = db.channels("onebot");
    let moved: Vec<&String> = first.keys().filter(|c| first[*c] != second[*c]).collect();
    let on_1002: Vec<&String> = first.keys().filter(|c| first[*c] == "1002").collect();
    assert_eq!(moved, on_1002, "only the offline bot's channels change");
    assert!(second.values().all(|b| b != "1002"));
    assert_eq!(loads(&second).values().copied().collect::<Vec<_>>(), [6, 6]);
    let history = db.history();
    assert_eq!(history.len(), 2);
    assert!(history[1].0.contains("bot-offline"), "{history:?}");
    assert_eq!((history[1].2, history[1].3), (4, 0));

    service.stop().unwrap();

    // Restart with the same fleet: the stored assignment is the previous one, nothing moves.
    let service = InProcess::start(&config);
    committed(&db, 3);
    let history = db.history();
    assert_eq!(history.len(), 3);
    assert_eq!(
        (history[2].2, history[2].3),
        (0, 0),
        "restart moved channels: {history:?}"
    );
    assert_eq!(db.channels("onebot"), second);
    service.stop().unwrap();
}

#[test]
fn sqlite_first_assignment_offline_move_and_restart() {
    let dir = TempDir::new("sqlite-e2e");
    dir.write("config.yaml", &config("sqlite://state.db", ""));
    let db = Db::Sqlite(dir.join("state.db"));
    koishi_table_sqlite(&db);
    end_to_end(db, &dir);
}

#[test]
fn postgres_first_assignment_offline_move_restart_and_outage() {
    let pg = Postgres::start();
    let dir = TempDir::new("pg-e2e");
    dir.write("config.yaml", &config(&pg.url(), ""));
    let db = Db::Postgres(pg.url());
    db.execute(
        "CREATE TABLE channel (id TEXT NOT NULL DEFAULT '', platform TEXT NOT NULL DEFAULT '', flag BIGINT DEFAULT 0, \
         assignee TEXT DEFAULT '', \"guildId\" TEXT DEFAULT '', locales TEXT DEFAULT '', permissions TEXT DEFAULT '', \
         \"createdAt\" BIGINT, PRIMARY KEY (id, platform))",
    );
    end_to_end(db.clone(), &dir);

    // The database goes away while a rebalance needs writing: nothing is lost.
    let service = InProcess::start(&dir.join("config.yaml"));
    committed(&db, 4);
    pg.stop();
    dir.write("fleet.yaml", FLEET); // 1002 back online
    service.wait_runs(2, WAIT);
    let store = |service: &InProcess| {
        crate::support::get(&format!("{}/healthz", service.api), None).1["store"].clone()
    };
    eventually("the failed write reported", WAIT, || {
        store(&service)["last_error"].is_string()
    });
    pg.restart();
    eventually("written after the outage", WAIT, || {
        store(&service)["committed"] == true
    });
    let rows = db.channels("onebot");
    assert_eq!(
        loads(&rows).values().copied().collect::<Vec<_>>(),
        [4, 4, 4],
        "{rows:?}"
    );
    assert_eq!(db.history().len(), 5);
    service.stop().unwrap();
}

#[test]
fn hot_reload_of_priorities_and_rejected_edits() {
    let dir = TempDir::new("reload");
    dir.write("fleet.yaml", FLEET);
    let config_path = dir.write("config.yaml", &config("sqlite://state.db", ""));
    let db = Db::Sqlite(dir.join("state.db"));
    let service = InProcess::start(&config_path);
    committed(&db, 1);
    let before = db.channels("onebot")["100005"].clone();
    let target = if before == "1001" { "1002" } else { "1001" };

    let pinned = format!("channelBotPriority:\n  \"onebot:100005\": [\"{target}\"]\n");
    let edited = Instant::now();
    dir.write("config.yaml", &config("sqlite://state.db", &pinned));
    committed(&db, 2);
    // The file must stay unchanged for a second before it is taken (editors write in steps).
    assert!(
        edited.elapsed() < Duration::from_secs(3),
        "took {:?}",
        edited.elapsed()
    );
    assert_eq!(db.history()[1].0, "config-changed");
    assert_eq!(db.channels("onebot")["100005"], target);

    // Invalid edits are reported with the key and position, stay "in force" in the API until
    // a valid edit, and change nothing.
    let rejected = |service: &InProcess| service.status()["config"]["rejected"].clone();
    let reject = |text: String, expected: &str| {
        dir.write("config.yaml", &text);
        eventually(&format!("rejected: {expected}"), WAIT, || {
            rejected(&service)
                .as_str()
                .is_some_and(|e| e.contains(expected))
        });
    };
    reject(
        config("sqlite://state.db", "balanceInterval: 30\n").replace("balanceInterval: 600\n", ""),
        "config.yaml: balanceInterval: must be a number of seconds ≥ 60 (got 30) at line 6 column 18",
    );
    reject(
        config(
            "sqlite://state.db",
            "channelBotPriority:\n  \"100005\": 1001\n",
        ),
        "channelBotPriority.100005: invalid type: integer `1001`, expected a sequence",
    );
    reject(
        config("sqlite://state.db", "excludeChannels: [100001\n"),
        "line ",
    );
    assert_eq!(service.runs(), 2, "rejected edits triggered a run");
    assert_eq!(service.status()["config"]["reloads"], 1);

    // The previous config is still in force: the pin holds through the next rebalance.
    dir.write("fleet.yaml", &fleet_with_offline(1003));
    committed(&db, 3);
    assert_eq!(db.history()[2].0, "bot-offline");
    assert_eq!(db.channels("onebot")["100005"], target);
    service.stop().unwrap();
}

#[test]
fn a_burst_of_joins_is_one_rebalance() {
    let dir = TempDir::new("burst");
    dir.write("fleet.yaml", FLEET);
    let config_path = dir.write("config.yaml", &config("sqlite://state.db", ""));
    let db = Db::Sqlite(dir.join("state.db"));
    let service = InProcess::start(&config_path);
    committed(&db, 1);

    // Bot 1003 joins 50 new channels in one edit.
    let extra: Vec<String> = (0..50).map(|i| (200001 + i).to_string()).collect();
    let old = "    channels: [100005, 100006, 100007, 100008, 100009, 100010, 100011, 100012]\n";
    let new = format!(
        "    channels: [100005, 100006, 100007, 100008, 100009, 100010, 100011, 100012, {}]\n",
        extra.join(", ")
    );
    assert!(FLEET.contains(old));
    dir.write("fleet.yaml", &FLEET.replace(old, &new));
    committed(&db, 2);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(service.runs(), 2);
    let history = db.history();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].0, "channel-joined ×50");
    let rows = db.channels("onebot");
    assert_eq!(rows.len(), 62);
    assert!(extra.iter().all(|c| rows[c] == "1003"));
    service.stop().unwrap();
}

#[test]
fn cron_schedule_replaces_the_interval() {
    let dir = TempDir::new("cron");
    dir.write("fleet.yaml", FLEET);
    let config_path = dir.write(
        "config.yaml",
        &config("sqlite://state.db", "balanceCron: \"* * * * * *\"\n"),
    );
    let service = InProcess::start(&config_path);
    let db = Db::Sqlite(dir.join("state.db"));
    committed(&db, 3);
    let history = db.history();
    assert!(
        history
            .iter()
            .skip(1)
            .all(|h| h.0 == "schedule" && h.2 + h.3 == 0),
        "{history:?}"
    );
    service.stop().unwrap();
}

#[test]
fn invalid_config_or_fleet_at_startup_exits_2() {
    let dir = TempDir::new("bad-start");
    dir.write("fleet.yaml", FLEET);
    let path = dir.write(
        "config.yaml",
        &config("sqlite://state.db", "strategy: best\n"),
    );
    let mut service = Service::start(&path);
    assert_eq!(service.wait(WAIT).code(), Some(2));
    assert!(
        service
            .log()
            .contains("config.yaml: strategy: unknown variant `best`"),
        "{}",
        service.log()
    );

    dir.write("config.yaml", &config("sqlite://state.db", ""));
    dir.write("fleet.yaml", "bots:\n  - id: 1001\n    online: sometimes\n");
    let mut service = Service::start(&path);
    assert_eq!(service.wait(WAIT).code(), Some(2));
    assert!(
        service
            .log()
            .contains("fleet.yaml: bots[0].online: invalid type"),
        "{}",
        service.log()
    );
    assert!(
        !dir.join("state.db").exists() || Db::Sqlite(dir.join("state.db")).history().is_empty()
    );
}

#[test]
fn worker_threads_come_from_the_environment_and_a_bad_number_exits_2() {
    let started = |name: &str, workers: &str| {
        let dir = TempDir::new(name);
        dir.write("fleet.yaml", FLEET);
        let path = dir.write("config.yaml", &config("sqlite://state.db", ""));
        let service = Service::start_with_env(&path, &[("TOKIO_WORKER_THREADS", workers)]);
        (dir, service)
    };
    for bad in ["0", "many"] {
        let (_dir, mut service) = started("workers-bad", bad);
        assert_eq!(service.wait(WAIT).code(), Some(2), "{}", service.log());
        let expected =
            format!("error: TOKIO_WORKER_THREADS: {bad:?} is not a number of threads (1 or more)");
        assert!(service.log().contains(&expected), "{}", service.log());
        assert!(!service.log().contains("panicked"), "{}", service.log());
    }
    // Each runs until it has committed the first assignment, balanced, and stops cleanly.
    let balanced = |dir: &TempDir| {
        let db = Db::Sqlite(dir.join("state.db"));
        committed(&db, 1);
        let loads = loads(&db.channels("onebot"));
        assert_eq!(loads.values().copied().collect::<Vec<_>>(), [4, 4, 4]);
    };
    // The number is the runtime's: its workers are started with it, each a thread tokio
    // names `tokio-rt-worker` (so are its blocking threads, a few at most while idle). More
    // than this machine's cores, so that the default could not account for them.
    let many = std::thread::available_parallelism().map_or(1, |n| n.get()) + 8;
    let (dir, service) = started("workers-many", &many.to_string());
    balanced(&dir);
    let workers = std::fs::read_dir(format!("/proc/{}/task", service.pid()))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.unwrap().path().join("comm")).ok())
        .filter(|name| name.trim() == "tokio-rt-worker")
        .count();
    assert!(workers >= many, "{workers} workers, asked for {many}");
    assert!(service.stop().success());
    // One worker: the plan and SQLite have threads of their own, so it runs as with many.
    let (dir, service) = started("workers-one", "1");
    balanced(&dir);
    assert!(service.stop().success());
}

#[test]
fn shutdown_during_a_rebalance_leaves_the_store_consistent() {
    let dir = TempDir::new("shutdown");
    let channels: Vec<String> = (0..60_000).map(|i| (1_000_000 + i).to_string()).collect();
    let list = channels.join(", ");
    dir.write(
        "fleet.yaml",
        &format!("bots:\n  - {{id: 1, channels: [{list}]}}\n  - {{id: 2, channels: [{list}]}}\n  - {{id: 3, channels: [{list}]}}\n"),
    );
    let port = free_port();
    let config_path = dir.write(
        "config.yaml",
        &config("sqlite://state.db", "").replace("127.0.0.1:0", &format!("127.0.0.1:{port}")),
    );
    // The binary, stopped by SIGTERM as soon as it answers (its first rebalance is running).
    let service = Service::start(&config_path);
    let healthz = format!("http://127.0.0.1:{port}/healthz");
    eventually("the API answering", WAIT, || {
        crate::support::http().get(&healthz).call().is_ok()
    });
    let status = service.stop();
    assert!(status.success(), "{status:?}");
    let db = Db::Sqlite(dir.join("state.db"));
    let rows = db.channels("onebot");
    let history = db.history();
    match history.len() {
        // The provisional assignees are one transaction of their own, before the rebalance:
        // all of them or none, each naming a bot of the fleet.
        0 => {
            assert!(
                rows.is_empty() || rows.len() == 60_000,
                "{} provisional rows: a transaction cut short",
                rows.len()
            );
            assert!(rows.values().all(|b| ["1", "2", "3"].contains(&b.as_str())));
        }
        1 => {
            assert_eq!(
                rows.len(),
                60_000,
                "a rebalance recorded but not all of its rows"
            );
            assert_eq!(
                loads(&rows).values().copied().collect::<Vec<_>>(),
                [20_000; 3]
            );
        }
        n => panic!("{n} rebalances"),
    }
    eventually("database readable", WAIT, || {
        db.channels("onebot").len() == rows.len()
    });
}

#[test]
fn events_during_a_run_form_exactly_one_follow_up() {
    let dir = TempDir::new("follow-up");
    let channels: Vec<String> = (0..60_000).map(|i| (1_000_000 + i).to_string()).collect();
    let fleet = |offline: &[u32]| {
        let list = channels.join(", ");
        let mut text = String::from("bots:\n");
        for id in 1..=4u32 {
            let online = !offline.contains(&id);
            text.push_str(&format!(
                "  - {{id: {id}, online: {online}, channels: [{list}]}}\n"
            ));
        }
        text
    };
    dir.write("fleet.yaml", &fleet(&[]));
    let config_path = dir.write("config.yaml", &config("sqlite://state.db", ""));
    let db = Db::Sqlite(dir.join("state.db"));
    let service = InProcess::start(&config_path);
    // The first run writes 60,000 rows; edit the fleet three times while it does.
    for offline in [&[1][..], &[1, 2], &[1, 2, 3]] {
        dir.write("fleet.yaml", &fleet(offline));
        std::thread::sleep(Duration::from_millis(120));
    }
    committed(&db, 2);
    std::thread::sleep(Duration::from_millis(1500));
    let history = db.history();
    assert_eq!(history.len(), 2, "{history:?}");
    assert!(history[1].0.starts_with("bot-offline"), "{history:?}");
    let rows = db.channels("onebot");
    assert!(
        rows.values().all(|b| b == "4"),
        "all channels on the last online bot"
    );
    service.stop().unwrap();
}

/// When the assignee leaves a channel nobody else is in, the row stops naming it after the
/// `channelLeft` delay, not at the next periodic run.
#[test]
fn a_departed_assignee_is_unassigned_when_nobody_is_left() {
    let dir = TempDir::new("departed");
    let alone = FLEET.replace(
        "    channels: [100005, 100006, 100007, 100008, 100009, 100010, 100011, 100012]\n",
        "    channels: [100005, 100006, 100007, 100008, 100009, 100010, 100011, 100012, 100013]\n",
    );
    dir.write("fleet.yaml", &alone);
    let config_path = dir.write("config.yaml", &config("sqlite://state.db", ""));
    let db = Db::Sqlite(dir.join("state.db"));
    let service = InProcess::start(&config_path);
    committed(&db, 1);
    assert_eq!(db.channels("onebot")["100013"], "1003");
    let left = Instant::now();
    dir.write("fleet.yaml", FLEET);
    committed(&db, 2);
    assert_eq!(db.channels("onebot")["100013"], "", "unassigned");
    assert!(
        left.elapsed() < Duration::from_secs(10),
        "{:?}",
        left.elapsed()
    );
    assert_eq!(db.history()[1].0, "channel-left");
    service.stop().unwrap();
}

/// Editors and `cp` write files in several steps. An empty config or fleet file, or half of
/// one, is never applied; and an excluded channel is never assigned, whatever happens.
#[test]
fn empty_or_half_written_files_are_never_applied() {
    let dir = TempDir::new("half-written");
    dir.write("fleet.yaml", FLEET);
    let excluded = "excludeChannels: [\"onebot:100005\"]\n";
    let good = config("sqlite://state.db", excluded);
    let config_path = dir.write("config.yaml", &good);
    let db = Db::Sqlite(dir.join("state.db"));
    let service = InProcess::start(&config_path);
    committed(&db, 1);
    let never_assigned = |db: &Db| {
        let rows = db.channels("onebot");
        assert!(
            rows.get("100005").is_none_or(|a| a.is_empty()),
            "the excluded channel was assigned: {rows:?}"
        );
    };
    never_assigned(&db);
    let first = db.channels("onebot");

    // The config emptied for half a second, then restored (as `cp` or an editor would).
    std::fs::write(&config_path, "").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&config_path, &good).unwrap();
    // The fleet file emptied likewise, then written in two halves 0.5 s apart; the second half
    // changes something, so the complete file is a real edit.
    let fleet_path = dir.join("fleet.yaml");
    std::fs::write(&fleet_path, "").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let complete = FLEET.replace(
        "    channels: [100005, 100006, 100007, 100008, 100009, 100010, 100011, 100012]\n",
        "    channels: [100005, 100006, 100007, 100008, 100009, 100010, 100011, 100012, 100014]\n",
    );
    let half = complete.find("  - id: 1003").unwrap();
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&fleet_path).unwrap();
        f.write_all(&complete.as_bytes()[..half]).unwrap();
        f.flush().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        f.write_all(&complete.as_bytes()[half..]).unwrap();
    }
    committed(&db, 2);
    std::thread::sleep(Duration::from_millis(2500));
    let history = db.history();
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[1].0, "channel-joined", "{history:?}");
    assert_eq!(
        (history[1].2, history[1].3),
        (0, 0),
        "nothing moved: {history:?}"
    );
    let rows = db.channels("onebot");
    assert_eq!(rows["100014"], "1003");
    assert!(
        first.iter().all(|(c, b)| rows[c] == *b),
        "{first:?} → {rows:?}"
    );
    never_assigned(&db);
    // Neither the empty config nor the empty fleet file was ever read as such: no reload,
    // nothing rejected.
    let config = &service.status()["config"];
    assert_eq!(
        (config["reloads"].as_u64(), &config["rejected"]),
        (Some(0), &serde_json::Value::Null),
        "{config}"
    );
    let (_, assignment) = crate::support::get(
        &format!("{}/v1/assignments/onebot/100005", service.api),
        None,
    );
    assert_eq!(
        (&assignment["assignee"], &assignment["excluded"]),
        (&serde_json::Value::Null, &serde_json::Value::Bool(true))
    );
    service.stop().unwrap();
}

/// Passwords in URLs never reach a log line or an error: at start-up or on reload, for
/// unsupported schemes and for unreachable databases.
#[test]
fn passwords_never_reach_the_log() {
    let dir = TempDir::new("secrets");
    dir.write("fleet.yaml", FLEET);
    for bad in [
        "database: {url: \"postgresql+asyncpg://aa:hunter2@127.0.0.1:1/x\"}\n",
        "redis: {url: \"http://:hunter2@127.0.0.1:6380\"}\n",
        "federate: {id: p, redisUrl: \"http://u:hunter2@127.0.0.1\"}\n",
    ] {
        let path = dir.write(
            "config.yaml",
            &format!("sources: {{file: fleet.yaml}}\napi: {{bind: null}}\n{bad}"),
        );
        let mut service = Service::start(&path);
        assert_eq!(service.wait(WAIT).code(), Some(2), "{}", service.log());
        let log = service.log();
        assert!(!log.contains("hunter2") && log.contains("***"), "{log}");
    }
    // A valid URL of a database that is not there: exit 1, no password.
    let path = dir.write(
        "config.yaml",
        "sources: {file: fleet.yaml}\napi: {bind: null}\ndatabase: {url: \"postgres://aa:hunter2@127.0.0.1:1/x\"}\n",
    );
    let mut service = Service::start(&path);
    assert_eq!(service.wait(WAIT).code(), Some(1), "{}", service.log());
    assert!(!service.log().contains("hunter2"), "{}", service.log());

    // On reload: the rejected edit is reported in the API and the log, without the password
    // (nor the API token).
    let port = free_port();
    let api = format!("api: {{bind: \"127.0.0.1:{port}\", token: hunter2}}\n");
    let path = dir.write(
        "config.yaml",
        &config("sqlite://state.db", "").replace("api: {bind: \"127.0.0.1:0\"}\n", &api),
    );
    let service = Service::start(&path);
    committed(&Db::Sqlite(dir.join("state.db")), 1);
    dir.write(
        "config.yaml",
        &config("postgresql+asyncpg://aa:hunter2@127.0.0.1:1/x", "")
            .replace("api: {bind: \"127.0.0.1:0\"}\n", &api),
    );
    let status = || {
        crate::support::get(
            &format!("http://127.0.0.1:{port}/v1/status"),
            Some("hunter2"),
        )
        .1
    };
    eventually("the edit rejected", WAIT, || {
        status()["config"]["rejected"].is_string()
    });
    let rejected = status()["config"]["rejected"].as_str().unwrap().to_owned();
    assert!(
        rejected.contains("database.url") && rejected.contains("***"),
        "{rejected}"
    );
    assert!(!rejected.contains("hunter2"), "{rejected}");
    assert!(!service.log().contains("hunter2"), "{}", service.log());
    assert!(service.stop().success());
}

/// While PostgreSQL is down the engine goes on planning at the configured delays (the writer
/// retries beside it), `/healthz` says what is pending, and a stop during the outage tries for
/// `database.shutdownTimeout`, then lists what was not written and exits 3.
#[test]
fn a_database_outage_never_holds_the_engine_and_a_stop_reports_what_was_lost() {
    let pg = Postgres::start();
    let dir = TempDir::new("pg-outage");
    dir.write("fleet.yaml", FLEET);
    let url = pg.url();
    let path = dir.write(
        "config.yaml",
        &config(&url, "").replace(
            &format!("database: {{url: \"{url}\"}}"),
            &format!("database: {{url: \"{url}\", shutdownTimeout: 1}}"),
        ),
    );
    let db = Db::Postgres(url);
    let port = free_port();
    let path = dir.write(
        "config.yaml",
        &std::fs::read_to_string(&path)
            .unwrap()
            .replace("127.0.0.1:0", &format!("127.0.0.1:{port}")),
    );
    let api = format!("http://127.0.0.1:{port}");
    let mut service = Service::start(&path);
    eventually("the API answering", WAIT, || {
        crate::support::http()
            .get(&format!("{api}/healthz"))
            .call()
            .is_ok()
    });
    let runs = || {
        crate::support::get(&format!("{api}/v1/status"), None).1["last_run"]["number"]
            .as_u64()
            .unwrap_or(0)
    };
    committed(&db, 1);
    pg.stop();
    for (n, fleet) in [(2, fleet_with_offline(1002)), (3, FLEET.to_owned())] {
        let edited = Instant::now();
        dir.write("fleet.yaml", &fleet);
        eventually(&format!("rebalance #{n}"), WAIT, || runs() >= n);
        // The file settles for 1 s, then the delay (at most 0.4 s): never the pool's 5 s wait.
        assert!(
            edited.elapsed() < Duration::from_millis(3000),
            "run #{n} came {:?} after the edit",
            edited.elapsed()
        );
    }
    let health = || crate::support::get(&format!("{api}/healthz"), None).1;
    eventually("healthz reports the outage", WAIT, || {
        health()["status"] == "degraded"
    });
    let health = health();
    assert!(
        health["store"]["pending_runs"].as_u64().unwrap() >= 1,
        "{health}"
    );
    assert!(health["store"]["last_error"].is_string(), "{health}");
    // The API already serves the plan that is not written yet.
    let (_, assignments) =
        crate::support::get(&format!("{api}/v1/assignments?platform=onebot"), None);
    assert_eq!(assignments["onebot"].as_object().unwrap().len(), 12);

    let pid = service.pid().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let status = service.wait(WAIT);
    assert_eq!(status.code(), Some(3), "{}", service.log());
    let log = service.log();
    let report = log
        .lines()
        .find(|l| l.contains("not written"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        report.contains("history record(s)") && report.contains("onebot:1000"),
        "{report}"
    );
    assert!(report.contains("run at"), "{report}");
}

/// A restart with an unchanged fleet, config and database moves nothing, for both strategies:
/// the three-bot example and a 3,000-channel fleet.
#[test]
fn restarts_move_nothing_with_either_strategy() {
    let small = "bots:\n  - {id: 1, channels: [b]}\n  - {id: 2, channels: [a, b]}\n  - {id: 3, channels: [a]}\n".to_owned();
    // 20 bots, 3,000 channels, 1–4 members each (a fixed pseudo-random pattern).
    let mut large = String::from("bots:\n");
    for bot in 0..20u64 {
        let channels: Vec<String> = (0..3000u64)
            .filter(|c| {
                let h = (c * 2_654_435_761 + bot * 40_503) % 97;
                h < 5 + (c % 4) * 6 && (c + bot) % 3 != 0
            })
            .map(|c| (900_000 + c).to_string())
            .collect();
        large.push_str(&format!(
            "  - {{id: {}, channels: [{}]}}\n",
            2000 + bot,
            channels.join(", ")
        ));
    }
    for strategy in ["greedy", "optimal"] {
        for (name, fleet) in [("small", &small), ("large", &large)] {
            let dir = TempDir::new(&format!("restart-{strategy}-{name}"));
            dir.write("fleet.yaml", fleet);
            let path = dir.write(
                "config.yaml",
                &config("sqlite://state.db", &format!("strategy: {strategy}\n")),
            );
            let db = Db::Sqlite(dir.join("state.db"));
            for run in 1..=3 {
                let service = InProcess::start(&path);
                committed(&db, run);
                service.stop().unwrap();
            }
            let history = db.history();
            assert!(history[0].1 > 0, "{history:?}");
            for h in &history[1..] {
                assert_eq!(
                    (h.2, h.3),
                    (0, 0),
                    "{strategy} {name}: a restart moved channels: {history:?}"
                );
            }
        }
    }
}
