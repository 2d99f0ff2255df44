//! Which bot each recent group message was given to, so every ask of one message gets the
//! same answer.
//!
//! Every member bot of a group asks `POST /v1/ingress` about the same message, a few
//! milliseconds apart. Decided one by one against the assignment of their moment, asks that
//! straddle a change of the group's assignee (a provisional move, or the move back after a
//! flap) could both be granted (the old assignee asked first, the new one after), or both
//! refused (the other way round). So the first ask of a message fixes its bot, and later asks
//! follow it, for as long as that bot stays online: a bot that left cannot answer, and the
//! message goes to whoever the assignment names now.
//!
//! Memory is two generations in each of 16 shards, the older dropped when the newer holds
//! [`SHARD_CAP`] messages: a message is remembered across about the next 229,376 messages
//! (seconds at the benchmark's 100,000 asks a second, minutes in a real fleet), and the whole
//! never holds more than twice that (13 MB). No clock: an old entry costs nothing but its room,
//! since no later ask names its message.
//!
//! This runs on every ask in an assigned group, where the decision otherwise allocates
//! nothing, hence: the key is a 64-bit SipHash of what Pallas-Bot's signature holds (group,
//! user, plain text with whitespace collapsed, time in seconds), hashed without building the
//! signature; the value is the bot's id as a number, not a shared name whose count every
//! core would update.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher, Hash, Hasher};

use parking_lot::Mutex;

use super::pystr::py_strip;
use super::signature::{is_py_whitespace, normalize_time};

/// Messages per shard and generation: 16,384 buckets at hashbrown's 7/8 load.
pub const SHARD_CAP: usize = 14_336;
const SHARDS: usize = 16;

/// One message, as every bot that received it names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Message(u64);

impl Message {
    /// `time` in seconds or milliseconds, as the request carries it.
    pub fn new(group: i64, user: i64, text: &str, time: f64) -> Message {
        // SipHash with fixed keys (the same throughout a process, all it needs): a well-mixed
        // 64-bit key, so two messages collide with odds of about 2⁻⁶⁴ a pair.
        let mut h = DefaultHasher::new();
        (group, user, normalize_time(time.trunc() as i64)).hash(&mut h);
        // The plain text as `normalize_plaintext` makes it, word by word: 0xFF never occurs
        // in UTF-8, so it separates words unambiguously.
        for word in py_strip(text).split(is_py_whitespace) {
            if !word.is_empty() {
                h.write(word.as_bytes());
                h.write_u8(0xFF);
            }
        }
        Message(h.finish())
    }
}

/// The bot a message went to, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub bot: i64,
    pub by: By,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    /// It was the group's assignee at that ask.
    Assignment,
    /// It won the message's claim: later asks that claim meet the same claim.
    Claim,
}

/// A `u64` key is hashed already: the map uses it as is.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys")
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Message → its holder.
type Map = HashMap<u64, Holder, BuildHasherDefault<Identity>>;

#[derive(Default)]
struct Generations {
    current: Map,
    old: Map,
}

impl Generations {
    fn get(&self, key: u64) -> Option<Holder> {
        self.current
            .get(&key)
            .or_else(|| self.old.get(&key))
            .copied()
    }

    /// Inserts; when the current generation is full it becomes the old one, and the dropped
    /// one is returned, to be freed outside the lock.
    fn insert(&mut self, key: u64, holder: Holder) -> Option<Map> {
        self.current.insert(key, holder);
        if self.current.len() < SHARD_CAP {
            return None;
        }
        let next = Map::with_capacity_and_hasher(SHARD_CAP, Default::default());
        let full = std::mem::replace(&mut self.current, next);
        Some(std::mem::replace(&mut self.old, full))
    }
}

/// The bot each recent message went to.
pub struct Given {
    shards: Box<[Mutex<Generations>]>,
}

