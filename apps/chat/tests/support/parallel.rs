//! The event source mappings of the six tables, emulated while the
//! service writes: one follower task per table stream, polling it in real
//! time and invoking the worker with each batch, as Lambda does with a
//! `ParallelizationFactor` of `factor`.
//!
//! **Parallelization factor.** Lambda keeps a shard's records in order per
//! partition key only when the factor is above 1: it runs up to `factor`
//! batches of one shard at once, each partition key's records in one of
//! them, in order. [`handle`] emulates that: the records of a poll are cut
//! into batches of up to [`BATCH`], and each batch split by partition key
//! into up to `factor` lanes (`worker_testkit::parallel::lanes`), handled at once
//! (each its own invocation). Factor 1: one invocation after the other,
//! the shard's order.
//!
//! **Retries.** An invocation that reports a batch item failure is
//! invoked again from that record (Lambda's `ReportBatchItemFailures`),
//! after a short pause, up to [`ATTEMPTS`] times; a record rejected for
//! good (a permanent failure) is counted in [`Stats::rejected`] (the
//! worker parks those in production).
//!
//! **Reading.** [`Tail`] reads a table's stream like `worker_testkit::
//! Drain`, but survives a failed read (DynamoDB Local under load sometimes
//! fails a `GetRecords`; `Drain::read` panics then, and the records read
//! before the failure in that poll are lost with it): it opens the stream
//! again after the last record it handed out.
//!
//! A generic piece: nothing here knows the chat app beyond its
//! `EventFunction` and its table names (a candidate for `worker_testkit`,
//! beside `Drain`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chat_worker::schema::Table;
use worker_engine::runtime::EventFunction;
use worker_engine::stream::decode::SequenceNumber;
use worker_engine::stream::decode::{StreamChange, encode_event};
use worker_testkit::TestTable;
use worker_toolkit::stream_reader::{StartAt, StreamTail, local_client};

/// A table's stream, read from its beginning, reopened after a failed read.
pub struct Tail {
    endpoint: String,
    arn: String,
    tail: StreamTail,
    last: Option<SequenceNumber>,
    /// Reads that failed (and were made again).
    pub failed_reads: usize,
}

impl Tail {
    pub async fn new(table: &TestTable) -> Self {
        let arn = table
            .store
            .stream_arn()
            .await
            .expect("describe table")
            .expect("the test table has a stream");
        let tail = StreamTail::new(
            local_client(&table.endpoint),
            arn.clone(),
            StartAt::TrimHorizon,
        );
        Tail {
            endpoint: table.endpoint.clone(),
            arn,
            tail,
            last: None,
            failed_reads: 0,
        }
    }

    /// The records written since the last read.
    pub async fn read(&mut self) -> Vec<StreamChange> {
        for attempt in 0..20 {
            match self.tail.poll().await {
                Ok(records) => {
                    let records: Vec<StreamChange> = records.into_iter().map(|(_, c)| c).collect();
                    if let Some(last) = records
                        .iter()
                        .filter_map(|c| c.sequence_number.clone())
                        .max()
                    {
                        self.last = Some(last);
                    }
                    return records;
                }
                Err(e) => {
                    self.failed_reads += 1;
                    eprintln!("stream read failed (attempt {attempt}): {e}; reopening");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let start = match &self.last {
                        Some(seq) => StartAt::After(seq.clone()),
                        None => StartAt::TrimHorizon,
                    };
                    self.tail =
                        StreamTail::new(local_client(&self.endpoint), self.arn.clone(), start);
                }
            }
        }
        panic!("the stream could not be read 20 times in a row");
    }
}

/// A tail per table.
pub async fn tails(tables: &BTreeMap<Table, TestTable>) -> BTreeMap<Table, Tail> {
    let mut out = BTreeMap::new();
    for (t, table) in tables {
        out.insert(*t, Tail::new(table).await);
    }
    out
}

/// Records per batch (the mappings' `BatchSize`).
pub const BATCH: usize = 100;
/// Invocations of one batch before the test gives up.
pub const ATTEMPTS: usize = 60;

