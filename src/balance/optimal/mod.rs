//! The `optimal` strategy: least Σ load² (hence least stddev and least max load), then the
//! fewest moved channels, both exact.
//!
//! A full plan runs in three steps on the [`exchange`] graph of one platform:
//! 1. place every channel on its least-loaded valid bot, channels with fewest options first
//!    (already close to optimal, so the next step has little to do);
//! 2. [`levels`]: remove cost-reducing paths top down; this proves Σ load² optimal and yields
//!    each bot's level value β;
//! 3. [`flow`]: put every channel whose previous bot is on the same level back home, then route
//!    the resulting imbalances along cheapest paths (lexicographic: load, then moves). The
//!    result is the optimal placement with the fewest moves.
//!
//! The state survives the plan: an incremental re-plan applies the index's journal (bots gone or
//! back, memberships changed), restores the flow invariant locally and routes only the
//! difference, so its cost follows the size of the change, not of the fleet. It is never much
//! dearer than a full plan: a journal touching a sixteenth of the channels gets one, and routing
//! that would start from more than half the bots (a bot of a flat fleet leaving raises every
//! other bot's level), or has looked at as many arcs as there are memberships, or at every arc
//! of the bot graph eight times over, stops and solves the levels again on the graph as it
//! stands: a full plan's steps 2 and 3 without building the graph, which is most of a full
//! plan's cost.
//!
//! Between plans every channel in the graph sits at its *home*. The planner applies each plan to
//! the index, so the next plan's previous assignment is the last plan's placement, and moves must
//! be counted from there: a channel left with an older home would see a −1 arc back to it and
//! could be "returned" there at no apparent cost, a needless move. Re-homing is safe at any
//! time, since it only raises arc costs (every arc of a channel at home costs +1, the most), so
//! the potentials stay valid; and it is cheap, since the exchange graph lists the channels that
//! may be away from home ([`Exchange::take_displaced`]).

mod exchange;
mod flow;
mod levels;

use exchange::{Exchange, Homes, ListedNode, Lists, MemberNodes, NIL, SOURCE};
use flow::{Cost, Flow};

use crate::balance::Outcome;
use crate::balance::rules::{BalanceBy, Resolved};
use crate::index::{BotIx, ChanIx, Journal, PlatformIndex};
use crate::pages;

/// The reusable solver state of one platform. Between plans every channel in the graph is at
/// its home, the index's assignee once the plan is applied.
pub(crate) struct State {
    ex: Exchange,
    flow: Flow,
}

/// The state no longer matches the index; plan from scratch.
#[derive(Debug)]
pub(crate) struct Stale;

fn node(bot: BotIx) -> u32 {
    bot + 1
}

impl State {
    /// Plans a platform from scratch; the index's assignees are the previous assignment.
    /// With `keep`, the state is made ready for [`State::replan`] (every channel's place
    /// becomes its home); a one-off plan skips that.
    pub(crate) fn build(index: &PlatformIndex, resolved: &Resolved, keep: bool) -> Self {
        // The source, the bots, and room for a few bots that appear later without a rebuild.
        let width = index.bot_count() + 1 + 8 + index.bot_count() / 32;
        // Nodes listed in two bytes where they fit: the lists are alive while the graph is
        // built, the plan's peak (10M channels: 57 MB less).
        if width <= 1 << 16 {
            Self::build_listing::<u16>(index, resolved, keep, width)
        } else {
            Self::build_listing::<u32>(index, resolved, keep, width)
        }
    }

