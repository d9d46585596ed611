//! The Lambda functions as processes, as a local emulator runs them: the
//! `stream` and `schedule` binaries against the test kit's Runtime API
//! (`worker_testkit::runtime_api`) and DynamoDB Local.
//!
//! - A deadline header that is not a deadline (cargo-lambda's emulator
//!   sends `600000`) is replaced by the function's timeout: the batch is
//!   handled, not reported as out of time.
//! - The SDK's own endpoint variables (`AWS_ENDPOINT_URL`,
//!   `AWS_ENDPOINT_URL_DYNAMODB`) send every request to the endpoint they
//!   name, here a counting proxy in front of DynamoDB Local; nothing is
//!   sent elsewhere (this machine reaches no AWS endpoint: a request there
//!   would fail the batch).

use crate::support;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use nishiki_cli::KEYS;
use serde_json::Value;
use support::TestTable;
use support::fault_proxy::{FaultConfig, FaultProxy};
use worker_engine::stream::decode_event;
use worker_testkit::runtime_api::{Outcome, RuntimeApi, function_command};
use worker_toolkit::replay::apply::{apply, plan};
use worker_toolkit::replay::snapshot::{load_items, read_snapshot, snapshot_text};

fn events(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("events")
        .join(path)
}

/// A table holding `events/tables/household.json` after the service's own
/// writes of the group-deleted fixture (what `replay --apply-writes` does
/// before it hands the batch to the handler).
async fn household() -> TestTable {
    let table = support::nishiki_table().await;
    let items = read_snapshot(&events("tables/household.json"), KEYS).expect("the snapshot");
    load_items(table.store.clone(), items, 4, None)
        .await
        .expect("load the snapshot");
    let event: Value = serde_json::from_slice(&fixture()).expect("JSON");
    let records = decode_event(&event).expect("a stream event");
    apply(table.store.as_ref(), &plan(&records))
        .await
        .expect("the service's writes");
    table
}

fn fixture() -> Vec<u8> {
    std::fs::read(events("stream/group-deleted.json")).expect("the fixture")
}

/// A function process on `api`, with only the variables Lambda sets plus
/// `env` (no `DYNAMODB_ENDPOINT_URL` unless given); its log on stderr.
fn spawn(binary: &str, api: &RuntimeApi, env: &[(&str, String)]) -> Child {
    function_command(Path::new(binary), api)
        .stderr(Stdio::inherit())
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .spawn()
        .expect("start the function")
}

struct Running(Child);
impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Invoke the stream function with the group-deleted fixture and return its
/// answer and the table after it.
async fn group_deleted(
    table: &TestTable,
    env: &[(&str, String)],
    deadline_header: u128,
) -> (Value, String) {
    let api = RuntimeApi::start().await.expect("runtime API");
    let mut env = env.to_vec();
    env.push(("TABLE_NAME", table.name.clone()));
    let _function = Running(spawn(env!("CARGO_BIN_EXE_stream"), &api, &env));
    let call = api.invoke_with_deadline_header(fixture(), deadline_header);
    let outcome = tokio::time::timeout(Duration::from_secs(120), call)
        .await
        .expect("the function answers within 120 s");
    let answer = match outcome {
        Outcome::Response(_) => outcome.json(),
        Outcome::Error { error_type, body } => panic!(
            "the function failed: {error_type}: {}",
            String::from_utf8_lossy(&body)
        ),
    };
    (answer, without_reminders(&table.snapshot().await))
}

/// The table as snapshot text without the `ExpiryReminder#<day>` partitions:
/// the function runs on the real clock, so the reminders of days long past
/// (the fixture's day is 2024-03-25) are not its to look at, where
/// `replay --now` looks at them.
fn without_reminders(items: &[worker_engine::item::Item]) -> String {
    let kept: Vec<_> = items
        .iter()
        .filter(|item| {
            !item
                .get("PK")
                .and_then(|pk| pk.as_s().ok())
                .is_some_and(|pk| pk.starts_with("ExpiryReminder#"))
        })
        .cloned()
        .collect();
    snapshot_text(&kept, KEYS)
}

fn golden() -> String {
    let items = read_snapshot(&events("golden/group-deleted.json"), KEYS).expect("the golden");
    without_reminders(&items)
}

