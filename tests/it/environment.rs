//! Environment faults: every fixture of `events/` run with every
//! request denied, with the table deleted, and on a table without its
//! indexes stops with an environment fault wherever it reached the store,
//! and never gives up on (parks) a record a working deployment handles
//! (`worker_testkit::environment`).

use std::path::PathBuf;

use worker_testkit::environment::{
    assert_every_fault_met, every_fixture_stops_on_environment_faults,
};

fn events_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("events")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_deployment_stops_every_fixture_and_parks_nothing() {
    let outcomes =
        every_fixture_stops_on_environment_faults::<nishiki_cli::Nishiki>(&events_dir()).await;
    assert_every_fault_met(&outcomes);
}