    /// [`State::build`] with the valid nodes listed as `N`s.
    fn build_listing<N: ListedNode>(
        index: &PlatformIndex,
        resolved: &Resolved,
        keep: bool,
        width: usize,
    ) -> Self {
        let channels = index.channel_count();
        let mut active = vec![false; width];
        for b in 0..index.bot_count() as BotIx {
            active[node(b) as usize] = index.is_online(b);
        }

        // Valid nodes of every channel. Step 1 starts here: a channel with a single valid bot
        // has nowhere else to go and would come first in step 1's order anyway, so it is
        // placed as it is listed (about half the channels of a typical fleet).
        let mut valid_lists = Lists::<N>::with_capacity(channels, index.total_memberships());
        let mut home = pages::filled(channels, NIL);
        let mut has_previous = false;
        let mut load = vec![0u32; width];
        let mut place = pages::filled(channels, NIL);
        // Valid bots beyond the first, for the channels step 1 still has to place.
        let mut options = vec![NIL; channels];
        for c in 0..channels as ChanIx {
            valid_lists.push(resolved.valid_bots(index, c).map(node));
            let valid = valid_lists.of(c as usize);
            let previous = index.assignee(c).map(|b| N::listed(node(b)));
            if let Some(prev) = previous.filter(|v| valid.contains(v)) {
                home[c as usize] = prev.into();
                has_previous = true;
            }
            match valid {
                [] => {}
                &[only] => {
                    place[c as usize] = only.into();
                    load[only.into() as usize] += 1;
                }
                more => options[c as usize] = more.len() as u32 - 1,
            }
        }

        // Step 1: fewest options first, each to its least-loaded valid bot (home on ties).
        let order = grouped(&options);
        drop(options);
        for &c in &order {
            let h = home[c as usize];
            let best = valid_lists
                .nodes(c as usize)
                .min_by_key(|&v| (load[v as usize], v != h))
                .expect("channel has a valid bot");
            place[c as usize] = best;
            load[best as usize] += 1;
        }
        drop(order);

        // Without any previous assignment the first placement is the reference, so only
        // channels that phase A moves need re-filing afterwards.
        if !has_previous {
            home.copy_from_slice(&place);
        }
        let mut ex = Exchange::with_channels(width, &valid_lists, home, place);

        // Step 2: least Σ load², with each bot's level.
        let beta = levels::settle_levels(&mut ex, &active);
        ex.sort_new_pairs();
        let mut flow = Flow::from_levels(&ex, &beta, active);
        // Capacities (in channels): phase A ignored them; the bots over theirs keep only
        // their capacity's worth of flow, and step 3 routes the rest.
        let capped = resolved.has_capacities() && resolved.balance_by == BalanceBy::Channels;
        if capped {
            let mut cap = vec![i64::MAX; width];
            for b in 0..index.bot_count() as BotIx {
                if let Some(c) = resolved.capacity(b) {
                    cap[node(b) as usize] = c.floor().max(0.0) as i64;
                }
            }
            // More than any two placements' Σ load² can differ by (at most n²).
            let n = channels as i64 + 1;
            flow = flow.with_capacities(cap, n.saturating_mul(n));
        }

        // Step 3: back home where the level allows it, then route the imbalances.
        if capped && !has_previous {
            flow.settle(&mut ex);
        }
        if has_previous {
            let back = back_home(&ex, &beta);
            if back.len() > channels / 8 {
                // Many go back (with a previous assignment from elsewhere, most do): building the
                // graph anew is cheaper than moving them one by one.
                let mut at = pages::with_capacity(channels);
                at.extend_from_slice(ex.places());
                for &c in &back {
                    at[c as usize] = ex.home(c);
                }
                ex = ex.rebuilt(&valid_lists, Homes::Kept, at);
            } else {
                for &c in &back {
                    ex.move_to(c, ex.home(c));
                }
            }
            flow.settle(&mut ex);
        }
        if keep && away_from_home(&ex) > channels / 8 {
            // Every channel's place becomes its home: with many away from home, building the
            // graph that way costs less than re-filing their arcs one by one.
            let mut at = pages::with_capacity(channels);
            at.extend_from_slice(ex.places());
            ex = ex.rebuilt(&valid_lists, Homes::Places, at);
        }
        let mut state = State { ex, flow };
        if keep {
            state.rehome();
            // Re-plans route backward too: their reverse pair lists are made now, with the
            // plan, rather than in the first re-plan, which should cost the size of its change.
            state.ex.reverse_pairs();
        }
        state
    }

