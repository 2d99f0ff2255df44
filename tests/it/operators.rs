//! What operators see: `/metrics` checked by `promtool` and scraped by a real Prometheus,
//! `explain` and `status` (API and CLI), and the dashboard in a real headless Chromium.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{
    FLEET, InProcess, TempDir, eventually, fleet_with_offline, free_port, get, http,
};
use serde_json::{Value, json};

const TOKEN: &str = "operator-token";

fn service(dir: &TempDir, extra: &str) -> InProcess {
    dir.write("fleet.yaml", FLEET);
    let path = dir.write(
        "config.yaml",
        &format!(
            "database: {{url: \"sqlite://state.db\"}}\nsources: {{file: fleet.yaml}}\n\
             triggerDelays: {{startup: 0, botOnline: 0, botOffline: 0}}\n\
             api: {{bind: \"127.0.0.1:0\", token: {TOKEN}}}\n{extra}"
        ),
    );
    let service = InProcess::start(&path);
    wait_runs(&service, 1, Duration::from_secs(10));
    service
}

/// Waits until the service has run `n` rebalances (the status route needs the token).
fn wait_runs(service: &InProcess, n: u64, timeout: Duration) {
    eventually(&format!("{n} rebalance(s)"), timeout, || {
        let (_, status) = get(&format!("{}/v1/status", service.api), Some(TOKEN));
        status["last_run"]["number"].as_u64().unwrap_or(0) >= n
    });
}

fn metrics(api: &str, token: Option<&str>) -> (u16, String) {
    let mut request = http().get(format!("{api}/metrics"));
    if let Some(t) = token {
        request = request.header("Authorization", &format!("Bearer {t}"));
    }
    let mut response = request.call().unwrap();
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().unwrap())
}

/// The value of one series (`name{labels}`) in the text format.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

