//! CloudWatch Embedded Metric Format (EMF): one JSON line per invocation,
//! written to stdout by the Lambda functions (Lambda ships stdout to
//! CloudWatch Logs, which turns EMF lines into metrics).
//!
//! ```json
//! {"_aws":{"Timestamp":1711357200000,"CloudWatchMetrics":[{"Namespace":"NishikiWorker",
//!   "Dimensions":[["Function"]],"Metrics":[{"Name":"RecordsHandled","Unit":"Count"}, ...]}]},
//!  "Function":"nishiki-worker-stream","RecordsHandled":3, ...}
//! ```
//!
//! Metric names (namespace `NishikiWorker`, dimension `Function`, and on
//! the schedule function also `Function, Job`):
//!
//! | name | unit | from |
//! |---|---|---|
//! | `RecordsHandled`, `RecordsSkipped` | Count | [`BatchReport`] `handled`, `skipped` |
//! | `RecordsFailed` | Count | permanent: `rejected` + `malformed` (logged and skipped) |
//! | `RecordsRetried` | Count | transient: `failed` + `not_attempted` (Lambda delivers them again) |
//! | `StreamLagMs` | Milliseconds | now (the injected clock) minus each record's `ApproximateCreationDateTime`, a value list (at most 100 values: quantiles when more) |
//! | `StreamLagMaxMs` | Milliseconds | the largest of those |
//! | `ItemsRepaired` | Count | stream: writes of the relationship cascade; `audit`: `repair_writes` |
//! | `ExpiryWrites`, `InvitationWrites` | Count | stream: writes of the expiry handler (flags, reminders) and the invitation TTL stamp |
//! | `LinksSwept` | Count | `sweep-invitations`: links deleted |
//! | `FoodsFlagged` | Count | `flag-expiring`: flags written (`flags_new` + `flags_refreshed`) |
//! | `JobRuns`, `JobsIncomplete`, `JobErrors` | Count | schedule: 1 per run; 1 when the run stopped early; 1 when it failed |
//! | `DynamoDBRequests`, `ConsumedRCU`, `ConsumedWCU` | Count / None | [`MetricsSnapshot`] over the invocation |
//!
//! The builder ([`emf_line`], [`stream_metrics`], [`job_metrics`]) is pure;
//! [`Emitter`] writes through an injected [`MetricsWriter`] (stdout in
//! Lambda, [`CapturedLines`] in tests). Nothing here carries an attribute
//! value: only counts, durations, the function and the job name.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use crate::keys::{ItemKind, Job};
use crate::schedule::JobReport;
use crate::worker::{BatchFacts, Change, ChangeHandler, HandlerOutcome};
use worker_engine::error::HandlerError;
use worker_engine::store::MetricsSnapshot;
use worker_engine::stream::decode::{RecordError, StreamChange};
use worker_engine::stream::engine::BatchReport;

/// The CloudWatch namespace of every metric.
pub const NAMESPACE: &str = "NishikiWorker";

/// EMF allows at most 100 values in a metric's value list.
pub const MAX_VALUES: usize = 100;

/// A CloudWatch unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    Milliseconds,
    /// Capacity units (no CloudWatch unit fits).
    None,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Milliseconds => "Milliseconds",
            Unit::None => "None",
        }
    }
}

/// One metric's value: a single number or a list (one data point each).
#[derive(Debug, Clone, PartialEq)]
pub enum MetricValue {
    One(f64),
    Many(Vec<f64>),
}

/// A named metric with its unit and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub name: &'static str,
    pub unit: Unit,
    pub value: MetricValue,
}

impl Metric {
    pub fn count(name: &'static str, n: u64) -> Self {
        Metric {
            name,
            unit: Unit::Count,
            value: MetricValue::One(n as f64),
        }
    }

    fn with_unit(name: &'static str, unit: Unit, v: f64) -> Self {
        Metric {
            name,
            unit,
            value: MetricValue::One(v),
        }
    }
}

/// The EMF object of one line. `dimensions` are (name, value) pairs; the
/// metrics are published under every prefix of them (`[["Function"],
/// ["Function", "Job"]]`).
pub fn emf_json(
    timestamp: DateTime<Utc>,
    dimensions: &[(&str, &str)],
    metrics: &[Metric],
) -> Value {
    let sets: Vec<Vec<&str>> = (1..=dimensions.len())
        .map(|n| dimensions[..n].iter().map(|(k, _)| *k).collect())
        .collect();
    let defs: Vec<Value> = metrics
        .iter()
        .map(|m| json!({"Name": m.name, "Unit": m.unit.as_str()}))
        .collect();
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp.timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": sets,
                "Metrics": defs,
            }],
        }),
    );
    for (k, v) in dimensions {
        root.insert((*k).to_owned(), Value::from(*v));
    }
    for m in metrics {
        let v = match &m.value {
            MetricValue::One(x) => number(*x),
            MetricValue::Many(xs) => Value::Array(xs.iter().map(|x| number(*x)).collect()),
        };
        root.insert(m.name.to_owned(), v);
    }
    Value::Object(root)
}

