//! The Python consumer of the docs (docs/operations.md, "Redis publication"), run as written
//! with redis-py against the service's publication: on one redis-server, and on a real Redis
//! Cluster with the docs' cluster line (`redis.RedisCluster`, the `{auto-assign}` tag). The
//! consumer starts on a settled fleet, then a bot goes offline: it must apply the change
//! messages and end with the service's assignment and version.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::redis::RedisCluster;
use crate::support::{FLEET, InProcess, RedisServer, TempDir, fleet_with_offline, get};

const REDIS_PY: &str = "redis==8.2.0";
const WAIT: Duration = Duration::from_secs(30);

/// A venv with redis-py, made once per target directory (built aside and renamed into place,
/// since the tests run side by side; `bin/python -m` works from the moved venv). The tests of
/// this process build it one at a time: two threads building one aside directory broke each
/// other's `pip install` on a fresh machine.
fn python() -> PathBuf {
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("redis-py-8.2.0");
    if !venv.join(".installed").exists() {
        let aside = venv.with_file_name(format!("redis-py-8.2.0.tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&aside);
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&aside)
            .status()
            .expect("python3 (scripts/test.sh installs python3-venv)");
        assert!(made.success(), "python3 -m venv");
        let installed = Command::new(aside.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg(REDIS_PY)
            .status()
            .unwrap();
        assert!(installed.success(), "pip install {REDIS_PY}");
        std::fs::write(aside.join(".installed"), REDIS_PY).unwrap();
        // Whoever renames first wins; the other's copy is dropped.
        if std::fs::rename(&aside, &venv).is_err() {
            let _ = std::fs::remove_dir_all(&aside);
        }
    }
    venv.join("bin/python")
}

/// The docs' consumer, its first two lines replaced by `connect` (how to reach this Redis).
fn consumer(connect: &str) -> String {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap();
    let section = &docs[docs.find("## Redis publication").unwrap()..];
    let block = section.split("```python\n").nth(1).unwrap();
    let code = block.split("```").next().unwrap();
    let lines: Vec<&str> = code.lines().collect();
    assert!(
        lines[0] == "import json, redis" && lines[1].starts_with("r = redis.Redis("),
        "the docs' consumer changed: {code}"
    );
    format!("import json, redis\n{connect}\n{}\n", lines[2..].join("\n"))
}

/// The docs' cluster line, from the cluster part of the docs.
fn cluster_line(port: u16) -> String {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap();
    let line = docs
        .lines()
        .find(|l| l.starts_with("r = redis.RedisCluster("))
        .expect("the docs show a cluster consumer");
    assert!(line.contains("host=\"n1\", port=7000"), "{line}");
    line.replace(
        "host=\"n1\", port=7000",
        &format!("host=\"127.0.0.1\", port={port}"),
    )
}

/// Runs `code` in a thread of a Python process that prints `[version, assignment]` whenever
/// they change; the lines arrive on the returned channel.
fn run_consumer(dir: &TempDir, code: &str) -> (std::process::Child, mpsc::Receiver<String>) {
    let script = dir.write("consumer.py", code);
    let runner = dir.write(
        "runner.py",
        "import json, sys, threading, time\n\
         ns = {}\n\
         code = open(sys.argv[1]).read()\n\
         threading.Thread(target=exec, args=(code, ns), daemon=True).start()\n\
         last = None\n\
         while True:\n\
         \x20   now = json.dumps([ns.get('version'), ns.get('assignment')], sort_keys=True)\n\
         \x20   if now != last:\n\
         \x20       print(now, flush=True); last = now\n\
         \x20   time.sleep(0.05)\n",
    );
    let mut child = Command::new(python())
        .arg(&runner)
        .arg(&script)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// Waits until the consumer prints `version` and `assignment`; returns how many states it went
/// through.
fn wait_for(rx: &mpsc::Receiver<String>, version: i64, assignment: &BTreeMap<String, String>) {
    let want = serde_json::json!([version, assignment]);
    let until = Instant::now() + WAIT;
    let mut seen = Vec::new();
    while Instant::now() < until {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            let state: serde_json::Value = serde_json::from_str(&line).unwrap();
            if state == want {
                return;
            }
            seen.push(line);
        }
    }
    panic!("the consumer never reached {want}; it printed {seen:#?}");
}

/// The publication's version in Redis (`version`) and the service's assignment.
fn published(service: &InProcess, version: &dyn Fn() -> i64) -> (i64, BTreeMap<String, String>) {
    let (_, assignments) = get(&format!("{}/v1/assignments", service.api), None);
    let assignment = serde_json::from_value(assignments["onebot"].clone()).unwrap();
    (version(), assignment)
}

/// `version` reads the version key, as `redis-cli` sees it.
fn check(name: &str, redis_section: &str, connect: &str, version: &dyn Fn() -> i64) {
    let dir = TempDir::new(name);
    dir.write("fleet.yaml", FLEET);
    let config = dir.write(
        "config.yaml",
        &format!(
            "balanceInterval: 600\n\
             triggerDelays: {{startup: 0, botStatus: 0, botOnline: 0, botOffline: 0, channelJoined: 0, channelLeft: 0}}\n\
             sources: {{file: fleet.yaml}}\ndatabase: {{url: \"sqlite://state.db\"}}\n\
             api: {{bind: \"127.0.0.1:0\"}}\nredis: {redis_section}\n"
        ),
    );
    let service = InProcess::start(&config);
    service.wait_runs(1, WAIT);
    crate::support::eventually("published", WAIT, || published(&service, version).0 > 0);
    let (first, assignment) = published(&service, version);
    assert_eq!(assignment.len(), 12);

    let (mut child, rx) = run_consumer(&dir, &consumer(connect));
    wait_for(&rx, first, &assignment);
    dir.write("fleet.yaml", &fleet_with_offline(1003));
    crate::support::eventually("1003's channels moved", WAIT, || {
        let (v, a) = published(&service, version);
        v > first && a.len() == 12 && a.values().all(|b| b != "1003")
    });
    let (after, moved) = published(&service, version);
    wait_for(&rx, after, &moved);
    let _ = child.kill();
    let _ = child.wait();
    println!("{name}: the docs' consumer followed versions {first} → {after}");
}

#[test]
fn the_docs_consumer_follows_one_redis() {
    let redis = RedisServer::start();
    check(
        "consumer-single",
        &format!("{{url: \"{}\"}}", redis.url()),
        &format!(
            "r = redis.Redis(port={}, decode_responses=True); P = \"auto-assign\"",
            redis.port
        ),
        &|| {
            redis
                .cli(&["GET", "auto-assign:version"])
                .parse()
                .unwrap_or(0)
        },
    );
}

#[test]
fn the_docs_cluster_consumer_follows_a_redis_cluster() {
    let cluster = RedisCluster::start();
    check(
        "consumer-cluster",
        &cluster.redis_section(),
        &cluster_line(cluster.nodes[0].port),
        &|| {
            cluster
                .cli(&["GET", "{auto-assign}:version"])
                .parse()
                .unwrap_or(0)
        },
    );
}
