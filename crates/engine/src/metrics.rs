//! CloudWatch Embedded Metric Format (EMF): one JSON line per invocation,
//! written to stdout by the Lambda functions (Lambda ships stdout to
//! CloudWatch Logs, which turns EMF lines into metrics).
//!
//! ```json
//! {"_aws":{"Timestamp":1711357200000,"CloudWatchMetrics":[{"Namespace":"MyWorker",
//!   "Dimensions":[["Function"]],"Metrics":[{"Name":"RecordsHandled","Unit":"Count"}, ...]}]},
//!  "Function":"my-worker-stream","RecordsHandled":3, ...}
//! ```
//!
//! The engine's own metrics (an app adds its jobs' metrics; dimension
//! `Function`, and on a schedule function also `Function, Job`):
//!
//! | name | unit | from |
//! |---|---|---|
//! | `RecordsHandled`, `RecordsSkipped` | Count | [`BatchReport`] `handled`, `skipped` |
//! | `RecordsFailed` | Count | permanent: `rejected` + `malformed` (logged, then parked) |
//! | `RecordsParked` | Count | `parked`: written to the parking table ([`crate::park`]) |
//! | `RecordsRetried` | Count | transient: `failed` + `not_attempted` + `parking_failed` (Lambda delivers them again) |
//! | `StreamLagMs` | Milliseconds | now minus each record's `ApproximateCreationDateTime`, a value list (at most 100 values: quantiles when more) |
//! | `StreamLagMaxMs` | Milliseconds | the largest of those |
//! | `JobRuns`, `JobsIncomplete`, `JobErrors` | Count | schedule: 1 per run; 1 when the run stopped early; 1 when it failed |
//! | `DynamoDBRequests`, `ConsumedRCU`, `ConsumedWCU` | Count / None | [`MetricsSnapshot`] over the invocation |
//! | `ColdStart` | Count | 1 on the first invocation of the process, else 0 |
//!
//! A job's own figures travel typed in its [`JobReport::metrics`]; a stream
//! handler's writes are counted under the metric name it declares
//! ([`WriteCounter`]). The builders are pure; [`Emitter`] writes through an
//! injected [`MetricsWriter`] (stdout in Lambda, [`CapturedLines`] in
//! tests). Nothing here carries an attribute value: only counts, durations,
//! the function and the job name.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use crate::error::HandlerError;
use crate::schedule::{JobName, JobReport};
use crate::store::MetricsSnapshot;
use crate::stream::decode::{RecordError, StreamChange};
use crate::stream::engine::BatchReport;

/// EMF allows at most 100 values in a metric's value list.
pub const MAX_VALUES: usize = 100;

/// A CloudWatch unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Things counted (records, requests, runs).
    Count,
    /// Durations (the stream lag, `StreamLagMs`).
    Milliseconds,
    /// Capacity units (no CloudWatch unit fits).
    None,
}

impl Unit {
    /// The unit's name in an EMF line (`Count`, `Milliseconds`, `None`).
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
    /// One data point.
    One(f64),
    /// One data point per value (per record's lag, say); EMF takes at most
    /// [`MAX_VALUES`], the caller keeps to that.
    Many(Vec<f64>),
}

/// A named metric with its unit and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// The CloudWatch metric name (`RecordsHandled`); never an attribute
    /// value.
    pub name: &'static str,
    /// Its CloudWatch unit.
    pub unit: Unit,
    /// Its data point(s).
    pub value: MetricValue,
}

impl Metric {
    /// A [`Unit::Count`] metric of one data point, `n`.
    pub fn count(name: &'static str, n: u64) -> Self {
        Metric {
            name,
            unit: Unit::Count,
            value: MetricValue::One(n as f64),
        }
    }

