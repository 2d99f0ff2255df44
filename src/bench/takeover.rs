//! `auto-assign bench --takeover`: three `auto-assign serve` processes under leadership on one
//! throwaway Redis and one SQLite file, with a file-source fleet. The leader is killed with
//! SIGKILL again and again (and restarted as a follower), and the time from the kill to
//! another instance reporting itself leader is measured; then the same for clean stops
//! (SIGTERM), which hand the lease over at once.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::testkit::procs::{TermOnDrop, free_port, redis_server};

/// The lease TTL the instances run with (the default).
const TTL_SECS: u64 = 10;

pub fn run(kills: usize) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("auto-assign-takeover-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = bench(&dir, kills);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

struct Instance {
    port: u16,
    config: std::path::PathBuf,
    child: Option<TermOnDrop>,
}

fn bench(dir: &Path, kills: usize) -> anyhow::Result<()> {
    let redis_port = free_port()?;
    let _redis = TermOnDrop(
        redis_server(redis_port)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("redis-server: {e} (install redis-server)"))?,
    );
    let fleet: String = (0..20)
        .map(|b| {
            let channels: Vec<String> = (0..500)
                .map(|c| (100_000 + (b * 37 + c) % 2000).to_string())
                .collect();
            format!(
                "  - id: {}\n    channels: [{}]\n",
                1001 + b,
                channels.join(", ")
            )
        })
        .collect();
    std::fs::write(dir.join("fleet.yaml"), format!("bots:\n{fleet}"))?;
    let mut instances = Vec::new();
    for name in ["a", "b", "c"] {
        let port = free_port()?;
        let config = dir.join(format!("{name}.yaml"));
        std::fs::write(
            &config,
            format!(
                "balanceInterval: 3600
database: {{url: \"sqlite://state.db\"}}
redis: {{url: \"redis://127.0.0.1:{redis_port}\"}}
sources: {{file: fleet.yaml}}
api: {{bind: \"127.0.0.1:{port}\"}}
leadership: {{instance: {name}, leaseTtl: {TTL_SECS}}}
logFormat: text
"
            ),
        )?;
        let mut instance = Instance {
            port,
            config,
            child: None,
        };
        launch(&mut instance)?;
        instances.push(instance);
    }
    println!(
        "takeover: 3 instances (lease {TTL_SECS} s), one Redis, one SQLite file, 20 bots × 500 channels"
    );
    let mut leader = wait_leader(&instances, None, Duration::from_secs(60))?;
    for (signal, label, rounds) in [("KILL", "SIGKILL", kills), ("TERM", "clean stop", kills)] {
        let mut times = Vec::with_capacity(rounds);
        for round in 0..rounds {
            // At different points of the leader's renewal cycle (every third of the TTL).
            std::thread::sleep(Duration::from_millis(
                (round as u64 * 1_170) % (TTL_SECS * 1_000 / 3),
            ));
            let mut child = instances[leader.0]
                .child
                .take()
                .expect("the leader is running");
            let pid = child.0.id().to_string();
            let stopped = Instant::now();
            Command::new("kill")
                .args([&format!("-{signal}"), &pid])
                .status()?;
            let next = wait_leader(&instances, Some(leader), Duration::from_secs(TTL_SECS * 3))?;
            times.push(stopped.elapsed());
            let _ = child.0.wait();
            std::mem::forget(child);
            launch(&mut instances[leader.0])?;
            leader = next;
        }
        times.sort();
        println!(
            "  {label:<10} → new leader, {rounds} times: min {:.2} s, median {:.2} s, max {:.2} s",
            times[0].as_secs_f64(),
            times[times.len() / 2].as_secs_f64(),
            times[times.len() - 1].as_secs_f64()
        );
    }
    Ok(())
}

fn launch(instance: &mut Instance) -> anyhow::Result<()> {
    let child: Child = Command::new(std::env::current_exe()?)
        .arg("serve")
        .arg("--config")
        .arg(&instance.config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    instance.child = Some(TermOnDrop(child));
    Ok(())
}

/// Polls every instance's `/healthz` until one other than `previous` leads in a newer term;
/// returns (instance, term).
fn wait_leader(
    instances: &[Instance],
    previous: Option<(usize, i64)>,
    limit: Duration,
) -> anyhow::Result<(usize, i64)> {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_millis(200)))
            .build(),
    );
    let until = Instant::now() + limit;
    while Instant::now() < until {
        for (i, instance) in instances.iter().enumerate() {
            if instance.child.is_none() {
                continue;
            }
            let url = format!("http://127.0.0.1:{}/healthz", instance.port);
            let Ok(mut resp) = agent.get(&url).call() else {
                continue;
            };
            let Ok(health) = resp.body_mut().read_json::<serde_json::Value>() else {
                continue;
            };
            let l = &health["leadership"];
            let term = l["term"].as_i64().unwrap_or(0);
            if l["role"] == "leader" && previous.is_none_or(|(_, t)| term > t) {
                return Ok((i, term));
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    anyhow::bail!("no new leader within {limit:?}")
}
