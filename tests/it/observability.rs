//! Logs and metrics (issue 8, observability): every fixture of
//! `events/manifest.json` (every `events/stream/*.json` on its table, every
//! `events/schedule/*.json` tick) runs through [`App`] on DynamoDB Local with
//! the JSON log subscriber Lambda uses (`telemetry::json_subscriber`)
//! writing into a buffer and the EMF metrics writer capturing its lines.
//! Then:
//!
//! - every log line is a JSON object; lines written while a record is
//!   handled carry the `record` span (event id, sequence number, key) and
//!   the engine's per-record lines its outcome; job lines carry the `job` span;
//! - every EMF line is valid EMF (each metric named in `_aws` has a number
//!   or a list of numbers at the top level; the dimensions are there), there
//!   is one per invocation, and its counters add up to the batch and job
//!   reports; stream lag is now (the injected clock) minus each record's
//!   `ApproximateCreationDateTime`;
//! - no e-mail address or user name found anywhere in `events/` appears in
//!   any captured line.
//!
//! The test installs the process-wide log subscriber and reads back every
//! line the process logs, so it runs in a child process of its own
//! ([`worker_testkit::in_own_process`]): another test's lines would mix in.
//!
//! `cargo test --test it observability::` (`OBSERVABILITY_DUMP=DIR` writes
//! the captured lines to `DIR/logs.jsonl` and `DIR/metrics.jsonl`)

use crate::support;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::support::TestTable;
use chrono::{DateTime, Utc};
use nishiki_cli::KEYS;
use nishiki_cli::worker_config;
use nishiki_worker::app::App;
use nishiki_worker::config::ManualClock;
use nishiki_worker::keys::Job;
use nishiki_worker::metrics::{CapturedLines, Emitter, MAX_VALUES, NAMESPACE};
use serde_json::Value;
use tracing_subscriber::EnvFilter;
use worker_engine::schedule::JobReport;
use worker_engine::stream::BatchReport;
use worker_engine::stream::decode_event;
use worker_engine::telemetry;
use worker_toolkit::replay::apply;
use worker_toolkit::replay::snapshot::{load_items, read_snapshot};

const FUNCTION: &str = "observability-test";

fn events_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("events")
}

/// Log lines, as the JSON subscriber writes them.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogBuffer {
    fn lines(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .expect("log output is UTF-8")
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// The process-wide capturing subscriber: Lambda's JSON format, with the
/// worker's debug lines too (more lines to check).
fn logs() -> &'static LogBuffer {
    static LOGS: OnceLock<LogBuffer> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = LogBuffer::default();
        let writer = buf.clone();
        tracing::subscriber::set_global_default(telemetry::json_subscriber(
            EnvFilter::new("info,nishiki_worker=debug,worker_engine=debug"),
            move || writer.clone(),
        ))
        .expect("no other subscriber in this test's own process");
        buf
    })
}

/// One entry of `events/manifest.json` (the fields this test needs).
#[derive(Debug, serde::Deserialize)]
struct Fixture {
    name: String,
    events: Vec<String>,
    snapshot: String,
    now: String,
    #[serde(rename = "applyWrites")]
    apply_writes: bool,
    #[serde(default)]
    env: Vec<String>,
}

