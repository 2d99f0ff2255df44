//! The Redis connection, shared by every Redis user of the service.
//!
//! Redis is optional and may be down: the handle connects in the background and keeps
//! retrying, and the connection manager reconnects after an outage, so callers simply get no
//! connection (or an error) while Redis is away and fall back or retry. Only the first
//! attempt is waited for (at most [`CONNECT_TIMEOUT`]): a claim made in the service's first
//! moments would otherwise be decided from a file that the other instances and Pallas-Bot
//! peers, all claiming in Redis, never see, and two bots would answer the same message.
//! Timeouts follow Pallas-Bot's client (1 s to connect, 2 s per command).
//!
//! What `redis.url` names may be one server, a Redis Cluster (the cluster client follows the
//! slots and their failovers by itself) or a master watched by Sentinel (asked for again
//! whenever the server stops answering as a master). Callers see one [`Conn`] either way;
//! only the key names differ ([`Settings::key_prefix`]), because a script's keys must share a
//! cluster slot.

use std::path::{Path, PathBuf};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::backoff::{Backoff, Jitter};
use crate::secret::SecretUrl;
use crate::yaml::NonEmpty;

/// `redis:`: the service's Redis (publication, claims, gates, presence registry).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(try_from = "RawSettings")]
pub struct Settings {
    /// One node (`single`), the cluster's seed nodes (`cluster`), or the sentinels
    /// (`sentinel`); never empty.
    pub urls: Vec<SecretUrl>,
    pub topology: Topology,
    /// Prefix of the assignment publication keys, as configured.
    pub prefix: NonEmpty,
    pub tls: Option<TlsFiles>,
}

/// How the Redis named by `redis.url` is laid out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Topology {
    /// One server (or a proxy in front of several).
    Single,
    /// Redis Cluster: slots spread over masters; the client follows `MOVED`/`ASK` and
    /// failovers.
    Cluster,
    /// A master watched by Sentinel: the URLs name the sentinels, which name the master of
    /// the set `master_name` now and after every failover.
    Sentinel { master_name: NonEmpty },
}

/// `redis.tls`: the files of a `rediss://` connection, read at connect (relative to the config
/// file's directory). Without `caFile` the system's roots are trusted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsFiles {
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key, for servers that ask for one (both or neither).
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

/// `redis:` as written; checked into [`Settings`].
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSettings {
    url: Urls,
    #[serde(default)]
    cluster: bool,
    #[serde(default)]
    master_name: Option<NonEmpty>,
    #[serde(default = "default_prefix")]
    prefix: NonEmpty,
    #[serde(default)]
    tls: Option<TlsFiles>,
}

/// One URL or a list of them, each checked where it is written.
struct Urls(Vec<SecretUrl>);

impl<'de> serde::Deserialize<'de> for Urls {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Urls, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Urls;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a redis:// URL or a list of them")
            }
            fn visit_str<E: serde::de::Error>(self, url: &str) -> Result<Urls, E> {
                checked_url(url)
                    .map(|url| Urls(vec![url]))
                    .map_err(E::custom)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Urls, A::Error> {
                #[derive(serde::Deserialize)]
                struct One(#[serde(deserialize_with = "redis_url")] SecretUrl);
                let mut urls = Vec::new();
                while let Some(One(url)) = seq.next_element()? {
                    urls.push(url);
                }
                Ok(Urls(urls))
            }
        }
        d.deserialize_any(V)
    }
}

impl TryFrom<RawSettings> for Settings {
    type Error = String;

    fn try_from(raw: RawSettings) -> Result<Settings, String> {
        let urls = raw.url.0;
        let topology = match (raw.cluster, raw.master_name) {
            (true, Some(_)) => {
                return Err("cluster: true and masterName (Sentinel) exclude each other".into());
            }
            (true, None) => Topology::Cluster,
            (false, Some(master_name)) => Topology::Sentinel { master_name },
            (false, None) => Topology::Single,
        };
        if urls.is_empty() {
            return Err("url: name at least one node".into());
        }
        if topology == Topology::Single && urls.len() > 1 {
            return Err(format!(
                "url: {} URLs name several nodes: set cluster: true (their cluster's seed \
                 nodes) or masterName (the sentinels of a master set)",
                urls.len()
            ));
        }
        if let Some(tls) = &raw.tls {
            if tls.cert_file.is_some() != tls.key_file.is_some() {
                return Err("tls: certFile and keyFile go together".into());
            }
            if let Some(plain) = urls.iter().find(|u| !u.expose().starts_with("rediss://")) {
                return Err(format!(
                    "tls: is set but {plain} is not rediss:// (TLS URLs start with rediss://)"
                ));
            }
        }
        Ok(Settings {
            urls,
            topology,
            prefix: raw.prefix,
            tls: raw.tls,
        })
    }
}

