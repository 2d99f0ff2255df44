//! The HTTP API (axum; the ingress decision served in front of the router, see [`App`]): the
//! ingress decision, the assignment, bots and presence, gates, and an admin rebalance. Every
//! route but `/healthz` needs `Authorization: Bearer <api.token>` when a token is configured
//! (compared in constant time). Bodies are capped; malformed JSON and missing or mistyped
//! fields get a 400 with a JSON error naming the field; an unreachable Redis never makes a
//! 500: the answer says which fallback decided.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use subtle::ConstantTimeEq;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::ReloadStatus;
use crate::engine::Control;
use crate::leader::Role;
use crate::metrics::{self, Metrics};
use crate::outputs::presence_registry;
use crate::outputs::publish::PublishStatus;
use crate::outputs::redis::Redis;
use crate::pallas::claim::valid_plugin;
use crate::pallas::federate::Federate;
use crate::pallas::gate::Gates;
use crate::pallas::ingress::{Ingress, Reason, Request as IngressRequest};
use crate::presence::Presence;
use crate::secret::Secret;
use crate::source::http::{Events, FullState, ReportError, Reporters};
use crate::store::SqlStore;
use crate::store::writer::WriteStatus;
use crate::view::View;
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
    pub token: Secret,
    /// The store writer's state: pending rows, the last error.
    pub store: tokio::sync::watch::Receiver<WriteStatus>,
    /// The config watcher's state: the last rejected edit, while in force.
    pub config: tokio::sync::watch::Receiver<ReloadStatus>,
    /// Fleet reporters (`sources.http`), when enabled.
    pub reporters: Option<Reporters>,
    /// Ends the assignment streams when the service stops.
    pub shutdown: CancellationToken,
    pub metrics: Arc<Metrics>,
    pub metrics_auth: MetricsAuth,
    /// Reads the rebalance history.
    pub history: SqlStore,
    /// The Redis publication's progress, when publishing.
    pub publication: Option<Arc<PublishStatus>>,
    /// This instance's name and role, under leadership.
    pub leadership: Option<(String, tokio::sync::watch::Receiver<Role>)>,
}

impl Api {
    /// `{"instance": …, "role": "leader"|"follower", "term": …, "leader": …}`, or `null`.
    fn leadership(&self) -> Value {
        let Some((instance, role)) = &self.leadership else {
            return Value::Null;
        };
        let role = role.borrow().clone();
        let leader = match &role {
            Role::Leader { .. } => Some(instance.clone()),
            Role::Follower { leader, .. } => leader.clone(),
        };
        let mut out = serde_json::to_value(&role).unwrap_or(Value::Null);
        out["instance"] = json!(instance);
        out["leader"] = json!(leader);
        out["term"] = json!(role.term());
        out
    }
}

type Shared = Arc<Api>;

/// The API as the server runs it: `POST /v1/ingress` straight to its handler, every other
/// request through the router.
///
/// The decision is the one hot route (every bot asks it about every group message, and a
/// plugin waits for the answer before it replies). Through axum's router a decision took ~34k
/// instructions and 28 allocations (callgrind, `POST /v1/ingress` in an assigned group), a
/// sixth of the instructions in the routing itself: the matched path stored in a new
/// extension map, three boxed futures, the body-limit wrapper. Served here, with the
/// request's strings borrowed, a body that came in one piece taken as it is, and the answer
/// sent from the buffer it was written into with the request's emptied header map, it takes
/// ~25.6k and 4 (hyper's own: the body channel, the header timer, the read buffer's split and
/// its growth), with the same checks in the same order (token, body size, content type,
/// fields) from the same functions.
#[derive(Clone)]
pub struct App {
    api: Shared,
    router: Router,
    max_body: usize,
}

