//! Parked, never lost, on DynamoDB Local: a record that fails for good is
//! parked whole (images, reason, position) while the rest of its batch is
//! handled; parking twice keeps one copy; a parking failure becomes a batch
//! item failure; after the handler is fixed `redrive` handles the parked
//! record and empties the parking table, and a second redrive does nothing;
//! an on-failure message is turned into exactly its records, read from the
//! table's stream (and `capture --shard` reads the same range).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use worker_engine::clock::ManualClock;
use worker_engine::metrics::{CapturedLines, Emitter};
use worker_engine::park::{self, Origin, Parking};
use worker_engine::schedule::{JobName, Scheduler};
use worker_engine::schema::{DEFAULT_KEY, TableSchema};
use worker_engine::store::{DynamoStore, ItemReader, ItemWriter, Store, local_client};
use worker_engine::stream::{ChangeKind, SequenceNumber, StreamChange, encode_event};
use worker_engine::stream::{RecordOutcome, RecordProcessor};
use worker_engine::{EveryBatch, HandlerError, Worker, WorkerSettings};
use worker_testkit::{TestTable, ddb, on_failure_message};
use worker_toolkit::cli::capture::{CaptureArgs, capture};
use worker_toolkit::cli::redrive::{Verdict, park_range, redrive_parked, redrive_range};
use worker_toolkit::cli::target::{AppTable, EndpointOpts, Target};
use worker_toolkit::failure_message;
use worker_toolkit::stream_reader;

const STREAM: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/notes/stream/2024-03-25T00:00:00.000";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
struct NoJob;

impl JobName for NoJob {
    const ALL: &'static [NoJob] = &[];
    fn as_str(self) -> &'static str {
        "none"
    }
}

impl std::fmt::Display for NoJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("none")
    }
}

/// The handler under test: marks each handled item with `Seen`; while
/// `reject_drafts` is set (the bug), an item whose `Kind` is `draft` is
/// rejected for good.
struct Marker {
    store: Arc<dyn Store>,
    reject_drafts: Arc<AtomicBool>,
}

#[async_trait::async_trait]
impl RecordProcessor for Marker {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError> {
        let Some(new) = &change.new_image else {
            return Ok(RecordOutcome::skipped("no new image"));
        };
        if new.contains_key("Seen") {
            return Ok(RecordOutcome::skipped("already marked"));
        }
        if self.reject_drafts.load(Ordering::SeqCst)
            && new.get("Kind") == Some(&AttributeValue::S("draft".into()))
        {
            return Err(HandlerError::permanent("drafts are not supported"));
        }
        let mut marked = change.keys.clone();
        marked.insert("Seen".into(), AttributeValue::Bool(true));
        self.store.put(marked, None).await?;
        Ok(RecordOutcome::handled("marked"))
    }
}

fn now() -> DateTime<Utc> {
    "2024-03-25T09:00:00Z".parse().unwrap()
}

fn worker(
    store: Arc<dyn Store>,
    reject: &Arc<AtomicBool>,
    parking: Option<Parking>,
) -> Worker<NoJob> {
    let w = Worker::new(
        Box::new(EveryBatch(Marker {
            store,
            reject_drafts: reject.clone(),
        })),
        Scheduler::default(),
        Arc::new(ManualClock::new(now())),
        WorkerSettings {
            deadline_margin: std::time::Duration::from_secs(2),
            stream_concurrency: 4,
            pinned_job: None,
            writes_metrics: vec![],
        },
    );
    w.with_parking(parking)
}

/// A parking table next to `table` on the same DynamoDB Local.
async fn parking_table(table: &TestTable) -> (Parking, Arc<DynamoStore>) {
    let name = format!("{}-parking", table.name);
    let store =
        Arc::new(DynamoStore::new(local_client(&table.endpoint), &name).with_key(park::KEY));
    store.create_table(&park::schema()).await.unwrap();
    (Parking::new(store.clone(), 14), store)
}

fn change(id: &str, seq: &str, kind: &str) -> StreamChange {
    let keys = ddb(json!({"PK": {"S": id}, "SK": {"S": "Note"}}));
    let mut new = keys.clone();
    new.insert("Kind".into(), AttributeValue::S(kind.into()));
    let mut old = keys.clone();
    old.insert("Kind".into(), AttributeValue::S("before".into()));
    StreamChange {
        event_id: format!("ev-{id}"),
        kind: ChangeKind::Modify,
        sequence_number: Some(seq.parse().unwrap()),
        approximate_creation: Some(now()),
        keys,
        old_image: Some(old),
        new_image: Some(new),
        event_source_arn: Some(STREAM.into()),
        size_bytes: Some(100),
        typed: None,
    }
}