impl Settings {
    /// The prefix of our own keys. On a cluster it is a hash tag (`{auto-assign}`), so that
    /// every key of one script (version, hashes, term; lease and term) lives in one slot, as
    /// scripts on a cluster require; a prefix that already holds a `{…}` tag is kept. On a
    /// single Redis or behind Sentinel the plain names stay, for the consumers that read them.
    pub fn key_prefix(&self) -> String {
        let prefix = &self.prefix.0;
        let tagged = prefix
            .find('{')
            .is_some_and(|open| prefix[open + 1..].find('}').is_some_and(|len| len > 0));
        if self.topology == Topology::Cluster && !tagged {
            format!("{{{prefix}}}")
        } else {
            prefix.clone()
        }
    }

    /// The first URL: the one node of a single Redis, the one the other users of the same
    /// Redis (federate) compare with.
    pub fn first_url(&self) -> &SecretUrl {
        &self.urls[0]
    }

    /// Resolves the TLS files against the config file's directory.
    pub fn resolve(&mut self, base: &Path) {
        if let Some(tls) = &mut self.tls {
            for file in [&mut tls.ca_file, &mut tls.cert_file, &mut tls.key_file]
                .into_iter()
                .flatten()
            {
                *file = base.join(&*file);
            }
        }
    }
}

fn default_prefix() -> NonEmpty {
    NonEmpty("auto-assign".to_owned())
}

/// `redis://[user:password@]host:port[/db]`, `rediss://…` (TLS) or `unix://`, with any password
/// kept out of messages.
pub fn redis_url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SecretUrl, D::Error> {
    crate::yaml::checked_str(d, checked_url)
}

fn checked_url(url: &str) -> Result<SecretUrl, String> {
    if ["redis://", "rediss://", "unix://"]
        .iter()
        .any(|scheme| url.starts_with(scheme))
    {
        Ok(SecretUrl::new(url))
    } else {
        Err(format!(
            "expected redis://host:port[/db] or rediss://host:port[/db], got {:?}",
            crate::secret::redact_url(url)
        ))
    }
}

/// A connection to whatever `redis.url` names: commands, pipelines and scripts go through it
/// alike (`ConnectionLike`). On a cluster each goes to the master of its key's slot.
#[derive(Clone)]
pub enum Conn {
    /// One server, or the master Sentinel named; reconnects by itself.
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// Every key matching `pattern` (`SCAN`, never `KEYS`: it does not block the server). On a
    /// cluster every master is scanned, since each holds its own slots' keys.
    pub async fn scan_match(&mut self, pattern: &str) -> redis::RedisResult<Vec<Vec<u8>>> {
        let mut keys = Vec::new();
        match self {
            Conn::Single(c) => {
                scan_node(c, pattern, &mut keys, |c, cmd| {
                    Box::pin(async move { cmd.query_async(c).await })
                })
                .await?
            }
            Conn::Cluster(c) => {
                use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
                let slots: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(c).await?;
                for (host, port) in cluster_masters(slots)? {
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: host.clone(),
                        port,
                    });
                    scan_node(c, pattern, &mut keys, |c, cmd| {
                        let route = route.clone();
                        Box::pin(async move {
                            let value = c.route_command(cmd, route).await?;
                            Ok(redis::from_redis_value(value)?)
                        })
                    })
                    .await?;
                }
            }
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }
}

type ScanPage<'a> = RedisFuture<'a, (u64, Vec<Vec<u8>>)>;

