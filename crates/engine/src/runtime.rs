//! An app, assembled: the stream side (bound to each batch), the scheduled
//! jobs, the clock, and what metrics are made of. The Lambda entry points
//! and the command line both run events through a [`Worker`], so a replay
//! runs exactly the code Lambda runs.
//!
//! - stream: decode (lenient, per record) → the app's processor for this
//!   batch ([`StreamSide::for_batch`]) → [`engine::run_batch`] (per-item order,
//!   earliest-failure partial response, deadline), inside the coalescing
//!   store's gathered poll pass when the app shares requests;
//! - schedule: parse the tick (either EventBridge shape) → refuse a tick for
//!   another job on a pinned function (`WORKER_JOB`) → [`Scheduler::run`];
//! - a stream record that failed for good is parked ([`crate::park`]) when
//!   a parking table is set, before the batch is reported;
//! - after each invocation, one EMF line when an [`Emitter`] is set (with
//!   `ColdStart` 1 on the process's first invocation).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tracing::Instrument;

use crate::clock::Clock;
use crate::error::HandlerError;
use crate::metrics::{self, Emitter, Metric, WriteCounter};
use crate::park::{self, Origin, Parking};
use crate::schedule::{self, JobName, JobReport, JobRun, Scheduler, Tick, TickError, TickSource};
use crate::store::coalesce::Coalescing;
use crate::store::{DynamoStore, MetricsSnapshot};
use crate::stream::decode::{self, DecodeEvent, EnvelopeError, RecordError, StreamChange};
use crate::stream::engine::{self, BatchReport, EngineConfig, RecordProcessor};

/// Why an event could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum EventError<J: JobName> {
    /// The event is not a DynamoDB Streams batch at all (no record ran):
    /// the invocation fails; check the function's event source.
    #[error(transparent)]
    Stream(#[from] EnvelopeError),
    /// The schedule event cannot be run (no job, an unknown job, a bad
    /// time, a malformed envelope): nothing ran, the invocation fails;
    /// check the schedule's target input.
    #[error(transparent)]
    Tick(#[from] TickError),
    /// The job ran and failed ([`HandlerError::kind`] says whether a retry
    /// can help); the invocation fails, an environment fault as
    /// `EnvironmentFault`.
    #[error(transparent)]
    Job(#[from] HandlerError),
    /// Neither a stream nor a schedule event ([`Worker::handle`]): nothing
    /// ran.
    #[error(
        "not an event this worker handles: expected a DynamoDB Streams event (\"Records\") or a schedule event (\"job\" or \"detail-type\": \"Scheduled Event\")"
    )]
    UnknownEvent,
    #[error(
        "this function runs only the {pinned} job (WORKER_JOB={pinned}) but the tick names {got}: check the schedule's target"
    )]
    /// The function is pinned to one job (`WORKER_JOB`) and the tick names
    /// another: nothing ran (the function lacks that job's permissions);
    /// point the schedule at the right function.
    WrongJob {
        /// The job the function runs (`WORKER_JOB`).
        pinned: J,
        /// The job the tick named.
        got: J,
    },
}

/// What running one event did.
#[derive(Debug)]
pub enum EventOutcome<J: JobName> {
    /// A stream batch ran: what happened to each record.
    Stream(BatchReport),
    /// A schedule tick ran its job: the job's report.
    Schedule(JobReport<J>),
}

/// The app's stream side: a record processor for the records of one batch
/// (it may learn from the batch's other records before any is handled).
pub trait StreamSide: Send + Sync {
    /// The processor of this batch's records (`records`: the batch as
    /// decoded, in order, malformed records included).
    fn for_batch<'a>(
        &'a self,
        records: &[Result<StreamChange, RecordError>],
    ) -> Box<dyn RecordProcessor + 'a>;
}

/// A processor that needs nothing from the batch: it serves every batch
/// as is.
pub struct EveryBatch<P>(pub P);

