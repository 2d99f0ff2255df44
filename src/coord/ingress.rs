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
//! 6. otherwise (unassigned, excluded, assignee offline) the first claimer of the message
//!    signature `(group, user, plaintext, time)` wins, Pallas-compatible.

use serde::{Deserialize, Serialize};

use super::claim::{Claims, valid_plugin};
use super::signature::Signature;
use crate::view::View;

/// The default claim plugin: Pallas-Bot's ingress gate namespace.
pub const DEFAULT_PLUGIN: &str = "ingress_gate";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    Command,
    Chat,
    Fanout,
}

/// `POST /v1/ingress` body. Ids are decimal strings or integers.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub platform: String,
    #[serde(deserialize_with = "id")]
    pub self_id: i64,
    /// Absent or null for a private message.
    #[serde(default, deserialize_with = "opt_id")]
    pub group_id: Option<i64>,
    #[serde(deserialize_with = "id")]
    pub user_id: i64,
    pub text: String,
    /// Message time, seconds or milliseconds.
    pub time: f64,
    #[serde(default, deserialize_with = "ids")]
    pub at: Vec<i64>,
    pub lane: Lane,
    #[serde(default)]
    pub plugin: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub handle: bool,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assignee: Option<String>,
}

fn decision(handle: bool, reason: impl Into<String>, assignee: Option<String>) -> Decision {
    Decision {
        handle,
        reason: reason.into(),
        assignee,
    }
}

pub struct Ingress {
    pub view: View,
    pub claims: Claims,
}

impl Ingress {
    /// Decides; `Err` names a bad field.
    pub async fn decide(&self, r: &Request) -> Result<Decision, String> {
        let plugin = r.plugin.as_deref().unwrap_or(DEFAULT_PLUGIN);
        if !valid_plugin(plugin) {
            return Err(format!(
                "plugin: {plugin:?} is not a valid plugin name ([A-Za-z0-9_.:-])"
            ));
        }
        if r.platform.is_empty() {
            return Err("platform: empty".to_owned());
        }
        let view = &self.view;
        let p = r.platform.as_str();
        if view.is_fleet_bot(p, &r.user_id.to_string()) {
            return Ok(decision(false, "sent by a bot of the fleet", None));
        }
        let Some(group) = r.group_id else {
            return Ok(decision(true, "private message", None));
        };
        let mentioned: Vec<i64> =
            r.at.iter()
                .copied()
                .filter(|b| view.is_fleet_bot(p, &b.to_string()))
                .collect();
        if !mentioned.is_empty() {
            let me = mentioned.contains(&r.self_id);
            let why = if me {
                "mentioned"
            } else {
                "another bot of the fleet is mentioned"
            };
            return Ok(decision(me, why, None));
        }
        if r.lane == Lane::Fanout {
            return Ok(decision(true, "fanout lane", None));
        }
        let channel = group.to_string();
        let assignee = view.assignee(p, &channel);
        let excluded = view.is_excluded(p, &channel);
        let why_no_assignee = match &assignee {
            _ if excluded => "excluded channel",
            None => "unassigned channel",
            Some(bot) if !view.is_online(p, bot) => "assignee offline",
            Some(bot) => {
                let me = *bot == r.self_id.to_string();
                let why = if me {
                    "assignee"
                } else {
                    "assigned to another bot"
                };
                return Ok(decision(me, why, assignee));
            }
        };
        let time = r.time.trunc() as i64;
        let key = Signature::new(group, r.user_id, &r.text, time, true, true).key();
        let (won, via) = self.claims.claim(plugin, group, key, r.self_id).await;
        let outcome = if won {
            "won the claim"
        } else {
            "claimed by another bot"
        };
        Ok(decision(
            won,
            format!("{why_no_assignee}: {outcome} ({})", via.describe()),
            assignee,
        ))
    }
}

fn parse_id<E: serde::de::Error>(v: &serde_json::Value) -> Result<i64, E> {
    match v {
        serde_json::Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| E::custom(format!("{n} is not an integer id"))),
        serde_json::Value::String(s) => s
            .trim()
            .parse()
            .map_err(|_| E::custom(format!("{s:?} is not a decimal id"))),
        other => Err(E::custom(format!(
            "expected an id (string or integer), got {other}"
        ))),
    }
}

fn id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    parse_id(&serde_json::Value::deserialize(d)?)
}

fn opt_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Null => Ok(None),
        v => parse_id(&v).map(Some),
    }
}

fn ids<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<i64>, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Null => Ok(Vec::new()),
        serde_json::Value::Array(items) => items.iter().map(parse_id).collect(),
        other => Err(serde::de::Error::custom(format!(
            "expected a list of ids, got {other}"
        ))),
    }
}
