//! The local event-source loop: reads a table's stream the way Lambda's
//! event source mapping does and invokes a function with Lambda-shaped
//! events, plus cron-driven schedule ticks. Generic: the function is an
//! [`EventFunction`] (the engine's [`worker_engine::Worker`] is
//! one), the records come from a [`RecordSource`] (a [`StreamTail`] in
//! production use, through a [`MappingSource`]'s filters and maximum
//! record age).
//!
//! The mapping's rules (batch cut, partial-batch responses, retry and
//! bisect, giving up, parallelization lanes, checkpoints) are
//! [`crate::mapping`]'s, which the test kit's drain runs too: the loop
//! hands what it reads to a [`Mapping`], and polls until the stream is
//! quiet.

use std::str::FromStr;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::mapping::{BatchLog, EventFunction, Mapping, MappingConfig, PollReport};
use crate::stream_reader::StreamTail;
use worker_engine::store::StoreError;
use worker_engine::stream::{SequenceNumber, StreamChange, encode_event};

/// Where stream records come from: `(shard id, change)` pairs, each shard in
/// order, every record once.
#[async_trait]
pub trait RecordSource: Send {
    /// The records that arrived since the last call, as `(shard id,
    /// change)` pairs (empty when none); an error when the source cannot be
    /// read.
    async fn next_records(&mut self) -> Result<Vec<(String, StreamChange)>, StoreError>;
}

#[async_trait]
impl RecordSource for StreamTail {
    async fn next_records(&mut self) -> Result<Vec<(String, StreamChange)>, StoreError> {
        self.poll().await
    }
}

/// A record source as the mapping delivers it: records whose JSON (as
/// Lambda delivers it) matches none of the `FilterCriteria` patterns are
/// dropped, as Lambda drops them (counted), and records older than the
/// maximum record age are set aside for the failure destination.
pub struct MappingSource<S: RecordSource> {
    inner: S,
    filters: Vec<Value>,
    max_age: Option<chrono::Duration>,
    /// Records dropped by the filters.
    pub filtered: usize,
    expired: Vec<(String, StreamChange)>,
}

impl<S: RecordSource> MappingSource<S> {
    /// `inner` through `filters` (Lambda's `FilterCriteria` patterns; none:
    /// every record passes) and `max_age` (`None`: records never expire).
    pub fn new(inner: S, filters: Vec<Value>, max_age: Option<Duration>) -> Self {
        MappingSource {
            inner,
            filters,
            max_age: max_age.and_then(|a| chrono::Duration::from_std(a).ok()),
            filtered: 0,
            expired: Vec::new(),
        }
    }

    /// The source it reads.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Records given up on for their age since the last call.
    pub fn take_expired(&mut self) -> Vec<(String, StreamChange)> {
        std::mem::take(&mut self.expired)
    }
}

#[async_trait]
impl<S: RecordSource> RecordSource for MappingSource<S> {
    async fn next_records(&mut self) -> Result<Vec<(String, StreamChange)>, StoreError> {
        let now = Utc::now();
        let mut out = Vec::new();
        for (shard, change) in self.inner.next_records().await? {
            let old = match (self.max_age, change.approximate_creation) {
                (Some(max), Some(created)) => now.signed_duration_since(created) > max,
                _ => false,
            };
            if old {
                self.expired.push((shard, change));
                continue;
            }
            if !self.filters.is_empty() {
                let event = encode_event(std::slice::from_ref(&change), None);
                let record = &event["Records"][0];
                if !crate::template::filter::delivered(&self.filters, record) {
                    self.filtered += 1;
                    continue;
                }
            }
            out.push((shard, change));
        }
        Ok(out)
    }
}

/// What the failure destination of a mapping would receive for records
/// given up on (Lambda's on-failure record of a DynamoDB stream: the
/// batch's shard and sequence range, not the records).
pub fn failure_record(
    condition: &str,
    shard: &str,
    first: Option<&str>,
    last: Option<&str>,
    records: usize,
    attempts: u32,
    stream_arn: &str,
) -> Value {
    serde_json::json!({
        "version": "1.0",
        "timestamp": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "requestContext": {
            "condition": condition,
            "approximateInvokeCount": attempts,
        },
        "DDBStreamBatchInfo": {
            "shardId": shard,
            "startSequenceNumber": first,
            "endSequenceNumber": last,
            "batchSize": records,
            "streamArn": stream_arn,
        },
    })
}

