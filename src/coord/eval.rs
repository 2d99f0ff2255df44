//! `auto-assign coord eval`: answers the golden vectors' functions, one JSON line per input,
//! so any vector file can be checked against this implementation.
//!
//! Each input line is an object with `fn` and that function's inputs; the output line is the
//! same object (same field order) with `result` set, or `error` when the line cannot be
//! answered (unknown `fn`, missing or mistyped inputs).

use serde_json::{Map, Value};

use super::signature::Signature;

/// Answers one input line.
pub fn eval_line(line: &str) -> String {
    let mut obj = match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(obj)) => obj,
        Ok(_) => return error_line(Map::new(), "input line is not a JSON object"),
        Err(e) => return error_line(Map::new(), &format!("malformed JSON: {e}")),
    };
    match answer(&obj) {
        Ok(result) => {
            obj.remove("error");
            obj.insert("result".to_owned(), result);
            Value::Object(obj).to_string()
        }
        Err(e) => error_line(obj, &e),
    }
}

fn error_line(mut obj: Map<String, Value>, error: &str) -> String {
    obj.remove("result");
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
        other => Err(format!("unsupported fn {other:?}")),
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
        flag("use_plaintext")?,
        flag("include_message_time")?,
    ))
}
