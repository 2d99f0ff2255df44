//! The ingress decision: should this bot handle this message?
//!
//! In order:
//! 1. a message sent by a bot of the fleet is never handled;
//! 2. a private message is always handled;
//! 3. a message that @-mentions bots of the fleet is handled by the mentioned bot(s) only
//!    (Koishi's rule);
//! 4. the `fanout` lane lets every bot handle;
//! 5. in a group with an online assignee (not excluded), only the assignee handles: an
//!    in-memory lookup, no Redis round trip;
//! 6. in a group an operator holds with no assignee, nobody handles;
//! 7. otherwise (unassigned, excluded, assignee offline) the first claimer of the message
//!    signature `(group, user, plaintext, time)` wins, Pallas-compatible.
//!
//! In 5 and 7 the first ask of a message fixes its bot for the later asks, while that bot
//! stays online (see [`super::given`]): asks that straddle a change of the assignee get one
//! answer between them, not two or none.
//!
//! In a federate pool, messages from other deployments' bots (or @-mentioning only them) are
//! left to them; a text that a peer declares as a command is command traffic whatever lane the
//! caller saw, and is left to the declaring peers when this deployment does not declare it
//! (Pallas-Bot's gate); command traffic is checked against the group's owning deployment; and
//! the bot this deployment picked must then win the pool-wide federate claim (after the
//! candidate round for command traffic or a named candidate capability). Fan-out messages do
//! not make a group present, as upstream.

use serde::{Deserialize, Serialize};

use std::borrow::Cow;
use std::sync::Arc;

use super::claim::{Claims, Via, valid_plugin};
use super::federate::Federate;
use super::federate::ingress_claim::{CANDIDATE_PLUGIN, Outcome, PLUGIN as FEDERATE_PLUGIN};
use super::given::{By, Given, Holder, Message};
use super::signature::{Body, Signature, Time};
use crate::traffic::Counter;
use crate::view::{Route, View};

/// How long a claim that guards a move may take: past it, a just-moved assignee answers by
/// the assignment alone (see [`View::just_moved`]), a moving group's old assignee not at all.
const MOVE_CLAIM_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// The default claim plugin: Pallas-Bot's ingress gate namespace.
pub const DEFAULT_PLUGIN: &str = "ingress_gate";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    Command,
    Chat,
    Fanout,
}

/// `POST /v1/ingress` body. Ids are decimal strings or integers. Its strings borrow from the
/// body when they hold no escapes, so reading a request allocates nothing.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request<'a> {
    #[serde(borrow)]
    pub platform: Cow<'a, str>,
    #[serde(deserialize_with = "id")]
    pub self_id: i64,
    /// Absent or null for a private message.
    #[serde(default, deserialize_with = "opt_id")]
    pub group_id: Option<i64>,
    #[serde(deserialize_with = "id")]
    pub user_id: i64,
    #[serde(borrow)]
    pub text: Cow<'a, str>,
    /// Message time, seconds or milliseconds.
    pub time: f64,
    #[serde(default, deserialize_with = "ids")]
    pub at: Vec<i64>,
    pub lane: Lane,
    #[serde(default, borrow, deserialize_with = "optional_text")]
    pub plugin: Option<Cow<'a, str>>,
    /// Federate candidate capability (`command`, `llm_alias`, `hosted_activity`; `command` by
    /// default on the command lane): this bot registers and only the smallest candidate bot
    /// claims.
    #[serde(default, borrow, deserialize_with = "optional_text")]
    pub candidate: Option<Cow<'a, str>>,
    /// A hard trigger without a capability: yield to any registered candidate.
    #[serde(default)]
    pub candidate_wait: bool,
    /// The command needs a group-admin bot: in a federate pool, the group-admin owner (a
    /// deployment and one of its admin bots) takes it.
    #[serde(default)]
    pub group_admin: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub handle: bool,
    /// Why, as words in the API (`"assignee"`, `"unassigned channel: won the claim (redis
    /// claim)"`, ...).
    #[serde(serialize_with = "crate::pallas::ingress::as_text")]
    pub reason: Reason,
    /// The reason as a stable label (`assignee`, `claim`, ...), for programs.
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assignee: Option<Arc<str>>,
}

