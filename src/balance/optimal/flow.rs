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
//! at a non-negative reduced cost; successive shortest paths (Dijkstra on reduced costs, then
//! blocking flows on the zero-reduced-cost arcs) remove the imbalances while keeping that
//! invariant, so the balanced result is optimal. Because the invariant survives between plans,
//! a later plan only has to route what changed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::{Add, Sub};

use super::exchange::{Exchange, Kind, NIL, SOURCE};

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

/// One residual arc as the searches see it.
#[derive(Clone, Copy, Debug)]
enum Arc {
    /// Move a channel of this kind to node `to`.
    Move { to: u32, kind: Kind },
    /// Bot sends one more unit to T.
    ToSink,
    /// T takes one unit back from bot `to`.
    FromSink { to: u32 },
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
}

impl Flow {
    pub(crate) fn new(f: Vec<i64>, pot: Vec<Cost>, active: Vec<bool>) -> Self {
        Self {
            f,
            pot,
            sink_pot: Cost::ZERO,
            active,
            sum_f: 0,
        }
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

    fn reduced(&self, from: u32, to: u32, cost: Cost) -> Cost {
        cost + self.node_pot(from) - self.node_pot(to)
    }

    fn imbalance(&self, ex: &Exchange, v: u32) -> i64 {
        if v == self.sink() {
            self.sum_f - ex.channels_in_graph() as i64
        } else {
            ex.load(v) as i64 - self.f[v as usize]
        }
    }

    /// Number of arc positions out of `v` (some may be absent); see [`Flow::arc_at`].
    fn arc_positions(&self, ex: &Exchange, v: u32) -> usize {
        if v == self.sink() {
            self.f.len()
        } else {
            ex.nbrs(v).len() * 3 + 1
        }
    }

    /// The residual arc at position `i` out of `v` with its cost, if it exists.
    fn arc_at(&self, ex: &Exchange, v: u32, i: usize) -> Option<(Arc, Cost)> {
        if v == self.sink() {
            let b = i as u32;
            let f = self.f[i];
            return (self.active[i] && f > 0)
                .then(|| (Arc::FromSink { to: b }, Cost::load(-(2 * f - 1))));
        }
        let nbrs = ex.nbrs(v);
        if i < nbrs.len() * 3 {
            let (to, kind) = (nbrs[i / 3], Kind::ALL[i % 3]);
            return ex
                .has_arc(v, to, kind)
                .then(|| (Arc::Move { to, kind }, Cost::moves(kind.cost())));
        }
        self.active[v as usize].then(|| (Arc::ToSink, Cost::load(2 * self.f[v as usize] + 1)))
    }

    fn arc_target(&self, arc: Arc) -> u32 {
        match arc {
            Arc::Move { to, .. } | Arc::FromSink { to } => to,
            Arc::ToSink => self.sink(),
        }
    }

    /// Raises the source's price so its arcs have non-negative reduced cost; the source only
    /// ever sends, so any such price is valid.
    fn price_source(&mut self, ex: &Exchange) {
        let best = (0..self.arc_positions(ex, SOURCE))
            .filter_map(|i| self.arc_at(ex, SOURCE, i))
            .map(|(arc, cost)| self.node_pot(self.arc_target(arc)) - cost)
            .max();
        if let Some(best) = best {
            self.pot[SOURCE as usize] = best;
        }
    }

    /// Removes every imbalance along cheapest paths. Panics only on an infeasible state, which
    /// the caller rules out (every channel in the graph has a member that can absorb it).
    pub(crate) fn settle(&mut self, ex: &mut Exchange) {
        self.sum_f = self.f.iter().sum();
        let nodes = self.f.len() + 1;
        let mut search = Search::new(nodes);
        loop {
            let excess: Vec<u32> = (0..nodes as u32)
                .filter(|&v| self.imbalance(ex, v) > 0)
                .collect();
            if excess.is_empty() {
                return;
            }
            self.price_source(ex);
            let reach = search.dijkstra(self, ex, &excess);
            let reach = reach.expect("every unplaced channel has a bot that can take it");
            for v in 0..nodes as u32 {
                let d = search.dist[v as usize].map_or(reach, |d| d.min(reach));
                if v == self.sink() {
                    self.sink_pot = self.sink_pot + d;
                } else {
                    self.pot[v as usize] = self.pot[v as usize] + d;
                }
            }
            while search.layer(self, ex, &excess) {
                for &s in &excess {
                    while self.imbalance(ex, s) > 0 && search.augment(self, ex, s) {}
                }
            }
        }
    }
}

struct Search {
    dist: Vec<Option<Cost>>,
    hops: Vec<u32>,
    cursor: Vec<usize>,
    queue: Vec<u32>,
    path: Vec<(u32, Arc)>,
}

impl Search {
    fn new(nodes: usize) -> Self {
        Self {
            dist: vec![None; nodes],
            hops: vec![NIL; nodes],
            cursor: vec![0; nodes],
            queue: Vec::new(),
            path: Vec::new(),
        }
    }