impl App {
    /// The answer to one request.
    pub async fn answer(
        self,
        request: hyper::Request<hyper::body::Incoming>,
    ) -> hyper::Response<AnswerBody> {
        if request.method() == axum::http::Method::POST && request.uri().path() == "/v1/ingress" {
            return ingress(&self.api, self.max_body, request).await;
        }
        let mut router = self.router;
        match tower_service::Service::call(&mut router, request).await {
            Ok(response) => response.map(AnswerBody::Routed),
            Err(infallible) => match infallible {},
        }
    }
}

/// An answer's body: a small JSON answer in place (a decision's: no copy into shared bytes,
/// no boxed body), or whatever the router answered.
#[allow(
    clippy::large_enum_variant,
    reason = "the small answer is in place so that it is not allocated"
)]
pub enum AnswerBody {
    /// Sent whole in one frame; `None` once sent.
    Small(Option<SmallBuffer>),
    Routed(axum::body::Body),
}

impl AnswerBody {
    /// The same body as axum's, for the ingress route inside the router.
    fn into_routed(self) -> axum::body::Body {
        match self {
            AnswerBody::Small(Some(small)) => {
                axum::body::Body::from(Bytes::copy_from_slice(small.unsent()))
            }
            AnswerBody::Small(None) => axum::body::Body::empty(),
            AnswerBody::Routed(body) => body,
        }
    }
}

impl hyper::body::Body for AnswerBody {
    type Data = Chunk;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Chunk>, axum::Error>>> {
        match self.get_mut() {
            AnswerBody::Small(small) => std::task::Poll::Ready(
                small
                    .take()
                    .map(|small| Ok(hyper::body::Frame::data(Chunk::Small(small)))),
            ),
            AnswerBody::Routed(body) => hyper::body::Body::poll_frame(std::pin::Pin::new(body), cx)
                .map_ok(|frame| frame.map_data(Chunk::Shared)),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            AnswerBody::Small(small) => small.is_none(),
            AnswerBody::Routed(body) => hyper::body::Body::is_end_stream(body),
        }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            AnswerBody::Small(small) => hyper::body::SizeHint::with_exact(
                small.as_ref().map_or(0, |s| s.unsent().len() as u64),
            ),
            AnswerBody::Routed(body) => hyper::body::Body::size_hint(body),
        }
    }
}

/// A piece of an answer's body, as the server writes it.
#[allow(
    clippy::large_enum_variant,
    reason = "the small answer is in place so that it is not allocated"
)]
pub enum Chunk {
    Small(SmallBuffer),
    Shared(Bytes),
}

impl hyper::body::Buf for Chunk {
    fn remaining(&self) -> usize {
        match self {
            Chunk::Small(small) => small.unsent().len(),
            Chunk::Shared(bytes) => bytes.remaining(),
        }
    }

    fn chunk(&self) -> &[u8] {
        match self {
            Chunk::Small(small) => small.unsent(),
            Chunk::Shared(bytes) => bytes.chunk(),
        }
    }

    fn advance(&mut self, n: usize) {
        match self {
            Chunk::Small(small) => {
                assert!(n <= small.unsent().len(), "advanced past the end");
                small.sent += n;
            }
            Chunk::Shared(bytes) => bytes.advance(n),
        }
    }
}

/// `POST /v1/ingress`, from `App` in front of the router or through it: the token, the body
/// (size, content type, fields), the decision. The request's strings borrow from the body.
async fn ingress<B>(
    api: &Api,
    max_body: usize,
    request: hyper::Request<B>,
) -> hyper::Response<AnswerBody>
where
    B: axum::body::HttpBody<Data = Bytes>,
    B::Error: Into<axum::BoxError>,
{
    let (parts, body) = request.into_parts();
    if !authorized(api, &parts.headers) {
        return unauthorized().map(AnswerBody::Routed);
    }
    let json = is_json(&parts.headers);
    let limited = http_body_util::Limited::new(body, max_body);
    let collected = async {
        match whole_body(limited).await {
            Ok(bytes) => Ok(bytes),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge),
            Err(e) => Err(BodyError::Failed(format!(
                "Failed to buffer the request body: {e}"
            ))),
        }
    };
    let body = match read_body(json, collected).await {
        Ok(body) => body,
        Err(response) => return response.map(AnswerBody::Routed),
    };
    match parse_json::<IngressRequest>(&body) {
        // The request's header map becomes the answer's: hyper hands an answer's map on to
        // the connection's next request, so the maps go round without being allocated anew.
        Ok(request) => decide(api, &request, parts.headers).await,
        Err(message) => error(StatusCode::BAD_REQUEST, message).map(AnswerBody::Routed),
    }
}

