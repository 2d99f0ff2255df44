//! `config.yaml`: typed, validated once per load, watched for edits.
//!
//! Each subsystem owns its section (its keys, defaults and checks live next to the code that
//! uses them: `triggers::TriggerDelays`, `store::Settings`, `source::Settings`,
//! `redis_conn::Settings`, `pallas::claim::Settings`, `api::Settings`,
//! `pallas::federate::settings::Settings`); this module composes them, keeps the plugin's
//! top-level keys, and decides which sections need a restart. Every load runs the same checks,
//! at start-up and on every edit; an error names the file, the key, and the line and column.
//! A rejected edit leaves the previous config in force.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::api::settings as api;
use crate::balance::provisional::Provisional;
use crate::balance::{BalanceBy, Rules, Strategy};
use crate::leader::settings as leadership;
use crate::pallas::claim;
use crate::pallas::federate::settings as federate;
use crate::redis_conn;
use crate::source;
use crate::store;
use crate::traffic;
use crate::triggers::{CronExpr, TriggerDelays};
use crate::yaml::{self, NonEmpty, Quantity, Seconds};
pub use crate::yaml::{AtLeast, FileError};

/// The whole configuration, with defaults filled in and paths resolved against the config
/// file's directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where it was loaded from.
    pub path: PathBuf,
    /// Seconds between periodic rebalances (≥ 60); ignored when `balance_cron` is set.
    pub balance_interval: Duration,
    /// Cron expression (seconds first) for periodic runs.
    pub balance_cron: Option<CronExpr>,
    pub rules: Rules,
    pub strategy: Strategy,
    /// How channel weights are measured (`rules` holds the floor and minGain too).
    pub weights: traffic::Settings,
    pub delays: TriggerDelays,
    /// Whether channels left without a valid bot get one at once, or with the rebalance.
    pub provisional: Provisional,
    /// A bot offline for longer than this is forgotten (index, API, presence).
    pub forget_bots_after: Duration,
    pub database: store::Settings,
    pub sources: source::Settings,
    /// Redis for publication, claims, gates and presence; `None` = no Redis.
    pub redis: Option<redis_conn::Settings>,
    pub claims: claim::Settings,
    pub api: api::Settings,
    /// The Pallas-Bot federate pool this deployment joins, if any.
    pub federate: Option<federate::Settings>,
    /// One of several instances, when set (see `leader`).
    pub leadership: Option<leadership::Settings>,
    pub log_format: LogFormat,
}

/// `logFormat`: log lines for people (`text`) or one JSON object per line (`json`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The environment variable that sets the service's worker threads (tokio's own name for it).
pub const WORKER_THREADS_VAR: &str = "TOKIO_WORKER_THREADS";

/// [`WORKER_THREADS_VAR`] holds something other than a whole number of at least 1 (shown
/// cut to [`crate::logs::SHOWN_CHARS`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{WORKER_THREADS_VAR}: {0:?} is not a number of threads (1 or more)")]
pub struct WorkerThreadsError(String);

/// The worker threads [`WORKER_THREADS_VAR`] asks for, if it is set. Read here rather than by
/// tokio, which panics on a value it cannot use: a bad one is an error like a bad key's.
pub fn worker_threads(
    value: Option<&std::ffi::OsStr>,
) -> Result<Option<NonZeroUsize>, WorkerThreadsError> {
    let Some(value) = value else {
        return Ok(None);
    };
    value
        .to_str()
        .and_then(|text| text.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| {
            let shown = value.to_string_lossy();
            WorkerThreadsError(crate::logs::truncate(&shown, crate::logs::SHOWN_CHARS).to_owned())
        })
}

