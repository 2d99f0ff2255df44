//! The service: [`start`] wires config, store, sources, outputs, API and engine, and returns
//! a [`Running`] service with the addresses it bound; [`Running::stop`] and
//! [`Running::stopped`] shut it down cleanly. `auto-assign serve` is [`serve`]: the same,
//! until SIGINT or SIGTERM. Tests start it in process and learn its addresses from
//! [`Running`], never from the log.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

pub use crate::clock::Clock;

use crate::api::{self, ApiState};
use crate::config::{Config, FileError};
use crate::engine::{Control, Engine, Outputs};
use crate::engine_handle::{EngineHandle, Request};
use crate::file_watch::FileWatch;
use crate::leader;
use crate::metrics::Metrics;
use crate::operator::Overrides;
use crate::pallas::claim::Claims;
use crate::pallas::federate::{Federate, settings};
use crate::pallas::gate::Gates;
use crate::pallas::given::Given;
use crate::pallas::ingress::Ingress;
use crate::pallas::presence_registry;
use crate::presence::Presence;
use crate::publication::Keys;
use crate::publication::follower::{Entry, Follower};
use crate::publication::moving::{self, Moves};
use crate::publication::publisher::{Moving, Publisher};
use crate::redis_conn::Redis;
use crate::source::file::{self, Fleet};
use crate::source::http::Reporters;
use crate::source::merge::SourceId;
use crate::source::{FleetEvent, onebot};
use crate::status::{ReloadStatus, Status};
use crate::store::writer::Writer;
use crate::store::{AssignmentRow, DatabaseUrl, SqlStore, Store as _, WeightWrite};
use crate::traffic::Counter;
use crate::view::View;

/// Why the service could not start (or run).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Bad configuration or fleet file: exit code 2.
    #[error("{0}")]
    BadFile(#[from] FileError),
    /// Anything else (database unreachable, port in use, ...): exit code 1.
    #[error("{0:#}")]
    Other(#[from] anyhow::Error),
    /// Stopped with writes the database never took (they are listed in the log): exit code 3.
    #[error("stopped with {rows} row(s) and {runs} history record(s) not written")]
    Unwritten { rows: usize, runs: usize },
}

impl ServeError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ServeError::BadFile(_) => 2,
            ServeError::Other(_) => 1,
            ServeError::Unwritten { .. } => 3,
        }
    }
}

/// A started service.
pub struct Running {
    /// Where the HTTP API listens (`None` with `api.bind: null`).
    pub api_addr: Option<SocketAddr>,
    /// Where the reverse OneBot server listens, if configured.
    pub onebot_addr: Option<SocketAddr>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl Running {
    /// Asks the service to stop (a rebalance in progress completes first).
    pub fn stop(&self) {
        self.shutdown.cancel();
    }

    /// Waits until the service has stopped; `Err` when writes were lost.
    pub async fn stopped(self) -> Result<(), ServeError> {
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(ServeError::Other(anyhow::anyhow!(
                "the service task failed: {e}"
            ))),
        }
    }
}

/// `auto-assign serve`: starts on a loaded config, runs until `shutdown`, stops.
pub async fn serve(config: Config, shutdown: CancellationToken) -> Result<(), ServeError> {
    let running = start(config, Clock::system()).await?;
    let stop = running.shutdown.clone();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        stop.cancel();
    });
    running.stopped().await
}

/// What every part of the service shares.
struct Common {
    config: Config,
    clock: Clock,
    view: View,
    presence: Presence,
    presence_changed: watch::Sender<()>,
    redis: Option<Redis>,
    /// Messages counted by the sources, for the channel weights.
    traffic: Counter,
    shutdown: CancellationToken,
}

/// The engine's inputs: fleet events (tagged with their source), control messages from the
/// service's own tasks, and the API's requests.
struct Inputs {
    fleet_tx: mpsc::Sender<(SourceId, FleetEvent)>,
    fleet_rx: mpsc::Receiver<(SourceId, FleetEvent)>,
    control_tx: mpsc::Sender<Control>,
    control_rx: mpsc::Receiver<Control>,
    engine: EngineHandle,
    requests: mpsc::Receiver<Request>,
}

impl Inputs {
    fn new() -> Inputs {
        let (fleet_tx, fleet_rx) = mpsc::channel(4096);
        let (control_tx, control_rx) = mpsc::channel(64);
        let (engine, requests) = EngineHandle::channel();
        Inputs {
            fleet_tx,
            fleet_rx,
            control_tx,
            control_rx,
            engine,
            requests,
        }
    }
}