fn manifest() -> Vec<Fixture> {
    let text = std::fs::read_to_string(events_dir().join("manifest.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    serde_json::from_value(v["fixtures"].clone()).unwrap()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ---------------------------------------------------------------------------
// Personal data in the fixtures
// ---------------------------------------------------------------------------

/// Whether `s` looks like an e-mail address (`local@domain.tld`).
fn is_email(s: &str) -> bool {
    let Some((local, domain)) = s.split_once('@') else {
        return false;
    };
    let ok = |c: char| c.is_ascii_alphanumeric() || "._%+-".contains(c);
    !local.is_empty()
        && local.chars().all(ok)
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && domain
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-".contains(c))
}

/// E-mail-shaped words of a string.
fn emails_in(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || "._%+-@".contains(c)))
        .map(|w| w.trim_matches('.'))
        .filter(|w| is_email(w))
}

/// Every `EMailAddress` and `UserName` value (plain JSON or DynamoDB JSON
/// `{"S": ...}`) and every e-mail-shaped string, anywhere in `v`.
fn collect_personal(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(map) => {
            for (k, val) in map {
                if k == "EMailAddress" || k == "UserName" {
                    match val {
                        Value::String(s) => {
                            out.insert(s.clone());
                        }
                        Value::Object(typed) => {
                            if let Some(Value::String(s)) = typed.get("S") {
                                out.insert(s.clone());
                            }
                        }
                        _ => {}
                    }
                }
                out.extend(emails_in(k).map(str::to_owned));
                collect_personal(val, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect_personal(i, out)),
        Value::String(s) => out.extend(emails_in(s).map(str::to_owned)),
        _ => {}
    }
}

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            json_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
}

fn personal_data() -> BTreeSet<String> {
    let mut files = Vec::new();
    json_files(&events_dir(), &mut files);
    let mut out = BTreeSet::new();
    for f in &files {
        collect_personal(&read_json(f), &mut out);
    }
    out.retain(|s| !s.trim().is_empty());
    out
}

#[test]
fn personal_data_collector_finds_both_shapes() {
    let mut out = BTreeSet::new();
    collect_personal(
        &serde_json::json!([
            {"UserName": {"S": "Dora"}, "EMailAddress": {"S": "dora@example.org"}},
            {"UserName": "Eve", "note": "write to eve.x+1@mail.example.com."},
            {"not": "a@b", "also": "@example.com"}
        ]),
        &mut out,
    );
    let expected: BTreeSet<String> = [
        "Dora",
        "dora@example.org",
        "Eve",
        "eve.x+1@mail.example.com",
    ]
    .map(str::to_owned)
    .into();
    assert_eq!(out, expected);
}

// ---------------------------------------------------------------------------
// Checks of captured lines
// ---------------------------------------------------------------------------

/// A valid EMF line: returns it parsed.
fn check_emf(line: &str) -> Value {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let aws = &v["_aws"];
    assert!(aws["Timestamp"].is_i64(), "{line}");
    let directives = aws["CloudWatchMetrics"]
        .as_array()
        .expect("CloudWatchMetrics");
    assert!(!directives.is_empty(), "{line}");
    for d in directives {
        assert_eq!(d["Namespace"], NAMESPACE, "{line}");
        let sets = d["Dimensions"].as_array().expect("Dimensions");
        assert!(!sets.is_empty(), "{line}");
        for set in sets {
            for name in set.as_array().expect("a dimension set") {
                let name = name.as_str().expect("dimension name");
                assert!(v[name].is_string(), "dimension {name} has no value: {line}");
            }
        }
        assert_eq!(v["Function"], FUNCTION, "{line}");
        let metrics = d["Metrics"].as_array().expect("Metrics");
        assert!(!metrics.is_empty(), "{line}");
        for m in metrics {
            let name = m["Name"].as_str().expect("metric name");
            assert!(m["Unit"].is_string(), "{line}");
            let value = &v[name];
            let numeric = value.is_number()
                || value.as_array().is_some_and(|a| {
                    !a.is_empty() && a.len() <= MAX_VALUES && a.iter().all(Value::is_number)
                });
            assert!(numeric, "metric {name} has no numeric value: {line}");
        }
    }
    v
}

fn num(v: &Value, name: &str) -> f64 {
    v[name]
        .as_f64()
        .unwrap_or_else(|| panic!("{name} missing in {v}"))
}

/// Now minus each record's `ApproximateCreationDateTime` (seconds), in ms,
/// never negative: computed from the event file itself.
fn expected_lags(event: &Value, now: DateTime<Utc>) -> Vec<f64> {
    let mut lags: Vec<f64> = event["Records"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["dynamodb"]["ApproximateCreationDateTime"].as_f64())
        .map(|secs| (now.timestamp_millis() as f64 - secs * 1000.0).max(0.0))
        .collect();
    lags.sort_by(f64::total_cmp);
    lags
}

fn check_stream_line(
    v: &Value,
    report: &BatchReport,
    event: &Value,
    now: DateTime<Utc>,
    what: &str,
) {
    assert!(v.get("Job").is_none(), "{what}");
    let c = |n| num(v, n) as usize;
    assert_eq!(c("RecordsHandled"), report.handled, "{what}");
    assert_eq!(c("RecordsSkipped"), report.skipped, "{what}");
    assert_eq!(
        c("RecordsFailed"),
        report.rejected + report.malformed,
        "{what}"
    );
    assert_eq!(
        c("RecordsRetried"),
        report.failed + report.not_attempted,
        "{what}"
    );
    assert_eq!(
        c("RecordsHandled") + c("RecordsSkipped") + c("RecordsFailed") + c("RecordsRetried"),
        report.records.len(),
        "{what}: the record counters add up to the batch"
    );
    // Lag of the decoded records (a malformed one may carry a time too:
    // only records that decode are measured).
    let mut decoded: Vec<f64> = decode_event(event)
        .unwrap()
        .iter()
        .filter_map(|r| r.as_ref().ok()?.approximate_creation)
        .map(|t| ((now - t).num_milliseconds().max(0)) as f64)
        .collect();
    decoded.sort_by(f64::total_cmp);
    if report.malformed == 0 {
        assert_eq!(decoded, expected_lags(event, now), "{what}");
    }
    let lags: Vec<f64> = v["StreamLagMs"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: StreamLagMs list"))
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(lags, decoded, "{what}: StreamLagMs");
    assert_eq!(
        num(v, "StreamLagMaxMs"),
        decoded.last().copied().unwrap_or(0.0),
        "{what}: StreamLagMaxMs"
    );
    assert!(num(v, "ConsumedRCU") >= 0.0 && num(v, "ConsumedWCU") >= 0.0);
    assert!(num(v, "DynamoDBRequests") >= 0.0);
}

fn check_job_line(v: &Value, report: &JobReport<Job>, what: &str) {
    assert_eq!(v["Job"], report.job.as_str(), "{what}");
    assert_eq!(num(v, "JobRuns"), 1.0, "{what}");
    assert_eq!(
        num(v, "JobsIncomplete"),
        f64::from(!report.complete),
        "{what}"
    );
    let d = |f: &str| {
        report.details[f]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}: details.{f}"))
    };
    match report.job {
        Job::SweepInvitations => {
            assert_eq!(num(v, "LinksSwept"), d("deleted"), "{what}");
            assert!(
                num(v, "LinksSwept") >= 1.0,
                "{what}: the flat's expired link is swept"
            );
        }
        Job::Audit => {
            assert_eq!(num(v, "ItemsRepaired"), d("repair_writes"), "{what}");
            assert!(
                num(v, "ItemsRepaired") >= 1.0,
                "{what}: the drift is repaired"
            );
        }
        Job::FlagExpiring => {
            assert_eq!(
                num(v, "FoodsFlagged"),
                d("flags_new") + d("flags_refreshed"),
                "{what}"
            );
            assert!(num(v, "FoodsFlagged") >= 1.0, "{what}: the milk expired");
        }
        Job::Backfill => assert!(v.get("FoodsFlagged").is_none(), "{what}"),
    }
    assert!(
        num(v, "DynamoDBRequests") >= 1.0,
        "{what}: the job read the table"
    );
    assert!(num(v, "ConsumedRCU") > 0.0, "{what}");
}

/// The fields of the span named `name` in a log line's span list.
fn span<'a>(line: &'a Value, name: &str) -> Option<&'a Value> {
    line["spans"]
        .as_array()?
        .iter()
        .rev()
        .find(|s| s["name"] == name)
}

