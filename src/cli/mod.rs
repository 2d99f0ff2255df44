//! `auto-assign status` and `auto-assign explain`: a running service's state, from its API.

use std::fmt::Write as _;

/// The JSON fleet snapshot `auto-assign plan` reads.
pub mod snapshot;

use serde_json::Value;

/// Where the service's API is and how to talk to it.
pub struct Remote {
    pub api: String,
    pub token: Option<String>,
}

/// Why a command could not answer.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("{url}: {why}")]
    Unreachable { url: String, why: String },
    #[error("{url}: HTTP {status}: {message}")]
    Refused {
        url: String,
        status: u16,
        message: String,
    },
}

impl Remote {
    fn get(&self, path: &str) -> Result<Value, RemoteError> {
        let url = format!("{}{path}", self.api.trim_end_matches('/'));
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(std::time::Duration::from_secs(10)))
                .build(),
        );
        let mut request = agent.get(&url);
        if let Some(token) = &self.token {
            request = request.header("Authorization", &format!("Bearer {token}"));
        }
        let unreachable = |why: String| RemoteError::Unreachable {
            url: url.clone(),
            why,
        };
        let mut response = request.call().map_err(|e| unreachable(e.to_string()))?;
        let status = response.status().as_u16();
        let body: Value = response
            .body_mut()
            .read_json()
            .map_err(|e| unreachable(format!("not a JSON answer ({e})")))?;
        if status != 200 {
            return Err(RemoteError::Refused {
                url,
                status,
                message: body["error"].as_str().unwrap_or("").to_owned(),
            });
        }
        Ok(body)
    }

    /// `GET /v1/status`, `/v1/bots` and `/healthz` in one JSON object.
    pub fn status(&self) -> Result<Value, RemoteError> {
        Ok(serde_json::json!({
            "status": self.get("/v1/status")?,
            "bots": self.get("/v1/bots")?,
            "health": self.get("/healthz")?,
        }))
    }

    pub fn explain(&self, platform: &str, channel: &str) -> Result<Value, RemoteError> {
        self.get(&format!(
            "/v1/explain/{}/{}",
            encode_segment(platform),
            encode_segment(channel)
        ))
    }
}

/// A path segment with everything but unreserved characters percent-encoded.
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The status as a table for people.
pub fn status_table(all: &Value) -> String {
    let mut out = String::new();
    let status = &all["status"];
    if let Some(platforms) = status["platforms"].as_object() {
        for (platform, c) in platforms {
            let _ = writeln!(
                out,
                "platform {platform}: {} assigned, {} unassigned, {} excluded; load mean {:.2}, \
                 stddev {:.2}, max {}",
                c["assigned"],
                c["unassigned"],
                c["excluded"],
                c["mean"].as_f64().unwrap_or(0.0),
                c["stddev"].as_f64().unwrap_or(0.0),
                c["max_load"]
            );
            let _ = writeln!(
                out,
                "  {:<14} {:<7} {:>6}  {:<12} HEALTH",
                "BOT", "ONLINE", "LOAD", "CONNECTION"
            );
            for bot in all["bots"].as_array().into_iter().flatten() {
                if bot["platform"] != platform.as_str() {
                    continue;
                }
                let presence = &bot["presence"];
                let connection = match (presence["connected"].as_bool(), presence["mode"].as_str())
                {
                    (Some(true), Some(mode)) => mode.to_owned(),
                    (Some(false), Some(_)) => "lost".to_owned(),
                    _ => "-".to_owned(),
                };
                let health = if presence["quarantined"].as_bool() == Some(true) {
                    "quarantined"
                } else {
                    "ok"
                };
                let _ = writeln!(
                    out,
                    "  {:<14} {:<7} {:>6}  {:<12} {health}",
                    bot["bot"].as_str().unwrap_or(""),
                    if bot["online"].as_bool() == Some(true) {
                        "yes"
                    } else {
                        "no"
                    },
                    bot["load"],
                    connection,
                );
            }
        }
    }
    match status["last_run"].as_object() {
        Some(run) => {
            let _ = writeln!(
                out,
                "last rebalance #{} ({}): moved {} forced, {} voluntary",
                run["number"],
                run["causes"].as_str().unwrap_or(""),
                run["moved_forced"],
                run["moved_voluntary"]
            );
        }
        None => out.push_str("no rebalance yet\n"),
    }
    let health = &all["health"];
    let store = &health["store"];
    let _ = writeln!(
        out,
        "health: {}; store {} ({} row(s) pending{}); redis {}",
        health["status"].as_str().unwrap_or("?"),
        if store["committed"].as_bool() == Some(true) {
            "committed"
        } else {
            "not committed"
        },
        store["pending_rows"],
        store["last_error"]
            .as_str()
            .map(|e| format!(", last error: {e}"))
            .unwrap_or_default(),
        health["redis"].as_str().unwrap_or("?"),
    );
    let config = &status["config"];
    if let Some(rejected) = config["rejected"].as_str() {
        let _ = writeln!(
            out,
            "config: the last edit was rejected and is not in force: {rejected}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_encoded() {
        assert_eq!(encode_segment("!room:server/x"), "%21room%3Aserver%2Fx");
        assert_eq!(encode_segment("100001"), "100001");
    }
}
