//! The planner: gives every channel exactly one bot. Pure and synchronous: no I/O, no clock,
//! and the same input always yields the same plan.
//!
//! * [`plan`] plans every enabled platform of an index from scratch, with the index's current
//!   assignees as the previous assignment.
//! * [`Planner`] does the same but keeps the optimal strategy's solver state between plans and
//!   applies each plan to the index, so a later plan after a few fleet events only routes the
//!   difference.
//!
//! Strategies: [`Strategy::Optimal`] (least Σ load², then fewest moves, both exact) and
//! [`Strategy::Greedy`] (the Koishi plugin's algorithm).

pub(crate) mod greedy;
mod optimal;
pub mod rules;
pub mod stats;

use std::fmt::Write as _;

use rustc_hash::FxHashMap;

use crate::index::{BotIx, ChanIx, FleetIndex, Members, PlatformIndex};
pub use rules::{Resolved, Rules};
pub use stats::LoadStats;

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
pub enum Strategy {
    /// Least Σ load², then fewest moved channels.
    #[default]
    Optimal,
    /// The Koishi plugin's dynamic-capacity greedy.
    Greedy,
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Strategy::Optimal => "optimal",
            Strategy::Greedy => "greedy",
        })
    }
}

/// A channel whose assignee changes although it had one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    pub channel: ChanIx,
    pub from: BotIx,
    /// `None` when the channel is left with no valid bot.
    pub to: Option<BotIx>,
    /// The previous bot is no longer valid (offline, left, pinned elsewhere).
    pub forced: bool,
}

/// The plan of one platform.
#[derive(Clone, Debug)]
pub struct PlatformPlan {
    pub platform: String,
    /// New assignee per channel index. Excluded channels keep their previous assignee.
    pub assignee: Vec<Option<BotIx>>,
    /// Every channel whose assignee differs from the previous one, with its new value.
    pub changes: Vec<(ChanIx, Option<BotIx>)>,
    pub moves: Vec<Move>,
    pub forced: usize,
    pub voluntary: usize,
    /// Channels given a bot by this plan.
    pub assigned: usize,
    /// Excluded channels, ascending: untouched by the plan.
    pub excluded: Vec<ChanIx>,
    /// Channels with no valid bot.
    pub unassigned: Vec<ChanIx>,
    pub stats: LoadStats,
}

impl PlatformPlan {
    pub fn is_excluded(&self, channel: ChanIx) -> bool {
        self.excluded.binary_search(&channel).is_ok()
    }

    /// One log line in the plugin's spirit.
    pub fn summary(&self, index: &PlatformIndex) -> String {
        const SHOWN: usize = 16;
        let s = &self.stats;
        let mut line = format!(
            "platform {}: assigned {} channels, moved {} ({} forced)",
            self.platform,
            self.assigned,
            self.forced + self.voluntary,
            self.forced
        );
        if !self.unassigned.is_empty() {
            let _ = write!(line, ", {} without a valid bot", self.unassigned.len());
        }
        let loads: Vec<String> = s
            .loads
            .iter()
            .take(SHOWN)
            .map(|&(b, l)| format!("{}:{l}", index.bot_id(b)))
            .collect();
        let more = s.loads.len().saturating_sub(SHOWN);
        let more = if more > 0 {
            format!(", … {more} more")
        } else {
            String::new()
        };
        let _ = write!(
            line,
            "; load [{}{more}], mean {:.1}, stddev {:.2}, min {}, max {}",
            loads.join(", "),
            s.mean,
            s.stddev,
            s.min,
            s.max
        );
        line
    }
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub strategy: Strategy,
    pub platforms: Vec<PlatformPlan>,
}

impl Plan {
    pub fn platform(&self, name: &str) -> Option<&PlatformPlan> {
        self.platforms.iter().find(|p| p.platform == name)
    }
}

/// Plans every enabled platform from scratch, leaving the index untouched.
pub fn plan(index: &FleetIndex, rules: &Rules, strategy: Strategy) -> Plan {
    let platforms = index
        .platforms()
        .iter()
        .filter(|p| rules.platform_enabled(p.name()))
        .map(|p| {
            let resolved = rules.resolve(p);
            let assignee = match strategy {
                Strategy::Greedy => greedy::assign(p, &resolved),
                Strategy::Optimal => optimal::State::build(p, &resolved).1,
            };
            finish(p, &resolved, assignee)
        })
        .collect();
    Plan {
        strategy,
        platforms,
    }
}

