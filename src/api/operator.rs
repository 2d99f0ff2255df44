//! The operator's seat: pins (`/v1/pins`), drains (`/v1/drains`), a rebalance now or its dry
//! run (`POST /v1/rebalance[?dryRun=true]`), and the audit log (`/v1/audit`).
//!
//! A change is checked here (the body, the time) and by the engine against the fleet (the
//! platform, the group, the bot, its membership); a refusal changes nothing and names what was
//! wrong. A follower refuses every change with 409 and the leader's API address, so a client
//! can send it there. A change is answered once it is stored (200), or after a few seconds
//! with 202 when the database has not taken it yet.

use std::time::Duration;

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::body::{Body, OptionalBody};
use super::shared::{ApiRef, ApiState, Credential, error};
use crate::engine_handle::{Accepted, OverrideRequest, Refusal};
use crate::operator::{PinTarget, parse_until};
use crate::store::fence::Role;
use crate::store::writer::Stored;

/// The longest note kept with a change.
const MAX_NOTE: usize = 500;

/// `PUT /v1/pins/{platform}/{channel}`: `bot` is required, `null` holds the group with no
/// assignee.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PinBody {
    #[serde(deserialize_with = "required")]
    bot: Option<String>,
    until: Option<String>,
    note: Option<String>,
}

/// `PUT /v1/drains/{platform}/{bot}`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct DrainBody {
    until: Option<String>,
    note: Option<String>,
}

/// A field that must be present, though it may be `null`.
fn required<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(d)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RebalanceQuery {
    #[serde(default)]
    dry_run: bool,
}

#[derive(Deserialize)]
pub(super) struct AuditQuery {
    limit: Option<u32>,
}

pub(super) async fn pins(State(api): State<ApiRef>) -> Response {
    match api.engine.overrides().await {
        Ok(now) => Json(json!({ "pins": now.pins })).into_response(),
        Err(_) => stopping(),
    }
}

pub(super) async fn drains(State(api): State<ApiRef>) -> Response {
    match api.engine.overrides().await {
        Ok(now) => Json(json!({ "drains": now.drains })).into_response(),
        Err(_) => stopping(),
    }
}

pub(super) async fn pin(
    State(api): State<ApiRef>,
    Extension(by): Extension<Credential>,
    Path((platform, channel)): Path<(String, String)>,
    Body(body): Body<PinBody>,
) -> Response {
    let (until_ms, note) = match when_and_why(&api, body.until, body.note) {
        Ok(parsed) => parsed,
        Err(bad) => return bad.response(),
    };
    let target = match body.bot {
        Some(bot) if bot.trim().is_empty() => {
            return refused(
                StatusCode::BAD_REQUEST,
                "invalid_bot",
                "bot: empty (null holds the group)",
            );
        }
        Some(bot) => PinTarget::Bot(bot),
        None => PinTarget::Hold,
    };
    let change = OverrideRequest::Pin {
        platform,
        channel,
        target,
        until_ms,
        note,
    };
    change_override(&api, change, by).await
}

pub(super) async fn unpin(
    State(api): State<ApiRef>,
    Extension(by): Extension<Credential>,
    Path((platform, channel)): Path<(String, String)>,
) -> Response {
    change_override(&api, OverrideRequest::Unpin { platform, channel }, by).await
}

pub(super) async fn drain(
    State(api): State<ApiRef>,
    Extension(by): Extension<Credential>,
    Path((platform, bot)): Path<(String, String)>,
    OptionalBody(body): OptionalBody<DrainBody>,
) -> Response {
    let body = body.unwrap_or_default();
    let (until_ms, note) = match when_and_why(&api, body.until, body.note) {
        Ok(parsed) => parsed,
        Err(bad) => return bad.response(),
    };
    let change = OverrideRequest::Drain {
        platform,
        bot,
        until_ms,
        note,
    };
    change_override(&api, change, by).await
}

pub(super) async fn undrain(
    State(api): State<ApiRef>,
    Extension(by): Extension<Credential>,
    Path((platform, bot)): Path<(String, String)>,
) -> Response {
    change_override(&api, OverrideRequest::Undrain { platform, bot }, by).await
}

/// `POST /v1/rebalance`: a rebalance now (202), or with `?dryRun=true` what it would do (200,
/// nothing committed; a follower answers too, from its own view of the fleet).
pub(super) async fn rebalance(
    State(api): State<ApiRef>,
    Query(q): Query<RebalanceQuery>,
) -> Response {
    if q.dry_run {
        return match api.engine.dry_run().await {
            Ok(run) => Json(
                json!({ "dryRun": true, "strategy": run.strategy, "platforms": run.platforms }),
            )
            .into_response(),
            Err(_) => stopping(),
        };
    }
    if let Some(refused) = following(&api).await {
        return refused;
    }
    match api.engine.rebalance().await {
        Ok(()) => (StatusCode::ACCEPTED, Json(json!({ "requested": true }))).into_response(),
        Err(_) => stopping(),
    }
}