#[test]
fn metrics_pass_promtool_and_agree_with_the_api() {
    crate::support::installed("promtool", "prometheus");
    let dir = TempDir::new("operators-metrics");
    let service = service(&dir, "");
    let api = &service.api;
    assert_eq!(
        metrics(api, None).0,
        401,
        "the token rule of the API applies"
    );
    let (status, text) = metrics(api, Some(TOKEN));
    assert_eq!(status, 200);

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool: {}{}\n{text}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    let forced = "auto_assign_moves_total{kind=\"forced\",platform=\"onebot\"}";
    let forced_before = sample(&text, forced).unwrap_or(0.0);
    // A scripted fleet change: bot 1003 goes offline; its channels move.
    dir.write("fleet.yaml", &fleet_with_offline(1003));
    wait_runs(&service, 2, Duration::from_secs(10));
    let (_, bots) = get(&format!("{api}/v1/bots"), Some(TOKEN));
    let (_, status) = get(&format!("{api}/v1/status"), Some(TOKEN));
    let (_, text) = metrics(api, Some(TOKEN));
    for bot in bots.as_array().unwrap() {
        let labels = format!(
            "{{bot=\"{}\",platform=\"onebot\"}}",
            bot["bot"].as_str().unwrap()
        );
        assert_eq!(
            sample(&text, &format!("auto_assign_bot_load{labels}")),
            bot["load"].as_f64(),
            "{labels}"
        );
        let online = if bot["online"].as_bool().unwrap() {
            1.0
        } else {
            0.0
        };
        assert_eq!(
            sample(&text, &format!("auto_assign_bot_online{labels}")),
            Some(online)
        );
    }
    let counts = &status["platforms"]["onebot"];
    assert_eq!(
        sample(
            &text,
            "auto_assign_channels{platform=\"onebot\",state=\"assigned\"}"
        ),
        counts["assigned"].as_f64()
    );
    assert_eq!(
        sample(
            &text,
            "auto_assign_load{platform=\"onebot\",statistic=\"stddev\"}"
        ),
        counts["stddev"].as_f64()
    );
    let moved = sample(&text, forced).unwrap() - forced_before;
    assert_eq!(Some(moved), status["last_run"]["moved_forced"].as_f64());
    assert!(moved > 0.0);
    assert_eq!(
        sample(
            &text,
            "auto_assign_rebalance_runs_total{cause=\"bot-offline\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "auto_assign_rebalance_duration_seconds_count"),
        Some(2.0)
    );
    drop(service);
}

#[test]
fn a_real_prometheus_scrapes_it() {
    crate::support::installed("prometheus", "prometheus");
    let dir = TempDir::new("operators-prometheus");
    let service = service(&dir, "");
    let target = service.api.trim_start_matches("http://").to_owned();
    let config = dir.write(
        "prometheus.yml",
        &format!(
            "global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: auto-assign\n    \
             authorization: {{credentials: {TOKEN}}}\n    static_configs: [{{targets: [\"{target}\"]}}]\n"
        ),
    );
    let port = free_port();
    let mut prometheus = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let query = format!("http://127.0.0.1:{port}/api/v1/query?query=sum(auto_assign_bot_load)");
    let mut answer = Value::Null;
    eventually(
        "Prometheus has scraped the loads",
        Duration::from_secs(30),
        || {
            let Ok(mut r) = http().get(&query).call() else {
                return false;
            };
            answer = r.body_mut().read_json().unwrap_or_default();
            answer["data"]["result"][0]["value"][1] == "12"
        },
    );
    prometheus.0.kill().unwrap();
    drop(service);
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn explain_and_status_from_the_api_and_the_command_line() {
    let dir = TempDir::new("operators-explain");
    let service = service(
        &dir,
        "excludeChannels: [\"onebot:100012\"]\nchannelBotPriority: {\"100001\": [\"1003\", \"1002\"]}\n",
    );
    let api = &service.api;
    let explain = |channel: &str| {
        let (status, e) = get(&format!("{api}/v1/explain/onebot/{channel}"), Some(TOKEN));
        assert_eq!(status, 200, "{e}");
        e
    };
    let e = explain("100001");
    assert_eq!(
        (e["reason"].as_str(), e["assignee"].as_str()),
        (Some("pinned"), Some("1002"))
    );
    assert_eq!(
        e["text"],
        "pinned by channelBotPriority entry 2 (1002): entry 1 (1003) is not in the channel"
    );
    assert_eq!(explain("100012")["reason"], "excluded");
    assert_eq!(explain("100005")["reason"], "balanced");
    assert_eq!(explain("999")["reason"], "unknown_channel");
    // 1001 alone is in 100009..100012 besides 1003: make 1003 leave and 100010 has one member.
    dir.write("fleet.yaml", &fleet_with_offline(1003));
    wait_runs(&service, 2, Duration::from_secs(10));
    let e = explain("100010");
    assert_eq!(
        (e["reason"].as_str(), e["assignee"].as_str()),
        (Some("only_member"), Some("1001"))
    );
    let both_offline =
        fleet_with_offline(1003).replace("  - id: 1001\n", "  - id: 1001\n    online: false\n");
    dir.write("fleet.yaml", &both_offline);
    wait_runs(&service, 3, Duration::from_secs(10));
    let e = explain("100010");
    assert_eq!(e["reason"], "no_valid_bot");
    assert_eq!(
        e["text"],
        "no valid bot (1001 is offline, 1003 is offline): it stays unassigned"
    );

    // The command line, against the same service.
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_auto-assign"))
            .args(args)
            .args(["--api", api, "--token", TOKEN])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let table = cli(&["status"]);
    assert!(table.contains("platform onebot:"), "{table}");
    assert!(table.contains("last rebalance #3"), "{table}");
    let json: Value = serde_json::from_str(&cli(&["status", "--json"])).unwrap();
    assert_eq!(json["status"]["last_run"]["number"], 3);
    let text = cli(&["explain", "100010"]);
    assert_eq!(
        text,
        "onebot:100010 → nobody\nno valid bot (1001 is offline, 1003 is offline): it stays \
         unassigned\n"
    );
    // A wrong token: a clear error, exit code 1.
    let out = Command::new(env!("CARGO_BIN_EXE_auto-assign"))
        .args(["status", "--api", api, "--token", "wrong"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("HTTP 401: missing or wrong bearer token")
    );
    drop(service);
}

/// A W3C WebDriver session on chromedriver (no client crate: the protocol is plain JSON).
struct Browser {
    driver: Child,
    url: String,
    _profile: TempDir,
}

impl Browser {
    fn start() -> Browser {
        crate::support::installed("chromedriver", "chromium-driver");
        let port = free_port();
        // The browser's profile and temporary files in a directory of its own.
        let profile = TempDir::new("chromium");
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .env("TMPDIR", profile.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        eventually("chromedriver up", Duration::from_secs(10), || {
            http().get(format!("{base}/status")).call().is_ok()
        });
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000",
                // Nothing but the page: no background fetches, updates or sync, which this
                // machine's closed network refuses.
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-quic", "--no-first-run",
                format!("--user-data-dir={}", profile.join("profile").display()),
            ]}
        }}});
        let session: Value = http()
            .post(format!("{base}/session"))
            .send_json(capabilities)
            .unwrap()
            .body_mut()
            .read_json()
            .unwrap();
        let id = session["value"]["sessionId"]
            .as_str()
            .expect("a session")
            .to_owned();
        Browser {
            driver,
            url: format!("{base}/session/{id}"),
            _profile: profile,
        }
    }

    fn call(&self, path: &str, body: Value) -> Value {
        let answer: Value = http()
            .post(format!("{}{path}", self.url))
            .send_json(body)
            .unwrap()
            .body_mut()
            .read_json()
            .unwrap();
        answer["value"].clone()
    }

    fn open(&self, url: &str) {
        self.call("/url", json!({ "url": url }));
    }

    fn run(&self, script: &str) -> Value {
        self.call("/execute/sync", json!({ "script": script, "args": [] }))
    }

    fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let answer: Value = http()
            .get(format!("{}/screenshot", self.url))
            .call()
            .unwrap()
            .body_mut()
            .read_json()
            .unwrap();
        base64::engine::general_purpose::STANDARD
            .decode(answer["value"].as_str().unwrap())
            .unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = http().delete(&self.url).call();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