/// Four records: n1 (note), n2 (draft: rejected while the bug is there),
/// a record that does not decode (eventName UPSERT), n4 (note).
fn batch() -> Value {
    let mut event = encode_event(
        &[
            change("n1", "100", "note"),
            change("n2", "200", "draft"),
            change("n3", "300", "note"),
            change("n4", "400", "note"),
        ],
        Some(STREAM),
    );
    event["Records"][2]["eventName"] = json!("UPSERT");
    event
}

async fn seen(table: &TestTable, id: &str) -> bool {
    let key = ddb(json!({"PK": {"S": id}, "SK": {"S": "Note"}}));
    table
        .store
        .get(&key, true)
        .await
        .unwrap()
        .is_some_and(|i| i.contains_key("Seen"))
}

#[tokio::test]
async fn a_record_that_fails_for_good_is_parked_and_the_rest_handled() {
    let table = TestTable::with_schema(&TableSchema::new(DEFAULT_KEY)).await;
    let (parking, _) = parking_table(&table).await;
    let reject = Arc::new(AtomicBool::new(true));
    let lines = CapturedLines::default();
    let w = worker(table.store.clone(), &reject, Some(parking.clone())).with_metrics(Emitter::new(
        "Test",
        "stream",
        Arc::new(lines.clone()),
    ));
    assert!(w.is_cold());

    // As Lambda delivers it: the event's bytes.
    let bytes = serde_json::to_vec(&batch()).unwrap();
    let report = w.handle_stream_bytes(&bytes, None).await.unwrap();
    assert_eq!(
        (report.handled, report.rejected, report.malformed),
        (2, 1, 1)
    );
    assert_eq!(report.parked, 2);
    assert!(
        report.batch_item_failures.is_empty(),
        "nothing for Lambda to retry"
    );
    assert!(seen(&table, "n1").await && seen(&table, "n4").await);
    assert!(!seen(&table, "n2").await);

    let parked = parking.list().await.unwrap();
    let seqs: Vec<&str> = parked.iter().map(|p| p.sequence_number.as_str()).collect();
    assert_eq!(seqs, ["200", "300"]);
    let draft = &parked[0];
    assert_eq!(draft.stream_arn, STREAM);
    assert_eq!(draft.event_id.as_deref(), Some("ev-n2"));
    assert_eq!(draft.key.as_deref(), Some("PK=n2, SK=Note"));
    assert!(
        draft.reason.contains("drafts are not supported"),
        "{}",
        draft.reason
    );
    assert_eq!(draft.origin, Origin::Batch);
    assert_eq!(draft.record["dynamodb"]["NewImage"]["Kind"]["S"], "draft");
    assert_eq!(draft.record["dynamodb"]["OldImage"]["Kind"]["S"], "before");
    assert!(parked[1].reason.contains("UPSERT"), "{}", parked[1].reason);
    assert_eq!(
        parked[1].record["eventName"], "UPSERT",
        "the raw record, as delivered"
    );

    // Lambda delivers the batch again (here as parsed JSON, the path of
    // `dev` and `replay`): still one copy of each, the first.
    let again = w.handle_stream(&batch(), None).await.unwrap();
    assert!(again.batch_item_failures.is_empty());
    assert_eq!(parking.list().await.unwrap(), parked);
    // RecordsParked in the metrics; ColdStart 1 on the first invocation only.
    let emf: Vec<Value> = lines
        .lines()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(emf.len(), 2);
    assert_eq!(
        (
            emf[0]["RecordsParked"].as_u64(),
            emf[0]["RecordsFailed"].as_u64()
        ),
        (Some(2), Some(2))
    );
    assert_eq!(
        (emf[0]["ColdStart"].as_u64(), emf[1]["ColdStart"].as_u64()),
        (Some(1), Some(0))
    );
    assert!(!w.is_cold());

    // A redrive before any fix keeps both, each with the new reason.
    let plain = worker(table.store.clone(), &reject, None);
    let r = redrive_parked(&plain, None, &parking, true).await.unwrap();
    assert_eq!((r.removed, r.kept), (0, 2));
    let kept = parking.list().await.unwrap();
    assert!(kept.iter().all(|p| p.redrives == 1), "{kept:?}");
}

