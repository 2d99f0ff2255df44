//! "Why does this bot answer in this channel?": the assignee of one channel and the rule that
//! put it there, in words (`GET /v1/explain/{platform}/{channel}`, `auto-assign explain`).
//!
//! The balanced case rests on the optimality condition of least Σ load²: moving one channel
//! from bot `a` (load `La`) to bot `b` (load `Lb`) changes Σ load² by
//! `(Lb + 1)² + (La − 1)² − Lb² − La² = 2(Lb − La + 1)`. In an optimal plan no single move
//! lowers it, so every other valid member has `Lb ≥ La − 1`: a member one below is a tie
//! (the channel stays, since moves are kept fewest), any other raises the imbalance. The
//! explanation states that condition for each member, so an operator can check it.
//!
//! With `balanceBy: messages` a bot's load is the sum of its channels' weights, and moving a
//! channel of weight `w` changes Σ (weighted load)² by `2w(Lb − La + w)`: the explanation
//! gives the channel's weight and that change for each member (what a move would gain).
//!
//! An operator's overrides come first: "pinned by an operator (note, until …)", "held with no
//! assignee by an operator", and a drained member is named as such.

use serde::Serialize;

use crate::balance::rules::{BalanceBy, Resolved, Rules};
use crate::index::{BotIx, ChanIx, FleetIndex, PlatformIndex};
use crate::model::split_key;
use crate::operator::{Made, Overrides, Pin, PinTarget, Shown, rfc3339};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Explanation {
    pub platform: String,
    pub channel: String,
    pub assignee: Option<String>,
    pub reason: Reason,
    /// The reason in words.
    pub text: String,
    /// Every bot in the channel, as the planner sees it.
    pub members: Vec<Member>,
    /// The channel's weight (messages a day, as the plan counts it).
    pub weight: f64,
    /// Whether an admin pinned the weight (`channelWeights`).
    pub weight_pinned: bool,
    /// An operator's pin or hold on the channel.
    pub pin: Option<Shown>,
    /// Members an operator drained.
    pub drained: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// No bot of the fleet reported being in the channel.
    UnknownChannel,
    /// The platform is not in `enabledPlatforms`.
    PlatformDisabled,
    /// `excludeChannels`: never assigned or changed.
    Excluded,
    /// The first online member of its `channelBotPriority` list.
    Pinned,
    /// An operator pinned it to its assignee.
    OperatorPin,
    /// An operator holds it with no assignee on purpose.
    Held,
    /// Exactly one online member.
    OnlyMember,
    /// Several online members: the least Σ load² placement.
    Balanced,
    /// No member is online.
    NoValidBot,
    /// The stored assignee is not a valid bot any more; the next rebalance moves it.
    WaitingForRebalance,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Member {
    pub bot: String,
    pub online: bool,
    /// Channels the bot holds.
    pub load: u32,
    /// The weights of the channels the bot holds (messages a day).
    pub messages: f64,
    /// Its `botCapacity`, if it has one (in the unit of `balanceBy`).
    pub capacity: Option<f64>,
}

/// Explains `channel` of `platform` as the index, the rules and the operators' overrides stand
/// now (`rules` holds the overrides already, as the planner reads them).
pub fn explain(
    index: &FleetIndex,
    rules: &Rules,
    overrides: &Overrides,
    platform: &str,
    channel: &str,
) -> Explanation {
    let mut out = Explanation {
        platform: platform.to_owned(),
        channel: channel.to_owned(),
        assignee: None,
        reason: Reason::UnknownChannel,
        text: format!("no bot of the fleet reported being in {platform}:{channel}"),
        members: Vec::new(),
        weight: 0.0,
        weight_pinned: false,
        pin: overrides.pin_of(platform, channel).map(Shown::from),
        drained: Vec::new(),
    };
    let Some(p) = index.platform(platform) else {
        return out;
    };
    let Some(c) = p.find_channel(channel) else {
        return out;
    };
    let assignee = p.assignee(c);
    let resolved = rules.resolve(p);
    out.weight = resolved.weight(p, c);
    out.weight_pinned = resolved.weight_pinned(c);
    out.assignee = assignee.map(|b| p.bot_id(b).to_owned());
    out.members = p
        .members(c)
        .iter()
        .map(|&b| Member {
            bot: p.bot_id(b).to_owned(),
            online: p.is_online(b),
            load: p.load(b),
            messages: weighted_load(p, &resolved, b),
            capacity: resolved.capacity(b),
        })
        .collect();
    out.drained = p
        .members(c)
        .iter()
        .filter(|&&b| resolved.is_drained(b))
        .map(|&b| p.bot_id(b).to_owned())
        .collect();
    let (reason, mut text) = reason(p, rules, overrides.pin_of(platform, channel), c, assignee);
    if let Some(a) = assignee.filter(|&a| resolved.is_drained(a)) {
        text.push_str(&format!(
            "; {} is drained and keeps this group only because no other valid bot can take it",
            p.bot_id(a)
        ));
    }
    // A capacity that cannot be met: the channel still has its bot, and the operator is told.
    if let Some(m) = out
        .members
        .iter()
        .find(|m| Some(&m.bot) == out.assignee.as_ref())
        && let Some(cap) = m.capacity
    {
        let load = match resolved.balance_by {
            BalanceBy::Channels => f64::from(m.load),
            BalanceBy::Messages => m.messages,
        };
        if load > cap {
            text.push_str(&format!(
                "; {} is over its capacity ({load:.1} > {cap} {}): no valid bot has room left \
                 for it, and the plan keeps that excess the least it can be",
                m.bot, resolved.balance_by
            ));
        }
    }
    out.reason = reason;
    out.text = text;
    out
}

fn reason(
    p: &PlatformIndex,
    rules: &Rules,
    pin: Option<&Pin>,
    c: ChanIx,
    assignee: Option<BotIx>,
) -> (Reason, String) {
    let name = |b: BotIx| p.bot_id(b).to_owned();
    let kept = match assignee {
        Some(b) => format!("it keeps {}", name(b)),
        None => "it stays unassigned".to_owned(),
    };
    if !rules.platform_enabled(p.name()) {
        return (
            Reason::PlatformDisabled,
            format!("platform {} is not in enabledPlatforms: {kept}", p.name()),
        );
    }
    let resolved = rules.resolve(p);
    if resolved.is_excluded(c) {
        return (
            Reason::Excluded,
            format!("excluded by excludeChannels, never assigned or changed: {kept}"),
        );
    }
    // An operator's pin or hold first; a pin whose bot cannot answer now waits, and the rest
    // of the rules serve the group meanwhile.
    let mut waiting_pin = String::new();
    if let Some(pin) = pin {
        let made = operator_made(&pin.made);
        match &pin.target {
            PinTarget::Hold => {
                let text = format!("held with no assignee by an operator{made}");
                return match assignee {
                    None => (Reason::Held, text),
                    Some(_) => (
                        Reason::WaitingForRebalance,
                        format!("{text}; the next rebalance unassigns it"),
                    ),
                };
            }
            PinTarget::Bot(bot) => {
                let text = format!("pinned to {bot} by an operator{made}");
                match p.find_bot(bot) {
                    Some(b) if resolved.pinned(p, c) == Some(b) => {
                        return waiting_or(p, assignee, b, Reason::OperatorPin, text);
                    }
                    b => {
                        let why = match b {
                            Some(b) if !p.members(c).contains(&b) => "is not in the group",
                            Some(b) if !p.is_online(b) => "is offline",
                            Some(b) if resolved.is_drained(b) => "is drained",
                            _ => "is not known",
                        };
                        waiting_pin =
                            format!("{text}, but {bot} {why}: served as usual meanwhile; ");
                    }
                }
            }
        }
    }
    let (reason, text) = usual_reason(p, rules, &resolved, c, assignee);
    (reason, format!("{waiting_pin}{text}"))
}

/// `" (note "…", until …)"` of an operator's change, or nothing.
fn operator_made(made: &Made) -> String {
    let mut parts = Vec::new();
    if let Some(note) = &made.note {
        parts.push(format!("note {note:?}"));
    }
    if let Some(until) = made.until_ms {
        parts.push(format!("until {}", rfc3339(until)));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// The reason by the config's rules and balance.
fn usual_reason(
    p: &PlatformIndex,
    rules: &Rules,
    resolved: &Resolved,
    c: ChanIx,
    assignee: Option<BotIx>,
) -> (Reason, String) {
    let name = |b: BotIx| p.bot_id(b).to_owned();
    let kept = match assignee {
        Some(b) => format!("it keeps {}", name(b)),
        None => "it stays unassigned".to_owned(),
    };
    let online: Vec<BotIx> = p
        .members(c)
        .iter()
        .copied()
        .filter(|&b| p.is_online(b) && (!resolved.is_drained(b) || drained_only(p, resolved, c)))
        .collect();
    if let Some(pin) = resolved
        .pinned(p, c)
        .filter(|_| resolved.priority(c).is_some())
    {
        let list = resolved.priority(c).unwrap_or_default();
        let k = list.iter().position(|&b| b == pin).unwrap_or(0);
        let skipped: Vec<String> = list[..k]
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                let why = if p.members(c).contains(&b) {
                    "offline"
                } else {
                    "not in the channel"
                };
                format!("entry {} ({}) is {why}", i + 1, name(b))
            })
            .collect();
        let mut text = format!(
            "pinned by channelBotPriority entry {} ({})",
            k + 1,
            name(pin)
        );
        if !skipped.is_empty() {
            text.push_str(&format!(": {}", skipped.join(", ")));
        }
        return waiting_or(p, assignee, pin, Reason::Pinned, text);
    }
    match online.as_slice() {
        [] => {
            let mut why: Vec<String> = p
                .members(c)
                .iter()
                .map(|&b| format!("{} is offline", name(b)))
                .collect();
            if why.is_empty() {
                why.push("no bot is in the channel".into());
            }
            // Priority entries naming another platform's bot can never hold this channel.
            let key = format!("{}:{}", p.name(), p.channel_id(c));
            let foreign = rules
                .priority
                .iter()
                .filter(|(k, _)| **k == key || p.channel_id(c) == k.as_str())
                .flat_map(|(_, bots)| bots)
                .filter(|b| split_key(b).is_some_and(|(platform, _)| platform != p.name()))
                .map(|b| format!("priority entry {b} is on another platform"));
            why.extend(foreign);
            (
                Reason::NoValidBot,
                format!("no valid bot ({}): {kept}", why.join(", ")),
            )
        }
        [only] => waiting_or(
            p,
            assignee,
            *only,
            Reason::OnlyMember,
            format!("{} is its only online member", name(*only)),
        ),
        _ => match assignee.filter(|b| online.contains(b)) {
            None => (
                Reason::WaitingForRebalance,
                format!(
                    "{} online members and no valid assignee yet: the next rebalance assigns it",
                    online.len()
                ),
            ),
            Some(a) if resolved.balance_by == BalanceBy::Messages => {
                let w = resolved.weight(p, c);
                let la = weighted_load(p, resolved, a);
                let others: Vec<String> = online
                    .iter()
                    .filter(|&&b| b != a)
                    .map(|&b| {
                        let lb = weighted_load(p, resolved, b);
                        let delta = 2.0 * w * (lb - la + w);
                        let effect = if delta >= 0.0 {
                            format!("would raise Σ (weighted load)² by {delta:.1}")
                        } else {
                            format!(
                                "would lower Σ (weighted load)² by {:.1} ({:.4}% of bot {}'s \
                                 and {}'s share: held back below weights.minGain, or a \
                                 rebalance still due)",
                                -delta,
                                100.0 * -delta / (la * la + lb * lb).max(1.0),
                                name(a),
                                name(b)
                            )
                        };
                        format!("moving it to {} ({lb:.1} messages a day) {effect}", name(b))
                    })
                    .collect();
                (
                    Reason::Balanced,
                    format!(
                        "balanced by messages: the channel weighs {w:.1} messages a day; {} \
                         carries {la:.1}; {}",
                        name(a),
                        others.join("; ")
                    ),
                )
            }
            Some(a) => {
                let la = p.load(a);
                let others: Vec<String> = online
                    .iter()
                    .filter(|&&b| b != a)
                    .map(|&b| {
                        let lb = p.load(b);
                        let delta = 2 * (i64::from(lb) - i64::from(la) + 1);
                        let effect = match delta.signum() {
                            1 => format!("would raise Σ load² by {delta}"),
                            0 => "is a tie (Σ load² unchanged), so it stays: fewest moves".into(),
                            _ => format!(
                                "would lower Σ load² by {} (not an optimal plan: the greedy \
                                 strategy, or a rebalance still due)",
                                -delta
                            ),
                        };
                        format!("moving it to {} (load {lb}) {effect}", name(b))
                    })
                    .collect();
                (
                    Reason::Balanced,
                    format!(
                        "balanced: {} holds {la} channel(s); {}",
                        name(a),
                        others.join("; ")
                    ),
                )
            }
        },
    }
}

/// Whether only drained bots are online in the channel (they keep it then).
fn drained_only(p: &PlatformIndex, resolved: &Resolved, c: ChanIx) -> bool {
    !p.members(c)
        .iter()
        .any(|&b| p.is_online(b) && !resolved.is_drained(b))
}

/// The weights of the channels `bot` holds.
fn weighted_load(p: &PlatformIndex, resolved: &Resolved, bot: BotIx) -> f64 {
    p.channels_of(bot)
        .iter()
        .filter(|&&c| p.assignee(c) == Some(bot) && !resolved.is_excluded(c))
        .map(|&c| resolved.weight(p, c))
        .sum()
}

/// The rule's bot when it is the assignee, else "waiting for the next rebalance".
fn waiting_or(
    p: &PlatformIndex,
    assignee: Option<BotIx>,
    bot: BotIx,
    reason: Reason,
    text: String,
) -> (Reason, String) {
    if assignee == Some(bot) {
        (reason, text)
    } else {
        (
            Reason::WaitingForRebalance,
            format!("{text}; the next rebalance gives it to {}", p.bot_id(bot)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 and 2 in a, b, c; 3 in c only, offline; d has no online member.
    fn fleet() -> FleetIndex {
        let mut index = FleetIndex::new();
        let p = index.platform_mut("onebot");
        p.bot_online("1", &["a", "b", "c"]);
        p.bot_online("2", &["a", "b", "c", "e"]);
        p.bot_online("3", &["c", "d"]);
        p.bot_offline("3");
        let one = p.find_bot("1").unwrap();
        let two = p.find_bot("2").unwrap();
        for (c, b) in [("a", one), ("b", two), ("c", one), ("e", two)] {
            let c = p.find_channel(c).unwrap();
            p.set_assignee(c, Some(b));
        }
        index
    }

    fn reason_of(rules: &Rules, channel: &str) -> (Reason, String) {
        let e = explain(&fleet(), rules, &Overrides::default(), "onebot", channel);
        (e.reason, e.text)
    }

    #[test]
    fn every_reason_in_words() {
        let rules = Rules::default();
        // 1 holds a and c (2), 2 holds b and e (2): moving a to 2 raises Σ load² by 2.
        let (reason, text) = reason_of(&rules, "a");
        assert_eq!(reason, Reason::Balanced);
        assert_eq!(
            text,
            "balanced: 1 holds 2 channel(s); moving it to 2 (load 2) would raise Σ load² by 2"
        );
        assert_eq!(reason_of(&rules, "e").0, Reason::OnlyMember);
        let (reason, text) = reason_of(&rules, "d");
        assert_eq!(reason, Reason::NoValidBot);
        assert_eq!(text, "no valid bot (3 is offline): it stays unassigned");
        assert_eq!(reason_of(&rules, "zz").0, Reason::UnknownChannel);

        let pinned = Rules {
            priority: [("onebot:c".to_owned(), vec!["3".to_owned(), "2".to_owned()])].into(),
            ..Rules::default()
        };
        let (reason, text) = reason_of(&pinned, "c");
        assert_eq!(reason, Reason::WaitingForRebalance);
        assert_eq!(
            text,
            "pinned by channelBotPriority entry 2 (2): entry 1 (3) is offline; the next \
             rebalance gives it to 2"
        );
        let pinned_here = Rules {
            priority: [("b".to_owned(), vec!["2".to_owned()])].into(),
            ..Rules::default()
        };
        assert_eq!(
            reason_of(&pinned_here, "b"),
            (
                Reason::Pinned,
                "pinned by channelBotPriority entry 1 (2)".into()
            )
        );

        let excluded = Rules {
            exclude: vec!["onebot:a".into()],
            ..Rules::default()
        };
        assert_eq!(reason_of(&excluded, "a").0, Reason::Excluded);
        let disabled = Rules {
            enabled_platforms: vec!["discord".into()],
            ..Rules::default()
        };
        assert_eq!(reason_of(&disabled, "a").0, Reason::PlatformDisabled);
    }

    #[test]
    fn ties_raises_and_an_unbalanced_plan() {
        // (channel, bot) assignments over the fleet's 1 (a, b, c) and 2 (a, b, c, e).
        let explained = |assignment: &[(&str, Option<&str>)], channel: &str| {
            let mut index = fleet();
            let p = index.platform_mut("onebot");
            for (c, b) in assignment {
                let c = p.find_channel(c).unwrap();
                let b = b.map(|b| p.find_bot(b).unwrap());
                p.set_assignee(c, b);
            }
            explain(
                &index,
                &Rules::default(),
                &Overrides::default(),
                "onebot",
                channel,
            )
            .text
        };
        // Loads 1: 2 (a, c), 2: 1 (b): moving a to 2 leaves Σ load² as it is.
        let text = explained(&[("e", None)], "a");
        assert!(text.contains("moving it to 2 (load 1) is a tie"), "{text}");
        // Loads 1: 1 (a), 2: 3 (b, c, e): moving a to 2 raises Σ load² by 2(3 − 1 + 1).
        let text = explained(&[("c", Some("2"))], "a");
        assert!(
            text.contains("moving it to 2 (load 3) would raise Σ load² by 6"),
            "{text}"
        );
        // Loads 1: 3 (a, b, c), 2: 1 (e): b on 1 is not where an optimal plan leaves it.
        let text = explained(&[("b", Some("1"))], "b");
        assert!(
            text.contains("moving it to 2 (load 1) would lower Σ load² by 2"),
            "{text}"
        );
    }
}