/// `GET /v1/audit`: the last changes of pins and drains, newest first.
pub(super) async fn audit(State(api): State<ApiRef>, Query(q): Query<AuditQuery>) -> Response {
    match api.history.audit(q.limit.unwrap_or(100).min(1000)).await {
        Ok(rows) => Json(json!({ "audit": rows })).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("reading the audit log: {e}"),
        ),
    }
}

/// The change by the engine, or why not.
async fn change_override(api: &ApiState, change: OverrideRequest, by: Credential) -> Response {
    if let Some(refused) = following(api).await {
        return refused;
    }
    match api.engine.change_override(change, by.to_string()).await {
        Ok(Ok(accepted)) => stored(api, accepted).await,
        Ok(Err(Refusal::Following)) => following(api).await.unwrap_or_else(|| {
            let r = Refusal::Following;
            refused(StatusCode::CONFLICT, r.code(), r.to_string())
        }),
        Ok(Err(r)) => {
            let (status, members) = match &r {
                Refusal::NotAMember { members, .. } => (StatusCode::CONFLICT, Some(members)),
                _ => (StatusCode::NOT_FOUND, None),
            };
            let mut answer = json!({ "error": r.to_string(), "code": r.code() });
            if let Some(members) = members {
                answer["members"] = json!(members);
            }
            (status, Json(answer)).into_response()
        }
        Err(_) => stopping(),
    }
}

/// How long a change's answer waits for its commit. The commit normally follows within
/// milliseconds; a database that does not answer by then is failing (see `/healthz`).
const STORE_WAIT: Duration = Duration::from_secs(5);

/// The answer to an applied change, once it is stored: 200 when committed (it then survives
/// this instance's death), 202 when it is in force but the database has not taken it yet
/// (it is written when the database answers, and lost if this instance dies first), 409 when
/// leadership changed before it could be written (it is not in force anywhere).
async fn stored(api: &ApiState, accepted: Accepted) -> Response {
    let Accepted { shown, stored } = accepted;
    let mut answer = json!(shown);
    match tokio::time::timeout(STORE_WAIT, stored).await {
        Ok(Ok(Stored::Written)) => {
            answer["stored"] = json!(true);
            Json(answer).into_response()
        }
        Ok(Ok(Stored::Dropped)) => following(api).await.unwrap_or_else(|| {
            refused(
                StatusCode::CONFLICT,
                "not_stored",
                "leadership changed before the change was stored; make it again",
            )
        }),
        Ok(Err(_)) => stopping(),
        Err(_) => {
            answer["stored"] = json!(false);
            answer["warning"] = json!(format!(
                "in force, but the database has not stored it within {}s (see /healthz): it \
                 is written when the database answers, and lost if this instance stops first",
                STORE_WAIT.as_secs()
            ));
            (StatusCode::ACCEPTED, Json(answer)).into_response()
        }
    }
}

/// A field of a change that is malformed: the 400 names it.
struct BadField {
    code: &'static str,
    message: String,
}

impl BadField {
    fn response(self) -> Response {
        refused(StatusCode::BAD_REQUEST, self.code, self.message)
    }
}

/// `until` as milliseconds since the epoch, and the note, or what is wrong with them.
fn when_and_why(
    api: &ApiState,
    until: Option<String>,
    note: Option<String>,
) -> Result<(Option<i64>, Option<String>), BadField> {
    let until_ms = match until {
        None => None,
        Some(text) => Some(
            parse_until(&text, api.clock.unix_ms()).map_err(|e| BadField {
                code: "invalid_until",
                message: format!("until: {e}"),
            })?,
        ),
    };
    let note = note.map(|n| n.trim().to_owned()).filter(|n| !n.is_empty());
    if let Some(n) = &note
        && n.chars().count() > MAX_NOTE
    {
        return Err(BadField {
            code: "invalid_note",
            message: format!("note: longer than {MAX_NOTE} characters"),
        });
    }
    Ok((until_ms, note))
}

/// A follower's 409: changes go to the leader, whose API address the term row names.
async fn following(api: &ApiState) -> Option<Response> {
    let Some(Role::Follower { leader, term }) = api.status.role() else {
        return None;
    };
    let recorded = api.history.leader().await.ok();
    let address = recorded
        .as_ref()
        .filter(|r| Some(r.term) >= term && !r.holder.is_empty())
        .and_then(|r| r.api.clone());
    let name = leader.or_else(|| recorded.map(|r| r.holder));
    let shown = match (&name, &address) {
        (Some(name), Some(api)) => format!("{name} at {api}"),
        (Some(name), None) => name.clone(),
        (None, _) => "nobody yet".to_owned(),
    };
    Some(
        (
            StatusCode::CONFLICT,
            Json(json!({
                "error": format!("this instance follows; ask the leader ({shown})"),
                "code": "following",
                "leader": { "instance": name, "api": address },
            })),
        )
            .into_response(),
    )
}

/// A refusal: `{"error": …, "code": …}`, the code a stable word a client can branch on.
fn refused(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({ "error": message.into(), "code": code })),
    )
        .into_response()
}

fn stopping() -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "the engine is shutting down",
    )
}
