//! The assignment and the fleet as the engine sees them: the assignment (and its stream),
//! bots, presence, federate peers, why a channel has its assignee, and an admin rebalance.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::shared::{ApiRef, ApiState, error};
use crate::pallas::claim::valid_plugin;
use crate::pallas::presence_registry;

/// `GET /v1/assignments/stream`: Server-Sent Events. First `snapshot` (every platform's
/// assignment at `version`), then one `changes` per update with the next version (`null`:
/// unassigned), and a `presence` event (`{platform, bot, online}`, no version) whenever a bot
/// goes online or offline. A client that sees a version other than the last + 1 reconnects; a
/// client too slow to keep up with the changes is cut off and does the same (a missed presence
/// event is not worth a resync: the next `GET /v1/bots` tells). The stream ends when the
/// service stops.
#[derive(Deserialize)]
pub(super) struct StreamQuery {
    /// The fleet reporter following the stream: alive while it is open (`sources.http`).
    reporter: Option<String>,
}

pub(super) async fn stream(State(api): State<ApiRef>, Query(q): Query<StreamQuery>) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use futures_util::StreamExt as _;
    use tokio::sync::broadcast::error::RecvError;

    // Held for as long as the stream is open: its end starts the reporter's `streamGrace`.
    let alive = match (&api.reporters, q.reporter) {
        (Some(reporters), Some(name)) if valid_plugin(&name) => {
            Some(reporters.stream_opened(&name))
        }
        (_, Some(name)) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "reporter: {} is not a reporter's name ([A-Za-z0-9_.:-]) or sources.http is off",
                    crate::logs::cut(&name)
                ),
            );
        }
        _ => None,
    };
    let presences = api.view.subscribe_presence();
    let (version, assignments, updates) = api.view.subscribe();
    let snapshot = Event::default()
        .event("snapshot")
        .json_data(json!({ "version": version, "assignments": assignments }));
    let changes = |u: Arc<crate::view::Update>| {
        let changes: serde_json::Map<String, Value> = u
            .changes
            .iter()
            .map(|(c, b)| (c.clone(), json!(b)))
            .collect();
        Event::default().event("changes").json_data(json!({
            "version": u.version,
            "platform": u.platform,
            "assignments": changes,
        }))
    };
    let presence = |p: &crate::view::BotPresence| {
        Event::default().event("presence").json_data(json!({
            "platform": p.platform,
            "bot": p.bot,
            "online": p.online,
        }))
    };
    // Lagged (the client missed updates) or closed: the stream ends and the client resyncs.
    let rest = futures_util::stream::unfold(
        (updates, presences),
        move |(mut updates, mut presences)| async move {
            loop {
                let event = tokio::select! {
                    u = updates.recv() => changes(u.ok()?),
                    p = presences.recv() => match p {
                        Ok(p) => presence(&p),
                        Err(RecvError::Lagged(_)) => continue,
                        Err(RecvError::Closed) => return None,
                    },
                };
                return Some((event, (updates, presences)));
            }
        },
    );
    let events = futures_util::stream::once(async move { snapshot })
        .chain(rest)
        .take_until(api.shutdown.clone().cancelled_owned())
        .map(move |event| {
            let _alive = &alive;
            event
        });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[derive(Deserialize)]
pub(super) struct PlatformQuery {
    platform: Option<String>,
}

/// Whether everything planned is in the database (`false` while rows wait or writes fail).
pub(super) fn committed_header(api: &ApiState) -> [(&'static str, &'static str); 1] {
    let committed = if api.status.store.borrow().is_committed() {
        "true"
    } else {
        "false"
    };
    [("x-assignment-committed", committed)]
}

pub(super) async fn assignments(
    State(api): State<ApiRef>,
    Query(q): Query<PlatformQuery>,
) -> Response {
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
    (committed_header(&api), Json(json!(out))).into_response()
}

pub(super) async fn assignment(
    State(api): State<ApiRef>,
    Path((platform, channel)): Path<(String, String)>,
) -> Json<Value> {
    Json(json!({
        "platform": platform,
        "channel": channel,
        "assignee": api.view.assignee(&platform, &channel),
        "excluded": api.view.is_excluded(&platform, &channel),
        "committed": api.status.store.borrow().is_committed(),
    }))
}

pub(super) async fn bots(State(api): State<ApiRef>) -> Json<Value> {
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

pub(super) async fn presence(State(api): State<ApiRef>) -> Json<Value> {
    if let Some(redis) = &api.redis
        && let Some(records) = presence_registry::read(redis).await
    {
        return Json(json!({ "source": "redis", "bots": records }));
    }
    Json(json!({ "source": "local", "bots": api.presence.snapshot() }))
}

pub(super) async fn federate_peers(State(api): State<ApiRef>) -> Response {
    match &api.federate {
        Some(f) => Json(f.describe()).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "this deployment is not in a federate pool (no active `federate:` section)",
        ),
    }
}

/// Why a channel has its assignee, from the engine's own index.
pub(super) async fn explain(
    State(api): State<ApiRef>,
    Path((platform, channel)): Path<(String, String)>,
) -> Response {
    match api.engine.explain(platform, channel).await {
        Ok(explanation) => Json(explanation).into_response(),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the engine is shutting down",
        ),
    }
}

/// `GET /v1/weights/{platform}`: every known channel's weight as the plan counts it
/// (messages a day, decayed; at least `weights.floor`; an admin's pin wins), and the
/// channels whose weight is pinned.
pub(super) async fn weights(State(api): State<ApiRef>, Path(platform): Path<String>) -> Response {
    match api.engine.weights(platform.clone()).await {
        Ok(rows) => {
            let pinned: Vec<&str> = rows
                .iter()
                .filter(|row| row.pinned)
                .map(|row| row.channel.as_str())
                .collect();
            let weights: serde_json::Map<String, Value> = rows
                .iter()
                .map(|row| (row.channel.clone(), json!(row.weight)))
                .collect();
            Json(json!({ "platform": platform, "weights": weights, "pinned": pinned }))
                .into_response()
        }
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the engine is shutting down",
        ),
    }
}
