//! `POST /v1/ingress`, the one hot route, served in front of the router (see [`ApiService`]).

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Json, Router};

use super::body::{BodyError, is_json, parse_json, read_body};
use super::settings::Role;
use super::shared::{ApiRef, ApiState, authorized, error};
use crate::pallas::ingress::{Reason, Request as IngressRequest};

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
pub struct ApiService {
    pub(super) api: ApiRef,
    pub(super) router: Router,
    pub(super) max_body: usize,
}

impl ApiService {
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
    pub(super) fn into_routed(self) -> axum::body::Body {
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
                .map_ok(|frame| frame.map_data(Chunk::ApiRef)),
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
    ApiRef(Bytes),
}

impl hyper::body::Buf for Chunk {
    fn remaining(&self) -> usize {
        match self {
            Chunk::Small(small) => small.unsent().len(),
            Chunk::ApiRef(bytes) => bytes.remaining(),
        }
    }

    fn chunk(&self) -> &[u8] {
        match self {
            Chunk::Small(small) => small.unsent(),
            Chunk::ApiRef(bytes) => bytes.chunk(),
        }
    }

    fn advance(&mut self, n: usize) {
        match self {
            Chunk::Small(small) => {
                assert!(n <= small.unsent().len(), "advanced past the end");
                small.sent += n;
            }
            Chunk::ApiRef(bytes) => bytes.advance(n),
        }
    }
}

/// `POST /v1/ingress`, from `ApiService` in front of the router or through it: the token, the body
/// (size, content type, fields), the decision. The request's strings borrow from the body.
pub(super) async fn ingress<B>(
    api: &ApiState,
    max_body: usize,
    request: hyper::Request<B>,
) -> hyper::Response<AnswerBody>
where
    B: axum::body::HttpBody<Data = Bytes>,
    B::Error: Into<axum::BoxError>,
{
    let (parts, body) = request.into_parts();
    if let Err(denied) = authorized(api, &parts.headers, Role::Report) {
        return denied.response().map(AnswerBody::Routed);
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
pub(super) async fn whole_body<B: axum::body::HttpBody<Data = Bytes>>(
    body: B,
) -> Result<Bytes, B::Error> {
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

/// `POST /v1/ingress`, its body read; `headers` are the request's, to be the answer's.
pub(super) async fn decide(
    api: &ApiState,
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

/// A JSON answer of a few hundred bytes at most, as a decision is: serialized into a buffer
/// that the answer's body is (axum's `Json` serializes into a growable buffer, allocates
/// again to share it and boxes the body). A longer answer goes that way still. `headers`
/// (emptied) become the answer's.
pub(super) fn small_json(
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
    pub(super) bytes: [u8; SmallBuffer::SIZE],
    pub(super) len: usize,
    /// How much of it the server has written out.
    pub(super) sent: usize,
}

impl SmallBuffer {
    const SIZE: usize = 256;

    pub(super) fn unsent(&self) -> &[u8] {
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Bytes;
    use serde_json::json;

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
