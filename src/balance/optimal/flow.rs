//! Phase B: fewest moves among the least-Σ-load² placements, as a min-cost flow.
//!
//! Every channel is a unit of flow from where it sits to a sink `T`; bot `b` sends `f_b` units
//! to `T` at the convex cost `f_b²`. A move costs one unit of a second, lexicographically
//! smaller currency, so the optimum minimises Σ load² first and moves second ([`Cost`]). Arcs
//! between bots come from the exchange graph (−1/0/+1 moves); `b → T` costs `2f_b + 1` and
//! `T → b` refunds `2f_b − 1`.
//!
//! The state is a *pseudoflow*: a bot may hold more or fewer channels than it sends to `T`, and
//! [`SOURCE`] holds channels not placed yet. Dual prices ("potentials") keep every residual arc
//! at a non-negative reduced cost; successive shortest paths remove the imbalances while
//! keeping that invariant, so the balanced result is optimal. Each phase is one Dijkstra that
//! stops at the nearest imbalance of the other sign: forward from a bot with excess, or, when
//! the sink itself has excess (its arcs reach every bot), backward from a bot with a deficit.
//! A bot whose imbalance its own arc to or from the sink can take, with no other arc at it
//! turning negative under its new price, is settled first without a search (what that search
//! would have found, one unit at a time).
//! Because the invariant survives between plans, a later plan only routes what changed.
//!
//! A bot's capacity makes each unit past it dearer by a penalty larger than any difference of
//! Σ load² two placements can have (more than n² for n channels): the marginal costs stay
//! increasing, so the cost stays convex and everything above holds, and the optimum puts the
//! least excess over capacities first, then Σ load², then moves.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::{Add, Sub};

use super::exchange::{Exchange, Kind, Nbr, SOURCE};

/// A lexicographic cost: Σ load² first, moved channels second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Cost {
    pub load: i64,
    pub moves: i64,
}

impl Cost {
    pub(crate) const ZERO: Cost = Cost { load: 0, moves: 0 };

    pub(crate) fn load(load: i64) -> Self {
        Cost { load, moves: 0 }
    }

    pub(crate) fn moves(moves: i64) -> Self {
        Cost { load: 0, moves }
    }
}

impl Add for Cost {
    type Output = Cost;
    fn add(self, o: Cost) -> Cost {
        Cost {
            load: self.load + o.load,
            moves: self.moves + o.moves,
        }
    }
}

impl Sub for Cost {
    type Output = Cost;
    fn sub(self, o: Cost) -> Cost {
        Cost {
            load: self.load - o.load,
            moves: self.moves - o.moves,
        }
    }
}

/// The cost of a bot's `j`-th unit to T: `2j − 1`, and `penalty` past its capacity `cap`.
fn unit_cost(j: i64, cap: i64, penalty: i64) -> Cost {
    Cost::load(2 * j - 1 + if j > cap { penalty } else { 0 })
}

/// What crossing a residual arc does.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// Move a channel of this kind along the arc (whose pair has this slot).
    Move(Kind, u32),
    /// The bot sends one more unit to T.
    ToSink,
    /// T takes one unit back from the bot.
    FromSink,
}

#[derive(Clone, Copy, Debug)]
struct Step {
    from: u32,
    to: u32,
    op: Op,
    cost: Cost,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// From an excess towards a deficit, along arcs.
    Forward,
    /// From a deficit back towards an excess, against arcs.
    Backward,
}

/// Flow state kept next to the exchange graph.
pub(crate) struct Flow {
    /// Units each node sends to T.
    pub f: Vec<i64>,
    /// Dual prices per node; the sink's is `sink_pot`.
    pub pot: Vec<Cost>,
    pub sink_pot: Cost,
    /// Nodes that may send to T (active bots).
    pub active: Vec<bool>,
    /// Σ f, kept while settling so the sink's imbalance is O(1).
    sum_f: i64,
    /// Each node's capacity (`i64::MAX`: none) and what a unit past it costs more.
    cap: Vec<i64>,
    penalty: i64,
}

/// Where a settle's imbalances lie.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Spread {
    /// At a few bots: one search per start keeps the work near them.
    Local,
    /// At most bots: searches from all of them at once.
    Global,
}

/// A settle stopped at its budget, or gave up because the imbalances were not local
/// (see [`Flow::settle_within`]).
#[derive(Debug)]
pub(crate) struct OverBudget;

