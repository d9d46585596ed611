//! The batch engine: runs a decoded stream batch through a
//! [`RecordProcessor`] and computes Lambda's partial-batch response.
//!
//! Records of one item (same key) run in batch order, one at a time; records
//! of different items run concurrently, up to [`EngineConfig::concurrency`]
//! items at once (DynamoDB Streams orders records per item only, and every
//! processor must already cope with items arriving in any order):
//!
//! - a malformed record (decode error) or a record's failure
//!   ([`FailureKind::Record`], [`HandlerError::permanent`]) is logged,
//!   counted and skipped; processing continues (the worker then parks it,
//!   [`crate::park`], before the batch is reported);
//! - an environment fault ([`FailureKind::Environment`],
//!   [`HandlerError::environment`]: a missing table or index, access
//!   denied, a bad credential) stops the batch as a transient failure
//!   does, and more: nothing of the batch is parked and
//!   [`BatchReport::environment_fault`] is set, so the entry point fails
//!   the invocation (the mapping retries the whole batch, then sends it to
//!   its on-failure destination) and the alarm fires;
//! - a transient failure ([`FailureKind::Transient`],
//!   [`HandlerError::transient`]) stops the batch: the earliest failed
//!   record's sequence number is the only batch item failure (Lambda retries
//!   from there) and no record after it starts any more: they are
//!   [`RecordStatus::NotAttempted`], except those of other items that had
//!   already finished (they are delivered again and are idempotent). Every
//!   record before it still runs. Without a sequence number,
//!   [`BatchReport::retry_whole_batch`] is set: the entry point must fail the
//!   invocation;
//! - before each record, when the Lambda deadline is nearer than the margin,
//!   the batch stops and every record not started is reported.
//!
//! With `concurrency: 1` the batch runs strictly in order.
//!
//! Log lines carry the event id, sequence number, key (`PK=…, SK=…`) and a
//! reason, never other attribute values; processors must keep their reasons
//! free of values too. The batch runs in a `batch` span and each record in a
//! `record` span (event id, sequence number, key, outcome), so lines the
//! processor writes carry the record's identity too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tracing::{Instrument, Span};

use super::decode::{ChangeKind, RecordError, SequenceNumber, StreamChange};
use crate::error::{FailureKind, HandlerError};

/// Reason of records left after the deadline check stopped the batch.
const DEADLINE_REASON: &str = "Lambda deadline near";

/// Handles one decoded change at a time.
#[async_trait::async_trait]
pub trait RecordProcessor: Send + Sync {
    /// Handle one decoded change. Must be idempotent: after a failure Lambda
    /// delivers records again, some of them already handled.
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError>;
}

/// What a processor did with a change. Texts must not contain attribute
/// values (they are logged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    /// The change was acted on (written, published): counted as handled.
    Handled {
        /// What was done, for the log line (`2 writes`).
        detail: String,
    },
    /// Nothing to do for this change (not a kind the processor acts on,
    /// already done): counted as skipped.
    Skipped {
        /// Why, for the log line.
        reason: String,
    },
    /// Not an item of the app (another writer's item in a shared table, or
    /// a record of another app's table): skipped like [`Self::Skipped`],
    /// counted apart, so a local run fed the wrong events says so.
    Foreign {
        /// Why it is not the app's, for the log line.
        reason: String,
    },
}

impl RecordOutcome {
    /// [`RecordOutcome::Handled`], with what was done.
    pub fn handled(detail: impl Into<String>) -> Self {
        RecordOutcome::Handled {
            detail: detail.into(),
        }
    }

    /// [`RecordOutcome::Skipped`], with why.
    pub fn skipped(reason: impl Into<String>) -> Self {
        RecordOutcome::Skipped {
            reason: reason.into(),
        }
    }

    /// [`RecordOutcome::Foreign`], with why.
    pub fn foreign(reason: impl Into<String>) -> Self {
        RecordOutcome::Foreign {
            reason: reason.into(),
        }
    }
}

/// How the engine runs a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// When the invocation times out (`None`: never stop early).
    pub deadline: Option<Instant>,
    /// Stop when less than this is left before the deadline. Default 2 s.
    pub deadline_margin: Duration,
    /// (partition, sort) key attribute names, for rendering keys in logs
    /// and grouping records by item. Default `("PK", "SK")`.
    pub key_attributes: (String, String),
    /// How many items' records run at once (at least 1). Default
    /// `DEFAULT_CONCURRENCY`.
    pub concurrency: usize,
}

/// Items handled at once within a batch, unless configured: every item of
/// a batch of 1,000 records, so that the reads of all of them go out in the
/// same rounds (a store that shares requests between concurrent callers
/// then sends one request per kind of read and round, not one per group of
/// items that happened to run together).
pub(crate) const DEFAULT_CONCURRENCY: usize = 1000;

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            deadline: None,
            deadline_margin: Duration::from_secs(2),
            key_attributes: ("PK".into(), "SK".into()),
            concurrency: DEFAULT_CONCURRENCY,
        }
    }
}

impl EngineConfig {
    #[cfg(test)]
    pub(crate) fn with_deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    fn keys(&self) -> (&str, &str) {
        (&self.key_attributes.0, &self.key_attributes.1)
    }

