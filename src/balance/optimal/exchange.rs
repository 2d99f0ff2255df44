//! The exchange graph: which channel could move from which bot to which other bot.
//!
//! Nodes are the bots of one platform (node `b + 1` for bot `b`) plus [`SOURCE`], where
//! channels wait until they are placed. A channel `u` sitting on node `a` that may also go to
//! bot `x` gives the arc `a → x`. Arcs are kept per (a, x) pair in three buckets by their move
//! cost relative to the channel's *home* (its previous assignee):
//!
//! * [`Kind::Return`] (−1): `x` is the channel's home, so moving it there undoes a move;
//! * [`Kind::Neutral`] (0): neither `a` nor `x` is home;
//! * [`Kind::Leave`] (+1): `a` is home, so moving it away costs one move.
//!
//! Each bucket is an intrusive doubly linked list over membership *entries* (one per channel and
//! member), so moving a channel costs O(its degree) and finding a channel for an arc is O(1);
//! the number of channels never enters a graph search, only the number of bot pairs.

use crate::pages;

pub(crate) const NIL: u32 = u32::MAX;
/// The node holding channels that are not placed yet.
pub(crate) const SOURCE: u32 = 0;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Return = 0,
    Neutral = 1,
    Leave = 2,
}

impl Kind {
    pub(crate) const ALL: [Kind; 3] = [Kind::Return, Kind::Neutral, Kind::Leave];

    /// Change in the number of moved channels when a channel crosses an arc of this kind.
    pub(crate) fn cost(self) -> i64 {
        self as i64 - 1
    }
}

/// Up to this many nodes, a bot pair finds its slot in a dense table (4 bytes per pair: 17 MB
/// at 2,000 bots, only the pages of pairs in use ever touched); larger fleets search a node's
/// neighbours, kept sorted.
const DENSE_LIMIT: usize = 3000;

/// While a graph is built, an entry's node carries its arc kind in the bits above this.
const KIND_SHIFT: u32 = 30;
const NODE_MASK: u32 = (1 << KIND_SHIFT) - 1;

/// In [`Entry::node`] once the graph is built, marks the last entry of its channel: a
/// channel's entries sit side by side, so this is all that ends them (a link to the next
/// entry took 4 bytes an entry, 114 MB at 10M channels).
const LAST: u32 = 1 << 31;

/// In [`Entry::back`], marks the first entry of a list; the bits below are its slot × 3 +
/// kind. Entries and lists are numbered below it (asserted where they are made).
const HEAD: u32 = 1 << 31;

/// Where each bot pair's arc lists are in `heads`. Slots are handed out as pairs first appear
/// (a built graph's row by row), so the lists a graph uses sit together rather than spread
/// over a table of every pair.
enum Slots {
    /// Slot + 1 per pair `a × width + x`; 0 for none.
    Dense(Vec<u32>),
    /// Per node `a`, how many of its first neighbours (`nbrs[a]`) are sorted by node: a
    /// binary search finds a pair there, and pairs that appear later (a channel moved to a bot
    /// it never sat on before) follow unsorted until [`Exchange::sort_new_pairs`]. A hash map
    /// of 20,000 bots' pairs took a cache miss per pair to build, and 136 MB more at peak.
    Sorted(Vec<u32>),
}

pub(crate) struct Exchange {
    width: usize,
    slots: Slots,
    heads: Vec<[u32; 3]>,
    /// Per slot, bit `k` set when the list of kind `k` is not empty: what a search asks of a
    /// pair, in a twelfth of the memory of `heads`. A backward search reads the pairs of a
    /// node's in-neighbours, one per row of the table, and these bytes stay in the cache
    /// where the heads did not.
    kinds: Vec<u8>,
    nbrs: Vec<Vec<Nbr>>,
    /// The pairs by their second node: only the flow's backward searches read them, and a
    /// one-off plan with no previous assignment never runs one, so they are made when needed
    /// ([`Exchange::reverse_pairs`]) rather than pushed pair by pair while the graph is
    /// built, a write to one of thousands of growing lists each time.
    rnbrs: Option<Vec<Vec<Nbr>>>,
    load: Vec<u32>,
    // per channel
    at: Vec<u32>,
    home: Vec<u32>,
    first: Vec<u32>,
    entries: Vec<Entry>,
    /// Free blocks of entries by their length: `free[n]` starts blocks of `n` entries.
    free: Vec<Vec<u32>>,
    /// Entries in free blocks.
    free_entries: usize,
    placed_channels: usize,
    // channels that may sit away from their home, since the last `take_displaced`
    displaced: Vec<u32>,
    displaced_mark: Vec<bool>,
}

