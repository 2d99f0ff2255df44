//! Phase A: least Σ load², by cost-reducing paths on the exchange graph.
//!
//! A placement is optimal iff no *cost-reducing path* exists: a chain of channel moves from a bot
//! of load L to a bot of load ≤ L − 2 (Harvey, Ladner, Lovász, Tamir). We remove them top down.
//! With L the largest load among bots not yet settled, every bot at L tries to pass one channel
//! down a path to a bot at ≤ L − 2 (a max-flow round, Dinic style, one unit per source). Bots
//! still at L afterwards cannot, so they and everything they reach (all at L or L − 1) are
//! settled as one *level* with value β = L: nothing can ever leave it. The next round starts at
//! the next largest load. When every bot is settled, no cost-reducing path exists anywhere.
//!
//! The levels are what the flow phase needs: every optimal placement keeps each level's bots at
//! loads β − 1 or β, and `−(2β − 1)` is a valid dual price for each bot.

use super::exchange::{Exchange, NIL, Nbr};

/// Runs phase A on the nodes marked `active` and returns β per node (0 for inactive nodes).
pub(crate) fn settle_levels(ex: &mut Exchange, active: &[bool]) -> Vec<i64> {
    let width = ex.width();
    let mut frozen: Vec<bool> = active.iter().map(|&a| !a).collect();
    let mut beta = vec![0i64; width];
    let mut round = Round::new(width);
    // The nodes not settled yet: most rounds settle a single bot of a skewed fleet, so a round
    // that scanned every node would cost the width each time (thousands of rounds).
    let mut unfrozen: Vec<u32> = (0..width as u32).filter(|&v| !frozen[v as usize]).collect();
    loop {
        unfrozen.retain(|&v| !frozen[v as usize]);
        let Some(top) = unfrozen.iter().map(|&v| ex.load(v) as i64).max() else {
            break;
        };
        if unfrozen.iter().all(|&v| ex.load(v) as i64 + 2 > top) {
            for &v in &unfrozen {
                frozen[v as usize] = true;
                beta[v as usize] = top;
            }
            break;
        }
        round.lower_top(ex, &frozen, &unfrozen, top);
        let stuck: Vec<u32> = unfrozen
            .iter()
            .copied()
            .filter(|&v| ex.load(v) as i64 == top)
            .collect();
        for v in round.closure(ex, &frozen, &stuck) {
            frozen[v as usize] = true;
            beta[v as usize] = top;
        }
    }
    beta
}

/// Scratch space for the rounds, allocated once.
struct Round {
    dist: Vec<u32>,
    cursor: Vec<usize>,
    queue: Vec<u32>,
    path: Vec<u32>,
}

impl Round {
    fn new(width: usize) -> Self {
        Self {
            dist: vec![NIL; width],
            cursor: vec![0; width],
            queue: Vec::new(),
            path: Vec::new(),
        }
    }

    /// Resets what the last search marked: only nodes it queued have a distance or a cursor.
    fn clear(&mut self) {
        for &v in &self.queue {
            self.dist[v as usize] = NIL;
            self.cursor[v as usize] = 0;
        }
        self.queue.clear();
    }

    /// Max flow from the bots at `top` (one unit each) to bots at ≤ top − 2.
    fn lower_top(&mut self, ex: &mut Exchange, frozen: &[bool], unfrozen: &[u32], top: i64) {
        let is_target = |ex: &Exchange, v: u32| ex.load(v) as i64 + 2 <= top;
        loop {
            // Layer the graph by hop distance from the sources (Dinic).
            self.clear();
            for &v in unfrozen {
                if ex.load(v) as i64 == top {
                    self.dist[v as usize] = 0;
                    self.queue.push(v);
                }
            }
            let sources = self.queue.len();
            let mut reached = false;
            let mut head = 0;
            while head < self.queue.len() {
                let v = self.queue[head];
                head += 1;
                if is_target(ex, v) {
                    reached = true;
                    continue;
                }
                for &Nbr { node: x, slot } in ex.nbrs(v) {
                    if !frozen[x as usize]
                        && self.dist[x as usize] == NIL
                        && ex.any_channel_in(slot).is_some()
                    {
                        self.dist[x as usize] = self.dist[v as usize] + 1;
                        self.queue.push(x);
                    }
                }
            }
            if !reached {
                return;
            }
            for i in 0..sources {
                let s = self.queue[i];
                if ex.load(s) as i64 == top && self.find_path(ex, frozen, s, top) {
                    for hop in self.path.windows(2) {
                        let channel = ex.any_channel_on_arc(hop[0], hop[1]).expect("arc on path");
                        ex.move_to(channel, hop[1]);
                    }
                }
            }
        }
    }

    /// Depth-first search along the layers from `s` to a target; leaves the path in `self.path`.
    fn find_path(&mut self, ex: &Exchange, frozen: &[bool], s: u32, top: i64) -> bool {
        self.path.clear();
        self.path.push(s);
        while let Some(&v) = self.path.last() {
            if v != s && ex.load(v) as i64 + 2 <= top {
                return true;
            }
            let nbrs = ex.nbrs(v);
            let mut advanced = false;
            while self.cursor[v as usize] < nbrs.len() {
                let Nbr { node: x, slot } = nbrs[self.cursor[v as usize]];
                if !frozen[x as usize]
                    && self.dist[x as usize] == self.dist[v as usize].wrapping_add(1)
                    && ex.any_channel_in(slot).is_some()
                {
                    self.path.push(x);
                    advanced = true;
                    break;
                }
                self.cursor[v as usize] += 1;
            }
            if !advanced {
                // Dead end: never enter it again in this layering.
                self.dist[v as usize] = NIL;
                self.path.pop();
                if let Some(&parent) = self.path.last() {
                    self.cursor[parent as usize] += 1;
                }
            }
        }
        false
    }

    /// Every unfrozen node reachable from `starts`, the starts included.
    fn closure(&mut self, ex: &Exchange, frozen: &[bool], starts: &[u32]) -> Vec<u32> {
        self.clear();
        for &v in starts {
            self.dist[v as usize] = 0;
            self.queue.push(v);
        }
        let mut head = 0;
        while head < self.queue.len() {
            let v = self.queue[head];
            head += 1;
            for &Nbr { node: x, slot } in ex.nbrs(v) {
                if !frozen[x as usize]
                    && self.dist[x as usize] == NIL
                    && ex.any_channel_in(slot).is_some()
                {
                    self.dist[x as usize] = 0;
                    self.queue.push(x);
                }
            }
        }
        self.queue.clone()
    }
}
