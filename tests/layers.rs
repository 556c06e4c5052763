//! The floor plan, enforced: every workspace crate's top-level modules import only modules of
//! their own layer or below, as `layers.toml` (at the workspace root) assigns them, and never in a
//! cycle. `ARCHITECTURE.md` describes the same plan.
//!
//! The imports are read the way `module-cycles` (the outside reviewers' tool) reads them: a file
//! under `src/` belongs to the top-level module named by its first path segment (`src/foo.rs` and
//! `src/foo/**` are module `foo`); a `crate::bar` path in a file of `foo`, or a `bar` item of a
//! `use crate::{...}` group, is an edge `foo -> bar`. Comments (doc links included) and test code
//! do not count: files named `tests.rs`, files under a `tests/` directory, and every item marked
//! `#[cfg(test)]` (the tool drops the rest of the file from the first one; reading only the test
//! items themselves finds every import it finds, and those after a test-only helper too).
//!
//! The check fails when a module imports one of a higher layer, when modules import each other in
//! a cycle (possible within one layer), when a module of a crate is missing from `layers.toml`, or
//! when `layers.toml` names a crate or module that does not exist. Each message names the crate,
//! the modules and the `file:line` of the import.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// The layering file, relative to the workspace root.
const LAYERS_FILE: &str = "layers.toml";

/// For each crate (its directory relative to the root, `/`-separated), each module's layer.
type Layers = BTreeMap<String, BTreeMap<String, u32>>;

/// One import between two top-level modules of a crate.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Import {
    from: String,
    to: String,
    /// `file:line` of the import, relative to the workspace root.
    at: String,
}

/// What a crate's sources say: its top-level modules, and the imports between them.
#[derive(Debug, Default)]
struct CrateImports {
    modules: BTreeSet<String>,
    imports: Vec<Import>,
}

#[test]
fn top_level_modules_follow_the_committed_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let layers_path = root.join(LAYERS_FILE);
    let text = fs::read_to_string(&layers_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", layers_path.display()));
    let layers = parse_layers(&text).unwrap_or_else(|e| panic!("{LAYERS_FILE}: {e}"));
    let problems = check(root, &layers);
    assert!(
        problems.is_empty(),
        "{} layering problem(s) (fix the import, or change {LAYERS_FILE} and ARCHITECTURE.md \
         together):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_architecture_document_shows_the_operator_layers_of_the_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let layers = parse_layers(&fs::read_to_string(root.join(LAYERS_FILE)).expect("layers.toml"))
        .expect("layers.toml parses");
    let document = fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let drawn =
        drawn_layers(&document, "operator").unwrap_or_else(|e| panic!("ARCHITECTURE.md: {e}"));
    assert_eq!(
        &drawn, &layers["operator"],
        "the operator table of ARCHITECTURE.md (left) differs from [operator] in {LAYERS_FILE} \
         (right)"
    );
}

/// The layer of each module in the table between `<!-- layers:CRATE` and `<!-- /layers:CRATE
/// -->` of a document: lines `layer  room name  module module ...`, columns apart by two spaces
/// or more, under one header line.
fn drawn_layers(document: &str, crate_name: &str) -> Result<BTreeMap<String, u32>, String> {
    let open = format!("<!-- layers:{crate_name}");
    let close = format!("<!-- /layers:{crate_name} -->");
    let start = document.find(&open).ok_or(format!("no `{open}` marker"))?;
    let end = document[start..]
        .find(&close)
        .ok_or(format!("no `{close}` marker"))?
        + start;
    let mut drawn = BTreeMap::new();
    for line in document[start..end].lines() {
        let columns: Vec<&str> = line
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        let [layer, _room, modules] = columns[..] else {
            continue;
        };
        let Ok(layer) = layer.parse::<u32>() else {
            continue;
        };
        for module in modules.split_whitespace() {
            if drawn.insert(module.to_string(), layer).is_some() {
                return Err(format!("module `{module}` drawn twice"));
            }
        }
    }
    Ok(drawn)
}

#[test]
fn a_cycle_an_upward_import_and_unlisted_modules_are_reported() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let src = dir.path().join("app/src");
    fs::create_dir_all(src.join("low/tests")).expect("create src");
    fs::write(dir.path().join("app/Cargo.toml"), "[package]\n").expect("write");
    fs::write(
        src.join("lib.rs"),
        "pub mod low;\npub mod high;\npub mod extra;\n",
    )
    .expect("write");
    fs::write(src.join("unlisted.rs"), "").expect("write");
    // low -> high is upward; high -> low closes a cycle; the doc comment, the test module and
    // the tests/ directory are not imports.
    fs::write(
        src.join("low.rs"),
        "//! See [`crate::extra`].\nuse crate::{high::Thing, other};\n\
         #[cfg(test)]\nmod tests { use crate::extra; }\n#[cfg(test)]\nmod more_tests;\n\
         fn after_tests() { crate::high::f(); }\n",
    )
    .expect("write");
    fs::write(src.join("low/tests/t.rs"), "use crate::extra;\n").expect("write");
    fs::write(src.join("high.rs"), "\n\nfn f() { crate::low::g(); }\n").expect("write");
    fs::write(src.join("extra.rs"), "/* crate::low */\n").expect("write");
    let layers =
        parse_layers("[app]\nlow = 0\nhigh = 1\nextra = 2\nother = 0\ngone = 2\n").expect("parse");

    let problems = check(dir.path(), &layers).join("\n");

    for expected in [
        "app: module `low` (layer 0) imports `high` (layer 1) at app/src/low.rs:2",
        "app: cycle between modules high, low: high -> low (app/src/high.rs:3), low -> high \
         (app/src/low.rs:2)",
        "app: module `unlisted` (app/src/unlisted.rs) is missing from layers.toml",
        "app: layers.toml names module `gone`, which does not exist",
    ] {
        assert!(
            problems.contains(expected),
            "expected {expected:?} in:\n{problems}"
        );
    }
    assert!(!problems.contains("imports `extra`"), "{problems}");
    assert!(
        problems.contains("imports `high` (layer 1) at app/src/low.rs:7"),
        "code after a test module is read: {problems}"
    );
}

