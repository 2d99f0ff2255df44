//! Pallas-Bot's group-owner algorithm (v4.3.9, `federate/peer_bots.py`), pure: given the pool
//! as this deployment sees it, which deployment owns a group's commands. Identical inputs give
//! identical answers in every process and in Pallas-Bot itself (checked against the golden
//! vectors), so a mixed pool agrees on owners.
//!
//! Rings, in turn: the *capability* ring (deployments that explicitly declare a capability
//! covering the command text), the *permission* ring (the loosest permission level for the
//! command), the *present* ring (deployments present in the group); then a time bucket picks
//! one (`blake2b("{group}:{epoch}")`, digest length 8).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use blake2::Digest;
use indexmap::IndexMap;

use crate::pallas::pystr::{is_py_whitespace, py_strip};

/// Greeting call names: never a command prefix (`ingress/fanout_bypass.py`).
pub const GREETING_CALL_NAMES: [&str; 2] = ["牛牛", "帕拉斯"];
/// Permission levels from loosest to strictest; unknown levels rank as `everyone`.
pub const PERMISSION_ORDER: [&str; 5] = [
    "everyone",
    "staff",
    "group_moderator",
    "bot_moderator",
    "superuser",
];

/// A character case folding leaves alone: no upper- or lower-case mapping.
fn uncased(c: char) -> bool {
    if c.is_ascii() {
        return !c.is_ascii_alphabetic();
    }
    let (mut lower, mut upper) = (c.to_lowercase(), c.to_uppercase());
    lower.len() == 1 && lower.next() == Some(c) && upper.len() == 1 && upper.next() == Some(c)
}

/// `a.casefold() == b.casefold()` without allocating; most texts (CJK, ASCII) never reach
/// the full Unicode folding.
fn casefold_eq(a: &str, b: &str) -> bool {
    use caseless::Caseless;
    if a == b {
        return true;
    }
    if a.is_ascii() && b.is_ascii() {
        return a.eq_ignore_ascii_case(b);
    }
    // Folding maps each character on its own: skip the common prefix; two different
    // uncased characters then decide it.
    let (mut x, mut y) = (a.chars(), b.chars());
    loop {
        let (rest_a, rest_b) = (x.as_str(), y.as_str());
        match (x.next(), y.next()) {
            (None, None) => return true,
            (Some(p), Some(q)) if p == q => {}
            (Some(p), Some(q)) if uncased(p) && uncased(q) => return false,
            _ => {
                return rest_a
                    .chars()
                    .default_case_fold()
                    .eq(rest_b.chars().default_case_fold());
            }
        }
    }
}

/// The first `n` code points.
fn prefix_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// NoneBot's `command_start` with Pallas's default `["", "/"]`: one leading `/` goes.
fn strip_leading_command_marks(text: &str) -> &str {
    let s = py_strip(text);
    match s.strip_prefix('/') {
        Some(rest) => rest.trim_start_matches(is_py_whitespace),
        None => s,
    }
}

/// `matches_command_prefix`: the text (without a leading command mark) starts with the
/// command, compared case-folded over the command's length in code points.
pub fn matches_command_prefix(plaintext: &str, command: &str) -> bool {
    let text = strip_leading_command_marks(plaintext);
    let cmd = py_strip(command);
    let n = cmd.chars().count();
    if cmd.is_empty() || text.chars().count() < n {
        return false;
    }
    casefold_eq(prefix_chars(text, n), cmd)
}

/// `command_capability_covers_plaintext`: `None` (undeclared) covers any non-empty text.
pub fn covers(caps: Option<&[String]>, plain: &str) -> bool {
    let text = py_strip(plain);
    if text.is_empty() {
        return false;
    }
    let Some(caps) = caps else {
        return true;
    };
    caps.iter().any(|cap| {
        let token = py_strip(cap);
        !token.is_empty()
            && (text == token
                || (matches_command_prefix(text, token) && !GREETING_CALL_NAMES.contains(&token)))
    })
}

