//! `auto-assign bench --coord`: decisions and claims per second.
//!
//! Starts a redis-server on a free loopback port (or uses `--redis`), runs `auto-assign serve`
//! as a child process on a fleet file, and measures with 16 concurrent keep-alive clients:
//! * ingress decisions/s through the HTTP API in assigned groups (a memory lookup) and in
//!   unassigned groups (the claim: in-process, then Redis `SET NX`);
//! * claims/s straight to Redis through the claim code;
//! * raw `SET NX EX` throughput of the same client type on the same Redis, in the same run,
//!   as the reference for the ratios; each group of compared operations takes turns, so the
//!   machine's drift over seconds falls on all of them alike;
//! * then the federate pool's decisions and claims (`super::federate`), and in-process the
//!   view's look-ups while the engine commits a plan (`super::view`).
//!
//! Beside each throughput, the CPU time one operation cost each process taking part (this
//! benchmark's clients, the service, redis-server): clients, server and Redis share the
//! machine's cores, so a throughput also shows how the three were scheduled, while the CPU
//! per operation is each side's own cost.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use super::rate::Rate;
use crate::pallas::claim::Claims;
use crate::redis_conn::Redis;
use crate::testkit::procs::{self, TermOnDrop, free_port};

const CLIENTS: usize = 16;
const DURATION: Duration = Duration::from_secs(3);

pub fn run(redis_url: Option<&str>) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(bench(redis_url))
}

