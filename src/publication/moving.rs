//! Voluntary moves across instances: announced, acknowledged by every follower, then made.
//!
//! Under leadership every instance answers ingress asks from its own copy of the assignment.
//! A *voluntary* move (its old assignee is online and could still answer) made at once would
//! leave a window in which the leader grants the new bot and a follower still the old one:
//! milliseconds while the publication travels, or as long as a follower is cut from Redis.
//! One message, answered twice. So the leader makes such moves in steps:
//!
//! 1. It announces the channels it is about to move ([`Keys::moving`], a JSON string
//!    `{"token":…,"channels":{platform:[channel,…]}}`, and the same on the channel of that name).
//!    Every instance, the leader too, answers an announced channel only through the message's
//!    claim in Redis, won by the old assignee (ingress reason `moving` for everyone else, or
//!    when the claim is not decided in Redis). A follower acknowledges the announcement's token
//!    in [`Keys::followers`] once its view serves it (field: its instance; value: `"{token}
//!    {expiry}"`, the expiry in milliseconds of Redis's own clock, renewed every third of it).
//! 2. Once every follower whose entry has not expired has acknowledged, and [`ASK_SPREAD`]
//!    more has passed, the leader makes the moves in its view and publishes them, then
//!    announces what is still moving (usually nothing). Pub/sub keeps one connection's
//!    messages in order, so a follower has the version holding the moves before it answers
//!    those channels again.
//! 3. For [`CLAIMS_AFTER_A_MOVE`] after, the new assignee also answers only by claim: a message
//!    the old assignee claimed at another instance stays the old assignee's.
//!
//! Each message is answered once: before the announcement reaches an instance, it gives the old
//! assignee directly, but the new assignee answers only [`ASK_SPREAD`] after the last
//! instance stopped doing so, longer than two bots' asks of one message lie apart; from then
//! until the move has travelled, the claim decides between the two. A follower cut from Redis
//! cannot acknowledge: the moves wait until its entry expires ([`FOLLOWER_TTLS`] lease TTLs),
//! and until then it answers from the assignment before them, as the leader does. Forced moves
//! (the old assignee offline or gone) never wait: the old bot cannot answer; for
//! [`CLAIMS_AFTER_A_MOVE`] after one, the leader's assignee claims each message too, as a
//! follower that has not seen the move claims it. A run that held moves appears in `GET
//! /v1/status` once they are made, so a client that waits for a run reads its result.
//!
//! Without leadership nothing here runs: one instance's view is the only one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use serde::{Deserialize, Serialize};

use super::Keys;
use crate::redis_conn::Conn;
use crate::view::{RunSummary, View};

/// A follower's entry expires this many lease TTLs after its last renewal: the longest a
/// dead (or cut off) follower holds voluntary moves back.
pub const FOLLOWER_TTLS: u32 = 3;

pub use crate::view::CLAIMS_AFTER_A_MOVE;

/// The longest time apart that two bots' asks about one message are expected to arrive (each
/// bot receives the message from the platform on its own connection, usually within tens of
/// milliseconds of the other): how long the leader waits, after every follower has stopped
/// giving a moving channel's messages to the old assignee directly, before the new one answers.
pub const ASK_SPREAD: std::time::Duration = std::time::Duration::from_secs(1);

/// platform → channels announced as moving.
pub type Marks = BTreeMap<String, BTreeSet<String>>;

/// What the leader announced last: the channels moving, and the token followers acknowledge.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Announcement {
    pub token: String,
    pub channels: Marks,
}

impl Announcement {
    pub fn parse(json: &str) -> Option<Announcement> {
        serde_json::from_str(json).ok()
    }
}

/// (platform, channel) → the bot it goes to (`None`: unassigned).
pub type Pending = BTreeMap<(String, String), Option<String>>;

/// The voluntary moves the engine has planned that the leader's view and publication have not
/// made yet. The engine holds them ([`crate::engine`]'s outputs) and the publisher makes them
/// once announced and acknowledged; both under this one lock, so a later change of the same
/// channel (a forced move, another plan) always wins over a move still waiting.
#[derive(Clone, Default)]
pub struct Moves(Arc<Mutex<Held>>);

/// What waits: the moves, and the last run that held some, shown (`GET /v1/status`) once
/// every move waiting is made, so that a run the status shows is in force in the view.
#[derive(Default)]
pub struct Held {
    pub moves: Pending,
    pub run: Option<RunSummary>,
}

