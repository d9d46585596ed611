//! `nishiki-worker redrive` and `capture --shard`, run as an operator
//! would against a table on DynamoDB Local: the service writes a user item
//! whose key Nishiki rejects between two good group items, the stream
//! mapping gives up on the last two (an on-failure message built from the
//! real sequence numbers), and the operator replays that range: the dry run
//! writes nothing, `--apply` handles the group and parks the bad record with
//! its shard; a redrive of the parked record keeps it with the new reason
//! (the handlers still reject it), and exits 3. A dry run naming a parking
//! table that does not exist says so, goes on, and creates nothing.
//!
//! Against real destinations (moto's SQS and S3, DynamoDB Local's stream):
//! every message of a queue (more than ReceiveMessage's 10) is listed by a
//! dry run that leaves the queue as it was, then replayed and deleted by
//! `--apply`, the SQS client following the queue URL (no SQS variable) or
//! the SDK's `AWS_ENDPOINT_URL_SQS`; a range that cannot be read (its shard
//! is gone, its records trimmed) is reported and left while the good
//! one is replayed (exit 3); a second `--park` of the same range counts its
//! records as already parked; and the invocation records of an S3
//! destination (the documented key layout and JSON, the batch inside) are
//! replayed without the stream, each object deleted once its records are
//! handled or parked, an object that is not one left (exit 3).

use crate::support;

use std::process::Output;

use serde_json::{Value, json};
use worker_engine::park::{self, Parking};
use worker_engine::store::{DynamoStore, ItemWriter, local_client};
use worker_testkit::moto::{self, Moto};
use worker_testkit::on_failure::{
    self, FAILED_AT, MAPPING_UUID, bucket_keys, put_object, queue_bodies, queue_counts, send,
};
use worker_testkit::{TestTable, ddb, on_failure_message};

fn run(args: &[&str]) -> Output {
    run_with(args, &[])
}

/// The AWS variables a test process may carry, removed from the command's
/// environment unless given again.
const AWS_VARS: [&str; 10] = [
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "DYNAMODB_ENDPOINT_URL",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "MOTO_ENDPOINT",
    "TABLE_NAME",
];