#[tokio::test]
async fn after_a_fix_redrive_handles_the_parked_record_and_a_second_redrive_does_nothing() {
    let table = TestTable::with_schema(&TableSchema::new(DEFAULT_KEY)).await;
    let (parking, _) = parking_table(&table).await;
    let reject = Arc::new(AtomicBool::new(true));
    let lambda = worker(table.store.clone(), &reject, Some(parking.clone()));
    let event = encode_event(
        &[change("n1", "100", "note"), change("n2", "200", "draft")],
        Some(STREAM),
    );
    // The service wrote the items the records stand for.
    for id in ["n1", "n2"] {
        table
            .store
            .put(
                ddb(json!({"PK": {"S": id}, "SK": {"S": "Note"}, "Kind": {"S": "x"}})),
                None,
            )
            .await
            .unwrap();
    }
    let report = lambda.handle_stream(&event, None).await.unwrap();
    assert_eq!((report.handled, report.parked), (1, 1));

    // The fix is deployed.
    reject.store(false, Ordering::SeqCst);
    let store: Arc<dyn Store> = table.store.clone();
    let dry = Arc::new(worker_toolkit::layers::DryRunStore::new(store));
    let dry_worker = worker(dry.clone(), &reject, None);
    let plan = redrive_parked(&dry_worker, Some(&dry), &parking, false)
        .await
        .unwrap();
    assert_eq!(plan.entries.len(), 1);
    assert_eq!(
        plan.entries[0].verdict,
        Verdict::Handled {
            detail: "marked".into()
        },
        "the dry run says what it would do"
    );
    assert_eq!(plan.planned_writes, 1, "and the writes it would send");
    assert_eq!(
        parking.list().await.unwrap().len(),
        1,
        "a dry run removes nothing"
    );
    assert!(!seen(&table, "n2").await, "and writes nothing");

    let plain = worker(table.store.clone(), &reject, None);
    let done = redrive_parked(&plain, None, &parking, true).await.unwrap();
    assert_eq!((done.removed, done.kept, done.handled()), (1, 0, 1));
    assert!(seen(&table, "n2").await, "the parked record was handled");
    assert!(
        parking.list().await.unwrap().is_empty(),
        "the parking table is empty"
    );

    let second = redrive_parked(&plain, None, &parking, true).await.unwrap();
    assert!(second.entries.is_empty(), "{second:?}");
    assert_eq!((second.removed, second.kept), (0, 0));
}

#[tokio::test]
async fn a_record_that_cannot_be_parked_is_reported_for_a_retry() {
    let table = TestTable::with_schema(&TableSchema::new(DEFAULT_KEY)).await;
    // A parking table that does not exist: every put fails.
    let missing = DynamoStore::new(local_client(&table.endpoint), "no-such-parking-table")
        .with_key(park::KEY);
    let parking = Parking::new(Arc::new(missing), 14);
    let reject = Arc::new(AtomicBool::new(true));
    let w = worker(table.store.clone(), &reject, Some(parking));
    let report = w.handle_stream(&batch(), None).await.unwrap();
    assert_eq!((report.parked, report.parking_failed), (0, 2));
    assert_eq!(
        report.batch_item_failures,
        ["200", "300"],
        "Lambda delivers them again from the first one"
    );
    assert_eq!(
        serde_json::to_value(report.response()).unwrap()["batchItemFailures"][0]["itemIdentifier"],
        "200"
    );
}

/// The (shard, sequence number) of every record of `table`'s stream.
async fn stream_positions(table: &TestTable) -> (String, Vec<(String, SequenceNumber)>) {
    let (arn, records) = table.stream_records().await;
    let positions = records
        .into_iter()
        .map(|(shard, c)| (shard, c.sequence_number.unwrap()))
        .collect();
    (arn, positions)
}

