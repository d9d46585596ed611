//! Nishiki's Lambda functions as a Rust Lambda developer runs them:
//! `cargo lambda watch` at the repository root and `cargo lambda invoke
//! stream|schedule --data-file <fixture>`, a stream fixture and a schedule
//! fixture, each to its golden (`worker_testkit::cargo_lambda`).

use std::path::Path;

use nishiki_cli::Nishiki;
use worker_testkit::cargo_lambda::{Functions, invoke_fixtures};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cargo_lambda_serves_the_stream_and_schedule_functions() {
    invoke_fixtures::<Nishiki>(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("events"),
        "TABLE_NAME",
        Functions {
            stream: "stream",
            schedule: "schedule",
        },
        &["group-deleted", "sweep-invitations-scheduler"],
    )
    .await;
}
