//! Deploying: secrets from the environment (`${NAME}`), `auto-assign check`, tokens with
//! roles, and `/readyz` for orchestrators.

use std::process::Command;
use std::time::Duration;

use auto_assign::config::Config;
use serde_json::json;

use crate::support::{FLEET, InProcess, TempDir, eventually, get, post, put};

fn lookup(name: &str) -> Option<String> {
    match name {
        "AA_TOKEN" => Some("tok-from-env".into()),
        "AA_DB_PASSWORD" => Some("pa55-from-env".into()),
        _ => None,
    }
}

#[test]
fn secrets_come_from_the_environment_and_never_show() {
    let path = std::path::Path::new("/etc/auto-assign/config.yaml");
    let text = "api: {token: \"${AA_TOKEN}\"}\n\
                database: {url: \"postgres://aa:${AA_DB_PASSWORD}@db/x\"}\n";
    let config = Config::parse_with_env(path, text.as_bytes(), &lookup).unwrap();
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("tok-from-env") && !shown.contains("pa55-from-env"),
        "{shown}"
    );
    // Unset: refused, naming the key, the line and the variable.
    let text = "balanceInterval: 600\napi:\n  token: ${AA_UNSET}\n";
    let e = Config::parse_with_env(path, text.as_bytes(), &lookup)
        .unwrap_err()
        .to_string();
    assert!(e.contains("api.token"), "{e}");
    assert!(e.contains("AA_UNSET is not set"), "{e}");
    assert!(e.contains("line 3"), "{e}");
    // Another key's error never shows an expanded secret.
    let text = "database: {url: \"postgres://aa:${AA_DB_PASSWORD}@db/x\"}\nbalanceInterval: 1\n";
    let e = Config::parse_with_env(path, text.as_bytes(), &lookup)
        .unwrap_err()
        .to_string();
    assert!(e.contains("balanceInterval") && !e.contains("pa55"), "{e}");
    // A literal `${` is written `$${`: no variable is looked up (AA_UNSET is unset).
    let text = "api: {token: \"$${AA_UNSET}\"}\n";
    assert!(Config::parse_with_env(path, text.as_bytes(), &lookup).is_ok());
}

