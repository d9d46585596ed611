//! The local event-source loop: reads a table's stream the way Lambda's
//! event source mapping does and invokes a function with Lambda-shaped
//! events, plus cron-driven schedule ticks. Generic: the function is an
//! [`EventFunction`] (the engine's [`worker_engine::Worker`] is one), the records come from a
//! [`RecordSource`] (a [`StreamTail`] in production use).
//!
//! Event source mapping rules reproduced here:
//!
//! - batches hold up to `batch_size` records of **one shard, in order**; a
//!   shard's records wait for the batching window unless a full batch is
//!   there; shards are served in the order they were first seen, and a
//!   shard with records still pending blocks the shards after it (so a
//!   child shard never overtakes its parent);
//! - a function response with `batchItemFailures` checkpoints before the
//!   failed record: the next attempt starts **at that sequence number**;
//! - a function error (or a response asking for a whole-batch retry)
//!   retries the whole batch; with `bisect_on_error` the batch is split in
//!   two and the first half is retried;
//! - after `max_retries` failed retries of the same first record, the
//!   failing records are discarded (logged), as Lambda does once its
//!   `MaximumRetryAttempts` is exhausted;
//! - with a `parallelization_factor` N above 1 (Lambda's
//!   `ParallelizationFactor`), each shard's records are split by a hash of
//!   their partition key ([`lane_of`]) into N batch streams ("lanes"): each
//!   lane is batched, invoked, retried (from its own first failed sequence
//!   number) and given up on by itself, the lanes of a shard concurrently,
//!   so a failing lane holds back only its own keys; order is kept per
//!   partition key, not across keys. The shard's checkpoint is the last
//!   record before the first one not done in any lane.
//!
//! [`decide`] is the pure decision after each invocation; every attempt
//! leaves a [`BatchLog`].

use std::collections::VecDeque;
use std::str::FromStr;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::stream_reader::StreamTail;
use worker_engine::item::Item;
use worker_engine::store::StoreError;
use worker_engine::stream::{SequenceNumber, StreamChange, encode_event};

/// The function the loop invokes, as Lambda would, and why an invocation
/// failed (the loop renders it only where it logs it).
pub use worker_engine::{EventFunction, InvokeError};

/// The invocation failed because of the deployment, not the records (a
/// missing table or index, access denied: [`worker_engine::FailureKind`]).
/// A function returns it as its [`InvokeError`]; the loop stops at once
/// instead of retrying and discarding the batch, since every retry would
/// meet the same fault ([`PollReport::environment_fault`],
/// [`LoopError::Environment`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("environment fault: {0}")]
pub struct EnvironmentFault(pub String);

/// Where stream records come from: `(shard id, change)` pairs, each shard in
/// order, every record once.
#[async_trait]
pub trait RecordSource: Send {
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
    pub fn new(inner: S, filters: Vec<Value>, max_age: Option<Duration>) -> Self {
        MappingSource {
            inner,
            filters,
            max_age: max_age.and_then(|a| chrono::Duration::from_std(a).ok()),
            filtered: 0,
            expired: Vec::new(),
        }
    }

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

/// The event source mapping settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappingConfig {
    /// Most records per invocation (Lambda: `BatchSize`; the deployed
    /// mapping uses 1,000).
    pub batch_size: usize,
    /// How long to gather records before invoking with less than a full
    /// batch (Lambda: `MaximumBatchingWindowInSeconds`, default 0).
    pub batching_window: Duration,
    /// Failed retries of the same first record before its records are
    /// discarded (Lambda: `MaximumRetryAttempts`; unbounded there by
    /// default, bounded here).
    pub max_retries: u32,
    /// Split a batch in two on a function error (Lambda:
    /// `BisectBatchOnFunctionError`).
    pub bisect_on_error: bool,
    /// Batches of one shard in flight at once (Lambda:
    /// `ParallelizationFactor`, 1 to [`MAX_PARALLELIZATION_FACTOR`]): a
    /// shard's records go to this many lanes by their partition key
    /// ([`lane_of`]), each batched, invoked, retried and checkpointed by
    /// itself, concurrently. 1 (the default): the whole shard in order.
    pub parallelization_factor: usize,
    /// The table's partition key attribute, which [`lane_of`] hashes
    /// (`None`: every key attribute, so order is kept per item only).
    pub partition_key: Option<String>,
}

