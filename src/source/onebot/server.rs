//! Reverse WebSocket: implementations dial auto-assign with `X-Self-ID`, `X-Client-Role` and
//! `Authorization` (`Bearer <token>`, or go-cqhttp's `Token <token>`; `?access_token=` works
//! too). A refused handshake gets an HTTP error and a log line naming the bot and the reason;
//! a second connection with the same `X-Self-ID` replaces the first.

use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;

use subtle::ConstantTimeEq;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::logs::cut;

use super::conn::Conn;
use super::hub::Hub;
use super::session;
use super::settings::Reverse;
use crate::presence::ConnectionMode;

/// Binds the reverse server's address (so a bad address fails the start-up).
pub async fn bind(settings: &Reverse) -> std::io::Result<TcpListener> {
    TcpListener::bind(settings.bind).await
}

/// Accepts implementations until `shutdown`.
pub async fn run(
    hub: Arc<Hub>,
    listener: TcpListener,
    settings: Reverse,
    shutdown: CancellationToken,
) {
    let settings = Arc::new(settings);
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    warn!("reverse OneBot server: accept failed: {e}");
                    continue;
                }
            },
        };
        tokio::spawn(accept(
            hub.clone(),
            stream,
            peer,
            settings.clone(),
            shutdown.clone(),
        ));
    }
}

async fn accept(
    hub: Arc<Hub>,
    stream: TcpStream,
    peer: SocketAddr,
    settings: Arc<Reverse>,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let claimed = Arc::new(Mutex::new(None));
    #[allow(clippy::result_large_err)] // the signature is tungstenite's
    let check = {
        let claimed = claimed.clone();
        let settings = settings.clone();
        let log = hub.log.clone();
        move |request: &Request, response: Response| -> Result<Response, ErrorResponse> {
            match check(request, &settings) {
                Ok(self_id) => {
                    *claimed.lock() = Some(self_id);
                    Ok(response)
                }
                Err((status, why)) => {
                    let self_id = header(request, "x-self-id").unwrap_or("?");
                    // Refusals need no token to cause: limited per remote address.
                    log.warn("refused handshake", &peer.ip().to_string(), || {
                        format!(
                            "reverse OneBot connection from {peer} (X-Self-ID {}) refused: {why}",
                            cut(self_id)
                        )
                    });
                    let mut refusal = ErrorResponse::new(Some(why));
                    *refusal.status_mut() = status;
                    Err(refusal)
                }
            }
        }
    };
    let config = hub.settings.websocket();
    let ws = match tokio::time::timeout(
        hub.settings.action_timeout.get(),
        tokio_tungstenite::accept_hdr_async_with_config(stream, check, Some(config)),
    )
    .await
    {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            if claimed.lock().is_some() {
                hub.log
                    .warn("failed handshake", &peer.ip().to_string(), || {
                        format!("reverse OneBot connection from {peer}: handshake failed: {e}")
                    });
            }
            return;
        }
        Err(_) => {
            hub.log
                .warn("failed handshake", &peer.ip().to_string(), || {
                    format!("reverse OneBot connection from {peer}: handshake timed out")
                });
            return;
        }
    };
    let self_id = claimed.lock().take();
    let label = format!(
        "onebot:{} (reverse from {peer})",
        self_id.as_deref().unwrap_or("?")
    );
    debug!("{label}: accepted");
    let (conn, events) = Conn::start(ws, label, peer.ip().to_string(), hub.log.clone());
    let mode = ConnectionMode::Reverse {
        peer: peer.to_string(),
    };
    let start = session::Start {
        mode,
        claimed: self_id,
        first: None,
        after_outage: None,
    };
    if let Some(e) = session::run(hub, conn.clone(), events, start, shutdown)
        .await
        .error
    {
        warn!("{}: {e}", conn.label());
    }
}

fn header<'a>(request: &'a Request, name: &str) -> Option<&'a str> {
    request.headers().get(name).and_then(|v| v.to_str().ok())
}

/// The checks of the handshake: path, `X-Self-ID`, role, token. Returns the announced id.
fn check(request: &Request, settings: &Reverse) -> Result<String, (StatusCode, String)> {
    let path = request.uri().path();
    if path.trim_end_matches('/') != settings.path.trim_end_matches('/') {
        return Err((StatusCode::NOT_FOUND, format!("unknown path {path}")));
    }
    let self_id = match header(request, "x-self-id") {
        None | Some("") => {
            return Err((StatusCode::BAD_REQUEST, "missing X-Self-ID".to_owned()));
        }
        Some(id) if !id.bytes().all(|b| b.is_ascii_digit()) => {
            return Err((
                StatusCode::BAD_REQUEST,
                "X-Self-ID is not a number".to_owned(),
            ));
        }
        // `get_login_info` would answer 1001 for 0001: the two would never match.
        Some(id) if id.starts_with('0') => {
            return Err((
                StatusCode::BAD_REQUEST,
                "X-Self-ID has leading zeros: send the QQ number as the bot reports it".to_owned(),
            ));
        }
        Some(id) => id.to_owned(),
    };
    if let Some(role) = header(request, "x-client-role")
        && !role.eq_ignore_ascii_case("universal")
    {
        return Err((
            StatusCode::BAD_REQUEST,
            format!(
                "X-Client-Role {role}: auto-assign needs a Universal connection (events and actions)"
            ),
        ));
    }
    if !settings.token().is_empty() {
        let given = header(request, "authorization")
            .and_then(|a| {
                a.strip_prefix("Bearer ")
                    .or_else(|| a.strip_prefix("Token "))
            })
            .map(str::trim)
            .or_else(|| {
                request
                    .uri()
                    .query()
                    .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("access_token=")))
            });
        match given {
            None => return Err((StatusCode::UNAUTHORIZED, "missing access token".to_owned())),
            Some(t) if !bool::from(t.as_bytes().ct_eq(settings.token().as_bytes())) => {
                return Err((StatusCode::UNAUTHORIZED, "wrong access token".to_owned()));
            }
            Some(_) => {}
        }
    }
    Ok(self_id)
}