/// The event source mapping over a [`RecordSource`].
pub struct EventSourceLoop<S: RecordSource> {
    source: S,
    mapping: Mapping,
}

impl<S: RecordSource> EventSourceLoop<S> {
    /// The mapping of `config` over `source`, nothing read yet.
    pub fn new(source: S, config: MappingConfig) -> Self {
        EventSourceLoop {
            source,
            mapping: Mapping::new(config),
        }
    }

    /// The last record done per shard (handled, or discarded after the
    /// retries): what a restart resumes after.
    pub fn checkpoints(&self) -> &std::collections::BTreeMap<String, SequenceNumber> {
        self.mapping.checkpoints()
    }

    /// The record source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The record source, mutably.
    pub fn source_mut(&mut self) -> &mut S {
        &mut self.source
    }

    /// Records read but not checkpointed yet.
    pub fn pending(&self) -> usize {
        self.mapping.pending()
    }

    /// Read and drop everything the source has now (start at "latest").
    pub async fn skip_existing(&mut self) -> Result<usize, StoreError> {
        Ok(self.source.next_records().await?.len())
    }

    /// Read new records, then invoke the function with every batch that is
    /// ready ([`Mapping::poll`]). A failed batch is retried on the next
    /// poll.
    pub async fn poll_once(
        &mut self,
        function: &dyn EventFunction,
    ) -> Result<PollReport, StoreError> {
        let new = self.source.next_records().await?;
        Ok(self.mapping.poll(new, function).await)
    }

    /// Poll until the stream is quiet: nothing new was read and nothing is
    /// pending (the function's own writes produce records too, and are
    /// followed). Gives up after `timeout`; returns every invocation.
    pub async fn run_until_idle(
        &mut self,
        function: &dyn EventFunction,
        timeout: Duration,
    ) -> Result<Vec<BatchLog>, LoopError> {
        let deadline = Instant::now() + timeout;
        let mut logs = Vec::new();
        loop {
            let report = self.poll_once(function).await?;
            if let Some(fault) = report.environment_fault {
                return Err(LoopError::Environment(fault));
            }
            let quiet = report.read == 0 && report.batches.is_empty();
            logs.extend(report.batches);
            if quiet && self.pending() == 0 {
                return Ok(logs);
            }
            if Instant::now() >= deadline {
                return Err(LoopError::NotIdle {
                    pending: self.pending(),
                    batches: logs.len(),
                });
            }
            if quiet {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Why the loop stopped.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    /// The source could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Records kept coming or stayed pending until the timeout.
    #[error(
        "the stream did not become idle in time: {pending} records pending after {batches} batches"
    )]
    NotIdle {
        /// Records read and not done at the timeout.
        pending: usize,
        /// Invocations made before it.
        batches: usize,
    },
    /// The function met an environment fault
    /// ([`crate::mapping::EnvironmentFault`]).
    #[error("environment fault: {0}")]
    Environment(String),
}

/// When a scheduled job fires.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// A cron expression (UTC).
    Cron(Box<croner::Cron>),
    /// A cron expression in a time zone (EventBridge Scheduler's
    /// `ScheduleExpressionTimezone`).
    CronIn(Box<croner::Cron>, chrono_tz::Tz),
    /// Every fixed period, from the loop's start.
    Every(Duration),
    /// Never (run it by hand).
    Never,
}

/// A schedule expression that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad schedule {expr:?}: {reason} (use 5-field cron \"0 3 * * *\", EventBridge \"cron(0 3 * * ? *)\", \"rate(15 minutes)\" or \"never\")"
)]
pub struct ScheduleError {
    /// The expression, trimmed.
    pub expr: String,
    /// What is wrong with it (the cron parser's message, or the rate's).
    pub reason: String,
}

impl FromStr for Schedule {
    type Err = ScheduleError;

