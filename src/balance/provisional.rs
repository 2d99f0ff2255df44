//! Provisional assignments: a channel whose assignee stopped being valid, or that has none and
//! just gained a valid bot, gets a bot *now*, before any debounced rebalance.
//!
//! The trigger delays exist to coalesce bursts of events into one balanced plan. They must not
//! silence a group: while a channel's assignee is offline (or gone from the channel), every
//! client that obeys `channel.assignee` ignores its messages. So the engine asks this module,
//! after every batch of fleet events, for a valid bot for each channel left without one, and
//! commits it at once; the delayed rebalance then improves the balance, counting its moves from
//! the assignment before the events ([`crate::balance::Planner::plan_counting_from`]): a channel
//! given a bot here had to move anyway, so the rebalance may move it again at no cost and moves
//! the fewest channels overall.
//!
//! Only *necessary* changes are made here: a channel whose assignee is still valid is never
//! touched, however unbalanced, so voluntary moves keep waiting for the delays. The bot chosen
//! is the one the channel is pinned to by its priority list, else its least-loaded valid bot;
//! channels with the fewest valid bots choose first (as the optimal planner's first step does),
//! so that flexible channels fill in around them. That is the optimum for a single channel and
//! close to it for a departing bot's channels; the rebalance that follows makes it exact.

use serde::Deserialize;

use crate::balance::rules::Resolved;
use crate::index::{BotIx, ChanIx, PlatformIndex};

/// `provisional`: whether forced and first assignments are made at once (`true`, the default)
/// or wait, like every other move, for the trigger delays (`false`, the behaviour before).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Provisional {
    #[default]
    Immediate,
    WithTheRebalance,
}

impl<'de> Deserialize<'de> for Provisional {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(if bool::deserialize(d)? {
            Provisional::Immediate
        } else {
            Provisional::WithTheRebalance
        })
    }
}

/// Which invalid assignees are kept for now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored<'a> {
    /// Before the sources have reported the fleet: a stored assignee that no source has
    /// reported yet (it may still be connecting) keeps its channels until the first
    /// rebalance. `reported[bot]` says which bots a source has reported, online or offline.
    Hold { reported: &'a [bool] },
    /// No invalid assignee is kept.
    Replace,
}

impl Stored<'_> {
    fn holds(&self, bot: BotIx) -> bool {
        match self {
            Stored::Hold { reported } => !reported.get(bot as usize).copied().unwrap_or(false),
            Stored::Replace => false,
        }
    }
}

/// What a provisional pass changed on one platform.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Provisions {
    /// (channel, its new bot), in the order they were decided.
    pub changes: Vec<(ChanIx, BotIx)>,
    /// Channels whose previous assignee was no longer valid.
    pub forced: usize,
    /// Channels that had no assignee.
    pub first: usize,
    /// The assignee each changed channel had before (in the order of `changes`): the
    /// rebalance counts its moves from there.
    pub earlier: Vec<Option<BotIx>>,
}