#[tokio::test]
async fn an_emulators_placeholder_deadline_becomes_the_functions_timeout() {
    let table = household().await;
    let env = [("DYNAMODB_ENDPOINT_URL", table.endpoint.clone())];
    // cargo-lambda 1.9's emulator: its invoke timeout, not an epoch time.
    let (answer, after) = group_deleted(&table, &env, 600_000).await;
    assert_eq!(
        answer["batchItemFailures"],
        serde_json::json!([]),
        "{answer}"
    );
    assert_eq!(after, golden(), "the cascade ran to the fixture's golden");
}

#[tokio::test]
async fn a_deadline_already_past_is_not_taken_as_out_of_time() {
    let table = household().await;
    let env = [
        ("DYNAMODB_ENDPOINT_URL", table.endpoint.clone()),
        ("AWS_LAMBDA_FUNCTION_TIMEOUT", "60".to_owned()),
    ];
    let (answer, after) = group_deleted(&table, &env, 1).await;
    assert_eq!(
        answer["batchItemFailures"],
        serde_json::json!([]),
        "{answer}"
    );
    assert_eq!(after, golden());
}

/// Every request of the function, through `variable` = a counting proxy.
async fn requests_through(variable: &'static str) -> (u64, Value, String) {
    let table = household().await;
    let proxy = FaultProxy::start(&table.endpoint, FaultConfig::none())
        .await
        .expect("proxy");
    let env = [(variable, proxy.endpoint_url())];
    let deadline = std::time::SystemTime::now() + Duration::from_secs(60);
    let deadline = deadline
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    let (answer, after) = group_deleted(&table, &env, deadline).await;
    (proxy.stats().requests, answer, after)
}

#[tokio::test]
async fn aws_endpoint_url_sends_every_request_to_its_endpoint() {
    let (requests, answer, after) = requests_through("AWS_ENDPOINT_URL").await;
    assert_eq!(
        answer["batchItemFailures"],
        serde_json::json!([]),
        "{answer}"
    );
    assert_eq!(after, golden());
    assert!(
        requests >= 3,
        "the cascade's reads and writes went through the proxy: {requests}"
    );
}

#[tokio::test]
async fn aws_endpoint_url_dynamodb_sends_every_request_to_its_endpoint() {
    let (requests, answer, after) = requests_through("AWS_ENDPOINT_URL_DYNAMODB").await;
    assert_eq!(
        answer["batchItemFailures"],
        serde_json::json!([]),
        "{answer}"
    );
    assert_eq!(after, golden());
    assert!(requests >= 3, "{requests}");
}

/// A table that does not exist (a wrong `TABLE_NAME`): the invocation
/// fails (Lambda retries the batch, then hands it to the on-failure
/// destination), nothing is parked although a parking table is set, and
/// the `EnvironmentFaults` metric the templates alarm on counts it.
#[tokio::test]
async fn a_missing_table_fails_the_invocation_parks_nothing_and_counts_the_fault() {
    let table = household().await;
    let parking = TestTable::with_schema(&worker_engine::park::schema()).await;
    let api = RuntimeApi::start().await.expect("runtime API");
    let metrics = std::env::temp_dir().join(format!("emf-{}.jsonl", std::process::id()));
    let _function = Running(
        function_command(Path::new(env!("CARGO_BIN_EXE_stream")), &api)
            .env("DYNAMODB_ENDPOINT_URL", &table.endpoint)
            .env("TABLE_NAME", "household-does-not-exist")
            .env("PARKING_TABLE", &parking.name)
            .stdout(std::fs::File::create(&metrics).expect("a metrics file"))
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the function"),
    );
    let outcome = api.invoke(fixture(), Duration::from_secs(60)).await;
    let Outcome::Error { body, .. } = &outcome else {
        panic!("the invocation succeeded: {outcome:?}");
    };
    let error: Value = serde_json::from_slice(body).expect("a JSON error");
    assert_eq!(error["errorType"], "EnvironmentFault", "{error}");
    assert!(
        error["errorMessage"]
            .as_str()
            .is_some_and(|m| m.contains("non-existent table")),
        "{error}"
    );
    assert!(parking.snapshot().await.is_empty(), "nothing parked");
    let emf = std::fs::read_to_string(&metrics).expect("the metrics");
    let _ = std::fs::remove_file(&metrics);
    let faults: f64 = emf
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["EnvironmentFaults"].as_f64())
        .sum();
    assert!(faults >= 1.0, "EnvironmentFaults in {emf}");
}
