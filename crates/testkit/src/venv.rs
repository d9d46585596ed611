//! Python tools the tests run, each pinned and installed on first use into
//! a virtual environment of its own under the workspace's git-ignored
//! `.cache/` (moto's server, cargo-lambda), and reused when present.
//!
//! The install is `scripts/pyenv`'s, the one installer of the project's
//! Python tools (`scripts/lint-infra` and `scripts/package` use it too): a
//! half-done install, or one of another release, is never used, and test
//! processes that need the same tool at once wait for one install.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root (this crate is `crates/testkit`).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `.cache/NAME` of the workspace.
pub fn cache_dir(name: &str) -> PathBuf {
    workspace().join(".cache").join(name)
}

/// Make `dir` a virtual environment holding `requirement` (`pkg==version`),
/// unless it already does. The error says what failed and what it needs.
pub fn ensure(dir: &Path, requirement: &str) -> Result<(), String> {
    let script = workspace().join("scripts").join("pyenv");
    let out = Command::new(&script)
        .arg(dir)
        .arg(requirement)
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    let text = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        // Says which tool was installed, when it was (first use).
        eprint!("{text}");
        return Ok(());
    }
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(5)..];
    Err(format!(
        "scripts/pyenv failed ({}): {}",
        out.status,
        tail.join(" | ")
    ))
}
