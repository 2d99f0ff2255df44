//! The operator's commands against a running service: pins, holds, drains, their lists, and a
//! rebalance now or its dry run, each answer as a table for people (or as JSON).

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{Method, Remote, RemoteError, encode_segment};

/// A group on the command line: `onebot:100005`, or `100005` on `platform`.
pub fn group(text: &str, platform: &str) -> (String, String) {
    match text.split_once(':') {
        Some((p, id)) if !p.is_empty() && !id.is_empty() => (p.to_owned(), id.to_owned()),
        _ => (platform.to_owned(), text.to_owned()),
    }
}

/// When and why, as the API takes them.
pub struct Reason {
    pub until: Option<String>,
    pub note: Option<String>,
}

impl Reason {
    fn json(&self, mut body: Value) -> Value {
        if let Some(until) = &self.until {
            body["until"] = json!(until);
        }
        if let Some(note) = &self.note {
            body["note"] = json!(note);
        }
        body
    }
}

impl Remote {
    /// Pins `group` to `bot`, or holds it with no assignee (`bot: None`).
    pub fn pin(
        &self,
        (platform, channel): (&str, &str),
        bot: Option<&str>,
        reason: &Reason,
    ) -> Result<Value, RemoteError> {
        let path = format!(
            "/v1/pins/{}/{}",
            encode_segment(platform),
            encode_segment(channel)
        );
        let body = reason.json(json!({ "bot": bot }));
        self.call(Method::Put, &path, Some(&body))
    }

    pub fn unpin(&self, (platform, channel): (&str, &str)) -> Result<Value, RemoteError> {
        let path = format!(
            "/v1/pins/{}/{}",
            encode_segment(platform),
            encode_segment(channel)
        );
        self.call(Method::Delete, &path, None)
    }

    pub fn drain(
        &self,
        (platform, bot): (&str, &str),
        reason: &Reason,
    ) -> Result<Value, RemoteError> {
        let path = format!(
            "/v1/drains/{}/{}",
            encode_segment(platform),
            encode_segment(bot)
        );
        self.call(Method::Put, &path, Some(&reason.json(json!({}))))
    }

    pub fn undrain(&self, (platform, bot): (&str, &str)) -> Result<Value, RemoteError> {
        let path = format!(
            "/v1/drains/{}/{}",
            encode_segment(platform),
            encode_segment(bot)
        );
        self.call(Method::Delete, &path, None)
    }

    pub fn pins(&self) -> Result<Value, RemoteError> {
        self.call(Method::Get, "/v1/pins", None)
    }

    pub fn drains(&self) -> Result<Value, RemoteError> {
        self.call(Method::Get, "/v1/drains", None)
    }

    /// A rebalance now, or (`dry_run`) what it would do.
    pub fn rebalance(&self, dry_run: bool) -> Result<Value, RemoteError> {
        let path = if dry_run {
            "/v1/rebalance?dryRun=true"
        } else {
            "/v1/rebalance"
        };
        self.call(Method::Post, path, None)
    }
}

/// One pin or drain as a line: `onebot:100005 → 1002 until … by … (note)`.
pub fn change_line(what: &str, shown: &Value) -> String {
    let target = match shown["channel"].as_str() {
        Some(channel) => format!(
            "{}:{channel} → {}",
            text(&shown["platform"]),
            shown["bot"].as_str().unwrap_or("no assignee (held)")
        ),
        None => format!("{}:{}", text(&shown["platform"]), text(&shown["bot"])),
    };
    let mut line = format!("{what} {target}");
    if let Some(until) = shown["until"].as_str() {
        let _ = write!(line, " until {until}");
    }
    let _ = write!(line, " by {}", text(&shown["by"]));
    if let Some(note) = shown["note"].as_str() {
        let _ = write!(line, " ({note})");
    }
    if let Some(warning) = shown["warning"].as_str() {
        let _ = write!(line, "\nwarning: {warning}");
    }
    line
}

/// `GET /v1/pins` as a table.
pub fn pins_table(answer: &Value) -> String {
    let pins = answer["pins"].as_array().cloned().unwrap_or_default();
    if pins.is_empty() {
        return "no pins\n".to_owned();
    }
    let mut out = format!(
        "{:<20} {:<12} {:<9} {:<12} {:<21} {:<12} NOTE\n",
        "GROUP", "BOT", "STATE", "ASSIGNEE", "UNTIL", "BY"
    );
    for p in &pins {
        let _ = writeln!(
            out,
            "{:<20} {:<12} {:<9} {:<12} {:<21} {:<12} {}",
            format!("{}:{}", text(&p["platform"]), text(&p["channel"])),
            p["bot"].as_str().unwrap_or("(none)"),
            text(&p["state"]),
            p["assignee"].as_str().unwrap_or("-"),
            p["until"].as_str().unwrap_or("-"),
            text(&p["by"]),
            p["note"].as_str().unwrap_or(""),
        );
    }
    out
}

