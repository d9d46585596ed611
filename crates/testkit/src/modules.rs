//! Each package keeps its integration tests in one binary (`tests/it/`,
//! its `main.rs` declaring one module per file): one build and link of the
//! SDK-sized test executable instead of one per file. A file of that
//! folder that `main.rs` does not declare is never compiled, so its tests
//! would silently never run: [`assert_every_file_is_a_module`] catches it.

use std::path::Path;

/// Every `.rs` file of `dir` (other than `main.rs`) and every folder
/// holding a `mod.rs` is declared as a module (`mod NAME;`) in `main`,
/// the text of the folder's `main.rs`.
pub fn assert_every_file_is_a_module(dir: &Path, main: &str) {
    let declared: Vec<&str> = main
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let mut missing = Vec::new();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        let name = if path.is_dir() && path.join("mod.rs").is_file() {
            entry.file_name().to_string_lossy().into_owned()
        } else if path.extension().is_some_and(|e| e == "rs") {
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            if stem == "main" {
                continue;
            }
            stem.into_owned()
        } else {
            continue;
        };
        if !declared.contains(&name.as_str()) {
            missing.push(name);
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "{}: not declared in main.rs, so never compiled: add `mod {};`",
        dir.display(),
        missing.join(";`, `mod ")
    );
}