/// A body's bytes. A body that comes in one piece, as a small request's does (read with its
/// headers), is that piece, not first collected into a list of pieces.
async fn whole_body<B: axum::body::HttpBody<Data = Bytes>>(body: B) -> Result<Bytes, B::Error> {
    use http_body_util::BodyExt;
    let mut body = std::pin::pin!(body);
    let first = match body.frame().await {
        None => return Ok(Bytes::new()),
        // Trailers carry no bytes of the body.
        Some(frame) => frame?.into_data().unwrap_or_default(),
    };
    if body.is_end_stream() {
        return Ok(first);
    }
    let rest = body.collect().await?.to_bytes();
    if first.is_empty() {
        return Ok(rest);
    }
    let mut whole = Vec::with_capacity(first.len() + rest.len());
    whole.extend_from_slice(&first);
    whole.extend_from_slice(&rest);
    Ok(whole.into())
}

/// The API; `max_body` caps request bodies.
pub fn app(api: Api, max_body: usize) -> App {
    let api = Arc::new(api);
    let protected = Router::new()
        // Served by `App` in front of the router; here too so that other methods get 405.
        .route(
            "/v1/ingress",
            post(
                move |State(api): State<Shared>, request: Request| async move {
                    ingress(&api, max_body, request)
                        .await
                        .map(AnswerBody::into_routed)
                },
            ),
        )
        .route("/v1/assignments", get(assignments))
        .route("/v1/assignments/{platform}/{channel}", get(assignment))
        .route("/v1/bots", get(bots))
        .route("/v1/status", get(status))
        .route("/v1/presence", get(presence))
        .route("/v1/federate/peers", get(federate_peers))
        .route("/v1/rebalance", post(rebalance))
        .route("/v1/explain/{platform}/{channel}", get(explain))
        .route("/v1/history", get(history))
        .route("/v1/gate/owned", post(owned_gate))
        .route("/v1/activity/begin", post(begin_activity))
        .route("/v1/activity/end", post(end_activity))
        .route("/v1/assignments/stream", get(stream))
        .merge(fleet_routes(&api));
    let metrics = Router::new().route("/metrics", get(prometheus_metrics));
    let (open, protected) = match api.metrics_auth {
        MetricsAuth::Token => (Router::new(), protected.merge(metrics)),
        MetricsAuth::None => (metrics, protected),
    };
    // The token is fixed for the process's life: without one, no layer to pass through on
    // every request.
    let protected = if api.token.is_empty() {
        protected
    } else {
        protected.route_layer(middleware::from_fn_with_state(api.clone(), auth))
    };
    let router = Router::new()
        .route("/", get(dashboard))
        .route("/healthz", get(healthz))
        .merge(open)
        .merge(protected)
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such route") })
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(api.clone());
    App {
        api,
        router,
        max_body,
    }
}

/// A JSON answer of a few hundred bytes at most, as a decision is: serialized into a buffer
/// that the answer's body is (axum's `Json` serializes into a growable buffer, allocates
/// again to share it and boxes the body). A longer answer goes that way still. `headers`
/// (emptied) become the answer's.
fn small_json(
    value: &impl serde::Serialize,
    mut headers: axum::http::HeaderMap,
) -> hyper::Response<AnswerBody> {
    let mut buffer = SmallBuffer {
        bytes: [0; SmallBuffer::SIZE],
        len: 0,
        sent: 0,
    };
    if serde_json::to_writer(&mut buffer, value).is_err() {
        return Json(value).into_response().map(AnswerBody::Routed);
    }
    headers.clear();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    let mut response = hyper::Response::new(AnswerBody::Small(Some(buffer)));
    *response.headers_mut() = headers;
    response
}