impl Held {
    /// Shows the run held back once no move waits any more.
    pub fn show_run_if_made(&mut self, view: &View) {
        if self.moves.is_empty()
            && let Some(run) = self.run.take()
        {
            view.set_last_run(run);
        }
    }
}

impl Moves {
    pub fn lock(&self) -> MutexGuard<'_, Held> {
        self.0.lock()
    }

    /// Forgets every waiting move and run (this instance no longer leads).
    pub fn clear(&self) {
        *self.0.lock() = Held::default();
    }

    /// Shows `run` in `view` now if no move waits, else once they are all made.
    pub fn show_run(&self, view: &View, run: RunSummary) {
        let mut held = self.0.lock();
        held.run = Some(run);
        held.show_run_if_made(view);
    }
}

/// The channels of `moves`, by platform.
pub fn marks(moves: &Pending) -> Marks {
    let mut marks = Marks::new();
    for (platform, channel) in moves.keys() {
        marks
            .entry(platform.clone())
            .or_default()
            .insert(channel.clone());
    }
    marks
}

/// The leader's announcement, fenced like every publication (KEYS[2], ARGV[3]: see
/// `publisher`'s FENCE).
pub const ANNOUNCE: &str = r#"
redis.call('SET', KEYS[1], ARGV[2])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return 1
"#;

/// Milliseconds of Redis's clock: every instance's expiry is judged by the one clock.
const NOW: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"#;

/// The followers that have not acknowledged ARGV[2] (the leader ARGV[1] aside); expired
/// entries are removed.
const LAGGING: &str = r#"
local lagging = {}
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  local name, value = entries[i], entries[i + 1]
  local space = string.find(value, ' ', 1, true) or 0
  local token = string.sub(value, 1, space - 1)
  local expiry = tonumber(string.sub(value, space + 1)) or 0
  if expiry <= now then
    redis.call('HDEL', KEYS[1], name)
  elseif name ~= ARGV[1] and token ~= ARGV[2] then
    table.insert(lagging, name)
  end
end
return lagging
"#;

/// A follower's acknowledgement (ARGV: instance, token, TTL in ms), or with an empty token
/// its departure.
const ACKNOWLEDGE: &str = r#"
if ARGV[2] == '' and ARGV[3] == '0' then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. (now + tonumber(ARGV[3])))
return 1
"#;

/// The followers (their instance names) that have not yet acknowledged `token`.
pub async fn lagging(
    conn: &mut Conn,
    keys: &Keys,
    leader: &str,
    token: &str,
) -> redis::RedisResult<Vec<String>> {
    redis::Script::new(&format!("{NOW}{LAGGING}"))
        .key(keys.followers())
        .arg(leader)
        .arg(token)
        .invoke_async(conn)
        .await
}

/// Records that follower `instance` serves announcement `token`, for `ttl_ms` more.
pub async fn acknowledge(
    conn: &mut Conn,
    keys: &Keys,
    instance: &str,
    token: &str,
    ttl_ms: u64,
) -> redis::RedisResult<()> {
    redis::Script::new(&format!("{NOW}{ACKNOWLEDGE}"))
        .key(keys.followers())
        .arg(instance)
        .arg(token)
        .arg(ttl_ms.max(1))
        .invoke_async::<()>(conn)
        .await
}

/// Removes follower `instance`'s entry: it leads now, or stops.
pub async fn depart(conn: &mut Conn, keys: &Keys, instance: &str) -> redis::RedisResult<()> {
    redis::Script::new(&format!("{NOW}{ACKNOWLEDGE}"))
        .key(keys.followers())
        .arg(instance)
        .arg("")
        .arg(0)
        .invoke_async::<()>(conn)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_reads_back_what_was_written() {
        let moves: Pending = [
            (("onebot".into(), "2".into()), Some("b".into())),
            (("onebot".into(), "1".into()), None),
            (("qq".into(), "1".into()), Some("a".into())),
        ]
        .into();
        let announced = Announcement {
            token: "7.3".into(),
            channels: marks(&moves),
        };
        let json = serde_json::to_string(&announced).unwrap();
        assert_eq!(
            json,
            r#"{"token":"7.3","channels":{"onebot":["1","2"],"qq":["1"]}}"#
        );
        assert_eq!(Announcement::parse(&json), Some(announced));
        assert_eq!(Announcement::parse("{\"token\":1}"), None);
    }
}
