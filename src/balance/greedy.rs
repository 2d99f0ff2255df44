//! The `greedy` strategy: the Koishi plugin's dynamic-capacity greedy, kept for compatibility.
//!
//! As its README describes it: every bot's *remaining capacity* starts at the number of
//! channels it is in; channels are taken in order; a channel with a priority list goes to the
//! first valid bot of the list, any other to the valid bot with the smallest remaining capacity,
//! ties to the smallest current load; then every member's remaining capacity drops by one.
//!
//! Points the README leaves open, resolved so that the result depends on the fleet alone
//! (a restart with an unchanged fleet, whatever order the sources report it in, gives the
//! same assignment):
//! * channel order: by channel id, shorter ids first (numeric order for decimal ids);
//! * full ties: the bot with the smallest id, in the same order;
//! * remaining capacity counts only non-excluded channels and only active members, and is
//!   decremented for pinned channels too;
//! * a priority list with no valid bot falls back to the balancing rule;
//! * the previous assignment is ignored (the plugin recomputes from scratch every time).

use crate::balance::rules::Resolved;
use crate::index::{BotIx, ChanIx, PlatformIndex};

/// Ids in the order greedy uses: shorter first, then by bytes.
fn id_order(id: &str) -> (usize, &[u8]) {
    (id.len(), id.as_bytes())
}

pub(crate) fn assign(index: &PlatformIndex, resolved: &Resolved) -> Vec<Option<BotIx>> {
    let channels = index.channel_count() as ChanIx;
    let mut order: Vec<ChanIx> = (0..channels)
        .filter(|&c| !resolved.is_excluded(c))
        .collect();
    order.sort_unstable_by(|&a, &b| {
        // The same order for numbers, without writing their text.
        index.channel_id(a).cmp_shorter_first(&index.channel_id(b))
    });
    let active_members = |c: ChanIx| {
        index
            .members(c)
            .iter()
            .copied()
            .filter(|&b| index.is_online(b))
    };
    let mut remaining = vec![0u32; index.bot_count()];
    for &c in &order {
        for b in active_members(c) {
            remaining[b as usize] += 1;
        }
    }
    let mut load = vec![0u32; index.bot_count()];
    let mut assignment = vec![None; channels as usize];
    for &c in &order {
        let pick = resolved.pinned(index, c).or_else(|| {
            active_members(c).min_by_key(|&b| {
                (
                    remaining[b as usize],
                    load[b as usize],
                    id_order(index.bot_id(b)),
                )
            })
        });
        if let Some(bot) = pick {
            load[bot as usize] += 1;
            assignment[c as usize] = Some(bot);
        }
        for b in active_members(c) {
            remaining[b as usize] -= 1;
        }
    }
    assignment
}