/// The binary with exactly these AWS variables (`env`), the others
/// removed.
fn run_with(args: &[&str], env: &[(&str, String)]) -> Output {
    let mut cmd = crate::support::nishiki_worker();
    cmd.env_remove("RUST_LOG")
        .env_remove("PARKING_TABLE")
        .env("NO_COLOR", "1");
    for var in AWS_VARS {
        cmd.env_remove(var);
    }
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd.args(args).output().expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// stdout and stderr, for a failed assertion's message.
fn both(o: &Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        stdout(o),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test]
async fn an_on_failure_message_is_replayed_and_its_bad_record_parked() {
    let table = support::nishiki_table().await;
    for (pk, sk) in [
        ("9e000000-0000-4000-8000-00000000a001", "Group"),
        ("not-a-uuid", "User"),
        ("9e000000-0000-4000-8000-00000000a002", "Group"),
    ] {
        let item = ddb(json!({"PK": {"S": pk}, "SK": {"S": sk}, "GroupName": {"S": "Home"}}));
        table.store.put(item, None).await.unwrap();
    }
    let (arn, records) = table.stream_records().await;
    assert_eq!(records.len(), 3);
    let shard = records[1].0.clone();
    let seq = |i: usize| records[i].1.sequence_number.clone().unwrap().to_string();
    let message = on_failure_message(&arn, &shard, &seq(1), &seq(2), 2);
    let dir = std::env::temp_dir().join(format!("redrive-{}", table.name));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("failure.json");
    std::fs::write(&file, message.to_string()).unwrap();
    let (file, endpoint, name) = (file.display().to_string(), &table.endpoint, &table.name);
    let parking_name = format!("{name}-parking");
    let common = [
        "--endpoint-url",
        endpoint.as_str(),
        "--table",
        name.as_str(),
    ];

    // capture --shard: exactly the message's range.
    let out = dir.join("range.json").display().to_string();
    let o = run(&[
        &["capture"],
        &common[..],
        &[
            "--shard",
            &shard,
            "--from-sequence",
            &seq(1),
            "--to-sequence",
            &seq(2),
            "--out",
            &out,
        ],
    ]
    .concat());
    assert!(o.status.success(), "{o:?}");
    assert!(
        stdout(&o).starts_with("captured 2 records from 1 shard(s)"),
        "{}",
        stdout(&o)
    );

    // Dry run: what would happen, nothing written.
    let o = run(&[&["redrive"], &common[..], &["--failure-message", &file]].concat());
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(3), "{text}");
    assert!(
        text.contains("(dry run)") && text.contains("2 record(s)"),
        "{text}"
    );
    assert!(
        text.contains("[PK=not-a-uuid, SK=User] would fail and be parked"),
        "{text}"
    );
    assert!(text.contains("run again with --apply"), "{text}");

    // --apply: the group is handled, the bad record parked with its shard.
    let o = run(&[
        &["redrive"],
        &common[..],
        &[
            "--failure-message",
            &file,
            "--apply",
            "--parking-table",
            &parking_name,
        ],
    ]
    .concat());
    let text = stdout(&o);
    assert!(
        o.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.contains("1 handled, 1 parked"), "{text}");
    let store = DynamoStore::new(local_client(endpoint), &parking_name).with_key(park::KEY);
    let parking = Parking::new(std::sync::Arc::new(store), 14);
    let parked = parking.list().await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].sequence_number, seq(1));
    assert_eq!(parked[0].shard_id.as_deref(), Some(shard.as_str()));
    assert_eq!(parked[0].stream_arn, arn);

    // The handlers still reject it: a redrive keeps it, with the reason.
    let o = run(&[
        &["redrive"],
        &common[..],
        &["--parking-table", &parking_name, "--apply"],
    ]
    .concat());
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(3), "{text}");
    assert!(text.contains("0 handled and removed, 1 kept"), "{text}");
    assert_eq!(parking.list().await.unwrap()[0].redrives, 1);

    // Without a parking table a plain redrive says what is missing.
    let o = run(&[&["redrive"], &common[..]].concat());
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--parking-table"));
    let _ = std::fs::remove_dir_all(dir);
}

/// Whether the table exists at the endpoint.
async fn table_exists(endpoint: &str, name: &str) -> bool {
    match local_client(endpoint)
        .describe_table()
        .table_name(name)
        .send()
        .await
    {
        Ok(_) => true,
        Err(e) => {
            let e = aws_smithy_types::error::display::DisplayErrorContext(e).to_string();
            assert!(e.contains("ResourceNotFound"), "{e}");
            false
        }
    }
}

/// A dry run (no `--apply`) with `--parking-table` naming a missing table
/// creates no table and writes nothing: it reports the missing table and
/// goes on, for the parked records (none) and for a failure message's
/// range (run through the handlers, the bad record would be parked).
#[tokio::test]
async fn a_dry_run_with_a_missing_parking_table_creates_nothing() {
    let table = support::nishiki_table().await;
    for (pk, sk) in [
        ("9e000000-0000-4000-8000-00000000a001", "Group"),
        ("not-a-uuid", "User"),
    ] {
        let item = ddb(json!({"PK": {"S": pk}, "SK": {"S": sk}, "GroupName": {"S": "Home"}}));
        table.store.put(item, None).await.unwrap();
    }
    let (arn, records) = table.stream_records().await;
    let shard = records[0].0.clone();
    let seq = |i: usize| records[i].1.sequence_number.clone().unwrap().to_string();
    let dir = std::env::temp_dir().join(format!("redrive-dry-{}", table.name));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("failure.json");
    let message = on_failure_message(&arn, &shard, &seq(0), &seq(1), 2);
    std::fs::write(&file, message.to_string()).unwrap();
    let (endpoint, name) = (table.endpoint.as_str(), table.name.as_str());
    let parking_name = format!("{name}-parking");
    let before = table.snapshot().await;

    let o = run(&[
        "redrive",
        "--endpoint-url",
        endpoint,
        "--table",
        name,
        "--parking-table",
        &parking_name,
    ]);
    let text = stdout(&o);
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        text.contains(&format!("parking table {parking_name} does not exist")),
        "{text}"
    );
    assert!(
        text.contains("nothing parked: nothing to redrive"),
        "{text}"
    );
    assert!(
        !table_exists(endpoint, &parking_name).await,
        "created: {text}"
    );

    let o = run(&[
        "redrive",
        "--endpoint-url",
        endpoint,
        "--table",
        name,
        "--parking-table",
        &parking_name,
        "--failure-message",
        &file.display().to_string(),
    ]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(3), "the bad record fails: {text}");
    assert!(text.contains("does not exist"), "{text}");
    assert!(
        text.contains("[PK=not-a-uuid, SK=User] would fail and be parked"),
        "{text}"
    );
    assert!(
        !table_exists(endpoint, &parking_name).await,
        "created: {text}"
    );
    assert_eq!(table.snapshot().await, before, "nothing written");
    let _ = std::fs::remove_dir_all(dir);
}