async fn bench(redis_url: Option<&str>) -> anyhow::Result<()> {
    let mut children = Vec::new();
    let mut redis_pid = None;
    let url = match redis_url {
        Some(u) => u.to_owned(),
        None => {
            let port = free_port()?;
            let child = procs::redis_server(port)
                .stdout(Stdio::null())
                .spawn()
                .map_err(|e| {
                    anyhow::anyhow!("redis-server: {e} (install it, or pass --redis URL)")
                })?;
            redis_pid = Some(child.id());
            children.push(TermOnDrop(child));
            format!("redis://127.0.0.1:{port}")
        }
    };
    let dir = std::env::temp_dir().join(format!("auto-assign-bench-coord-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // 3 bots in 3,000 groups: groups 1..=3000 assigned, everything else unassigned.
    let groups: Vec<String> = (1..=3000).map(|g| g.to_string()).collect();
    let list = groups.join(", ");
    std::fs::write(
        dir.join("fleet.yaml"),
        format!(
            "bots:\n  - {{id: 1001, channels: [{list}]}}\n  - {{id: 1002, channels: [{list}]}}\n  - {{id: 1003, channels: [{list}]}}\n"
        ),
    )?;
    let api_port = free_port()?;
    std::fs::write(
        dir.join("config.yaml"),
        format!(
            "database: {{url: \"sqlite://state.db\"}}\nsources: {{file: fleet.yaml}}\nredis: {{url: \"{url}\", prefix: bench}}\napi: {{bind: \"127.0.0.1:{api_port}\"}}\n"
        ),
    )?;
    let child = Command::new(std::env::current_exe()?)
        .args(["serve", "--config"])
        .arg(dir.join("config.yaml"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()?;
    let cpu = CpuClocks {
        processes: [
            ("clients", Some(std::process::id())),
            ("service", Some(child.id())),
            ("redis-server", redis_pid),
        ]
        .into_iter()
        .filter_map(|(name, pid)| Some((name, pid?)))
        .collect(),
    };
    children.push(TermOnDrop(child));
    let redis = Redis::connect_url(&url, tokio_util::sync::CancellationToken::new())?;
    // Wait for the API and the first assignment.
    let started = Instant::now();
    loop {
        if let Ok(mut c) = Client::connect(api_port).await
            && let Ok(body) = c.request("GET", "/v1/assignments/onebot/1", "").await
            && body.contains("\"assignee\":\"")
        {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "the service did not come up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while redis.conn().await.is_none() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "coordination: {CLIENTS} concurrent clients, {}s per measurement in {TURNS} turns alternating with the rest of its group, loopback, redis {url}",
        DURATION.as_secs()
    );

    // The operations compared in one ratio take turns (see `side_by_side`).
    let raw_redis = redis.clone();
    let raw = operation(move |i, n| {
        let redis = raw_redis.clone();
        async move {
            let mut conn = redis.conn().await.expect("connected");
            raw_set_nx(&mut conn, format!("bench:raw:{i}:{n}")).await;
        }
    });
    // The same, one connection per client with one command in flight, as each HTTP client
    // below has: the round trip a decision that needs Redis would pay.
    let client = redis::Client::open(url.as_str())?;
    let mut dedicated = Vec::new();
    for _ in 0..CLIENTS {
        dedicated.push(client.get_multiplexed_async_connection().await?);
    }
    let raw_dedicated = operation(move |i, n| {
        let mut conn = dedicated[i].clone();
        async move { raw_set_nx(&mut conn, format!("bench:raw1:{i}:{n}")).await }
    });
    let claims = Arc::new(Claims::new(
        Some(redis.clone()),
        "bench:msg_claim",
        86400,
        &dir,
    ));
    let direct = operation(move |i, n| {
        let claims = claims.clone();
        async move {
            let (won, _) = claims
                .persistent("ingress_gate", 424242, (i as u64) << 32 | n, 1001)
                .await;
            assert!(won);
        }
    });
    let assigned_body = |i: usize, n: u64| {
        let group = 1 + (n % 3000);
        format!(
            r#"{{"platform":"onebot","self_id":"1001","group_id":"{group}","user_id":"42","text":"hello {i} {n}","time":1786000000,"lane":"chat"}}"#
        )
    };
    let assigned = http_operation(api_port, assigned_body).await?;
    let fallback = http_operation(api_port, |i, n| {
        format!(
            r#"{{"platform":"onebot","self_id":"1001","group_id":"900001","user_id":"42","text":"claim {i} {n}","time":1786000000,"lane":"chat"}}"#
        )
    })
    .await?;
    let shared = Pipelined::connect(api_port).await?;
    let pipelined = operation(move |i, n| {
        let shared = shared.clone();
        let body = assigned_body(i, n);
        async move {
            let answer = shared.request("/v1/ingress", &body).await.expect("answer");
            assert!(answer.contains("\"handle\""), "unexpected answer {answer}");
        }
    });
    let [raw, direct, pipelined] = side_by_side([raw, direct, pipelined], &cpu).await?;
    let [raw_dedicated, assigned, fallback] =
        side_by_side([raw_dedicated, assigned, fallback], &cpu).await?;
    let line = |what: &str, m: &Figures, reference: Option<(&Figures, &str)>| {
        let r = m.rate;
        match reference {
            Some((base, name)) => println!(
                "    {what:<44}{:>9.0} /s   = {:.2}× {name:<12}{}",
                r.per_s,
                r.per_s / base.rate.per_s,
                r.latency()
            ),
            None => println!(
                "    {what:<44}{:>9.0} /s                     {}",
                r.per_s,
                r.latency()
            ),
        }
        println!("        CPU per operation: {}", cpu.per_operation(&m.cpu));
    };
    println!("  {CLIENTS} clients sharing one connection (Redis multiplexed, HTTP/1.1 pipelined):");
    line("raw SET NX EX (reference)", &raw, None);
    line(
        "claims straight to redis (SET NX)",
        &direct,
        Some((&raw, "raw")),
    );
    line(
        "ingress over HTTP, assigned group",
        &pipelined,
        Some((&raw, "raw")),
    );
    println!("  {CLIENTS} clients on a connection each, one request in flight:");
    line("raw SET NX EX (reference)", &raw_dedicated, None);
    line(
        "ingress over HTTP, assigned group",
        &assigned,
        Some((&raw_dedicated, "raw")),
    );
    line(
        "ingress over HTTP, claim fallback",
        &fallback,
        Some((&raw_dedicated, "raw")),
    );
    let (upstream, respecting) =
        tokio::task::spawn_blocking(super::federate::owner_decisions).await?;
    let (claimed, one_winner) =
        super::federate::two_deployment_claims(&redis, CLIENTS, DURATION).await;
    anyhow::ensure!(one_winner, "a message had two federate winners or none");
    println!("federate (10 peers, 10,000 present groups each; one core):");
    println!(
        "  group-owner decisions:                        {:>9.0} /s            {}",
        upstream.per_s,
        upstream.latency()
    );
    println!(
        "  group-owner decisions with respectAssignment: {:>9.0} /s   = {:.2}× upstream   {}",
        respecting.per_s,
        respecting.per_s / upstream.per_s,
        respecting.latency()
    );
    println!(
        "  messages claimed by two deployments at once:  {:>9.0} /s   = {:.2}× raw ({:.0} claims/s, one winner each)   {}",
        claimed.per_s,
        claimed.per_s / raw.rate.per_s,
        2.0 * claimed.per_s,
        claimed.latency()
    );
    tokio::task::spawn_blocking(super::view::report).await?;
    drop(children);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The reference operation: `SET key 1 NX EX 86400`.
async fn raw_set_nx(conn: &mut impl redis::aio::ConnectionLike, key: String) {
    let _: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg("1")
        .arg("NX")
        .arg("EX")
        .arg(86400)
        .query_async(conn)
        .await
        .expect("SET");
}

/// One operation of client `i`, its `n`th: what [`side_by_side`] runs and times.
type Operation = Arc<dyn Fn(usize, u64) -> BoxFuture<'static, ()> + Send + Sync>;

fn operation<F, Fut>(op: F) -> Operation
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    Arc::new(move |i, n| Box::pin(op(i, n)))
}

/// `POST /v1/ingress` with `body(i, n)`, client `i` on its own keep-alive connection.
async fn http_operation(
    port: u16,
    body: impl Fn(usize, u64) -> String + Send + Sync + 'static,
) -> anyhow::Result<Operation> {
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(tokio::sync::Mutex::new(Client::connect(port).await?));
    }
    let clients = Arc::new(clients);
    let body = Arc::new(body);
    Ok(operation(move |i, n| {
        let (clients, body) = (clients.clone(), body.clone());
        async move {
            // Client `i` is only ever used by task `i`: the lock is never contended.
            let mut client = clients[i].lock().await;
            let request = body(i, n);
            let answer = match client.request("POST", "/v1/ingress", &request).await {
                Ok(answer) => answer,
                // The API closes a keep-alive connection left idle past its header timeout,
                // as these are while the other operations take their turn: connect again.
                Err(_) => {
                    *client = Client::connect(port).await.expect("connect");
                    client
                        .request("POST", "/v1/ingress", &request)
                        .await
                        .expect("answer")
                }
            };
            assert!(answer.contains("\"handle\""), "unexpected answer {answer}");
        }
    }))
}

/// Turns per operation in [`side_by_side`].
const TURNS: usize = 10;

/// Each operation run by `CLIENTS` concurrent tasks for `DURATION` in all, in [`TURNS`]
/// turns that alternate with the others' (the order reversed every other round). A shared
/// machine's speed drifts over seconds, by half at times: measured one after the other, an
/// operation's ratio to its reference showed the drift as much as the difference.
async fn side_by_side<const N: usize>(
    ops: [Operation; N],
    cpu: &CpuClocks,
) -> anyhow::Result<[Figures; N]> {
    let mut samples: [Vec<u64>; N] = std::array::from_fn(|_| Vec::new());
    let mut elapsed = [Duration::ZERO; N];
    let mut spent: [Vec<Option<Duration>>; N] =
        std::array::from_fn(|_| vec![Some(Duration::ZERO); cpu.processes.len()]);
    let mut next = [0u64; N];
    for turn in 0..TURNS {
        for k in 0..N {
            let k = if turn % 2 == 0 { k } else { N - 1 - k };
            let before = cpu.read();
            let started = Instant::now();
            let (taken, done) = run_for(&ops[k], next[k], DURATION / TURNS as u32).await?;
            elapsed[k] += started.elapsed();
            let after = cpu.read();
            for (total, (after, before)) in spent[k].iter_mut().zip(after.iter().zip(&before)) {
                *total = match (*total, after, before) {
                    (Some(t), Some(a), Some(b)) => Some(t + a.saturating_sub(*b)),
                    _ => None,
                };
            }
            next[k] += done;
            samples[k].extend(taken);
        }
    }
    Ok(std::array::from_fn(|k| {
        let operations = samples[k].len().max(1) as u32;
        Figures {
            rate: Rate::new(std::mem::take(&mut samples[k]), elapsed[k]),
            cpu: spent[k].iter().map(|t| t.map(|t| t / operations)).collect(),
        }
    }))
}

/// An operation's rate and what one operation cost each of [`CpuClocks`]' processes.
struct Figures {
    rate: Rate,
    /// CPU time per operation, in the order of `CpuClocks::processes`; `None` where the
    /// process's clock could not be read.
    cpu: Vec<Option<Duration>>,
}

/// The CPU clocks of the processes taking part, by name and pid.
struct CpuClocks {
    processes: Vec<(&'static str, u32)>,
}

impl CpuClocks {
    /// Each process's CPU time so far: the sum over its threads of the first figure of
    /// `/proc/PID/task/TID/schedstat` (nanoseconds on a CPU; exact, where `/proc/PID/stat`
    /// counts in 10 ms ticks, too coarse for 0.3 s turns). A thread that ends during a turn
    /// takes its time with it (the turn then counts less, never less than nothing); the
    /// service's and Redis's threads live for the whole run.
    fn read(&self) -> Vec<Option<Duration>> {
        self.processes
            .iter()
            .map(|(_, pid)| {
                let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
                // A thread that ends while its siblings are read is passed over.
                let on_cpu = tasks.flatten().filter_map(|task| {
                    let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
                    stat.split_whitespace().next()?.parse::<u64>().ok()
                });
                Some(Duration::from_nanos(on_cpu.sum()))
            })
            .collect()
    }

    /// `clients 5.2 µs, service 4.8 µs, redis-server 0.0 µs`.
    fn per_operation(&self, cpu: &[Option<Duration>]) -> String {
        let shown: Vec<String> = self
            .processes
            .iter()
            .zip(cpu)
            .map(|((name, _), cpu)| match cpu {
                Some(cpu) => format!("{name} {:.1} µs", cpu.as_secs_f64() * 1e6),
                None => format!("{name} unknown"),
            })
            .collect();
        shown.join(", ")
    }
}

/// Runs `op(client, n)` on `CLIENTS` concurrent tasks for `run`, each client's `n` counting
/// on from `first`: every operation's latency in nanoseconds, and the most operations one
/// client ran (the next turn's `first`, so keys never repeat). A client that failed (an
/// operation asserts its answer) fails the measurement.
async fn run_for(op: &Operation, first: u64, run: Duration) -> anyhow::Result<(Vec<u64>, u64)> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(1 << 14);
            let mut n = first;
            while start.elapsed() < run {
                let began = Instant::now();
                op(i, n).await;
                samples.push(began.elapsed().as_nanos() as u64);
                n += 1;
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    let mut most = 0;
    for t in tasks {
        let taken = t
            .await
            .map_err(|e| anyhow::anyhow!("a benchmark client failed: {e}"))?;
        most = most.max(taken.len() as u64);
        samples.extend(taken);
    }
    Ok((samples, most))
}

/// A minimal keep-alive HTTP/1.1 client: enough for a benchmark against our own API.
struct Client {
    stream: BufReader<TcpStream>,
}

impl Client {
    async fn connect(port: u16) -> std::io::Result<Client> {
        let stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream: BufReader::new(stream),
        })
    }

    async fn request(&mut self, method: &str, path: &str, body: &str) -> anyhow::Result<String> {
        // One write per request, as a real client's buffered writer does: two would cost the
        // server an extra wake-up and read per request.
        self.stream
            .get_mut()
            .write_all(&http_request(method, path, body))
            .await?;
        read_response(&mut self.stream).await
    }
}

fn http_request(method: &str, path: &str, body: &str) -> Vec<u8> {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// One response's body (the status is in the body's `"handle"` or `"error"`).
async fn read_response<R: tokio::io::AsyncRead + Unpin>(
    stream: &mut BufReader<R>,
) -> anyhow::Result<String> {
    const CONTENT_LENGTH: &str = "content-length:";
    let mut length = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        anyhow::ensure!(stream.read_line(&mut line).await? > 0, "connection closed");
        if line == "\r\n" {
            break;
        }
        if line
            .get(..CONTENT_LENGTH.len())
            .is_some_and(|name| name.eq_ignore_ascii_case(CONTENT_LENGTH))
        {
            length = line[CONTENT_LENGTH.len()..].trim().parse()?;
        }
    }
    let mut buf = vec![0u8; length];
    stream.read_exact(&mut buf).await?;
    Ok(String::from_utf8(buf)?)
}

type Pending = (Vec<u8>, oneshot::Sender<anyhow::Result<String>>);

/// Many asks sharing one keep-alive connection, pipelined (HTTP/1.1 answers in order): the
/// shape of the Redis reference, whose clients share one multiplexed connection. Whatever
/// requests wait when the writer is free go out in one write.
#[derive(Clone)]
struct Pipelined {
    requests: mpsc::UnboundedSender<Pending>,
}

impl Pipelined {
    async fn connect(port: u16) -> std::io::Result<Pipelined> {
        let stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.set_nodelay(true)?;
        let (read, mut write) = stream.into_split();
        let (requests, mut queued) = mpsc::unbounded_channel::<Pending>();
        let (sent, mut awaiting) = mpsc::unbounded_channel::<oneshot::Sender<_>>();
        tokio::spawn(async move {
            let mut batch = Vec::new();
            while let Some(first) = queued.recv().await {
                batch.clear();
                let mut next = Some(first);
                while let Some((request, answer)) = next {
                    batch.extend_from_slice(&request);
                    let _ = sent.send(answer);
                    next = queued.try_recv().ok();
                }
                if write.write_all(&batch).await.is_err() {
                    break;
                }
            }
        });
        tokio::spawn(async move {
            let mut read = BufReader::new(read);
            while let Some(answer) = awaiting.recv().await {
                let response = read_response(&mut read).await;
                let failed = response.is_err();
                let _ = answer.send(response);
                if failed {
                    break;
                }
            }
        });
        Ok(Pipelined { requests })
    }

    async fn request(&self, path: &str, body: &str) -> anyhow::Result<String> {
        let (answer, response) = oneshot::channel();
        self.requests
            .send((http_request("POST", path, body), answer))
            .map_err(|_| anyhow::anyhow!("connection closed"))?;
        response.await?
    }
}
