//! The archive worker's integration tests, one binary (`cargo test -p
//! archive-worker --test it`), a module per subject. The tests that run
//! the `archive-worker` binary live beside it, in `apps/archive-cli/tests`.

mod support;

mod app;
mod cargo_lambda;
mod cli;
mod concurrent;
mod environment;
mod eventbridge;
mod expire;
mod fixtures;
mod infra;
mod lookup;
mod races;
mod rebuild;
mod unzip;

/// A file of this folder that is not declared above would never be
/// compiled, so its tests would silently never run.
#[test]
fn every_file_of_the_folder_is_a_module_of_this_binary() {
    worker_testkit::assert_every_file_is_a_module(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it"),
        include_str!("main.rs"),
    );
}