/// A group item the handlers accept.
fn group(n: usize) -> worker_engine::item::Item {
    let pk = format!("9e000000-0000-4000-8000-{n:012x}");
    ddb(json!({"PK": {"S": pk}, "SK": {"S": "Group"}, "GroupName": {"S": format!("Home {n}")}}))
}

/// A user item whose key the handlers reject (parked when it fails).
fn bad_user() -> worker_engine::item::Item {
    ddb(json!({"PK": {"S": "not-a-uuid"}, "SK": {"S": "User"}, "GroupName": {"S": "Home"}}))
}

/// The table's stream: its ARN, its one shard and every record as Lambda
/// delivers it.
async fn lambda_records(table: &TestTable) -> (String, String, Vec<Value>) {
    let (arn, records) = table.stream_records().await;
    let shard = records[0].0.clone();
    assert!(records.iter().all(|(s, _)| *s == shard), "one shard");
    let changes: Vec<_> = records.into_iter().map(|(_, c)| c).collect();
    let records = on_failure::lambda_records(&changes, &arn);
    (arn, shard, records)
}

/// A queue of its own on moto's server, named after the table.
async fn queue(moto: &Moto, table: &TestTable) -> String {
    let name: String = format!("failures-{}", table.name)
        .chars()
        .take(80)
        .collect();
    on_failure::create_queue(moto, &name).await
}

fn parking(endpoint: &str, name: &str) -> Parking {
    let store = DynamoStore::new(local_client(endpoint), name).with_key(park::KEY);
    Parking::new(std::sync::Arc::new(store), 14)
}

