//! Peer records (`{P}:peer_bots:{deployment}`): this deployment's heartbeat payload, built
//! field for field as Pallas-Bot publishes it, and the parsing of every other deployment's
//! record with upstream's rules (`refresh_federate_peer_bot_ids_sync`), so both kinds of
//! deployment see the same pool.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::ring::PeerView;
use crate::pallas::pystr::decimal_value;
use crate::pallas::pystr::py_strip;

/// `COMMAND_CAPABILITY_PROTOCOL_VERSION` and `INGRESS_PROTOCOL_VERSION`.
pub const PROTOCOL: i64 = 2;
pub const INGRESS_CAPABILITIES: [&str; 3] = ["command", "hosted_activity", "llm_alias"];
/// auto-assign's extension field: present groups assigned to one of the deployment's online
/// bots. Pallas-Bot ignores unknown fields.
pub const ASSIGNED_FIELD: &str = "assigned_group_ids";

/// What this deployment publishes about itself.
#[derive(Clone, Debug, Default)]
pub struct LocalRecord {
    pub deployment_id: String,
    pub deployment_name: String,
    pub bot_ids: BTreeSet<i64>,
    pub online_bot_ids: BTreeSet<i64>,
    pub public_bot_ids: BTreeSet<i64>,
    pub names: BTreeMap<i64, String>,
    pub updated_at: i64,
    pub present_group_ids: Vec<i64>,
    /// Present groups whose admins among this deployment's bots are known (may be empty).
    pub group_admin_bot_ids: BTreeMap<i64, BTreeSet<i64>>,
    pub command_capabilities: BTreeSet<String>,
    pub command_permission_levels: BTreeMap<String, String>,
    /// `None`: respectAssignment is off, the field is not published.
    pub assigned_group_ids: Option<BTreeSet<i64>>,
}

impl LocalRecord {
    /// The heartbeat JSON, keys in upstream's order; the optional fields only when non-empty.
    pub fn payload(&self) -> String {
        let online: Vec<i64> = self
            .online_bot_ids
            .intersection(&self.bot_ids)
            .copied()
            .collect();
        let public: Vec<i64> = self
            .public_bot_ids
            .intersection(&self.bot_ids)
            .copied()
            .collect();
        let mut names = Map::new();
        for qq in &public {
            if let Some(name) = self.names.get(qq)
                && online.contains(qq)
                && !py_strip(name).is_empty()
            {
                names.insert(qq.to_string(), json!(name));
            }
        }
        let mut out = Map::new();
        out.insert("deployment_id".into(), json!(self.deployment_id));
        out.insert("deployment_name".into(), json!(self.deployment_name));
        out.insert("bot_ids".into(), json!(self.bot_ids));
        out.insert("online_bot_ids".into(), json!(online));
        out.insert("public_bot_ids".into(), json!(public));
        out.insert("public_online_bot_names".into(), Value::Object(names));
        out.insert("updated_at".into(), json!(self.updated_at));
        out.insert("present_group_ids".into(), json!(self.present_group_ids));
        out.insert("command_capability_protocol".into(), json!(PROTOCOL));
        out.insert("ingress_protocol".into(), json!(PROTOCOL));
        out.insert("ingress_capabilities".into(), json!(INGRESS_CAPABILITIES));
        if !self.group_admin_bot_ids.is_empty() {
            let admins: Map<String, Value> = self
                .group_admin_bot_ids
                .iter()
                .map(|(g, bots)| (g.to_string(), json!(bots)))
                .collect();
            out.insert("group_admin_bot_ids".into(), Value::Object(admins));
        }
        if !self.command_capabilities.is_empty() {
            out.insert(
                "command_capabilities".into(),
                json!(self.command_capabilities),
            );
        }
        if !self.command_permission_levels.is_empty() {
            out.insert(
                "command_permission_levels".into(),
                json!(self.command_permission_levels),
            );
        }
        if let Some(assigned) = &self.assigned_group_ids {
            out.insert(ASSIGNED_FIELD.into(), json!(assigned));
        }
        Value::Object(out).to_string()
    }
}