impl Default for MappingConfig {
    fn default() -> Self {
        MappingConfig {
            batch_size: 100,
            batching_window: Duration::ZERO,
            max_retries: 5,
            bisect_on_error: false,
            parallelization_factor: 1,
            partition_key: None,
        }
    }
}

/// The largest `ParallelizationFactor` Lambda accepts.
pub const MAX_PARALLELIZATION_FACTOR: usize = 10;

/// The lane (of `factor`, numbered from 0) a record with these `keys` goes
/// to, as Lambda's event source mapping with a `ParallelizationFactor`
/// assigns it: by a hash of the partition key's value, so every record of
/// one partition key goes to the same lane and stays in order there.
/// `partition_key` names the table's partition key attribute; without it,
/// or for a record that lacks it, every key attribute is hashed (in name
/// order: a lane per item rather than per partition). Pure, and the same
/// on every run and platform (FNV-1a over the value's type and bytes);
/// `factor` 0 or 1: lane 0.
pub fn lane_of(keys: &Item, partition_key: Option<&str>, factor: usize) -> usize {
    if factor <= 1 {
        return 0;
    }
    let mut hash = Fnv::default();
    match partition_key.and_then(|pk| keys.get(pk)) {
        Some(value) => hash.value(value),
        None => {
            let mut names: Vec<&String> = keys.keys().collect();
            names.sort();
            for name in names {
                hash.bytes(name.as_bytes());
                hash.value(&keys[name]);
            }
        }
    }
    (hash.0 % factor as u64) as usize
}

/// One shard's records (in order) split into `factor.max(1)` lanes by
/// [`lane_of`], each lane in the records' order (some lanes may be empty).
pub fn split_by_partition_key(
    changes: Vec<StreamChange>,
    partition_key: Option<&str>,
    factor: usize,
) -> Vec<Vec<StreamChange>> {
    let mut lanes: Vec<Vec<StreamChange>> = (0..factor.max(1)).map(|_| Vec::new()).collect();
    for c in changes {
        lanes[lane_of(&c.keys, partition_key, factor)].push(c);
    }
    lanes
}

/// FNV-1a, 64 bits: a hash that never changes between runs or builds.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn bytes(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The value's type, then its bytes (a key is a string, number or
    /// binary; anything else by its debug form).
    fn value(&mut self, v: &AttributeValue) {
        match v {
            AttributeValue::S(s) => {
                self.bytes(b"S");
                self.bytes(s.as_bytes());
            }
            AttributeValue::N(n) => {
                self.bytes(b"N");
                self.bytes(n.as_bytes());
            }
            AttributeValue::B(b) => {
                self.bytes(b"B");
                self.bytes(b.as_ref());
            }
            other => self.bytes(format!("{other:?}").as_bytes()),
        }
    }
}

/// What the function answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum Invocation {
    /// Every record done.
    Succeeded,
    /// `batchItemFailures`: the lowest failed sequence number.
    PartialFailure { failed_sequence: String },
    /// The response asked for the whole batch again (a record without a
    /// sequence number failed).
    WholeBatchRetry,
    /// The invocation failed.
    FunctionError { error: String },
}

/// What the loop does after an invocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    /// Checkpoint after the batch: move on.
    Checkpoint,
    /// Checkpoint before `from_sequence` and invoke again from there with
    /// at most `records` records.
    Retry {
        from_sequence: Option<String>,
        records: usize,
    },
    /// Give up on `records` records starting at `from_sequence`.
    Discard {
        from_sequence: Option<String>,
        records: usize,
    },
}

/// The decision after one invocation of `batch_len` records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Records at the head of the batch that are done (checkpointed).
    pub done: usize,
    /// Records after those that are dropped (discarded).
    pub discarded: usize,
    pub action: Action,
    /// Failed attempts of the (new) first pending record.
    pub retries: u32,
    /// Most records in the next invocation of this shard.
    pub next_limit: usize,
}

