//! The archive app's Lambda functions as a Rust Lambda developer runs them:
//! `cargo lambda watch` at the repository root and `cargo lambda invoke
//! archive-stream|archive-schedule --data-file <fixture>`, a stream fixture and
//! a schedule fixture, each to its golden (`worker_testkit::cargo_lambda`).

use worker_testkit::cargo_lambda::{Functions, invoke_fixtures};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cargo_lambda_serves_the_stream_and_schedule_functions() {
    invoke_fixtures::<archive_cli::Archive>(
        &worker_testkit::fixtures::events_dir(env!("CARGO_MANIFEST_DIR"), "archive"),
        "TABLE_NAME",
        Functions {
            stream: "archive-stream",
            schedule: "archive-schedule",
        },
        &["files-archived", "rebuild-lookup-scheduler"],
    )
    .await;
}
