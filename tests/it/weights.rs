//! Message-weighted balancing end to end: weights measured from real sources (simulated OneBot
//! bots over WebSockets sending group messages at Zipf rates, a fleet reporter's counts,
//! `POST /v1/ingress` decisions), planned with `balanceBy: messages`, stored in SQLite and
//! read back after a restart; capacities that cannot be met reported everywhere.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::{InProcess, Sims, TempDir, eventually, get, post};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);
/// What one message adds to a weight with the default half-life of a day: ln 2.
const PER_MESSAGE: f64 = std::f64::consts::LN_2;

fn weights(api: &str) -> BTreeMap<String, f64> {
    let (status, body) = get(&format!("{api}/v1/weights/onebot"), None);
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body["weights"].clone()).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 0.01 * b.abs().max(1.0)
}

fn assignments(api: &str) -> BTreeMap<String, String> {
    let (_, all) = get(&format!("{api}/v1/assignments"), None);
    serde_json::from_value(all["onebot"].clone()).unwrap_or_default()
}

/// Σ (weighted load)² of an assignment.
fn sum_sq(assignment: &BTreeMap<String, String>, weights: &BTreeMap<String, f64>) -> f64 {
    let mut load: BTreeMap<&str, f64> = BTreeMap::new();
    for (channel, bot) in assignment {
        *load.entry(bot).or_default() += weights[channel];
    }
    load.values().map(|l| l * l).sum()
}

/// The least Σ (weighted load)² over every assignment of `channels` to `bots` (all members).
fn optimum(channels: &[(String, f64)], bots: usize) -> f64 {
    let mut best = f64::INFINITY;
    let mut choice = vec![0usize; channels.len()];
    loop {
        let mut load = vec![0.0; bots];
        for (i, (_, w)) in channels.iter().enumerate() {
            load[choice[i]] += w;
        }
        best = best.min(load.iter().map(|l| l * l).sum());
        let mut i = 0;
        loop {
            if i == choice.len() {
                return best;
            }
            choice[i] += 1;
            if choice[i] < bots {
                break;
            }
            choice[i] = 0;
            i += 1;
        }
    }
}

#[test]
fn onebot_messages_at_zipf_rates_are_counted_once_and_balanced() {
    // Three bots in the same ten groups: every message reaches all three.
    let sims = Sims::forward(&[(1001, 1..=10), (1002, 1..=10), (1003, 1..=10)]);
    let dir = TempDir::new("weights-onebot");
    let path = dir.write(
        "config.yaml",
        &format!(
            "database: {{url: \"sqlite://state.db\"}}\n\
             api: {{bind: \"127.0.0.1:0\"}}\n\
             balanceBy: messages\n\
             weights: {{minGain: 0}}\n\
             triggerDelays: {{botOnline: 0, botOffline: 0, channelJoined: 0, channelLeft: 0}}\n\
             sources:\n  onebot:\n    connections:\n{}",
            sims.connections("")
        ),
    );
    let service = InProcess::start(&path);
    let api = &service.api;
    eventually("ten groups assigned", WAIT, || assignments(api).len() == 10);

    // Group g gets 60/g messages (Zipf), each delivered by all three bots.
    let sent: BTreeMap<String, usize> = (1..=10u64)
        .map(|g| (g.to_string(), (60.0 / g as f64).round() as usize))
        .collect();
    let mut time = 1_700_000_000;
    for (group, &n) in &sent {
        for k in 0..n {
            time += 1;
            for bot in &sims.bots {
                bot.message(group.parse().unwrap(), 42, &format!("message {k}"), time);
            }
        }
    }
    // The fleet's own replies are not traffic to balance.
    for k in 0..5 {
        time += 1;
        for bot in &sims.bots {
            bot.message(10, 1002, &format!("a reply {k}"), time);
        }
    }
    let expected = |g: &str| (sent[g] as f64 * PER_MESSAGE).max(1.0);
    eventually("every message counted once", WAIT, || {
        let w = weights(api);
        sent.keys()
            .all(|g| w.get(g).is_some_and(|&x| close(x, expected(g))))
    });
    let measured = weights(api);
    // Three copies of a message would make three times the weight.
    assert!(close(measured["1"], 60.0 * PER_MESSAGE), "{measured:?}");

    // A rebalance on these weights: within its certified gap of the true optimum.
    let runs = service.runs();
    let (status, body) = post(&format!("{api}/v1/rebalance"), None, &json!({}));
    assert_eq!(status, 202, "{body}");
    service.wait_runs(runs + 1, WAIT);
    let status = service.status();
    let platform = &status["platforms"]["onebot"];
    assert_eq!(platform["balance_by"], "messages");
    let gap = platform["gap"].as_f64().expect("a gap");
    let assignment = assignments(api);
    let got = sum_sq(&assignment, &measured);
    let channels: Vec<(String, f64)> = measured.clone().into_iter().collect();
    let best = optimum(&channels, 3);
    // Sums of real rates tie within 10⁻⁹ of each other, as the planner counts them (its
    // `TIE`): a plan that close to the optimum is proven optimal, gap 0.
    assert!(
        got <= best * (1.0 + gap + 1e-9),
        "Σ {got}, optimum {best}, gap {gap}"
    );
    assert!(gap <= 0.01, "gap {gap}");
    // The history records it (once the writer has committed the run).
    eventually("the run's gap in the history", WAIT, || {
        let (_, history) = get(&format!("{api}/v1/history?limit=1"), None);
        history[0]["gap"]
            .as_f64()
            .is_some_and(|recorded| (recorded - gap).abs() <= 1e-9 + 1e-6 * gap)
    });
    let reported = platform["weighted_sum_sq"].as_f64().unwrap();
    assert!(
        close(reported, got),
        "reported Σ {reported}, computed {got}"
    );
    // Each bot's message rate is on the status (and so on the dashboard and /metrics).
    let messages: BTreeMap<String, f64> =
        serde_json::from_value(platform["messages"].clone()).unwrap();
    assert_eq!(messages.len(), 3);
    assert!(close(messages.values().sum(), measured.values().sum()));
    let (_, metrics) = crate::support::get_text(&format!("{api}/metrics"), None);
    assert!(metrics.contains("auto_assign_bot_weighted_load{bot=\"1001\",platform=\"onebot\"}"));
    assert!(metrics.contains("auto_assign_plan_gap_ratio{platform=\"onebot\"}"));
    // explain gives the weight and what a move would do.
    let (_, why) = get(&format!("{api}/v1/explain/onebot/1"), None);
    assert!(close(why["weight"].as_f64().unwrap(), 60.0 * PER_MESSAGE));
    assert!(
        why["text"]
            .as_str()
            .unwrap()
            .contains("weighs 41.6 messages a day"),
        "{why}"
    );
    service.stop().unwrap();
}

