//! Lambda's event source mapping for a DynamoDB stream, written once: the
//! `dev` loop ([`crate::replay::dev::EventSourceLoop`]) runs it over a live
//! stream, the test kit's drain over a test table's. [`Mapping`] holds the
//! records read and not done yet; [`Mapping::poll`] queues what the stream
//! gave and invokes the function with every batch that is ready. The
//! rules:
//!
//! - **Batch cut.** A batch holds up to `batch_size` records of **one
//!   shard, in order**; a shard's records wait for the batching window
//!   unless a full batch is there. Shards are served in the order they were
//!   first seen, and a shard with records still pending blocks the shards
//!   after it (so a child shard never overtakes its parent).
//! - **Partial-batch responses.** A response with `batchItemFailures`
//!   (`ReportBatchItemFailures`) checkpoints before the lowest failed
//!   record: the next attempt starts **at that sequence number**, with up
//!   to a full batch (with `bisect_on_error`, only the rest of the
//!   batch).
//! - **Retry and bisect.** A function error (or a response asking for a
//!   whole-batch retry) retries the whole batch; with `bisect_on_error`
//!   (`BisectBatchOnFunctionError`) the batch is split in two and the first
//!   half is retried. A failed batch's retry waits for the next
//!   [`Mapping::poll`].
//! - **Giving up.** After `max_retries` failed retries of the same first
//!   record, the failing records are discarded (logged), as Lambda does
//!   once its `MaximumRetryAttempts` is exhausted. Progress (records done
//!   before the failed one) starts the count again.
//! - **Parallelization lanes.** With a `parallelization_factor` N above 1
//!   (`ParallelizationFactor`), each shard's records are split by a hash of
//!   their partition key ([`lane_of`]) into N batch streams ("lanes"): each
//!   lane is batched, invoked, retried (from its own first failed sequence
//!   number) and given up on by itself, the lanes of a shard concurrently,
//!   so a failing lane holds back only its own keys; order is kept per
//!   partition key, not across keys.
//! - **Checkpoints.** A shard's checkpoint ([`Mapping::checkpoints`]) is
//!   the last record before the first one not done (handled or discarded)
//!   in any of its lanes: where a restart resumes.
//! - **Environment faults.** An invocation that fails with an
//!   [`EnvironmentFault`] stops its lane at once: not a retry, nothing
//!   checkpointed or discarded ([`PollReport::environment_fault`]).
//!
//! [`decide`] is the pure decision after each invocation; every attempt
//! leaves a [`BatchLog`].

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;

use worker_engine::item::Item;
use worker_engine::stream::BatchReport;
use worker_engine::stream::{SequenceNumber, StreamChange, encode_event};

/// The function the mapping invokes, as Lambda would, and why an
/// invocation failed.
pub use worker_engine::{EventFunction, InvokeError};