/// The file as written: the plugin's keys at the top level, then each subsystem's section.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Raw {
    #[serde(default = "default_interval")]
    balance_interval: Seconds<60_000>,
    #[serde(default)]
    balance_cron: Option<CronExpr>,
    #[serde(default = "default_platforms")]
    enabled_platforms: Vec<NonEmpty>,
    #[serde(default)]
    exclude_channels: Vec<NonEmpty>,
    #[serde(default)]
    channel_bot_priority: BTreeMap<NonEmpty, Vec<NonEmpty>>,
    #[serde(default)]
    strategy: Strategy,
    #[serde(default)]
    balance_by: BalanceBy,
    #[serde(default)]
    bot_capacity: BTreeMap<NonEmpty, Quantity>,
    #[serde(default)]
    channel_weights: BTreeMap<NonEmpty, Quantity>,
    #[serde(default)]
    weights: traffic::Settings,
    #[serde(default)]
    trigger_delays: TriggerDelays,
    #[serde(default)]
    provisional: Provisional,
    #[serde(default = "default_forget")]
    forget_bots_after: Seconds<0>,
    #[serde(default)]
    database: store::Settings,
    #[serde(default)]
    sources: source::Settings,
    #[serde(default)]
    redis: Option<redis_conn::Settings>,
    #[serde(default)]
    claims: claim::Settings,
    #[serde(default)]
    api: api::Settings,
    #[serde(default)]
    federate: Option<federate::Settings>,
    #[serde(default)]
    leadership: Option<leadership::Settings>,
    #[serde(default)]
    log_format: LogFormat,
}

fn default_interval() -> Seconds<60_000> {
    Seconds::secs(600)
}

fn default_forget() -> Seconds<0> {
    Seconds::secs(7 * 24 * 3600)
}

fn default_platforms() -> Vec<NonEmpty> {
    vec![NonEmpty("onebot".to_owned())]
}

/// Sections that only take effect after a restart, by their key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartOnly {
    Database,
    Sources,
    Redis,
    Claims,
    Api,
    Federate,
    Leadership,
    LogFormat,
}

impl RestartOnly {
    pub fn key(self) -> &'static str {
        match self {
            RestartOnly::Database => "database",
            RestartOnly::Sources => "sources",
            RestartOnly::Redis => "redis",
            RestartOnly::Claims => "claims",
            RestartOnly::Api => "api",
            RestartOnly::Federate => "federate",
            RestartOnly::Leadership => "leadership",
            RestartOnly::LogFormat => "logFormat",
        }
    }
}