/// Decide what follows an invocation. `retries` is the number of failed
/// attempts of the batch's first record so far. Pure.
pub fn decide(
    batch: &[StreamChange],
    result: &Invocation,
    retries: u32,
    config: &MappingConfig,
) -> Decision {
    let seq_at = |i: usize| {
        batch
            .get(i)
            .and_then(|c| c.sequence_number.as_ref())
            .map(|s| s.to_string())
    };
    let full = config.batch_size.max(1);
    let (done, retry_len) = match result {
        Invocation::Succeeded => {
            return Decision {
                done: batch.len(),
                discarded: 0,
                action: Action::Checkpoint,
                retries: 0,
                next_limit: full,
            };
        }
        Invocation::PartialFailure { failed_sequence } => {
            let failed: Option<SequenceNumber> = failed_sequence.parse().ok();
            let pos = batch.iter().position(|c| {
                c.sequence_number.is_some() && c.sequence_number.as_ref() == failed.as_ref()
            });
            match pos {
                // Lambda retries from the checkpoint; with bisect, only the
                // rest of the batch.
                Some(p) => (
                    p,
                    if config.bisect_on_error {
                        batch.len() - p
                    } else {
                        full
                    },
                ),
                // An identifier that is not in the batch: a complete failure.
                None => (0, whole_batch_retry_len(batch.len(), config)),
            }
        }
        Invocation::WholeBatchRetry | Invocation::FunctionError { .. } => {
            (0, whole_batch_retry_len(batch.len(), config))
        }
    };
    let retries = if done > 0 { 1 } else { retries + 1 };
    if retries > config.max_retries {
        return Decision {
            done,
            discarded: batch.len() - done,
            action: Action::Discard {
                from_sequence: seq_at(done),
                records: batch.len() - done,
            },
            retries: 0,
            next_limit: full,
        };
    }
    Decision {
        done,
        discarded: 0,
        action: Action::Retry {
            from_sequence: seq_at(done),
            records: retry_len.min(full).max(1),
        },
        retries,
        next_limit: retry_len.min(full).max(1),
    }
}

fn whole_batch_retry_len(len: usize, config: &MappingConfig) -> usize {
    if config.bisect_on_error && len > 1 {
        len.div_ceil(2)
    } else {
        len
    }
}

/// One invocation of the function with a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BatchLog {
    pub shard: String,
    /// The shard's lane (from 0) with a parallelization factor above 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lane: Option<usize>,
    /// 1 for the first attempt of the batch's first record, 2 for its
    /// first retry, ...
    pub attempt: u32,
    pub records: usize,
    pub first_sequence: Option<String>,
    pub last_sequence: Option<String>,
    pub handled: usize,
    pub skipped: usize,
    /// Skipped as not the app's.
    pub foreign: usize,
    pub rejected: usize,
    pub malformed: usize,
    #[serde(flatten)]
    pub invocation: Invocation,
    #[serde(flatten)]
    pub action: Action,
}

impl BatchLog {
    /// One readable line for the loop's log.
    pub fn line(&self) -> String {
        let range = match (&self.first_sequence, &self.last_sequence) {
            (Some(a), Some(b)) if a == b => format!("seq {a}"),
            (Some(a), Some(b)) => format!("seq {a}..{b}"),
            _ => "no sequence numbers".to_owned(),
        };
        let result = match &self.invocation {
            Invocation::Succeeded => format!(
                "ok ({} handled, {} skipped, {} not the app's, {} rejected, {} malformed)",
                self.handled, self.skipped, self.foreign, self.rejected, self.malformed
            ),
            Invocation::PartialFailure { failed_sequence } => format!(
                "batchItemFailures [{failed_sequence}] ({} handled before it)",
                self.handled
            ),
            Invocation::WholeBatchRetry => "whole batch must be retried".to_owned(),
            Invocation::FunctionError { error } => format!("function error: {error}"),
        };
        let action = match &self.action {
            Action::Checkpoint => String::new(),
            Action::Retry {
                from_sequence,
                records,
            } => format!(
                "; retrying from seq {} (up to {records} records)",
                from_sequence.as_deref().unwrap_or("?")
            ),
            Action::Discard {
                from_sequence,
                records,
            } => format!(
                "; DISCARDED {records} records from seq {} after {} attempts",
                from_sequence.as_deref().unwrap_or("?"),
                self.attempt
            ),
        };
        let lane = self.lane.map(|l| format!(" lane={l}")).unwrap_or_default();
        format!(
            "batch shard={}{lane} attempt={} records={} {range}: {result}{action}",
            self.shard, self.attempt, self.records
        )
    }
}

