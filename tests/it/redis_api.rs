//! Redis publication, claims, gates and presence, and the HTTP API: the service started in
//! process against a real redis-server started by the tests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{
    Db, FLEET, InProcess, RedisServer, TempDir, eventually, fleet_with_offline, get, post, post_raw,
};
use auto_assign::pallas::signature::{Body, Signature, Time};
use auto_assign::publication::Keys;
use auto_assign::publication::follower::Follower;
use auto_assign::redis_conn::Redis;
use futures_util::StreamExt;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

fn config(extra: &str) -> String {
    format!(
        "balanceInterval: 600
triggerDelays: {{startup: 0, botStatus: 0.2, botOnline: 0.2, botOffline: 0.2, channelJoined: 0.2, channelLeft: 0.2}}
database: {{url: \"sqlite://state.db\"}}
sources: {{file: fleet.yaml}}
api: {{bind: \"127.0.0.1:0\"}}
{extra}"
    )
}

fn start(dir: &TempDir, extra: &str) -> (InProcess, Db) {
    dir.write("fleet.yaml", FLEET);
    let path = dir.write("config.yaml", &config(extra));
    let service = InProcess::start(&path);
    let db = Db::Sqlite(dir.join("state.db"));
    eventually("first rebalance", WAIT, || !db.history().is_empty());
    (service, db)
}

/// The follower and a raw subscriber's versions, on their own runtime.
struct Watch {
    rt: tokio::runtime::Runtime,
    follower: Follower,
    versions: Arc<Mutex<Vec<i64>>>,
}

impl Watch {
    fn start(url: &str, prefix: &str) -> Watch {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let client = redis::Client::open(url).unwrap();
        let keys = Keys {
            prefix: prefix.to_owned(),
        };
        let follower = rt.block_on(async {
            let shutdown = tokio_util::sync::CancellationToken::new();
            let redis = Redis::connect_url(url, shutdown.clone()).unwrap();
            Follower::start(redis, keys.clone(), None, shutdown)
        });
        let versions = Arc::new(Mutex::new(Vec::new()));
        let sink = versions.clone();
        rt.spawn(async move {
            loop {
                let Ok(mut pubsub) = client.get_async_pubsub().await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                if pubsub.subscribe(keys.channel()).await.is_err() {
                    continue;
                }
                let mut stream = pubsub.on_message();
                while let Some(msg) = stream.next().await {
                    let payload: String = msg.get_payload().unwrap();
                    let v: Value = serde_json::from_str(&payload).unwrap();
                    if v["fake"].is_null() {
                        sink.lock().unwrap().push(v["version"].as_i64().unwrap());
                    }
                }
            }
        });
        Watch {
            rt,
            follower,
            versions,
        }
    }

    fn assignment(&self, platform: &str) -> BTreeMap<String, String> {
        self.follower
            .snapshot()
            .1
            .get(platform)
            .cloned()
            .unwrap_or_default()
    }
}

fn hash(redis: &RedisServer, key: &str) -> BTreeMap<String, String> {
    let out = redis.cli(&["--no-raw", "HGETALL", key]);
    let items: Vec<String> = out
        .lines()
        .filter_map(|l| {
            l.split_once(") ")
                .map(|(_, v)| v.trim_matches('"').to_owned())
        })
        .collect();
    items
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| (c[0].clone(), c[1].clone()))
        .collect()
}

fn api_assignment(api: &str) -> BTreeMap<String, String> {
    let (status, body) = get(&format!("{api}/v1/assignments?platform=onebot"), None);
    assert_eq!(status, 200);
    serde_json::from_value(body["onebot"].clone()).unwrap()
}

fn strictly_increasing(v: &[i64]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}

#[test]
fn publication_is_versioned_and_followers_resync_after_gaps() {
    let redis = RedisServer::start();
    let dir = TempDir::new("publish");
    let watch = Watch::start(&redis.url(), "aa-test");
    let (service, db) = start(
        &dir,
        &format!("redis: {{url: \"{}\", prefix: aa-test}}\n", redis.url()),
    );
    let api = service.api.clone();

    // The first plan is published and followed exactly.
    eventually("hash published", WAIT, || {
        hash(&redis, "aa-test:assignment:onebot").len() == 12
    });
    let published = hash(&redis, "aa-test:assignment:onebot");
    assert_eq!(published, api_assignment(&api));
    eventually("follower caught up", WAIT, || {
        watch.assignment("onebot") == published
    });

    // Changes arrive as the next versions.
    dir.write("fleet.yaml", &fleet_with_offline(1002));
    eventually("second rebalance", WAIT, || db.history().len() == 2);
    eventually("change published", WAIT, || {
        hash(&redis, "aa-test:assignment:onebot")
            .values()
            .all(|b| b != "1002")
    });
    let after = hash(&redis, "aa-test:assignment:onebot");
    assert_eq!(after, api_assignment(&api));
    eventually("follower applied the change", WAIT, || {
        watch.assignment("onebot") == after
    });

    // A gap (here: a stray higher version) makes the follower re-read the hashes.
    let resyncs = watch.follower.resyncs();
    redis.cli(&[
        "PUBLISH",
        "aa-test:changes",
        r#"{"version":999999,"changes":{},"fake":true}"#,
    ]);
    eventually("gap detected", WAIT, || watch.follower.resyncs() > resyncs);
    let version: i64 = redis.cli(&["GET", "aa-test:version"]).parse().unwrap();
    assert_eq!(watch.follower.snapshot().0, version);
    assert_eq!(watch.assignment("onebot"), after);

    // Missed messages: the subscription is cut, changes happen meanwhile; after resubscribing
    // the follower holds exactly the hash.
    let resyncs = watch.follower.resyncs();
    redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    dir.write("fleet.yaml", FLEET);
    eventually("third rebalance", WAIT, || db.history().len() == 3);
    eventually("republished state", WAIT, || {
        hash(&redis, "aa-test:assignment:onebot") == api_assignment(&api)
    });
    eventually("follower resynced", WAIT, || {
        watch.follower.resyncs() > resyncs
            && watch.assignment("onebot") == hash(&redis, "aa-test:assignment:onebot")
    });
    let versions = watch.versions.lock().unwrap().clone();
    assert!(
        versions.len() >= 2 && strictly_increasing(&versions),
        "{versions:?}"
    );
    drop(watch.rt);
    service.stop().unwrap();
}

/// One plan over two platforms: the rows the writer commits, the view the API answers from
/// and the Redis publication are each taken their own way from the plan, and agree on every
/// channel of both.
#[test]
fn a_plan_over_two_platforms_is_committed_viewed_and_published_alike() {
    let redis = RedisServer::start();
    let dir = TempDir::new("two-platforms");
    dir.write(
        "fleet.yaml",
        &format!(
            "{FLEET}  - id: d1
    platform: discord
    channels: [g1, g2, g3, g4]
  - id: d2
    platform: discord
    channels: [g3, g4, g5]
"
        ),
    );
    let path = dir.write(
        "config.yaml",
        &config(&format!(
            "enabledPlatforms: []\nredis: {{url: \"{}\", prefix: two}}\n",
            redis.url()
        )),
    );
    let service = InProcess::start(&path);
    let db = Db::Sqlite(dir.join("state.db"));
    eventually("first rebalance", WAIT, || !db.history().is_empty());
    let (status, body) = get(&format!("{}/v1/assignments", service.api), None);
    assert_eq!(status, 200);
    for (platform, channels) in [("onebot", 12), ("discord", 5)] {
        let viewed: BTreeMap<String, String> =
            serde_json::from_value(body[platform].clone()).unwrap();
        assert_eq!(viewed.len(), channels, "{platform}: {body}");
        assert_eq!(db.channels(platform), viewed, "{platform}: rows and view");
        eventually(&format!("{platform} published"), WAIT, || {
            hash(&redis, &format!("two:assignment:{platform}")) == viewed
        });
    }
    assert_eq!(db.history().len(), 1, "one plan");
    service.stop().unwrap();
}

#[test]
fn a_redis_restart_gets_the_full_state_republished() {
    let mut redis = RedisServer::start();
    let dir = TempDir::new("republish");
    let (service, db) = start(
        &dir,
        &format!("redis: {{url: \"{}\", prefix: aa-rs}}\n", redis.url()),
    );
    let api = service.api.clone();
    eventually("published", WAIT, || {
        hash(&redis, "aa-rs:assignment:onebot").len() == 12
    });
    let before: i64 = redis.cli(&["GET", "aa-rs:version"]).parse().unwrap();

    // Redis dies; the fleet changes meanwhile; planning goes on.
    redis.stop();
    dir.write("fleet.yaml", &fleet_with_offline(1003));
    eventually("rebalanced without redis", WAIT, || db.history().len() == 2);
    eventually("redis seen down", WAIT, || {
        get(&format!("{api}/healthz"), None).1["redis"] == "unavailable"
    });

    // It comes back empty: everything is republished, at a higher version.
    redis.restart();
    eventually("republished after the outage", WAIT, || {
        let h = hash(&redis, "aa-rs:assignment:onebot");
        !h.is_empty() && h == api_assignment(&api)
    });
    assert!(
        hash(&redis, "aa-rs:assignment:onebot")
            .values()
            .all(|b| b != "1003")
    );
    let after: i64 = redis.cli(&["GET", "aa-rs:version"]).parse().unwrap();
    assert!(after > before, "{after} > {before}");
    assert_eq!(get(&format!("{api}/healthz"), None).1["redis"], "connected");
    service.stop().unwrap();
}

/// A claim made while the service is still making its first connection to Redis waits for
/// it: decided from a file, which the other instances and Pallas-Bot peers claiming in Redis
/// never see, the message would be answered twice. Redis is held in `CLIENT PAUSE` (shorter
/// than the 1 s connect timeout) and the service uses database 1, so the connection's `SELECT`
/// keeps it half made meanwhile.
#[test]
fn claims_in_the_first_moments_wait_for_the_first_connection() {
    let redis = RedisServer::start();
    let dir = TempDir::new("ingress-first-connection");
    dir.write("fleet.yaml", FLEET);
    let path = dir.write(
        "config.yaml",
        &config(&format!("redis: {{url: \"{}/1\"}}\n", redis.url())),
    );
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "600", "ALL"]), "OK");
    let service = InProcess::start(&path);
    let (status, claim) = ingress(
        &service.api,
        None,
        message(2001, Some(777001), 42, "first", "chat"),
    );
    assert_eq!(status, 200, "{claim}");
    assert_eq!(
        claim["reason"], "unassigned channel: won the claim (redis claim)",
        "{claim}"
    );
    let key = redis.cli(&["-n", "1", "KEYS", "pallas:msg_claim:*:777001:*"]);
    assert_eq!(redis.cli(&["-n", "1", "GET", &key]), "2001");
    service.stop().unwrap();
}

