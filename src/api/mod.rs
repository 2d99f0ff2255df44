//! The HTTP API (axum; the ingress decision served in front of the router, see [`ApiService`]): the
//! ingress decision, the assignment, bots and presence, gates, and an admin rebalance. Every
//! route but `/healthz` needs `Authorization: Bearer <api.token>` when a token is configured
//! (compared in constant time). Bodies are capped; malformed JSON and missing or mistyped
//! fields get a 400 with a JSON error naming the field; an unreachable Redis never makes a
//! 500: the answer says which fallback decided.
//!
//! One file per resource: [`ingress`] (the hot route and the server's own front), `assignments`
//! (the assignment and its stream, bots, explain, rebalance), `fleet` (reporters), `health`
//! (health, history, metrics, the dashboard), `gates`; [`settings`] is the `api:` section;
//! `shared` and `body` are what the routes share. The API reads the service's parts' status
//! through [`crate::status::Status`] and asks the engine through its
//! [`crate::engine_handle::EngineHandle`].

mod assignments;
mod body;
mod fleet;
mod gates;
mod health;
mod ingress;
mod operator;
pub mod settings;
mod shared;
mod tls;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware;
use axum::routing::{get, post, put};

pub use ingress::ApiService;
use shared::{ApiRef, auth, error};
pub use shared::{ApiState, Tokens};
pub use tls::Tls;

use assignments::{
    assignment, assignments, bots, explain, federate_peers, presence, stream, weights,
};
use fleet::fleet_routes;
use gates::{begin_activity, end_activity, owned_gate};
use health::{dashboard, healthz, history, prometheus_metrics, readyz, status};
use ingress::{AnswerBody, ingress};
use operator::{audit, drain, drains, pin, pins, rebalance, undrain, unpin};

/// The API; `max_body` caps request bodies.
pub fn router(api: ApiState, max_body: usize) -> ApiService {
    let api = Arc::new(api);
    let protected = Router::new()
        // Served by `ApiService` in front of the router; here too so that other methods get 405.
        .route(
            "/v1/ingress",
            post(
                move |State(api): State<ApiRef>, request: Request| async move {
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
        .route("/v1/pins", get(pins))
        .route("/v1/pins/{platform}/{channel}", put(pin).delete(unpin))
        .route("/v1/drains", get(drains))
        .route("/v1/drains/{platform}/{bot}", put(drain).delete(undrain))
        .route("/v1/audit", get(audit))
        .route("/v1/explain/{platform}/{channel}", get(explain))
        .route("/v1/weights/{platform}", get(weights))
        .route("/v1/history", get(history))
        .route("/v1/gate/owned", post(owned_gate))
        .route("/v1/activity/begin", post(begin_activity))
        .route("/v1/activity/end", post(end_activity))
        .route("/v1/assignments/stream", get(stream))
        .merge(fleet_routes(&api));
    // The token is checked before routing (`auth`), so an unknown route without it is a 401
    // like any other; the open routes are named there.
    let router = Router::new()
        .route("/", get(dashboard))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(prometheus_metrics))
        .merge(protected)
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such route") })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state(api.clone(), auth))
        .with_state(api.clone());
    ApiService {
        api,
        router,
        max_body,
    }
}

/// Serves `app` on `listener` until `shutdown`: HTTP/1.1, a request's headers within
/// `header_timeout` (which is also how long an idle keep-alive connection stays open), then
/// at most 5 s for the requests in flight. axum's own `serve` has no such timeouts: 500
/// connections sending half a request each would stay open for good.
/// With `tls`, each connection's TLS handshake must end within `header_timeout` too.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: ApiService,
    header_timeout: std::time::Duration,
    tls: Option<Tls>,
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
        let builder = {
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                // Pipelined requests (a client with many decisions in flight on one
                // connection) get their answers in one write, not one write each.
                .pipeline_flush(true);
            b
        };
        match &tls {
            None => {
                let connection =
                    graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
                tokio::spawn(async move {
                    let _ = connection.await;
                });
            }
            Some(tls) => {
                let acceptor = tls.acceptor();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(header_timeout, acceptor.accept(stream)).await
                    else {
                        return;
                    };
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    let _ = watcher.watch(connection).await;
                });
            }
        }
    }
    if tokio::time::timeout(std::time::Duration::from_secs(5), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("API: requests still open 5 s after the stop were cut");
    }
}
