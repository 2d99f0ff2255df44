//! The docs and the comments name only what exists: every repository path they cite
//! (`src/…`, `tests/…`, `docs/…`, `scripts/…`, …; from the repository's root, or from the
//! citing file's folder) and every relative Markdown link, with its anchor.

use std::path::{Path, PathBuf};

/// The top-level folders whose paths a text may cite.
const ROOTS: [&str; 8] = [
    "src/",
    "tests/",
    "docs/",
    "scripts/",
    "examples/",
    "migrations/",
    "integrations/",
    "packaging/",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files(dir: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if name.starts_with('.') || name == "node_modules" || name == "target" {
            continue;
        }
        if path.is_dir() {
            files(&path, keep, out);
        } else if keep(&path) {
            out.push(path);
        }
    }
}

/// The texts that cite paths: the README, the docs book, the plugins' READMEs, the
/// manifest, and the Rust sources and tests (comments included).
fn texts() -> Vec<PathBuf> {
    let root = repo();
    let mut out = vec![root.join("README.md"), root.join("Cargo.toml")];
    let ext = |p: &Path, e: &[&str]| {
        p.extension()
            .is_some_and(|x| e.iter().any(|e| x == std::ffi::OsStr::new(e)))
    };
    files(&root.join("docs"), &|p| ext(p, &["md"]), &mut out);
    files(&root.join("src"), &|p| ext(p, &["rs"]), &mut out);
    files(&root.join("tests"), &|p| ext(p, &["rs"]), &mut out);
    for plugin in ["integrations/koishi", "integrations/nonebot"] {
        files(
            &root.join(plugin),
            &|p| {
                p.parent() == Some(&root.join(plugin))
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("README"))
            },
            &mut out,
        );
    }
    out
}

/// Repository paths cited in `text`: a root folder followed by path characters, without
/// trailing punctuation, an anchor or a line number. Patterns (`*`, `<name>`, `{a,b}`) and
/// paths under a runtime folder are not citations of a file.
fn cited(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for root in ROOTS {
        let mut from = 0;
        while let Some(at) = text[from..].find(root) {
            let start = from + at;
            from = start + root.len();
            let before = text[..start].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || "_-./~$".contains(c)) {
                continue;
            }
            let path: String = text[start..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "_-./*<>{}".contains(*c))
                .collect();
            let path = path.trim_end_matches(['.', ',']);
            if path.contains(['*', '<', '>', '{', '}']) || path.len() <= root.len() {
                continue;
            }
            out.push(path.to_owned());
        }
    }
    out
}

/// Relative Markdown links (`](path)`, `](path#anchor)`, `](#anchor)`), resolved against the
/// file's folder: (the file linked, the anchor if any).
fn links(file: &Path, text: &str) -> Vec<(PathBuf, Option<String>)> {
    let dir = file.parent().unwrap();
    text.match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &text[i + 2..];
            let target = rest[..rest.find(')')?].trim();
            if target.contains("://") || target.starts_with("mailto:") {
                return None;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor.to_owned())),
                None => (target, None),
            };
            let file = if path.is_empty() {
                file.to_owned()
            } else {
                dir.join(path)
            };
            Some((file, anchor))
        })
        .collect()
}

/// The anchors of a Markdown file: its headings as GitHub names them (lower case, spaces to
/// hyphens, punctuation dropped, a repeated heading numbered), and explicit `<a id="…">`s.
fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && line.starts_with('#') {
            let title = line.trim_start_matches('#').trim();
            let slug: String = title
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            let seen = out.iter().filter(|a| **a == slug).count();
            out.push(if seen == 0 {
                slug.clone()
            } else {
                format!("{slug}-{seen}")
            });
        }
        let mut rest = line;
        while let Some(at) = rest.find("<a id=\"") {
            let after = &rest[at + 7..];
            let Some(end) = after.find('"') else { break };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_cited_path_and_link_exists() {
    let root = repo();
    let mut missing = Vec::new();
    for file in texts() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(&root).unwrap().display().to_string();
        // A plugin's README cites its own files from its folder.
        let here = file.parent().unwrap();
        for path in cited(&text) {
            if !root.join(&path).exists() && !here.join(&path).exists() {
                missing.push(format!("{name}: {path}"));
            }
        }
        if file.extension().is_some_and(|e| e == "md") {
            for (link, anchor) in links(&file, &text) {
                if !link.exists() {
                    missing.push(format!("{name}: link {}", link.display()));
                    continue;
                }
                let Some(anchor) = anchor.filter(|_| link.extension().is_some_and(|e| e == "md"))
                else {
                    continue;
                };
                let target = std::fs::read_to_string(&link).unwrap();
                if !anchors(&target).contains(&anchor) {
                    missing.push(format!("{name}: link {}#{anchor}", link.display()));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "cited but missing:\n{}",
        missing.join("\n")
    );
}

#[test]
fn citations_are_found_where_they_stand() {
    let text = "see `src/engine/` and src/view/mod.rs, docs/operations.md#api; not \
                data/src/x.rs nor tests/it/<name>.rs nor src/bench/*.rs.";
    assert_eq!(
        cited(text),
        ["src/engine/", "src/view/mod.rs", "docs/operations.md"]
    );
    let links = links(
        Path::new("/r/docs/a.md"),
        "[b](b.md#x) [w](https://x/y) [c](../c) [d](#d)",
    );
    assert_eq!(
        links,
        [
            (PathBuf::from("/r/docs/b.md"), Some("x".to_owned())),
            (PathBuf::from("/r/docs/../c"), None),
            (PathBuf::from("/r/docs/a.md"), Some("d".to_owned())),
        ]
    );
    let anchors = anchors(
        "# The book\n## `auto-assign serve` (start)\n```\n# not a heading\n```\n\
         ## Takeover bench: --takeover\n## The book\n<a id=\"install\"></a>\n## 安装 Install",
    );
    assert_eq!(
        anchors,
        [
            "the-book",
            "auto-assign-serve-start",
            "takeover-bench---takeover",
            "the-book-1",
            "install",
            "安装-install"
        ]
    );
}
