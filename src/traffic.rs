//! `weights:` each channel's message rate, measured by the service itself, for
//! `balanceBy: messages` (see `balance::weighted`) and for what the API shows.
//!
//! Sources count messages into a shared [`Counter`] as they see them: the OneBot source counts
//! each group message once however many of its bots deliver it (by the claims' signature
//! key), the plugins report counts they made the same way, and `POST /v1/ingress` counts the
//! decision that won (exactly one per message). The engine folds the counts into the index
//! every [`FOLD_EVERY`] and before each plan ([`Traffic::fold`]): a channel's weight is an
//! exponentially decayed rate in messages per day, each message adding `ln 2 / halfLife` (in
//! days), every weight halving over `halfLife`; a steady rate of r a day converges to r.
//!
//! Memory is bounded whatever a bot sends: between two folds at most [`MAX_COUNTED`] distinct
//! channels are counted (the rest are dropped, and counted as dropped), the signatures of the
//! last minute at most [`MAX_SIGNATURES`] per generation, and folding keeps only channels the
//! index knows.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Deserialize;

use crate::index::FleetIndex;
use crate::yaml::{Amount, Quantity, Seconds};

/// How often the engine folds the counts into the weights.
pub const FOLD_EVERY: Duration = Duration::from_secs(10);
/// Distinct channels counted between two folds, at most.
pub const MAX_COUNTED: usize = 1 << 18;
/// Signatures remembered per one-minute generation, at most.
pub const MAX_SIGNATURES: usize = 1 << 18;
/// How long a message's signature is remembered, so other bots' copies are not counted.
const SIGNATURE_WINDOW: Duration = Duration::from_secs(60);

/// `weights:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Settings {
    /// A weight halves over this long without messages.
    pub half_life: Seconds<60_000>,
    /// The least weight a channel counts with (messages per day).
    pub floor: Quantity,
    /// The least relative drop of Σ (weighted load)² a run must reach before it moves a
    /// channel voluntarily (`balanceBy: messages`).
    pub min_gain: Amount<1>,
    /// Seconds a `balanceBy: messages` plan may spend on its improvement phase and its proof
    /// of optimality (0: none).
    pub search_time: Amount<60>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            half_life: Seconds::secs(86_400),
            floor: Amount(1.0),
            min_gain: Amount(0.01),
            search_time: Amount(1.0),
        }
    }
}

/// Message counts since the last fold, shared by every source (a cheap clone).
#[derive(Clone, Default)]
pub struct Counter {
    inner: Arc<Mutex<Counts>>,
}

#[derive(Default)]
struct Counts {
    channels: FxHashMap<(String, String), u64>,
    /// Messages of channels past [`MAX_COUNTED`], not counted.
    dropped: u64,
    /// Signatures seen in this generation and the one before.
    current: FxHashSet<u64>,
    previous: FxHashSet<u64>,
    generation_started: Option<std::time::Instant>,
}

impl Counts {
    fn add(&mut self, platform: &str, channel: &str, n: u64) {
        // The key is built only for a channel not counted yet.
        if let Some(count) = self
            .channels
            .get_mut(&(platform.to_owned(), channel.to_owned()))
        {
            *count = count.saturating_add(n);
        } else if self.channels.len() < MAX_COUNTED {
            self.channels
                .insert((platform.to_owned(), channel.to_owned()), n);
        } else {
            self.dropped = self.dropped.saturating_add(n);
        }
    }

    /// Whether `key` is new within the window (and remembers it).
    fn first_sight(&mut self, key: u64) -> bool {
        let now = std::time::Instant::now();
        let expired = self
            .generation_started
            .is_none_or(|t| now.duration_since(t) >= SIGNATURE_WINDOW);
        if expired || self.current.len() >= MAX_SIGNATURES {
            self.previous = std::mem::take(&mut self.current);
            self.generation_started = Some(now);
        }
        if self.previous.contains(&key) {
            return false;
        }
        self.current.insert(key)
    }
}

impl Counter {
    /// A message a fleet bot delivered, with its signature key: counted once however many
    /// bots deliver it within a minute.
    pub fn message_seen(&self, platform: &str, channel: &str, signature: u64) {
        let mut counts = self.inner.lock();
        if counts.first_sight(signature) {
            counts.add(platform, channel, 1);
        }
    }

    /// Messages counted already (a plugin's report, an ingress decision).
    pub fn add(&self, platform: &str, channel: &str, n: u64) {
        if n > 0 {
            self.inner.lock().add(platform, channel, n);
        }
    }

    /// The counts since the last call, and how many messages were dropped.
    fn take(&self) -> (FxHashMap<(String, String), u64>, u64) {
        let mut counts = self.inner.lock();
        (
            std::mem::take(&mut counts.channels),
            std::mem::take(&mut counts.dropped),
        )
    }
}

