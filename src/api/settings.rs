//! `api:` settings: this part's keys, read by `config` (which only gathers them).

use serde::Deserialize;

use crate::secret::Secret;
use crate::yaml::{AtLeast, Seconds};

/// `api:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Settings {
    /// `None` (`bind: null`): no HTTP API.
    #[serde(deserialize_with = "optional_addr")]
    pub bind: Option<std::net::SocketAddr>,
    /// When set, every route but the open ones needs `Authorization: Bearer <token>`: the
    /// token of the `admin` role.
    pub token: Secret,
    /// More tokens, each with a name (for the audit) and a role.
    #[serde(deserialize_with = "named_tokens")]
    pub tokens: Vec<NamedToken>,
    /// Larger bodies get 413.
    pub max_body_bytes: AtLeast<1024>,
    /// How long a client may take to send a request's headers; also how long an idle
    /// keep-alive connection stays open.
    pub header_timeout: Seconds<100>,
    /// Whether `GET /metrics` needs the token like every other route (`token`, the default;
    /// Prometheus sends it with `authorization: {credentials: ...}`) or not (`none`).
    pub metrics_auth: MetricsAuth,
    /// The URL other instances and the command line reach this API at (`http://host:port`),
    /// recorded with each term this instance leads: a follower names it when it refuses an
    /// operator's change. Default: `http://` and the bound address (the host's name when it
    /// binds every address).
    #[serde(deserialize_with = "advertised_url")]
    pub advertise: Option<String>,
    /// HTTPS: the server's certificate chain and key (PEM), read at start and again whenever
    /// either file changes.
    pub tls: Option<TlsFiles>,
}

/// `api.tls`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsFiles {
    pub cert_file: std::path::PathBuf,
    pub key_file: std::path::PathBuf,
}

impl TlsFiles {
    /// Paths relative to the config file's directory.
    pub fn resolve(&mut self, base: &std::path::Path) {
        self.cert_file = base.join(&self.cert_file);
        self.key_file = base.join(&self.key_file);
    }
}

/// What a token may do; each role may do what the ones before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Status, explain, assignments and their stream, history, pins and drains as lists, a
    /// rebalance's dry run, the dashboard, metrics.
    Read,
    /// And the fleet reporters and the per-message decisions (ingress, gates): the plugins.
    Report,
    /// And every change: pins, drains, a rebalance.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Report => "report",
            Role::Admin => "admin",
        }
    }
}

/// One entry of `api.tokens`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedToken {
    /// Who holds it, as the audit records it (`[A-Za-z0-9_.:-]`).
    pub name: String,
    pub token: Secret,
    pub role: Role,
}

/// `api.tokens`: names and tokens non-empty and unique.
fn named_tokens<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<NamedToken>, D::Error> {
    use serde::de::Error as _;
    let tokens = Vec::<NamedToken>::deserialize(d)?;
    for (i, t) in tokens.iter().enumerate() {
        let valid = !t.name.is_empty()
            && t.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c));
        if !valid {
            return Err(D::Error::custom(format!(
                "[{i}].name: {:?} is not a name ([A-Za-z0-9_.:-])",
                t.name
            )));
        }
        if t.token.is_empty() {
            return Err(D::Error::custom(format!("[{i}].token: empty")));
        }
        if tokens[..i].iter().any(|o| o.name == t.name) {
            return Err(D::Error::custom(format!("[{i}].name: {:?} twice", t.name)));
        }
        if tokens[..i].iter().any(|o| o.token == t.token) {
            return Err(D::Error::custom(format!(
                "[{i}].token: the same token as {:?}",
                tokens[..i]
                    .iter()
                    .find(|o| o.token == t.token)
                    .unwrap()
                    .name
            )));
        }
    }
    Ok(tokens)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsAuth {
    Token,
    None,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            bind: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 8787))),
            token: Secret::default(),
            tokens: Vec::new(),
            max_body_bytes: AtLeast(64 * 1024),
            header_timeout: Seconds::secs(10),
            metrics_auth: MetricsAuth::Token,
            advertise: None,
            tls: None,
        }
    }
}

impl Settings {
    /// The API's address as others reach it, once bound to `bound`.
    pub fn advertised(&self, bound: std::net::SocketAddr) -> String {
        if let Some(url) = &self.advertise {
            return url.clone();
        }
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        if bound.ip().is_unspecified() {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default();
            if !host.is_empty() {
                return format!("{scheme}://{host}:{}", bound.port());
            }
        }
        format!("{scheme}://{bound}")
    }
}

fn advertised_url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    struct Url(#[serde(deserialize_with = "http_url")] String);
    Ok(Option::<Url>::deserialize(d)?.map(|u| u.0))
}

fn http_url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    crate::yaml::checked_str(d, |text| {
        let rest = text
            .strip_prefix("http://")
            .or_else(|| text.strip_prefix("https://"));
        match rest {
            Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => {
                Ok(text.trim_end_matches('/').to_owned())
            }
            _ => Err(format!("{text:?} is not an http:// or https:// URL")),
        }
    })
}

fn optional_addr<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<std::net::SocketAddr>, D::Error> {
    #[derive(Deserialize)]
    struct Addr(#[serde(deserialize_with = "crate::yaml::socket_addr")] std::net::SocketAddr);
    Ok(Option::<Addr>::deserialize(d)?.map(|a| a.0))
}
