//! What every route shares: the API's parts, its errors and its token check.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use super::settings::{MetricsAuth, NamedToken, Role};
use crate::clock::Clock;
use crate::engine_handle::EngineHandle;
use crate::metrics::Metrics;
use crate::pallas::claim::valid_plugin;
use crate::pallas::federate::Federate;
use crate::pallas::gate::Gates;
use crate::pallas::ingress::Ingress;
use crate::presence::Presence;
use crate::redis_conn::Redis;
use crate::secret::Secret;
use crate::source::http::Reporters;
use crate::status::Status;
use crate::store::SqlStore;
use crate::view::View;

/// Everything the routes need.
pub struct ApiState {
    pub view: View,
    pub ingress: Ingress,
    pub gates: Gates,
    pub presence: Presence,
    pub redis: Option<Redis>,
    /// The federate pool, when this deployment joined one.
    pub federate: Option<Arc<Federate>>,
    /// What the API asks of the engine: a rebalance, an explanation.
    pub engine: EngineHandle,
    pub tokens: Tokens,
    /// What the API shows of the service's parts: reload, writer, publication, leadership.
    pub status: Status,
    /// Fleet reporters (`sources.http`), when enabled.
    pub reporters: Option<Reporters>,
    /// Ends the assignment streams when the service stops.
    pub shutdown: CancellationToken,
    pub metrics: Arc<Metrics>,
    pub metrics_auth: MetricsAuth,
    /// Reads the rebalance history, the audit log and the leader's record.
    pub history: SqlStore,
    /// Wall time, for an operator's `until`.
    pub clock: Clock,
}

/// The credential a request came with: the token's name and role. The audit records it as
/// `name (role)`.
#[derive(Clone, Debug)]
pub(super) struct Credential {
    pub(super) name: String,
    pub(super) role: Role,
}

impl std::fmt::Display for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.role.as_str())
    }
}

/// The API's tokens: `api.token` (admin) and `api.tokens`. Without any, every request is
/// `anonymous` with every right (a service on loopback only).
#[derive(Clone, Default)]
pub struct Tokens {
    admin: Secret,
    named: Vec<NamedToken>,
}

impl Tokens {
    pub fn new(admin: Secret, named: Vec<NamedToken>) -> Tokens {
        Tokens { admin, named }
    }

    /// The credential of a request's bearer token; `None` for a missing or wrong one. Every
    /// token is compared, each in constant time.
    pub(super) fn credential(&self, headers: &axum::http::HeaderMap) -> Option<Credential> {
        if self.admin.is_empty() && self.named.is_empty() {
            return Some(Credential {
                name: "anonymous".to_owned(),
                role: Role::Admin,
            });
        }
        let given = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("")
            .as_bytes();
        let same = |token: &Secret| {
            !token.is_empty() && bool::from(given.ct_eq(token.expose().as_bytes()))
        };
        let mut found = None;
        if same(&self.admin) {
            found = Some(Credential {
                name: "api.token".to_owned(),
                role: Role::Admin,
            });
        }
        for t in &self.named {
            if same(&t.token) {
                found = Some(Credential {
                    name: t.name.clone(),
                    role: t.role,
                });
            }
        }
        found
    }
}

/// The role a request needs (`None`: open to anyone).
pub(super) fn required_role(
    method: &axum::http::Method,
    path: &str,
    query: Option<&str>,
    metrics_auth: MetricsAuth,
) -> Option<Role> {
    use axum::http::Method;
    if path == "/" || path == "/healthz" || path == "/readyz" {
        return None;
    }
    if path == "/metrics" {
        return (metrics_auth == MetricsAuth::Token).then_some(Role::Read);
    }
    let dry_run = query.is_some_and(|q| q.split('&').any(|p| p == "dryRun=true"));
    let reporting = path.starts_with("/v1/fleet/")
        || path == "/v1/ingress"
        || path == "/v1/gate/owned"
        || path.starts_with("/v1/activity/");
    let changing = path.starts_with("/v1/pins/")
        || path.starts_with("/v1/drains/")
        || (path == "/v1/rebalance" && !dry_run);
    Some(if changing && *method != Method::GET {
        Role::Admin
    } else if reporting {
        Role::Report
    } else {
        Role::Read
    })
}

pub(super) type ApiRef = Arc<ApiState>;

pub(super) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

/// A 400 naming `field` when `value` is not a key-safe name (`[A-Za-z0-9_.:-]`).
pub(super) fn invalid_name(field: &str, value: &str) -> Option<Response> {
    (!valid_plugin(value)).then(|| {
        error(
            StatusCode::BAD_REQUEST,
            format!("{field}: {value:?} is not a valid name ([A-Za-z0-9_.:-])"),
        )
    })
}

/// Before routing: every request but the open ones (the dashboard's page, `/healthz`,
/// `/readyz`, and `/metrics` with `metricsAuth: none`) needs a token whose role may make it,
/// so an unknown route without one is a 401 like any other; the credential goes with the
/// request, for the audit.
pub(super) async fn auth(State(api): State<ApiRef>, mut request: Request, next: Next) -> Response {
    let need = required_role(
        request.method(),
        request.uri().path(),
        request.uri().query(),
        api.metrics_auth,
    );
    let Some(need) = need else {
        return next.run(request).await;
    };
    // Read from the request itself: a `HeaderMap` argument would be a copy of every header,
    // made for every request.
    let credential = match authorized(&api, request.headers(), need) {
        Ok(credential) => credential,
        Err(denied) => return denied.response(),
    };
    request.extensions_mut().insert(credential);
    next.run(request).await
}

/// Why a request may not pass.
pub(super) enum Denied {
    /// No token, or a wrong one: 401.
    Unauthorized,
    /// A token of a lesser role: 403.
    Forbidden { credential: Credential, need: Role },
}

impl Denied {
    pub(super) fn response(self) -> Response {
        match self {
            Denied::Unauthorized => {
                error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token")
            }
            Denied::Forbidden { credential, need } => (
                StatusCode::FORBIDDEN,
                Json(json!({
                    "error": format!(
                        "the token of {} has the role {}; this needs {}",
                        credential.name,
                        credential.role.as_str(),
                        need.as_str()
                    ),
                    "code": "forbidden",
                })),
            )
                .into_response(),
        }
    }
}

/// The request's credential when its role may do what `need`s.
pub(super) fn authorized(
    api: &ApiState,
    headers: &axum::http::HeaderMap,
    need: Role,
) -> Result<Credential, Denied> {
    let Some(credential) = api.tokens.credential(headers) else {
        return Err(Denied::Unauthorized);
    };
    if credential.role < need {
        return Err(Denied::Forbidden { credential, need });
    }
    Ok(credential)
}
