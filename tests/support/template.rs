//! `infra/template.yaml` as tests and benchmarks read it: the YAML in
//! CloudFormation's JSON form, and an evaluator of the Lambda event-filtering
//! subset its stream filters use (so `tests/infra.rs` can check the filters
//! and `benches/load.rs` can deliver only what Lambda would).

use serde_json::{Value, json};

/// A YAML value in CloudFormation's JSON form: `!Ref x` -> `{"Ref": x}`,
/// `!GetAtt A.B` -> `{"Fn::GetAtt": ["A", "B"]}`, `!Sub`/`!If`/... ->
/// `{"Fn::Sub": ...}`.
pub fn to_json(v: &serde_yaml_ng::Value) -> Value {
    use serde_yaml_ng::Value as Y;
    match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(*b),
        Y::Number(n) => serde_json::to_value(n).expect("a YAML number is a JSON number"),
        Y::String(s) => Value::String(s.clone()),
        Y::Sequence(items) => Value::Array(items.iter().map(to_json).collect()),
        Y::Mapping(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let k = k.as_str().expect("template keys are strings").to_owned();
                    (k, to_json(v))
                })
                .collect(),
        ),
        Y::Tagged(t) => {
            let tag = t.tag.to_string();
            let name = tag.trim_start_matches('!');
            let inner = to_json(&t.value);
            match name {
                "Ref" => json!({ "Ref": inner }),
                "Condition" => json!({ "Condition": inner }),
                "GetAtt" => match inner {
                    Value::String(s) => {
                        let (res, attr) = s.split_once('.').expect("!GetAtt Resource.Attribute");
                        json!({ "Fn::GetAtt": [res, attr] })
                    }
                    other => json!({ "Fn::GetAtt": other }),
                },
                other => json!({ format!("Fn::{other}"): inner }),
            }
        }
    }
}

pub fn template() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("infra/template.yaml");
    let text = std::fs::read_to_string(path).expect("infra/template.yaml exists");
    let yaml: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).expect("infra/template.yaml is YAML");
    to_json(&yaml)
}

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
