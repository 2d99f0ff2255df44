//! TLS to the SQL store, on real servers that accept nothing else: PostgreSQL (`hostssl` only)
//! and MariaDB (`require_secure_transport`), with certificates from a throwaway CA made here.
//! The service connects with the server verified against that CA (`sslmode=verify-full`,
//! `ssl-mode=VERIFY_IDENTITY`), or encrypted only (`sslmode=require`, `ssl-mode=REQUIRED`),
//! and writes its assignment; a plain connection is refused by the server; a CA that did not
//! sign the server's certificate is refused by the service, in an error that names the server
//! and the certificate problem and never the password (nor does any log line).

use std::path::PathBuf;
use std::time::Duration;

use crate::support::ca::{CertFiles, ThrowawayCa};
use crate::support::{Db, FLEET, InProcess, MariaDb, Postgres, Service, TempDir, eventually};

/// In every URL, and never in an error or a log line.
const PASSWORD: &str = "Tls-s3cret-Qx7wz";

const WAIT: Duration = Duration::from_secs(30);

/// The throwaway CA's files, and another CA's certificate (which signed nothing here).
struct Pki {
    dir: TempDir,
    ca: PathBuf,
    other_ca: PathBuf,
    server: CertFiles,
}

fn pki() -> Pki {
    let dir = TempDir::new("tls-sql");
    let ca = ThrowawayCa::new("auto-assign test CA");
    ca.write_ca(&dir.join("ca.pem"));
    ThrowawayCa::new("another CA").write_ca(&dir.join("other-ca.pem"));
    let server = ca.server(dir.path(), "server");
    Pki {
        ca: dir.join("ca.pem"),
        other_ca: dir.join("other-ca.pem"),
        server,
        dir,
    }
}