/// What the store held at start: the previous assignment, the channel weights, and the
/// operators' pins and drains.
struct Stored {
    assignments: Vec<AssignmentRow>,
    weights: Vec<WeightWrite>,
    overrides: Overrides,
}

/// Starts the service on `config`: everything that can fail at start (files, database, ports)
/// has been checked when this returns.
pub async fn start(config: Config, clock: Clock) -> Result<Running, ServeError> {
    let fleet_file = match &config.sources.file {
        Some(path) => Some((path.clone(), Fleet::load(path)?)),
        None => None,
    };
    let (store, stored) = open_store(&config, clock).await?;
    info!(
        "{}: config loaded; strategy {}",
        config.path.display(),
        config.strategy
    );
    let shutdown = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let common = Common::connect(config, clock, shutdown.clone())?;
    let moving = Moving {
        moves: Moves::default(),
        instance: common
            .config
            .leadership
            .as_ref()
            .map(|l| l.instance())
            .unwrap_or_default(),
    };
    let publisher = start_publication(&common, moving.clone(), &mut tasks);
    let followed = start_following(&common);
    let federate = start_federate(&common, &mut tasks)?;
    let inputs = Inputs::new();
    let reporters = start_reporters(&common, &inputs.fleet_tx, &mut tasks);
    let metrics = Arc::new(Metrics::new());
    let writer = Writer::start(
        store.clone(),
        common.config.database.shutdown_timeout.get(),
        clock,
        metrics.commits(),
    );
    let store_status = writer.status();
    let publication = publisher.as_ref().map(|p| p.status.clone());
    let outputs = Outputs {
        view: common.view.clone(),
        publisher,
        presence: common.presence.clone(),
        presence_changed: common.presence_changed.clone(),
        clock,
        metrics: metrics.clone(),
        followed: followed.clone(),
        moves: Some(moving.moves),
    };
    let mut engine = Engine::new(
        common.config.clone(),
        stored.assignments,
        writer,
        outputs,
        common.traffic.clone(),
    );
    engine.load_weights(stored.weights);
    engine.set_overrides(stored.overrides);
    // A queued fleet event stops a plan's search: its provisional assignee comes first.
    let queue = inputs.fleet_tx.clone();
    engine.interrupt_searches_when(move || queue.capacity() < queue.max_capacity());
    // Bound before leadership: a leader records the address its followers name.
    let api_listener = bind_api(&common).await?;
    let advertised = api_listener
        .as_ref()
        .map(|l| common.config.api.advertised(l.addr));
    let leadership = start_leadership(
        &common,
        &store,
        &inputs,
        store_status.clone(),
        advertised,
        &mut tasks,
    )?;
    if let Some(followed) = followed {
        forward_followed(&common, followed, &inputs.control_tx, &mut tasks);
    }
    if let Some(leadership) = &leadership {
        follow_overrides(
            &common,
            leadership.role.clone(),
            &store,
            &inputs.control_tx,
            &mut tasks,
        );
    }
    let (reload_status, reload_rx) = watch::channel(ReloadStatus::default());
    let status = Status {
        store: store_status,
        reload: reload_rx,
        publication,
        leadership: leadership
            .as_ref()
            .map(|l| (l.instance.clone(), l.role.clone())),
    };
    let api = api_state(
        &common,
        &inputs,
        federate.clone(),
        reporters.clone(),
        status,
        metrics,
        store,
    );
    let api_addr = serve_api(&common, api_listener, api, &mut tasks);
    let (onebot_events, onebot_flush) = tagged(SourceId::OneBot, &inputs.fleet_tx, &mut tasks);
    let (onebot_addr, onebot_reported) =
        start_onebot(&common, federate.as_ref(), &onebot_events, &mut tasks).await?;
    announce_ready(
        onebot_reported.map(|reported| (reported, onebot_flush)),
        reporters.as_ref(),
        &inputs.control_tx,
        &shutdown,
        &mut tasks,
    );
    if let Some((path, (fleet, content))) = fleet_file {
        // The file's fleet is known before the first plan, so a restart moves nothing.
        for event in Fleet::default().diff(&fleet) {
            engine.report(SourceId::File, event);
        }
        info!("{}: fleet file loaded", path.display());
        let (events, _) = tagged(SourceId::File, &inputs.fleet_tx, &mut tasks);
        tasks.spawn(file::watch(path, fleet, content, events, shutdown.clone()));
    }
    tasks.spawn(watch_config(
        common.config.path.clone(),
        inputs.control_tx.clone(),
        reload_status,
        clock,
        shutdown.clone(),
    ));
    let task = tokio::spawn(run_engine(
        engine,
        inputs,
        leadership,
        tasks,
        shutdown.clone(),
    ));
    Ok(Running {
        api_addr,
        onebot_addr,
        shutdown,
        task,
    })
}

