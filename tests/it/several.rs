//! Several instances, one leader, under injected faults: real service processes on one real
//! PostgreSQL and one real Redis, with a lease of 2 s. Each scenario counts what the issue
//! names: rows lost, stale writes accepted, channels left on an offline bot, messages
//! handled twice or by nobody, and takeover times.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::netns::{Host, Net};
use crate::support::redis::{RedisCluster, RedisSentinel};
use crate::support::{
    Db, FLEET, Postgres, RedisServer, Service, Sims, TempDir, eventually, fleet_with_offline,
    free_port,
};
use serde_json::{Value, json};

const TTL: Duration = Duration::from_secs(2);
const WAIT: Duration = Duration::from_secs(40);
const CHANNELS: usize = 12;

struct Instance {
    port: u16,
    /// The host it runs on in a partition test (its API on the host's address).
    host: Option<Host>,
    config: PathBuf,
    service: Option<Service>,
}

struct Cluster {
    dir: TempDir,
    pg: Postgres,
    db: Db,
    instances: Vec<Instance>,
}

/// A `redis:` section naming one server.
fn url_only(url: &str) -> String {
    format!("{{url: \"{url}\"}}")
}

fn agent() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_millis(400)))
            .build(),
    )
}

/// GET as JSON; `None` when the instance does not answer (killed, stopped).
fn try_get(url: &str) -> Option<Value> {
    let mut resp = agent().get(url).call().ok()?;
    serde_json::from_str(&resp.body_mut().read_to_string().ok()?).ok()
}

impl Cluster {
    /// `n` instances; instance `i` reaches Redis at `redis_url(i)`.
    fn start(name: &str, n: usize, redis_url: impl Fn(usize) -> String) -> Cluster {
        Cluster::start_with(
            name,
            n,
            |i| url_only(&redis_url(i)),
            "redis",
            "sources: {file: fleet.yaml}",
        )
    }

    /// With the lease in `lease` (`redis` or `postgres`), the fleet from `sources`, and
    /// instance `i`'s `redis:` section `redis(i)` (YAML).
    fn start_with(
        name: &str,
        n: usize,
        redis: impl Fn(usize) -> String,
        lease: &str,
        sources: &str,
    ) -> Cluster {
        let hosts = vec![None; n];
        Cluster::build(name, Postgres::start(), hosts, redis, lease, sources)
    }