#[test]
fn a_malformed_layers_file_names_the_line() {
    let error = parse_layers("[app]\nlow = zero\n").expect_err("not a number");
    assert_eq!(
        error,
        "line 2: expected `module = <layer number>`, found `low = zero`"
    );
    let error = parse_layers("low = 0\n").expect_err("no section");
    assert_eq!(error, "line 1: `low` comes before any `[crate]` section");
}

/// Every problem of the workspace at `root` against `layers`, one message each.
fn check(root: &Path, layers: &Layers) -> Vec<String> {
    let mut problems = Vec::new();
    let crates = crates(root);
    for name in layers.keys() {
        if !crates.contains_key(name) {
            problems.push(format!(
                "{LAYERS_FILE} names crate `{name}`, which does not exist (no {name}/Cargo.toml \
                 with src/lib.rs or src/main.rs)"
            ));
        }
    }
    for (name, dir) in &crates {
        let found = scan(root, dir);
        let Some(plan) = layers.get(name) else {
            problems.push(format!(
                "crate `{name}` is missing from {LAYERS_FILE} (modules: {})",
                found.modules.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
            continue;
        };
        check_crate(name, &found, plan, &mut problems);
    }
    problems
}

fn check_crate(
    name: &str,
    found: &CrateImports,
    plan: &BTreeMap<String, u32>,
    problems: &mut Vec<String>,
) {
    for module in &found.modules {
        if !plan.contains_key(module) {
            problems.push(format!(
                "{name}: module `{module}` ({name}/src/{module}.rs) is missing from {LAYERS_FILE}"
            ));
        }
    }
    for module in plan.keys() {
        if !found.modules.contains(module) {
            problems.push(format!(
                "{name}: {LAYERS_FILE} names module `{module}`, which does not exist"
            ));
        }
    }
    for import in &found.imports {
        match (plan.get(&import.from), plan.get(&import.to)) {
            (Some(from), Some(to)) if from < to => problems.push(format!(
                "{name}: module `{}` (layer {from}) imports `{}` (layer {to}) at {}",
                import.from, import.to, import.at
            )),
            (Some(_), None) if !found.modules.contains(&import.to) => problems.push(format!(
                "{name}: module `{}` imports `crate::{}`, which is not a top-level module, at {}",
                import.from, import.to, import.at
            )),
            _ => {}
        }
    }
    for cycle in cycles(&found.imports) {
        let members: BTreeSet<&str> = cycle.iter().map(String::as_str).collect();
        let mut edges = String::new();
        let mut seen = BTreeSet::new();
        for import in &found.imports {
            if members.contains(import.from.as_str())
                && members.contains(import.to.as_str())
                && seen.insert((&import.from, &import.to))
            {
                if !edges.is_empty() {
                    edges.push_str(", ");
                }
                let _ = write!(edges, "{} -> {} ({})", import.from, import.to, import.at);
            }
        }
        problems.push(format!(
            "{name}: cycle between modules {}: {edges}",
            cycle.join(", ")
        ));
    }
}

/// The workspace's crates as the reviewers' tool finds them: every directory (outside `target`,
/// `.git` and `node_modules`) with a `Cargo.toml` and a `src/lib.rs` or `src/main.rs`, named by
/// its path relative to `root` (`.` for the root package).
fn crates(root: &Path) -> BTreeMap<String, PathBuf> {
    let mut found = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let src = dir.join("src");
        if dir.join("Cargo.toml").is_file()
            && (src.join("lib.rs").is_file() || src.join("main.rs").is_file())
        {
            found.insert(relative(root, &dir), dir.clone());
        }
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let skipped = matches!(
                entry.file_name().to_str(),
                Some("target" | ".git" | "node_modules")
            );
            if path.is_dir() && !skipped {
                pending.push(path);
            }
        }
    }
    found
}

