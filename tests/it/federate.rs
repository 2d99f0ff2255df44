//! The federate layer end to end: two services started in process acting as two deployments
//! of one pool on a real redis-server, asked about the same messages over HTTP. Their clocks
//! start well inside a two-hour owner bucket, so no test ever waits for a boundary; the TTL
//! test shortens the heartbeat TTL in the config it starts with.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use std::sync::Arc;

use crate::support::redis::RedisCluster;
use crate::support::{InProcess, RedisServer, Service, TempDir, eventually, get, post};
use auto_assign::config::Config;
use auto_assign::pallas::federate::ingress_claim::{
    CANDIDATE_PLUGIN, IngressClaims, Outcome, PLUGIN,
};
use auto_assign::pallas::federate::ring::{ring_index, stable_ring_index};
use auto_assign::pallas::signature::{Body, Signature, Time};
use auto_assign::redis_conn::Redis;
use auto_assign::service::Clock;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);
const BOT_A: i64 = 1001;
const BOT_B: i64 = 2001;
/// Groups both deployments' bots are in.
const GROUPS: std::ops::RangeInclusive<i64> = 700_001..=700_024;
/// The first eight are excluded on B: with respectAssignment only A is assigned them.
const EXCLUDED_ON_B: std::ops::RangeInclusive<i64> = 700_001..=700_008;

/// Every deployment's clock starts here: 60 s into a two-hour owner bucket.
const T0: f64 = 1_800_000_060.0;

struct Deployment {
    service: InProcess,
    url: String,
    id: String,
    _dir: TempDir,
}

impl Deployment {
    /// The service on `dir/config.yaml` (adjusted by `adjust`), with the deployment id it
    /// persisted.
    fn start(dir: TempDir, adjust: impl FnOnce(&mut Config)) -> Deployment {
        let mut config = Config::load(&dir.join("config.yaml")).unwrap();
        adjust(&mut config);
        let service = InProcess::start_config(config, Clock::starting_at(T0));
        let url = service.api.clone();
        let id = std::fs::read_to_string(dir.join("data/federate/deployment_id"))
            .unwrap()
            .trim()
            .to_owned();
        Deployment {
            service,
            url,
            id,
            _dir: dir,
        }
    }
}

/// `extra` goes at the top level of the config, `federate_extra` into `federate:`.
fn deployment(name: &str, bot: i64, redis: &str, extra: &str, federate_extra: &str) -> Deployment {
    deployment_with(name, bot, redis, extra, federate_extra, |_| {})
}

/// [`deployment`], with the loaded config adjusted before the start.
fn deployment_with(
    name: &str,
    bot: i64,
    redis: &str,
    extra: &str,
    federate_extra: &str,
    adjust: impl FnOnce(&mut Config),
) -> Deployment {
    let dir = TempDir::new(name);
    let groups: Vec<String> = GROUPS.map(|g| g.to_string()).collect();
    let refresh = if federate_extra.contains("refreshInterval") {
        ""
    } else {
        "  refreshInterval: 0.2\n"
    };
    let caps = if federate_extra.contains("commandCapabilities") {
        ""
    } else {
        "  commandCapabilities: [\"牛牛帮助\"]\n"
    };
    dir.write(
        "fleet.yaml",
        &format!(
            "bots:\n  - id: {bot}\n    channels: [{}]\n",
            groups.join(", ")
        ),
    );
    let config = format!(
        "balanceInterval: 600
triggerDelays: {{startup: 0, botStatus: 0.2, botOnline: 0.2, botOffline: 0.2, channelJoined: 0.2, channelLeft: 0.2}}
database: {{url: \"sqlite://state.db\"}}
sources: {{file: fleet.yaml}}
api: {{bind: \"127.0.0.1:0\"}}
{extra}
federate:
  id: pool-1
  redisUrl: {redis}
  deploymentName: {name}
{refresh}  heartbeatTtl: 60
{caps}{federate_extra}
"
    );
    dir.write("config.yaml", &config);
    Deployment::start(dir, adjust)
}

/// A 3-second heartbeat TTL, so a deployment that dies without a goodbye is gone quickly
/// (below what the config accepts: the check is for real pools).
fn short_ttl(config: &mut Config) {
    if let Some(f) = &mut config.federate {
        f.heartbeat_ttl = auto_assign::config::AtLeast(3);
    }
}

fn peers(d: &Deployment) -> Value {
    let (status, body) = get(&format!("{}/v1/federate/peers", d.url), None);
    assert_eq!(status, 200, "{body}");
    body
}

fn peer<'a>(roster: &'a Value, id: &str) -> Option<&'a Value> {
    roster["peers"]
        .as_array()?
        .iter()
        .find(|p| p["deployment_id"] == id)
}

fn ids(v: &Value) -> BTreeSet<i64> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_i64)
        .collect()
}

