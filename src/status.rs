//! The service's state as the API shows it, read through one read-only handle the service
//! hands to the API: the config watcher's last reload, the store writer's progress, the Redis
//! publication's, and this instance's role under leadership. The API reads these parts'
//! statuses here instead of importing each part that keeps one.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::publication::publisher::PublishStatus;
use crate::store::fence::Role;
use crate::store::writer::WriteStatus;

/// What the config watcher last did, for the API: the error of the last rejected edit stays
/// "in force" until a valid edit replaces it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ReloadStatus {
    /// Valid edits taken since the start.
    pub reloads: u64,
    /// Why the last edit was rejected, while no valid edit came after it.
    pub rejected: Option<String>,
    #[serde(with = "crate::presence::unix_seconds")]
    pub rejected_at: Option<std::time::SystemTime>,
}

/// What the API reads of the service's parts. Cheap to clone; every field is read-only.
#[derive(Clone)]
pub struct Status {
    /// The store writer's state: pending rows, the last error.
    pub store: watch::Receiver<WriteStatus>,
    /// The config watcher's state: the last rejected edit, while in force.
    pub reload: watch::Receiver<ReloadStatus>,
    /// The Redis publication's progress, when publishing.
    pub publication: Option<Arc<PublishStatus>>,
    /// This instance's name and role, under leadership.
    pub leadership: Option<(String, watch::Receiver<Role>)>,
}

impl Status {
    /// `{"instance": …, "role": "leader"|"follower", "term": …, "leader": …}`, or `null`.
    pub fn leadership_json(&self) -> Value {
        let Some((instance, role)) = &self.leadership else {
            return Value::Null;
        };
        let role = role.borrow().clone();
        let leader = match &role {
            Role::Leader { .. } => Some(instance.clone()),
            Role::Follower { leader, .. } => leader.clone(),
        };
        let mut out = serde_json::to_value(&role).unwrap_or(Value::Null);
        out["instance"] = json!(instance);
        out["leader"] = json!(leader);
        out["term"] = json!(role.term());
        out
    }

    /// This instance's role, under leadership.
    pub fn role(&self) -> Option<Role> {
        self.leadership
            .as_ref()
            .map(|(_, role)| role.borrow().clone())
    }
}