/// 26 messages (ReceiveMessage gives at most 10 at a time), each the range
/// of one good record: the dry run, its SQS client going where the queue
/// URL says (no SQS variable, no AWS_REGION: `--region`), lists all 26 and
/// leaves every one visible; `--apply`, the client at
/// `AWS_ENDPOINT_URL_SQS`, replays and deletes all 26.
#[tokio::test]
async fn every_message_of_a_queue_is_listed_by_a_dry_run_and_replayed_by_apply() {
    let moto = moto::moto().await;
    let table = support::nishiki_table().await;
    for n in 0..26 {
        table.store.put(group(n), None).await.unwrap();
    }
    let (arn, shard, records) = lambda_records(&table).await;
    assert_eq!(records.len(), 26);
    let url = queue(moto, &table).await;
    for r in &records {
        // The message Lambda sends: the AWS-documented shape, one record.
        let message = on_failure::message_for(&arn, &shard, std::slice::from_ref(r));
        assert_eq!(message["DDBStreamBatchInfo"]["batchSize"], 1);
        assert_eq!(
            message["requestContext"]["condition"],
            "RetryAttemptsExhausted"
        );
        send(moto, &url, &message).await;
    }
    let (endpoint, name) = (table.endpoint.as_str(), table.name.as_str());
    let parking_name = format!("{name}-parking");
    let before = table.snapshot().await;

    let o = run_with(
        &[
            "redrive",
            "--endpoint-url",
            endpoint,
            "--table",
            name,
            "--queue-url",
            &url,
            "--region",
            moto::REGION,
        ],
        &[],
    );
    let text = stdout(&o);
    assert!(o.status.success(), "{}", both(&o));
    assert!(text.contains("26 message(s) in "), "{text}");
    assert_eq!(text.matches("] would be handled").count(), 26, "{text}");
    assert!(
        text.contains("the queue is as it was: 26 message(s) visible again"),
        "{text}"
    );
    assert!(
        text.contains("total: 26 message(s), 26 record(s): 26 would be handled, 0 would be parked, 0 would fail; 0 cannot be replayed"),
        "{text}"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("(the queue URL, region us-east-1)"),
        "{}",
        both(&o)
    );
    assert_eq!(
        queue_counts(moto, &url).await,
        (26, 0),
        "the queue as it was"
    );
    assert_eq!(table.snapshot().await, before, "a dry run writes nothing");

    let o = run_with(
        &[
            "redrive",
            "--endpoint-url",
            endpoint,
            "--table",
            name,
            "--queue-url",
            &url,
            "--parking-table",
            &parking_name,
            "--apply",
        ],
        &moto.env(),
    );
    let text = stdout(&o);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(
        text.matches("1 handled, 0 parked, 0 already parked, 0 failed")
            .count(),
        26,
        "{text}"
    );
    assert_eq!(
        text.matches("message deleted from the queue").count(),
        26,
        "{text}"
    );
    assert!(
        text.contains(
            "total: 26 message(s), 26 record(s): 26 handled, 0 parked, 0 already parked, 0 failed"
        ),
        "{text}"
    );
    assert!(
        text.contains("26 message(s) deleted from the queue, 0 left in it"),
        "{text}"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("(AWS_ENDPOINT_URL_SQS, region us-east-1)"),
        "{}",
        both(&o)
    );
    assert_eq!(
        queue_counts(moto, &url).await,
        (0, 0),
        "every message deleted"
    );
}