#[test]
fn the_dashboard_shows_the_fleet_and_follows_it_live() {
    let dir = TempDir::new("operators-dashboard");
    let service = service(&dir, "");
    let api = &service.api;
    let browser = Browser::start();
    browser.open(&format!("{api}/#token={TOKEN}"));
    // The rows the page shows: bot → (state, load).
    let shown = || -> Value {
        browser.run(
            "return [...document.querySelectorAll('#bots tbody tr')].map(r => \
             [...r.cells].map(c => c.textContent))",
        )
    };
    let from_api = || -> Value {
        let (_, bots) = get(&format!("{api}/v1/bots"), Some(TOKEN));
        let mut rows: Vec<(i64, String, Value)> = bots
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                let state = if b["online"].as_bool().unwrap() {
                    "online"
                } else {
                    "offline"
                };
                let bot = b["bot"].as_str().unwrap().to_owned();
                let load = b["load"].as_i64().unwrap();
                (
                    -load,
                    bot.clone(),
                    json!([bot, state, "-", load.to_string(), "-", "-"]),
                )
            })
            .collect();
        rows.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        Value::Array(rows.into_iter().map(|r| r.2).collect())
    };
    eventually(
        "the page shows the API's bots",
        Duration::from_secs(15),
        || shown() == from_api(),
    );
    let assigned = browser.run("return document.querySelector('#figure-assigned b').textContent");
    assert_eq!(assigned, "12");
    let bars = browser.run("return document.querySelectorAll('#chart rect').length");
    assert_eq!(bars, 3);

    // A bot goes offline: the page shows it without a reload.
    let marker = browser.run("window.notReloaded = true; return true");
    assert_eq!(marker, true);
    dir.write("fleet.yaml", &fleet_with_offline(1003));
    wait_runs(&service, 2, Duration::from_secs(10));
    let started = Instant::now();
    eventually(
        "the page shows 1003 offline",
        Duration::from_secs(15),
        || shown() == from_api(),
    );
    assert_eq!(browser.run("return window.notReloaded === true"), true);
    let rows = shown();
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .any(|r| r[0] == "1003" && r[1] == "offline"),
        "{rows}"
    );
    eprintln!("dashboard followed the change in {:?}", started.elapsed());
    // The channel search answers in words.
    browser.run(
        "document.getElementById('channel').value = '100005'; \
         document.getElementById('search').requestSubmit(); return true",
    );
    eventually("the explanation shows", Duration::from_secs(10), || {
        browser
            .run("return document.getElementById('why').textContent")
            .as_str()
            .is_some_and(|t| t.contains("balanced"))
    });

    // Pins and drains from the page, with the token; the service holds them.
    browser.run(
        "document.getElementById('pin-group').value = '100005'; \
         document.getElementById('pin-bot').value = '1001'; \
         document.getElementById('pin-note').value = 'VIP'; \
         document.getElementById('pin-form').requestSubmit(); \
         document.getElementById('drain-bot').value = '1002'; \
         document.getElementById('drain-form').requestSubmit(); return true",
    );
    eventually(
        "the page's pin and drain in force",
        Duration::from_secs(10),
        || {
            let pins = get(&format!("{api}/v1/pins"), Some(TOKEN)).1;
            let drains = get(&format!("{api}/v1/drains"), Some(TOKEN)).1;
            pins["pins"][0]["channel"] == "100005"
                && pins["pins"][0]["note"] == "VIP"
                && drains["drains"][0]["bot"] == "1002"
        },
    );
    eventually("the page lists them", Duration::from_secs(10), || {
        browser.run(
            "return !!document.querySelector('#pins tr[data-group=\"onebot:100005\"]') && \
             !!document.querySelector('#drains tr[data-bot=\"onebot:1002\"]')",
        ) == true
    });
    // A dry run, shown on the page, changes nothing.
    let before = get(&format!("{api}/v1/assignments"), Some(TOKEN)).1;
    browser.run("document.getElementById('dry-run').click(); return true");
    eventually("the dry run shows", Duration::from_secs(10), || {
        browser.run("return !!document.getElementById('preview-done')") == true
    });
    let loads = browser.run(
        "return [...document.querySelectorAll('#preview-loads tr')].slice(1).map(r => r.cells[0].textContent)",
    );
    assert!(!loads.as_array().unwrap().is_empty(), "{loads}");
    assert_eq!(get(&format!("{api}/v1/assignments"), Some(TOKEN)).1, before);
    // Removed from the page.
    browser.run("document.querySelector('#drains button[data-remove]').click(); return true");
    eventually("the drain removed", Duration::from_secs(10), || {
        get(&format!("{api}/v1/drains"), Some(TOKEN)).1["drains"] == json!([])
    });
    // In Chinese, by the switch (the browser's language decides first).
    assert_eq!(browser.run("return document.documentElement.lang"), "en");
    browser.run("document.getElementById('language').click(); return true");
    assert_eq!(browser.run("return document.documentElement.lang"), "zh-CN");
    let header = browser.run("return document.querySelector('#bots th').textContent");
    assert_eq!(header, "机器人");
    eventually("the states in Chinese", Duration::from_secs(10), || {
        browser
            .run("return document.querySelector('#bots tbody td[data-state]').textContent")
            .as_str()
            .is_some_and(|s| s == "在线" || s == "离线")
    });

    let png = browser.screenshot();
    assert_eq!(&png[1..4], b"PNG");
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    std::fs::write(&out, &png).unwrap();
    eprintln!("screenshot: {}", out.display());
    drop(service);
}

#[test]
fn json_logs_are_one_object_per_line() {
    let dir = TempDir::new("operators-json-logs");
    dir.write("fleet.yaml", FLEET);
    let config = dir.write(
        "config.yaml",
        &format!(
            "logFormat: json\ndatabase: {{url: \"sqlite://state.db\"}}\nsources: {{file: fleet.yaml}}\n\
             api: {{bind: \"127.0.0.1:{}\"}}\n",
            free_port()
        ),
    );
    let service = crate::support::Service::start(&config);
    service.wait_for("rebalance #1", 1, Duration::from_secs(10));
    let log = service.log();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let rebalance = lines
        .iter()
        .find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("rebalance #1"))
        })
        .expect("the rebalance line");
    assert_eq!(rebalance["level"], "INFO");
    assert!(rebalance["timestamp"].is_string());
    drop(service);
}
