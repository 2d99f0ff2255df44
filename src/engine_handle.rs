//! What the API asks of the engine, and the handle it asks through: kept below both, so that
//! the API names its requests without depending on the engine (its index, planner, writer)
//! nor on the config the engine is built from.

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::explain::Explanation;
use crate::operator::{PinTarget, Shown};

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
    /// An operator's pin, hold, drain, or the end of one.
    Override {
        change: OverrideRequest,
        /// The credential that asks (for the audit).
        by: String,
        reply: oneshot::Sender<Result<Accepted, Refusal>>,
    },
    /// The pins and drains in force, with what each does now.
    Overrides {
        reply: oneshot::Sender<OverridesNow>,
    },
    /// What a rebalance would do now, committing nothing.
    DryRun {
        reply: oneshot::Sender<crate::dry_run::DryRun>,
    },
}

/// What an operator asks to change.
#[derive(Debug, Clone, PartialEq)]
pub enum OverrideRequest {
    Pin {
        platform: String,
        channel: String,
        target: PinTarget,
        until_ms: Option<i64>,
        note: Option<String>,
    },
    Unpin {
        platform: String,
        channel: String,
    },
    Drain {
        platform: String,
        bot: String,
        until_ms: Option<i64>,
        note: Option<String>,
    },
    Undrain {
        platform: String,
        bot: String,
    },
}

/// Why the engine refused an operator's change (nothing changed).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error("unknown platform {platform:?} (known: {})", known.join(", "))]
    UnknownPlatform {
        platform: String,
        known: Vec<String>,
    },
    #[error("no bot of the fleet reported being in {platform}:{channel}")]
    UnknownChannel { platform: String, channel: String },
    #[error("no bot {platform}:{bot} is known")]
    UnknownBot { platform: String, bot: String },
    #[error("{bot} is not in {platform}:{channel}; its members: {}", members.join(", "))]
    NotAMember {
        platform: String,
        channel: String,
        bot: String,
        members: Vec<String>,
    },
    #[error("{platform}:{target} has no {what}")]
    NothingToEnd {
        platform: String,
        target: String,
        what: &'static str,
    },
    #[error("this instance follows: changes go to the leader")]
    Following,
}

impl Refusal {
    /// A stable word for the refusal, which the API sends beside the message.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::UnknownPlatform { .. } => "unknown_platform",
            Refusal::UnknownChannel { .. } => "unknown_channel",
            Refusal::UnknownBot { .. } => "unknown_bot",
            Refusal::NotAMember { .. } => "not_a_member",
            Refusal::NothingToEnd { .. } => "nothing_to_end",
            Refusal::Following => "following",
        }
    }
}

/// An operator's change the engine has applied: what it is, and word of its commit (the API
/// answers once the change is stored).
#[derive(Debug)]
pub struct Accepted {
    pub shown: Shown,
    pub stored: oneshot::Receiver<crate::store::writer::Stored>,
}

/// The pins and drains in force, as the API lists them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OverridesNow {
    pub pins: Vec<PinNow>,
    pub drains: Vec<DrainNow>,
}

/// A pin and what it does now.
#[derive(Debug, Clone, Serialize)]
pub struct PinNow {
    #[serde(flatten)]
    pub pin: Shown,
    /// The group's assignee now.
    pub assignee: Option<String>,
    /// `held` (no assignee on purpose), `in-force` (the pinned bot answers) or `waiting` (the
    /// pinned bot is not valid now: offline, quarantined, gone from the group or drained; the
    /// plan serves the group meanwhile).
    pub state: &'static str,
}

/// A drain and what it does now.
#[derive(Debug, Clone, Serialize)]
pub struct DrainNow {
    #[serde(flatten)]
    pub drain: Shown,
    /// Groups it still answers in: those no other valid bot can take.
    pub kept: usize,
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

    /// An operator's change, made by the credential `by`.
    pub async fn change_override(
        &self,
        change: OverrideRequest,
        by: String,
    ) -> Result<Result<Accepted, Refusal>, Stopped> {
        self.ask(|reply| Request::Override { change, by, reply })
            .await
    }

    pub async fn overrides(&self) -> Result<OverridesNow, Stopped> {
        self.ask(|reply| Request::Overrides { reply }).await
    }

    pub async fn dry_run(&self) -> Result<crate::dry_run::DryRun, Stopped> {
        self.ask(|reply| Request::DryRun { reply }).await
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
