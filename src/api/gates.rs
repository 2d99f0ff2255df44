//! Pallas-Bot's gates: `/v1/gate/owned` and `/v1/activity/{begin,end}`.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::body::Body;
use super::shared::{ApiRef, invalid_name};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OwnedGate {
    plugin: String,
    group_id: i64,
    bot_id: i64,
    #[serde(default = "five")]
    gate_sec: f64,
}

pub(super) fn five() -> f64 {
    5.0
}

pub(super) async fn owned_gate(State(api): State<ApiRef>, Body(g): Body<OwnedGate>) -> Response {
    if let Some(rejected) = invalid_name("plugin", &g.plugin) {
        return rejected;
    }
    let answer = api
        .gates
        .owned_gate(&g.plugin, g.group_id, g.bot_id, g.gate_sec)
        .await;
    Json(json!({ "granted": answer.granted, "fallback": answer.fallback })).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Activity {
    namespace: String,
    group_id: i64,
    #[serde(default = "two_hours")]
    busy_sec: f64,
}

pub(super) fn two_hours() -> f64 {
    7200.0
}

pub(super) async fn begin_activity(State(api): State<ApiRef>, Body(a): Body<Activity>) -> Response {
    if let Some(rejected) = invalid_name("namespace", &a.namespace) {
        return rejected;
    }
    let answer = api
        .gates
        .begin_activity(&a.namespace, a.group_id, a.busy_sec)
        .await;
    let status = if answer.granted { "ok" } else { "busy" };
    Json(json!({ "status": status, "fallback": answer.fallback })).into_response()
}

pub(super) async fn end_activity(State(api): State<ApiRef>, Body(a): Body<Activity>) -> Response {
    if let Some(rejected) = invalid_name("namespace", &a.namespace) {
        return rejected;
    }
    let answer = api
        .gates
        .end_activity(&a.namespace, a.group_id, a.busy_sec)
        .await;
    Json(json!({ "status": "ended", "fallback": answer.fallback })).into_response()
}
