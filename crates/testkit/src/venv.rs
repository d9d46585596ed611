//! Python tools the tests run, each pinned and installed on first use into
//! a virtual environment of its own under the workspace's git-ignored
//! `.cache/` (moto's server, cargo-lambda), and reused when present.
//!
//! The install goes into a staging folder that is renamed into place once
//! complete, with a marker naming the pinned release: a half-done install,
//! or one of another release, is never used, and two test processes
//! installing at once each end with a whole one.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `.cache/NAME` of the workspace (this crate is `crates/testkit`).
pub fn cache_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../.cache")
        .join(name)
}

/// Make `dir` a virtual environment holding `requirement` (`pkg==version`),
/// unless it already does. The error says what failed and what it needs.
pub fn ensure(dir: &Path, requirement: &str) -> Result<(), String> {
    let marker = |d: &Path| d.join(format!("{requirement}.installed"));
    if marker(dir).exists() {
        return Ok(());
    }
    let staging = dir.with_extension(format!("installing-{}", std::process::id()));
    let _ = fs::remove_dir_all(&staging);
    if let Some(parent) = staging.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    eprintln!(
        "worker-testkit: installing {requirement} into {} (first use)",
        dir.display()
    );
    let run = |cmd: &mut Command, what: &str| -> Result<(), String> {
        let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        Err(format!(
            "{what} failed ({}): {}",
            out.status,
            tail.join(" | ")
        ))
    };
    run(
        Command::new("python3").arg("-m").arg("venv").arg(&staging),
        "python3 -m venv",
    )?;
    run(
        Command::new(staging.join("bin").join("python"))
            .args(["-m", "pip", "install", "--quiet"])
            .arg("--disable-pip-version-check")
            .arg(requirement),
        "pip install",
    )?;
    fs::write(marker(&staging), b"").map_err(|e| e.to_string())?;
    let _ = fs::remove_dir_all(dir);
    if fs::rename(&staging, dir).is_err() {
        // Another process won the race: use its install.
        let _ = fs::remove_dir_all(&staging);
    }
    if marker(dir).exists() {
        Ok(())
    } else {
        Err("the install did not leave its marker".into())
    }
}