/// `federate_group_owner_ring_index`: the time bucket. `period <= 0` → `|group| % size`.
pub fn ring_index(group: i64, size: usize, now: f64, period: i64) -> usize {
    if size == 0 {
        return 0;
    }
    if period <= 0 {
        return (group.unsigned_abs() % size as u64) as usize;
    }
    // Python: int(now) truncates toward zero, then // floors.
    let epoch = (now.trunc() as i64).div_euclid(period);
    (blake2b8(format!("{group}:{epoch}").as_bytes()) % size as u64) as usize
}

/// `stable_group_owner_ring_index`.
pub fn stable_ring_index(group: i64, size: usize) -> usize {
    if size == 0 {
        return 0;
    }
    (blake2b8(group.to_string().as_bytes()) % size as u64) as usize
}

/// BLAKE2b with digest length 8 (a parameter of the hash, not a truncation), big-endian.
fn blake2b8(data: &[u8]) -> u64 {
    let digest = blake2::Blake2b::<blake2::digest::consts::U8>::digest(data);
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest);
    u64::from_be_bytes(bytes)
}

/// What this deployment knows of one peer, parsed from its heartbeat. `None` = undeclared.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PeerView {
    pub capabilities: Option<Vec<String>>,
    pub permission_levels: Option<BTreeMap<String, String>>,
    pub present_groups: Option<BTreeSet<i64>>,
    pub group_admin_bot_ids: Option<BTreeMap<i64, BTreeSet<i64>>>,
    /// auto-assign's extension: present groups whose assignee is one of the peer's online
    /// bots. `None` for a peer that is not auto-assign (then assignments are not respected).
    pub assigned_groups: Option<BTreeSet<i64>>,
}

/// The local side of the owner computation.
#[derive(Clone, Debug, Default)]
pub struct Local {
    /// This deployment's id, lower case.
    pub mine: String,
    pub caps: Vec<String>,
    /// Plaintext → command id, in insertion order (first inserted wins among equal lengths).
    pub plaintext_to_id: IndexMap<String, String>,
    pub permission_levels: HashMap<String, String>,
    /// Owner rotation period in seconds; `<= 0`: pure group-id modulo.
    pub rotate_sec: i64,
    pub prefer_local: bool,
}

/// Every intermediate of one owner decision (the golden vectors' `owner` result).
#[derive(Clone, Debug, PartialEq)]
pub struct Owner {
    pub owner: String,
    pub active: Vec<String>,
    pub capable_ring: Vec<String>,
    pub permission_ring: Vec<String>,
    pub present_ring: Vec<String>,
    pub ring_index: usize,
    pub command_id: String,
    pub should_process: bool,
    pub should_yield: bool,
    pub peer_declared: bool,
    /// With respectAssignment: the deployments of the present ring whose online bots are
    /// assigned the group, when that rule decided the owner.
    pub assignee_ring: Option<Vec<String>>,
}

/// A text's standing among the peers' declared command capabilities.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerCommand {
    /// Some peer declares a command covering the text: it is command traffic, whatever lane
    /// the caller saw (the caller may not have that command at all).
    pub declared: bool,
    /// This deployment does not declare it and a peer that does is present in the group:
    /// this deployment stays out of the message entirely.
    pub yield_to_peer: bool,
}

/// The group-admin owner: a deployment and its bot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminOwner {
    pub deployment_id: String,
    pub bot_id: i64,
}

impl Local {
    /// `_plaintext_to_command_id`: exact match, else the longest case-folded prefix.
    pub fn command_id(&self, text: &str) -> String {
        if self.plaintext_to_id.is_empty() || text.is_empty() {
            return String::new();
        }
        if let Some(id) = self.plaintext_to_id.get(text) {
            return id.clone();
        }
        let mut keys: Vec<(&String, &String)> = self.plaintext_to_id.iter().collect();
        keys.sort_by_key(|(k, _)| std::cmp::Reverse(k.chars().count()));
        for (key, id) in keys {
            if casefold_eq(prefix_chars(text, key.chars().count()), key) {
                return id.clone();
            }
        }
        String::new()
    }