    /// One value in `unit`.
    pub(crate) fn with_unit(name: &'static str, unit: Unit, v: f64) -> Self {
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
pub(crate) fn emf_json(
    namespace: &str,
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
                "Namespace": namespace,
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
pub(crate) fn emf_line(
    namespace: &str,
    timestamp: DateTime<Utc>,
    dimensions: &[(&str, &str)],
    metrics: &[Metric],
) -> String {
    emf_json(namespace, timestamp, dimensions, metrics).to_string()
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
pub(crate) fn value_list(values: &[f64]) -> Vec<f64> {
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

/// Write requests of the stream handlers over one invocation, by the
/// metric name each handler's writes count under.
pub type HandlerWrites = BTreeMap<String, u64>;

/// Records (stream) or runs (schedule) stopped by an environment fault: a
/// missing table or index, access denied, a bad credential
/// ([`crate::error::FailureKind::Environment`]). Every template alarms on
/// it.
pub const ENVIRONMENT_FAULTS: &str = "EnvironmentFaults";

/// DynamoDB figures of one invocation.
pub fn store_metrics(s: &MetricsSnapshot) -> Vec<Metric> {
    let requests = s.requests();
    vec![
        Metric::count("DynamoDBRequests", requests),
        Metric::with_unit("ConsumedRCU", Unit::None, s.read_capacity),
        Metric::with_unit("ConsumedWCU", Unit::None, s.write_capacity),
    ]
}

/// The engine's metrics of one stream invocation: record counts and lag.
pub fn batch_metrics(report: &BatchReport, lags_ms: &[f64]) -> Vec<Metric> {
    let mut m = vec![
        Metric::count("RecordsHandled", report.handled as u64),
        // Another writer's items are skipped too (counted apart in the log).
        Metric::count("RecordsSkipped", (report.skipped + report.foreign) as u64),
        Metric::count("RecordsFailed", (report.rejected + report.malformed) as u64),
        Metric::count(crate::park::RECORDS_PARKED, report.parked as u64),
        Metric::count(
            "RecordsRetried",
            (report.failed + report.environment + report.not_attempted + report.parking_failed)
                as u64,
        ),
        Metric::count(ENVIRONMENT_FAULTS, report.environment_faults() as u64),
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
    m
}

/// The metrics of one schedule invocation (`Err`: the job failed): the
/// run counters, then the job's own metrics from its report.
pub fn job_run_metrics<J: JobName>(result: Result<&JobReport<J>, &HandlerError>) -> Vec<Metric> {
    match result {
        Err(e) => vec![
            Metric::count("JobErrors", 1),
            Metric::count(
                ENVIRONMENT_FAULTS,
                u64::from(e.kind() == crate::error::FailureKind::Environment),
            ),
        ],
        Ok(report) => {
            let mut m = vec![
                Metric::count("JobRuns", 1),
                Metric::count("JobsIncomplete", u64::from(!report.complete)),
            ];
            m.extend(report.metrics.iter().cloned());
            m
        }
    }
}

/// Where EMF lines go.
pub trait MetricsWriter: Send + Sync {
    /// Write one EMF line (a JSON object, without its newline); failures
    /// are dropped: metrics never fail an invocation.
    fn write_line(&self, line: &str);
}

/// Lambda's stdout (logs go to stderr).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StdoutWriter;

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
    /// Every line written so far, in order (shared by its clones).
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

/// Writes EMF lines for one function, under one namespace.
#[derive(Clone)]
pub struct Emitter {
    namespace: &'static str,
    function: String,
    writer: Arc<dyn MetricsWriter>,
}

impl Emitter {
    /// Lines to `writer`, under the CloudWatch `namespace`, with `function`
    /// as their `Function` dimension.
    pub fn new(
        namespace: &'static str,
        function: impl Into<String>,
        writer: Arc<dyn MetricsWriter>,
    ) -> Self {
        Emitter {
            namespace,
            function: function.into(),
            writer,
        }
    }

    /// Stdout, the function named by `AWS_LAMBDA_FUNCTION_NAME` (Lambda sets
    /// it), else `fallback` (the binary's name).
    pub fn stdout_from_env(namespace: &'static str, fallback: &str) -> Self {
        Emitter::new(
            namespace,
            function_name(std::env::var("AWS_LAMBDA_FUNCTION_NAME").ok(), fallback),
            Arc::new(StdoutWriter),
        )
    }

    /// The CloudWatch namespace of every line.
    pub fn namespace(&self) -> &'static str {
        self.namespace
    }

    /// The `Function` dimension of every line.
    pub fn function(&self) -> &str {
        &self.function
    }

    /// Write one line with the `Function` dimension, plus `Job` when given.
    pub(crate) fn emit(&self, timestamp: DateTime<Utc>, job: Option<&str>, metrics: &[Metric]) {
        let mut dims = vec![("Function", self.function.as_str())];
        if let Some(job) = job {
            dims.push(("Job", job));
        }
        self.writer
            .write_line(&emf_line(self.namespace, timestamp, &dims, metrics));
    }
}

/// The `Function` dimension: the Lambda variable when set and not empty.
pub(crate) fn function_name(from_env: Option<String>, fallback: &str) -> String {
    from_env
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| fallback.to_owned())
}

/// Counts the write requests of the stream handlers, by the metric name
/// each handler's writes count under.
#[derive(Debug, Default)]
pub struct WriteCounter(Mutex<HandlerWrites>);

impl WriteCounter {
    /// Count `writes` under `metric`.
    pub fn add(&self, metric: &str, writes: usize) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(metric.to_owned())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::decode::ChangeKind;
    use aws_sdk_dynamodb::types::AttributeValue;
    use serde::Serialize;

    const NAMESPACE: &str = "MyWorker";

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
            NAMESPACE,
            at("2024-03-25T09:00:00Z"),
            &[("Function", "my-stream"), ("Job", "audit")],
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
                        "Namespace": "MyWorker",
                        "Dimensions": [["Function"], ["Function", "Job"]],
                        "Metrics": [
                            {"Name": "RecordsHandled", "Unit": "Count"},
                            {"Name": "StreamLagMs", "Unit": "Milliseconds"},
                            {"Name": "ConsumedRCU", "Unit": "None"},
                        ],
                    }],
                },
                "Function": "my-stream",
                "Job": "audit",
                "RecordsHandled": 3,
                "StreamLagMs": [1, 2.5],
                "ConsumedRCU": 0.5,
            })
        );
        assert_valid_emf(&v);
        let line = emf_line(
            NAMESPACE,
            at("2024-03-25T09:00:00Z"),
            &[("Function", "f")],
            &[],
        );
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
            typed: None,
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
            parked: 1,
            parking_failed: 1,
            ..Default::default()
        };
        let m = batch_metrics(&report, &[10.0, 30.0]);
        let one = |n| match get(&m, n) {
            Some(MetricValue::One(x)) => x,
            other => panic!("{n}: {other:?}"),
        };
        assert_eq!(one("RecordsHandled"), 4.0);
        assert_eq!(one("RecordsSkipped"), 2.0);
        assert_eq!(one("RecordsFailed"), 2.0);
        assert_eq!(one("RecordsRetried"), 5.0);
        assert_eq!(one("RecordsParked"), 1.0);
        assert_eq!(one("StreamLagMaxMs"), 30.0);
        assert_eq!(
            get(&m, "StreamLagMs"),
            Some(MetricValue::Many(vec![10.0, 30.0]))
        );
        // No creation times: no lag metrics at all (never a metric without a value).
        let m = batch_metrics(&report, &[]);
        assert!(get(&m, "StreamLagMs").is_none() && get(&m, "StreamLagMaxMs").is_none());
        let store = MetricsSnapshot {
            get_item: 3,
            batch_write_item: 2,
            read_capacity: 1.5,
            write_capacity: 7.0,
            ..Default::default()
        };
        let m = store_metrics(&store);
        assert_eq!(get(&m, "DynamoDBRequests"), Some(MetricValue::One(5.0)));
        assert_eq!(get(&m, "ConsumedRCU"), Some(MetricValue::One(1.5)));
        assert_eq!(get(&m, "ConsumedWCU"), Some(MetricValue::One(7.0)));
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
    struct Compact;

    impl std::fmt::Display for Compact {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("compact")
        }
    }

    impl JobName for Compact {
        const ALL: &'static [Compact] = &[Compact];
        fn as_str(self) -> &'static str {
            "compact"
        }
    }

    #[test]
    fn job_counters_and_the_jobs_own_metrics() {
        let report = JobReport {
            job: Compact,
            complete: false,
            summary: String::new(),
            details: json!({"merged": 2}),
            metrics: vec![Metric::count("Merged", 2)],
        };
        let m = job_run_metrics(Ok(&report));
        let names: Vec<_> = m.iter().map(|m| (m.name, m.value.clone())).collect();
        assert_eq!(
            names,
            [
                ("JobRuns", MetricValue::One(1.0)),
                ("JobsIncomplete", MetricValue::One(1.0)),
                ("Merged", MetricValue::One(2.0)),
            ]
        );
        let e = HandlerError::invalid("x");
        let m = job_run_metrics::<Compact>(Err(&e));
        assert_eq!(get(&m, "JobErrors"), Some(MetricValue::One(1.0)));
        assert!(get(&m, "JobRuns").is_none());
    }

    #[test]
    fn emitter_writes_one_valid_line_with_the_function() {
        let lines = CapturedLines::default();
        let e = Emitter::new(NAMESPACE, "stream-fn", Arc::new(lines.clone()));
        e.emit(
            at("2024-03-25T09:00:00Z"),
            Some("audit"),
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
        c.add("ItemsRepaired", 2);
        let before = c.snapshot();
        c.add("ItemsRepaired", 3);
        c.add("Stamps", 1);
        let d = c.since(&before);
        assert_eq!(d.get("ItemsRepaired"), Some(&3));
        assert_eq!(d.get("Stamps"), Some(&1));
    }
}
