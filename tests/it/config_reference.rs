//! The configuration reference (`docs/configuration.md`) and the code in step: every key the
//! config accepts is in the reference table, and every key the table lists is accepted.
//!
//! No key list is written here: the accepted keys are read from the config parser itself. Every
//! section denies unknown fields, so an unknown key in a section is an error that lists the
//! section's fields (serde's "unknown field `x`, expected one of `a`, `b`, ..."). The test feeds
//! such a key at the top level, then inside each field's value, once as a mapping and once as a
//! list of mappings: a field whose value then reports an unknown field of its own is a section
//! (`sources`, `sources.onebot.connections[]`) and is explored in turn; any other field is a
//! key the reference must list. Free-form maps (`channelBotPriority`, `federate.commandIds`)
//! take any key, so they are keys, listed once. Sections may be listed too (`redis`, `federate`:
//! what it means to leave them out), but need not be.

use std::collections::BTreeSet;
use std::path::Path;

use auto_assign::config::Config;

const PROBE: &str = "zzzUnknownKey";

/// Where a key is: its fields from the top, `name[]` for each entry of a list.
type KeyPath = Vec<String>;

/// The key as the reference writes it: `sources.onebot.connections[].url`.
fn dotted(path: &[String]) -> String {
    path.join(".")
}

/// The key as the parser's errors write it: `sources.onebot.connections[0]`.
fn as_in_errors(path: &[String]) -> String {
    path.join(".").replace("[]", "[0]")
}

/// A config holding `inner` at `path`, in YAML's flow style:
/// `{sources: {onebot: {connections: [{zzzUnknownKey: 1}]}}}`.
fn nest(path: &[String], inner: &str) -> String {
    path.iter().rev().fold(inner.to_owned(), |inner, key| {
        match key.strip_suffix("[]") {
            Some(list) => format!("{{{list}: [{inner}]}}"),
            None => format!("{{{key}: {inner}}}"),
        }
    })
}

/// The fields of the section at `path`, from the error an unknown key inside it causes; `None`
/// when the value at `path` is not a section (it takes the unknown key, or refuses it for
/// another reason: a number, a list of strings, a map whose values are lists).
fn section_fields(path: &[String]) -> Option<Vec<String>> {
    let text = nest(path, &format!("{{{PROBE}: 1}}"));
    let error = Config::parse(Path::new("config.yaml"), &text)
        .err()?
        .to_string();
    // config.yaml: sources.onebot.zzzUnknownKey: unknown field `zzzUnknownKey`, expected one
    // of `accessToken`, `connections`, ... at line L column C
    let unknown = format!(": unknown field `{PROBE}`, ");
    let (place, expected) = error.split_once(&unknown)?;
    let at = match path {
        [] => format!("config.yaml: {PROBE}"),
        _ => format!("config.yaml: {}.{PROBE}", as_in_errors(path)),
    };
    assert_eq!(
        place, at,
        "{text:?}: an unknown field somewhere else: {error}"
    );
    // serde writes "expected `a`", "expected `a` or `b`", "expected one of `a`, `b`, ...", or
    // "there are no fields"; the position follows.
    let expected = expected.split(" at line ").next().unwrap_or(expected);
    let fields: Vec<String> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(
        !fields.is_empty() || expected.starts_with("there are no fields"),
        "{text:?}: no field list in {error:?}"
    );
    Some(fields)
}

/// Every key the config accepts under `path` (whose fields are `fields`): the keys into
/// `keys`, the sections into `sections`.
fn explore(
    path: &mut KeyPath,
    fields: Vec<String>,
    keys: &mut BTreeSet<String>,
    sections: &mut BTreeSet<String>,
) {
    for field in fields {
        // A section as a mapping, or a list of sections, or else a key.
        let found = [field.clone(), format!("{field}[]")]
            .into_iter()
            .find_map(|name| {
                path.push(name);
                let inner = section_fields(path);
                let name = path.pop().unwrap();
                inner.map(|inner| (name, inner))
            });
        match found {
            Some((name, inner)) => {
                path.push(name);
                sections.insert(dotted(path));
                explore(path, inner, keys, sections);
                path.pop();
            }
            None => {
                path.push(field);
                keys.insert(dotted(path));
                path.pop();
            }
        }
    }
}

/// The keys of the one `| key | default | meaning |` table of `docs/configuration.md`, in
/// order, backticks removed.
fn documented() -> Vec<String> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
    let header = "| key | default | meaning |";
    let tables = text.lines().filter(|l| l.trim() == header).count();
    assert_eq!(
        tables, 1,
        "{file:?}: one reference table `{header}`, not {tables}"
    );
    text.lines()
        .skip_while(|l| l.trim() != header)
        .skip(2) // the header and `|---|---|---|`
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cell = row.split('|').nth(1).unwrap_or_default().trim();
            cell.trim_matches('`').to_owned()
        })
        .collect()
}

#[test]
fn the_reference_lists_every_accepted_key_and_only_those() {
    let top = section_fields(&[]).expect("an unknown top-level key is an unknown-field error");
    let (mut keys, mut sections) = (BTreeSet::new(), BTreeSet::new());
    explore(&mut Vec::new(), top, &mut keys, &mut sections);

    let listed = documented();
    let mut seen = BTreeSet::new();
    let twice: Vec<&String> = listed.iter().filter(|k| !seen.insert(*k)).collect();
    let listed: BTreeSet<String> = listed.iter().cloned().collect();
    let missing: Vec<&String> = keys.difference(&listed).collect();
    let unknown: Vec<&String> = listed
        .iter()
        .filter(|k| !keys.contains(*k) && !sections.contains(*k))
        .collect();
    assert!(
        missing.is_empty() && unknown.is_empty() && twice.is_empty(),
        "docs/configuration.md and the config disagree:\n\
         accepted but not in the reference table: {missing:?}\n\
         in the table but not accepted: {unknown:?}\n\
         in the table twice: {twice:?}\n\
         (accepted keys: {keys:?}; sections: {sections:?})"
    );
    // What the table is checked against: the sections were found, not taken for keys.
    for key in [
        "triggerDelays.botOffline",
        "sources.onebot.startupWait",
        "sources.onebot.connections[].url",
        "redis.url",
        "channelBotPriority",
    ] {
        assert!(keys.contains(key), "{key} not found among {keys:?}");
    }
}