    /// Reduced distances from the excess nodes; returns the distance to the nearest deficit.
    fn dijkstra(&mut self, flow: &Flow, ex: &Exchange, sources: &[u32]) -> Option<Cost> {
        self.dist.fill(None);
        let mut settled = vec![false; self.dist.len()];
        let mut heap = BinaryHeap::new();
        for &s in sources {
            self.dist[s as usize] = Some(Cost::ZERO);
            heap.push(Reverse((Cost::ZERO, s)));
        }
        while let Some(Reverse((d, v))) = heap.pop() {
            if settled[v as usize] {
                continue;
            }
            settled[v as usize] = true;
            if flow.imbalance(ex, v) < 0 {
                return Some(d);
            }
            for i in 0..flow.arc_positions(ex, v) {
                let Some((arc, cost)) = flow.arc_at(ex, v, i) else {
                    continue;
                };
                let to = flow.arc_target(arc);
                let r = flow.reduced(v, to, cost);
                debug_assert!(r >= Cost::ZERO, "negative reduced cost {r:?} on {v}->{to}");
                let nd = d + r;
                if !settled[to as usize] && self.dist[to as usize].is_none_or(|old| nd < old) {
                    self.dist[to as usize] = Some(nd);
                    heap.push(Reverse((nd, to)));
                }
            }
        }
        None
    }

    fn admissible(flow: &Flow, v: u32, arc: Arc, cost: Cost) -> bool {
        flow.reduced(v, flow.arc_target(arc), cost) == Cost::ZERO
    }

    /// Hop layers over zero-reduced-cost arcs; true if some deficit is reachable.
    fn layer(&mut self, flow: &Flow, ex: &Exchange, sources: &[u32]) -> bool {
        self.hops.fill(NIL);
        self.queue.clear();
        for &s in sources {
            if flow.imbalance(ex, s) > 0 {
                self.hops[s as usize] = 0;
                self.queue.push(s);
            }
        }
        let mut reached = false;
        let mut head = 0;
        while head < self.queue.len() {
            let v = self.queue[head];
            head += 1;
            if flow.imbalance(ex, v) < 0 {
                reached = true;
                continue;
            }
            let next = self.hops[v as usize] + 1;
            for i in 0..flow.arc_positions(ex, v) {
                let Some((arc, cost)) = flow.arc_at(ex, v, i) else {
                    continue;
                };
                let to = flow.arc_target(arc);
                if self.hops[to as usize] == NIL && Self::admissible(flow, v, arc, cost) {
                    self.hops[to as usize] = next;
                    self.queue.push(to);
                }
            }
        }
        self.cursor.fill(0);
        reached
    }

    /// Finds one layered admissible path from `s` to a deficit and pushes a unit along it.
    fn augment(&mut self, flow: &mut Flow, ex: &mut Exchange, s: u32) -> bool {
        self.path.clear();
        let mut v = s;
        loop {
            if v != s && flow.imbalance(ex, v) < 0 {
                break;
            }
            match self.next_arc(flow, ex, v) {
                Some(arc) => {
                    self.path.push((v, arc));
                    v = flow.arc_target(arc);
                }
                None => {
                    self.hops[v as usize] = NIL;
                    match self.path.pop() {
                        Some((parent, _)) => {
                            self.cursor[parent as usize] += 1;
                            v = parent;
                        }
                        None => return false,
                    }
                }
            }
        }
        for &(from, arc) in &self.path {
            match arc {
                Arc::Move { to, kind } => {
                    let channel = ex.channel_on_arc(from, to, kind).expect("admissible arc");
                    ex.move_to(channel, to);
                }
                Arc::ToSink => {
                    flow.f[from as usize] += 1;
                    flow.sum_f += 1;
                }
                Arc::FromSink { to } => {
                    flow.f[to as usize] -= 1;
                    flow.sum_f -= 1;
                }
            }
        }
        true
    }

    /// The arc at `v`'s cursor (advancing past unusable ones) that continues a layered path.
    fn next_arc(&mut self, flow: &Flow, ex: &Exchange, v: u32) -> Option<Arc> {
        let next = self.hops[v as usize].wrapping_add(1);
        let positions = flow.arc_positions(ex, v);
        let cursor = &mut self.cursor[v as usize];
        while *cursor < positions {
            if let Some((arc, cost)) = flow.arc_at(ex, v, *cursor) {
                let to = flow.arc_target(arc);
                if self.hops[to as usize] == next && Self::admissible(flow, v, arc, cost) {
                    return Some(arc);
                }
            }
            *cursor += 1;
        }
        None
    }
}