/// One peer deployment as parsed from its record.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Peer {
    pub deployment_id: String,
    pub deployment_name: String,
    pub bot_ids: BTreeSet<i64>,
    /// `None`: the peer does not say (an old Pallas-Bot).
    pub online_bot_ids: Option<BTreeSet<i64>>,
    pub public_bot_ids: BTreeSet<i64>,
    pub public_names: BTreeMap<i64, String>,
    pub updated_at: Option<i64>,
    pub capability_protocol: Option<i64>,
    pub ingress_protocol: Option<i64>,
    pub ingress_capabilities: Option<Vec<String>>,
    /// What the owner computation uses.
    pub view: PeerView,
}

impl Peer {
    /// Both protocols are the ones this deployment speaks.
    pub fn compatible(&self) -> bool {
        self.capability_protocol == Some(PROTOCOL) && self.ingress_protocol == Some(PROTOCOL)
    }
}

/// Python's `str(x)` for the scalars a payload may hold.
fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Null => "None".into(),
        other => other.to_string(),
    }
}

/// `int(x)` for items kept by `str(x).isdigit()`: `Ok(None)` for items upstream skips.
/// Decimal digits of any script count (`"１２"` is 12, as `int()` reads it); other numerals
/// (`"²"`, `"½"`) make the record malformed (upstream aborts its whole refresh on `"²"`).
fn digit_id(v: &Value) -> Result<Option<i64>, Malformed> {
    let s = match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) if i >= 0 => return Ok(Some(i)),
            Some(_) => return Ok(None),
            None if n.is_u64() => return Err(Malformed::IdOutOfRange(n.to_string())),
            None => return Ok(None),
        },
        other => py_str(other),
    };
    if s.is_empty() || !s.chars().all(char::is_numeric) {
        return Ok(None);
    }
    let mut id: i64 = 0;
    for c in s.chars() {
        let digit = decimal_value(c).ok_or_else(|| Malformed::NotDecimal(s.clone()))?;
        id = id
            .checked_mul(10)
            .and_then(|n| n.checked_add(i64::from(digit)))
            .ok_or_else(|| Malformed::IdOutOfRange(format!("{s:?}")))?;
    }
    Ok(Some(id))
}

/// Why a peer record is skipped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("not UTF-8")]
    NotUtf8,
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not a JSON object")]
    NotAnObject,
    #[error("id {0} is out of range")]
    IdOutOfRange(String),
    #[error("id {0:?} is not in decimal digits")]
    NotDecimal(String),
}

fn id_list(v: Option<&Value>) -> Result<Option<BTreeSet<i64>>, Malformed> {
    match v {
        None => Ok(None),
        Some(Value::Array(items)) => {
            let mut out = BTreeSet::new();
            for item in items {
                if let Some(id) = digit_id(item)? {
                    out.insert(id);
                }
            }
            Ok(Some(out))
        }
        Some(_) => Ok(Some(BTreeSet::new())),
    }
}

fn string_list(v: Option<&Value>) -> Option<Vec<String>> {
    match v? {
        Value::Array(items) => {
            let set: BTreeSet<String> = items
                .iter()
                .map(|x| py_strip(&py_str(x)).to_owned())
                .filter(|s| !s.is_empty())
                .collect();
            Some(set.into_iter().collect())
        }
        _ => Some(Vec::new()),
    }
}

/// `_parse_*_protocol`: a positive integer, else unknown.
fn protocol(v: Option<&Value>) -> Option<i64> {
    let n = match v? {
        Value::Bool(_) => return None,
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f.trunc() as i64))?,
        Value::String(s) => py_strip(s).parse().ok()?,
        _ => return None,
    };
    (n > 0).then_some(n)
}

fn levels(v: Option<&Value>) -> Option<BTreeMap<String, String>> {
    let Value::Object(map) = v? else { return None };
    let out: BTreeMap<String, String> = map
        .iter()
        .map(|(k, v)| (py_strip(k).to_owned(), py_strip(&py_str(v)).to_lowercase()))
        .filter(|(_, level)| !level.is_empty())
        .collect();
    (!out.is_empty()).then_some(out)
}

