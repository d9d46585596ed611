//! The bad-input corpus (`tests/bad_input/`, described by its
//! `manifest.json`): malformed events and records as DynamoDB Streams,
//! Lambda, other AWS services or a buggy writer could produce them.
//!
//! Every case goes through the path the Lambda function uses
//! (`App::handle_stream` on the payload as a `serde_json::Value`, against a
//! table on DynamoDB Local), between a valid record before and after it.
//! For each case:
//!
//! - nothing panics, and the batch never reports a `batchItemFailures` entry
//!   (a permanent error must not stall the stream);
//! - a bad record becomes `Malformed` (does not decode) or `Rejected` (not an
//!   item of this table) with its event id, key (when decodable) and a reason
//!   holding the manifest's fragment; odd-but-valid records are handled;
//! - the valid records around it are handled and their effect is in the
//!   table;
//! - an event that is not a DynamoDB Streams event is a whole-event error
//!   naming what was expected; bytes that are not JSON are rejected by
//!   `decode_event_bytes` (and by `nishiki-worker replay`: its test is
//!   `apps/nishiki-cli/tests/it/bad_input.rs`);
//! - no error text, report field or log line contains a case's e-mail
//!   address or user name.
//!
//! The Lambda path's test installs a process-wide log subscriber (every
//! line must be free of the corpus' personal data), so it runs in a child
//! process of its own ([`worker_testkit::in_own_process`]).
//!
//! `BAD_INPUT_SHOW=1 cargo test --test it bad_input:: -- --nocapture`
//! prints each case's outcome.

use crate::support;

use std::io::Write;

use std::sync::{Arc, Mutex};

use crate::support::TestTable;
use crate::support::bad_input::*;
use chrono::{DateTime, Utc};
use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::keys::{GroupId, ItemKey, UserId};
use serde_json::{Value, json};
use worker_engine::store::ItemReader;
use worker_engine::stream::{EnvelopeError, decode_event, decode_event_bytes, encode_event};
use worker_engine::stream::{RecordReport, RecordStatus};

#[test]
fn manifest_lists_every_file_once() {
    let cases = corpus();
    assert!(cases.len() >= 30, "only {} cases", cases.len());
    let mut listed: Vec<&str> = cases.iter().map(|c| c.file.as_str()).collect();
    listed.sort_unstable();
    let n = listed.len();
    listed.dedup();
    assert_eq!(listed.len(), n, "a file is listed twice");
    let mut on_disk: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f != "manifest.json" && f != "generate.py")
        .collect();
    on_disk.sort();
    assert_eq!(listed, on_disk, "manifest.json and the directory disagree");
    for c in &cases {
        assert!(!c.what.is_empty() && !c.fragment.is_empty(), "{c:?}");
    }
}