impl Default for Given {
    fn default() -> Self {
        Given {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

impl Given {
    fn shard(&self, m: Message) -> &Mutex<Generations> {
        // Bits neither of the map's uses: it takes a bucket from the low ones and a tag from
        // the top seven, which lose their worth when they are all alike within a shard (with
        // the top four bits here, a look-up compared two keys for one).
        &self.shards[(m.0 >> 32) as usize % SHARDS]
    }

    /// Who holds `m`, if it is remembered and `keep` still accepts its bot.
    pub fn holder(&self, m: Message, keep: impl Fn(i64) -> bool) -> Option<Holder> {
        self.shard(m).lock().get(m.0).filter(|h| keep(h.bot))
    }

    /// Gives `m` to `to` unless a bot that `keep` still accepts holds it; returns its holder.
    /// Atomic: of two concurrent first asks, one gives and the other follows.
    pub fn give(&self, m: Message, to: Holder, keep: impl Fn(i64) -> bool) -> Holder {
        let mut shard = self.shard(m).lock();
        if let Some(earlier) = shard.get(m.0) {
            if keep(earlier.bot) {
                return earlier;
            }
            shard.old.remove(&m.0);
        }
        let dropped = shard.insert(m.0, to);
        drop(shard);
        drop(dropped);
        to
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_named_as_its_signature_normalises_it() {
        let m = Message::new(1, 2, " hello \u{3000}\t world ", 1_786_000_000.9);
        assert_eq!(m, Message::new(1, 2, "hello world", 1_786_000_000.0));
        assert_eq!(m, Message::new(1, 2, "hello world", 1_786_000_000_123.0));
        for other in [
            Message::new(1, 2, "helloworld", 1_786_000_000.0),
            Message::new(1, 2, "hello world", 1_786_000_001.0),
            Message::new(1, 3, "hello world", 1_786_000_000.0),
            Message::new(4, 2, "hello world", 1_786_000_000.0),
        ] {
            assert_ne!(m, other);
        }
    }

    fn to(bot: i64) -> Holder {
        Holder {
            bot,
            by: By::Assignment,
        }
    }

    #[test]
    fn the_first_ask_fixes_the_bot_while_it_stays_online() {
        let given = Given::default();
        let m = Message::new(1, 2, "x", 3.0);
        let online = |_: i64| true;
        assert_eq!(given.holder(m, online), None);
        let claimed = Holder {
            bot: 1001,
            by: By::Claim,
        };
        assert_eq!(given.give(m, claimed, online), claimed);
        assert_eq!(given.give(m, to(1002), online), claimed);
        assert_eq!(given.holder(m, online), Some(claimed));
        // 1001 went offline: the message goes to the bot of the moment.
        let offline = |b: i64| b != 1001;
        assert_eq!(given.holder(m, offline), None);
        assert_eq!(given.give(m, to(1002), offline), to(1002));
        assert_eq!(given.give(m, to(1003), online), to(1002));
    }

    #[test]
    fn a_message_is_remembered_for_one_to_two_generations_of_its_shard() {
        let given = Given::default();
        let online = |_: i64| true;
        // Keys below 2³² all fall in shard 0.
        let first = Message(0);
        given.give(first, to(1001), online);
        for i in 1..SHARD_CAP as u64 {
            given.give(Message(i), to(1002), online);
        }
        // The first generation is full and is the old one now: still remembered.
        assert_eq!(given.holder(first, online), Some(to(1001)));
        assert_eq!(given.give(first, to(1003), online), to(1001));
        for i in 0..SHARD_CAP as u64 {
            given.give(Message(SHARD_CAP as u64 + i), to(1002), online);
        }
        assert_eq!(given.holder(first, online), None);
        let shard = given.shards[0].lock();
        assert!(shard.current.len() + shard.old.len() <= 2 * SHARD_CAP);
        // Other shards took nothing.
        drop(shard);
        assert!(given.shards[1..].iter().all(|s| s.lock().old.is_empty()));
    }
}
