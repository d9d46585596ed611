//! `nishiki-worker redrive` and `capture --shard`, run as an operator
//! would against a table on DynamoDB Local: the service writes a user item
//! whose key Nishiki rejects between two good group items, the stream
//! mapping gives up on the last two (an on-failure message built from the
//! real sequence numbers), and the operator replays that range: the dry run
//! writes nothing, `--apply` handles the group and parks the bad record with
//! its shard; a redrive of the parked record keeps it with the new reason
//! (the handlers still reject it), and exits 3. A dry run naming a parking
//! table that does not exist says so, goes on, and creates nothing.

mod support;

use std::process::{Command, Output};

use serde_json::json;
use worker_engine::park::{self, Parking};
use worker_engine::store::{DynamoStore, ItemWriter, local_client};
use worker_testkit::{ddb, on_failure_message};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nishiki-worker"))
        .env_remove("RUST_LOG")
        .env_remove("PARKING_TABLE")
        .env("NO_COLOR", "1")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
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
