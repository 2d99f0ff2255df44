//! Which pool this deployment joins and under which keys, resolved once at startup exactly
//! as Pallas-Bot resolves them (`federate/config.py`, `federate/redis_settings.py`), so both
//! kinds of deployment meet under the same prefix.

use std::path::Path;

use serde_json::Value;

use crate::config::{FederateConfig, Tristate};
use crate::coord::gate::safe_key_part;
use crate::coord::signature::is_py_whitespace;

/// The resolved pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pool {
    pub id: String,
    /// `{P}`: every federate key starts with it.
    pub prefix: String,
    pub redis_url: String,
    pub claim_ttl: u64,
    /// This deployment, lower case.
    pub deployment: String,
}

/// What a Pallas-Bot `community_stats.json` contributes (`control_plane_bootstrap.coord`).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Bootstrap {
    pub federate_id: String,
    pub redis_url: String,
    pub redis_prefix: String,
    pub claim_ttl: Option<u64>,
}

fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_whitespace)
}

/// Reads the bootstrap file; a missing file contributes nothing, an unreadable one is an error.
pub fn read_bootstrap(path: &Path) -> Result<Bootstrap, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Bootstrap::default()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let data: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
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
pub fn resolve(cfg: &FederateConfig, service_redis: Option<&str>) -> Result<Option<Pool>, String> {
    let bootstrap = match &cfg.bootstrap_file {
        Some(path) => read_bootstrap(path).map_err(|e| format!("federate.bootstrapFile: {e}"))?,
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
        return Err(
            "federate.ingress is on but no pool id resolves (set federate.id or the bootstrap \
             file's federate_id)"
                .to_owned(),
        );
    }
    let redis_url = cfg
        .redis_url
        .clone()
        .or_else(|| (!bootstrap.redis_url.is_empty()).then(|| bootstrap.redis_url.clone()))
        .or_else(|| service_redis.map(str::to_owned))
        .ok_or_else(|| {
            "federate: no coordination Redis (set federate.redisUrl, redis.url or the bootstrap \
             file's coord.redis_url)"
                .to_owned()
        })?;
    let deployment = load_or_create_deployment_id(&cfg.data_dir).map_err(|e| {
        format!(
            "federate.dataDir {}: cannot keep the deployment id: {e}",
            cfg.data_dir.display()
        )
    })?;
    Ok(Some(Pool {
        prefix: prefix(&bootstrap.redis_prefix, &cfg.redis_prefix, &id),
        id,
        redis_url,
        claim_ttl: cfg
            .claim_ttl
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
                .contains("community_stats.json")
        );
        assert_eq!(
            read_bootstrap(&dir.join("absent.json")).unwrap(),
            Bootstrap::default()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