    fn capable(
        &self,
        active: &[String],
        peers: &BTreeMap<String, PeerView>,
        plain: Option<&str>,
    ) -> Vec<String> {
        let text = py_strip(plain.unwrap_or(""));
        if text.is_empty() {
            return active.to_vec();
        }
        let explicit: Vec<String> = active
            .iter()
            .filter(|dep| {
                let caps = if **dep == self.mine {
                    Some(self.caps.as_slice())
                } else {
                    peers
                        .get(dep.as_str())
                        .and_then(|p| p.capabilities.as_deref())
                };
                caps.is_some_and(|c| covers(Some(c), text))
            })
            .cloned()
            .collect();
        if !explicit.is_empty() {
            return explicit;
        }
        if covers(Some(&self.caps), text) {
            return vec![self.mine.clone()];
        }
        active.to_vec()
    }

    fn permission(
        &self,
        active: Vec<String>,
        peers: &BTreeMap<String, PeerView>,
        plain: Option<&str>,
    ) -> Vec<String> {
        if active.len() <= 1 {
            return active;
        }
        let undeclared = active.iter().any(|dep| {
            *dep != self.mine
                && peers
                    .get(dep.as_str())
                    .is_none_or(|p| p.permission_levels.is_none())
        });
        if undeclared {
            return active;
        }
        let text = py_strip(plain.unwrap_or(""));
        if text.is_empty() {
            return active;
        }
        let cid = self.command_id(text);
        if cid.is_empty() {
            return active;
        }
        let rank = |level: &str| {
            let level = py_strip(level).to_lowercase();
            let level = if level.is_empty() {
                "everyone".to_owned()
            } else {
                level
            };
            PERMISSION_ORDER
                .iter()
                .position(|l| *l == level)
                .unwrap_or(0)
        };
        let mut best = 6;
        let mut loosest = Vec::new();
        for dep in &active {
            let level = if *dep == self.mine {
                self.permission_levels
                    .get(&cid)
                    .cloned()
                    .unwrap_or_else(|| "everyone".to_owned())
            } else {
                peers
                    .get(dep.as_str())
                    .and_then(|p| p.permission_levels.as_ref())
                    .and_then(|l| l.get(&cid).cloned())
                    .unwrap_or_else(|| "everyone".to_owned())
            };
            let r = rank(&level);
            if r < best {
                best = r;
                loosest = vec![dep.clone()];
            } else if r == best {
                loosest.push(dep.clone());
            }
        }
        if loosest.is_empty() { active } else { loosest }
    }

    fn present(
        &self,
        capable: Vec<String>,
        peers: &BTreeMap<String, PeerView>,
        group: i64,
    ) -> Vec<String> {
        let present: Vec<String> = capable
            .iter()
            .filter(|dep| {
                **dep == self.mine
                    || peers
                        .get(dep.as_str())
                        .and_then(|p| p.present_groups.as_ref())
                        .is_none_or(|g| g.contains(&group))
            })
            .cloned()
            .collect();
        if !present.is_empty() {
            return present;
        }
        if capable.contains(&self.mine) {
            return vec![self.mine.clone()];
        }
        capable
    }

    /// The three rings for a group and text.
    pub fn rings(
        &self,
        peers: &BTreeMap<String, PeerView>,
        group: i64,
        plain: Option<&str>,
    ) -> [Vec<String>; 4] {
        let mut active: BTreeSet<String> = peers.keys().cloned().collect();
        active.insert(self.mine.clone());
        let active: Vec<String> = active.into_iter().collect();
        let capable = self.capable(&active, peers, plain);
        let permission = self.permission(capable.clone(), peers, plain);
        let present = self.present(permission.clone(), peers, group);
        [active, capable, permission, present]
    }

    /// `federate_group_owner_deployment` with every intermediate.
    pub fn owner(
        &self,
        peers: &BTreeMap<String, PeerView>,
        group: i64,
        plain: Option<&str>,
        now: f64,
    ) -> Owner {
        let [active, capable_ring, permission_ring, present_ring] = self.rings(peers, group, plain);
        let index = ring_index(group, present_ring.len(), now, self.rotate_sec);
        let owner = if self.mine.is_empty() {
            String::new()
        } else if self.prefer_local && present_ring.contains(&self.mine) {
            self.mine.clone()
        } else {
            present_ring.get(index).cloned().unwrap_or_default()
        };
        let text = py_strip(plain.unwrap_or(""));
        let has_peers = !peers.is_empty();
        let PeerCommand {
            declared: peer_declared,
            yield_to_peer: should_yield,
        } = self.peer_command(peers, group, plain);
        Owner {
            should_process: !has_peers || self.mine.is_empty() || owner == self.mine,
            owner,
            active,
            capable_ring,
            permission_ring,
            present_ring,
            ring_index: index,
            command_id: self.command_id(text),
            should_yield,
            peer_declared,
            assignee_ring: None,
        }
    }

