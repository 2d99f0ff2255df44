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
    /// When set, every route but `/healthz` needs `Authorization: Bearer <token>`.
    pub token: Secret,
    /// Larger bodies get 413.
    pub max_body_bytes: AtLeast<1024>,
    /// How long a client may take to send a request's headers; also how long an idle
    /// keep-alive connection stays open.
    pub header_timeout: Seconds<100>,
    /// Whether `GET /metrics` needs the token like every other route (`token`, the default;
    /// Prometheus sends it with `authorization: {credentials: ...}`) or not (`none`).
    pub metrics_auth: MetricsAuth,
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
            max_body_bytes: AtLeast(64 * 1024),
            header_timeout: Seconds::secs(10),
            metrics_auth: MetricsAuth::Token,
        }
    }
}

fn optional_addr<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<std::net::SocketAddr>, D::Error> {
    #[derive(Deserialize)]
    struct Addr(#[serde(deserialize_with = "crate::yaml::socket_addr")] std::net::SocketAddr);
    Ok(Option::<Addr>::deserialize(d)?.map(|a| a.0))
}
