//! Test support: temporary directories, the real service binary, and real PostgreSQL and
//! MariaDB servers started on free loopback ports.
#![allow(dead_code)]

pub mod ca;
pub mod topologies;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// The service started in this process (`service::start`), on its own runtime: tests learn
/// its addresses from it, and its state from the API and the database, never from a log.
pub struct InProcess {
    rt: Option<tokio::runtime::Runtime>,
    running: Option<auto_assign::service::Running>,
    /// `http://127.0.0.1:port` of the API.
    pub api: String,
    /// The reverse OneBot server's address, if configured.
    pub onebot: Option<std::net::SocketAddr>,
}

impl InProcess {
    /// Starts on the config file at `path` with the system clock; panics if it cannot.
    pub fn start(path: &Path) -> InProcess {
        Self::try_start(path, auto_assign::service::Clock::system())
            .unwrap_or_else(|e| panic!("the service did not start: {e}"))
    }

    pub fn try_start(
        path: &Path,
        clock: auto_assign::service::Clock,
    ) -> Result<InProcess, auto_assign::service::ServeError> {
        let config = auto_assign::config::Config::load(path)?;
        Self::try_start_config(config, clock)
    }

    /// Starts on a config built (or adjusted) by the test.
    pub fn start_config(
        config: auto_assign::config::Config,
        clock: auto_assign::service::Clock,
    ) -> InProcess {
        Self::try_start_config(config, clock)
            .unwrap_or_else(|e| panic!("the service did not start: {e}"))
    }

    fn try_start_config(
        config: auto_assign::config::Config,
        clock: auto_assign::service::Clock,
    ) -> Result<InProcess, auto_assign::service::ServeError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let running = rt.block_on(auto_assign::service::start(config, clock))?;
        let api = running
            .api_addr
            .map(|a| format!("http://{a}"))
            .unwrap_or_default();
        let onebot = running.onebot_addr;
        Ok(InProcess {
            rt: Some(rt),
            running: Some(running),
            api,
            onebot,
        })
    }

    /// A clean stop; `Err` when writes were lost.
    pub fn stop(mut self) -> Result<(), auto_assign::service::ServeError> {
        let running = self.running.take().expect("running");
        running.stop();
        self.rt.as_ref().unwrap().block_on(running.stopped())
    }

    /// Ends it like a crash (SIGKILL): every task dropped, no goodbye, no flush.
    pub fn kill(mut self) {
        self.running.take();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }

    /// `GET /v1/status`.
    pub fn status(&self) -> serde_json::Value {
        get(&format!("{}/v1/status", self.api), None).1
    }

    /// The number of rebalances run so far.
    pub fn runs(&self) -> u64 {
        self.status()["last_run"]["number"].as_u64().unwrap_or(0)
    }

    /// Waits until at least `n` rebalances have run.
    pub fn wait_runs(&self, n: u64, timeout: Duration) {
        eventually(&format!("{n} rebalance(s)"), timeout, || self.runs() >= n);
    }

    /// Runs `f` on the service's runtime (for tokio-based helpers).
    pub fn block_on<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.rt.as_ref().unwrap().block_on(f)
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let (Some(running), Some(rt)) = (self.running.take(), self.rt.as_ref()) {
            running.stop();
            let _ = rt.block_on(running.stopped());
        }
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    auto_assign::testkit::procs::free_port().unwrap()
}

/// The `auto-assign` binary running `serve`, with its log captured.
pub struct Service {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    /// Reads stderr into `log`; it ends when the process has exited and the pipe is drained.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Service {
    pub fn start(config: &Path) -> Service {
        Service::start_with_env(config, &[])
    }