/// [`emf_json`] as one line.
pub fn emf_line(
    timestamp: DateTime<Utc>,
    dimensions: &[(&str, &str)],
    metrics: &[Metric],
) -> String {
    emf_json(timestamp, dimensions, metrics).to_string()
}

/// Whole numbers as integers (`3`, not `3.0`); others as they are.
fn number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        Value::from(x as i64)
    } else {
        serde_json::Number::from_f64(x)
            .map(Value::Number)
            .unwrap_or(Value::from(0))
    }
}

/// Stream lag of each decoded record that carries a creation time: `now`
/// minus `ApproximateCreationDateTime`, in milliseconds (never negative).
pub fn stream_lags_ms(
    records: &[Result<StreamChange, RecordError>],
    now: DateTime<Utc>,
) -> Vec<f64> {
    records
        .iter()
        .filter_map(|r| r.as_ref().ok()?.approximate_creation)
        .map(|created| (now - created).num_milliseconds().max(0) as f64)
        .collect()
}

/// At most [`MAX_VALUES`] values: all of them when they fit, else evenly
/// spaced quantiles of the sorted values (the smallest and the largest
/// included).
pub fn value_list(values: &[f64]) -> Vec<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.len() <= MAX_VALUES {
        return sorted;
    }
    let last = sorted.len() - 1;
    (0..MAX_VALUES)
        .map(|i| sorted[i * last / (MAX_VALUES - 1)])
        .collect()
}

/// Write requests per stream handler over one invocation, by handler name
/// (`relationships`, `expiry`, `invitations`).
pub type HandlerWrites = BTreeMap<String, u64>;

/// DynamoDB figures of one invocation.
fn store_metrics(s: &MetricsSnapshot) -> Vec<Metric> {
    let requests = s.requests();
    vec![
        Metric::count("DynamoDBRequests", requests),
        Metric::with_unit("ConsumedRCU", Unit::None, s.read_capacity),
        Metric::with_unit("ConsumedWCU", Unit::None, s.write_capacity),
    ]
}

/// The metrics of one stream invocation.
pub fn stream_metrics(
    report: &BatchReport,
    lags_ms: &[f64],
    writes: &HandlerWrites,
    store: Option<&MetricsSnapshot>,
) -> Vec<Metric> {
    let w = |name: &str| writes.get(name).copied().unwrap_or(0);
    let mut m = vec![
        Metric::count("RecordsHandled", report.handled as u64),
        Metric::count("RecordsSkipped", report.skipped as u64),
        Metric::count("RecordsFailed", (report.rejected + report.malformed) as u64),
        Metric::count(
            "RecordsRetried",
            (report.failed + report.not_attempted) as u64,
        ),
    ];
    if !lags_ms.is_empty() {
        m.push(Metric {
            name: "StreamLagMs",
            unit: Unit::Milliseconds,
            value: MetricValue::Many(value_list(lags_ms)),
        });
        m.push(Metric::with_unit(
            "StreamLagMaxMs",
            Unit::Milliseconds,
            lags_ms.iter().copied().fold(0.0, f64::max),
        ));
    }
    m.push(Metric::count("ItemsRepaired", w("relationships")));
    m.push(Metric::count("ExpiryWrites", w("expiry")));
    m.push(Metric::count("InvitationWrites", w("invitations")));
    m.extend(store.map(store_metrics).unwrap_or_default());
    m
}

