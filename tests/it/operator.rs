//! The operator's seat: pins, holds and drains at runtime, applied at once (without waiting
//! for the trigger delays), never leaving a group silent, stored with an audit record on
//! SQLite, PostgreSQL and MariaDB and in force again after a restart; a dry run that changes
//! nothing; bad requests refused with what was wrong and nothing changed; the command line.
//!
//! The trigger delays are long here (20 s): whatever a change does within the tests' wait is
//! done at once, not by a delayed rebalance.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{
    Db, FLEET, InProcess, MariaDb, Postgres, TempDir, delete, eventually, fleet_with_offline, get,
    get_text, post, put, put_raw,
};

const TOKEN: &str = "operator-token";
/// Well under the trigger delays below: what happens within it did not wait for them.
const AT_ONCE: Duration = Duration::from_secs(10);
const WAIT: Duration = Duration::from_secs(30);

fn config(database: &str, extra: &str) -> String {
    format!(
        "balanceInterval: 3600
triggerDelays: {{startup: 0, botStatus: 20, botOnline: 20, botOffline: 20, channelJoined: 20, channelLeft: 20}}
database: {{url: \"{database}\"}}
sources: {{file: fleet.yaml}}
api: {{bind: \"127.0.0.1:0\", token: {TOKEN}}}
{extra}"
    )
}

/// The service on `database` with FLEET (1001 in all twelve groups, 1002 in 100001–100008,
/// 1003 in 100005–100012), its first plan committed.
fn start(dir: &TempDir, database: &str, extra: &str) -> InProcess {
    dir.write("fleet.yaml", FLEET);
    let path = dir.write("config.yaml", &config(database, extra));
    let service = InProcess::start(&path).with_token(TOKEN);
    service.wait_runs(1, WAIT);
    service
}

fn api(service: &InProcess, path: &str) -> String {
    format!("{}{path}", service.api)
}

fn assignments(service: &InProcess) -> BTreeMap<String, String> {
    let (status, body) = get(
        &api(service, "/v1/assignments?platform=onebot"),
        Some(TOKEN),
    );
    assert_eq!(status, 200, "{body}");
    body["onebot"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(c, b)| (c.clone(), b.as_str().unwrap_or("").to_owned()))
        .collect()
}

fn pin(service: &InProcess, channel: &str, body: Value) -> (u16, Value) {
    put(
        &api(service, &format!("/v1/pins/onebot/{channel}")),
        Some(TOKEN),
        &body,
    )
}

fn drain(service: &InProcess, bot: &str, body: Value) -> (u16, Value) {
    put(
        &api(service, &format!("/v1/drains/onebot/{bot}")),
        Some(TOKEN),
        &body,
    )
}

fn pins(service: &InProcess) -> Vec<Value> {
    get(&api(service, "/v1/pins"), Some(TOKEN)).1["pins"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn explain(service: &InProcess, channel: &str) -> Value {
    get(
        &api(service, &format!("/v1/explain/onebot/{channel}")),
        Some(TOKEN),
    )
    .1
}

fn load(rows: &BTreeMap<String, String>, bot: &str) -> usize {
    rows.values().filter(|b| *b == bot).count()
}

#[test]
fn pins_holds_and_drains_apply_at_once_and_never_silence_a_group() {
    let dir = TempDir::new("operator-seat");
    let db = Db::Sqlite(dir.join("aa.db"));
    let url = format!("sqlite://{}", dir.join("aa.db").display());
    // A priority list for 100005: the operator's pin outranks it.
    let service = start(&dir, &url, "channelBotPriority: {\"100005\": [\"1002\"]}");
    assert_eq!(assignments(&service)["100005"], "1002");

    // A pin: in the view, the database and the explanation at once.
    let started = Instant::now();
    let (status, shown) = pin(
        &service,
        "100005",
        json!({"bot": "1003", "note": "VIP", "until": "2h"}),
    );
    assert_eq!(status, 200, "{shown}");
    assert_eq!(
        (shown["bot"].as_str(), shown["note"].as_str()),
        (Some("1003"), Some("VIP"))
    );
    assert_eq!(shown["by"], "api.token (admin)");
    eventually("the pin committed", AT_ONCE, || {
        db.channels("onebot").get("100005").map(String::as_str) == Some("1003")
    });
    println!("pin committed {:?} after the request", started.elapsed());
    assert_eq!(assignments(&service)["100005"], "1003");
    let e = explain(&service, "100005");
    assert_eq!(e["reason"], "operator_pin", "{e}");
    let text = e["text"].as_str().unwrap();
    assert!(
        text.contains("pinned to 1003 by an operator") && text.contains("VIP"),
        "{text}"
    );
    let listed = pins(&service);
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0]["state"].as_str(), listed[0]["assignee"].as_str()),
        (Some("in-force"), Some("1003"))
    );

    // The pinned bot goes offline: the group is served by another bot at once, the pin waits;
    // back online, the group returns to it at once.
    dir.write("fleet.yaml", &fleet_with_offline(1003));
    eventually("100005 served while 1003 is away", AT_ONCE, || {
        let rows = db.channels("onebot");
        matches!(
            rows.get("100005").map(String::as_str),
            Some("1001" | "1002")
        )
    });
    assert_eq!(pins(&service)[0]["state"], "waiting");
    let text = explain(&service, "100005")["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains("but 1003 is offline: served as usual meanwhile"),
        "{text}"
    );
    dir.write("fleet.yaml", FLEET);
    eventually("100005 back on 1003", AT_ONCE, || {
        db.channels("onebot").get("100005").map(String::as_str) == Some("1003")
    });

    // A hold: no assignee, on purpose.
    let (status, shown) = pin(&service, "100002", json!({"bot": null}));
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["bot"], Value::Null);
    eventually("100002 held with no assignee", AT_ONCE, || {
        db.channels("onebot").get("100002").map(String::as_str) == Some("")
    });
    assert_eq!(explain(&service, "100002")["reason"], "held");
    // Nobody handles a message there, claim or not; an @-mention still reaches its bot.
    let ingress = |bot: &str, at: &[&str]| {
        let message = json!({"platform": "onebot", "self_id": bot, "group_id": "100002",
            "user_id": "42", "text": "hello", "time": 1786000000, "at": at, "lane": "chat"});
        post(&api(&service, "/v1/ingress"), Some(TOKEN), &message).1
    };
    for bot in ["1001", "1002"] {
        let decision = ingress(bot, &[]);
        assert_eq!(decision["handle"], false, "{decision}");
        assert_eq!(decision["kind"], "held", "{decision}");
    }
    assert_eq!(ingress("1002", &["1002"])["handle"], true);

    // A drain: 1001 keeps only what nobody else can take (here nothing), at once; every other
    // group still has a bot.
    let (status, shown) = drain(&service, "1001", json!({"note": "risk control"}));
    assert_eq!(status, 200, "{shown}");
    eventually("1001 drained", AT_ONCE, || {
        load(&db.channels("onebot"), "1001") == 0
    });
    let rows = db.channels("onebot");
    assert!(
        rows.iter().all(|(c, b)| c == "100002" || !b.is_empty()),
        "a silent group: {rows:?}"
    );
    let drains = get(&api(&service, "/v1/drains"), Some(TOKEN)).1;
    assert_eq!(drains["drains"][0]["kept"], 0, "{drains}");
    // Now 1002 goes away: its groups 100001–100004 have only the drained 1001 left, which
    // keeps them (never a silent group).
    dir.write("fleet.yaml", &fleet_with_offline(1002));
    eventually(
        "the drained bot takes what nobody else can",
        AT_ONCE,
        || {
            let rows = db.channels("onebot");
            ["100001", "100003", "100004"]
                .iter()
                .all(|c| rows.get(*c).map(String::as_str) == Some("1001"))
        },
    );
    let text = explain(&service, "100001")["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains("1001 is drained and keeps this group"),
        "{text}"
    );
    dir.write("fleet.yaml", FLEET);
    eventually("1001 emptied again", AT_ONCE, || {
        load(&db.channels("onebot"), "1001") == 0
    });

    // Metrics count them.
    let (_, metrics) = get_text(&api(&service, "/metrics"), Some(TOKEN));
    for line in [
        "auto_assign_operator_overrides{kind=\"pin\"} 1",
        "auto_assign_operator_overrides{kind=\"hold\"} 1",
        "auto_assign_operator_overrides{kind=\"drain\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }

    // Undrained, the next rebalance uses 1001 again; unpinned and released likewise.
    let (status, _) = delete(&api(&service, "/v1/drains/onebot/1001"), Some(TOKEN));
    assert_eq!(status, 200);
    let (status, _) = delete(&api(&service, "/v1/pins/onebot/100002"), Some(TOKEN));
    assert_eq!(status, 200);
    eventually("1001 used again, 100002 answered", AT_ONCE, || {
        let rows = db.channels("onebot");
        load(&rows, "1001") > 0 && rows.get("100002").is_some_and(|b| !b.is_empty())
    });

    // A pin that ends by itself: it is gone and the plan serves the group.
    let (status, _) = pin(&service, "100012", json!({"bot": "1003", "until": "1s"}));
    assert_eq!(status, 200);
    eventually("the pin of 100012 expired", WAIT, || {
        pins(&service).iter().all(|p| p["channel"] != "100012")
    });

    // Every change is in the audit log, with the credential and the note.
    let audit = get(&api(&service, "/v1/audit"), Some(TOKEN)).1;
    let actions: Vec<&str> = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "pin",
            "hold",
            "drain",
            "undrain",
            "unpin",
            "pin",
            "pin-expired"
        ],
        "{audit}"
    );
    let first = &audit["audit"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (first["target"].as_str(), first["bot"].as_str()),
        (Some("100005"), Some("1003"))
    );
    assert_eq!(
        (first["by"].as_str(), first["note"].as_str()),
        (Some("api.token (admin)"), Some("VIP"))
    );

    // The history names the operator as the cause of the runs the changes made.
    assert!(db.history().iter().any(|h| h.0.contains("operator")));
    service.stop().unwrap();
}

#[test]
fn bad_requests_are_refused_with_what_was_wrong_and_change_nothing() {
    let dir = TempDir::new("operator-refusals");
    let url = format!("sqlite://{}", dir.join("aa.db").display());
    let service = start(&dir, &url, "");
    let before = assignments(&service);
    let pins_url = |path: &str| api(&service, &format!("/v1/pins/{path}"));
    let refused = |(status, body): (u16, Value), want: u16, words: &[&str]| {
        assert_eq!(status, want, "{body}");
        if let Some(code) = words.first().and_then(|w| w.strip_prefix("code:")) {
            assert_eq!(body["code"], code, "{body}");
        }
        let words = &words[usize::from(words.first().is_some_and(|w| w.starts_with("code:")))..];
        let error = body["error"].as_str().unwrap_or_default().to_owned();
        for w in words {
            assert!(error.contains(w), "{error:?} should name {w:?}");
        }
    };
    // Not a member: 409 naming the members.
    refused(
        pin(&service, "100001", json!({"bot": "1003"})),
        409,
        &[
            "code:not_a_member",
            "1003 is not in onebot:100001",
            "1001, 1002",
        ],
    );
    assert_eq!(
        pin(&service, "100001", json!({"bot": "1003"})).1["members"],
        json!(["1001", "1002"])
    );
    // Unknown group, bot, platform: 404 naming them.
    refused(
        pin(&service, "999", json!({"bot": "1001"})),
        404,
        &["code:unknown_channel", "onebot:999"],
    );
    refused(
        pin(&service, "100001", json!({"bot": "7777"})),
        404,
        &["code:unknown_bot", "7777"],
    );
    refused(
        put(
            &pins_url("discord/100001"),
            Some(TOKEN),
            &json!({"bot": "1001"}),
        ),
        404,
        &["discord", "onebot"],
    );
    refused(drain(&service, "7777", json!({})), 404, &["onebot:7777"]);
    // Malformed body or time: 400 naming the field.
    refused(pin(&service, "100001", json!({"note": "x"})), 400, &["bot"]);
    refused(pin(&service, "100001", json!({"bot": 1001})), 400, &["bot"]);
    refused(
        pin(
            &service,
            "100001",
            json!({"bot": "1001", "until": "tomorrow"}),
        ),
        400,
        &["code:invalid_until", "until", "tomorrow"],
    );
    refused(
        pin(
            &service,
            "100001",
            json!({"bot": "1001", "until": "2001-01-01T00:00:00Z"}),
        ),
        400,
        &["until", "already past"],
    );
    refused(
        put_raw(&pins_url("onebot/100001"), Some(TOKEN), "{\"bot\": "),
        400,
        &["invalid JSON"],
    );
    refused(
        pin(&service, "100001", json!({"bot": "1001", "colour": "red"})),
        400,
        &["colour"],
    );
    // Nothing to end: 404.
    refused(
        delete(&pins_url("onebot/100001"), Some(TOKEN)),
        404,
        &["onebot:100001 has no pin"],
    );
    // No token: 401 before anything else, an unknown route included.
    for path in ["/v1/pins", "/v1/pins/onebot/100001", "/v1/no-such-route"] {
        let (status, body) = get(&api(&service, path), None);
        assert_eq!(status, 401, "{path}: {body}");
    }
    let (status, _) = put(&pins_url("onebot/100001"), None, &json!({"bot": "1001"}));
    assert_eq!(status, 401);
    let (status, _) = get(&api(&service, "/v1/no-such-route"), Some(TOKEN));
    assert_eq!(status, 404);
    // Nothing changed.
    assert!(pins(&service).is_empty());
    let audit = get(&api(&service, "/v1/audit"), Some(TOKEN)).1;
    assert_eq!(audit["audit"], json!([]));
    assert_eq!(assignments(&service), before);
    service.stop().unwrap();
}

#[test]
fn a_dry_run_shows_the_moves_and_the_loads_and_changes_nothing() {
    let dir = TempDir::new("operator-dry-run");
    let db = Db::Sqlite(dir.join("aa.db"));
    let url = format!("sqlite://{}", dir.join("aa.db").display());
    let service = start(&dir, &url, "");
    // 1003 goes offline: its groups get a bot at once, and the rebalance that would balance
    // them waits 20 s; the dry run shows it now.
    dir.write("fleet.yaml", &fleet_with_offline(1003));
    // Every row written (the first plan's commit may still be on its way: no row is no 1003
    // either), none of them 1003's.
    eventually("1003's groups given a bot at once", AT_ONCE, || {
        let rows = db.channels("onebot");
        rows.len() == 12 && rows.values().all(|b| b != "1003")
    });
    let rows = db.channels("onebot");
    let history = db.history().len();
    let (status, run) = post(
        &api(&service, "/v1/rebalance?dryRun=true"),
        Some(TOKEN),
        &json!({}),
    );
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["dryRun"], true);
    let p = &run["platforms"][0];
    assert_eq!(p["platform"], "onebot");
    let loads: BTreeMap<&str, (u64, u64)> = p["loads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["bot"].as_str().unwrap(),
                (l["before"].as_u64().unwrap(), l["after"].as_u64().unwrap()),
            )
        })
        .collect();
    let before: BTreeMap<&str, u64> = ["1001", "1002"]
        .iter()
        .map(|b| (*b, load(&rows, b) as u64))
        .collect();
    assert_eq!(loads["1001"].0, before["1001"]);
    assert_eq!(loads["1002"].0, before["1002"]);
    // Twelve groups on two bots, balanced: 6 and 6 after.
    assert_eq!((loads["1001"].1, loads["1002"].1), (6, 6), "{p}");
    let moves = p["moves"].as_array().unwrap();
    assert_eq!(
        moves.len() as u64,
        before["1001"].abs_diff(6),
        "the fewest moves: {p}"
    );
    assert!(
        moves
            .iter()
            .all(|m| m["kind"] == "voluntary" && m["rule"] == "balance"),
        "{p}"
    );
    assert!(p["after"]["sumSq"].as_u64() <= p["before"]["sumSq"].as_u64());
    assert_eq!(p["after"]["sumSq"], 72);
    // Nothing changed: the rows, the history, the view.
    assert_eq!(db.channels("onebot"), rows);
    assert_eq!(db.history().len(), history);
    service.stop().unwrap();
}

