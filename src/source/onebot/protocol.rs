//! The OneBot v11 frames this source reads and writes.
//!
//! A frame on a Universal socket is an event (it has `post_type`) or an action response (it
//! has `echo` or `retcode`). Ids are int64 in the spec but some implementations send numeric
//! strings; both become decimal strings here. Fields this source does not need are ignored,
//! whatever they contain.

use std::fmt;

use serde::Deserializer;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, json};

use crate::logs::cut;
use crate::pallas::signature::{Body, Signature, Time};

/// An action request: `{"action", "params", "echo"}`.
pub fn request(action: &str, params: Value, echo: &str) -> String {
    json!({ "action": action, "params": params, "echo": echo }).to_string()
}

/// What a frame is.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Response(Response),
    Event(Event),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// Kept opaque: matched against what was sent.
    pub echo: Value,
    pub ok: bool,
    pub retcode: i64,
    pub data: Data,
    /// The implementation's explanation (`message` / `wording`, NapCat), if any.
    pub message: String,
}

/// The events this source acts on; everything else is `Other` and ignored.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Lifecycle {
        sub_type: String,
    },
    Heartbeat {
        /// Milliseconds until the next heartbeat, if given.
        interval_ms: Option<u64>,
        /// `status.online`: `Some(false)` means the account is logged out.
        online: Option<bool>,
    },
    /// The bot itself joined a group (`group_increase` with `user_id == self_id`).
    Joined {
        group: String,
    },
    /// The bot itself left, was kicked, or the group was disbanded.
    Left {
        group: String,
        sub_type: String,
    },
    /// The bot itself was made (`admin`) or no longer is an admin of a group (`group_admin`).
    AdminChanged {
        group: String,
        admin: bool,
    },
    /// `notice/bot_offline` (NapCat, Lagrange): the account is logged out; the socket stays.
    BotOffline {
        message: String,
    },
    /// A group message: counted for the group's weight (once, by its signature, however
    /// many bots deliver it).
    GroupMessage {
        group: String,
        /// The sender: a bot of the fleet replying is not traffic to balance.
        user: String,
        /// The claims' signature key (Pallas-Bot's, with the time).
        signature: u64,
    },
    /// Private messages, requests, other notices and other members' joins: not this source's
    /// business.
    Other,
}

/// Why a frame could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError(pub String);

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An action's answer `data`, read in the same pass as its frame. A list (only
/// `get_group_list` answers with one: thousands of entries) goes straight into its entries'
/// group ids, never built into a tree nor kept as text to be read again; anything else (login,
/// status, member info: small answers) becomes a tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// A list: its entries' positive `group_id`s ([`positive_id`]), and how many entries had
    /// none (counted, not kept: a list of a million `0`s costs a number, not 16 MB).
    Entries { groups: Vec<i64>, bad: usize },
    /// Anything but a list.
    Value(Value),
}

impl Data {
    /// As a JSON tree, for the small answers; a list, which none of them is, as null.
    pub fn into_value(self) -> Value {
        match self {
            Data::Entries { .. } => Value::Null,
            Data::Value(v) => v,
        }
    }
}

/// The top-level fields any event or response this source reads can use; others are skipped
/// unread, and `data` is read as [`Data`].
const FIELDS: &[&str] = &[
    "post_type",
    "message_type",
    "raw_message",
    "time",
    "meta_event_type",
    "notice_type",
    "sub_type",
    "self_id",
    "user_id",
    "group_id",
    "interval",
    "status",
    "message",
    "tag",
    "echo",
    "retcode",
    "wording",
    "msg",
];

/// A frame's top level (an object): the fields of [`FIELDS`] as values, and `data`.
struct Envelope {
    fields: Map<String, Value>,
    data: Option<Data>,
}