#[test]
fn reported_counts_and_ingress_decisions_count_once_and_survive_a_restart() {
    let dir = TempDir::new("weights-reported");
    let path = dir.write(
        "config.yaml",
        "database: {url: \"sqlite://state.db\"}\n\
         api: {bind: \"127.0.0.1:0\"}\n\
         triggerDelays: {botOnline: 0, botOffline: 0, channelJoined: 0, channelLeft: 0}\n\
         channelWeights: {\"onebot:3\": 50}\n\
         sources:\n  http: {startupWait: 0}\n",
    );
    let service = InProcess::start(&path);
    let api = service.api.clone();
    let reporter = format!("{api}/v1/fleet/reporters/koishi");
    let fleet = json!({"bots": [
        {"platform": "onebot", "id": "1001", "online": true, "channels": ["1", "2", "3"]},
        {"platform": "onebot", "id": "1002", "online": true, "channels": ["1", "2", "3"]},
    ]});
    let (status, body) = crate::support::put(&reporter, None, &fleet);
    assert_eq!(status, 200, "{body}");
    eventually("three groups assigned", WAIT, || {
        assignments(&api).len() == 3
    });

    // A reporter's counts.
    let counts =
        json!({"events": [{"type": "messages", "platform": "onebot", "counts": {"1": 10}}]});
    let (status, body) = post(&format!("{reporter}/events"), None, &counts);
    assert_eq!(status, 200, "{body}");
    // Bad counts are refused, naming what was wrong; nothing of them is counted.
    for (bad, says) in [
        (json!({"1": -1}), "events[0]"),
        (json!({"1": "many"}), "events[0]"),
        (json!({"1": 2_000_000}), "more than 1000000 in one report"),
    ] {
        let body = json!({"events": [{"type": "messages", "platform": "onebot", "counts": bad}]});
        let (status, answer) = post(&format!("{reporter}/events"), None, &body);
        assert_eq!(status, 400, "{answer}");
        assert!(answer.to_string().contains(says), "{answer}");
    }

    // Five messages in group 2, each asked about by both bots: the one decision that goes to
    // the assignee counts.
    for k in 0..5 {
        for bot in [1001, 1002] {
            let ask = json!({"platform": "onebot", "self_id": bot, "user_id": 42,
                "group_id": 2, "text": format!("hello {k}"), "time": 1_700_000_000 + k,
                "lane": "chat"});
            let (status, body) = post(&format!("{api}/v1/ingress"), None, &ask);
            assert_eq!(status, 200, "{body}");
        }
    }
    let w = weights(&api);
    assert!(close(w["1"], 10.0 * PER_MESSAGE), "{w:?}");
    assert!(close(w["2"], 5.0 * PER_MESSAGE), "{w:?}");
    // The admin's pin wins over the measure; a silent group counts the floor.
    let (_, body) = get(&format!("{api}/v1/weights/onebot"), None);
    assert_eq!(body["pinned"], json!(["3"]));
    assert_eq!(w["3"], 50.0);

    // A rebalance stores them; a restart reads them back.
    let runs = service.runs();
    post(&format!("{api}/v1/rebalance"), None, &json!({}));
    service.wait_runs(runs + 1, WAIT);
    eventually("the weights committed", WAIT, || {
        crate::support::get(&format!("{api}/healthz"), None).1["store"]["committed"] == true
    });
    service.stop().unwrap();
    let service = InProcess::start(&path);
    let w = weights(&service.api);
    assert!(
        close(w["1"], 10.0 * PER_MESSAGE),
        "after the restart: {w:?}"
    );
    assert!(close(w["2"], 5.0 * PER_MESSAGE), "after the restart: {w:?}");
    service.stop().unwrap();
}

