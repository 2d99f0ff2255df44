//! Every channel's member bots, in 16 bytes a channel.
//!
//! Almost every channel has one to four member bots, so a channel's list is four words of its
//! own: its members, then [`VACANT`] in the words left over. A channel with more members keeps
//! them in a boxed list of its own, whose slot its first word names, tagged [`SPILLED`]. Bot
//! indices stay below that tag ([`MemberLists::push`] asserts it), so one word tells the three
//! cases apart. A `SmallVec<[BotIx; 4]>` held the same four inline in 24 bytes (its length is
//! a word of its own) and moved a fifth member to a heap block of eight: at 10M channels
//! 229 MB and 45 MB of blocks, where these lists take 153 MB and about 48 MB (the bench's
//! `--huge` fleet, a tenth of whose channels have five members).

use crate::model::{BotIx, ChanIx};

/// An unused word of an inline list.
const VACANT: BotIx = BotIx::MAX;
/// In a channel's first word: its members are in `spilled`, at the slot in the bits below.
const SPILLED: u32 = 1 << 31;
/// Members a channel's own words hold.
const INLINE: usize = 4;

#[derive(Default)]
pub(super) struct MemberLists {
    inline: Vec<[BotIx; INLINE]>,
    /// The lists of channels with more than [`INLINE`] members; a freed slot holds an empty
    /// list until `free` hands it out again.
    spilled: Vec<Box<[BotIx]>>,
    free: Vec<u32>,
}

/// Where a channel's members are.
enum Place {
    Inline(usize),
    Spilled(usize),
}

impl MemberLists {
    /// Room for one more channel, with no members.
    pub(super) fn push_channel(&mut self) {
        self.inline.push([VACANT; INLINE]);
    }

    fn place(&self, channel: ChanIx) -> Place {
        let words = &self.inline[channel as usize];
        match words[0] {
            VACANT => Place::Inline(0),
            w if w & SPILLED != 0 => Place::Spilled((w & !SPILLED) as usize),
            _ => Place::Inline(words.iter().position(|&w| w == VACANT).unwrap_or(INLINE)),
        }
    }

    /// The members of a channel, in the order they joined.
    pub(super) fn get(&self, channel: ChanIx) -> &[BotIx] {
        match self.place(channel) {
            Place::Inline(len) => &self.inline[channel as usize][..len],
            Place::Spilled(slot) => &self.spilled[slot],
        }
    }

    /// Adds `bot` after the channel's members (it must not be one).
    pub(super) fn push(&mut self, channel: ChanIx, bot: BotIx) {
        assert!(bot < SPILLED, "bot indices stay below 2^31");
        match self.place(channel) {
            Place::Inline(len) if len < INLINE => self.inline[channel as usize][len] = bot,
            Place::Inline(_) => {
                let list = self.inline[channel as usize].iter().copied().chain([bot]);
                self.spill(channel, list.collect());
            }
            Place::Spilled(slot) => {
                let list = self.spilled[slot].iter().copied().chain([bot]).collect();
                self.spilled[slot] = list;
            }
        }
    }

    /// Removes `bot` from the channel's members, keeping the others' order; whether it was one.
    pub(super) fn remove(&mut self, channel: ChanIx, bot: BotIx) -> bool {
        match self.place(channel) {
            Place::Inline(len) => {
                let words = &mut self.inline[channel as usize];
                let Some(pos) = words[..len].iter().position(|&b| b == bot) else {
                    return false;
                };
                words.copy_within(pos + 1..len, pos);
                words[len - 1] = VACANT;
            }
            Place::Spilled(slot) => {
                let old = &self.spilled[slot];
                if !old.contains(&bot) {
                    return false;
                }
                let rest: Box<[BotIx]> = old.iter().copied().filter(|&b| b != bot).collect();
                if rest.len() > INLINE {
                    self.spilled[slot] = rest;
                } else {
                    let mut words = [VACANT; INLINE];
                    words[..rest.len()].copy_from_slice(&rest);
                    self.inline[channel as usize] = words;
                    self.spilled[slot] = Box::default();
                    self.free.push(slot as u32);
                }
            }
        }
        true
    }

    /// Sets the members of a channel that has none.
    pub(super) fn set(&mut self, channel: ChanIx, members: &[BotIx]) {
        debug_assert!(self.get(channel).is_empty());
        if members.len() > INLINE {
            self.spill(channel, members.into());
        } else {
            for &bot in members {
                self.push(channel, bot);
            }
        }
    }

    fn spill(&mut self, channel: ChanIx, list: Box<[BotIx]>) {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.spilled[slot as usize] = list;
                slot
            }
            None => {
                self.spilled.push(list);
                u32::try_from(self.spilled.len() - 1)
                    .ok()
                    .filter(|&s| s < SPILLED - 1)
                    .expect("under 2^31 channels with more than four members")
            }
        };
        self.inline[channel as usize] = [SPILLED | slot, VACANT, VACANT, VACANT];
    }

    /// Every channel's member count, in channel order.
    pub(super) fn lens(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.inline.len() as ChanIx).map(|c| self.get(c).len())
    }
}

#[cfg(test)]
mod tests {
    use super::MemberLists;

    #[test]
    fn lists_of_any_length_keep_their_order_through_joins_and_leaves() {
        let mut lists = MemberLists::default();
        for _ in 0..3 {
            lists.push_channel();
        }
        for bot in [5, 1, 9, 3, 7, 2] {
            lists.push(1, bot);
        }
        lists.push(2, 4);
        assert_eq!(lists.get(0), [] as [u32; 0]);
        assert_eq!(lists.get(1), [5, 1, 9, 3, 7, 2]);
        assert_eq!(lists.get(2), [4]);
        assert!(!lists.remove(1, 8));
        assert!(lists.remove(1, 9));
        assert_eq!(lists.get(1), [5, 1, 3, 7, 2]);
        // Back to four: inline again, its slot free for the next channel that spills.
        assert!(lists.remove(1, 5));
        assert_eq!(lists.get(1), [1, 3, 7, 2]);
        assert_eq!(lists.free, [0]);
        lists.set(0, &[6, 5, 4, 3, 2]);
        assert_eq!(lists.get(0), [6, 5, 4, 3, 2]);
        assert!(lists.free.is_empty());
        assert!(lists.remove(1, 2));
        assert!(lists.remove(1, 1));
        assert_eq!(lists.get(1), [3, 7]);
        assert!(lists.remove(1, 3) && lists.remove(1, 7));
        assert_eq!(lists.get(1), [] as [u32; 0]);
        assert!(!lists.remove(1, 3));
        assert_eq!(lists.lens().collect::<Vec<_>>(), [5, 0, 1]);
    }
}