/// The invocation failed because of the deployment, not the records (a
/// missing table or index, access denied: [`worker_engine::FailureKind`]).
/// A function returns it as its [`InvokeError`]; the mapping stops the
/// lane at once instead of retrying and discarding the batch, since every
/// retry would meet the same fault ([`PollReport::environment_fault`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("environment fault: {0}")]
pub struct EnvironmentFault(pub String);

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
    PartialFailure {
        /// The lowest sequence number the response reported failed.
        failed_sequence: String,
    },
    /// The response asked for the whole batch again (a record without a
    /// sequence number failed).
    WholeBatchRetry,
    /// The invocation failed.
    FunctionError {
        /// The error the invocation returned, as text.
        error: String,
    },
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
        /// The sequence number of the first record to invoke again; `None`
        /// when that record has none.
        from_sequence: Option<String>,
        /// The most records the next invocation takes (at least 1; fewer
        /// than a full batch when bisecting on error).
        records: usize,
    },
    /// Give up on `records` records starting at `from_sequence`.
    Discard {
        /// The sequence number of the first record given up on; `None`
        /// when that record has none.
        from_sequence: Option<String>,
        /// How many records are given up on (the rest of the batch).
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
    /// What the loop does next.
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
    /// The id of the stream shard the batch was read from.
    pub shard: String,
    /// The shard's lane (from 0) with a parallelization factor above 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lane: Option<usize>,
    /// 1 for the first attempt of the batch's first record, 2 for its
    /// first retry, ...
    pub attempt: u32,
    /// Records in the batch.
    pub records: usize,
    /// The sequence number of the batch's first record (`None`: it has
    /// none).
    pub first_sequence: Option<String>,
    /// The sequence number of the batch's last record (`None`: it has
    /// none).
    pub last_sequence: Option<String>,
    /// Records the function handled (0 when the invocation failed).
    pub handled: usize,
    /// Records the function skipped (nothing to do for the app).
    pub skipped: usize,
    /// Skipped as not the app's.
    pub foreign: usize,
    /// Records the function rejected: failed for good (parked when a
    /// parking table is set).
    pub rejected: usize,
    /// Records that did not decode (parked when a parking table is set).
    pub malformed: usize,
    /// What the function answered.
    #[serde(flatten)]
    pub invocation: Invocation,
    /// What the loop did after it.
    #[serde(flatten)]
    pub action: Action,
    /// The function's report (`None`: the invocation failed).
    #[serde(skip)]
    pub report: Option<BatchReport>,
}

impl BatchLog {
    /// The log of attempt `attempt` of `batch`, on `shard` (and `lane`):
    /// the function's answer and the `decision` that followed.
    fn new(
        (shard, lane): (&str, Option<usize>),
        attempt: u32,
        batch: &[StreamChange],
        (invocation, report): (Invocation, Option<BatchReport>),
        decision: &Decision,
    ) -> Self {
        let seq = |c: Option<&StreamChange>| {
            c.and_then(|c| c.sequence_number.as_ref())
                .map(|s| s.to_string())
        };
        let count = |f: fn(&BatchReport) -> usize| report.as_ref().map_or(0, f);
        BatchLog {
            shard: shard.to_owned(),
            lane,
            attempt,
            records: batch.len(),
            first_sequence: seq(batch.first()),
            last_sequence: seq(batch.last()),
            handled: count(|r| r.handled),
            skipped: count(|r| r.skipped),
            foreign: count(|r| r.foreign),
            rejected: count(|r| r.rejected),
            malformed: count(|r| r.malformed),
            invocation,
            action: decision.action.clone(),
            report,
        }
    }

    /// The line, logged: an error for records discarded, a warning for a
    /// retry.
    fn trace(&self) {
        match &self.action {
            Action::Discard { .. } => tracing::error!("{}", self.line()),
            Action::Retry { .. } => tracing::warn!("{}", self.line()),
            Action::Checkpoint => tracing::info!("{}", self.line()),
        }
    }

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

/// What one [`Mapping::poll`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollReport {
    /// New records read from the stream.
    pub read: usize,
    /// Invocations made, lane by lane of each shard.
    pub batches: Vec<BatchLog>,
    /// An invocation met an environment fault: its lane stopped there, the
    /// batch not counted as a retry and not checkpointed.
    pub environment_fault: Option<String>,
}

/// The event source mapping over the records read so far: each shard's
/// lanes of records not done yet, and each shard's checkpoint.
pub struct Mapping {
    config: MappingConfig,
    shards: Vec<ShardQueue>,
    /// The last record done (handled or discarded) per shard.
    checkpoints: BTreeMap<String, SequenceNumber>,
}

impl Mapping {
    /// A mapping with nothing read yet, run with `config`.
    pub fn new(config: MappingConfig) -> Self {
        Mapping {
            config,
            shards: Vec::new(),
            checkpoints: BTreeMap::new(),
        }
    }

    /// The settings it runs with.
    pub fn config(&self) -> &MappingConfig {
        &self.config
    }

    /// The last record done per shard (handled, or discarded after the
    /// retries): what a restart resumes after.
    pub fn checkpoints(&self) -> &BTreeMap<String, SequenceNumber> {
        &self.checkpoints
    }

