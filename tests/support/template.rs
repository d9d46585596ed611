//! `infra/template.yaml` as tests and benchmarks read it: the YAML in
//! CloudFormation's JSON form (the test kit's reader,
//! [`worker_testkit::template`]), and an evaluator of the Lambda event-filtering
//! subset its stream filters use (so `tests/infra.rs` can check the filters
//! and `benches/load.rs` can deliver only what Lambda would).

use serde_json::{Value, json};

/// `infra/template.yaml` in CloudFormation's JSON form.
pub fn template() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("infra/template.yaml");
    worker_testkit::template::load(&path)
}

/// The Nishiki stack (`TableStreamArn` given), parameters overridden.
pub fn nishiki_stack(overrides: &[(&str, &str)]) -> worker_testkit::template::Stack {
    worker_testkit::template::Stack::new(template(), "nishiki-worker-dev", STREAM_ARN, overrides)
}

/// The table stream the template is given.
pub const STREAM_ARN: &str = "arn:aws:dynamodb:us-east-1:123456789012:table/nishiki-table-dev-db/stream/2024-01-01T00:00:00.000";

/// Whether an event matches a Lambda event-filtering pattern. Supports the
/// subset the template uses, with Lambda's semantics: object = all fields
/// (AND), array = any alternative (OR); exact values, `prefix`, `suffix`,
/// `exists`, `anything-but` with a value or a list of values (Lambda does
/// not support `anything-but` with `prefix`). Anything else panics.
pub fn matches(pattern: &Value, event: &Value) -> bool {
    let p = pattern.as_object().expect("a pattern is an object");
    p.iter().all(|(field, pv)| {
        let ev = event.get(field);
        match pv {
            Value::Object(_) => ev.is_some_and(|e| matches(pv, e)),
            Value::Array(alternatives) => alternatives.iter().any(|a| leaf(a, ev)),
            other => panic!("pattern field {field}: {other} is neither object nor array"),
        }
    })
}

fn leaf(alt: &Value, ev: Option<&Value>) -> bool {
    match alt {
        Value::String(_) | Value::Number(_) | Value::Bool(_) => ev == Some(alt),
        Value::Object(op) => {
            assert_eq!(op.len(), 1, "one operator per alternative: {alt}");
            let (name, arg) = op.iter().next().unwrap();
            let text = ev.and_then(Value::as_str);
            match (name.as_str(), arg) {
                ("prefix", Value::String(p)) => text.is_some_and(|t| t.starts_with(p.as_str())),
                ("suffix", Value::String(s)) => text.is_some_and(|t| t.ends_with(s.as_str())),
                ("exists", Value::Bool(b)) => ev.is_some() == *b,
                ("anything-but", Value::Array(values)) => {
                    assert!(values.iter().all(|v| v.is_string() || v.is_number()));
                    ev.is_some_and(|e| !values.contains(e))
                }
                ("anything-but", v @ (Value::String(_) | Value::Number(_))) => {
                    ev.is_some_and(|e| e != v)
                }
                ("anything-but", other) => {
                    panic!("anything-but {other}: Lambda event filtering supports only values here")
                }
                (other, _) => panic!("operator {other} is not used by this template"),
            }
        }
        other => panic!("unsupported pattern alternative {other}"),
    }
}

/// The stream function's DynamoDB event source (its `Properties`), as
/// written in the template (no intrinsic evaluated: its batch size and
/// filter patterns are literals).
pub fn stream_event_source(template: &Value) -> &Value {
    let events =
        template["Resources"][nishiki_worker::deploy::STREAM_FUNCTION]["Properties"]["Events"]
            .as_object()
            .expect("the stream function has Events");
    let mut sources = events.values().filter(|e| e["Type"] == "DynamoDB");
    let source = sources.next().expect("a DynamoDB event source");
    assert!(sources.next().is_none(), "one DynamoDB event source");
    &source["Properties"]
}

/// The filter patterns of an event source's `FilterCriteria`, parsed.
pub fn filter_patterns(source: &Value) -> Vec<Value> {
    let filters = source["FilterCriteria"]["Filters"]
        .as_array()
        .expect("the event source has FilterCriteria");
    assert!(!filters.is_empty());
    filters
        .iter()
        .map(|f| {
            serde_json::from_str(f["Pattern"].as_str().expect("Pattern is a JSON string"))
                .expect("Pattern parses as JSON")
        })
        .collect()
}

/// Whether Lambda delivers a record (its JSON form) through `patterns`: a
/// record is delivered when any pattern matches.
pub fn delivered(patterns: &[Value], record: &Value) -> bool {
    patterns.iter().any(|p| matches(p, record))
}
