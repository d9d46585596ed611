//! `infra/template.yaml` as tests and benchmarks read it: the YAML in
//! CloudFormation's JSON form (the test kit's reader,
//! [`worker_testkit::template`]), and the engine's evaluator of Lambda event
//! filtering for its stream filters (so `tests/it/infra.rs` can check the filters
//! and `benches/load.rs` can deliver only what Lambda would).

use serde_json::{Value, json};

/// `infra/template.yaml` in CloudFormation's JSON form.
pub(crate) fn template() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("infra/template.yaml");
    worker_testkit::template::load(&path)
}

/// The Nishiki stack (`TableStreamArn` given), parameters overridden.
pub(crate) fn nishiki_stack(overrides: &[(&str, &str)]) -> worker_testkit::template::Stack {
    worker_testkit::template::Stack::new(template(), "nishiki-worker-dev", STREAM_ARN, overrides)
}

/// The table stream the template is given.
pub(crate) const STREAM_ARN: &str = "arn:aws:dynamodb:us-east-1:123456789012:table/nishiki-table-dev-db/stream/2024-01-01T00:00:00.000";

/// Lambda's event filtering, as the engine evaluates it for `dev`
/// ([`worker_toolkit::template::filter`]).
pub(crate) use worker_toolkit::template::filter::{delivered, matches};

/// The stream function's DynamoDB event source (its `Properties`), as
/// written in the template (no intrinsic evaluated: its batch size and
/// filter patterns are literals).
pub(crate) fn stream_event_source(template: &Value) -> &Value {
    let events =
        template["Resources"][worker_testkit::deploy::STREAM_FUNCTION]["Properties"]["Events"]
            .as_object()
            .expect("the stream function has Events");
    let mut sources = events.values().filter(|e| e["Type"] == "DynamoDB");
    let source = sources.next().expect("a DynamoDB event source");
    assert!(sources.next().is_none(), "one DynamoDB event source");
    &source["Properties"]
}

/// The filter patterns of an event source's `FilterCriteria`, parsed.
pub(crate) fn filter_patterns(source: &Value) -> Vec<Value> {
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