    /// One instance per entry of `hosts` (on that host, or on 127.0.0.1 for `None`), on `pg`.
    fn build(
        name: &str,
        pg: Postgres,
        hosts: Vec<Option<Host>>,
        redis: impl Fn(usize) -> String,
        lease: &str,
        sources: &str,
    ) -> Cluster {
        let dir = TempDir::new(name);
        dir.write("fleet.yaml", FLEET);
        let db = Db::Postgres(pg.url());
        let mut cluster = Cluster {
            instances: Vec::new(),
            dir,
            db,
            pg,
        };
        for (i, host) in hosts.into_iter().enumerate() {
            let name = ["a", "b", "c"][i].to_owned();
            let port = free_port();
            let address = host.as_ref().map_or("127.0.0.1", |h| h.ip.as_str());
            let config = cluster.dir.write(
                &format!("{name}.yaml"),
                &format!(
                    "balanceInterval: 600
triggerDelays: {{startup: 0, botStatus: 0, botOnline: 0, botOffline: 0, channelJoined: 0, channelLeft: 0}}
database: {{url: \"{}\"}}
redis: {}
{sources}
api: {{bind: \"{address}:{port}\"}}
leadership: {{instance: {name}, leaseTtl: {}, lease: {lease}}}
",
                    cluster.pg.url(),
                    redis(i),
                    TTL.as_secs()
                ),
            );
            cluster.instances.push(Instance {
                port,
                host,
                config,
                service: None,
            });
            cluster.launch(i);
        }
        cluster
    }

    fn launch(&mut self, i: usize) {
        let instance = &self.instances[i];
        let service = match &instance.host {
            Some(host) => Service::start_on(host, &instance.config),
            None => Service::start(&instance.config),
        };
        self.instances[i].service = Some(service);
        let url = self.url(i, "/healthz");
        eventually("the instance answers", WAIT, || try_get(&url).is_some());
    }

    fn url(&self, i: usize, path: &str) -> String {
        let instance = &self.instances[i];
        let address = instance
            .host
            .as_ref()
            .map_or("127.0.0.1", |h| h.ip.as_str());
        format!("http://{address}:{}{path}", instance.port)
    }

    /// (role, term) as the instance reports it.
    fn role(&self, i: usize) -> Option<(String, i64)> {
        self.instances[i].service.as_ref()?;
        let health = try_get(&self.url(i, "/healthz"))?;
        let l = &health["leadership"];
        Some((
            l["role"].as_str()?.to_owned(),
            l["term"].as_i64().unwrap_or(0),
        ))
    }

    /// The instances that say they lead, with their terms.
    fn leaders(&self) -> Vec<(usize, i64)> {
        (0..self.instances.len())
            .filter_map(|i| match self.role(i) {
                Some((role, term)) if role == "leader" => Some((i, term)),
                _ => None,
            })
            .collect()
    }

    /// Waits for exactly one leader with a term above `above`.
    fn wait_leader(&self, above: i64) -> (usize, i64) {
        let mut found = None;
        eventually(&format!("one leader above term {above}"), WAIT, || {
            let leaders = self.leaders();
            found = match leaders[..] {
                [(i, term)] if term > above => Some((i, term)),
                _ => None,
            };
            found.is_some()
        });
        found.unwrap()
    }

    fn signal(&self, i: usize, signal: &str) {
        let pid = self.instances[i]
            .service
            .as_ref()
            .unwrap()
            .pid()
            .to_string();
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn kill(&mut self, i: usize) {
        self.signal(i, "KILL");
        self.kill_reaped(i);
    }

    /// Forgets a killed instance once it has exited.
    fn kill_reaped(&mut self, i: usize) {
        let mut service = self.instances[i].service.take().unwrap();
        service.wait(WAIT);
    }

    /// A clean stop (SIGTERM), waited for.
    fn stop(&mut self, i: usize) {
        self.signal(i, "TERM");
        let mut service = self.instances[i].service.take().unwrap();
        assert!(service.wait(WAIT).success());
    }

    fn rows(&self) -> BTreeMap<String, String> {
        self.db.channels("onebot")
    }

    /// (id, term, causes, moved) of every rebalance record, oldest first.
    fn history(&self) -> Vec<(i64, i64, String, i64)> {
        let url = self.pg.url();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let pool = sqlx::PgPool::connect(&url).await.unwrap();
                sqlx::query_as(
                    "SELECT id, term, causes, moved_forced + moved_voluntary \
                     FROM auto_assign_rebalance ORDER BY id",
                )
                .fetch_all(&pool)
                .await
                .unwrap()
            })
    }

    /// The assignment instance `i` serves.
    fn served(&self, i: usize) -> Option<BTreeMap<String, String>> {
        let body = try_get(&self.url(i, "/v1/assignments"))?;
        serde_json::from_value(body["onebot"].clone()).ok()
    }

    fn set_fleet(&self, fleet: &str) {
        self.dir.write("fleet.yaml", fleet);
    }

    /// Every row present and on an online bot, and every running instance serving exactly
    /// the rows.
    fn wait_settled(&self, offline: &[&str]) {
        eventually(
            "rows on online bots, served alike by every instance",
            WAIT,
            || {
                let rows = self.rows();
                rows.len() == CHANNELS
                    && rows
                        .values()
                        .all(|b| !b.is_empty() && !offline.contains(&b.as_str()))
                    && (0..self.instances.len())
                        .filter(|&i| self.instances[i].service.is_some())
                        .all(|i| self.served(i).as_ref() == Some(&rows))
            },
        );
    }

    /// The takeover record of `term`: how many channels its first plan moved.
    fn takeover_moves(&self, term: i64) -> i64 {
        let mut moved = None;
        eventually(&format!("the takeover run of term {term}"), WAIT, || {
            moved = self
                .history()
                .into_iter()
                .find(|(_, t, causes, _)| *t == term && causes.contains("takeover"))
                .map(|(_, _, _, moved)| moved);
            moved.is_some()
        });
        moved.unwrap()
    }
}

/// A TCP proxy in front of Redis that can cut its clients off (and refuse new ones).
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (c, s) = (cut.clone(), streams.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                if c.load(Ordering::SeqCst) {
                    continue; // dropped: refused
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let mut list = s.lock().unwrap();
                list.push(client.try_clone().unwrap());
                list.push(server.try_clone().unwrap());
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let mut buf = [0; 16384];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port, cut, streams }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for stream in self.streams.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// SIGKILL of the leader, three times (once right after a fleet change reached it, i.e. in
/// the middle of its rebalance): a follower leads within the lease, nothing is lost, and a
/// takeover with an unchanged fleet moves nothing.
#[test]
fn killed_leaders_are_replaced_within_the_lease() {
    let redis = RedisServer::start();
    let mut cluster = Cluster::start("ha-kill", 3, |_| redis.url());
    let (_, mut term) = cluster.wait_leader(0);
    cluster.wait_settled(&[]);
    let mut takeovers = Vec::new();
    for round in 0..3 {
        let (leader, _) = cluster.wait_leader(term - 1);
        let mid_rebalance = round == 1;
        if mid_rebalance {
            cluster.set_fleet(&fleet_with_offline(1003));
            let service = cluster.instances[leader].service.as_ref().unwrap();
            service.expect_log("bot onebot:1003 offline");
        }
        cluster.kill(leader);
        let killed = Instant::now();
        let (next, next_term) = cluster.wait_leader(term);
        let took = killed.elapsed();
        takeovers.push(took);
        assert_ne!(next, leader);
        // The lease's TTL, plus this test's own polling of /healthz.
        assert!(
            took < TTL + Duration::from_millis(300),
            "takeover took {took:?}"
        );
        let moved = cluster.takeover_moves(next_term);
        if !mid_rebalance {
            assert_eq!(moved, 0, "a takeover with an unchanged fleet moves nothing");
        }
        let offline: &[&str] = if round >= 1 { &["1003"] } else { &[] };
        cluster.wait_settled(offline);
        cluster.launch(leader);
        term = next_term;
    }
    let rows = cluster.rows();
    assert_eq!(rows.len(), CHANNELS, "rows lost: {}", CHANNELS - rows.len());
    // A clean stop hands the lease over at once, well before it would run out.
    let (leader, _) = cluster.wait_leader(term - 1);
    let stopped = Instant::now();
    cluster.stop(leader);
    let (_, handed) = cluster.wait_leader(term);
    let handover = stopped.elapsed();
    assert!(
        handover < TTL / 2,
        "a clean stop took {handover:?} to hand over"
    );
    assert_eq!(cluster.takeover_moves(handed), 0);
    println!(
        "SIGKILL of the leader ×3 (lease {TTL:?}): takeovers {takeovers:?}; clean stop: \
         {handover:?}; rows lost 0; channels on the offline bot 0"
    );
}

/// SIGSTOP of the leader while its commit is in flight (a table lock holds it), past its
/// lease; a follower takes over and plans; SIGCONT: the old leader's transaction was ended by
/// the server, its retry is fenced or dropped, and nothing of its term lands after the new
/// term's first write.
#[test]
fn a_paused_leader_writes_nothing_after_its_lease() {
    let redis = RedisServer::start();
    let cluster = Cluster::start("ha-stop", 2, |_| redis.url());
    let (old, old_term) = cluster.wait_leader(0);
    cluster.wait_settled(&[]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = cluster.pg.url();
    let mut lock = runtime.block_on(async {
        use sqlx::Connection as _;
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
        sqlx::query("LOCK TABLE channel IN SHARE MODE")
            .execute(&mut conn)
            .await
            .unwrap();
        conn
    });
    cluster.set_fleet(&fleet_with_offline(1003));
    eventually("the old leader's commit in flight", WAIT, || {
        try_get(&cluster.url(old, "/healthz"))
            .is_some_and(|h| h["store"]["pending_rows"].as_u64().unwrap_or(0) > 0)
    });
    cluster.signal(old, "STOP");
    runtime.block_on(async {
        sqlx::query("ROLLBACK").execute(&mut lock).await.unwrap();
    });
    let stopped = Instant::now();
    let (new, new_term) = cluster.wait_leader(old_term);
    assert_ne!(new, old);
    let takeover = stopped.elapsed();
    eventually("the new leader's plan committed", WAIT, || {
        let rows = cluster.rows();
        rows.len() == CHANNELS && rows.values().all(|b| b != "1003")
    });
    cluster.signal(old, "CONT");
    eventually("the old leader follows", WAIT, || {
        cluster
            .role(old)
            .is_some_and(|(role, _)| role == "follower")
    });
    cluster.wait_settled(&["1003"]);
    let history = cluster.history();
    let first_new = history
        .iter()
        .find(|(_, t, _, _)| *t == new_term)
        .map(|(id, ..)| *id)
        .unwrap();
    let stale = history
        .iter()
        .filter(|(id, t, _, _)| *id > first_new && *t < new_term)
        .count();
    assert_eq!(stale, 0, "stale writes accepted: {history:?}");
    let metrics = agent()
        .get(&cluster.url(old, "/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let fenced = metrics
        .lines()
        .find(|l| l.starts_with("auto_assign_store_commit_failures_total{failure=\"fenced\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or("0")
        .to_owned();
    println!(
        "SIGSTOP of the leader mid-commit past its lease: a new leader {takeover:?} after the \
         stop (its first write waits until the server ends the old transaction); stale writes \
         accepted 0; old leader's fenced commits {fenced}"
    );
}

/// PostgreSQL restarted (the leader keeps leading, writes land after), Redis restarted empty
/// (a new term above every earlier one, nothing moves), and a follower cut from Redis (it
/// neither leads nor disturbs; back, it serves the leader's assignment again).
#[test]
fn database_and_redis_restarts_and_a_follower_cut_from_redis() {
    let mut redis = RedisServer::start();
    let proxy = Proxy::start(redis.port);
    let proxied = format!("redis://127.0.0.1:{}", proxy.port);
    let direct = redis.url();
    let mut cluster = Cluster::start("ha-faults", 2, |i| {
        if i == 1 {
            proxied.clone()
        } else {
            direct.clone()
        }
    });
    let (leader, term) = cluster.wait_leader(0);
    cluster.wait_settled(&[]);

    cluster.pg.stop();
    cluster.set_fleet(&fleet_with_offline(1003));
    std::thread::sleep(Duration::from_millis(1500));
    cluster.pg.restart();
    cluster.wait_settled(&["1003"]);
    assert_eq!(cluster.leaders(), [(leader, term)], "PostgreSQL restart");
    let pg_term = term;

    redis.restart();
    let (_, redis_term) = cluster.wait_leader(term);
    assert_eq!(cluster.takeover_moves(redis_term), 0);
    cluster.wait_settled(&["1003"]);

    let (mut leader, mut term) = cluster.wait_leader(0);
    if leader == 1 {
        // The follower to cut must be the proxied one: a clean stop hands over at once.
        cluster.stop(1);
        (leader, term) = cluster.wait_leader(term);
        cluster.launch(1);
    }
    assert_eq!(leader, 0);
    proxy.cut();
    std::thread::sleep(TTL * 2);
    assert_eq!(cluster.leaders(), [(0, term)], "a follower cut from Redis");
    cluster.set_fleet(FLEET);
    eventually("the leader plans without the follower", WAIT, || {
        cluster.rows().values().any(|b| b == "1003")
    });
    proxy.restore();
    cluster.wait_settled(&[]);
    println!(
        "PostgreSQL restarted: leader kept term {pg_term}; Redis emptied: new term \
         {redis_term} > {pg_term}, moved 0; a follower cut from Redis: one leader throughout; \
         rows lost 0"
    );
}

/// Three instances while bots go offline and online and the leader is killed twice: at the
/// end every instance serves the same assignment, no channel is on an offline bot, and every
/// message, asked of a random instance by each bot in its group, is handled exactly once.
#[test]
fn three_instances_with_flapping_bots_answer_each_message_once() {
    let redis = RedisServer::start();
    let mut cluster = Cluster::start("ha-flap", 3, |_| redis.url());
    let (_, mut term) = cluster.wait_leader(0);
    let bots = ["1001", "1002", "1003"];
    for round in 0..9 {
        let bot: u64 = bots[round % 3].parse().unwrap();
        let fleet = if round % 2 == 0 {
            fleet_with_offline(bot)
        } else {
            FLEET.to_owned()
        };
        cluster.set_fleet(&fleet);
        std::thread::sleep(Duration::from_millis(1300));
        if round % 4 == 3 {
            let (leader, _) = cluster.wait_leader(term - 1);
            cluster.kill(leader);
            let (_, next) = cluster.wait_leader(term);
            term = next;
            cluster.launch(leader);
        }
    }
    cluster.set_fleet(FLEET);
    cluster.wait_settled(&[]);
    let (mut once, mut twice, mut nobody) = (0, 0, 0);
    for n in 0..240u64 {
        let group = 100001 + n % 12;
        let mut handlers = 0;
        for (k, bot) in fleet_members(group).iter().enumerate() {
            let instance = ((n + k as u64) % 3) as usize;
            let body = json!({"platform": "onebot", "self_id": bot.to_string(),
                "group_id": group.to_string(), "user_id": 42, "text": format!("/help {n}"),
                "time": 1786000000, "lane": "command"});
            let mut resp = agent()
                .post(&cluster.url(instance, "/v1/ingress"))
                .send_json(&body)
                .unwrap();
            let answer: Value =
                serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
            handlers += usize::from(answer["handle"] == json!(true));
        }
        match handlers {
            0 => nobody += 1,
            1 => once += 1,
            _ => twice += 1,
        }
    }
    assert_eq!((twice, nobody), (0, 0), "handled once: {once}");
    println!(
        "3 instances, 9 fleet changes, 2 leader kills: 240 messages asked of mixed instances: \
         handled once {once}, twice {twice}, by nobody {nobody}; final term {term}"
    );
}

/// `lease: postgres`: the advisory lock elects one leader; a killed leader's session ends at
/// once and a follower takes over with a higher term, a paused one's after the lease
/// (`idle_session_timeout`), and nothing moves.
#[test]
fn the_postgres_lease_elects_and_hands_over() {
    let redis = RedisServer::start();
    let mut cluster = Cluster::start_with(
        "ha-pg",
        2,
        |_| url_only(&redis.url()),
        "postgres",
        "sources: {file: fleet.yaml}",
    );
    let (leader, term) = cluster.wait_leader(0);
    cluster.wait_settled(&[]);
    // Measured from the kill: the server sees the session end at once.
    cluster.signal(leader, "KILL");
    let killed = Instant::now();
    let (next, next_term) = cluster.wait_leader(term);
    let after_kill = killed.elapsed();
    cluster.kill_reaped(leader);
    assert_ne!(next, leader);
    assert!(
        after_kill < TTL + Duration::from_millis(300),
        "{after_kill:?}"
    );
    assert_eq!(cluster.takeover_moves(next_term), 0);
    cluster.launch(leader);
    cluster.signal(next, "STOP");
    let stopped = Instant::now();
    let (_, paused_term) = cluster.wait_leader(next_term);
    let after_pause = stopped.elapsed();
    assert!(after_pause < TTL * 2, "{after_pause:?}");
    cluster.signal(next, "CONT");
    eventually("the paused leader follows", WAIT, || {
        cluster
            .role(next)
            .is_some_and(|(role, _)| role == "follower")
    });
    assert_eq!(cluster.takeover_moves(paused_term), 0);
    cluster.wait_settled(&[]);
    println!(
        "lease: postgres: SIGKILL → new leader in {after_kill:?} (term {term} → {next_term}); \
         SIGSTOP → new leader in {after_pause:?} (term {paused_term}); moved 0"
    );
}

/// Warm followers: every instance holds its own connection to every OneBot bot (they accept
/// several clients), so the follower that takes over knows the fleet already: its takeover
/// moves nothing, and a bot that goes offline afterwards is noticed and planned for at once.
#[test]
fn followers_run_the_same_onebot_sources() {
    let sims = Sims::forward(&[
        (1001, 100001..=100012),
        (1002, 100001..=100008),
        (1003, 100005..=100012),
    ]);
    let redis = RedisServer::start();
    let sources = format!(
        "sources:\n  onebot:\n    actionTimeout: 2\n    offlineGrace: 1\n    startupWait: 5\n    \
         connections:\n{}",
        sims.connections("")
    );
    let mut cluster = Cluster::start_with(
        "ha-onebot",
        2,
        |_| url_only(&redis.url()),
        "redis",
        &sources,
    );
    let (leader, term) = cluster.wait_leader(0);
    cluster.wait_settled(&[]);
    for bot in &sims.bots {
        assert_eq!(bot.connections(), 2, "one connection per instance");
    }
    cluster.kill(leader);
    let (_, next_term) = cluster.wait_leader(term);
    assert_eq!(cluster.takeover_moves(next_term), 0);
    sims.bot(1003).set_online(false);
    cluster.wait_settled(&["1003"]);
    println!("OneBot sources on 2 instances: takeover moved 0; bot 1003 offline → replanned");
}

/// `redis-cli HGETALL` output (field and value on alternate lines) as a map.
fn hash_of(cli_output: &str) -> BTreeMap<String, String> {
    let lines: Vec<&str> = cli_output.lines().collect();
    lines
        .chunks(2)
        .filter(|pair| pair.len() == 2)
        .map(|pair| (pair[0].to_owned(), pair[1].to_owned()))
        .collect()
}

/// Writes of a term older than the newest, after the newest term's first write (must be 0).
fn stale_writes(history: &[(i64, i64, String, i64)]) -> usize {
    let newest = history.iter().map(|(_, t, ..)| *t).max().unwrap_or(0);
    let Some(first_new) = history.iter().find(|(_, t, ..)| *t == newest) else {
        return 0;
    };
    history
        .iter()
        .filter(|(id, t, ..)| *id > first_new.0 && *t < newest)
        .count()
}

/// Two instances on a real Redis Cluster of three masters, one replica each: the lease, its
/// term, the hashes and the version share the slot of `{auto-assign}` (the only way their
/// scripts can run on a cluster), followers follow the change messages through another node,
/// and the master of that slot killed mid-run fails over to its replica: the next plan is
/// published, nothing stale lands, and the plain key names stay unused.
#[test]
fn on_a_redis_cluster_a_killed_master_fails_over_without_a_stale_write() {
    let mut redis = RedisCluster::start();
    let section = redis.redis_section();
    let cluster = Cluster::start_with(
        "ha-redis-cluster",
        2,
        |_| section.clone(),
        "redis",
        "sources: {file: fleet.yaml}",
    );
    let (leader, term) = cluster.wait_leader(0);
    cluster.wait_settled(&[]);

    let keys = [
        "{auto-assign}:version",
        "{auto-assign}:assignment:onebot",
        "{auto-assign}:leader",
        "{auto-assign}:leader:term",
    ];
    let slots: Vec<String> = keys
        .iter()
        .map(|k| redis.cli(&["CLUSTER", "KEYSLOT", k]))
        .collect();
    assert!(slots.iter().all(|s| *s == slots[0]), "{slots:?}");
    let version: i64 = redis.cli(&["GET", keys[0]]).parse().unwrap();
    assert!(version > 0);
    assert_eq!(hash_of(&redis.cli(&["HGETALL", keys[1]])), cluster.rows());
    let lease = redis.cli(&["GET", keys[2]]);
    assert!(
        lease.starts_with(&format!("{term} ")) && lease.ends_with(["a", "b"][leader]),
        "lease {lease:?}, leader {leader} of term {term}"
    );
    assert_eq!(redis.cli(&["GET", keys[3]]), term.to_string());
    assert_eq!(redis.cli(&["EXISTS", "auto-assign:version"]), "0");

    let master = redis.master_of(keys[0]).unwrap();
    redis.nodes[master].kill();
    let killed = Instant::now();
    cluster.set_fleet(&fleet_with_offline(1003));
    eventually("the replica takes over the slot", WAIT, || {
        redis.master_of(keys[0]).is_some_and(|m| m != master)
    });
    let failed_over = killed.elapsed();
    redis.wait_ok();
    cluster.wait_settled(&["1003"]);
    let settled = killed.elapsed();
    // The instances serve the new plan before its publication lands on the promoted master
    // (the publisher retries on its own schedule): wait for the publication itself.
    let mut after = version;
    eventually("the new plan published after the failover", WAIT, || {
        after = redis.cli(&["GET", keys[0]]).parse().unwrap_or(version);
        after > version && hash_of(&redis.cli(&["HGETALL", keys[1]])) == cluster.rows()
    });
    eventually("one leader", WAIT, || cluster.leaders().len() == 1);
    let history = cluster.history();
    assert_eq!(stale_writes(&history), 0, "stale writes: {history:?}");
    println!(
        "Redis Cluster: master of the publication's slot killed, its replica took over after \
         {failed_over:?}; replanned, published (version {version} → {after}) and followed by \
         every instance {settled:?} after the kill; stale writes 0"
    );
}

/// Two instances behind Sentinel (a master, its replica, three sentinels). The master killed:
/// the sentinels promote the replica and the service follows it. Replication is
/// asynchronous, so the lease may be lost in the failover; the test loses it outright (the
/// lease and its term deleted on the new master) and shows that the SQL term fence still
/// refuses every write of the old leader: 0 stale rows, one leader, the plan published on the
/// new master.
#[test]
fn behind_sentinel_the_service_follows_the_new_master_and_the_fence_holds() {
    let mut redis = RedisSentinel::start();
    let section = redis.redis_section();
    let cluster = Cluster::start_with(
        "ha-sentinel",
        2,
        |_| section.clone(),
        "redis",
        "sources: {file: fleet.yaml}",
    );
    cluster.wait_leader(0);
    cluster.wait_settled(&[]);
    let version: i64 = redis
        .master
        .cli(&["GET", "auto-assign:version"])
        .parse()
        .unwrap();
    assert!(version > 0);

    redis.master.kill();
    let killed = Instant::now();
    eventually("the sentinels promote the replica", WAIT, || {
        redis.master_port() == redis.replica.port
    });
    let promoted = killed.elapsed();
    // What asynchronous replication may lose: the lease and its term.
    redis
        .replica
        .cli(&["DEL", "auto-assign:leader", "auto-assign:leader:term"]);
    cluster.set_fleet(&fleet_with_offline(1003));
    cluster.wait_settled(&["1003"]);
    let settled = killed.elapsed();
    eventually("the new plan published on the new master", WAIT, || {
        let on_new_master: BTreeMap<String, String> = hash_of(
            &redis
                .replica
                .cli(&["HGETALL", "auto-assign:assignment:onebot"]),
        );
        on_new_master == cluster.rows()
    });
    eventually("one leader", WAIT, || cluster.leaders().len() == 1);
    let history = cluster.history();
    assert_eq!(stale_writes(&history), 0, "stale writes: {history:?}");
    println!(
        "Sentinel: master killed, replica promoted after {promoted:?}, lease lost; replanned \
         and published on the new master, followed by every instance, {settled:?} after the \
         kill; stale writes 0"
    );
}

/// An operator's pin and drain on two instances: a follower refuses them with 409 naming the
/// leader's API address (the command line sends them there), the leader applies them, and they
/// hold after the leader is killed (SIGKILL): the new leader loads them at takeover and its
/// first plan keeps them.
#[test]
fn a_pin_made_on_the_leader_survives_a_sigkill_takeover() {
    let redis = RedisServer::start();
    let mut cluster = Cluster::start("ha-pins", 2, |_| redis.url());
    let (leader, term) = cluster.wait_leader(0);
    cluster.wait_settled(&[]);
    let follower = 1 - leader;
    let pin_on = |i: usize| {
        crate::support::put(
            &cluster.url(i, "/v1/pins/onebot/100005"),
            None,
            &serde_json::json!({"bot": "1003", "note": "VIP"}),
        )
    };
    let (status, refused) = pin_on(follower);
    assert_eq!(status, 409, "{refused}");
    assert_eq!(
        refused["leader"]["api"].as_str(),
        Some(cluster.url(leader, "").as_str()),
        "{refused}"
    );
    // The command line, pointed at the follower, is sent to the leader.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_auto-assign"))
        .args(["drain", "1002", "--api", &cluster.url(follower, "")])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("sending it to the leader"), "{stderr}");
    assert!(stdout.starts_with("drained onebot:1002"), "{stdout}");
    let (status, shown) = pin_on(leader);
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["stored"], true, "{shown}");
    let applied = |rows: &BTreeMap<String, String>| {
        rows.get("100005").map(String::as_str) == Some("1003") && rows.values().all(|b| b != "1002")
    };
    // A 200 means stored: the kill comes at once, with nothing waited for.
    cluster.kill(leader);
    let (next, next_term) = cluster.wait_leader(term);
    assert_eq!(next, follower);
    cluster.takeover_moves(next_term);
    let rows = cluster.rows();
    assert!(applied(&rows), "after the takeover: {rows:?}");
    let pins = try_get(&cluster.url(next, "/v1/pins")).unwrap();
    assert_eq!(pins["pins"][0]["channel"], "100005", "{pins}");
    assert_eq!(pins["pins"][0]["state"], "in-force", "{pins}");
    let drains = try_get(&cluster.url(next, "/v1/drains")).unwrap();
    assert_eq!(drains["drains"][0]["bot"], "1002", "{drains}");
    let audit = try_get(&cluster.url(next, "/v1/audit")).unwrap();
    let actions: Vec<&str> = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["action"].as_str())
        .collect();
    assert!(
        actions.contains(&"pin") && actions.contains(&"drain"),
        "{audit}"
    );
    let history = cluster.history();
    assert_eq!(stale_writes(&history), 0, "stale writes: {history:?}");
    println!("pin and drain kept across a SIGKILL takeover (term {term} → {next_term})");
}

/// Messages asked of the instances without a pause, as the bots' processes ask: every group
/// in turn, each online member bot asking one instance (they alternate), counted per phase.
struct Traffic {
    stop: Arc<AtomicBool>,
    phases: Arc<Mutex<Vec<Phase>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a phase's messages must get.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// Every instance serves the same assignment: each message answered once, every group.
    Once,
    /// A bot goes offline: its groups wait for the fleet file to be read (the longest
    /// unanswered interval is printed), and no message is answered twice: a follower that has
    /// not yet seen a forced move sends the group's messages to the claim, which the leader's
    /// new assignee claims too. (Voluntary moves wait for the followers' acknowledgement.)
    Moving,
}

/// What the messages of one phase got.
#[derive(Debug)]
struct Phase {
    name: String,
    expect: Expect,
    started: Instant,
    ended: Option<Instant>,
    once: usize,
    twice: usize,
    nobody: usize,
    /// Per group: when its unanswered messages began, and the longest such interval.
    unanswered_since: BTreeMap<u64, Instant>,
    longest_unanswered: Duration,
    answered_groups: std::collections::BTreeSet<u64>,
}

impl Traffic {
    /// `online()` names the bots that are online now (offline bots get no messages).
    fn start(urls: Vec<String>, online: Arc<Mutex<Vec<u64>>>) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let phases = Arc::new(Mutex::new(vec![Phase::new(
            "settled, before any cut",
            Expect::Once,
        )]));
        let (s, p) = (stop.clone(), phases.clone());
        let thread = std::thread::spawn(move || {
            let mut n: u64 = 0;
            while !s.load(Ordering::SeqCst) {
                n += 1;
                let group = 100001 + n % CHANNELS as u64;
                let members: Vec<u64> = fleet_members(group)
                    .into_iter()
                    .filter(|b| online.lock().unwrap().contains(b))
                    .collect();
                let mut handlers = 0;
                for (k, bot) in members.iter().enumerate() {
                    let url = &urls[(n as usize + k) % urls.len()];
                    let body = json!({"platform": "onebot", "self_id": bot.to_string(),
                        "group_id": group.to_string(), "user_id": 42,
                        "text": format!("hello {n}"), "time": 1786000000, "lane": "chat"});
                    // An instance that does not answer in time: that bot does not answer.
                    let answer = agent()
                        .post(&format!("{url}/v1/ingress"))
                        .send_json(&body)
                        .ok()
                        .and_then(|mut r| r.body_mut().read_to_string().ok())
                        .and_then(|t| serde_json::from_str::<Value>(&t).ok());
                    handlers += usize::from(answer.is_some_and(|a| a["handle"] == json!(true)));
                }
                p.lock().unwrap().last_mut().unwrap().count(group, handlers);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Traffic {
            stop,
            phases,
            thread: Some(thread),
        }
    }

    /// Messages from now on count for the phase `name` (an interval unanswered when the last
    /// one ends counts there, up to its end).
    fn phase(&self, name: &str, expect: Expect) {
        let mut phases = self.phases.lock().unwrap();
        phases.last_mut().unwrap().end();
        phases.push(Phase::new(name, expect));
    }

    /// Waits until every group has been answered in the current phase.
    fn wait_every_group_answered(&self) {
        eventually("every group answered in this phase", WAIT, || {
            self.phases
                .lock()
                .unwrap()
                .last()
                .unwrap()
                .answered_groups
                .len()
                == CHANNELS
        });
    }

    fn finish(mut self) -> Vec<Phase> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap();
        let mut phases = std::mem::take(&mut *self.phases.lock().unwrap());
        phases.last_mut().unwrap().end();
        phases
    }
}

impl Phase {
    fn new(name: &str, expect: Expect) -> Phase {
        Phase {
            name: name.to_owned(),
            expect,
            started: Instant::now(),
            ended: None,
            once: 0,
            twice: 0,
            nobody: 0,
            unanswered_since: BTreeMap::new(),
            longest_unanswered: Duration::ZERO,
            answered_groups: Default::default(),
        }
    }

    fn count(&mut self, group: u64, handlers: usize) {
        match handlers {
            0 => {
                self.nobody += 1;
                self.unanswered_since
                    .entry(group)
                    .or_insert_with(Instant::now);
            }
            n => {
                if n == 1 {
                    self.once += 1;
                } else {
                    self.twice += 1;
                }
                self.answered_groups.insert(group);
                if let Some(since) = self.unanswered_since.remove(&group) {
                    self.longest_unanswered = self.longest_unanswered.max(since.elapsed());
                }
            }
        }
    }

    /// Ends the phase, counting groups still unanswered up to its end.
    fn end(&mut self) {
        let ended = Instant::now();
        self.ended = Some(ended);
        for since in self.unanswered_since.values() {
            self.longest_unanswered = self.longest_unanswered.max(ended - *since);
        }
    }
}

/// FLEET's members of a group.
fn fleet_members(group: u64) -> Vec<u64> {
    match group {
        100001..=100004 => vec![1001, 1002],
        100005..=100008 => vec![1001, 1002, 1003],
        _ => vec![1001, 1003],
    }
}

/// Real partitions: each instance, Redis and PostgreSQL in a network namespace of its own,
/// on its own veth address; links cut (packets dropped silently, both ways) and healed: the
/// leader cut from Redis only, then from the database only (while a bot goes offline), a
/// follower cut from both (while it comes back: the leader holds the voluntary moves back
/// until the follower has acknowledged them), and the instances cut from each other (while
/// another goes offline). Throughout, messages are asked of both instances: none is answered
/// twice, every group is answered in every phase where no bot goes offline, no stale write is
/// accepted and no row is lost; the longest unanswered interval of each phase is printed.
#[test]
fn real_partitions_lose_nothing_and_answer_each_message_once() {
    let mut net = Net::new();
    let (pg_host, redis_host) = (net.host("pg"), net.host("redis"));
    let hosts = [net.host("a"), net.host("b")];
    let pg = Postgres::start_on(&pg_host);
    let redis = RedisServer::start_on(&redis_host);
    let cluster = Cluster::build(
        "ha-partitions",
        pg,
        hosts.iter().cloned().map(Some).collect(),
        |_| url_only(&redis.url()),
        "redis",
        "sources: {file: fleet.yaml}",
    );
    let (mut leader, mut term) = cluster.wait_leader(0);
    cluster.wait_settled(&[]);
    let online = Arc::new(Mutex::new(vec![1001, 1002, 1003]));
    let urls = (0..2).map(|i| cluster.url(i, "")).collect();
    let traffic = Traffic::start(urls, online.clone());
    traffic.wait_every_group_answered();
    let set_online = |fleet: &str, bots: &[u64]| {
        cluster.set_fleet(fleet);
        *online.lock().unwrap() = bots.to_vec();
    };

    traffic.phase("the leader cut from Redis", Expect::Once);
    let cut = Instant::now();
    net.cut(&hosts[leader], &redis_host);
    let (next, next_term) = cluster.wait_leader(term);
    assert_ne!(next, leader, "the leader cut from Redis steps down");
    println!(
        "the leader cut from Redis: one leader again (term {next_term}) {:?} after the cut",
        cut.elapsed()
    );
    (leader, term) = (next, next_term);
    net.heal();
    cluster.wait_settled(&[]);

    traffic.phase(
        "the leader cut from the database, a bot going offline",
        Expect::Moving,
    );
    net.cut(&hosts[leader], &pg_host);
    set_online(&fleet_with_offline(1002), &[1001, 1003]);
    eventually("both instances serve the plan without 1002", WAIT, || {
        (0..2).all(|i| {
            cluster
                .served(i)
                .is_some_and(|rows| rows.len() == CHANNELS && rows.values().all(|b| b != "1002"))
        })
    });
    traffic.phase(
        "the leader cut from the database, both instances serving the new plan",
        Expect::Once,
    );
    eventually("the leader's store failing", WAIT, || {
        try_get(&cluster.url(leader, "/healthz"))
            .is_some_and(|h| h["store"]["committed"] == json!(false))
    });
    traffic.wait_every_group_answered();
    net.heal();
    cluster.wait_settled(&["1002"]);

    // The moves back to 1002 are voluntary: the leader announces them and makes them once the
    // follower has acknowledged, which it cannot while cut. Meanwhile both serve the
    // assignment before them, and every message is answered once.
    traffic.phase(
        "a follower cut from Redis and the database, a bot coming back",
        Expect::Once,
    );
    let follower = 1 - leader;
    let cut = Instant::now();
    net.cut(&hosts[follower], &redis_host);
    net.cut(&hosts[follower], &pg_host);
    set_online(FLEET, &[1001, 1002, 1003]);
    eventually(
        "the leader's moves to 1002 waiting for the follower",
        WAIT,
        || {
            try_get(&cluster.url(leader, "/healthz")).is_some_and(|h| {
                h["publication"]["moving"].as_u64() > Some(0)
                    && h["publication"]["moving_waits_for"]
                        .as_array()
                        .map(Vec::len)
                        == Some(1)
            })
        },
    );
    let rows = cluster.served(leader).unwrap();
    assert!(
        rows.values().all(|b| b != "1002"),
        "the leader made a voluntary move its follower has not seen: {rows:?}"
    );
    net.heal();
    eventually("the leader gives 1002 groups again", WAIT, || {
        cluster
            .served(leader)
            .is_some_and(|rows| rows.values().any(|b| b == "1002"))
    });
    println!(
        "a follower cut: the moves to 1002 made {:?} after the cut, once it was healed",
        cut.elapsed()
    );
    cluster.wait_settled(&[]);
    traffic.phase(
        "healed: the follower serves the leader's plan again",
        Expect::Once,
    );
    traffic.wait_every_group_answered();

    traffic.phase(
        "the instances cut from each other, a bot going offline",
        Expect::Moving,
    );
    net.cut(&hosts[0], &hosts[1]);
    set_online(&fleet_with_offline(1003), &[1001, 1002]);
    cluster.wait_settled(&["1003"]);
    traffic.phase("the instances cut from each other, settled", Expect::Once);
    traffic.wait_every_group_answered();
    assert_eq!(
        cluster.wait_leader(term - 1),
        (leader, term),
        "nothing to take over"
    );
    net.heal();
    set_online(FLEET, &[1001, 1002, 1003]);
    cluster.wait_settled(&[]);
    traffic.phase("healed, 1003 back", Expect::Once);
    traffic.wait_every_group_answered();

    let phases = traffic.finish();
    for phase in &phases {
        println!(
            "{}: {} messages answered once, {} twice, {} by nobody; longest unanswered {:?} \
             (phase of {:?})",
            phase.name,
            phase.once,
            phase.twice,
            phase.nobody,
            phase.longest_unanswered,
            phase.ended.unwrap() - phase.started
        );
    }
    // No message is answered twice in any phase. While every instance serves the same
    // assignment, cut or not, and while voluntary moves wait for a cut follower, every group
    // is answered as well; a bot going offline leaves its groups unanswered until the fleet
    // file is read.
    for phase in &phases {
        assert_eq!(phase.twice, 0, "answered twice in {phase:?}");
    }
    for phase in phases.iter().filter(|p| p.expect == Expect::Once) {
        assert_eq!(
            phase.answered_groups.len(),
            CHANNELS,
            "a group never answered in {phase:?}"
        );
    }
    let history = cluster.history();
    assert_eq!(stale_writes(&history), 0, "stale writes: {history:?}");
    let rows = cluster.rows();
    assert_eq!(rows.len(), CHANNELS, "rows lost: {rows:?}");
    drop(cluster);
    drop(redis);
}

/// A voluntary move waits for every follower's acknowledgement. A follower SIGKILLed cannot
/// give one: the moves to a bot that came back wait, the leader serving the assignment before
/// them, until the dead follower's entry expires (three lease TTLs after its last renewal);
/// then the leader makes them.
#[test]
fn a_killed_follower_holds_voluntary_moves_back_until_its_entry_expires() {
    let redis = RedisServer::start();
    let mut cluster = Cluster::start("ha-dead-follower", 2, |_| redis.url());
    cluster.set_fleet(&fleet_with_offline(1002));
    let (leader, _) = cluster.wait_leader(0);
    cluster.wait_settled(&["1002"]);
    let follower = 1 - leader;
    let name = ["a", "b"][follower];
    cluster.kill(follower);
    let killed = Instant::now();
    cluster.set_fleet(FLEET);
    eventually(
        "the moves to 1002 waiting for the killed follower",
        WAIT,
        || {
            try_get(&cluster.url(leader, "/healthz"))
                .is_some_and(|h| h["publication"]["moving_waits_for"] == json!([name]))
        },
    );
    let rows = cluster.served(leader).unwrap();
    assert!(
        rows.values().all(|b| b != "1002"),
        "a voluntary move made before the follower acknowledged or expired: {rows:?}"
    );
    cluster.wait_settled(&[]);
    assert!(cluster.rows().values().any(|b| b == "1002"));
    let health = try_get(&cluster.url(leader, "/healthz")).unwrap();
    assert_eq!(health["publication"]["moving"], json!(0), "{health}");
    println!(
        "a killed follower: the moves to 1002 made {:?} after the kill (its entry lasts {:?})",
        killed.elapsed(),
        TTL * 3
    );
}

/// A leader that died between announcing its moves and making them left the followers not
/// answering those groups: a new leader announces at once what moves (nothing), and the
/// followers answer every group again.
#[test]
fn a_new_leader_clears_the_moves_a_dead_one_announced() {
    let redis = RedisServer::start();
    let dead = r#"{"token":"0.1","channels":{"onebot":["100001"]}}"#;
    crate::support::redis::cli(redis.port, &["SET", "auto-assign:moving", dead]);
    let cluster = Cluster::start("ha-dead-announcement", 2, |_| redis.url());
    let (leader, _) = cluster.wait_leader(0);
    cluster.wait_settled(&[]);
    let follower = 1 - leader;
    let assignee = cluster.rows()["100001"].clone();
    eventually("the follower answers group 100001 again", WAIT, || {
        let mut response = agent()
            .post(&cluster.url(follower, "/v1/ingress"))
            .send_json(json!({"platform": "onebot", "self_id": assignee,
                "group_id": "100001", "user_id": 42, "text": "hello", "time": 1786000000,
                "lane": "chat"}))
            .unwrap();
        let answer: Value =
            serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
        answer["handle"] == json!(true)
    });
    let announced = crate::support::redis::cli(redis.port, &["GET", "auto-assign:moving"]);
    assert!(!announced.contains("100001"), "{announced}");
}

/// Asks of one message that straddle a voluntary move, at two instances, are answered once:
/// while the move is announced every instance answers the group only by the message's claim
/// in Redis, won by the old assignee, and the new assignee claims each message too once it
/// has the group. A third instance, killed, holds the move back until its entry expires: long
/// enough to ask in the window at the leader and at the live follower.
#[test]
fn asks_straddling_a_voluntary_move_at_two_instances_are_answered_once() {
    let redis = RedisServer::start();
    let mut cluster = Cluster::start("ha-straddling", 3, |_| redis.url());
    cluster.set_fleet(&fleet_with_offline(1002));
    let (leader, _) = cluster.wait_leader(0);
    cluster.wait_settled(&["1002"]);
    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let (follower, killed) = (others[0], others[1]);
    cluster.kill(killed);
    cluster.set_fleet(FLEET);
    let cli = |args: &[&str]| crate::support::redis::cli(redis.port, args);
    let follower_name = ["a", "b", "c"][follower];
    // The announcement, once the live follower serves it (its acknowledgement names its token).
    let mut announced = Value::Null;
    eventually("the live follower acknowledging the moves", WAIT, || {
        announced = serde_json::from_str(&cli(&["GET", "auto-assign:moving"])).unwrap_or_default();
        let token = announced["token"].as_str().unwrap_or("");
        let channels = announced["channels"]["onebot"]
            .as_array()
            .map_or(0, Vec::len);
        let ack = cli(&["HGET", "auto-assign:followers", follower_name]);
        channels > 0 && ack.starts_with(&format!("{token} "))
    });
    let group = announced["channels"]["onebot"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let old = cluster.served(leader).unwrap()[&group].clone();
    assert_ne!(old, "1002");
    let ask = |instance: usize, bot: &str, text: &str| -> Value {
        let body = json!({"platform": "onebot", "self_id": bot, "group_id": group,
            "user_id": 42, "text": text, "time": 1786000000, "lane": "chat"});
        let mut response = agent()
            .post(&cluster.url(instance, "/v1/ingress"))
            .send_json(&body)
            .unwrap();
        serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap()
    };
    let handled = |answer: &Value| answer["handle"] == json!(true);

    // In the window: the old assignee answers by claim at either instance, the new one not.
    for (instance, text) in [(follower, "first"), (leader, "second")] {
        let answer = ask(instance, &old, text);
        assert!(handled(&answer), "{answer}");
        assert_eq!(answer["kind"], json!("claim"), "{answer}");
        assert!(!handled(&ask(instance, "1002", &format!("{text}, early"))));
    }
    eventually("the move made on both live instances", WAIT, || {
        [leader, follower]
            .iter()
            .all(|&i| cluster.served(i).is_some_and(|rows| rows[&group] == "1002"))
    });
    // After it, each message the old assignee answered stays its own, at the other instance.
    for (instance, text) in [(leader, "first"), (follower, "second")] {
        let answer = ask(instance, "1002", text);
        assert!(!handled(&answer), "{answer}");
        assert_eq!(answer["kind"], json!("claim"), "{answer}");
    }
    let answer = ask(follower, "1002", "third");
    assert!(
        handled(&answer),
        "a new message goes to the new assignee: {answer}"
    );
}
