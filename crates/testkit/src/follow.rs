//! The worker following table streams in real time while a test's service
//! writes, as Lambda's event source mappings do: the soak tests of every
//! app (`tests/it/concurrent.rs`) run their service model against it.
//!
//! - **Reading.** A [`Tail`] reads a table's stream from its beginning
//!   like [`crate::Drain`], but survives a failed read (DynamoDB Local
//!   under load sometimes fails a `GetRecords`; `Drain::read` panics then):
//!   it opens the stream again after the last record it handed out of each
//!   shard.
//! - **Parallelization factor.** [`Mapping::handle`] cuts the records of a
//!   poll into batches of [`Mapping::batch_size`], and splits each batch by
//!   partition key into up to [`Mapping::factor`] lanes
//!   ([`crate::parallel::lanes`]) invoked at once, each partition key's
//!   records in order in one lane. Factor 1: one invocation after the
//!   other, the shard's order.
//! - **Retries.** An invocation that reports a batch item failure is
//!   invoked again from that record (`ReportBatchItemFailures`), after a
//!   short pause, up to [`Mapping::attempts`] times in a row (the
//!   toolkit's mapping, [`worker_toolkit::mapping`], which the `dev` loop
//!   and [`crate::Drain`] run too); records rejected for
//!   good or malformed are counted in [`Stats`] (the worker parks those in
//!   production).
//! - **Following.** [`Followers`] runs one task per tail until stopped;
//!   [`quiet`] then handles every stream until a round finds nothing new
//!   (the worker's own writes come back as records).
//!
//! [`CI_SEED`] is the seed such a test runs in `scripts/test`, [`soak_seeds`]
//! the further seeds of its soak (`SOAK_SEEDS=<n>`: 2 to n),
//! [`service_tasks`] its service's concurrent tasks, [`assert_no_problems`]
//! its verdict.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;

use worker_engine::EventFunction;
use worker_engine::stream::{SequenceNumber, StreamChange};
use worker_toolkit::stream_reader::{StartAt, StreamTail, local_client};

use crate::TestTable;

/// The seed `scripts/test` runs at each factor.
pub const CI_SEED: u64 = 1;

/// The seeds of the long run, after [`CI_SEED`]: 2 and 3, or 2 to n with
/// `SOAK_SEEDS=<n>`.
pub fn soak_seeds() -> Vec<u64> {
    let last = match std::env::var("SOAK_SEEDS") {
        Ok(n) => n.parse::<u64>().expect("SOAK_SEEDS=<number of seeds>"),
        Err(_) => 3,
    };
    (CI_SEED + 1..=last).collect()
}

/// `tasks` service tasks at once, task `t` with a generator of its own
/// (seeded `seed * 1000 + t`) running `work(t, rng)`, until all are done;
/// how long that took.
pub async fn service_tasks<F, Fut>(tasks: usize, seed: u64, work: F) -> Duration
where
    F: Fn(usize, StdRng) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            tokio::spawn(work(
                task,
                StdRng::seed_from_u64(seed * 1_000 + task as u64),
            ))
        })
        .collect();
    for h in handles {
        h.await.expect("a service task");
    }
    started.elapsed()
}

/// A test failure listing `problems` of the run of `seed` at `factor`,
/// unless there are none.
pub fn assert_no_problems(seed: u64, factor: usize, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "seed {seed} factor {factor}: {} problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// Failed reads in a row before a [`Tail`] gives up.
const READS: usize = 20;

/// A table's stream, read from its beginning, opened again after a failed
/// read right after the last record handed out of each shard.
pub struct Tail {
    endpoint: String,
    arn: String,
    tail: StreamTail,
    positions: HashMap<String, SequenceNumber>,
    /// Reads that failed (and were made again).
    pub failed_reads: usize,
}

impl Tail {
    /// The stream of `table` (a table with a stream), from its beginning.
    pub async fn new(table: &TestTable) -> Self {
        let (arn, tail) = table.stream_tail().await;
        Tail {
            endpoint: table.endpoint.clone(),
            tail,
            arn,
            positions: HashMap::new(),
            failed_reads: 0,
        }
    }

    /// The records written since the last read (a test failure after
    /// `READS` failed reads in a row).
    pub async fn read(&mut self) -> Vec<StreamChange> {
        for attempt in 0..READS {
            match self.tail.poll().await {
                Ok(records) => {
                    for (shard, c) in &records {
                        if let Some(s) = &c.sequence_number {
                            self.positions.insert(shard.clone(), s.clone());
                        }
                    }
                    return records.into_iter().map(|(_, c)| c).collect();
                }
                Err(e) => {
                    self.failed_reads += 1;
                    eprintln!("stream read failed (attempt {attempt}): {e}; reopening");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    self.tail = StreamTail::new(
                        local_client(&self.endpoint),
                        self.arn.clone(),
                        StartAt::TrimHorizon,
                    )
                    .resume_after(self.positions.clone());
                }
            }
        }
        panic!("the stream could not be read {READS} times in a row");
    }
}

/// What the followers did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Records handed to the mapping (each once, whatever its retries).
    pub records: usize,
    /// Invocations of the app, retries included.
    pub invocations: usize,
    /// Invocations again after a batch item failure.
    pub retries: usize,
    /// Records the worker rejected for good (parked in production).
    pub rejected: usize,
    /// Records that did not decode (parked in production).
    pub malformed: usize,
}

