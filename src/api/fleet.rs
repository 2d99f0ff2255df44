//! `/v1/fleet/reporters/{name}`: fleet reporters (`sources.http`).

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::json;

use super::body::Body;
use super::shared::{ApiRef, ApiState, error};
use crate::pallas::claim::valid_plugin;
use crate::source::http::{Events, FullState, ReportError, Reporters};

/// `/v1/fleet/reporters/{name}`, when `sources.http` is on, with its own body limit (a full
/// state carries every group of every bot).
pub(super) fn fleet_routes(api: &ApiRef) -> Router<ApiRef> {
    let Some(reporters) = &api.reporters else {
        return Router::new();
    };
    let max_body = reporters.settings().max_body_bytes.get() as usize;
    Router::new()
        .route(
            "/v1/fleet/reporters/{name}",
            axum::routing::put(put_reporter).delete(delete_reporter),
        )
        .route("/v1/fleet/reporters/{name}/events", post(reporter_events))
        .route(
            "/v1/fleet/reporters/{name}/heartbeat",
            post(reporter_heartbeat),
        )
        .layer(DefaultBodyLimit::max(max_body))
}

pub(super) fn report_error(e: ReportError) -> Response {
    let status = match e {
        ReportError::UnknownReporter(_) => StatusCode::CONFLICT,
        ReportError::Invalid(_) => StatusCode::BAD_REQUEST,
        ReportError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, e.to_string())
}

/// The reporters, once the reporter's name is checked.
pub(super) fn reporter<'a>(api: &'a ApiState, name: &str) -> Result<&'a Reporters, ReportError> {
    if !valid_plugin(name) {
        return Err(ReportError::Invalid(format!(
            "reporter: {:?} is not a valid name ([A-Za-z0-9_.:-])",
            crate::logs::truncate(name, crate::logs::SHOWN_CHARS)
        )));
    }
    Ok(api
        .reporters
        .as_ref()
        .expect("routed only with sources.http"))
}

pub(super) async fn put_reporter(
    State(api): State<ApiRef>,
    Path(name): Path<String>,
    Body(state): Body<FullState>,
) -> Response {
    let reporters = match reporter(&api, &name) {
        Ok(r) => r,
        Err(e) => return report_error(e),
    };
    match reporters.put(&name, state).await {
        Ok(bots) => Json(json!({ "reporter": name, "bots": bots })).into_response(),
        Err(e) => report_error(e),
    }
}

pub(super) async fn reporter_events(
    State(api): State<ApiRef>,
    Path(name): Path<String>,
    Body(events): Body<Events>,
) -> Response {
    let reporters = match reporter(&api, &name) {
        Ok(r) => r,
        Err(e) => return report_error(e),
    };
    match reporters.events(&name, events).await {
        Ok(n) => Json(json!({ "applied": n })).into_response(),
        Err(e) => report_error(e),
    }
}

pub(super) async fn reporter_heartbeat(
    State(api): State<ApiRef>,
    Path(name): Path<String>,
) -> Response {
    let reporters = match reporter(&api, &name) {
        Ok(r) => r,
        Err(e) => return report_error(e),
    };
    match reporters.heartbeat(&name) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => report_error(e),
    }
}

pub(super) async fn delete_reporter(
    State(api): State<ApiRef>,
    Path(name): Path<String>,
) -> Response {
    let reporters = match reporter(&api, &name) {
        Ok(r) => r,
        Err(e) => return report_error(e),
    };
    match reporters.remove(&name, "stopped").await {
        Ok(known) => Json(json!({ "removed": known })).into_response(),
        Err(e) => report_error(e),
    }
}