// ---------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------

async fn load(table: &TestTable, snapshot: &str) {
    let items = read_snapshot(&events_dir().join(snapshot), KEYS).unwrap();
    load_items(table.store.clone(), items, 4, None)
        .await
        .expect("load snapshot");
}

fn app(table: &TestTable, env: &[String], now: DateTime<Utc>, metrics: &CapturedLines) -> App {
    App::new(
        table.store.clone(),
        worker_config(&table.name, env).expect("fixture env"),
        Arc::new(ManualClock::new(now)),
    )
    .with_metrics(Emitter::new(NAMESPACE, FUNCTION, Arc::new(metrics.clone())))
    .with_store_metrics(&table.store)
}

#[tokio::test]
async fn fixtures_log_json_with_spans_and_emf_metrics_without_personal_data() {
    if !worker_testkit::in_own_process() {
        return;
    }
    let logs = logs();
    let metrics = CapturedLines::default();
    let personal = personal_data();
    assert!(
        personal.iter().any(|s| is_email(s)) && personal.iter().any(|s| !s.contains('@')),
        "e-mail addresses and user names are found in events/: {personal:?}"
    );

    let mut replayed = BTreeSet::new();
    let mut malformed_records = 0;
    let mut stream_lines = 0;
    let mut job_lines = BTreeSet::new();
    for f in manifest() {
        let now: DateTime<Utc> = f.now.parse().unwrap();
        let table = support::nishiki_table().await;
        load(&table, &f.snapshot).await;
        let app = app(&table, &f.env, now, &metrics);
        for file in &f.events {
            replayed.insert(file.clone());
            let event = read_json(&events_dir().join(file));
            let what = format!("{} ({file})", f.name);
            let before = metrics.lines().len();
            if file.starts_with("stream/") {
                if f.apply_writes {
                    let plan = apply::plan(&decode_event(&event).unwrap());
                    apply::apply(table.store.as_ref(), &plan).await.unwrap();
                }
                let report = app.handle_stream(&event, None).await.unwrap();
                malformed_records += report.malformed;
                let lines = metrics.lines();
                assert_eq!(
                    lines.len(),
                    before + 1,
                    "{what}: one EMF line per invocation"
                );
                check_stream_line(&check_emf(&lines[before]), &report, &event, now, &what);
                stream_lines += 1;
            } else {
                let report = app
                    .handle_schedule(&event, None)
                    .await
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let lines = metrics.lines();
                assert_eq!(
                    lines.len(),
                    before + 1,
                    "{what}: one EMF line per invocation"
                );
                check_job_line(&check_emf(&lines[before]), &report, &what);
                job_lines.insert(report.job);
            }
        }
    }

    // Every stream and schedule fixture ran, the malformed record among them.
    for sub in ["stream", "schedule"] {
        for entry in std::fs::read_dir(events_dir().join(sub)).unwrap() {
            let name = format!("{sub}/{}", entry.unwrap().file_name().to_string_lossy());
            assert!(replayed.contains(&name), "{name} was not replayed");
        }
    }
    assert!(replayed.contains("stream/malformed-record-in-batch.json"));
    assert!(malformed_records >= 1, "the malformed record was counted");
    assert_eq!(
        job_lines.len(),
        Job::ALL.len(),
        "every job emitted its line"
    );
    assert!(stream_lines >= 11);

    // Stream lag against a clock after the capture: exact values.
    let event = read_json(&events_dir().join("stream/group-deleted.json"));
    let newest = event["Records"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["dynamodb"]["ApproximateCreationDateTime"].as_i64())
        .max()
        .unwrap();
    let now = DateTime::from_timestamp(newest + 90, 0).unwrap();
    let table = support::nishiki_table().await;
    load(&table, "tables/household.json").await;
    let lagged = app(&table, &[], now, &metrics);
    let plan = apply::plan(&decode_event(&event).unwrap());
    apply::apply(table.store.as_ref(), &plan).await.unwrap();
    let before = metrics.lines().len();
    let report = lagged.handle_stream(&event, None).await.unwrap();
    let v = check_emf(&metrics.lines()[before]);
    check_stream_line(&v, &report, &event, now, "group-deleted, 90 s later");
    let lags = expected_lags(&event, now);
    assert_eq!(lags[0], 90_000.0, "the newest record is 90 s old");
    assert_eq!(num(&v, "StreamLagMaxMs"), *lags.last().unwrap());
    assert!(
        num(&v, "ItemsRepaired") >= 1.0,
        "the group's cascade deletes memberships and links: {v}"
    );

    // Log lines: JSON, with the spans.
    let log_lines = logs.lines();
    let mut record_lines = 0;
    let mut outcome_lines = BTreeSet::new();
    let mut job_span_lines = 0;
    for line in &log_lines {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("log line is not JSON ({e}): {line}"));
        assert!(v.is_object() && v["level"].is_string(), "{line}");
        if let Some(record) = span(&v, "record") {
            record_lines += 1;
            for field in ["event_id", "sequence_number", "key"] {
                assert!(
                    record[field].as_str().is_some_and(|s| !s.is_empty()),
                    "{field} missing in the record span: {line}"
                );
            }
            assert!(record["key"].as_str().unwrap().starts_with("PK="), "{line}");
            assert!(
                span(&v, "batch").is_some_and(|b| b["size"].is_u64()),
                "{line}"
            );
            let message = v["fields"]["message"].as_str().unwrap_or_default();
            if message.starts_with("stream record") {
                let outcome = v["span"]["outcome"]
                    .as_str()
                    .unwrap_or_else(|| panic!("the record's outcome is on its line: {line}"));
                outcome_lines.insert(outcome.to_owned());
            }
        }
        if let Some(job) = span(&v, "job") {
            job_span_lines += 1;
            assert!(job["job"].is_string(), "{line}");
        }
    }
    assert!(record_lines > 0, "lines were written inside record spans");
    assert!(
        outcome_lines.contains("handled") && outcome_lines.contains("malformed"),
        "{outcome_lines:?}"
    );
    assert!(
        job_span_lines >= Job::ALL.len(),
        "each job logs inside its span"
    );
    let done = log_lines
        .iter()
        .filter(|l| l.contains("stream batch done"))
        .count();
    assert!(done > stream_lines, "one summary line per batch");

    // No personal data anywhere.
    let metric_lines = metrics.lines();
    if let Some(dir) = std::env::var_os("OBSERVABILITY_DUMP") {
        // To look at the lines: OBSERVABILITY_DUMP=/tmp/obs cargo test --test it observability::
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("logs.jsonl"), log_lines.join("\n")).unwrap();
        std::fs::write(dir.join("metrics.jsonl"), metric_lines.join("\n")).unwrap();
    }
    for line in log_lines.iter().chain(&metric_lines) {
        for p in &personal {
            assert!(!line.contains(p.as_str()), "{p:?} leaked into: {line}");
        }
    }
}
