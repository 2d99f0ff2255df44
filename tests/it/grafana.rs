//! The Grafana board (`docs/grafana/auto-assign.json`) against the real service: every metric a
//! query of the board names is one the service exports (checked on a live `/metrics` scrape of
//! a service driven until every family the board uses has samples), every label a selector or a
//! grouping names exists on what it selects, and every query parses (`promtool check rules`,
//! each query a recording rule).

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{
    FLEET, InProcess, RedisServer, TempDir, eventually, fleet_with_offline, get, post,
};
use serde_json::{Value, json};

const TOKEN: &str = "grafana-token";
const WAIT: Duration = Duration::from_secs(20);
const BOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/grafana/auto-assign.json");

/// What an operator looks for on the board: each a row or panel title (lower case) must contain.
const TOPICS: [&str; 12] = [
    "channels per bot",
    "weighted load",
    "capacity",
    "σ load²",
    "rebalance duration",
    "moves per run",
    "store",
    "commit failures",
    "publication",
    "leader",
    "ingress",
    "over capacity",
];

/// The board's rows, in order (docs/operations.md describes each).
const ROWS: [&str; 8] = [
    "Load per bot",
    "Balance",
    "Rebalances",
    "Store",
    "Redis publication",
    "Leadership and federate pool",
    "Ingress",
    "Capacity and connections",
];

/// The fewest queries the board holds.
const MIN_QUERIES: usize = 45;

// --- PromQL, as far as naming metrics goes ---------------------------------------------------

/// Aggregation operators, keywords and functions of PromQL (Prometheus 2.x and 3.x): every
/// identifier of a query that is none of these (and is no label name, string or duration) is a
/// metric name.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "atan2", "bool", "offset", "inf", "nan", "start", "end",
];
/// Followed by a parenthesised list of label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const FUNCTIONS: &[&str] = &[
    "abs",
    "absent",
    "absent_over_time",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "avg_over_time",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "cos",
    "cosh",
    "count_over_time",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "days_in_month",
    "deg",
    "delta",
    "deriv",
    "exp",
    "floor",
    "histogram_avg",
    "histogram_count",
    "histogram_fraction",
    "histogram_quantile",
    "histogram_stddev",
    "histogram_stdvar",
    "histogram_sum",
    "holt_winters",
    "hour",
    "idelta",
    "increase",
    "irate",
    "label_join",
    "label_replace",
    "last_over_time",
    "ln",
    "log10",
    "log2",
    "mad_over_time",
    "max_over_time",
    "min_over_time",
    "minute",
    "month",
    "pi",
    "predict_linear",
    "present_over_time",
    "quantile_over_time",
    "rad",
    "rate",
    "resets",
    "round",
    "scalar",
    "sgn",
    "sin",
    "sinh",
    "sort",
    "sort_by_label",
    "sort_by_label_desc",
    "sort_desc",
    "sqrt",
    "stddev_over_time",
    "stdvar_over_time",
    "sum_over_time",
    "tan",
    "tanh",
    "time",
    "timestamp",
    "vector",
    "year",
];

/// What one query names: metric selectors (name → label names its matchers use, with the values
/// of its `=` matchers) and the label names of its groupings (`by`, `on`, ...).
#[derive(Debug, Default)]
struct Names {
    selectors: Vec<Selector>,
    grouping: BTreeSet<String>,
}