fn ingress(api: &str, token: Option<&str>, body: Value) -> (u16, Value) {
    post(&format!("{api}/v1/ingress"), token, &body)
}

fn message(self_id: u64, group: Option<u64>, user: u64, text: &str, lane: &str) -> Value {
    json!({"platform": "onebot", "self_id": self_id.to_string(), "group_id": group.map(|g| g.to_string()),
           "user_id": user, "text": text, "time": 1786000000, "lane": lane})
}

/// Two clients race on the same message from two threads, many times: exactly one wins each.
fn race(api: &str, group: u64) -> Vec<String> {
    let mut reasons = Vec::new();
    for i in 0..40 {
        let text = format!("race {i}");
        let handles: Vec<_> = [2001u64, 2002]
            .into_iter()
            .map(|bot| {
                let (api, text) = (api.to_owned(), text.clone());
                std::thread::spawn(move || {
                    ingress(&api, None, message(bot, Some(group), 42, &text, "chat"))
                })
            })
            .collect();
        let answers: Vec<(u16, Value)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(answers.iter().all(|(s, _)| *s == 200), "{answers:?}");
        let winners = answers.iter().filter(|(_, b)| b["handle"] == true).count();
        assert_eq!(winners, 1, "{answers:?}");
        reasons.extend(
            answers
                .iter()
                .map(|(_, b)| b["reason"].as_str().unwrap().to_owned()),
        );
    }
    reasons
}