impl Flow {
    pub(crate) fn new(f: Vec<i64>, pot: Vec<Cost>, active: Vec<bool>) -> Self {
        Self {
            f,
            pot,
            sink_pot: Cost::ZERO,
            cap: vec![i64::MAX; active.len()],
            active,
            sum_f: 0,
            penalty: 0,
        }
    }

    /// Capacities per node (`i64::MAX`: none) and the penalty of a unit past one. A bot over
    /// its capacity sends only its capacity to T: the prices phase A gave stay valid (the arc
    /// to T only got dearer, the refund of the capacity's unit is what it was), and the
    /// excess is routed by the next settle.
    pub(crate) fn with_capacities(mut self, cap: Vec<i64>, penalty: i64) -> Self {
        for (f, &c) in self.f.iter_mut().zip(&cap) {
            *f = (*f).min(c);
        }
        self.cap = cap;
        self.penalty = penalty;
        self
    }

    /// The cost of bot `v`'s `j`-th unit to T: `2j − 1`, and the penalty past its capacity.
    pub(crate) fn unit(&self, v: u32, j: i64) -> Cost {
        unit_cost(j, self.cap[v as usize], self.penalty)
    }

    /// The flow phase A leaves: every bot sends its load to T, at the price its level β
    /// gives it (`1 − 2β`), which keeps every arc between placed channels non-negative.
    pub(crate) fn from_levels(ex: &Exchange, beta: &[i64], active: Vec<bool>) -> Self {
        let f = (0..beta.len() as u32).map(|v| ex.load(v) as i64).collect();
        let pot = (0..beta.len())
            .map(|v| Cost::load(if active[v] { 1 - 2 * beta[v] } else { 0 }))
            .collect();
        Self::new(f, pot, active)
    }

    fn sink(&self) -> u32 {
        self.f.len() as u32
    }

    fn node_pot(&self, v: u32) -> Cost {
        if v == self.sink() {
            self.sink_pot
        } else {
            self.pot[v as usize]
        }
    }

    fn add_pot(&mut self, v: u32, delta: Cost) {
        if v == self.sink() {
            self.sink_pot = self.sink_pot + delta;
        } else {
            self.pot[v as usize] = self.pot[v as usize] + delta;
        }
    }

    fn reduced(&self, step: &Step) -> Cost {
        step.cost + self.node_pot(step.from) - self.node_pot(step.to)
    }

    fn imbalance(&self, ex: &Exchange, v: u32) -> i64 {
        if v == self.sink() {
            self.sum_f - ex.channels_in_graph() as i64
        } else {
            ex.load(v) as i64 - self.f[v as usize]
        }
    }

    fn sink_step(&self, b: u32) -> Option<Step> {
        self.active[b as usize].then(|| Step {
            from: b,
            to: self.sink(),
            op: Op::ToSink,
            cost: self.unit(b, self.f[b as usize] + 1),
        })
    }

    fn refund_step(&self, b: u32) -> Option<Step> {
        let f = self.f[b as usize];
        (self.active[b as usize] && f > 0).then(|| Step {
            from: self.sink(),
            to: b,
            op: Op::FromSink,
            cost: Cost::ZERO - self.unit(b, f),
        })
    }

    /// The cheapest arc of a bot pair. The three kinds of a pair join the same two nodes and
    /// differ only in their move cost (−1, 0, +1), so their reduced costs differ by the same:
    /// a search needs the cheapest only, and a push along a zero-reduced-cost path can only use
    /// it (the others cost more than zero).
    fn move_step(ex: &Exchange, from: u32, to: u32, slot: u32) -> Option<Step> {
        let kind = ex.cheapest_kind_in(slot)?;
        Some(Step {
            from,
            to,
            op: Op::Move(kind, slot),
            cost: Cost::moves(kind.cost()),
        })
    }

    /// Number of step positions at `v` in direction `dir`; see [`Flow::step`].
    fn steps(&self, ex: &Exchange, v: u32, dir: Dir) -> usize {
        if v == self.sink() {
            self.f.len()
        } else {
            self.nbr_list(ex, v, dir).len() + 1
        }
    }