    fn deadline_near(&self) -> bool {
        self.deadline.is_some_and(|deadline| {
            deadline
                .checked_duration_since(Instant::now())
                .is_none_or(|left| left < self.deadline_margin)
        })
    }
}

/// What happened to one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordStatus {
    /// The processor acted on it ([`RecordOutcome::Handled`]).
    Handled {
        /// What it did.
        detail: String,
    },
    /// Skipped by the processor (nothing to do).
    Skipped {
        /// Why, as the processor said.
        reason: String,
    },
    /// Skipped as not an item of the app ([`RecordOutcome::Foreign`]).
    Foreign {
        /// Why, as the processor said.
        reason: String,
    },
    /// Failed permanently (e.g. an item that does not decode): logged,
    /// counted and skipped; retrying would not help.
    Rejected {
        /// The [`HandlerError::reason`] of a record failure; what a parked record
        /// keeps.
        reason: String,
    },
    /// Did not decode.
    Malformed {
        /// The decoder's reason ([`RecordError`]); what a parked record
        /// keeps.
        reason: String,
    },
    /// Failed transiently; reported to Lambda for a retry.
    Failed {
        /// The [`HandlerError::reason`] of a transient failure.
        reason: String,
    },
    /// Failed because the deployment is wrong ([`FailureKind::Environment`]):
    /// the invocation fails, nothing is parked.
    Environment {
        /// The [`HandlerError::reason`] of an environment fault.
        reason: String,
    },
    /// Not processed: after a transient failure or near the deadline.
    NotAttempted {
        /// Why it was not started (the deadline, or the earlier failure).
        reason: String,
    },
}

impl RecordStatus {
    /// Why the record failed for good (rejected or malformed): what a
    /// parking table keeps; `None` for every other status.
    pub fn parkable_reason(&self) -> Option<&str> {
        match self {
            RecordStatus::Rejected { reason } | RecordStatus::Malformed { reason } => Some(reason),
            _ => None,
        }
    }
}

/// One record's line in the batch report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordReport {
    /// Position in the batch (0-based), also in the event's `Records`.
    pub index: usize,
    /// The record's `eventID`; `None` when a malformed record had none.
    pub event_id: Option<String>,
    /// The record's sequence number; `None` when it had none (a failure
    /// then retries the whole batch).
    pub sequence_number: Option<SequenceNumber>,
    /// Only the key attributes, `PK=…, SK=…`.
    pub keys: Option<String>,
    /// What happened to the item; `None` when the record did not decode.
    pub kind: Option<ChangeKind>,
    /// What the engine did with it.
    pub status: RecordStatus,
}

/// The outcome of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchReport {
    /// One line per record, in batch order.
    pub records: Vec<RecordReport>,
    /// Sequence numbers to report to Lambda, in batch order.
    pub batch_item_failures: Vec<String>,
    /// Records [`RecordStatus::Handled`].
    pub handled: usize,
    /// Records [`RecordStatus::Skipped`].
    pub skipped: usize,
    /// Skipped as not the app's ([`RecordStatus::Foreign`]).
    pub foreign: usize,
    /// Records [`RecordStatus::Rejected`] (failed for good; parked when a
    /// parking table is set).
    pub rejected: usize,
    /// Records [`RecordStatus::Malformed`] (did not decode; parked when a
    /// parking table is set).
    pub malformed: usize,
    /// Records [`RecordStatus::Failed`] transiently (retried by Lambda).
    pub failed: usize,
    /// Records that met an environment fault.
    pub environment: usize,
    /// Records [`RecordStatus::NotAttempted`] (after a failure, or near the
    /// deadline; delivered again).
    pub not_attempted: usize,
    /// The first environment fault of the batch (`#index: reason`): the
    /// entry point must fail the invocation, and nothing is parked.
    pub environment_fault: Option<String>,
    /// Records that failed for good and were parked
    /// (`park_failures`; 0 when nothing parks).
    pub parked: usize,
    /// Records that failed for good and could not be parked: reported as
    /// batch item failures so that Lambda delivers them again.
    pub parking_failed: usize,
    /// A record that must be retried has no sequence number: the invocation
    /// must fail so that Lambda retries the whole batch.
    pub retry_whole_batch: bool,
}

impl BatchReport {
    /// What the `EnvironmentFaults` metric counts: the records that met an
    /// environment fault, or 1 when only parking met one.
    pub(crate) fn environment_faults(&self) -> usize {
        self.environment
            .max(usize::from(self.environment_fault.is_some()))
    }

    /// The response for Lambda's `ReportBatchItemFailures`.
    pub fn response(&self) -> BatchResponse {
        let mut response = BatchResponse::default();
        response.batch_item_failures = self
            .batch_item_failures
            .iter()
            .map(|id| {
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = Some(id.clone());
                failure
            })
            .collect();
        response
    }
}

/// `{"batchItemFailures": [{"itemIdentifier": "<sequence number>"}]}`:
/// `aws_lambda_events`' response type.
pub use aws_lambda_events::event::streams::{
    DynamoDbBatchItemFailure as BatchItemFailure, DynamoDbEventResponse as BatchResponse,
};