fn decision(handle: bool, reason: Reason, assignee: Option<Arc<str>>) -> Decision {
    Decision {
        handle,
        kind: reason.kind(),
        reason,
        assignee,
    }
}

/// The reason as words; most are fixed words, written without the formatting machinery.
fn as_text<S: serde::Serializer>(reason: &Reason, s: S) -> Result<S::Ok, S::Error> {
    match reason.fixed_text() {
        Some(text) => s.serialize_str(text),
        None => s.collect_str(reason),
    }
}

/// Why a bot handles a message or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    SentByFleetBot,
    SentByPeerBot,
    Private,
    Mentioned,
    OtherBotMentioned,
    PeerBotMentioned,
    Fanout,
    /// Only peers declare the text as a command.
    PeerDeclaresCommand,
    GroupAdminOwner {
        bot: i64,
        deployment: String,
    },
    OwnedByDeployment(String),
    Assignee,
    AssignedToAnotherBot,
    /// An operator holds the group with no assignee: nobody handles it.
    Held,
    /// An earlier ask of this message gave it to this bot, which the assignment of this moment
    /// would not (it changed in between).
    GivenToThisBot,
    /// An earlier ask of this message gave it to another bot, still online, though the
    /// assignment of this moment, or a claim, would give it to this one.
    GivenToAnotherBot,
    /// The leader is moving the group to another bot: only its assignee of this moment
    /// answers, and only by winning the message's claim in Redis (which it did not).
    Moving,
    /// No online assignee: the first claimer of the message handles it.
    Claim {
        because: NoAssignee,
        won: bool,
        via: Via,
    },
    /// This deployment picked the bot (`local`); the pool's claim then decided.
    Pool {
        local: Box<Reason>,
        outcome: Outcome,
    },
}

/// Why a group message goes to the claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoAssignee {
    Excluded,
    Unassigned,
    AssigneeOffline,
    /// The assignee took the group over a moment ago (under leadership): it claims the
    /// message, as an instance that has not seen the change claims it for the bot before.
    JustMoved,
    /// The group is moving to another bot (under leadership): its assignee of this moment
    /// answers by claim, which the next one meets once it has the group.
    Moving,
}

impl Reason {
    /// Every [`Reason::kind`], at its [`Reason::kind_index`].
    pub const KINDS: [&'static str; 18] = [
        "fleet_bot",
        "peer_bot",
        "private",
        "mentioned",
        "other_mentioned",
        "peer_mentioned",
        "fanout",
        "peer_command",
        "group_admin_owner",
        "owned_elsewhere",
        "assignee",
        "assigned_elsewhere",
        "claim",
        "pool_claim",
        "held",
        "given_here",
        "given_elsewhere",
        "moving",
    ];