/// What the followers did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub records: usize,
    pub invocations: usize,
    /// Invocations again after a batch item failure.
    pub retries: usize,
    pub rejected: usize,
    pub malformed: usize,
}

impl Stats {
    pub fn add(&mut self, o: Stats) {
        self.records += o.records;
        self.invocations += o.invocations;
        self.retries += o.retries;
        self.rejected += o.rejected;
        self.malformed += o.malformed;
    }
}

/// One batch invoked until no record of it is to retry.
async fn invoke(app: &dyn EventFunction, batch: Vec<StreamChange>) -> Stats {
    let mut stats = Stats {
        records: batch.len(),
        ..Stats::default()
    };
    let mut pending = batch;
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            stats.retries += 1;
            tokio::time::sleep(Duration::from_millis(10 + 5 * attempt as u64)).await;
        }
        let report = app
            .invoke_stream(&encode_event(&pending, None))
            .await
            .expect("stream event");
        stats.invocations += 1;
        stats.rejected += report.rejected;
        stats.malformed += report.malformed;
        match report.batch_item_failures.first() {
            None => return stats,
            Some(seq) => {
                let failed: worker_engine::stream::decode::SequenceNumber =
                    seq.parse().expect("a sequence number");
                pending.retain(|c| c.sequence_number.as_ref().is_some_and(|s| *s >= failed));
            }
        }
    }
    panic!("a batch kept failing after {ATTEMPTS} attempts");
}

/// `records` (of one shard, in order) handled as a mapping with
/// `factor` does: batches of [`BATCH`], each split by partition key into up
/// to `factor` groups handled at once.
pub async fn handle(app: &dyn EventFunction, records: Vec<StreamChange>, factor: usize) -> Stats {
    let mut stats = Stats::default();
    for chunk in records.chunks(BATCH) {
        let runs = worker_testkit::parallel::lanes(chunk.to_vec(), Some("PK"), factor)
            .into_iter()
            .filter(|g| !g.is_empty())
            .map(|g| invoke(app, g));
        for s in futures::future::join_all(runs).await {
            stats.add(s);
        }
    }
    stats
}

/// The followers of every table's stream, running until [`Followers::stop`].
pub struct Followers {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<(Table, Tail, Stats)>>,
}

impl Followers {
    /// Start one follower per tail, invoking `app` with factor `factor`.
    pub fn start<A>(drains: BTreeMap<Table, Tail>, app: Arc<A>, factor: usize) -> Self
    where
        A: EventFunction + Send + Sync + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = drains
            .into_iter()
            .map(|(t, mut drain)| {
                let stop = stop.clone();
                let app = app.clone();
                tokio::spawn(async move {
                    let mut stats = Stats::default();
                    loop {
                        let records = drain.read().await;
                        if records.is_empty() {
                            if stop.load(Ordering::SeqCst) {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                        stats.add(handle(app.as_ref(), records, factor).await);
                    }
                    (t, drain, stats)
                })
            })
            .collect();
        Followers { stop, tasks }
    }

    /// Stop following (each follower ends once its stream has nothing
    /// new); the drains back, and what was done.
    pub async fn stop(self) -> (BTreeMap<Table, Tail>, Stats) {
        self.stop.store(true, Ordering::SeqCst);
        let mut drains = BTreeMap::new();
        let mut stats = Stats::default();
        for t in self.tasks {
            let (table, drain, s) = t.await.expect("a follower");
            drains.insert(table, drain);
            stats.add(s);
        }
        (drains, stats)
    }
}

/// Every stream handled until a whole round finds nothing new (the
/// worker's own writes come back as records); what was done.
pub async fn quiet(
    drains: &mut BTreeMap<Table, Tail>,
    app: &dyn EventFunction,
    factor: usize,
) -> Stats {
    let mut stats = Stats::default();
    for _round in 0..100 {
        let mut n = 0;
        for d in drains.values_mut() {
            let records = d.read().await;
            n += records.len();
            if !records.is_empty() {
                stats.add(handle(app, records, factor).await);
            }
        }
        if n == 0 {
            return stats;
        }
    }
    panic!("the streams did not quiet down");
}
