//! `auto-assign serve`: wires config, store, sources and engine, and shuts them down cleanly.

use std::path::{Path, PathBuf};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::api::{self, Api};
use crate::config::{Config, FileError};
use crate::coord::claim::Claims;
use crate::coord::federate::{Federate, settings};
use crate::coord::gate::Gates;
use crate::coord::ingress::Ingress;
use crate::coord::presence_registry;
use crate::coord::publish::{Keys, Publisher};
use crate::coord::redis::Redis;
use crate::engine::{Control, Engine, Outputs};
use crate::presence::Presence;
use crate::source::file::{self, Fleet};
use crate::source::onebot;
use crate::store::writer::Writer;
use crate::store::{SqlStore, Store as _};
use crate::view::View;
use crate::watch::FileWatch;

/// Why the service could not start (or run).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Bad configuration or fleet file: exit code 2.
    #[error("{0}")]
    BadFile(#[from] FileError),
    /// Anything else (database unreachable, ...): exit code 1.
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

/// Runs the service until `shutdown` is cancelled.
pub async fn serve(config_path: &Path, shutdown: CancellationToken) -> Result<(), ServeError> {
    let config = Config::load(config_path)?;
    let fleet = match &config.sources.file {
        Some(path) => Some((path.clone(), Fleet::load(path)?)),
        None => None,
    };
    let store = SqlStore::connect(&config.database.url).await?;
    let stored = store
        .load_assignments()
        .await
        .map_err(|e| anyhow::anyhow!("reading stored assignments: {e}"))?;
    info!(
        "{}: config loaded; strategy {}",
        config_path.display(),
        config.strategy
    );

    let (fleet_tx, fleet_rx) = mpsc::channel(4096);
    let (control_tx, control_rx) = mpsc::channel(64);
    let mut tasks = tokio::task::JoinSet::new();
    let presence = Presence::default();
    let view = View::default();
    let (presence_changed, _) = tokio::sync::watch::channel(());
    let redis = match &config.redis {
        Some(r) => Some(
            Redis::connect(r.url.expose(), shutdown.clone())
                .map_err(|e| anyhow::anyhow!("redis.url {}: {e}", r.url))?,
        ),
        None => None,
    };
    let publisher = match (&redis, &config.redis) {
        (Some(redis), Some(r)) => {
            let keys = Keys {
                prefix: r.prefix.0.clone(),
            };
            Some(Publisher::start(
                redis.clone(),
                view.clone(),
                keys,
                shutdown.clone(),
            ))
        }
        _ => None,
    };
    if let Some(redis) = &redis {
        tasks.spawn(presence_registry::run(
            redis.clone(),
            presence.clone(),
            presence_changed.subscribe(),
            shutdown.clone(),
        ));
    }
    let federate = match &config.federate {
        None => None,
        Some(f) => {
            let service_redis = config.redis.as_ref().map(|r| &r.url);
            let pool = settings::resolve(f, service_redis).map_err(|message| FileError {
                file: config_path.to_owned(),
                message,
            })?;
            match pool {
                None => {
                    info!("federate: off (no pool id, ingress off or control plane off)");
                    None
                }
                Some(pool) => {
                    let pool_redis = match &redis {
                        Some(r) if service_redis == Some(&pool.redis_url) => r.clone(),
                        _ => Redis::connect(pool.redis_url.expose(), shutdown.clone()).map_err(
                            |e| anyhow::anyhow!("federate Redis {}: {e}", pool.redis_url),
                        )?,
                    };
                    let federate =
                        Federate::new(f, pool, pool_redis, view.clone(), presence.clone());
                    tasks.spawn(
                        federate
                            .clone()
                            .run(presence_changed.subscribe(), shutdown.clone()),
                    );
                    Some(federate)
                }
            }
        }
    };
    let outputs = Outputs {
        view: view.clone(),
        publisher,
        presence: presence.clone(),
        presence_changed,
    };
    let writer = Writer::start(store, config.database.shutdown_timeout.get());
    let store_status = writer.status();
    let mut engine = Engine::new(config.clone(), stored, writer, outputs);
    if let Some(bind) = config.api.bind {
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|e| anyhow::anyhow!("api.bind {bind}: {e}"))?;
        info!(
            "API listening on http://{}",
            listener.local_addr().map_err(anyhow::Error::from)?
        );
        let claims = Claims::new(
            redis.clone(),
            &config.claims.key_prefix.0,
            config.claims.ttl.get(),
            &config.claims.data_dir,
        );
        let api = Api {
            view: view.clone(),
            ingress: Ingress {
                view: view.clone(),
                claims,
                federate: federate.clone(),
            },
            federate: federate.clone(),
            gates: Gates::new(redis.clone()),
            presence: presence.clone(),
            redis: redis.clone(),
            control: control_tx.clone(),
            token: config.api.token.clone(),
            store: store_status,
        };
        let app = api::router(api, config.api.max_body_bytes.get() as usize);
        tasks.spawn(api::serve(
            listener,
            app,
            config.api.header_timeout.get(),
            shutdown.clone(),
        ));
    }
    match config.sources.onebot.clone() {
        None => {
            let _ = control_tx.try_send(Control::Ready);
        }
        Some(settings) => {
            let (wait, reverse) = (settings.startup_wait.get(), settings.reverse.is_some());
            let started = onebot::start(
                settings,
                fleet_tx.clone(),
                presence.clone(),
                &mut tasks,
                shutdown.clone(),
            )
            .await
            .map_err(anyhow::Error::from)?;
            if let Some(f) = &federate {
                f.observe_group_admins(started.hub.clone());
            }
            let ready = control_tx.clone();
            tasks.spawn(async move {
                // Forward bots are known once each has had its first attempt; bots that dial in
                // come when they come, so with a reverse server wait the whole startupWait.
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = started.first_attempts.cancelled(), if !reverse => {}
                }
                let _ = ready.send(Control::Ready).await;
            });
        }
    }
    if let Some((path, (fleet, content))) = fleet {
        // The file's fleet is known before the first plan, so a restart moves nothing.
        for event in Fleet::default().diff(&fleet) {
            engine.apply(event);
        }
        info!("{}: fleet file loaded", path.display());
        tasks.spawn(file::watch(
            path,
            fleet,
            content,
            fleet_tx.clone(),
            shutdown.clone(),
        ));
    }
    tasks.spawn(watch_config(
        config_path.to_owned(),
        control_tx.clone(),
        shutdown.clone(),
    ));
    let unwritten = engine
        .run(fleet_rx, control_tx, control_rx, shutdown.clone())
        .await;
    shutdown.cancel();
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

/// Validates every edit of the config file; a valid one goes to the engine, an invalid one is
/// reported and ignored.
async fn watch_config(path: PathBuf, control: mpsc::Sender<Control>, shutdown: CancellationToken) {
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
        let bytes = match changed {
            Ok(bytes) => bytes,
            Err(e) => {
                error!(
                    "{}: cannot read ({e}); keeping the previous config",
                    path.display()
                );
                continue;
            }
        };
        match Config::parse_bytes(&path, &bytes) {
            Ok(config) => {
                if control
                    .send(Control::Config(Box::new(config)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Err(e) => error!("invalid config: {e}; keeping the previous config"),
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