    /// A short, stable label (the metrics' `reason`): `assignee`, `claim`, `pool_claim`, ...
    pub fn kind(&self) -> &'static str {
        Self::KINDS[self.kind_index()]
    }

    /// The position of [`Reason::kind`] in [`Reason::KINDS`].
    pub fn kind_index(&self) -> usize {
        match self {
            Reason::SentByFleetBot => 0,
            Reason::SentByPeerBot => 1,
            Reason::Private => 2,
            Reason::Mentioned => 3,
            Reason::OtherBotMentioned => 4,
            Reason::PeerBotMentioned => 5,
            Reason::Fanout => 6,
            Reason::PeerDeclaresCommand => 7,
            Reason::GroupAdminOwner { .. } => 8,
            Reason::OwnedByDeployment(_) => 9,
            Reason::Assignee => 10,
            Reason::AssignedToAnotherBot => 11,
            Reason::Claim { .. } => 12,
            Reason::Pool { .. } => 13,
            Reason::Held => 14,
            Reason::GivenToThisBot => 15,
            Reason::GivenToAnotherBot => 16,
            Reason::Moving => 17,
        }
    }

    /// The words of a reason that has no details, `None` for one that has.
    fn fixed_text(&self) -> Option<&'static str> {
        Some(match self {
            Reason::SentByFleetBot => "sent by a bot of the fleet",
            Reason::SentByPeerBot => "sent by a bot of another deployment",
            Reason::Private => "private message",
            Reason::Mentioned => "mentioned",
            Reason::OtherBotMentioned => "another bot of the fleet is mentioned",
            Reason::PeerBotMentioned => "a bot of another deployment is mentioned",
            Reason::Fanout => "fanout lane",
            Reason::PeerDeclaresCommand => "a deployment that declares this command takes it",
            Reason::Assignee => "assignee",
            Reason::AssignedToAnotherBot => "assigned to another bot",
            Reason::Held => "held with no assignee by an operator",
            Reason::GivenToThisBot => "given to this bot at an earlier ask of this message",
            Reason::GivenToAnotherBot => "given to another bot at an earlier ask of this message",
            Reason::Moving => {
                "moving to another bot: answered only by its assignee winning the claim in Redis"
            }
            Reason::GroupAdminOwner { .. }
            | Reason::OwnedByDeployment(_)
            | Reason::Claim { .. }
            | Reason::Pool { .. } => return None,
        })
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(text) = self.fixed_text() {
            return f.write_str(text);
        }
        match self {
            Reason::GroupAdminOwner { bot, deployment } => {
                write!(f, "group-admin owner: bot {bot} of deployment {deployment}")
            }
            Reason::OwnedByDeployment(d) => write!(f, "group owned by deployment {d}"),
            Reason::Claim { because, won, via } => {
                let because = match because {
                    NoAssignee::Excluded => "excluded channel",
                    NoAssignee::Unassigned => "unassigned channel",
                    NoAssignee::AssigneeOffline => "assignee offline",
                    NoAssignee::JustMoved => "assignee just took the group over",
                    NoAssignee::Moving => "moving to another bot",
                };
                let outcome = if *won {
                    "won the claim"
                } else {
                    "claimed by another bot"
                };
                write!(f, "{because}: {outcome} ({})", via.describe())
            }
            Reason::Pool { local, outcome } => write!(f, "{local}; {}", outcome.describe()),
            _ => unreachable!("{self:?} has a fixed text"),
        }
    }
}

/// A request that cannot be decided, naming the bad field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadRequest {
    #[error("plugin: {0:?} is not a valid plugin name ([A-Za-z0-9_.:-])")]
    Plugin(String),
    #[error("platform: empty")]
    EmptyPlatform,
}

pub struct Ingress {
    pub view: View,
    pub claims: Claims,
    pub federate: Option<Arc<Federate>>,
    /// Messages counted for the channel weights.
    pub traffic: Counter,
    /// Which bot each recent message went to.
    pub given: Given,
}

impl Ingress {
    /// Decides; `Err` names a bad field. A group message decided for its assignee, or won by
    /// a claim, is counted for its channel's weight: every member bot asks, and exactly one
    /// of them gets that answer.
    pub async fn decide(&self, r: &Request<'_>) -> Result<Decision, BadRequest> {
        let decision = self.decide_for(r).await?;
        if let Some(group) = r.group_id
            && matches!(
                decision.reason,
                Reason::Assignee | Reason::Claim { won: true, .. } | Reason::GivenToThisBot
            )
        {
            self.traffic
                .add(&r.platform, itoa::Buffer::new().format(group), 1);
        }
        Ok(decision)
    }