#[test]
fn ingress_decisions_with_redis() {
    let redis = RedisServer::start();
    let dir = TempDir::new("ingress-redis");
    let (service, _db) = start(&dir, &format!("redis: {{url: \"{}\"}}\n", redis.url()));
    let api = service.api.clone();
    let assignment = api_assignment(&api);
    let owner: u64 = assignment["100005"].parse().unwrap();
    let other = [1001u64, 1002, 1003]
        .into_iter()
        .find(|b| *b != owner)
        .unwrap();

    // The assignee of an assigned group handles it, nobody else: no claim involved.
    let (_, yes) = ingress(
        &api,
        None,
        message(owner, Some(100005), 42, "hello", "chat"),
    );
    assert_eq!(
        (yes["handle"].clone(), yes["reason"].clone()),
        (json!(true), json!("assignee"))
    );
    assert_eq!(yes["assignee"], owner.to_string());
    let (_, no) = ingress(
        &api,
        None,
        message(other, Some(100005), 42, "hello", "command"),
    );
    assert_eq!(
        (no["handle"].clone(), no["reason"].clone()),
        (json!(false), json!("assigned to another bot"))
    );
    // Messages of the fleet's own bots are never handled; private messages always are.
    let (_, from_bot) = ingress(&api, None, message(owner, Some(100005), 1003, "hi", "chat"));
    assert_eq!(from_bot["handle"], false);
    let (_, private) = ingress(&api, None, message(other, None, 42, "hi", "chat"));
    assert_eq!(
        (private["handle"].clone(), private["reason"].clone()),
        (json!(true), json!("private message"))
    );
    // @-mentions win over the assignment; fanout lets everyone handle.
    let mut at = message(other, Some(100005), 42, "@you", "chat");
    at["at"] = json!([other.to_string()]);
    assert_eq!(ingress(&api, None, at.clone()).1["handle"], true);
    at["self_id"] = json!(owner.to_string());
    assert_eq!(ingress(&api, None, at).1["handle"], false);
    assert_eq!(
        ingress(&api, None, message(other, Some(100005), 42, "+1", "fanout")).1["handle"],
        true
    );

    // An unassigned group: first claimer wins, once per message, via Redis.
    let reasons = race(&api, 777001);
    assert!(
        reasons.iter().all(|r| r.starts_with("unassigned channel:")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .filter(|r| r.contains("won the claim"))
            .all(|r| r.ends_with("(redis claim)")),
        "{reasons:?}"
    );
    // Pallas-compatible key and owner.
    let (_, won) = ingress(
        &api,
        None,
        message(2003, Some(777002), 42, "  牛牛  画画 ", "chat"),
    );
    assert_eq!(won["handle"], true);
    let key = Signature::new(
        777002,
        42,
        "牛牛 画画",
        1786000000,
        Body::Plaintext,
        Time::Included,
    )
    .key();
    assert_eq!(
        redis.cli(&[
            "GET",
            &format!("pallas:msg_claim:ingress_gate:777002:{key}")
        ]),
        "2003"
    );
    let ttl: i64 = redis
        .cli(&[
            "TTL",
            &format!("pallas:msg_claim:ingress_gate:777002:{key}"),
        ])
        .parse()
        .unwrap();
    assert!(ttl > 86000 && ttl <= 86400);
    service.stop().unwrap();
}

#[test]
fn claims_fall_back_to_files_without_redis_and_while_redis_is_down() {
    // No Redis configured: file claims.
    let dir = TempDir::new("ingress-files");
    let (service, _db) = start(&dir, "");
    let api = service.api.clone();
    let reasons = race(&api, 777003);
    assert!(
        reasons
            .iter()
            .all(|r| r.contains("(file claim)") || r.contains("(in-process claim)")),
        "{reasons:?}"
    );
    let claims = std::fs::read_dir(dir.join("data/ingress_gate/message_claims"))
        .unwrap()
        .count();
    assert_eq!(claims, 40);
    service.stop().unwrap();

    // Redis configured but down: still answers (no 500), via the file claim, and says so.
    let mut redis = RedisServer::start();
    let dir = TempDir::new("ingress-redis-down");
    let (service, _db) = start(&dir, &format!("redis: {{url: \"{}\"}}\n", redis.url()));
    let api = service.api.clone();
    redis.stop();
    let (status, body) = ingress(
        &api,
        None,
        message(2001, Some(777004), 42, "anyone?", "chat"),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["handle"], true);
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .ends_with("(file claim (redis unavailable))"),
        "{body}"
    );
    assert_eq!(
        get(&format!("{api}/healthz"), None).1["redis"],
        "unavailable"
    );
    service.stop().unwrap();
}