    /// The cheapest residual arc at position `i` out of (forward) or into (backward) `v`, if
    /// any. A bot's arc to or from the sink comes first: it is the usual way out; then one
    /// position per neighbour.
    fn step(&self, ex: &Exchange, v: u32, i: usize, dir: Dir) -> Option<Step> {
        match dir {
            Dir::Forward if v == self.sink() => self.refund_step(i as u32),
            Dir::Backward if v == self.sink() => self.sink_step(i as u32),
            Dir::Forward if i == 0 => self.sink_step(v),
            Dir::Backward if i == 0 => self.refund_step(v),
            _ => Self::neighbour_step(ex, v, self.nbr_list(ex, v, dir)[i - 1], dir),
        }
    }

    /// The cheapest arc between bot `v` and its neighbour `n`: out of `v` (forward) or into
    /// it (backward).
    fn neighbour_step(ex: &Exchange, v: u32, n: Nbr, dir: Dir) -> Option<Step> {
        match dir {
            Dir::Forward => Self::move_step(ex, v, n.node, n.slot),
            Dir::Backward => Self::move_step(ex, n.node, v, n.slot),
        }
    }

    /// The node at the far end (in direction `dir`) of position `i` at `v`, read from the
    /// neighbour list alone: [`Flow::step`] also reads the pair's arcs, which lie elsewhere in
    /// memory, so a search rules out settled nodes first.
    fn far_node(&self, ex: &Exchange, v: u32, i: usize, dir: Dir) -> u32 {
        if v == self.sink() {
            i as u32
        } else if i == 0 {
            self.sink()
        } else {
            self.nbr_list(ex, v, dir)[i - 1].node
        }
    }

