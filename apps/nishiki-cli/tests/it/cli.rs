//! The `nishiki-worker` binary, run as an operator would: help, one-line
//! errors for bad input, the table commands, replay/run output in text and
//! JSON, dry runs, the `dev` loop until idle, and (once) the default
//! embedded DynamoDB Local. Tables live on the shared test DynamoDB Local
//! (`--endpoint-url`), except in the auto-start test.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nishiki_cli::KEYS;
use serde_json::Value;
use support::TestTable;
use worker_toolkit::replay::snapshot::{load_items, read_snapshot, snapshot_text};

const NOW: &str = "2024-03-25T09:00:00Z";

fn bin() -> Command {
    let mut c = crate::support::nishiki_worker();
    c.env_remove("RUST_LOG").env("NO_COLOR", "1");
    for var in [
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_DYNAMODB",
        "DYNAMODB_ENDPOINT_URL",
    ] {
        c.env_remove(var);
    }
    c
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("the binary runs")
}

fn events(rel: &str) -> String {
    crate::support::workspace()
        .join("events")
        .join(rel)
        .display()
        .to_string()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nishiki-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn write(name: &str, text: &str) -> String {
    let p = tmp(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

async fn household_table() -> TestTable {
    let t = support::nishiki_table().await;
    let items = read_snapshot(Path::new(&events("tables/household.json")), KEYS).unwrap();
    load_items(t.store.clone(), items, 4, None).await.unwrap();
    t
}

#[test]
fn help_names_every_command_and_option() {
    let o = run(&["--help"]);
    assert!(o.status.success());
    let text = stdout(&o);
    for cmd in [
        "replay",
        "run",
        "table",
        "capture",
        "dev",
        "Exit status",
        "Examples",
    ] {
        assert!(text.contains(cmd), "{cmd} missing from --help");
    }
    let text = stdout(&run(&["replay", "--help"]));
    for opt in [
        "--snapshot",
        "--apply-writes",
        "--now",
        "--write-snapshot",
        "--dry-run",
        "--json",
        "--endpoint-url",
        "--table",
        "--env",
    ] {
        assert!(text.contains(opt), "{opt} missing from replay --help");
    }
    let text = stdout(&run(&["dev", "--help"]));
    for opt in [
        "--batch-size",
        "--batching-window",
        "--max-retries",
        "--bisect",
        "--cron",
    ] {
        assert!(text.contains(opt), "{opt} missing from dev --help");
    }
}

/// Bad input fails before anything starts: one line naming the file and the
/// problem, exit status 1.
#[test]
fn bad_input_gets_a_one_line_error_naming_the_file() {
    let not_json = write("not-json.json", "{\"Records\": [");
    let not_event = write("not-event.json", r#"{"hello": "world"}"#);
    let sqs = write(
        "sqs.json",
        r#"{"Records": [{"messageId": "1", "eventSource": "aws:sqs", "body": "x"}]}"#,
    );
    let ec2 = write(
        "ec2.json",
        r#"{"version": "0", "detail-type": "EC2 Instance State-change Notification", "source": "aws.ec2", "detail": {}}"#,
    );
    let unknown_job = write("vacuum.json", r#"{"job": "vacuum"}"#);
    let bad_snapshot = write(
        "bad-snapshot.json",
        r#"[{"PK": {"S": "a"}, "SK": {"S": "User"}, "EMailAddress": "alice@example.com"}]"#,
    );
    let good_event = events("stream/group-deleted.json");
    let missing = tmp("missing.json").display().to_string();
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        (vec!["replay", &not_json], &not_json, "not JSON"),
        (vec!["replay", &not_event], &not_event, "not an event"),
        (
            vec!["replay", &sqs],
            &sqs,
            "from aws:sqs, not a DynamoDB Streams event",
        ),
        (
            vec!["replay", &ec2],
            &ec2,
            "EventBridge \"EC2 Instance State-change Notification\" event from aws.ec2",
        ),
        (
            vec!["replay", &unknown_job],
            &unknown_job,
            "unknown job \"vacuum\"",
        ),
        (vec!["replay", &missing], &missing, "cannot read"),
        (
            vec!["replay", "--snapshot", &bad_snapshot, &good_event],
            &bad_snapshot,
            "item #0 (a/User): attribute EMailAddress",
        ),
        (
            vec!["run", "audit", "--snapshot", &not_json],
            &not_json,
            "not JSON",
        ),
        (
            vec![
                "table",
                "load",
                "--endpoint-url",
                "http://127.0.0.1:9",
                &bad_snapshot,
            ],
            &bad_snapshot,
            "attribute EMailAddress",
        ),
    ];
    for (args, file, problem) in cases {
        let o = run(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(
            err.starts_with(&format!("error: {file}: ")),
            "{args:?}: {err}"
        );
        assert!(err.contains(problem), "{args:?}: {err}");
        assert!(!err.contains("alice@"), "no personal data: {err}");
        assert!(
            !err.contains("starting DynamoDB Local"),
            "{args:?}: checked before starting"
        );
    }
    // Usage errors come from clap: exit 2 and a hint.
    let o = run(&["replay", "--now", "yesterday", &good_event]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("RFC 3339"), "{}", stderr(&o));
    let o = run(&["run", "vacuum"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("sweep-invitations"), "{}", stderr(&o));
    for bad in ["NOEQUALS", "=value"] {
        let o = run(&["replay", "--env", bad, &good_event]);
        assert_eq!(o.status.code(), Some(2), "--env {bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("NAME=VALUE"), "{}", stderr(&o));
    }
}

#[tokio::test]
async fn missing_table_says_how_to_create_it() {
    let t = support::nishiki_table().await;
    let o = run(&[
        "replay",
        "--endpoint-url",
        &t.endpoint,
        "--table",
        "no-such-table",
        &events("stream/group-deleted.json"),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "run `nishiki-worker table create --endpoint-url {} --table no-such-table`",
            t.endpoint
        )),
        "{err}"
    );
}

#[tokio::test]
async fn table_create_load_and_snapshot_round_trip() {
    let t = support::nishiki_table().await; // only for the endpoint
    let name = format!("{}-cli", t.name);
    let ep = t.endpoint.as_str();
    let o = run(&["table", "create", "--endpoint-url", ep, "--table", &name]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("created table"), "{}", stdout(&o));
    let o = run(&["table", "create", "--endpoint-url", ep, "--table", &name]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("already exists"));

    let household = events("tables/household.json");
    let o = run(&[
        "table",
        "load",
        "--endpoint-url",
        ep,
        "--table",
        &name,
        &household,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let expected = std::fs::read_to_string(&household).unwrap();
    let n = read_snapshot(Path::new(&household), KEYS).unwrap().len();
    assert!(
        stdout(&o).contains(&format!("loaded {n} items")),
        "{}",
        stdout(&o)
    );

    let out = tmp(&format!("{name}.json"));
    let o = run(&[
        "table",
        "snapshot",
        "--endpoint-url",
        ep,
        "--table",
        &name,
        &out.display().to_string(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), expected);
    let store =
        worker_engine::store::DynamoStore::new(worker_engine::store::local_client(ep), &name);
    store.delete_table().await.unwrap();
}

#[tokio::test]
async fn replay_prints_outcomes_failures_and_the_diff() {
    let t = household_table().await;
    let out = tmp(&format!("{}-after.json", t.name));
    let o = run(&[
        "replay",
        "--diff",
        "--endpoint-url",
        &t.endpoint,
        "--table",
        &t.name,
        "--apply-writes",
        "--now",
        NOW,
        "--write-snapshot",
        &out.display().to_string(),
        &events("stream/group-deleted.json"),
    ]);
    let text = stdout(&o);
    assert!(o.status.success(), "{}\n{text}", stderr(&o));
    assert!(text.contains("now = 2024-03-25T09:00:00Z"), "{text}");
    assert!(
        text.contains("service writes applied (--apply-writes): 4"),
        "{text}"
    );
    assert!(
        text.contains(
            "#3 REMOVE 9e000000-0000-4000-8000-00000000a001/Group → handled: relationships:"
        ),
        "{text}"
    );
    assert!(text.contains("batchItemFailures: []"), "{text}");
    assert!(
        text.contains(
            "    - a11ce000-0000-4000-8000-000000000001/Group#9e000000-0000-4000-8000-00000000a001"
        ),
        "{text}"
    );
    assert!(
        text.contains(&format!("snapshot written: {}", out.display())),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        std::fs::read_to_string(events("golden/group-deleted.json")).unwrap(),
        "--write-snapshot is the table after the replay"
    );
    assert!(stderr(&o).contains("--diff scans"), "{}", stderr(&o));
    // Replaying it again: nothing left to change; without --diff the
    // writes sent are listed (idempotent deletes of what is gone).
    let again = |diff: bool| {
        let mut args = vec![
            "replay",
            "--endpoint-url",
            &t.endpoint,
            "--table",
            &t.name,
            "--now",
            NOW,
        ];
        if diff {
            args.push("--diff");
        }
        let file = events("stream/group-deleted.json");
        args.push(&file);
        stdout(&run(&args))
    };
    let text = again(true);
    assert!(
        text.contains("table changes by the worker: 0 added, 0 changed, 0 removed"),
        "{text}"
    );
    let text = again(false);
    assert!(text.contains("writes made by the worker: "), "{text}");
    assert!(!text.contains("table changes"), "{text}");
}

#[tokio::test]
async fn replay_json_for_scripts() {
    let t = household_table().await;
    let o = run(&[
        "replay",
        "--json",
        "--endpoint-url",
        &t.endpoint,
        "--table",
        &t.name,
        "--apply-writes",
        "--now",
        NOW,
        &events("stream/malformed-record-in-batch.json"),
        &events("schedule/sweep-invitations.rule.json"),
    ]);
    // A malformed record was not handled: exit 3, the report still whole.
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).expect("stdout is JSON");
    let stream = &v["files"][0];
    assert_eq!(stream["kind"], "stream");
    let outcomes: Vec<&str> = stream["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["handled", "malformed", "handled"]);
    assert_eq!(
        stream["batchItemFailures"],
        serde_json::json!({"batchItemFailures": []})
    );
    assert_eq!(stream["applied"]["notApplied"][0]["index"], 1);
    let tick = &v["files"][1];
    assert_eq!(tick["kind"], "schedule");
    assert_eq!(tick["tick"]["job"], "sweep-invitations");
    assert_eq!(tick["tick"]["source"], "rule");
    assert_eq!(tick["job"]["job"], "sweep-invitations");
    assert!(
        tick["diff"].is_null(),
        "no scan of a table it did not start"
    );
    let writes = tick["writes"].as_array().unwrap();
    assert_eq!(writes.len(), 1, "the expired link: {tick}");
    assert_eq!(writes[0]["op"], "DELETE");
    assert!(
        writes[0]["key"]
            .as_str()
            .unwrap()
            .ends_with("/InvitationLinkHash"),
        "{tick}"
    );
    assert_eq!(v["failed"], true, "the malformed record");
}

#[tokio::test]
async fn dry_run_lists_planned_writes_and_writes_nothing() {
    let t = household_table().await;
    let before = snapshot_text(&t.snapshot().await, KEYS);
    let o = run(&[
        "replay",
        "--dry-run",
        "--endpoint-url",
        &t.endpoint,
        "--table",
        &t.name,
        "--now",
        NOW,
        &events("schedule/sweep-invitations.scheduler.json"),
    ]);
    let text = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        text.contains("planned writes (dry run, nothing written): 1"),
        "{text}"
    );
    assert!(
        text.contains("DELETE 9e000000-0000-4000-8000-00000000a002/InvitationLinkHash if "),
        "{text}"
    );
    assert_eq!(
        snapshot_text(&t.snapshot().await, KEYS),
        before,
        "nothing written"
    );
    // --dry-run and --apply-writes do not go together.
    let o = run(&[
        "replay",
        "--dry-run",
        "--apply-writes",
        &events("stream/group-deleted.json"),
    ]);
    assert_eq!(o.status.code(), Some(2));
}

#[tokio::test]
async fn run_job_reports_and_changes_the_table() {
    let t = household_table().await;
    let o = run(&[
        "run",
        "sweep-invitations",
        "--json",
        "--endpoint-url",
        &t.endpoint,
        "--table",
        &t.name,
        "--now",
        NOW,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["report"]["job"], "sweep-invitations");
    assert_eq!(v["report"]["complete"], true);
    let writes = v["writes"].as_array().unwrap();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0]["op"], "DELETE");
    assert_eq!(writes[0]["result"], "applied");
    assert!(v["diff"].is_null(), "no scan of a table it did not start");
    assert!(v["metrics"]["write_capacity"].as_f64().unwrap() > 0.0);
    let o = run(&[
        "run",
        "audit",
        "--endpoint-url",
        &t.endpoint,
        "--table",
        &t.name,
        "--now",
        NOW,
    ]);
    let text = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        text.contains("ran audit on table") && text.contains("writes made:"),
        "{text}"
    );
    // The job's name once, then its summary.
    assert!(text.contains("\naudit: scanned "), "{text}");
    assert!(!text.contains("audit: audit:"), "{text}");
}

/// This machine's own address that is not loopback (the guard must see a
/// remote endpoint while the test still reaches it), if it has one.
fn own_address() -> Option<std::net::IpAddr> {
    let udp = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    // Connecting a UDP socket sends nothing; it picks the outgoing address.
    udp.connect("192.0.2.255:9").ok()?;
    let ip = udp.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// Every command that writes refuses an endpoint that is not on this
/// machine without --allow-remote-writes, before sending anything: the
/// listener at that endpoint never sees a connection.
#[test]
fn write_commands_refuse_a_remote_endpoint_touching_nothing() {
    let Some(ip) = own_address() else {
        eprintln!("no non-loopback address on this machine: skipped");
        return;
    };
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let snapshot = events("tables/household.json");
    let group_deleted = events("stream/group-deleted.json");
    let commands: Vec<Vec<&str>> = vec![
        vec!["table", "load", &snapshot],
        vec!["table", "create"],
        vec!["replay", "--apply-writes", &group_deleted],
        vec!["replay", "--snapshot", &snapshot, &group_deleted],
        vec!["run", "audit", "--snapshot", &snapshot],
        vec!["dev", "--until-idle"],
        vec!["checkpoints", "reset", "audit"],
    ];
    for c in &commands {
        let mut args = c.clone();
        args.extend(["--endpoint-url", &url, "--table", "live-table"]);
        let o = run(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{c:?}: {err}");
        assert!(
            err.contains("refusing to write") && err.contains("--allow-remote-writes"),
            "{c:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{c:?}: one line: {err}");
    }
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the remote endpoint was contacted: {other:?}"),
    }
    // The variables docs/CONFIGURATION.md names are read as the flags.
    let o = bin()
        .args(["table", "load", &snapshot])
        .env("DYNAMODB_ENDPOINT_URL", &url)
        .env("TABLE_NAME", "live-table")
        .output()
        .unwrap();
    assert!(stderr(&o).contains(&url), "{}", stderr(&o));
    assert!(listener.accept().is_err(), "still untouched");
    // So are the SDK's own: AWS_ENDPOINT_URL_DYNAMODB over the alias over
    // AWS_ENDPOINT_URL, and the flag over all of them.
    let elsewhere = "http://192.0.2.1:8000";
    for (vars, expected) in [
        (vec![("AWS_ENDPOINT_URL", url.as_str())], url.as_str()),
        (
            vec![
                ("AWS_ENDPOINT_URL_DYNAMODB", url.as_str()),
                ("DYNAMODB_ENDPOINT_URL", elsewhere),
            ],
            url.as_str(),
        ),
        (
            vec![
                ("DYNAMODB_ENDPOINT_URL", url.as_str()),
                ("AWS_ENDPOINT_URL", elsewhere),
            ],
            url.as_str(),
        ),
    ] {
        let mut cmd = bin();
        cmd.args(["table", "load", &snapshot])
            .env("TABLE_NAME", "live-table");
        for (k, v) in &vars {
            cmd.env(k, v);
        }
        let o = cmd.output().unwrap();
        assert!(stderr(&o).contains(expected), "{vars:?}: {}", stderr(&o));
    }
    let o = bin()
        .args(["table", "load", &snapshot, "--endpoint-url", &url])
        .env("AWS_ENDPOINT_URL_DYNAMODB", elsewhere)
        .env("TABLE_NAME", "live-table")
        .output()
        .unwrap();
    assert!(stderr(&o).contains(&url), "{}", stderr(&o));
    assert!(listener.accept().is_err(), "still untouched");
}

/// `run` on a table it did not start reads only what the job reads: the
/// writes come from the store's own record, no Scan is sent (counted by a
/// proxy in front of DynamoDB Local); `--diff` asks for the scans and says
/// what they cost first.
// The proxy serves on the runtime while the command runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_reports_its_writes_without_scanning_the_table() {
    use worker_testkit::fault_proxy::{FaultConfig, FaultProxy};
    let t = household_table().await;
    let proxy = FaultProxy::start(&t.endpoint, FaultConfig::none())
        .await
        .unwrap();
    let url = proxy.endpoint_url();
    let args = [
        "run",
        "sweep-invitations",
        "--json",
        "--endpoint-url",
        &url,
        "--table",
        &t.name,
        "--now",
        NOW,
    ];
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["writes"].as_array().unwrap().len(), 1, "{v}");
    let stats = proxy.stats();
    assert_eq!(stats.operation("Scan"), 0, "{:?}", stats.operations);
    assert_eq!(stats.operation("DeleteItem"), 1, "{:?}", stats.operations);
    // The sweep reads its sparse index, and the proxy tells those requests
    // apart (the environment tests rely on it).
    assert!(stats.index_requests >= 1, "{stats:?}");
    let mut with_diff = args.to_vec();
    with_diff.push("--diff");
    let o = run(&with_diff);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--diff scans") && stderr(&o).contains("read units per scan"),
        "{}",
        stderr(&o)
    );
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["diff"].is_object(), "{v}");
    assert!(proxy.stats().operation("Scan") >= 2);
}

/// Against an endpoint that is not on this machine `run` is a dry run
/// unless --allow-remote-writes: the job reads, plans its delete, and no
/// write request leaves the command.
// The proxy serves on the runtime while the command runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_against_a_remote_table_is_a_dry_run() {
    use worker_testkit::fault_proxy::{FaultConfig, FaultProxy};
    let Some(ip) = own_address() else {
        eprintln!("no non-loopback address on this machine: skipped");
        return;
    };
    let t = household_table().await;
    let before = t.keys().await;
    let proxy = FaultProxy::start_on(&format!("{ip}:0"), &t.endpoint, FaultConfig::none())
        .await
        .unwrap();
    let url = proxy.endpoint_url();
    let o = run(&[
        "run",
        "sweep-invitations",
        "--json",
        "--endpoint-url",
        &url,
        "--table",
        &t.name,
        "--now",
        NOW,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("dry run"), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["dryRun"], true);
    assert_eq!(v["plannedWrites"].as_array().unwrap().len(), 1, "{v}");
    let ops = proxy.stats().operations;
    for write in ["PutItem", "DeleteItem", "UpdateItem", "BatchWriteItem"] {
        assert!(!ops.contains_key(write), "{write} sent: {ops:?}");
    }
    assert_eq!(t.keys().await, before, "nothing changed");
}

/// The `dev` loop from the command line: the group deletion in the stream
/// is handled until the stream is quiet.
#[tokio::test]
async fn dev_until_idle_handles_the_stream() {
    let t = household_table().await;
    let events_file = events("stream/group-deleted.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&events_file).unwrap()).unwrap();
    // The service's writes of the fixture, done on the table.
    let decoded = worker_engine::stream::decode_event(&v).unwrap();
    let plan = worker_toolkit::replay::apply::plan(&decoded);
    worker_toolkit::replay::apply::apply(t.store.as_ref(), &plan)
        .await
        .unwrap();
    let o = run(&[
        "dev",
        "--endpoint-url",
        &t.endpoint,
        "--table",
        &t.name,
        "--starting-position",
        "trim-horizon",
        "--until-idle",
        "--batch-size",
        "10",
    ]);
    let text = stdout(&o);
    assert!(o.status.success(), "{}\n{text}", stderr(&o));
    assert!(text.contains("batch shard="), "{text}");
    assert!(text.contains("idle after"), "{text}");
    let keys = t.keys().await;
    assert!(
        !keys
            .iter()
            .any(|(_, sk)| sk == "Group#9e000000-0000-4000-8000-00000000a001"),
        "the cascade removed the memberships: {keys:?}"
    );
}

/// The default: an embedded DynamoDB Local started (and stopped) by the
/// command itself.
#[test]
fn replay_starts_its_own_dynamodb_local_by_default() {
    let out = tmp("auto-start.json");
    let o = run(&[
        "replay",
        "--snapshot",
        &events("tables/household.json"),
        "--apply-writes",
        "--now",
        NOW,
        "--write-snapshot",
        &out.display().to_string(),
        &events("stream/group-deleted.json"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("starting DynamoDB Local…"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).contains("on the embedded DynamoDB Local"));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        std::fs::read_to_string(events("golden/group-deleted.json")).unwrap()
    );
}

/// `infra/template.yaml` with some text replaced, as a file.
fn template_copy(name: &str, replace: &[(&str, &str)]) -> String {
    let path = crate::support::workspace().join("infra/template.yaml");
    let mut text = std::fs::read_to_string(path).unwrap();
    for (from, to) in replace {
        assert!(text.contains(from), "{from} is in the template");
        text = text.replacen(from, to, 1);
    }
    write(name, &text)
}

/// The service's writes of the group-deletion fixture, done on the table.
async fn service_deletes_the_group(t: &TestTable) {
    let events_file = events("stream/group-deleted.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&events_file).unwrap()).unwrap();
    let decoded = worker_engine::stream::decode_event(&v).unwrap();
    let plan = worker_toolkit::replay::apply::plan(&decoded);
    worker_toolkit::replay::apply::apply(t.store.as_ref(), &plan)
        .await
        .unwrap();
}

/// `dev` takes the event source mapping and the schedules from the
/// template: changing them in a copy changes what `dev` does.
#[tokio::test]
async fn dev_follows_the_deployment_template() {
    let t = household_table().await;
    service_deletes_the_group(&t).await;
    let dev = |template: &str| {
        let o = run(&[
            "dev",
            "--template",
            template,
            "--json",
            "--until-idle",
            "--starting-position",
            "trim-horizon",
            "--endpoint-url",
            &t.endpoint,
            "--table",
            &t.name,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str::<Value>(&stdout(&o)).unwrap()
    };
    let deployed = crate::support::workspace()
        .join("infra/template.yaml")
        .display()
        .to_string();
    let v = dev(&deployed);
    let m = &v["mapping"];
    assert_eq!(m["batchSize"], 1000, "{m}");
    assert_eq!(m["batchingWindowSecs"], 1);
    assert_eq!(m["maxRetries"], 10);
    assert_eq!(m["bisect"], true);
    assert_eq!(m["maxRecordAgeSecs"], 21600);
    assert_eq!(m["parallelizationFactor"], 1, "the parameter's default");
    assert_eq!(m["timeoutSecs"], 120.0);
    assert_eq!(m["filters"].as_array().unwrap().len(), 1);
    assert_eq!(m["failureFile"], "dev-failures.jsonl");
    let first_batches = v["batches"].as_array().unwrap().len();
    assert!(first_batches >= 1, "{v}");
    let schedule = |v: &Value, job: &str| {
        v["schedules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["job"] == job)
            .unwrap()["schedule"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(schedule(&v, "flag-expiring"), "cron(5 0 * * ? *)");
    assert_eq!(schedule(&v, "sweep-invitations"), "rate(15 minutes)");
    assert_eq!(
        schedule(&v, "backfill"),
        "never",
        "its schedule is DISABLED"
    );

    // A copy with smaller batches, another zone and no filter.
    let copy = template_copy(
        "template-small-batches.yaml",
        &[
            ("BatchSize: 1000", "BatchSize: 2"),
            (
                "ParallelizationFactor: !Ref StreamParallelizationFactor",
                "ParallelizationFactor: 4",
            ),
            ("    Default: UTC\n", "    Default: Asia/Tokyo\n"),
            ("Default: 15\n", "Default: 5\n"),
        ],
    );
    let t2 = household_table().await;
    service_deletes_the_group(&t2).await;
    let o = run(&[
        "dev",
        "--template",
        &copy,
        "--json",
        "--until-idle",
        "--starting-position",
        "trim-horizon",
        "--endpoint-url",
        &t2.endpoint,
        "--table",
        &t2.name,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["mapping"]["batchSize"], 2);
    assert_eq!(v["mapping"]["parallelizationFactor"], 4);
    let batches = v["batches"].as_array().unwrap();
    assert!(batches.len() > first_batches, "smaller batches: {v}");
    assert!(batches.iter().all(|b| b["records"].as_u64().unwrap() <= 2));
    assert_eq!(
        schedule(&v, "flag-expiring"),
        "cron(5 0 * * ? *) Asia/Tokyo"
    );
    assert_eq!(schedule(&v, "sweep-invitations"), "rate(5 minutes)");
    // Both loops leave the same table.
    assert_eq!(t.keys().await, t2.keys().await);
}

/// `dev --state-file`: a restart resumes after the last record done, so
/// nothing is handled twice and nothing is skipped.
#[tokio::test]
async fn dev_state_file_resumes_without_reprocessing() {
    let t = household_table().await;
    service_deletes_the_group(&t).await;
    let state = tmp("dev-state.json");
    let _ = std::fs::remove_file(&state);
    let dev = || {
        let o = run(&[
            "dev",
            "--json",
            "--until-idle",
            "--starting-position",
            "trim-horizon",
            "--state-file",
            &state.display().to_string(),
            "--endpoint-url",
            &t.endpoint,
            "--table",
            &t.name,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str::<Value>(&stdout(&o)).unwrap()
    };
    let handled = |v: &Value| -> u64 {
        v["batches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["handled"].as_u64().unwrap())
            .sum()
    };
    let first = dev();
    assert!(handled(&first) > 0, "{first}");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    let id = first["sources"][0]["id"].as_str().unwrap();
    assert_eq!(
        id, "StreamFunction.TableStream",
        "the template's event source"
    );
    assert!(
        !saved["sources"][id]["shards"]
            .as_object()
            .unwrap()
            .is_empty(),
        "{saved}"
    );
    let again = dev();
    assert_eq!(
        again["batches"].as_array().unwrap().len(),
        0,
        "nothing re-processed: {again}"
    );
    assert!(has_saved_position(&again));
    // A write after the restart is handled, once.
    t.put_json(&[serde_json::json!({
        "PK": {"S": "9e000000-0000-4000-8000-0000000000aa"},
        "SK": {"S": "User"},
        "UserName": {"S": "late"},
        "EMailAddress": {"S": "late@example.invalid"}
    })])
    .await;
    let third = dev();
    let records: u64 = third["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["records"].as_u64().unwrap())
        .sum();
    assert_eq!(records, 1, "{third}");
}

/// Records read by a `dev --json` run, over its batches (first attempts).
fn records_read(v: &Value) -> u64 {
    v["batches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["attempt"] == 1)
        .map(|b| b["records"].as_u64().unwrap())
        .sum()
}

/// Without `--starting-position`, `dev` starts where the template's event
/// source does: TRIM_HORIZON in infra/template.yaml (the service's writes
/// before the start are handled), LATEST in a copy (they are skipped).
#[tokio::test]
async fn dev_starts_where_the_template_says() {
    let dev = |t: &TestTable, template: &str| {
        let o = run(&[
            "dev",
            "--template",
            template,
            "--json",
            "--until-idle",
            "--endpoint-url",
            &t.endpoint,
            "--table",
            &t.name,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        (
            serde_json::from_str::<Value>(&stdout(&o)).unwrap(),
            stderr(&o),
        )
    };
    let deployed = crate::support::workspace()
        .join("infra/template.yaml")
        .display()
        .to_string();
    let t = household_table().await;
    service_deletes_the_group(&t).await;
    let (v, _) = dev(&t, &deployed);
    assert_eq!(v["mapping"]["startingPosition"], "TRIM_HORIZON", "{v}");
    assert!(records_read(&v) > 0, "the writes before the start: {v}");

    let latest = template_copy(
        "template-latest.yaml",
        &[("StartingPosition: TRIM_HORIZON", "StartingPosition: LATEST")],
    );
    let t2 = household_table().await;
    service_deletes_the_group(&t2).await;
    let (v, log) = dev(&t2, &latest);
    assert_eq!(v["mapping"]["startingPosition"], "LATEST", "{v}");
    assert_eq!(records_read(&v), 0, "{v}");
    assert!(log.contains("existing records skipped"), "{log}");
}

/// `dev --state-file`, started at LATEST on a stream with no record yet
/// and stopped: every record written while it was stopped is handled by
/// the restart, once; a third run has nothing left.
#[tokio::test]
async fn dev_restarted_with_its_state_file_skips_nothing() {
    let t = support::nishiki_table().await;
    let state = tmp(&format!("dev-state-{}.json", t.name));
    let _ = std::fs::remove_file(&state);
    let dev = || {
        let o = run(&[
            "dev",
            "--json",
            "--until-idle",
            "--starting-position",
            "latest",
            "--state-file",
            &state.display().to_string(),
            "--endpoint-url",
            &t.endpoint,
            "--table",
            &t.name,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str::<Value>(&stdout(&o)).unwrap()
    };
    let first = dev();
    assert_eq!(records_read(&first), 0, "{first}");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    let source = &saved["sources"][first["sources"][0]["id"].as_str().unwrap()];
    assert_eq!(source["startingPosition"], "LATEST", "{saved}");
    assert!(source["startedAt"].is_string(), "{saved}");

    // The service writes while the loop is stopped.
    let users: Vec<Value> = (0..40)
        .map(|i| {
            serde_json::json!({
                "PK": {"S": format!("9e000000-0000-4000-8000-{i:012}")},
                "SK": {"S": "User"},
                "UserName": {"S": format!("u{i}")},
                "EMailAddress": {"S": format!("u{i}@example.invalid")}
            })
        })
        .collect();
    t.put_json(&users).await;

    let second = dev();
    assert_eq!(records_read(&second), 40, "every write handled: {second}");
    let third = dev();
    assert_eq!(records_read(&third), 0, "none twice: {third}");
}

fn has_saved_position(v: &Value) -> bool {
    v["position"].as_object().is_some_and(|p| !p.is_empty())
}

/// A table with more containers and users than one backfill page (1,000
/// items evaluated per page), so a short deadline cuts the job between
/// pages.
async fn backfill_table() -> TestTable {
    let t = household_table().await;
    let filler: Vec<Value> = (0..1500)
        .map(|i| {
            serde_json::json!({
                "PK": {"S": format!("9e000000-0000-4000-8000-{i:012}")},
                "SK": {"S": "User"},
                "UserName": {"S": format!("u{i}")},
                "EMailAddress": {"S": format!("u{i}@example.invalid")}
            })
        })
        .collect();
    t.put_json(&filler).await;
    t
}

/// A job cut by `--timeout` stops at the deadline with its checkpoint and
/// the next run resumes there, as the next tick does when deployed: the
/// final table is the one an uncut run leaves. `checkpoints list|reset`
/// show and remove the checkpoint.
#[tokio::test]
async fn a_job_cut_by_the_timeout_resumes_to_the_same_table() {
    let (cut, whole) = (backfill_table().await, backfill_table().await);
    let backfill = |t: &TestTable, timeout: &str| {
        let o = run(&[
            "run",
            "backfill",
            "--json",
            "--timeout",
            timeout,
            "--env",
            "DEADLINE_MARGIN_MS=990",
            "--now",
            NOW,
            "--endpoint-url",
            &t.endpoint,
            "--table",
            &t.name,
        ]);
        let v = serde_json::from_str::<Value>(&stdout(&o)).unwrap();
        // 0 once the job is done; 4 while it stopped at its deadline with
        // work left (a script loops until 0).
        let expected = if v["report"]["complete"] == true {
            0
        } else {
            4
        };
        assert_eq!(o.status.code(), Some(expected), "{}", stderr(&o));
        v
    };
    let v = backfill(&whole, "0");
    assert_eq!(v["report"]["complete"], true, "{v}");
    let mut runs = Vec::new();
    let mut checked_list = false;
    loop {
        // 1 s minus a 990 ms margin: room to start one page, never two.
        let v = backfill(&cut, "1");
        let complete = v["report"]["complete"] == true;
        runs.push(v);
        if complete || runs.len() >= 40 {
            break;
        }
        if !checked_list {
            let o = run(&[
                "checkpoints",
                "list",
                "--json",
                "--endpoint-url",
                &cut.endpoint,
                "--table",
                &cut.name,
            ]);
            assert!(o.status.success(), "{}", stderr(&o));
            let l: Value = serde_json::from_str(&stdout(&o)).unwrap();
            let b = l["checkpoints"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["job"] == "backfill")
                .unwrap()
                .clone();
            if b["checkpoint"].is_object() {
                assert_eq!(b["key"], "WorkerCheckpoint/backfill", "{b}");
                checked_list = true;
            }
        }
    }
    assert_eq!(runs.last().unwrap()["report"]["complete"], true, "{runs:?}");
    assert!(
        runs.iter()
            .any(|r| r["report"]["complete"] == false && r["writes"].as_array().unwrap().len() > 1),
        "at least one run made progress and was cut: {runs:?}"
    );
    assert!(
        checked_list,
        "checkpoints list showed the cut job's checkpoint"
    );
    let snapshot = |t: &TestTable| {
        let t = t.store.clone();
        async move {
            let items = worker_toolkit::replay::snapshot::scan_table(t.as_ref(), KEYS, None)
                .await
                .unwrap();
            snapshot_text(&items, KEYS)
        }
    };
    assert!(
        snapshot(&cut).await == snapshot(&whole).await,
        "same final table"
    );

    // Reset: the checkpoint goes, the next run starts over (and converges).
    let o = run(&[
        "checkpoints",
        "reset",
        "backfill",
        "--endpoint-url",
        &cut.endpoint,
        "--table",
        &cut.name,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("deleted the checkpoint of backfill"),
        "{}",
        stdout(&o)
    );
    let o = run(&[
        "checkpoints",
        "list",
        "--endpoint-url",
        &cut.endpoint,
        "--table",
        &cut.name,
    ]);
    assert!(
        stdout(&o).contains("backfill") && stdout(&o).contains("none (WorkerCheckpoint/backfill)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn completions_for_every_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let o = run(&["completions", shell]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        assert!(
            text.contains("nishiki-worker") && text.contains("checkpoints"),
            "{shell}"
        );
        assert!(text.contains("allow-remote-writes"), "{shell}");
    }
}

/// `capture --redact --redact-key`: names of groups, containers and foods,
/// link hashes and any --redact-attr are replaced by keyed hashes, the same
/// in every capture with the same key, and a redacted id is replaced alike
/// where it is part of a key, so the fixture keeps its relationships.
#[tokio::test]
async fn keyed_redaction_is_stable_and_keeps_relationships() {
    let t = household_table().await;
    let capture = |name: &str, key: &str| {
        let out = tmp(name);
        let o = run(&[
            "capture",
            "--json",
            "--redact",
            "--redact-key",
            key,
            "--redact-attr",
            "GroupId",
            "--out",
            &out.display().to_string(),
            "--endpoint-url",
            &t.endpoint,
            "--table",
            &t.name,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["keyedRedaction"], true);
        std::fs::read_to_string(out).unwrap()
    };
    let a = capture("redacted-a.json", "team key");
    let b = capture("redacted-b.json", "team key");
    assert_eq!(a, b, "same key, same fixture");
    for secret in [
        "Home",
        "Carol's flat",
        "Milk",
        "Coffee beans",
        "7f3c2a1b9e8d4c6a5b0f1e2d3c4b5a69",
        "9e000000-0000-4000-8000-00000000a001",
        "@example.com",
    ] {
        assert!(!a.contains(secret), "{secret} left in the capture");
    }
    let event: Value = serde_json::from_str(&a).unwrap();
    let records = event["Records"].as_array().unwrap();
    let image = |r: &Value, attr: &str| {
        r["dynamodb"]["NewImage"][attr]["S"]
            .as_str()
            .map(str::to_owned)
    };
    // A membership's GroupId and the group's own key: the same placeholder.
    let membership = records
        .iter()
        .find(|r| image(r, "GroupId").is_some())
        .expect("a membership");
    let group_id = image(membership, "GroupId").unwrap();
    assert!(group_id.starts_with("value-"), "{group_id}");
    assert_eq!(
        membership["dynamodb"]["Keys"]["SK"]["S"],
        format!("Group#{group_id}")
    );
    assert!(
        records
            .iter()
            .any(|r| r["dynamodb"]["Keys"]["PK"]["S"] == group_id.as_str()
                && r["dynamodb"]["Keys"]["SK"]["S"] == "Group"),
        "the group item carries the same placeholder"
    );
    assert!(a.contains("\"group-") && a.contains("\"food-") && a.contains("\"invitation-"));
    let other = capture("redacted-c.json", "another key");
    assert_ne!(a, other, "another key, other placeholders");
}

/// Output into a reader that stopped reading (`| head`) ends the command
/// quietly, as it ends `cat`: no panic, no "Broken pipe" message.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let mut child = bin()
        .args([
            "replay",
            "--snapshot",
            &events("tables/household.json"),
            "--apply-writes",
            "--now",
            NOW,
            &events("stream/group-deleted.json"),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before anything is printed.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    assert!(
        out.status.signal() == Some(libc_sigpipe()) || out.status.success(),
        "{:?}: {err}",
        out.status
    );
}

/// SIGPIPE's number (13 on Linux and the BSDs).
fn libc_sigpipe() -> i32 {
    13
}

/// `dev --until-idle` exits 3 when a record it read was not handled: here
/// a membership whose ids are not ids (rejected), beside the
/// household's records (handled).
#[tokio::test]
async fn dev_exits_3_when_a_record_was_not_handled() {
    let t = household_table().await;
    t.put_json(&[serde_json::json!({"PK": {"S": "not-a-user"}, "SK": {"S": "Group#not-a-group"}})])
        .await;
    let o = run(&[
        "dev",
        "--until-idle",
        "--starting-position",
        "trim-horizon",
        "--endpoint-url",
        &t.endpoint,
        "--table",
        &t.name,
    ]);
    let printed = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(3), "{printed}");
    assert!(printed.contains("1 rejected"), "{printed}");
}

/// A table without its indexes is the deployment's fault, not the
/// records': `replay`, `run` and `dev` stop with exit status 1 and the
/// cause on one line, where they used to reject the records and exit 0.
#[tokio::test]
async fn a_missing_index_stops_replay_run_and_dev_with_the_cause() {
    let t = TestTable::with_schema(&worker_engine::schema::TableSchema {
        indexes: Vec::new(),
        ..nishiki_worker::schema::nishiki()
    })
    .await;
    let items = read_snapshot(Path::new(&events("tables/household.json")), KEYS).unwrap();
    load_items(t.store.clone(), items, 4, None).await.unwrap();
    // The service's writes of the last-members-left fixture: its cascade
    // reads the relationship index (for `dev`).
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(events("stream/last-members-left.json")).unwrap(),
    )
    .unwrap();
    let decoded = worker_engine::stream::decode_event(&v).unwrap();
    worker_toolkit::replay::apply::apply(
        t.store.as_ref(),
        &worker_toolkit::replay::apply::plan(&decoded),
    )
    .await
    .unwrap();
    let target = ["--endpoint-url", &t.endpoint, "--table", &t.name];
    let tick = events("schedule/flag-expiring.scheduler.json");
    let now = "2024-03-26T00:05:00Z";
    let commands: [Vec<&str>; 3] = [
        [&["replay", "--now", now][..], &target, &[tick.as_str()]].concat(),
        [&["run", "flag-expiring", "--now", now][..], &target].concat(),
        [
            &["dev", "--starting-position", "trim-horizon", "--until-idle"][..],
            &target,
        ]
        .concat(),
    ];
    for args in commands {
        let o = run(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}\n{}", stdout(&o));
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{args:?}: {err}");
        assert!(
            errors[0].starts_with("error: environment fault")
                && errors[0].contains("does not have the specified index"),
            "{args:?}: {err}"
        );
    }
}
