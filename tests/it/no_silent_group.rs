//! No silent group: on the service's default trigger delays, a group whose bot logs out, a
//! group two bots just joined and every group at a first start are answered within a second.
//!
//! Simulated OneBot bots over real WebSockets, the real service binary, a real SQLite file. A
//! message goes to every group every 100 ms, through every member bot that is logged in. Such a
//! message is answered when the committed row (what Koishi obeys, and what the publication
//! carries) names one of those bots; and every member asks `POST /v1/ingress` about it, which
//! must let exactly one of them handle it (no double answer, no silence through the gate).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::{Db, Service, Sims, TempDir, eventually, free_port, post};
use parking_lot::Mutex;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);
const TICK: Duration = Duration::from_millis(100);

/// The service as the plugins' READMEs configure it: the default trigger delays, the default
/// `startupWait`, only short heartbeats so that the simulated bots are quick to see.
fn serve(name: &str, sims: &Sims, extra: &str) -> (TempDir, Db, Service, String) {
    let dir = TempDir::new(name);
    let port = free_port();
    let config = format!(
        "database: {{url: \"sqlite://state.db\"}}
api: {{bind: \"127.0.0.1:{port}\"}}
sources:
  onebot:
    connections:
{}{extra}",
        sims.connections("")
    );
    let path = dir.write("config.yaml", &config);
    let db = Db::Sqlite(dir.join("state.db"));
    let service = Service::start(&path);
    (dir, db, service, format!("http://127.0.0.1:{port}"))
}

/// Which bots are logged in and in which groups: what the messages go through.
#[derive(Default)]
struct Fleet {
    members: BTreeMap<u64, BTreeSet<u64>>,
    logged_in: BTreeSet<u64>,
}

impl Fleet {
    fn new(specs: &[(u64, std::ops::RangeInclusive<u64>)]) -> Fleet {
        let mut fleet = Fleet::default();
        for (bot, groups) in specs {
            fleet.logged_in.insert(*bot);
            for g in groups.clone() {
                fleet.members.entry(g).or_default().insert(*bot);
            }
        }
        fleet
    }

    /// The bots a message in `group` arrives through.
    fn receivers(&self, group: u64) -> Vec<u64> {
        self.members.get(&group).map_or_else(Vec::new, |m| {
            m.iter()
                .copied()
                .filter(|b| self.logged_in.contains(b))
                .collect()
        })
    }
}

/// What the messages met since the last [`Traffic::take`].
#[derive(Debug, Default, Clone)]
struct Figures {
    messages: usize,
    /// No receiver is the committed assignee.
    unanswered: usize,
    /// The longest run of unanswered messages in one group, as time.
    longest_silence: Duration,
    /// More than one receiver told to handle by `/v1/ingress`.
    double: usize,
    /// No receiver told to handle by `/v1/ingress`.
    gate_silent: usize,
}

/// Sends the messages every 100 ms on a thread of its own.
struct Traffic {
    fleet: Arc<Mutex<Fleet>>,
    figures: Arc<Mutex<Figures>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Traffic {
    fn start(db: Db, api: String, fleet: Fleet) -> Traffic {
        let fleet = Arc::new(Mutex::new(fleet));
        let figures = Arc::new(Mutex::new(Figures::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (fleet, figures, stop) = (fleet.clone(), figures.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut silent_since: BTreeMap<u64, Instant> = BTreeMap::new();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let tick = Instant::now();
                    n += 1;
                    let rows = db.channels("onebot");
                    let groups: Vec<(u64, Vec<u64>)> = {
                        let f = fleet.lock();
                        f.members.keys().map(|&g| (g, f.receivers(g))).collect()
                    };
                    for (group, receivers) in groups {
                        if receivers.is_empty() {
                            silent_since.remove(&group);
                            continue;
                        }
                        let assignee = rows.get(&group.to_string());
                        let answered = receivers
                            .iter()
                            .any(|b| assignee.is_some_and(|a| *a == b.to_string()));
                        let handled = receivers
                            .iter()
                            .filter(|&&bot| {
                                let (status, body) = post(
                                    &format!("{api}/v1/ingress"),
                                    None,
                                    &json!({"platform": "onebot", "self_id": bot,
                                        "group_id": group, "user_id": 42,
                                        "text": format!("message {n}"), "time": n, "lane": "chat"}),
                                );
                                assert_eq!(status, 200, "{body}");
                                body["handle"] == true
                            })
                            .count();
                        let mut f = figures.lock();
                        f.messages += 1;
                        f.double += usize::from(handled > 1);
                        f.gate_silent += usize::from(handled == 0);
                        if answered {
                            silent_since.remove(&group);
                        } else {
                            f.unanswered += 1;
                            let since = *silent_since.entry(group).or_insert(tick);
                            // The silence lasts until the next message is answered: one tick
                            // past this one, at least.
                            f.longest_silence = f.longest_silence.max(tick - since + TICK);
                        }
                    }
                    std::thread::sleep(TICK.saturating_sub(tick.elapsed()));
                }
            })
        };
        Traffic {
            fleet,
            figures,
            stop,
            thread: Some(thread),
        }
    }

    /// The figures so far, and a fresh count from here.
    fn take(&self) -> Figures {
        std::mem::take(&mut *self.figures.lock())
    }

    /// Waits for `ticks` more rounds of messages.
    fn wait_ticks(&self, ticks: usize) {
        let start = self.figures.lock().messages;
        let groups = self.fleet.lock().members.len();
        eventually("messages sent", WAIT, || {
            self.figures.lock().messages >= start + ticks * groups
        });
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn report(event: &str, f: &Figures) {
    println!(
        "no silent group: {event}: {} messages, {} unanswered, longest silence {} ms, {} double, \
         {} unanswered through /v1/ingress",
        f.messages,
        f.unanswered,
        f.longest_silence.as_millis(),
        f.double,
        f.gate_silent
    );
}

fn assert_quiet(event: &str, f: &Figures) {
    report(event, f);
    assert!(
        f.longest_silence <= Duration::from_secs(1),
        "{event}: a group was silent for {:?}: {f:?}",
        f.longest_silence
    );
    assert_eq!((f.double, f.gate_silent), (0, 0), "{event}: {f:?}");
}

/// (forced moves made at once, every move) from `/metrics`.
fn moves(api: &str) -> (u64, u64) {
    let mut response = crate::support::http()
        .get(format!("{api}/metrics"))
        .call()
        .unwrap();
    let text = response.body_mut().read_to_string().unwrap();
    let sum = |name: &str, label: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with(name) && l.contains(label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    (
        sum(
            "auto_assign_provisional_assignments_total{",
            "kind=\"forced\"",
        ),
        sum("auto_assign_moves_total{", ""),
    )
}

const SPECS: [(u64, std::ops::RangeInclusive<u64>); 3] = [
    (1001, 100001..=100012),
    (1002, 100001..=100008),
    (1003, 100005..=100012),
];

#[test]
fn a_first_start_is_answered_before_the_reporters_startup_wait() {
    // A fleet reporter (the Koishi and NoneBot plugins) on a fresh database: the first
    // rebalance waits `sources.http.startupWait` (10 s) for other reporters, but the groups
    // are answered as soon as the fleet is reported.
    let dir = TempDir::new("silence-first-start");
    let port = free_port();
    let path = dir.write(
        "config.yaml",
        &format!(
            "database: {{url: \"sqlite://state.db\"}}\napi: {{bind: \"127.0.0.1:{port}\"}}\n\
             sources: {{http: {{}}}}\n"
        ),
    );
    let db = Db::Sqlite(dir.join("state.db"));
    let service = Service::start(&path);
    let api = format!("http://127.0.0.1:{port}");
    let bots: Vec<serde_json::Value> = SPECS
        .iter()
        .map(|(bot, groups)| {
            let channels: Vec<String> = groups.clone().map(|g| g.to_string()).collect();
            json!({"platform": "onebot", "id": bot.to_string(), "online": true,
                "channels": channels})
        })
        .collect();
    eventually("the API answers", WAIT, || {
        crate::support::http()
            .get(format!("{api}/healthz"))
            .call()
            .is_ok_and(|r| r.status() == 200)
    });
    let reported = Instant::now();
    // The reporter's full state; then messages for `ticks` rounds, all before the first
    // rebalance, which waits for startupWait.
    let report_then_measure = |bots: &[serde_json::Value], traffic: &Traffic, ticks: usize| {
        let mut response = crate::support::http()
            .put(format!("{api}/v1/fleet/reporters/koishi"))
            .send_json(json!({ "bots": bots }))
            .unwrap();
        let status = response.status().as_u16();
        assert_eq!(status, 200, "{:?}", response.body_mut().read_to_string());
        traffic.wait_ticks(ticks);
        let f = traffic.take();
        assert!(
            db.history().is_empty() && reported.elapsed() < Duration::from_secs(10),
            "the first rebalance still waits: {:?}",
            db.history()
        );
        f
    };
    let traffic = Traffic::start(db.clone(), api.clone(), Fleet::new(&SPECS));
    assert_quiet("first start", &report_then_measure(&bots, &traffic, 15));
    assert_eq!(db.channels("onebot").len(), 12);

    // A bot the reporter says has logged out, still within startupWait: its groups get a bot
    // at once too (only stored assignees of bots no source has reported yet are held).
    let mut bots = bots;
    bots[1]["online"] = json!(false);
    traffic.fleet.lock().logged_in.remove(&1002);
    assert_quiet(
        "logout during startupWait",
        &report_then_measure(&bots, &traffic, 10),
    );
    assert!(db.channels("onebot").values().all(|b| b != "1002"));
    drop(traffic);
    drop(service);
}

#[test]
fn a_logout_and_a_new_group_leave_no_group_silent_for_a_second() {
    let sims = Sims::forward(&SPECS);
    let mut fleet = Fleet::new(&SPECS);
    fleet.members.insert(100013, BTreeSet::new());
    let (_dir, db, service, api) = serve("silence-events", &sims, "");
    eventually("the first rebalance", WAIT, || !db.history().is_empty());
    let traffic = Traffic::start(db.clone(), api.clone(), fleet);
    let (provisional_before, _) = moves(&api);

    // A logout: 1002's groups are answered by others within a second, not after the delay of
    // its status change (5 s).
    traffic.wait_ticks(2);
    traffic.take();
    sims.bot(1002).bot_offline();
    // Its messages stop once the service has the event: before, no coordinator can know, and
    // a tick in between would count the event's own latency as a silence (seen once).
    eventually("the service sees 1002 offline", WAIT, || {
        let (_, bots) = crate::support::get(&format!("{api}/v1/bots"), None);
        bots.as_array().is_some_and(|bots| {
            bots.iter()
                .any(|b| b["bot"] == "1002" && b["online"] == false)
        })
    });
    traffic.fleet.lock().logged_in.remove(&1002);
    traffic.wait_ticks(15);
    let runs = db.history().len();
    assert_quiet("logout", &traffic.take());
    assert_eq!(
        db.history().len(),
        runs,
        "the rebalance still waits for its delay"
    );
    let (provisional, _) = moves(&api);
    assert!(
        provisional > provisional_before,
        "moved at once: {provisional}"
    );

    // Two bots join a new group: answered within a second, not after channelJoined (10 s).
    {
        let mut f = traffic.fleet.lock();
        f.members.insert(100013, [1001, 1003].into());
    }
    sims.bot(1001).join(100013);
    sims.bot(1003).join(100013);
    traffic.wait_ticks(15);
    assert_quiet("new group", &traffic.take());
    drop(traffic);
    let rows = db.channels("onebot");
    assert!(
        ["1001", "1003"].contains(&rows["100013"].as_str()),
        "{rows:?}"
    );
    drop(service);
}

#[test]
fn provisional_false_keeps_the_old_windows() {
    // The same logout with `provisional: false`: the groups wait for the rebalance, so the
    // measurement above can fail.
    let sims = Sims::forward(&SPECS);
    let extra = "provisional: false\n";
    let (_dir, db, _service, api) = serve("silence-off", &sims, extra);
    eventually("the first rebalance", WAIT, || !db.history().is_empty());
    let traffic = Traffic::start(db.clone(), api, Fleet::new(&SPECS));
    traffic.wait_ticks(3);
    traffic.take();
    sims.bot(1002).bot_offline();
    traffic.fleet.lock().logged_in.remove(&1002);
    eventually("the rebalance after the logout", WAIT, || {
        db.history().len() >= 2
    });
    traffic.wait_ticks(3);
    let f = traffic.take();
    report("logout with provisional: false", &f);
    assert!(f.longest_silence >= Duration::from_millis(1500), "{f:?}");
    // Through the gate nobody was silent even then: an offline assignee's groups are claimed.
    assert_eq!((f.double, f.gate_silent), (0, 0), "{f:?}");
}

#[test]
fn a_flapping_bot_costs_at_most_one_move_away_and_back_per_flap() {
    // 100 flaps a minute (one every 0.6 s) for 20 flaps: the provisional moves send the
    // flapping bot's channels away when it drops; the rebalances, 5 s after it returns, bring
    // back only what balance needs. Every group stays answered.
    let sims = Sims::forward(&SPECS);
    let (_dir, db, _service, api) = serve("silence-flap", &sims, "");
    eventually("the first rebalance", WAIT, || !db.history().is_empty());
    let share = db
        .channels("onebot")
        .values()
        .filter(|b| *b == "1003")
        .count() as u64;
    let traffic = Traffic::start(db.clone(), api.clone(), Fleet::new(&SPECS));
    traffic.wait_ticks(2);
    traffic.take();
    let (provisional_before, rebalanced_before) = moves(&api);
    const FLAPS: u64 = 20;
    for _ in 0..FLAPS {
        sims.bot(1003).bot_offline();
        traffic.fleet.lock().logged_in.remove(&1003);
        std::thread::sleep(Duration::from_millis(300));
        sims.bot(1003).set_online(true);
        traffic.fleet.lock().logged_in.insert(1003);
        std::thread::sleep(Duration::from_millis(300));
    }
    // The rebalance after the last return brings back the bot's share.
    eventually("the bot's share back", WAIT, || {
        db.channels("onebot")
            .values()
            .filter(|b| *b == "1003")
            .count() as u64
            == share
    });
    let f = traffic.take();
    drop(traffic);
    let (provisional, rebalanced) = moves(&api);
    // `moves_total` counts every move, made at once or by a rebalance.
    let moved = rebalanced - rebalanced_before;
    assert!(provisional > provisional_before);
    println!(
        "no silent group: flapping: {FLAPS} flaps of a bot assigned {share} channels: {moved} \
         moves ({:.1} per flap)",
        moved as f64 / FLAPS as f64
    );
    report("flapping", &f);
    assert!(share > 0);
    assert!(
        moved <= 2 * share * FLAPS,
        "{moved} moves for {FLAPS} flaps of a bot with {share} channels"
    );
    // Bounded by the rebalances, not the flaps: each rebalance brings back at most the share.
    let runs = db.history().len() as u64;
    assert!(moved <= 2 * share * runs, "{moved} moves, {runs} runs");
    // A message that arrives while the bot is logged out but before the offline notice has
    // been read may meet the gone bot's row: at most one tick.
    assert!(f.longest_silence <= Duration::from_secs(1), "{f:?}");
    assert_eq!(f.double, 0, "{f:?}");
}