/// A fixed-size writer, and then the answer's body: serde_json writes a value piece by piece,
/// and `&mut [u8]`'s own `Write` goes through a loop and two splits for every piece.
pub struct SmallBuffer {
    bytes: [u8; SmallBuffer::SIZE],
    len: usize,
    /// How much of it the server has written out.
    sent: usize,
}

impl SmallBuffer {
    const SIZE: usize = 256;

    fn unsent(&self) -> &[u8] {
        &self.bytes[self.sent..self.len]
    }
}

impl std::io::Write for SmallBuffer {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.write_all(data).map(|()| data.len())
    }

    fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        let end = self.len + data.len();
        let Some(free) = self.bytes.get_mut(self.len..end) else {
            return Err(std::io::ErrorKind::WriteZero.into());
        };
        free.copy_from_slice(data);
        self.len = end;
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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

async fn auth(State(api): State<Shared>, request: Request, next: Next) -> Response {
    // Read from the request itself: a `HeaderMap` argument would be a copy of every header,
    // made for every request.
    if !authorized(&api, request.headers()) {
        return unauthorized();
    }
    next.run(request).await
}

/// Whether the request carries the API's token (any request does when there is none).
fn authorized(api: &Api, headers: &axum::http::HeaderMap) -> bool {
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

fn unauthorized() -> Response {
    error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token")
}

/// JSON bodies: too large → 413 (whatever the content type), not JSON → 415, malformed or a
/// missing or mistyped field → 400 naming it; a body that does not arrive within
/// [`BODY_TIMEOUT`] → 408.
struct Body<T>(T);

/// How long a request body may take to arrive once its headers are in.
const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        let json = is_json(req.headers());
        let bytes = async {
            Bytes::from_request(req, state)
                .await
                .map_err(|rejection| match rejection.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => BodyError::TooLarge,
                    _ => BodyError::Failed(rejection.body_text()),
                })
        };
        let bytes = read_body(json, bytes).await?;
        parse_json(&bytes)
            .map(Body)
            .map_err(|message| error(StatusCode::BAD_REQUEST, message))
    }
}

/// Whether the content type is JSON (`application/json` or `…+json`, parameters aside).
fn is_json(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::trim)
        .is_some_and(|t| t == "application/json" || t.ends_with("+json"))
}

/// Why a request body could not be read.
enum BodyError {
    TooLarge,
    Failed(String),
}

/// A JSON request body's bytes, read from `body` (within the size limit), or the error
/// answer: 413, 408, 415 (`json`: whether the content type said JSON).
async fn read_body(
    json: bool,
    body: impl std::future::Future<Output = Result<Bytes, BodyError>>,
) -> Result<Bytes, Response> {
    // The size first: a too large body is 413 whatever it claims to be.
    // A small body came with its headers: then no timer is set (and cleared) for it.
    let mut body = std::pin::pin!(body);
    let arrived = match futures_util::FutureExt::now_or_never(body.as_mut()) {
        Some(arrived) => Ok(arrived),
        None => tokio::time::timeout(BODY_TIMEOUT, body).await,
    };
    let bytes = match arrived {
        Err(_) => {
            return Err(error(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request body did not arrive within {BODY_TIMEOUT:?}"),
            ));
        }
        Ok(Err(BodyError::TooLarge)) => {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large",
            ));
        }
        Ok(Err(BodyError::Failed(message))) => {
            return Err(error(StatusCode::BAD_REQUEST, message));
        }
        Ok(Ok(bytes)) => bytes,
    };
    if !json {
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "expected Content-Type: application/json",
        ));
    }
    Ok(bytes)
}