/// Gives each of `candidates` (duplicates allowed) that lacks a valid assignee its pinned or
/// least-loaded valid bot, records it in the index, and returns the changes. Excluded
/// channels and channels with no valid bot are left as they are (the rebalance unassigns the
/// latter: nobody could answer there anyway).
pub fn assign(
    index: &mut PlatformIndex,
    resolved: &Resolved,
    candidates: &mut Vec<ChanIx>,
    stored: Stored,
) -> Provisions {
    candidates.sort_unstable();
    candidates.dedup();
    let mut needy: Vec<(usize, ChanIx)> = candidates
        .iter()
        .copied()
        .filter(|&c| (c as usize) < index.channel_count() && !resolved.is_excluded(c))
        .filter(|&c| match index.assignee(c) {
            None => true,
            Some(a) => !stored.holds(a) && !resolved.valid_bots(index, c).any(|b| b == a),
        })
        .map(|c| (resolved.valid_bots(index, c).count(), c))
        .filter(|&(options, _)| options > 0)
        .collect();
    needy.sort_unstable();
    let mut out = Provisions::default();
    for (_, c) in needy {
        let best = resolved.pinned(index, c).or_else(|| {
            resolved
                .valid_bots(index, c)
                .min_by_key(|&b| (index.load(b), b))
        });
        let Some(best) = best else { continue };
        let earlier = index.assignee(c);
        if earlier.is_some() {
            out.forced += 1;
        } else {
            out.first += 1;
        }
        out.earlier.push(earlier);
        index.set_assignee(c, Some(best));
        out.changes.push((c, best));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::Rules;

    fn platform(bots: &[(&str, &[&str])]) -> PlatformIndex {
        let mut p = PlatformIndex::new("onebot");
        for (bot, channels) in bots {
            p.bot_online(bot, channels);
        }
        p
    }

    fn assignee(p: &PlatformIndex, channel: &str) -> Option<String> {
        let c = p.find_channel(channel)?;
        p.assignee(c).map(|b| p.bot_id(b).to_owned())
    }

    fn set(p: &mut PlatformIndex, channel: &str, bot: &str) {
        let (c, b) = (p.find_channel(channel).unwrap(), p.find_bot(bot).unwrap());
        p.set_assignee(c, Some(b));
    }

    fn all(p: &PlatformIndex) -> Vec<ChanIx> {
        (0..p.channel_count() as ChanIx).collect()
    }

    #[test]
    fn a_departed_bots_channels_go_to_the_least_loaded_valid_bots_and_nothing_else_moves() {
        let mut p = platform(&[
            ("1", &["a", "b", "c", "d"]),
            ("2", &["a", "b", "c", "d"]),
            ("3", &["c", "d", "e"]),
        ]);
        for (c, b) in [("a", "1"), ("b", "1"), ("c", "2"), ("d", "3"), ("e", "3")] {
            set(&mut p, c, b);
        }
        let bot = p.find_bot("1").unwrap();
        p.set_online(bot, false);
        let resolved = Rules::default().resolve(&p);
        let mut every = all(&p);
        let out = assign(&mut p, &resolved, &mut every, Stored::Replace);
        assert_eq!((out.forced, out.first), (2, 0));
        // a and b have bot 2 as their only valid bot; c, d, e keep theirs (bot 3 carrying two
        // is a voluntary matter for the rebalance).
        for (c, b) in [("a", "2"), ("b", "2"), ("c", "2"), ("d", "3"), ("e", "3")] {
            assert_eq!(assignee(&p, c).as_deref(), Some(b), "channel {c}");
        }
    }

    #[test]
    fn fewest_options_choose_first_and_ties_go_to_the_lower_load() {
        // x may go to 2 or 3, y only to 2: y first, then x to 3 (2 is busier by then).
        let mut p = platform(&[("1", &["x", "y"]), ("2", &["x", "y"]), ("3", &["x"])]);
        set(&mut p, "x", "1");
        set(&mut p, "y", "1");
        let bot = p.find_bot("1").unwrap();
        p.set_online(bot, false);
        let resolved = Rules::default().resolve(&p);
        let mut every = all(&p);
        let out = assign(&mut p, &resolved, &mut every, Stored::Replace);
        assert_eq!(out.forced, 2);
        assert_eq!(assignee(&p, "y").as_deref(), Some("2"));
        assert_eq!(assignee(&p, "x").as_deref(), Some("3"));
    }

    #[test]
    fn a_new_channel_gets_a_bot_a_pinned_one_its_pin_and_an_excluded_one_nothing() {
        let mut p = platform(&[("1", &["a", "p", "x"]), ("2", &["a", "b", "p", "x"])]);
        set(&mut p, "b", "2");
        let rules = Rules {
            priority: [("p".to_owned(), vec!["2".to_owned()])].into(),
            exclude: vec!["x".to_owned()],
            ..Rules::default()
        };
        let resolved = rules.resolve(&p);
        let mut every = all(&p);
        let out = assign(&mut p, &resolved, &mut every, Stored::Replace);
        assert_eq!((out.forced, out.first), (0, 2));
        assert_eq!(assignee(&p, "a").as_deref(), Some("1"));
        assert_eq!(assignee(&p, "p").as_deref(), Some("2"));
        assert_eq!(assignee(&p, "x"), None);
    }

    #[test]
    fn unreported_stored_assignees_wait_and_channels_without_a_valid_bot_stay() {
        let mut p = platform(&[("1", &["a", "b", "d"]), ("2", &["c", "d"])]);
        // A stored assignee that has not reported yet, and one reported offline.
        let ghost = p.add_bot("9");
        let (a, d) = (p.find_channel("a").unwrap(), p.find_channel("d").unwrap());
        p.set_assignee(a, Some(ghost));
        let bot = p.find_bot("2").unwrap();
        p.set_assignee(d, Some(bot));
        p.set_online(bot, false);
        let resolved = Rules::default().resolve(&p);
        let mut reported = vec![true; p.bot_count()];
        reported[ghost as usize] = false;
        let mut every = all(&p);
        let held = Stored::Hold {
            reported: &reported,
        };
        let out = assign(&mut p, &resolved, &mut every, held);
        assert_eq!((out.forced, out.first), (1, 1));
        assert_eq!(assignee(&p, "a").as_deref(), Some("9"));
        assert_eq!(assignee(&p, "b").as_deref(), Some("1"));
        assert_eq!(assignee(&p, "c"), None);
        assert_eq!(assignee(&p, "d").as_deref(), Some("1"));
        let mut every = all(&p);
        let out = assign(&mut p, &resolved, &mut every, Stored::Replace);
        assert_eq!(out.changes, vec![(a, p.find_bot("1").unwrap())]);
    }

    #[test]
    fn config_reads_a_boolean() {
        let read = |text: &str| serde_norway::from_str::<Provisional>(text).map_err(|_| ());
        assert_eq!(read("true"), Ok(Provisional::Immediate));
        assert_eq!(read("false"), Ok(Provisional::WithTheRebalance));
        assert!(read("sometimes").is_err());
    }
}
