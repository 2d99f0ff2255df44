//! Real PostgreSQL and MariaDB servers, each in a temporary directory of its own, and the
//! service's database read the way an operator would ([`Db`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{TempDir, block_on, ca, free_port, installed, is_root};

/// How many free ports a server is tried on before the test gives up: a free port is let go
/// before the server binds it, and a test running beside may take it first.
const PORT_TRIES: usize = 5;

/// The port given to a server turned out to be another's.
struct PortTaken;

/// A throwaway PostgreSQL 15 server on a free loopback port (run as the `postgres` user when
/// the tests run as root, since PostgreSQL refuses to run as root).
pub struct Postgres {
    dir: TempDir,
    pub port: u16,
    /// The address it listens on, and the namespace it runs in (a partition test's host).
    address: String,
    netns: Option<String>,
}

impl Postgres {
    pub fn start() -> Postgres {
        Postgres::start_with(None, None)
    }

    /// On a partition test's host: listening on its address, in its namespace, letting in
    /// every host of the test's bridge.
    pub fn start_on(host: &super::netns::Host) -> Postgres {
        Postgres::start_with(None, Some(host))
    }

    /// With TLS only: `ssl = on` with `server`'s certificate and key, `postgres`'s password
    /// `password` (SCRAM), and `pg_hba.conf` letting TCP connections in over TLS only (a
    /// plain one is refused; the local socket stays `trust`).
    pub fn start_tls(server: &ca::CertFiles, password: &str) -> Postgres {
        Postgres::start_with(Some((server, password)), None)
    }

    fn start_with(
        tls: Option<(&ca::CertFiles, &str)>,
        host: Option<&super::netns::Host>,
    ) -> Postgres {
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
        let as_root = is_root();
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
        if let Some(host) = host {
            use std::io::Write as _;
            let subnet = host.ip.rsplit_once('.').unwrap().0;
            let mut hba = std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("pg_hba.conf"))
                .unwrap();
            writeln!(hba, "host all all {subnet}.0/24 trust").unwrap();
        }
        let address = host.map_or("127.0.0.1".to_owned(), |h| h.ip.clone());
        let netns = host.map(|h| h.ns.clone());
        let mut pg = Postgres {
            dir,
            port: free_port(),
            address,
            netns,
        };
        for _ in 0..PORT_TRIES {
            if pg.launch().is_ok() {
                return pg;
            }
            pg.port = free_port();
        }
        panic!("postgres: {PORT_TRIES} free ports were taken by others before it listened");
    }

    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@{}:{}/postgres",
            self.address, self.port
        )
    }

    /// Stops the server (it can be started again with [`Postgres::restart`]).
    pub fn stop(&self) {
        self.pg_ctl(&["-m", "immediate", "stop"]);
    }

    pub fn restart(&self) {
        if self.launch().is_err() {
            panic!("postgres: port {} is another server's", self.port);
        }
    }

    /// `pg_ctl start` on this port; `Err` when the port turned out to be another's (a test
    /// beside this one took the free port first: the server could not bind it).
    fn launch(&self) -> Result<(), PortTaken> {
        let options = format!(
            "-p {} -c listen_addresses={} -k {} -c fsync=off",
            self.port,
            self.address,
            self.dir.path().display()
        );
        let log = self.dir.join("log");
        let out = self.pg_ctl(&["-o", &options, "-l", log.to_str().unwrap(), "-w", "start"]);
        if out.status.success() {
            return Ok(());
        }
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        if log.contains("could not bind") {
            return Err(PortTaken);
        }
        panic!(
            "pg_ctl start: {}{}\n{log}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `pg_ctl -D data args…` as the server's user, in its namespace.
    fn pg_ctl(&self, args: &[&str]) -> std::process::Output {
        let data = self.dir.join("data");
        let bin = find_pg_bin("pg_ctl");
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]);
                c
            }
            None => Command::new("env"),
        };
        if is_root() {
            cmd.args(["runuser", "-u", "postgres", "--"]);
        }
        cmd.arg(bin)
            .arg("-D")
            .arg(&data)
            .args(args)
            .output()
            .expect("run pg_ctl")
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
        for _ in 0..PORT_TRIES {
            if server.launch().is_ok() {
                return server;
            }
            server.stop();
            server.port = free_port();
        }
        panic!("mariadbd: {PORT_TRIES} free ports were taken by others before it listened");
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
        if self.launch().is_err() {
            panic!("mariadbd: port {} is another server's", self.port);
        }
    }

    /// Starts on this port, once it answers; `Err` when the port turned out to be another's
    /// (a test beside this one took the free port first).
    fn launch(&mut self) -> Result<(), PortTaken> {
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
            // The server answering is ours when it serves our data directory: a free port
            // may have been taken by a test beside this one before mariadbd bound it.
            let datadir = block_on(async {
                let pool = sqlx::MySqlPool::connect(&server).await.ok()?;
                sqlx::query_scalar::<_, String>("SELECT @@datadir")
                    .fetch_one(&pool)
                    .await
                    .ok()
            });
            if let Some(datadir) = datadir {
                let ours = self.dir.join("data").canonicalize().unwrap();
                return match Path::new(&datadir).canonicalize() {
                    Ok(theirs) if theirs == ours => Ok(()),
                    _ => Err(PortTaken),
                };
            }
            let log = std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default();
            let exited = self
                .child
                .as_mut()
                .is_some_and(|c| c.try_wait().unwrap().is_some());
            if exited && log.contains("Address already in use") {
                return Err(PortTaken);
            }
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