fn config(dir: &TempDir, database: &str) -> PathBuf {
    dir.write("fleet.yaml", FLEET);
    dir.write(
        "config.yaml",
        &format!(
            "balanceInterval: 600
enabledPlatforms: [onebot]
triggerDelays: {{startup: 0, botStatus: 0.2, botOnline: 0.2, botOffline: 0.2, channelJoined: 0.2, channelLeft: 0.2}}
database: {{url: \"{database}\", shutdownTimeout: 5}}
sources: {{file: fleet.yaml}}
api: {{bind: \"127.0.0.1:0\"}}
"
        ),
    )
}

/// The service on `url` commits its first rebalance (`runs` records in all, then): all 12
/// channels assigned, read back over the same URL. Its log never shows the password.
fn writes_and_reads(dir: &TempDir, db: Db, url: &str, runs: usize) {
    let service = Service::start(&config(dir, url));
    eventually(
        &format!("{runs} rebalance record(s) over {url}"),
        WAIT,
        || db.history().len() >= runs,
    );
    let rows = db.channels("onebot");
    assert_eq!(rows.len(), 12, "{rows:?}");
    assert!(rows.values().all(|bot| bot.starts_with("100")), "{rows:?}");
    let log = service.log_handle();
    assert!(service.stop().success());
    let log = log.lock().unwrap().join("\n");
    assert!(!log.contains(PASSWORD), "the password in the log:\n{log}");
}

/// The service refuses to start on `url`; its error (and everything it logged) names
/// `server` and never the password. Returns the error.
fn refused(dir: &TempDir, url: &str, server: &str) -> String {
    let path = config(dir, url);
    let error = match InProcess::try_start(&path, auto_assign::service::Clock::system()) {
        Ok(_) => panic!("the service started on {url}"),
        Err(e) => e.to_string(),
    };
    assert!(error.contains(server), "{server} not named: {error}");
    assert!(!error.contains(PASSWORD), "the password shown: {error}");
    // The binary's own report of it, and every log line before it.
    let mut service = Service::start(&path);
    let status = service.wait(WAIT);
    assert!(!status.success());
    let log = service.log();
    assert!(log.contains(server), "{server} not in the log:\n{log}");
    assert!(!log.contains(PASSWORD), "the password in the log:\n{log}");
    error
}

fn certificate_problem(error: &str) {
    let lower = error.to_ascii_lowercase();
    assert!(
        lower.contains("certificate")
            && lower.contains("unknownissuer")
            && error.contains("not signed by the CA"),
        "not a certificate problem: {error}"
    );
}

// ---------------------------------------------------------------------------------------
// PostgreSQL

fn pg_url(pg: &Postgres, query: &str) -> String {
    format!(
        "postgres://postgres:{PASSWORD}@127.0.0.1:{}/postgres?{query}",
        pg.port
    )
}

#[test]
fn postgres_verified_or_encrypted_only_writes_and_reads() {
    let pki = pki();
    let pg = Postgres::start_tls(&pki.server, PASSWORD);
    let ca = pki.ca.display();
    // The server's name checked (127.0.0.1 is in its certificate), then its CA only, then
    // encryption without verification.
    for (runs, query) in [
        (1, format!("sslmode=verify-full&sslrootcert={ca}")),
        (2, format!("sslmode=verify-ca&sslrootcert={ca}")),
        (3, "sslmode=require".to_owned()),
    ] {
        let url = pg_url(&pg, &query);
        writes_and_reads(&pki.dir, Db::Postgres(url.clone()), &url, runs);
    }
}

#[test]
fn postgres_refuses_plain_connections_and_a_wrong_ca() {
    let pki = pki();
    let pg = Postgres::start_tls(&pki.server, PASSWORD);
    let server = format!("127.0.0.1:{}", pg.port);

    let plain = refused(&pki.dir, &pg_url(&pg, "sslmode=disable"), &server);
    eprintln!("plain: {plain}");
    assert!(plain.contains("pg_hba.conf rejects connection"), "{plain}");

    let other = pki.other_ca.display();
    for query in [
        format!("sslmode=verify-full&sslrootcert={other}"),
        format!("sslmode=verify-ca&sslrootcert={other}"),
    ] {
        let error = refused(&pki.dir, &pg_url(&pg, &query), &server);
        certificate_problem(&error);
        eprintln!("{query}: {error}");
    }
}

// ---------------------------------------------------------------------------------------
// MySQL / MariaDB

fn mysql_url(db: &MariaDb, query: &str) -> String {
    format!(
        "mysql://auto_assign:{PASSWORD}@127.0.0.1:{}/auto_assign?{query}",
        db.port
    )
}

#[test]
fn mariadb_verified_or_encrypted_only_writes_and_reads() {
    let pki = pki();
    let mariadb = MariaDb::start_tls(&pki.server, &pki.ca);
    mariadb.create_database("auto_assign");
    mariadb.create_user("auto_assign", PASSWORD);
    let ca = pki.ca.display();
    for (runs, query) in [
        (1, format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}")),
        (2, format!("ssl-mode=VERIFY_CA&ssl-ca={ca}")),
        (3, "ssl-mode=REQUIRED".to_owned()),
    ] {
        let url = mysql_url(&mariadb, &query);
        writes_and_reads(&pki.dir, Db::Mysql(url.clone()), &url, runs);
    }
}

#[test]
fn mariadb_refuses_plain_connections_and_a_wrong_ca() {
    let pki = pki();
    let mariadb = MariaDb::start_tls(&pki.server, &pki.ca);
    mariadb.create_database("auto_assign");
    mariadb.create_user("auto_assign", PASSWORD);
    let server = format!("127.0.0.1:{}", mariadb.port);

    // MariaDB answers a plain connection under `require_secure_transport` with "Access
    // denied" (the same user and password connect over TLS in the test above).
    let plain = refused(&pki.dir, &mysql_url(&mariadb, "ssl-mode=DISABLED"), &server);
    eprintln!("plain: {plain}");
    assert!(plain.contains("Access denied"), "{plain}");

    let other = pki.other_ca.display();
    for query in [
        format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={other}"),
        format!("ssl-mode=VERIFY_CA&ssl-ca={other}"),
    ] {
        let error = refused(&pki.dir, &mysql_url(&mariadb, &query), &server);
        certificate_problem(&error);
        eprintln!("{query}: {error}");
    }
}