    /// Records pushed and not done yet.
    pub fn pending(&self) -> usize {
        self.shards.iter().map(ShardQueue::pending).sum()
    }

    /// Queue the records read from the stream, `(shard id, change)` each
    /// shard's in order, into their shards' lanes ([`lane_of`]), their
    /// batching window starting now; then invoke `function` with every
    /// batch that is ready, shard by shard in the order they were first
    /// seen, until a shard keeps records pending (its retry, or its
    /// batching window, waits for the next poll).
    pub async fn poll(
        &mut self,
        records: Vec<(String, StreamChange)>,
        function: &dyn EventFunction,
    ) -> PollReport {
        let mut out = PollReport {
            read: records.len(),
            ..PollReport::default()
        };
        self.push(records);
        for queue in &mut self.shards {
            queue.run(&self.config, function, &mut out).await;
            if let Some(seq) = queue.checkpoint() {
                self.checkpoints.insert(queue.shard.clone(), seq);
            }
            if queue.pending() > 0 {
                // Later shards wait (parents before children).
                break;
            }
        }
        self.shards.retain(|q| q.pending() > 0);
        out
    }

    fn push(&mut self, records: Vec<(String, StreamChange)>) {
        let now = Instant::now();
        let factor = self.config.parallelization_factor.max(1);
        for (shard, change) in records {
            let i = match self.shards.iter().position(|q| q.shard == shard) {
                Some(i) => i,
                None => {
                    let full = self.config.batch_size.max(1);
                    self.shards.push(ShardQueue::new(shard, factor, full));
                    self.shards.len() - 1
                }
            };
            let lane = lane_of(&change.keys, self.config.partition_key.as_deref(), factor);
            self.shards[i].push(lane, now, change);
        }
    }
}

/// One shard's records not checkpointed yet.
struct ShardQueue {
    shard: String,
    lanes: Vec<Lane>,
    /// Every record pushed and not checkpointed yet, in shard order: its
    /// sequence number and whether it is done (handled or discarded).
    order: VecDeque<(Option<SequenceNumber>, bool)>,
    /// The position in the shard of `order`'s first record.
    front: u64,
}

impl ShardQueue {
    fn new(shard: String, factor: usize, full: usize) -> Self {
        let lane = || Lane {
            pending: VecDeque::new(),
            retries: 0,
            limit: full,
        };
        ShardQueue {
            shard,
            lanes: (0..factor).map(|_| lane()).collect(),
            order: VecDeque::new(),
            front: 0,
        }
    }

    fn pending(&self) -> usize {
        self.lanes.iter().map(|l| l.pending.len()).sum()
    }

    fn push(&mut self, lane: usize, now: Instant, change: StreamChange) {
        let position = self.front + self.order.len() as u64;
        self.order
            .push_back((change.sequence_number.clone(), false));
        self.lanes[lane].pending.push_back((now, position, change));
    }

    /// Invoke with the ready batches of every lane, the lanes concurrently
    /// (a failed batch's retry waits for the next poll).
    async fn run(
        &mut self,
        config: &MappingConfig,
        function: &dyn EventFunction,
        out: &mut PollReport,
    ) {
        let parallel = self.lanes.len() > 1;
        let shard = self.shard.as_str();
        let runs = futures::future::join_all(
            self.lanes
                .iter_mut()
                .enumerate()
                .map(|(k, lane)| lane.run(shard, parallel.then_some(k), config, function)),
        )
        .await;
        for run in runs {
            out.batches.extend(run.logs);
            if out.environment_fault.is_none() {
                out.environment_fault = run.fault;
            }
            for position in run.done {
                self.order[(position - self.front) as usize].1 = true;
            }
        }
    }

    /// Drop the records done at the front: the new checkpoint, the last
    /// record before the first one not done (`None`: it did not move).
    fn checkpoint(&mut self) -> Option<SequenceNumber> {
        let mut last = None;
        while let Some((seq, true)) = self.order.front() {
            last = seq.clone().or(last);
            self.order.pop_front();
            self.front += 1;
        }
        last
    }
}