#[test]
fn tokens_limits_and_clear_errors() {
    let dir = TempDir::new("api-errors");
    let (service, db) = start(&dir, "").clone_with_token_config(&dir);
    let api = service.api.clone();
    let url = format!("{api}/v1/ingress");
    let ok = message(2001, Some(777005), 42, "hi", "chat");
    assert_eq!(post(&url, None, &ok).0, 401);
    assert_eq!(post(&url, Some("wrong"), &ok).0, 401);
    assert_eq!(post(&url, Some("s3cret"), &ok).0, 200);
    assert_eq!(
        get(&format!("{api}/healthz"), None).0,
        200,
        "health needs no token"
    );
    assert_eq!(get(&format!("{api}/v1/bots"), None).0, 401);

    let (status, body) = post_raw(&url, Some("s3cret"), "{\"platform\": ");
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("EOF"), "{body}");
    let mut missing = ok.clone();
    missing.as_object_mut().unwrap().remove("lane");
    let (status, body) = post(&url, Some("s3cret"), &missing);
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("missing field `lane`"),
        "{body}"
    );
    let mut wrong = ok.clone();
    wrong["self_id"] = json!("not-a-number");
    let (status, body) = post(&url, Some("s3cret"), &wrong);
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("self_id"),
        "{body}"
    );
    let mut lane = ok.clone();
    lane["lane"] = json!("shout");
    assert!(
        post(&url, Some("s3cret"), &lane).1["error"]
            .as_str()
            .unwrap()
            .contains("unknown variant `shout`")
    );
    let mut plugin = ok.clone();
    plugin["plugin"] = json!("../../etc");
    let (status, body) = post(&url, Some("s3cret"), &plugin);
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().starts_with("plugin:"),
        "{body}"
    );
    let mut big = ok.clone();
    big["text"] = json!("x".repeat(100_000));
    assert_eq!(post(&url, Some("s3cret"), &big).0, 413);
    assert_eq!(get(&format!("{api}/v1/nothing"), Some("s3cret")).0, 404);
    // The admin rebalance.
    let (status, body) = post(&format!("{api}/v1/rebalance"), Some("s3cret"), &json!({}));
    assert_eq!((status, body["requested"].clone()), (202, json!(true)));
    eventually("the requested run", WAIT, || {
        db.history().iter().any(|h| h.0 == "requested")
    });
    service.stop().unwrap();
}

