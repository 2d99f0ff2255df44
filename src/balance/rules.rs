//! The rules every strategy obeys: enabled platforms, priority lists and exclusions; and what
//! the optimal strategy balances: channels or messages, within each bot's capacity.
//!
//! Keys may be full (`onebot:123`) or short (`123`, meaning that channel on any enabled
//! platform); a full key wins over a short one. Bot entries of a priority list may likewise be
//! `onebot:1001` or `1001`. Rules are resolved against a platform's index at every plan, which
//! costs O(number of rules) plus the drained bots' degrees, never O(number of channels).
//!
//! An operator's overrides ([`crate::operator`]) come last and outrank the rest: a pin makes
//! its bot a channel's only valid bot while that bot is valid there (otherwise the channel is
//! served as usual), a hold leaves the channel with no valid bot on purpose, and a drained bot
//! is valid only in channels where no other bot is.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use crate::index::{BotIx, ChanIx, PlatformIndex};
use crate::model::{bit_set, split_key};

#[derive(Clone, Debug, PartialEq)]
pub struct Rules {
    /// Platforms whose bots are balanced; empty means every platform.
    pub enabled_platforms: Vec<String>,
    /// Channel key → bots in order of preference.
    pub priority: BTreeMap<String, Vec<String>>,
    /// Channel keys never assigned or changed.
    pub exclude: Vec<String>,
    /// What a bot's load counts.
    pub balance_by: BalanceBy,
    /// Bot key → the most load it should carry, in the unit of `balance_by`.
    pub capacity: BTreeMap<String, f64>,
    /// Channel key → a weight the admin pinned, instead of the measured one.
    pub channel_weights: BTreeMap<String, f64>,
    /// The least weight a channel counts with (a silent group still costs its bot something).
    pub weight_floor: f64,
    /// The least relative drop of Σ (weighted load)² that a run must reach before it moves a
    /// channel voluntarily (`balanceBy: messages` only: weights drift all the time).
    pub min_gain: f64,
    /// Seconds a `balanceBy: messages` plan may spend improving itself and proving its
    /// optimality (`weights.searchTime`; 0: the heuristic plan alone).
    pub search_time: f64,
    /// Asked during that search: `true` stops it at once with the best plan so far (the
    /// engine asks whether fleet events wait, so a search never delays them).
    pub search_interrupt: Interrupt,
    /// An operator's pins, full channel keys → the bot, or `None` to hold the channel with no
    /// assignee (not from the config: see [`crate::operator`]).
    pub pins: BTreeMap<String, Option<String>>,
    /// Bots an operator drained, full keys.
    pub drained: BTreeSet<String>,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            enabled_platforms: Vec::new(),
            priority: BTreeMap::new(),
            exclude: Vec::new(),
            balance_by: BalanceBy::Channels,
            capacity: BTreeMap::new(),
            channel_weights: BTreeMap::new(),
            weight_floor: 1.0,
            min_gain: 0.01,
            search_time: 1.0,
            search_interrupt: Interrupt::never(),
            pins: BTreeMap::new(),
            drained: BTreeSet::new(),
        }
    }
}

/// A question a long search asks now and then: should it stop now? (Compared equal whatever
/// it asks: it is no rule.)
#[derive(Clone, Default)]
pub struct Interrupt(Option<std::sync::Arc<dyn Fn() -> bool + Send + Sync>>);

impl Interrupt {
    pub const fn never() -> Interrupt {
        Interrupt(None)
    }

    pub fn new(ask: impl Fn() -> bool + Send + Sync + 'static) -> Interrupt {
        Interrupt(Some(std::sync::Arc::new(ask)))
    }

    pub fn requested(&self) -> bool {
        self.0.as_ref().is_some_and(|ask| ask())
    }
}

impl PartialEq for Interrupt {
    fn eq(&self, _: &Interrupt) -> bool {
        true
    }
}

impl std::fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Interrupt"
        } else {
            "Interrupt(never)"
        })
    }
}

/// What a bot's load counts (`balanceBy`).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Deserialize,
    serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum BalanceBy {
    /// The channels it answers in: least Σ load², exact.
    #[default]
    Channels,
    /// The messages of those channels (each channel weighs its message rate): least
    /// Σ (weighted load)², with a certified gap to a lower bound.
    Messages,
}