/// What one poll did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollReport {
    /// New records read from the source.
    pub read: usize,
    /// Invocations made.
    pub batches: Vec<BatchLog>,
    /// An invocation met an environment fault: the loop stopped there,
    /// its batch not counted as a retry and not checkpointed.
    pub environment_fault: Option<String>,
}

/// One of a shard's batch streams (all of it with a parallelization factor
/// of 1).
struct Lane {
    /// Records not done yet: the time each arrived, its position in the
    /// shard, the record.
    pending: VecDeque<(Instant, u64, StreamChange)>,
    retries: u32,
    limit: usize,
}

struct ShardQueue {
    shard: String,
    lanes: Vec<Lane>,
    /// Every record read and not checkpointed yet, in shard order: its
    /// sequence number and whether it is done (handled or discarded).
    order: VecDeque<(Option<SequenceNumber>, bool)>,
    /// The position in the shard of `order`'s first record.
    front: u64,
}

impl ShardQueue {
    fn pending(&self) -> usize {
        self.lanes.iter().map(|l| l.pending.len()).sum()
    }
}

/// What one lane's turn did.
#[derive(Default)]
struct LaneRun {
    logs: Vec<BatchLog>,
    /// Positions of the records done.
    done: Vec<u64>,
    /// A batch failed: its retry waits for the next poll.
    blocked: bool,
    /// An environment fault stopped the lane.
    fault: Option<String>,
}

/// The event source mapping over a [`RecordSource`].
pub struct EventSourceLoop<S: RecordSource> {
    source: S,
    config: MappingConfig,
    shards: Vec<ShardQueue>,
    /// The last record done (handled or discarded) per shard: where the
    /// mapping resumes after a restart.
    checkpoints: std::collections::BTreeMap<String, SequenceNumber>,
}

impl<S: RecordSource> EventSourceLoop<S> {
    pub fn new(source: S, config: MappingConfig) -> Self {
        EventSourceLoop {
            source,
            config,
            shards: Vec::new(),
            checkpoints: Default::default(),
        }
    }

    /// The last record done per shard (handled, or discarded after the
    /// retries): what a restart resumes after.
    pub fn checkpoints(&self) -> &std::collections::BTreeMap<String, SequenceNumber> {
        &self.checkpoints
    }

    /// The record source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The record source, mutably.
    pub fn source_mut(&mut self) -> &mut S {
        &mut self.source
    }

    pub fn config(&self) -> &MappingConfig {
        &self.config
    }

    /// Records read but not checkpointed yet.
    pub fn pending(&self) -> usize {
        self.shards.iter().map(ShardQueue::pending).sum()
    }

    /// Read and drop everything the source has now (start at "latest").
    pub async fn skip_existing(&mut self) -> Result<usize, StoreError> {
        Ok(self.source.next_records().await?.len())
    }

    /// Read new records, then invoke the function with every batch that is
    /// ready, shard by shard. A failed batch is retried on the next poll.
    pub async fn poll_once(
        &mut self,
        function: &dyn EventFunction,
    ) -> Result<PollReport, StoreError> {
        let new = self.source.next_records().await?;
        let mut report = PollReport {
            read: new.len(),
            ..Default::default()
        };
        let now = Instant::now();
        let full = self.config.batch_size.max(1);
        let factor = self.config.parallelization_factor.max(1);
        for (shard, change) in new {
            let queue = match self.shards.iter().position(|q| q.shard == shard) {
                Some(i) => &mut self.shards[i],
                None => {
                    self.shards.push(ShardQueue {
                        shard,
                        lanes: (0..factor)
                            .map(|_| Lane {
                                pending: VecDeque::new(),
                                retries: 0,
                                limit: full,
                            })
                            .collect(),
                        order: VecDeque::new(),
                        front: 0,
                    });
                    self.shards.last_mut().expect("just pushed")
                }
            };
            let position = queue.front + queue.order.len() as u64;
            let lane = lane_of(&change.keys, self.config.partition_key.as_deref(), factor);
            queue
                .order
                .push_back((change.sequence_number.clone(), false));
            queue.lanes[lane].pending.push_back((now, position, change));
        }
        for i in 0..self.shards.len() {
            let blocked = self
                .run_shard(
                    i,
                    function,
                    &mut report.batches,
                    &mut report.environment_fault,
                )
                .await;
            if blocked || self.shards[i].pending() > 0 {
                // Later shards wait (parents before children).
                break;
            }
        }
        self.shards.retain(|q| q.pending() > 0);
        Ok(report)
    }