    async fn decide_for(&self, r: &Request<'_>) -> Result<Decision, BadRequest> {
        let plugin = r.plugin.as_deref().unwrap_or(DEFAULT_PLUGIN);
        if !valid_plugin(plugin) {
            return Err(BadRequest::Plugin(plugin.to_owned()));
        }
        if r.platform.is_empty() {
            return Err(BadRequest::EmptyPlatform);
        }
        let view = &self.view;
        let p = &*r.platform;
        let federate = self.federate.as_ref();
        let mut id = itoa::Buffer::new();
        if view.is_fleet_bot(p, id.format(r.user_id)) {
            return Ok(decision(false, Reason::SentByFleetBot, None));
        }
        if federate.is_some_and(|f| f.is_peer_bot(r.user_id)) {
            return Ok(decision(false, Reason::SentByPeerBot, None));
        }
        let Some(group) = r.group_id else {
            return Ok(decision(true, Reason::Private, None));
        };
        // Fan-out traffic does not make the group present, as upstream: presence decides
        // command owners, which fan-out never asks for.
        if r.lane != Lane::Fanout
            && let Some(f) = federate
        {
            f.touch(group);
        }
        let mentioned: Vec<i64> =
            r.at.iter()
                .copied()
                .filter(|b| view.is_fleet_bot(p, id.format(*b)))
                .collect();
        let peer_mentioned = federate.is_some_and(|f| r.at.iter().any(|b| f.is_peer_bot(*b)));
        if !mentioned.is_empty() {
            let me = mentioned.contains(&r.self_id);
            let why = if me {
                Reason::Mentioned
            } else {
                Reason::OtherBotMentioned
            };
            return Ok(decision(me, why, None));
        }
        if peer_mentioned {
            return Ok(decision(false, Reason::PeerBotMentioned, None));
        }
        if r.lane == Lane::Fanout {
            return Ok(decision(true, Reason::Fanout, None));
        }
        let mut command_traffic = r.lane == Lane::Command;
        if let Some(f) = federate {
            // Pallas-Bot's gate: a text some peer declares as a command is command traffic
            // whatever lane the caller saw, and a deployment that does not declare it stays
            // out when a declaring peer is present in the group.
            let peer = f.peer_command(group, &r.text);
            if peer.yield_to_peer {
                return Ok(decision(false, Reason::PeerDeclaresCommand, None));
            }
            command_traffic |= peer.declared;
        }
        if let Some(f) = federate
            && r.group_admin
            && let Some(owner) = f.group_admin_owner(group, &r.text).await
        {
            let me = owner.deployment_id == f.pool.deployment && owner.bot_id == r.self_id;
            let why = Reason::GroupAdminOwner {
                bot: owner.bot_id,
                deployment: owner.deployment_id,
            };
            return Ok(decision(me, why, None));
        }
        if let Some(f) = federate
            && command_traffic
        {
            let owner = f.owner(group, &r.text);
            if !owner.should_process {
                return Ok(decision(
                    false,
                    Reason::OwnedByDeployment(owner.owner),
                    None,
                ));
            }
        }
        let local = self.local_decision(r, plugin, group).await;
        match federate {
            Some(f) if local.handle && f.has_peer_bots() => {
                Ok(pool_claim(f, r, group, command_traffic, local).await)
            }
            _ => Ok(local),
        }
    }