/// The asks of one message that straddle a move of its group (here a pin, which moves it at a
/// moment the test knows) get one answer between them: the first ask fixes the bot, while
/// that bot stays online. Without that, 1002 asking before the move and 1003 after would both
/// be told to handle (or, the other way round, neither).
#[test]
fn the_asks_of_one_message_across_a_move_are_granted_once() {
    let dir = TempDir::new("operator-across-a-move");
    let url = format!("sqlite://{}", dir.join("aa.db").display());
    let service = start(&dir, &url, "channelBotPriority: {\"100005\": [\"1002\"]}");
    let ask = |bot: &str, text: &str| {
        let message = json!({"platform": "onebot", "self_id": bot, "group_id": "100005",
            "user_id": "42", "text": text, "time": 1786000000, "lane": "chat"});
        let (status, decision) = post(&api(&service, "/v1/ingress"), Some(TOKEN), &message);
        assert_eq!(status, 200, "{decision}");
        let kind = decision["kind"].as_str().unwrap().to_owned();
        (decision["handle"].as_bool().unwrap(), kind)
    };
    let move_to = |bot: &str| {
        let (status, shown) = pin(&service, "100005", json!({ "bot": bot }));
        assert_eq!(status, 200, "{shown}");
        eventually(&format!("100005 on {bot}"), AT_ONCE, || {
            assignments(&service)["100005"] == bot
        });
    };
    assert_eq!(assignments(&service)["100005"], "1002");

    // Granted before the move: the new assignee is refused after it.
    assert_eq!(ask("1002", "first"), (true, "assignee".into()));
    move_to("1003");
    assert_eq!(ask("1003", "first"), (false, "given_elsewhere".into()));
    assert_eq!(ask("1001", "first"), (false, "given_elsewhere".into()));
    assert_eq!(ask("1003", "second"), (true, "assignee".into()));

    // Refused before the move (to its assignee then): that bot is granted after it.
    assert_eq!(ask("1002", "third"), (false, "assigned_elsewhere".into()));
    move_to("1002");
    assert_eq!(ask("1003", "third"), (true, "given_here".into()));
    assert_eq!(ask("1002", "third"), (false, "given_elsewhere".into()));

    // The bot a message went to went offline: the message goes to the bot of the moment.
    assert_eq!(ask("1001", "fourth"), (false, "assigned_elsewhere".into()));
    dir.write("fleet.yaml", &fleet_with_offline(1002));
    eventually("100005 off 1002 at once", AT_ONCE, || {
        assignments(&service)["100005"] != "1002"
    });
    let now = assignments(&service)["100005"].clone();
    assert_eq!(ask(&now, "fourth"), (true, "assignee".into()));
    let metrics = get_text(&api(&service, "/metrics"), Some(TOKEN)).1;
    for kind in ["given_here", "given_elsewhere"] {
        assert!(
            metrics.contains(&format!("reason=\"{kind}\"")),
            "{kind} not in the metrics"
        );
    }
    service.stop().unwrap();
}

