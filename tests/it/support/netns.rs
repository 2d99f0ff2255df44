//! Hosts in network namespaces, for real partitions: each host is a namespace with one veth
//! address on a bridge the tests (in the root namespace) also sit on, so they reach every host
//! and every host reaches every other. A partition drops packets silently between two hosts,
//! both ways (nftables in each host's namespace): connections hang and time out as across a
//! real network, instead of being refused at once as when a local process dies.
//!
//! Needs root (CI runs the suite as root), `ip` (iproute2) and `nft` (nftables; scripts/test.sh
//! installs it). The addresses are private to this machine: 10.(200 + (pid + n) % 50).(pid / 50
//! % 250).0/24 for the process's n-th net, so suites started side by side do not share one.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One bridge and its hosts; everything is removed when dropped.
pub struct Net {
    id: String,
    subnet: String,
    bridge: String,
    hosts: Vec<Host>,
}

/// A namespace with one address on the bridge.
#[derive(Clone, Debug)]
pub struct Host {
    pub ns: String,
    pub ip: String,
}

/// The nftables table each host's cuts live in.
const TABLE: &str = "partition";

fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| {
            panic!("{args:?}: {e} (scripts/test.sh installs iproute2 and nftables)")
        });
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Net {
    pub fn new() -> Net {
        // Each Net of this process its own bridge and subnet.
        static NETS: AtomicUsize = AtomicUsize::new(0);
        let pid = std::process::id() as usize;
        let n = NETS.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}{n}", pid % 1_000_000);
        let subnet = format!("10.{}.{}", 200 + (pid + n) % 50, (pid / 50) % 250);
        let bridge = format!("aab{id}");
        run(&["ip", "link", "add", &bridge, "type", "bridge"]);
        let net = Net {
            id,
            subnet,
            bridge,
            hosts: Vec::new(),
        };
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{}.1/24", net.subnet),
            "dev",
            &net.bridge,
        ]);
        run(&["ip", "link", "set", &net.bridge, "up"]);
        net
    }

    /// A new host on the bridge, with an empty partition table.
    pub fn host(&mut self, name: &str) -> Host {
        let n = self.hosts.len();
        let host = Host {
            ns: format!("aa{}-{name}", self.id),
            ip: format!("{}.{}", self.subnet, n + 2),
        };
        // Registered first: a half-made host is removed too.
        self.hosts.push(host.clone());
        let (outside, inside) = (format!("aav{}h{n}", self.id), "eth0".to_owned());
        run(&["ip", "netns", "add", &host.ns]);
        run(&[
            "ip", "link", "add", &outside, "type", "veth", "peer", "name", &inside, "netns",
            &host.ns,
        ]);
        run(&["ip", "link", "set", &outside, "master", &self.bridge, "up"]);
        let ns = |args: &[&str]| {
            let mut all = vec!["ip", "netns", "exec", &host.ns];
            all.extend_from_slice(args);
            run(&all);
        };
        ns(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", host.ip),
            "dev",
            &inside,
        ]);
        ns(&["ip", "link", "set", &inside, "up"]);
        ns(&["ip", "link", "set", "lo", "up"]);
        ns(&["nft", "add", "table", "inet", TABLE]);
        for (chain, hook) in [("in", "input"), ("out", "output")] {
            ns(&[
                "nft",
                "add",
                "chain",
                "inet",
                TABLE,
                chain,
                &format!("{{ type filter hook {hook} priority 0; }}"),
            ]);
        }
        host
    }

    /// Drops every packet between `a` and `b`, both ways, silently.
    pub fn cut(&self, a: &Host, b: &Host) {
        for (from, to) in [(a, b), (b, a)] {
            for (chain, field) in [("out", "daddr"), ("in", "saddr")] {
                run(&[
                    "ip", "netns", "exec", &from.ns, "nft", "add", "rule", "inet", TABLE, chain,
                    "ip", field, &to.ip, "drop",
                ]);
            }
        }
    }

    /// Every cut healed.
    pub fn heal(&self) {
        for host in &self.hosts {
            for chain in ["in", "out"] {
                run(&[
                    "ip", "netns", "exec", &host.ns, "nft", "flush", "chain", "inet", TABLE, chain,
                ]);
            }
        }
    }
}

impl Host {
    /// `program args…` run inside this host's namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns, program]);
        cmd
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // A namespace goes once its last process has: the tests' own servers end with their
        // owners, which are dropped before the Net they were started in.
        for host in &self.hosts {
            let _ = Command::new("ip").args(["netns", "del", &host.ns]).output();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .output();
    }
}