impl Config {
    /// Loads `path` and checks everything `serve` reads at start besides it, connecting to
    /// nothing and writing nothing (`auto-assign check`): the fleet file, the TLS files of
    /// Redis and of the database URL. Every problem found, each naming its file.
    pub fn check(path: &Path) -> Result<Config, Vec<FileError>> {
        let config = Config::load(path).map_err(|e| vec![e])?;
        let mut errors = Vec::new();
        if let Some(fleet) = &config.sources.file
            && let Err(e) = source::file::Fleet::load(fleet)
        {
            errors.push(e);
        }
        if let Some(redis) = &config.redis
            && let Err(e) = crate::redis_conn::Redis::check(redis)
        {
            errors.push(FileError::new(path, format!("redis: {e}")));
        }
        if let Some(tls) = &config.api.tls
            && let Err(e) = crate::api::Tls::load(tls)
        {
            errors.push(FileError::new(path, e.to_string()));
        }
        for file in config.database.url.files() {
            if let Err(e) = std::fs::read(&file) {
                errors.push(FileError::new(
                    path,
                    format!("database.url names {} ({e})", file.display()),
                ));
            }
        }
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(errors)
        }
    }

    /// The kind of database `database.url` names, for people.
    pub fn database_name(&self) -> &'static str {
        match self.database.url {
            store::DatabaseUrl::Sqlite(_) => "SQLite",
            store::DatabaseUrl::Postgres(_) => "PostgreSQL",
            store::DatabaseUrl::Mysql(_) => "MySQL/MariaDB",
        }
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, FileError> {
        let bytes =
            std::fs::read(path).map_err(|e| FileError::new(path, format!("cannot read: {e}")))?;
        Self::parse_bytes(path, &bytes)
    }

    /// Validates config text as if read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Config, FileError> {
        Self::parse_bytes(path, text.as_bytes())
    }

    /// Validates config bytes as if read from `path`, `${NAME}` taken from the environment.
    pub fn parse_bytes(path: &Path, bytes: &[u8]) -> Result<Config, FileError> {
        Self::parse_with_env(path, bytes, &|name| std::env::var(name).ok())
    }

    /// Validates config bytes, `${NAME}` taken from `lookup`.
    pub fn parse_with_env(
        path: &Path,
        bytes: &[u8],
        lookup: yaml::Lookup,
    ) -> Result<Config, FileError> {
        let raw: Raw = yaml::from_slice_with_env(path, bytes, lookup)?;
        let base = path.parent().unwrap_or(Path::new(".")).to_owned();
        let strings = |v: Vec<NonEmpty>| v.into_iter().map(|s| s.0).collect::<Vec<_>>();
        let mut config = Config {
            path: path.to_owned(),
            balance_interval: raw.balance_interval.get(),
            balance_cron: raw.balance_cron,
            rules: Rules {
                enabled_platforms: strings(raw.enabled_platforms),
                priority: raw
                    .channel_bot_priority
                    .into_iter()
                    .map(|(k, v)| (k.0, strings(v)))
                    .collect(),
                exclude: strings(raw.exclude_channels),
                balance_by: raw.balance_by,
                capacity: raw
                    .bot_capacity
                    .into_iter()
                    .map(|(k, v)| (k.0, v.get()))
                    .collect(),
                channel_weights: raw
                    .channel_weights
                    .into_iter()
                    .map(|(k, v)| (k.0, v.get()))
                    .collect(),
                weight_floor: raw.weights.floor.get(),
                min_gain: raw.weights.min_gain.get(),
                search_time: raw.weights.search_time.get(),
                // The engine's, at runtime.
                search_interrupt: Default::default(),
                // An operator's, at runtime: never in the file.
                pins: Default::default(),
                drained: Default::default(),
            },
            strategy: raw.strategy,
            weights: raw.weights,
            delays: raw.trigger_delays,
            provisional: raw.provisional,
            forget_bots_after: raw.forget_bots_after.get(),
            database: raw.database,
            sources: raw.sources,
            redis: raw.redis,
            claims: raw.claims,
            api: raw.api,
            federate: raw.federate,
            leadership: raw.leadership,
            log_format: raw.log_format,
        };
        config.database.resolve(&base);
        config.sources.resolve(&base);
        config.claims.resolve(&base);
        if let Some(tls) = &mut config.api.tls {
            tls.resolve(&base);
        }
        if let Some(redis) = &mut config.redis {
            redis.resolve(&base);
        }
        if config.sources.http.is_some() && config.api.bind.is_none() {
            return Err(FileError::new(
                path,
                "sources.http: fleet reporters talk to the HTTP API, but api.bind is null",
            ));
        }
        if let Some(l) = &config.leadership {
            let missing = match l.lease {
                leadership::LeaseStore::Redis if config.redis.is_none() => {
                    Some("lease: redis needs the redis: section")
                }
                leadership::LeaseStore::Postgres
                    if !matches!(config.database.url, store::DatabaseUrl::Postgres(_)) =>
                {
                    Some("lease: postgres needs database.url to be postgres://")
                }
                _ => None,
            };
            // Followers serve the leader's assignment from its Redis publication.
            let missing = missing.or(config
                .redis
                .is_none()
                .then_some("followers follow the leader's publication: set redis:"));
            if let Some(missing) = missing {
                return Err(FileError::new(path, format!("leadership: {missing}")));
            }
        }
        if let Some(f) = &mut config.federate {
            f.resolve(&base)
                .map_err(|e| FileError::new(path, e.to_string()))?;
        }
        Ok(config)
    }

    /// The sections of `new` that differ from this config but only take effect after a
    /// restart.
    pub fn restart_only_changes(&self, new: &Config) -> Vec<RestartOnly> {
        let mut changed = Vec::new();
        if self.database != new.database {
            changed.push(RestartOnly::Database);
        }
        if self.sources != new.sources {
            changed.push(RestartOnly::Sources);
        }
        if self.redis != new.redis {
            changed.push(RestartOnly::Redis);
        }
        if self.claims != new.claims {
            changed.push(RestartOnly::Claims);
        }
        if self.api != new.api {
            changed.push(RestartOnly::Api);
        }
        if self.federate != new.federate {
            changed.push(RestartOnly::Federate);
        }
        if self.leadership != new.leadership {
            changed.push(RestartOnly::Leadership);
        }
        if self.log_format != new.log_format {
            changed.push(RestartOnly::LogFormat);
        }
        changed
    }

    /// `new` with the restart-only sections of this config: what a hot reload applies.
    pub fn reloadable_part_of(&self, mut new: Config) -> Config {
        new.database = self.database.clone();
        new.sources = self.sources.clone();
        new.redis = self.redis.clone();
        new.claims = self.claims.clone();
        new.api = self.api.clone();
        new.federate = self.federate.clone();
        new.leadership = self.leadership.clone();
        new.log_format = self.log_format;
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::DatabaseUrl;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(Path::new("/etc/aa/config.yaml"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn worker_threads_are_a_whole_number_or_a_clear_error() {
        use std::ffi::OsStr;
        let threads = |text: &str| worker_threads(Some(OsStr::new(text)));
        assert_eq!(worker_threads(None), Ok(None));
        assert_eq!(threads("1"), Ok(NonZeroUsize::new(1)));
        assert_eq!(threads(" 4 "), Ok(NonZeroUsize::new(4)));
        for bad in ["0", "", "two", "-1", "1.5"] {
            assert_eq!(
                threads(bad).map_err(|e| e.to_string()),
                Err(format!(
                    "TOKIO_WORKER_THREADS: {bad:?} is not a number of threads (1 or more)"
                )),
            );
        }
    }

    #[test]
    fn defaults_are_the_plugins() {
        let c = parse("{}").unwrap();
        assert_eq!(c.balance_interval, Duration::from_secs(600));
        assert_eq!(c.rules.enabled_platforms, ["onebot"]);
        assert_eq!(c.strategy, Strategy::Optimal);
        assert_eq!(c.delays.channel_joined.get(), Duration::from_secs(10));
        assert_eq!(c.delays.startup.get(), Duration::ZERO);
        assert_eq!(
            c.database.url,
            DatabaseUrl::Sqlite("/etc/aa/data/auto-assign.db".into())
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
            "/etc/aa/config.yaml: balanceInterval: must be a number of seconds ≥ 60 (got 30) at line 1 column 18"
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
        // Every value error says where it is, duplicates included.
        for (text, wanted) in [
            (
                "balanceInterval: .nan\n",
                "balanceInterval: must be a number of seconds ≥ 60 (got NaN) at line 1 column 18",
            ),
            (
                "strategy: greedy\nbalanceCron: \"every minute\"\n",
                "balanceCron: invalid cron expression \"every minute\"",
            ),
            (
                "database:\n  url: mongodb://x\n",
                "database.url: expected sqlite://PATH, postgres://",
            ),
            (
                "triggerDelays:\n  botOffline: -1\n",
                "triggerDelays.botOffline: must be a number of seconds ≥ 0 (got -1) at line 2 column 15",
            ),
            (
                "strategy: optimal\nbalanceInterval: 600\nstrategy: greedy\n",
                "duplicate key `strategy` at line 3 column 1",
            ),
            (
                "api:\n  bind: nowhere\n",
                "api.bind: \"nowhere\" is not an address like 127.0.0.1:8080",
            ),
            (
                "claims:\n  ttl: 5\n",
                "claims.ttl: must be at least 60 (got 5) at line 2 column 8",
            ),
            (
                "excludeChannels: [\"\"]\n",
                "excludeChannels[0]: must not be empty",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(wanted), "{text:?}: {e}");
            if !wanted.contains("cron") {
                assert!(e.contains(" at line "), "{text:?}: {e}");
            }
        }
        assert!(parse("").unwrap_err().contains("the file is empty"));
    }

    #[test]
    fn leadership_section() {
        let c =
            parse("redis: {url: \"redis://127.0.0.1:1\"}\nleadership: {instance: a}\n").unwrap();
        let l = c.leadership.unwrap();
        assert_eq!(l.instance(), "a");
        assert_eq!(l.lease_ttl.get(), Duration::from_secs(10));
        assert_eq!(l.lease, leadership::LeaseStore::Redis);
        for (text, wanted) in [
            (
                "leadership: {}\n",
                "leadership: lease: redis needs the redis: section",
            ),
            (
                "redis: {url: \"redis://h\"}\nleadership: {lease: postgres}\n",
                "leadership: lease: postgres needs database.url to be postgres://",
            ),
            (
                "redis: {url: \"redis://h\"}\nleadership: {leaseTtl: 0.5}\n",
                "leadership.leaseTtl: must be a number of seconds ≥ 1 (got 0.5) at line 2",
            ),
            (
                "redis: {url: \"redis://h\"}\nleadership: {lease: etcd}\n",
                "unknown variant `etcd`",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(wanted), "{text:?}: {e}");
        }
    }

    #[test]
    fn passwords_never_appear_in_errors() {
        for text in [
            "database: {url: \"postgresql+asyncpg://aa:secret@db:5432/x\"}\n",
            "redis: {url: \"http://:secret@host:6380\"}\n",
            "redis: {url: [\"redis://a:1\", \"tcp://:secret@host:6380\"], cluster: true}\n",
            "federate: {id: p, redisUrl: \"http://u:secret@host\"}\n",
            "sources: {onebot: {connections: [{url: \"http://u:secret@h\"}]}}\n",
        ] {
            let e = parse(text).unwrap_err();
            assert!(!e.contains("secret"), "{e}");
            assert!(e.contains("***"), "{e}");
        }
        let c = parse(
            "database: {url: \"postgres://aa:secret@db/x\"}\napi: {token: secret}\nsources: {onebot: {accessToken: secret}}\n",
        )
        .unwrap();
        assert!(!format!("{c:?}").contains("secret"), "{c:?}");
    }

    #[test]
    fn relative_paths_follow_the_config_file() {
        let c =
            parse("database:\n  url: sqlite://state/x.db\nsources:\n  file: fleet.yaml\n").unwrap();
        assert_eq!(
            c.database.url,
            DatabaseUrl::Sqlite("/etc/aa/state/x.db".into())
        );
        assert_eq!(c.sources.file, Some("/etc/aa/fleet.yaml".into()));
        let c = parse("database:\n  url: sqlite:///var/lib/aa.db\n").unwrap();
        assert_eq!(c.database.url, DatabaseUrl::Sqlite("/var/lib/aa.db".into()));
        let c = parse("database:\n  url: postgres://u@localhost/aa\n").unwrap();
        assert!(
            matches!(c.database.url, DatabaseUrl::Postgres(u) if u.expose() == "postgres://u@localhost/aa")
        );
    }

    #[test]
    fn federate_section() {
        let c = parse("federate:\n  id: pool-1\n  commandPermissionLevels: {help: SuperUser}\n")
            .unwrap();
        let f = c.federate.unwrap();
        assert_eq!(f.id, "pool-1");
        assert_eq!(f.ingress, federate::Tristate::Auto);
        assert_eq!(f.owner_rotate_sec, 7200);
        assert!(f.respect_assignment && f.control_plane && !f.prefer_local_owner);
        assert_eq!((f.heartbeat_ttl.get(), f.claim_ttl), (180, None));
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
