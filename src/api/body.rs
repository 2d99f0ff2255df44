//! Request bodies: JSON within limits and a deadline, each error a 400/408/413/415 naming what
//! was wrong.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::shared::error;

/// JSON bodies: too large → 413 (whatever the content type), not JSON → 415, malformed or a
/// missing or mistyped field → 400 naming it; a body that does not arrive within
/// [`BODY_TIMEOUT`] → 408.
pub(super) struct Body<T>(pub(super) T);

/// How long a request body may take to arrive once its headers are in.
pub(super) const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

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

/// A JSON body that may be absent: an empty body is `None`; anything else is read as
/// [`Body`] reads it.
pub(super) struct OptionalBody<T>(pub(super) Option<T>);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for OptionalBody<T> {
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
        // An empty body is no body, whatever its content type says.
        let bytes = match read_body(true, bytes).await? {
            bytes if bytes.is_empty() => return Ok(OptionalBody(None)),
            _ if !json => {
                return Err(error(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "expected Content-Type: application/json",
                ));
            }
            bytes => bytes,
        };
        parse_json(&bytes)
            .map(|v| OptionalBody(Some(v)))
            .map_err(|message| error(StatusCode::BAD_REQUEST, message))
    }
}

/// Whether the content type is JSON (`application/json` or `…+json`, parameters aside).
pub(super) fn is_json(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::trim)
        .is_some_and(|t| t == "application/json" || t.ends_with("+json"))
}

/// Why a request body could not be read.
pub(super) enum BodyError {
    TooLarge,
    Failed(String),
}

/// A JSON request body's bytes, read from `body` (within the size limit), or the error
/// answer: 413, 408, 415 (`json`: whether the content type said JSON).
pub(super) async fn read_body(
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
pub(super) fn parse_json<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
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
