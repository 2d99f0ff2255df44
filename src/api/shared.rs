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

use super::settings::MetricsAuth;
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
    pub token: Secret,
    /// What the API shows of the service's parts: reload, writer, publication, leadership.
    pub status: Status,
    /// Fleet reporters (`sources.http`), when enabled.
    pub reporters: Option<Reporters>,
    /// Ends the assignment streams when the service stops.
    pub shutdown: CancellationToken,
    pub metrics: Arc<Metrics>,
    pub metrics_auth: MetricsAuth,
    /// Reads the rebalance history.
    pub history: SqlStore,
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

pub(super) async fn auth(State(api): State<ApiRef>, request: Request, next: Next) -> Response {
    // Read from the request itself: a `HeaderMap` argument would be a copy of every header,
    // made for every request.
    if !authorized(&api, request.headers()) {
        return unauthorized();
    }
    next.run(request).await
}

/// Whether the request carries the API's token (any request does when there is none).
pub(super) fn authorized(api: &ApiState, headers: &axum::http::HeaderMap) -> bool {
    if api.token.is_empty() {
        return true;
    }
    let given = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    bool::from(given.as_bytes().ct_eq(api.token.expose().as_bytes()))
}

pub(super) fn unauthorized() -> Response {
    error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token")
}