/// Connects the store and reads what it holds.
async fn open_store(config: &Config, clock: Clock) -> Result<(SqlStore, Stored), ServeError> {
    let store = SqlStore::connect(&config.database.url, clock).await?;
    let assignments = store
        .load_assignments()
        .await
        .map_err(|e| anyhow::anyhow!("reading stored assignments: {e}"))?;
    let weights = store
        .load_weights()
        .await
        .map_err(|e| anyhow::anyhow!("reading stored channel weights: {e}"))?;
    let overrides = store
        .load_overrides()
        .await
        .map_err(|e| anyhow::anyhow!("reading stored pins and drains: {e}"))?;
    Ok((
        store,
        Stored {
            assignments,
            weights,
            overrides,
        },
    ))
}

impl Common {
    /// The shared parts, with the Redis connection when one is configured.
    fn connect(
        config: Config,
        clock: Clock,
        shutdown: CancellationToken,
    ) -> Result<Common, ServeError> {
        let redis = match &config.redis {
            Some(r) => Some(
                Redis::connect(r, shutdown.clone()).map_err(|e| anyhow::anyhow!("redis: {e}"))?,
            ),
            None => None,
        };
        Ok(Common {
            config,
            clock,
            view: View::default(),
            presence: Presence::default(),
            presence_changed: watch::channel(()).0,
            redis,
            traffic: Counter::default(),
            shutdown,
        })
    }
}

/// The fleet reporters' registry (`sources.http`), expiring silent reporters.
fn start_reporters(
    c: &Common,
    fleet: &mpsc::Sender<(SourceId, FleetEvent)>,
    tasks: &mut JoinSet<()>,
) -> Option<Reporters> {
    let settings = c.config.sources.http.clone()?;
    let reporters = Reporters::new(settings, fleet.clone(), c.traffic.clone());
    tasks.spawn(reporters.clone().expire(c.shutdown.clone()));
    Some(reporters)
}

/// Campaigns for leadership, when configured; the campaign's turns reach the engine as
/// control messages.
fn start_leadership(
    c: &Common,
    store: &SqlStore,
    inputs: &Inputs,
    writes: watch::Receiver<crate::store::writer::WriteStatus>,
    api: Option<String>,
    tasks: &mut JoinSet<()>,
) -> Result<Option<leader::Leadership>, ServeError> {
    let Some(settings) = &c.config.leadership else {
        return Ok(None);
    };
    let (turns_tx, mut turns) = mpsc::channel(4);
    let control = inputs.control_tx.clone();
    tasks.spawn(async move {
        while let Some(turn) = turns.recv().await {
            if control.send(Control::Turn(turn)).await.is_err() {
                return;
            }
        }
    });
    let parts = leader::Parts {
        settings: settings.clone(),
        prefix: c
            .config
            .redis
            .as_ref()
            .map_or_else(|| "auto-assign".to_owned(), |r| r.key_prefix()),
        redis: c.redis.clone(),
        database: match &c.config.database.url {
            DatabaseUrl::Postgres(url) => Some(url.clone()),
            _ => None,
        },
        store: store.clone(),
        turns: turns_tx,
        writes,
        api,
    };
    let leadership =
        leader::start(parts).map_err(|e| FileError::new(&c.config.path, e.to_string()))?;
    info!("leadership: campaigning as {}", leadership.instance);
    Ok(Some(leadership))
}

/// Each new version of the leader's publication reaches the engine (coalesced).
fn forward_followed(
    c: &Common,
    followed: Follower,
    control: &mpsc::Sender<Control>,
    tasks: &mut JoinSet<()>,
) {
    let mut changed = followed.changed();
    let control = control.clone();
    let stop = c.shutdown.clone();
    tasks.spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                result = changed.changed() => if result.is_err() { return },
            }
            if control.send(Control::Followed).await.is_err() {
                return;
            }
        }
    });
}

