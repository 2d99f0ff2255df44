//! Real Redis on free loopback ports: one server ([`RedisServer`]), a Redis Cluster of three
//! masters with one replica each, and a master with a replica watched by three sentinels. Every
//! process is a real `redis-server` (sentinels are `redis-server --sentinel`), killed when
//! dropped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{TempDir, eventually, free_port, installed};

/// One `redis-server` process.
pub struct Node {
    pub port: u16,
    child: Option<Child>,
}

/// How many free ports a server is tried on before the test gives up.
const PORT_TRIES: usize = 5;

impl Node {
    /// `redis-server args(port)…` on a free port, once it answers there. A free port comes
    /// from the kernel and is let go before the server binds it, so a test running beside
    /// this one may take it first (its server would answer here, or this one exit): the
    /// server is ours only when its own process id answers on the port, else it is started
    /// again on another.
    pub fn start(args: impl Fn(u16) -> Vec<String>) -> Node {
        for _ in 0..PORT_TRIES {
            let port = free_port();
            if let Some(node) = Node::try_spawn(port, &args(port)) {
                return node;
            }
        }
        panic!("redis-server: {PORT_TRIES} free ports were taken by others before it listened");
    }

    /// `redis-server args…` once its process answers on `port`; `None` when the port turned
    /// out to be another's.
    fn try_spawn(port: u16, args: &[String]) -> Option<Node> {
        let mut node = Node::launch(port, args);
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let child = node.child.as_mut().expect("just spawned");
            if child.try_wait().is_ok_and(|status| status.is_some()) {
                node.child = None;
                return None; // it could not bind the port
            }
            match answering_pid(port) {
                Some(pid) if pid == child.id() => return Some(node),
                Some(_) => return None, // another test's server (ours is killed on drop)
                None => {}
            }
            assert!(Instant::now() < until, "redis-server :{port} not answering");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// `redis-server args…`, once something listens on `port` (a TLS server, which
    /// [`Node::start`] cannot ask for its process id in plain text).
    pub fn spawn(port: u16, args: &[String]) -> Node {
        let node = Node::launch(port, args);
        let until = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "redis-server :{port} not listening");
            std::thread::sleep(Duration::from_millis(5));
        }
        node
    }

    fn launch(port: u16, args: &[String]) -> Node {
        installed("redis-server", "redis-server");
        let child = Command::new("redis-server")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test.sh installs it)");
        Node {
            port,
            child: Some(child),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Ends it like a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// `redis-cli -p port args…` (`-c`: follow a cluster's redirections); its output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The process id of the Redis answering on loopback `port`, if one answers.
fn answering_pid(port: u16) -> Option<u32> {
    std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    cli(port, &["INFO", "server"])
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// `redis-cli -c -p port args…`, its trimmed output.
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-c", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn base_args(dir: &Path, port: u16) -> Vec<String> {
    let mut args = auto_assign::testkit::procs::redis_server_args(port);
    args.extend(
        [
            // A replica syncs at once (Redis waits 5 s for more replicas by default): a
            // replica that never synced refuses to take over from a dead master.
            "--repl-diskless-sync-delay",
            "0",
            "--dir",
            &dir.display().to_string(),
        ]
        .map(str::to_owned),
    );
    args
}

/// URLs as a YAML flow list, for a `redis.url`: `["redis://…", "redis://…"]`.
pub fn yaml_list(urls: &[String]) -> String {
    let quoted: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Three masters and three replicas, slots spread by `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<Node>,
    _dir: TempDir,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let dir = TempDir::new("redis-cluster");
        let mut nodes = Vec::new();
        for i in 0..6 {
            let node_dir = dir.join(&format!("n{i}"));
            std::fs::create_dir_all(&node_dir).unwrap();
            nodes.push(Node::start(|port| {
                let mut args = base_args(&node_dir, port);
                args.extend(
                    [
                        "--cluster-enabled",
                        "yes",
                        "--cluster-port",
                        &free_port().to_string(),
                        "--cluster-config-file",
                        "nodes.conf",
                        // A dead master is replaced by its replica within about two seconds.
                        "--cluster-node-timeout",
                        "1000",
                    ]
                    .map(str::to_owned),
                );
                args
            }));
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes, _dir: dir };
        cluster.wait_ok();
        cluster
    }

    /// Until every running node says the cluster is up and serves all slots, and every
    /// running replica has synced with its master (else it could not take over).
    pub fn wait_ok(&self) {
        eventually("the cluster is ok", Duration::from_secs(30), || {
            self.nodes.iter().filter(|n| n.is_running()).all(|n| {
                let replication = n.cli(&["INFO", "replication"]);
                n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok")
                    && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"))
            })
        });
    }

    /// The URLs of the seed nodes a client is given: every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// A `redis:` section naming three of the nodes as seeds.
    pub fn redis_section(&self) -> String {
        format!("{{url: {}, cluster: true}}", yaml_list(&self.urls()[..3]))
    }

    /// A running node, to ask.
    pub fn any(&self) -> &Node {
        self.nodes.iter().find(|n| n.is_running()).unwrap()
    }

    /// `redis-cli -c` on a running node (redirections followed).
    pub fn cli(&self, args: &[&str]) -> String {
        self.any().cli(args)
    }

    /// The index of the master that serves `key`'s slot now, as a running node sees it (none
    /// while a failed master's slots wait for its replica).
    pub fn master_of(&self, key: &str) -> Option<usize> {
        let slot: u16 = self.cli(&["CLUSTER", "KEYSLOT", key]).parse().unwrap();
        let nodes = self.cli(&["CLUSTER", "NODES"]);
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let serves = fields[8..].iter().any(|range| match range.split_once('-') {
                Some((a, b)) => {
                    (a.parse::<u16>().unwrap()..=b.parse::<u16>().unwrap()).contains(&slot)
                }
                None => range.parse::<u16>().ok() == Some(slot),
            });
            if serves {
                let port: u16 = fields[1].split(['@', ':']).nth(1).unwrap().parse().unwrap();
                return self.nodes.iter().position(|n| n.port == port);
            }
        }
        None
    }
}

/// A master, its replica, and three sentinels watching them as `mymaster`.
pub struct RedisSentinel {
    pub master: Node,
    pub replica: Node,
    pub sentinels: Vec<Node>,
    _dir: TempDir,
}

pub const MASTER_NAME: &str = "mymaster";

impl RedisSentinel {
    pub fn start() -> RedisSentinel {
        let dir = TempDir::new("redis-sentinel");
        let master = Node::start(|port| base_args(dir.path(), port));
        let master_port = master.port;
        let replica = Node::start(|port| {
            let mut args = base_args(dir.path(), port);
            args.extend(["--replicaof", "127.0.0.1", &master_port.to_string()].map(str::to_owned));
            args
        });
        let mut sentinels = Vec::new();
        for i in 0..3 {
            sentinels.push(Node::start(|port| {
                // A sentinel rewrites its config file: each has its own.
                let config = dir.write(
                    &format!("sentinel{i}.conf"),
                    &format!(
                        "port {port}\nbind 127.0.0.1\ndir {}\n\
                         sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                         sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                         sentinel failover-timeout {MASTER_NAME} 5000\n\
                         sentinel parallel-syncs {MASTER_NAME} 1\n",
                        dir.path().display()
                    ),
                );
                vec![config.display().to_string(), "--sentinel".to_owned()]
            }));
        }
        let topology = RedisSentinel {
            master,
            replica,
            sentinels,
            _dir: dir,
        };
        eventually("the replica synced", Duration::from_secs(30), || {
            topology
                .replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
        });
        eventually(
            "the sentinels know the replica and each other",
            Duration::from_secs(30),
            || {
                topology.sentinels.iter().all(|s| {
                    let info = s.cli(&["INFO", "sentinel"]);
                    info.contains("slaves=1") && info.contains("sentinels=3")
                })
            },
        );
        topology
    }

    /// A `redis:` section naming the sentinels and the master set.
    pub fn redis_section(&self) -> String {
        let sentinels: Vec<String> = self.sentinels.iter().map(Node::url).collect();
        format!(
            "{{url: {}, masterName: {MASTER_NAME}}}",
            yaml_list(&sentinels)
        )
    }

    /// The master's port as the sentinels name it now.
    pub fn master_port(&self) -> u16 {
        let reply = self.sentinels[0].cli(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME]);
        reply
            .lines()
            .nth(1)
            .unwrap_or("0")
            .trim()
            .parse()
            .unwrap_or(0)
    }
}

/// A throwaway redis-server on a free loopback port, no persistence.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    /// The address it listens on, and the host it runs on (a partition test's).
    address: String,
    host: Option<super::netns::Host>,
}

impl RedisServer {
    /// On a free loopback port that turned out to be its own (see [`Node::start`]).
    pub fn start() -> RedisServer {
        for _ in 0..PORT_TRIES {
            let mut server = RedisServer::on_port(free_port());
            server.restart();
            let pid = server.child.as_ref().map(Child::id);
            if pid.is_some() && answering_pid(server.port) == pid {
                return server;
            }
        }
        panic!("redis-server: {PORT_TRIES} free ports were taken by others before it listened");
    }

    /// On a partition test's host, listening on its address.
    pub fn start_on(host: &super::netns::Host) -> RedisServer {
        let mut server = RedisServer::on_port(free_port());
        server.address = host.ip.clone();
        server.host = Some(host.clone());
        server.restart();
        server
    }

    /// A server for `port`, not started yet ([`RedisServer::restart`] starts it).
    pub fn on_port(port: u16) -> RedisServer {
        RedisServer {
            child: None,
            port,
            address: "127.0.0.1".to_owned(),
            host: None,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://{}:{}", self.address, self.port)
    }

    /// Starts (again) on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        installed("redis-server", "redis-server");
        let mut command = match &self.host {
            None => auto_assign::testkit::procs::redis_server(self.port),
            Some(host) => {
                // The usual arguments; the later `--bind` replaces theirs.
                let mut c = host.command("redis-server");
                c.args(auto_assign::testkit::procs::redis_server_args(self.port))
                    .args(["--bind", &self.address, "--protected-mode", "no"]);
                c
            }
        };
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test.sh installs it)");
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect((self.address.as_str(), self.port)).is_err() {
            assert!(
                Instant::now() < until,
                "redis-server not accepting connections"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A command through redis-cli (simple, synchronous).
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", &self.address, "-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
