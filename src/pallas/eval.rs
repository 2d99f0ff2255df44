//! `auto-assign coord eval`: answers the golden vectors' functions (`signature`, `key`,
//! `ring_index`, `stable_ring_index`, `covers`, `owner`), one JSON line per input,
//! so any vector file can be checked against this implementation.
//!
//! For `owner`, upstream's `should_process` uses the wall clock rather than `at`; it is computed
//! at `process_at` when the line gives one, else at `at`.
//!
//! Each input line is an object with `fn` and that function's inputs; the output line is the
//! same object (same field order) with `result` set, or `error` when the line cannot be
//! answered (unknown `fn`, missing or mistyped inputs).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::federate::ring::{self, Local, PeerView};
use super::signature::{Body, Signature, Time};

/// Answers one input line.
pub fn eval_line(line: &str) -> String {
    let mut obj = match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(obj)) => obj,
        Ok(_) => return error_line(Map::new(), "input line is not a JSON object"),
        Err(e) => return error_line(Map::new(), &format!("malformed JSON: {e}")),
    };
    match answer(&obj) {
        Ok(result) => {
            // `shift_remove`: the other fields keep their order (a plain `remove` moves the
            // last field into the gap).
            obj.shift_remove("error");
            obj.insert("result".to_owned(), result);
            Value::Object(obj).to_string()
        }
        Err(e) => error_line(obj, &e),
    }
}

/// The answer to a line that is not UTF-8: an `error` line, so every input line gets one.
pub fn not_utf8_line(line_number: usize) -> String {
    error_line(
        Map::new(),
        &format!("input line {line_number} is not UTF-8"),
    )
}

fn error_line(mut obj: Map<String, Value>, error: &str) -> String {
    obj.shift_remove("result");
    obj.insert("error".to_owned(), Value::String(error.to_owned()));
    Value::Object(obj).to_string()
}

fn answer(obj: &Map<String, Value>) -> Result<Value, String> {
    let f = obj
        .get("fn")
        .and_then(Value::as_str)
        .ok_or("missing `fn`")?;
    match f {
        "signature" | "key" => {
            let sig = signature_of(obj)?;
            Ok(if f == "key" {
                Value::from(sig.key())
            } else {
                let mut items = vec![
                    Value::from(sig.group_id),
                    Value::from(sig.user_id),
                    Value::from(sig.body),
                ];
                items.extend(sig.time.map(Value::from));
                Value::Array(items)
            })
        }
        "ring_index" => {
            let size = obj
                .get("ring_size")
                .and_then(Value::as_i64)
                .ok_or("`ring_size` must be an integer")?;
            let period = match obj.get("rotate_sec_arg") {
                Some(v) => number(v)
                    .ok_or("`rotate_sec_arg` must be a number")?
                    .trunc() as i64,
                None => obj
                    .get("rotate_sec")
                    .map_or(Some(7200.0), number)
                    .ok_or("`rotate_sec` must be a number")?
                    .trunc() as i64,
            }
            .max(0);
            let now = obj.get("at").and_then(number).unwrap_or(0.0);
            let size = usize::try_from(size).unwrap_or(0);
            Ok(Value::from(ring::ring_index(
                int_field(obj, "group_id")?,
                size,
                now,
                period,
            )))
        }
        "stable_ring_index" => {
            let size = usize::try_from(int_field(obj, "ring_size")?).unwrap_or(0);
            Ok(Value::from(ring::stable_ring_index(
                int_field(obj, "group_id")?,
                size,
            )))
        }
        "covers" => {
            let caps = match obj.get("caps") {
                None | Some(Value::Null) => None,
                Some(Value::Array(items)) => Some(items.iter().map(text_of).collect::<Vec<_>>()),
                Some(_) => return Err("`caps` must be a list or null".to_owned()),
            };
            let plain = obj.get("plain").and_then(Value::as_str).unwrap_or("");
            Ok(Value::from(ring::covers(caps.as_deref(), plain)))
        }
        "owner" => owner(obj),
        other => Err(format!("unsupported fn {other:?}")),
    }
}

fn number(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn int_field(obj: &Map<String, Value>, k: &str) -> Result<i64, String> {
    obj.get(k)
        .and_then(Value::as_i64)
        .ok_or(format!("`{k}` must be an integer"))
}

/// Python's `str(x)` for the JSON scalars that appear in capability lists.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().map(text_of).collect())
        .unwrap_or_default()
}