/// Pins, holds and drains are stored in the database (with the audit), loaded again at
/// start: on SQLite, PostgreSQL and MariaDB.
fn survive_a_restart(db: Db, url: &str, dir: &TempDir) {
    let service = start(dir, url, "");
    assert_eq!(
        pin(&service, "100006", json!({"bot": "1003", "note": "主号"})).0,
        200
    );
    assert_eq!(pin(&service, "100001", json!({"bot": null})).0, 200);
    assert_eq!(drain(&service, "1002", json!({"until": "1d"})).0, 200);
    eventually("applied", AT_ONCE, || {
        let rows = db.channels("onebot");
        // Before the first commit the rows are not there yet: not an error, not yet.
        rows.get("100006").is_some_and(|bot| bot == "1003")
            && rows.get("100001").is_some_and(String::is_empty)
            && load(&rows, "1002") == 0
    });
    service.stop().unwrap();

    let service = InProcess::start(&dir.join("config.yaml")).with_token(TOKEN);
    service.wait_runs(1, WAIT);
    let listed = pins(&service);
    let shown: Vec<(&str, Option<&str>, Option<&str>)> = listed
        .iter()
        .map(|p| {
            (
                p["channel"].as_str().unwrap(),
                p["bot"].as_str(),
                p["note"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("100001", None, None),
            ("100006", Some("1003"), Some("主号"))
        ]
    );
    let drains = get(&api(&service, "/v1/drains"), Some(TOKEN)).1;
    assert_eq!(drains["drains"][0]["bot"], "1002", "{drains}");
    assert!(drains["drains"][0]["until"].is_string());
    // Still in force after the first plan of the new process.
    let rows = db.channels("onebot");
    assert_eq!(rows["100006"], "1003");
    assert!(rows["100001"].is_empty());
    assert_eq!(load(&rows, "1002"), 0, "{rows:?}");
    let audit = get(&api(&service, "/v1/audit"), Some(TOKEN)).1;
    assert_eq!(audit["audit"].as_array().unwrap().len(), 3, "{audit}");
    service.stop().unwrap();
}

#[test]
fn pins_and_drains_survive_a_restart_on_sqlite() {
    let dir = TempDir::new("operator-sqlite");
    let url = format!("sqlite://{}", dir.join("aa.db").display());
    survive_a_restart(Db::Sqlite(dir.join("aa.db")), &url, &dir);
}

#[test]
fn pins_and_drains_survive_a_restart_on_postgres() {
    let pg = Postgres::start();
    let dir = TempDir::new("operator-postgres");
    survive_a_restart(Db::Postgres(pg.url()), &pg.url(), &dir);
}

#[test]
fn pins_and_drains_survive_a_restart_on_mariadb() {
    let server = MariaDb::start();
    let url = server.create_database("aa");
    let dir = TempDir::new("operator-mariadb");
    survive_a_restart(Db::Mysql(url.clone()), &url, &dir);
}

/// A change is answered once it is stored: while the database is down it is in force at once
/// but answered with 202 and a warning, and written when the database is back.
#[test]
fn a_change_the_database_cannot_store_yet_is_answered_as_such_and_written_later() {
    let pg = Postgres::start();
    let dir = TempDir::new("operator-outage");
    let service = start(&dir, &pg.url(), "");
    let (status, shown) = pin(&service, "100006", json!({"bot": "1003"}));
    assert_eq!((status, &shown["stored"]), (200, &json!(true)), "{shown}");

    pg.stop();
    let (status, shown) = pin(&service, "100007", json!({"bot": "1003", "note": "VIP"}));
    assert_eq!((status, &shown["stored"]), (202, &json!(false)), "{shown}");
    assert!(
        shown["warning"]
            .as_str()
            .is_some_and(|w| w.contains("has not stored it")),
        "{shown}"
    );
    assert_eq!(shown["channel"], "100007", "{shown}");
    let listed: Vec<Value> = pins(&service);
    assert!(
        listed.iter().any(|p| p["channel"] == "100007"),
        "in force while unstored: {listed:?}"
    );
    pg.restart();
    // `/v1/audit` reads the stored log.
    eventually("the pin written once the database is back", WAIT, || {
        let (status, audit) = get(&api(&service, "/v1/audit"), Some(TOKEN));
        status == 200
            && audit["audit"]
                .as_array()
                .is_some_and(|rows| rows.iter().filter(|r| r["action"] == "pin").count() == 2)
    });
    service.stop().unwrap();
}

/// The command line: pin, hold, drain, their tables, a dry run, and the refusals' messages.
#[test]
fn the_command_line_pins_drains_and_previews() {
    let dir = TempDir::new("operator-cli");
    let url = format!("sqlite://{}", dir.join("aa.db").display());
    let service = start(&dir, &url, "");
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_auto-assign"))
            .args(args)
            .args(["--api", &service.api])
            .env("AUTO_ASSIGN_TOKEN", TOKEN)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = cli(&[
        "pin",
        "onebot:100005",
        "1003",
        "--until",
        "2h",
        "--note",
        "VIP",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("pinned onebot:100005 → 1003 until "),
        "{out}"
    );
    assert!(out.contains("by api.token (admin) (VIP)"), "{out}");
    let (ok, out, err) = cli(&["pin", "100002", "--hold"]);
    assert!(
        ok && out.contains("held onebot:100002 → no assignee"),
        "{out}{err}"
    );
    let (ok, out, _) = cli(&["drain", "1001", "--note", "风控"]);
    assert!(
        ok && out.contains("drained onebot:1001") && out.contains("风控"),
        "{out}"
    );
    let (ok, out, _) = cli(&["pins"]);
    assert!(ok, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("GROUP") && lines.len() == 3, "{out}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("onebot:100005") && l.contains("VIP")),
        "{out}"
    );
    let (ok, out, _) = cli(&["drains"]);
    assert!(ok && out.contains("onebot:1001"), "{out}");
    let (ok, out, _) = cli(&["rebalance", "--dry-run"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("platform onebot (balance by channels)"),
        "{out}"
    );
    assert!(
        out.contains("Σ load²") && out.ends_with("dry run: nothing was changed\n"),
        "{out}"
    );
    let (ok, out, _) = cli(&["status"]);
    assert!(
        ok && out.contains("onebot:100005") && out.contains("onebot:1001"),
        "{out}"
    );
    // A refusal: exit 1 and the service's reason.
    let (ok, _, err) = cli(&["pin", "100001", "1003"]);
    assert!(!ok);
    assert!(
        err.contains("HTTP 409") && err.contains("its members: 1001, 1002"),
        "{err}"
    );
    let (ok, out, err) = cli(&["unpin", "100005"]);
    assert!(
        ok && out.starts_with("unpinned onebot:100005"),
        "{out}{err}"
    );
    let (ok, out, _) = cli(&["undrain", "onebot:1001"]);
    assert!(ok && out.starts_with("undrained onebot:1001"), "{out}");
    service.stop().unwrap();
}
