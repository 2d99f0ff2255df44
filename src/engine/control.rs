//! What the engine is told besides fleet events, and the handle through which the API tells
//! it: apart from the engine itself, so that the API names its requests without pulling in the
//! engine's internals (index, planner, writer).

use tokio::sync::{mpsc, oneshot};

use crate::config::Config;
use crate::explain::Explanation;
use crate::leader::Turn;

/// Control messages for the engine (everything that is not a fleet event).
#[derive(Debug)]
pub enum Control {
    /// A validated new config (from the config watcher).
    Config(Box<Config>),
    /// The cron schedule fired.
    Schedule,
    /// Someone asked for a rebalance now.
    Rebalance,
    /// The sources have reported the fleet: the first rebalance may run.
    Ready,
    /// Why a channel has its assignee (the answer goes to `reply`).
    Explain {
        platform: String,
        channel: String,
        reply: oneshot::Sender<Explanation>,
    },
    /// Every known channel's weight on a platform: (channel, weight, pinned by an admin).
    Weights {
        platform: String,
        reply: oneshot::Sender<Vec<(String, f64, bool)>>,
    },
    /// This instance leads now, or another does (from the leadership campaign).
    Turn(Turn),
    /// The leader published a new version of the assignment.
    Followed,
}

/// The requests the API makes of the engine.
#[derive(Clone)]
pub struct Handle(mpsc::Sender<Control>);

/// The engine has stopped.
#[derive(Debug, thiserror::Error)]
#[error("the engine has stopped")]
pub struct Stopped;

impl Handle {
    pub fn new(control: mpsc::Sender<Control>) -> Self {
        Self(control)
    }

    /// Asks for a rebalance now (cause `requested`).
    pub async fn rebalance(&self) -> Result<(), Stopped> {
        self.0.send(Control::Rebalance).await.map_err(|_| Stopped)
    }

    /// Every known channel's weight on `platform`, from the engine's own index.
    pub async fn weights(&self, platform: String) -> Result<Vec<(String, f64, bool)>, Stopped> {
        let (reply, answer) = oneshot::channel();
        self.0
            .send(Control::Weights { platform, reply })
            .await
            .map_err(|_| Stopped)?;
        answer.await.map_err(|_| Stopped)
    }

    /// Why `channel` has its assignee, from the engine's own index.
    pub async fn explain(&self, platform: String, channel: String) -> Result<Explanation, Stopped> {
        let (reply, answer) = oneshot::channel();
        let ask = Control::Explain {
            platform,
            channel,
            reply,
        };
        self.0.send(ask).await.map_err(|_| Stopped)?;
        answer.await.map_err(|_| Stopped)
    }
}