impl Stats {
    /// Add `o`'s counts to these (the stats of several batches or
    /// followers, summed).
    pub fn add(&mut self, o: Stats) {
        self.records += o.records;
        self.invocations += o.invocations;
        self.retries += o.retries;
        self.rejected += o.rejected;
        self.malformed += o.malformed;
    }
}

/// How an event source mapping hands a shard's records to the function.
#[derive(Debug, Clone)]
pub struct Mapping {
    /// `ParallelizationFactor`: lanes of one batch invoked at once.
    pub factor: usize,
    /// The attribute records are split into lanes by.
    pub partition_key: String,
    /// `BatchSize`: records per batch.
    pub batch_size: usize,
    /// Invocations of one batch before the test gives up.
    pub attempts: usize,
    /// How long a follower waits after a read that found nothing.
    pub idle: Duration,
}

impl Mapping {
    /// `factor` lanes by `PK`, batches of 100, 60 attempts, 50 ms idle.
    pub fn new(factor: usize) -> Self {
        Mapping {
            factor,
            partition_key: "PK".into(),
            batch_size: 100,
            attempts: 60,
            idle: Duration::from_millis(50),
        }
    }

    /// The same, waiting `idle` after a read that found nothing.
    pub fn idle(self, idle: Duration) -> Self {
        Mapping { idle, ..self }
    }

    /// `records` (of one shard, in order) handled as the mapping does:
    /// batches of [`Mapping::batch_size`], each split by partition key into
    /// up to [`Mapping::factor`] lanes invoked at once.
    pub async fn handle(&self, app: &dyn EventFunction, records: Vec<StreamChange>) -> Stats {
        let mut stats = Stats::default();
        for chunk in records.chunks(self.batch_size.max(1)) {
            stats.add(self.invoke(app, chunk).await);
        }
        stats
    }

    /// One batch, its lanes invoked at once through the toolkit's mapping
    /// ([`worker_toolkit::mapping`]) until no record of it is to retry: a
    /// lane's retry starts at its failed record, after a pause that grows
    /// with the attempts.
    async fn invoke(&self, app: &dyn EventFunction, batch: &[StreamChange]) -> Stats {
        let config =
            crate::mapping_config(batch.len(), self.factor, &self.partition_key, self.attempts);
        let mut mapping = worker_toolkit::mapping::Mapping::new(config);
        let records = batch.iter().map(|c| (String::new(), c.clone())).collect();
        let pause = |poll| Duration::from_millis(10 + 5 * poll);
        let mut stats = Stats {
            records: batch.len(),
            ..Stats::default()
        };
        for b in crate::settle(&mut mapping, records, app, pause).await {
            stats.invocations += 1;
            stats.retries += usize::from(b.attempt > 1);
            stats.rejected += b.rejected;
            stats.malformed += b.malformed;
        }
        stats
    }
}

/// The worker following streams in real time, one task per [`Tail`],
/// until [`Followers::stop`].
pub struct Followers {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<(Tail, Stats)>>,
}

impl Followers {
    /// One follower per tail, invoking `app` as `mapping` does.
    pub fn start<A>(tails: Vec<Tail>, app: Arc<A>, mapping: Mapping) -> Self
    where
        A: EventFunction + Send + Sync + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = tails
            .into_iter()
            .map(|mut tail| {
                let stop = stop.clone();
                let app = app.clone();
                let mapping = mapping.clone();
                tokio::spawn(async move {
                    let mut stats = Stats::default();
                    loop {
                        let records = tail.read().await;
                        if records.is_empty() {
                            if stop.load(Ordering::SeqCst) {
                                break;
                            }
                            tokio::time::sleep(mapping.idle).await;
                            continue;
                        }
                        stats.add(mapping.handle(app.as_ref(), records).await);
                    }
                    (tail, stats)
                })
            })
            .collect();
        Followers { stop, tasks }
    }

    /// Stop following (each follower ends once its stream has nothing
    /// new): the tails back, in the order given, and what was done.
    pub async fn stop(self) -> (Vec<Tail>, Stats) {
        self.stop.store(true, Ordering::SeqCst);
        let mut tails = Vec::new();
        let mut stats = Stats::default();
        for t in self.tasks {
            let (tail, s) = t.await.expect("a follower");
            tails.push(tail);
            stats.add(s);
        }
        (tails, stats)
    }
}

