//! `leadership:` settings: this part's keys, read by `config` (which only gathers them).

use crate::yaml::{NonEmpty, Seconds};

/// `leadership:`: run as one of several instances.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// This instance's name in the lease, `/healthz` and the logs (default: host name and
    /// process id). Must differ between instances.
    #[serde(default)]
    pub instance: Option<NonEmpty>,
    /// How long a lease lasts unrenewed: the longest the fleet goes without a leader after
    /// the leader dies (a clean stop hands over at once).
    #[serde(default = "default_ttl")]
    pub lease_ttl: Seconds<1_000>,
    /// Where the lease lives.
    #[serde(default)]
    pub lease: LeaseStore,
}

fn default_ttl() -> Seconds<1_000> {
    Seconds::secs(10)
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LeaseStore {
    /// `SET NX PX` on the service's Redis (`redis:` must be set).
    #[default]
    Redis,
    /// A PostgreSQL advisory lock (`database.url` must be PostgreSQL).
    Postgres,
}

impl Settings {
    pub fn instance(&self) -> String {
        match &self.instance {
            Some(name) => name.0.clone(),
            None => {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_owned())
                    .unwrap_or_else(|_| "host".to_owned());
                format!("{host}-{}", std::process::id())
            }
        }
    }
}
