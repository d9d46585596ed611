//! The tests of `archive-worker`, the archive app's command line, in one
//! binary (`cargo test -p archive-cli --test it`): they run the binary
//! this `cargo test` built (`CARGO_BIN_EXE_archive-worker`).

mod replay;

/// A file of this folder that is not declared above would never be
/// compiled, so its tests would silently never run.
#[test]
fn every_file_of_the_folder_is_a_module_of_this_binary() {
    worker_testkit::assert_every_file_is_a_module(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it"),
        include_str!("main.rs"),
    );
}