/// The metrics of one schedule invocation (`Err`: the job failed).
pub fn job_metrics(
    result: Result<&JobReport, &HandlerError>,
    store: Option<&MetricsSnapshot>,
) -> Vec<Metric> {
    let mut m = Vec::new();
    match result {
        Err(_) => m.push(Metric::count("JobErrors", 1)),
        Ok(report) => {
            m.push(Metric::count("JobRuns", 1));
            m.push(Metric::count("JobsIncomplete", u64::from(!report.complete)));
            let d = |field: &str| report.details.get(field).and_then(Value::as_u64);
            match report.job {
                Job::SweepInvitations => {
                    m.push(Metric::count("LinksSwept", d("deleted").unwrap_or(0)));
                }
                Job::Audit => {
                    m.push(Metric::count(
                        "ItemsRepaired",
                        d("repair_writes").unwrap_or(0),
                    ));
                }
                Job::FlagExpiring => {
                    let flagged = d("flags_new").unwrap_or(0) + d("flags_refreshed").unwrap_or(0);
                    m.push(Metric::count("FoodsFlagged", flagged));
                }
                // Its report holds totals over every run so far, not this
                // run's figures: only the common metrics.
                Job::Backfill => {}
            }
        }
    }
    m.extend(store.map(store_metrics).unwrap_or_default());
    m
}

/// Where EMF lines go.
pub trait MetricsWriter: Send + Sync {
    fn write_line(&self, line: &str);
}

/// Lambda's stdout (logs go to stderr).
#[derive(Debug, Clone, Copy, Default)]
pub struct StdoutWriter;

impl MetricsWriter for StdoutWriter {
    fn write_line(&self, line: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// Keeps every line (tests).
#[derive(Debug, Clone, Default)]
pub struct CapturedLines(Arc<Mutex<Vec<String>>>);

impl CapturedLines {
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl MetricsWriter for CapturedLines {
    fn write_line(&self, line: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line.to_owned());
    }
}

/// Writes EMF lines for one function.
#[derive(Clone)]
pub struct Emitter {
    function: String,
    writer: Arc<dyn MetricsWriter>,
}

impl Emitter {
    pub fn new(function: impl Into<String>, writer: Arc<dyn MetricsWriter>) -> Self {
        Emitter {
            function: function.into(),
            writer,
        }
    }

    /// Stdout, the function named by `AWS_LAMBDA_FUNCTION_NAME` (Lambda sets
    /// it), else `fallback` (the binary's name).
    pub fn stdout_from_env(fallback: &str) -> Self {
        Emitter::new(
            function_name(std::env::var("AWS_LAMBDA_FUNCTION_NAME").ok(), fallback),
            Arc::new(StdoutWriter),
        )
    }

    pub fn function(&self) -> &str {
        &self.function
    }

    /// Write one line with the `Function` dimension, plus `Job` when given.
    pub fn emit(&self, timestamp: DateTime<Utc>, job: Option<Job>, metrics: &[Metric]) {
        let mut dims = vec![("Function", self.function.as_str())];
        if let Some(job) = job {
            dims.push(("Job", job.as_str()));
        }
        self.writer.write_line(&emf_line(timestamp, &dims, metrics));
    }
}

/// The `Function` dimension: the Lambda variable when set and not empty.
pub fn function_name(from_env: Option<String>, fallback: &str) -> String {
    from_env
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| fallback.to_owned())
}

/// Counts the write requests each stream handler reports
/// ([`HandlerOutcome::Wrote`]), for [`stream_metrics`].
#[derive(Debug, Default)]
pub struct WriteCounter(Mutex<HandlerWrites>);

impl WriteCounter {
    fn add(&self, handler: &str, writes: usize) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(handler.to_owned())
            .or_default() += writes as u64;
    }

    /// The counts so far.
    pub fn snapshot(&self) -> HandlerWrites {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The counts accumulated since `earlier`.
    pub fn since(&self, earlier: &HandlerWrites) -> HandlerWrites {
        self.snapshot()
            .into_iter()
            .map(|(k, v)| {
                let before = earlier.get(&k).copied().unwrap_or(0);
                (k, v.saturating_sub(before))
            })
            .collect()
    }
}

/// A stream handler whose write counts go to a [`WriteCounter`]; otherwise
/// the handler itself.
pub struct CountedHandler {
    inner: Arc<dyn ChangeHandler>,
    counter: Arc<WriteCounter>,
}

impl CountedHandler {
    pub fn wrap(
        inner: Arc<dyn ChangeHandler>,
        counter: Arc<WriteCounter>,
    ) -> Arc<dyn ChangeHandler> {
        Arc::new(CountedHandler { inner, counter })
    }
}

#[async_trait]
impl ChangeHandler for CountedHandler {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn wants(&self, kind: ItemKind) -> bool {
        self.inner.wants(kind)
    }