/// One member node of one channel; a channel's entries are one block, from `first[c]` to
/// the entry marked [`LAST`]. Moving a channel reads and writes every field of each of its
/// entries, and walking an arc list reads an entry's channel and its neighbours' links: side
/// by side, an entry's fields come in one cache line (two for some entries), where an array
/// per field took five. And the entries of a large graph are one allocation, large
/// enough that the allocator maps it fresh from the kernel, on huge pages ([`pages`]).
#[derive(Clone, Copy, zerocopy::FromZeros)]
struct Entry {
    channel: u32,
    /// The member node, [`LAST`] set on the channel's last entry.
    node: u32,
    /// The next entry in its arc list.
    next: u32,
    /// What comes before a linked entry in its list: the previous entry, or, for the list's
    /// first, [`HEAD`] with its slot and kind ([`Exchange::link_slot`]); `NIL` for an entry in
    /// no list. Unlinking needs the one or the other, never both, so one field holds either.
    back: u32,
}

impl Exchange {
    /// An empty graph with `width` nodes (the source and the bots) and `channels` channel slots.
    pub(crate) fn new(width: usize, channels: usize, entries: usize) -> Self {
        let slots = if width <= DENSE_LIMIT {
            Slots::Dense(pages::zeroed(width * width))
        } else {
            Slots::Sorted(vec![0; width])
        };
        Self {
            width,
            slots,
            heads: Vec::new(),
            kinds: Vec::new(),
            nbrs: vec![Vec::new(); width],
            rnbrs: None,
            load: vec![0; width],
            at: pages::filled(channels, NIL),
            home: pages::filled(channels, NIL),
            first: pages::filled(channels, NIL),
            entries: Vec::with_capacity(entries),
            free: Vec::new(),
            free_entries: 0,
            placed_channels: 0,
            displaced: Vec::new(),
            displaced_mark: vec![false; channels],
        }
    }

    /// A graph holding every channel at once, as [`Exchange::insert`] would one by one:
    /// channel `c` with member nodes `members.nodes(c)` and home `home[c]`, on node `at[c]`
    /// (`NIL`: not in the graph). Much faster: entries are laid out by the node their channel
    /// sits on, and arcs are linked one node's row of the slot table at a time; inserting in
    /// channel order missed the cache at almost every arc. The graph keeps `home` and `at` as
    /// its own arrays (copies would be 80 MB more at 10M channels, at the plan's peak).
    ///
    /// Two passes. The first, in channel order, scatters each entry's channel and node (its
    /// arc kind tagged on) to its node's row: one write stream per node. The second, row by
    /// row, writes everything else in sequence: untags the node, chains a channel's entries
    /// (they sit side by side) and links the arcs.
    pub(crate) fn with_channels(
        width: usize,
        members: &impl MemberNodes,
        home: Vec<u32>,
        at: Vec<u32>,
    ) -> Self {
        assert_eq!(home.len(), at.len(), "a home and a place per channel");
        let channels = at.len();
        let mut ex = Self::new(width, 0, 0);
        ex.at = at;
        ex.home = home;
        ex.first = pages::filled(channels, NIL);
        ex.displaced_mark = vec![false; channels];
        Self::fill(ex, members)
    }

    /// [`Exchange::with_channels`] in this graph's memory, which is of no more use: its
    /// arrays are emptied and filled again, every channel on `at`, its home as `homes` says.
    /// A full plan with a previous assignment builds the graph twice; fresh arrays the second
    /// time would be tens of thousands of pages more, each a fault into the kernel, where
    /// these pages are already the process's.
    pub(crate) fn rebuilt(
        mut self,
        members: &impl MemberNodes,
        homes: Homes,
        at: Vec<u32>,
    ) -> Self {
        if let Slots::Dense(slots) = &mut self.slots {
            // Only the pairs in use are set: clearing them costs the pairs, not width².
            for (a, nbrs) in self.nbrs.iter().enumerate() {
                for n in nbrs {
                    slots[a * self.width + n.node as usize] = 0;
                }
            }
        }
        if let Slots::Sorted(sorted) = &mut self.slots {
            sorted.fill(0);
        }
        self.heads.clear();
        self.kinds.clear();
        self.nbrs.iter_mut().for_each(Vec::clear);
        self.rnbrs = None;
        self.load.fill(0);
        let channels = at.len();
        match homes {
            Homes::Kept => self.home.resize(channels, NIL),
            Homes::Places => {
                self.home.clear();
                self.home.extend_from_slice(&at);
            }
        }
        self.at = at;
        self.first.clear();
        self.first.resize(channels, NIL);
        self.free.clear();
        self.free_entries = 0;
        self.placed_channels = 0;
        self.displaced.clear();
        self.displaced_mark.clear();
        self.displaced_mark.resize(channels, false);
        Self::fill(self, members)
    }