    /// Which bot of this deployment handles the message: the online assignee, else the
    /// first claimer; either way the bot an earlier ask of the message was given, while it
    /// stays online. The assignee case, most messages, is one lookup in the view and one in
    /// [`Given`], and allocates nothing.
    async fn local_decision(&self, r: &Request<'_>, plugin: &str, group: i64) -> Decision {
        let p = &*r.platform;
        let mut id = itoa::Buffer::new();
        let route = self.view.route(p, id.format(group));
        let message = Message::new(group, r.user_id, &r.text, r.time);
        let online = |bot: i64| self.view.is_online(p, itoa::Buffer::new().format(bot));
        let given_before = |bot: i64| {
            let me = bot == r.self_id;
            let why = if me {
                Reason::GivenToThisBot
            } else {
                Reason::GivenToAnotherBot
            };
            decision(me, why, Some(Arc::from(itoa::Buffer::new().format(bot))))
        };
        let (because, assignee) = match route {
            Route::Online(bot) => {
                let me = *bot == *id.format(r.self_id);
                // Just given the group (in place of an offline bot, or by a voluntary move
                // made): an instance that has not seen the move yet sends the message to the
                // claim, or had the old assignee claim it, so the assignee must win it as well.
                // The assignment decides when the claim is slow to answer (a leader cut from
                // Redis): a follower cut off claims in its own files anyway.
                if me && self.view.just_moved(p, id.format(group)) {
                    let key = signature_key(r, group);
                    let claim = self.claims.claim(plugin, group, key, r.self_id);
                    if let Ok((false, via)) = tokio::time::timeout(MOVE_CLAIM_WAIT, claim).await {
                        let won = false;
                        let because = NoAssignee::JustMoved;
                        return decision(false, Reason::Claim { because, won, via }, Some(bot));
                    }
                }
                // A name that is no number is no asker's `self_id`: nothing to remember.
                if let Ok(number) = bot.parse() {
                    let to = Holder {
                        bot: number,
                        by: By::Assignment,
                    };
                    let holder = self.given.give(message, to, online);
                    if holder.bot != number {
                        return given_before(holder.bot);
                    }
                }
                let why = if me {
                    Reason::Assignee
                } else {
                    Reason::AssignedToAnotherBot
                };
                return decision(me, why, Some(bot));
            }
            Route::Excluded { assignee } => (NoAssignee::Excluded, assignee),
            // On purpose: nobody, claim or not (an @-mention was decided above).
            Route::Held => return decision(false, Reason::Held, None),
            Route::Moving(assignee) => {
                let me = assignee
                    .as_deref()
                    .is_some_and(|bot| *bot == *id.format(r.self_id));
                if !me {
                    return decision(false, Reason::Moving, assignee);
                }
                if let Some(holder) = self.given.holder(message, online)
                    && holder.bot != r.self_id
                {
                    return given_before(holder.bot);
                }
                // Won in Redis, where every instance claims: a claim in this process's files
                // (Redis down), or none in time, would not stop the next assignee.
                let key = signature_key(r, group);
                let claim = self.claims.claim(plugin, group, key, r.self_id);
                let claimed = tokio::time::timeout(MOVE_CLAIM_WAIT, claim).await;
                let Ok((true, Via::Redis)) = claimed else {
                    return decision(false, Reason::Moving, assignee);
                };
                let to = Holder {
                    bot: r.self_id,
                    by: By::Claim,
                };
                let holder = self.given.give(message, to, online);
                if holder.bot != r.self_id {
                    return given_before(holder.bot);
                }
                let (because, won, via) = (NoAssignee::Moving, true, Via::Redis);
                return decision(true, Reason::Claim { because, won, via }, assignee);
            }
            Route::Unassigned => (NoAssignee::Unassigned, None),
            Route::Offline(bot) => (NoAssignee::AssigneeOffline, Some(bot)),
        };
        // Given by the assignment at an earlier ask: follow it. Given by a claim: this ask
        // meets the same claim.
        if let Some(holder) = self.given.holder(message, online)
            && holder.by == By::Assignment
        {
            return given_before(holder.bot);
        }
        let key = signature_key(r, group);
        let (won, via) = self.claims.claim(plugin, group, key, r.self_id).await;
        // An ask decided by the assignment since this one looked may have given the message
        // to another bot: that bot keeps it.
        if won {
            let to = Holder {
                bot: r.self_id,
                by: By::Claim,
            };
            let holder = self.given.give(message, to, online);
            if holder.bot != r.self_id {
                return given_before(holder.bot);
            }
        }
        decision(won, Reason::Claim { because, won, via }, assignee)
    }
}

/// The message's claim key, as Pallas-Bot computes it (a SHA-256 of its signature): only
/// asked for when a claim decides.
fn signature_key(r: &Request<'_>, group: i64) -> u64 {
    Signature::new(
        group,
        r.user_id,
        &r.text,
        r.time.trunc() as i64,
        Body::Plaintext,
        Time::Included,
    )
    .key()
}

