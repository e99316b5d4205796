//! The shape of the code, checked: no import cycles between the modules of windlass and of
//! the other library crates of the workspace, and no dependency cycle between the crates
//! (dev-dependencies included).
//!
//! A cycle means two modules can only be understood, tested and changed together. This test
//! reads every `.rs` file under `src/`, collects which modules each one names (`use crate::…`,
//! `crate::…` paths in code, `super::…`), and looks for cycles between modules: the
//! top-level ones (a module and its own submodules aside) and the files of one folder. There
//! are none; [`KNOWN`] would list one that had to be tolerated for a while, and a listed one
//! that is gone fails the test too (take it off the list).
//!
//! Hand-written rather than with a graph crate: a reader of import lines and Tarjan's
//! algorithm are all it needs, and a test should not add a dependency.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Cycles that exist and are to be removed, each as its sorted members. Empty: windlass has
/// none, and a new one fails the test.
const KNOWN: &[&[&str]] = &[];

/// A module path such as `runtime::cache`, from a file under `src/`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && stem != "lib" {
            parts.push(stem.to_string());
        }
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments, string literals and `#[cfg(test)]` modules: what
/// the module itself depends on.
fn code_of(text: &str) -> String {
    let mut code = String::new();
    let mut skipping_tests = false;
    let mut depth = 0usize;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            skipping_tests = true;
            depth = 0;
            continue;
        }
        if skipping_tests {
            depth += line.matches('{').count();
            let closing = line.matches('}').count();
            // A `mod tests;` line, or the test module's block closing.
            if depth == 0 && trimmed.ends_with(';') {
                skipping_tests = false;
            } else if depth > 0 {
                depth = depth.saturating_sub(closing);
                if depth == 0 {
                    skipping_tests = false;
                }
            }
            continue;
        }
        // Drop string literals (crude, but `crate::` inside one is not an import).
        let mut in_string = false;
        for c in line.chars() {
            if c == '"' {
                in_string = !in_string;
            } else if !in_string {
                code.push(c);
            }
        }
        code.push('\n');
    }
    code
}

/// The module paths a file's code names: `crate::a::b::…` and `super::…`, resolved.
fn named_paths(module: &[String], is_mod_file: bool, code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("crate::") || w.starts_with("super::"))
        .collect();
    for word in words {
        let mut segments: Vec<String> = word
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let mut base: Vec<String> = if segments.first().is_some_and(|s| s == "crate") {
            segments.remove(0);
            Vec::new()
        } else {
            // `super` is relative to the module the file defines; a `mod.rs` file is its
            // folder's module, any other file is a child of its folder.
            let mut base = module.to_vec();
            if !is_mod_file || base.is_empty() {
                base.pop();
            }
            while segments.first().is_some_and(|s| s == "super") {
                segments.remove(0);
                if segments.first().is_some_and(|s| s == "super") {
                    base.pop();
                }
            }
            base
        };
        base.extend(segments);
        found.push(base);
    }
    found
}

/// The longest prefix of `path` that is a module of the crate.
fn resolve(modules: &BTreeSet<Vec<String>>, path: &[String]) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|prefix| modules.contains(prefix))
}

/// Tarjan's strongly connected components with more than one member.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let edges = s.edges;
        for w in edges.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    let nodes: Vec<&str> = edges
        .keys()
        .map(String::as_str)
        .chain(edges.values().flatten().map(String::as_str))
        .collect();
    for v in nodes {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.found
}

/// Every cycle between the modules of the crate at `src`: among top-level modules, and
/// among the files of each folder.
fn import_cycles(src: &Path) -> Vec<BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    // Test modules kept in files of their own (`#[cfg(test)] mod tests;`) are not the module.
    let mut test_modules = BTreeSet::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let module = module_of(src, file);
        let mut after_cfg_test = false;
        for line in text.lines().map(str::trim) {
            if let Some(name) = line
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'))
                .filter(|_| after_cfg_test)
            {
                // `mod x;` in `a/mod.rs` and in `a.rs` alike declares `a::x`.
                let mut path = module.clone();
                path.push(name.to_string());
                test_modules.insert(path);
            }
            after_cfg_test = line == "#[cfg(test)]";
        }
    }
    files.retain(|f| {
        let module = module_of(src, f);
        !test_modules.iter().any(|t| module.starts_with(t))
    });
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(src, f)).collect();
    // Edges between sibling modules: for each pair of modules (a, b), the first segment
    // where their paths part names the two siblings of their common parent.
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let from = module_of(src, file);
        let is_mod_file = file
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs");
        for path in named_paths(&from, is_mod_file, &code_of(&text)) {
            let Some(to) = resolve(&modules, &path) else {
                continue;
            };
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            let (Some(a), Some(b)) = (from.get(common), to.get(common)) else {
                // One is inside the other: a parent and its child are one unit.
                continue;
            };
            let parent = from[..common].join("::");
            let name = |segment: &str| {
                if parent.is_empty() {
                    segment.to_string()
                } else {
                    format!("{parent}::{segment}")
                }
            };
            edges.entry(name(a)).or_default().insert(name(b));
        }
    }
    cycles(&edges)
}