#[derive(Debug)]
struct Selector {
    metric: String,
    /// (label, operator, value) of each matcher.
    matchers: Vec<(String, String, String)>,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The metric names, matchers and grouping labels of one PromQL expression (Grafana variables
/// already interpolated). Panics on what it cannot read: an unknown function, unbalanced
/// brackets, a stray character.
fn names(expr: &str) -> Names {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Names::default();
    let mut i = 0;
    let skip_space = |mut i: usize| {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        i
    };
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() || "()+-*/%^,<>=!".contains(c) {
            i += 1;
        } else if c == '"' || c == '\'' || c == '`' {
            i = string_end(&chars, i, expr).0;
        } else if c == '[' {
            // A range or a subquery's range and step: durations, no names.
            let end = chars[i..]
                .iter()
                .position(|&c| c == ']')
                .unwrap_or_else(|| panic!("unclosed `[` in {expr}"));
            i += end + 1;
        } else if c == '{' {
            panic!("a selector without a metric name in {expr}: name every metric");
        } else if c.is_ascii_digit() || c == '.' {
            // A number or a duration (`0.99`, `1e3`, `5m`, `1h30m`).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if is_ident_start(c) {
            let start = i;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = skip_space(i);
            let call = next < chars.len() && chars[next] == '(';
            if LABEL_LISTS.contains(&word.as_str()) {
                if call {
                    let close = chars[next..]
                        .iter()
                        .position(|&c| c == ')')
                        .unwrap_or_else(|| panic!("unclosed `{word}(` in {expr}"));
                    let list: String = chars[next + 1..next + close].iter().collect();
                    out.grouping.extend(
                        list.split(',')
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .map(str::to_owned),
                    );
                    i = next + close + 1;
                }
            } else if AGGREGATIONS.contains(&word.as_str()) || KEYWORDS.contains(&word.as_str()) {
            } else if call {
                assert!(
                    FUNCTIONS.contains(&word.as_str()),
                    "`{word}(` is no PromQL function (in {expr})"
                );
            } else {
                let mut selector = Selector {
                    metric: word,
                    matchers: Vec::new(),
                };
                if next < chars.len() && chars[next] == '{' {
                    i = matchers(&chars, next, expr, &mut selector.matchers);
                }
                out.selectors.push(selector);
            }
        } else {
            panic!("unexpected `{c}` in {expr}");
        }
    }
    out
}

/// The index after the string literal opening at `i`, and its content.
fn string_end(chars: &[char], i: usize, expr: &str) -> (usize, String) {
    let quote = chars[i];
    let mut j = i + 1;
    let mut content = String::new();
    while j < chars.len() && chars[j] != quote {
        if chars[j] == '\\' && quote != '`' {
            j += 1;
        }
        content.push(chars[j]);
        j += 1;
    }
    assert!(j < chars.len(), "unclosed string in {expr}");
    (j + 1, content)
}

/// Reads `{label op "value", ...}` opening at `i`; returns the index after `}`.
fn matchers(
    chars: &[char],
    mut i: usize,
    expr: &str,
    out: &mut Vec<(String, String, String)>,
) -> usize {
    i += 1;
    loop {
        while i < chars.len() && (chars[i].is_whitespace() || chars[i] == ',') {
            i += 1;
        }
        assert!(i < chars.len(), "unclosed `{{` in {expr}");
        if chars[i] == '}' {
            return i + 1;
        }
        let start = i;
        while i < chars.len() && is_ident(chars[i]) {
            i += 1;
        }
        let label: String = chars[start..i].iter().collect();
        assert!(!label.is_empty(), "a matcher without a label in {expr}");
        while chars[i].is_whitespace() {
            i += 1;
        }
        let start = i;
        while "=!~".contains(chars[i]) {
            i += 1;
        }
        let op: String = chars[start..i].iter().collect();
        while chars[i].is_whitespace() {
            i += 1;
        }
        let (end, value) = string_end(chars, i, expr);
        out.push((label, op, value));
        i = end;
    }
}

// --- The board ---------------------------------------------------------------------------------

/// A query of the board: where it is (panel title), and its text.
struct Query {
    panel: String,
    expr: String,
}

/// Every panel, rows' nested panels included.
fn panels(board: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in list.as_array().into_iter().flatten() {
            out.push(panel);
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&board["panels"], &mut out);
    out
}

/// The queries of the board's panels, and those of its query variables.
fn queries(board: &Value) -> Vec<Query> {
    let mut out = Vec::new();
    for panel in panels(board) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if target["hide"] == true {
                continue;
            }
            let expr = target["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("a target without `expr` in {}", panel["title"]));
            out.push(Query {
                panel: panel["title"].as_str().unwrap_or_default().to_owned(),
                expr: expr.to_owned(),
            });
        }
    }
    out
}