fn admins(v: Option<&Value>) -> Result<Option<BTreeMap<i64, BTreeSet<i64>>>, Malformed> {
    let Some(Value::Object(map)) = v else {
        return Ok(None);
    };
    let mut out = BTreeMap::new();
    for (gid, bots) in map {
        if let (Some(gid), Value::Array(_)) = (digit_id(&json!(gid))?, bots) {
            out.insert(gid, id_list(Some(bots))?.unwrap_or_default());
        }
    }
    Ok(Some(out))
}

/// Parses the record stored under `key`; `Err` says why it is malformed.
pub fn parse(key: &str, text: &str) -> Result<Peer, Malformed> {
    let data: Value = serde_json::from_str(text).map_err(|e| Malformed::NotJson(e.to_string()))?;
    let Value::Object(data) = data else {
        return Err(Malformed::NotAnObject);
    };
    let deployment_id = match data.get("deployment_id") {
        Some(v) if !py_strip(&py_str(v)).is_empty() && !v.is_null() => {
            py_strip(&py_str(v)).to_lowercase()
        }
        _ => key.rsplit(':').next().unwrap_or_default().to_lowercase(),
    };
    let bot_ids = id_list(data.get("bot_ids"))?.unwrap_or_default();
    let online_bot_ids = id_list(data.get("online_bot_ids"))?;
    let public_bot_ids: BTreeSet<i64> = id_list(data.get("public_bot_ids"))?
        .unwrap_or_default()
        .intersection(&bot_ids)
        .copied()
        .collect();
    let mut public_names = BTreeMap::new();
    if let Some(Value::Object(names)) = data.get("public_online_bot_names") {
        for (qq, name) in names {
            let (Some(qq), Value::String(name)) = (digit_id(&json!(qq))?, name) else {
                continue;
            };
            let online = online_bot_ids.as_ref().is_some_and(|o| o.contains(&qq));
            let name = py_strip(name);
            if online && public_bot_ids.contains(&qq) && !name.is_empty() {
                public_names.insert(qq, name.to_owned());
            }
        }
    }
    Ok(Peer {
        deployment_id,
        deployment_name: data
            .get("deployment_name")
            .and_then(Value::as_str)
            .map(|s| py_strip(s).to_owned())
            .unwrap_or_default(),
        bot_ids,
        online_bot_ids,
        public_bot_ids,
        public_names,
        updated_at: data.get("updated_at").and_then(Value::as_i64),
        capability_protocol: protocol(data.get("command_capability_protocol")),
        ingress_protocol: protocol(data.get("ingress_protocol")),
        ingress_capabilities: string_list(data.get("ingress_capabilities")),
        view: PeerView {
            capabilities: string_list(data.get("command_capabilities")),
            permission_levels: levels(data.get("command_permission_levels")),
            present_groups: id_list(data.get("present_group_ids"))?,
            group_admin_bot_ids: admins(data.get("group_admin_bot_ids"))?,
            assigned_groups: id_list(data.get(ASSIGNED_FIELD))?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_matches_upstream_example() {
        // The documented example, byte for byte.
        let record = LocalRecord {
            deployment_id: "dep-local".into(),
            deployment_name: "部署 A".into(),
            bot_ids: [111, 222].into(),
            online_bot_ids: [111, 222, 333].into(),
            public_bot_ids: [111, 999].into(),
            names: [(111, "一号".to_owned()), (222, "二号".to_owned())].into(),
            updated_at: 1786000000,
            present_group_ids: vec![42, 733291779],
            group_admin_bot_ids: [(42, [111].into())].into(),
            command_capabilities: ["牛牛帮助".to_owned(), "一歌唱歌".to_owned()].into(),
            command_permission_levels: [
                ("z.cmd".to_owned(), "everyone".to_owned()),
                ("a.cmd".to_owned(), "superuser".to_owned()),
            ]
            .into(),
            assigned_group_ids: None,
        };
        assert_eq!(
            record.payload(),
            r#"{"deployment_id":"dep-local","deployment_name":"部署 A","bot_ids":[111,222],"online_bot_ids":[111,222],"public_bot_ids":[111],"public_online_bot_names":{"111":"一号"},"updated_at":1786000000,"present_group_ids":[42,733291779],"command_capability_protocol":2,"ingress_protocol":2,"ingress_capabilities":["command","hosted_activity","llm_alias"],"group_admin_bot_ids":{"42":[111]},"command_capabilities":["一歌唱歌","牛牛帮助"],"command_permission_levels":{"a.cmd":"superuser","z.cmd":"everyone"}}"#
        );
    }

    #[test]
    fn parses_upstream_example() {
        let text = r#"{"deployment_id":" Dep-Peer ","deployment_name":"部署 A","bot_ids":[111,"222",-3,1.5,true],"online_bot_ids":[111],"public_bot_ids":[111,222,444],"public_online_bot_names":{"111":" 一号 ","222":"二号"},"updated_at":1786000000,"present_group_ids":[42,"733291779","x"],"command_capability_protocol":2,"ingress_protocol":"2","ingress_capabilities":["command"," ",5],"group_admin_bot_ids":{"42":[111],"x":[1],"43":"no"},"command_capabilities":[" 牛牛帮助 ",""],"command_permission_levels":{"a.cmd":" SuperUser ","b":""}}"#;
        let p = parse("pfx:peer_bots:ignored", text).unwrap();
        assert_eq!(p.deployment_id, "dep-peer");
        assert_eq!(p.bot_ids, [111, 222].into());
        assert_eq!(p.online_bot_ids, Some([111].into()));
        assert_eq!(p.public_bot_ids, [111, 222].into());
        assert_eq!(p.public_names, [(111, "一号".to_owned())].into());
        assert!(p.compatible());
        assert_eq!(
            p.ingress_capabilities,
            Some(vec!["5".to_owned(), "command".to_owned()])
        );
        assert_eq!(p.view.present_groups, Some([42, 733291779].into()));
        assert_eq!(p.view.capabilities, Some(vec!["牛牛帮助".to_owned()]));
        assert_eq!(
            p.view.permission_levels,
            Some([("a.cmd".to_owned(), "superuser".to_owned())].into())
        );
        assert_eq!(
            p.view.group_admin_bot_ids,
            Some([(42, [111].into())].into())
        );
        assert_eq!(p.view.assigned_groups, None);
    }

    #[test]
    fn legacy_and_odd_records() {
        let p = parse("pfx:peer_bots:Dep-Old", r#"{"bot_ids":"nope"}"#).unwrap();
        assert_eq!(p.deployment_id, "dep-old");
        assert!(p.bot_ids.is_empty());
        assert_eq!(p.online_bot_ids, None);
        assert_eq!(p.view, PeerView::default());
        assert!(!p.compatible());
        let p = parse("k", r#"{"command_capabilities":"x","present_group_ids":5,"command_capability_protocol":true}"#).unwrap();
        assert_eq!(p.view.capabilities, Some(vec![]));
        assert_eq!(p.view.present_groups, Some(BTreeSet::new()));
        assert_eq!(p.capability_protocol, None);
    }

    #[test]
    fn malformed_records_name_the_problem() {
        assert!(matches!(
            parse("k", "{").unwrap_err(),
            Malformed::NotJson(_)
        ));
        assert_eq!(parse("k", "[1]").unwrap_err(), Malformed::NotAnObject);
        assert_eq!(
            parse("k", r#"{"bot_ids":["²"]}"#).unwrap_err(),
            Malformed::NotDecimal("²".into())
        );
        let p = parse("k", r#"{"bot_ids":["１２","٣"]}"#).unwrap();
        assert_eq!(
            p.bot_ids,
            [3, 12].into(),
            "decimal digits of any script, as int()"
        );
        assert!(
            parse("k", r#"{"present_group_ids":["99999999999999999999"]}"#)
                .unwrap_err()
                .to_string()
                .contains("range")
        );
    }

    #[test]
    fn extension_round_trips() {
        let record = LocalRecord {
            deployment_id: "a".into(),
            assigned_group_ids: Some([7, 9].into()),
            ..LocalRecord::default()
        };
        let p = parse("k", &record.payload()).unwrap();
        assert_eq!(p.view.assigned_groups, Some([7, 9].into()));
        assert_eq!(p.view.present_groups, Some(BTreeSet::new()));
        assert_eq!(p.view.capabilities, None);
    }
}