/// One node's `SCAN … MATCH pattern`, page by page, sent by `send`.
async fn scan_node<C>(
    conn: &mut C,
    pattern: &str,
    keys: &mut Vec<Vec<u8>>,
    send: impl for<'a> Fn(&'a mut C, Cmd) -> ScanPage<'a>,
) -> redis::RedisResult<()> {
    let mut cursor: u64 = 0;
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(100);
        let (next, batch) = send(conn, cmd).await?;
        keys.extend(batch);
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// The masters' addresses in a `CLUSTER SLOTS` reply: `[[start, end, [host, port, …], …], …]`.
fn cluster_masters(slots: Value) -> redis::RedisResult<Vec<(String, u16)>> {
    let ranges: Vec<Vec<Value>> = redis::from_redis_value(slots)?;
    let mut masters = Vec::new();
    for range in ranges {
        let Some(master) = range.into_iter().nth(2) else {
            continue;
        };
        let node: Vec<Value> = redis::from_redis_value(master)?;
        let mut node = node.into_iter();
        let (Some(host), Some(port)) = (node.next(), node.next()) else {
            continue;
        };
        let address = (
            redis::from_redis_value::<String>(host)?,
            redis::from_redis_value::<u16>(port)?,
        );
        if !masters.contains(&address) {
            masters.push(address);
        }
    }
    Ok(masters)
}

#[derive(Clone)]
pub struct Redis {
    target: std::sync::Arc<Target>,
    link: tokio::sync::watch::Receiver<Link>,
    /// Bumped at the first connection and whenever Redis answers again after a failed check:
    /// whoever keeps state in Redis (heartbeats, the presence registry, the publication)
    /// writes it again at once, since a restarted Redis may have come back empty.
    reachable: tokio::sync::watch::Receiver<u64>,
}

/// What to connect to, with the TLS files read once.
struct Target {
    urls: Vec<SecretUrl>,
    topology: Topology,
    certs: Option<redis::TlsCertificates>,
}

/// The connection, or why there is none.
enum Link {
    /// The first attempt to connect is under way.
    FirstAttempt,
    /// Attempts failed so far; more are made in the background.
    Unreached,
    /// Connected once; the connection reconnects by itself after an outage (and behind
    /// Sentinel is replaced when the master moves).
    Connected(Conn),
}

/// How long one attempt to connect may take (Pallas-Bot's client: 1 s).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one command may take (Pallas-Bot's client: 2 s).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Attempts to reach Redis at start-up: frequent, because they are cheap (a refused
/// connection fails at once) and everything waits for the first one.
const FIRST_CONNECT_RETRY: Duration = Duration::from_millis(50);
const MAX_CONNECT_RETRY: Duration = Duration::from_millis(250);
/// How often a connected Redis is checked (a PING), so an outage and its end are noticed
/// within this time rather than at the next write of some periodic task.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Why the Redis of the config cannot even be tried (the caller names the section).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{url}: {source}")]
    Url {
        /// Shown without its password.
        url: String,
        source: redis::RedisError,
    },
    #[error("tls: cannot read {}: {source}", path.display())]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl Target {
    fn new(settings: &Settings) -> Result<Target, SetupError> {
        // The redis client asks rustls for the process's provider rather than choosing one;
        // ring is the one this build has (installing it twice is harmless).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| SetupError::File {
                path: path.clone(),
                source,
            })
        };
        let certs = match &settings.tls {
            None => None,
            Some(tls) => Some(redis::TlsCertificates {
                root_cert: tls.ca_file.as_ref().map(read).transpose()?,
                client_tls: match (&tls.cert_file, &tls.key_file) {
                    (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                        client_cert: read(cert)?,
                        client_key: read(key)?,
                    }),
                    _ => None,
                },
            }),
        };
        let target = Target {
            urls: settings.urls.clone(),
            topology: settings.topology.clone(),
            certs,
        };
        for url in &target.urls {
            target.client(url)?;
        }
        Ok(target)
    }

    /// The URLs for messages, without passwords.
    fn shown(&self) -> String {
        let urls: Vec<String> = self.urls.iter().map(SecretUrl::shown).collect();
        urls.join(", ")
    }

    /// A client of one node.
    fn client(&self, url: &SecretUrl) -> Result<redis::Client, SetupError> {
        let client = match &self.certs {
            Some(certs) => redis::Client::build_with_tls(url.expose(), certs.clone()),
            None => redis::Client::open(url.expose()),
        };
        client.map_err(|source| SetupError::Url {
            url: url.shown(),
            source,
        })
    }

    /// Connects to what the settings name.
    async fn open(&self) -> redis::RedisResult<Conn> {
        match &self.topology {
            Topology::Single => {
                let client = self.client(&self.urls[0]).map_err(into_redis)?;
                Ok(Conn::Single(managed(client).await?))
            }
            Topology::Cluster => {
                let mut builder =
                    redis::cluster::ClusterClientBuilder::new(self.urls.iter().map(|u| u.expose()))
                        .connection_timeout(CONNECT_TIMEOUT)
                        .response_timeout(RESPONSE_TIMEOUT);
                if let Some(certs) = &self.certs {
                    builder = builder.certs(certs.clone());
                }
                let client = builder.build()?;
                Ok(Conn::Cluster(client.get_async_connection().await?))
            }
            Topology::Sentinel { .. } => Ok(Conn::Single(managed(self.master().await?).await?)),
        }
    }

    /// Behind Sentinel: a client of the master the sentinels name now (checked with `ROLE`).
    /// The URLs' user, password, database and TLS are the master's.
    async fn master(&self) -> redis::RedisResult<redis::Client> {
        use redis::IntoConnectionInfo;
        use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
        let Topology::Sentinel { master_name } = &self.topology else {
            unreachable!("master() is asked only behind Sentinel")
        };
        let infos = self
            .urls
            .iter()
            .map(|u| u.expose().into_connection_info())
            .collect::<redis::RedisResult<Vec<_>>>()?;
        let first = infos[0].redis_settings();
        let mut builder = SentinelClientBuilder::new(
            infos.iter().map(|i| i.addr().clone()),
            &master_name.0,
            SentinelServerType::Master,
        )?
        .set_client_to_redis_db(first.db());
        if let Some(user) = first.username() {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = first.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        if matches!(infos[0].addr(), redis::ConnectionAddr::TcpTls { .. }) {
            builder = builder
                .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(redis::TlsMode::Secure);
            if let Some(certs) = &self.certs {
                builder = builder
                    .set_client_to_redis_certificates(certs.clone())
                    .set_client_to_sentinel_certificates(certs.clone());
            }
        }
        let mut sentinel = builder.build()?;
        tokio::time::timeout(CONNECT_TIMEOUT * 2, sentinel.async_get_client())
            .await
            .map_err(|_| {
                redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "no sentinel named the master within 2 s",
                ))
            })?
    }
}

