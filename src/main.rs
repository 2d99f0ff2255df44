use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use auto_assign::balance::{self, BalanceBy, Plan, Strategy};
#[cfg(feature = "bench")]
use auto_assign::bench;
use auto_assign::cli::snapshot::{self, Snapshot};
use auto_assign::cli::{Remote, RemoteError, operator, status_table};
use auto_assign::config::{Config, LogFormat, WORKER_THREADS_VAR, worker_threads};

#[derive(Parser)]
#[command(
    version,
    about = "Assigns every chat channel to exactly one bot of a fleet"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Plans once from a fleet snapshot and prints the assignment.
    Plan {
        /// Fleet snapshot (JSON; format in docs/algorithms.md).
        #[arg(long)]
        input: PathBuf,
        #[arg(long, value_enum, default_value_t = Strategy::Optimal)]
        strategy: Strategy,
        /// What a bot's load counts: channels, or messages (each channel's "weight").
        #[arg(long, value_enum, default_value_t = BalanceBy::Channels)]
        balance_by: BalanceBy,
        /// Where to write the assignment JSON (default: stdout).
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Runs the service until SIGINT or SIGTERM.
    Serve {
        #[arg(long, default_value = "config.yaml")]
        config: PathBuf,
    },
    /// Checks a config as `serve` would read it (the file, its environment variables, the
    /// fleet file, TLS files), starting nothing and writing nothing; exits 0 when it is good,
    /// 2 naming every problem.
    Check {
        #[arg(long, default_value = "config.yaml")]
        config: PathBuf,
    },
    /// A running service's platforms, bots, loads, health and last rebalance.
    Status {
        #[command(flatten)]
        remote: RemoteArgs,
        /// The API's answers as one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Who answers in a channel of a running service, and why.
    Explain {
        /// The channel id (a OneBot group number).
        channel: String,
        #[arg(long, default_value = "onebot")]
        platform: String,
        #[command(flatten)]
        remote: RemoteArgs,
        #[arg(long)]
        json: bool,
    },
    /// Pins a group to a bot (or, with --hold, to no bot at all) until unpinned or --until.
    Pin {
        /// The group: `100005` (on --platform) or `onebot:100005`.
        group: String,
        /// The bot that answers there (a member of the group).
        #[arg(required_unless_present = "hold")]
        bot: Option<String>,
        /// No bot answers in the group (Koishi's `assign -r`).
        #[arg(long, conflicts_with = "bot")]
        hold: bool,
        #[command(flatten)]
        reason: ReasonArgs,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Removes a group's pin or hold.
    Unpin {
        group: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Drains a bot: it keeps only the groups no other valid bot can take.
    Drain {
        /// The bot: `1003` (on --platform) or `onebot:1003`.
        bot: String,
        #[command(flatten)]
        reason: ReasonArgs,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Ends a bot's drain: the next rebalance uses it again.
    Undrain {
        bot: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// The pins and holds in force, and what each does now.
    Pins {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// The drains in force.
    Drains {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Rebalances now, or (--dry-run) shows what a rebalance would move, changing nothing.
    Rebalance {
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Pallas-Bot compatibility tools.
    #[command(subcommand)]
    Coord(CoordCommand),
    /// Measures both strategies on seeded synthetic fleets (build with --release and
    /// `--features bench`); exits 1 when a measurement fails.
    #[cfg(feature = "bench")]
    Bench(bench::Args),
}

#[derive(clap::Args)]
struct RemoteArgs {
    /// The service's HTTP API.
    #[arg(long, default_value = "http://127.0.0.1:8787")]
    api: String,
    /// The API token (`api.token`); default: the AUTO_ASSIGN_TOKEN environment variable.
    #[arg(long)]
    token: Option<String>,
    /// For an `https://` API: the CA certificate (PEM) its certificate is checked against,
    /// instead of the system's; default: the AUTO_ASSIGN_CA_FILE environment variable.
    #[arg(long)]
    ca_file: Option<PathBuf>,
}

/// Where a change goes, and how to show the answer.
#[derive(clap::Args)]
struct TargetArgs {
    /// The platform of a group or bot given without one.
    #[arg(long, default_value = "onebot")]
    platform: String,
    #[command(flatten)]
    remote: RemoteArgs,
    /// The API's answer as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// When a change ends and why it was made.
#[derive(clap::Args)]
struct ReasonArgs {
    /// When it ends by itself: a duration (`2h`, `1d 12h`) or an RFC 3339 time.
    #[arg(long)]
    until: Option<String>,
    /// Why, for the audit and the other operators.
    #[arg(long)]
    note: Option<String>,
}

impl ReasonArgs {
    fn reason(self) -> operator::Reason {
        operator::Reason {
            until: self.until,
            note: self.note,
        }
    }
}

impl RemoteArgs {
    fn remote(self) -> Remote {
        Remote {
            api: self.api,
            token: self
                .token
                .or_else(|| std::env::var("AUTO_ASSIGN_TOKEN").ok())
                .filter(|t| !t.is_empty()),
            ca_file: self
                .ca_file
                .or_else(|| std::env::var_os("AUTO_ASSIGN_CA_FILE").map(PathBuf::from)),
        }
    }
}

#[derive(Subcommand)]
enum CoordCommand {
    /// Reads JSON lines in the golden vectors' format and writes each with its `result`.
    Eval {
        /// Input file (default: stdin).
        #[arg(long)]
        input: Option<PathBuf>,
    },
}

/// Logs go to stderr, as text or one JSON object per line (`logFormat`); `RUST_LOG` filters.
fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr);
    match format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&io::stderr()))
            .init(),
        LogFormat::Json => logs.json().flatten_event(true).init(),
    }
}

fn main() -> ExitCode {
    let command = Cli::parse().command;
    // `serve` logs as its config says, once it is read.
    if !matches!(command, Command::Serve { .. }) {
        init_logs(LogFormat::Text);
    }
    match command {
        Command::Plan {
            input,
            strategy,
            balance_by,
            output,
        } => run_plan(&input, strategy, balance_by, output.as_deref()),
        Command::Serve { config } => serve(&config),
        Command::Check { config } => check(&config),
        Command::Status { remote, json } => match remote.remote().status() {
            Ok(all) if json => print_json(&all),
            Ok(all) => {
                print!("{}", status_table(&all));
                ExitCode::SUCCESS
            }
            Err(e) => remote_failed(e),
        },
        Command::Explain {
            channel,
            platform,
            remote,
            json,
        } => match remote.remote().explain(&platform, &channel) {
            Ok(answer) if json => print_json(&answer),
            Ok(answer) => {
                let assignee = answer["assignee"].as_str().unwrap_or("nobody");
                println!("{platform}:{channel} → {assignee}");
                println!("{}", answer["text"].as_str().unwrap_or(""));
                ExitCode::SUCCESS
            }
            Err(e) => remote_failed(e),
        },
        Command::Pin {
            group,
            bot,
            hold,
            reason,
            target,
        } => {
            let (platform, channel) = operator::group(&group, &target.platform);
            let bot = bot.filter(|_| !hold);
            let what = if bot.is_some() { "pinned" } else { "held" };
            let answer =
                target
                    .remote
                    .remote()
                    .pin((&platform, &channel), bot.as_deref(), &reason.reason());
            show_change(answer, target.json, what)
        }
        Command::Unpin { group, target } => {
            let (platform, channel) = operator::group(&group, &target.platform);
            let answer = target.remote.remote().unpin((&platform, &channel));
            show_change(answer, target.json, "unpinned")
        }
        Command::Drain {
            bot,
            reason,
            target,
        } => {
            let (platform, bot) = operator::group(&bot, &target.platform);
            let answer = target
                .remote
                .remote()
                .drain((&platform, &bot), &reason.reason());
            show_change(answer, target.json, "drained")
        }
        Command::Undrain { bot, target } => {
            let (platform, bot) = operator::group(&bot, &target.platform);
            let answer = target.remote.remote().undrain((&platform, &bot));
            show_change(answer, target.json, "undrained")
        }
        Command::Pins { target } => show(
            target.remote.remote().pins(),
            target.json,
            operator::pins_table,
        ),
        Command::Drains { target } => show(
            target.remote.remote().drains(),
            target.json,
            operator::drains_table,
        ),
        Command::Rebalance { dry_run, target } => {
            let answer = target.remote.remote().rebalance(dry_run);
            if dry_run {
                show(answer, target.json, operator::dry_run_table)
            } else {
                show(answer, target.json, |_| "rebalance requested\n".to_owned())
            }
        }
        Command::Coord(CoordCommand::Eval { input }) => coord_eval(input.as_deref()),
        #[cfg(feature = "bench")]
        Command::Bench(args) => {
            if bench::run(&args) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn print_json(value: &serde_json::Value) -> ExitCode {
    match serde_json::to_string_pretty(value) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// An answer as JSON or as `table` makes it.
fn show(
    answer: Result<serde_json::Value, RemoteError>,
    json: bool,
    table: impl Fn(&serde_json::Value) -> String,
) -> ExitCode {
    match answer {
        Ok(answer) if json => print_json(&answer),
        Ok(answer) => {
            print!("{}", table(&answer));
            ExitCode::SUCCESS
        }
        Err(e) => remote_failed(e),
    }
}

/// A change's answer: one line, or its JSON.
fn show_change(answer: Result<serde_json::Value, RemoteError>, json: bool, what: &str) -> ExitCode {
    show(answer, json, |shown| {
        format!("{}\n", operator::change_line(what, shown))
    })
}

fn remote_failed(e: RemoteError) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::FAILURE
}

fn check(path: &std::path::Path) -> ExitCode {
    match Config::check(path) {
        Ok(config) => {
            println!(
                "{}: ok (strategy {}, database {}{}{})",
                path.display(),
                config.strategy,
                config.database_name(),
                if config.redis.is_some() {
                    ", Redis"
                } else {
                    ""
                },
                config
                    .sources
                    .file
                    .as_ref()
                    .map(|f| format!(", fleet file {}", f.display()))
                    .unwrap_or_default(),
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors {
                eprintln!("error: {e}");
            }
            eprintln!("{}: {} problem(s)", path.display(), errors.len());
            ExitCode::from(2)
        }
    }
}

fn serve(config: &std::path::Path) -> ExitCode {
    let config = match Config::load(config) {
        Ok(c) => c,
        Err(e) => {
            init_logs(LogFormat::Text);
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    init_logs(config.log_format);
    let workers = match worker_threads(std::env::var_os(WORKER_THREADS_VAR).as_deref()) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(n) = workers {
        runtime.worker_threads(n.get());
    }
    let runtime = match runtime.build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let shutdown = tokio_util::sync::CancellationToken::new();
        auto_assign::service::cancel_on_signals(shutdown.clone());
        match auto_assign::service::serve(config, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(e.exit_code())
            }
        }
    })
}

fn coord_eval(input: Option<&std::path::Path>) -> ExitCode {
    use std::io::BufRead;
    let mut reader: Box<dyn BufRead> = match input {
        Some(path) => match File::open(path) {
            Ok(f) => Box::new(io::BufReader::new(f)),
            Err(e) => {
                eprintln!("error: {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        None => Box::new(io::stdin().lock()),
    };
    let mut out = BufWriter::new(io::stdout().lock());
    // Lines as bytes: one line that is not UTF-8 gets an error line; the run goes on.
    let mut line = Vec::new();
    let mut number = 0;
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                eprintln!("error: reading input: {e}");
                return ExitCode::from(2);
            }
        }
        number += 1;
        let answer = match std::str::from_utf8(&line) {
            Ok(text) if text.trim().is_empty() => continue,
            Ok(text) => auto_assign::pallas::eval::eval_line(text.trim_end_matches(['\n', '\r'])),
            Err(_) => auto_assign::pallas::eval::not_utf8_line(number),
        };
        if writeln!(out, "{answer}").is_err() {
            return ExitCode::FAILURE;
        }
    }
    if out.flush().is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn run_plan(
    input: &std::path::Path,
    strategy: Strategy,
    balance_by: BalanceBy,
    output: Option<&std::path::Path>,
) -> ExitCode {
    auto_assign::pages::keep_freed_memory();
    let mut progress = Progress::start();
    // The whole file in memory: parsing from a slice lets the parser borrow every string.
    let bytes = match std::fs::read(input) {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!("error: {}: {e}", input.display());
            return ExitCode::from(2);
        }
    };
    progress.on = bytes.len() >= PROGRESS_BYTES;
    progress.phase(format_args!(
        "read {} ({:.1} MB)",
        input.display(),
        bytes.len() as f64 / 1e6
    ));
    let parsed = snapshot::read(&bytes);
    drop(bytes);
    let mut snapshot = match parsed {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}: {e}", input.display());
            return ExitCode::from(2);
        }
    };
    let platforms = snapshot.index.platforms();
    progress.phase(format_args!(
        "indexed {} channels, {} bots, {} memberships",
        platforms.iter().map(|p| p.channel_count()).sum::<usize>(),
        platforms.iter().map(|p| p.bot_count()).sum::<usize>(),
        platforms
            .iter()
            .map(|p| p.total_memberships())
            .sum::<usize>()
    ));
    for w in &snapshot.warnings {
        eprintln!("warning: {}: {w}", input.display());
    }
    if snapshot.more_warnings > 0 {
        eprintln!(
            "warning: {}: … and {} more warnings like these",
            input.display(),
            snapshot.more_warnings
        );
    }
    snapshot.rules.balance_by = balance_by;
    let plan = balance::plan(&snapshot.index, &snapshot.rules, strategy);
    progress.phase(format_args!("planned ({strategy})"));
    for p in &plan.platforms {
        let index = snapshot.index.platform_mut(&p.platform);
        eprintln!("{}", p.summary(index));
        for &(c, bot) in &p.changes {
            index.set_assignee(c, bot);
        }
        // The first few by name, the rest as a number: one run listed 176 on a line.
        const SHOWN: usize = 10;
        let mut orphans = (0..index.channel_count() as u32)
            .filter(|&c| index.assignee(c).is_none() && !p.is_excluded(c));
        let shown: Vec<String> = orphans
            .by_ref()
            .take(SHOWN)
            .map(|c| format!("{}:{}", p.platform, index.channel_id(c)))
            .collect();
        let more = orphans.count();
        if !shown.is_empty() {
            eprintln!(
                "warning: no valid bot for {} channel(s): {}{}",
                shown.len() + more,
                shown.join(", "),
                if more > 0 {
                    format!(", … and {more} more")
                } else {
                    String::new()
                }
            );
        }
    }
    // One buffered writer, large enough that a million lines take a few hundred writes.
    let written = match output {
        Some(path) => File::create(path)
            .and_then(|f| write_assignment(BufWriter::with_capacity(1 << 20, f), &snapshot, &plan)),
        None => write_assignment(
            BufWriter::with_capacity(1 << 20, io::stdout().lock()),
            &snapshot,
            &plan,
        ),
    };
    // The process ends next: freeing a million-channel index and plan piece by piece would
    // only delay the exit, the kernel takes the memory back at once.
    std::mem::forget((snapshot, plan));
    match written {
        Ok(n) => {
            progress.phase(format_args!("wrote {n} assignments"));
            progress.total();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: writing the assignment: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Inputs from this size on (about 60,000 channels) get their phases timed on stderr.
const PROGRESS_BYTES: usize = 8 << 20;

/// `plan`'s phases and their times on stderr (`plan: ...` lines), when the input is large.
struct Progress {
    /// Whether to print: the input is large.
    on: bool,
    started: std::time::Instant,
    last: std::time::Instant,
}

impl Progress {
    fn start() -> Self {
        let now = std::time::Instant::now();
        Self {
            on: false,
            started: now,
            last: now,
        }
    }

    fn phase(&mut self, what: std::fmt::Arguments) {
        let now = std::time::Instant::now();
        if self.on {
            eprintln!("plan: {what} in {:.2} s", (now - self.last).as_secs_f64());
        }
        self.last = now;
    }

    /// The whole run: wall clock, CPU time and the peak of resident memory.
    fn total(&self) {
        if !self.on {
            return;
        }
        let cpu = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        // Linux's high-water mark of resident memory, in kB.
        let peak = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
                line.split_whitespace().nth(1)?.parse::<f64>().ok()
            })
            .map_or_else(|| "n/a".to_owned(), |kb| format!("{:.0} MB", kb / 1024.0));
        eprintln!(
            "plan: done in {:.2} s, CPU {:.2} s, peak RSS {peak}",
            self.started.elapsed().as_secs_f64(),
            cpu.tv_sec as f64 + cpu.tv_nsec as f64 / 1e9
        );
    }
}

/// `{ "platform:channel": "platform:bot", ... }` for every assigned, non-excluded channel, in
/// snapshot order; the same form as a snapshot's `previous`, so a plan can feed the next one.
/// Returns how many it wrote.
fn write_assignment(mut out: impl Write, snapshot: &Snapshot, plan: &Plan) -> io::Result<usize> {
    let platforms = snapshot.index.platforms();
    // The plan of each platform, by position (disabled platforms have none).
    let plans: Vec<Option<&balance::PlatformPlan>> =
        platforms.iter().map(|p| plan.platform(p.name())).collect();
    // Excluded channels as one flag each: a look-up per written line, where a search of the
    // sorted list cost a few percent of the whole run.
    let excluded: Vec<Vec<bool>> = platforms
        .iter()
        .zip(&plans)
        .map(|(index, p)| {
            let mut flags = vec![false; p.map_or(0, |_| index.channel_count())];
            for &c in p.map_or(&[][..], |p| &p.excluded) {
                flags[c as usize] = true;
            }
            flags
        })
        .collect();
    out.write_all(b"{")?;
    let mut written = 0;
    for &(position, c) in &snapshot.order {
        let (pidx, Some(p)) = (&platforms[position], plans[position]) else {
            continue;
        };
        let Some(bot) = pidx.assignee(c) else {
            continue;
        };
        if excluded[position][c as usize] {
            continue;
        }
        out.write_all(if written == 0 { b"\n  " } else { b",\n  " })?;
        written += 1;
        write_key(&mut out, &p.platform, &pidx.channel_id(c))?;
        out.write_all(b": ")?;
        write_key(&mut out, &p.platform, pidx.bot_id(bot))?;
    }
    out.write_all(if written == 0 { b"}\n" } else { b"\n}\n" })?;
    out.flush()?;
    Ok(written)
}

/// `"platform:id"` as a JSON string, byte for byte as serde_json writes it, without putting
/// the key together first unless it needs escapes.
fn write_key(out: &mut impl Write, platform: &str, id: &str) -> io::Result<()> {
    let plain = |s: &str| s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\');
    if plain(platform) && plain(id) {
        out.write_all(b"\"")?;
        out.write_all(platform.as_bytes())?;
        out.write_all(b":")?;
        out.write_all(id.as_bytes())?;
        out.write_all(b"\"")
    } else {
        serde_json::to_writer(out, &format!("{platform}:{id}")).map_err(io::Error::from)
    }
}