    /// Invoke with the ready batches of one shard, its lanes concurrently;
    /// true when a batch failed (its retry waits for the next poll).
    async fn run_shard(
        &mut self,
        i: usize,
        function: &dyn EventFunction,
        logs: &mut Vec<BatchLog>,
        fault: &mut Option<String>,
    ) -> bool {
        let config = &self.config;
        let queue = &mut self.shards[i];
        let parallel = queue.lanes.len() > 1;
        let shard = queue.shard.as_str();
        let runs =
            futures::future::join_all(
                queue.lanes.iter_mut().enumerate().map(|(k, lane)| {
                    run_lane(lane, shard, parallel.then_some(k), config, function)
                }),
            )
            .await;
        let mut blocked = false;
        for run in runs {
            logs.extend(run.logs);
            blocked |= run.blocked;
            if fault.is_none() {
                *fault = run.fault;
            }
            for position in run.done {
                queue.order[(position - queue.front) as usize].1 = true;
            }
        }
        // The checkpoint: the last record before the first one not done.
        while let Some((seq, true)) = queue.order.front() {
            if let Some(seq) = seq {
                self.checkpoints.insert(queue.shard.clone(), seq.clone());
            }
            queue.order.pop_front();
            queue.front += 1;
        }
        blocked
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

/// Invoke with the ready batches of one lane, one after the other, until
/// none is ready or a batch must be retried.
async fn run_lane(
    lane: &mut Lane,
    shard: &str,
    lane_no: Option<usize>,
    config: &MappingConfig,
    function: &dyn EventFunction,
) -> LaneRun {
    let full = config.batch_size.max(1);
    let mut out = LaneRun::default();
    loop {
        let Some((arrived, _, _)) = lane.pending.front() else {
            return out;
        };
        let ready = lane.retries > 0
            || lane.pending.len() >= lane.limit
            || arrived.elapsed() >= config.batching_window;
        if !ready {
            return out;
        }
        let n = lane.limit.min(full).min(lane.pending.len());
        let batch: Vec<StreamChange> = lane
            .pending
            .iter()
            .take(n)
            .map(|(_, _, c)| c.clone())
            .collect();
        let event = encode_event(&batch, None);
        let (invocation, report) = match function.invoke_stream(&event).await {
            Ok(r) if r.retry_whole_batch => (Invocation::WholeBatchRetry, Some(r)),
            Ok(r) => match lowest(&r.batch_item_failures) {
                Some(seq) => (
                    Invocation::PartialFailure {
                        failed_sequence: seq,
                    },
                    Some(r),
                ),
                None => (Invocation::Succeeded, Some(r)),
            },
            Err(error) if error.downcast_ref::<EnvironmentFault>().is_some() => {
                out.fault = error
                    .downcast_ref::<EnvironmentFault>()
                    .map(|f| f.0.clone());
                out.blocked = true;
                return out;
            }
            Err(error) => (
                Invocation::FunctionError {
                    error: error.to_string(),
                },
                None,
            ),
        };
        let decision = decide(&batch, &invocation, lane.retries, config);
        let seq = |c: Option<&StreamChange>| {
            c.and_then(|c| c.sequence_number.as_ref())
                .map(|s| s.to_string())
        };
        let log = BatchLog {
            shard: shard.to_owned(),
            lane: lane_no,
            attempt: lane.retries + 1,
            records: batch.len(),
            first_sequence: seq(batch.first()),
            last_sequence: seq(batch.last()),
            handled: report.as_ref().map_or(0, |r| r.handled),
            skipped: report.as_ref().map_or(0, |r| r.skipped),
            foreign: report.as_ref().map_or(0, |r| r.foreign),
            rejected: report.as_ref().map_or(0, |r| r.rejected),
            malformed: report.as_ref().map_or(0, |r| r.malformed),
            invocation,
            action: decision.action.clone(),
        };
        match &log.action {
            Action::Discard { .. } => tracing::error!("{}", log.line()),
            Action::Retry { .. } => tracing::warn!("{}", log.line()),
            Action::Checkpoint => tracing::info!("{}", log.line()),
        }
        out.logs.push(log);
        let drained = decision.done + decision.discarded;
        out.done.extend(
            lane.pending
                .drain(..drained)
                .map(|(_, position, _)| position),
        );
        lane.retries = decision.retries;
        lane.limit = decision.next_limit;
        if matches!(decision.action, Action::Retry { .. }) {
            out.blocked = true;
            return out;
        }
    }
}

/// Why the loop stopped.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "the stream did not become idle in time: {pending} records pending after {batches} batches"
    )]
    NotIdle { pending: usize, batches: usize },
    /// The function met an environment fault ([`EnvironmentFault`]).
    #[error("environment fault: {0}")]
    Environment(String),
}

