//! Child processes of the benchmarks, shared with the integration tests: free loopback ports,
//! a throwaway redis-server, and children stopped with SIGTERM when dropped.

use std::process::{Child, Command};

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A redis-server on 127.0.0.1:`port` that persists nothing (no RDB snapshots, no AOF).
pub fn redis_server(port: u16) -> Command {
    let mut command = Command::new("redis-server");
    command.args(redis_server_args(port));
    command
}

/// [`redis_server`]'s arguments, for servers that need more of them (clusters, replicas).
pub fn redis_server_args(port: u16) -> Vec<String> {
    ["--port", &port.to_string(), "--bind", "127.0.0.1"]
        .into_iter()
        .chain(["--save", "", "--appendonly", "no"])
        .map(str::to_owned)
        .collect()
}

/// A child sent SIGTERM (a clean stop: the service deletes its peer key, flushes its store)
/// and reaped when dropped, also on an early return.
pub struct TermOnDrop(pub Child);

impl Drop for TermOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}