fn into_redis(e: SetupError) -> redis::RedisError {
    match e {
        SetupError::Url { source, .. } => source,
        SetupError::File { source, .. } => source.into(),
    }
}

/// A connection manager with Pallas-Bot's timeouts.
async fn managed(client: redis::Client) -> redis::RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_secs(2));
    ConnectionManager::new_with_config(client, config).await
}

impl Redis {
    /// Reads the TLS files and starts connecting in the background.
    pub fn connect(settings: &Settings, shutdown: CancellationToken) -> Result<Redis, SetupError> {
        let target = std::sync::Arc::new(Target::new(settings)?);
        let (reachable_tx, reachable) = tokio::sync::watch::channel(0);
        let (link_tx, link) = tokio::sync::watch::channel(Link::FirstAttempt);
        let redis = Redis {
            target: target.clone(),
            link,
            reachable,
        };
        tokio::spawn(async move {
            let mut backoff = Backoff::new(FIRST_CONNECT_RETRY, MAX_CONNECT_RETRY, Jitter::None);
            let mut reported = false;
            loop {
                let attempt = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    attempt = target.open() => attempt,
                };
                match attempt {
                    Ok(conn) => {
                        info!("redis: connected");
                        backoff =
                            Backoff::new(FIRST_CONNECT_RETRY, MAX_CONNECT_RETRY, Jitter::None);
                        reported = false;
                        link_tx.send_replace(Link::Connected(conn.clone()));
                        reachable_tx.send_modify(|n| *n += 1);
                        match watch(conn, &target.topology, &reachable_tx, &shutdown).await {
                            Watched::Shutdown => return,
                            // The old connection stays in place (its calls fail) until the
                            // new master is reached.
                            Watched::MasterLost => {
                                warn!("redis: the master is gone; asking the sentinels")
                            }
                        }
                    }
                    Err(e) => {
                        if !matches!(*link_tx.borrow(), Link::Connected(_)) {
                            link_tx.send_replace(Link::Unreached);
                        }
                        if !reported {
                            // The error may not say where (a certificate refused, a password
                            // refused): the hosts are named, their passwords never.
                            warn!(
                                "redis: cannot connect to {} ({e}); retrying in the background",
                                target.shown()
                            );
                            reported = true;
                        }
                        tokio::select! {
                            _ = shutdown.cancelled() => return,
                            _ = tokio::time::sleep(backoff.fail()) => {}
                        }
                    }
                }
            }
        });
        Ok(redis)
    }

    /// Checks what [`Redis::connect`] reads at start (the URLs, the TLS files), connecting to
    /// nothing.
    pub fn check(settings: &Settings) -> Result<(), SetupError> {
        Target::new(settings).map(|_| ())
    }

    /// A Redis of one URL (a federate pool's own Redis).
    pub fn connect_url(url: &str, shutdown: CancellationToken) -> Result<Redis, SetupError> {
        let settings = Settings {
            urls: vec![SecretUrl::new(url)],
            topology: Topology::Single,
            prefix: default_prefix(),
            tls: None,
        };
        Redis::connect(&settings, shutdown)
    }

    /// A pub/sub connection to a node that receives every `PUBLISH`: the one node, a
    /// cluster's first reachable seed node (a cluster forwards messages to all its nodes), or
    /// the master Sentinel names now.
    pub async fn subscriber(&self) -> redis::RedisResult<redis::aio::PubSub> {
        let target = &self.target;
        match &target.topology {
            Topology::Single => {
                let client = target.client(&target.urls[0]).map_err(into_redis)?;
                client.get_async_pubsub().await
            }
            Topology::Cluster => {
                let mut last = None;
                for url in &target.urls {
                    let client = target.client(url).map_err(into_redis)?;
                    match tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub()).await {
                        Ok(Ok(pubsub)) => return Ok(pubsub),
                        Ok(Err(e)) => last = Some(e),
                        Err(_) => {}
                    }
                }
                Err(last.unwrap_or_else(not_connected))
            }
            Topology::Sentinel { .. } => target.master().await?.get_async_pubsub().await,
        }
    }

    /// A connection, if Redis has been reached (it may still fail while Redis is down). While
    /// the first attempt to connect is under way, waits for its end, at most
    /// [`CONNECT_TIMEOUT`]; after it, never waits.
    pub async fn conn(&self) -> Option<Conn> {
        if matches!(*self.link.borrow(), Link::FirstAttempt) {
            let mut link = self.link.clone();
            // A closed channel (the background task ended at shutdown) ends the wait as well.
            let _ = tokio::time::timeout(
                CONNECT_TIMEOUT,
                link.wait_for(|link| !matches!(link, Link::FirstAttempt)),
            )
            .await;
        }
        self.conn_now()
    }

    /// A connection, if Redis has been reached; never waits (health checks).
    pub fn conn_now(&self) -> Option<Conn> {
        match &*self.link.borrow() {
            Link::Connected(conn) => Some(conn.clone()),
            Link::FirstAttempt | Link::Unreached => None,
        }
    }

    /// Changes when Redis becomes reachable: at the first connection and after every outage.
    pub fn reachable(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reachable.clone()
    }

    /// `SET key value NX EX ttl`, the claim primitive: `Ok(None)` when this call set it, else
    /// `Ok(Some(holder))` (empty when the key vanished in between).
    pub async fn set_nx_or_get(
        &self,
        key: &str,
        value: &str,
        ttl: u64,
    ) -> redis::RedisResult<Option<String>> {
        let mut conn = self.conn().await.ok_or_else(not_connected)?;
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("NX")
            .arg("EX")
            .arg(ttl)
            .query_async(&mut conn)
            .await?;
        if set.is_some() {
            return Ok(None);
        }
        let holder: Option<String> = redis::cmd("GET").arg(key).query_async(&mut conn).await?;
        Ok(Some(holder.unwrap_or_default()))
    }
}

