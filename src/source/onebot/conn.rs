//! One WebSocket connection to a OneBot implementation, in either direction: action calls with
//! `echo` correlation and per-call timeouts, and a bounded stream of the events that matter.
//!
//! A reader task routes responses to their callers and queues events; a writer task owns the
//! socket's sending half. Message events are dropped at the reader (they are most of the
//! traffic and none of this source's business), and if the event queue is ever full the event
//! is dropped and flagged so the session reconciles with a fresh group list: a flooding bot
//! costs bounded memory and never blocks the answers the session is waiting for.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::protocol::{self, Event, Frame, Response};

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
    out: mpsc::Sender<Message>,
    pending: Arc<Mutex<HashMap<String, oneshot::Sender<Response>>>>,
    next_echo: Arc<AtomicU64>,
    closed: CancellationToken,
    /// Some event was dropped because the queue was full.
    pub lost_events: Arc<AtomicBool>,
}

impl Conn {
    /// Starts the reader and writer tasks of a handshaken socket.
    pub fn start<S>(ws: WebSocketStream<S>, label: String) -> (Conn, mpsc::Receiver<Event>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sink, mut stream) = ws.split();
        let (out, mut out_rx) = mpsc::channel::<Message>(64);
        let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
        let conn = Conn {
            label: Arc::new(Mutex::new(label)),
            out,
            pending: Arc::default(),
            next_echo: Arc::new(AtomicU64::new(1)),
            closed: CancellationToken::new(),
            lost_events: Arc::default(),
        };
        let closed = conn.closed.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = closed.cancelled() => break,
                    msg = out_rx.recv() => match msg {
                        Some(msg) => {
                            let closing = matches!(msg, Message::Close(_));
                            if sink.send(msg).await.is_err() || closing {
                                break;
                            }
                        }
                        None => break,
                    },
                }
            }
            let _ = sink.close().await;
            closed.cancel();
        });
        let reader = conn.clone();
        tokio::spawn(async move {
            let mut noise = LogLimit::default();
            loop {
                let next = tokio::select! {
                    _ = reader.closed.cancelled() => break,
                    next = stream.next() => next,
                };
                match next {
                    None => break,
                    Some(Err(e)) => {
                        warn!(
                            "{}: connection error: {e}; resetting the connection",
                            reader.label()
                        );
                        break;
                    }
                    Some(Ok(Message::Text(text))) => match protocol::parse(&text) {
                        Ok(Frame::Response(r)) => reader.route(r),
                        Ok(Frame::Event(Event::Other)) => {}
                        Ok(Frame::Event(e)) => {
                            if events_tx.try_send(e).is_err() {
                                reader.lost_events.store(true, Ordering::Relaxed);
                                noise.warn(
                                    &reader.label(),
                                    "event queue full, event dropped (will reconcile)",
                                );
                            }
                        }
                        Err(e) => noise.warn(&reader.label(), &format!("ignored frame: {e}")),
                    },
                    Some(Ok(Message::Binary(_))) => {
                        noise.warn(&reader.label(), "ignored binary frame")
                    }
                    Some(Ok(Message::Close(_))) => break,
                    Some(Ok(_)) => {}
                }
            }
            reader.closed.cancel();
            // Dropping the senders tells every waiting caller the connection is gone.
            reader
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
        });
        (conn, events)
    }

    pub fn label(&self) -> String {
        self.label.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_label(&self, label: String) {
        *self.label.lock().unwrap_or_else(|e| e.into_inner()) = label;
    }

    /// Calls an action and waits for its answer's `data`.
    pub async fn call(
        &self,
        action: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let echo = format!("aa-{}", self.next_echo.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(echo.clone(), tx);
        let frame = Message::text(protocol::request(action, params, &echo));
        let result = tokio::time::timeout(timeout, async {
            self.out.send(frame).await.map_err(|_| CallError::Closed)?;
            rx.await.map_err(|_| CallError::Closed)
        })
        .await;
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&echo);
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
        let waiter = r.echo.as_str().and_then(|echo| {
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(echo)
        });
        if let Some(waiter) = waiter {
            let _ = waiter.send(r);
        }
    }
}

/// Logs at most a few lines per minute per connection, then says how many were suppressed.
#[derive(Default)]
struct LogLimit {
    window: Option<Instant>,
    shown: u32,
    suppressed: u64,
}

impl LogLimit {
    fn warn(&mut self, label: &str, what: &str) {
        let now = Instant::now();
        if self
            .window
            .is_none_or(|w| now.duration_since(w) > Duration::from_secs(60))
        {
            if self.suppressed > 0 {
                warn!("{label}: {} similar line(s) suppressed", self.suppressed);
            }
            self.window = Some(now);
            self.shown = 0;
            self.suppressed = 0;
        }
        if self.shown < 5 {
            self.shown += 1;
            warn!("{label}: {what}");
        } else {
            self.suppressed += 1;
        }
    }
}