impl<P: RecordProcessor> StreamSide for EveryBatch<P> {
    fn for_batch<'a>(
        &'a self,
        _records: &[Result<StreamChange, RecordError>],
    ) -> Box<dyn RecordProcessor + 'a> {
        Box::new(Borrowed(&self.0))
    }
}

struct Borrowed<'a, P>(&'a P);

/// Several handlers as one processor: each sees every change, in order; the
/// record is handled when any of them handled it, and a failure of any
/// stops the record (transient: Lambda delivers it again, to all of them,
/// so each must be idempotent).
pub(crate) struct AllHandlers(pub(crate) Vec<Arc<dyn RecordProcessor>>);

#[async_trait::async_trait]
impl RecordProcessor for AllHandlers {
    async fn process(&self, change: &StreamChange) -> Result<engine::RecordOutcome, HandlerError> {
        let mut handled = Vec::new();
        let mut skipped = Vec::new();
        let mut foreign = None;
        for handler in &self.0 {
            match handler.process(change).await? {
                engine::RecordOutcome::Handled { detail } => handled.push(detail),
                engine::RecordOutcome::Skipped { reason } => skipped.push(reason),
                // The item is not the app's, whichever handler saw it.
                engine::RecordOutcome::Foreign { reason } => foreign = foreign.or(Some(reason)),
            }
        }
        if let (true, Some(reason)) = (handled.is_empty(), foreign) {
            return Ok(engine::RecordOutcome::Foreign { reason });
        }
        Ok(if handled.is_empty() {
            engine::RecordOutcome::skipped(if skipped.is_empty() {
                "no handler".to_owned()
            } else {
                skipped.join("; ")
            })
        } else {
            engine::RecordOutcome::handled(handled.join("; "))
        })
    }
}

#[async_trait::async_trait]
impl<P: RecordProcessor> RecordProcessor for Borrowed<'_, P> {
    async fn process(&self, change: &StreamChange) -> Result<engine::RecordOutcome, HandlerError> {
        self.0.process(change).await
    }
}

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerSettings<J> {
    /// Stop this long before the Lambda deadline.
    pub deadline_margin: Duration,
    /// Items of a stream batch handled at once.
    pub stream_concurrency: usize,
    /// The one job this process runs ticks for (`WORKER_JOB`; `None`: any).
    pub pinned_job: Option<J>,
    /// The metrics the stream handlers' writes count under (each reported,
    /// 0 when nothing was written).
    pub writes_metrics: Vec<&'static str>,
}

/// What the metrics of an invocation are made of.
#[derive(Default)]
struct Observe {
    /// Write requests of the stream handlers, by metric.
    writes: Arc<WriteCounter>,
    /// Where EMF lines go; none: no metrics (the CLI).
    emitter: Option<Emitter>,
    /// The DynamoDB store whose request and capacity counters the metrics
    /// report (a clone shares the counters).
    metered: Option<DynamoStore>,
    /// No invocation has emitted its metrics yet (the cold start's).
    cold: ColdStart,
}

/// Whether this process has run an invocation yet.
#[derive(Debug)]
struct ColdStart(AtomicBool);

impl Default for ColdStart {
    fn default() -> Self {
        ColdStart(AtomicBool::new(true))
    }
}

/// An app, assembled.
pub struct Worker<J: JobName> {
    stream: Box<dyn StreamSide>,
    /// How a Lambda event's bytes are read into records.
    decode: DecodeEvent,
    scheduler: Scheduler<J>,
    clock: Arc<dyn Clock>,
    settings: WorkerSettings<J>,
    /// The stream handlers' shared store, if they share requests.
    coalescing: Option<Arc<Coalescing>>,
    observe: Observe,
    /// Where records that failed for good go.
    parking: Option<Parking>,
}

impl<J: JobName> Worker<J> {
    /// A worker running stream batches through `stream` and ticks through
    /// `scheduler`, on `clock`; without metrics, store counters or parking
    /// until they are added (`with_*`).
    pub fn new(
        stream: Box<dyn StreamSide>,
        scheduler: Scheduler<J>,
        clock: Arc<dyn Clock>,
        settings: WorkerSettings<J>,
    ) -> Self {
        Worker {
            stream,
            decode: decode::decode_event_bytes,
            scheduler,
            clock,
            settings,
            coalescing: None,
            observe: Observe::default(),
            parking: None,
        }
    }

