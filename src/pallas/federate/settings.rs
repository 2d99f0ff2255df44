//! Which pool this deployment joins and under which keys, resolved once at startup exactly
//! as Pallas-Bot resolves them (`federate/config.py`, `federate/redis_settings.py`), so both
//! kinds of deployment meet under the same prefix.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::pallas::gate::safe_key_part;
use crate::pallas::pystr::py_strip;
use crate::redis_conn::redis_url;
use crate::secret::SecretUrl;
use crate::yaml::{AtLeast, Seconds};

/// `federate:`, mirroring Pallas-Bot's `PALLAS_FEDERATE_*` settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Settings {
    /// Pool id (`PALLAS_FEDERATE_ID`); may also come from the bootstrap file.
    pub id: String,
    /// Coordination Redis (default: the bootstrap file's, else `redis.url`).
    #[serde(deserialize_with = "optional_redis_url")]
    pub redis_url: Option<SecretUrl>,
    /// Explicit key prefix (`PALLAS_FEDERATE_REDIS_PREFIX`).
    pub redis_prefix: String,
    /// A Pallas-Bot `community_stats.json` whose bootstrap coord prefix wins, as upstream.
    pub bootstrap_file: Option<PathBuf>,
    /// `on`, `off` or `auto` (on when a pool id resolves).
    pub ingress: Tristate,
    /// `false` disables federation unless `ingress` is explicitly `on`.
    pub control_plane: bool,
    /// Owner rotation period; `<= 0`: pure group-id modulo.
    pub owner_rotate_sec: i64,
    pub prefer_local_owner: bool,
    /// The assignee's deployment owns its group when every deployment of the ring is
    /// assignment-aware (auto-assign); otherwise answers are pure upstream.
    pub respect_assignment: bool,
    pub deployment_name: String,
    pub command_capabilities: Vec<String>,
    #[serde(deserialize_with = "permission_levels")]
    pub command_permission_levels: BTreeMap<String, String>,
    /// Command plaintext → command id, in order (first wins among equally long prefixes).
    pub command_ids: indexmap::IndexMap<String, String>,
    pub public_bot_ids: Vec<i64>,
    /// Heartbeat key TTL in seconds.
    pub heartbeat_ttl: AtLeast<60>,
    /// Seconds between heartbeats and roster refreshes.
    pub refresh_interval: Seconds<100>,
    /// Federate claim TTL; default: the bootstrap file's, else 86,400 s.
    pub claim_ttl: Option<AtLeast<60>>,
    /// The platform whose bots this deployment serves (numeric ids).
    pub platform: String,
    /// Where the deployment id is persisted (`{dataDir}/federate/deployment_id`).
    pub data_dir: PathBuf,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            id: String::new(),
            redis_url: None,
            redis_prefix: String::new(),
            bootstrap_file: None,
            ingress: Tristate::Auto,
            control_plane: true,
            owner_rotate_sec: 7200,
            prefer_local_owner: false,
            respect_assignment: true,
            deployment_name: String::new(),
            command_capabilities: Vec::new(),
            command_permission_levels: BTreeMap::new(),
            command_ids: indexmap::IndexMap::new(),
            public_bot_ids: Vec::new(),
            heartbeat_ttl: AtLeast(180),
            refresh_interval: Seconds::secs(60),
            claim_ttl: None,
            platform: "onebot".to_owned(),
            data_dir: PathBuf::from("data"),
        }
    }
}