/// How a watch ended.
enum Watched {
    Shutdown,
    /// Behind Sentinel: the server no longer answers as a master.
    MasterLost,
}

/// Checks a connected Redis every [`CHECK_EVERY`] until `shutdown` (a PING; behind Sentinel
/// a `ROLE`, since a failed-over master that comes back is a replica and refuses writes);
/// bumps `reachable` when it answers again after failing. A restart breaks the connection, so
/// it always shows as at least one failed check, however fast the new server is up.
async fn watch(
    mut conn: Conn,
    topology: &Topology,
    reachable: &tokio::sync::watch::Sender<u64>,
    shutdown: &CancellationToken,
) -> Watched {
    let behind_sentinel = matches!(topology, Topology::Sentinel { .. });
    let mut failing = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Watched::Shutdown,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
        let check = async {
            if behind_sentinel {
                let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut conn).await?;
                match role
                    .into_iter()
                    .next()
                    .map(redis::from_redis_value::<String>)
                {
                    Some(Ok(role)) if role == "master" => Ok(()),
                    _ => Err(redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "no longer a master",
                    ))),
                }
            } else {
                redis::cmd("PING")
                    .query_async::<String>(&mut conn)
                    .await
                    .map(drop)
            }
        };
        match tokio::time::timeout(Duration::from_secs(1), check).await {
            Ok(Ok(())) if failing => {
                failing = false;
                info!("redis: reachable again");
                reachable.send_modify(|n| *n += 1);
            }
            Ok(Ok(())) => {}
            failed => {
                if !failing {
                    failing = true;
                    match failed {
                        Ok(Err(e)) => warn!("redis: unreachable ({e})"),
                        _ => warn!("redis: unreachable (no answer within 1 s)"),
                    }
                }
                if behind_sentinel {
                    return Watched::MasterLost;
                }
            }
        }
    }
}