impl<'de> serde::Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EnvelopeVisitor)
    }
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope, A::Error> {
        let mut fields = Map::new();
        let mut data = None;
        // A repeated key keeps its last value, as a JSON tree would.
        while let Some(key) = map.next_key::<String>()? {
            if key == "data" {
                data = Some(map.next_value::<Data>()?);
            } else if FIELDS.contains(&key.as_str()) {
                fields.insert(key, map.next_value::<Value>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Envelope { fields, data })
    }
}

/// Parses one text frame.
pub fn parse(text: &str) -> Result<Frame, FrameError> {
    let Envelope {
        fields: mut obj,
        data,
    } = serde_json::from_str(text).map_err(|e| {
        FrameError(match e.classify() {
            // Well-formed up to where it turned out not to be an object.
            serde_json::error::Category::Data => "frame is not a JSON object".to_owned(),
            _ => format!("malformed JSON: {e}"),
        })
    })?;
    if obj.contains_key("post_type") {
        return parse_event(&Value::Object(obj)).map(Frame::Event);
    }
    if obj.contains_key("echo") || obj.contains_key("retcode") {
        let retcode = obj.get("retcode").and_then(Value::as_i64).unwrap_or(-1);
        let status = obj.get("status").and_then(Value::as_str).unwrap_or("");
        let message = ["message", "wording", "msg"]
            .iter()
            .filter_map(|k| obj.get(*k).and_then(Value::as_str))
            .find(|m| !m.is_empty())
            .unwrap_or("")
            .to_owned();
        let ok = retcode == 0 && (status == "ok" || status.is_empty());
        return Ok(Frame::Response(Response {
            echo: obj.remove("echo").unwrap_or(Value::Null),
            ok,
            retcode,
            data: data.unwrap_or(Data::Value(Value::Null)),
            message,
        }));
    }
    Err(FrameError(
        "frame is neither an event (post_type) nor a response (echo/retcode)".to_owned(),
    ))
}

fn parse_event(v: &Value) -> Result<Event, FrameError> {
    let s = |key: &str| v.get(key).and_then(Value::as_str).unwrap_or("");
    match s("post_type") {
        "meta_event" => match s("meta_event_type") {
            "lifecycle" => Ok(Event::Lifecycle {
                sub_type: s("sub_type").to_owned(),
            }),
            "heartbeat" => Ok(Event::Heartbeat {
                interval_ms: v.get("interval").and_then(Value::as_u64),
                online: v.pointer("/status/online").and_then(Value::as_bool),
            }),
            _ => Ok(Event::Other),
        },
        "notice" => match s("notice_type") {
            kind @ ("group_increase" | "group_decrease") => {
                let self_id = id(v, "self_id")?;
                let user_id = id(v, "user_id")?;
                if self_id != user_id {
                    return Ok(Event::Other);
                }
                let group = id(v, "group_id")?;
                Ok(if kind == "group_increase" {
                    Event::Joined { group }
                } else {
                    Event::Left {
                        group,
                        sub_type: s("sub_type").to_owned(),
                    }
                })
            }
            "group_admin" => {
                if id(v, "self_id")? != id(v, "user_id")? {
                    return Ok(Event::Other);
                }
                match s("sub_type") {
                    sub @ ("set" | "unset") => Ok(Event::AdminChanged {
                        group: id(v, "group_id")?,
                        admin: sub == "set",
                    }),
                    _ => Ok(Event::Other),
                }
            }
            "bot_offline" => Ok(Event::BotOffline {
                message: [s("message"), s("tag")].join(" ").trim().to_owned(),
            }),
            _ => Ok(Event::Other),
        },
        "message" if s("message_type") == "group" => {
            let group = id(v, "group_id")?;
            let user = id(v, "user_id")?;
            // The raw text as Pallas-Bot signs it; a message given only as segments is
            // signed by its JSON text, the same for every bot that delivers it.
            let text = match (v.get("raw_message"), v.get("message")) {
                (Some(Value::String(raw)), _) | (None, Some(Value::String(raw))) => raw.clone(),
                (_, Some(other)) => other.to_string(),
                _ => String::new(),
            };
            let time = v.get("time").and_then(Value::as_i64).unwrap_or(0);
            let signature = Signature::new(
                group.parse().unwrap_or(0),
                user.parse().unwrap_or(0),
                &text,
                time,
                Body::Plaintext,
                Time::Included,
            )
            .key();
            Ok(Event::GroupMessage {
                group,
                user,
                signature,
            })
        }
        _ => Ok(Event::Other),
    }
}

/// A positive id field as a decimal string (int64 or numeric string): QQ numbers and group
/// numbers are never zero or negative.
pub fn id(v: &Value, key: &str) -> Result<String, FrameError> {
    let Some(field) = v.get(key) else {
        return Err(FrameError(format!("`{key}` is missing")));
    };
    match positive_id(field) {
        Some(n) => Ok(n.to_string()),
        None => Err(FrameError(format!(
            "`{key}` is not an id: {}",
            cut(&field.to_string())
        ))),
    }
}

/// An id value's number, if it is one: int64 or a numeric string, positive.
fn positive_id(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse::<i64>().ok(),
        _ => None,
    }
    .filter(|&n| n > 0)
}

