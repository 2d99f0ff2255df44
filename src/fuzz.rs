//! Fuzz targets, run by the test suite with proptest's default number of cases and by
//! `scripts/fuzz.sh` with many more: everything read from outside — OneBot frames, fleet
//! snapshots, `coord eval` lines, the config and fleet files — is turned into a value or a
//! clear error, never a panic. Inputs are random mutations of valid samples (bytes inserted,
//! deleted, replaced, spliced), which reach far deeper than random bytes alone.

use std::path::Path;

use proptest::prelude::*;

/// Valid samples the mutations start from.
const FRAMES: &[&str] = &[
    r#"{"time":1,"self_id":1001,"post_type":"meta_event","meta_event_type":"heartbeat","status":{"online":true,"good":true},"interval":30000}"#,
    r#"{"post_type":"notice","notice_type":"group_increase","sub_type":"approve","self_id":"1001","user_id":1001,"group_id":"100001","operator_id":0}"#,
    r#"{"post_type":"notice","notice_type":"group_decrease","sub_type":"kick_me","self_id":1001,"user_id":1001,"group_id":7}"#,
    r#"{"post_type":"notice","notice_type":"group_admin","sub_type":"set","self_id":1001,"user_id":1001,"group_id":7}"#,
    r#"{"post_type":"notice","notice_type":"bot_offline","user_id":1001,"tag":"x","message":"下线"}"#,
    r#"{"status":"ok","retcode":0,"data":[{"group_id":100001},{"group_id":"100002"}],"echo":"aa-1"}"#,
    r#"{"status":"failed","retcode":1403,"echo":null}"#,
];

const SNAPSHOT: &str = include_str!("../examples/snapshot.json");
const CONFIG: &str = include_str!("../config.yaml");
const FLEET: &str = include_str!("../examples/fleet.yaml");
const EVAL: &[&str] = &[
    r#"{"id":"k","fn":"key","group_id":12345,"user_id":999,"body":"牛牛画画 一只羊","message_time":100,"use_plaintext":true,"include_message_time":false}"#,
    r#"{"fn":"ring_index","group_id":733291779,"ring_size":3,"at":1700000000,"rotate_sec":7200}"#,
    r#"{"fn":"covers","caps":["牛牛帮助"],"plain":"/ 牛牛帮助 x"}"#,
    r#"{"fn":"owner","mine":"dep-b","peers":{"dep-a":{},"dep-c":{}},"local_caps":["牛牛帮助"],"plain":"随便聊聊","group_id":123,"at":1,"rotate_sec":0}"#,
];

/// One edit of a byte string.
#[derive(Clone, Debug)]
enum Edit {
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Replace(usize, u8),
    /// Copies a stretch of the input elsewhere (duplicated keys, nested structures).
    Splice(usize, usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let interesting = prop_oneof![
        Just(b"\"".to_vec()),
        Just(b"{".to_vec()),
        Just(b"}".to_vec()),
        Just(b"[".to_vec()),
        Just(b",".to_vec()),
        Just(b":".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"-9223372036854775808".to_vec()),
        Just(b"1e999".to_vec()),
        Just(b"null".to_vec()),
        Just(b"\xff\xfe".to_vec()),
        Just("牛".as_bytes().to_vec()),
        proptest::collection::vec(any::<u8>(), 1..8),
    ];
    prop_oneof![
        (any::<usize>(), interesting).prop_map(|(at, bytes)| Edit::Insert(at, bytes)),
        (any::<usize>(), 1..16usize).prop_map(|(at, n)| Edit::Delete(at, n)),
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Edit::Replace(at, b)),
        (any::<usize>(), 1..64usize, any::<usize>()).prop_map(|(a, n, b)| Edit::Splice(a, n, b)),
    ]
}

fn mutate(sample: &str, edits: &[Edit]) -> Vec<u8> {
    let mut bytes = sample.as_bytes().to_vec();
    for e in edits {
        let len = bytes.len().max(1);
        match e {
            Edit::Insert(at, b) => {
                let at = at % (bytes.len() + 1);
                bytes.splice(at..at, b.iter().copied());
            }
            Edit::Delete(at, n) => {
                let at = at % len;
                let end = (at + n).min(bytes.len());
                bytes.drain(at.min(end)..end);
            }
            Edit::Replace(at, b) => {
                if !bytes.is_empty() {
                    let at = at % bytes.len();
                    bytes[at] = *b;
                }
            }
            Edit::Splice(from, n, to) => {
                let from = from % len;
                let end = (from + n).min(bytes.len());
                let piece: Vec<u8> = bytes[from.min(end)..end].to_vec();
                let to = to % (bytes.len() + 1);
                bytes.splice(to..to, piece);
            }
        }
    }
    bytes
}

fn mutated(samples: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::sample::select(samples),
        proptest::collection::vec(edit(), 0..6),
    )
        .prop_map(|(sample, edits)| mutate(sample, &edits))
}

proptest! {
    #[test]
    fn fuzz_onebot_frames(bytes in mutated(FRAMES)) {
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(crate::source::onebot::protocol::Frame::Event(e)) =
            crate::source::onebot::protocol::parse(&text)
        {
            // Any id that comes out is a positive decimal number.
            use crate::source::onebot::protocol::Event;
            if let Event::Joined { group } | Event::Left { group, .. } = e {
                prop_assert!(group.parse::<i64>().is_ok_and(|g| g > 0), "{group}");
            }
        }
    }

    #[test]
    fn fuzz_snapshots(bytes in mutated(&[SNAPSHOT])) {
        if let Err(e) = crate::cli::snapshot::read(bytes.as_slice()) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn fuzz_coord_eval(bytes in mutated(EVAL)) {
        let out = match std::str::from_utf8(&bytes) {
            Ok(line) => crate::pallas::eval::eval_line(line),
            Err(_) => crate::pallas::eval::not_utf8_line(1),
        };
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        prop_assert!(v.get("result").is_some() ^ v.get("error").is_some(), "{out}");
    }

    #[test]
    fn fuzz_config_files(bytes in mutated(&[CONFIG])) {
        let path = Path::new("/etc/aa/config.yaml");
        if let Err(e) = crate::config::Config::parse_bytes(path, &bytes) {
            prop_assert!(e.to_string().starts_with("/etc/aa/config.yaml: "), "{e}");
        }
    }

    #[test]
    fn fuzz_fleet_files(bytes in mutated(&[FLEET])) {
        let path = Path::new("fleet.yaml");
        if let Err(e) = crate::source::file::Fleet::parse(path, &bytes) {
            prop_assert!(e.to_string().starts_with("fleet.yaml: "), "{e}");
        }
    }
}
