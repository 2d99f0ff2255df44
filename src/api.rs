//! The HTTP API (axum): the ingress decision, the assignment, bots and presence, gates, and an
//! admin rebalance. Every route but `/healthz` needs `Authorization: Bearer <api.token>` when a
//! token is configured (compared in constant time). Bodies are capped; malformed JSON and
//! missing or mistyped fields get a 400 with a JSON error naming the field; an unreachable
//! Redis never makes a 500: the answer says which fallback decided.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use subtle::ConstantTimeEq;
use tokio::sync::mpsc;

use crate::coord::claim::valid_plugin;
use crate::coord::federate::Federate;
use crate::coord::gate::Gates;
use crate::coord::ingress::{Ingress, Request as IngressRequest};
use crate::coord::presence_registry;
use crate::coord::redis::Redis;
use crate::engine::Control;
use crate::presence::Presence;
use crate::view::View;

/// Everything the routes need.
pub struct Api {
    pub view: View,
    pub ingress: Ingress,
    pub gates: Gates,
    pub presence: Presence,
    pub redis: Option<Redis>,
    /// The federate pool, when this deployment joined one.
    pub federate: Option<Arc<Federate>>,
    pub control: mpsc::Sender<Control>,
    pub token: String,
}

type Shared = Arc<Api>;

/// The router; `max_body` caps request bodies.
pub fn router(api: Api, max_body: usize) -> Router {
    let api = Arc::new(api);
    let protected = Router::new()
        .route("/v1/ingress", post(ingress))
        .route("/v1/assignments", get(assignments))
        .route("/v1/assignments/{platform}/{channel}", get(assignment))
        .route("/v1/bots", get(bots))
        .route("/v1/presence", get(presence))
        .route("/v1/federate/peers", get(federate_peers))
        .route("/v1/rebalance", post(rebalance))
        .route("/v1/gate/owned", post(owned_gate))
        .route("/v1/activity/begin", post(begin_activity))
        .route("/v1/activity/end", post(end_activity))
        .route_layer(middleware::from_fn_with_state(api.clone(), auth));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(protected)
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such route") })
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(api)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

/// A 400 naming `field` when `value` is not a key-safe name (`[A-Za-z0-9_.:-]`).
fn invalid_name(field: &str, value: &str) -> Option<Response> {
    (!valid_plugin(value)).then(|| {
        error(
            StatusCode::BAD_REQUEST,
            format!("{field}: {value:?} is not a valid name ([A-Za-z0-9_.:-])"),
        )
    })
}

async fn auth(
    State(api): State<Shared>,
    headers: HeaderMap,
    request: Request,
    next: Next,
) -> Response {
    if !api.token.is_empty() {
        let given = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !bool::from(given.as_bytes().ct_eq(api.token.as_bytes())) {
            return error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
        }
    }
    next.run(request).await
}

/// JSON bodies whose rejections are JSON 400s naming what was wrong.
struct Body<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Body(v)),
            Err(JsonRejection::BytesRejection(e))
                if e.status() == StatusCode::PAYLOAD_TOO_LARGE =>
            {
                Err(error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request body too large",
                ))
            }
            Err(e) => Err(error(StatusCode::BAD_REQUEST, e.body_text())),
        }
    }
}

async fn healthz(State(api): State<Shared>) -> Json<Value> {
    let redis = match &api.redis {
        None => "disabled",
        Some(r) => match r.conn().await {
            Some(mut conn) => match redis::cmd("PING").query_async::<String>(&mut conn).await {
                Ok(_) => "connected",
                Err(_) => "unavailable",
            },
            None => "unavailable",
        },
    };
    Json(json!({ "status": "ok", "redis": redis }))
}

async fn ingress(State(api): State<Shared>, Body(request): Body<IngressRequest>) -> Response {
    match api.ingress.decide(&request).await {
        Ok(decision) => Json(decision).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

#[derive(Deserialize)]
struct PlatformQuery {
    platform: Option<String>,
}

async fn assignments(State(api): State<Shared>, Query(q): Query<PlatformQuery>) -> Json<Value> {
    let platforms = match q.platform {
        Some(p) => vec![p],
        None => api.view.platforms(),
    };
    let out: BTreeMap<String, BTreeMap<String, String>> = platforms
        .into_iter()
        .map(|p| {
            let a = api.view.assignment(&p).into_iter().collect();
            (p, a)
        })
        .collect();
    Json(json!(out))
}

async fn assignment(
    State(api): State<Shared>,
    Path((platform, channel)): Path<(String, String)>,
) -> Json<Value> {
    Json(json!({
        "platform": platform,
        "channel": channel,
        "assignee": api.view.assignee(&platform, &channel),
        "excluded": api.view.is_excluded(&platform, &channel),
    }))
}

async fn bots(State(api): State<Shared>) -> Json<Value> {
    let mut out = Vec::new();
    for platform in api.view.platforms() {
        for (bot, online, load) in api.view.bots(&platform) {
            let presence = api.presence.get(&platform, &bot);
            out.push(json!({
                "platform": platform,
                "bot": bot,
                "online": online,
                "load": load,
                "presence": presence,
            }));
        }
    }
    Json(Value::Array(out))
}

async fn presence(State(api): State<Shared>) -> Json<Value> {
    if let Some(redis) = &api.redis
        && let Some(records) = presence_registry::read(redis).await
    {
        return Json(json!({ "source": "redis", "bots": records }));
    }
    Json(json!({ "source": "local", "bots": api.presence.snapshot() }))
}

async fn federate_peers(State(api): State<Shared>) -> Response {
    match &api.federate {
        Some(f) => Json(f.describe()).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "this deployment is not in a federate pool (no active `federate:` section)",
        ),
    }
}

async fn rebalance(State(api): State<Shared>) -> Response {
    match api.control.send(Control::Rebalance).await {
        Ok(()) => (StatusCode::ACCEPTED, Json(json!({ "requested": true }))).into_response(),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the engine is shutting down",
        ),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnedGate {
    plugin: String,
    group_id: i64,
    bot_id: i64,
    #[serde(default = "five")]
    gate_sec: f64,
}

fn five() -> f64 {
    5.0
}

async fn owned_gate(State(api): State<Shared>, Body(g): Body<OwnedGate>) -> Response {
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
struct Activity {
    namespace: String,
    group_id: i64,
    #[serde(default = "two_hours")]
    busy_sec: f64,
}

fn two_hours() -> f64 {
    7200.0
}

async fn begin_activity(State(api): State<Shared>, Body(a): Body<Activity>) -> Response {
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

async fn end_activity(State(api): State<Shared>, Body(a): Body<Activity>) -> Response {
    if let Some(rejected) = invalid_name("namespace", &a.namespace) {
        return rejected;
    }
    let answer = api
        .gates
        .end_activity(&a.namespace, a.group_id, a.busy_sec)
        .await;
    Json(json!({ "status": "ended", "fallback": answer.fallback })).into_response()
}
