//! `auto-assign plan` end to end: the real binary, real files.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_auto-assign"))
}

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/snapshot.json")
}

fn plan(args: &[&str]) -> Output {
    bin()
        .arg("plan")
        .args(args)
        .output()
        .expect("run auto-assign")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("auto-assign-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn plans_the_shipped_example() {
    let out = plan(&["--input", example().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let assignment: BTreeMap<String, String> = serde_json::from_slice(&out.stdout).unwrap();
    // pinned to its first valid priority entry
    assert_eq!(assignment["onebot:100001"], "onebot:1003");
    // "1004" is offline, so the short-key list falls through to 1002
    assert_eq!(assignment["onebot:100002"], "onebot:1002");
    // single valid bot; offline 1004 never gets anything
    assert_eq!(assignment["onebot:100007"], "onebot:1001");
    assert!(assignment.values().all(|b| b != "onebot:1004"));
    // excluded, and without any valid bot: not in the output
    assert!(!assignment.contains_key("onebot:100012"));
    assert!(!assignment.contains_key("onebot:100011"));
    assert_eq!(assignment.len(), 10);
    let log = stderr(&out);
    assert!(
        log.contains(
            "platform onebot: assigned 10 channels, moved 2 (2 forced), 1 without a valid bot"
        ),
        "{log}"
    );
    assert!(log.contains("stddev 0.47"), "{log}");
    assert!(
        log.contains("no valid bot for 1 channel(s): onebot:100011"),
        "{log}"
    );
}

#[test]
fn output_file_feeds_back_as_previous_with_no_moves() {
    let dir = temp_dir("feedback");
    let first = dir.join("first.json");
    let out = plan(&[
        "--input",
        example().to_str().unwrap(),
        "--output",
        first.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.is_empty());

    // Same fleet, with the plan as the previous assignment.
    let mut snapshot: serde_json::Value =
        serde_json::from_slice(&std::fs::read(example()).unwrap()).unwrap();
    let previous: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&first).unwrap()).unwrap();
    snapshot["previous"] = previous;
    let second_input = dir.join("second-input.json");
    std::fs::write(&second_input, serde_json::to_vec(&snapshot).unwrap()).unwrap();
    let second = dir.join("second.json");
    let out = plan(&[
        "--input",
        second_input.to_str().unwrap(),
        "--output",
        second.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("moved 0 (0 forced)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read(&first).unwrap(),
        std::fs::read(&second).unwrap()
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn greedy_strategy_is_selectable() {
    let out = plan(&[
        "--input",
        example().to_str().unwrap(),
        "--strategy",
        "greedy",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let assignment: BTreeMap<String, String> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(assignment.len(), 10);
    assert_eq!(
        assignment["onebot:100001"], "onebot:1003",
        "pins hold for greedy too"
    );
}

#[test]
fn malformed_input_exits_2_naming_the_entry() {
    let dir = temp_dir("malformed");
    let cases = [
        (
            r#"{"bots": [1], "channels": []}"#,
            "bots[0]: invalid type: integer `1`",
        ),
        (r#"{"bots": ["onebot:1"]}"#, "missing field `channels`"),
        (
            r#"{"bots": ["onebot:1"], "channels": [{"id": "onebot:g", "bots": ["onebot:1"], "x": 1}]}"#,
            "channels[0].x: unknown field `x`",
        ),
        (
            r#"{"bots": ["1"], "channels": []}"#,
            "bots[0]: cannot tell the platform of bot \"1\"",
        ),
        (r#"{"bots": ["onebot:1"], "channels": [}"#, "line 1 column"),
        (
            r#"{"bots": ["onebot:1"], "channels": [], "previous": {"g": "onebot:1"}}"#,
            "previous.\"g\": the key must be \"platform:channel\"",
        ),
    ];
    for (i, (json, expected)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad-{i}.json"));
        std::fs::write(&path, json).unwrap();
        let out = plan(&["--input", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{json}");
        let err = stderr(&out);
        assert!(err.contains(expected), "{json}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(out.stdout.is_empty());
    }
    let missing = dir.join("missing.json");
    let out = plan(&["--input", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("missing.json"), "{}", stderr(&out));
    std::fs::remove_dir_all(dir).ok();
}

/// The output lists channels in snapshot order, whatever their platforms.
#[test]
fn output_follows_the_snapshot_order_across_platforms() {
    let dir = temp_dir("order");
    let input = dir.join("snapshot.json");
    std::fs::write(
        &input,
        r#"{"bots": ["onebot:1", "discord:9"],
            "channels": [{"id": "onebot:b", "bots": ["1"]}, {"id": "discord:c", "bots": ["9"]},
                         {"id": "onebot:a", "bots": ["1"]}, {"id": "discord:a", "bots": ["9"]}]}"#,
    )
    .unwrap();
    let out = plan(&["--input", input.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let keys: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().split('"').nth(1))
        .collect();
    assert_eq!(
        keys,
        ["onebot:b", "discord:c", "onebot:a", "discord:a"],
        "{text}"
    );
}

/// `coord eval` answers every line: one that is not UTF-8 gets an error line and the run
/// goes on; error lines keep the fields in their order.
#[test]
fn coord_eval_answers_every_line() {
    use std::io::Write;
    let mut child = bin()
        .args(["coord", "eval"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = Vec::new();
    input.extend_from_slice(b"{\"fn\":\"key\",\"group_id\":1,\"user_id\":2,\"body\":\"x\",\"message_time\":5,\"use_plaintext\":true,\"include_message_time\":false}\n");
    input.extend_from_slice(b"{\"fn\":\"key\",\"body\":\"\xff\xfe\"}\n");
    input.extend_from_slice(
        b"{\"id\":\"v1\",\"fn\":\"key\",\"result\":0,\"z\":1,\"group_id\":\"x\",\"a\":2}\n",
    );
    input.extend_from_slice(b"{\"fn\":\"key\",\"group_id\":1,\"user_id\":3,\"body\":\"y\",\"message_time\":5,\"use_plaintext\":true,\"include_message_time\":false}\n");
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(lines[0]["result"].is_u64());
    assert_eq!(lines[1]["error"], "input line 2 is not UTF-8");
    let keys: Vec<&String> = lines[2].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["id", "fn", "z", "group_id", "a", "error"],
        "{:?}",
        lines[2]
    );
    assert!(lines[3]["result"].is_u64());
}

/// Inputs of 8 MiB and more get their phases timed on stderr; long lists of warnings and of
/// channels without a valid bot are cut to their first entries and a count.
#[test]
fn large_inputs_report_phases_and_cut_long_lists() {
    use std::fmt::Write as _;
    let dir = temp_dir("large");
    let input = dir.join("snapshot.json");
    let mut json =
        String::from(r#"{"bots": ["onebot:1001", "onebot:1002", "onebot:1003"], "channels": ["#);
    let channels = 130_000;
    for i in 0..channels {
        let sep = if i == 0 { "" } else { ",\n" };
        let members = if i < 30 {
            r#"["onebot:9999"]"#
        } else {
            r#"["onebot:1001", "onebot:1002", "onebot:1003"]"#
        };
        write!(
            json,
            r#"{sep}{{"id": "onebot:{}", "bots": {members}}}"#,
            100_000_000 + i
        )
        .unwrap();
    }
    json.push_str("]}");
    assert!(json.len() >= 8 << 20, "{} bytes", json.len());
    std::fs::write(&input, json).unwrap();
    let output = dir.join("out.json");
    let out = plan(&[
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = stderr(&out);
    for phase in [
        "plan: read ",
        &format!("plan: indexed {channels} channels, 3 bots"),
        "plan: planned (optimal) in ",
        &format!("plan: wrote {} assignments in ", channels - 30),
        "plan: done in ",
    ] {
        assert!(log.contains(phase), "{phase}: {log}");
    }
    assert!(log.contains("peak RSS "), "{log}");
    assert!(
        log.contains("… and 10 more warnings like these"),
        "20 warnings in words, the rest counted: {log}"
    );
    let orphans = log
        .lines()
        .find(|l| l.starts_with("warning: no valid bot for 30 channel(s): "))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        orphans.ends_with("onebot:100000009, … and 20 more"),
        "{orphans}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// Ids are written as JSON strings whatever they contain.
#[test]
fn ids_needing_escapes_are_written_as_json() {
    let dir = temp_dir("escapes");
    let input = dir.join("snapshot.json");
    std::fs::write(
        &input,
        r#"{"bots": ["onebot:b\"1"], "channels": [{"id": "onebot:g\\1", "bots": ["b\"1"]},
            {"id": "onebot:plain", "bots": ["b\"1"]}]}"#,
    )
    .unwrap();
    let out = plan(&["--input", input.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let assignment: BTreeMap<String, String> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(assignment["onebot:g\\1"], "onebot:b\"1");
    assert_eq!(assignment["onebot:plain"], "onebot:b\"1");
    std::fs::remove_dir_all(dir).ok();
}