    async fn handle_in_batch(
        &self,
        change: &Change,
        now: DateTime<Utc>,
        batch: &BatchFacts,
    ) -> Result<HandlerOutcome, HandlerError> {
        let outcome = self.inner.handle_in_batch(change, now, batch).await?;
        if let HandlerOutcome::Wrote { writes, .. } = &outcome {
            self.counter.add(self.inner.name(), *writes);
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;
    use worker_engine::stream::decode::ChangeKind;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    /// Every metric named in `_aws` has a number (or a list of numbers) at
    /// the top level, every dimension named has a string value.
    fn assert_valid_emf(v: &Value) {
        let aws = &v["_aws"];
        assert!(aws["Timestamp"].is_i64());
        for directive in aws["CloudWatchMetrics"].as_array().unwrap() {
            assert_eq!(directive["Namespace"], NAMESPACE);
            for set in directive["Dimensions"].as_array().unwrap() {
                for d in set.as_array().unwrap() {
                    assert!(v[d.as_str().unwrap()].is_string(), "{d}");
                }
            }
            for m in directive["Metrics"].as_array().unwrap() {
                let value = &v[m["Name"].as_str().unwrap()];
                let ok = value.is_number()
                    || value
                        .as_array()
                        .is_some_and(|a| a.len() <= MAX_VALUES && a.iter().all(Value::is_number));
                assert!(ok, "{m}: {value}");
            }
        }
    }

    #[test]
    fn emf_shape() {
        let v = emf_json(
            at("2024-03-25T09:00:00Z"),
            &[("Function", "nishiki-stream"), ("Job", "audit")],
            &[
                Metric::count("RecordsHandled", 3),
                Metric {
                    name: "StreamLagMs",
                    unit: Unit::Milliseconds,
                    value: MetricValue::Many(vec![1.0, 2.5]),
                },
                Metric::with_unit("ConsumedRCU", Unit::None, 0.5),
            ],
        );
        assert_eq!(
            v,
            json!({
                "_aws": {
                    "Timestamp": 1711357200000i64,
                    "CloudWatchMetrics": [{
                        "Namespace": "NishikiWorker",
                        "Dimensions": [["Function"], ["Function", "Job"]],
                        "Metrics": [
                            {"Name": "RecordsHandled", "Unit": "Count"},
                            {"Name": "StreamLagMs", "Unit": "Milliseconds"},
                            {"Name": "ConsumedRCU", "Unit": "None"},
                        ],
                    }],
                },
                "Function": "nishiki-stream",
                "Job": "audit",
                "RecordsHandled": 3,
                "StreamLagMs": [1, 2.5],
                "ConsumedRCU": 0.5,
            })
        );
        assert_valid_emf(&v);
        let line = emf_line(at("2024-03-25T09:00:00Z"), &[("Function", "f")], &[]);
        assert!(!line.contains('\n'));
        assert_valid_emf(&serde_json::from_str(&line).unwrap());
    }

    fn change(created: Option<&str>) -> Result<StreamChange, RecordError> {
        Ok(StreamChange {
            event_id: "e".into(),
            kind: ChangeKind::Remove,
            sequence_number: None,
            approximate_creation: created.map(at),
            keys: [("PK".to_owned(), AttributeValue::S("x".into()))].into(),
            old_image: None,
            new_image: None,
            event_source_arn: None,
            size_bytes: None,
        })
    }

    #[test]
    fn lag_is_now_minus_creation_never_negative() {
        let records = vec![
            change(Some("2024-03-25T08:59:58Z")),
            change(None),
            Err(RecordError {
                index: 2,
                event_id: None,
                sequence_number: None,
                keys: None,
                reason: "bad".into(),
            }),
            change(Some("2024-03-25T09:00:00.250Z")),
            change(Some("2024-03-25T08:00:00Z")),
        ];
        let lags = stream_lags_ms(&records, at("2024-03-25T09:00:00Z"));
        assert_eq!(lags, [2000.0, 0.0, 3_600_000.0]);
    }

    #[test]
    fn value_lists_keep_at_most_100_values_with_the_extremes() {
        assert_eq!(value_list(&[3.0, 1.0, 2.0]), [1.0, 2.0, 3.0]);
        let many: Vec<f64> = (0..1000).rev().map(f64::from).collect();
        let list = value_list(&many);
        assert_eq!(list.len(), MAX_VALUES);
        assert_eq!((list[0], list[99]), (0.0, 999.0));
        assert!(list.windows(2).all(|w| w[0] <= w[1]));
        assert!(value_list(&[]).is_empty());
    }

    fn get(metrics: &[Metric], name: &str) -> Option<MetricValue> {
        metrics
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.value.clone())
    }

    #[test]
    fn stream_counts_add_up_to_the_batch() {
        let report = BatchReport {
            handled: 4,
            skipped: 2,
            rejected: 1,
            malformed: 1,
            failed: 1,
            not_attempted: 3,
            ..Default::default()
        };
        let writes: HandlerWrites =
            [("relationships".to_owned(), 5), ("expiry".to_owned(), 2)].into();
        let store = MetricsSnapshot {
            get_item: 3,
            batch_write_item: 2,
            read_capacity: 1.5,
            write_capacity: 7.0,
            ..Default::default()
        };
        let m = stream_metrics(&report, &[10.0, 30.0], &writes, Some(&store));
        let one = |n| match get(&m, n) {
            Some(MetricValue::One(x)) => x,
            other => panic!("{n}: {other:?}"),
        };
        assert_eq!(one("RecordsHandled"), 4.0);
        assert_eq!(one("RecordsSkipped"), 2.0);
        assert_eq!(one("RecordsFailed"), 2.0);
        assert_eq!(one("RecordsRetried"), 4.0);
        assert_eq!(one("ItemsRepaired"), 5.0);
        assert_eq!(one("ExpiryWrites"), 2.0);
        assert_eq!(one("InvitationWrites"), 0.0);
        assert_eq!(one("StreamLagMaxMs"), 30.0);
        assert_eq!(one("DynamoDBRequests"), 5.0);
        assert_eq!(one("ConsumedRCU"), 1.5);
        assert_eq!(one("ConsumedWCU"), 7.0);
        assert_eq!(
            get(&m, "StreamLagMs"),
            Some(MetricValue::Many(vec![10.0, 30.0]))
        );
        // No creation times: no lag metrics at all (never a metric without a value).
        let m = stream_metrics(&report, &[], &writes, None);
        assert!(get(&m, "StreamLagMs").is_none() && get(&m, "StreamLagMaxMs").is_none());
        assert!(get(&m, "ConsumedRCU").is_none());
    }

    #[test]
    fn job_counters_come_from_the_job_reports() {
        let report = |job, details| JobReport {
            job,
            complete: true,
            summary: String::new(),
            details,
        };
        let one = |m: &[Metric], n| match get(m, n) {
            Some(MetricValue::One(x)) => x,
            other => panic!("{n}: {other:?}"),
        };
        let r = report(
            Job::SweepInvitations,
            json!({"deleted": 2, "kept_renewed": 1}),
        );
        let m = job_metrics(Ok(&r), None);
        assert_eq!(
            (
                one(&m, "LinksSwept"),
                one(&m, "JobRuns"),
                one(&m, "JobsIncomplete")
            ),
            (2.0, 1.0, 0.0)
        );
        let r = report(Job::Audit, json!({"repair_writes": 7}));
        assert_eq!(one(&job_metrics(Ok(&r), None), "ItemsRepaired"), 7.0);
        let mut r = report(
            Job::FlagExpiring,
            json!({"flags_new": 2, "flags_refreshed": 1}),
        );
        r.complete = false;
        let m = job_metrics(Ok(&r), None);
        assert_eq!(
            (one(&m, "FoodsFlagged"), one(&m, "JobsIncomplete")),
            (3.0, 1.0)
        );
        let e = HandlerError::Invalid("x".into());
        let m = job_metrics(Err(&e), None);
        assert_eq!(one(&m, "JobErrors"), 1.0);
        assert!(get(&m, "JobRuns").is_none());
    }

    #[test]
    fn emitter_writes_one_valid_line_with_the_function() {
        let lines = CapturedLines::default();
        let e = Emitter::new("stream-fn", Arc::new(lines.clone()));
        e.emit(
            at("2024-03-25T09:00:00Z"),
            Some(Job::Audit),
            &[Metric::count("JobRuns", 1)],
        );
        let got = lines.lines();
        assert_eq!(got.len(), 1);
        let v: Value = serde_json::from_str(&got[0]).unwrap();
        assert_valid_emf(&v);
        assert_eq!(
            (v["Function"].as_str(), v["Job"].as_str()),
            (Some("stream-fn"), Some("audit"))
        );
        assert_eq!(
            function_name(Some("prod-stream".into()), "stream"),
            "prod-stream"
        );
        assert_eq!(function_name(Some(" ".into()), "stream"), "stream");
        assert_eq!(function_name(None, "schedule"), "schedule");
    }

    #[test]
    fn write_counter_deltas() {
        let c = WriteCounter::default();
        c.add("relationships", 2);
        let before = c.snapshot();
        c.add("relationships", 3);
        c.add("expiry", 1);
        let d = c.since(&before);
        assert_eq!(d.get("relationships"), Some(&3));
        assert_eq!(d.get("expiry"), Some(&1));
    }
}