/// A follower reads the leader's pins and drains from the database every
/// [`OVERRIDES_EVERY`], so its API and explanations show them as the leader's do.
fn follow_overrides(
    c: &Common,
    mut role: watch::Receiver<crate::store::fence::Role>,
    store: &SqlStore,
    control: &mpsc::Sender<Control>,
    tasks: &mut JoinSet<()>,
) {
    let (store, control, stop) = (store.clone(), control.clone(), c.shutdown.clone());
    tasks.spawn(async move {
        let mut every = tokio::time::interval(OVERRIDES_EVERY);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = every.tick() => {}
                changed = role.changed() => if changed.is_err() { return },
            }
            let following = matches!(*role.borrow(), crate::store::fence::Role::Follower { .. });
            if !following {
                continue;
            }
            if let Ok(overrides) = store.load_overrides().await
                && control.send(Control::Overrides(overrides)).await.is_err()
            {
                return;
            }
        }
    });
}

/// How often a follower reads the leader's pins and drains.
const OVERRIDES_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Everything the API's routes read.
fn api_state(
    c: &Common,
    inputs: &Inputs,
    federate: Option<Arc<Federate>>,
    reporters: Option<Reporters>,
    status: Status,
    metrics: Arc<Metrics>,
    history: SqlStore,
) -> ApiState {
    let claims = &c.config.claims;
    ApiState {
        view: c.view.clone(),
        ingress: Ingress {
            view: c.view.clone(),
            claims: Claims::new(
                c.redis.clone(),
                &claims.key_prefix.0,
                claims.ttl.get(),
                &claims.data_dir,
            ),
            federate: federate.clone(),
            traffic: c.traffic.clone(),
            given: Given::default(),
        },
        federate,
        gates: Gates::new(c.redis.clone(), c.clock),
        presence: c.presence.clone(),
        redis: c.redis.clone(),
        engine: inputs.engine.clone(),
        tokens: crate::api::Tokens::new(c.config.api.token.clone(), c.config.api.tokens.clone()),
        status,
        reporters,
        shutdown: c.shutdown.clone(),
        metrics,
        metrics_auth: c.config.api.metrics_auth,
        history,
        clock: c.clock,
    }
}

/// Sends [`Control::Ready`] once every source has reported the fleet (no rebalance before:
/// see [`Engine`]): the OneBot source once its bots had their first attempt (and its reports
/// reached the engine's queue), the reporters after their `startupWait`.
fn announce_ready(
    onebot: Option<(impl Future<Output = ()> + Send + 'static, Flush)>,
    reporters: Option<&Reporters>,
    control: &mpsc::Sender<Control>,
    stop: &CancellationToken,
    tasks: &mut JoinSet<()>,
) {
    let reporters_reported = reporters.map(|r| tokio::time::sleep(r.settings().startup_wait.get()));
    let ready = control.clone();
    let stop = stop.clone();
    tasks.spawn(async move {
        let announce = async {
            if let Some((reported, flush)) = onebot {
                reported.await;
                // Its reports pass through a forwarding task; the engine must have them all
                // queued before Ready, or the first plan misses a bot and the next moves channels.
                flush.flushed().await;
            }
            if let Some(reported) = reporters_reported {
                reported.await;
            }
            let _ = ready.send(Control::Ready).await;
        };
        // A stop before the sources have reported ends the wait.
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = announce => {}
        }
    });
}

/// Runs the engine until the stop, then hands leadership over and waits for every task.
async fn run_engine(
    engine: Engine,
    inputs: Inputs,
    leadership: Option<leader::Leadership>,
    mut tasks: JoinSet<()>,
    stop: CancellationToken,
) -> Result<(), ServeError> {
    let unwritten = engine
        .run(
            inputs.fleet_rx,
            inputs.control_tx,
            inputs.control_rx,
            inputs.requests,
            stop.clone(),
        )
        .await;
    stop.cancel();
    // Only now, with everything written, may the next leader start.
    if let Some(leadership) = leadership {
        leadership.release().await;
    }
    while tasks.join_next().await.is_some() {}
    if unwritten.pending.is_empty() {
        return Ok(());
    }
    let pending = &unwritten.pending;
    error!(
        "stopping with {} row(s) and {} history record(s) not written ({}): rows {}; history {}",
        pending.rows(),
        pending.runs(),
        unwritten
            .last_error
            .as_deref()
            .unwrap_or("the database did not answer"),
        pending.describe_rows(50),
        pending.describe_runs()
    );
    Err(ServeError::Unwritten {
        rows: pending.rows(),
        runs: pending.runs(),
    })
}

