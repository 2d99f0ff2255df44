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
