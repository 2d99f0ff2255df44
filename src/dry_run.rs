//! A dry run (`POST /v1/rebalance?dryRun=true`, `auto-assign rebalance --dry-run`): the plan a
//! rebalance would make now, from scratch on the current state, committing nothing. For each
//! platform: every move (the group, from, to, forced or voluntary, and the rule that decided
//! it), each bot's load before and after, and Σ load², the standard deviation and the largest
//! load before and after; with `balanceBy: messages` also Σ (weighted load)² before and after
//! and the plan's certified lower bound and gap.
//!
//! The plan is the one a rebalance from scratch makes ([`balance::plan`]): the same optimum
//! (exact for counts, certified for messages) and the fewest moves from the current
//! assignment, so an operator sees what the next run will move.

use serde::Serialize;

use crate::balance::{self, BalanceBy, BotIx, ChanIx, LoadStats, Resolved, Rules, Strategy};
use crate::index::{FleetIndex, PlatformIndex};

#[derive(Debug, Clone, Default, Serialize)]
pub struct DryRun {
    pub strategy: String,
    pub platforms: Vec<PlatformDryRun>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlatformDryRun {
    pub platform: String,
    pub balance_by: BalanceBy,
    pub moves: Vec<PlannedMove>,
    pub forced: usize,
    pub voluntary: usize,
    /// Bots online now or answering somewhere, in index order.
    pub loads: Vec<BotLoad>,
    pub before: Balance,
    pub after: Balance,
}

/// One group whose assignee the plan changes.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedMove {
    pub channel: String,
    pub from: Option<String>,
    pub to: Option<String>,
    pub kind: MoveKind,
    pub rule: Rule,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MoveKind {
    /// Its bot is no longer valid there.
    Forced,
    /// For balance.
    Voluntary,
    /// It had no assignee.
    First,
}

/// The rule that decided a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// An operator's pin.
    Pin,
    /// An operator's hold: no assignee on purpose.
    Hold,
    /// Its bot is drained.
    Drain,
    /// Its bot went offline, was quarantined or left the group.
    BotGone,
    /// `channelBotPriority`.
    Priority,
    /// No valid bot is left.
    NoValidBot,
    /// Least Σ load² (or Σ (weighted load)²).
    Balance,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BotLoad {
    pub bot: String,
    pub online: bool,
    pub drained: bool,
    pub before: u32,
    pub after: u32,
    /// Messages a day (`balanceBy: messages`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages_before: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages_after: Option<f64>,
}

/// The balance of one side of the plan, over the bots listed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Balance {
    pub sum_sq: u64,
    pub mean: f64,
    pub stddev: f64,
    pub max: u32,
    /// Σ (weighted load)² (`balanceBy: messages`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weighted_sum_sq: Option<f64>,
    /// After only, `balanceBy: messages`: no assignment has a smaller Σ (weighted load)².
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lower_bound: Option<f64>,
    /// After only, `balanceBy: messages`: the plan's relative distance above the bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gap: Option<f64>,
}

/// What a rebalance from scratch would do now on every enabled platform of `index`, which is
/// left untouched.
pub fn dry_run(index: &FleetIndex, rules: &Rules, strategy: Strategy) -> DryRun {
    let plan = balance::plan(index, rules, strategy);
    let platforms = plan
        .platforms
        .iter()
        .filter_map(|planned| {
            let p = index.platform(&planned.platform)?;
            Some(platform(p, &rules.resolve(p), planned))
        })
        .collect();
    DryRun {
        strategy: plan.strategy.to_string(),
        platforms,
    }
}

