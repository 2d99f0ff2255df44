//! `auto-assign status` and `auto-assign explain`: a running service's state, from its API;
//! and the operator's commands (`pin`, `unpin`, `drain`, `undrain`, `pins`, `drains`,
//! `rebalance [--dry-run]`, in [`operator`]). A change refused by a follower is sent once
//! more to the leader the refusal names.

use std::fmt::Write as _;

pub mod operator;
/// The JSON fleet snapshot `auto-assign plan` reads.
pub mod snapshot;

use serde_json::Value;

/// Where the service's API is and how to talk to it.
pub struct Remote {
    pub api: String,
    pub token: Option<String>,
    /// The CA (PEM) an `https://` API's certificate is checked against, instead of the
    /// system's roots.
    pub ca_file: Option<std::path::PathBuf>,
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
    /// A follower's refusal, naming the leader's API.
    #[error("{url}: HTTP 409: {message}")]
    Leader {
        url: String,
        api: String,
        message: String,
    },
}

/// An HTTP method the commands use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Remote {
    fn get(&self, path: &str) -> Result<Value, RemoteError> {
        self.call(Method::Get, path, None)
    }

    /// A request to `path` with an optional JSON body; a 2xx answer's JSON, or why not. A
    /// follower's 409 that names the leader's API address is sent there once more.
    pub(crate) fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, RemoteError> {
        match self.call_at(&self.api, method, path, body) {
            Err(RemoteError::Leader { api, .. }) if method != Method::Get => {
                eprintln!("this instance follows; sending it to the leader at {api}");
                self.call_at(&api, method, path, body)
            }
            Err(RemoteError::Leader { url, message, .. }) => Err(RemoteError::Refused {
                url,
                status: 409,
                message,
            }),
            other => other,
        }
    }

    fn call_at(
        &self,
        api: &str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, RemoteError> {
        let url = format!("{}{path}", api.trim_end_matches('/'));
        let unreachable = |why: String| RemoteError::Unreachable {
            url: url.clone(),
            why,
        };
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(std::time::Duration::from_secs(30)));
        if let Some(ca) = &self.ca_file {
            config = config.tls_config(tls_config(ca).map_err(&unreachable)?);
        }
        let agent = ureq::Agent::new_with_config(config.build());
        let token = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let sent = match method {
            Method::Get | Method::Delete => {
                let mut request = if method == Method::Get {
                    agent.get(&url)
                } else {
                    agent.delete(&url)
                };
                if let Some(token) = &token {
                    request = request.header("Authorization", token);
                }
                request.call()
            }
            Method::Post | Method::Put => {
                let mut request = if method == Method::Post {
                    agent.post(&url)
                } else {
                    agent.put(&url)
                };
                if let Some(token) = &token {
                    request = request.header("Authorization", token);
                }
                match body {
                    Some(body) => request.send_json(body),
                    None => request.send_empty(),
                }
            }
        };
        let mut response = sent.map_err(|e| unreachable(e.to_string()))?;
        let status = response.status().as_u16();
        let body: Value = response
            .body_mut()
            .read_json()
            .map_err(|e| unreachable(format!("not a JSON answer ({e})")))?;
        let message = body["error"].as_str().unwrap_or("").to_owned();
        if status == 409
            && let Some(leader) = body["leader"]["api"].as_str()
        {
            return Err(RemoteError::Leader {
                url,
                api: leader.to_owned(),
                message,
            });
        }
        if !(200..300).contains(&status) {
            return Err(RemoteError::Refused {
                url,
                status,
                message,
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

/// TLS trusting the CA certificates of a PEM file only.
fn tls_config(ca: &std::path::Path) -> Result<ureq::tls::TlsConfig, String> {
    use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};
    let pem = std::fs::read(ca).map_err(|e| format!("--ca-file {}: {e}", ca.display()))?;
    let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(c)) => Some(c.to_owned()),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(format!("--ca-file {}: no certificate in it", ca.display()));
    }
    Ok(TlsConfig::builder()
        .root_certs(RootCerts::Specific(std::sync::Arc::new(certs)))
        .build())
}

/// A path segment with everything but unreserved characters percent-encoded.
pub(crate) fn encode_segment(s: &str) -> String {
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
                    bot["load"].to_string(),
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
    let pins = status["pins"].as_array().map_or(0, Vec::len);
    let drains = status["drains"].as_array().map_or(0, Vec::len);
    if pins + drains > 0 {
        out.push_str(&operator::pins_table(status));
        out.push_str(&operator::drains_table(status));
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