/// A record's identity, from its change or its decode error.
struct Identity {
    event_id: Option<String>,
    sequence_number: Option<SequenceNumber>,
    keys: Option<String>,
    kind: Option<ChangeKind>,
}

impl Identity {
    fn of(record: &Result<StreamChange, RecordError>, config: &EngineConfig) -> Self {
        match record {
            Ok(c) => Identity {
                event_id: Some(c.event_id.clone()),
                sequence_number: c.sequence_number.clone(),
                keys: Some(c.key_string(config.keys())),
                kind: Some(c.kind),
            },
            Err(e) => Identity {
                event_id: e.event_id.clone(),
                sequence_number: e.sequence_number.clone(),
                keys: e.keys.clone(),
                kind: None,
            },
        }
    }

    fn report(self, index: usize, status: RecordStatus) -> RecordReport {
        RecordReport {
            index,
            event_id: self.event_id,
            sequence_number: self.sequence_number,
            keys: self.keys,
            kind: self.kind,
            status,
        }
    }

    /// The `record` span: identity only (the encoded key, never attribute
    /// values); `outcome` is recorded once known.
    fn span(&self, index: usize) -> Span {
        tracing::info_span!(
            "record",
            index,
            event_id = self.event_id.as_deref(),
            sequence_number = self.sequence_number.as_ref().map(SequenceNumber::as_str),
            key = self.keys.as_deref(),
            outcome = tracing::field::Empty,
        )
    }

    fn warn(&self, what: &str, reason: &str) {
        tracing::warn!(
            event_id = self.event_id.as_deref(),
            sequence_number = self.sequence_number.as_ref().map(SequenceNumber::as_str),
            key = self.keys.as_deref(),
            reason,
            "stream record {what}"
        );
    }
}

/// Run a decoded batch through `processor`.
///
/// Records are grouped into *lanes* by key: a lane runs its records in
/// batch order, one at a time, and up to [`EngineConfig::concurrency`] lanes
/// run at once (DynamoDB Streams orders records only per item, so records
/// of different items may be handled in any order).
///
/// The batch runs inside a `batch` span (`size`, `first_sequence_number`,
/// `last_sequence_number`) and each record inside a `record` span
/// (`index`, `event_id`, `sequence_number`, `key`: the encoded key
/// attributes only, and `outcome`, recorded once known), so every log line
/// written while a record is handled carries them.
pub async fn run_batch(
    records: Vec<Result<StreamChange, RecordError>>,
    processor: &dyn RecordProcessor,
    config: &EngineConfig,
) -> BatchReport {
    let span = batch_span(&records);
    run_records(records, processor, config)
        .instrument(span)
        .await
}

/// The `batch` span of a batch.
fn batch_span(records: &[Result<StreamChange, RecordError>]) -> Span {
    let seq = |r: &Result<StreamChange, RecordError>| match r {
        Ok(c) => c.sequence_number.clone(),
        Err(e) => e.sequence_number.clone(),
    };
    let first = records.iter().find_map(seq);
    let last = records.iter().rev().find_map(seq);
    tracing::info_span!(
        "batch",
        size = records.len(),
        first_sequence_number = first.as_ref().map(SequenceNumber::as_str),
        last_sequence_number = last.as_ref().map(SequenceNumber::as_str),
    )
}

/// The short name of a status, as the `record` span's `outcome`.
fn outcome_label(status: &RecordStatus) -> &'static str {
    match status {
        RecordStatus::Handled { .. } => "handled",
        RecordStatus::Skipped { .. } => "skipped",
        RecordStatus::Foreign { .. } => "foreign",
        RecordStatus::Rejected { .. } => "rejected",
        RecordStatus::Malformed { .. } => "malformed",
        RecordStatus::Failed { .. } => "failed",
        RecordStatus::Environment { .. } => "environment",
        RecordStatus::NotAttempted { .. } => "not_attempted",
    }
}

/// What every lane of a batch sees: where the batch stopped.
struct Stops {
    /// Index of the earliest record that failed transiently or met an
    /// environment fault (`usize::MAX`: none). A record after it is not attempted: Lambda delivers it again.
    failed_at: AtomicUsize,
    /// The deadline margin was reached: nothing more starts.
    deadline: AtomicBool,
}

/// How one record ended, before the batch is summed up.
enum Done {
    Ran(RecordStatus),
    /// Not attempted: it comes after a transient failure.
    AfterFailure,
    /// Not attempted: the deadline was near.
    Deadline,
}

/// One record waiting in its lane.
struct Slot {
    index: usize,
    record: Result<StreamChange, RecordError>,
    id: Identity,
}

/// Group the batch by key, each lane in batch order, lanes ordered by their
/// first record. A record without a key gets a lane of its own.
fn lanes(records: Vec<Result<StreamChange, RecordError>>, config: &EngineConfig) -> Vec<Vec<Slot>> {
    let mut lanes: Vec<Vec<Slot>> = Vec::new();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for (index, record) in records.into_iter().enumerate() {
        let id = Identity::of(&record, config);
        let slot = Slot { index, record, id };
        let lane = match slot.id.keys.clone() {
            Some(key) => *by_key.entry(key).or_insert_with(|| {
                lanes.push(Vec::new());
                lanes.len() - 1
            }),
            None => {
                lanes.push(Vec::new());
                lanes.len() - 1
            }
        };
        lanes[lane].push(slot);
    }
    lanes
}