    /// Fills a graph with no entries whose `at` and `home` are set: the body of
    /// [`Exchange::with_channels`]. A channel not in the graph gets no home.
    fn fill(mut ex: Self, members: &impl MemberNodes) -> Self {
        let (width, channels) = (ex.width, ex.at.len());
        assert!(width <= NODE_MASK as usize, "too many nodes to tag");
        // Where each node's row of entries starts.
        let mut next = vec![0u32; width + 1];
        for c in 0..channels {
            match ex.at[c] {
                NIL => ex.home[c] = NIL,
                a => next[a as usize + 1] += members.count(c) as u32,
            }
        }
        for v in 1..next.len() {
            next[v] += next[v - 1];
        }
        let rows = next.clone();
        // Every field of every entry is written below (`next` only for linked entries, the
        // only ones that read it), so zeroed memory will do: fresh, it costs no pass of its own.
        let entries = next[width] as usize;
        assert!(entries < HEAD as usize, "too many membership entries");
        // With room for a sixteenth more: a channel whose members change moves to a block
        // at the end, and the first such block would otherwise reallocate every entry (its
        // pages are never touched until used).
        pages::zeroed_in(&mut ex.entries, entries, entries / 16);
        for c in 0..channels {
            let (a, h) = (ex.at[c], ex.home[c]);
            if a == NIL {
                continue;
            }
            ex.load[a as usize] += 1;
            ex.placed_channels += 1;
            let base = next[a as usize];
            ex.first[c] = base;
            let mut e = base as usize;
            for m in members.nodes(c) {
                ex.entries[e].channel = c as u32;
                ex.entries[e].node = m | (ex.kind_of(c as u32, a, m) as u32) << KIND_SHIFT;
                e += 1;
            }
            next[a as usize] = e as u32;
            if a != h {
                ex.displace(c as u32);
            }
        }
        // Each node's distinct neighbours are marked in `row_slot` while its row is linked.
        let mut row_slot = vec![NIL; width];
        let mut seen = Vec::new();
        // Lists in `seen` (marked in `row_slot`) the distinct neighbours of node `a` among its
        // row's entries (their nodes tagged).
        fn mark_neighbours(row: &[Entry], a: u32, row_slot: &mut [u32], seen: &mut Vec<u32>) {
            for entry in row {
                let m = entry.node & NODE_MASK;
                if m != a && row_slot[m as usize] == NIL {
                    row_slot[m as usize] = 0;
                    seen.push(m);
                }
            }
        }
        let sorted = matches!(ex.slots, Slots::Sorted(_));
        if sorted {
            // Room for every pair at once: growing millions of pairs step by step would copy
            // them again and again, and leave the peak at twice their size.
            let mut pairs = 0;
            for a in 0..width {
                let row = &ex.entries[rows[a] as usize..rows[a + 1] as usize];
                mark_neighbours(row, a as u32, &mut row_slot, &mut seen);
                pairs += seen.len();
                for m in seen.drain(..) {
                    row_slot[m as usize] = NIL;
                }
            }
            ex.heads.reserve_exact(pairs);
            ex.kinds.reserve_exact(pairs);
        }
        for a in 0..width {
            let (row_start, row_end) = (rows[a], rows[a + 1]);
            if sorted {
                // The row's pairs in node order, so its neighbours come out sorted.
                let row = &ex.entries[row_start as usize..row_end as usize];
                mark_neighbours(row, a as u32, &mut row_slot, &mut seen);
                seen.sort_unstable();
                for &m in &seen {
                    row_slot[m as usize] = ex.new_slot(a as u32, m);
                }
                if let Slots::Sorted(sorted) = &mut ex.slots {
                    sorted[a] = ex.nbrs[a].len() as u32;
                }
            }
            for e in row_start..row_end {
                let i = e as usize;
                let tagged = ex.entries[i].node;
                let m = tagged & NODE_MASK;
                let last = e + 1 == row_end || ex.entries[i + 1].channel != ex.entries[i].channel;
                ex.entries[i].node = if last { m | LAST } else { m };
                if m == a as u32 {
                    ex.entries[i].back = NIL;
                    continue;
                }
                let mut s = row_slot[m as usize];
                if s == NIL {
                    // Rows are linked once each, so a pair not yet seen in this row is new.
                    s = ex.new_slot(a as u32, m);
                    row_slot[m as usize] = s;
                    seen.push(m);
                }
                ex.link_slot(e, s, Kind::ALL[(tagged >> KIND_SHIFT) as usize]);
            }
            for m in seen.drain(..) {
                row_slot[m as usize] = NIL;
            }
        }
        ex
    }

    pub(crate) fn width(&self) -> usize {
        self.width
    }

    /// Every channel's node, `NIL` for channels not in the graph.
    pub(crate) fn places(&self) -> &[u32] {
        &self.at
    }

    /// Channels that may sit away from their home (see [`Exchange::take_displaced`]).
    pub(crate) fn displaced(&self) -> &[u32] {
        &self.displaced
    }

    pub(crate) fn channel_capacity(&self) -> usize {
        self.at.len()
    }

    pub(crate) fn grow_channels(&mut self, channels: usize) {
        if channels > self.at.len() {
            self.at.resize(channels, NIL);
            self.home.resize(channels, NIL);
            self.first.resize(channels, NIL);
            self.displaced_mark.resize(channels, false);
        }
    }

    /// Entries in free blocks: a channel whose members changed left its block for one of its
    /// new length, and a block of one length does not serve another.
    pub(crate) fn free_entries(&self) -> usize {
        self.free_entries
    }

    /// Membership entries, in use or free.
    pub(crate) fn entries(&self) -> usize {
        self.entries.len()
    }

    /// Channels in the graph, placed or waiting on the source.
    pub(crate) fn channels_in_graph(&self) -> usize {
        self.placed_channels
    }

    pub(crate) fn load(&self, node: u32) -> u32 {
        self.load[node as usize]
    }