/// The byte-level entry: every case either is not JSON (and says so), or
/// parses and decodes like `decode_event` on its value.
#[test]
fn bytes_that_are_not_json_are_rejected_whole() {
    let cases = corpus();
    let private = all_private(&cases);
    for case in &cases {
        let result = std::panic::catch_unwind(|| decode_event_bytes(&bytes(case)))
            .unwrap_or_else(|_| panic!("{}: decode_event_bytes panicked", case.file));
        match (case.class, result) {
            (Class::NotJson, Err(e @ EnvelopeError::NotJson(_))) => {
                let msg = e.to_string();
                assert!(
                    msg.starts_with("event is not JSON") && msg.contains(&case.fragment),
                    "{}: {msg}",
                    case.file
                );
                assert_private(&msg, &private, &case.file);
            }
            (Class::NotJson, other) => panic!("{}: expected NotJson, got {other:?}", case.file),
            (Class::Envelope, Err(e)) => {
                assert!(!matches!(e, EnvelopeError::NotJson(_)), "{}", case.file);
                assert!(e.to_string().contains(&case.fragment), "{}: {e}", case.file);
            }
            (Class::Envelope, Ok(_)) => panic!("{}: decoded as a stream event", case.file),
            // A file of foreign records only is a foreign event; in a
            // DynamoDB batch (as the Lambda test sends it) they are
            // per-record errors.
            (_, Err(EnvelopeError::OtherSource(_)))
                if value(case)["Records"].as_array().unwrap().iter().all(|r| {
                    r["eventSource"]
                        .as_str()
                        .is_some_and(|s| s != "aws:dynamodb")
                }) => {}
            (_, Err(e)) => panic!("{}: whole event rejected: {e}", case.file),
            (_, Ok(records)) => {
                let n = value(case)["Records"].as_array().unwrap().len();
                assert_eq!(records.len(), n, "{}", case.file);
                // What decodes survives the re-encoding fixtures and
                // captures use (the fuzz target checks the same).
                for change in records.into_iter().flatten() {
                    let event = encode_event(std::slice::from_ref(&change), None);
                    let back = decode_event(&event).unwrap().pop().unwrap();
                    assert_eq!(back.as_ref(), Ok(&change), "{}: round trip", case.file);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Through the Lambda path, on DynamoDB Local
// ---------------------------------------------------------------------------

const NOW: &str = "2024-03-25T09:00:00Z";
const BEFORE_SEQ: &str = "000000000000000000100";
const AFTER_SEQ: &str = "000000000000000000999";

/// Log lines of the whole test binary, as the Lambda function writes them
/// (JSON, with every field).
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "nishiki_worker=debug,worker_engine=debug",
        ))
        .with_writer(|| LogWriter)
        .try_init();
}

/// A valid record with a visible effect: the REMOVE of a user whose
/// membership is still in the table; the worker deletes the membership.
struct Witness {
    user: UserId,
    group: GroupId,
}

impl Witness {
    async fn seed(table: &TestTable) -> Witness {
        let w = Witness {
            user: UserId::random(),
            group: GroupId::random(),
        };
        let (pk, sk) = w.membership().encode();
        table
            .put_json(&[json!({
                "PK": {"S": pk}, "SK": {"S": sk}, "GroupId": {"S": w.group.to_string()}
            })])
            .await;
        w
    }

    fn membership(&self) -> ItemKey {
        ItemKey::Membership {
            user: self.user,
            group: self.group,
        }
    }

    fn record(&self, event_id: &str, seq: &str) -> Value {
        let user = self.user.to_string();
        json!({
            "awsRegion": "eu-west-1",
            "eventID": event_id,
            "eventName": "REMOVE",
            "eventSource": "aws:dynamodb",
            "eventVersion": "1.1",
            "dynamodb": {
                "ApproximateCreationDateTime": 1711357200,
                "Keys": {"PK": {"S": user}, "SK": {"S": "User"}},
                "OldImage": {
                    "PK": {"S": user}, "SK": {"S": "User"},
                    "UserName": {"S": GOOD_NAME}, "EMailAddress": {"S": GOOD_EMAIL}
                },
                "SequenceNumber": seq,
                "SizeBytes": 120,
                "StreamViewType": "NEW_AND_OLD_IMAGES"
            }
        })
    }

    async fn is_done(&self, table: &TestTable) -> bool {
        table
            .store
            .get(&self.membership().to_attributes(), true)
            .await
            .expect("get")
            .is_none()
    }
}

fn texts(r: &RecordReport) -> String {
    let status = match &r.status {
        RecordStatus::Handled { detail } => detail,
        RecordStatus::Skipped { reason }
        | RecordStatus::Foreign { reason }
        | RecordStatus::Rejected { reason }
        | RecordStatus::Malformed { reason }
        | RecordStatus::Failed { reason }
        | RecordStatus::Environment { reason }
        | RecordStatus::NotAttempted { reason } => reason,
    };
    format!(
        "{} | {} | {status}",
        r.event_id.as_deref().unwrap_or("?"),
        r.keys.as_deref().unwrap_or("?")
    )
}

/// Check one bad record's line of the report against its case.
fn check_record(case: &Case, raw: &Value, r: &RecordReport) {
    let ctx = format!("{} #{}: {r:?}", case.file, r.index);
    let reason = match (&r.status, case.class) {
        (RecordStatus::Malformed { reason }, Class::Malformed) => reason,
        (RecordStatus::Rejected { reason }, Class::Rejected) => reason,
        (RecordStatus::Handled { detail }, Class::Accepted) => detail,
        _ => panic!("{ctx}: expected {:?}", case.class),
    };
    if case.class != Class::Accepted {
        assert!(
            reason.contains(&case.fragment),
            "{ctx}: reason lacks {:?}",
            case.fragment
        );
        assert!(!reason.contains('@'), "{ctx}: an address in the reason");
    }
    let event_id = raw.get("eventID").and_then(Value::as_str);
    assert_eq!(r.event_id.as_deref(), event_id, "{ctx}: event id");
    if let Some(key) = &case.key {
        assert_eq!(r.keys.as_deref(), Some(key.as_str()), "{ctx}: key");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_through_the_lambda_path() {
    if !worker_testkit::in_own_process() {
        return;
    }
    capture_logs();
    let cases = corpus();
    let private = all_private(&cases);
    let table = support::nishiki_table().await;
    let now: DateTime<Utc> = NOW.parse().unwrap();
    let app = App::new(
        table.store.clone(),
        Config::for_table(&table.name),
        Arc::new(ManualClock::new(now)),
    );
    let mut seen = 0;
    for case in cases.iter().filter(|c| c.class != Class::NotJson) {
        let payload = value(case);
        if case.class == Class::Envelope {
            let err = app
                .handle_stream(&payload, None)
                .await
                .expect_err(&case.file);
            let msg = err.to_string();
            assert!(msg.contains(&case.fragment), "{}: {msg}", case.file);
            assert!(
                msg.contains("DynamoDB Streams event") || msg.contains("\"Records\""),
                "{}: the error must say what was expected: {msg}",
                case.file
            );
            assert_private(&msg, &private, &case.file);
            if std::env::var_os("BAD_INPUT_SHOW").is_some() {
                eprintln!("{:<40} {msg}", case.file);
            }
            seen += 1;
            continue;
        }
        let bad = payload["Records"].as_array().expect("a Records array");
        let (before, after) = (Witness::seed(&table).await, Witness::seed(&table).await);
        let mut records = vec![before.record("good-before", BEFORE_SEQ)];
        records.extend(bad.iter().cloned());
        records.push(after.record("good-after", AFTER_SEQ));
        let n = records.len();
        let report = app
            .handle_stream(&json!({ "Records": records }), None)
            .await
            .unwrap_or_else(|e| panic!("{}: whole batch rejected: {e}", case.file));

        // The stream never stalls on a permanent error.
        assert!(
            report.batch_item_failures.is_empty() && !report.retry_whole_batch,
            "{}: {report:?}",
            case.file
        );
        assert_eq!(
            (report.failed, report.not_attempted, report.records.len()),
            (0, 0, n),
            "{}",
            case.file
        );
        // The valid records around the bad ones are handled, with effect.
        for (i, w) in [(0, &before), (n - 1, &after)] {
            let r = &report.records[i];
            assert!(
                matches!(&r.status, RecordStatus::Handled { detail } if detail.contains("deleted 1 memberships")),
                "{}: witness #{i}: {r:?}",
                case.file
            );
            assert!(
                w.is_done(&table).await,
                "{}: witness #{i} had no effect",
                case.file
            );
        }
        for (raw, r) in bad.iter().zip(&report.records[1..n - 1]) {
            check_record(case, raw, r);
        }
        for r in &report.records {
            assert_private(&texts(r), &private, &case.file);
        }
        if std::env::var_os("BAD_INPUT_SHOW").is_some() {
            for r in &report.records[1..n - 1] {
                eprintln!("{:<40} {:?}", case.file, r.status);
            }
        }
        seen += 1;
    }
    assert!(seen >= 30, "only {seen} cases ran through the Lambda path");

    // Every bad record was logged with its reason; no line shows personal data.
    let log = String::from_utf8(LOG.lock().unwrap().clone()).expect("UTF-8 logs");
    assert!(
        log.contains("stream record malformed, skipped")
            && log.contains("stream record failed permanently, skipped"),
        "{log}"
    );
    assert!(log.contains("no dynamodb object"), "reasons are logged");
    assert_private(&log, &private, "log");
}
