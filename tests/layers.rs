//! The layers of `src/` as docs/layout.md draws them, checked on the code: the files of
//! `src/` are read as text, every path they name (`use` trees, and paths in code and
//! attributes that start at `crate::`, `super::`, `self::` or a child module; comments
//! and strings aside) is resolved to the file that defines what it names, and:
//!
//! - `src/core` names nothing of `transport`, `adapters`, `process` or `sandbox`;
//! - an edge between two top-level modules runs down the layers ([`LAYERS`]), except
//!   the few in [`ALLOWED_UPWARD`], each with its reason;
//! - no files form a cycle (file A names something defined in B, and B in A, directly
//!   or through others).
//!
//! What it sees: a path is resolved module by module (a `foo.rs` or `foo/mod.rs`, or an
//! inline `mod foo { .. }`); the first segment that is not a module is an item, looked up
//! among the items that module defines, then its `use` imports (a re-export is followed
//! to the file that defines the item), then its glob imports; an item it cannot find
//! counts as the module's file. `mod` declarations, `pub(in ..)` visibilities and macro
//! expansions are not edges; paths into other crates are not followed. A module's own
//! file naming its children (`a/mod.rs` re-exporting `a/b.rs`) is structure, not a
//! dependency, and is left out of cycles; a child naming its parent counts.
//!
//! `cargo test --test layers -- --nocapture prints_the_graph` prints the figures;
//! `LAYERS_SRC=<dir>` reads another `src/` (an older checkout, to compare).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The layers, bottom first: a module may name modules of the layers below its own,
/// never one of its own layer or above (docs/layout.md explains each).
const LAYERS: &[&[&str]] = &[
    &["base"],
    &["core"],
    &["adapters", "transport"],
    &["sandbox"],
    &["process"],
];

/// Edges between top-level modules allowed to run against [`LAYERS`]: (from, to, why).
const ALLOWED_UPWARD: &[(&str, &str, &str)] = &[];

/// The top-level modules `src/core` must never name.
const ABOVE_CORE: &[&str] = &["transport", "adapters", "process", "sandbox"];

#[test]
fn core_names_no_layer_above_it() {
    let graph = Graph::read(&src());
    let mut broken = String::new();
    for reference in &graph.references {
        let from = &graph.files[reference.from];
        if from.module.first().map(String::as_str) == Some("core")
            && reference.path.get(1).is_some_and(|top| {
                reference.path[0] == "crate" && ABOVE_CORE.contains(&top.as_str())
            })
        {
            let _ = writeln!(
                broken,
                "  {}:{}: {}",
                from.shown,
                reference.line,
                reference.path.join("::")
            );
        }
    }
    assert!(
        broken.is_empty(),
        "src/core names a layer above it (core owns its vocabulary and ports; adapters \
         implement them, process wires them):\n{broken}"
    );
}

#[test]
fn top_level_modules_import_down_the_layers() {
    assert!(
        ALLOWED_UPWARD.len() <= 2,
        "at most two edges may run against the layers, each with its reason"
    );
    let graph = Graph::read(&src());
    let mut broken = String::new();
    for ((from, to), example) in graph.top_edges() {
        let (Some(a), Some(b)) = (level(&from), level(&to)) else {
            let unknown = if level(&from).is_none() { &from } else { &to };
            let _ = writeln!(
                broken,
                "  src/{unknown}/ is in no layer: add it to LAYERS here and in docs/layout.md"
            );
            continue;
        };
        if b < a
            || ALLOWED_UPWARD
                .iter()
                .any(|(f, t, _)| *f == from && *t == to)
        {
            continue;
        }
        let _ = writeln!(
            broken,
            "  {from} -> {to} ({}), e.g. {example}",
            if a == b { "same layer" } else { "upward" }
        );
    }
    assert!(
        broken.is_empty(),
        "imports against the layers (bottom first: {}):\n{broken}",
        layers_shown()
    );
}

#[test]
fn files_form_no_cycle() {
    let graph = Graph::read(&src());
    let cycles = graph.cycles();
    let mut broken = String::new();
    for cycle in &cycles {
        let _ = writeln!(broken, "  a cycle of {} files:", cycle.len());
        let inside: BTreeSet<usize> = cycle.iter().copied().collect();
        for &(from, to) in graph.edges.keys() {
            if inside.contains(&from) && inside.contains(&to) && !graph.is_ancestor(from, to) {
                let example = &graph.edges[&(from, to)];
                let _ = writeln!(
                    broken,
                    "    {} -> {}: {example}",
                    graph.files[from].shown, graph.files[to].shown
                );
            }
        }
    }
    assert!(
        broken.is_empty(),
        "files that name each other (move what both need to a file of its own, or keep \
         a type's impl in one file):\n{broken}"
    );
}