    pub(crate) fn at(&self, channel: u32) -> u32 {
        self.at[channel as usize]
    }

    pub(crate) fn home(&self, channel: u32) -> u32 {
        self.home[channel as usize]
    }

    pub(crate) fn contains(&self, channel: u32) -> bool {
        self.at[channel as usize] != NIL
    }

    /// Nodes `x` for which some arc `a → x` may exist (a superset, never shrinks), with the
    /// pair's slot.
    pub(crate) fn nbrs(&self, a: u32) -> &[Nbr] {
        &self.nbrs[a as usize]
    }

    /// Nodes `a` for which some arc `a → x` may exist (a superset, never shrinks), with the
    /// pair's slot. Only after [`Exchange::reverse_pairs`].
    pub(crate) fn rnbrs(&self, x: u32) -> &[Nbr] {
        &self.rnbrs.as_ref().expect("reverse pairs made")[x as usize]
    }

    /// Makes [`Exchange::rnbrs`] available (once; later pairs keep it up to date).
    pub(crate) fn reverse_pairs(&mut self) {
        if self.rnbrs.is_some() {
            return;
        }
        let mut count = vec![0usize; self.width];
        for n in self.nbrs.iter().flatten() {
            count[n.node as usize] += 1;
        }
        let mut rnbrs: Vec<Vec<Nbr>> = count.into_iter().map(Vec::with_capacity).collect();
        for (a, nbrs) in self.nbrs.iter().enumerate() {
            for &Nbr { node: x, slot } in nbrs {
                rnbrs[x as usize].push(Nbr {
                    node: a as u32,
                    slot,
                });
            }
        }
        self.rnbrs = Some(rnbrs);
    }