    /// How a text stands to the peers' declared commands (upstream's
    /// `federate_peer_declared_command_plaintext` and
    /// `should_yield_federate_ingress_for_peer_command`).
    pub fn peer_command(
        &self,
        peers: &BTreeMap<String, PeerView>,
        group: i64,
        plain: Option<&str>,
    ) -> PeerCommand {
        let text = py_strip(plain.unwrap_or(""));
        if peers.is_empty() || text.is_empty() {
            return PeerCommand::default();
        }
        let declares = |p: &PeerView| {
            p.capabilities
                .as_deref()
                .is_some_and(|c| covers(Some(c), text))
        };
        let declared = peers.values().any(declares);
        let yield_to_peer = declared
            && !covers(Some(&self.caps), text)
            && peers.values().any(|p| {
                declares(p) && p.present_groups.as_ref().is_none_or(|g| g.contains(&group))
            });
        PeerCommand {
            declared,
            yield_to_peer,
        }
    }

    /// auto-assign's rule on top of upstream: when every deployment of the present ring says
    /// which groups it is assigned (`assigned_groups`; `mine_assigned` for this one) and some
    /// but not all of them claim `group`, the owner is picked among those, with the same time
    /// bucket and prefer-local. A ring with a deployment that does not say (a Pallas-Bot)
    /// keeps the pure upstream answer, so mixed pools agree.
    pub fn respect_assignment(
        &self,
        owner: &mut Owner,
        peers: &BTreeMap<String, PeerView>,
        group: i64,
        mine_assigned: &BTreeSet<i64>,
        now: f64,
    ) {
        let ring = &owner.present_ring;
        if ring.len() < 2 || self.mine.is_empty() {
            return;
        }
        let mut claimants = Vec::new();
        for dep in ring {
            let assigned = if *dep == self.mine {
                Some(mine_assigned)
            } else {
                peers
                    .get(dep.as_str())
                    .and_then(|p| p.assigned_groups.as_ref())
            };
            match assigned {
                None => return,
                Some(groups) if groups.contains(&group) => claimants.push(dep.clone()),
                Some(_) => {}
            }
        }
        if claimants.is_empty() || claimants.len() == ring.len() {
            return;
        }
        owner.ring_index = ring_index(group, claimants.len(), now, self.rotate_sec);
        owner.owner = if self.prefer_local && claimants.contains(&self.mine) {
            self.mine.clone()
        } else {
            claimants[owner.ring_index].clone()
        };
        owner.should_process = owner.owner == self.mine;
        owner.assignee_ring = Some(claimants);
    }