    /// Bot `v`'s neighbours in direction `dir`: where its arcs go (forward) or come from
    /// (backward). Position `i > 0` of [`Flow::step`] is neighbour `i - 1`.
    fn nbr_list<'e>(&self, ex: &'e Exchange, v: u32, dir: Dir) -> &'e [Nbr] {
        match dir {
            Dir::Forward => ex.nbrs(v),
            Dir::Backward => ex.rnbrs(v),
        }
    }

    /// The reduced cost of an arc between a bot priced `own_pot` and its neighbour `far`
    /// (in direction `dir`), less the arc's move cost.
    fn gap(&self, own_pot: Cost, far: u32, dir: Dir) -> Cost {
        match dir {
            Dir::Forward => own_pot - self.pot[far as usize],
            Dir::Backward => self.pot[far as usize] - own_pot,
        }
    }

    fn apply(&mut self, ex: &mut Exchange, step: &Step) {
        match step.op {
            Op::Move(kind, slot) => {
                let channel = ex.channel_in(slot, kind).expect("admissible arc");
                ex.move_to(channel, step.to);
            }
            Op::ToSink => {
                self.f[step.from as usize] += 1;
                self.sum_f += 1;
            }
            Op::FromSink => {
                self.f[step.to as usize] -= 1;
                self.sum_f -= 1;
            }
        }
    }

    /// Moves every channel waiting on the source along its cheapest arc (highest price net of
    /// the move cost), so every arc the channel then offers stays non-negative. Among equally
    /// cheap members the one with the most room under its flow to T takes it, so most channels
    /// land where they can stay.
    fn place_waiting(&mut self, ex: &mut Exchange) {
        // Nothing joins the source while its channels leave, so a pair once found empty stays
        // empty: each look for the next waiting channel resumes at the pair the last one was
        // found in. One pass over the source's pairs in all, where starting over every time
        // read the emptied ones again for every channel (waiting channels × pairs).
        let mut from = 0;
        while ex.load(SOURCE) > 0 {
            let (found, channel) = ex.nbrs(SOURCE)[from..]
                .iter()
                .enumerate()
                .find_map(|(i, n)| Some((from + i, ex.any_channel_in(n.slot)?)))
                .expect("a waiting channel has a member");
            from = found;
            let best = ex
                .members(channel)
                .max_by_key(|&m| {
                    let cost = Cost::moves(ex.kind_of(channel, SOURCE, m).cost());
                    let room = self.f[m as usize] - ex.load(m) as i64;
                    (self.pot[m as usize] - cost, room, std::cmp::Reverse(m))
                })
                .expect("a waiting channel has a member");
            ex.move_to(channel, best);
        }
    }

    /// Removes every imbalance along cheapest paths. Panics only on an infeasible state, which
    /// the caller rules out (every channel in the graph has a member that can absorb it).
    ///
    /// A phase starts from one bot with an excess (then, once none is left, from one with a
    /// deficit), so a local change stays a local search. When more than half the bots start
    /// with an imbalance, or once the searches have looked at every arc of the bot graph a few
    /// times over, the imbalances are not local (a bot leaving a flat fleet raises every other
    /// bot's load by one or two) and each phase starts from all of them at once, as from one
    /// super source: one search then prices every bot's next unit to the sink together, where
    /// one search per bot priced only a few.
    pub(crate) fn settle(&mut self, ex: &mut Exchange) {
        self.settle_within(ex, u64::MAX)
            .expect("an unlimited budget is never exceeded");
    }

    /// [`Flow::settle`], but it stops between phases once it has looked at more than `budget`
    /// residual arcs (a pair's cheapest arc counts one); the state is then consistent (valid
    /// prices, fewer imbalances) but not settled. It gives up at once when more than half the
    /// active bots have an imbalance to start from: the change is not local (a
    /// bot of a flat fleet leaving puts its channels on nearly every other bot), each phase
    /// would search most of the graph, and the caller's full solve costs less.
    pub(crate) fn settle_within(
        &mut self,
        ex: &mut Exchange,
        budget: u64,
    ) -> Result<(), OverBudget> {
        ex.reverse_pairs();
        self.sum_f = self.f.iter().sum();
        self.place_waiting(ex);
        let mut search = Search::new(self.f.len() + 1);
        let sweep = self.sweep(ex);
        let mut starts = Vec::new();
        for dir in [Dir::Forward, Dir::Backward] {
            // A push only lowers the imbalances at its two ends, so the bots to start from are
            // listed once per direction and only shrink.
            let mut pending: Vec<u32> = (0..self.f.len() as u32)
                .filter(|&v| self.needs(ex, v, dir))
                .collect();
            // Imbalances at more than half the active bots are not local (a bot of a flat fleet
            // leaving puts its channels on nearly every other bot): a budgeted settle leaves
            // them to the caller's full solve, an unlimited one starts from all of them at once.
            let spread = if 2 * pending.len() > self.active.iter().filter(|&&a| a).count() {
                Spread::Global
            } else {
                Spread::Local
            };
            if budget != u64::MAX && spread == Spread::Global {
                return Err(OverBudget);
            }
            if spread == Spread::Local {
                pending.retain(|&v| !self.settle_at_sink(ex, v, dir, &mut search.work));
            }
            loop {
                pending.retain(|&v| self.needs(ex, v, dir));
                if pending.is_empty() {
                    break;
                }
                starts.clear();
                starts.extend_from_slice(&pending);
                if search.work > budget {
                    return Err(OverBudget);
                }
                if spread == Spread::Local && search.work <= 4 * sweep {
                    starts.truncate(1);
                }
                self.phase(ex, &mut search, &starts, dir);
            }
        }
        debug_assert_eq!(self.imbalance(ex, self.sink()), 0);
        Ok(())
    }

    /// Removes what it can of bot `v`'s imbalance along its own arc to the sink (an excess,
    /// while the sink lacks units) or from it (a deficit, while the sink has units to spare),
    /// as far as every other residual arc at `v` stays non-negative under `v`'s new price.
    /// A phase would find that same path first (its nearest end, reached before any other
    /// arc at `v` leads anywhere) and price `v` the same way, but at the cost of a search per
    /// unit, each followed by a failed look for one more: a bot that gave a few channels to
    /// a bot back online is settled with one look at its arcs instead. Adds the arcs it looked
    /// at to `work`; returns whether `v` is balanced.
    fn settle_at_sink(&mut self, ex: &Exchange, v: u32, dir: Dir, work: &mut u64) -> bool {
        let (f, pot, sink) = (self.f[v as usize], self.pot[v as usize], self.sink_pot);
        let (cap, penalty) = (self.cap[v as usize], self.penalty);
        let (own, at_sink) = (self.imbalance(ex, v), self.imbalance(ex, self.sink()));
        let units = match dir {
            Dir::Forward => own.min(-at_sink),
            Dir::Backward => (-own).min(at_sink).min(f),
        };
        if !self.active[v as usize] || units <= 0 {
            return false;
        }
        // `v`'s price once it sends `k` units more (forward) or fewer (backward) to the sink:
        // the nearest price to today's at which both of its sink arcs are non-negative.
        let price = |k: i64| match dir {
            Dir::Forward => pot.min(sink - unit_cost(f + k, cap, penalty)),
            Dir::Backward => pot.max(sink - unit_cost(f - k + 1, cap, penalty)),
        };
        // Lowering the price (forward) makes the arcs out of `v` cheaper, raising it (backward)
        // the arcs into `v`; the tightest of them bounds the price. Arcs whose cheapest
        // possible kind stays non-negative even at the furthest price need not be read.
        let furthest = price(units);
        let mut limit: Option<Cost> = None;
        *work += self.steps(ex, v, dir) as u64;
        for &n in self.nbr_list(ex, v, dir) {
            let returning = Cost::moves(Kind::Return.cost());
            if returning + self.gap(furthest, n.node, dir) >= Cost::ZERO {
                continue;
            }
            let Some(step) = Self::neighbour_step(ex, v, n, dir) else {
                continue;
            };
            // The price of `v` at which this arc's reduced cost is zero.
            let bound = match dir {
                Dir::Forward => self.pot[n.node as usize] - step.cost,
                Dir::Backward => step.cost + self.pot[n.node as usize],
            };
            limit = Some(match (limit, dir) {
                (None, _) => bound,
                (Some(l), Dir::Forward) => l.max(bound),
                (Some(l), Dir::Backward) => l.min(bound),
            });
        }
        let fits = |k: i64| match (limit, dir) {
            (None, _) => true,
            (Some(l), Dir::Forward) => price(k) >= l,
            (Some(l), Dir::Backward) => price(k) <= l,
        };
        let mut k = 0;
        while k < units && fits(k + 1) {
            k += 1;
        }
        if k == 0 {
            return false;
        }
        let delta = if dir == Dir::Forward { k } else { -k };
        self.f[v as usize] += delta;
        self.sum_f += delta;
        self.pot[v as usize] = price(k);
        k == own.abs()
    }

    /// The work of one look at every residual arc of the bot graph (cheapest arcs only), in
    /// the unit of a settle's budget.
    pub(crate) fn sweep(&self, ex: &Exchange) -> u64 {
        (0..self.f.len() as u32)
            .map(|v| self.steps(ex, v, Dir::Forward) as u64)
            .sum()
    }

    /// Whether bot `v` has an imbalance a search in direction `dir` starts from.
    fn needs(&self, ex: &Exchange, v: u32, dir: Dir) -> bool {
        v != SOURCE
            && match dir {
                Dir::Forward => self.imbalance(ex, v) > 0,
                Dir::Backward => self.imbalance(ex, v) < 0,
            }
    }

    /// One shortest-path phase from `starts`, then as many pushes along zero-reduced-cost paths
    /// inside the searched region as the starts need.
    fn phase(&mut self, ex: &mut Exchange, search: &mut Search, starts: &[u32], dir: Dir) {
        let want = starts.iter().map(|&v| self.imbalance(ex, v).abs()).sum();
        let reach = search
            .dijkstra(self, ex, starts, dir, want)
            .expect("every channel has a bot that can take it");
        // π += min(d, D) forward (π −= min(d, D) backward), less a constant: only settled
        // nodes change.
        for i in 0..search.settled.len() {
            let v = search.settled[i];
            let d = search.dist[v as usize].expect("settled");
            let delta = if dir == Dir::Forward {
                d - reach
            } else {
                reach - d
            };
            self.add_pot(v, delta);
        }
        for &s in starts {
            while self.needs(ex, s, dir) && search.augment(self, ex, s, dir) {}
        }
    }
}