/// A query variable's `label_values(metric{...}, label)`, as the selector it reads and the label.
fn variable_queries(board: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for var in board["templating"]["list"].as_array().into_iter().flatten() {
        if var["type"] != "query" {
            continue;
        }
        let query = match &var["query"] {
            Value::String(q) => q.clone(),
            q => q["query"].as_str().unwrap_or_default().to_owned(),
        };
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable {}: not label_values(...): {query}", var["name"]));
        let (selector, label) = inner.rsplit_once(',').unwrap();
        out.push((
            var["name"].as_str().unwrap().to_owned(),
            selector.trim().to_owned(),
            label.trim().to_owned(),
        ));
    }
    out
}

/// What Grafana substitutes before it sends a query to Prometheus.
fn interpolate(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__interval", "15s")
        .replace("$__range", "1h")
        .replace("${job}", ".+")
        .replace("$job", ".+")
        .replace("${instance}", ".+")
        .replace("$instance", ".+")
}

// --- The scrape --------------------------------------------------------------------------------

/// The exported families: name → (type, label name → values seen).
type Families = BTreeMap<String, (String, BTreeMap<String, BTreeSet<String>>)>;

fn families(text: &str) -> Families {
    let mut out = Families::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            out.insert(name.to_owned(), (kind.to_owned(), BTreeMap::new()));
        }
    }
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap();
        let series = &line[..name_end];
        let family = family_of(series, &out).unwrap_or_else(|| panic!("no family: {line}"));
        let labels = &mut out.get_mut(&family).unwrap().1;
        if line[name_end..].starts_with('{') {
            let Names { selectors, .. } = names(line.rsplit_once(' ').unwrap().0);
            for (label, _, value) in &selectors[0].matchers {
                labels
                    .entry(label.clone())
                    .or_default()
                    .insert(value.clone());
            }
        }
    }
    out
}

/// The family a series name belongs to (a histogram's `_bucket`, `_sum` and `_count` series
/// belong to it), if any.
fn family_of(series: &str, families: &Families) -> Option<String> {
    if families.contains_key(series) {
        return Some(series.to_owned());
    }
    ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
        let base = series.strip_suffix(suffix)?;
        let (kind, _) = families.get(base)?;
        (kind == "histogram" || (kind == "summary" && *suffix != "_bucket"))
            .then(|| base.to_owned())
    })
}

fn metrics(api: &str) -> String {
    let (status, text) = crate::support::get_text(&format!("{api}/metrics"), Some(TOKEN));
    assert_eq!(status, 200, "{text}");
    text
}