    /// Re-plans after the changes in `journal`, with the last plan as the previous assignment.
    pub(crate) fn replan(
        &mut self,
        index: &PlatformIndex,
        resolved: &Resolved,
        journal: &Journal,
    ) -> Result<Outcome, Stale> {
        if journal.overflow || index.bot_count() + 1 > self.ex.width() {
            return Err(Stale);
        }
        // Blocks freed by channels whose members changed serve only channels of their length:
        // past a quarter of the entries, a graph built anew has none.
        if self.ex.free_entries() > self.ex.entries() / 4 {
            return Err(Stale);
        }
        // Past a sixteenth of the channels, building the graph anew costs less than updating
        // it and routing the change (a tenth took half as long again as a full plan). Counted
        // before the journal is sorted: sorting one that large would be wasted.
        let limit = index.channel_count() / 16;
        if journal.channels.len() > limit
            && distinct(&journal.channels, index.channel_count()) > limit
        {
            return Err(Stale);
        }
        let mut touched = journal.channels.clone();
        touched.sort_unstable();
        touched.dedup();
        self.ex.sort_new_pairs();
        self.ex.grow_channels(index.channel_count());

        let mut fresh = Vec::new();
        for &b in &journal.bots {
            let v = node(b) as usize;
            match (index.is_online(b), self.flow.active[v]) {
                (true, false) if !fresh.contains(&(v as u32)) => fresh.push(v as u32),
                (false, true) => {
                    self.flow.active[v] = false;
                    self.flow.f[v] = 0;
                }
                _ => {}
            }
        }

        let mut nodes: Vec<u32> = Vec::new();
        let mut changed = Vec::new();
        for &c in &touched {
            nodes.clear();
            nodes.extend(resolved.valid_bots(index, c).map(node));
            if self.ex.contains(c) && nodes.is_empty() {
                changed.push(c);
            }
            self.update_channel(index, c, &nodes, &fresh);
        }
        for &v in &fresh {
            self.activate(index, v);
        }

        // Routing the change costs about one look at each membership at most, and at most
        // eight looks at every arc of the bot graph, and starts from at most half the bots;
        // past that it reaches far (a bot of a flat fleet leaving raises every other bot's
        // level), and solving the levels again on the graph as it stands is cheaper, as a full
        // plan would but without building the graph.
        let budget = (self.ex.entries() as u64).min(8 * self.flow.sweep(&self.ex));
        if self.flow.settle_within(&mut self.ex, budget).is_err() {
            self.solve_levels();
        }
        changed.extend(self.rehome());
        changed.sort_unstable();
        changed.dedup();
        let placed = self.ex.channels_in_graph();
        Ok(Outcome::Changed {
            channels: changed
                .into_iter()
                .map(|c| (c, self.placed_on(c)))
                .collect(),
            assigned: placed,
            unassigned: index.channel_count() - resolved.excluded().count() - placed,
        })
    }

    /// Phases A and B of a full plan on the graph as it stands, every channel placed.
    fn solve_levels(&mut self) {
        let active = std::mem::take(&mut self.flow.active);
        let beta = levels::settle_levels(&mut self.ex, &active);
        self.ex.sort_new_pairs();
        self.flow = Flow::from_levels(&self.ex, &beta, active);
        for c in back_home(&self.ex, &beta) {
            self.ex.move_to(c, self.ex.home(c));
        }
        self.flow.settle(&mut self.ex);
    }