/// The pool-wide claim for the bot this deployment picked: one deployment per message.
async fn pool_claim(
    f: &Federate,
    r: &Request<'_>,
    group: i64,
    command_traffic: bool,
    local: Decision,
) -> Decision {
    let key = signature_key(r, group);
    let pool = |outcome: Outcome| {
        let reason = Reason::Pool {
            local: Box::new(local.reason.clone()),
            outcome,
        };
        decision(outcome.won(), reason, local.assignee.clone())
    };
    // Pallas-Bot's gate makes every command-traffic message a `command` candidate: the same
    // candidate round and the same claim key (`federate_ingress_v2`) as upstream peers.
    let capability = match r.candidate.as_deref().map(str::trim) {
        Some(c) if !c.is_empty() => c,
        _ if command_traffic => "command",
        _ => "",
    };
    let mut plugin = FEDERATE_PLUGIN;
    if !capability.is_empty() {
        if let Err(outcome) = f.claims.candidate(capability, r.self_id, group, key).await {
            return pool(outcome);
        }
        plugin = CANDIDATE_PLUGIN;
    } else if r.candidate_wait && f.claims.yields_to_candidates(group, key).await {
        return pool(Outcome::CandidateWaiting);
    }
    pool(f.claims.claim(plugin, group, key, capability).await)
}

/// Ids as the platform reports them: an integer, or a string of decimal digits. A visitor,
/// not a `serde_json::Value`, so reading a request allocates nothing for its ids.
struct IdVisitor;

impl<'de> serde::de::Visitor<'de> for IdVisitor {
    type Value = i64;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an id (string or integer)")
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<i64, E> {
        Ok(v)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<i64, E> {
        i64::try_from(v).map_err(|_| E::custom(format!("{v} is not an integer id")))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<i64, E> {
        Err(E::custom(format!("{v} is not an integer id")))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<i64, E> {
        v.trim()
            .parse()
            .map_err(|_| E::custom(format!("{v:?} is not a decimal id")))
    }
}

fn id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    d.deserialize_any(IdVisitor)
}

/// An optional string, borrowed from the body as a present one is (serde borrows a `Cow`
/// field, not a `Cow` inside an `Option`).
fn optional_text<'de: 'a, 'a, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Cow<'a, str>>, D::Error> {
    #[derive(Deserialize)]
    struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Option::<Text>::deserialize(d)?.map(|Text(text)| text))
}

/// An id, or null.
struct OptionalId;

impl<'de> serde::de::Visitor<'de> for OptionalId {
    type Value = Option<i64>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an id (string or integer) or null")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Option<i64>, E> {
        Ok(None)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Option<i64>, E> {
        IdVisitor.visit_i64(v).map(Some)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Option<i64>, E> {
        IdVisitor.visit_u64(v).map(Some)
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Option<i64>, E> {
        IdVisitor.visit_f64(v).map(Some)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Option<i64>, E> {
        IdVisitor.visit_str(v).map(Some)
    }
}

fn opt_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    d.deserialize_any(OptionalId)
}

/// A list of ids, or null (none).
struct IdList;

impl<'de> serde::de::Visitor<'de> for IdList {
    type Value = Vec<i64>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of ids")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Vec<i64>, E> {
        Ok(Vec::new())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<i64>, A::Error> {
        struct Id;
        impl<'de> serde::de::DeserializeSeed<'de> for Id {
            type Value = i64;
            fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<i64, D::Error> {
                id(d)
            }
        }
        let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(v) = seq.next_element_seed(Id)? {
            ids.push(v);
        }
        Ok(ids)
    }
}

fn ids<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<i64>, D::Error> {
    d.deserialize_any(IdList)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Request<'_>, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn ids_are_integers_or_decimal_strings() {
        let r = parse(
            r#"{"platform":"onebot","self_id":"1001","group_id":42,"user_id":" 7 ","text":"",
                "time":1.5,"at":["1002",1003],"lane":"chat"}"#,
        )
        .unwrap();
        assert_eq!((r.self_id, r.group_id, r.user_id), (1001, Some(42), 7));
        assert_eq!(r.at, [1002, 1003]);
        let private = parse(
            r#"{"platform":"onebot","self_id":1,"group_id":null,"user_id":2,"text":"","time":1,
                "at":null,"lane":"chat"}"#,
        )
        .unwrap();
        assert_eq!((private.group_id, private.at), (None, vec![]));
    }

