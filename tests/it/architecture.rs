//! The arrows run one way: `main → service → engine → config → api → parts → core`, each
//! top-level module on a floor of [`FLOORS`] and importing only modules on lower floors.
//!
//! Drawn from the sources themselves: every path a file names (`crate::…`, `super::…`,
//! `self::…`) is an arrow from that file to the file defining the module named. A module's
//! use of the children it declares is containment, not an arrow (a `mod.rs` may re-export
//! them), and a file's unit tests are left out. Comments are left out: a doc link is not an
//! import. The graph of files must have no circle, and the graph of top-level modules must
//! run down the floors: no part imports `config`, `api`, `engine` or `service` (each part owns
//! its settings; `config` only gathers them, the API reads the parts' status through `status`
//! and asks the engine through `engine_handle`), and shared infrastructure (the Redis
//! connection, the store's fence) stands below every part that uses it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path (`["api", "shared"]`) → its file.
type Modules = BTreeMap<Vec<String>, PathBuf>;

fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source without comments (line comments, doc comments and block comments).
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |i| &after[i..]);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |i| &after[i + 2..]);
        } else if rest.starts_with('"') {
            // Strings may hold `//` (URLs): copied through to their end.
            let end = rest[1..]
                .char_indices()
                .scan(false, |escaped, (i, c)| {
                    let done = !*escaped && c == '"';
                    *escaped = !*escaped && c == '\\';
                    Some((i, done))
                })
                .find(|&(_, done)| done)
                .map_or(rest.len(), |(i, _)| i + 2);
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn is_ident(word: &str) -> bool {
    !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Paths that follow `prefix` in `code`, as lists of identifiers; a `{…}` group yields one
/// path per member.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find(prefix) {
        let start = from + i;
        from = start + prefix.len();
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &code[from..];
        let head: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let mut base: Vec<String> = head
            .split("::")
            .filter(|w| is_ident(w))
            .map(str::to_owned)
            .collect();
        let after = &rest[head.len()..];
        if (head.is_empty() || head.ends_with("::")) && after.starts_with('{') {
            let group = &after[1..after.find('}').unwrap_or(after.len())];
            for member in group.split(',') {
                let member: Vec<String> = member
                    .trim()
                    .split("::")
                    .filter(|w| is_ident(w))
                    .map(str::to_owned)
                    .collect();
                out.push(base.iter().cloned().chain(member).collect());
            }
        } else {
            out.push(std::mem::take(&mut base));
        }
    }
    out
}

/// The longest prefix of `path` that is a module.
fn resolve(modules: &Modules, path: &[String]) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains_key(p))
}

fn graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    // The binary is a crate of its own (it names the library `auto_assign::`).
    files.retain(|f| f != &src.join("main.rs"));
    let modules: Modules = files
        .iter()
        .map(|f| (module_of(&src, f), f.clone()))
        .collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, file) in &modules {
        let code = code(&std::fs::read_to_string(file).unwrap());
        // A file's unit tests (its trailing `#[cfg(test)] mod tests`) are not product code.
        let code = match code.find("#[cfg(test)]\nmod tests") {
            Some(at) => code[..at].to_owned(),
            None => code,
        };
        let is_dir_module = file.file_stem().is_some_and(|s| s == "mod")
            || file
                .file_name()
                .is_some_and(|n| n == "lib.rs" || n == "main.rs");
        // `super` of a file is its directory's module; of a `mod.rs`, the one above.
        let parent: Vec<String> = module[..module.len() - usize::from(!module.is_empty())].to_vec();
        let parent = if is_dir_module && !module.is_empty() {
            module[..module.len() - 1].to_vec()
        } else {
            parent
        };
        let here = module.clone();
        let mut named = Vec::new();
        named.extend(paths_after(&code, "crate::"));
        for p in paths_after(&code, "super::") {
            named.push(parent.iter().cloned().chain(p).collect());
        }
        for p in paths_after(&code, "self::") {
            named.push(here.iter().cloned().chain(p).collect());
        }
        let to = edges.entry(module.clone()).or_default();
        for path in named {
            if let Some(target) = resolve(&modules, &path)
                && &target != module
            {
                to.insert(target);
            }
        }
    }
    edges
}