    /// Brings one channel's members in line with its new valid nodes.
    fn update_channel(&mut self, index: &PlatformIndex, c: ChanIx, valid: &[u32], fresh: &[u32]) {
        let ex = &mut self.ex;
        if !ex.contains(c) {
            if !valid.is_empty() {
                let home = index
                    .assignee(c)
                    .map(node)
                    .filter(|h| valid.contains(h))
                    .unwrap_or(NIL);
                ex.insert(c, valid, home, SOURCE);
            }
            return;
        }
        if valid.is_empty() {
            ex.remove(c);
            return;
        }
        let current: Vec<u32> = ex.members(c).collect();
        if ex.at(c) != SOURCE && !valid.contains(&ex.at(c)) {
            ex.move_to(c, SOURCE);
        }
        for &m in current.iter().filter(|m| !valid.contains(m)) {
            ex.remove_member(c, m);
        }
        let added: Vec<u32> = valid
            .iter()
            .copied()
            .filter(|m| !current.contains(m))
            .collect();
        for &m in &added {
            ex.add_member(c, m);
        }
        // A new arc may be cheaper than the invariant allows: take it right away; moving to the
        // most negative one leaves every arc of the channel non-negative again.
        let at = ex.at(c);
        if at == SOURCE {
            return;
        }
        let cheapest = added
            .iter()
            .filter(|m| !fresh.contains(m))
            .map(|&m| {
                let cost = Cost::moves(ex.kind_of(c, at, m).cost());
                (
                    cost + self.flow.pot[at as usize] - self.flow.pot[m as usize],
                    m,
                )
            })
            .min();
        if let Some((reduced, m)) = cheapest
            && reduced < Cost::ZERO
        {
            ex.move_to(c, m);
        }
    }

    /// A bot (back) online. Its channels elsewhere offer themselves at their current price
    /// (their bot's potential plus the move cost); the bot takes the cheapest while the j-th
    /// offer plus the j-th unit of load (2j − 1) is still below the sink's price, like a market
    /// clearing, and gets a price between the last offer taken and the first refused. Every arc
    /// at the bot is then non-negative; the donors' deficits are routed by the next settle.
    fn activate(&mut self, index: &PlatformIndex, v: u32) {
        let (ex, flow) = (&mut self.ex, &mut self.flow);
        // Channels waiting for this very bot alone (its single-bot channels, or pinned to it)
        // can only go here: they are its base load, not offers.
        let mut fixed = 0i64;
        for &c in index.channels_of(v - 1) {
            if ex.contains(c) && ex.at(c) == SOURCE && ex.members(c).all(|m| m == v) {
                ex.move_to(c, v);
                fixed += 1;
            }
        }
        let mut offers: Vec<(Cost, u32)> = index
            .channels_of(v - 1)
            .iter()
            .filter(|&&c| ex.contains(c) && ex.at(c) != SOURCE && ex.at(c) != v)
            .filter(|&&c| ex.members(c).any(|m| m == v))
            .map(|&c| {
                let at = ex.at(c);
                (
                    flow.pot[at as usize] + Cost::moves(ex.kind_of(c, at, v).cost()),
                    c,
                )
            })
            .collect();
        offers.sort_unstable();
        let mut units = fixed;
        let mut last = None;
        for &(price, c) in &offers {
            if flow.unit(v, units + 1) + price >= flow.sink_pot {
                break;
            }
            ex.move_to(c, v);
            units += 1;
            last = Some(price);
        }
        let floor = flow.sink_pot - flow.unit(v, units + 1);
        flow.active[v as usize] = true;
        flow.f[v as usize] = units;
        flow.pot[v as usize] = last.map_or(floor, |p| p.max(floor));
    }

    /// The plan is final and becomes the next one's previous assignment: every channel's current
    /// place becomes its home. Only channels the graph lists as displaced can be elsewhere: moved
    /// by this plan, but also placed away from home without a move (a full plan's first
    /// placement, which phases A and B may keep). Returns them: the only channels whose
    /// assignee may have changed.
    fn rehome(&mut self) -> Vec<u32> {
        let displaced = self.ex.take_displaced();
        for &c in &displaced {
            if self.ex.contains(c) {
                self.ex.set_home(c, self.ex.at(c));
            }
        }
        displaced
    }

    fn placed_on(&self, c: ChanIx) -> Option<BotIx> {
        match self.ex.at(c) {
            NIL | SOURCE => None,
            v => Some(v - 1),
        }
    }

    /// Every channel's bot.
    pub(crate) fn assignment(&self) -> Vec<Option<BotIx>> {
        (0..self.ex.channel_capacity() as u32)
            .map(|c| self.placed_on(c))
            .collect()
    }