fn ask(
    d: &Deployment,
    bot: i64,
    group: i64,
    user: i64,
    text: &str,
    time: i64,
    lane: &str,
) -> Value {
    let (status, body) = post(
        &format!("{}/v1/ingress", d.url),
        None,
        &json!({"platform": "onebot", "self_id": bot, "group_id": group, "user_id": user,
                "text": text, "time": time, "lane": lane}),
    );
    assert_eq!(status, 200, "{body}");
    body
}

/// Starts two deployments and waits until each sees the other with every group present.
/// B excludes [`EXCLUDED_ON_B`].
fn pool(redis: &RedisServer, federate_extra: &str) -> (Deployment, Deployment) {
    pool_on(&redis.url(), "", federate_extra)
}

/// [`pool`] on the pool Redis `redis_url`, with `extra` at the top level of both configs.
fn pool_on(redis_url: &str, extra: &str, federate_extra: &str) -> (Deployment, Deployment) {
    let a = deployment_with("dep-a", BOT_A, redis_url, extra, federate_extra, short_ttl);
    let excluded: Vec<String> = EXCLUDED_ON_B.map(|g| g.to_string()).collect();
    let b_extra = format!("{extra}\nexcludeChannels: [{}]", excluded.join(", "));
    let b = deployment_with(
        "dep-b",
        BOT_B,
        redis_url,
        &b_extra,
        federate_extra,
        short_ttl,
    );
    assert_ne!(a.id, b.id);
    eventually("both rosters", WAIT, || {
        peer(&peers(&a), &b.id).is_some_and(|p| ids(&p["bot_ids"]) == BTreeSet::from([BOT_B]))
            && peer(&peers(&b), &a.id)
                .is_some_and(|p| ids(&p["bot_ids"]) == BTreeSet::from([BOT_A]))
    });
    // A message per group makes every group present in both heartbeats.
    for g in GROUPS {
        ask(&a, BOT_A, g, 5, "hello", 1, "chat");
        ask(&b, BOT_B, g, 5, "hello", 1, "chat");
    }
    let all: BTreeSet<i64> = GROUPS.collect();
    eventually("present groups in both heartbeats", WAIT, || {
        let seen_by_a = peers(&a);
        let seen_by_b = peers(&b);
        peer(&seen_by_a, &b.id).is_some_and(|p| ids(&p["present_group_ids"]) == all)
            && peer(&seen_by_b, &a.id).is_some_and(|p| ids(&p["present_group_ids"]) == all)
    });
    // Let the last change of assigned groups reach both sides (its grace period ends), so
    // every command below is decided by the owner alone.
    std::thread::sleep(Duration::from_secs(2));
    (a, b)
}