#[tokio::test]
async fn an_on_failure_message_is_turned_into_exactly_its_records() {
    let table = TestTable::with_schema(&TableSchema::new(DEFAULT_KEY)).await;
    let (parking, _) = parking_table(&table).await;
    for (i, kind) in ["note", "note", "draft", "note", "note", "note"]
        .iter()
        .enumerate()
    {
        table
            .store
            .put(
                ddb(
                    json!({"PK": {"S": format!("m{i}")}, "SK": {"S": "Note"}, "Kind": {"S": kind}}),
                ),
                None,
            )
            .await
            .unwrap();
    }
    let (arn, positions) = stream_positions(&table).await;
    assert_eq!(positions.len(), 6);
    let shard = positions[1].0.clone();
    let in_shard: Vec<&SequenceNumber> = positions
        .iter()
        .filter(|(s, _)| *s == shard)
        .map(|(_, q)| q)
        .collect();
    assert!(in_shard.len() >= 4, "DynamoDB Local writes one shard");
    // The mapping gave up on records 1..=3 (the draft among them).
    let (start, end) = (in_shard[1].clone(), in_shard[3].clone());
    let message = on_failure_message(&arn, &shard, start.as_str(), end.as_str(), 3);
    let file = std::env::temp_dir().join(format!("failure-{}.json", table.name));
    std::fs::write(
        &file,
        json!({"Messages": [{"Body": message.to_string()}]}).to_string(),
    )
    .unwrap();
    let ranges = failure_message::parse_all(
        &serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(ranges.len(), 1);
    let range = &ranges[0];

    let client = stream_reader::local_client(&table.endpoint);
    let records = stream_reader::read_range(&client, &arn, &shard, &range.start, &range.end)
        .await
        .unwrap();
    let got: Vec<&SequenceNumber> = records
        .iter()
        .filter_map(|c| c.sequence_number.as_ref())
        .collect();
    assert_eq!(
        got,
        in_shard[1..=3].to_vec(),
        "exactly the message's records"
    );
    assert!(
        records.iter().all(|c| c.new_image.is_some()),
        "with their images"
    );

    // --park, dry run: the range listed, nothing parked.
    let keys = DEFAULT_KEY.names();
    let listed = park_range(&client, keys, &parking, range, false)
        .await
        .unwrap();
    assert_eq!((listed.entries.len(), listed.parked), (3, 0));
    assert!(parking.list().await.unwrap().is_empty());

    // Replayed with the bug still there: two handled, the draft parked with its shard.
    let reject = Arc::new(AtomicBool::new(true));
    let plain = worker(table.store.clone(), &reject, None);
    let r = redrive_range(&plain, None, &client, Some(&parking), range, true)
        .await
        .unwrap();
    assert_eq!((r.handled(), r.parked), (2, 1));
    let parked = parking.list().await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].shard_id.as_deref(), Some(shard.as_str()));
    assert_eq!(parked[0].origin, Origin::FailureMessage);
    assert_eq!(parked[0].key.as_deref(), Some("PK=m2, SK=Note"));
    assert_eq!(parked[0].stream_arn, arn);
    assert!(seen(&table, "m1").await && seen(&table, "m3").await);
    assert!(
        !seen(&table, "m0").await && !seen(&table, "m4").await,
        "nothing outside the range"
    );

    // --park --apply: the whole range copied as it is (the draft's first copy
    // kept: counted as already parked, its conditional put refused).
    let copied = park_range(&client, keys, &parking, range, true)
        .await
        .unwrap();
    assert_eq!((copied.parked, copied.already_parked), (2, 1));
    let parked = parking.list().await.unwrap();
    assert_eq!(parked.len(), 3);
    assert!(
        parked
            .iter()
            .all(|p| p.shard_id.as_deref() == Some(shard.as_str()))
    );
    let reasons: Vec<&str> = parked.iter().map(|p| p.reason.as_str()).collect();
    assert_eq!(
        reasons
            .iter()
            .filter(
                |r| r.contains("given up on by the event source mapping (RetryAttemptsExhausted)")
            )
            .count(),
        2,
        "{reasons:?}"
    );

    // capture --shard --from-sequence --to-sequence reads the same range.
    let out = std::env::temp_dir().join(format!("range-{}.json", table.name));
    let target = Target::connect(
        &table.endpoint,
        &table.name,
        &AppTable::single("test", TableSchema::new(DEFAULT_KEY)),
    )
    .await;
    let args = CaptureArgs {
        out: out.clone(),
        after_sequence: None,
        since: None,
        shard: Some(shard.clone()),
        from_sequence: Some(range.start.clone()),
        to_sequence: Some(range.end.clone()),
        redact: false,
        endpoint: EndpointOpts {
            endpoint_url: table.endpoint.clone(),
            table: vec![table.name.clone()],
            ..Default::default()
        },
        ..Default::default()
    };
    let captured = capture(&target, &args).await.unwrap();
    assert_eq!(captured.records, 3);
    let event: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let seqs: Vec<&str> = event["Records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["dynamodb"]["SequenceNumber"].as_str().unwrap())
        .collect();
    assert_eq!(
        seqs,
        in_shard[1..=3]
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
    );
    let _ = std::fs::remove_file(file);
    let _ = std::fs::remove_file(out);
}