/// The engine's side: folds the counts into the index's weights.
pub struct Traffic {
    counter: Counter,
    half_life: Duration,
    folded_at: std::time::Instant,
    /// Channels whose weight grew since the last [`Traffic::take_dirty`]: only known ones,
    /// so bounded by the index.
    dirty: FxHashSet<(String, String)>,
    /// Messages counted and dropped since the start (for the metrics).
    pub counted: u64,
    pub dropped: u64,
}

impl Traffic {
    pub fn new(counter: Counter, settings: &Settings) -> Self {
        Traffic {
            counter,
            half_life: settings.half_life.get(),
            folded_at: std::time::Instant::now(),
            dirty: FxHashSet::default(),
            counted: 0,
            dropped: 0,
        }
    }

    pub fn set_settings(&mut self, settings: &Settings) {
        self.half_life = settings.half_life.get();
    }

    /// What one message adds to a weight (messages per day): `ln 2 / halfLife` in days.
    pub fn per_message(&self) -> f64 {
        std::f64::consts::LN_2 * 86_400.0 / self.half_life.as_secs_f64()
    }

    /// Decays every weight by the time since the last fold and adds the counts of known
    /// channels.
    pub fn fold(&mut self, index: &mut FleetIndex) {
        let now = std::time::Instant::now();
        let elapsed = now.duration_since(self.folded_at).as_secs_f64();
        self.folded_at = now;
        let factor = 0.5f64.powf(elapsed / self.half_life.as_secs_f64());
        for p in index.platforms_mut() {
            p.scale_weights(factor);
        }
        let (counts, dropped) = self.counter.take();
        self.dropped += dropped;
        let per_message = self.per_message();
        for ((platform, channel), n) in counts {
            let Some(p) = index
                .platforms_mut()
                .iter_mut()
                .find(|p| p.name() == platform)
            else {
                continue;
            };
            let Some(c) = p.find_channel(&channel) else {
                continue;
            };
            p.set_weight(c, p.weight(c) + n as f64 * per_message);
            self.counted += n;
            self.dirty.insert((platform, channel));
        }
    }

    /// The weights that grew since the last call, as they are now: (platform, channel,
    /// weight). A weight that only decayed need not be written again: a reader decays the
    /// stored value by the time since it was written.
    pub fn take_dirty(&mut self, index: &FleetIndex) -> Vec<(String, String, f64)> {
        let mut out: Vec<_> = std::mem::take(&mut self.dirty)
            .into_iter()
            .filter_map(|(platform, channel)| {
                let p = index.platform(&platform)?;
                let w = p.weight(p.find_channel(&channel)?);
                Some((platform, channel, w))
            })
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    /// A stored weight written `age` ago, decayed to now.
    pub fn decayed(&self, weight: f64, age: Duration) -> f64 {
        weight * 0.5f64.powf(age.as_secs_f64() / self.half_life.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_delivered_by_several_bots_counts_once() {
        let counter = Counter::default();
        for _ in 0..3 {
            counter.message_seen("onebot", "1", 42);
        }
        counter.message_seen("onebot", "1", 43);
        counter.add("onebot", "2", 5);
        let (counts, dropped) = counter.take();
        assert_eq!(counts[&("onebot".to_owned(), "1".to_owned())], 2);
        assert_eq!(counts[&("onebot".to_owned(), "2".to_owned())], 5);
        assert_eq!(dropped, 0);
    }

    #[test]
    fn a_flood_of_new_channels_is_capped() {
        let counter = Counter::default();
        for c in 0..MAX_COUNTED + 10 {
            counter.add("onebot", &c.to_string(), 1);
        }
        let (counts, dropped) = counter.take();
        assert_eq!((counts.len(), dropped), (MAX_COUNTED, 10));
    }

    #[test]
    fn folding_adds_known_channels_only_and_a_steady_rate_converges() {
        let mut index = FleetIndex::new();
        index.bot_online("onebot", "1001", &["1"]);
        let counter = Counter::default();
        let settings = Settings {
            half_life: Seconds::new(3600.0).unwrap(),
            ..Settings::default()
        };
        let mut traffic = Traffic::new(counter.clone(), &settings);
        counter.add("onebot", "1", 10);
        counter.add("onebot", "unknown", 10);
        traffic.fold(&mut index);
        let p = index.platform("onebot").unwrap();
        let w = p.weight(p.find_channel("1").unwrap());
        // 10 messages with a one-hour half-life: 10 · ln 2 · 24 a day.
        assert!(
            (w - 10.0 * std::f64::consts::LN_2 * 24.0).abs() < 0.01,
            "{w}"
        );
        assert_eq!(p.find_channel("unknown"), None);
        assert_eq!(traffic.counted, 10);
        let dirty = traffic.take_dirty(&index);
        assert_eq!(dirty.len(), 1);
        assert!(traffic.take_dirty(&index).is_empty());
        // Decay: a stored weight an hour old is half.
        assert!((traffic.decayed(8.0, Duration::from_secs(3600)) - 4.0).abs() < 1e-9);
    }
}