/// A group's number when `id` writes one as this source does (the decimal of a positive id,
/// as [`id`] gives it): "05" and "+5" are other channels than group 5.
pub fn group_number(id: &str) -> Option<i64> {
    let canonical = id.bytes().all(|b| b.is_ascii_digit()) && !id.starts_with('0');
    canonical.then(|| id.parse().ok()).flatten()
}

/// The group ids of a `get_group_list` answer, and how many entries were not groups (no
/// positive `group_id`): those are left out, not fatal.
pub fn group_ids(data: Data) -> Result<(Vec<i64>, usize), FrameError> {
    match data {
        Data::Entries { groups, bad } => Ok((groups, bad)),
        Data::Value(_) => Err(FrameError("get_group_list: data is not a list".to_owned())),
    }
}

impl<'de> serde::Deserialize<'de> for Data {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DataVisitor)
    }
}

/// Reads a list as group entries, anything else as a tree.
struct DataVisitor;

impl<'de> Visitor<'de> for DataVisitor {
    type Value = Data;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Data, A::Error> {
        let (mut groups, mut bad) = (Vec::new(), 0);
        while let Some(GroupEntry(group)) = seq.next_element()? {
            match group {
                Some(group) => groups.push(group),
                None => bad += 1,
            }
        }
        Ok(Data::Entries { groups, bad })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Data, A::Error> {
        serde::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map)).map(Data::Value)
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Data, E> {
        Ok(Data::Value(n.into()))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Data, E> {
        Ok(Data::Value(n.into()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Data, E> {
        Ok(Data::Value(n.into()))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Data, E> {
        Ok(Data::Value(s.into()))
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Data, E> {
        Ok(Data::Value(b.into()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Data, E> {
        Ok(Data::Value(Value::Null))
    }
}

/// One list entry's `group_id`, if it is an object with a positive id ([`positive_id`]).
struct GroupEntry(Option<i64>);

impl<'de> serde::Deserialize<'de> for GroupEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(GroupEntryVisitor)
    }
}

/// A group entry's key, told apart without allocating.
#[derive(serde::Deserialize, PartialEq)]
#[serde(field_identifier, rename_all = "snake_case")]
enum EntryKey {
    GroupId,
    #[serde(other)]
    Other,
}

/// Reads an object's `group_id`, skipping its other fields unread; any other value is no
/// group.
struct GroupEntryVisitor;

impl<'de> Visitor<'de> for GroupEntryVisitor {
    type Value = GroupEntry;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<GroupEntry, A::Error> {
        let mut group = None;
        while let Some(key) = map.next_key::<EntryKey>()? {
            if key == EntryKey::GroupId {
                // A number or a short string: the same rule as every other id, no tree.
                group = positive_id(&map.next_value::<Value>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(GroupEntry(group))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<GroupEntry, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(GroupEntry(None))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<GroupEntry, E> {
        Ok(GroupEntry(None))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<GroupEntry, E> {
        Ok(GroupEntry(None))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<GroupEntry, E> {
        Ok(GroupEntry(None))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<GroupEntry, E> {
        Ok(GroupEntry(None))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<GroupEntry, E> {
        Ok(GroupEntry(None))
    }

    fn visit_unit<E: de::Error>(self) -> Result<GroupEntry, E> {
        Ok(GroupEntry(None))
    }
}

/// Pallas's health rule for a `get_status` answer: not logged out and not reported bad.
pub fn status_healthy(data: &Value) -> bool {
    let Some(obj) = data.as_object() else {
        return false;
    };
    if obj.get("online") == Some(&Value::Bool(false))
        || obj.get("good") == Some(&Value::Bool(false))
    {
        return false;
    }
    obj.contains_key("online") || obj.contains_key("good")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_and_responses() {
        let hb = r#"{"time":1,"self_id":1001,"post_type":"meta_event","meta_event_type":"heartbeat","status":{"online":false,"good":true},"interval":30000}"#;
        assert_eq!(
            parse(hb).unwrap(),
            Frame::Event(Event::Heartbeat {
                interval_ms: Some(30000),
                online: Some(false)
            })
        );
        let join = r#"{"post_type":"notice","notice_type":"group_increase","sub_type":"approve","self_id":"1001","user_id":1001,"group_id":"100001","operator_id":0}"#;
        assert_eq!(
            parse(join).unwrap(),
            Frame::Event(Event::Joined {
                group: "100001".into()
            })
        );
        let other_join = r#"{"post_type":"notice","notice_type":"group_increase","self_id":1001,"user_id":42,"group_id":1}"#;
        assert_eq!(parse(other_join).unwrap(), Frame::Event(Event::Other));
        let kicked = r#"{"post_type":"notice","notice_type":"group_decrease","sub_type":"kick_me","self_id":1001,"user_id":1001,"group_id":7}"#;
        assert_eq!(
            parse(kicked).unwrap(),
            Frame::Event(Event::Left {
                group: "7".into(),
                sub_type: "kick_me".into()
            })
        );
        let made_admin = r#"{"post_type":"notice","notice_type":"group_admin","sub_type":"set","self_id":1001,"user_id":1001,"group_id":7}"#;
        assert_eq!(
            parse(made_admin).unwrap(),
            Frame::Event(Event::AdminChanged {
                group: "7".into(),
                admin: true
            })
        );
        let other_admin = r#"{"post_type":"notice","notice_type":"group_admin","sub_type":"unset","self_id":1001,"user_id":5,"group_id":7}"#;
        assert_eq!(parse(other_admin).unwrap(), Frame::Event(Event::Other));
        // A group message: its signature is the claims' (Pallas-Bot's, with the time), the same
        // whichever bot delivers it.
        let msg = r#"{"post_type":"message","message_type":"group","self_id":1,"group_id":2,"user_id":3,"message":"hi","time":5,"extra":{"x":[1]}}"#;
        let same = r#"{"post_type":"message","message_type":"group","self_id":9,"group_id":2,"user_id":3,"raw_message":"hi","time":5}"#;
        let signature = Signature::new(2, 3, "hi", 5, Body::Plaintext, Time::Included).key();
        for frame in [msg, same] {
            assert_eq!(
                parse(frame).unwrap(),
                Frame::Event(Event::GroupMessage {
                    group: "2".into(),
                    user: "3".into(),
                    signature
                })
            );
        }
        let private = r#"{"post_type":"message","message_type":"private","self_id":1,"user_id":3,"message":"hi"}"#;
        assert_eq!(parse(private).unwrap(), Frame::Event(Event::Other));
        let resp = r#"{"status":"failed","retcode":1404,"data":null,"echo":{"n":[1]},"wording":"no such action"}"#;
        let Frame::Response(r) = parse(resp).unwrap() else {
            panic!()
        };
        assert!(!r.ok);
        assert_eq!(
            (r.retcode, r.echo, r.message),
            (1404, json!({"n":[1]}), "no such action".into())
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in ["", "{", "[]", "42", r#"{"hello":1}"#, "\u{0}\u{1}"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        for not_an_object in ["[1, {}]", "42", "\"x\"", "null", "true"] {
            assert_eq!(
                parse(not_an_object).unwrap_err().to_string(),
                "frame is not a JSON object"
            );
        }
        // A repeated key counts once, with its last value; `data` that is not a list is a tree.
        let twice = r#"{"retcode":1,"retcode":0,"status":"ok","data":{"a":[1, 2]},"echo":"e"}"#;
        let Frame::Response(r) = parse(twice).unwrap() else {
            panic!()
        };
        assert!(r.ok);
        assert_eq!(r.data.into_value(), json!({"a": [1, 2]}));
        let bad_id = r#"{"post_type":"notice","notice_type":"group_increase","self_id":1,"user_id":1,"group_id":"12a"}"#;
        assert!(parse(bad_id).is_err());
    }

    #[test]
    fn group_lists_and_status() {
        let list = json!([{"group_id": 100001, "group_name": "a"}, {"group_id": "100002"},
            {"group_id": 0}, {"group_id": -9223372036854775808i64}, {"group_id": "-5"}, {"x": 1}]);
        // As a frame's `data` is read.
        let data = |v: Value| serde_json::from_str::<Data>(&v.to_string()).unwrap();
        let (groups, bad) = group_ids(data(list)).unwrap();
        assert_eq!(groups, [100001, 100002]);
        assert_eq!(bad, 4);
        let huge = json!({"group_id": "9".repeat(300_000)});
        let e = id(&huge, "group_id").unwrap_err().to_string();
        assert!(e.len() < 300 && e.ends_with("bytes)"), "{e}");
        assert!(group_ids(data(json!({"group_id": 1}))).is_err());
        assert_eq!(group_number("100001"), Some(100001));
        for other in ["", "0", "05", "+5", "-5", "5 ", "99999999999999999999", "x"] {
            assert_eq!(group_number(other), None, "{other:?}");
        }
        // Read as a JSON tree would be: every kind of value, nested fields skipped, the last
        // of a repeated key.
        let list = r#"[{"group_id": 1.5}, {"group_id": 18446744073709551615}, {"group_id": true},
            {"group_id": null}, {"group_id": [7]}, {"group_id": {"group_id": 7}}, 7, "7", null,
            [{"group_id": 7}], {"x": {"group_id": 7, "y": [1, {"z": "q"}]}, "group_id": "8"},
            {"group_id": 5, "group_id": 9}, {"group_id": 9, "group_id": "x"}]"#;
        let read = serde_json::from_str::<Data>(list).unwrap();
        assert_eq!(group_ids(read).unwrap(), (vec![8, 9], 11));
        for not_a_list in [
            json!(null),
            json!("[]"),
            json!({"data": []}),
            json!(7),
            json!(true),
        ] {
            let read = data(not_a_list.clone());
            assert_eq!(read, Data::Value(not_a_list));
            assert!(group_ids(read).is_err());
        }
        // Entries without a group are counted, not kept.
        let zeros = data(json!(vec![0; 1000]));
        assert_eq!(
            zeros,
            Data::Entries {
                groups: vec![],
                bad: 1000
            }
        );
        // A whole answer, its list read in the frame's one pass.
        let answer = r#"{"status":"ok","retcode":0,"data":[{"group_id":3,"group_name":"x"},{"member_count":1}],"echo":"e"}"#;
        let Frame::Response(r) = parse(answer).unwrap() else {
            panic!()
        };
        assert_eq!(
            r.data,
            Data::Entries {
                groups: vec![3],
                bad: 1
            }
        );
        assert!(status_healthy(&json!({"online": true, "good": true})));
        assert!(status_healthy(&json!({"online": null, "good": true})));
        assert!(!status_healthy(&json!({"online": false, "good": true})));
        assert!(!status_healthy(&json!({"good": false})));
        assert!(!status_healthy(&json!({"stat": {}})));
        assert!(!status_healthy(&json!(null)));
    }
}