/// One of a shard's batch streams (all of it with a parallelization factor
/// of 1).
struct Lane {
    /// Records not done yet: the time each arrived, its position in the
    /// shard, the record.
    pending: VecDeque<(Instant, u64, StreamChange)>,
    /// Failed attempts of the first pending record.
    retries: u32,
    /// Most records in the next batch.
    limit: usize,
}

/// What one lane's turn did.
#[derive(Default)]
struct LaneRun {
    logs: Vec<BatchLog>,
    /// Positions of the records done.
    done: Vec<u64>,
    /// An environment fault stopped the lane.
    fault: Option<String>,
}

impl Lane {
    /// Invoke with the ready batches, one after the other, until none is
    /// ready or a batch must be retried.
    async fn run(
        &mut self,
        shard: &str,
        lane: Option<usize>,
        config: &MappingConfig,
        function: &dyn EventFunction,
    ) -> LaneRun {
        let mut out = LaneRun::default();
        while let Some(batch) = self.next_batch(config) {
            let answer = match invoke(function, &batch).await {
                Ok(answer) => answer,
                Err(fault) => {
                    return LaneRun {
                        fault: Some(fault.0),
                        ..out
                    };
                }
            };
            let decision = decide(&batch, &answer.0, self.retries, config);
            let log = BatchLog::new((shard, lane), self.retries + 1, &batch, answer, &decision);
            log.trace();
            out.logs.push(log);
            let done = self.pending.drain(..decision.done + decision.discarded);
            out.done.extend(done.map(|(_, position, _)| position));
            self.retries = decision.retries;
            self.limit = decision.next_limit;
            if matches!(decision.action, Action::Retry { .. }) {
                return out;
            }
        }
        out
    }

    /// The next batch, if one is ready: a retry, a full batch, or records
    /// that waited out the batching window.
    fn next_batch(&self, config: &MappingConfig) -> Option<Vec<StreamChange>> {
        let (arrived, _, _) = self.pending.front()?;
        let ready = self.retries > 0
            || self.pending.len() >= self.limit
            || arrived.elapsed() >= config.batching_window;
        let n = self.limit.min(config.batch_size.max(1));
        ready.then(|| {
            self.pending
                .iter()
                .take(n)
                .map(|(_, _, c)| c.clone())
                .collect()
        })
    }
}

/// The function's answer to `batch` as Lambda reads it (with the report,
/// unless the invocation failed), or the environment fault it met.
async fn invoke(
    function: &dyn EventFunction,
    batch: &[StreamChange],
) -> Result<(Invocation, Option<BatchReport>), EnvironmentFault> {
    match function.invoke_stream(&encode_event(batch, None)).await {
        Ok(r) if r.retry_whole_batch => Ok((Invocation::WholeBatchRetry, Some(r))),
        Ok(r) => {
            let invocation = match lowest(&r.batch_item_failures) {
                Some(failed_sequence) => Invocation::PartialFailure { failed_sequence },
                None => Invocation::Succeeded,
            };
            Ok((invocation, Some(r)))
        }
        Err(error) => match error.downcast::<EnvironmentFault>() {
            Ok(fault) => Err(*fault),
            Err(error) => Ok((
                Invocation::FunctionError {
                    error: error.to_string(),
                },
                None,
            )),
        },
    }
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use worker_engine::stream::ChangeKind;

    /// A record of key `k<seq>` at sequence number `seq`.
    pub(crate) fn change(seq: u32) -> StreamChange {
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
            typed: None,
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

    fn keys(pk: &str, sk: &str) -> Item {
        [
            ("PK".to_owned(), AttributeValue::S(pk.to_owned())),
            ("SK".to_owned(), AttributeValue::S(sk.to_owned())),
        ]
        .into()
    }

    /// Record `seq` of item (`pk`, `s<seq>`).
    pub(crate) fn keyed(seq: u32, pk: &str) -> StreamChange {
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
}