trait WithToken {
    fn clone_with_token_config(self, dir: &TempDir) -> (InProcess, Db);
}

impl WithToken for (InProcess, Db) {
    /// Restarts the service with `api.token: s3cret`.
    fn clone_with_token_config(self, dir: &TempDir) -> (InProcess, Db) {
        let (service, db) = self;
        service.stop().unwrap();
        let path = dir.write(
            "config.yaml",
            &config("").replace(
                "api: {bind: \"127.0.0.1:0\"}",
                "api: {bind: \"127.0.0.1:0\", token: s3cret}",
            ),
        );
        (InProcess::start(&path), db)
    }
}

#[test]
fn gates_activities_and_presence_in_redis() {
    let redis = RedisServer::start();
    // A stale record left by someone else: pruned at the next refresh.
    redis.cli(&["HSET", "pallas:presence:bots", "424242",
        r#"{"qq":424242,"shard_id":3,"connection_key":"424242","adapter":"OneBot V11","connected_at_unix":1000,"last_seen_at":1000.0,"nickname":""}"#]);
    let dir = TempDir::new("gates");
    let (service, _db) = start(&dir, &format!("redis: {{url: \"{}\"}}\n", redis.url()));
    let api = service.api.clone();

    let gate = |bot: u64| {
        post(
            &format!("{api}/v1/gate/owned"),
            None,
            &json!({"plugin": "draw", "group_id": 9, "bot_id": bot, "gate_sec": 30}),
        )
    };
    assert_eq!(gate(111).1, json!({"granted": true, "fallback": false}));
    assert_eq!(gate(111).1["granted"], true);
    assert_eq!(gate(222).1["granted"], false);
    let stored: Value =
        serde_json::from_str(&redis.cli(&["GET", "pallas:coord:group_gate:owned:draw:9"])).unwrap();
    assert_eq!(
        (
            stored["owner_bot_id"].clone(),
            stored["kind"].clone(),
            stored["plugin"].clone()
        ),
        (json!(111), json!("owned"), json!("draw"))
    );
    let ttl: i64 = redis
        .cli(&["TTL", "pallas:coord:group_gate:owned:draw:9"])
        .parse()
        .unwrap();
    assert!((30..=35).contains(&ttl), "{ttl}");

    let activity = |what: &str| {
        post(
            &format!("{api}/v1/activity/{what}"),
            None,
            &json!({"namespace": "duel", "group_id": 5}),
        )
    };
    assert_eq!(activity("begin").1["status"], "ok");
    assert_eq!(activity("begin").1["status"], "busy");
    let stored: Value = serde_json::from_str(&redis.cli(&["GET", "pallas:coord:duel:5"])).unwrap();
    assert_eq!(
        (stored["busy"].clone(), stored["group_id"].clone()),
        (json!(true), json!(5))
    );
    activity("end");
    assert_eq!(activity("begin").1["status"], "ok");

    // The fleet's online bots in the presence registry, Pallas's layout; the stale one gone.
    eventually("presence written", WAIT, || {
        let all = redis.cli(&["HKEYS", "pallas:presence:bots"]);
        all.contains("1001") && all.contains("1003") && !all.contains("424242")
    });
    let record: Value =
        serde_json::from_str(&redis.cli(&["HGET", "pallas:presence:bots", "1002"])).unwrap();
    let keys: Vec<&String> = record.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "qq",
            "shard_id",
            "connection_key",
            "adapter",
            "connected_at_unix",
            "last_seen_at",
            "nickname"
        ]
    );
    assert_eq!(record["qq"], 1002);
    let (_, presence) = get(&format!("{api}/v1/presence"), None);
    assert_eq!(presence["source"], "redis");
    assert!(presence["bots"]["1001"].is_object());
    // A bot going offline leaves the registry at once.
    dir.write("fleet.yaml", &fleet_with_offline(1002));
    eventually("offline bot removed", WAIT, || {
        !redis
            .cli(&["HKEYS", "pallas:presence:bots"])
            .contains("1002")
    });
    let b1002 = || {
        let (_, bots) = get(&format!("{api}/v1/bots"), None);
        bots.as_array()
            .unwrap()
            .iter()
            .find(|b| b["bot"] == "1002")
            .unwrap()
            .clone()
    };
    eventually("its channels moved", WAIT, || b1002()["load"] == 0);
    assert_eq!(b1002()["online"], false);
    service.stop().unwrap();
}

