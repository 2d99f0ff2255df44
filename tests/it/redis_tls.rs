//! Redis over TLS and with ACL users, against a real `redis-server` configured with a CA made
//! in the test: the service publishes over `rediss://` as an ACL user with a client
//! certificate; a server signed by another CA is refused with an error that names the host; a
//! wrong password is refused; no password reaches the log.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::ca::ThrowawayCa;
use crate::support::redis::Node;
use crate::support::{FLEET, Service, TempDir, eventually, free_port, get};

const PASSWORD: &str = "s3cret-Pa55word";

/// A TLS-only redis-server (no plain port) that asks for client certificates, with the ACL
/// user `alice` and the default user disabled.
fn tls_redis(dir: &TempDir, ca: &ThrowawayCa) -> Node {
    let server = ca.server(dir.path(), "redis");
    ca.write_ca(&dir.join("server-ca.pem"));
    let port = free_port();
    let config = dir.write(
        "redis.conf",
        &format!(
            "port 0\ntls-port {port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\n\
             tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\ntls-auth-clients yes\n\
             user default off\nuser alice on >{PASSWORD} ~* &* +@all\n",
            server.cert.display(),
            server.key.display(),
            dir.join("server-ca.pem").display(),
        ),
    );
    Node::spawn(port, &[config.display().to_string()])
}

/// `redis-cli` over TLS as alice, with the client certificate.
fn tls_cli(dir: &Path, port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["--tls", "--cacert"])
        .arg(dir.join("server-ca.pem"))
        .arg("--cert")
        .arg(dir.join("client.crt"))
        .arg("--key")
        .arg(dir.join("client.key"))
        .args([
            "-p",
            &port.to_string(),
            "--user",
            "alice",
            "--pass",
            PASSWORD,
        ])
        .arg("--no-auth-warning")
        .args(args)
        .stderr(Stdio::null())
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The service's config: the fleet from a file, this `redis:` section, the API on `api`.
fn config(dir: &TempDir, name: &str, redis: &str, api: u16) -> std::path::PathBuf {
    dir.write("fleet.yaml", FLEET);
    dir.write(
        name,
        &format!(
            "balanceInterval: 600\nsources: {{file: fleet.yaml}}\n\
             database: {{url: \"sqlite://{name}.db\"}}\nredis: {redis}\n\
             api: {{bind: \"127.0.0.1:{api}\"}}\n"
        ),
    )
}

/// The service on `config`, once its API answers.
fn start(config: &Path, api: u16) -> Service {
    let service = Service::start(config);
    eventually("the API answers", Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", api)).is_ok()
    });
    service
}

fn redis_health(api: u16) -> String {
    let (_, health) = get(&format!("http://127.0.0.1:{api}/healthz"), None);
    health["redis"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn publishes_over_tls_as_an_acl_user_and_refuses_a_foreign_ca_naming_the_host() {
    let dir = TempDir::new("redis-tls");
    let ca = ThrowawayCa::new("auto-assign test CA");
    let redis = tls_redis(&dir, &ca);
    ca.client(dir.path(), "client");
    ca.write_ca(&dir.join("ca.pem"));
    let url = format!("rediss://alice:{PASSWORD}@127.0.0.1:{}", redis.port);

    // The right CA, the ACL user, a client certificate: connected and published.
    let api = free_port();
    let good = config(
        &dir,
        "good.yaml",
        &format!(
            "{{url: \"{url}\", tls: {{caFile: ca.pem, certFile: client.crt, keyFile: client.key}}}}"
        ),
        api,
    );
    let service = start(&good, api);
    eventually("published over TLS", Duration::from_secs(30), || {
        redis_health(api) == "connected"
            && tls_cli(dir.path(), redis.port, &["GET", "auto-assign:version"])
                .parse::<i64>()
                .is_ok_and(|v| v > 0)
    });
    let published = tls_cli(
        dir.path(),
        redis.port,
        &["HLEN", "auto-assign:assignment:onebot"],
    );
    assert_eq!(published, "12", "every channel published");
    assert!(!service.log().contains(PASSWORD), "{}", service.log());
    drop(service);

    // A server certificate of another CA: refused, the error names the host.
    let other = ThrowawayCa::new("another CA");
    other.write_ca(&dir.join("other-ca.pem"));
    let api = free_port();
    let foreign = config(
        &dir,
        "foreign.yaml",
        &format!(
            "{{url: \"{url}\", tls: {{caFile: other-ca.pem, certFile: client.crt, keyFile: client.key}}}}"
        ),
        api,
    );
    let service = start(&foreign, api);
    service.expect_log("redis: cannot connect to");
    let line = service
        .log()
        .lines()
        .find(|l| l.contains("redis: cannot connect to"))
        .unwrap()
        .to_owned();
    assert!(
        line.contains(&format!("127.0.0.1:{}", redis.port)) && line.contains("ertificate"),
        "the error names the host and the certificate problem: {line}"
    );
    assert!(!line.contains(PASSWORD), "{line}");
    assert_eq!(redis_health(api), "unavailable");
    drop(service);

    // A wrong password of the ACL user: refused, and shown nowhere.
    let wrong = "not-the-Pa55word-42";
    let api = free_port();
    let refused = config(
        &dir,
        "refused.yaml",
        &format!(
            "{{url: \"rediss://alice:{wrong}@127.0.0.1:{}\", tls: {{caFile: ca.pem, certFile: client.crt, keyFile: client.key}}}}",
            redis.port
        ),
        api,
    );
    let service = start(&refused, api);
    service.expect_log("redis: cannot connect to");
    assert_eq!(redis_health(api), "unavailable");
    let log = service.log();
    assert!(!log.contains(wrong) && !log.contains(PASSWORD), "{log}");
    println!(
        "TLS Redis: published as an ACL user with a client certificate; another CA refused: \
         {line}"
    );
}