impl std::fmt::Display for BalanceBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BalanceBy::Channels => "channels",
            BalanceBy::Messages => "messages",
        })
    }
}

impl Rules {
    pub fn platform_enabled(&self, platform: &str) -> bool {
        self.enabled_platforms.is_empty() || self.enabled_platforms.iter().any(|p| p == platform)
    }

    /// Resolves the rules for one platform to channel and bot indices.
    pub fn resolve(&self, index: &PlatformIndex) -> Resolved {
        let platform = index.name();
        // The channel a key names on this platform, and whether the key was full.
        let channel_of = |key: &str| -> Option<(ChanIx, bool)> {
            match split_key(key) {
                Some((p, id)) if p == platform => index.find_channel(id).map(|c| (c, true)),
                Some(_) => None,
                None => index.find_channel(key).map(|c| (c, false)),
            }
        };
        let bot_of = |key: &str| -> Option<BotIx> {
            match split_key(key) {
                Some((p, id)) if p == platform => index.find_bot(id),
                Some(_) => None,
                None => index.find_bot(key),
            }
        };
        let mut excluded: Vec<ChanIx> = self
            .exclude
            .iter()
            .filter_map(|key| channel_of(key))
            .map(|(c, _)| c)
            .collect();
        excluded.sort_unstable();
        excluded.dedup();
        let mut priority: FxHashMap<ChanIx, (bool, Vec<BotIx>)> = FxHashMap::default();
        for (key, bots) in &self.priority {
            let Some((channel, full)) = channel_of(key) else {
                continue;
            };
            let list = bots.iter().filter_map(|b| bot_of(b)).collect();
            match priority.get(&channel) {
                Some((true, _)) if !full => {}
                _ => {
                    priority.insert(channel, (full, list));
                }
            }
        }
        // An operator's pins and drains: full keys only.
        let mut pins: FxHashMap<ChanIx, Option<BotIx>> = FxHashMap::default();
        let mut held = 0;
        for (key, bot) in &self.pins {
            let Some((p, id)) = split_key(key).filter(|&(p, _)| p == platform) else {
                continue;
            };
            let Some(c) = index.find_channel(id) else {
                let _ = p;
                continue;
            };
            match bot {
                // A bot the index does not know cannot be valid: the pin waits.
                Some(bot) => {
                    if let Some(b) = index.find_bot(bot) {
                        pins.insert(c, Some(b));
                    }
                }
                None => {
                    pins.insert(c, None);
                    held += 1;
                }
            }
        }
        let drained: Vec<BotIx> = self
            .drained
            .iter()
            .filter_map(|key| split_key(key).filter(|&(p, _)| p == platform))
            .filter_map(|(_, id)| index.find_bot(id))
            .collect();
        let mut drained_bits = vec![
            0u64;
            if drained.is_empty() {
                0
            } else {
                index.bot_count().div_ceil(64)
            }
        ];
        for &b in &drained {
            drained_bits[b as usize / 64] |= 1 << (b % 64);
        }
        let mut flagged = vec![0u64; index.channel_count().div_ceil(64)];
        let drained_channels = drained
            .iter()
            .flat_map(|&b| index.channels_of(b).iter().copied());
        for c in excluded
            .iter()
            .chain(priority.keys())
            .chain(pins.keys())
            .copied()
            .chain(drained_channels)
        {
            flagged[c as usize / 64] |= 1 << (c % 64);
        }
        // Capacities and pinned weights: a full key wins over a short one, as above.
        let mut capacity: FxHashMap<BotIx, (bool, f64)> = FxHashMap::default();
        for (key, &cap) in &self.capacity {
            if let Some(b) = bot_of(key) {
                let full = split_key(key).is_some();
                if full || !capacity.get(&b).is_some_and(|&(f, _)| f) {
                    capacity.insert(b, (full, cap));
                }
            }
        }
        let mut weights: FxHashMap<ChanIx, (bool, f64)> = FxHashMap::default();
        for (key, &w) in &self.channel_weights {
            if let Some((c, full)) = channel_of(key)
                && (full || !weights.get(&c).is_some_and(|&(f, _)| f))
            {
                weights.insert(c, (full, w));
            }
        }
        Resolved {
            excluded,
            priority: priority.into_iter().map(|(c, (_, l))| (c, l)).collect(),
            pins,
            held,
            drained: drained_bits,
            flagged,
            balance_by: self.balance_by,
            capacity: capacity.into_iter().map(|(b, (_, c))| (b, c)).collect(),
            weights: weights.into_iter().map(|(c, (_, w))| (c, w)).collect(),
            weight_floor: self.weight_floor,
            min_gain: self.min_gain,
            search_time: self.search_time,
            search_interrupt: self.search_interrupt.clone(),
        }
    }
}

