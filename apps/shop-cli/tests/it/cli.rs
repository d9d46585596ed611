//! The `shop-worker` binary, run from the workspace's root as an operator
//! would, on a table of the shared DynamoDB Local: its commands follow
//! `infra/shop.yaml` by default (the stream mapping's batch size, starting
//! position and timeout for `dev`, a job function's timeout for `run`).

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use worker_testkit::TestTable;

/// The workspace's root (where `infra/` is).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `shop-worker ARGS --endpoint-url .. --table ..`, run from the
/// workspace's root; its stdout as JSON.
fn shop_worker(table: &TestTable, args: &[&str]) -> Value {
    let o: Output = std::process::Command::new(env!("CARGO_BIN_EXE_shop-worker"))
        .current_dir(workspace())
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .args(args)
        .args(["--endpoint-url", &table.endpoint, "--table", &table.name])
        .output()
        .expect("the binary runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("one JSON document")
}

#[tokio::test]
async fn commands_follow_the_apps_template_by_default() {
    let table = TestTable::with_schema(&shop_worker::schema::schema()).await;

    let v = shop_worker(&table, &["dev", "--until-idle", "--json"]);
    assert_eq!(v["template"], "infra/shop.yaml", "{v}");
    let m = &v["mapping"];
    assert_eq!(m["batchSize"], 500, "{m}");
    assert_eq!(m["batchingWindowSecs"], 1, "{m}");
    assert_eq!(m["timeoutSecs"], 120.0, "{m}");
    assert_eq!(m["startingPosition"], "TRIM_HORIZON", "{m}");
    assert_eq!(v["sources"][0]["id"], "StreamFunction.TableStream", "{v}");

    let v = shop_worker(&table, &["run", "stuck-orders", "--json"]);
    assert_eq!(v["timeoutSecs"], 300.0, "the job function's Timeout: {v}");
}