    /// `never`/`off`; `rate(N minute(s)|hour(s)|day(s))`; EventBridge
    /// `cron(min hour day-of-month month day-of-week year)` (days of week
    /// 1-7 = SUN-SAT, `?` allowed); or a plain 5-field cron expression.
    fn from_str(s: &str) -> Result<Self, ScheduleError> {
        use croner::parser::{CronParser, Seconds, Year};
        let expr = s.trim();
        let err = |reason: String| ScheduleError {
            expr: expr.to_owned(),
            reason,
        };
        if matches!(expr, "never" | "off" | "none") {
            return Ok(Schedule::Never);
        }
        if let Some(inner) = expr.strip_prefix("rate(").and_then(|r| r.strip_suffix(')')) {
            let (n, unit) = inner
                .trim()
                .split_once(' ')
                .ok_or_else(|| err("expected rate(N unit)".into()))?;
            let n: u64 = n
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| err("the rate must be a positive whole number".into()))?;
            let secs = match unit.trim() {
                "minute" | "minutes" => 60,
                "hour" | "hours" => 3600,
                "day" | "days" => 86_400,
                other => return Err(err(format!("unknown unit {other:?}"))),
            };
            return Ok(Schedule::Every(Duration::from_secs(n * secs)));
        }
        if let Some(inner) = expr.strip_prefix("cron(").and_then(|r| r.strip_suffix(')')) {
            let fields: Vec<&str> = inner.split_whitespace().collect();
            if fields.len() != 6 {
                return Err(err(format!(
                    "an EventBridge cron() has 6 fields, found {}",
                    fields.len()
                )));
            }
            let pattern = format!("0 {}", fields.join(" ").replace('?', "*"));
            let cron = CronParser::builder()
                .seconds(Seconds::Required)
                .year(Year::Required)
                .alternative_weekdays(true)
                .build()
                .parse(&pattern)
                .map_err(|e| err(e.to_string()))?;
            return Ok(Schedule::Cron(Box::new(cron)));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(expr)
            .map_err(|e| err(e.to_string()))?;
        Ok(Schedule::Cron(Box::new(cron)))
    }
}

impl Schedule {
    /// The same schedule with its cron read in `tz` (rates and `never`
    /// are the same in every zone).
    pub fn in_zone(self, tz: chrono_tz::Tz) -> Schedule {
        match self {
            Schedule::Cron(c) | Schedule::CronIn(c, _) => Schedule::CronIn(c, tz),
            other => other,
        }
    }

    /// The first fire time strictly after `after` (`start` anchors rates).
    pub fn next_after(&self, after: DateTime<Utc>, start: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Never => None,
            Schedule::Cron(c) => c.find_next_occurrence(&after, false).ok(),
            Schedule::CronIn(c, tz) => c
                .find_next_occurrence(&after.with_timezone(tz), false)
                .ok()
                .map(|t| t.with_timezone(&Utc)),
            Schedule::Every(period) => {
                let period = chrono::Duration::from_std(*period).ok()?;
                let elapsed = after.signed_duration_since(start);
                let periods = elapsed.num_milliseconds() / period.num_milliseconds().max(1) + 1;
                Some(start + period * periods.max(1) as i32)
            }
        }
    }
}

/// One scheduled job of the loop.
#[derive(Debug, Clone)]
pub struct TickEntry {
    /// The job's name.
    pub name: String,
    /// The expression as given.
    pub expr: String,
    /// When it fires.
    pub schedule: Schedule,
    /// Its next fire time; `None`: never ([`Schedule::Never`]).
    pub next: Option<DateTime<Utc>>,
}

/// Fires named schedules.
#[derive(Debug, Clone)]
pub struct Ticker {
    start: DateTime<Utc>,
    entries: Vec<TickEntry>,
}

impl Ticker {
    /// `entries`: (name, expression, schedule); the first fire times are
    /// computed from `now`.
    pub fn new(entries: Vec<(String, String, Schedule)>, now: DateTime<Utc>) -> Self {
        Ticker {
            start: now,
            entries: entries
                .into_iter()
                .map(|(name, expr, schedule)| TickEntry {
                    next: schedule.next_after(now, now),
                    name,
                    expr,
                    schedule,
                })
                .collect(),
        }
    }

    /// The scheduled jobs, in the order given, with their next fire times.
    pub fn entries(&self) -> &[TickEntry] {
        &self.entries
    }