    #[test]
    fn a_bad_id_is_named() {
        let body = |field: &str| {
            format!(
                r#"{{"platform":"onebot","self_id":1,"user_id":2,"text":"","time":1,"lane":"chat",{field}}}"#
            )
        };
        for (field, expected) in [
            (r#""group_id":"12a""#, r#""12a" is not a decimal id"#),
            (r#""group_id":1.5"#, "1.5 is not an integer id"),
            (
                r#""group_id":18446744073709551615"#,
                "18446744073709551615 is not an integer id",
            ),
            (
                r#""group_id":true"#,
                "expected an id (string or integer) or null",
            ),
            (r#""at":[1,"x"]"#, r#""x" is not a decimal id"#),
            (r#""at":"1""#, "expected a list of ids"),
        ] {
            let error = parse(&body(field)).unwrap_err();
            assert!(error.contains(expected), "{field}: {error}");
        }
    }

    #[test]
    fn strings_borrow_from_the_body_unless_escaped() {
        let r = parse(
            r#"{"platform":"onebot","self_id":1,"user_id":2,"text":"caf\u00e9 \"x\"",
                "time":1,"lane":"chat","plugin":"p1","candidate":"llm\u005falias"}"#,
        )
        .unwrap();
        assert!(matches!(r.platform, Cow::Borrowed("onebot")));
        assert!(matches!(r.plugin, Some(Cow::Borrowed("p1"))));
        assert!(matches!(&r.candidate, Some(Cow::Owned(c)) if c == "llm_alias"));
        let none = parse(
            r#"{"platform":"onebot","self_id":1,"user_id":2,"text":"","time":1,"lane":"chat",
                "plugin":null}"#,
        )
        .unwrap();
        assert_eq!((none.plugin, none.candidate), (None, None));
        let error = parse(
            r#"{"platform":"onebot","self_id":1,"user_id":2,"text":"","time":1,"lane":"chat",
                "plugin":5}"#,
        )
        .unwrap_err();
        assert!(error.contains("invalid type: integer `5`"), "{error}");
        assert!(matches!(&r.text, Cow::Owned(text) if text == "café \"x\""));
    }

    /// An ingress whose group 7 is assigned to 1001, with 1001 and 1002 online; claims in files
    /// under the returned directory (no Redis).
    fn group_7_of_1001_and_1002(name: &str) -> (Ingress, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let ingress = Ingress {
            view: View::default(),
            claims: Claims::new(None, "pallas:msg_claim", 86400, &dir),
            federate: None,
            traffic: Counter::default(),
            given: Given::default(),
        };
        ingress.view.apply("onebot", [("7", Some("1001"))]);
        ingress.view.set_bot("onebot", "1001", true);
        ingress.view.set_bot("onebot", "1002", true);
        (ingress, dir)
    }

    /// A leader's assignee that just replaced an offline bot claims each message, as a
    /// follower that has not seen the move does for the other member: one of them answers.
    #[tokio::test]
    async fn a_just_replaced_assignee_meets_the_claim_of_a_follower_not_yet_told() {
        let (ingress, dir) = group_7_of_1001_and_1002("aa-forced");
        let view = &ingress.view;
        let ask = |text: &'static str| {
            let json = format!(
                r#"{{"platform":"onebot","self_id":1001,"group_id":7,"user_id":42,
                    "text":"{text}","time":1786000000,"lane":"chat"}}"#
            );
            serde_json::from_str::<Request<'static>>(json.leak()).unwrap()
        };
        // What a follower not yet told of the move does: bot 1002's ask wins the claim.
        let claim_by_1002 = |r: &Request<'_>| {
            let key = signature_key(r, 7);
            let claims = &ingress.claims;
            async move { claims.claim(DEFAULT_PLUGIN, 7, key, 1002).await.0 }
        };

        // Unmarked, the assignee answers whatever the claim says: the double this prevents.
        let before = ask("before");
        assert!(claim_by_1002(&before).await);
        let answer = ingress.decide(&before).await.unwrap();
        assert_eq!((answer.handle, answer.kind), (true, "assignee"));

        view.mark_just_moved(
            "onebot",
            ["7"],
            std::time::Instant::now() + std::time::Duration::from_secs(60),
        );
        assert!(view.just_moved("onebot", "7"));
        let claimed = ask("claimed first");
        assert!(claim_by_1002(&claimed).await);
        let answer = ingress.decide(&claimed).await.unwrap();
        assert_eq!((answer.handle, answer.kind), (false, "claim"));
        assert!(
            answer
                .reason
                .to_string()
                .starts_with("assignee just took the group over: claimed by another bot"),
            "{}",
            answer.reason
        );
        // Asked first, the assignee wins, and the other member's claim finds it taken.
        let first = ask("asked first");
        let answer = ingress.decide(&first).await.unwrap();
        assert_eq!((answer.handle, answer.kind), (true, "assignee"));
        assert!(!claim_by_1002(&first).await);

        // Past its deadline, the assignee answers by the assignment alone again.
        view.mark_just_moved("onebot", ["7"], std::time::Instant::now());
        assert!(!view.just_moved("onebot", "7"));
        let after = ask("after");
        assert!(claim_by_1002(&after).await);
        let answer = ingress.decide(&after).await.unwrap();
        assert_eq!((answer.handle, answer.kind), (true, "assignee"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A moving group's assignee answers only by a claim won in Redis, where every instance
    /// claims: claims kept in this process's files leave the group unanswered through this
    /// instance (the claim that does decide is tested against a real Redis in `several`).
    #[tokio::test]
    async fn a_moving_group_is_answered_only_by_a_claim_in_redis() {
        let (ingress, dir) = group_7_of_1001_and_1002("aa-moving");
        let view = &ingress.view;
        view.set_moving([("onebot", "7")]);
        for bot in [1001, 1002] {
            let json = format!(
                r#"{{"platform":"onebot","self_id":{bot},"group_id":7,"user_id":42,
                    "text":"hello","time":1786000000,"lane":"chat"}}"#
            );
            let r = serde_json::from_str::<Request<'_>>(&json).unwrap();
            let answer = ingress.decide(&r).await.unwrap();
            assert_eq!((answer.handle, answer.kind), (false, "moving"), "{bot}");
        }
        view.set_moving([]);
        let r = serde_json::from_str::<Request<'_>>(
            r#"{"platform":"onebot","self_id":1001,"group_id":7,"user_id":42,
                "text":"later","time":1786000000,"lane":"chat"}"#,
        )
        .unwrap();
        let answer = ingress.decide(&r).await.unwrap();
        assert_eq!((answer.handle, answer.kind), (true, "assignee"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_reason_reads_the_same_in_the_api_and_in_logs() {
        let claim = Reason::Claim {
            because: NoAssignee::AssigneeOffline,
            won: true,
            via: Via::Redis,
        };
        let reasons = [
            Reason::SentByFleetBot,
            Reason::Private,
            Reason::Assignee,
            Reason::AssignedToAnotherBot,
            Reason::OwnedByDeployment("d2".into()),
            claim.clone(),
            Reason::Pool {
                local: Box::new(Reason::Assignee),
                outcome: Outcome::Won,
            },
        ];
        for reason in reasons {
            let shown = reason.to_string();
            assert!(!shown.is_empty());
            let answer = serde_json::to_value(decision(true, reason, None)).unwrap();
            assert_eq!(answer["reason"], shown);
        }
        assert_eq!(Reason::Assignee.to_string(), "assignee");
        assert_eq!(
            claim.to_string(),
            format!(
                "assignee offline: won the claim ({})",
                Via::Redis.describe()
            )
        );
    }
}