/// Every stream handled until a whole round finds nothing new (the
/// worker's own writes come back as records); what was done.
pub async fn quiet(tails: &mut [Tail], app: &dyn EventFunction, mapping: &Mapping) -> Stats {
    let mut stats = Stats::default();
    for _round in 0..100 {
        let mut n = 0;
        for tail in tails.iter_mut() {
            let records = tail.read().await;
            n += records.len();
            if !records.is_empty() {
                stats.add(mapping.handle(app, records).await);
            }
        }
        if n == 0 {
            return stats;
        }
    }
    panic!("the streams did not quiet down");
}

/// The concurrent tests of an app, one at a `ParallelizationFactor` of 1
/// and one of 10, each running `$run(seed, factor)` (an async function
/// that panics on a problem) for [`CI_SEED`]; and their soaks, ignored by
/// `scripts/test` (the long run: `-- --include-ignored`), for every seed
/// of [`soak_seeds`].
#[macro_export]
macro_rules! soak_tests {
    ($run:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn the_service_and_the_worker_at_once_one_batch_per_shard() {
            $run($crate::follow::CI_SEED, 1).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn the_service_and_the_worker_at_once_ten_batches_per_shard() {
            $run($crate::follow::CI_SEED, 10).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        #[ignore = "soak: SOAK_SEEDS=N cargo test -p PACKAGE --test it concurrent:: -- --include-ignored"]
        async fn soak_one_batch_per_shard() {
            for seed in $crate::follow::soak_seeds() {
                $run(seed, 1).await;
            }
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        #[ignore = "soak: SOAK_SEEDS=N cargo test -p PACKAGE --test it concurrent:: -- --include-ignored"]
        async fn soak_ten_batches_per_shard() {
            for seed in $crate::follow::soak_seeds() {
                $run(seed, 10).await;
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;
    use aws_sdk_dynamodb::types::AttributeValue;
    use serde_json::Value;
    use worker_engine::InvokeError;
    use worker_engine::stream::BatchReport;
    use worker_engine::stream::ChangeKind;

    use super::*;

    fn change(seq: u32) -> StreamChange {
        StreamChange {
            event_id: format!("e{seq}"),
            kind: ChangeKind::Insert,
            sequence_number: Some(seq.to_string().parse().unwrap()),
            approximate_creation: None,
            keys: [("PK".to_owned(), AttributeValue::S(format!("p{}", seq % 3)))].into(),
            old_image: None,
            new_image: None,
            event_source_arn: None,
            size_bytes: None,
            typed: None,
        }
    }

    /// Fails record 3 once; notes the first record of every invocation.
    struct FailsThreeOnce(Mutex<(bool, Vec<String>)>);

    #[async_trait]
    impl EventFunction for FailsThreeOnce {
        async fn invoke_stream(&self, event: &Value) -> Result<BatchReport, InvokeError> {
            let mut seen = self.0.lock().unwrap();
            let seqs: Vec<&str> = event["Records"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["dynamodb"]["SequenceNumber"].as_str().unwrap())
                .collect();
            seen.1.push(seqs[0].to_owned());
            let mut report = BatchReport::default();
            if !seen.0 && seqs.contains(&"3") {
                seen.0 = true;
                report.batch_item_failures = vec!["3".to_owned()];
            }
            Ok(report)
        }

        async fn invoke_schedule(&self, _: &Value) -> Result<Value, InvokeError> {
            Ok(Value::Null)
        }
    }

    #[tokio::test]
    async fn a_batch_item_failure_is_retried_from_that_record() {
        let app = FailsThreeOnce(Mutex::new((false, Vec::new())));
        let mapping = Mapping {
            batch_size: 4,
            ..Mapping::new(1)
        };
        let stats = mapping.handle(&app, (1..=6).map(change).collect()).await;
        // Batches 1..=4 (fails at 3), 3..=4 again, then 5..=6.
        assert_eq!(app.0.lock().unwrap().1, ["1", "3", "5"]);
        assert_eq!((stats.records, stats.invocations, stats.retries), (6, 3, 1));
    }
}
