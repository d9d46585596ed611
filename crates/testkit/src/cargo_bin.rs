//! A binary of another package of the workspace, built for the test that
//! runs it: an app's command line is a package of its own (`apps/*-cli`:
//! the Lambda bootstraps never link the toolkit), so the app's tests cannot
//! use `env!("CARGO_BIN_EXE_...")`, which names only the test's own
//! package's binaries.
//!
//! [`cargo_bin`] runs `cargo build --bin NAME` once per test process, in
//! the workspace, into the target directory and profile of the running
//! test (a build that is up to date costs a second), and gives the
//! binary's path: never a stale binary from an older build.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The workspace's root (this crate is `crates/testkit`).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `<target>/<profile>` of the running test (`.../debug/deps/test-hash`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's executable");
    let deps = exe.parent().expect("the test's directory");
    let dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().expect("the profile's directory")
    } else {
        deps
    };
    dir.to_path_buf()
}

/// The path of the workspace's binary `name`, built now if it is not up to
/// date. Panics with cargo's message when the build fails.
pub fn cargo_bin(name: &str) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let built = built.get_or_insert_with(HashMap::new);
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let dir = profile_dir();
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_owned(),
        Some(other) => other.to_owned(),
    };
    let target = dir.parent().expect("the target directory");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--quiet", "--bin", name, "--profile", &profile])
        .env("CARGO_TARGET_DIR", target)
        .current_dir(workspace())
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo build --bin {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(path.is_file(), "{} was not built", path.display());
    built.insert(name.to_owned(), path.clone());
    path
}
