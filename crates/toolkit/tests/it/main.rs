//! The toolkit's integration tests, one binary (`cargo test -p
//! worker-toolkit --test it`): parking and redrive, the commands' guard
//! against an AWS account, and the DynamoDB Local harness.

mod local_harness;
mod parking;
mod remote_account;

/// A file of this folder that is not declared above would never be
/// compiled, so its tests would silently never run.
#[test]
fn every_file_of_the_folder_is_a_module_of_this_binary() {
    worker_testkit::assert_every_file_is_a_module(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it"),
        include_str!("main.rs"),
    );
}