    /// The plan as the channels whose bot differs from the index's: every channel's bot
    /// would be 80 MB at 10M channels, beside the graph at the plan's peak.
    pub(crate) fn outcome(&self, index: &PlatformIndex, resolved: &Resolved) -> Outcome {
        let (channels, assigned, unassigned) =
            crate::balance::changes_to(index, resolved, |c| self.placed_on(c));
        Outcome::Changed {
            channels,
            assigned,
            unassigned,
        }
    }
}

/// The positions of `keys` grouped by key, ascending, positions ascending within a key (a
/// counting sort); positions whose key is `NIL` are left out.
fn grouped(keys: &[u32]) -> Vec<u32> {
    let buckets = keys
        .iter()
        .filter(|&&k| k != NIL)
        .max()
        .map_or(0, |&k| k as usize + 1);
    let mut start = vec![0u32; buckets + 1];
    for &k in keys.iter().filter(|&&k| k != NIL) {
        start[k as usize + 1] += 1;
    }
    for i in 1..start.len() {
        start[i] += start[i - 1];
    }
    let mut out = vec![0u32; start[buckets] as usize];
    for (i, &k) in keys.iter().enumerate() {
        if k != NIL {
            out[start[k as usize] as usize] = i as u32;
            start[k as usize] += 1;
        }
    }
    out
}

/// How many distinct channels `channels` names, with a bit for each of the first `count`
/// (rounded up to 64) instead of a sort. A channel past those bits is counted every time it
/// appears: too many only ever means a full plan.
fn distinct(channels: &[ChanIx], count: usize) -> usize {
    let mut seen = vec![0u64; count.div_ceil(64)];
    channels
        .iter()
        .filter(|&&c| {
            let bit = 1u64 << (c % 64);
            seen.get_mut(c as usize / 64).is_none_or(|word| {
                let new = *word & bit == 0;
                *word |= bit;
                new
            })
        })
        .count()
}

/// How many channels sit away from their home: the channels re-homing would re-file. The
/// displaced list also names channels that moved and came back.
fn away_from_home(ex: &Exchange) -> usize {
    ex.displaced()
        .iter()
        .filter(|&&c| ex.at(c) != ex.home(c))
        .count()
}

/// Channels away from home whose home is on the same level as their place: moving them back
/// costs no Σ load², so the fewest-moves phase starts from there.
fn back_home(ex: &Exchange, beta: &[i64]) -> Vec<u32> {
    ex.displaced()
        .iter()
        .copied()
        .filter(|&c| {
            let (at, h) = (ex.at(c), ex.home(c));
            h != NIL
                && at != NIL
                && h != at
                && beta[h as usize] == beta[at as usize]
                && ex.members(c).any(|m| m == h)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{State, distinct};
    use crate::balance::Rules;
    use crate::index::{Journal, PlatformIndex};

    #[test]
    fn a_graph_with_a_quarter_of_its_entries_in_free_blocks_is_built_anew() {
        let mut p = PlatformIndex::new("onebot");
        let bots: Vec<_> = ["1", "2", "3"].iter().map(|b| p.add_bot(b)).collect();
        for c in 0..8 {
            let channel = p.add_channel(&format!("{}", 100 + c));
            for &b in &bots[..1 + c % 3] {
                p.join(b, channel);
            }
        }
        for &b in &bots {
            p.set_online(b, true);
        }
        p.take_journal();
        let resolved = Rules::default().resolve(&p);
        let mut state = State::build(&p, &resolved, true);
        assert!(state.replan(&p, &resolved, &Journal::default()).is_ok());
        // Channels leaving the graph free their blocks: a quarter of the entries and more.
        for c in 0..3 {
            state.ex.remove(c);
        }
        assert!(state.ex.free_entries() * 4 > state.ex.entries());
        assert!(state.replan(&p, &resolved, &Journal::default()).is_err());
    }

    #[test]
    fn distinct_counts_each_channel_once_and_out_of_range_ones_every_time() {
        assert_eq!(distinct(&[], 10), 0);
        assert_eq!(distinct(&[3, 3, 5, 70, 64, 3, 70], 100), 4);
        // 200 lies past the 100 channels: counted at each of its appearances.
        assert_eq!(distinct(&[1, 200, 200, 1], 100), 3);
    }
}