fn top(module: &[String]) -> Option<&str> {
    module.first().map(String::as_str)
}

fn name(module: &[String]) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

/// A circle through `start`, if there is one.
fn circle(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    start: &Vec<String>,
) -> Option<Vec<Vec<String>>> {
    let mut stack = vec![(start.clone(), vec![start.clone()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in edges.get(&at).into_iter().flatten() {
            if next == start {
                return Some(path.clone());
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

#[test]
fn no_file_of_src_is_in_a_circle_of_imports() {
    let edges = graph();
    assert!(
        edges.len() > 50,
        "the sources were read: {} modules",
        edges.len()
    );
    let circles: Vec<String> = edges
        .keys()
        .filter_map(|m| circle(&edges, m))
        .map(|c| {
            let names: Vec<String> = c.iter().map(|m| name(m)).collect();
            format!("{} → {}", names.join(" → "), names[0])
        })
        .collect();
    assert!(circles.is_empty(), "circles:\n{}", circles.join("\n"));
}

#[test]
fn no_part_imports_the_shell() {
    let edges = graph();
    let shell = ["config", "api", "engine", "service"];
    // The shell itself and the crate's map; the bench, the test kit and the fuzz targets drive
    // the whole service (or its config) as a user would.
    let exempt = |m: &[String]| {
        m.is_empty()
            || matches!(
                top(m),
                Some("config" | "api" | "engine" | "service" | "bench" | "testkit" | "fuzz")
            )
    };
    let mut wrong = Vec::new();
    for (from, targets) in &edges {
        if exempt(from) {
            continue;
        }
        for to in targets {
            if top(to).is_some_and(|t| shell.contains(&t)) {
                wrong.push(format!("{} → {}", name(from), name(to)));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "parts importing the shell:\n{}",
        wrong.join("\n")
    );
}

/// The floors, ground first. A top-level module imports only modules on lower floors; a new
/// module takes the lowest floor above everything it imports.
const FLOORS: &[&[&str]] = &[
    // Helpers that import nothing of the crate.
    &[
        "model",
        "yaml",
        "secret",
        "clock",
        "backoff",
        "logs",
        "pages",
        "presence",
        "file_watch",
        "operator",
    ],
    // Shared infrastructure and the core's data: the Redis connection, the store (with the
    // leader's fence), the fleet index, the view, the triggers.
    &["redis_conn", "store", "index", "view", "triggers"],
    // The planner, message counts, the Redis publication.
    &["balance", "traffic", "publication"],
    // Parts built on those.
    &["explain", "dry_run", "pallas", "leader", "cli"],
    &["source", "status", "metrics", "engine_handle", "testkit"],
    // The shell.
    &["api"],
    &["config"],
    &["engine", "fuzz"],
    &["service"],
    &["bench"],
];

fn floor(top: &str) -> Option<usize> {
    FLOORS.iter().position(|f| f.contains(&top))
}

#[test]
fn every_import_runs_down_the_floors() {
    let edges = graph();
    let mut wrong = Vec::new();
    for (from, targets) in &edges {
        let Some(from_top) = top(from) else { continue };
        let Some(from_floor) = floor(from_top) else {
            wrong.push(format!("{from_top}: on no floor (add it to FLOORS)"));
            continue;
        };
        for to in targets {
            let Some(to_top) = top(to).filter(|&t| t != from_top) else {
                continue;
            };
            match floor(to_top) {
                Some(to_floor) if to_floor < from_floor => {}
                Some(to_floor) => wrong.push(format!(
                    "{} (floor {from_floor}) → {} (floor {to_floor})",
                    name(from),
                    name(to)
                )),
                None => wrong.push(format!("{to_top}: on no floor (add it to FLOORS)")),
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "imports that do not run down:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_reader_sees_imports_and_not_comments() {
    let code = code(
        "// use crate::a;\nuse crate::{b::C, d};\n/* crate::e */ let s = \"//\"; super::f::g();",
    );
    assert_eq!(
        paths_after(&code, "crate::"),
        [vec!["b".to_owned(), "C".to_owned()], vec!["d".to_owned()]]
    );
    assert_eq!(
        paths_after(&code, "super::"),
        [vec!["f".to_owned(), "g".to_owned()]]
    );
}
