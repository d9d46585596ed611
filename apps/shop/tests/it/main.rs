//! The shop worker's integration tests, one binary (`cargo test -p
//! shop-worker --test it`), a module per subject. The tests that run the
//! `shop-worker` binary live beside it, in `apps/shop-cli/tests`.

mod support;

mod app;
mod backfill;
mod cargo_lambda;
mod concurrent;
mod derive;
mod environment;
mod eventbridge;
mod fixtures;
mod infra;
mod races;
mod refs;
mod stuck;

/// A file of this folder that is not declared above would never be
/// compiled, so its tests would silently never run.
#[test]
fn every_file_of_the_folder_is_a_module_of_this_binary() {
    worker_testkit::assert_every_file_is_a_module(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it"),
        include_str!("main.rs"),
    );
}