    /// The schedules due at `now` (name, scheduled time), each at most once
    /// per call; their next fire times move past `now`.
    pub fn due(&mut self, now: DateTime<Utc>) -> Vec<(String, DateTime<Utc>)> {
        let mut out = Vec::new();
        for e in &mut self.entries {
            if let Some(at) = e.next.filter(|at| *at <= now) {
                out.push((e.name.clone(), at));
                e.next = e.schedule.next_after(now, self.start);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::{Action, EnvironmentFault, InvokeError, split_by_partition_key};
    use std::sync::Mutex;
    use worker_engine::stream::BatchReport;

    use crate::mapping::tests::{change, keyed};

    fn config(bisect: bool) -> MappingConfig {
        MappingConfig {
            batch_size: 10,
            batching_window: Duration::ZERO,
            max_retries: 2,
            bisect_on_error: bisect,
            ..MappingConfig::default()
        }
    }

    /// An in-memory source: hands out what was pushed, once.
    #[derive(Default)]
    struct Queue(Vec<(String, StreamChange)>);

    #[async_trait]
    impl RecordSource for Queue {
        async fn next_records(&mut self) -> Result<Vec<(String, StreamChange)>, StoreError> {
            Ok(std::mem::take(&mut self.0))
        }
    }

    /// Fails the record with `fail_seq` `times` times (partial failure),
    /// records the first sequence number of every invocation.
    struct Flaky {
        fail_seq: String,
        times: Mutex<u32>,
        firsts: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl EventFunction for Flaky {
        async fn invoke_stream(&self, event: &Value) -> Result<BatchReport, InvokeError> {
            let records = event["Records"].as_array().unwrap();
            let seqs: Vec<String> = records
                .iter()
                .map(|r| r["dynamodb"]["SequenceNumber"].as_str().unwrap().to_owned())
                .collect();
            self.firsts.lock().unwrap().push(seqs[0].clone());
            let mut times = self.times.lock().unwrap();
            let mut report = BatchReport {
                handled: seqs.len(),
                ..Default::default()
            };
            if *times > 0 && seqs.contains(&self.fail_seq) {
                *times -= 1;
                report.batch_item_failures = vec![self.fail_seq.clone()];
            }
            Ok(report)
        }
        async fn invoke_schedule(&self, _: &Value) -> Result<Value, InvokeError> {
            Ok(Value::Null)
        }
    }

    #[tokio::test]
    async fn loop_batches_per_shard_and_retries_from_the_failure() {
        let mut source = Queue::default();
        for s in 1..=12 {
            source.0.push(("shard-a".into(), change(s)));
        }
        let f = Flaky {
            fail_seq: "5".into(),
            times: Mutex::new(1),
            firsts: Mutex::new(Vec::new()),
        };
        let mut l = EventSourceLoop::new(source, config(false));
        let logs = l.run_until_idle(&f, Duration::from_secs(5)).await.unwrap();
        assert_eq!(*f.firsts.lock().unwrap(), ["1".to_owned(), "5".to_owned()]);
        assert_eq!(logs.len(), 2);
        assert_eq!(
            logs[0].action,
            Action::Retry {
                from_sequence: Some("5".into()),
                records: 10
            }
        );
        assert_eq!(logs[1].first_sequence.as_deref(), Some("5"));
        assert_eq!(logs[1].attempt, 2);
        assert_eq!(logs[1].last_sequence.as_deref(), Some("12"));
        assert_eq!(l.pending(), 0);
    }

    /// Fails every invocation with an environment fault.
    struct Broken(Mutex<u32>);

    #[async_trait]
    impl EventFunction for Broken {
        async fn invoke_stream(&self, _: &Value) -> Result<BatchReport, InvokeError> {
            *self.0.lock().unwrap() += 1;
            Err(Box::new(EnvironmentFault("table missing".into())))
        }
        async fn invoke_schedule(&self, _: &Value) -> Result<Value, InvokeError> {
            Ok(Value::Null)
        }
    }

    #[tokio::test]
    async fn an_environment_fault_stops_the_loop_without_retrying_or_discarding() {
        let mut source = Queue::default();
        for s in 1..=3 {
            source.0.push(("s".into(), change(s)));
        }
        let f = Broken(Mutex::new(0));
        let mut l = EventSourceLoop::new(source, config(false));
        let err = l
            .run_until_idle(&f, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, LoopError::Environment(f) if f == "table missing"),
            "{err}"
        );
        // One invocation, nothing discarded or checkpointed: the records
        // wait for the deployment to be fixed.
        assert_eq!(*f.0.lock().unwrap(), 1);
        assert_eq!(l.pending(), 3);
        assert!(l.checkpoints().is_empty());
    }

    #[tokio::test]
    async fn loop_discards_after_max_retries() {
        let mut source = Queue::default();
        for s in 1..=3 {
            source.0.push(("s".into(), change(s)));
        }
        let f = Flaky {
            fail_seq: "2".into(),
            times: Mutex::new(100),
            firsts: Mutex::new(Vec::new()),
        };
        let mut l = EventSourceLoop::new(source, config(false));
        let logs = l.run_until_idle(&f, Duration::from_secs(5)).await.unwrap();
        // 1 try + 2 retries, then the records from 2 on are discarded.
        assert_eq!(logs.len(), 3);
        assert_eq!(
            logs[2].action,
            Action::Discard {
                from_sequence: Some("2".into()),
                records: 2
            }
        );
        assert!(logs[2].line().contains("DISCARDED 2 records from seq 2"));
    }

    #[tokio::test]
    async fn batching_window_waits_for_more_records() {
        let mut source = Queue::default();
        source.0.push(("s".into(), change(1)));
        let f = Flaky {
            fail_seq: "x".into(),
            times: Mutex::new(0),
            firsts: Mutex::new(Vec::new()),
        };
        let mut cfg = config(false);
        cfg.batching_window = Duration::from_millis(200);
        let mut l = EventSourceLoop::new(source, cfg);
        let r = l.poll_once(&f).await.unwrap();
        assert_eq!((r.read, r.batches.len(), l.pending()), (1, 0, 1));
        tokio::time::sleep(Duration::from_millis(250)).await;
        let r = l.poll_once(&f).await.unwrap();
        assert_eq!(r.batches.len(), 1);
    }

    /// Handles the records of each batch in order, failing the record
    /// `fail_seq` `times` times (the records before it are handled, it and
    /// the rest are not); notes each record handled, and the invocations
    /// in flight at once.
    struct PerKey {
        fail_seq: String,
        times: Mutex<u32>,
        handled: Mutex<Vec<(String, u32)>>,
        in_flight: std::sync::atomic::AtomicUsize,
        most_in_flight: std::sync::atomic::AtomicUsize,
    }

    impl PerKey {
        fn new(fail_seq: &str, times: u32) -> Self {
            PerKey {
                fail_seq: fail_seq.into(),
                times: Mutex::new(times),
                handled: Mutex::new(Vec::new()),
                in_flight: Default::default(),
                most_in_flight: Default::default(),
            }
        }
    }

    #[async_trait]
    impl EventFunction for PerKey {
        async fn invoke_stream(&self, event: &Value) -> Result<BatchReport, InvokeError> {
            use std::sync::atomic::Ordering::SeqCst;
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.most_in_flight.fetch_max(now, SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.in_flight.fetch_sub(1, SeqCst);
            let mut report = BatchReport::default();
            for r in event["Records"].as_array().unwrap() {
                let seq = r["dynamodb"]["SequenceNumber"].as_str().unwrap().to_owned();
                if seq == self.fail_seq {
                    let mut times = self.times.lock().unwrap();
                    if *times > 0 {
                        *times -= 1;
                        report.batch_item_failures = vec![seq];
                        break;
                    }
                }
                let pk = r["dynamodb"]["Keys"]["PK"]["S"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                self.handled
                    .lock()
                    .unwrap()
                    .push((pk, seq.parse().unwrap()));
                report.handled += 1;
            }
            Ok(report)
        }
        async fn invoke_schedule(&self, _: &Value) -> Result<Value, InvokeError> {
            Ok(Value::Null)
        }
    }

    #[tokio::test]
    async fn parallel_lanes_run_together_retry_alone_and_keep_each_keys_order() {
        let changes: Vec<StreamChange> =
            (1..=40).map(|s| keyed(s, &format!("p{}", s % 8))).collect();
        let source = Queue(
            changes
                .iter()
                .map(|c| ("s".to_owned(), c.clone()))
                .collect(),
        );
        let cfg = MappingConfig {
            batch_size: 100,
            max_retries: 3,
            parallelization_factor: 4,
            partition_key: Some("PK".into()),
            ..MappingConfig::default()
        };
        let lanes = split_by_partition_key(changes, Some("PK"), 4);
        let busy = lanes.iter().filter(|l| !l.is_empty()).count();
        assert!(busy > 1, "the keys use several lanes");
        let failing = lanes
            .iter()
            .position(|l| l.iter().any(|c| c.event_id == "e13"))
            .unwrap();
        let f = PerKey::new("13", 1);
        let mut l = EventSourceLoop::new(source, cfg);
        // First poll: every lane once, at the same time; the failing lane
        // stops at 13, the others are done.
        let r = l.poll_once(&f).await.unwrap();
        assert_eq!(r.batches.len(), busy);
        assert_eq!(
            f.most_in_flight.load(std::sync::atomic::Ordering::SeqCst),
            busy
        );
        let retried: Vec<&BatchLog> = r
            .batches
            .iter()
            .filter(|b| matches!(b.action, Action::Retry { .. }))
            .collect();
        assert_eq!(retried.len(), 1);
        assert_eq!(retried[0].lane, Some(failing));
        assert!(retried[0].line().contains(&format!("lane={failing}")));
        let left = lanes[failing]
            .iter()
            .filter(|c| {
                c.sequence_number
                    .as_ref()
                    .unwrap()
                    .to_string()
                    .parse::<u32>()
                    .unwrap()
                    >= 13
            })
            .count();
        assert_eq!(l.pending(), left);
        // The shard's checkpoint stops before the first record not done.
        assert_eq!(l.checkpoints()["s"].to_string(), "12");
        // The retry starts at 13, in its lane only.
        let r = l.poll_once(&f).await.unwrap();
        assert_eq!(r.batches.len(), 1);
        assert_eq!(r.batches[0].first_sequence.as_deref(), Some("13"));
        assert_eq!(r.batches[0].attempt, 2);
        assert_eq!(l.pending(), 0);
        assert_eq!(l.checkpoints()["s"].to_string(), "40");
        // Every record handled once, each key's in order.
        let handled = f.handled.lock().unwrap().clone();
        assert_eq!(handled.len(), 40);
        let mut per_key: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
        for (pk, seq) in handled {
            per_key.entry(pk).or_default().push(seq);
        }
        for (pk, seqs) in per_key {
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{pk}: {seqs:?}");
        }
    }

    #[tokio::test]
    async fn factor_one_is_one_lane_in_shard_order() {
        let mut source = Queue::default();
        for s in 1..=12 {
            source
                .0
                .push(("s".into(), keyed(s, &format!("p{}", s % 5))));
        }
        let f = PerKey::new("x", 0);
        let mut l = EventSourceLoop::new(
            source,
            MappingConfig {
                batch_size: 5,
                partition_key: Some("PK".into()),
                ..MappingConfig::default()
            },
        );
        let logs = l.run_until_idle(&f, Duration::from_secs(5)).await.unwrap();
        assert_eq!(logs.len(), 3);
        assert!(logs.iter().all(|b| b.lane.is_none()));
        assert_eq!(
            f.most_in_flight.load(std::sync::atomic::Ordering::SeqCst),
            1
        );
        let seqs: Vec<u32> = f.handled.lock().unwrap().iter().map(|(_, s)| *s).collect();
        assert_eq!(seqs, (1..=12).collect::<Vec<_>>());
    }

    #[test]
    fn schedules_parse_and_fire() {
        let t0: DateTime<Utc> = "2024-03-25T02:59:30Z".parse().unwrap();
        let daily: Schedule = "0 3 * * *".parse().unwrap();
        assert_eq!(
            daily.next_after(t0, t0),
            Some("2024-03-25T03:00:00Z".parse().unwrap())
        );
        let eb: Schedule = "cron(5 0 ? * MON-FRI *)".parse().unwrap();
        // 2024-03-25 is a Monday.
        assert_eq!(
            eb.next_after(t0, t0),
            Some("2024-03-26T00:05:00Z".parse().unwrap())
        );
        let eb_num: Schedule = "cron(0 12 ? * 2 *)".parse().unwrap();
        assert_eq!(
            eb_num.next_after(t0, t0),
            Some("2024-03-25T12:00:00Z".parse().unwrap()),
            "EventBridge day 2 is Monday"
        );
        let rate: Schedule = "rate(15 minutes)".parse().unwrap();
        assert_eq!(
            rate.next_after(t0, t0),
            Some("2024-03-25T03:14:30Z".parse().unwrap())
        );
        assert!(matches!("never".parse::<Schedule>(), Ok(Schedule::Never)));
        for bad in [
            "0 3 * *",
            "rate(0 minutes)",
            "rate(5 weeks)",
            "cron(0 3 * *)",
            "x y z a b",
        ] {
            let e = bad.parse::<Schedule>().unwrap_err();
            assert!(e.to_string().contains("bad schedule"), "{e}");
        }

        let mut ticker = Ticker::new(
            vec![
                ("audit".into(), "0 3 * * *".into(), daily),
                ("backfill".into(), "never".into(), Schedule::Never),
            ],
            t0,
        );
        assert!(ticker.due(t0).is_empty());
        let fired = ticker.due("2024-03-25T03:00:01Z".parse().unwrap());
        assert_eq!(
            fired,
            [("audit".to_owned(), "2024-03-25T03:00:00Z".parse().unwrap())]
        );
        assert_eq!(
            ticker.entries()[0].next,
            Some("2024-03-26T03:00:00Z".parse().unwrap())
        );
        assert_eq!(ticker.entries()[1].next, None);
    }
}