#[test]
fn two_deployments_answer_each_message_once_and_take_over_after_the_ttl() {
    let redis = RedisServer::start();
    let (a, b) = pool(&redis, "");

    // The heartbeat: upstream's fields, and the assignment extension.
    let raw = redis.cli(&["GET", &format!("pallas:fed:pool-1:peer_bots:{}", a.id)]);
    let record: Value = serde_json::from_str(&raw).unwrap();
    let keys: Vec<&str> = record
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "deployment_id",
            "deployment_name",
            "bot_ids",
            "online_bot_ids",
            "public_bot_ids",
            "public_online_bot_names",
            "updated_at",
            "present_group_ids",
            "command_capability_protocol",
            "ingress_protocol",
            "ingress_capabilities",
            "command_capabilities",
            "assigned_group_ids"
        ]
    );
    assert_eq!(record["deployment_name"], "dep-a");
    assert_eq!(record["command_capabilities"], json!(["牛牛帮助"]));
    let ttl: i64 = redis
        .cli(&["TTL", &format!("pallas:fed:pool-1:peer_bots:{}", a.id)])
        .parse()
        .unwrap();
    assert!((1..=3).contains(&ttl), "heartbeat TTL {ttl}");
    let b_assigned = ids(&peer(&peers(&a), &b.id).unwrap()["assigned_group_ids"]);
    assert!(b_assigned.iter().all(|g| !EXCLUDED_ON_B.contains(g)));
    assert_eq!(b_assigned.len(), GROUPS.count() - EXCLUDED_ON_B.count());

    // A bot of the other deployment is never answered, nor a message @-ing only it.
    let from_peer = ask(&a, BOT_A, 700_010, BOT_B, "hi", 2, "chat");
    assert_eq!(from_peer["handle"], false);
    assert_eq!(from_peer["reason"], "sent by a bot of another deployment");

    // 2,000 command-lane messages, both deployments asked about each. The owner's bot goes
    // through the 150 ms candidate round, so many messages are in flight at once (40 at a
    // time: each worker's messages wait one round each, so the count sets the test's length).
    let groups: Vec<i64> = GROUPS.collect();
    const WORKERS: i64 = 40;
    const MESSAGES: i64 = 2_000;
    let results: Vec<(i64, bool, bool, String, String)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let (a, b, groups) = (&a, &b, &groups);
                s.spawn(move || {
                    (0..MESSAGES)
                        .filter(|i| i % WORKERS == w)
                        .map(|i| {
                            let g = groups[i as usize % groups.len()];
                            let text = format!("牛牛帮助 {i}");
                            let time = 1_800_000_000 + i;
                            let (ra, rb) = if i % 2 == 0 {
                                let ra = ask(a, BOT_A, g, 100_000 + i, &text, time, "command");
                                (ra, ask(b, BOT_B, g, 100_000 + i, &text, time, "command"))
                            } else {
                                let rb = ask(b, BOT_B, g, 100_000 + i, &text, time, "command");
                                (ask(a, BOT_A, g, 100_000 + i, &text, time, "command"), rb)
                            };
                            let reason = |r: &Value| r["reason"].as_str().unwrap().to_owned();
                            (
                                g,
                                ra["handle"] == true,
                                rb["handle"] == true,
                                reason(&ra),
                                reason(&rb),
                            )
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    assert_eq!(results.len(), MESSAGES as usize);
    let mut handled_by: BTreeMap<i64, BTreeSet<&str>> = BTreeMap::new();
    for (g, by_a, by_b, why_a, why_b) in &results {
        assert!(
            by_a ^ by_b,
            "group {g}: A {by_a} ({why_a}), B {by_b} ({why_b})"
        );
        // The owner decided, not a race: the other deployment yielded to it.
        let (winner, loser) = if *by_a {
            (why_a, why_b)
        } else {
            (why_b, why_a)
        };
        assert!(loser.starts_with("group owned by deployment"), "{loser}");
        assert!(winner.ends_with("won the federate claim"), "{winner}");
        handled_by
            .entry(*g)
            .or_default()
            .insert(if *by_a { "a" } else { "b" });
    }
    assert!(
        handled_by.values().all(|d| d.len() == 1),
        "one owner per group: {handled_by:?}"
    );
    for g in EXCLUDED_ON_B {
        assert_eq!(
            handled_by[&g],
            BTreeSet::from(["a"]),
            "group {g} is assigned on A only"
        );
    }
    let b_groups = handled_by.values().filter(|d| d.contains("b")).count();
    assert!(b_groups > 0, "B owns some of the groups it is assigned");

    // The chat lane: no owner, the claim alone; both asked at the same moment.
    let messages: Vec<(i64, i64)> = (0..1000)
        .map(|i| (groups[i % groups.len()], i as i64))
        .collect();
    let run = |d: &Deployment, bot: i64| {
        messages
            .iter()
            .map(|(g, i)| {
                ask(
                    d,
                    bot,
                    *g,
                    77,
                    &format!("chat {i}"),
                    1_800_100_000 + i,
                    "chat",
                )["handle"]
                    == true
            })
            .collect::<Vec<bool>>()
    };
    let (by_a, by_b) = std::thread::scope(|s| {
        let ta = s.spawn(|| run(&a, BOT_A));
        let tb = s.spawn(|| run(&b, BOT_B));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    for (i, (wa, wb)) in by_a.iter().zip(&by_b).enumerate() {
        assert!(wa ^ wb, "chat message {i}: A {wa}, B {wb}");
    }
    let (g, i) = messages[0];
    let key = Signature::new(
        g,
        77,
        &format!("chat {i}"),
        1_800_100_000 + i,
        Body::Plaintext,
        Time::Included,
    )
    .key();
    let holder = redis.cli(&[
        "GET",
        &format!("pallas:fed:pool-1:ingress:federate_ingress:{g}:{key}"),
    ]);
    assert_eq!(&holder, if by_a[0] { &a.id } else { &b.id });
    assert!(
        redis
            .cli(&["HGETALL", "pallas:fed:pool-1:ingress_audit"])
            .contains("none:winner"),
        "audit counts are flushed"
    );

    // Malformed records are reported and skipped; the roster keeps refreshing.
    redis.cli(&[
        "SET",
        "pallas:fed:pool-1:peer_bots:broken",
        "{not json",
        "EX",
        "600",
    ]);
    let mut raw = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("SET")
        .arg("pallas:fed:pool-1:peer_bots:binary")
        .arg(b"{\"bot_ids\":[\xff]}".as_slice())
        .exec(&mut raw)
        .unwrap();
    redis.cli(&[
        "SET",
        "pallas:fed:pool-1:peer_bots:dep-x",
        r#"{"deployment_id":"dep-x","bot_ids":[3001],"present_group_ids":[]}"#,
        "EX",
        "600",
    ]);
    eventually("malformed record reported, new peer seen", WAIT, || {
        let roster = peers(&a);
        let malformed = roster["malformed"].as_array().unwrap();
        malformed.len() == 2
            && malformed[0]["key"] == "pallas:fed:pool-1:peer_bots:binary"
            && malformed[0]["error"] == "not UTF-8"
            && malformed[1]["key"] == "pallas:fed:pool-1:peer_bots:broken"
            && malformed[1]["error"].as_str().unwrap().contains("not JSON")
            && peer(&roster, "dep-x").is_some()
            && peer(&roster, &b.id).is_some()
    });
    let from_x = ask(&a, BOT_A, 700_010, 3001, "hi", 3, "chat");
    assert_eq!(from_x["reason"], "sent by a bot of another deployment");
    redis.cli(&["DEL", "pallas:fed:pool-1:peer_bots:dep-x"]);

    // B stops without a goodbye (killed): A keeps it until its heartbeat expires (the TTL is
    // 3 s here: the config check's 60 s minimum is for real pools).
    let b_id = b.id.clone();
    b.service.kill();
    let killed = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(peer(&peers(&a), &b_id).is_some(), "B lives until its TTL");
    eventually("B's heartbeat expires", WAIT, || {
        peer(&peers(&a), &b_id).is_none()
    });
    assert!(
        killed.elapsed() >= Duration::from_millis(2500),
        "gone after the 3 s TTL, not before"
    );
    for g in GROUPS {
        let r = ask(&a, BOT_A, g, 9, "牛牛帮助", 1_800_200_000, "command");
        assert_eq!(r["handle"], true, "group {g}: {r}");
        let why = r["reason"].as_str().unwrap();
        assert!(!why.contains("federate"), "no peers: no pool claim ({why})");
    }
}

#[test]
fn without_respect_assignment_owners_are_pure_upstream_and_a_clean_stop_leaves_at_once() {
    let redis = RedisServer::start();
    let (a, b) = pool(&redis, "  respectAssignment: false");
    let mut ring = [a.id.clone(), b.id.clone()];
    ring.sort();
    for g in GROUPS {
        let expected = &ring[ring_index(g, 2, T0, 7200)];
        let ra = ask(&a, BOT_A, g, 11, "牛牛帮助", 1_800_300_000, "command");
        let rb = ask(&b, BOT_B, g, 11, "牛牛帮助", 1_800_300_000, "command");
        let owner = if ra["handle"] == true { &a.id } else { &b.id };
        assert_eq!(owner, expected, "group {g}: {ra} / {rb}");
        assert!(ra["handle"] != rb["handle"], "group {g}: {ra} / {rb}");
    }

    // A clean stop deletes the heartbeat: A owns everything at its next refresh.
    let key = format!("pallas:fed:pool-1:peer_bots:{}", b.id);
    assert_eq!(redis.cli(&["EXISTS", &key]), "1");
    let b_id = b.id.clone();
    b.service.stop().unwrap();
    assert_eq!(redis.cli(&["EXISTS", &key]), "0");
    eventually("B left the roster", Duration::from_secs(5), || {
        peer(&peers(&a), &b_id).is_none()
    });
}

/// The claim itself against Redis: SET NX per deployment, the win cache, in-flight sharing,
/// candidates, the audit hash, and fail-closed when Redis is gone.
#[test]
fn federate_claims_candidates_and_audit() {
    let mut server = RedisServer::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let shutdown = tokio_util::sync::CancellationToken::new();
        let redis = Redis::connect_url(&server.url(), shutdown.clone()).unwrap();
        let until = Instant::now() + WAIT;
        while redis.conn().await.is_none() {
            assert!(Instant::now() < until, "redis connection");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let a = Arc::new(IngressClaims::new(
            redis.clone(),
            "pallas:fed:pool-1",
            "dep-a",
            86_400,
        ));
        let b = IngressClaims::new(redis.clone(), "pallas:fed:pool-1", "dep-b", 86_400);
        let group = 733_291_779;
        let key = Signature::new(
            group,
            42,
            "牛牛帮助",
            1_786_000_000,
            Body::Plaintext,
            Time::Included,
        )
        .key();

        assert_eq!(a.claim(PLUGIN, group, key, "command").await, Outcome::Won);
        assert_eq!(
            a.claim(PLUGIN, group, key, "command").await,
            Outcome::CachedWin
        );
        assert_eq!(b.claim(PLUGIN, group, key, "command").await, Outcome::Lost);
        let stored = format!("pallas:fed:pool-1:ingress:federate_ingress:{group}:{key}");
        assert_eq!(server.cli(&["GET", &stored]), "dep-a");
        let ttl: i64 = server.cli(&["TTL", &stored]).parse().unwrap();
        assert!((86_390..=86_400).contains(&ttl), "{ttl}");

        // Twenty concurrent asks about one message: one Redis claim, the others share it or
        // find the cached win. Repeated, because an ask arriving just as the first one
        // finishes once claimed again (a second bot of this deployment answering).
        for round in 1..=100 {
            let fresh = key + round;
            let asks: Vec<_> = (0..20)
                .map(|_| {
                    let a = a.clone();
                    tokio::spawn(async move { a.claim(PLUGIN, group, fresh, "none").await })
                })
                .collect();
            let mut outcomes = Vec::new();
            for ask in asks {
                outcomes.push(ask.await.unwrap());
            }
            assert_eq!(
                outcomes.iter().filter(|o| **o == Outcome::Won).count(),
                1,
                "round {round}: {outcomes:?}"
            );
            assert!(outcomes.iter().all(|o| o.won()), "{outcomes:?}");
        }

        // Candidates: both register, the smaller bot claims under federate_ingress_v2.
        let k2 = Signature::new(
            group,
            43,
            "@牛牛 唱歌",
            1_786_000_001,
            Body::Plaintext,
            Time::Included,
        )
        .key();
        let (ra, rb) = tokio::join!(
            a.candidate("command", 3_907_360_849, group, k2),
            b.candidate("llm_alias", 2_357_682_124, group, k2)
        );
        assert_eq!(ra, Err(Outcome::CandidateYield));
        assert_eq!(rb, Ok(()));
        let set = format!("pallas:fed:pool-1:ingress_candidates:{group}:{k2}");
        let members: BTreeSet<String> = server
            .cli(&["SMEMBERS", &set])
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(
            members,
            BTreeSet::from([
                "command:3907360849".to_owned(),
                "llm_alias:2357682124".to_owned()
            ])
        );
        let ttl: i64 = server.cli(&["TTL", &set]).parse().unwrap();
        assert!((1..=2).contains(&ttl), "candidate TTL {ttl}");
        assert_eq!(
            b.claim(CANDIDATE_PLUGIN, group, k2, "llm_alias").await,
            Outcome::Won
        );
        assert_eq!(
            server.cli(&[
                "GET",
                &format!("pallas:fed:pool-1:ingress:federate_ingress_v2:{group}:{k2}")
            ]),
            "dep-b"
        );
        assert!(a.yields_to_candidates(group, k2).await);
        assert!(!a.yields_to_candidates(group, k2 + 1).await);

        // The audit hash, flushed half a second later.
        let expected = BTreeMap::from([
            ("command:candidate_yield".to_owned(), 1),
            ("command:lost".to_owned(), 1),
            ("command:winner".to_owned(), 1),
            ("llm_alias:candidate_registered".to_owned(), 1),
            ("none:candidate_yield".to_owned(), 1),
            ("none:winner".to_owned(), 100),
        ]);
        let until = Instant::now() + WAIT;
        loop {
            let audit = server.cli(&["HGETALL", "pallas:fed:pool-1:ingress_audit"]);
            let fields: BTreeMap<String, i64> = audit
                .lines()
                .collect::<Vec<_>>()
                .chunks(2)
                .map(|kv| (kv[0].to_owned(), kv[1].parse().unwrap()))
                .collect();
            if expected.iter().all(|(k, v)| fields.get(k) == Some(v)) {
                break;
            }
            assert!(
                Instant::now() < until,
                "audit {fields:?}, expected {expected:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // Redis gone: the claim fails closed, candidates cannot register.
        server.stop();
        let lost = a.claim(PLUGIN, group, key + 1_000, "none").await;
        assert!(!lost.won(), "{lost:?}");
        assert_eq!(
            a.candidate("command", 1, group, key + 1_001).await,
            Err(Outcome::RegistrationFailed)
        );
        shutdown.cancel();
    });
}

/// A pool that cannot be joined stops the service at start, naming what is missing.
#[test]
fn an_unresolvable_pool_is_a_clear_start_up_error() {
    for (federate, expected) in [
        ("{ingress: on}", "federate.ingress is on but no pool id"),
        ("{id: pool-1}", "federate: no coordination Redis"),
        (
            "{id: pool-1, bootstrapFile: boot.json}",
            "federate.bootstrapFile",
        ),
    ] {
        let dir = TempDir::new("federate-bad");
        dir.write("boot.json", "{not json");
        let path = dir.write(
            "config.yaml",
            &format!("database: {{url: \"sqlite://state.db\"}}\napi: {{bind: null}}\nfederate: {federate}\n"),
        );
        let mut service = Service::start(&path);
        let status = service.wait(WAIT);
        assert_eq!(status.code(), Some(2), "{federate}: {}", service.log());
        assert!(
            service.log().contains(expected),
            "{federate}: {}",
            service.log()
        );
    }
}

/// A deployment serving OneBot bots publishes which of them are group admins (asked with
/// `get_group_member_info`, updated by `group_admin` notices), and a group-admin command goes
/// to the group-admin owner: one deployment, one of its admin bots.
#[test]
fn group_admins_are_observed_published_and_own_group_admin_commands() {
    let redis = RedisServer::start();
    let sims =
        crate::support::Sims::forward(&[(5001, 900_001..=900_002), (5002, 900_001..=900_001)]);
    sims.bot(5001).set_admin(900_001, true, false);
    let dir = TempDir::new("federate-admins");
    dir.write(
        "config.yaml",
        &format!(
            "triggerDelays: {{startup: 0, botOnline: 0.2}}
database: {{url: \"sqlite://state.db\"}}
api: {{bind: \"127.0.0.1:0\"}}
sources:
  onebot:
    startupWait: 5
    health: {{probeInterval: 600}}
    connections:
{}federate: {{id: pool-1, redisUrl: \"{}\", refreshInterval: 0.2, heartbeatTtl: 60}}
",
            sims.connections(""),
            redis.url()
        ),
    );
    let d = Deployment::start(dir, |_| {});
    let id = d.id.clone();
    eventually("both bots online", WAIT, || {
        ids(&peers(&d)["local"]["online_bot_ids"]) == BTreeSet::from([5001, 5002])
    });
    for g in [900_001, 900_002] {
        ask(&d, 5001, g, 42, "hello", 1, "chat");
    }
    let record = || -> Value {
        let raw = redis.cli(&["GET", &format!("pallas:fed:pool-1:peer_bots:{id}")]);
        serde_json::from_str(&raw).unwrap()
    };
    eventually("admins published", WAIT, || {
        record()["group_admin_bot_ids"] == json!({"900001": [5001], "900002": []})
    });
    sims.bot(5002).set_admin(900_001, true, true);
    eventually("the group_admin notice is applied", WAIT, || {
        record()["group_admin_bot_ids"]["900001"] == json!([5001, 5002])
    });

    // Alone in the pool: one of the two admin bots, by the stable index.
    let admin_ask = |bot: i64| {
        post(
            &format!("{}/v1/ingress", d.url),
            None,
            &json!({"platform": "onebot", "self_id": bot, "group_id": 900_001, "user_id": 42,
                    "text": "禁言 @x", "time": 2, "lane": "command", "group_admin": true}),
        )
        .1
    };
    let bots = [5001, 5002];
    let chosen = bots[stable_ring_index(900_001, 2)];
    for bot in bots {
        let r = admin_ask(bot);
        assert_eq!(r["handle"], bot == chosen, "{bot}: {r}");
        assert!(
            r["reason"]
                .as_str()
                .unwrap()
                .starts_with("group-admin owner"),
            "{r}"
        );
    }

    // A peer with its own admin bot in the group: the stable index picks the deployment.
    redis.cli(&[
        "SET",
        "pallas:fed:pool-1:peer_bots:dep-peer",
        r#"{"deployment_id":"dep-peer","bot_ids":[7001],"online_bot_ids":[7001],"present_group_ids":[900001],"group_admin_bot_ids":{"900001":[7001]}}"#,
        "EX",
        "600",
    ]);
    eventually("peer seen", WAIT, || peer(&peers(&d), "dep-peer").is_some());
    let mut ring = [id.clone(), "dep-peer".to_owned()];
    ring.sort();
    let owner = &ring[stable_ring_index(900_001, 2)];
    let handled: Vec<bool> = bots
        .iter()
        .map(|b| admin_ask(*b)["handle"] == true)
        .collect();
    if *owner == id {
        assert_eq!(handled, bots.map(|b| b == chosen).to_vec());
    } else {
        assert_eq!(handled, vec![false, false], "the peer's admin bot takes it");
    }
    // Unknown admins (a group with no observation) fall back to the ordinary command flow.
    let r = post(
        &format!("{}/v1/ingress", d.url),
        None,
        &json!({"platform": "onebot", "self_id": 5001, "group_id": 123, "user_id": 42,
                "text": "禁言 @x", "time": 3, "lane": "command", "group_admin": true}),
    )
    .1;
    assert!(
        !r["reason"]
            .as_str()
            .unwrap()
            .starts_with("group-admin owner"),
        "{r}"
    );
}

/// A text only a peer declares as a command (Pallas-Bot's "牛牛画画" on the other machine) is
/// command traffic even when this deployment's caller saw chat, and is left to the peer that
/// declares it: one answer per message.
#[test]
fn commands_only_a_peer_declares_are_answered_once() {
    let redis = RedisServer::start();
    let a = deployment("dep-a", BOT_A, &redis.url(), "", "");
    let b = deployment(
        "dep-b",
        BOT_B,
        &redis.url(),
        "",
        "  commandCapabilities: [\"牛牛帮助\", \"牛牛画画\"]",
    );
    eventually("both rosters", WAIT, || {
        peer(&peers(&a), &b.id).is_some() && peer(&peers(&b), &a.id).is_some()
    });
    for g in GROUPS {
        ask(&a, BOT_A, g, 5, "hello", 1, "chat");
        ask(&b, BOT_B, g, 5, "hello", 1, "chat");
    }
    let all: BTreeSet<i64> = GROUPS.collect();
    eventually("present groups", WAIT, || {
        peer(&peers(&a), &b.id).is_some_and(|p| ids(&p["present_group_ids"]) == all)
    });
    let groups: Vec<i64> = GROUPS.collect();
    let results: Vec<(Value, Value)> = std::thread::scope(|s| {
        let asks: Vec<_> = (0..24i64)
            .map(|i| {
                let (a, b, g) = (&a, &b, groups[i as usize % groups.len()]);
                s.spawn(move || {
                    let text = format!("牛牛画画 一只猫 {i}");
                    let time = 1_800_400_000 + i;
                    // A's bot has no such command: its caller sees chat. B's caller knows it
                    // (or, for odd messages, also sees chat).
                    let b_lane = if i % 2 == 0 { "command" } else { "chat" };
                    let ra = ask(a, BOT_A, g, 200 + i, &text, time, "chat");
                    let rb = ask(b, BOT_B, g, 200 + i, &text, time, b_lane);
                    (ra, rb)
                })
            })
            .collect();
        asks.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for (ra, rb) in &results {
        assert_eq!(ra["handle"], false, "A: {ra}");
        assert_eq!(
            ra["reason"], "a deployment that declares this command takes it",
            "A: {ra}"
        );
        assert_eq!(rb["handle"], true, "B: {rb}");
    }
    // Plain chat stays chat: exactly one of them, by the claim.
    let ra = ask(&a, BOT_A, 700_003, 9, "今天天气不错", 1_800_500_000, "chat");
    let rb = ask(&b, BOT_B, 700_003, 9, "今天天气不错", 1_800_500_000, "chat");
    assert!(ra["handle"] != rb["handle"], "{ra} / {rb}");
}

/// Heartbeat and roster within a second of Redis becoming reachable, at start and after an
/// outage (Redis restarted empty). `AA_FEDERATE_STARTS` sets the number of starts (5).
#[test]
fn heartbeats_within_a_second_of_redis_becoming_reachable() {
    let starts: usize = std::env::var("AA_FEDERATE_STARTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5);
    let port = crate::support::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let (mut at_start, mut after_outage) = (Vec::new(), Vec::new());
    for n in 0..starts {
        // The default refresh interval (a minute): a late first heartbeat would show.
        let d = deployment(
            &format!("dep-{n}"),
            BOT_A,
            &url,
            "",
            "  refreshInterval: 59",
        );
        let key = format!("pallas:fed:pool-1:peer_bots:{}", d.id);
        // Some time with Redis away, varied, so Redis appears at any point of the retry cycle.
        std::thread::sleep(Duration::from_millis(100 + 397 * n as u64 % 2500));
        let mut redis = RedisServer::on_port(port);
        for delays in [&mut at_start, &mut after_outage] {
            let reachable = Instant::now();
            redis.restart();
            let until = Instant::now() + WAIT;
            while redis.cli(&["EXISTS", &key]) != "1" {
                assert!(Instant::now() < until, "no heartbeat {key}");
                std::thread::sleep(Duration::from_millis(5));
            }
            let delay = reachable.elapsed();
            assert!(
                delay < Duration::from_secs(1),
                "heartbeat {delay:?} after Redis came"
            );
            delays.push(delay);
            // The outage: Redis gone long enough for a failed heartbeat, then back empty.
            redis.stop();
            std::thread::sleep(Duration::from_millis(1500));
        }
        drop(d);
    }
    for (what, delays) in [
        ("at start", &mut at_start),
        ("after an outage", &mut after_outage),
    ] {
        delays.sort();
        println!(
            "Redis reachable → first heartbeat {what}, {} starts: min {:?}, median {:?}, max {:?}",
            delays.len(),
            delays[0],
            delays[delays.len() / 2],
            delays[delays.len() - 1]
        );
    }
}

/// The pool on a real Redis Cluster (three masters, one replica each), shared with the
/// service's own `redis:` (cluster: true): the heartbeats are found by `SCAN` on every master
/// and read across slots, Pallas-Bot's keys keep their names (no hash tag: heartbeats, claims
/// and candidates are single keys), the ingress claims on the cluster, and each message is
/// answered exactly once, by its group's owner.
#[test]
fn a_pool_on_a_redis_cluster_answers_each_message_once() {
    let cluster = RedisCluster::start();
    let extra = format!("redis: {}", cluster.redis_section());
    let (a, b) = pool_on(&cluster.urls()[0], &extra, "");

    let heartbeat = format!("pallas:fed:pool-1:peer_bots:{}", a.id);
    let record: Value = serde_json::from_str(&cluster.cli(&["GET", &heartbeat])).unwrap();
    assert_eq!(record["deployment_name"], "dep-a");
    // Pallas-Bot's key, as named upstream, in whatever slot it hashes to.
    let slot: u16 = cluster
        .cli(&["CLUSTER", "KEYSLOT", &heartbeat])
        .parse()
        .unwrap();
    let b_heartbeat = format!("pallas:fed:pool-1:peer_bots:{}", b.id);
    let b_slot: u16 = cluster
        .cli(&["CLUSTER", "KEYSLOT", &b_heartbeat])
        .parse()
        .unwrap();
    println!("heartbeat slots: {slot} and {b_slot}");

    let mut handled = BTreeMap::new();
    for (i, g) in GROUPS.enumerate() {
        let i = i as i64;
        let text = format!("牛牛帮助 {i}");
        let time = 1_800_000_000 + i;
        let (ra, rb) = std::thread::scope(|s| {
            let ra = s.spawn(|| ask(&a, BOT_A, g, 100_000 + i, &text, time, "command"));
            let rb = ask(&b, BOT_B, g, 100_000 + i, &text, time, "command");
            (ra.join().unwrap(), rb)
        });
        let (by_a, by_b) = (ra["handle"] == true, rb["handle"] == true);
        assert!(by_a ^ by_b, "group {g}: A {ra}, B {rb}");
        handled.insert(g, if by_a { "a" } else { "b" });
        // The chat lane: no owner, the Pallas claim alone decides.
        let chat = format!("hello {i}");
        let (ca, cb) = std::thread::scope(|s| {
            let ca = s.spawn(|| ask(&a, BOT_A, g, 200_000 + i, &chat, time, "chat"));
            let cb = ask(&b, BOT_B, g, 200_000 + i, &chat, time, "chat");
            (ca.join().unwrap(), cb)
        });
        assert!(
            (ca["handle"] == true) ^ (cb["handle"] == true),
            "chat in {g}: A {ca}, B {cb}"
        );
    }
    for g in EXCLUDED_ON_B {
        assert_eq!(handled[&g], "a", "group {g} is assigned on A only");
    }
    assert!(handled.values().any(|d| *d == "b"), "{handled:?}");
    println!(
        "Redis Cluster pool (heartbeats in slots {slot} and {b_slot}): {} command and {} chat \
         messages each answered once",
        handled.len(),
        handled.len()
    );
}