fn owner(obj: &Map<String, Value>) -> Result<Value, String> {
    let mine = obj
        .get("mine")
        .and_then(Value::as_str)
        .ok_or("`mine` must be a string")?;
    let local = Local {
        mine: mine.to_owned(),
        caps: strings(obj.get("local_caps")),
        plaintext_to_id: obj
            .get("plaintext_to_id")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), text_of(v))).collect())
            .unwrap_or_default(),
        permission_levels: obj
            .get("local_permission_levels")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), text_of(v))).collect())
            .unwrap_or_default(),
        rotate_sec: obj
            .get("rotate_sec")
            .and_then(number)
            .unwrap_or(7200.0)
            .trunc() as i64,
        prefer_local: obj
            .get("prefer_local")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    };
    let mut peers = BTreeMap::new();
    for (dep, p) in obj
        .get("peers")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        peers.insert(dep.clone(), peer_view(p));
    }
    let group = int_field(obj, "group_id")?;
    let plain = obj.get("plain").and_then(Value::as_str);
    let now = obj.get("at").and_then(number).unwrap_or(0.0);
    let mut o = local.owner(&peers, group, plain, now);
    // Upstream's `should_process` reads the wall clock; `process_at` says which one (by default
    // the same `at` as the owner, so the answer is reproducible).
    if let Some(t) = obj.get("process_at").and_then(number) {
        o.should_process = local.owner(&peers, group, plain, t).should_process;
    }
    let mut out = json!({
        "owner": o.owner, "active": o.active, "capable_ring": o.capable_ring,
        "permission_ring": o.permission_ring, "present_ring": o.present_ring, "ring_index": o.ring_index,
        "command_id": o.command_id, "should_process": o.should_process, "should_yield": o.should_yield,
        "peer_declared": o.peer_declared,
    });
    if let Some(bots) = obj.get("local_group_bots").and_then(Value::as_array) {
        let roles = obj.get("local_admin_roles").and_then(Value::as_object);
        let mut admins = Some(BTreeSet::new());
        for bot in bots.iter().filter_map(Value::as_i64) {
            let role = roles
                .and_then(|r| r.get(&bot.to_string()))
                .and_then(Value::as_str);
            match role.map(|r| r.trim().to_lowercase()) {
                Some(r) if r == "admin" || r == "owner" => {
                    if let Some(a) = admins.as_mut() {
                        a.insert(bot);
                    }
                }
                Some(r) if r == "member" || r == "unknown" || r.is_empty() => {}
                _ => admins = None,
            }
        }
        if bots.is_empty() {
            admins = None;
        }
        let (observed, admin_owner) =
            local.group_admin_owner(&peers, group, plain, admins.as_ref());
        out["group_admin_observed"] = json!(observed);
        out["group_admin_owner"] = match admin_owner {
            Some(a) => json!({"deployment_id": a.deployment_id, "bot_id": a.bot_id}),
            None => Value::Null,
        };
    }
    Ok(out)
}

/// A peer as the vectors give it: already parsed caches (`null` and absent both mean unknown).
fn peer_view(p: &Value) -> PeerView {
    let ints = |v: &Value| -> BTreeSet<i64> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_i64)
            .collect()
    };
    PeerView {
        capabilities: p
            .get("capabilities")
            .filter(|v| !v.is_null())
            .map(|v| strings(Some(v))),
        permission_levels: p
            .get("permission_levels")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), text_of(v))).collect()),
        present_groups: p.get("present_groups").filter(|v| !v.is_null()).map(ints),
        group_admin_bot_ids: p
            .get("group_admin_bot_ids")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(g, bots)| Some((g.parse().ok()?, ints(bots))))
                    .collect()
            }),
        assigned_groups: None,
    }
}

fn signature_of(obj: &Map<String, Value>) -> Result<Signature, String> {
    let int = |k: &str| {
        obj.get(k)
            .and_then(Value::as_i64)
            .ok_or(format!("`{k}` must be an integer"))
    };
    let flag = |k: &str| {
        obj.get(k)
            .and_then(Value::as_bool)
            .ok_or(format!("`{k}` must be a boolean"))
    };
    let (group_id, user_id) = (int("group_id")?, int("user_id")?);
    let body = obj
        .get("body")
        .and_then(Value::as_str)
        .ok_or("`body` must be a string")?;
    let time = match obj.get("message_time") {
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f.trunc() as i64))
            .unwrap_or(0),
        _ => return Err("`message_time` must be a number".to_owned()),
    };
    Ok(Signature::new(
        group_id,
        user_id,
        body,
        time,
        if flag("use_plaintext")? {
            Body::Plaintext
        } else {
            Body::Raw
        },
        if flag("include_message_time")? {
            Time::Included
        } else {
            Time::Excluded
        },
    ))
}
