//! The OneBot v11 fleet source: learns who is in which group from the bots themselves, over
//! WebSockets beside Koishi or NoneBot (every current implementation accepts several clients).
//!
//! * [`client`]: forward connections auto-assign dials, redialed with backoff and jitter;
//! * [`server`]: the reverse server implementations dial;
//! * [`session`]: one connected bot: login, group list, events, heartbeats, health probes,
//!   periodic reconciliation;
//! * [`hub`]: per-bot state across connections, turned into fleet events;
//! * [`conn`]: action calls with `echo` correlation and timeouts; [`protocol`]: the frames.

pub mod client;
pub mod conn;
pub mod hub;
pub mod protocol;
pub mod server;
pub mod session;
pub mod settings;

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use settings::Settings;

use crate::clock::Clock;
use crate::presence::Presence;
use crate::source::FleetEvent;
use crate::traffic::Counter;

/// A running OneBot source.
pub struct OneBot {
    /// Per-bot state: the federate layer asks it for group admins.
    pub hub: Arc<hub::Hub>,
    /// Cancelled when every forward connection has made its first attempt (its bot reported,
    /// or the attempt failed).
    pub first_attempts: CancellationToken,
    /// Where the reverse server listens, if configured.
    pub reverse_addr: Option<std::net::SocketAddr>,
}

/// Starts the reverse server (if configured) and every forward connection.
pub async fn start(
    settings: Settings,
    events: mpsc::Sender<FleetEvent>,
    presence: Presence,
    traffic: Counter,
    clock: Clock,
    tasks: &mut JoinSet<()>,
    shutdown: CancellationToken,
) -> std::io::Result<OneBot> {
    let listener = match &settings.reverse {
        Some(reverse) => Some(server::bind(reverse).await.map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("reverse OneBot server on {}: {e}", reverse.bind),
            )
        })?),
        None => None,
    };
    let reverse_addr = listener.as_ref().and_then(|l| l.local_addr().ok());
    let hub = hub::Hub::new(settings.clone(), presence, events, clock, traffic);
    tasks.spawn(hub.clone().run_log(shutdown.clone()));
    if let (Some(listener), Some(reverse)) = (listener, settings.reverse.clone()) {
        tracing::info!(
            "reverse OneBot server listening on ws://{}{}",
            reverse_addr.unwrap_or(reverse.bind),
            reverse.path
        );
        tasks.spawn(server::run(
            hub.clone(),
            listener,
            reverse,
            shutdown.clone(),
        ));
    }
    let countdown = hub::Countdown::new(settings.connections.len());
    for target in settings.connections {
        let ticket = hub::Ticket::new(countdown.clone());
        tasks.spawn(client::run(
            Arc::clone(&hub),
            target,
            ticket,
            shutdown.clone(),
        ));
    }
    Ok(OneBot {
        hub,
        first_attempts: countdown.done.clone(),
        reverse_addr,
    })
}