    /// [`Service::start`] with these environment variables set as well.
    pub fn start_with_env(config: &Path, vars: &[(&str, &str)]) -> Service {
        let mut child = Command::new(env!("CARGO_BIN_EXE_auto-assign"))
            .args(["serve", "--config"])
            .arg(config)
            .env("RUST_LOG", "info")
            .envs(vars.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start auto-assign serve");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Service {
            child,
            log,
            reader: Some(reader),
        }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The captured log, still readable after [`Service::stop`].
    pub fn log_handle(&self) -> Arc<Mutex<Vec<String>>> {
        self.log.clone()
    }

    pub fn count(&self, needle: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Waits until the log has `n` lines containing `needle`; panics with the log otherwise.
    pub fn wait_for(&self, needle: &str, n: usize, timeout: Duration) {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if self.count(needle) >= n {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "timed out waiting for {n}× {needle:?}; log:\n{}",
            self.log()
        );
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Asserts that the service reports `needle` in its log (it may take a moment to arrive
    /// through the pipe). For what the service *says*; states are learnt from the API or the
    /// database.
    pub fn expect_log(&self, needle: &str) {
        self.wait_for(needle, 1, Duration::from_secs(30));
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn stop(mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        self.wait(Duration::from_secs(30))
    }

    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let until = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The last lines may still be in the pipe: the log is whole once it is drained.
                if let Some(reader) = self.reader.take() {
                    let _ = reader.join();
                }
                return status;
            }
            assert!(
                Instant::now() < until,
                "service did not exit; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident memory of a process, in KiB (Linux).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A throwaway PostgreSQL 15 server on a free loopback port (run as the `postgres` user when
/// the tests run as root, since PostgreSQL refuses to run as root).
pub struct Postgres {
    dir: TempDir,
    pub port: u16,
}

impl Postgres {
    pub fn start() -> Postgres {
        Postgres::start_with(None)
    }

    /// With TLS only: `ssl = on` with `server`'s certificate and key, `postgres`'s password
    /// `password` (SCRAM), and `pg_hba.conf` letting TCP connections in over TLS only (a
    /// plain one is refused; the local socket stays `trust`).
    pub fn start_tls(server: &ca::CertFiles, password: &str) -> Postgres {
        Postgres::start_with(Some((server, password)))
    }

    fn start_with(tls: Option<(&ca::CertFiles, &str)>) -> Postgres {
        let dir = TempDir::new("pg");
        let data = dir.join("data");
        // The server's own copies, in its directory: owned by the user it runs as (the chown
        // below), the key 0600, as PostgreSQL requires.
        if let Some((server, password)) = tls {
            std::fs::copy(&server.cert, dir.join("server.crt")).unwrap();
            std::fs::copy(&server.key, dir.join("server.key")).unwrap();
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(
                dir.join("server.key"),
                std::fs::Permissions::from_mode(0o600),
            )
            .unwrap();
            std::fs::write(dir.join("pwfile"), password).unwrap();
        }
        let as_root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout == b"0\n")
            .unwrap_or(false);
        if as_root {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(status.success());
        }
        let run = |args: &[&str]| {
            let bin = find_pg_bin(args[0]);
            let mut cmd = if as_root {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(bin);
                c
            } else {
                Command::new(bin)
            };
            let out = cmd
                .args(&args[1..])
                .output()
                .expect("run a PostgreSQL tool");
            assert!(
                out.status.success(),
                "{args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let pwfile = format!("--pwfile={}", dir.join("pwfile").display());
        let mut initdb = vec![
            "initdb",
            "-D",
            data.to_str().unwrap(),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ];
        if tls.is_some() {
            initdb.push(&pwfile);
        }
        run(&initdb);
        if tls.is_some() {
            // Appended to and rewritten in place: the files keep their owner.
            use std::io::Write as _;
            let mut conf = std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("postgresql.conf"))
                .unwrap();
            write!(
                conf,
                "\nssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
                dir.join("server.crt").display(),
                dir.join("server.key").display()
            )
            .unwrap();
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\n\
                 hostssl all all 127.0.0.1/32 scram-sha-256\n\
                 hostnossl all all 127.0.0.1/32 reject\n",
            )
            .unwrap();
        }
        let port = free_port();
        let options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            dir.path().display()
        );
        run(&[
            "pg_ctl",
            "-D",
            data.to_str().unwrap(),
            "-o",
            &options,
            "-l",
            dir.join("log").to_str().unwrap(),
            "-w",
            "start",
        ]);
        Postgres { dir, port }
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server (it can be started again with [`Postgres::restart`]).
    pub fn stop(&self) {
        self.pg_ctl(&["-m", "immediate", "stop"]);
    }

    pub fn restart(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        self.pg_ctl(&[
            "-o",
            &options,
            "-l",
            self.dir.join("log").to_str().unwrap(),
            "-w",
            "start",
        ]);
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.dir.join("data");
        let as_root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout == b"0\n")
            .unwrap_or(false);
        let bin = find_pg_bin("pg_ctl");
        let mut cmd = if as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(bin);
            c
        } else {
            Command::new(bin)
        };
        let _ = cmd.arg("-D").arg(&data).args(args).output();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}

fn find_pg_bin(name: &str) -> PathBuf {
    for dir in ["/usr/lib/postgresql/15/bin", "/usr/local/bin", "/usr/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    installed(name, "postgresql");
    PathBuf::from(name)
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
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false)
}

/// A throwaway MariaDB server on a free loopback port: a fresh data directory in a temporary
/// directory, its own socket file, no grant tables (any user, no password), stopped on drop.
pub struct MariaDb {
    dir: TempDir,
    child: Option<Child>,
    pub port: u16,
    /// The server's certificate and its CA, when it requires TLS.
    tls: Option<(ca::CertFiles, PathBuf)>,
}

impl MariaDb {
    pub fn start() -> MariaDb {
        MariaDb::start_with(None)
    }

    /// With TLS required (`require_secure_transport`): `server`'s certificate and key, and
    /// `ca` (PEM) for client certificates. A plain connection is refused. Grant tables are
    /// real here (`--skip-grant-tables` would skip the transport check too): `root` connects
    /// from 127.0.0.1 without a password; [`MariaDb::create_user`] makes others.
    pub fn start_tls(server: &ca::CertFiles, ca: &Path) -> MariaDb {
        MariaDb::start_with(Some((server.clone(), ca.to_owned())))
    }

    /// A user with every privilege, from anywhere, with this password (TLS servers only).
    pub fn create_user(&self, user: &str, password: &str) {
        let server = format!("mysql://root@127.0.0.1:{}", self.port);
        block_on(async {
            let pool = Db::mysql(&server).await;
            for sql in [
                format!("CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'"),
                format!("GRANT ALL PRIVILEGES ON *.* TO '{user}'@'%'"),
            ] {
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .execute(&pool)
                    .await
                    .unwrap();
            }
        });
    }

    fn start_with(tls: Option<(ca::CertFiles, PathBuf)>) -> MariaDb {
        let mut server = MariaDb {
            dir: TempDir::new("mariadb"),
            child: None,
            port: free_port(),
            tls,
        };
        std::fs::create_dir_all(server.dir.join("data")).unwrap();
        // Each server's own temporary directory: servers installed side by side in the
        // system's one clash on its `#sql-temptable-…` files.
        std::fs::create_dir_all(server.dir.join("tmp")).unwrap();
        if server.tls.is_some() {
            let mut install = Command::new("mariadb-install-db");
            install
                .arg("--no-defaults")
                .arg(format!("--datadir={}", server.dir.join("data").display()))
                .arg(format!("--tmpdir={}", server.dir.join("tmp").display()))
                .env("TMPDIR", server.dir.join("tmp"))
                .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
            if is_root() {
                install.arg("--user=root");
            }
            let out = install
                .output()
                .expect("mariadb-install-db (mariadb-server)");
            assert!(
                out.status.success(),
                "mariadb-install-db: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        server.restart();
        server
    }

    /// `mysql://root@127.0.0.1:port/{database}`.
    pub fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates a database and returns its URL.
    pub fn create_database(&self, name: &str) -> String {
        let server = format!("mysql://root@127.0.0.1:{}", self.port);
        block_on(async {
            let pool = Db::mysql(&server).await;
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
                .execute(&pool)
                .await
                .unwrap();
        });
        self.url(name)
    }

    /// Starts (again) on the same port and data directory.
    pub fn restart(&mut self) {
        self.stop();
        let mut cmd = Command::new(find_mariadbd());
        // --no-defaults first: nothing from /etc/mysql (its socket, user, datadir).
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg(format!("--tmpdir={}", self.dir.join("tmp").display()))
            .arg("--bind-address=127.0.0.1")
            .arg(format!(
                "--socket={}",
                self.dir.join("mysqld.sock").display()
            ))
            .arg(format!(
                "--pid-file={}",
                self.dir.join("mysqld.pid").display()
            ))
            .arg(format!(
                "--log-error={}",
                self.dir.join("error.log").display()
            ))
            .args(if self.tls.is_some() {
                &[][..]
            } else {
                &["--skip-grant-tables"][..]
            })
            .args([
                "--skip-name-resolve",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=16M",
                "--innodb-log-file-size=8M",
                // Each commit reaches the OS: durable when the server is killed.
                "--innodb-flush-log-at-trx-commit=2",
            ]);
        if is_root() {
            cmd.arg("--user=root");
        }
        if let Some((server, ca)) = &self.tls {
            cmd.arg(format!("--ssl-cert={}", server.cert.display()))
                .arg(format!("--ssl-key={}", server.key.display()))
                .arg(format!("--ssl-ca={}", ca.display()))
                .arg("--require-secure-transport=ON");
        }
        // The server's time zone (`SYSTEM`, which the service's sessions keep) made definite.
        cmd.env("TZ", "UTC").env("TMPDIR", self.dir.join("tmp"));
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mariadbd (scripts/test.sh installs mariadb-server)");
        self.child = Some(child);
        let server = format!("mysql://root@127.0.0.1:{}", self.port);
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = block_on(async {
                match sqlx::MySqlPool::connect(&server).await {
                    Ok(pool) => sqlx::query("SELECT 1").execute(&pool).await.is_ok(),
                    Err(_) => false,
                }
            });
            if ready {
                return;
            }
            let log = std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default();
            let exited = self
                .child
                .as_mut()
                .is_some_and(|c| c.try_wait().unwrap().is_some());
            assert!(
                !exited && Instant::now() < until,
                "mariadbd did not start; its log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.stop();
    }
}

fn find_mariadbd() -> PathBuf {
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"] {
        let p = Path::new(dir).join("mariadbd");
        if p.exists() {
            return p;
        }
    }
    installed("mariadbd", "mariadb-server");
    PathBuf::from("mariadbd")
}

/// The service's database, read the way an operator would.
#[derive(Clone, Debug)]
pub enum Db {
    Sqlite(PathBuf),
    Postgres(String),
    /// MySQL / MariaDB.
    Mysql(String),
}

/// One history record: (causes, channels, forced, voluntary).
pub type HistoryRow = (String, i64, i64, i64);

/// Runs `$body` on a fresh connection pool of `$db`, bound to `$pool` (one expression, compiled
/// once per backend).
macro_rules! with_pool {
    ($db:expr, |$pool:ident| $body:expr) => {
        block_on(async {
            match $db {
                Db::Sqlite(path) => {
                    let $pool = Db::sqlite(path).await;
                    $body
                }
                Db::Postgres(url) => {
                    let $pool = sqlx::PgPool::connect(url).await.unwrap();
                    $body
                }
                Db::Mysql(url) => {
                    let $pool = Db::mysql(url).await;
                    $body
                }
            }
        })
    };
}

/// Runs `f` to completion on a runtime of its own (the database tests' async work).
pub fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

impl Db {
    async fn sqlite(path: &Path) -> sqlx::SqlitePool {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .busy_timeout(Duration::from_secs(10));
        sqlx::SqlitePool::connect_with(options).await.unwrap()
    }

    /// In the server's time zone, as the service connects (`createdAt` is a zoneless
    /// `datetime(3)` there).
    async fn mysql(url: &str) -> sqlx::MySqlPool {
        use std::str::FromStr as _;
        let options = sqlx::mysql::MySqlConnectOptions::from_str(url)
            .unwrap()
            .timezone(None);
        sqlx::MySqlPool::connect_with(options).await.unwrap()
    }

    /// channel id → assignee, for one platform.
    pub fn channels(&self, platform: &str) -> std::collections::BTreeMap<String, String> {
        let sql = match self {
            Db::Mysql(_) => "SELECT id, assignee FROM channel WHERE platform = ?",
            _ => "SELECT id, assignee FROM channel WHERE platform = $1",
        };
        let rows: Vec<(String, String)> = with_pool!(self, |pool| sqlx::query_as(sql)
            .bind(platform)
            .fetch_all(&pool)
            .await
            .unwrap());
        rows.into_iter().collect()
    }

    /// Every rebalance record, oldest first (none while the table does not exist yet).
    pub fn history(&self) -> Vec<HistoryRow> {
        let sql = "SELECT causes, channels, moved_forced, moved_voluntary FROM auto_assign_rebalance ORDER BY id";
        with_pool!(self, |pool| sqlx::query_as(sql)
            .fetch_all(&pool)
            .await
            .unwrap_or_default())
    }

    /// Every history record's platforms and their gaps, oldest first.
    pub fn gaps(&self) -> Vec<(String, Option<f64>)> {
        let sql = "SELECT platform, gap FROM auto_assign_rebalance_platform \
                   ORDER BY rebalance_id, platform";
        with_pool!(self, |pool| sqlx::query_as(sql)
            .fetch_all(&pool)
            .await
            .unwrap())
    }

    /// A column's type as the database reports it (`varchar(255)`, `TEXT`, ...).
    pub fn column_type(&self, table: &str, column: &str) -> String {
        let sql = match self {
            Db::Sqlite(_) => "SELECT type FROM pragma_table_info($1) WHERE name = $2",
            Db::Postgres(_) => {
                "SELECT data_type || coalesce('(' || character_maximum_length || ')', '') \
                 FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2"
            }
            Db::Mysql(_) => {
                "SELECT CAST(COLUMN_TYPE AS CHAR) FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?"
            }
        };
        with_pool!(self, |pool| sqlx::query_scalar(sql)
            .bind(table)
            .bind(column)
            .fetch_one(&pool)
            .await
            .unwrap_or_else(|e| panic!("{table}.{column}: {e}")))
    }

    /// Runs a statement (to set up rows as Koishi would have).
    pub fn execute(&self, sql: &'static str) {
        with_pool!(self, |pool| {
            sqlx::query(sql).execute(&pool).await.unwrap();
        })
    }

    /// Koishi's other columns of one row: (flag, locales comma-joined, createdAt in ms), in
    /// whichever layout the database has them (text lists and ms on SQLite; `text[]` and
    /// `timestamptz` on PostgreSQL; text and `datetime(3)` on MySQL).
    pub fn koishi_columns(&self, platform: &str, id: &str) -> (i64, String, Option<i64>) {
        let sql = match self {
            Db::Sqlite(_) => {
                r#"SELECT flag, locales, "createdAt" FROM channel WHERE platform = $1 AND id = $2"#
            }
            Db::Postgres(_) => {
                r#"SELECT flag, array_to_string(locales, ','),
                          round(extract(epoch FROM "createdAt") * 1000)::bigint
                   FROM channel WHERE platform = $1 AND id = $2"#
            }
            Db::Mysql(_) => {
                "SELECT CAST(flag AS SIGNED), locales,
                        CAST(ROUND(UNIX_TIMESTAMP(createdAt) * 1000) AS SIGNED)
                 FROM channel WHERE platform = ? AND id = ?"
            }
        };
        with_pool!(self, |pool| sqlx::query_as(sql)
            .bind(platform)
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap())
    }
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

/// Simulated OneBot bots on their own runtime (so tests can block while they keep talking).
pub struct Sims {
    pub rt: tokio::runtime::Runtime,
    pub bots: Vec<auto_assign::testkit::sim::SimBot>,
    /// Forward-mode urls, in `bots` order (empty for bots that only dial).
    pub urls: Vec<String>,
}

impl Sims {
    /// Bots serving forward connections, heartbeating every 200 ms.
    pub fn forward(specs: &[(u64, std::ops::RangeInclusive<u64>)]) -> Sims {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut bots = Vec::new();
        let mut urls = Vec::new();
        for (id, groups) in specs {
            let bot = auto_assign::testkit::sim::SimBot::new(*id, groups.clone());
            bot.set_heartbeat_interval(Duration::from_millis(200));
            urls.push(rt.block_on(bot.listen()).unwrap());
            bots.push(bot);
        }
        Sims { rt, bots, urls }
    }

    pub fn bot(&self, id: u64) -> &auto_assign::testkit::sim::SimBot {
        self.bots
            .iter()
            .find(|b| b.id() == id)
            .expect("simulated bot")
    }

    /// `connections:` entries for config.yaml.
    pub fn connections(&self, token: &str) -> String {
        self.urls
            .iter()
            .map(|u| format!("      - {{url: \"{u}\", accessToken: \"{token}\"}}\n"))
            .collect()
    }
}

impl Drop for Sims {
    fn drop(&mut self) {
        for bot in &self.bots {
            bot.stop();
        }
    }
}

/// A throwaway redis-server on a free loopback port, no persistence.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let mut server = RedisServer {
            child: None,
            port: free_port(),
        };
        server.restart();
        server
    }

    /// A server for `port`, not started yet ([`RedisServer::restart`] starts it).
    pub fn on_port(port: u16) -> RedisServer {
        RedisServer { child: None, port }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts (again) on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        installed("redis-server", "redis-server");
        let child = auto_assign::testkit::procs::redis_server(self.port)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test.sh installs it)");
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < until,
                "redis-server not accepting connections"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A command through redis-cli (simple, synchronous).
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
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