async fn run_records(
    records: Vec<Result<StreamChange, RecordError>>,
    processor: &dyn RecordProcessor,
    config: &EngineConfig,
) -> BatchReport {
    let total = records.len();
    let stops = Stops {
        failed_at: AtomicUsize::new(usize::MAX),
        deadline: AtomicBool::new(false),
    };
    let runs = lanes(records, config).into_iter().map(|lane| {
        let stops = &stops;
        async move {
            let mut done = Vec::with_capacity(lane.len());
            for slot in lane {
                let span = slot.id.span(slot.index);
                let status = run_record(
                    slot.index,
                    total,
                    slot.record,
                    &slot.id,
                    processor,
                    config,
                    stops,
                )
                .instrument(span)
                .await;
                done.push((slot.index, slot.id, status));
            }
            done
        }
    });
    let mut finished: Vec<(usize, Identity, Done)> = futures::stream::iter(runs)
        .buffer_unordered(config.concurrency.max(1))
        .flat_map(futures::stream::iter)
        .collect()
        .await;
    finished.sort_by_key(|(index, _, _)| *index);
    let report = sum_up(finished, stops.failed_at.load(Ordering::SeqCst));
    tracing::info!(
        records = report.records.len(),
        handled = report.handled,
        skipped = report.skipped,
        foreign = report.foreign,
        rejected = report.rejected,
        malformed = report.malformed,
        failed = report.failed,
        environment = report.environment,
        not_attempted = report.not_attempted,
        batch_item_failures = report.batch_item_failures.len(),
        retry_whole_batch = report.retry_whole_batch,
        "stream batch done"
    );
    report
}

/// The report of a finished batch (records in batch order). Lambda delivers
/// again everything from the lowest reported sequence number on, so the
/// batch item failures are the records that must run again up to and
/// including the earliest transient failure: that failure, and records the
/// deadline stopped before it (every one of them, in batch order). When the
/// first such record has no sequence number, only a whole-batch retry
/// delivers it again.
fn sum_up(finished: Vec<(usize, Identity, Done)>, failed_at: usize) -> BatchReport {
    let mut report = BatchReport::default();
    let stopped_by = finished
        .iter()
        .find(|(index, _, _)| *index == failed_at)
        .map(|(_, _, done)| match done {
            Done::Ran(RecordStatus::Environment { .. }) => "an environment fault",
            _ => "a transient failure",
        })
        .unwrap_or("a transient failure");
    for (index, id, done) in finished {
        let retry = match &done {
            Done::Ran(RecordStatus::Failed { .. } | RecordStatus::Environment { .. })
            | Done::Deadline => index <= failed_at,
            _ => false,
        };
        if retry {
            match &id.sequence_number {
                Some(seq) => report.batch_item_failures.push(seq.to_string()),
                // A malformed record is skipped anyway; a decodable one
                // with nothing reported before it needs the whole batch.
                None if id.kind.is_some() && report.batch_item_failures.is_empty() => {
                    report.retry_whole_batch = true
                }
                None => {}
            }
        }
        let status = match done {
            Done::Ran(status) => status,
            Done::AfterFailure => RecordStatus::NotAttempted {
                reason: format!("after {stopped_by} of record #{failed_at}"),
            },
            Done::Deadline => RecordStatus::NotAttempted {
                reason: DEADLINE_REASON.to_owned(),
            },
        };
        match &status {
            RecordStatus::Handled { .. } => report.handled += 1,
            RecordStatus::Skipped { .. } => report.skipped += 1,
            RecordStatus::Foreign { .. } => report.foreign += 1,
            RecordStatus::Rejected { .. } => report.rejected += 1,
            RecordStatus::Malformed { .. } => report.malformed += 1,
            RecordStatus::Failed { .. } => report.failed += 1,
            RecordStatus::Environment { reason } => {
                report.environment += 1;
                report
                    .environment_fault
                    .get_or_insert_with(|| format!("record #{index}: {reason}"));
            }
            RecordStatus::NotAttempted { .. } => report.not_attempted += 1,
        }
        report.records.push(id.report(index, status));
    }
    report
}

