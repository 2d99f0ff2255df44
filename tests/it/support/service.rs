//! The service under test: started in this process ([`InProcess`], which tells its
//! addresses), or as the real binary ([`Service`], its log captured); and simulated OneBot
//! bots ([`Sims`]).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{eventually, get};

/// The service started in this process (`service::start`), on its own runtime: tests learn
/// its addresses from it, and its state from the API and the database, never from a log.
pub struct InProcess {
    rt: Option<tokio::runtime::Runtime>,
    running: Option<auto_assign::service::Running>,
    /// `http://127.0.0.1:port` of the API.
    pub api: String,
    /// The API's token, for the helpers below.
    token: Option<String>,
}

impl InProcess {
    /// Starts on the config file at `path` with the system clock; panics if it cannot.
    pub fn start(path: &Path) -> InProcess {
        Self::try_start(path, auto_assign::service::Clock::system())
            .unwrap_or_else(|e| panic!("the service did not start: {e}"))
    }

    pub fn try_start(
        path: &Path,
        clock: auto_assign::service::Clock,
    ) -> Result<InProcess, auto_assign::service::ServeError> {
        let config = auto_assign::config::Config::load(path)?;
        Self::try_start_config(config, clock)
    }

    /// Starts on a config built (or adjusted) by the test.
    pub fn start_config(
        config: auto_assign::config::Config,
        clock: auto_assign::service::Clock,
    ) -> InProcess {
        Self::try_start_config(config, clock)
            .unwrap_or_else(|e| panic!("the service did not start: {e}"))
    }

    fn try_start_config(
        config: auto_assign::config::Config,
        clock: auto_assign::service::Clock,
    ) -> Result<InProcess, auto_assign::service::ServeError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let running = rt.block_on(auto_assign::service::start(config, clock))?;
        let api = running
            .api_addr
            .map(|a| format!("http://{a}"))
            .unwrap_or_default();
        Ok(InProcess {
            rt: Some(rt),
            running: Some(running),
            api,
            token: None,
        })
    }

    /// A clean stop; `Err` when writes were lost.
    pub fn stop(mut self) -> Result<(), auto_assign::service::ServeError> {
        let running = self.running.take().expect("running");
        running.stop();
        self.rt.as_ref().unwrap().block_on(running.stopped())
    }

    /// Ends it like a crash (SIGKILL): every task dropped, no goodbye, no flush.
    pub fn kill(mut self) {
        self.running.take();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }

    /// The helpers below send `token` (the config's `api.token`).
    pub fn with_token(mut self, token: &str) -> InProcess {
        self.token = Some(token.to_owned());
        self
    }

    /// `GET /v1/status`.
    pub fn status(&self) -> serde_json::Value {
        get(&format!("{}/v1/status", self.api), self.token.as_deref()).1
    }

    /// The number of rebalances run so far.
    pub fn runs(&self) -> u64 {
        self.status()["last_run"]["number"].as_u64().unwrap_or(0)
    }

    /// Waits until at least `n` rebalances have run.
    pub fn wait_runs(&self, n: u64, timeout: Duration) {
        eventually(&format!("{n} rebalance(s)"), timeout, || self.runs() >= n);
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let (Some(running), Some(rt)) = (self.running.take(), self.rt.as_ref()) {
            running.stop();
            let _ = rt.block_on(running.stopped());
        }
    }
}

/// The `auto-assign` binary running `serve`, with its log captured.
pub struct Service {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    /// Reads stderr into `log`; it ends when the process has exited and the pipe is drained.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Service {
    pub fn start(config: &Path) -> Service {
        Service::start_with_env(config, &[])
    }

    /// [`Service::start`] with these environment variables set as well.
    pub fn start_with_env(config: &Path, vars: &[(&str, &str)]) -> Service {
        Service::spawn(
            Command::new(env!("CARGO_BIN_EXE_auto-assign")),
            config,
            vars,
        )
    }

    /// On a partition test's host (in its network namespace).
    pub fn start_on(host: &super::netns::Host, config: &Path) -> Service {
        Service::spawn(host.command(env!("CARGO_BIN_EXE_auto-assign")), config, &[])
    }

    fn spawn(mut command: Command, config: &Path, vars: &[(&str, &str)]) -> Service {
        let mut child = command
            .args(["serve", "--config"])
            .arg(config)
            .env("RUST_LOG", "info")
            .envs(vars.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start auto-assign serve");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Service {
            child,
            log,
            reader: Some(reader),
        }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The captured log, still readable after [`Service::stop`].
    pub fn log_handle(&self) -> Arc<Mutex<Vec<String>>> {
        self.log.clone()
    }

    pub fn count(&self, needle: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Waits until the log has `n` lines containing `needle`; panics with the log otherwise.
    pub fn wait_for(&self, needle: &str, n: usize, timeout: Duration) {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if self.count(needle) >= n {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "timed out waiting for {n}× {needle:?}; log:\n{}",
            self.log()
        );
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Asserts that the service reports `needle` in its log (it may take a moment to arrive
    /// through the pipe). For what the service *says*; states are learnt from the API or the
    /// database.
    pub fn expect_log(&self, needle: &str) {
        self.wait_for(needle, 1, Duration::from_secs(30));
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn stop(mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        self.wait(Duration::from_secs(30))
    }

    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let until = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The last lines may still be in the pipe: the log is whole once it is drained.
                if let Some(reader) = self.reader.take() {
                    let _ = reader.join();
                }
                return status;
            }
            assert!(
                Instant::now() < until,
                "service did not exit; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident memory of a process, in KiB (Linux).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Simulated OneBot bots on their own runtime (so tests can block while they keep talking).
pub struct Sims {
    pub rt: tokio::runtime::Runtime,
    pub bots: Vec<auto_assign::testkit::sim::SimBot>,
    /// Forward-mode urls, in `bots` order (empty for bots that only dial).
    pub urls: Vec<String>,
}

impl Sims {
    /// Bots serving forward connections, heartbeating every 200 ms.
    pub fn forward(specs: &[(u64, std::ops::RangeInclusive<u64>)]) -> Sims {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut bots = Vec::new();
        let mut urls = Vec::new();
        for (id, groups) in specs {
            let bot = auto_assign::testkit::sim::SimBot::new(*id, groups.clone());
            bot.set_heartbeat_interval(Duration::from_millis(200));
            urls.push(rt.block_on(bot.listen()).unwrap());
            bots.push(bot);
        }
        Sims { rt, bots, urls }
    }

    pub fn bot(&self, id: u64) -> &auto_assign::testkit::sim::SimBot {
        self.bots
            .iter()
            .find(|b| b.id() == id)
            .expect("simulated bot")
    }

    /// `connections:` entries for config.yaml.
    pub fn connections(&self, token: &str) -> String {
        self.urls
            .iter()
            .map(|u| format!("      - {{url: \"{u}\", accessToken: \"{token}\"}}\n"))
            .collect()
    }
}

impl Drop for Sims {
    fn drop(&mut self) {
        for bot in &self.bots {
            bot.stop();
        }
    }
}