    /// Read Lambda events' bytes with `decode` (the default:
    /// [`decode::decode_event_bytes`], each image an item).
    pub fn with_decoder(mut self, decode: DecodeEvent) -> Self {
        self.decode = decode;
        self
    }

    /// How this worker reads a Lambda event's bytes ([`Self::with_decoder`]).
    pub fn decoder(&self) -> DecodeEvent {
        self.decode
    }

    /// Park every stream record that fails for good here before the batch
    /// is reported (a record that cannot be parked is retried). `None`
    /// (`PARKING_TABLE` unset): such records are logged and counted only.
    pub fn with_parking(mut self, parking: impl Into<Option<Parking>>) -> Self {
        self.parking = parking.into();
        self
    }

    /// The parking table, if set.
    pub fn parking(&self) -> Option<&Parking> {
        self.parking.as_ref()
    }

    /// Whether no invocation has finished yet in this process (the next one
    /// is the cold start).
    pub fn is_cold(&self) -> bool {
        self.observe.cold.0.load(Ordering::SeqCst)
    }

    /// `ColdStart` (1 on the first invocation's line, then 0).
    fn cold_start_metric(&self) -> Metric {
        Metric::count(
            "ColdStart",
            u64::from(self.observe.cold.0.swap(false, Ordering::SeqCst)),
        )
    }

    /// Run each stream batch inside this store's gathered poll pass, so
    /// the point reads, partition reads and bulk writes of the handlers
    /// running at once share requests.
    pub fn with_coalescing(mut self, coalescing: Arc<Coalescing>) -> Self {
        self.coalescing = Some(coalescing);
        self
    }

    /// Write one CloudWatch EMF line per stream batch and per job run.
    pub fn with_metrics(mut self, emitter: Emitter) -> Self {
        self.observe.emitter = Some(emitter);
        self
    }

    /// Report this store's DynamoDB requests and consumed capacity in the
    /// metrics.
    pub fn with_store_metrics(mut self, store: &DynamoStore) -> Self {
        self.observe.metered = Some(store.clone());
        self
    }

    /// Where the stream handlers count their writes (by metric name; see
    /// [`WorkerSettings::writes_metrics`]).
    pub fn with_write_counter(mut self, writes: Arc<WriteCounter>) -> Self {
        self.observe.writes = writes;
        self
    }

    /// Count the stream handlers' writes under `metric` too, besides the
    /// jobs' own `writes_metric`s (a handler's second count: conflicts).
    pub fn with_writes_metric(mut self, metric: &'static str) -> Self {
        self.settings.writes_metrics.push(metric);
        self
    }

    /// The clock jobs and handlers read the time from.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// How the worker runs batches and ticks.
    pub fn settings(&self) -> &WorkerSettings<J> {
        &self.settings
    }

    /// The jobs this worker runs.
    pub fn jobs(&self) -> Vec<J> {
        self.scheduler.jobs()
    }

    /// Run a DynamoDB Streams event through the batch engine.
    pub async fn handle_stream(
        &self,
        event: &Value,
        deadline: Option<Instant>,
    ) -> Result<BatchReport, EventError<J>> {
        let records = decode::decode_event(event)?;
        self.run_stream(records, Some(RawEvent::Parsed(event)), deadline)
            .await
    }

    /// [`Self::handle_stream`] from the event's bytes (Lambda's
    /// [`crate::lambda`] entry point), read by the worker's decoder
    /// ([`Self::with_decoder`]: by default [`decode::decode_event_bytes`])
    /// without a `Value` of the event. With
    /// a parking table, a record that failed for good is parsed again from
    /// them, alone, to be parked as it came.
    pub async fn handle_stream_bytes(
        &self,
        event: &[u8],
        deadline: Option<Instant>,
    ) -> Result<BatchReport, EventError<J>> {
        let records = (self.decode)(event)?;
        self.run_stream(records, Some(RawEvent::Bytes(event)), deadline)
            .await
    }