#[test]
fn a_capacity_that_cannot_be_met_leaves_no_group_silent_and_is_reported() {
    let dir = TempDir::new("weights-capacity");
    // 1001 alone is in groups 1–3, with room for one: two groups over, still answered.
    let path = dir.write(
        "config.yaml",
        "database: {url: \"sqlite://state.db\"}\n\
         api: {bind: \"127.0.0.1:0\"}\n\
         triggerDelays: {botOnline: 0, botOffline: 0, channelJoined: 0, channelLeft: 0}\n\
         botCapacity: {\"1001\": 1, \"onebot:1002\": 2}\n\
         sources:\n  http: {startupWait: 0}\n",
    );
    let service = InProcess::start(&path);
    let api = service.api.clone();
    let fleet = json!({"bots": [
        {"platform": "onebot", "id": "1001", "online": true, "channels": ["1", "2", "3", "4"]},
        {"platform": "onebot", "id": "1002", "online": true, "channels": ["4", "5"]},
    ]});
    let (status, body) = crate::support::put(&format!("{api}/v1/fleet/reporters/r"), None, &fleet);
    assert_eq!(status, 200, "{body}");
    eventually("five groups assigned", WAIT, || {
        assignments(&api).len() == 5
    });
    let a = assignments(&api);
    // The least excess: 4 goes to 1002 (within its capacity), 1–3 stay on 1001.
    assert_eq!(a["4"], "1002", "{a:?}");
    let (_, health) = get(&format!("{api}/healthz"), None);
    assert_eq!(health["over_capacity"], json!({"onebot": {"1001": 2.0}}));
    let (_, metrics) = crate::support::get_text(&format!("{api}/metrics"), None);
    assert!(
        metrics.contains("auto_assign_bot_over_capacity{bot=\"1001\",platform=\"onebot\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("auto_assign_bot_capacity{bot=\"1002\",platform=\"onebot\"} 2"));
    // explain says it for a channel of the bot over its capacity.
    let (_, why) = get(&format!("{api}/v1/explain/onebot/1"), None);
    assert!(
        why["text"]
            .as_str()
            .unwrap()
            .contains("1001 is over its capacity (3.0 > 1 channels)"),
        "{why}"
    );
    service.stop().unwrap();
}

#[test]
fn bad_weights_and_capacities_in_the_config_are_refused_with_key_and_line() {
    let dir = TempDir::new("weights-config");
    for (text, says) in [
        ("botCapacity: {\"1001\": -5}\n", "botCapacity"),
        (
            "channelWeights: {\"onebot:1\": \"lots\"}\n",
            "channelWeights",
        ),
        ("channelWeights: {\"1\": 1e30}\n", "channelWeights"),
        ("weights: {minGain: 2}\n", "weights.minGain"),
        ("balanceBy: bytes\n", "balanceBy"),
    ] {
        let path = dir.write("config.yaml", text);
        let err = auto_assign::config::Config::load(&path)
            .err()
            .unwrap_or_else(|| panic!("{text} accepted"))
            .to_string();
        assert!(err.contains(says) && err.contains("line"), "{text}: {err}");
    }
}
