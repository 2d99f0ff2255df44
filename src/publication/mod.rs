//! The publication: the assignment written to Redis for bot processes to follow
//! ([`publisher`]), and read back by followers of a leader ([`follower`]), as a bot process
//! would. Both use the service's one Redis connection ([`crate::redis_conn`]).
//!
//! Keys (prefix `P`, default `auto-assign`):
//! * `P:assignment:{platform}`: HASH channel → bot;
//! * `P:version`: the version of what the hashes hold, strictly increasing;
//! * channel `P:changes`: one message per version, `{"version":N,"changes":{platform:
//!   {channel: bot | null}}}`, or `{"version":N,"resync":true}` after a full republish;
//! * under leadership, `P:moving` (a string, and a channel of that name) and `P:followers`
//!   (a HASH): the voluntary moves announced and acknowledged before they are made
//!   ([`moving`]).
//!
//! Every publication is one Lua script: the version bump, the hash writes and the message
//! happen together or not at all. A follower that sees anything but `last + 1` re-reads the
//! hashes (they always match the version). A full republish (at start, after an outage, when
//! Redis lost its data, or for very large change sets) fills temporary hashes, then swaps
//! them in with the version bump atomically.
//!
//! Publishing never blocks planning: the engine hands changes to this task, which merges
//! whatever queued up while it was busy; during an outage it only remembers that a full
//! republish is due, retried with backoff, and the shared [`crate::view::View`] supplies the state.
//!
//! Under leadership (`leader`) only the leader publishes, and both scripts are fenced: they
//! raise `P:leader:term` to the leader's term, or find it higher and change nothing (the
//! reply is an error starting with `FENCED`); the publisher then stops until it leads again.

pub mod follower;
pub mod moving;
pub mod publisher;

/// Key names under a prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    pub prefix: String,
}

impl Keys {
    pub fn version(&self) -> String {
        format!("{}:version", self.prefix)
    }

    pub fn assignment(&self, platform: &str) -> String {
        format!("{}:assignment:{platform}", self.prefix)
    }

    pub fn channel(&self) -> String {
        format!("{}:changes", self.prefix)
    }

    /// The voluntary moves announced (a string, and the channel it is published on).
    pub fn moving(&self) -> String {
        format!("{}:moving", self.prefix)
    }

    /// Each follower's acknowledged announcement and expiry.
    pub fn followers(&self) -> String {
        format!("{}:followers", self.prefix)
    }

    /// The newest leader's term (see `leader`).
    pub fn term(&self) -> String {
        crate::store::fence::term_key(&self.prefix)
    }
}