/// The lowest of the reported sequence numbers (Lambda's checkpoint rule).
fn lowest(ids: &[String]) -> Option<String> {
    ids.iter()
        .min_by(
            |a, b| match (a.parse::<SequenceNumber>(), b.parse::<SequenceNumber>()) {
                (Ok(x), Ok(y)) => x.cmp(&y),
                _ => a.cmp(b),
            },
        )
        .cloned()
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
    pub expr: String,
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
    pub name: String,
    /// The expression as given.
    pub expr: String,
    pub schedule: Schedule,
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
    use std::sync::Mutex;
    use worker_engine::stream::BatchReport;
    use worker_engine::stream::ChangeKind;

    fn change(seq: u32) -> StreamChange {
        StreamChange {
            event_id: format!("e{seq}"),
            kind: ChangeKind::Insert,
            sequence_number: Some(seq.to_string().parse().unwrap()),
            approximate_creation: None,
            keys: [(
                "PK".to_owned(),
                aws_sdk_dynamodb::types::AttributeValue::S(format!("k{seq}")),
            )]
            .into(),
            old_image: None,
            new_image: None,
            event_source_arn: None,
            size_bytes: None,
        }
    }

    fn batch(seqs: std::ops::Range<u32>) -> Vec<StreamChange> {
        seqs.map(change).collect()
    }

    fn config(bisect: bool) -> MappingConfig {
        MappingConfig {
            batch_size: 10,
            batching_window: Duration::ZERO,
            max_retries: 2,
            bisect_on_error: bisect,
            ..MappingConfig::default()
        }
    }

    #[test]
    fn success_checkpoints_everything() {
        let d = decide(&batch(1..5), &Invocation::Succeeded, 1, &config(false));
        assert_eq!(
            (d.done, d.discarded, d.retries, d.next_limit),
            (4, 0, 0, 10)
        );
        assert_eq!(d.action, Action::Checkpoint);
    }

    #[test]
    fn partial_failure_retries_from_the_failed_sequence_number() {
        let inv = Invocation::PartialFailure {
            failed_sequence: "3".into(),
        };
        let d = decide(&batch(1..6), &inv, 0, &config(false));
        assert_eq!(d.done, 2);
        assert_eq!(
            d.action,
            Action::Retry {
                from_sequence: Some("3".into()),
                records: 10
            }
        );
        assert_eq!(d.retries, 1);
        // With bisect, only the rest of the batch.
        let d = decide(&batch(1..6), &inv, 0, &config(true));
        assert_eq!(d.next_limit, 3);
        // An identifier not in the batch fails the whole batch.
        let bogus = Invocation::PartialFailure {
            failed_sequence: "99".into(),
        };
        let d = decide(&batch(1..6), &bogus, 0, &config(false));
        assert_eq!(d.done, 0);
    }

    #[test]
    fn function_error_bisects_and_discards_after_max_retries() {
        let err = Invocation::FunctionError {
            error: "boom".into(),
        };
        let d = decide(&batch(1..6), &err, 0, &config(true));
        assert_eq!((d.done, d.next_limit, d.retries), (0, 3, 1));
        let d = decide(&batch(1..6), &err, 0, &config(false));
        assert_eq!(d.next_limit, 5);
        let d = decide(&batch(1..4), &err, 2, &config(false));
        assert_eq!(
            d.action,
            Action::Discard {
                from_sequence: Some("1".into()),
                records: 3
            }
        );
        assert_eq!((d.done, d.discarded, d.retries), (0, 3, 0));
        // Progress resets the count: the failed record's first failure.
        let inv = Invocation::PartialFailure {
            failed_sequence: "2".into(),
        };
        let d = decide(&batch(1..4), &inv, 2, &config(false));
        assert_eq!((d.done, d.retries), (1, 1));
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

    fn keys(pk: &str, sk: &str) -> Item {
        [
            ("PK".to_owned(), AttributeValue::S(pk.to_owned())),
            ("SK".to_owned(), AttributeValue::S(sk.to_owned())),
        ]
        .into()
    }

    /// Record `seq` of item (`pk`, `s<seq>`).
    fn keyed(seq: u32, pk: &str) -> StreamChange {
        StreamChange {
            keys: keys(pk, &format!("s{seq}")),
            ..change(seq)
        }
    }

    #[test]
    fn lanes_follow_the_partition_key_only() {
        let pk = Some("PK");
        assert_eq!(lane_of(&keys("a", "1"), pk, 1), 0);
        assert_eq!(lane_of(&keys("a", "1"), pk, 0), 0);
        for factor in 2..=MAX_PARALLELIZATION_FACTOR {
            for i in 0..50 {
                let p = format!("user-{i}");
                let lane = lane_of(&keys(&p, "User"), pk, factor);
                assert!(lane < factor);
                assert_eq!(lane_of(&keys(&p, "second"), pk, factor), lane, "same key");
            }
        }
        // Keys spread over every lane.
        let used: std::collections::BTreeSet<usize> = (0..200)
            .map(|i| lane_of(&keys(&format!("k{i}"), "s"), pk, 10))
            .collect();
        assert_eq!(used.len(), 10);
        // Stable across runs and builds (FNV-1a of "S" + the value).
        let fixed: Vec<usize> = ["a", "b", "c", "user-1"]
            .iter()
            .map(|p| lane_of(&keys(p, "s"), pk, 10))
            .collect();
        assert_eq!(fixed, FIXED_LANES);
        // A string and a number of the same text are different keys.
        let n: Item = [("PK".to_owned(), AttributeValue::N("17".into()))].into();
        let s: Item = [("PK".to_owned(), AttributeValue::S("17".into()))].into();
        assert!((2..=10).any(|f| lane_of(&n, pk, f) != lane_of(&s, pk, f)));
        // Without the partition key's name: every key attribute, so items
        // of one partition may go to different lanes.
        let lanes: std::collections::BTreeSet<usize> = (0..50)
            .map(|i| lane_of(&keys("p", &format!("s{i}")), None, 10))
            .collect();
        assert!(lanes.len() > 1);
        assert_eq!(
            lane_of(&keys("p", "s1"), None, 10),
            lane_of(&keys("p", "s1"), None, 10)
        );
    }

    /// `lane_of` of PK "a", "b", "c", "user-1" with factor 10 (checked
    /// against an FNV-1a written apart, in Python).
    const FIXED_LANES: [usize; 4] = [1, 8, 9, 1];

    #[test]
    fn split_keeps_every_record_and_each_keys_order() {
        let changes: Vec<StreamChange> =
            (1..=60).map(|s| keyed(s, &format!("p{}", s % 7))).collect();
        let one = split_by_partition_key(changes.clone(), Some("PK"), 1);
        assert_eq!(one, vec![changes.clone()]);
        let lanes = split_by_partition_key(changes.clone(), Some("PK"), 4);
        assert_eq!(lanes.len(), 4);
        assert_eq!(lanes.iter().map(Vec::len).sum::<usize>(), 60);
        let mut lane_of_key = std::collections::BTreeMap::new();
        for (l, lane) in lanes.iter().enumerate() {
            let seqs: Vec<u32> = lane
                .iter()
                .map(|c| {
                    c.sequence_number
                        .as_ref()
                        .unwrap()
                        .to_string()
                        .parse()
                        .unwrap()
                })
                .collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order: {seqs:?}");
            for c in lane {
                let pk = format!("{:?}", c.keys["PK"]);
                assert_eq!(*lane_of_key.entry(pk).or_insert(l), l, "one lane per key");
            }
        }
        assert_eq!(lane_of_key.len(), 7);
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