/// The error of a call made while Redis has not been reached.
pub fn not_connected() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, "not connected"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Settings, String> {
        crate::yaml::from_slice::<Settings>(Path::new("c.yaml"), yaml.as_bytes())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn one_url_is_a_single_redis_with_plain_key_names() {
        let s = parse("url: redis://u:pw@127.0.0.1:6379/2").unwrap();
        assert_eq!(s.topology, Topology::Single);
        assert_eq!(s.key_prefix(), "auto-assign");
    }

    #[test]
    fn a_cluster_tags_the_prefix_unless_it_has_a_tag() {
        let s = parse("url: [redis://a:1, redis://b:2]\ncluster: true").unwrap();
        assert_eq!((s.topology.clone(), s.urls.len()), (Topology::Cluster, 2));
        assert_eq!(s.key_prefix(), "{auto-assign}");
        let s = parse("url: redis://a:1\ncluster: true\nprefix: 'aa:{fleet}'").unwrap();
        assert_eq!(s.key_prefix(), "aa:{fleet}");
        // `{}` is no hash tag: Redis hashes the whole name.
        let s = parse("url: redis://a:1\ncluster: true\nprefix: 'aa{}'").unwrap();
        assert_eq!(s.key_prefix(), "{aa{}}");
    }

    #[test]
    fn a_master_name_means_sentinels() {
        let s = parse("url: [redis://s1:26379, redis://s2:26379]\nmasterName: mymaster").unwrap();
        assert_eq!(
            s.topology,
            Topology::Sentinel {
                master_name: NonEmpty("mymaster".into())
            }
        );
        assert_eq!(s.key_prefix(), "auto-assign");
    }

    #[test]
    fn an_unreadable_tls_file_is_named() {
        let s = parse("url: rediss://u:hunter2@a:1\ntls: {caFile: /nonexistent/ca.pem}").unwrap();
        let e = Target::new(&s).err().unwrap().to_string();
        assert!(
            e.starts_with("tls: cannot read /nonexistent/ca.pem: "),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn bad_settings_are_named_and_passwords_kept_out() {
        let e = parse("url: [redis://a:1, redis://b:2]").unwrap_err();
        assert!(e.contains("set cluster: true"), "{e}");
        let e = parse("url: [redis://a:1, 'http://u:hunter2@b:2']\ncluster: true").unwrap_err();
        assert!(
            e.contains("expected redis://") && e.contains("line 1"),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
        let e = parse("url: redis://a:1\ntls: {caFile: ca.pem}").unwrap_err();
        assert!(e.contains("not rediss://"), "{e}");
        let e = parse("url: rediss://a:1\ntls: {certFile: c.pem}").unwrap_err();
        assert!(e.contains("certFile and keyFile go together"), "{e}");
        let e = parse("url: redis://a:1\ncluster: true\nmasterName: m").unwrap_err();
        assert!(e.contains("exclude each other"), "{e}");
        let e = parse("url: []").unwrap_err();
        assert!(e.contains("at least one"), "{e}");
    }
}