/// The figures of the import graph, printed with `--nocapture`: top-level edges (upward
/// ones marked), cycles of files.
#[test]
fn prints_the_graph() {
    let graph = Graph::read(&src());
    let edges = graph.top_edges();
    let upward: Vec<_> = edges
        .keys()
        .filter(|(f, t)| match (level(f), level(t)) {
            (Some(a), Some(b)) => b >= a,
            _ => true,
        })
        .collect();
    println!(
        "{} files, {} file edges; {} edges between top-level modules, {} against the layers: {:?}; {} cycles of files",
        graph.files.len(),
        graph.edges.len(),
        edges.len(),
        upward.len(),
        upward,
        graph.cycles().len()
    );
    for (from, to) in edges.keys() {
        println!("  {from} -> {to}");
    }
    for cycle in graph.cycles() {
        let files: Vec<&str> = cycle
            .iter()
            .map(|&f| graph.files[f].shown.as_str())
            .collect();
        println!("  cycle: {}", files.join(" <-> "));
    }
}

fn src() -> PathBuf {
    let root = std::env::var_os("LAYERS_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        root.join("lib.rs").is_file(),
        "no lib.rs in {}",
        root.display()
    );
    root
}

fn level(top: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&top))
}

fn layers_shown() -> String {
    LAYERS
        .iter()
        .map(|layer| layer.join(" | "))
        .collect::<Vec<_>>()
        .join(" < ")
}

/// A file of `src/` and the module it is.
struct File {
    /// `src/core/dispatch/claims.rs`.
    shown: String,
    /// `["core", "dispatch", "claims"]`; empty for lib.rs.
    module: Vec<String>,
    tokens: Vec<Token>,
}

/// A path a file names, as written (`crate::a::B`, `super::c`), with its line.
struct Reference {
    from: usize,
    line: usize,
    /// Absolute: starts with `crate`.
    path: Vec<String>,
}

/// What a module (a file's, or an inline one) holds: the names it defines, its imports.
#[derive(Default)]
struct Scope {
    file: usize,
    defines: BTreeSet<String>,
    /// Name bound by a `use` → the absolute path it names.
    imports: BTreeMap<String, Vec<String>>,
    /// Modules of `use path::*`.
    globs: Vec<Vec<String>>,
}

struct Graph {
    files: Vec<File>,
    /// Module path → its scope.
    scopes: HashMap<Vec<String>, Scope>,
    references: Vec<Reference>,
    /// (from file, to file) → an example (`file:line: path`).
    edges: BTreeMap<(usize, usize), String>,
}

impl Graph {
    fn read(src: &Path) -> Self {
        let mut paths = Vec::new();
        walk(src, &mut paths);
        paths.sort();
        let files: Vec<File> = paths
            .iter()
            .filter_map(|path| {
                let relative = path.strip_prefix(src).ok()?;
                let mut module: Vec<String> = relative
                    .iter()
                    .map(|part| part.to_string_lossy().into_owned())
                    .collect();
                let last = module.pop()?;
                match last.as_str() {
                    // The binary crate names the library as `msgw::`, never `crate::`.
                    "main.rs" if module.is_empty() => return None,
                    "lib.rs" if module.is_empty() => {}
                    "mod.rs" => {}
                    other => module.push(other.strip_suffix(".rs")?.to_owned()),
                }
                let text = std::fs::read_to_string(path).ok()?;
                Some(File {
                    shown: format!("src/{}", relative.display()),
                    module,
                    tokens: lex(&text),
                })
            })
            .collect();
        let mut graph = Graph {
            files,
            scopes: HashMap::new(),
            references: Vec::new(),
            edges: BTreeMap::new(),
        };
        for index in 0..graph.files.len() {
            graph.scan(index);
        }
        let mut edges = BTreeMap::new();
        for reference in &graph.references {
            if let Some(to) = graph.resolve(&reference.path, 0)
                && to != reference.from
            {
                edges.entry((reference.from, to)).or_insert_with(|| {
                    format!(
                        "{}:{}: {}",
                        graph.files[reference.from].shown,
                        reference.line,
                        reference.path.join("::")
                    )
                });
            }
        }
        graph.edges = edges;
        graph
    }