impl Settings {
    /// Paths relative to the config file, trimmed names; cross-key checks.
    pub fn resolve(&mut self, base: &Path) -> Result<(), PoolError> {
        self.id = self.id.trim().to_owned();
        self.deployment_name = self.deployment_name.trim().to_owned();
        self.owner_rotate_sec = self.owner_rotate_sec.max(0);
        self.bootstrap_file = self.bootstrap_file.as_ref().map(|p| base.join(p));
        self.data_dir = base.join(&self.data_dir);
        if self.refresh_interval.as_secs_f64() >= self.heartbeat_ttl.get() as f64 {
            return Err(PoolError::RefreshNotShorter {
                ttl: self.heartbeat_ttl.get(),
                refresh: self.refresh_interval.as_secs_f64(),
            });
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tristate {
    On,
    Off,
    Auto,
}

const PERMISSION_LEVELS: [&str; 5] = [
    "everyone",
    "staff",
    "group_moderator",
    "bot_moderator",
    "superuser",
];

fn optional_redis_url<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<SecretUrl>, D::Error> {
    #[derive(Deserialize)]
    struct Url(#[serde(deserialize_with = "redis_url")] SecretUrl);
    Ok(Option::<Url>::deserialize(d)?.map(|u| u.0))
}

fn permission_levels<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    struct Level(String);
    impl<'de> Deserialize<'de> for Level {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            crate::yaml::checked_str(d, |level| {
                if PERMISSION_LEVELS.contains(&level.trim().to_lowercase().as_str()) {
                    Ok(Level(level.to_owned()))
                } else {
                    Err(format!(
                        "expected one of {} (got {level:?})",
                        PERMISSION_LEVELS.join(", ")
                    ))
                }
            })
        }
    }
    let raw = BTreeMap::<crate::yaml::NonEmpty, Level>::deserialize(d)?;
    Ok(raw.into_iter().map(|(k, v)| (k.0, v.0)).collect())
}

/// The resolved pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pool {
    pub id: String,
    /// `{P}`: every federate key starts with it.
    pub prefix: String,
    pub redis_url: SecretUrl,
    pub claim_ttl: u64,
    /// This deployment, lower case.
    pub deployment: String,
}

/// Why the pool cannot be joined; every message names the key.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error(
        "federate.refreshInterval: must be shorter than heartbeatTtl ({ttl} s), or peers lose this deployment between heartbeats (got {refresh})"
    )]
    RefreshNotShorter { ttl: u64, refresh: f64 },
    #[error("federate.bootstrapFile: {}: {why}", path.display())]
    Bootstrap { path: PathBuf, why: String },
    #[error(
        "federate.ingress is on but no pool id resolves (set federate.id or the bootstrap file's federate_id)"
    )]
    NoPoolId,
    #[error(
        "federate: no coordination Redis (set federate.redisUrl, redis.url or the bootstrap file's coord.redis_url)"
    )]
    NoRedis,
    #[error("federate.dataDir {}: cannot keep the deployment id: {error}", dir.display())]
    DeploymentId { dir: PathBuf, error: std::io::Error },
}

/// What a Pallas-Bot `community_stats.json` contributes (`control_plane_bootstrap.coord`).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Bootstrap {
    pub federate_id: String,
    pub redis_url: String,
    pub redis_prefix: String,
    pub claim_ttl: Option<u64>,
}

/// Reads the bootstrap file; a missing file contributes nothing, an unreadable one is an error.
pub fn read_bootstrap(path: &Path) -> Result<Bootstrap, PoolError> {
    let unreadable = |why: String| PoolError::Bootstrap {
        path: path.to_owned(),
        why,
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Bootstrap::default()),
        Err(e) => return Err(unreadable(e.to_string())),
    };
    let data: Value = serde_json::from_str(&text).map_err(|e| unreadable(e.to_string()))?;
    let text_at = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .map(|s| py_strip(s).to_owned())
            .unwrap_or_default()
    };
    let coord = data.pointer("/control_plane_bootstrap/coord");
    let claim_ttl = coord
        .and_then(|c| c.get("claim_ttl_sec"))
        .and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| py_strip(s).parse().ok()))
        })
        .map(|t| t.max(60));
    Ok(Bootstrap {
        federate_id: text_at(data.get("federate_id")),
        redis_url: text_at(coord.and_then(|c| c.get("redis_url"))),
        redis_prefix: text_at(coord.and_then(|c| c.get("redis_prefix"))),
        claim_ttl,
    })
}

/// `federate_redis_prefix()`: the bootstrap prefix wins, then the explicit one, then
/// `pallas:fed:{safe pool id}`; empty when there is no pool id.
pub fn prefix(bootstrap_prefix: &str, explicit: &str, pool_id: &str) -> String {
    let bootstrap = bootstrap_prefix.trim_end_matches(':');
    if !bootstrap.is_empty() {
        return bootstrap.to_owned();
    }
    let explicit = py_strip(explicit).trim_end_matches(':');
    if !explicit.is_empty() {
        return explicit.to_owned();
    }
    if pool_id.is_empty() {
        return String::new();
    }
    format!("pallas:fed:{}", safe_key_part(pool_id))
}

/// `federate_ingress_enabled()`: control plane off disables unless ingress is explicitly on;
/// `auto` means "when a pool id resolves".
pub fn enabled(control_plane: bool, ingress: Tristate, pool_id: &str) -> bool {
    match ingress {
        Tristate::On => true,
        Tristate::Off => false,
        Tristate::Auto => control_plane && !pool_id.is_empty(),
    }
}

