//! Fencing: the term a leader writes under, and what an instance does with its plans under
//! leadership. Shared by the engine, the store writer and the publication, and kept beside the
//! store that enforces the fence, so that those parts name their duty without depending on how
//! leadership is won ([`crate::leader`] campaigns and hands out the terms).

/// A leader's fencing token: its term, and who holds it (for the record and the logs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub term: i64,
    pub holder: String,
    /// The holder's API address, recorded with the term so a follower can name it.
    pub api: Option<String>,
}

/// What this instance does with its plans, for the engine, the store writer and the
/// publication alike: an instance alone writes unfenced; under leadership only the leader
/// writes, every write fenced by its term, and a follower writes nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Duty {
    Alone,
    Leader(Fence),
    Follower,
}

impl Duty {
    /// The fence of a leader's writes.
    pub fn fence(&self) -> Option<&Fence> {
        match self {
            Duty::Leader(fence) => Some(fence),
            Duty::Alone | Duty::Follower => None,
        }
    }

    /// The term written with history records and publications: 0 alone, `None` following.
    pub fn writing_term(&self) -> Option<i64> {
        match self {
            Duty::Alone => Some(0),
            Duty::Leader(fence) => Some(fence.term),
            Duty::Follower => None,
        }
    }
}

/// What this instance is under leadership, for `/healthz` and `/metrics`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Role {
    /// Another instance leads (`leader` as the lease names it, when known).
    Follower {
        leader: Option<String>,
        term: Option<i64>,
    },
    /// This instance leads in `term`.
    Leader { term: i64 },
}

impl Role {
    pub fn term(&self) -> Option<i64> {
        match self {
            Role::Follower { term, .. } => *term,
            Role::Leader { term } => Some(*term),
        }
    }
}

/// The Redis key holding the newest term, which the publication checks too.
pub fn term_key(prefix: &str) -> String {
    format!("{prefix}:leader:term")
}