    async fn run_stream(
        &self,
        records: Vec<Result<StreamChange, RecordError>>,
        event: Option<RawEvent<'_>>,
        deadline: Option<Instant>,
    ) -> Result<BatchReport, EventError<J>> {
        let config = EngineConfig {
            deadline,
            deadline_margin: self.settings.deadline_margin,
            concurrency: self.settings.stream_concurrency,
            ..EngineConfig::default()
        };
        let lags = metrics::stream_lags_ms(&records, self.clock.now());
        let (writes, requests) = self.counters();
        let processor = self.stream.for_batch(&records);
        let run = engine::run_batch(records, processor.as_ref(), &config);
        let mut report = match &self.coalescing {
            Some(c) => c.gathered(run).await,
            None => run.await,
        };
        // An environment fault fails the invocation: the whole batch comes
        // again, and nothing of it is parked (the parking table may be
        // what is missing).
        if let (Some(parking), Some(event), None) =
            (&self.parking, event, &report.environment_fault)
            && report
                .records
                .iter()
                .any(|r| r.status.parkable_reason().is_some())
        {
            let parsed;
            let event = match event {
                RawEvent::Parsed(event) => event,
                RawEvent::Bytes(bytes) => {
                    parsed = failed_records_of(bytes, &report);
                    &parsed
                }
            };
            park::park_failures(
                parking,
                event,
                &mut report,
                None,
                Origin::Batch,
                self.clock.now(),
            )
            .await;
        }
        if let Some(emitter) = &self.observe.emitter {
            let mut m = metrics::batch_metrics(&report, &lags);
            m.push(self.cold_start_metric());
            let written = self.observe.writes.since(&writes);
            for name in &self.settings.writes_metrics {
                let n = written.get(*name).copied().unwrap_or(0);
                m.push(Metric::count(name, n));
            }
            m.extend(
                self.store_delta(requests)
                    .as_ref()
                    .map(metrics::store_metrics)
                    .unwrap_or_default(),
            );
            emitter.emit(self.clock.now(), None, &m);
        }
        Ok(report)
    }

    /// The handler write counts and store counters now (for deltas).
    fn counters(&self) -> (metrics::HandlerWrites, Option<MetricsSnapshot>) {
        (
            self.observe.writes.snapshot(),
            self.observe
                .metered
                .as_ref()
                .map(|s| s.metrics().snapshot()),
        )
    }

    /// The store counters accumulated since `before`.
    fn store_delta(&self, before: Option<MetricsSnapshot>) -> Option<MetricsSnapshot> {
        let now = self.observe.metered.as_ref()?.metrics().snapshot();
        Some(now.since(&before.unwrap_or_default()))
    }

    /// Run a schedule tick (either EventBridge shape).
    pub async fn handle_schedule(
        &self,
        event: &Value,
        deadline: Option<Instant>,
    ) -> Result<JobReport<J>, EventError<J>> {
        let tick = schedule::parse_tick(event)?;
        // A function pinned to one job (WORKER_JOB) has only that job's
        // permissions: refuse any other tick instead of failing halfway.
        if let Some(pinned) = self.settings.pinned_job
            && pinned != tick.job
        {
            return Err(EventError::WrongJob {
                pinned,
                got: tick.job,
            });
        }
        Ok(self.run_tick(tick, deadline).await?)
    }

    /// Run one job now (the command line's `run JOB`).
    pub async fn run_job(
        &self,
        job: J,
        deadline: Option<Instant>,
    ) -> Result<JobReport<J>, HandlerError> {
        let tick = Tick {
            job,
            scheduled_time: None,
            source: TickSource::Manual,
        };
        self.run_tick(tick, deadline).await
    }

