//! The service's health and history: `/healthz`, `/v1/status`, `/v1/history`, `/metrics`, and
//! the dashboard page that reads them.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::shared::{ApiRef, error};
use crate::metrics::{self};

/// `GET /`: the dashboard, one self-contained page; its data comes from the routes below, with
/// the token the operator gives it.
pub(super) async fn dashboard() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("../dashboard.html"),
    )
        .into_response()
}

/// `GET /metrics`: the Prometheus text format.
pub(super) async fn prometheus_metrics(State(api): State<ApiRef>) -> Response {
    let store = api.status.store.borrow().clone();
    let text = api.metrics.render(&metrics::State {
        view: &api.view,
        presence: &api.presence,
        store: &store,
        publication: api.status.publication.as_deref(),
        federate: api.federate.as_deref(),
        leadership: api
            .status
            .leadership
            .as_ref()
            .map(|(instance, role)| (instance.as_str(), role.borrow().clone())),
    });
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

pub(super) async fn healthz(State(api): State<ApiRef>) -> Json<Value> {
    let redis = match &api.redis {
        None => "disabled",
        Some(r) => match r.conn_now() {
            Some(mut conn) => match redis::cmd("PING").query_async::<String>(&mut conn).await {
                Ok(_) => "connected",
                Err(_) => "unavailable",
            },
            None => "unavailable",
        },
    };
    let store = api.status.store.borrow().clone();
    let status = if store.last_error.is_some() {
        "degraded"
    } else {
        "ok"
    };
    let age = |t: Option<std::time::SystemTime>| {
        t.and_then(|t| t.elapsed().ok()).map(|d| d.as_secs_f64())
    };
    // Capacities that cannot be met: every channel still has a bot, but the operator should
    // know (the plan's log line and the metrics say it too).
    let over_capacity: BTreeMap<String, Value> = api
        .view
        .platforms()
        .into_iter()
        .filter_map(|p| {
            let over = api.view.counts(&p).over_capacity;
            (!over.is_empty()).then(|| (p, json!(over)))
        })
        .collect();
    let publication = api.status.publication.as_ref().map(|p| {
        let (version, lag) = p.read();
        let (moving, waiting_for) = p.moving();
        json!({
            "version": version,
            "lag_sec": lag.as_secs_f64(),
            "repaired": p.repaired(),
            "moving": moving,
            "moving_waits_for": waiting_for,
        })
    });
    Json(json!({
        "status": status,
        "redis": redis,
        "publication": publication,
        "over_capacity": over_capacity,
        "leadership": api.status.leadership_json(),
        "store": {
            "committed": store.is_committed(),
            "pending_rows": store.pending_rows,
            "pending_runs": store.pending_runs,
            "pending_weights": store.pending_weights,
            "last_error": store.last_error,
            "failure": store.failure,
            "last_commit_age_sec": age(store.last_commit),
            "failing_for_sec": age(store.failing_since),
        },
    }))
}

/// `GET /readyz`, for orchestrators: 200 once this instance serves a committed plan, 503 with
/// why not (no plan committed yet; the store failing; following without a known leader).
/// `/healthz` stays the liveness answer (200 whenever the process answers).
pub(super) async fn readyz(State(api): State<ApiRef>) -> Response {
    let store = api.status.store.borrow().clone();
    let mut not_ready = Vec::new();
    match api.status.role() {
        Some(crate::store::fence::Role::Follower { leader: None, .. }) => {
            not_ready.push("following, and no leader is known yet".to_owned());
        }
        Some(crate::store::fence::Role::Follower { .. }) => {}
        Some(crate::store::fence::Role::Leader { .. }) | None => {
            if api.view.last_run().is_none() || store.commits == 0 {
                not_ready.push("no plan committed yet".to_owned());
            }
        }
    }
    if let Some(error) = &store.last_error {
        not_ready.push(format!("the store is failing: {error}"));
    }
    if not_ready.is_empty() {
        Json(json!({ "ready": true })).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "ready": false, "why": not_ready })),
        )
            .into_response()
    }
}

/// Per platform: the numbers of the last plan and what the engine keeps in memory.
pub(super) async fn status(State(api): State<ApiRef>) -> Json<Value> {
    let platforms: BTreeMap<String, Value> = api
        .view
        .platforms()
        .into_iter()
        .map(|p| {
            let counts = api.view.counts(&p);
            (p, json!(counts))
        })
        .collect();
    let config = api.status.reload.borrow().clone();
    let overrides = api.engine.overrides().await.unwrap_or_default();
    Json(json!({
        "platforms": platforms,
        "last_run": api.view.last_run(),
        "config": config,
        "pins": overrides.pins,
        "drains": overrides.drains,
    }))
}

#[derive(Deserialize)]
pub(super) struct HistoryQuery {
    limit: Option<u32>,
}

/// The last rebalances from the history tables, one row per platform, newest first.
pub(super) async fn history(State(api): State<ApiRef>, Query(q): Query<HistoryQuery>) -> Response {
    match api.history.history(q.limit.unwrap_or(50).min(1000)).await {
        Ok(rows) => Json(rows).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("reading the history: {e}"),
        ),
    }
}
