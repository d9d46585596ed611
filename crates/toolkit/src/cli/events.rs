//! Event files: read, recognise (DynamoDB Streams event or schedule tick,
//! from the content) and reject anything else with a one-line reason.

use std::path::Path;

use serde_json::Value;

use super::CliError;
use worker_engine::item::redact_quoted;
use worker_engine::schedule::{self, JobName, TickSource};
use worker_engine::stream;

/// What an event file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// A DynamoDB Streams event with this many records.
    Stream {
        /// How many records `Records` holds.
        records: usize,
    },
    /// A schedule tick for this job.
    Schedule {
        /// The job's name, one of the app's.
        job: String,
        /// Its form: an EventBridge Scheduler target's input or a rule's
        /// `Scheduled Event`.
        source: TickSource,
    },
}

impl EventKind {
    /// `stream` or `schedule`.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Stream { .. } => "stream",
            EventKind::Schedule { .. } => "schedule",
        }
    }

    /// A readable description for headers.
    pub fn describe(&self) -> String {
        match self {
            EventKind::Stream { records } => format!(
                "DynamoDB Streams event, {records} record{}",
                if *records == 1 { "" } else { "s" }
            ),
            EventKind::Schedule { job, source } => format!(
                "schedule tick: {job} ({})",
                match source {
                    TickSource::Scheduler => "EventBridge Scheduler input",
                    TickSource::Rule => "EventBridge rule event",
                    TickSource::Manual => "manual",
                }
            ),
        }
    }
}

/// An event file, read and recognised.
#[derive(Debug, Clone)]
pub struct EventFile {
    /// The path as given.
    pub path: String,
    /// The file's JSON, as read.
    pub value: Value,
    /// What it holds.
    pub kind: EventKind,
}

const HANDLED: &str = "this worker handles DynamoDB Streams events and schedule ticks";

/// Read and recognise an event file (ticks must name one of `J`'s jobs).
pub fn load_event_file<J: JobName>(path: &Path) -> Result<EventFile, CliError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::input(&file, format!("cannot read: {e}")))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        CliError::input(
            &file,
            format!("not JSON: {}", redact_quoted(&e.to_string())),
        )
    })?;
    let kind = classify::<J>(&value).map_err(|problem| CliError::input(&file, problem))?;
    Ok(EventFile {
        path: file,
        value,
        kind,
    })
}

/// Recognise an event from its content; `Err` says what it is instead.
pub fn classify<J: JobName>(v: &Value) -> Result<EventKind, String> {
    if stream::is_stream_event(v) {
        let records = stream::decode_event(v).map_err(|e| e.to_string())?;
        return Ok(EventKind::Stream {
            records: records.len(),
        });
    }
    if schedule::is_schedule_event(v) {
        let tick = schedule::parse_tick::<J>(v).map_err(|e| format!("schedule event: {e}"))?;
        return Ok(EventKind::Schedule {
            job: tick.job.to_string(),
            source: tick.source,
        });
    }
    Err(what_instead(v))
}

fn what_instead(v: &Value) -> String {
    let Some(obj) = v.as_object() else {
        let what = match v {
            Value::Array(_) => "a JSON array",
            Value::String(_) => "a JSON string",
            Value::Number(_) => "a JSON number",
            Value::Bool(_) => "a JSON boolean",
            _ => "JSON null",
        };
        return format!("{what}, not an event ({HANDLED})");
    };
    if let Some(records) = obj.get("Records") {
        let Some(records) = records.as_array() else {
            return format!("\"Records\" is not an array ({HANDLED})");
        };
        let source = records.iter().find_map(|r| {
            let s = r
                .get("eventSource")
                .or_else(|| r.get("EventSource"))
                .and_then(Value::as_str)?;
            (s != "aws:dynamodb").then_some(s)
        });
        return match source {
            Some(s) => format!("an event from {s}, not a DynamoDB Streams event ({HANDLED})"),
            None => format!(
                "\"Records\" holds records that are not DynamoDB Streams records (no eventSource \"aws:dynamodb\", no \"dynamodb\" object) ({HANDLED})"
            ),
        };
    }
    if let Some(dt) = obj.get("detail-type").and_then(Value::as_str) {
        let source = obj.get("source").and_then(Value::as_str).unwrap_or("?");
        return format!(
            "an EventBridge {dt:?} event from {source}, not a schedule tick (\"detail-type\": \"Scheduled Event\") ({HANDLED})"
        );
    }
    "not an event this worker handles: expected a DynamoDB Streams event (\"Records\") or a schedule tick ({\"job\": ...} or an EventBridge \"Scheduled Event\")".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An app with one job.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
    struct Audit;

    impl std::fmt::Display for Audit {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("audit")
        }
    }

    impl JobName for Audit {
        const ALL: &'static [Audit] = &[Audit];
        fn as_str(self) -> &'static str {
            "audit"
        }
    }

    fn classify(v: &Value) -> Result<EventKind, String> {
        super::classify::<Audit>(v)
    }

    #[test]
    fn recognises_streams_and_ticks() {
        assert_eq!(
            classify(&json!({"Records": []})),
            Ok(EventKind::Stream { records: 0 })
        );
        assert_eq!(
            classify(&json!({"job": "audit", "scheduledTime": "2024-03-25T03:00:00Z"})),
            Ok(EventKind::Schedule {
                job: "audit".into(),
                source: TickSource::Scheduler
            })
        );
    }

    #[test]
    fn says_what_it_is_instead() {
        let sqs = json!({"Records": [{"eventSource": "aws:sqs", "body": "x"}]});
        assert!(classify(&sqs).unwrap_err().contains("from aws:sqs"));
        let sns = json!({"Records": [{"EventSource": "aws:sns", "Sns": {}}]});
        assert!(classify(&sns).unwrap_err().contains("from aws:sns"));
        let ec2 = json!({"detail-type": "EC2 Instance State-change Notification", "source": "aws.ec2", "detail": {}});
        let e = classify(&ec2).unwrap_err();
        assert!(e.contains("EventBridge") && e.contains("aws.ec2"), "{e}");
        assert!(classify(&json!([1])).unwrap_err().contains("a JSON array"));
        assert!(
            classify(&json!({"hello": 1}))
                .unwrap_err()
                .contains("not an event")
        );
        let e = classify(&json!({"job": "vacuum"})).unwrap_err();
        assert!(e.starts_with("schedule event: unknown job"), "{e}");
    }
}