/// This deployment's id: created once (a lower-case UUID v4) and kept in
/// `{data_dir}/federate/deployment_id`, so restarts keep their place in the rings.
pub fn load_or_create_deployment_id(data_dir: &Path) -> std::io::Result<String> {
    let path = data_dir.join("federate").join("deployment_id");
    if let Ok(text) = std::fs::read_to_string(&path)
        && let Ok(id) = uuid::Uuid::parse_str(text.trim())
    {
        return Ok(id.to_string());
    }
    std::fs::create_dir_all(path.parent().expect("a parent"))?;
    let id = uuid::Uuid::new_v4().to_string();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{id}\n"))?;
    std::fs::rename(&tmp, &path)?;
    Ok(id)
}

/// Resolves the pool; `Ok(None)` when federation is off, `Err` names what is missing.
/// `service_redis` is the service's own `redis.url`, the last fallback for the coordination
/// Redis.
pub fn resolve(
    cfg: &Settings,
    service_redis: Option<&SecretUrl>,
) -> Result<Option<Pool>, PoolError> {
    let bootstrap = match &cfg.bootstrap_file {
        Some(path) => read_bootstrap(path)?,
        None => Bootstrap::default(),
    };
    let id = if cfg.id.is_empty() {
        bootstrap.federate_id.clone()
    } else {
        cfg.id.clone()
    };
    if !enabled(cfg.control_plane, cfg.ingress, &id) {
        return Ok(None);
    }
    if id.is_empty() {
        return Err(PoolError::NoPoolId);
    }
    let redis_url = cfg
        .redis_url
        .clone()
        .or_else(|| {
            (!bootstrap.redis_url.is_empty()).then(|| SecretUrl::new(bootstrap.redis_url.clone()))
        })
        .or_else(|| service_redis.cloned())
        .ok_or(PoolError::NoRedis)?;
    let deployment =
        load_or_create_deployment_id(&cfg.data_dir).map_err(|e| PoolError::DeploymentId {
            dir: cfg.data_dir.clone(),
            error: e,
        })?;
    Ok(Some(Pool {
        prefix: prefix(&bootstrap.redis_prefix, &cfg.redis_prefix, &id),
        id,
        redis_url,
        claim_ttl: cfg
            .claim_ttl
            .map(AtLeast::get)
            .or(bootstrap.claim_ttl)
            .unwrap_or(86_400)
            .max(60),
        deployment: deployment.to_lowercase(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_follows_upstream_order() {
        assert_eq!(prefix("", "", "Pool/1:x"), "pallas:fed:Pool_1_x");
        assert_eq!(prefix("", " my:pool:: ", "p"), "my:pool");
        assert_eq!(prefix("boot:", "my", "p"), "boot");
        assert_eq!(prefix("", "", ""), "");
        assert_eq!(prefix("", "", "联邦-1"), "pallas:fed:联邦-1");
        assert_eq!(prefix("", "", "a\u{093E}Ⓐ²"), "pallas:fed:a__²");
    }

    #[test]
    fn enablement() {
        assert!(enabled(true, Tristate::Auto, "p"));
        assert!(!enabled(true, Tristate::Auto, ""));
        assert!(!enabled(false, Tristate::Auto, "p"));
        assert!(enabled(false, Tristate::On, "p"));
        assert!(!enabled(true, Tristate::Off, "p"));
    }

    #[test]
    fn deployment_id_is_created_once() {
        let dir = std::env::temp_dir().join(format!("aa-dep-{}", std::process::id()));
        let first = load_or_create_deployment_id(&dir).unwrap();
        assert_eq!(load_or_create_deployment_id(&dir).unwrap(), first);
        assert_eq!(first, first.to_lowercase());
        std::fs::write(dir.join("federate/deployment_id"), "not a uuid").unwrap();
        let replaced = load_or_create_deployment_id(&dir).unwrap();
        assert_ne!(replaced, first);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bootstrap_file() {
        let dir = std::env::temp_dir().join(format!("aa-boot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("community_stats.json");
        std::fs::write(
            &path,
            r#"{"federate_id":" pool-9 ","control_plane_bootstrap":{"coord":{"redis_url":"redis://127.0.0.1:1/2","redis_prefix":"boot:pfx:","claim_ttl_sec":"30"}}}"#,
        )
        .unwrap();
        let b = read_bootstrap(&path).unwrap();
        assert_eq!(b.federate_id, "pool-9");
        assert_eq!(b.redis_prefix, "boot:pfx:");
        assert_eq!(b.claim_ttl, Some(60));
        std::fs::write(&path, "{").unwrap();
        assert!(
            read_bootstrap(&path)
                .unwrap_err()
                .to_string()
                .contains("community_stats.json")
        );
        assert_eq!(
            read_bootstrap(&dir.join("absent.json")).unwrap(),
            Bootstrap::default()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