    async fn run_tick(
        &self,
        tick: Tick<J>,
        deadline: Option<Instant>,
    ) -> Result<JobReport<J>, HandlerError> {
        let span = tracing::info_span!("job", job = %tick.job, source = ?tick.source);
        let job = tick.job;
        let run = JobRun {
            now: self.clock.now(),
            tick,
            deadline,
            margin: self.settings.deadline_margin,
        };
        let (_, requests) = self.counters();
        let result = self.scheduler.run(&run).instrument(span).await;
        if let Some(emitter) = &self.observe.emitter {
            let mut m = metrics::job_run_metrics(result.as_ref());
            m.push(self.cold_start_metric());
            m.extend(
                self.store_delta(requests)
                    .as_ref()
                    .map(metrics::store_metrics)
                    .unwrap_or_default(),
            );
            emitter.emit(self.clock.now(), Some(job.as_str()), &m);
        }
        result
    }

    /// Run any event, detected from its content.
    pub async fn handle(
        &self,
        event: &Value,
        deadline: Option<Instant>,
    ) -> Result<EventOutcome<J>, EventError<J>> {
        if decode::is_stream_event(event) {
            Ok(EventOutcome::Stream(
                self.handle_stream(event, deadline).await?,
            ))
        } else if schedule::is_schedule_event(event) {
            Ok(EventOutcome::Schedule(
                self.handle_schedule(event, deadline).await?,
            ))
        } else {
            Err(EventError::UnknownEvent)
        }
    }
}

/// The event of `bytes` with only the records of `report` that failed for
/// good parsed, the others `null`: what parking reads, without a `Value` of
/// a whole 6 MB batch (several times its size).
fn failed_records_of(bytes: &[u8], report: &BatchReport) -> Value {
    #[derive(serde::Deserialize)]
    struct Records<'a> {
        #[serde(borrow, rename = "Records")]
        records: Vec<&'a serde_json::value::RawValue>,
    }
    // The bytes decoded into the report, so they are such an event.
    let Ok(event) = serde_json::from_slice::<Records>(bytes) else {
        return Value::Null;
    };
    let mut records = vec![Value::Null; event.records.len()];
    for r in report
        .records
        .iter()
        .filter(|r| r.status.parkable_reason().is_some())
    {
        if let (Some(slot), Some(raw)) = (records.get_mut(r.index), event.records.get(r.index)) {
            *slot = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
        }
    }
    serde_json::json!({ "Records": records })
}

/// The event a batch came from, for parking its records as delivered.
#[derive(Clone, Copy)]
enum RawEvent<'a> {
    Parsed(&'a Value),
    Bytes(&'a [u8]),
}

/// The longest a Lambda invocation can run: no real deadline is further
/// away than this when the invocation starts.
pub(crate) const LONGEST_TIMEOUT: Duration = Duration::from_secs(900);

/// The variable that gives a function's configured timeout in seconds
/// where the runtime's deadline cannot be trusted (the AWS runtime
/// interface emulator and SAM local set it; on Lambda it is unset and the
/// deadline is real).
pub(crate) const FUNCTION_TIMEOUT: &str = "AWS_LAMBDA_FUNCTION_TIMEOUT";

/// The time left before the runtime's deadline (`Lambda-Runtime-Deadline-Ms`,
/// milliseconds since the epoch), read at `now_ms`; `None` when it cannot
/// be a deadline: already past when the invocation starts, or further away
/// than [`LONGEST_TIMEOUT`]. cargo-lambda's emulator (1.9) sends its
/// invoke timeout, `600000`, rather than an epoch time: read as one, the
/// deadline was 56 years ago and every record looked out of time.
pub(crate) fn time_left(deadline_ms: u64, now_ms: u64) -> Option<Duration> {
    let left = Duration::from_millis(deadline_ms.checked_sub(now_ms)?);
    (!left.is_zero() && left <= LONGEST_TIMEOUT + Duration::from_secs(1)).then_some(left)
}

/// The deadline of an invocation that starts now: the runtime's
/// (`deadline_ms`, see [`time_left`]) when it is plausible; otherwise the
/// function's configured timeout from now ([`FUNCTION_TIMEOUT`], else
/// `timeout`), and a warning, once per process, that says so.
pub(crate) fn invocation_deadline(deadline_ms: u64, timeout: Duration) -> Instant {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    if let Some(left) = time_left(deadline_ms, now_ms) {
        return Instant::now() + left;
    }
    let configured =
        configured_timeout(std::env::var(FUNCTION_TIMEOUT).ok().as_deref()).unwrap_or(timeout);
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            deadline_ms,
            now_ms,
            timeout_s = configured.as_secs(),
            "the runtime's deadline is not a deadline (past, or more than 900 s away: a local emulator's); using the function's timeout from the start of each invocation"
        );
    });
    Instant::now() + configured
}