/// Scratch space of the searches, reset through the lists of touched nodes.
struct Search {
    dist: Vec<Option<Cost>>,
    touched: Vec<u32>,
    settled: Vec<u32>,
    region: Vec<bool>,
    dead: Vec<bool>,
    on_path: Vec<bool>,
    cursor: Vec<usize>,
    path: Vec<Step>,
    /// Residual arcs looked at so far: the work done, for the settle's budget.
    work: u64,
}

impl Search {
    fn new(nodes: usize) -> Self {
        Self {
            dist: vec![None; nodes],
            touched: Vec::new(),
            settled: Vec::new(),
            region: vec![false; nodes],
            dead: vec![false; nodes],
            on_path: vec![false; nodes],
            cursor: vec![0; nodes],
            path: Vec::new(),
            work: 0,
        }
    }

    fn reset(&mut self) {
        for &v in &self.touched {
            self.dist[v as usize] = None;
        }
        for &v in &self.settled {
            let v = v as usize;
            self.region[v] = false;
            self.dead[v] = false;
            self.cursor[v] = 0;
        }
        self.touched.clear();
        self.settled.clear();
    }

    /// The node at the far end of a step in the search direction.
    fn far(step: &Step, dir: Dir) -> u32 {
        match dir {
            Dir::Forward => step.to,
            Dir::Backward => step.from,
        }
    }