    pub(crate) fn members(&self, channel: u32) -> Members<'_> {
        Members {
            ex: self,
            entry: self.first[channel as usize],
        }
    }

    pub(crate) fn kind_of(&self, channel: u32, from: u32, to: u32) -> Kind {
        let home = self.home[channel as usize];
        if home == from {
            Kind::Leave
        } else if home == to {
            Kind::Return
        } else {
            Kind::Neutral
        }
    }

    /// A channel that may move along the arcs of a pair's slot with the given cost kind.
    pub(crate) fn channel_in(&self, slot: u32, kind: Kind) -> Option<u32> {
        let e = self.heads[slot as usize][kind as usize];
        (e != NIL).then(|| self.entries[e as usize].channel)
    }

    /// The cheapest kind of arc a pair's slot has, if any.
    pub(crate) fn cheapest_kind_in(&self, slot: u32) -> Option<Kind> {
        let cheapest = match self.kinds[slot as usize].trailing_zeros() {
            0 => Some(Kind::Return),
            1 => Some(Kind::Neutral),
            2 => Some(Kind::Leave),
            _ => None,
        };
        debug_assert_eq!(
            cheapest,
            Kind::ALL
                .into_iter()
                .find(|&k| self.heads[slot as usize][k as usize] != NIL)
        );
        cheapest
    }

    /// Any channel that may move along the arcs of a pair's slot, preferring the cheapest
    /// kind.
    pub(crate) fn any_channel_in(&self, slot: u32) -> Option<u32> {
        self.heads[slot as usize]
            .iter()
            .find(|&&e| e != NIL)
            .map(|&e| self.entries[e as usize].channel)
    }

    /// Any channel on `a` that may move to `x`, preferring the cheapest kind.
    pub(crate) fn any_channel_on_arc(&self, a: u32, x: u32) -> Option<u32> {
        self.any_channel_in(self.slot(a, x)?)
    }

    /// Adds a channel with its member nodes, placed on `at` (a member or [`SOURCE`]).
    pub(crate) fn insert(&mut self, channel: u32, members: &[u32], home: u32, at: u32) {
        debug_assert!(!self.contains(channel));
        let c = channel as usize;
        self.at[c] = at;
        self.home[c] = home;
        self.load[at as usize] += 1;
        self.placed_channels += 1;
        self.place_block(channel, members);
        // Placed away from home without ever moving (a full plan's first placement, a channel
        // waiting on the source): the list must know, or the channel keeps a stale home.
        if at != home {
            self.displace(channel);
        }
    }

    /// Removes a channel from the graph (it has no valid bot any more).
    pub(crate) fn remove(&mut self, channel: u32) {
        let c = channel as usize;
        self.free_block(channel);
        self.load[self.at[c] as usize] -= 1;
        self.placed_channels -= 1;
        self.first[c] = NIL;
        self.at[c] = NIL;
        self.home[c] = NIL;
    }

    /// Moves a channel to node `to` (a member, or [`SOURCE`]); O(degree).
    pub(crate) fn move_to(&mut self, channel: u32, to: u32) {
        let c = channel as usize;
        let from = self.at[c];
        debug_assert!(from != NIL && from != to);
        self.at[c] = to;
        self.load[from as usize] -= 1;
        self.load[to as usize] += 1;
        for e in self.block(channel) {
            self.unlink(e);
            let m = self.node_of(e);
            if m != to {
                self.link(e, to, m, self.kind_of(channel, to, m));
            }
        }
        self.displace(channel);
    }

    /// Makes `home` the channel's home, re-filing its arcs under their new kinds.
    pub(crate) fn set_home(&mut self, channel: u32, home: u32) {
        let c = channel as usize;
        if self.home[c] == home {
            return;
        }
        self.home[c] = home;
        if home != self.at[c] {
            self.displace(channel);
        }
        let at = self.at[c];
        for e in self.block(channel) {
            let m = self.node_of(e);
            if m != at {
                self.unlink(e);
                self.link(e, at, m, self.kind_of(channel, at, m));
            }
        }
    }

    /// Adds member node `node` to a channel in the graph. Its entries move to a block one
    /// longer (membership changes are rare; moves, which are not, read a block in order).
    pub(crate) fn add_member(&mut self, channel: u32, node: u32) {
        let members: Vec<u32> = std::iter::once(node).chain(self.members(channel)).collect();
        self.free_block(channel);
        self.place_block(channel, &members);
    }

    /// Removes member `node` from a channel that is not placed on it.
    pub(crate) fn remove_member(&mut self, channel: u32, node: u32) {
        debug_assert!(self.at[channel as usize] != node);
        let members: Vec<u32> = self.members(channel).filter(|&m| m != node).collect();
        self.free_block(channel);
        self.place_block(channel, &members);
    }

    /// A channel's entries, first to last (none for a channel not in the graph).
    fn block(&self, channel: u32) -> std::ops::Range<u32> {
        let first = self.first[channel as usize];
        if first == NIL {
            return 0..0;
        }
        let mut last = first;
        while self.entries[last as usize].node & LAST == 0 {
            last += 1;
        }
        first..last + 1
    }

    fn node_of(&self, e: u32) -> u32 {
        self.entries[e as usize].node & !LAST
    }

    /// Gives a placed channel (`at` set) a block of entries for `members`, and links them.
    fn place_block(&mut self, channel: u32, members: &[u32]) {
        let c = channel as usize;
        let len = members.len();
        if len == 0 {
            self.first[c] = NIL;
            return;
        }
        let first = match self.free.get_mut(len).and_then(Vec::pop) {
            Some(first) => {
                self.free_entries -= len;
                first
            }
            None => {
                let first = self.entries.len();
                assert!(first + len < HEAD as usize, "too many membership entries");
                self.entries.resize(first + len, Entry::unlinked(NIL, NIL));
                first as u32
            }
        };
        self.first[c] = first;
        for (j, &m) in members.iter().enumerate() {
            let node = if j + 1 == len { m | LAST } else { m };
            self.entries[first as usize + j] = Entry::unlinked(channel, node);
        }
        // The last member linked first, as when a channel's entries were a chain: the lists'
        // order decides which of several equal channels a search takes.
        let at = self.at[c];
        for (j, &m) in members.iter().enumerate().rev() {
            if m != at {
                self.link(first + j as u32, at, m, self.kind_of(channel, at, m));
            }
        }
    }

    /// Unlinks a channel's entries and frees their block.
    fn free_block(&mut self, channel: u32) {
        let block = self.block(channel);
        if block.is_empty() {
            return;
        }
        let (first, len) = (block.start, block.len());
        for e in block {
            self.unlink(e);
        }
        if self.free.len() <= len {
            self.free.resize_with(len + 1, Vec::new);
        }
        self.free[len].push(first);
        self.free_entries += len;
        self.first[channel as usize] = NIL;
    }

    /// Channels that may sit away from their home: moved, inserted elsewhere or given another
    /// home since the last call. Every other channel in the graph is at its home, so a caller
    /// that re-homes the returned channels has every channel at home without a full scan.
    pub(crate) fn take_displaced(&mut self) -> Vec<u32> {
        let displaced = std::mem::take(&mut self.displaced);
        for &c in &displaced {
            self.displaced_mark[c as usize] = false;
        }
        displaced
    }

    fn displace(&mut self, channel: u32) {
        let c = channel as usize;
        if !self.displaced_mark[c] {
            self.displaced_mark[c] = true;
            self.displaced.push(channel);
        }
    }

    fn slot(&self, a: u32, x: u32) -> Option<u32> {
        match &self.slots {
            Slots::Dense(index) => index[a as usize * self.width + x as usize].checked_sub(1),
            Slots::Sorted(sorted) => {
                let (head, tail) = self.nbrs[a as usize].split_at(sorted[a as usize] as usize);
                match head.binary_search_by_key(&x, |n| n.node) {
                    Ok(i) => Some(head[i].slot),
                    Err(_) => tail.iter().find(|n| n.node == x).map(|n| n.slot),
                }
            }
        }
    }

    /// Sorts the neighbours of pairs that appeared since the graph was built or last sorted,
    /// so looking them up stays a binary search. Only between plans: searches keep positions
    /// in these lists.
    pub(crate) fn sort_new_pairs(&mut self) {
        let Slots::Sorted(sorted) = &mut self.slots else {
            return;
        };
        for (nbrs, sorted) in self.nbrs.iter_mut().zip(sorted.iter_mut()) {
            if *sorted as usize != nbrs.len() {
                nbrs.sort_unstable_by_key(|n| n.node);
                *sorted = nbrs.len() as u32;
            }
        }
    }

    fn slot_or_insert(&mut self, a: u32, x: u32) -> u32 {
        match self.slot(a, x) {
            Some(s) => s,
            None => self.new_slot(a, x),
        }
    }

    /// A slot for a pair that has none yet.
    fn new_slot(&mut self, a: u32, x: u32) -> u32 {
        debug_assert!(self.slot(a, x).is_none());
        let s = self.heads.len() as u32;
        assert!(s < HEAD / 3, "too many bot pairs");
        if let Slots::Dense(index) = &mut self.slots {
            index[a as usize * self.width + x as usize] = s + 1;
        }
        self.heads.push([NIL; 3]);
        self.kinds.push(0);
        self.nbrs[a as usize].push(Nbr { node: x, slot: s });
        if let Some(rnbrs) = &mut self.rnbrs {
            rnbrs[x as usize].push(Nbr { node: a, slot: s });
        }
        s
    }

    fn link(&mut self, e: u32, a: u32, x: u32, kind: Kind) {
        let s = self.slot_or_insert(a, x);
        self.link_slot(e, s, kind);
    }

    /// Puts entry `e` first in the list of `kind` of slot `s`.
    fn link_slot(&mut self, e: u32, s: u32, kind: Kind) {
        let head = &mut self.heads[s as usize][kind as usize];
        let old = *head;
        *head = e;
        self.kinds[s as usize] |= 1 << kind as u8;
        let i = e as usize;
        self.entries[i].next = old;
        self.entries[i].back = HEAD | (s * 3 + kind as u32);
        if old != NIL {
            self.entries[old as usize].back = e;
        }
    }

    fn unlink(&mut self, e: u32) {
        let i = e as usize;
        let back = self.entries[i].back;
        if back == NIL {
            return;
        }
        let next = self.entries[i].next;
        if back & HEAD != 0 {
            let list = back & !HEAD;
            let (s, kind) = ((list / 3) as usize, (list % 3) as usize);
            self.heads[s][kind] = next;
            if next == NIL {
                self.kinds[s] &= !(1 << kind);
            }
        } else {
            self.entries[back as usize].next = next;
        }
        // The next entry takes this one's place: after its previous entry, or first.
        if next != NIL {
            self.entries[next as usize].back = back;
        }
        self.entries[i].back = NIL;
    }
}

