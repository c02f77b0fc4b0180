//! The layout's rules (docs/development.md, "Layout"), checked on the
//! source so that no change can quietly undo them:
//!
//! - only `core/src/output/` and `core/src/options.rs` read the format's
//!   number (`format_version`), and only `core/src/output/` names a
//!   format's module (`output::v3`, `output::wal2json`, ...): a format is a
//!   folder of `output/` and its registration;
//! - `unsafe` code lives in `src/pg/`, the callback shims
//!   (`src/plugin/callbacks.rs`, `src/api/event_trigger.rs`) and the
//!   statistics' shared memory (`src/stats/shmem.rs`); the core has none
//!   (its manifest denies it);
//! - no two modules import each other, directly or through others (each
//!   file is a module; test modules are left out).
//!
//! Source-only: these run once, with the checks that need no server.

mod version_independent {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    fn repo_root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("e2e/ has a parent")
            .to_path_buf()
    }

    /// Every `.rs` file under `dir`, as paths relative to the repository.
    fn rust_files(root: &Path, dir: &str) -> Vec<String> {
        let mut found = Vec::new();
        let mut stack = vec![root.join(dir)];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
                let path = entry.expect("a directory entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let rel = path.strip_prefix(root).expect("under the root");
                    found.push(rel.to_string_lossy().into_owned());
                }
            }
        }
        found.sort();
        found
    }

    /// The file's code without its test module (from the first
    /// `#[cfg(test)]` module on: test modules close every file here).
    fn code(root: &Path, file: &str) -> String {
        let text = std::fs::read_to_string(root.join(file)).expect("readable source");
        let test_module = [
            "#[cfg(test)]\nmod ",
            "#[cfg(test)]\npub(crate) mod ",
            "#[cfg(test)]\npub mod ",
        ]
        .iter()
        .filter_map(|m| text.find(m))
        .min();
        without_comments_and_strings(&text[..test_module.unwrap_or(text.len())])
    }

    /// `text` with its comments dropped and its string and character
    /// literals blanked, so that words in them are not code.
    fn without_comments_and_strings(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'/' if bytes.get(i + 1) == Some(&b'/') => {
                    while i < bytes.len() && bytes[i] != b'\n' {
                        i += 1;
                    }
                }
                b'"' => {
                    // A string literal (raw strings of this code base have
                    // no quotes inside but for r#"..."#, handled alike up
                    // to the next quote-hash).
                    let raw = i > 0 && (bytes[i - 1] == b'#' || bytes[i - 1] == b'r');
                    i += 1;
                    while i < bytes.len() {
                        if !raw && bytes[i] == b'\\' {
                            i += 2;
                            continue;
                        }
                        if bytes[i] == b'"' && (!raw || bytes.get(i + 1) != Some(&b'\\')) {
                            break;
                        }
                        i += 1;
                    }
                    i += 1;
                    out.push_str("\"\"");
                }
                b'\'' if bytes.get(i + 2) == Some(&b'\'') => {
                    // A character literal ('"', 'x').
                    out.push_str("' '");
                    i += 3;
                }
                b'\'' if bytes.get(i + 1) == Some(&b'\\') => {
                    let end = text[i + 2..]
                        .find('\'')
                        .map_or(bytes.len(), |p| i + 2 + p + 1);
                    out.push_str("' '");
                    i = end;
                }
                b => {
                    out.push(b as char);
                    i += 1;
                }
            }
        }
        out
    }

    fn words(code: &str) -> impl Iterator<Item = &str> {
        code.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
    }

    fn all_files(root: &Path) -> Vec<String> {
        let mut files = rust_files(root, "src");
        files.extend(rust_files(root, "core/src"));
        files
    }

    #[test]
    fn only_the_formats_know_the_format_number() {
        let root = repo_root();
        let mut offenders = Vec::new();
        for file in all_files(&root) {
            if file.starts_with("core/src/output/") || file == "core/src/options.rs" {
                continue;
            }
            if words(&code(&root, &file)).any(|w| w == "format_version") {
                offenders.push(file);
            }
        }
        assert!(offenders.is_empty(), "format_version read in {offenders:?}");
    }

    #[test]
    fn only_output_names_a_format_module() {
        let root = repo_root();
        // The formats: the folders of core/src/output/.
        let formats: Vec<String> = std::fs::read_dir(root.join("core/src/output"))
            .expect("core/src/output")
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(formats.iter().any(|f| f == "v3"), "{formats:?}");
        let mut offenders = Vec::new();
        for file in all_files(&root) {
            if file.starts_with("core/src/output/") {
                continue;
            }
            let code = code(&root, &file).replace(char::is_whitespace, "");
            for format in &formats {
                if code.contains(&format!("output::{format}")) {
                    offenders.push(format!("{file}: output::{format}"));
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "a format's module named outside output/: {offenders:?}"
        );
    }

    #[test]
    fn unsafe_code_lives_at_the_edge() {
        let root = repo_root();
        let allowed = |file: &str| {
            file.starts_with("src/pg/")
                || [
                    "src/plugin/callbacks.rs",
                    "src/api/event_trigger.rs",
                    "src/stats/shmem.rs",
                ]
                .contains(&file)
        };
        let mut offenders = Vec::new();
        for file in all_files(&root) {
            // Test modules too: the whole file.
            let text = std::fs::read_to_string(root.join(&file)).expect("readable");
            let code = without_comments_and_strings(&text);
            let uses_unsafe = words(&code).any(|w| w == "unsafe");
            if uses_unsafe && !allowed(&file) {
                offenders.push(file);
            }
        }
        assert!(
            offenders.is_empty(),
            "unsafe code outside the edge: {offenders:?}"
        );
        // The core denies it in its manifest.
        let manifest =
            std::fs::read_to_string(root.join("core/Cargo.toml")).expect("core manifest");
        assert!(
            manifest.contains("unsafe_code = \"deny\""),
            "core/Cargo.toml denies unsafe code"
        );
    }

    /// The file a `crate::a::b::...` path names, in the crate whose source
    /// root is `src_root` (`a/b.rs`, `a/b/mod.rs`, or `a.rs` for an item
    /// of `a`).
    fn module_file(files: &BTreeSet<String>, src_root: &str, path: &[&str]) -> Option<String> {
        for n in (1..=path.len()).rev() {
            let module = path[..n].join("/");
            for candidate in [
                format!("{src_root}/{module}.rs"),
                format!("{src_root}/{module}/mod.rs"),
            ] {
                if files.contains(&candidate) {
                    return Some(candidate);
                }
            }
        }
        None
    }

    /// The modules each file imports (`crate::...` paths, and the core's
    /// through `pubjson_core::...`).
    fn imports(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
        let files: BTreeSet<String> = all_files(root).into_iter().collect();
        let mut graph = BTreeMap::new();
        for file in &files {
            let src_root = if file.starts_with("core/") {
                "core/src"
            } else {
                "src"
            };
            let code = code(root, file);
            let mut targets = BTreeSet::new();
            let mut add = |src_root: &str, rest: &str| {
                let path: Vec<&str> = rest
                    .split("::")
                    .map(|p| p.trim_matches(|c: char| !(c.is_alphanumeric() || c == '_')))
                    .take_while(|p| {
                        !p.is_empty() && p.chars().next().is_some_and(|c| c.is_lowercase())
                    })
                    .collect();
                if let Some(target) = module_file(&files, src_root, &path) {
                    if &target != file {
                        targets.insert(target);
                    }
                }
            };
            for (at, _) in code.match_indices("crate::") {
                // `pubjson_core::` is matched below; skip its suffix here.
                if code[..at].ends_with("pubjson_") {
                    continue;
                }
                add(src_root, &code[at + "crate::".len()..]);
            }
            for (at, _) in code.match_indices("pubjson_core::") {
                add("core/src", &code[at + "pubjson_core::".len()..]);
            }
            graph.insert(file.clone(), targets);
        }
        graph
    }

    #[test]
    fn no_module_imports_itself_through_others() {
        let root = repo_root();
        let graph = imports(&root);
        assert!(
            graph
                .get("src/plugin/events.rs")
                .is_some_and(|t| t.contains("src/plugin/state.rs")),
            "the import graph is read: {:?}",
            graph.get("src/plugin/events.rs")
        );
        // Tarjan's strongly connected components: any of more than one
        // file is a circle.
        struct Tarjan<'g> {
            graph: &'g BTreeMap<String, BTreeSet<String>>,
            index: BTreeMap<&'g str, usize>,
            low: BTreeMap<&'g str, usize>,
            stack: Vec<&'g str>,
            on_stack: BTreeSet<&'g str>,
            circles: Vec<Vec<String>>,
        }
        impl<'g> Tarjan<'g> {
            fn visit(&mut self, v: &'g str) {
                let n = self.index.len();
                self.index.insert(v, n);
                self.low.insert(v, n);
                self.stack.push(v);
                self.on_stack.insert(v);
                for w in self.graph.get(v).into_iter().flatten() {
                    let w = w.as_str();
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let low = self.low[v].min(self.low[w]);
                        self.low.insert(v, low);
                    } else if self.on_stack.contains(w) {
                        let low = self.low[v].min(self.index[w]);
                        self.low.insert(v, low);
                    }
                }
                if self.low[v] == self.index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = self.stack.pop() {
                        self.on_stack.remove(w);
                        component.push(w.to_string());
                        if w == v {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        component.sort();
                        self.circles.push(component);
                    }
                }
            }
        }
        let mut t = Tarjan {
            graph: &graph,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            circles: Vec::new(),
        };
        for v in graph.keys() {
            if !t.index.contains_key(v.as_str()) {
                t.visit(v);
            }
        }
        assert!(
            t.circles.is_empty(),
            "modules that import each other: {:#?}",
            t.circles
        );
    }
}