/// Rules resolved for one platform.
#[derive(Default, Debug, Clone, PartialEq)]
pub struct Resolved {
    /// Ascending.
    excluded: Vec<ChanIx>,
    priority: FxHashMap<ChanIx, Vec<BotIx>>,
    /// An operator's pins: the bot, or `None` for a hold.
    pins: FxHashMap<ChanIx, Option<BotIx>>,
    /// Channels held with no assignee.
    held: usize,
    /// One bit per bot an operator drained (empty when none is).
    drained: Vec<u64>,
    /// One bit per channel: excluded, with a priority list, pinned or held, or with a drained
    /// member. Most channels are none of these, and the bit answers for them without a look-up
    /// (a plan asks for every channel).
    flagged: Vec<u64>,
    pub balance_by: BalanceBy,
    capacity: FxHashMap<BotIx, f64>,
    weights: FxHashMap<ChanIx, f64>,
    pub weight_floor: f64,
    pub min_gain: f64,
    pub search_time: f64,
    pub search_interrupt: Interrupt,
}

impl Resolved {
    #[inline]
    fn flagged(&self, channel: ChanIx) -> bool {
        bit_set(&self.flagged, channel)
    }

    /// The bot's capacity, if it has one (in the unit of `balance_by`).
    pub fn capacity(&self, bot: BotIx) -> Option<f64> {
        self.capacity.get(&bot).copied()
    }

    pub fn has_capacities(&self) -> bool {
        !self.capacity.is_empty()
    }

    /// The weight a channel counts with: the admin's, else the measured one, at least the floor.
    pub fn weight(&self, index: &PlatformIndex, channel: ChanIx) -> f64 {
        match self.weights.get(&channel) {
            Some(&pinned) => pinned,
            None => index.weight(channel).max(self.weight_floor),
        }
    }

    /// Whether an admin pinned the channel's weight.
    pub fn weight_pinned(&self, channel: ChanIx) -> bool {
        self.weights.contains_key(&channel)
    }

    pub fn is_excluded(&self, channel: ChanIx) -> bool {
        self.flagged(channel) && self.excluded.binary_search(&channel).is_ok()
    }

    /// An operator's pin on the channel: `Some(Some(bot))`, or `Some(None)` for a hold.
    pub fn operator_pin(&self, channel: ChanIx) -> Option<Option<BotIx>> {
        if !self.flagged(channel) {
            return None;
        }
        self.pins.get(&channel).copied()
    }

    /// Whether an operator holds the channel with no assignee.
    pub fn is_held(&self, channel: ChanIx) -> bool {
        self.operator_pin(channel) == Some(None)
    }

    /// Channels held with no assignee.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Whether an operator drained the bot.
    pub fn is_drained(&self, bot: BotIx) -> bool {
        bit_set(&self.drained, bot)
    }

    /// Whether the channel's drained online members are valid there: when no other online
    /// member is (a drained bot keeps what nobody else can take).
    fn drained_kept(&self, index: &PlatformIndex, channel: ChanIx) -> bool {
        !self.drained.is_empty()
            && !index
                .members(channel)
                .iter()
                .any(|&b| index.is_online(b) && !self.is_drained(b))
    }

    /// Whether `bot` may answer in `channel` before pins and priority lists: an online member,
    /// not drained unless no other online member is.
    fn eligible(&self, index: &PlatformIndex, channel: ChanIx, bot: BotIx) -> bool {
        index.is_online(bot)
            && index.members(channel).contains(&bot)
            && (!self.is_drained(bot) || self.drained_kept(index, channel))
    }