/// `GET /v1/drains` as a table.
pub fn drains_table(answer: &Value) -> String {
    let drains = answer["drains"].as_array().cloned().unwrap_or_default();
    if drains.is_empty() {
        return "no drains\n".to_owned();
    }
    let mut out = format!(
        "{:<24} {:>5} {:<21} {:<12} NOTE\n",
        "BOT", "KEPT", "UNTIL", "BY"
    );
    for d in &drains {
        let _ = writeln!(
            out,
            "{:<24} {:>5} {:<21} {:<12} {}",
            format!("{}:{}", text(&d["platform"]), text(&d["bot"])),
            d["kept"].to_string(),
            d["until"].as_str().unwrap_or("-"),
            text(&d["by"]),
            d["note"].as_str().unwrap_or(""),
        );
    }
    out
}

/// A dry run as tables: per platform, the moves, each bot's load before and after, and the
/// balance before and after.
pub fn dry_run_table(answer: &Value) -> String {
    let mut out = String::new();
    for p in answer["platforms"].as_array().into_iter().flatten() {
        let moves = p["moves"].as_array().cloned().unwrap_or_default();
        let _ = writeln!(
            out,
            "platform {} (balance by {}): {} move(s), {} forced, {} voluntary",
            text(&p["platform"]),
            text(&p["balanceBy"]),
            moves.len(),
            p["forced"],
            p["voluntary"]
        );
        if !moves.is_empty() {
            let _ = writeln!(
                out,
                "  {:<16} {:<12} {:<12} {:<10} RULE",
                "GROUP", "FROM", "TO", "KIND"
            );
            for m in &moves {
                let _ = writeln!(
                    out,
                    "  {:<16} {:<12} {:<12} {:<10} {}",
                    text(&m["channel"]),
                    m["from"].as_str().unwrap_or("-"),
                    m["to"].as_str().unwrap_or("-"),
                    text(&m["kind"]),
                    text(&m["rule"]),
                );
            }
        }
        let weighted = p["before"]["weightedSumSq"].is_number();
        let _ = writeln!(
            out,
            "  {:<14} {:<7} {:>6} {:>6}{}",
            "BOT",
            "ONLINE",
            "BEFORE",
            "AFTER",
            if weighted {
                "  MESSAGES/DAY BEFORE → AFTER"
            } else {
                ""
            }
        );
        for l in p["loads"].as_array().into_iter().flatten() {
            let online = match (l["online"].as_bool(), l["drained"].as_bool()) {
                (Some(true), Some(true)) => "drained",
                (Some(true), _) => "yes",
                _ => "no",
            };
            let messages = if weighted {
                format!(
                    "  {:.1} → {:.1}",
                    l["messagesBefore"].as_f64().unwrap_or(0.0),
                    l["messagesAfter"].as_f64().unwrap_or(0.0)
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {:<14} {:<7} {:>6} {:>6}{messages}",
                text(&l["bot"]),
                online,
                l["before"].to_string(),
                l["after"].to_string(),
            );
        }
        let (before, after) = (&p["before"], &p["after"]);
        let _ = writeln!(
            out,
            "  Σ load² {} → {}, stddev {:.2} → {:.2}, max {} → {}",
            before["sumSq"],
            after["sumSq"],
            before["stddev"].as_f64().unwrap_or(0.0),
            after["stddev"].as_f64().unwrap_or(0.0),
            before["max"],
            after["max"],
        );
        if weighted {
            let _ = writeln!(
                out,
                "  Σ (messages per bot)² {:.0} → {:.0}; lower bound {:.0}, gap {:.3}%",
                before["weightedSumSq"].as_f64().unwrap_or(0.0),
                after["weightedSumSq"].as_f64().unwrap_or(0.0),
                after["lowerBound"].as_f64().unwrap_or(0.0),
                100.0 * after["gap"].as_f64().unwrap_or(0.0),
            );
        }
    }
    if out.is_empty() {
        out.push_str("nothing to plan\n");
    }
    out.push_str("dry run: nothing was changed\n");
    out
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_take_a_platform_or_the_default() {
        assert_eq!(
            group("100005", "onebot"),
            ("onebot".into(), "100005".into())
        );
        assert_eq!(group("qq:7", "onebot"), ("qq".into(), "7".into()));
        assert_eq!(group(":7", "onebot"), ("onebot".into(), ":7".into()));
    }

    #[test]
    fn a_dry_run_reads_as_a_table() {
        let answer = json!({"platforms": [{
            "platform": "onebot", "balanceBy": "channels", "forced": 1, "voluntary": 0,
            "moves": [{"channel": "100009", "from": "1003", "to": "1001", "kind": "forced", "rule": "bot-gone"}],
            "loads": [{"bot": "1001", "online": true, "drained": false, "before": 4, "after": 5}],
            "before": {"sumSq": 16, "stddev": 0.0, "max": 4},
            "after": {"sumSq": 25, "stddev": 0.0, "max": 5}
        }]});
        let table = dry_run_table(&answer);
        assert!(
            table.contains("1 move(s), 1 forced, 0 voluntary"),
            "{table}"
        );
        assert!(
            table.contains("100009") && table.contains("bot-gone"),
            "{table}"
        );
        assert!(table.contains("Σ load² 16 → 25"), "{table}");
        assert!(table.ends_with("dry run: nothing was changed\n"));
    }
}