impl Entry {
    /// A new entry, in no list yet.
    fn unlinked(channel: u32, node: u32) -> Self {
        Entry {
            channel,
            node,
            next: NIL,
            back: NIL,
        }
    }
}

/// A neighbour in the bot graph, and the slot of the pair's arc lists: searches walk these,
/// so they never look a pair up.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Nbr {
    pub node: u32,
    pub slot: u32,
}

/// Each channel's member nodes, where a graph built at once reads them. The same nodes in
/// the same order each time a channel is asked.
pub(crate) trait MemberNodes {
    fn nodes(&self, channel: usize) -> impl Iterator<Item = u32> + '_;

    /// How many nodes [`MemberNodes::nodes`] gives.
    fn count(&self, channel: usize) -> usize;
}

/// What a rebuilt graph takes as each channel's home.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Homes {
    /// The homes the graph has.
    Kept,
    /// Each channel's new place.
    Places,
}

/// A node as [`Lists`] keeps it: `u16` where every node fits, `u32` otherwise.
pub(crate) trait ListedNode: Copy + Eq + Into<u32> {
    /// `node` in this width (it fits: the caller chose the width for the graph's).
    fn listed(node: u32) -> Self;
}

impl ListedNode for u16 {
    fn listed(node: u32) -> Self {
        u16::try_from(node).expect("node listed in two bytes")
    }
}

impl ListedNode for u32 {
    fn listed(node: u32) -> Self {
        node
    }
}

/// One list of nodes per channel, stored flat.
pub(crate) struct Lists<N> {
    offsets: Vec<u32>,
    nodes: Vec<N>,
}

impl<N: ListedNode> Lists<N> {
    pub(crate) fn with_capacity(channels: usize, nodes: usize) -> Self {
        let mut offsets = Vec::with_capacity(channels + 1);
        offsets.push(0);
        Self {
            offsets,
            nodes: Vec::with_capacity(nodes),
        }
    }

    /// Appends the next channel's list.
    pub(crate) fn push(&mut self, nodes: impl IntoIterator<Item = u32>) {
        self.nodes.extend(nodes.into_iter().map(N::listed));
        self.offsets.push(self.nodes.len() as u32);
    }

    pub(crate) fn of(&self, c: usize) -> &[N] {
        &self.nodes[self.offsets[c] as usize..self.offsets[c + 1] as usize]
    }
}

impl<N: ListedNode> MemberNodes for Lists<N> {
    fn nodes(&self, channel: usize) -> impl Iterator<Item = u32> + '_ {
        self.of(channel).iter().map(|&n| n.into())
    }

    fn count(&self, channel: usize) -> usize {
        self.of(channel).len()
    }
}