/// At the size of the benchmark fleet: a restart with 339,322 stored assignments publishes
/// the whole stored assignment (never an empty or half-loaded view), and the hash holds it
/// after the first plan; the publication's self-check finds nothing to repair. A hash changed
/// behind the service's back is found and published again.
#[test]
fn a_restart_publishes_the_whole_stored_assignment_at_the_benchmark_size() {
    const CHANNELS: usize = 339_322;
    const BOTS: usize = 40;
    let redis = RedisServer::start();
    let dir = TempDir::new("publish-large");
    // Each group in two bots' lists, every bot online.
    let mut fleet = String::from("bots:\n");
    for b in 0..BOTS {
        fleet.push_str(&format!("  - id: {}\n    channels: [", 1001 + b));
        let mine = (0..CHANNELS).filter(|c| c % BOTS == b || (c + 1) % BOTS == b);
        let ids: Vec<String> = mine.map(|c| (100_000_000 + c).to_string()).collect();
        fleet.push_str(&ids.join(", "));
        fleet.push_str("]\n");
    }
    dir.write("fleet.yaml", &fleet);
    let path = dir.write(
        "config.yaml",
        &config(&format!(
            "redis: {{url: \"{}\", prefix: aa-big}}\n",
            redis.url()
        )),
    );
    let db = Db::Sqlite(dir.join("state.db"));
    let hlen = || -> usize {
        redis
            .cli(&["HLEN", "aa-big:assignment:onebot"])
            .parse()
            .unwrap_or(0)
    };
    let service = InProcess::start(&path);
    eventually("the first plan committed and published", WAIT * 2, || {
        !db.history().is_empty() && hlen() == CHANNELS
    });
    service.stop().unwrap();
    let before: i64 = redis.cli(&["GET", "aa-big:version"]).parse().unwrap();

    // Restarted: what it publishes first is the stored assignment, whole.
    let service = InProcess::start(&path);
    let mut seen = Vec::new();
    eventually("published again after the restart", WAIT * 2, || {
        let version: i64 = redis.cli(&["GET", "aa-big:version"]).parse().unwrap_or(0);
        if version > before {
            seen.push(hlen());
        }
        version > before && db.history().len() >= 2
    });
    assert!(
        seen.iter().all(|&n| n == CHANNELS),
        "hash sizes seen: {seen:?}"
    );
    assert_eq!(hlen(), CHANNELS);
    let health = get(&format!("{}/healthz", service.api), None).1;
    assert_eq!(health["publication"]["repaired"], 0, "{health}");

    // A hash emptied behind its back: found at the next checks, and published again. A
    // publication of everything still under way from the start (Redis's connection reported
    // back, say) may fill it first, and count nothing: then it is emptied again.
    let repaired =
        || get(&format!("{}/healthz", service.api), None).1["publication"]["repaired"].as_u64();
    redis.cli(&["DEL", "aa-big:assignment:onebot"]);
    eventually("repaired", WAIT, || {
        let whole = hlen() == CHANNELS;
        match repaired() {
            Some(0) if whole => {
                redis.cli(&["DEL", "aa-big:assignment:onebot"]);
                false
            }
            Some(n) => n >= 1 && whole,
            None => false,
        }
    });
    service.stop().unwrap();
}
