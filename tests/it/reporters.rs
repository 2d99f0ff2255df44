//! Fleet reporters over HTTP (`sources.http`) and the assignment stream
//! (`GET /v1/assignments/stream`), against the service in process.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::Duration;

use crate::support::{InProcess, TempDir, eventually, get, http, post};
use serde_json::{Value, json};

const TOKEN: &str = "reporter-token";

fn service(dir: &TempDir, extra: &str) -> InProcess {
    let path = dir.write(
        "config.yaml",
        &format!(
            "database: {{url: \"sqlite://state.db\"}}\n\
             triggerDelays: {{botOnline: 0, botOffline: 0, channelJoined: 0, channelLeft: 0}}\n\
             api: {{bind: \"127.0.0.1:0\", token: {TOKEN}}}\n\
             sources:\n  http: {{startupWait: 0, offlineGrace: 2}}\n{extra}"
        ),
    );
    InProcess::start(&path)
}

fn put(url: &str, body: &Value) -> (u16, Value) {
    let mut resp = http()
        .put(url)
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .send_json(body)
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn assignments(api: &str) -> BTreeMap<String, String> {
    let (status, all) = get(&format!("{api}/v1/assignments"), Some(TOKEN));
    assert_eq!(status, 200, "{all}");
    serde_json::from_value(all["onebot"].clone()).unwrap_or_default()
}

/// Three bots in twelve groups: 1001 in all, 1002 in 1–8, 1003 in 5–12.
fn fleet(online_1001: bool) -> Value {
    let groups = |r: std::ops::RangeInclusive<u32>| r.map(|g| g.to_string()).collect::<Vec<_>>();
    json!({"bots": [
        {"platform": "onebot", "id": "1001", "online": online_1001, "channels": groups(1..=12)},
        {"platform": "onebot", "id": "1002", "online": true, "channels": groups(1..=8)},
        {"platform": "onebot", "id": "1003", "online": true, "channels": groups(5..=12)},
    ]})
}

fn loads(a: &BTreeMap<String, String>) -> BTreeMap<&str, usize> {
    let mut loads = BTreeMap::new();
    for bot in a.values() {
        *loads.entry(bot.as_str()).or_insert(0) += 1;
    }
    loads
}

#[test]
fn a_reporter_drives_the_fleet_and_goes_offline_when_silent() {
    let dir = TempDir::new("reporters-fleet");
    let service = service(&dir, "");
    let api = &service.api;
    let reporter = format!("{api}/v1/fleet/reporters/koishi-1");

    // Events before the full state: 409, the reporter must PUT first.
    let offline = json!({"events": [{"type": "offline", "platform": "onebot", "id": "1001"}]});
    let (status, body) = post(&format!("{reporter}/events"), Some(TOKEN), &offline);
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("send the full state")
    );

    assert_eq!(put(&reporter, &fleet(true)).0, 200);
    eventually(
        "12 groups assigned, 4 each",
        Duration::from_secs(10),
        || {
            let a = assignments(api);
            a.len() == 12 && loads(&a).values().all(|&n| n == 4)
        },
    );

    // A bot reported offline: its groups move to the others.
    let (status, body) = post(&format!("{reporter}/events"), Some(TOKEN), &offline);
    assert_eq!((status, body["applied"].as_u64()), (200, Some(1)), "{body}");
    eventually("1001's groups moved", Duration::from_secs(10), || {
        let a = assignments(api);
        a.len() == 12 && !a.values().any(|b| b == "1001")
    });

    // A bot leaves a group: it no longer holds it.
    let left =
        json!({"events": [{"type": "left", "platform": "onebot", "id": "1002", "channel": "1"}]});
    assert_eq!(
        post(&format!("{reporter}/events"), Some(TOKEN), &left).0,
        200
    );
    eventually("group 1 has nobody left", Duration::from_secs(10), || {
        !assignments(api).contains_key("1")
    });

    // Silence beyond offlineGrace (2 s): every bot of the reporter goes offline.
    eventually(
        "the silent reporter's bots offline",
        Duration::from_secs(10),
        || assignments(api).is_empty(),
    );
    let (status, _) = post(&format!("{reporter}/heartbeat"), Some(TOKEN), &json!({}));
    assert_eq!(
        status, 409,
        "a forgotten reporter must send its full state again"
    );
    drop(service);
}