/// A planner that remembers: it applies each plan to the index and keeps the optimal
/// strategy's state, so the next plan re-plans incrementally from the index's journal.
pub struct Planner {
    strategy: Strategy,
    rules: Option<Rules>,
    states: FxHashMap<String, Remembered>,
}

struct Remembered {
    state: optimal::State,
    assignee_version: u64,
}

impl Planner {
    pub fn new(strategy: Strategy) -> Self {
        Self {
            strategy,
            rules: None,
            states: FxHashMap::default(),
        }
    }

    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// Plans every enabled platform and records the result as the index's assignment.
    pub fn plan(&mut self, index: &mut FleetIndex, rules: &Rules) -> Plan {
        if self.rules.as_ref() != Some(rules) {
            self.states.clear();
            self.rules = Some(rules.clone());
        }
        let mut platforms = Vec::new();
        for p in index.platforms_mut() {
            let journal = p.take_journal();
            if !rules.platform_enabled(p.name()) {
                self.states.remove(p.name());
                continue;
            }
            let resolved = rules.resolve(p);
            let assignee = match self.strategy {
                Strategy::Greedy => greedy::assign(p, &resolved),
                Strategy::Optimal => self.optimal(p, &resolved, &journal),
            };
            let t0 = std::time::Instant::now();
            let plan = finish(p, &resolved, assignee);
            if std::env::var("AA_DEBUG").is_ok() {
                eprintln!("finish {:?}", t0.elapsed());
            }
            for &(c, bot) in &plan.changes {
                p.set_assignee(c, bot);
            }
            if let Some(r) = self.states.get_mut(p.name()) {
                r.assignee_version = p.assignee_version();
            }
            platforms.push(plan);
        }
        Plan {
            strategy: self.strategy,
            platforms,
        }
    }

    fn optimal(
        &mut self,
        p: &PlatformIndex,
        resolved: &Resolved,
        journal: &crate::index::Journal,
    ) -> Vec<Option<BotIx>> {
        if let Some(r) = self.states.get_mut(p.name())
            && r.assignee_version == p.assignee_version()
            && let Ok(assignee) = r.state.replan(p, resolved, journal)
        {
            return assignee;
        }
        let (state, assignee) = optimal::State::build(p, resolved);
        self.states.insert(
            p.name().to_owned(),
            Remembered {
                state,
                assignee_version: u64::MAX,
            },
        );
        assignee
    }
}

/// Compares a new assignment with the index's and computes moves and statistics.
fn finish(
    p: &PlatformIndex,
    resolved: &Resolved,
    mut assignee: Vec<Option<BotIx>>,
) -> PlatformPlan {
    let mut plan = PlatformPlan {
        platform: p.name().to_owned(),
        assignee: Vec::new(),
        changes: Vec::new(),
        moves: Vec::new(),
        forced: 0,
        voluntary: 0,
        assigned: 0,
        excluded: Vec::new(),
        unassigned: Vec::new(),
        stats: LoadStats::new(Vec::new()),
    };
    let mut load = vec![0u32; p.bot_count()];
    let mut valid = Members::new();
    for (c, new) in assignee.iter_mut().enumerate() {
        let c = c as ChanIx;
        let previous = p.assignee(c);
        if resolved.is_excluded(c) {
            *new = previous;
            plan.excluded.push(c);
            continue;
        }
        match *new {
            Some(bot) => {
                plan.assigned += 1;
                load[bot as usize] += 1;
            }
            None => plan.unassigned.push(c),
        }
        if *new == previous {
            continue;
        }
        plan.changes.push((c, *new));
        if let Some(from) = previous {
            resolved.valid_bots(p, c, &mut valid);
            let forced = !valid.contains(&from);
            if forced {
                plan.forced += 1;
            } else {
                plan.voluntary += 1;
            }
            plan.moves.push(Move {
                channel: c,
                from,
                to: *new,
                forced,
            });
        }
    }
    plan.assignee = assignee;
    let loads = (0..p.bot_count() as BotIx)
        .filter(|&b| p.is_online(b))
        .map(|b| (b, load[b as usize]))
        .collect();
    plan.stats = LoadStats::new(loads);
    plan
}
