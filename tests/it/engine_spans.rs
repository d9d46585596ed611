//! The engine's `batch` and `record` spans reach the log lines written
//! inside them. The other tests of this binary run the engine on parallel
//! threads without a subscriber, and tracing caches per call site whether
//! anyone listens: the capture holds a second dispatcher alive so that no
//! call site it reads is cached as "never" (see the test).

use std::sync::Mutex;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::json;
use worker_engine::HandlerError;
use worker_engine::stream::{ChangeKind, RecordError, StreamChange};
use worker_engine::stream::{EngineConfig, RecordOutcome, RecordProcessor, run_batch};

const U: &str = "3f1c2b4e-8a9d-4c6e-b1f2-0a1b2c3d4e5f";

fn change(id: &str, seq: &str) -> StreamChange {
    StreamChange {
        event_id: id.into(),
        kind: ChangeKind::Insert,
        sequence_number: Some(seq.parse().unwrap()),
        approximate_creation: None,
        keys: [
            ("PK".to_owned(), AttributeValue::S(U.into())),
            ("SK".to_owned(), AttributeValue::S("User".into())),
        ]
        .into(),
        old_image: None,
        new_image: None,
        event_source_arn: None,
        size_bytes: None,
        typed: None,
    }
}

/// A malformed record (sequence number 8), then five good records e1..e5
/// with sequence numbers 9..13.
fn records() -> Vec<Result<StreamChange, RecordError>> {
    let mut records = vec![Err(RecordError {
        index: 0,
        event_id: Some("bad0".into()),
        sequence_number: Some("8".parse().unwrap()),
        keys: Some(format!("PK={U}, SK=User")),
        reason: "no Keys".into(),
    })];
    records.extend(
        ["9", "10", "11", "12", "13"]
            .iter()
            .enumerate()
            .map(|(i, seq)| Ok(change(&format!("e{}", i + 1), seq))),
    );
    records
}

/// Logs a line of its own while handling, like a job's handler does.
struct Chatty;

#[async_trait::async_trait]
impl RecordProcessor for Chatty {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError> {
        tracing::info!("processor line");
        if change.event_id == "e2" {
            return Err(HandlerError::transient("throttled"));
        }
        Ok(RecordOutcome::handled("done"))
    }
}

#[derive(Clone, Default)]
struct Lines(std::sync::Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn lines_inside_a_record_carry_its_span() {
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = worker_engine::telemetry::json_subscriber(
        tracing_subscriber::EnvFilter::new("debug"),
        move || writer.clone(),
    );
    // tracing caches each callsite's interest process-wide, and while one
    // dispatcher is registered it asks the thread that reaches a callsite
    // first: a parallel test's thread, with no subscriber, caches `never`
    // and this capture misses the line. With a second dispatcher alive,
    // the interest is that of every registered one, this capture's too.
    let _anchor = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    let _guard = tracing::subscriber::set_default(subscriber);
    let report = run_batch(records(), &Chatty, &EngineConfig::default()).await;
    assert_eq!(report.batch_item_failures, ["10"]);
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let parsed: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let processor: Vec<&serde_json::Value> = parsed
        .iter()
        .filter(|v| v["fields"]["message"] == "processor line")
        .collect();
    assert_eq!(processor.len(), 2, "e1 and e2: {text}");
    for (v, (id, seq)) in processor.iter().zip([("e1", "9"), ("e2", "10")]) {
        assert_eq!(v["span"]["name"], "record");
        assert_eq!(v["span"]["event_id"], id);
        assert_eq!(v["span"]["sequence_number"], seq);
        assert_eq!(v["span"]["key"], format!("PK={U}, SK=User"));
        let batch = &v["spans"][0];
        assert_eq!(batch["name"], "batch");
        assert_eq!(
            (
                &batch["size"],
                &batch["first_sequence_number"],
                &batch["last_sequence_number"]
            ),
            (&json!(6), &json!("8"), &json!("13"))
        );
    }
    let outcome = |message: &str| {
        parsed
            .iter()
            .find(|v| v["fields"]["message"] == message)
            .map(|v| v["span"]["outcome"].clone())
    };
    assert_eq!(
        outcome("stream record malformed, skipped"),
        Some(json!("malformed"))
    );
    assert_eq!(outcome("stream record handled"), Some(json!("handled")));
    assert_eq!(
        outcome("stream record failed transiently, batch stopped"),
        Some(json!("failed"))
    );
    let done = parsed
        .iter()
        .find(|v| v["fields"]["message"] == "stream batch done")
        .expect("summary line");
    assert_eq!(done["span"]["name"], "batch");
}