/// The Redis publication and the presence registry, when Redis is configured.
fn start_publication(s: &Common, moving: Moving, tasks: &mut JoinSet<()>) -> Option<Publisher> {
    let (redis, settings) = (s.redis.as_ref()?, s.config.redis.as_ref()?);
    tasks.spawn(presence_registry::run(
        redis.clone(),
        s.presence.clone(),
        s.clock,
        s.presence_changed.subscribe(),
        s.shutdown.clone(),
    ));
    let keys = Keys {
        prefix: settings.key_prefix(),
    };
    // Under leadership nobody publishes until it leads.
    Some(Publisher::start(
        redis.clone(),
        s.view.clone(),
        keys,
        leader::duty_at_start(s.config.leadership.as_ref()),
        moving,
        s.shutdown.clone(),
    ))
}

/// Under leadership, the leader's publication, which followers serve (acknowledging the
/// leader's announcements of voluntary moves for [`moving::FOLLOWER_TTLS`] lease TTLs).
fn start_following(s: &Common) -> Option<Follower> {
    let leadership = s.config.leadership.as_ref()?;
    let (redis, settings) = (s.redis.as_ref()?, s.config.redis.as_ref()?);
    let keys = Keys {
        prefix: settings.key_prefix(),
    };
    let entry = Entry {
        instance: leadership.instance(),
        ttl: *leadership.lease_ttl * moving::FOLLOWER_TTLS,
    };
    Some(Follower::start(
        redis.clone(),
        keys,
        Some(entry),
        s.shutdown.clone(),
    ))
}

/// Joins the federate pool, when one is configured and resolves.
fn start_federate(
    s: &Common,
    tasks: &mut JoinSet<()>,
) -> Result<Option<Arc<Federate>>, ServeError> {
    let Some(f) = &s.config.federate else {
        return Ok(None);
    };
    // The federate pool shares the service's Redis when it names its (first) URL.
    let service_redis = s.config.redis.as_ref().map(|r| r.first_url());
    let pool = settings::resolve(f, service_redis)
        .map_err(|e| FileError::new(&s.config.path, e.to_string()))?;
    let Some(pool) = pool else {
        info!("federate: off (no pool id, ingress off or control plane off)");
        return Ok(None);
    };
    let pool_redis = match &s.redis {
        Some(r) if service_redis == Some(&pool.redis_url) => r.clone(),
        _ => Redis::connect_url(pool.redis_url.expose(), s.shutdown.clone())
            .map_err(|e| anyhow::anyhow!("federate: Redis {e}"))?,
    };
    let federate = Federate::new(
        f,
        pool,
        pool_redis,
        s.view.clone(),
        s.presence.clone(),
        s.clock,
    );
    tasks.spawn(
        federate
            .clone()
            .run(s.presence_changed.subscribe(), s.shutdown.clone()),
    );
    Ok(Some(federate))
}

/// The API's listener, bound, with its TLS files read when it has them.
struct ApiListener {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    tls: Option<api::Tls>,
}

/// Binds the HTTP API (`None` with `api.bind: null`).
async fn bind_api(s: &Common) -> Result<Option<ApiListener>, ServeError> {
    let Some(bind) = s.config.api.bind else {
        return Ok(None);
    };
    let tls = match &s.config.api.tls {
        Some(files) => {
            Some(api::Tls::load(files).map_err(|e| FileError::new(&s.config.path, e.to_string()))?)
        }
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| anyhow::anyhow!("api.bind {bind}: {e}"))?;
    let addr = listener.local_addr().map_err(anyhow::Error::from)?;
    Ok(Some(ApiListener {
        listener,
        addr,
        tls,
    }))
}

