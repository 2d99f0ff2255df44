//! The owned gate (one bot speaks in a group for a short window) and the exclusive activity
//! (one activity per group at a time), in Pallas-Bot's Redis layout when Redis is configured,
//! in process otherwise.
//!
//! Keys and values as upstream (`shard/coord/group_gate.py`, `group_activity.py`):
//! * `pallas:coord:group_gate:owned:{plugin}:{group}` =
//!   `{"plugin","group_id","owner_bot_id","until","kind":"owned"}`, TTL `until − now + 5`;
//! * `pallas:coord:{namespace}:{group}` = `{"group_id","busy","until","shard_id","acquired_at"}`,
//!   TTL `until − now + 60` (at least 60).
//!
//! Key parts are sanitised as upstream (`[^\w-]` → `_`, Unicode letters kept). Each mutation
//! is one Lua script instead of upstream's WATCH/MULTI retry loop: same effect, atomic. When
//! Redis is configured but unreachable the in-process state decides (upstream would refuse
//! an owned gate and grant a broadcast slot); the answer says so.

use std::collections::HashMap;
use std::sync::LazyLock;

use parking_lot::Mutex;

use crate::clock::Clock;
use crate::redis_conn::Redis;

/// Upstream's sanitiser of key parts: characters Python's `str.isalnum()` accepts, `-` and `_`
/// stay; anything else becomes `_`.
pub fn safe_key_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if super::pystr::is_alnum(c) || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The answer of a gate or activity call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateAnswer {
    pub granted: bool,
    /// Decided in process although Redis is configured (it is unreachable).
    pub fallback: bool,
}

/// In-process entries beyond which expired ones are dropped.
const IN_PROCESS_CAP: usize = 2000;

pub struct Gates {
    redis: Option<Redis>,
    clock: Clock,
    owned: Mutex<HashMap<(String, i64), (i64, f64)>>,
    busy: Mutex<HashMap<(String, i64), f64>>,
}

static OWNED: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r#"
local now = tonumber(ARGV[1])
local raw = redis.call('GET', KEYS[1])
if raw then
  local ok, data = pcall(cjson.decode, raw)
  if ok and type(data) == 'table' and tonumber(data['until'] or 0) > now then
    return tostring(data['owner_bot_id']) == ARGV[3] and 1 or 0
  end
end
local untilv = now + tonumber(ARGV[4])
local value = cjson.encode({plugin = ARGV[2], group_id = tonumber(ARGV[5]), owner_bot_id = tonumber(ARGV[3]), ['until'] = untilv, kind = 'owned'})
redis.call('SET', KEYS[1], value, 'EX', math.max(1, math.floor(untilv - now) + 5))
return 1
"#,
    )
});

static BEGIN: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r#"
local now = tonumber(ARGV[1])
local raw = redis.call('GET', KEYS[1])
if raw then
  local ok, data = pcall(cjson.decode, raw)
  if ok and type(data) == 'table' and data['busy'] == true and tonumber(data['until'] or 0) > now then
    return 0
  end
end
local untilv = now + tonumber(ARGV[2])
local value = cjson.encode({group_id = tonumber(ARGV[3]), busy = true, ['until'] = untilv, shard_id = 0, acquired_at = now})
redis.call('SET', KEYS[1], value, 'EX', math.max(60, math.floor(untilv - now) + 60))
return 1
"#,
    )
});

static END: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r#"
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local ok, data = pcall(cjson.decode, raw)
if not ok or type(data) ~= 'table' then return 0 end
data['busy'] = false
data['until'] = 0
data['session_until'] = nil
redis.call('SET', KEYS[1], cjson.encode(data), 'EX', tonumber(ARGV[1]))
return 1
"#,
    )
});

impl Gates {
    pub fn new(redis: Option<Redis>, clock: Clock) -> Gates {
        Gates {
            redis,
            clock,
            owned: Mutex::default(),
            busy: Mutex::default(),
        }
    }

    pub fn owned_key(plugin: &str, group: i64) -> String {
        format!(
            "pallas:coord:group_gate:owned:{}:{}",
            safe_key_part(plugin),
            safe_key_part(&group.to_string())
        )
    }

    pub fn activity_key(namespace: &str, group: i64) -> String {
        format!(
            "pallas:coord:{namespace}:{}",
            safe_key_part(&group.to_string())
        )
    }