/// [`FUNCTION_TIMEOUT`]'s value: whole seconds, 1 to 900.
fn configured_timeout(value: Option<&str>) -> Option<Duration> {
    let secs: u64 = value?.trim().parse().ok()?;
    let timeout = Duration::from_secs(secs);
    (secs > 0 && timeout <= LONGEST_TIMEOUT).then_some(timeout)
}

/// Why an invocation failed, as the function's own error type.
pub type InvokeError = Box<dyn std::error::Error + Send + Sync>;

/// A function invoked as Lambda would invoke it: the toolkit's local
/// event-source loop (`dev`) and the test kit's drain call it.
#[async_trait::async_trait]
pub trait EventFunction: Send + Sync {
    /// Invoke with a DynamoDB Streams event; `Err` is a failed invocation.
    async fn invoke_stream(&self, event: &Value) -> Result<BatchReport, InvokeError>;
    /// Invoke with a schedule event; returns the function's report as JSON.
    async fn invoke_schedule(&self, event: &Value) -> Result<Value, InvokeError>;
}

#[async_trait::async_trait]
impl<J: JobName> EventFunction for Worker<J> {
    async fn invoke_stream(&self, event: &Value) -> Result<BatchReport, InvokeError> {
        Ok(self.handle_stream(event, None).await?)
    }

    async fn invoke_schedule(&self, event: &Value) -> Result<Value, InvokeError> {
        let report = self.handle_schedule(event, None).await?;
        Ok(serde_json::to_value(report)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_790_000_000_000;

    #[test]
    fn a_real_deadline_keeps_its_meaning() {
        assert_eq!(
            time_left(NOW + 119_500, NOW),
            Some(Duration::from_millis(119_500))
        );
        assert_eq!(time_left(NOW + 900_000, NOW), Some(LONGEST_TIMEOUT));
    }

    #[test]
    fn a_past_or_implausible_deadline_is_none() {
        // cargo-lambda's emulator sends its invoke timeout, not an epoch time.
        assert_eq!(time_left(600_000, NOW), None);
        assert_eq!(time_left(NOW, NOW), None);
        assert_eq!(time_left(NOW - 1, NOW), None);
        assert_eq!(time_left(NOW + 3_600_000, NOW), None);
    }

    #[test]
    fn the_configured_timeout_is_whole_seconds_up_to_900() {
        assert_eq!(
            configured_timeout(Some("120")),
            Some(Duration::from_secs(120))
        );
        assert_eq!(configured_timeout(Some(" 900 ")), Some(LONGEST_TIMEOUT));
        assert_eq!(configured_timeout(Some("0")), None);
        assert_eq!(configured_timeout(Some("901")), None);
        assert_eq!(configured_timeout(Some("2m")), None);
        assert_eq!(configured_timeout(None), None);
    }

    #[test]
    fn an_implausible_deadline_becomes_the_timeout_from_now() {
        let before = Instant::now();
        let deadline = invocation_deadline(600_000, Duration::from_secs(120));
        let left = deadline - before;
        // The variable may be set in the test's environment; either way the
        // deadline is a timeout from now, never the past.
        assert!(
            left >= Duration::from_secs(1) && left <= LONGEST_TIMEOUT,
            "{left:?}"
        );
    }
}
