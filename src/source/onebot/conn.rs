//! One WebSocket connection to a OneBot implementation, in either direction: action calls with
//! `echo` correlation and per-call timeouts, and a bounded stream of the events that matter.
//!
//! A reader task routes responses to their callers and queues events; a writer task owns the
//! socket's sending half. Message events are dropped at the reader (they are most of the
//! traffic and none of this source's business), and if the event queue is ever full the event
//! is dropped and flagged so the session reconciles with a fresh group list: a flooding bot
//! costs bounded memory and never blocks the answers the session is waiting for.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{WebSocketStream, tungstenite};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::protocol::{self, Event, Frame, Response};
use crate::logs::{Limiter, cut};

/// Events waiting for the session; beyond this they are dropped (and reconciled later).
const EVENT_QUEUE: usize = 256;

/// Why an action call gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("failed with retcode {retcode}{}", if message.is_empty() { String::new() } else { format!(": {message}") })]
    Failed { retcode: i64, message: String },
    #[error("connection closed")]
    Closed,
}

/// The calling side of a connection.
#[derive(Clone)]
pub struct Conn {
    /// Who is at the other end, for log lines: `onebot:1001 (ws://...)`.
    label: Arc<Mutex<String>>,
    /// What repeated warnings are counted against: the bot once known, else the remote
    /// address or URL (not the connection: a bot that reconnects keeps its allowance).
    subject: Arc<Mutex<String>>,
    log: Arc<Limiter>,
    out: mpsc::Sender<Message>,
    pending: Arc<Mutex<HashMap<String, oneshot::Sender<Response>>>>,
    next_echo: Arc<AtomicU64>,
    closed: CancellationToken,
    /// Some event was dropped because the queue was full.
    pub lost_events: Arc<AtomicBool>,
    /// The implementation refused us with an answer to no request (NapCat and LLOneBot send
    /// `{"status":"failed","retcode":1403,"echo":null}` for a wrong token, then close): its
    /// retcode, or 0.
    rejected: Arc<AtomicI64>,
}

