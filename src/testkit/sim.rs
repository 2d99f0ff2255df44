//! A OneBot v11 implementation simulator, for tests and the benchmark: it plays NapCat's side
//! over real WebSockets, as a forward server auto-assign dials or as a reverse client that
//! dials auto-assign.
//!
//! It sends the `connect` lifecycle event and heartbeats (with a settable `status.online`),
//! answers `get_login_info`, `get_group_list`, `get_status`, `get_group_member_info` (unknown
//! actions get retcode 1404), pushes the bot's own join/leave/admin notices and `bot_offline`, and
//! misbehaves on request: garbage frames, silence, slow answers, failing status, a wrong token.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_util::sync::CancellationToken;

/// One simulated bot (a QQ account behind a OneBot implementation).
#[derive(Clone)]
pub struct SimBot {
    inner: Arc<Inner>,
}

struct Inner {
    id: u64,
    groups: Mutex<BTreeSet<u64>>,
    /// Groups where the bot is an admin (`get_group_member_info` says `admin`).
    admin_of: Mutex<BTreeSet<u64>>,
    online: AtomicBool,
    heartbeats: AtomicBool,
    heartbeat_ms: AtomicU64,
    silent: AtomicBool,
    slow_ms: AtomicU64,
    garbage: AtomicBool,
    status_failing: AtomicBool,
    token: Mutex<String>,
    /// A wrong token is refused NapCat's way (accept, answer retcode 1403, close) rather
    /// than with HTTP 401.
    refuse_like_napcat: AtomicBool,
    /// Close codes received from auto-assign.
    close_codes: Mutex<Vec<u16>>,
    clients: Mutex<Vec<(mpsc::Sender<Message>, CancellationToken)>>,
    connections: AtomicUsize,
    refused: AtomicUsize,
    calls: Mutex<Vec<String>>,
    shutdown: CancellationToken,
}

impl SimBot {
    pub fn new(id: u64, groups: impl IntoIterator<Item = u64>) -> SimBot {
        SimBot {
            inner: Arc::new(Inner {
                id,
                groups: Mutex::new(groups.into_iter().collect()),
                admin_of: Mutex::default(),
                online: AtomicBool::new(true),
                heartbeats: AtomicBool::new(true),
                heartbeat_ms: AtomicU64::new(1000),
                silent: AtomicBool::new(false),
                slow_ms: AtomicU64::new(0),
                garbage: AtomicBool::new(false),
                status_failing: AtomicBool::new(false),
                token: Mutex::new(String::new()),
                refuse_like_napcat: AtomicBool::new(false),
                close_codes: Mutex::default(),
                clients: Mutex::default(),
                connections: AtomicUsize::new(0),
                refused: AtomicUsize::new(0),
                calls: Mutex::default(),
                shutdown: CancellationToken::new(),
            }),
        }
    }

    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The token a forward client must present, or that the reverse client sends.
    pub fn set_token(&self, token: &str) {
        *lock(&self.inner.token) = token.to_owned();
    }

    /// Refuses a wrong token as NapCat and LLOneBot do: the WebSocket is accepted, then
    /// `{"status":"failed","retcode":1403,"echo":null}` and a close.
    pub fn refuse_like_napcat(&self) {
        self.inner.refuse_like_napcat.store(true, Ordering::Relaxed);
    }

