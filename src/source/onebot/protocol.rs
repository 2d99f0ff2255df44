//! The OneBot v11 frames this source reads and writes.
//!
//! A frame on a Universal socket is an event (it has `post_type`) or an action response (it
//! has `echo` or `retcode`). Ids are int64 in the spec but some implementations send numeric
//! strings; both become decimal strings here. Fields this source does not need are ignored,
//! whatever they contain.

use serde_json::{Value, json};

use crate::logs::cut;

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
    pub data: Value,
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
    /// Messages, requests, other notices and other members' joins: not this source's business.
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

/// Parses one text frame.
pub fn parse(text: &str) -> Result<Frame, FrameError> {
    let mut value: Value =
        serde_json::from_str(text).map_err(|e| FrameError(format!("malformed JSON: {e}")))?;
    let Value::Object(obj) = &mut value else {
        return Err(FrameError("frame is not a JSON object".to_owned()));
    };
    if obj.contains_key("post_type") {
        return parse_event(&value).map(Frame::Event);
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
        // Taken, not copied: `data` can be a group list of thousands of entries.
        return Ok(Frame::Response(Response {
            echo: obj.remove("echo").unwrap_or(Value::Null),
            ok,
            retcode,
            data: obj.remove("data").unwrap_or(Value::Null),
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
        _ => Ok(Event::Other),
    }
}

/// A positive id field as a decimal string (int64 or numeric string): QQ numbers and group
/// numbers are never zero or negative.
pub fn id(v: &Value, key: &str) -> Result<String, FrameError> {
    let n = match v.get(key) {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.parse::<i64>().ok(),
        Some(_) => None,
        None => return Err(FrameError(format!("`{key}` is missing"))),
    };
    match n {
        Some(n) if n > 0 => Ok(n.to_string()),
        _ => {
            let shown = v.get(key).map(Value::to_string).unwrap_or_default();
            Err(FrameError(format!("`{key}` is not an id: {}", cut(&shown))))
        }
    }
}

/// The group ids of a `get_group_list` answer, and how many entries were not groups (no
/// positive `group_id`): those are left out, not fatal.
pub fn group_ids(data: &Value) -> Result<(Vec<String>, usize), FrameError> {
    let list = data
        .as_array()
        .ok_or_else(|| FrameError("get_group_list: data is not a list".to_owned()))?;
    let mut groups = Vec::with_capacity(list.len());
    let mut bad = 0;
    for g in list {
        match id(g, "group_id") {
            Ok(id) => groups.push(id),
            Err(_) => bad += 1,
        }
    }
    Ok((groups, bad))
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
        let msg = r#"{"post_type":"message","message_type":"group","self_id":1,"group_id":2,"user_id":3,"message":"hi","extra":{"x":[1]}}"#;
        assert_eq!(parse(msg).unwrap(), Frame::Event(Event::Other));
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
        let bad_id = r#"{"post_type":"notice","notice_type":"group_increase","self_id":1,"user_id":1,"group_id":"12a"}"#;
        assert!(parse(bad_id).is_err());
    }

    #[test]
    fn group_lists_and_status() {
        let data = json!([{"group_id": 100001, "group_name": "a"}, {"group_id": "100002"},
            {"group_id": 0}, {"group_id": -9223372036854775808i64}, {"group_id": "-5"}, {"x": 1}]);
        let (groups, bad) = group_ids(&data).unwrap();
        assert_eq!(groups, ["100001", "100002"]);
        assert_eq!(bad, 4);
        let huge = json!({"group_id": "9".repeat(300_000)});
        let e = id(&huge, "group_id").unwrap_err().to_string();
        assert!(e.len() < 300 && e.ends_with("bytes)"), "{e}");
        assert!(group_ids(&json!({"group_id": 1})).is_err());
        assert!(status_healthy(&json!({"online": true, "good": true})));
        assert!(status_healthy(&json!({"online": null, "good": true})));
        assert!(!status_healthy(&json!({"online": false, "good": true})));
        assert!(!status_healthy(&json!({"good": false})));
        assert!(!status_healthy(&json!({"stat": {}})));
        assert!(!status_healthy(&json!(null)));
    }
}