/// Iterator over a channel's member nodes.
pub(crate) struct Members<'a> {
    ex: &'a Exchange,
    entry: u32,
}

impl Iterator for Members<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if self.entry == NIL {
            return None;
        }
        let node = self.ex.entries[self.entry as usize].node;
        self.entry = if node & LAST != 0 {
            NIL
        } else {
            self.entry + 1
        };
        Some(node & !LAST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arcs(ex: &Exchange, a: u32) -> Vec<(u32, Kind)> {
        let mut out = Vec::new();
        for &Nbr { node, slot } in ex.nbrs(a) {
            for kind in Kind::ALL {
                if ex.channel_in(slot, kind).is_some() {
                    out.push((node, kind));
                }
            }
        }
        out.sort_by_key(|&(x, k)| (x, k as u8));
        out
    }

    #[test]
    fn arcs_follow_the_channel_and_its_home() {
        for width in [4, DENSE_LIMIT + 1] {
            let mut ex = Exchange::new(width, 2, 8);
            // channel 0: members 1, 2, 3; home 1; placed on 1
            ex.insert(0, &[1, 2, 3], 1, 1);
            assert_eq!(arcs(&ex, 1), [(2, Kind::Leave), (3, Kind::Leave)]);
            ex.move_to(0, 2);
            assert_eq!(arcs(&ex, 1), []);
            assert_eq!(arcs(&ex, 2), [(1, Kind::Return), (3, Kind::Neutral)]);
            assert_eq!(ex.channel_in(ex.slot(2, 1).unwrap(), Kind::Return), Some(0));
            assert_eq!((ex.load(1), ex.load(2)), (0, 1));
            ex.set_home(0, 2);
            assert_eq!(arcs(&ex, 2), [(1, Kind::Leave), (3, Kind::Leave)]);
            ex.remove_member(0, 3);
            assert_eq!(arcs(&ex, 2), [(1, Kind::Leave)]);
            ex.add_member(0, 3);
            assert_eq!(arcs(&ex, 2), [(1, Kind::Leave), (3, Kind::Leave)]);
            ex.move_to(0, SOURCE);
            assert_eq!(
                arcs(&ex, SOURCE),
                [(1, Kind::Neutral), (2, Kind::Return), (3, Kind::Neutral)]
            );
            ex.remove(0);
            assert_eq!(arcs(&ex, SOURCE), []);
            assert_eq!(ex.channels_in_graph(), 0);
            let mut displaced = ex.take_displaced();
            displaced.sort();
            assert_eq!(displaced, [0]);
        }
    }

    #[test]
    fn a_graph_built_at_once_fresh_or_in_a_used_ones_memory_equals_one_built_channel_by_channel() {
        // channel: (members, home, at); NIL at: not in the graph
        let channels: [(&[u32], u32, u32); 6] = [
            (&[1, 2, 3], 1, 1),
            (&[2, 3], 3, 2),
            (&[3], 3, 3),
            (&[1, 3], NIL, 3),
            (&[1, 2], 1, NIL),
            (&[2, 1], 2, 1),
        ];
        let mut lists = Lists::<u32>::with_capacity(channels.len(), 12);
        for (members, _, _) in channels {
            lists.push(members.iter().copied());
        }
        let home: Vec<u32> = channels.iter().map(|c| c.1).collect();
        let at: Vec<u32> = channels.iter().map(|c| c.2).collect();
        // A graph used in every way before it is rebuilt: other places and homes, moves,
        // a channel removed (its entries free), a member added, reverse pairs made.
        let used = |width| {
            let first: Vec<u32> = (0..channels.len()).map(|c| lists.of(c)[0]).collect();
            let mut ex = Exchange::with_channels(width, &lists, vec![NIL; channels.len()], first);
            ex.reverse_pairs();
            ex.move_to(0, 3);
            ex.remove(2);
            ex.add_member(1, 1);
            ex
        };
        for (width, memory) in [4, DENSE_LIMIT + 1]
            .into_iter()
            .flat_map(|width| [(width, "fresh"), (width, "rebuilt")])
        {
            let mut one_by_one = Exchange::new(width, channels.len(), 0);
            for (c, (members, h, a)) in channels.into_iter().enumerate() {
                if a != NIL {
                    one_by_one.insert(c as u32, members, h, a);
                }
            }
            let mut at_once = match memory {
                "fresh" => Exchange::with_channels(width, &lists, home.clone(), at.clone()),
                _ => {
                    let mut ex = used(width);
                    for (c, &h) in home.iter().enumerate() {
                        ex.set_home(c as u32, h);
                    }
                    ex.rebuilt(&lists, Homes::Kept, at.clone())
                }
            };
            assert_eq!(
                at_once.entries(),
                10,
                "{memory}: the entries of placed channels"
            );
            assert_eq!(at_once.channels_in_graph(), 5);
            for a in 0..4 {
                assert_eq!(arcs(&at_once, a), arcs(&one_by_one, a), "node {a}");
                assert_eq!(at_once.load(a), one_by_one.load(a));
            }
            for c in 0..channels.len() as u32 {
                let members = |ex: &Exchange| {
                    let mut m: Vec<u32> = ex.members(c).collect();
                    m.sort();
                    m
                };
                assert_eq!(members(&at_once), members(&one_by_one), "channel {c}");
                assert_eq!(at_once.at(c), one_by_one.at(c));
                assert_eq!(at_once.home(c), one_by_one.home(c));
            }
            let mut displaced = at_once.take_displaced();
            displaced.sort();
            assert_eq!(displaced, [1, 3, 5], "{memory}");
            // The lists stay consistent: moves re-file arcs the same way in both.
            for ex in [&mut at_once, &mut one_by_one] {
                ex.move_to(1, 3);
                ex.move_to(0, 2);
            }
            for a in 0..4 {
                assert_eq!(
                    arcs(&at_once, a),
                    arcs(&one_by_one, a),
                    "node {a} after moves"
                );
            }
            assert_eq!(arcs(&at_once, 3), [(1, Kind::Neutral), (2, Kind::Leave)]);
            // Pairs are found by look-up too, before and after new ones are sorted in.
            for sort in [false, true] {
                if sort {
                    at_once.sort_new_pairs();
                    one_by_one.sort_new_pairs();
                }
                for (a, x) in (0..4).flat_map(|a| (0..4).map(move |x| (a, x))) {
                    let found = |ex: &Exchange| ex.any_channel_on_arc(a, x);
                    assert_eq!(found(&at_once), found(&one_by_one), "pair {a} → {x}");
                }
            }
        }
    }

    #[test]
    fn channels_away_from_home_are_listed_until_re_homed() {
        let mut ex = Exchange::new(4, 3, 8);
        ex.insert(0, &[1, 2], 1, 1); // at home
        ex.insert(1, &[1, 2], 1, 2); // placed away from home, never moved
        ex.insert(2, &[2, 3], NIL, 3); // no home yet
        let mut displaced = ex.take_displaced();
        displaced.sort();
        assert_eq!(displaced, [1, 2]);
        for &c in &displaced {
            ex.set_home(c, ex.at(c));
        }
        assert!(ex.take_displaced().is_empty());
        ex.set_home(0, 2);
        assert_eq!(ex.take_displaced(), [0]);
    }

    #[test]
    fn a_graph_rebuilt_with_its_places_as_homes_has_every_channel_at_home() {
        let mut lists = Lists::<u16>::with_capacity(3, 6);
        for members in [&[1, 2][..], &[2, 3], &[1, 3]] {
            lists.push(members.iter().copied());
        }
        let ex = Exchange::with_channels(4, &lists, vec![1, 3, NIL], vec![2, 3, 1]);
        let rebuilt = ex.rebuilt(&lists, Homes::Places, vec![2, 2, NIL]);
        assert_eq!(
            (0..3).map(|c| rebuilt.home(c)).collect::<Vec<_>>(),
            [2, 2, NIL]
        );
        assert_eq!(rebuilt.channels_in_graph(), 2);
        assert_eq!(arcs(&rebuilt, 2), [(1, Kind::Leave), (3, Kind::Leave)]);
        assert!(rebuilt.displaced().is_empty());
    }

    #[test]
    fn a_channel_whose_members_change_moves_to_a_block_of_its_new_length() {
        let mut ex = Exchange::new(5, 2, 0);
        ex.insert(0, &[1, 2, 3], 1, 1);
        ex.remove_member(0, 3);
        assert_eq!(ex.members(0).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(arcs(&ex, 1), [(2, Kind::Leave)]);
        assert_eq!(
            ex.entries.len(),
            5,
            "a block of two after the freed block of three"
        );
        ex.add_member(0, 4);
        assert_eq!(ex.members(0).collect::<Vec<_>>(), [4, 1, 2]);
        assert_eq!(arcs(&ex, 1), [(2, Kind::Leave), (4, Kind::Leave)]);
        assert_eq!(ex.entries.len(), 5, "the freed block of three again");
        assert_eq!(ex.free_entries(), 2);
        // The freed block of two takes a channel of two members; its arcs are its own.
        ex.insert(1, &[3, 4], NIL, 3);
        assert_eq!(ex.entries.len(), 5);
        assert_eq!(ex.free_entries(), 0);
        assert_eq!(ex.members(1).collect::<Vec<_>>(), [3, 4]);
        assert_eq!(ex.any_channel_on_arc(3, 4), Some(1));
        assert_eq!(ex.any_channel_on_arc(1, 4), Some(0));
        ex.move_to(0, 4);
        assert_eq!(arcs(&ex, 4), [(1, Kind::Return), (2, Kind::Neutral)]);
        assert_eq!(ex.load(4), 1);
    }

    #[test]
    fn freed_entries_are_reused() {
        let mut ex = Exchange::new(4, 2, 0);
        ex.insert(0, &[1, 2], NIL, 1);
        ex.remove(0);
        ex.insert(1, &[2, 3], NIL, 3);
        assert_eq!(ex.entries.len(), 2);
        assert_eq!(ex.members(1).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(ex.any_channel_on_arc(3, 2), Some(1));
    }
}