    /// Serves forward connections on a free loopback port; returns the `ws://` url.
    pub async fn listen(&self) -> std::io::Result<String> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr: SocketAddr = listener.local_addr()?;
        let inner = self.inner.clone();
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    _ = inner.shutdown.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(_) => continue,
                    },
                };
                let inner = inner.clone();
                tokio::spawn(async move {
                    let token = lock(&inner.token).clone();
                    let napcat = inner.refuse_like_napcat.load(Ordering::Relaxed);
                    let refused = Arc::new(AtomicBool::new(false));
                    let flag = refused.clone();
                    #[allow(clippy::result_large_err)] // the signature is tungstenite's
                    let check = move |req: &Request,
                                      resp: Response|
                          -> Result<Response, ErrorResponse> {
                        if token.is_empty() || presented(req).as_deref() == Some(token.as_str()) {
                            Ok(resp)
                        } else if napcat {
                            flag.store(true, Ordering::Relaxed);
                            Ok(resp)
                        } else {
                            flag.store(true, Ordering::Relaxed);
                            let mut refusal = ErrorResponse::new(Some("bad token".to_owned()));
                            *refusal.status_mut() = StatusCode::UNAUTHORIZED;
                            Err(refusal)
                        }
                    };
                    match tokio_tungstenite::accept_hdr_async(stream, check).await {
                        Ok(mut ws) if refused.load(Ordering::Relaxed) => {
                            inner.refused.fetch_add(1, Ordering::Relaxed);
                            let refusal = r#"{"status":"failed","retcode":1403,"data":null,"message":"token验证失败","wording":"token验证失败","echo":null}"#;
                            let _ = ws.send(Message::text(refusal)).await;
                            let _ = ws.close(None).await;
                        }
                        Ok(ws) => serve(inner, ws).await,
                        Err(_) if refused.load(Ordering::Relaxed) => {
                            inner.refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {}
                    }
                });
            }
        });
        Ok(format!("ws://{addr}"))
    }

    /// Dials a reverse server (and redials every 200 ms while not connected) until stopped.
    pub fn dial(&self, url: &str) {
        let inner = self.inner.clone();
        let url = url.to_owned();
        tokio::spawn(async move {
            while !inner.shutdown.is_cancelled() {
                let mut request = url.as_str().into_client_request().expect("valid url");
                let headers = request.headers_mut();
                headers.insert("X-Self-ID", HeaderValue::from(inner.id));
                headers.insert("X-Client-Role", HeaderValue::from_static("Universal"));
                headers.insert("User-Agent", HeaderValue::from_static("OneBot/11"));
                let token = lock(&inner.token).clone();
                if let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}")) {
                    headers.insert("Authorization", v);
                }
                match tokio_tungstenite::connect_async(request).await {
                    Ok((ws, _)) => serve(inner.clone(), ws).await,
                    Err(tokio_tungstenite::tungstenite::Error::Http(r))
                        if r.status() == StatusCode::UNAUTHORIZED =>
                    {
                        inner.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {}
                }
                tokio::select! {
                    _ = inner.shutdown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                }
            }
        });
    }

    /// `status.online` in heartbeats and `get_status`.
    pub fn set_online(&self, online: bool) {
        self.inner.online.store(online, Ordering::Relaxed);
    }

    pub fn set_heartbeats(&self, on: bool) {
        self.inner.heartbeats.store(on, Ordering::Relaxed);
    }

    pub fn set_heartbeat_interval(&self, interval: Duration) {
        self.inner
            .heartbeat_ms
            .store(interval.as_millis() as u64, Ordering::Relaxed);
    }

    /// Answers nothing and sends nothing (heartbeats included).
    pub fn set_silent(&self, on: bool) {
        self.inner.silent.store(on, Ordering::Relaxed);
    }

    /// Delays every answer.
    pub fn set_slow(&self, delay: Duration) {
        self.inner
            .slow_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }

    /// Sends a burst of garbage frames every 50 ms.
    pub fn set_garbage(&self, on: bool) {
        self.inner.garbage.store(on, Ordering::Relaxed);
    }

    /// `get_status` answers `online: false` (heartbeats are unaffected).
    pub fn set_status_failing(&self, on: bool) {
        self.inner.status_failing.store(on, Ordering::Relaxed);
    }

    /// Replaces the bot's groups silently (as if it was away while they changed): the next
    /// `get_group_list` reports them.
    pub fn set_groups(&self, groups: impl IntoIterator<Item = u64>) {
        *lock(&self.inner.groups) = groups.into_iter().collect();
    }

    /// The bot joins a group and says so.
    pub fn join(&self, group: u64) {
        lock(&self.inner.groups).insert(group);
        self.push(
            json!({"post_type": "notice", "notice_type": "group_increase", "sub_type": "approve",
            "group_id": group, "user_id": self.inner.id, "operator_id": 0}),
        );
    }

    /// The bot leaves a group (`leave`, `kick_me`, `disband`) and says so.
    pub fn leave(&self, group: u64, sub_type: &str) {
        lock(&self.inner.groups).remove(&group);
        self.push(
            json!({"post_type": "notice", "notice_type": "group_decrease", "sub_type": sub_type,
            "group_id": group, "user_id": self.inner.id, "operator_id": self.inner.id}),
        );
    }

    /// The bot is made (or no longer) an admin of a group; `notify` pushes the `group_admin`
    /// notice as implementations do.
    pub fn set_admin(&self, group: u64, admin: bool, notify: bool) {
        if admin {
            lock(&self.inner.admin_of).insert(group);
        } else {
            lock(&self.inner.admin_of).remove(&group);
        }
        if notify {
            let sub_type = if admin { "set" } else { "unset" };
            self.push(
                json!({"post_type": "notice", "notice_type": "group_admin", "sub_type": sub_type,
                "group_id": group, "user_id": self.inner.id}),
            );
        }
    }

    /// The account is logged out: a `bot_offline` notice, then heartbeats say offline.
    pub fn bot_offline(&self) {
        self.set_online(false);
        self.push(
            json!({"post_type": "notice", "notice_type": "bot_offline", "user_id": self.inner.id,
            "tag": "账号已下线", "message": "下线通知"}),
        );
    }

    /// A group message from `user`, as NapCat delivers it (`time` given, so that several bots
    /// delivering the same message send the same event).
    pub fn message(&self, group: u64, user: u64, text: &str, time: i64) {
        let event = json!({"post_type": "message", "message_type": "group", "sub_type": "normal",
            "group_id": group, "user_id": user, "raw_message": text, "message": text,
            "time": time, "self_id": self.inner.id});
        self.push_raw(&event.to_string());
    }

    /// Sends a frame to every connected client.
    pub fn push_raw(&self, text: &str) {
        for (client, _) in lock(&self.inner.clients).iter() {
            let _ = client.try_send(Message::text(text.to_owned()));
        }
    }

    fn push(&self, mut event: Value) {
        event["time"] = json!(now_s());
        event["self_id"] = json!(self.inner.id);
        self.push_raw(&event.to_string());
    }

    /// Closes every open connection (a reverse client redials; forward clients redial us).
    pub fn disconnect(&self) {
        for (_, close) in lock(&self.inner.clients).drain(..) {
            close.cancel();
        }
    }

    pub fn stop(&self) {
        self.inner.shutdown.cancel();
        self.disconnect();
    }

    /// Connections accepted or made so far.
    pub fn connections(&self) -> usize {
        self.inner.connections.load(Ordering::Relaxed)
    }

    /// Handshakes refused for a wrong token so far.
    pub fn refused(&self) -> usize {
        self.inner.refused.load(Ordering::Relaxed)
    }

    /// The close codes auto-assign sent (1009: frame too big, 1007: not UTF-8).
    pub fn close_codes(&self) -> Vec<u16> {
        lock(&self.inner.close_codes).clone()
    }

    /// How many times an action was called.
    pub fn calls(&self, action: &str) -> usize {
        lock(&self.inner.calls)
            .iter()
            .filter(|a| *a == action)
            .count()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn lock<T>(m: &Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    m.lock()
}

fn presented(req: &Request) -> Option<String> {
    let header = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    if let Some(token) = header.and_then(|h| {
        h.strip_prefix("Bearer ")
            .or_else(|| h.strip_prefix("Token "))
    }) {
        return Some(token.to_owned());
    }
    req.uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("access_token=")))
        .map(str::to_owned)
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One connection, either direction.
async fn serve<S>(inner: Arc<Inner>, ws: tokio_tungstenite::WebSocketStream<S>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    inner.connections.fetch_add(1, Ordering::Relaxed);
    let (mut sink, mut stream) = ws.split();
    let (out, mut out_rx) = mpsc::channel::<Message>(1024);
    let closed = CancellationToken::new();
    lock(&inner.clients).push((out.clone(), closed.clone()));
    let writer = {
        let closed = closed.clone();
        tokio::spawn(async move {
            loop {
                let msg = tokio::select! {
                    _ = closed.cancelled() => break,
                    msg = out_rx.recv() => msg,
                };
                let Some(msg) = msg else { break };
                if sink.send(msg).await.is_err() {
                    break;
                }
            }
            let _ = sink.close().await;
            closed.cancel();
        })
    };
    let event = |inner: &Inner, mut e: Value| {
        e["time"] = json!(now_s());
        e["self_id"] = json!(inner.id);
        Message::text(e.to_string())
    };
    let _ = out
        .send(event(&inner, json!({"post_type": "meta_event", "meta_event_type": "lifecycle", "sub_type": "connect"})))
        .await;
    // Heartbeats and garbage run beside the reader.
    let beat = {
        let (inner, out, closed) = (inner.clone(), out.clone(), closed.clone());
        tokio::spawn(async move {
            loop {
                let interval =
                    Duration::from_millis(inner.heartbeat_ms.load(Ordering::Relaxed).max(10));
                tokio::select! {
                    _ = closed.cancelled() => return,
                    _ = inner.shutdown.cancelled() => return,
                    _ = tokio::time::sleep(interval) => {}
                }
                if inner.heartbeats.load(Ordering::Relaxed) && !inner.silent.load(Ordering::Relaxed)
                {
                    let online = inner.online.load(Ordering::Relaxed);
                    let hb = event(
                        &inner,
                        json!({"post_type": "meta_event", "meta_event_type": "heartbeat",
                        "status": {"online": online, "good": true}, "interval": interval.as_millis() as u64}),
                    );
                    if out.send(hb).await.is_err() {
                        return;
                    }
                }
            }
        })
    };
    let garbage = {
        let (inner, out, closed) = (inner.clone(), out.clone(), closed.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = closed.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
                if inner.garbage.load(Ordering::Relaxed) {
                    for junk in GARBAGE {
                        if out.try_send(Message::text(*junk)).is_err() {
                            break;
                        }
                    }
                    let _ = out.try_send(Message::binary(vec![0u8, 159, 146, 150]));
                }
            }
        })
    };
    loop {
        let msg = tokio::select! {
            _ = closed.cancelled() => break,
            _ = inner.shutdown.cancelled() => break,
            msg = stream.next() => msg,
        };
        let Some(Ok(msg)) = msg else { break };
        if let Message::Close(Some(frame)) = &msg {
            lock(&inner.close_codes).push(u16::from(frame.code));
        }
        let Message::Text(text) = msg else { continue };
        let Ok(request) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        let action = request["action"].as_str().unwrap_or("").to_owned();
        lock(&inner.calls).push(action.clone());
        let (inner, out) = (inner.clone(), out.clone());
        tokio::spawn(async move {
            if inner.silent.load(Ordering::Relaxed) {
                return;
            }
            let slow = inner.slow_ms.load(Ordering::Relaxed);
            if slow > 0 {
                tokio::time::sleep(Duration::from_millis(slow)).await;
            }
            let reply = if action == "get_group_list" {
                // Written out directly: the simulated bots share the machine with the
                // service under test, and this is their biggest answer.
                group_list(&inner, &request["echo"])
            } else {
                answer(&inner, &action, &request["params"], request["echo"].clone()).to_string()
            };
            let _ = out.send(Message::text(reply)).await;
        });
    }
    lock(&inner.clients).retain(|(c, _)| !c.same_channel(&out));
    closed.cancel();
    drop(out);
    beat.abort();
    garbage.abort();
    let _ = writer.await;
}

