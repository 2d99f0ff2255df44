//! `config.yaml`: typed, validated once per load, watched for edits.
//!
//! The plugin's keys keep its names and defaults. Every load runs the same validation, at
//! start-up and on every edit; an error names the file and the key, and the line and column
//! where YAML knows them. A rejected edit leaves the previous config in force.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::balance::{Rules, Strategy};
use crate::source::onebot;

/// The whole configuration, with defaults filled in and paths resolved against the config
/// file's directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where it was loaded from.
    pub path: PathBuf,
    /// Seconds between periodic rebalances (≥ 60); ignored when `balance_cron` is set.
    pub balance_interval: Duration,
    /// Cron expression (seconds first, as tokio-cron-scheduler reads it) for periodic runs.
    pub balance_cron: Option<String>,
    pub rules: Rules,
    pub strategy: Strategy,
    pub delays: TriggerDelays,
    pub database: Database,
    pub sources: Sources,
    /// Redis for publication, claims, gates and presence; `None` = no Redis.
    pub redis: Option<RedisConfig>,
    pub claims: ClaimsConfig,
    pub api: ApiConfig,
    /// The Pallas-Bot federate pool this deployment joins, if any.
    pub federate: Option<FederateConfig>,
}

/// `federate:`, mirroring Pallas-Bot's `PALLAS_FEDERATE_*` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FederateConfig {
    /// Pool id (`PALLAS_FEDERATE_ID`); may also come from the bootstrap file.
    pub id: String,
    /// Coordination Redis (default: `redis.url`).
    pub redis_url: Option<String>,
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
    pub command_permission_levels: BTreeMap<String, String>,
    /// Command plaintext → command id, in order (first wins among equally long prefixes).
    pub command_ids: indexmap::IndexMap<String, String>,
    pub public_bot_ids: Vec<i64>,
    /// Heartbeat key TTL in seconds (at least 60).
    pub heartbeat_ttl: u64,
    /// Seconds between heartbeats and roster refreshes.
    pub refresh_interval: Duration,
    /// Federate claim TTL; default: the bootstrap file's, else 86,400 s.
    pub claim_ttl: Option<u64>,
    /// The platform whose bots this deployment serves (numeric ids).
    pub platform: String,
    /// Where the deployment id is persisted (`{dataDir}/federate/deployment_id`).
    pub data_dir: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tristate {
    On,
    Off,
    Auto,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RedisConfig {
    pub url: String,
    /// Prefix of the assignment publication keys.
    pub prefix: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClaimsConfig {
    /// Redis claim keys are `{key_prefix}:{plugin}:{group}:{key}`.
    pub key_prefix: String,
    pub ttl: u64,
    /// File claims (no Redis) live under `{data_dir}/{plugin}/message_claims/`.
    pub data_dir: PathBuf,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ApiConfig {
    /// `None`: no HTTP API.
    pub bind: Option<std::net::SocketAddr>,
    pub token: String,
    pub max_body_bytes: usize,
}

/// How long after an event of each kind the rebalance runs (the plugin's trigger table).
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerDelays {
    pub startup: Duration,
    pub bot_status: Duration,
    pub bot_online: Duration,
    pub bot_offline: Duration,
    pub channel_joined: Duration,
    pub channel_left: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Database {
    Sqlite(PathBuf),
    Postgres(String),
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sources {
    /// A fleet file (YAML or JSON) that is watched like a live fleet.
    pub file: Option<PathBuf>,
    /// Live OneBot v11 connections.
    pub onebot: Option<onebot::Settings>,
}

/// A config or fleet file that could not be used: which file, and where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub file: PathBuf,
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.message)
    }
}

impl std::error::Error for FileError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Raw {
    #[serde(default = "default_interval")]
    balance_interval: f64,
    #[serde(default)]
    balance_cron: Option<String>,
    #[serde(default = "default_platforms")]
    enabled_platforms: Vec<String>,
    #[serde(default)]
    exclude_channels: Vec<String>,
    #[serde(default)]
    channel_bot_priority: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    strategy: Strategy,
    #[serde(default)]
    trigger_delays: RawDelays,
    #[serde(default)]
    database: RawDatabase,
    #[serde(default)]
    sources: RawSources,
    #[serde(default)]
    redis: Option<RawRedis>,
    #[serde(default)]
    claims: RawClaims,
    #[serde(default)]
    api: RawApi,
    #[serde(default)]
    federate: Option<RawFederate>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawFederate {
    #[serde(default)]
    id: String,
    #[serde(default)]
    redis_url: Option<String>,
    #[serde(default)]
    redis_prefix: String,
    #[serde(default)]
    bootstrap_file: Option<PathBuf>,
    #[serde(default = "auto")]
    ingress: Tristate,
    #[serde(default = "yes")]
    control_plane: bool,
    #[serde(default = "rotate")]
    owner_rotate_sec: i64,
    #[serde(default)]
    prefer_local_owner: bool,
    #[serde(default = "yes")]
    respect_assignment: bool,
    #[serde(default)]
    deployment_name: String,
    #[serde(default)]
    command_capabilities: Vec<String>,
    #[serde(default)]
    command_permission_levels: BTreeMap<String, String>,
    #[serde(default)]
    command_ids: indexmap::IndexMap<String, String>,
    #[serde(default)]
    public_bot_ids: Vec<i64>,
    #[serde(default = "heartbeat_ttl")]
    heartbeat_ttl: u64,
    #[serde(default = "refresh")]
    refresh_interval: f64,
    #[serde(default)]
    claim_ttl: Option<u64>,
    #[serde(default = "onebot_platform")]
    platform: String,
    #[serde(default = "data_dir")]
    data_dir: PathBuf,
}

fn data_dir() -> PathBuf {
    PathBuf::from("data")
}

fn auto() -> Tristate {
    Tristate::Auto
}
fn yes() -> bool {
    true
}
fn rotate() -> i64 {
    7200
}
fn heartbeat_ttl() -> u64 {
    180
}
fn refresh() -> f64 {
    60.0
}
fn onebot_platform() -> String {
    "onebot".to_owned()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRedis {
    url: String,
    #[serde(default = "default_prefix")]
    prefix: String,
}

fn default_prefix() -> String {
    "auto-assign".to_owned()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct RawClaims {
    key_prefix: String,
    ttl: u64,
    data_dir: PathBuf,
}

impl Default for RawClaims {
    fn default() -> Self {
        Self {
            key_prefix: "pallas:msg_claim".to_owned(),
            ttl: 86400,
            data_dir: PathBuf::from("data"),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct RawApi {
    bind: Option<String>,
    token: String,
    max_body_bytes: usize,
}

impl Default for RawApi {
    fn default() -> Self {
        Self {
            bind: Some("127.0.0.1:8787".to_owned()),
            token: String::new(),
            max_body_bytes: 64 * 1024,
        }
    }
}

fn default_interval() -> f64 {
    600.0
}

fn default_platforms() -> Vec<String> {
    vec!["onebot".to_owned()]
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct RawDelays {
    startup: f64,
    bot_status: f64,
    bot_online: f64,
    bot_offline: f64,
    channel_joined: f64,
    channel_left: f64,
}

impl Default for RawDelays {
    fn default() -> Self {
        Self {
            startup: 0.0,
            bot_status: 5.0,
            bot_online: 5.0,
            bot_offline: 5.0,
            channel_joined: 10.0,
            channel_left: 5.0,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawDatabase {
    url: String,
}

impl Default for RawDatabase {
    fn default() -> Self {
        Self {
            url: "sqlite://data/auto-assign.db".to_owned(),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSources {
    #[serde(default)]
    file: Option<PathBuf>,
    #[serde(default)]
    onebot: Option<RawOneBot>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawOneBot {
    #[serde(default)]
    access_token: String,
    #[serde(default)]
    connections: Vec<RawForward>,
    #[serde(default)]
    reverse: Option<RawReverse>,
    #[serde(default = "secs::<10>")]
    action_timeout: f64,
    #[serde(default = "secs::<600>")]
    group_list_refresh: f64,
    #[serde(default = "secs::<30>")]
    offline_grace: f64,
    #[serde(default = "secs::<10>")]
    startup_wait: f64,
    #[serde(default = "default_frame")]
    max_frame_bytes: usize,
    #[serde(default)]
    health: RawHealth,
}

fn secs<const N: u64>() -> f64 {
    N as f64
}

fn default_frame() -> usize {
    16 << 20
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawForward {
    url: String,
    #[serde(default)]
    access_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawReverse {
    bind: String,
    #[serde(default = "default_reverse_path")]
    path: String,
    #[serde(default)]
    access_token: Option<String>,
}

fn default_reverse_path() -> String {
    "/onebot/v11/ws".to_owned()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct RawHealth {
    probe_interval: f64,
    probe_timeout: f64,
    failure_threshold: u32,
    concurrency: usize,
}

impl Default for RawHealth {
    fn default() -> Self {
        Self {
            probe_interval: 60.0,
            probe_timeout: 5.0,
            failure_threshold: 3,
            concurrency: 8,
        }
    }
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, FileError> {
        let text = std::fs::read_to_string(path).map_err(|e| FileError {
            file: path.to_owned(),
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(path, &text)
    }

    /// Validates config text as if read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Config, FileError> {
        let fail = |message: String| FileError {
            file: path.to_owned(),
            message,
        };
        // An empty file is an empty mapping: every default.
        let text = if text.trim().is_empty() { "{}" } else { text };
        let de = serde_norway::Deserializer::from_str(text);
        let raw: Raw = serde_path_to_error::deserialize(de)
            .map_err(describe_yaml_error)
            .map_err(fail)?;
        let base = path.parent().unwrap_or(Path::new(".")).to_owned();
        let seconds = |key: &str, v: f64, min: f64| -> Result<Duration, FileError> {
            if !v.is_finite() || v < min {
                return Err(fail(format!(
                    "{key}: must be a number of seconds ≥ {min} (got {v})"
                )));
            }
            Ok(Duration::from_secs_f64(v))
        };
        let d = &raw.trigger_delays;
        let delays = TriggerDelays {
            startup: seconds("triggerDelays.startup", d.startup, 0.0)?,
            bot_status: seconds("triggerDelays.botStatus", d.bot_status, 0.0)?,
            bot_online: seconds("triggerDelays.botOnline", d.bot_online, 0.0)?,
            bot_offline: seconds("triggerDelays.botOffline", d.bot_offline, 0.0)?,
            channel_joined: seconds("triggerDelays.channelJoined", d.channel_joined, 0.0)?,
            channel_left: seconds("triggerDelays.channelLeft", d.channel_left, 0.0)?,
        };
        if let Some(cron) = &raw.balance_cron {
            tokio_cron_scheduler::Job::new(cron.as_str(), |_, _| {}).map_err(|e| {
                fail(format!(
                    "balanceCron: invalid cron expression {cron:?}: {e}"
                ))
            })?;
        }
        for (key, bots) in &raw.channel_bot_priority {
            if key.is_empty() || bots.iter().any(String::is_empty) {
                return Err(fail(format!(
                    "channelBotPriority.{key}: empty channel or bot id"
                )));
            }
        }
        if let Some(i) = raw.exclude_channels.iter().position(String::is_empty) {
            return Err(fail(format!("excludeChannels[{i}]: empty channel id")));
        }
        Ok(Config {
            path: path.to_owned(),
            balance_interval: seconds("balanceInterval", raw.balance_interval, 60.0)?,
            balance_cron: raw.balance_cron,
            rules: Rules {
                enabled_platforms: raw.enabled_platforms,
                priority: raw.channel_bot_priority,
                exclude: raw.exclude_channels,
            },
            strategy: raw.strategy,
            delays,
            database: parse_database(&raw.database.url, &base)
                .map_err(|m| fail(format!("database.url: {m}")))?,
            redis: match raw.redis {
                None => None,
                Some(r) => {
                    if !(r.url.starts_with("redis://") || r.url.starts_with("unix://")) {
                        return Err(fail(format!(
                            "redis.url: expected redis://host:port[/db], got {:?}",
                            r.url
                        )));
                    }
                    if r.prefix.is_empty() {
                        return Err(fail("redis.prefix: empty".to_owned()));
                    }
                    Some(RedisConfig {
                        url: r.url,
                        prefix: r.prefix,
                    })
                }
            },
            claims: {
                let c = raw.claims;
                if c.key_prefix.is_empty() {
                    return Err(fail("claims.keyPrefix: empty".to_owned()));
                }
                if c.ttl < 60 {
                    return Err(fail(format!(
                        "claims.ttl: must be at least 60 seconds (got {})",
                        c.ttl
                    )));
                }
                ClaimsConfig {
                    key_prefix: c.key_prefix,
                    ttl: c.ttl,
                    data_dir: base.join(c.data_dir),
                }
            },
            api: {
                let a = raw.api;
                let bind = match a.bind {
                    None => None,
                    Some(b) => Some(b.parse().map_err(|e| {
                        fail(format!(
                            "api.bind: {b:?} is not an address like 127.0.0.1:8787 ({e})"
                        ))
                    })?),
                };
                if a.max_body_bytes < 1024 {
                    return Err(fail("api.maxBodyBytes: must be at least 1024".to_owned()));
                }
                ApiConfig {
                    bind,
                    token: a.token,
                    max_body_bytes: a.max_body_bytes,
                }
            },
            federate: match raw.federate {
                None => None,
                Some(f) => {
                    if f.heartbeat_ttl < 60 {
                        return Err(fail(format!(
                            "federate.heartbeatTtl: must be at least 60 seconds (got {})",
                            f.heartbeat_ttl
                        )));
                    }
                    if f.refresh_interval >= f.heartbeat_ttl as f64 {
                        return Err(fail(format!(
                            "federate.refreshInterval: must be shorter than heartbeatTtl ({} s), or peers lose this deployment between heartbeats (got {})",
                            f.heartbeat_ttl, f.refresh_interval
                        )));
                    }
                    if let Some(ttl) = f.claim_ttl
                        && ttl < 60
                    {
                        return Err(fail(format!(
                            "federate.claimTtl: must be at least 60 seconds (got {ttl})"
                        )));
                    }
                    if let Some(url) = &f.redis_url
                        && !url.starts_with("redis://")
                    {
                        return Err(fail(format!(
                            "federate.redisUrl: expected redis://host:port[/db], got {url:?}"
                        )));
                    }
                    for (id, level) in &f.command_permission_levels {
                        let known = [
                            "everyone",
                            "staff",
                            "group_moderator",
                            "bot_moderator",
                            "superuser",
                        ];
                        if id.trim().is_empty()
                            || !known.contains(&level.trim().to_lowercase().as_str())
                        {
                            return Err(fail(format!(
                                "federate.commandPermissionLevels.{id}: expected one of {} (got {level:?})",
                                known.join(", ")
                            )));
                        }
                    }
                    Some(FederateConfig {
                        id: f.id.trim().to_owned(),
                        redis_url: f.redis_url,
                        redis_prefix: f.redis_prefix,
                        bootstrap_file: f.bootstrap_file.map(|p| base.join(p)),
                        ingress: f.ingress,
                        control_plane: f.control_plane,
                        owner_rotate_sec: f.owner_rotate_sec.max(0),
                        prefer_local_owner: f.prefer_local_owner,
                        respect_assignment: f.respect_assignment,
                        deployment_name: f.deployment_name.trim().to_owned(),
                        command_capabilities: f.command_capabilities,
                        command_permission_levels: f.command_permission_levels,
                        command_ids: f.command_ids,
                        public_bot_ids: f.public_bot_ids,
                        heartbeat_ttl: f.heartbeat_ttl,
                        refresh_interval: seconds(
                            "federate.refreshInterval",
                            f.refresh_interval,
                            0.1,
                        )?,
                        claim_ttl: f.claim_ttl,
                        platform: f.platform,
                        data_dir: base.join(f.data_dir),
                    })
                }
            },
            sources: Sources {
                file: raw.sources.file.map(|f| base.join(f)),
                onebot: raw
                    .sources
                    .onebot
                    .map(|o| onebot_settings(o, &seconds, &fail))
                    .transpose()?,
            },
        })
    }
}

/// The OneBot section, validated.
fn onebot_settings(
    raw: RawOneBot,
    seconds: &dyn Fn(&str, f64, f64) -> Result<Duration, FileError>,
    fail: &dyn Fn(String) -> FileError,
) -> Result<onebot::Settings, FileError> {
    let key = |k: &str| format!("sources.onebot.{k}");
    let mut connections = Vec::new();
    for (i, c) in raw.connections.into_iter().enumerate() {
        if c.url.starts_with("wss://") {
            return Err(fail(format!(
                "{}: wss:// is not supported; use ws:// (behind a TLS-terminating proxy if needed)",
                key(&format!("connections[{i}].url"))
            )));
        }
        if !c.url.starts_with("ws://") || c.url.len() <= "ws://".len() {
            return Err(fail(format!(
                "{}: expected ws://host:port[/path], got {:?}",
                key(&format!("connections[{i}].url")),
                c.url
            )));
        }
        connections.push(onebot::settings::Forward {
            url: c.url,
            access_token: c.access_token.unwrap_or_else(|| raw.access_token.clone()),
        });
    }
    let reverse = match raw.reverse {
        None => None,
        Some(r) => {
            let bind = r.bind.parse().map_err(|e| {
                fail(format!(
                    "{}: {:?} is not an address like 127.0.0.1:8080 ({e})",
                    key("reverse.bind"),
                    r.bind
                ))
            })?;
            if !r.path.starts_with('/') {
                return Err(fail(format!("{}: must start with /", key("reverse.path"))));
            }
            Some(onebot::settings::Reverse {
                bind,
                path: r.path,
                access_token: r.access_token.unwrap_or_else(|| raw.access_token.clone()),
            })
        }
    };
    let h = &raw.health;
    if h.failure_threshold == 0 || h.concurrency == 0 {
        return Err(fail(format!(
            "{}: failureThreshold and concurrency must be at least 1",
            key("health")
        )));
    }
    if raw.max_frame_bytes < 1024 {
        return Err(fail(format!(
            "{}: must be at least 1024",
            key("maxFrameBytes")
        )));
    }
    Ok(onebot::Settings {
        connections,
        reverse,
        action_timeout: seconds(&key("actionTimeout"), raw.action_timeout, 0.1)?,
        group_list_refresh: seconds(&key("groupListRefresh"), raw.group_list_refresh, 1.0)?,
        offline_grace: seconds(&key("offlineGrace"), raw.offline_grace, 0.0)?,
        startup_wait: seconds(&key("startupWait"), raw.startup_wait, 0.0)?,
        max_frame_bytes: raw.max_frame_bytes,
        probe_interval: seconds(&key("health.probeInterval"), h.probe_interval, 0.1)?,
        probe_timeout: seconds(&key("health.probeTimeout"), h.probe_timeout, 0.1)?,
        failure_threshold: h.failure_threshold,
        health_concurrency: h.concurrency,
    })
}

/// A YAML error as `key.path: what is wrong at line L column C`.
pub(crate) fn describe_yaml_error(e: serde_path_to_error::Error<serde_norway::Error>) -> String {
    let key = e.path().to_string();
    let inner = e.into_inner();
    let text = inner.to_string();
    // serde_norway names the key itself for some errors; never say it twice.
    let mut message = if key == "." || key.is_empty() || text.starts_with(&format!("{key}: ")) {
        text
    } else {
        format!("{key}: {text}")
    };
    if let Some(loc) = inner.location()
        && !message.contains("line ")
    {
        message.push_str(&format!(" at line {} column {}", loc.line(), loc.column()));
    }
    message
}

fn parse_database(url: &str, base: &Path) -> Result<Database, String> {
    if let Some(rest) = url.strip_prefix("sqlite:") {
        let path = rest.trim_start_matches("//");
        let path = path.split('?').next().unwrap_or_default();
        if path.is_empty() || path == ":memory:" {
            return Err(format!("{url:?}: an SQLite URL needs a file path"));
        }
        return Ok(Database::Sqlite(base.join(path)));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Database::Postgres(url.to_owned()));
    }
    Err(format!("{url:?}: expected sqlite://PATH or postgres://..."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(Path::new("/etc/aa/config.yaml"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_the_plugins() {
        let c = parse("").unwrap();
        assert_eq!(c.balance_interval, Duration::from_secs(600));
        assert_eq!(c.rules.enabled_platforms, ["onebot"]);
        assert_eq!(c.strategy, Strategy::Optimal);
        assert_eq!(c.delays.channel_joined, Duration::from_secs(10));
        assert_eq!(c.delays.startup, Duration::ZERO);
        assert_eq!(
            c.database,
            Database::Sqlite("/etc/aa/data/auto-assign.db".into())
        );
    }

    #[test]
    fn the_shipped_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.yaml");
        let c = Config::load(&path).unwrap();
        assert!(c.sources.file.as_ref().is_some_and(|f| f.exists()), "{c:?}");
    }

    #[test]
    fn errors_name_the_file_key_and_position() {
        let e = parse("balanceInterval: 30\n").unwrap_err();
        assert_eq!(
            e,
            "/etc/aa/config.yaml: balanceInterval: must be a number of seconds ≥ 60 (got 30)"
        );
        let e = parse("channelBotPriority:\n  \"123\": bot1\n").unwrap_err();
        assert!(e.starts_with("/etc/aa/config.yaml: channelBotPriority.123: invalid type: string \"bot1\", expected a sequence"), "{e}");
        assert!(e.contains("line 2"), "{e}");
        let e = parse("balanceIntervall: 600\n").unwrap_err();
        assert!(e.contains("unknown field `balanceIntervall`"), "{e}");
        let e = parse("enabledPlatforms: [onebot\n").unwrap_err();
        assert!(e.contains("line"), "{e}");
        let e = parse("strategy: best\n").unwrap_err();
        assert!(
            e.starts_with("/etc/aa/config.yaml: strategy: unknown variant `best`"),
            "{e}"
        );
        let e = parse("balanceCron: \"every minute\"\n").unwrap_err();
        assert!(e.contains("balanceCron: invalid cron expression"), "{e}");
        let e = parse("database:\n  url: mysql://x\n").unwrap_err();
        assert!(e.contains("database.url"), "{e}");
        let e = parse("triggerDelays:\n  botOffline: -1\n").unwrap_err();
        assert!(e.contains("triggerDelays.botOffline"), "{e}");
    }

    #[test]
    fn relative_paths_follow_the_config_file() {
        let c =
            parse("database:\n  url: sqlite://state/x.db\nsources:\n  file: fleet.yaml\n").unwrap();
        assert_eq!(c.database, Database::Sqlite("/etc/aa/state/x.db".into()));
        assert_eq!(c.sources.file, Some("/etc/aa/fleet.yaml".into()));
        let c = parse("database:\n  url: sqlite:///var/lib/aa.db\n").unwrap();
        assert_eq!(c.database, Database::Sqlite("/var/lib/aa.db".into()));
        let c = parse("database:\n  url: postgres://u@localhost/aa\n").unwrap();
        assert_eq!(
            c.database,
            Database::Postgres("postgres://u@localhost/aa".into())
        );
    }

    #[test]
    fn federate_section() {
        let c = parse("federate:\n  id: pool-1\n  commandPermissionLevels: {help: SuperUser}\n")
            .unwrap();
        let f = c.federate.unwrap();
        assert_eq!(f.id, "pool-1");
        assert_eq!(f.ingress, Tristate::Auto);
        assert_eq!(f.owner_rotate_sec, 7200);
        assert!(f.respect_assignment && f.control_plane && !f.prefer_local_owner);
        assert_eq!((f.heartbeat_ttl, f.claim_ttl), (180, None));
        assert_eq!(f.data_dir, PathBuf::from("/etc/aa/data"));
        assert_eq!(parse("{}").unwrap().federate, None);
        for (text, key) in [
            ("federate:\n  heartbeatTtl: 30\n", "federate.heartbeatTtl"),
            ("federate:\n  claimTtl: 5\n", "federate.claimTtl"),
            (
                "federate:\n  refreshInterval: 200\n",
                "federate.refreshInterval",
            ),
            (
                "federate:\n  commandPermissionLevels: {help: admin}\n",
                "federate.commandPermissionLevels.help",
            ),
            ("federate:\n  ingress: maybe\n", "ingress"),
            ("federate:\n  redisUrl: http://x\n", "federate.redisUrl"),
            ("federate:\n  bogus: 1\n", "bogus"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