#[test]
fn the_other_crates_of_the_workspace_have_no_import_cycles() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for name in ["windlass-tasks", "windlass-testenv", "windlass-x"] {
        let src = crates.join(name).join("src");
        assert!(src.is_dir(), "{} is not a directory", src.display());
        let found = import_cycles(&src);
        assert!(found.is_empty(), "import cycles in {name}: {found:?}");
    }
}

#[test]
fn no_new_import_cycles_between_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = import_cycles(&src);
    let known: Vec<BTreeSet<String>> = KNOWN
        .iter()
        .map(|c| c.iter().map(|m| m.to_string()).collect())
        .collect();
    let new: Vec<&BTreeSet<String>> = found.iter().filter(|c| !known.contains(c)).collect();
    let gone: Vec<&BTreeSet<String>> = known.iter().filter(|c| !found.contains(c)).collect();
    assert!(
        new.is_empty(),
        "import cycles between modules (each module of a cycle can only be understood with \
         the others; move what they share down a level): {new:?}"
    );
    assert!(
        gone.is_empty(),
        "these listed cycles no longer exist: take them off KNOWN in {}: {gone:?}",
        file!()
    );
}

#[test]
fn the_cycle_finder_finds_a_planted_cycle_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |path: &str, text: &str| {
        let path = src.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "mod a; mod b; mod c; mod d;\n");
    write("a.rs", "use crate::b::Thing;\n");
    write("b.rs", "pub struct Thing;\nfn f() { crate::a::g(); }\n");
    // c uses d only in a comment, a string and a test module: no edge.
    write(
        "c.rs",
        "// crate::d::x\nconst S: &str = \"crate::d::x\";\n#[cfg(test)]\nmod tests {\n    use crate::d::x;\n}\n",
    );
    write("d.rs", "use crate::c::Y;\n#[cfg(test)]\nmod tests;\n");
    // d's tests, in a file of their own, use c: still no edge.
    write("d/tests.rs", "use crate::c::Z;\n");
    // Inside a folder: e::f and e::g use each other through `super`.
    write("e/mod.rs", "mod f; mod g;\n");
    write("e/f.rs", "use super::g::G;\n");
    write("e/g.rs", "use super::f::F;\nuse crate::a::x;\n");
    let found = import_cycles(src);
    let expected: Vec<BTreeSet<String>> = vec![
        ["a", "b"].iter().map(|s| s.to_string()).collect(),
        ["e::f", "e::g"].iter().map(|s| s.to_string()).collect(),
    ];
    let mut found = found;
    found.sort();
    assert_eq!(found, expected);
}

/// The workspace crates each `Cargo.toml` under `crates/` names among its dependencies and
/// dev-dependencies (itself aside: a crate may dev-depend on itself to turn a feature on).
fn crate_dependencies(crates: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut members = BTreeMap::new();
    for entry in std::fs::read_dir(crates).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("Cargo.toml")) else {
            continue;
        };
        let name = entry.file_name().to_string_lossy().into_owned();
        members.insert(name, text);
    }
    let names: BTreeSet<String> = members.keys().cloned().collect();
    members
        .into_iter()
        .map(|(name, text)| {
            let mut section = "";
            let mut uses = BTreeSet::new();
            for line in text.lines().map(str::trim) {
                if line.starts_with('[') {
                    section = line;
                    continue;
                }
                let dependency_section =
                    section == "[dependencies]" || section == "[dev-dependencies]";
                let key = line.split(['=', '.', ' ']).next().unwrap_or_default();
                if dependency_section && names.contains(key) && key != name {
                    uses.insert(key.to_string());
                }
            }
            (name, uses)
        })
        .collect()
}

#[test]
fn no_crate_depends_even_for_its_tests_on_a_crate_that_depends_on_it() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let edges = crate_dependencies(&crates);
    assert!(
        edges
            .get("windlass-x")
            .is_some_and(|uses| uses.contains("windlass")),
        "the reader of Cargo.toml sees windlass-x's dependency on windlass: {edges:?}"
    );
    assert_eq!(cycles(&edges), Vec::<BTreeSet<String>>::new(), "{edges:?}");
}