#[test]
fn bad_reports_are_refused_with_what_was_wrong() {
    let dir = TempDir::new("reporters-bad");
    let service = service(&dir, "");
    let reporter = format!("{}/v1/fleet/reporters/koishi", service.api);
    let bad = json!({"bots": [{"platform": "onebot", "id": "", "online": true, "channels": []}]});
    let (status, body) = put(&reporter, &bad);
    assert_eq!(status, 400);
    assert_eq!(body["error"], r#"bots[0].id: "" is empty"#);
    let (status, body) = put(&reporter, &json!({"bots": [{"platform": "onebot"}]}));
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("bots[0]: missing field"),
        "{body}"
    );
    let (status, _) = put(
        &format!("{}/v1/fleet/reporters/bad%20name", service.api),
        &fleet(true),
    );
    assert_eq!(status, 400);
    // Without the token: 401.
    let status = http()
        .put(&reporter)
        .send_json(fleet(true))
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(status, 401);
    assert!(assignments(&service.api).is_empty());
    drop(service);
}

/// Reads server-sent events from `url` into a channel: (event, data).
fn follow(url: &str) -> mpsc::Receiver<(String, Value)> {
    let (tx, rx) = mpsc::channel();
    let resp = http()
        .get(url)
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .call()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let content_type = resp
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap();
    assert_eq!(content_type, "text/event-stream");
    let reader = BufReader::new(resp.into_body().into_reader());
    std::thread::spawn(move || {
        let mut event = String::new();
        for line in reader.lines() {
            let Ok(line) = line else { return };
            if let Some(name) = line.strip_prefix("event: ") {
                event = name.to_owned();
            } else if let Some(data) = line.strip_prefix("data: ") {
                let data = serde_json::from_str(data).unwrap();
                if tx.send((std::mem::take(&mut event), data)).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

#[test]
fn the_stream_sends_a_snapshot_then_numbered_changes() {
    let dir = TempDir::new("reporters-stream");
    let service = service(&dir, "");
    let api = &service.api;
    let reporter = format!("{api}/v1/fleet/reporters/koishi");
    put(&reporter, &fleet(true));
    eventually("12 groups assigned", Duration::from_secs(10), || {
        assignments(api).len() == 12
    });

    let stream = follow(&format!("{api}/v1/assignments/stream"));
    let (event, snapshot) = stream.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(event, "snapshot");
    let mut mirror: BTreeMap<String, String> =
        serde_json::from_value(snapshot["assignments"]["onebot"].clone()).unwrap();
    assert_eq!(mirror, assignments(api));
    let mut version = snapshot["version"].as_u64().unwrap();

    // 1001 goes offline: the changes, applied in order to the snapshot, give the new map.
    put(&reporter, &fleet(false));
    eventually("1001's groups moved", Duration::from_secs(10), || {
        !assignments(api).values().any(|b| b == "1001")
    });
    let mut presences = Vec::new();
    while mirror != assignments(api) {
        let (event, changes) = stream.recv_timeout(Duration::from_secs(5)).unwrap();
        if event == "presence" {
            // Unversioned, beside the changes: the bot that went.
            presences.push(changes);
            continue;
        }
        assert_eq!(event, "changes");
        version += 1;
        assert_eq!(
            changes["version"].as_u64(),
            Some(version),
            "no gap, no repeat"
        );
        assert_eq!(changes["platform"], "onebot");
        for (channel, bot) in changes["assignments"].as_object().unwrap() {
            match bot.as_str() {
                Some(bot) => mirror.insert(channel.clone(), bot.to_owned()),
                None => mirror.remove(channel),
            };
        }
    }
    assert!(!mirror.values().any(|b| b == "1001"));
    for presence in presences {
        assert_eq!(
            presence,
            json!({"platform": "onebot", "bot": "1001", "online": false})
        );
    }

    // The stream ends when the service stops.
    service.stop().unwrap();
    let ended = loop {
        match stream.recv_timeout(Duration::from_secs(10)) {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert_eq!(ended, mpsc::RecvTimeoutError::Disconnected);
}

#[test]
fn onebot_outranks_a_reporter_and_the_file_fills_in() {
    let dir = TempDir::new("reporters-merge");
    // The fleet file knows bot 2001 in group 1; a reporter then reports 2001 in groups 1 and 2.
    dir.write("fleet.yaml", "bots:\n  - {id: 2001, channels: [1]}\n");
    let service = service(&dir, "  file: fleet.yaml\n");
    let api = &service.api;
    eventually("the file's bot assigned", Duration::from_secs(10), || {
        assignments(api).get("1").map(String::as_str) == Some("2001")
    });
    let reporter = format!("{api}/v1/fleet/reporters/koishi");
    let state = json!({"bots": [{"platform": "onebot", "id": "2001", "online": true, "channels": ["1", "2"]}]});
    put(&reporter, &state);
    // The reporter outranks the file: 2001 is in group 2 too.
    eventually(
        "the reporter's list followed",
        Duration::from_secs(10),
        || assignments(api).get("2").map(String::as_str) == Some("2001"),
    );
    // The reporter stops cleanly: the file's report takes over again (group 1 only).
    let status = http()
        .delete(&reporter)
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .call()
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(status, 200);
    eventually("back to the file's list", Duration::from_secs(10), || {
        let a = assignments(api);
        a.get("1").map(String::as_str) == Some("2001") && !a.contains_key("2")
    });
    drop(service);
}

/// A reporter that follows the stream naming itself is alive while the stream is open: when
/// its process dies (its connection closes, as the kernel closes a killed process's), its bots
/// go offline after `streamGrace`, long before `offlineGrace`, and their groups get a bot at
/// once; a stream that comes back within the grace costs nothing.
#[test]
fn a_reporter_whose_stream_closes_goes_offline_after_the_stream_grace() {
    let dir = TempDir::new("reporters-stream-liveness");
    // offlineGrace 600: only the stream can take the reporter offline within the test.
    let path = dir.write(
        "config.yaml",
        &format!(
            "database: {{url: \"sqlite://state.db\"}}\n\
             triggerDelays: {{botOnline: 20, botOffline: 20, channelJoined: 20, channelLeft: 20}}\n\
             api: {{bind: \"127.0.0.1:0\", token: {TOKEN}}}\n\
             sources:\n  http: {{startupWait: 0, offlineGrace: 600, streamGrace: 0.5}}\n"
        ),
    );
    let service = InProcess::start(&path).with_token(TOKEN);
    let api = service.api.clone();
    let a = format!("{api}/v1/fleet/reporters/process-a");
    let b = format!("{api}/v1/fleet/reporters/process-b");
    let groups = |r: std::ops::RangeInclusive<u32>| r.map(|g| g.to_string()).collect::<Vec<_>>();
    // Process a runs 1001; process b runs 1002; both bots in all twelve groups.
    let bot = |id: &str| json!({"bots": [{"platform": "onebot", "id": id, "online": true, "channels": groups(1..=12)}]});
    assert_eq!(put(&a, &bot("1001")).0, 200);
    assert_eq!(put(&b, &bot("1002")).0, 200);
    service.wait_runs(1, Duration::from_secs(30));
    // Each process follows the stream naming itself.
    let open = |name: &str| {
        let url = format!("{api}/v1/assignments/stream?reporter={name}");
        let stream = std::net::TcpStream::connect(api.trim_start_matches("http://")).unwrap();
        use std::io::Write as _;
        let mut s = stream.try_clone().unwrap();
        let path = url.trim_start_matches(&api);
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        )
        .unwrap();
        let mut lines = BufReader::new(stream.try_clone().unwrap()).lines();
        assert!(lines.next().unwrap().unwrap().contains("200"));
        stream
    };
    let stream_a = open("process-a");
    let _stream_b = open("process-b");
    // 1001 came first and took every group at once; balance them now.
    post(&format!("{api}/v1/rebalance"), Some(TOKEN), &json!({}));
    eventually("both bots hold groups", Duration::from_secs(10), || {
        let a = assignments(&api);
        let l = loads(&a);
        l.get("1001").is_some_and(|&n| n > 0) && l.get("1002").is_some_and(|&n| n > 0)
    });

    // A stream that drops and comes back within the grace costs nothing.
    drop(stream_a);
    let stream_a = open("process-a");
    std::thread::sleep(Duration::from_millis(800)); // past the grace: nothing happens
    let (_, bots) = get(&format!("{api}/v1/bots"), Some(TOKEN));
    let online = |bots: &Value, id: &str| {
        bots.as_array()
            .unwrap()
            .iter()
            .any(|b| b["bot"] == id && b["online"] == true)
    };
    assert!(online(&bots, "1001"), "{bots}");

    // Process a dies: its connection closes; within the grace and a provisional pass, its
    // groups are 1002's (the rebalance waits 20 s: this is not it).
    let killed = std::time::Instant::now();
    stream_a.shutdown(std::net::Shutdown::Both).unwrap();
    drop(stream_a);
    eventually("1001's groups taken over", Duration::from_secs(10), || {
        let a = assignments(&api);
        a.len() == 12 && a.values().all(|b| b == "1002")
    });
    let took = killed.elapsed();
    println!("stream closed → every group on the other process's bot in {took:?}");
    assert!(!online(
        &get(&format!("{api}/v1/bots"), Some(TOKEN)).1,
        "1001"
    ));
    // Back: the full state again, as the plugin sends it after reconnecting.
    assert_eq!(put(&a, &bot("1001")).0, 200);
    eventually("1001 online again", Duration::from_secs(10), || {
        online(&get(&format!("{api}/v1/bots"), Some(TOKEN)).1, "1001")
    });
    service.stop().unwrap();
}
