//! Each package keeps its integration tests in one binary (`tests/it/`,
//! its `main.rs` declaring one module per file): one build and link of the
//! SDK-sized test executable instead of one per file. A file of that
//! folder that `main.rs` does not declare is never compiled, so its tests
//! would silently never run: [`assert_every_file_is_a_module`] catches it.
//! A test that needs the process to itself (a process-wide log subscriber)
//! stays in that binary and runs its body in a child of it:
//! [`in_own_process`].

use std::path::Path;
use std::process::Command;

/// The variable that tells a child of [`in_own_process`] which test it runs.
const OWN_PROCESS_ENV: &str = "WORKER_TESTKIT_OWN_PROCESS";

/// Whether the calling test runs its body here: `true` in a child process
/// of this test binary that runs this test alone (started by the call in
/// the parent); `false` in the parent, once that child has passed (its
/// output is printed as the test's own), and the test returns. A failing
/// child fails the test with its status. For a test that needs the process
/// to itself (it installs a process-wide log subscriber and reads back
/// every line), without a test binary of its own: the other tests of the
/// binary run meanwhile, in their own process.
///
/// ```ignore
/// #[tokio::test]
/// async fn every_line_is_json() {
///     if !worker_testkit::in_own_process() {
///         return;
///     }
///     // install the global subscriber, run, read back every line...
/// }
/// ```
///
/// # Panics
///
/// When called outside a test's thread (libtest names it after the test),
/// or when the child cannot start or fails.
pub fn in_own_process() -> bool {
    let thread = std::thread::current();
    let test = thread
        .name()
        .filter(|n| *n != "main")
        .expect("in_own_process is called from a test's thread");
    if std::env::var(OWN_PROCESS_ENV).as_deref() == Ok(test) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(&exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(OWN_PROCESS_ENV, test)
        .output()
        .unwrap_or_else(|e| panic!("{test}: cannot start {}: {e}", exe.display()));
    eprint!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let ran = String::from_utf8_lossy(&out.stdout).contains("1 passed");
    assert!(
        out.status.success() && ran,
        "{test}, in a process of its own, failed ({}; its output is above)",
        out.status
    );
    false
}

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

#[cfg(test)]
mod tests {
    use super::in_own_process;

    #[test]
    fn a_passing_child_lets_the_parent_return() {
        if in_own_process() {
            // The child: the body runs here.
            assert!(std::env::var(super::OWN_PROCESS_ENV).is_ok());
            return;
        }
        // The parent: the child passed.
        assert!(std::env::var(super::OWN_PROCESS_ENV).is_err());
    }

    #[test]
    fn a_failing_child_fails_the_parent() {
        let parent = std::panic::catch_unwind(|| {
            if in_own_process() {
                panic!("the child fails");
            }
        });
        let message = parent.expect_err("the child failed, so the parent fails");
        let text = message
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        assert!(text.contains("in a process of its own, failed"), "{text}");
    }
}