    /// Whether `v` ends a search that started from an imbalance in direction `dir`.
    fn is_end(flow: &Flow, ex: &Exchange, v: u32, dir: Dir) -> bool {
        match dir {
            Dir::Forward => flow.imbalance(ex, v) < 0,
            Dir::Backward => flow.imbalance(ex, v) > 0,
        }
    }

    /// Reduced distances from `starts` (all at 0) until the nearest imbalance of the other
    /// sign is settled at distance D; returns D. When the starts have more than one unit to
    /// move, it goes on until `want` such ends are settled or the distance exceeds D, so one
    /// phase can serve them all. Settled nodes form the region the pushes of this phase stay in.
    fn dijkstra(
        &mut self,
        flow: &Flow,
        ex: &Exchange,
        starts: &[u32],
        dir: Dir,
        want: i64,
    ) -> Option<Cost> {
        self.reset();
        let mut heap = BinaryHeap::new();
        for &start in starts {
            self.dist[start as usize] = Some(Cost::ZERO);
            self.touched.push(start);
            heap.push(Reverse((Cost::ZERO, true, start)));
        }
        let mut reach: Option<Cost> = None;
        let mut ends = 0;
        // The nearest end found so far bounds the search: the search stops past the nearest
        // end's distance, and a node beyond the bound cannot lead to a nearer end (reduced
        // costs are non-negative), so it need not enter the heap; with one unit to move, nor
        // need a node at the bound. A bot with many neighbours and a cheap way to the sink
        // then costs a look at each neighbour, not a heap entry for each.
        let mut bound: Option<Cost> = None;
        while let Some(Reverse((d, not_end, v))) = heap.pop() {
            if reach.is_some_and(|r| d > r) {
                break;
            }
            if self.region[v as usize] || self.dist[v as usize] != Some(d) {
                continue;
            }
            self.region[v as usize] = true;
            self.settled.push(v);
            if !not_end {
                reach.get_or_insert(d);
                ends += 1;
                if ends >= want {
                    break;
                }
                continue;
            }
            self.work += flow.steps(ex, v, dir) as u64;
            let beyond = |nd: Cost, bound: Option<Cost>| {
                bound.is_some_and(|b| nd > b || (nd == b && want == 1))
            };
            // Relaxes the arc to `to` of reduced cost `r` (a `continue` skips it).
            macro_rules! relax {
                ($to:expr, $r:expr) => {{
                    let (to, r): (u32, Cost) = ($to, $r);
                    debug_assert!(r >= Cost::ZERO, "negative reduced cost {r:?}: {v} to {to}");
                    let nd = d + r;
                    if beyond(nd, bound) {
                        continue;
                    }
                    if self.dist[to as usize].is_none_or(|old| nd < old) {
                        if self.dist[to as usize].is_none() {
                            self.touched.push(to);
                        }
                        self.dist[to as usize] = Some(nd);
                        let end = Self::is_end(flow, ex, to, dir);
                        if end && r == Cost::ZERO {
                            // Nothing left in the heap is closer than `d`: settle it now.
                            self.region[to as usize] = true;
                            self.settled.push(to);
                            reach.get_or_insert(nd);
                            ends += 1;
                            if ends >= want {
                                return reach;
                            }
                            continue;
                        }
                        if end {
                            bound = Some(bound.map_or(nd, |b| b.min(nd)));
                        }
                        heap.push(Reverse((nd, !end, to)));
                    }
                }};
            }
            // The arcs `step` reads one position at a time: the sink's to or from every bot, a
            // bot's to or from the sink. A settled node keeps its distance.
            let sink = flow.sink();
            let own = if v == sink { flow.f.len() } else { 1 };
            for i in 0..own {
                let far = flow.far_node(ex, v, i, dir);
                if self.region[far as usize] {
                    continue;
                }
                let Some(step) = flow.step(ex, v, i, dir) else {
                    continue;
                };
                relax!(far, flow.reduced(&step));
            }
            if v == sink {
                continue;
            }
            // A bot's arcs to or from its neighbours, the search's hottest loop: one list, read
            // in order. Against the bound, the neighbour's price first (no arc of the pair costs
            // less than a returning move), then the pair's arcs, which lie elsewhere in memory
            // (a cache miss per neighbour on a large graph).
            let (nbrs, own_pot) = (flow.nbr_list(ex, v, dir), flow.pot[v as usize]);
            for &n in nbrs {
                if self.region[n.node as usize] {
                    continue;
                }
                let gap = flow.gap(own_pot, n.node, dir);
                if beyond(d + Cost::moves(Kind::Return.cost()) + gap, bound) {
                    continue;
                }
                let Some(step) = Flow::neighbour_step(ex, v, n, dir) else {
                    continue;
                };
                relax!(n.node, step.cost + gap);
            }
        }
        reach
    }

