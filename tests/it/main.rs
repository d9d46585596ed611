//! Nishiki's integration tests, one binary (`cargo test --test it`), a
//! module per subject: the stream cascades, the audit, the sweep, expiry
//! flags, races with the live service, faults, the workload soak, the
//! template, the Lambda processes, logs and metrics, and the bad-input
//! corpus. Two tests run in a child process of this binary, as they
//! install a process-wide log subscriber (`observability`, `bad_input`:
//! [`worker_testkit::in_own_process`]); the command line's tests live
//! beside it, in `apps/nishiki-cli/tests`.

mod service;
mod support;

mod audit;
mod bad_input;
mod cargo_lambda;
mod coalesce;
mod concurrent;
mod dev_loop;
mod engine_spans;
mod environment;
mod expiry;
mod expiry_state;
mod faults;
mod fixtures;
mod foundation;
mod function_process;
mod infra;
mod invitations;
mod observability;
mod races;
mod relationships;
mod workload;

/// A file of this folder that is not declared above would never be
/// compiled, so its tests would silently never run.
#[test]
fn every_file_of_the_folder_is_a_module_of_this_binary() {
    worker_testkit::assert_every_file_is_a_module(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it"),
        include_str!("main.rs"),
    );
}