    /// Runs one gate script on Redis: `None` when Redis is not configured, not connected or
    /// did not answer, so the caller decides in process.
    async fn on_redis(&self, invocation: &redis::ScriptInvocation<'_>) -> Option<i64> {
        let mut conn = self.redis.as_ref()?.conn().await?;
        invocation.invoke_async(&mut conn).await.ok()
    }

    /// An answer decided in process: a fallback when Redis is configured.
    fn in_process(&self, granted: bool) -> GateAnswer {
        GateAnswer {
            granted,
            fallback: self.redis.is_some(),
        }
    }

    /// `try_begin_group_owned_gate`: an unexpired gate answers whether `bot` holds it;
    /// otherwise `bot` takes it for `gate_sec` (at least 1 s).
    pub async fn owned_gate(
        &self,
        plugin: &str,
        group: i64,
        bot: i64,
        gate_sec: f64,
    ) -> GateAnswer {
        let ttl = gate_sec.max(1.0);
        let mut call = OWNED.key(Self::owned_key(plugin, group));
        call.arg(self.clock.unix())
            .arg(plugin)
            .arg(bot)
            .arg(ttl)
            .arg(group);
        if let Some(granted) = self.on_redis(&call).await {
            return GateAnswer {
                granted: granted == 1,
                fallback: false,
            };
        }
        let now = self.clock.unix();
        let mut owned = self.owned.lock();
        let granted = match owned.get(&(plugin.to_owned(), group)) {
            Some(&(owner, until)) if now < until => owner == bot,
            _ => {
                owned.insert((plugin.to_owned(), group), (bot, now + ttl));
                if owned.len() > IN_PROCESS_CAP {
                    owned.retain(|_, (_, until)| *until > now);
                }
                true
            }
        };
        self.in_process(granted)
    }

    /// `begin_group_exclusive_activity`: `granted` is "ok", otherwise "busy".
    pub async fn begin_activity(&self, namespace: &str, group: i64, busy_sec: f64) -> GateAnswer {
        let ttl = busy_sec.max(1.0);
        let mut call = BEGIN.key(Self::activity_key(namespace, group));
        call.arg(self.clock.unix()).arg(ttl).arg(group);
        if let Some(granted) = self.on_redis(&call).await {
            return GateAnswer {
                granted: granted == 1,
                fallback: false,
            };
        }
        let now = self.clock.unix();
        let mut busy = self.busy.lock();
        let granted = match busy.get(&(namespace.to_owned(), group)) {
            Some(&until) if until > now => false,
            _ => {
                busy.insert((namespace.to_owned(), group), now + ttl);
                if busy.len() > IN_PROCESS_CAP {
                    busy.retain(|_, until| *until > now);
                }
                true
            }
        };
        self.in_process(granted)
    }

    /// Ends an activity (idempotent).
    pub async fn end_activity(&self, namespace: &str, group: i64, busy_sec: f64) -> GateAnswer {
        self.busy.lock().remove(&(namespace.to_owned(), group));
        let mut call = END.key(Self::activity_key(namespace, group));
        call.arg(busy_sec.max(1.0) as i64);
        if self.on_redis(&call).await.is_some() {
            return GateAnswer {
                granted: true,
                fallback: false,
            };
        }
        self.in_process(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sanitised_as_upstream() {
        assert_eq!(
            Gates::owned_key("draw", 9),
            "pallas:coord:group_gate:owned:draw:9"
        );
        // `-` is kept, as the rule says (QQ group ids are positive anyway).
        assert_eq!(
            Gates::owned_key("a b/牛", -123),
            "pallas:coord:group_gate:owned:a_b_牛:-123"
        );
        assert_eq!(Gates::activity_key("duel", 5), "pallas:coord:duel:5");
    }

    #[tokio::test]
    async fn in_process_gate_and_activity() {
        let g = Gates::new(None, crate::clock::Clock::system());
        assert!(g.owned_gate("draw", 1, 111, 5.0).await.granted);
        assert!(
            g.owned_gate("draw", 1, 111, 5.0).await.granted,
            "the holder again"
        );
        assert!(!g.owned_gate("draw", 1, 222, 5.0).await.granted);
        assert!(
            g.owned_gate("duel", 1, 222, 5.0).await.granted,
            "per plugin"
        );
        assert!(g.begin_activity("duel", 1, 60.0).await.granted);
        assert!(!g.begin_activity("duel", 1, 60.0).await.granted);
        g.end_activity("duel", 1, 60.0).await;
        assert!(g.begin_activity("duel", 1, 60.0).await.granted);
    }
}