fn wait_runs(api: &str, n: u64) {
    eventually(&format!("{n} rebalance(s)"), WAIT, || {
        let (_, status) = get(&format!("{api}/v1/status"), Some(TOKEN));
        status["last_run"]["number"].as_u64().unwrap_or(0) >= n
    });
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

/// Runs SQL on the service's SQLite file beside it (WAL mode: another connection may write).
fn sqlite(path: &std::path::Path, sql: &'static str) {
    crate::support::block_on(async {
        use sqlx::ConnectOptions as _;
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .busy_timeout(Duration::from_secs(10))
            .connect()
            .await
            .unwrap();
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    });
}

/// The service under leadership with Redis (leader, term, publication), `balanceBy: messages`
/// with capacities (weighted loads, capacities, the certified gap), asked about messages
/// through `POST /v1/ingress`, through a bot going offline (moves), and through a commit the
/// database rejects (its history table renamed away for a moment): then every family the board
/// uses has samples. Returns the scrape.
fn driven_service_scrape() -> String {
    let redis = RedisServer::start();
    let dir = TempDir::new("grafana");
    dir.write("fleet.yaml", FLEET);
    let config = dir.write(
        "config.yaml",
        &format!(
            "database: {{url: \"sqlite://state.db\"}}\nsources: {{file: fleet.yaml}}\n\
             triggerDelays: {{startup: 0, botOnline: 0, botOffline: 0}}\n\
             api: {{bind: \"127.0.0.1:0\", token: {TOKEN}}}\n\
             balanceBy: messages\nweights: {{minGain: 0}}\n\
             botCapacity: {{\"1001\": 2, \"1002\": 100}}\n\
             redis: {{url: \"{}\"}}\n\
             leadership: {{instance: grafana-a, leaseTtl: 2}}\n",
            redis.url()
        ),
    );
    let service = InProcess::start(&config);
    let api = service.api.clone();
    wait_runs(&api, 1);

    // Messages asked about by each member bot: decisions, and weights counted.
    for k in 0..4 {
        for bot in [1001, 1002] {
            let ask = json!({"platform": "onebot", "self_id": bot, "user_id": 42,
                "group_id": 100001, "text": format!("hello {k}"), "time": 1_700_000_000 + k,
                "lane": "chat"});
            let (status, body) = post(&format!("{api}/v1/ingress"), Some(TOKEN), &ask);
            assert_eq!(status, 200, "{body}");
        }
    }

    // The database rejects the next commit (a table gone), and accepts it once it is back.
    let db = dir.join("state.db");
    sqlite(
        &db,
        "ALTER TABLE auto_assign_rebalance_platform RENAME TO grafana_away",
    );
    // Bot 1003 goes offline: its channels move (forced), a rebalance follows.
    dir.write("fleet.yaml", &fleet_with_offline(1003));
    wait_runs(&api, 2);
    let rejected = "auto_assign_store_commit_failures_total{failure=\"rejected\"}";
    eventually("a rejected commit counted", WAIT, || {
        sample(&metrics(&api), rejected).is_some()
    });
    sqlite(
        &db,
        "ALTER TABLE grafana_away RENAME TO auto_assign_rebalance_platform",
    );
    eventually("the rows committed after all", WAIT, || {
        let text = metrics(&api);
        sample(&text, "auto_assign_store_pending_rows") == Some(0.0)
            && sample(&text, "auto_assign_store_last_commit_age_seconds").is_some()
    });
    let text = metrics(&api);
    drop(service);
    text
}

#[test]
fn every_query_of_the_grafana_board_names_exported_metrics_and_parses() {
    crate::support::installed("promtool", "prometheus");
    let board: Value = serde_json::from_str(
        &std::fs::read_to_string(BOARD).unwrap_or_else(|e| panic!("{BOARD}: {e}")),
    )
    .unwrap_or_else(|e| panic!("{BOARD} is not JSON: {e}"));

    // Importable as is: the datasource is an input, every panel uses it.
    assert_eq!(board["__inputs"][0]["name"], "DS_PROMETHEUS");
    assert_eq!(board["__inputs"][0]["pluginId"], "prometheus");
    assert!(
        board["__requires"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == "prometheus")
    );
    assert!(board["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert!(board["schemaVersion"].as_u64().unwrap() >= 36);
    let all = panels(&board);
    let mut ids = BTreeSet::new();
    for panel in &all {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(!title.is_empty(), "a panel without a title: {panel}");
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "id twice: {title}"
        );
        assert!(panel["gridPos"]["w"].as_u64().is_some(), "{title}: gridPos");
        if panel["type"] != "row" {
            assert_eq!(
                panel["datasource"]["uid"], "${DS_PROMETHEUS}",
                "{title}: the imported datasource"
            );
            for target in panel["targets"].as_array().unwrap() {
                assert_eq!(target["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
            }
        }
    }
    let titles: Vec<String> = all
        .iter()
        .map(|p| p["title"].as_str().unwrap().to_lowercase())
        .collect();
    for topic in TOPICS {
        assert!(
            titles.iter().any(|t| t.contains(topic)),
            "no panel or row on {topic:?}: {titles:?}"
        );
    }
    let rows: Vec<&str> = all
        .iter()
        .filter(|p| p["type"] == "row")
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    assert_eq!(rows, ROWS);

    let queries = queries(&board);
    assert!(
        queries.len() >= MIN_QUERIES,
        "{} queries, fewer than {MIN_QUERIES}",
        queries.len()
    );

    let text = driven_service_scrape();
    let families = families(&text);
    // Labels every series has in Prometheus (the scrape target's), and a histogram's `le`.
    let target_labels = ["job", "instance"];

    let mut used = BTreeSet::new();
    let check = |panel: &str, expr: &str, used: &mut BTreeSet<String>| {
        let names = names(&interpolate(expr));
        assert!(!names.selectors.is_empty(), "{panel}: no metric in {expr}");
        let mut labels: BTreeSet<&str> = target_labels.into_iter().collect();
        for selector in &names.selectors {
            let family = family_of(&selector.metric, &families).unwrap_or_else(|| {
                panic!(
                    "{panel}: `{}` is not exported by the service (in {expr}); it exports: {:?}",
                    selector.metric,
                    families.keys().collect::<Vec<_>>()
                )
            });
            used.insert(family.clone());
            let (kind, family_labels) = &families[&family];
            if kind == "histogram" {
                labels.insert("le");
            }
            labels.extend(family_labels.keys().map(String::as_str));
            for (label, op, value) in &selector.matchers {
                if target_labels.contains(&label.as_str()) {
                    continue;
                }
                let values = family_labels.get(label).unwrap_or_else(|| {
                    panic!("{panel}: {family} has no label {label} (in {expr})")
                });
                if op == "=" {
                    assert!(
                        values.contains(value),
                        "{panel}: {family} has no series {label}=\"{value}\" (it has {values:?})"
                    );
                }
            }
        }
        for label in &names.grouping {
            assert!(
                labels.contains(label.as_str()),
                "{panel}: groups by {label}, which none of its metrics has (in {expr})"
            );
        }
    };
    for q in &queries {
        check(&q.panel, &q.expr, &mut used);
    }
    for (name, selector, label) in variable_queries(&board) {
        check(&format!("variable {name}"), &selector, &mut used);
        assert!(target_labels.contains(&label.as_str()), "variable {name}");
    }
    eprintln!(
        "{} queries on {} panels use {} exported families:",
        queries.len(),
        all.len(),
        used.len()
    );
    for family in &used {
        eprintln!("  {family}");
    }
    let unused: Vec<_> = families.keys().filter(|f| !used.contains(*f)).collect();
    eprintln!("exported in this scrape but not on the board: {unused:?}");

    // Every query parses: each one a recording rule that promtool checks.
    let dir = TempDir::new("grafana-rules");
    let mut rules = String::from("groups:\n  - name: grafana-board\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        rules += &format!(
            "      - record: grafana_board:query_{i}\n        expr: {}\n",
            serde_json::to_string(&interpolate(&q.expr)).unwrap()
        );
    }
    let path = dir.write("board-rules.yml", &rules);
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check rules: {}{}\n{rules}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("{} rules found", queries.len())),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn the_metric_name_reader_tells_metrics_from_functions_labels_and_durations() {
    let n = names(
        "histogram_quantile(0.99, sum by (le) (rate(a_seconds_bucket{job=~\"$job\"}[5m]))) \
         / on() group_left() sum without (x) (increase(b_total{kind=\"forced\", y!~'z'}[1h:1m] \
         offset 5m)) > bool 1e3 or vector(0) and c unless count_values(\"v\", d) ^ 2",
    );
    let metrics: Vec<&str> = n.selectors.iter().map(|s| s.metric.as_str()).collect();
    assert_eq!(metrics, ["a_seconds_bucket", "b_total", "c", "d"]);
    assert_eq!(
        n.selectors[1].matchers,
        [
            ("kind".into(), "=".into(), "forced".into()),
            ("y".into(), "!~".into(), "z".into())
        ]
    );
    assert_eq!(
        n.grouping,
        ["le", "x"].into_iter().map(String::from).collect()
    );
    assert!(
        std::panic::catch_unwind(|| names("rat(a[5m])")).is_err(),
        "a misspelt function"
    );
}