    /// Excluded channels, ascending.
    pub fn excluded(&self) -> impl Iterator<Item = ChanIx> + '_ {
        self.excluded.iter().copied()
    }

    pub fn priority(&self, channel: ChanIx) -> Option<&[BotIx]> {
        if !self.flagged(channel) {
            return None;
        }
        self.priority.get(&channel).map(Vec::as_slice)
    }

    /// The bot a channel is pinned to: an operator's pinned bot while it is eligible (an
    /// online member, not drained unless nobody else can answer), else the first eligible
    /// entry of its priority list.
    pub fn pinned(&self, index: &PlatformIndex, channel: ChanIx) -> Option<BotIx> {
        if !self.flagged(channel) {
            return None;
        }
        match self.pins.get(&channel) {
            // A hold: no bot at all.
            Some(None) => return None,
            Some(Some(bot)) if self.eligible(index, channel, *bot) => return Some(*bot),
            _ => {}
        }
        let list = self.priority.get(&channel)?;
        list.iter()
            .copied()
            .find(|&b| self.eligible(index, channel, b))
    }

    /// The bots a channel may go to: its pinned bot alone, else its online members. None for
    /// an excluded channel (check [`Resolved::is_excluded`] to tell the two apart). An
    /// iterator, so that a plan writes each channel's bots straight where it keeps them.
    #[inline]
    pub fn valid_bots<'a>(
        &'a self,
        index: &'a PlatformIndex,
        channel: ChanIx,
    ) -> impl Iterator<Item = BotIx> + 'a {
        let members = index.members(channel);
        // The drained bots to leave out: none for the many unflagged channels, so their
        // filter is the online check alone (the planner asks this for every membership).
        let (pinned, members, left_out): (_, _, &[u64]) = if !self.flagged(channel) {
            (None, members, &[])
        } else if self.is_excluded(channel) || self.is_held(channel) {
            (None, &[][..], &[])
        } else {
            match self.pinned(index, channel) {
                Some(pin) => (Some(pin), &[][..], &[]),
                None if self.drained_kept(index, channel) => (None, members, &[]),
                None => (None, members, &self.drained),
            }
        };
        // A pinned bot is an online member already.
        pinned.into_iter().chain(
            members
                .iter()
                .copied()
                .filter(move |&b| index.is_online(b) && !bit_set(left_out, b)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet() -> PlatformIndex {
        let mut p = PlatformIndex::new("onebot");
        p.bot_online("1", &["100", "200"]);
        p.bot_online("2", &["100", "200"]);
        p.bot_online("3", &["100"]);
        p
    }

    #[test]
    fn full_keys_win_over_short_ones() {
        let p = fleet();
        let mut rules = Rules::default();
        rules.priority.insert("onebot:100".into(), vec!["2".into()]);
        rules.priority.insert("100".into(), vec!["1".into()]);
        let r = rules.resolve(&p);
        assert_eq!(
            r.pinned(&p, p.find_channel("100").unwrap()),
            p.find_bot("2")
        );
    }

    #[test]
    fn invalid_priority_entries_are_skipped() {
        let mut p = fleet();
        let mut rules = Rules::default();
        // "9" is unknown, "3" is not in channel 200, "discord:1" is another platform.
        rules.priority.insert(
            "200".into(),
            vec![
                "9".into(),
                "3".into(),
                "discord:1".into(),
                "onebot:2".into(),
            ],
        );
        let r = rules.resolve(&p);
        let c = p.find_channel("200").unwrap();
        assert_eq!(r.pinned(&p, c), p.find_bot("2"));
        p.bot_offline("2");
        let r = rules.resolve(&p);
        assert_eq!(
            r.pinned(&p, c),
            None,
            "no valid entry left: balanced normally"
        );
        let valid: Vec<BotIx> = r.valid_bots(&p, c).collect();
        assert_eq!(valid, [p.find_bot("1").unwrap()]);
    }

    #[test]
    fn exclusions_take_full_and_short_keys() {
        let p = fleet();
        let rules = Rules {
            exclude: vec!["onebot:100".into(), "200".into(), "discord:300".into()],
            ..Rules::default()
        };
        let r = rules.resolve(&p);
        assert!(r.is_excluded(p.find_channel("100").unwrap()));
        assert!(r.is_excluded(p.find_channel("200").unwrap()));
        let mut valid = r.valid_bots(&p, p.find_channel("100").unwrap());
        assert_eq!(valid.next(), None);
    }

    #[test]
    fn empty_enabled_list_means_every_platform() {
        let mut rules = Rules::default();
        assert!(rules.platform_enabled("discord"));
        rules.enabled_platforms = vec!["onebot".into()];
        assert!(!rules.platform_enabled("discord"));
        assert!(rules.platform_enabled("onebot"));
    }
}