/// Serves the HTTP API on its listener (over TLS with `api.tls`, whose files are watched);
/// returns the bound address.
fn serve_api(
    s: &Common,
    listener: Option<ApiListener>,
    api: ApiState,
    tasks: &mut JoinSet<()>,
) -> Option<SocketAddr> {
    let ApiListener {
        listener,
        addr,
        tls,
    } = listener?;
    if let (Some(tls), Some(files)) = (&tls, &s.config.api.tls) {
        tasks.spawn(tls.clone().reload(files.clone(), s.shutdown.clone()));
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    info!("API listening on {scheme}://{addr}");
    let service = api::router(api, s.config.api.max_body_bytes.get() as usize);
    tasks.spawn(api::serve(
        listener,
        service,
        s.config.api.header_timeout.get(),
        tls,
        s.shutdown.clone(),
    ));
    Some(addr)
}

/// Starts the OneBot source; returns the reverse server's address and what completes once
/// the source has reported the fleet.
async fn start_onebot(
    s: &Common,
    federate: Option<&Arc<Federate>>,
    fleet: &mpsc::Sender<FleetEvent>,
    tasks: &mut JoinSet<()>,
) -> Result<(Option<SocketAddr>, Option<impl Future<Output = ()> + use<>>), ServeError> {
    let Some(settings) = s.config.sources.onebot.clone() else {
        return Ok((None, None));
    };
    let (wait, reverse) = (settings.startup_wait.get(), settings.reverse.is_some());
    let started = onebot::start(
        settings,
        fleet.clone(),
        s.presence.clone(),
        s.traffic.clone(),
        s.clock,
        tasks,
        s.shutdown.clone(),
    )
    .await
    .map_err(anyhow::Error::from)?;
    if let Some(f) = federate {
        f.observe_group_admins(started.hub.clone());
    }
    let first_attempts = started.first_attempts;
    let reported = async move {
        // Forward bots are known once each has had its first attempt; bots that dial in come
        // when they come, so with a reverse server wait the whole startupWait.
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = first_attempts.cancelled(), if !reverse => {}
        }
    };
    Ok((started.reverse_addr, Some(reported)))
}

/// A sender for one source: its events reach the engine tagged with where they came from,
/// through a forwarding task, in order.
fn tagged(
    source: SourceId,
    fleet: &mpsc::Sender<(SourceId, FleetEvent)>,
    tasks: &mut JoinSet<()>,
) -> (mpsc::Sender<FleetEvent>, Flush) {
    let (tx, mut rx) = mpsc::channel(1024);
    let (flush_tx, mut flush_rx) = mpsc::channel::<tokio::sync::oneshot::Sender<()>>(1);
    let fleet = fleet.clone();
    tasks.spawn(async move {
        loop {
            tokio::select! {
                // Events first: a flush is answered only when none is waiting.
                biased;
                event = rx.recv() => {
                    let Some(event) = event else { return };
                    if fleet.send((source.clone(), event)).await.is_err() {
                        return;
                    }
                }
                Some(done) = flush_rx.recv() => {
                    let _ = done.send(());
                }
            }
        }
    });
    (tx, Flush(flush_tx))
}

/// Waits until a [`tagged`] sender's events sent so far have reached the engine's queue.
struct Flush(mpsc::Sender<tokio::sync::oneshot::Sender<()>>);

impl Flush {
    async fn flushed(&self) {
        let (done, flushed) = tokio::sync::oneshot::channel();
        if self.0.send(done).await.is_ok() {
            let _ = flushed.await;
        }
    }
}

/// Validates every edit of the config file; a valid one goes to the engine, an invalid one is
/// reported and ignored.
async fn watch_config(
    path: PathBuf,
    control: mpsc::Sender<Control>,
    status: watch::Sender<ReloadStatus>,
    clock: Clock,
    shutdown: CancellationToken,
) {
    let current = std::fs::read(&path).ok();
    let mut watch = match FileWatch::new(&path, current) {
        Ok(w) => w,
        Err(e) => {
            error!(
                "{}: cannot watch the config file: {e}; edits need a restart",
                path.display()
            );
            return;
        }
    };
    loop {
        let changed = tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = watch.changed() => changed,
        };
        let parsed = changed
            .map_err(|e| format!("{}: cannot read ({e})", path.display()))
            .and_then(|bytes| Config::parse_bytes(&path, &bytes).map_err(|e| e.to_string()));
        match parsed {
            Ok(config) => {
                status.send_modify(|s| {
                    s.reloads += 1;
                    s.rejected = None;
                    s.rejected_at = None;
                });
                if control
                    .send(Control::Config(Box::new(config)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Err(e) => {
                error!("invalid config: {e}; keeping the previous config");
                status.send_modify(|s| {
                    s.rejected = Some(e);
                    s.rejected_at = Some(clock.system_time());
                });
            }
        }
    }
}

/// Cancels `token` on SIGINT or SIGTERM.
pub fn cancel_on_signals(token: CancellationToken) {
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        info!("shutting down");
        token.cancel();
    });
}