/// A JSON body as a `T`, or why not, naming the field (the answer's 400).
fn parse_json<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
    // Most bodies are good: read them at full speed, and only a bad one again, tracking
    // the path for a message that names the field.
    if let Ok(v) = serde_json::from_slice(bytes) {
        return Ok(v);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Ok(v) => match de.end() {
            Ok(()) => Ok(v),
            Err(e) => Err(format!("invalid JSON: {e}")),
        },
        Err(e) => {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let message = if inner.is_syntax() || inner.is_eof() {
                format!("invalid JSON: {inner}")
            } else if path == "." {
                inner.to_string()
            } else {
                format!("{path}: {inner}")
            };
            Err(message)
        }
    }
}

/// Serves `app` on `listener` until `shutdown`: HTTP/1.1, a request's headers within
/// `header_timeout` (which is also how long an idle keep-alive connection stays open), then
/// at most 5 s for the requests in flight. axum's own `serve` has no such timeouts: 500
/// connections sending half a request each would stay open for good.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: App,
    header_timeout: std::time::Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: do not spin.
                    tracing::warn!("API: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |request| {
            let answer = app.clone().answer(request);
            async move { Ok::<_, std::convert::Infallible>(answer.await) }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            // Pipelined requests (a client with many decisions in flight on one connection)
            // get their answers in one write, not one write each.
            .pipeline_flush(true)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
    if tokio::time::timeout(std::time::Duration::from_secs(5), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("API: requests still open 5 s after the stop were cut");
    }
}

/// `/v1/fleet/reporters/{name}`, when `sources.http` is on, with its own body limit (a full
/// state carries every group of every bot).
fn fleet_routes(api: &Shared) -> Router<Shared> {
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

fn report_error(e: ReportError) -> Response {
    let status = match e {
        ReportError::UnknownReporter(_) => StatusCode::CONFLICT,
        ReportError::Invalid(_) => StatusCode::BAD_REQUEST,
        ReportError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, e.to_string())
}

/// The reporters, once the reporter's name is checked.
fn reporter<'a>(api: &'a Api, name: &str) -> Result<&'a Reporters, ReportError> {
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

async fn put_reporter(
    State(api): State<Shared>,
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

async fn reporter_events(
    State(api): State<Shared>,
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

async fn reporter_heartbeat(State(api): State<Shared>, Path(name): Path<String>) -> Response {
    let reporters = match reporter(&api, &name) {
        Ok(r) => r,
        Err(e) => return report_error(e),
    };
    match reporters.heartbeat(&name) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => report_error(e),
    }
}

async fn delete_reporter(State(api): State<Shared>, Path(name): Path<String>) -> Response {
    let reporters = match reporter(&api, &name) {
        Ok(r) => r,
        Err(e) => return report_error(e),
    };
    match reporters.remove(&name, "stopped").await {
        Ok(known) => Json(json!({ "removed": known })).into_response(),
        Err(e) => report_error(e),
    }
}

/// `GET /v1/assignments/stream`: Server-Sent Events. First `snapshot` (every platform's
/// assignment at `version`), then one `changes` per update with the next version (`null`:
/// unassigned), and a `presence` event (`{platform, bot, online}`, no version) whenever a bot
/// goes online or offline. A client that sees a version other than the last + 1 reconnects; a
/// client too slow to keep up with the changes is cut off and does the same (a missed presence
/// event is not worth a resync: the next `GET /v1/bots` tells). The stream ends when the
/// service stops.
async fn stream(State(api): State<Shared>) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use futures_util::StreamExt as _;
    use tokio::sync::broadcast::error::RecvError;

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
        .take_until(api.shutdown.clone().cancelled_owned());
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// `GET /`: the dashboard, one self-contained page; its data comes from the routes below, with
/// the token the operator gives it.
async fn dashboard() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("dashboard.html"),
    )
        .into_response()
}