impl Conn {
    /// Starts the reader and writer tasks of a handshaken socket.
    pub fn start<S>(
        ws: WebSocketStream<S>,
        label: String,
        subject: String,
        log: Arc<Limiter>,
    ) -> (Conn, mpsc::Receiver<Event>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sink, mut stream) = ws.split();
        let (out, mut out_rx) = mpsc::channel::<Message>(64);
        let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
        let conn = Conn {
            label: Arc::new(Mutex::new(label)),
            subject: Arc::new(Mutex::new(subject)),
            log,
            out,
            pending: Arc::default(),
            next_echo: Arc::new(AtomicU64::new(1)),
            closed: CancellationToken::new(),
            lost_events: Arc::default(),
            rejected: Arc::default(),
        };
        let closed = conn.closed.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    // A close frame queued by the reader goes out before the writer stops.
                    biased;
                    msg = out_rx.recv() => match msg {
                        Some(msg) => {
                            let closing = matches!(msg, Message::Close(_));
                            if sink.send(msg).await.is_err() || closing {
                                break;
                            }
                        }
                        None => break,
                    },
                    _ = closed.cancelled() => break,
                }
            }
            let _ = sink.close().await;
            closed.cancel();
        });
        let reader = conn.clone();
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    _ = reader.closed.cancelled() => break,
                    next = stream.next() => next,
                };
                match next {
                    None => break,
                    Some(Err(e)) => {
                        // Say why before closing, as RFC 6455 asks: 1009 for a frame over
                        // maxFrameBytes, 1007 for text that is not UTF-8.
                        let close = match &e {
                            tungstenite::Error::Capacity(_) => {
                                Some((CloseCode::Size, "message too big"))
                            }
                            tungstenite::Error::Utf8(_) => {
                                Some((CloseCode::Invalid, "invalid UTF-8"))
                            }
                            _ => None,
                        };
                        match close {
                            Some((code, reason)) => {
                                let _ = reader.out.try_send(Message::Close(Some(CloseFrame {
                                    code,
                                    reason: reason.into(),
                                })));
                                reader.warn("closed for a bad frame", || {
                                    format!("{e}; closing the connection")
                                });
                            }
                            // A dropped connection: whoever waits on it reports it.
                            None => debug!("{}: connection error: {e}", reader.label()),
                        }
                        break;
                    }
                    Some(Ok(Message::Text(text))) => match protocol::parse(&text) {
                        Ok(Frame::Response(r)) => {
                            if r.echo.is_null() && matches!(r.retcode, 1401 | 1403) {
                                reader.rejected.store(r.retcode, Ordering::Relaxed);
                            }
                            reader.route(r)
                        }
                        Ok(Frame::Event(Event::Other)) => {}
                        Ok(Frame::Event(e)) => {
                            if events_tx.try_send(e).is_err() {
                                reader.lost_events.store(true, Ordering::Relaxed);
                                reader.warn("event queue full", || {
                                    "event queue full, event dropped (will reconcile)".to_owned()
                                });
                            }
                        }
                        Err(e) => {
                            reader.warn("ignored frame", || format!("ignored frame: {}", cut(&e.0)))
                        }
                    },
                    Some(Ok(Message::Binary(_))) => {
                        reader.warn("binary frame", || "ignored binary frame".to_owned())
                    }
                    Some(Ok(Message::Close(_))) => break,
                    Some(Ok(_)) => {}
                }
            }
            reader.closed.cancel();
            // Dropping the senders tells every waiting caller the connection is gone.
            reader.pending.lock().clear();
        });
        (conn, events)
    }

    /// The retcode of an unsolicited refusal (1401/1403: wrong token), if one came.
    pub fn rejected(&self) -> Option<i64> {
        Some(self.rejected.load(Ordering::Relaxed)).filter(|&c| c != 0)
    }

    /// Whether `other` is this very connection.
    pub fn same(&self, other: &Conn) -> bool {
        Arc::ptr_eq(&self.pending, &other.pending)
    }

    pub fn label(&self) -> String {
        self.label.lock().clone()
    }

    pub fn set_label(&self, label: String) {
        *self.label.lock() = label;
    }

    /// Repeated warnings about this connection are counted against `subject` from now on.
    pub fn set_subject(&self, subject: String) {
        *self.subject.lock() = subject;
    }

    /// A warning of `class` about this connection, limited per subject (bot or address).
    pub fn warn(&self, class: &'static str, line: impl FnOnce() -> String) {
        let subject = self.subject.lock().clone();
        self.log
            .warn(class, &subject, || format!("{}: {}", self.label(), line()));
    }

    /// Calls an action and waits for its answer's `data`.
    pub async fn call(
        &self,
        action: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<protocol::Data, CallError> {
        let echo = format!("aa-{}", self.next_echo.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(echo.clone(), tx);
        let frame = Message::text(protocol::request(action, params, &echo));
        let result = tokio::time::timeout(timeout, async {
            self.out.send(frame).await.map_err(|_| CallError::Closed)?;
            rx.await.map_err(|_| CallError::Closed)
        })
        .await;
        self.pending.lock().remove(&echo);
        match result {
            Err(_) => Err(CallError::Timeout(timeout)),
            Ok(Err(e)) => Err(e),
            Ok(Ok(r)) if r.ok => Ok(r.data),
            Ok(Ok(r)) => Err(CallError::Failed {
                retcode: r.retcode,
                message: r.message,
            }),
        }
    }

    /// Closes the connection (the implementation may reconnect).
    pub fn close(&self) {
        let _ = self.out.try_send(Message::Close(None));
        self.closed.cancel();
    }

    pub async fn closed(&self) {
        self.closed.cancelled().await
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    fn route(&self, r: Response) {
        let waiter = r
            .echo
            .as_str()
            .and_then(|echo| self.pending.lock().remove(echo));
        if let Some(waiter) = waiter {
            let _ = waiter.send(r);
        }
    }
}