    /// Reads one file's scopes, definitions, imports and references.
    fn scan(&mut self, index: usize) {
        let tokens = self.files[index].tokens.clone();
        let base = self.files[index].module.clone();
        // Inline modules open at a brace depth: (depth inside, module path).
        let mut stack: Vec<(usize, Vec<String>)> = vec![(0, base.clone())];
        self.scopes.entry(base.clone()).or_default().file = index;
        let mut depth = 0usize;
        let mut i = 0;
        while i < tokens.len() {
            let here = stack.last().map(|(_, m)| m.clone()).unwrap_or_default();
            let at_module_level = stack.last().is_some_and(|(d, _)| *d == depth);
            match tokens[i].text.as_str() {
                "{" => depth += 1,
                "}" => {
                    depth = depth.saturating_sub(1);
                    if stack.len() > 1 && stack.last().is_some_and(|(d, _)| *d > depth) {
                        stack.pop();
                    }
                }
                "pub" if tokens.get(i + 1).is_some_and(|t| t.text == "(") => {
                    // A visibility (`pub(crate)`, `pub(in crate::a)`) names no item.
                    while i < tokens.len() && tokens[i].text != ")" {
                        i += 1;
                    }
                }
                "mod" if tokens.get(i + 1).is_some_and(|t| t.is_ident()) => {
                    let name = tokens[i + 1].text.clone();
                    let mut child = here.clone();
                    child.push(name.clone());
                    if at_module_level {
                        self.scopes
                            .entry(here.clone())
                            .or_default()
                            .defines
                            .insert(name);
                    }
                    if tokens.get(i + 2).is_some_and(|t| t.text == "{") {
                        depth += 1;
                        stack.push((depth, child.clone()));
                        self.scopes.entry(child).or_default().file = index;
                        i += 3;
                        continue;
                    }
                    i += 2;
                    continue;
                }
                "struct" | "enum" | "trait" | "fn" | "type" | "const" | "static" | "union"
                    if at_module_level && tokens.get(i + 1).is_some_and(|t| t.is_ident()) =>
                {
                    let name = tokens[i + 1].text.clone();
                    self.scopes
                        .entry(here.clone())
                        .or_default()
                        .defines
                        .insert(name);
                }
                "macro_rules" => {
                    if let Some(name) = tokens.get(i + 2).filter(|t| t.is_ident()) {
                        let name = name.text.clone();
                        self.scopes
                            .entry(here.clone())
                            .or_default()
                            .defines
                            .insert(name);
                    }
                }
                "use" => {
                    let line = tokens[i].line;
                    let mut end = i + 1;
                    while end < tokens.len() && tokens[end].text != ";" {
                        end += 1;
                    }
                    let mut leaves = Vec::new();
                    use_tree(&tokens[i + 1..end], Vec::new(), &mut leaves);
                    for (path, binding) in leaves {
                        let Some(absolute) = self.absolute(&here, &path) else {
                            continue;
                        };
                        if at_module_level {
                            let scope = self.scopes.entry(here.clone()).or_default();
                            match binding {
                                Binding::Glob => scope.globs.push(absolute.clone()),
                                Binding::Name(name) => {
                                    scope.imports.insert(name, absolute.clone());
                                }
                            }
                        }
                        self.references.push(Reference {
                            from: index,
                            line,
                            path: absolute,
                        });
                    }
                    i = end;
                    continue;
                }
                _ if tokens[i].is_ident()
                    && tokens.get(i + 1).is_some_and(|t| t.text == "::")
                    && !(i > 0 && tokens[i - 1].text == "::") =>
                {
                    let line = tokens[i].line;
                    let mut path = vec![tokens[i].text.clone()];
                    let mut j = i + 1;
                    while tokens.get(j).is_some_and(|t| t.text == "::")
                        && tokens.get(j + 1).is_some_and(|t| t.is_ident())
                    {
                        path.push(tokens[j + 1].text.clone());
                        j += 2;
                    }
                    let relative = matches!(path[0].as_str(), "crate" | "super" | "self");
                    if (relative || self.is_child(&here, &path[0]))
                        && let Some(absolute) = self.absolute(&here, &path)
                    {
                        self.references.push(Reference {
                            from: index,
                            line,
                            path: absolute,
                        });
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }

    /// Whether `name` is a module declared in `module` (a path may start with it).
    fn is_child(&self, module: &[String], name: &str) -> bool {
        let mut child = module.to_vec();
        child.push(name.to_owned());
        self.files.iter().any(|f| f.module == child) || self.scopes.contains_key(&child)
    }

    /// `path` as written in `module`, from the crate root; `None` for other crates.
    fn absolute(&self, module: &[String], path: &[String]) -> Option<Vec<String>> {
        let mut out: Vec<String> = match path.first()?.as_str() {
            "crate" => vec!["crate".into()],
            "self" | "super" => {
                let mut out = module.to_vec();
                let mut rest = 0;
                while let Some(segment) = path.get(rest) {
                    match segment.as_str() {
                        "self" => {}
                        "super" => {
                            out.pop()?;
                        }
                        _ => break,
                    }
                    rest += 1;
                }
                let mut absolute = vec!["crate".to_owned()];
                absolute.extend(out);
                absolute.extend(path[rest..].iter().cloned());
                return Some(absolute);
            }
            first if self.is_child(module, first) => {
                let mut absolute = vec!["crate".to_owned()];
                absolute.extend(module.iter().cloned());
                absolute.extend(path.iter().cloned());
                return Some(absolute);
            }
            _ => return None,
        };
        out.extend(path[1..].iter().cloned());
        Some(out)
    }

    /// The file that defines what `path` (absolute) names.
    fn resolve(&self, path: &[String], hops: usize) -> Option<usize> {
        self.lookup(path, hops).map(|(file, _)| file)
    }

    /// The file that defines what `path` names, and whether the item was found there
    /// (else: the file of the deepest module on the path).
    fn lookup(&self, path: &[String], hops: usize) -> Option<(usize, bool)> {
        if hops > 8 {
            return None;
        }
        let mut module: Vec<String> = Vec::new();
        let mut rest = &path[1..];
        while let Some((first, tail)) = rest.split_first() {
            let mut next = module.clone();
            next.push(first.clone());
            if self.scopes.contains_key(&next) {
                module = next;
                rest = tail;
            } else {
                break;
            }
        }
        let scope = self.scopes.get(&module)?;
        let Some(name) = rest.first() else {
            return Some((scope.file, true));
        };
        if scope.defines.contains(name) {
            return Some((scope.file, true));
        }
        if let Some(target) = scope.imports.get(name) {
            let mut target = target.clone();
            target.extend(rest[1..].iter().cloned());
            if target != path
                && let Some(found) = self.lookup(&target, hops + 1)
            {
                return Some(found);
            }
        }
        for glob in &scope.globs {
            let mut target = glob.clone();
            target.extend(rest.iter().cloned());
            if let Some((file, true)) = self.lookup(&target, hops + 1) {
                return Some((file, true));
            }
        }
        Some((scope.file, false))
    }

    /// Edges between top-level modules (lib.rs aside) → an example of each.
    fn top_edges(&self) -> BTreeMap<(String, String), String> {
        let mut out = BTreeMap::new();
        for ((from, to), example) in &self.edges {
            let (Some(a), Some(b)) = (
                self.files[*from].module.first(),
                self.files[*to].module.first(),
            ) else {
                continue;
            };
            if a != b {
                out.entry((a.clone(), b.clone()))
                    .or_insert_with(|| example.clone());
            }
        }
        out
    }

    /// Whether `from` is the file of a module that holds `to`'s (`a/mod.rs` of
    /// `a/b.rs`): a module declares and re-exports its children, which is structure,
    /// not a dependency, and is left out of cycles.
    fn is_ancestor(&self, from: usize, to: usize) -> bool {
        let (outer, inner) = (&self.files[from].module, &self.files[to].module);
        inner.len() > outer.len() && inner.starts_with(outer)
    }

    /// Sets of files that reach each other (strongly connected, more than one file).
    fn cycles(&self) -> Vec<Vec<usize>> {
        let n = self.files.len();
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); n];
        for &(from, to) in self.edges.keys() {
            if !self.is_ancestor(from, to) {
                next[from].push(to);
            }
        }
        // Tarjan's algorithm, iterative.
        let mut index = vec![usize::MAX; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut stack = Vec::new();
        let mut counter = 0;
        let mut out = Vec::new();
        for start in 0..n {
            if index[start] != usize::MAX {
                continue;
            }
            let mut work = vec![(start, 0usize)];
            while let Some(&mut (v, ref mut child)) = work.last_mut() {
                if *child == 0 && index[v] == usize::MAX {
                    index[v] = counter;
                    low[v] = counter;
                    counter += 1;
                    stack.push(v);
                    on_stack[v] = true;
                }
                if let Some(&w) = next[v].get(*child) {
                    *child += 1;
                    if index[w] == usize::MAX {
                        work.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                work.pop();
                if let Some(&(parent, _)) = work.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        component.sort();
                        out.push(component);
                    }
                }
            }
        }
        out.sort();
        out
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// What a leaf of a `use` tree binds.
enum Binding {
    Name(String),
    Glob,
}

/// The leaves of a `use` tree: each full path and what it binds.
fn use_tree(tokens: &[Token], prefix: Vec<String>, out: &mut Vec<(Vec<String>, Binding)>) {
    let mut path = prefix;
    let mut i = 0;
    // A leading `::` (an extern path) is not ours.
    if tokens.first().is_some_and(|t| t.text == "::") {
        return;
    }
    while i < tokens.len() {
        let text = tokens[i].text.as_str();
        match text {
            "::" => i += 1,
            "*" => {
                if !path.is_empty() {
                    out.push((path.clone(), Binding::Glob));
                }
                return;
            }
            "{" => {
                // Split the group's items at top-level commas.
                let mut depth = 0;
                let mut start = i + 1;
                let mut j = i + 1;
                while j < tokens.len() {
                    match tokens[j].text.as_str() {
                        "{" => depth += 1,
                        "}" if depth == 0 => break,
                        "}" => depth -= 1,
                        "," if depth == 0 => {
                            use_tree(&tokens[start..j], path.clone(), out);
                            start = j + 1;
                        }
                        _ => {}
                    }
                    j += 1;
                }
                if start < j {
                    use_tree(&tokens[start..j], path.clone(), out);
                }
                return;
            }
            _ if tokens[i].is_ident() => {
                let name = tokens[i].text.clone();
                if tokens.get(i + 1).is_some_and(|t| t.text == "as") {
                    let alias = tokens
                        .get(i + 2)
                        .map(|t| t.text.clone())
                        .unwrap_or_default();
                    if name != "self" {
                        path.push(name);
                    }
                    if alias != "_" {
                        out.push((path, Binding::Name(alias)));
                    }
                    return;
                }
                if name == "self" && !path.is_empty() {
                    let bound = path.last().cloned().unwrap_or_default();
                    out.push((path.clone(), Binding::Name(bound)));
                    return;
                }
                path.push(name);
                i += 1;
            }
            _ => i += 1,
        }
    }
    if let Some(last) = path.last().cloned()
        && !(path.len() == 1 && matches!(last.as_str(), "crate" | "super" | "self"))
    {
        out.push((path, Binding::Name(last)));
    }
}

#[derive(Clone, Debug)]
struct Token {
    text: String,
    line: usize,
}

impl Token {
    fn is_ident(&self) -> bool {
        self.text
            .chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_')
    }
}

/// The identifiers and punctuation of a Rust file, without comments, strings and
/// character literals.
fn lex(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let count_lines = |from: usize, to: usize, line: &mut usize| {
        *line += chars[from..to.min(chars.len())]
            .iter()
            .filter(|&&c| c == '\n')
            .count();
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let start = i;
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            count_lines(start, i, &mut line);
        } else if let Some(end) = raw_string_end(&chars, i) {
            count_lines(i, end, &mut line);
            i = end;
        } else if c == '"' || (c == 'b' && next == Some('"')) {
            let start = i;
            i += if c == 'b' { 2 } else { 1 };
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            count_lines(start, i, &mut line);
        } else if c == '\'' || (c == 'b' && next == Some('\'')) {
            let at = if c == 'b' { i + 1 } else { i };
            if chars.get(at + 1) == Some(&'\\') {
                // An escaped character: up to the closing quote.
                i = at + 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(at + 2) == Some(&'\'') {
                i = at + 3;
            } else {
                // A lifetime or label: the quote alone.
                i = at + 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            if c == 'r' && next == Some('#') {
                i += 2;
            }
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let word = word.trim_start_matches("r#").to_owned();
            if c.is_ascii_digit() {
                continue;
            }
            out.push(Token { text: word, line });
        } else if c == ':' && next == Some(':') {
            out.push(Token {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                text: c.to_string(),
                line,
            });
            i += 1;
        }
    }
    out
}

/// The end of a raw string (`r"…"`, `r#"…"#`, `br#"…"#`) starting at `i`, if one does.
fn raw_string_end(chars: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    // Not part of a longer identifier (`for r in`, `bar"`).
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < chars.len() {
        if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(chars.len())
}