/// `GET /metrics`: the Prometheus text format.
async fn prometheus_metrics(State(api): State<Shared>) -> Response {
    let store = api.store.borrow().clone();
    let text = api.metrics.render(&metrics::State {
        view: &api.view,
        presence: &api.presence,
        store: &store,
        publication: api.publication.as_deref(),
        federate: api.federate.as_deref(),
        leadership: api
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

async fn healthz(State(api): State<Shared>) -> Json<Value> {
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
    let store = api.store.borrow().clone();
    let status = if store.last_error.is_some() {
        "degraded"
    } else {
        "ok"
    };
    let age = |t: Option<std::time::SystemTime>| {
        t.and_then(|t| t.elapsed().ok()).map(|d| d.as_secs_f64())
    };
    Json(json!({
        "status": status,
        "redis": redis,
        "leadership": api.leadership(),
        "store": {
            "committed": store.is_committed(),
            "pending_rows": store.pending_rows,
            "pending_runs": store.pending_runs,
            "last_error": store.last_error,
            "failure": store.failure,
            "last_commit_age_sec": age(store.last_commit),
            "failing_for_sec": age(store.failing_since),
        },
    }))
}

/// `POST /v1/ingress`, its body read; `headers` are the request's, to be the answer's.
async fn decide(
    api: &Api,
    request: &IngressRequest<'_>,
    headers: axum::http::HeaderMap,
) -> hyper::Response<AnswerBody> {
    match api.ingress.decide(request).await {
        Ok(decision) => {
            api.metrics
                .count_ingress_decision(&decision.reason, decision.handle);
            // The federate owner decided: another deployment's, or this one's (then the claim).
            match decision.reason {
                Reason::OwnedByDeployment(_) => api.metrics.count_owner_decision(false),
                Reason::Pool { .. } => api.metrics.count_owner_decision(true),
                _ => {}
            }
            small_json(&decision, headers)
        }
        Err(e) => error(StatusCode::BAD_REQUEST, e.to_string()).map(AnswerBody::Routed),
    }
}

#[derive(Deserialize)]
struct PlatformQuery {
    platform: Option<String>,
}

/// Whether everything planned is in the database (`false` while rows wait or writes fail).
fn committed_header(api: &Api) -> [(&'static str, &'static str); 1] {
    let committed = if api.store.borrow().is_committed() {
        "true"
    } else {
        "false"
    };
    [("x-assignment-committed", committed)]
}

async fn assignments(State(api): State<Shared>, Query(q): Query<PlatformQuery>) -> Response {
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

async fn assignment(
    State(api): State<Shared>,
    Path((platform, channel)): Path<(String, String)>,
) -> Json<Value> {
    Json(json!({
        "platform": platform,
        "channel": channel,
        "assignee": api.view.assignee(&platform, &channel),
        "excluded": api.view.is_excluded(&platform, &channel),
        "committed": api.store.borrow().is_committed(),
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

/// Per platform: the numbers of the last plan and what the engine keeps in memory.
async fn status(State(api): State<Shared>) -> Json<Value> {
    let platforms: BTreeMap<String, Value> = api
        .view
        .platforms()
        .into_iter()
        .map(|p| {
            let counts = api.view.counts(&p);
            (p, json!(counts))
        })
        .collect();
    let config = api.config.borrow().clone();
    Json(json!({
        "platforms": platforms,
        "last_run": api.view.last_run(),
        "config": config,
    }))
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

#[derive(Deserialize)]
struct HistoryQuery {
    limit: Option<u32>,
}

/// The last rebalances from the history tables, one row per platform, newest first.
async fn history(State(api): State<Shared>, Query(q): Query<HistoryQuery>) -> Response {
    match api.history.history(q.limit.unwrap_or(50).min(1000)).await {
        Ok(rows) => Json(rows).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("reading the history: {e}"),
        ),
    }
}

/// Why a channel has its assignee, from the engine's own index.
async fn explain(
    State(api): State<Shared>,
    Path((platform, channel)): Path<(String, String)>,
) -> Response {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let asked = api
        .control
        .send(Control::Explain {
            platform,
            channel,
            reply,
        })
        .await;
    match (asked, answer.await) {
        (Ok(()), Ok(explanation)) => Json(explanation).into_response(),
        _ => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the engine is shutting down",
        ),
    }
}

async fn rebalance(State(api): State<Shared>) -> Response {
    if let Some((_, role)) = &api.leadership
        && let Role::Follower { leader, .. } = &*role.borrow()
    {
        let leader = leader.as_deref().unwrap_or("nobody yet");
        return error(
            StatusCode::CONFLICT,
            format!("this instance follows; ask the leader ({leader})"),
        );
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(response: hyper::Response<AnswerBody>) -> (Vec<String>, Vec<u8>) {
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| format!("{name}: {}", value.to_str().unwrap()))
            .collect();
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        (headers, body.to_vec())
    }

    #[tokio::test]
    async fn small_answers_are_the_json_of_their_value_whatever_their_length() {
        for length in [0, 10, SmallBuffer::SIZE - 20, SmallBuffer::SIZE, 1000] {
            let value = json!({ "handle": true, "reason": "x".repeat(length) });
            // The request's headers go; only the answer's own are sent.
            let mut request_headers = axum::http::HeaderMap::new();
            request_headers.insert("x-request", axum::http::HeaderValue::from_static("1"));
            let answer = small_json(&value, request_headers);
            assert_eq!(
                hyper::body::Body::size_hint(answer.body()).exact(),
                Some(serde_json::to_vec(&value).unwrap().len() as u64),
                "length {length}"
            );
            let (headers, body) = body_of(answer).await;
            assert_eq!(headers, ["content-type: application/json"]);
            assert_eq!(body, serde_json::to_vec(&value).unwrap(), "length {length}");
        }
    }

    #[tokio::test]
    async fn a_body_is_read_whole_in_one_piece_or_many() {
        use futures_util::stream;
        use hyper::body::Frame;
        let body = |pieces: &[&'static str]| {
            let frames = pieces
                .iter()
                .map(|p| {
                    Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(p.as_bytes())))
                })
                .collect::<Vec<_>>();
            http_body_util::StreamBody::new(stream::iter(frames))
        };
        let cases: [&[&'static str]; 5] =
            [&[], &[""], &["{}"], &["{\"a\"", ":1}"], &["", "{", "", "}"]];
        for pieces in cases {
            let whole = whole_body(body(pieces)).await.unwrap();
            assert_eq!(whole, pieces.concat().as_bytes(), "{pieces:?}");
        }
        let one = http_body_util::Full::new(Bytes::from_static(b"{\"handle\":true}"));
        assert_eq!(&whole_body(one).await.unwrap()[..], b"{\"handle\":true}");
        // The size limit still cuts a body of many pieces.
        let limited = http_body_util::Limited::new(body(&["{\"a\"", ":1}", "  "]), 6);
        let e = whole_body(limited).await.unwrap_err();
        assert!(e.is::<http_body_util::LengthLimitError>(), "{e}");
    }

    #[test]
    fn a_small_answer_is_written_out_in_any_pieces() {
        use hyper::body::Buf;
        let mut buffer = SmallBuffer {
            bytes: [0; SmallBuffer::SIZE],
            len: 0,
            sent: 0,
        };
        serde_json::to_writer(&mut buffer, &json!({ "handle": true })).unwrap();
        let mut chunk = Chunk::Small(buffer);
        let mut written = Vec::new();
        for piece in [1, 0, 5, 3] {
            written.extend_from_slice(&chunk.chunk()[..piece]);
            chunk.advance(piece);
        }
        assert_eq!(chunk.remaining(), br#"{"handle":true}"#.len() - 9);
        written.extend_from_slice(chunk.chunk());
        chunk.advance(chunk.remaining());
        assert_eq!(written, br#"{"handle":true}"#);
        assert!(!chunk.has_remaining());
    }
}
