//! What the API asks of the engine, and the handle it asks through: kept below both, so that
//! the API names its requests without depending on the engine (its index, planner, writer)
//! nor on the config the engine is built from.

use tokio::sync::{mpsc, oneshot};

use crate::explain::Explanation;

/// A request of the API's, answered by the engine from its own index.
#[derive(Debug)]
pub enum Request {
    /// Plan now (cause `requested`).
    Rebalance,
    /// Why a channel has its assignee.
    Explain {
        platform: String,
        channel: String,
        reply: oneshot::Sender<Explanation>,
    },
    /// Every known channel's weight on a platform.
    Weights {
        platform: String,
        reply: oneshot::Sender<Vec<ChannelWeight>>,
    },
}

/// One channel's weight as the plan counts it (messages a day: measured, or pinned by an
/// admin, at least the floor).
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelWeight {
    pub channel: String,
    pub weight: f64,
    /// Whether an admin pinned it (`channelWeights`).
    pub pinned: bool,
}

/// The requests the API makes of the engine.
#[derive(Clone)]
pub struct EngineHandle(mpsc::Sender<Request>);

/// The engine has stopped.
#[derive(Debug, thiserror::Error)]
#[error("the engine has stopped")]
pub struct Stopped;

impl EngineHandle {
    /// A handle and the receiver the engine reads its requests from.
    pub fn channel() -> (EngineHandle, mpsc::Receiver<Request>) {
        let (tx, rx) = mpsc::channel(64);
        (EngineHandle(tx), rx)
    }

    /// Asks for a rebalance now (cause `requested`).
    pub async fn rebalance(&self) -> Result<(), Stopped> {
        self.0.send(Request::Rebalance).await.map_err(|_| Stopped)
    }

    /// Every known channel's weight on `platform`, from the engine's own index.
    pub async fn weights(&self, platform: String) -> Result<Vec<ChannelWeight>, Stopped> {
        self.ask(|reply| Request::Weights { platform, reply }).await
    }

    /// Why `channel` has its assignee, from the engine's own index.
    pub async fn explain(&self, platform: String, channel: String) -> Result<Explanation, Stopped> {
        self.ask(|reply| Request::Explain {
            platform,
            channel,
            reply,
        })
        .await
    }

    async fn ask<T>(
        &self,
        request: impl FnOnce(oneshot::Sender<T>) -> Request,
    ) -> Result<T, Stopped> {
        let (reply, answer) = oneshot::channel();
        self.0.send(request(reply)).await.map_err(|_| Stopped)?;
        answer.await.map_err(|_| Stopped)
    }
}