/// One record, inside its span: logs it and says how it ended.
async fn run_record(
    index: usize,
    total: usize,
    record: Result<StreamChange, RecordError>,
    id: &Identity,
    processor: &dyn RecordProcessor,
    config: &EngineConfig,
    stops: &Stops,
) -> Done {
    let outcome = |label: &'static str| {
        Span::current().record("outcome", label);
    };
    if !stops.deadline.load(Ordering::SeqCst)
        && config.deadline_near()
        && !stops.deadline.swap(true, Ordering::SeqCst)
    {
        tracing::warn!(
            index,
            records = total,
            "Lambda deadline near: stopping the batch"
        );
    }
    if index > stops.failed_at.load(Ordering::SeqCst) {
        outcome("not_attempted");
        return Done::AfterFailure;
    }
    if stops.deadline.load(Ordering::SeqCst) {
        outcome("not_attempted");
        return Done::Deadline;
    }
    let change = match record {
        Ok(change) => change,
        Err(e) => {
            outcome("malformed");
            id.warn("malformed, skipped", &e.reason);
            return Done::Ran(RecordStatus::Malformed { reason: e.reason });
        }
    };
    let status = match processor.process(&change).await {
        Ok(RecordOutcome::Handled { detail }) => RecordStatus::Handled { detail },
        Ok(RecordOutcome::Skipped { reason }) => RecordStatus::Skipped { reason },
        Ok(RecordOutcome::Foreign { reason }) => RecordStatus::Foreign { reason },
        Err(e) => {
            let reason = e.reason().to_owned();
            match e.kind() {
                FailureKind::Record => RecordStatus::Rejected { reason },
                FailureKind::Transient => RecordStatus::Failed { reason },
                FailureKind::Environment => RecordStatus::Environment { reason },
            }
        }
    };
    outcome(outcome_label(&status));
    match &status {
        RecordStatus::Handled { detail } => tracing::debug!(
            event_id = id.event_id.as_deref(),
            key = id.keys.as_deref(),
            detail,
            "stream record handled"
        ),
        RecordStatus::Skipped { reason } => tracing::debug!(
            event_id = id.event_id.as_deref(),
            key = id.keys.as_deref(),
            reason,
            "stream record skipped"
        ),
        RecordStatus::Foreign { reason } => tracing::info!(
            event_id = id.event_id.as_deref(),
            key = id.keys.as_deref(),
            reason,
            "stream record not the app's, skipped"
        ),
        RecordStatus::Rejected { reason } => id.warn("failed permanently, skipped", reason),
        RecordStatus::Failed { reason } => {
            id.warn("failed transiently, batch stopped", reason);
            stops.failed_at.fetch_min(index, Ordering::SeqCst);
        }
        RecordStatus::Environment { reason } => {
            tracing::error!(
                event_id = id.event_id.as_deref(),
                sequence_number = id.sequence_number.as_ref().map(SequenceNumber::as_str),
                key = id.keys.as_deref(),
                reason,
                "environment fault (the deployment, not the record): batch stopped, invocation fails"
            );
            stops.failed_at.fetch_min(index, Ordering::SeqCst);
        }
        RecordStatus::Malformed { .. } | RecordStatus::NotAttempted { .. } => {}
    }
    Done::Ran(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::decode::{decode_event, encode_event};
    use aws_sdk_dynamodb::types::AttributeValue;
    use serde_json::json;
    use std::collections::HashSet;
    use std::sync::Mutex;

    const U: &str = "3f1c2b4e-8a9d-4c6e-b1f2-0a1b2c3d4e5f";

    /// Processor test double: records the event ids it sees; fails on the
    /// chosen ones.
    #[derive(Default)]
    struct Recorder {
        transient: HashSet<String>,
        permanent: HashSet<String>,
        environment: HashSet<String>,
        skip: HashSet<String>,
        seen: Mutex<Vec<String>>,
    }

    impl Recorder {
        fn failing(transient: &[&str], permanent: &[&str]) -> Self {
            Recorder {
                transient: transient.iter().map(|s| s.to_string()).collect(),
                permanent: permanent.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }
        }

        fn seen(&self) -> Vec<String> {
            self.seen.lock().unwrap().clone()
        }
    }

    #[async_trait::async_trait]
    impl RecordProcessor for Recorder {
        async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError> {
            let id = change.event_id.clone();
            self.seen.lock().unwrap().push(id.clone());
            if self.transient.contains(&id) {
                Err(HandlerError::transient("throttled"))
            } else if self.permanent.contains(&id) {
                Err(HandlerError::permanent("unusable change"))
            } else if self.environment.contains(&id) {
                Err(HandlerError::environment("table missing"))
            } else if self.skip.contains(&id) {
                Ok(RecordOutcome::skipped("not interesting"))
            } else {
                Ok(RecordOutcome::handled("done"))
            }
        }
    }

    fn change(id: &str, seq: Option<&str>) -> StreamChange {
        StreamChange {
            event_id: id.into(),
            kind: ChangeKind::Insert,
            sequence_number: seq.map(|s| s.parse().unwrap()),
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

    /// Five good records e1..e5 with sequence numbers 9, 10, 11, 12, 13.
    fn batch() -> Vec<Result<StreamChange, RecordError>> {
        ["9", "10", "11", "12", "13"]
            .iter()
            .enumerate()
            .map(|(i, seq)| Ok(change(&format!("e{}", i + 1), Some(seq))))
            .collect()
    }

    fn malformed(index: usize, seq: Option<&str>) -> Result<StreamChange, RecordError> {
        Err(RecordError {
            index,
            event_id: Some(format!("bad{index}")),
            sequence_number: seq.map(|s| s.parse().unwrap()),
            keys: Some(format!("PK={U}, SK=User")),
            reason: "no Keys".into(),
        })
    }

    fn statuses(report: &BatchReport) -> Vec<&'static str> {
        report
            .records
            .iter()
            .map(|r| match r.status {
                RecordStatus::Handled { .. } => "handled",
                RecordStatus::Skipped { .. } => "skipped",
                RecordStatus::Foreign { .. } => "foreign",
                RecordStatus::Rejected { .. } => "rejected",
                RecordStatus::Malformed { .. } => "malformed",
                RecordStatus::Failed { .. } => "failed",
                RecordStatus::Environment { .. } => "environment",
                RecordStatus::NotAttempted { .. } => "not_attempted",
            })
            .collect()
    }

    #[tokio::test]
    async fn everything_handled() {
        let p = Recorder::default();
        let report = run_batch(batch(), &p, &EngineConfig::default()).await;
        assert_eq!(report.handled, 5);
        assert!(report.batch_item_failures.is_empty());
        assert!(!report.retry_whole_batch);
        assert_eq!(p.seen(), ["e1", "e2", "e3", "e4", "e5"]);
        assert_eq!(
            report.records[0].keys.as_deref(),
            Some(&*format!("PK={U}, SK=User"))
        );
        assert_eq!(report.records[0].kind, Some(ChangeKind::Insert));
    }

    #[tokio::test]
    async fn transient_failure_stops_the_batch_at_that_record() {
        let p = Recorder::failing(&["e3"], &[]);
        let report = run_batch(batch(), &p, &EngineConfig::default()).await;
        assert_eq!(report.batch_item_failures, ["11"]);
        assert_eq!(
            p.seen(),
            ["e1", "e2", "e3"],
            "later records never processed"
        );
        assert_eq!(
            statuses(&report),
            [
                "handled",
                "handled",
                "failed",
                "not_attempted",
                "not_attempted"
            ]
        );
        assert_eq!(
            (report.handled, report.failed, report.not_attempted),
            (2, 1, 2)
        );
        assert!(!report.retry_whole_batch);
        assert_eq!(
            report.records[2].status,
            RecordStatus::Failed {
                reason: "throttled".into()
            }
        );
    }

    #[tokio::test]
    async fn permanent_errors_and_malformed_records_are_skipped() {
        let mut records = batch();
        records.insert(1, malformed(1, Some("95")));
        let p = Recorder::failing(&[], &["e3"]);
        let report = run_batch(records, &p, &EngineConfig::default()).await;
        assert_eq!(p.seen(), ["e1", "e2", "e3", "e4", "e5"]);
        assert_eq!(
            statuses(&report),
            [
                "handled",
                "malformed",
                "handled",
                "rejected",
                "handled",
                "handled"
            ]
        );
        assert_eq!(
            (report.handled, report.rejected, report.malformed),
            (4, 1, 1)
        );
        assert!(report.batch_item_failures.is_empty());
        assert_eq!(report.records[1].event_id.as_deref(), Some("bad1"));
        assert_eq!(report.records[1].kind, None);
        let RecordStatus::Rejected { reason } = &report.records[3].status else {
            panic!("{:?}", report.records[3]);
        };
        assert!(!reason.is_empty());
    }

    #[tokio::test]
    async fn processor_skips_are_counted() {
        let p = Recorder {
            skip: ["e2".to_owned()].into(),
            ..Default::default()
        };
        let report = run_batch(batch(), &p, &EngineConfig::default()).await;
        assert_eq!((report.handled, report.skipped), (4, 1));
    }

    #[tokio::test]
    async fn deadline_already_near_reports_everything() {
        let mut records = batch();
        records.insert(2, malformed(2, Some("105")));
        let p = Recorder::default();
        let config =
            EngineConfig::default().with_deadline(Instant::now() + Duration::from_millis(500));
        let report = run_batch(records, &p, &config).await;
        assert!(p.seen().is_empty(), "nothing processed");
        assert_eq!(
            report.batch_item_failures,
            ["9", "10", "105", "11", "12", "13"]
        );
        assert_eq!(report.not_attempted, 6);
        assert!(report.records.iter().all(|r| r.status
            == RecordStatus::NotAttempted {
                reason: "Lambda deadline near".into()
            }));
        assert!(!report.retry_whole_batch);

        // A deadline in the past behaves the same.
        let config = EngineConfig {
            deadline: Instant::now().checked_sub(Duration::from_secs(1)),
            ..Default::default()
        };
        let report = run_batch(batch(), &p, &config).await;
        assert_eq!(report.batch_item_failures.len(), 5);
        assert!(p.seen().is_empty());
    }

    #[tokio::test]
    async fn far_deadline_does_not_stop() {
        let p = Recorder::default();
        let config =
            EngineConfig::default().with_deadline(Instant::now() + Duration::from_secs(600));
        let report = run_batch(batch(), &p, &config).await;
        assert_eq!(report.handled, 5);
        assert!(!config.deadline_near());
        assert!(
            EngineConfig::default()
                .with_deadline(Instant::now())
                .deadline_near()
        );
    }

    #[tokio::test]
    async fn an_environment_fault_stops_the_batch_and_fails_the_invocation() {
        let p = Recorder {
            permanent: ["e1".to_owned()].into(),
            environment: ["e3".to_owned()].into(),
            ..Default::default()
        };
        let report = run_batch(batch(), &p, &EngineConfig::default()).await;
        assert_eq!(p.seen(), ["e1", "e2", "e3"], "nothing after the fault runs");
        assert_eq!(
            statuses(&report),
            [
                "rejected",
                "handled",
                "environment",
                "not_attempted",
                "not_attempted"
            ]
        );
        assert_eq!(
            report.environment_fault.as_deref(),
            Some("record #2: table missing")
        );
        assert_eq!((report.environment, report.environment_faults()), (1, 1));
        assert_eq!(
            report.records[3].status,
            RecordStatus::NotAttempted {
                reason: "after an environment fault of record #2".into()
            }
        );
        // Not a record's own failure: nothing of it is parkable.
        assert_eq!(report.records[2].status.parkable_reason(), None);
    }

    #[test]
    fn store_errors_become_the_process_error_of_their_kind() {
        use crate::store::StoreError;
        let denied = StoreError::Permanent {
            operation: "Query",
            code: "AccessDeniedException".into(),
            message: "not authorized".into(),
        };
        let index = StoreError::Permanent {
            operation: "Query",
            code: "ValidationException".into(),
            message: "The table does not have the specified index: GSI1".into(),
        };
        let too_large = StoreError::Permanent {
            operation: "PutItem",
            code: "ValidationException".into(),
            message: "Item size has exceeded the maximum allowed size".into(),
        };
        let missing = StoreError::NotFound {
            operation: "GetItem",
            message: "Requested resource not found".into(),
        };
        let throttled = StoreError::Transient {
            operation: "Query",
            code: "ThrottlingException".into(),
            message: "slow down".into(),
        };
        for e in [denied, index, missing] {
            assert_eq!(
                HandlerError::from(e.clone()).kind(),
                FailureKind::Environment,
                "{e}"
            );
        }
        assert_eq!(HandlerError::from(too_large).kind(), FailureKind::Record);
        assert_eq!(HandlerError::from(throttled).kind(), FailureKind::Transient);
    }

    #[tokio::test]
    async fn transient_failure_without_sequence_number_retries_whole_batch() {
        let mut records = batch();
        records[1] = Ok(change("e2", None));
        let p = Recorder::failing(&["e2"], &[]);
        let report = run_batch(records, &p, &EngineConfig::default()).await;
        assert!(report.retry_whole_batch);
        assert!(report.batch_item_failures.is_empty());
        assert_eq!(p.seen(), ["e1", "e2"]);
        assert_eq!(report.not_attempted, 3);
    }

    #[tokio::test]
    async fn deadline_before_a_record_without_sequence_number_retries_whole_batch() {
        let mut records = batch();
        records[0] = Ok(change("e1", None));
        let p = Recorder::default();
        let config = EngineConfig::default().with_deadline(Instant::now());
        let report = run_batch(records, &p, &config).await;
        assert!(report.retry_whole_batch);
        assert_eq!(report.batch_item_failures, ["10", "11", "12", "13"]);
    }

    /// Processor test double for lanes: each record takes a while (its
    /// event id says how long, `e<n>:<ms>`), the in-flight peak is
    /// recorded, and the ids in `transient` fail.
    #[derive(Default)]
    struct Slow {
        transient: HashSet<String>,
        in_flight: std::sync::atomic::AtomicUsize,
        peak: std::sync::atomic::AtomicUsize,
        order: Mutex<Vec<String>>,
    }

    #[async_trait::async_trait]
    impl RecordProcessor for Slow {
        async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError> {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            let ms: u64 = change.event_id.split(':').nth(1).unwrap().parse().unwrap();
            tokio::time::sleep(Duration::from_millis(ms)).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            self.order.lock().unwrap().push(change.event_id.clone());
            if self.transient.contains(&change.event_id) {
                return Err(HandlerError::transient("throttled"));
            }
            Ok(RecordOutcome::handled("done"))
        }
    }

    /// Record `id` (`e<n>:<ms>`) of the item `User#<item>`, sequence number
    /// `seq`.
    fn of_item(id: &str, item: u8, seq: u32) -> Result<StreamChange, RecordError> {
        let mut c = change(id, Some(&seq.to_string()));
        c.keys
            .insert("SK".into(), AttributeValue::S(format!("User#{item}")));
        Ok(c)
    }

    fn config(concurrency: usize) -> EngineConfig {
        EngineConfig {
            concurrency,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn records_of_different_items_run_concurrently_up_to_the_limit() {
        let batch = || {
            (0..12u8)
                .map(|i| of_item(&format!("e{i}:20"), i, 100 + i as u32))
                .collect()
        };
        let p = Slow::default();
        let report = run_batch(batch(), &p, &config(4)).await;
        assert_eq!(report.handled, 12);
        assert_eq!(
            p.peak.load(Ordering::SeqCst),
            4,
            "4 items at once, never more"
        );
        let p = Slow::default();
        let report = run_batch(batch(), &p, &config(1)).await;
        assert_eq!(report.handled, 12);
        assert_eq!(
            p.peak.load(Ordering::SeqCst),
            1,
            "concurrency 1: one at a time"
        );
        let order: Vec<String> = p.order.lock().unwrap().clone();
        let expected: Vec<String> = (0..12).map(|i| format!("e{i}:20")).collect();
        assert_eq!(order, expected, "concurrency 1 keeps batch order");
    }

    #[tokio::test]
    async fn records_of_one_item_keep_batch_order() {
        // Item 1's records are slow, item 2's fast: item 2 finishes first,
        // but each item's own records stay in order.
        let records = vec![
            of_item("a1:30", 1, 1),
            of_item("b1:1", 2, 2),
            of_item("a2:1", 1, 3),
            of_item("b2:1", 2, 4),
            of_item("a3:1", 1, 5),
            of_item("b3:1", 2, 6),
        ];
        let p = Slow::default();
        let report = run_batch(records, &p, &config(8)).await;
        assert_eq!(report.handled, 6);
        let order = p.order.lock().unwrap().clone();
        let of = |prefix: char| -> Vec<String> {
            order
                .iter()
                .filter(|e| e.starts_with(prefix))
                .cloned()
                .collect()
        };
        assert_eq!(of('a'), ["a1:30", "a2:1", "a3:1"]);
        assert_eq!(of('b'), ["b1:1", "b2:1", "b3:1"]);
        assert_eq!(
            order[0], "b1:1",
            "the fast item did not wait for the slow one"
        );
        // The report stays in batch order.
        let seqs: Vec<String> = report
            .records
            .iter()
            .map(|r| r.sequence_number.as_ref().unwrap().to_string())
            .collect();
        assert_eq!(seqs, ["1", "2", "3", "4", "5", "6"]);
    }

    #[tokio::test]
    async fn a_transient_failure_reports_the_earliest_failed_record_only() {
        // Items 1 and 2 both fail (item 2 later in the batch but first in
        // time); item 3's early record must still run, its later one not.
        let records = vec![
            of_item("a1:1", 1, 1),
            of_item("c1:40", 3, 2),
            of_item("a2:30", 1, 3), // fails (index 2)
            of_item("b1:1", 2, 4),  // fails first in time (index 3)
            of_item("b2:1", 2, 5),
            of_item("a3:1", 1, 6),
            of_item("c2:1", 3, 7),
        ];
        let p = Slow {
            transient: ["a2:30".to_owned(), "b1:1".to_owned()].into(),
            ..Default::default()
        };
        let report = run_batch(records, &p, &config(8)).await;
        assert_eq!(report.batch_item_failures, ["3"], "the earliest failure");
        assert!(!report.retry_whole_batch);
        assert_eq!(
            statuses(&report),
            [
                "handled",
                "handled",
                "failed",
                "failed",
                "not_attempted",
                "not_attempted",
                "not_attempted"
            ]
        );
        assert_eq!(
            report.records[6].status,
            RecordStatus::NotAttempted {
                reason: "after a transient failure of record #2".into()
            }
        );
        let order = p.order.lock().unwrap().clone();
        assert!(
            order.contains(&"c1:40".to_owned()),
            "a record before the failure ran"
        );
        assert!(
            !order.contains(&"b2:1".to_owned()),
            "an item stops at its failure"
        );
    }

    #[tokio::test]
    async fn records_after_a_failure_may_have_finished_and_are_redelivered() {
        // Item 2 is fast and finishes before item 1 fails: it is handled
        // (and Lambda delivers it again from the failure on).
        let records = vec![
            of_item("a1:30", 1, 1), // fails
            of_item("b1:1", 2, 2),
        ];
        let p = Slow {
            transient: ["a1:30".to_owned()].into(),
            ..Default::default()
        };
        let report = run_batch(records, &p, &config(8)).await;
        assert_eq!(report.batch_item_failures, ["1"]);
        assert_eq!(statuses(&report), ["failed", "handled"]);
    }

    #[test]
    fn batch_response_json_shape() {
        let report = BatchReport {
            batch_item_failures: vec!["4000000000000000000000000000000000000001".into()],
            ..Default::default()
        };
        let v = serde_json::to_value(report.response()).unwrap();
        assert_eq!(
            v,
            json!({"batchItemFailures": [{"itemIdentifier": "4000000000000000000000000000000000000001"}]})
        );
        assert_eq!(
            serde_json::to_string(&BatchReport::default().response()).unwrap(),
            r#"{"batchItemFailures":[]}"#
        );
        let back: BatchResponse = serde_json::from_value(v).unwrap();
        assert_eq!(back, report.response());
    }

    #[test]
    fn process_error_helpers() {
        assert!(HandlerError::transient("x").is_retryable());
        assert!(!HandlerError::permanent("x").is_retryable());
        assert_eq!(
            HandlerError::permanent("bad").to_string(),
            "permanent failure: bad"
        );
    }

    #[tokio::test]
    async fn decoded_event_end_to_end() {
        let changes = vec![change("e1", Some("1")), change("e2", Some("2"))];
        let mut event = encode_event(&changes, None);
        event["Records"][0]["eventName"] = json!("UPSERT");
        let records = decode_event(&event).unwrap();
        let p = Recorder::failing(&["e2"], &[]);
        let report = run_batch(records, &p, &EngineConfig::default()).await;
        assert_eq!(statuses(&report), ["malformed", "failed"]);
        assert_eq!(
            serde_json::to_value(report.response()).unwrap(),
            json!({"batchItemFailures": [{"itemIdentifier": "2"}]})
        );
    }
}
