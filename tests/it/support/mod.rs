//! What the integration tests share: temporary directories, waiting on a condition, HTTP
//! helpers, and (in the modules) the service in process or as the real binary ([`service`]),
//! real PostgreSQL and MariaDB servers and the database as an operator reads it ([`sql`]), real
//! Redis servers, clusters and sentinels ([`redis`]), a throwaway CA ([`ca`]), and the property
//! tests' fleets, with their seeded generator, index and rules ([`fleets`]). Servers start on
//! free loopback ports, in directories of their own, and stop when dropped.

pub mod ca;
pub mod fleets;
pub mod netns;
pub mod redis;
pub mod service;
pub mod sql;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use redis::RedisServer;
pub use service::{InProcess, Service, Sims, rss_kib};
pub use sql::{Db, MariaDb, Postgres};

/// Three file-source bots in 12 groups, 4 groups each in a balanced assignment.
pub const FLEET: &str = "\
bots:
  - id: 1001
    channels: [100001, 100002, 100003, 100004, 100005, 100006, 100007, 100008, 100009, 100010, 100011, 100012]
  - id: 1002
    channels: [100001, 100002, 100003, 100004, 100005, 100006, 100007, 100008]
  - id: 1003
    channels: [100005, 100006, 100007, 100008, 100009, 100010, 100011, 100012]
";

/// [`FLEET`] with `bot` offline.
pub fn fleet_with_offline(bot: u64) -> String {
    let entry = format!("  - id: {bot}\n");
    assert!(FLEET.contains(&entry), "bot {bot} is not in FLEET");
    FLEET.replace(&entry, &format!("{entry}    online: false\n"))
}

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "auto-assign-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.join(name);
        // Write then rename, as editors do: the watcher must see a complete file.
        let tmp = self.join(&format!(".{name}.tmp"));
        std::fs::write(&tmp, content).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    auto_assign::testkit::procs::free_port().unwrap()
}

/// Stops the test with what to install when a server the tests need is missing, rather than
/// with a spawn error deep in a helper.
pub fn installed(program: &str, package: &str) {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()));
    assert!(
        on_path,
        "`{program}` is not installed: the tests start their own servers. Install it \
         (`apt-get install {package}`) or run `scripts/test.sh`, which installs what they need."
    );
}

/// Whether the tests run as root (servers that refuse root need telling).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false)
}

/// Runs `f` to completion on a runtime of its own (the database tests' async work).
pub fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Waits until `f` holds, polling; panics with `what` after `timeout`.
pub fn eventually(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out: {what}");
}

/// A blocking HTTP client that returns error statuses instead of failing.
pub fn http() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build(),
    )
}

/// A request with the token, if any.
fn authorized(
    req: ureq::RequestBuilder<ureq::typestate::WithBody>,
    token: Option<&str>,
) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
    match token {
        Some(t) => req.header("Authorization", &format!("Bearer {t}")),
        None => req,
    }
}

/// The status and the body read as JSON (a string when it is not).
fn json_answer(mut resp: ureq::http::Response<ureq::Body>) -> (u16, serde_json::Value) {
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// POSTs JSON; returns (status, JSON body).
pub fn post(url: &str, token: Option<&str>, body: &serde_json::Value) -> (u16, serde_json::Value) {
    json_answer(authorized(http().post(url), token).send_json(body).unwrap())
}

/// PUTs JSON; returns (status, JSON body).
pub fn put(url: &str, token: Option<&str>, body: &serde_json::Value) -> (u16, serde_json::Value) {
    json_answer(authorized(http().put(url), token).send_json(body).unwrap())
}

/// DELETEs; returns (status, JSON body).
pub fn delete(url: &str, token: Option<&str>) -> (u16, serde_json::Value) {
    let req = http().delete(url);
    let req = match token {
        Some(t) => req.header("Authorization", &format!("Bearer {t}")),
        None => req,
    };
    json_answer(req.call().unwrap())
}

/// PUTs a raw body with a JSON content type.
pub fn put_raw(url: &str, token: Option<&str>, body: &str) -> (u16, serde_json::Value) {
    let req = http().put(url).header("Content-Type", "application/json");
    json_answer(authorized(req, token).send(body).unwrap())
}

/// POSTs a raw body with a JSON content type.
pub fn post_raw(url: &str, token: Option<&str>, body: &str) -> (u16, serde_json::Value) {
    let req = http().post(url).header("Content-Type", "application/json");
    json_answer(authorized(req, token).send(body).unwrap())
}

pub fn get(url: &str, token: Option<&str>) -> (u16, serde_json::Value) {
    json_answer(get_response(url, token))
}

/// GETs a text body (metrics); returns (status, text).
pub fn get_text(url: &str, token: Option<&str>) -> (u16, String) {
    let mut resp = get_response(url, token);
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_to_string().unwrap_or_default())
}

fn get_response(url: &str, token: Option<&str>) -> ureq::http::Response<ureq::Body> {
    let mut req = http().get(url);
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    req.call().unwrap()
}