    /// `federate_group_admin_owner`: among the present ring (no time bucket, no prefer-local),
    /// the deployments with known group admins; `None` when anything is unknown.
    /// `local_admins`: this deployment's observation (`None` = incomplete).
    pub fn group_admin_owner(
        &self,
        peers: &BTreeMap<String, PeerView>,
        group: i64,
        plain: Option<&str>,
        local_admins: Option<&BTreeSet<i64>>,
    ) -> (BTreeMap<String, Option<BTreeSet<i64>>>, Option<AdminOwner>) {
        let [_, _, _, ring] = self.rings(peers, group, plain);
        let observed: BTreeMap<String, Option<BTreeSet<i64>>> = ring
            .iter()
            .map(|dep| {
                let admins = if *dep == self.mine {
                    local_admins.cloned()
                } else {
                    peers
                        .get(dep.as_str())
                        .and_then(|p| p.group_admin_bot_ids.as_ref())
                        .and_then(|g| g.get(&group).cloned())
                };
                (dep.clone(), admins)
            })
            .collect();
        if self.mine.is_empty() || observed.values().any(Option::is_none) {
            return (observed, None);
        }
        let eligible: Vec<&String> = observed
            .iter()
            .filter(|(_, v)| v.as_ref().is_some_and(|s| !s.is_empty()))
            .map(|(d, _)| d)
            .collect();
        if eligible.is_empty() {
            return (observed, None);
        }
        let dep = eligible[stable_ring_index(group, eligible.len())].clone();
        let bots: Vec<i64> = observed[&dep].iter().flatten().copied().collect();
        let bot = bots[stable_ring_index(group, bots.len())];
        (
            observed,
            Some(AdminOwner {
                deployment_id: dep,
                bot_id: bot,
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_examples() {
        assert_eq!(ring_index(733291779, 3, 1700000000.0, 7200), 2);
        assert_eq!(stable_ring_index(123, 2), 1);
        assert_eq!(ring_index(-7, 3, 0.0, 0), 1);
        assert!(covers(Some(&["牛牛帮助".into()]), "/ 牛牛帮助 x"));
        assert!(!covers(Some(&["STRASSE".into()]), "straße 1"));
        assert!(!covers(Some(&["牛牛".into()]), "牛牛吃什么"));
        assert!(covers(None, "x") && !covers(None, "  "));
    }

    #[test]
    fn uncased_characters_fold_to_themselves() {
        for c in (0..0x3_0000)
            .filter_map(char::from_u32)
            .filter(|c| uncased(*c))
        {
            let s = c.to_string();
            assert_eq!(caseless::default_case_fold_str(&s), s, "U+{:04X}", c as u32);
        }
        assert!(casefold_eq("STRASSE", "strasse") && casefold_eq("Straße", "STRASSE"));
        assert!(!casefold_eq("牛牛帮助", "牛牛唱歌") && casefold_eq("ΣΑΣ", "σας"));
    }

    proptest::proptest! {
        #[test]
        fn casefold_eq_is_folded_equality(
            a in "[aAsSßẞσςΣſKk牛帮ﬀf ]{0,6}",
            b in "[aAsSßẞσςΣſKk牛帮ﬀf ]{0,6}",
        ) {
            let folded = caseless::default_case_fold_str(&a) == caseless::default_case_fold_str(&b);
            proptest::prop_assert_eq!(casefold_eq(&a, &b), folded);
        }
    }

    fn aware(present: &[i64], assigned: &[i64]) -> PeerView {
        PeerView {
            present_groups: Some(present.iter().copied().collect()),
            assigned_groups: Some(assigned.iter().copied().collect()),
            ..PeerView::default()
        }
    }

    #[test]
    fn the_assignee_deployment_owns_its_group() {
        let local = Local {
            mine: "dep-a".into(),
            ..Local::default()
        };
        // Group 1: upstream (1 % 2) picks dep-b; only dep-a is assigned it.
        let peers = BTreeMap::from([("dep-b".to_owned(), aware(&[1, 2], &[2]))]);
        let mut o = local.owner(&peers, 1, None, 0.0);
        assert_eq!(o.owner, "dep-b");
        local.respect_assignment(&mut o, &peers, 1, &BTreeSet::from([1]), 0.0);
        assert_eq!((o.owner.as_str(), o.should_process), ("dep-a", true));
        // Group 2: dep-b is assigned it, upstream (2 % 2) would pick dep-a.
        let mut o = local.owner(&peers, 2, None, 0.0);
        assert_eq!(o.owner, "dep-a");
        local.respect_assignment(&mut o, &peers, 2, &BTreeSet::from([1]), 0.0);
        assert_eq!((o.owner.as_str(), o.should_process), ("dep-b", false));
        // Both assigned: upstream's answer stands.
        let mut o = local.owner(&peers, 2, None, 0.0);
        local.respect_assignment(&mut o, &peers, 2, &BTreeSet::from([2]), 0.0);
        assert_eq!(
            (o.owner.as_str(), o.assignee_ring.as_ref()),
            ("dep-a", None)
        );
        // A Pallas-Bot peer (no assigned_groups) keeps the pure upstream answer.
        let mut legacy = aware(&[1], &[]);
        legacy.assigned_groups = None;
        let peers = BTreeMap::from([("dep-b".to_owned(), legacy)]);
        let mut o = local.owner(&peers, 1, None, 0.0);
        local.respect_assignment(&mut o, &peers, 1, &BTreeSet::from([1]), 0.0);
        assert_eq!(o.owner, "dep-b");
    }
}