const GARBAGE: &[&str] = &[
    "this is not json",
    "{\"post_type\": \"notice\", \"notice_type\": \"group_increase\", \"self_id\": ",
    "[1, 2, 3]",
    "{\"hello\": \"world\"}",
    "{\"post_type\": \"notice\", \"notice_type\": \"group_increase\", \"self_id\": 1, \"user_id\": 1, \"group_id\": \"x\"}",
    "{\"status\": \"ok\", \"retcode\": 0, \"echo\": \"nobody-asked\", \"data\": null}",
];

/// The `get_group_list` answer as text: what `answer` gives, without building it as a value.
fn group_list(inner: &Inner, echo: &Value) -> String {
    use std::fmt::Write as _;
    let groups = lock(&inner.groups);
    let mut text = String::with_capacity(32 + groups.len() * 96);
    text.push_str(r#"{"status":"ok","retcode":0,"data":["#);
    for (i, g) in groups.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        let _ = write!(
            text,
            r#"{{"group_id":{g},"group_name":"group {g}","member_count":42,"max_member_count":500}}"#
        );
    }
    let _ = write!(text, r#"],"echo":{echo},"message":"","wording":""}}"#);
    text
}

fn answer(inner: &Inner, action: &str, params: &Value, echo: Value) -> Value {
    let ok = |data: Value| json!({"status": "ok", "retcode": 0, "data": data, "echo": echo, "message": "", "wording": ""});
    match action {
        "get_login_info" => {
            ok(json!({"user_id": inner.id, "nickname": format!("sim-{}", inner.id)}))
        }
        "get_group_list" => {
            let groups = lock(&inner.groups);
            ok(Value::Array(
                groups
                    .iter()
                    .map(|g| json!({"group_id": g, "group_name": format!("group {g}"), "member_count": 42, "max_member_count": 500}))
                    .collect(),
            ))
        }
        "get_status" => {
            let online = inner.online.load(Ordering::Relaxed)
                && !inner.status_failing.load(Ordering::Relaxed);
            ok(json!({"online": online, "good": true, "stat": {}}))
        }
        "get_group_member_info" => {
            let group = params["group_id"].clone();
            let admin = group
                .as_u64()
                .is_some_and(|g| lock(&inner.admin_of).contains(&g));
            let role = if admin { "admin" } else { "member" };
            ok(
                json!({"group_id": group, "user_id": params["user_id"], "nickname": format!("sim-{}", inner.id),
                "role": role, "card": "", "title": ""}),
            )
        }
        _ => {
            json!({"status": "failed", "retcode": 1404, "data": null, "echo": echo, "message": "不支持的Api", "wording": "不支持的Api"})
        }
    }
}