/// A range whose shard does not exist and one that starts before the
/// shard's oldest record (trimmed: TrimmedDataAccessException), sent before
/// a good one: `--apply` replays the good
/// one and deletes its message, reports the other two with their reasons,
/// leaves them in the queue (visible again) and exits 3.
#[tokio::test]
async fn a_range_that_cannot_be_read_is_reported_and_left_while_the_others_are_replayed() {
    let moto = moto::moto().await;
    let table = support::nishiki_table().await;
    for n in 0..3 {
        table.store.put(group(n), None).await.unwrap();
    }
    let (arn, shard, records) = lambda_records(&table).await;
    let url = queue(moto, &table).await;
    let seq = |i: usize| {
        records[i]["dynamodb"]["SequenceNumber"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let gone_shard = "shardId-00000001000000000000-0000dead";
    let gone = on_failure_message(&arn, gone_shard, &seq(0), &seq(1), 2);
    // The range starts before the shard's first record: trimmed.
    let first: u128 = seq(0).parse().unwrap();
    let before_first = format!("{:0width$}", first - 1, width = seq(0).len());
    let trimmed = on_failure_message(&arn, &shard, &before_first, &seq(0), 2);
    let good = on_failure::message_for(&arn, &shard, &records[1..=2]);
    for m in [&gone, &trimmed, &good] {
        send(moto, &url, m).await;
    }
    let (endpoint, name) = (table.endpoint.as_str(), table.name.as_str());
    let parking_name = format!("{name}-parking");

    let o = run_with(
        &[
            "redrive",
            "--endpoint-url",
            endpoint,
            "--table",
            name,
            "--queue-url",
            &url,
            "--parking-table",
            &parking_name,
            "--apply",
        ],
        &moto.env(),
    );
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(3), "{}", both(&o));
    assert!(text.contains("3 message(s) in "), "{text}");
    assert!(
        text.contains(&format!(
            "cannot be replayed: shard {gone_shard} is not in the stream (the shard is gone, or the stream was replaced): ResourceNotFoundException: Shard does not exist\n"
        )),
        "{text}"
    );
    // DynamoDB Local answers TrimmedDataAccessException, or
    // ValidationException when the number is another shard's (a record of
    // another test's table): either way the range cannot be read.
    let trimmed_line = text
        .lines()
        .find(|l| {
            l.contains(&format!(
                "{before_first}..{} (RetryAttemptsExhausted)",
                seq(0)
            ))
        })
        .unwrap_or_default();
    assert!(
        trimmed_line.contains("cannot be replayed: its records are trimmed from the stream (older than 24 hours): TrimmedDataAccessException")
            || trimmed_line.contains(&format!("cannot be replayed: its first record {before_first} is not in shard {shard}")),
        "{text}"
    );
    assert!(
        text.contains("2 handled, 0 parked, 0 already parked, 0 failed"),
        "{text}"
    );
    assert_eq!(
        text.matches("message left in the queue").count(),
        2,
        "{text}"
    );
    assert_eq!(
        text.matches("message deleted from the queue").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains("1 message(s) deleted from the queue, 2 left in it"),
        "{text}"
    );
    let mut left = queue_bodies(moto, &url).await;
    left.sort_by_key(|b| {
        b["DDBStreamBatchInfo"]["shardId"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    });
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.contains(&gone) && left.contains(&trimmed), "{left:?}");
}

/// `--park` copies a range into the parking table; the same range again
/// (Lambda sent it twice, or an operator ran it twice) finds every record
/// parked already and says so; a replay through the handlers counts the
/// rejected record as already parked too. Each message is deleted: every
/// record of it is parked.
#[tokio::test]
async fn a_second_park_of_the_same_range_counts_its_records_as_already_parked() {
    let moto = moto::moto().await;
    let table = support::nishiki_table().await;
    table.store.put(group(1), None).await.unwrap();
    table.store.put(bad_user(), None).await.unwrap();
    table.store.put(group(2), None).await.unwrap();
    let (arn, shard, records) = lambda_records(&table).await;
    let message = on_failure::message_for(&arn, &shard, &records);
    let url = queue(moto, &table).await;
    let (endpoint, name) = (table.endpoint.as_str(), table.name.as_str());
    let parking_name = format!("{name}-parking");
    let common = [
        "redrive",
        "--endpoint-url",
        endpoint,
        "--table",
        name,
        "--queue-url",
        &url,
        "--parking-table",
        &parking_name,
        "--apply",
    ];

    send(moto, &url, &message).await;
    let o = run_with(&[&common[..], &["--park"]].concat(), &moto.env());
    let text = stdout(&o);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        text.contains("0 handled, 3 parked, 0 already parked, 0 failed"),
        "{text}"
    );
    assert_eq!(
        parking(endpoint, &parking_name).list().await.unwrap().len(),
        3
    );

    send(moto, &url, &message).await;
    let o = run_with(&[&common[..], &["--park"]].concat(), &moto.env());
    let text = stdout(&o);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        text.contains("0 handled, 0 parked, 3 already parked, 0 failed"),
        "{text}"
    );
    assert_eq!(
        text.matches("already parked (the first copy is kept)")
            .count(),
        3,
        "{text}"
    );
    assert!(text.contains("message deleted from the queue"), "{text}");

    send(moto, &url, &message).await;
    let o = run_with(&common, &moto.env());
    let text = stdout(&o);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        text.contains("2 handled, 0 parked, 1 already parked, 0 failed"),
        "{text}"
    );
    assert!(
        text.contains("[PK=not-a-uuid, SK=User] already parked (the first copy is kept)"),
        "{text}"
    );
    assert_eq!(
        parking(endpoint, &parking_name).list().await.unwrap().len(),
        3
    );
    assert_eq!(queue_counts(moto, &url).await, (0, 0));
}