/// `path` relative to `root`, `/`-separated (`.` for the root itself).
fn relative(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    let parts: Vec<_> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    }
}

/// The top-level modules of the crate in `dir` and the imports between them.
fn scan(root: &Path, dir: &Path) -> CrateImports {
    let src = dir.join("src");
    let mut result = CrateImports::default();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    for path in files {
        let rel = path.strip_prefix(&src).unwrap_or(&path);
        let Some(module) = module_of(rel) else {
            continue;
        };
        result.modules.insert(module.clone());
        let text = fs::read(&path).map(|b| String::from_utf8_lossy(&b).into_owned());
        let text = text.unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let at = relative(root, &path);
        let mut hits = imports(&text);
        hits.sort();
        for (line, target) in hits {
            if target != module && target != "self" && target != "super" {
                result.imports.push(Import {
                    from: module.clone(),
                    to: target,
                    at: format!("{at}:{line}"),
                });
            }
        }
    }
    result
}

/// The non-test `.rs` files under `dir`: files named `tests.rs` and directories named `tests` are
/// test code.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "tests" {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// The top-level module a file (relative to `src/`) belongs to; `None` for `lib.rs`/`main.rs`.
fn module_of(rel: &Path) -> Option<String> {
    let mut parts = rel.iter();
    let first = parts.next()?.to_string_lossy().into_owned();
    if parts.next().is_some() {
        return Some(first);
    }
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (name != "lib" && name != "main").then_some(name)
}

/// The `crate::` imports of a file's non-test, non-comment text: (line, first path segment).
fn imports(text: &str) -> Vec<(usize, String)> {
    let code = without_test_items(&without_comments(text));
    let bytes = code.as_bytes();
    let line_at = |pos: usize| code[..pos].matches('\n').count() + 1;
    let mut hits = Vec::new();
    for (pos, _) in code.match_indices("crate::") {
        if pos > 0 && is_word(bytes[pos - 1]) {
            continue;
        }
        let name = lowercase_name(&code[pos + "crate::".len()..]);
        if !name.is_empty() {
            hits.push((line_at(pos), name.to_string()));
        }
    }
    for (pos, _) in code.match_indices("use") {
        if (pos > 0 && is_word(bytes[pos - 1]))
            || !bytes.get(pos + 3).is_some_and(u8::is_ascii_whitespace)
        {
            continue;
        }
        let rest = code[pos + 3..].trim_start();
        let Some(group) = rest.strip_prefix("crate::{") else {
            continue;
        };
        let span = &group[..group.find(';').unwrap_or(group.len())];
        let Some(end) = span.rfind('}') else {
            continue;
        };
        for item in span[..end].split(',') {
            let head = item.trim().split("::").next().unwrap_or("").trim();
            if !head.is_empty() && lowercase_name(head) == head {
                hits.push((line_at(pos), head.to_string()));
            }
        }
    }
    hits
}