fn platform(
    p: &PlatformIndex,
    resolved: &Resolved,
    planned: &balance::PlatformPlan,
) -> PlatformDryRun {
    let weighted = resolved.balance_by == BalanceBy::Messages;
    let bots = p.bot_count();
    let mut before = vec![0u32; bots];
    let mut messages_before = vec![0.0f64; bots];
    for c in 0..p.channel_count() as ChanIx {
        if let Some(b) = p.assignee(c).filter(|_| !resolved.is_excluded(c)) {
            before[b as usize] += 1;
            messages_before[b as usize] += resolved.weight(p, c);
        }
    }
    let (mut after, mut messages_after) = (before.clone(), messages_before.clone());
    let mut moves = Vec::with_capacity(planned.changes.len());
    for &(c, to) in &planned.changes {
        let from = p.assignee(c);
        let w = resolved.weight(p, c);
        if let Some(a) = from {
            after[a as usize] -= 1;
            messages_after[a as usize] -= w;
        }
        if let Some(b) = to {
            after[b as usize] += 1;
            messages_after[b as usize] += w;
        }
        let forced = planned
            .moves
            .iter()
            .find(|m| m.channel == c)
            .is_some_and(|m| m.forced);
        let kind = match from {
            None => MoveKind::First,
            Some(_) if forced => MoveKind::Forced,
            Some(_) => MoveKind::Voluntary,
        };
        moves.push(PlannedMove {
            channel: p.channel_id(c).to_owned(),
            from: from.map(|b| p.bot_id(b).to_owned()),
            to: to.map(|b| p.bot_id(b).to_owned()),
            kind,
            rule: rule(p, resolved, c, from, to, kind),
        });
    }
    // As the plan's statistics: the bots that take part (online, not drained unless they keep
    // groups), and any that answers somewhere before.
    let listed: Vec<BotIx> = (0..bots as BotIx)
        .filter(|&b| {
            let part = p.is_online(b) && (!resolved.is_drained(b) || after[b as usize] > 0);
            part || before[b as usize] > 0
        })
        .collect();
    let side = |loads: &[u32], messages: &[f64]| {
        let stats = LoadStats::new(listed.iter().map(|&b| (b, loads[b as usize])).collect());
        Balance {
            sum_sq: stats.sum_sq,
            mean: stats.mean,
            stddev: stats.stddev,
            max: stats.max,
            weighted_sum_sq: weighted
                .then(|| listed.iter().map(|&b| messages[b as usize].powi(2)).sum()),
            lower_bound: None,
            gap: None,
        }
    };
    let mut after_balance = side(&after, &messages_after);
    if let Some(certificate) = &planned.certificate {
        after_balance.lower_bound = Some(certificate.lower_bound);
        after_balance.gap = Some(certificate.gap());
    }
    PlatformDryRun {
        platform: planned.platform.clone(),
        balance_by: resolved.balance_by,
        forced: moves.iter().filter(|m| m.kind == MoveKind::Forced).count(),
        voluntary: moves
            .iter()
            .filter(|m| m.kind == MoveKind::Voluntary)
            .count(),
        moves,
        loads: listed
            .iter()
            .map(|&b| BotLoad {
                bot: p.bot_id(b).to_owned(),
                online: p.is_online(b),
                drained: resolved.is_drained(b),
                before: before[b as usize],
                after: after[b as usize],
                messages_before: weighted.then_some(messages_before[b as usize]),
                messages_after: weighted.then_some(messages_after[b as usize]),
            })
            .collect(),
        before: side(&before, &messages_before),
        after: after_balance,
    }
}

/// The rule behind one change: an operator's override first, then why the old bot had to go,
/// then what chose the new one.
fn rule(
    p: &PlatformIndex,
    resolved: &Resolved,
    c: ChanIx,
    from: Option<BotIx>,
    to: Option<BotIx>,
    kind: MoveKind,
) -> Rule {
    if resolved.is_held(c) {
        return Rule::Hold;
    }
    if let (Some(Some(pinned)), Some(to)) = (resolved.operator_pin(c), to)
        && pinned == to
    {
        return Rule::Pin;
    }
    if kind == MoveKind::Forced
        && let Some(a) = from
    {
        let gone = !p.is_online(a) || !p.members(c).contains(&a);
        if !gone && resolved.is_drained(a) {
            return Rule::Drain;
        }
        if gone && to.is_none() {
            return Rule::NoValidBot;
        }
        if gone {
            return Rule::BotGone;
        }
    }
    match to {
        None => Rule::NoValidBot,
        Some(b) if resolved.priority(c).is_some() && resolved.pinned(p, c) == Some(b) => {
            Rule::Priority
        }
        Some(_) => Rule::Balance,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dry_run_names_each_move_and_its_rule_and_changes_nothing() {
        let mut index = FleetIndex::new();
        let p = index.platform_mut("onebot");
        let groups: Vec<String> = (0..6).map(|g| format!("g{g}")).collect();
        p.bot_online("1", &groups);
        p.bot_online("2", &groups);
        p.bot_online("3", &groups[..2]);
        // Everything on bot 1.
        for g in &groups {
            let (c, b) = (p.find_channel(g).unwrap(), p.find_bot("1").unwrap());
            p.set_assignee(c, Some(b));
        }
        p.take_journal();
        let mut rules = Rules::default();
        rules.pins.insert("onebot:g5".into(), Some("1".into()));
        rules.pins.insert("onebot:g4".into(), None);
        rules.drained.insert("onebot:3".into());
        let run = dry_run(&index, &rules, Strategy::Optimal);
        let p = &run.platforms[0];
        // g4 is held, g5 stays on 1 (pinned), the other four spread over 1 and 2 (3 is drained).
        let held = p.moves.iter().find(|m| m.channel == "g4").unwrap();
        assert_eq!((held.to.as_deref(), held.rule), (None, Rule::Hold));
        assert!(p.moves.iter().all(|m| m.channel != "g5"));
        let voluntary: Vec<&PlannedMove> = p
            .moves
            .iter()
            .filter(|m| m.kind == MoveKind::Voluntary)
            .collect();
        assert_eq!(voluntary.len(), 2, "{:?}", p.moves);
        assert!(
            voluntary
                .iter()
                .all(|m| m.to.as_deref() == Some("2") && m.rule == Rule::Balance)
        );
        let load = |bot: &str| p.loads.iter().find(|l| l.bot == bot).unwrap();
        assert_eq!((load("1").before, load("1").after), (6, 3));
        assert_eq!((load("2").before, load("2").after), (0, 2));
        // Drained and empty, bot 3 takes no part in the balance.
        assert!(p.loads.iter().all(|l| l.bot != "3"));
        assert_eq!((p.before.sum_sq, p.after.sum_sq), (36, 13));
        assert_eq!((p.before.max, p.after.max), (6, 3));
        // Nothing changed in the index.
        let ip = index.platform("onebot").unwrap();
        assert!((0..6).all(|c| ip.assignee(c) == ip.find_bot("1")));
    }
}