fn check(dir: &TempDir, env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_auto-assign"))
        .args(["check", "--config"])
        .arg(dir.join("config.yaml"))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_reads_everything_serve_would_and_starts_nothing() {
    let dir = TempDir::new("deploy-check");
    dir.write("fleet.yaml", FLEET);
    dir.write(
        "config.yaml",
        "database: {url: \"sqlite://never-created.db\"}\nsources: {file: fleet.yaml}\n\
         api: {token: \"${AA_CHECK_TOKEN}\"}\n",
    );
    let (code, out, err) = check(&dir, &[("AA_CHECK_TOKEN", "t0k")]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("config.yaml: ok") && out.contains("fleet file"),
        "{out}"
    );
    // It wrote nothing: no database file.
    assert!(!dir.join("never-created.db").exists());
    // The variable unset: 2, naming the key, the line and the variable.
    let (code, _, err) = check(&dir, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("api.token") && err.contains("AA_CHECK_TOKEN is not set"),
        "{err}"
    );
    assert!(err.contains("line 3"), "{err}");
    // A broken fleet file and a missing TLS file: both named.
    dir.write("fleet.yaml", "bots:\n  - id: 1001\n    channels: 5\n");
    dir.write(
        "config.yaml",
        "database: {url: \"postgres://aa@db/x?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem\"}\n\
         sources: {file: fleet.yaml}\n",
    );
    let (code, _, err) = check(&dir, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("fleet.yaml") && err.contains("bots[0].channels"),
        "{err}"
    );
    assert!(err.contains("/nonexistent/ca.pem"), "{err}");
    assert!(err.contains("2 problem(s)"), "{err}");
}

#[test]
fn tokens_have_roles_checked_before_routing() {
    let dir = TempDir::new("deploy-roles");
    dir.write("fleet.yaml", FLEET);
    let path = dir.write(
        "config.yaml",
        "database: {url: \"sqlite://state.db\"}\nsources: {file: fleet.yaml, http: {startupWait: 0}}\n\
         api:\n  bind: \"127.0.0.1:0\"\n  token: admin-token\n  tokens:\n\
         \x20   - {name: dashboard, token: read-token, role: read}\n\
         \x20   - {name: koishi, token: report-token, role: report}\n",
    );
    let service = InProcess::start(&path).with_token("admin-token");
    service.wait_runs(1, Duration::from_secs(30));
    let api = &service.api;
    let url = |p: &str| format!("{api}{p}");
    let fleet = json!({"bots": []});
    let pin = json!({"bot": "1001"});
    for (token, reads, reports, changes) in [
        ("read-token", 200, 403, 403),
        ("report-token", 200, 200, 403),
        ("admin-token", 200, 200, 200),
    ] {
        let t = Some(token);
        assert_eq!(get(&url("/v1/status"), t).0, reads, "{token} reads");
        let (status, run) = post(&url("/v1/rebalance?dryRun=true"), t, &json!({}));
        assert_eq!(status, reads, "{token} previews: {run}");
        let (status, body) = put(&url("/v1/fleet/reporters/r1"), t, &fleet);
        assert_eq!(status, reports, "{token} reports: {body}");
        let (status, body) = put(&url("/v1/pins/onebot/100001"), t, &pin);
        assert_eq!(status, changes, "{token} changes: {body}");
        if status == 403 {
            assert_eq!(body["code"], "forbidden");
            assert!(
                body["error"].as_str().unwrap().contains("needs admin"),
                "{body}"
            );
        }
    }
    let (status, _) = get(&url("/v1/status"), Some("wrong"));
    assert_eq!(status, 401);
    // The audit row is written with the next commit.
    eventually(
        "the change audited with its credential",
        Duration::from_secs(10),
        || get(&url("/v1/audit"), Some("read-token")).1["audit"][0]["by"] == "api.token (admin)",
    );
    service.stop().unwrap();
}

#[test]
fn readyz_answers_once_a_plan_is_committed() {
    let dir = TempDir::new("deploy-readyz");
    // The reporters' startup wait holds the first plan back.
    let path = dir.write(
        "config.yaml",
        "database: {url: \"sqlite://state.db\"}\nsources: {http: {startupWait: 600}}\n\
         api: {bind: \"127.0.0.1:0\", token: t}\n",
    );
    let service = InProcess::start(&path);
    let (status, body) = get(&format!("{}/readyz", service.api), None);
    assert_eq!(status, 503, "{body}");
    assert!(
        body["why"][0]
            .as_str()
            .unwrap()
            .contains("no plan committed"),
        "{body}"
    );
    // Alive all the same.
    assert_eq!(get(&format!("{}/healthz", service.api), None).0, 200);
    service.stop().unwrap();

    dir.write("fleet.yaml", FLEET);
    let path = dir.write(
        "config.yaml",
        "database: {url: \"sqlite://state2.db\"}\nsources: {file: fleet.yaml}\n\
         api: {bind: \"127.0.0.1:0\", token: t}\n",
    );
    let service = InProcess::start(&path);
    eventually("ready", Duration::from_secs(30), || {
        get(&format!("{}/readyz", service.api), None) == (200, json!({"ready": true}))
    });
    service.stop().unwrap();
}

/// HTTPS on the API with a throwaway CA: the command line trusts it through `--ca-file`, plain
/// HTTP and other CAs are refused, and a renewed certificate (from another CA here, so the
/// change shows) is served after the files change, without a restart.
#[test]
fn the_api_speaks_tls_and_serves_a_renewed_certificate() {
    use crate::support::ca::ThrowawayCa;
    let dir = TempDir::new("deploy-tls");
    let first = ThrowawayCa::new("first CA");
    first.write_ca(&dir.join("first-ca.pem"));
    let files = first.server(dir.path(), "api");
    dir.write("fleet.yaml", FLEET);
    let path = dir.write(
        "config.yaml",
        &format!(
            "database: {{url: \"sqlite://state.db\"}}\nsources: {{file: fleet.yaml}}\n\
             api: {{bind: \"127.0.0.1:0\", token: t, tls: {{certFile: {}, keyFile: {}}}}}\n",
            files.cert.display(),
            files.key.display()
        ),
    );
    let service = InProcess::start(&path);
    let https = service.api.replacen("http://", "https://", 1);
    let status = |ca: &str| {
        Command::new(env!("CARGO_BIN_EXE_auto-assign"))
            .args(["status", "--api", &https, "--token", "t", "--ca-file"])
            .arg(dir.join(ca))
            .output()
            .unwrap()
    };
    eventually("served over TLS", Duration::from_secs(30), || {
        status("first-ca.pem").status.success()
    });
    let out = status("first-ca.pem");
    assert!(String::from_utf8_lossy(&out.stdout).contains("platform onebot"));
    // Plain HTTP on the TLS port: no answer.
    assert!(
        crate::support::http()
            .get(format!("{}/healthz", service.api))
            .call()
            .is_err()
    );
    // Another CA: refused.
    let second = ThrowawayCa::new("second CA");
    second.write_ca(&dir.join("second-ca.pem"));
    let refused = status("second-ca.pem");
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(err.contains("127.0.0.1"), "{err}");
    // Renewed in place (by the second CA): the next connections get it.
    std::fs::create_dir_all(dir.join("renewal")).unwrap();
    let renewed = second.server(&dir.join("renewal"), "api");
    std::fs::copy(&renewed.key, &files.key).unwrap();
    std::fs::copy(&renewed.cert, &files.cert).unwrap();
    eventually(
        "the renewed certificate served",
        Duration::from_secs(30),
        || status("second-ca.pem").status.success(),
    );
    assert!(!status("first-ca.pem").status.success());
    service.stop().unwrap();
}