    /// Finds a zero-reduced-cost path from `start` to an imbalance of the other sign inside the
    /// settled region and pushes one unit along it.
    fn augment(&mut self, flow: &mut Flow, ex: &mut Exchange, start: u32, dir: Dir) -> bool {
        self.path.clear();
        let mut v = start;
        self.on_path[start as usize] = true;
        let found = loop {
            if v != start && Self::is_end(flow, ex, v, dir) {
                break true;
            }
            match self.next_step(flow, ex, v, dir) {
                Some(step) => {
                    self.path.push(step);
                    v = Self::far(&step, dir);
                    self.on_path[v as usize] = true;
                }
                None => {
                    self.dead[v as usize] = true;
                    self.on_path[v as usize] = false;
                    match self.path.pop() {
                        Some(step) => {
                            v = match dir {
                                Dir::Forward => step.from,
                                Dir::Backward => step.to,
                            };
                            self.cursor[v as usize] += 1;
                        }
                        None => break false,
                    }
                }
            }
        };
        for step in &self.path {
            self.on_path[step.from as usize] = false;
            self.on_path[step.to as usize] = false;
        }
        self.on_path[start as usize] = false;
        if !found {
            return false;
        }
        for step in &self.path {
            flow.apply(ex, step);
        }
        true
    }

    /// The step at `v`'s cursor (advancing past unusable ones) that continues a path: zero
    /// reduced cost, into the region, not back onto the path, not into a dead end.
    fn next_step(&mut self, flow: &Flow, ex: &Exchange, v: u32, dir: Dir) -> Option<Step> {
        let positions = flow.steps(ex, v, dir);
        // The sink's positions, and a bot's arc to or from the sink, one at a time.
        while self.cursor[v as usize] < positions
            && (v == flow.sink() || self.cursor[v as usize] == 0)
        {
            self.work += 1;
            let i = self.cursor[v as usize];
            let far = flow.far_node(ex, v, i, dir) as usize;
            // The far node first: the region is small, and the arc lies elsewhere in memory.
            if self.is_open(far)
                && let Some(step) = flow.step(ex, v, i, dir)
                && flow.reduced(&step) == Cost::ZERO
            {
                return Some(step);
            }
            self.cursor[v as usize] += 1;
        }
        if v == flow.sink() {
            return None;
        }
        // A bot's neighbours (position `j + 1` is neighbour `j`), read in order.
        let (nbrs, own_pot) = (flow.nbr_list(ex, v, dir), flow.pot[v as usize]);
        let from = self.cursor[v as usize] - 1;
        for (j, &n) in nbrs.iter().enumerate().skip(from) {
            if self.is_open(n.node as usize)
                && let Some(step) = Flow::neighbour_step(ex, v, n, dir)
                && step.cost + flow.gap(own_pot, n.node, dir) == Cost::ZERO
            {
                self.work += (j + 1 - from) as u64;
                self.cursor[v as usize] = j + 1;
                return Some(step);
            }
        }
        self.work += (nbrs.len() - from) as u64;
        self.cursor[v as usize] = positions;
        None
    }

    /// Whether a path may continue to `v`: in the region, not a dead end, not on the path.
    fn is_open(&self, v: usize) -> bool {
        self.region[v] && !self.dead[v] && !self.on_path[v]
    }
}