/// Two invocation records of an S3 destination (the documented key layout
/// and JSON, records from DynamoDB Local's stream as Lambda delivered them;
/// their shard named as gone: the stream is never read), next to an object
/// that is not JSON and an SQS message (no payload): the dry run says what
/// each record would do and keeps everything; `--apply` handles the good
/// records, parks the rejected one with its shard, deletes both objects and
/// leaves the two others (exit 3).
#[tokio::test]
async fn invocation_records_of_an_s3_destination_are_replayed_and_deleted() {
    let moto = moto::moto().await;
    let table = support::nishiki_table().await;
    table.store.put(group(1), None).await.unwrap();
    table.store.put(bad_user(), None).await.unwrap();
    table.store.put(group(2), None).await.unwrap();
    let (arn, _, records) = lambda_records(&table).await;
    let shard = "shardId-00000001700000000000-0000dead";
    let bucket: String = format!("failures-{}", table.name)
        .to_lowercase()
        .replace('_', "-")
        .chars()
        .take(63)
        .collect();
    on_failure::create_bucket(moto, &bucket).await;
    let key = |n| on_failure::s3_object_key(MAPPING_UUID, shard, FAILED_AT, n);
    let first = on_failure::s3_invocation_record(&arn, shard, &records[..2], FAILED_AT);
    let second = on_failure::s3_invocation_record(&arn, shard, &records[2..], FAILED_AT);
    put_object(moto, &bucket, &key(1), first.to_string()).await;
    put_object(moto, &bucket, &key(2), second.to_string()).await;
    put_object(moto, &bucket, &key(3), "{not json").await;
    let sqs_message = on_failure::message_for(&arn, shard, &records);
    put_object(moto, &bucket, &key(4), sqs_message.to_string()).await;
    let prefix = format!("s3://{bucket}/aws/lambda/{MAPPING_UUID}/");
    let (endpoint, name) = (table.endpoint.as_str(), table.name.as_str());
    let parking_name = format!("{name}-parking");
    let before = table.snapshot().await;
    let common = [
        "redrive",
        "--endpoint-url",
        endpoint,
        "--table",
        name,
        "--s3",
        &prefix,
        "--parking-table",
        &parking_name,
    ];

    let o = run_with(&common, &moto.env());
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(3), "{}", both(&o));
    assert!(
        text.contains(&format!("4 object(s) under {prefix}")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "redrive (dry run) of s3://{bucket}/{} ({shard} ",
            key(1)
        )),
        "{text}"
    );
    assert!(
        text.contains("[PK=not-a-uuid, SK=User] would fail and be parked"),
        "{text}"
    );
    assert_eq!(text.matches("] would be handled").count(), 2, "{text}");
    assert!(
        text.contains("not an invocation record of a DynamoDB stream: not JSON"),
        "{text}"
    );
    assert!(text.contains("not an invocation record of a DynamoDB stream: not a DynamoDB stream on-failure message: no payload"), "{text}");
    assert!(text.contains("nothing written or deleted"), "{text}");
    assert_eq!(bucket_keys(moto, &bucket).await.len(), 4);
    assert_eq!(table.snapshot().await, before, "a dry run writes nothing");

    let o = run_with(&[&common[..], &["--apply"]].concat(), &moto.env());
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(3), "{}", both(&o));
    assert!(
        text.contains("1 handled, 1 parked, 0 already parked, 0 failed"),
        "{text}"
    );
    assert!(
        text.contains("1 handled, 0 parked, 0 already parked, 0 failed"),
        "{text}"
    );
    assert_eq!(text.matches("object deleted").count(), 2, "{text}");
    assert_eq!(
        text.matches("object left in the bucket").count(),
        2,
        "{text}"
    );
    assert!(
        text.contains("2 object(s) deleted, 2 left in the bucket"),
        "{text}"
    );
    assert_eq!(bucket_keys(moto, &bucket).await, vec![key(3), key(4)]);
    let parked = parking(endpoint, &parking_name).list().await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].key.as_deref(), Some("PK=not-a-uuid, SK=User"));
    assert_eq!(parked[0].shard_id.as_deref(), Some(shard));
    assert_eq!(parked[0].stream_arn, arn);
}