/// `//` comments to the end of their line and `/* */` comments blanked out (line breaks kept),
/// as the reviewers' tool strips them (it does not parse string literals either).
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = &rest[l..];
                rest = &rest[rest.find('\n').unwrap_or(rest.len())..];
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                let end = rest[b + 2..]
                    .find("*/")
                    .map_or(rest.len(), |e| b + 2 + e + 2);
                out.extend(rest[b..end].chars().filter(|c| *c == '\n'));
                rest = &rest[end..];
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

/// Every item marked `#[cfg(test)]` blanked out (line breaks kept): the attribute and the item
/// after it, up to its `;` (`mod tests;`) or the end of its braces (`mod tests { .. }`, a test
/// helper `fn`). The reviewers' tool drops everything after the first `#[cfg(test)]` of a file
/// instead, so code after a test-only helper in the middle of a file would escape it; this reads
/// a superset of its imports.
fn without_test_items(code: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(start) = rest.find(MARK) {
        out.push_str(&rest[..start]);
        let item = &rest[start + MARK.len()..];
        let semicolon = item.find(';');
        let end = match item.find('{') {
            Some(open) if semicolon.is_none_or(|s| open < s) => {
                let mut depth = 0usize;
                let close = item[open..].char_indices().find_map(|(i, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    (depth == 0).then_some(open + i + 1)
                });
                close.unwrap_or(item.len())
            }
            _ => semicolon.map_or(item.len(), |s| s + 1),
        };
        let skipped = &rest[start..start + MARK.len() + end];
        out.extend(skipped.chars().filter(|c| *c == '\n'));
        rest = &rest[start + MARK.len() + end..];
    }
    out.push_str(rest);
    out
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The longest prefix of `text` matching `[a-z_][a-z0-9_]*`.
fn lowercase_name(text: &str) -> &str {
    let len = text
        .bytes()
        .enumerate()
        .take_while(|(i, b)| b.is_ascii_lowercase() || *b == b'_' || (*i > 0 && b.is_ascii_digit()))
        .count();
    &text[..len]
}

/// The groups of modules that import each other in a cycle (strongly connected components of
/// more than one module), each sorted.
fn cycles(imports: &[Import]) -> Vec<Vec<String>> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for import in imports {
        graph.entry(&import.from).or_default().insert(&import.to);
        graph.entry(&import.to).or_default();
    }
    // A module is in a cycle with every module that reaches it and that it reaches.
    let reach = |start: &str| {
        let mut seen = BTreeSet::new();
        let mut pending = vec![start];
        while let Some(node) = pending.pop() {
            for next in &graph[node] {
                if seen.insert(*next) {
                    pending.push(next);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&str, BTreeSet<&str>> = graph.keys().map(|n| (*n, reach(n))).collect();
    let mut placed: BTreeSet<&str> = BTreeSet::new();
    let mut found = Vec::new();
    for &node in graph.keys() {
        if placed.contains(node) {
            continue;
        }
        let group: Vec<&str> = graph
            .keys()
            .copied()
            .filter(|&other| {
                other == node || (reaches[node].contains(other) && reaches[other].contains(node))
            })
            .collect();
        placed.extend(group.iter().copied());
        if group.len() > 1 {
            found.push(group.iter().map(|n| (*n).to_string()).collect());
        }
    }
    found
}

/// Parses the layering file: `[crate]` sections (the crate's directory relative to the root,
/// quoted when it has a `/`), each with `module = layer` lines; `#` starts a comment.
fn parse_layers(text: &str) -> Result<Layers, String> {
    let mut layers = Layers::new();
    let mut current: Option<String> = None;
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = section.trim().trim_matches('"').to_string();
            if layers.insert(name.clone(), BTreeMap::new()).is_some() {
                return Err(format!("line {number}: crate `{name}` appears twice"));
            }
            current = Some(name);
            continue;
        }
        let parsed = line
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim().parse::<u32>()));
        let Some((module, Ok(layer))) = parsed else {
            return Err(format!(
                "line {number}: expected `module = <layer number>`, found `{line}`"
            ));
        };
        let Some(section) = &current else {
            return Err(format!(
                "line {number}: `{module}` comes before any `[crate]` section"
            ));
        };
        let plan = layers.get_mut(section).expect("the current section exists");
        if plan.insert(module.to_string(), layer).is_some() {
            return Err(format!(
                "line {number}: module `{module}` appears twice in `[{section}]`"
            ));
        }
    }
    Ok(layers)
}
