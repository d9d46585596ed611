//! The engine's integration tests, one binary (`cargo test -p
//! worker-engine --test it`): the minimal example app end to end, guarded
//! writes, the EventBridge publisher and the check that no app is named.

mod eventbridge;
mod guarded;
mod minimal_example;
mod no_app_names;

/// A file of this folder that is not declared above would never be
/// compiled, so its tests would silently never run.
#[test]
fn every_file_of_the_folder_is_a_module_of_this_binary() {
    worker_testkit::assert_every_file_is_a_module(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it"),
        include_str!("main.rs"),
    );
}
