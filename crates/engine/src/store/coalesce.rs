//! [`Coalescing`]: a store decorator that lets concurrent callers share
//! requests. The stream engine handles many items at once, and each item's
//! handler makes a few small requests; sent one by one they cost a round
//! trip each. Here
//!
//! - point reads ([`ItemReader::get`]) waiting at the same moment go out as
//!   one BatchGetItem (up to 100 keys, strongly consistent reads apart from
//!   eventually consistent ones). A BatchGetItem with `ConsistentRead`
//!   answers exactly what the same GetItems would. A key that several
//!   callers wait for is read once and each gets the item;
//! - whole-partition queries ([`QuerySpec::partition`], on the table or an
//!   index) waiting at the same moment go out as one
//!   [`QueryStore::query_partitions`] (a PartiQL `SELECT ... WHERE key IN
//!   [..]`, up to 50 partitions): the same items, one request. A partition
//!   that several callers wait for is read once;
//! - unconditional batch writes ([`BatchWriter::batch_write`]) waiting at the
//!   same moment go out in shared BatchWriteItem requests (25 items, never
//!   two on one key). A caller's own writes keep their order: its chunk
//!   *n + 1* is queued only once chunk *n* is written, so "the first error
//!   stops the rest" still holds per caller;
//! - guarded writes ([`GuardedWriter::write_guarded`]) waiting at the same
//!   moment go out in shared `TransactWriteItems` requests: the guards of
//!   every caller (a guard several callers share, once) beside all their
//!   writes, at most 100 actions and never two actions on one item. The
//!   shared transaction lands only if *every* caller's guards hold; when it
//!   is cancelled, each caller's part is sent once more on its own, so a
//!   caller whose guards held is never withheld because of another's. A
//!   caller's own sequence keeps its semantics: its transaction *n + 1* is
//!   queued only once transaction *n* landed, and a guard that fails stops
//!   it. A write with a condition of its own goes alone, as without
//!   sharing;
//! - everything else (other queries, scans, conditional or single writes)
//!   passes straight through.
//!
//! Requests waiting together are gathered by a flusher task: the first
//! caller that finds the queue idle spawns it; it sends what is queued (up to
//! four requests of each kind at once), answers every caller,
//! and repeats while anything arrived meanwhile.
//!
//! **Gathering a poll pass.** When the callers are futures polled by one
//! task (the stream engine's lanes), wrap that task's future in
//! [`Coalescing::gathered`]. A flusher then takes its queue only once the
//! task has finished a whole poll after the last answer was delivered: every
//! caller that an answer let run on has queued its next request, so each
//! round of reads of the whole batch goes out as one request per kind
//! (without it, the flusher, running on another thread, would take the
//! queue while the task is still polling and send a round in pieces). A
//! flusher waits at most [`MAX_GATHER`]. Outside a gathered future nothing
//! waits: a lone request goes out at once.
//!
//! When a shared request fails, each caller's part is sent once more on its
//! own and the caller gets that outcome: a bad key or a failing item of one
//! caller never fails (or, for a permanent error, discards) another
//! caller's record, so the failure Lambda hears about is the record that
//! really failed.
//!
//! Free of table specifics: the key attribute names are given.
//!
//! [`ItemReader::get`]: super::ItemReader::get
//! [`QueryStore::query_partitions`]: super::QueryStore::query_partitions
//! [`BatchWriter::batch_write`]: super::BatchWriter::batch_write
//! [`GuardedWriter::write_guarded`]: super::GuardedWriter::write_guarded

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::{Notify, oneshot};

use aws_sdk_dynamodb::types::AttributeValue;

use super::guarded::{MAX_TRANSACT_ACTIONS, guard_on_written_item, plan_transactions};
use super::{
    BatchWriteReport, Guard, GuardedOp, GuardedReport, Key, Page, QuerySpec, Reply, Request, Store,
    StoreError, WriteOp, dedupe_by_key, key_id, query_partitions_by_pages,
};
use crate::item::Item;

/// Partitions per PartiQL `IN` (the DynamoDB limit).
const PARTITION_BATCH: usize = 50;
/// Keys per BatchGetItem request (the DynamoDB limit).
const GET_BATCH: usize = 100;
/// Items per BatchWriteItem request (the DynamoDB limit).
const WRITE_BATCH: usize = 25;

/// The longest a flusher waits for a gathered poll pass to end.
pub(crate) const MAX_GATHER: Duration = Duration::from_millis(20);

/// Shares read and batch-write requests between concurrent callers (see the
/// module documentation).
pub struct Coalescing {
    inner: Arc<dyn Store>,
    key_attributes: (String, String),
    max_in_flight: usize,
    gate: Arc<Gate>,
    gets: Arc<Queue<GetJob>>,
    partitions: Arc<Queue<PartitionJob>>,
    writes: Arc<Queue<WriteJob>>,
    guarded: Arc<Queue<GuardedJob>>,
}

/// One whole-partition query, and every caller waiting for it.
struct PartitionJob {
    index: Option<String>,
    attribute: String,
    value: AttributeValue,
    consistent: bool,
    replies: Vec<oneshot::Sender<Result<Page, StoreError>>>,
}

impl PartitionJob {
    /// What makes two queries the same query.
    fn same(&self) -> String {
        format!(
            "{:?}\u{1f}{}\u{1f}{}\u{1f}{:?}",
            self.index, self.attribute, self.consistent, self.value
        )
    }

    /// Answer every caller: each gets its share of the consumed capacity.
    fn answer(self, answer: Result<Page, StoreError>) {
        let n = self.replies.len() as f64;
        let answer = answer.map(|mut page| {
            page.consumed_capacity /= n;
            page
        });
        answer_all(self.replies, answer);
    }
}

/// A queue's flusher: sends what is queued until the queue stays empty.
type Flusher<J, F> = fn(Arc<dyn Store>, Arc<Queue<J>>, Arc<Gate>, usize) -> F;

/// What a flusher waits for before it takes its queue, when a gathered
/// future ([`Coalescing::gathered`]) is alive: no poll of one in progress,
/// no shared request being answered, and a whole poll pass since the last
/// answer (its callers have all run on and queued their next requests).
#[derive(Default)]
struct Gate {
    /// Gathered futures alive.
    live: AtomicUsize,
    /// Gathered futures in the middle of a poll.
    polling: AtomicUsize,
    /// Shared requests whose callers are being answered.
    answering: AtomicUsize,
    /// Shared requests answered so far.
    answered: AtomicU64,
    /// `answered` as it was when the last complete poll pass began.
    seen: AtomicU64,
    changed: Notify,
}

impl Gate {
    fn settled(&self) -> bool {
        self.live.load(Ordering::SeqCst) == 0
            || (self.polling.load(Ordering::SeqCst) == 0
                && self.answering.load(Ordering::SeqCst) == 0
                && self.seen.load(Ordering::SeqCst) >= self.answered.load(Ordering::SeqCst))
    }

    /// Wait until [`Gate::settled`] (at most [`MAX_GATHER`]).
    async fn pass_end(&self) {
        let give_up = tokio::time::sleep(MAX_GATHER);
        tokio::pin!(give_up);
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.settled() {
                return;
            }
            tokio::select! {
                _ = &mut changed => {}
                _ = &mut give_up => return,
            }
        }
    }

    /// Held while a shared request's callers are answered.
    fn answering(&self) -> Answering<'_> {
        self.answering.fetch_add(1, Ordering::SeqCst);
        Answering(self)
    }
}

/// See [`Gate::answering`].
struct Answering<'a>(&'a Gate);

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.0.answered.fetch_add(1, Ordering::SeqCst);
        self.0.answering.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// A future whose poll passes a `Gate` waits for
/// ([`Coalescing::gathered`]).
pub struct Gathered<F> {
    inner: Pin<Box<F>>,
    gate: Arc<Gate>,
}

impl<F: Future> Future for Gathered<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let gate = &this.gate;
        let answered = gate.answered.load(Ordering::SeqCst);
        gate.polling.fetch_add(1, Ordering::SeqCst);
        let out = this.inner.as_mut().poll(cx);
        if gate.polling.fetch_sub(1, Ordering::SeqCst) == 1 {
            gate.seen.fetch_max(answered, Ordering::SeqCst);
        }
        gate.changed.notify_waiters();
        out
    }
}

impl<F> Drop for Gathered<F> {
    fn drop(&mut self) {
        self.gate.live.fetch_sub(1, Ordering::SeqCst);
        self.gate.changed.notify_waiters();
    }
}

/// One point read, and every caller waiting for it.
struct GetJob {
    key: Key,
    /// The key's identity ([`super::key_id`]).
    id: String,
    consistent: bool,
    replies: Vec<oneshot::Sender<Result<Option<Item>, StoreError>>>,
}

impl GetJob {
    /// What makes two reads the same read.
    fn same(&self) -> String {
        format!("{}\u{1f}{}", self.consistent, self.id)
    }
}

/// Send every caller the same answer.
fn answer_all<T: Clone>(replies: Vec<oneshot::Sender<T>>, answer: T) {
    for reply in replies {
        let _ = reply.send(answer.clone());
    }
}

/// Merge the jobs that ask the same (`same`) into one, their callers
/// together, first come first: a key or a partition that several callers
/// want in one round is read once.
fn merge<J, T>(
    jobs: Vec<J>,
    same: impl Fn(&J) -> String,
    replies: impl Fn(&mut J) -> &mut Vec<oneshot::Sender<T>>,
) -> Vec<J> {
    let mut out: Vec<J> = Vec::with_capacity(jobs.len());
    let mut at: HashMap<String, usize> = HashMap::new();
    for mut job in jobs {
        match at.entry(same(&job)) {
            Entry::Occupied(e) => {
                let more = std::mem::take(replies(&mut job));
                replies(&mut out[*e.get()]).extend(more);
            }
            Entry::Vacant(e) => {
                e.insert(out.len());
                out.push(job);
            }
        }
    }
    out
}

/// One caller's chunk of writes: at most 25, on distinct keys.
struct WriteJob {
    ops: Vec<WriteOp>,
    keys: Vec<String>,
    reply: oneshot::Sender<Result<WriteShare, StoreError>>,
}

/// A caller's part of a shared BatchWriteItem.
struct WriteShare {
    requests: u32,
    retried_items: usize,
    consumed_capacity: f64,
}

/// One transaction of a caller's guarded writes: its guards and at most
/// `100 - guards` unconditional writes on distinct keys.
struct GuardedJob {
    guards: Vec<Guard>,
    ops: Vec<GuardedOp>,
    /// Key identities of the guards and of the writes.
    guard_ids: Vec<String>,
    write_ids: Vec<String>,
    reply: oneshot::Sender<Result<GuardedReport, StoreError>>,
}

/// Callers sharing one transaction: their guards (each item once) and
/// writes.
#[derive(Default)]
struct SharedTransaction {
    guards: HashMap<String, Guard>,
    writes: std::collections::HashSet<String>,
    jobs: Vec<GuardedJob>,
}

impl SharedTransaction {
    fn actions(&self) -> usize {
        self.guards.len() + self.writes.len()
    }

    /// Whether `job` can join: room for its new guards and its writes, no
    /// item written twice or both written and checked, and a guard on an
    /// item already checked only if it is the same condition.
    fn fits(&self, job: &GuardedJob) -> bool {
        let mut new_guards = 0;
        for (id, guard) in job.guard_ids.iter().zip(&job.guards) {
            match self.guards.get(id) {
                Some(g) if g != guard => return false,
                Some(_) => {}
                None if self.writes.contains(id) => return false,
                None => new_guards += 1,
            }
        }
        let clash = job
            .write_ids
            .iter()
            .any(|id| self.writes.contains(id) || self.guards.contains_key(id));
        !clash && self.actions() + new_guards + job.write_ids.len() <= MAX_TRANSACT_ACTIONS
    }

    fn add(&mut self, job: GuardedJob) {
        for (id, guard) in job.guard_ids.iter().zip(&job.guards) {
            self.guards
                .entry(id.clone())
                .or_insert_with(|| guard.clone());
        }
        self.writes.extend(job.write_ids.iter().cloned());
        self.jobs.push(job);
    }
}

/// Pack guarded jobs into shared transactions: first fit.
fn pack_guarded(jobs: Vec<GuardedJob>) -> Vec<Vec<GuardedJob>> {
    let mut out: Vec<SharedTransaction> = Vec::new();
    for job in jobs {
        match out.iter_mut().find(|t| t.fits(&job)) {
            Some(t) => t.add(job),
            None => {
                let mut t = SharedTransaction::default();
                t.add(job);
                out.push(t);
            }
        }
    }
    out.into_iter().map(|t| t.jobs).collect()
}

/// Send one caller's transaction on its own and answer it.
async fn guarded_alone(inner: &dyn Store, job: GuardedJob) {
    let answer = inner.write_guarded(&job.guards, job.ops).await;
    let _ = job.reply.send(answer);
}

/// Send queued guarded transactions until the queue stays empty.
async fn flush_guarded(
    inner: Arc<dyn Store>,
    queue: Arc<Queue<GuardedJob>>,
    gate: Arc<Gate>,
    max_in_flight: usize,
) {
    while let Some(jobs) = gather(&queue, &gate).await {
        futures::stream::iter(pack_guarded(jobs))
            .for_each_concurrent(max_in_flight, |jobs| {
                let inner = inner.clone();
                let gate = gate.clone();
                async move {
                    if jobs.len() == 1 {
                        let job = jobs.into_iter().next().expect("one job");
                        let answer = inner.write_guarded(&job.guards, job.ops).await;
                        let _answering = gate.answering();
                        let _ = job.reply.send(answer);
                        return;
                    }
                    let mut seen = std::collections::HashSet::new();
                    let guards: Vec<Guard> = jobs
                        .iter()
                        .flat_map(|j| j.guard_ids.iter().zip(&j.guards))
                        .filter(|(id, _)| seen.insert(id.as_str()))
                        .map(|(_, g)| g.clone())
                        .collect();
                    let ops: Vec<GuardedOp> = jobs.iter().flat_map(|j| j.ops.clone()).collect();
                    let total = ops.len();
                    let answer = inner.write_guarded(&guards, ops).await;
                    let _answering = gate.answering();
                    match answer {
                        Ok(r) if r.held() && r.applied == total && r.requests == 1 => {
                            for job in jobs {
                                let part = job.ops.len() as f64 / total.max(1) as f64;
                                let _ = job.reply.send(Ok(GuardedReport {
                                    applied: job.ops.len(),
                                    requests: 1,
                                    consumed_capacity: r.consumed_capacity * part,
                                    ..Default::default()
                                }));
                            }
                        }
                        // A guard of one caller failed (or the request did):
                        // each caller decides on its own guards alone.
                        _ => {
                            for job in jobs {
                                guarded_alone(inner.as_ref(), job).await;
                            }
                        }
                    }
                }
            })
            .await;
    }
}

/// Jobs waiting for the flusher, and whether one is running.
struct Queue<J> {
    state: Mutex<(Vec<J>, bool)>,
}

impl<J> Queue<J> {
    fn new() -> Self {
        Queue {
            state: Mutex::new((Vec::new(), false)),
        }
    }

    /// Queue `job`; true when the caller must start the flusher.
    fn push(&self, job: J) -> bool {
        let mut state = self.state.lock().expect("coalescing queue");
        state.0.push(job);
        !std::mem::replace(&mut state.1, true)
    }

    /// Everything queued, or `None` (and the flusher is marked stopped).
    fn take(&self) -> Option<Vec<J>> {
        let mut state = self.state.lock().expect("coalescing queue");
        if state.0.is_empty() {
            state.1 = false;
            None
        } else {
            Some(std::mem::take(&mut state.0))
        }
    }
}

/// A caller was dropped or the flusher died: the request's fate is unknown,
/// so the caller must retry.
fn lost(operation: &'static str) -> StoreError {
    StoreError::Transient {
        operation,
        code: "CoalescedRequestLost".into(),
        message: "the shared request ended without an answer".into(),
    }
}

impl Coalescing {
    /// Coalesce requests to `inner`, a table keyed by `key_attributes`
    /// (partition, sort).
    pub fn new(inner: Arc<dyn Store>, key_attributes: (&str, &str)) -> Self {
        Coalescing {
            inner,
            key_attributes: (key_attributes.0.to_owned(), key_attributes.1.to_owned()),
            max_in_flight: 4,
            gate: Arc::default(),
            gets: Arc::new(Queue::new()),
            partitions: Arc::new(Queue::new()),
            writes: Arc::new(Queue::new()),
            guarded: Arc::new(Queue::new()),
        }
    }

    /// Run `future` (a task that polls many callers, such as a stream
    /// batch) so that the requests its callers queue in one poll pass go out
    /// together (see the module documentation).
    pub fn gathered<F: Future>(&self, future: F) -> Gathered<F> {
        self.gate.live.fetch_add(1, Ordering::SeqCst);
        Gathered {
            inner: Box::pin(future),
            gate: self.gate.clone(),
        }
    }

    fn keys(&self) -> (&str, &str) {
        (&self.key_attributes.0, &self.key_attributes.1)
    }

    /// Queue `job`; the first job to find the queue idle starts its flusher.
    fn enqueue<J, F>(&self, queue: &Arc<Queue<J>>, job: J, flush: Flusher<J, F>)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        if queue.push(job) {
            tokio::spawn(flush(
                self.inner.clone(),
                queue.clone(),
                self.gate.clone(),
                self.max_in_flight,
            ));
        }
    }

    /// Queue one chunk of writes and wait for its share.
    async fn write_chunk(&self, ops: Vec<WriteOp>) -> Result<WriteShare, StoreError> {
        let keys = ops.iter().map(|op| op.key_id(self.keys())).collect();
        let (reply, answer) = oneshot::channel();
        self.enqueue(&self.writes, WriteJob { ops, keys, reply }, flush_writes);
        answer.await.map_err(|_| lost("BatchWriteItem"))?
    }
}

/// What is queued once the current gathered poll pass has ended.
async fn gather<J>(queue: &Queue<J>, gate: &Gate) -> Option<Vec<J>> {
    gate.pass_end().await;
    queue.take()
}

/// Send queued reads until the queue stays empty.
async fn flush_gets(
    inner: Arc<dyn Store>,
    queue: Arc<Queue<GetJob>>,
    gate: Arc<Gate>,
    max_in_flight: usize,
) {
    while let Some(jobs) = gather(&queue, &gate).await {
        let jobs = merge(jobs, GetJob::same, |j| &mut j.replies);
        let (consistent, eventual): (Vec<GetJob>, Vec<GetJob>) =
            jobs.into_iter().partition(|j| j.consistent);
        let mut requests: Vec<(bool, Vec<GetJob>)> = Vec::new();
        for (flag, mut jobs) in [(true, consistent), (false, eventual)] {
            while !jobs.is_empty() {
                let rest = jobs.split_off(jobs.len().min(GET_BATCH));
                requests.push((flag, std::mem::replace(&mut jobs, rest)));
            }
        }
        futures::stream::iter(requests)
            .for_each_concurrent(max_in_flight, |(consistent, jobs)| {
                let inner = inner.clone();
                let gate = gate.clone();
                async move {
                    let keys: Vec<Key> = jobs.iter().map(|j| j.key.clone()).collect();
                    let answer = inner.get_many(&keys, consistent).await;
                    let _answering = gate.answering();
                    match answer {
                        Ok(items) => {
                            for (job, item) in jobs.into_iter().zip(items) {
                                answer_all(job.replies, Ok(item));
                            }
                        }
                        Err(e) if jobs.len() == 1 => {
                            let job = jobs.into_iter().next().expect("one job");
                            answer_all(job.replies, Err(e));
                        }
                        Err(_) => {
                            for job in jobs {
                                let alone = inner
                                    .get_many(std::slice::from_ref(&job.key), consistent)
                                    .await
                                    .map(|mut items| items.pop().flatten());
                                answer_all(job.replies, alone);
                            }
                        }
                    }
                }
            })
            .await;
    }
}

/// The one page answering a whole-partition query.
fn whole_partition(items: Vec<Item>, consumed_capacity: f64) -> Page {
    Page {
        scanned_count: items.len() as i32,
        items,
        last_evaluated_key: None,
        consumed_capacity,
    }
}

/// Send queued partition queries until the queue stays empty.
async fn flush_partitions(
    inner: Arc<dyn Store>,
    queue: Arc<Queue<PartitionJob>>,
    gate: Arc<Gate>,
    max_in_flight: usize,
) {
    while let Some(jobs) = gather(&queue, &gate).await {
        let jobs = merge(jobs, PartitionJob::same, |j| &mut j.replies);
        // One request per (index, attribute, consistency), 50 partitions each.
        let mut groups: Vec<Vec<PartitionJob>> = Vec::new();
        for job in jobs {
            let open = groups.iter().position(|g| {
                let first = &g[0];
                g.len() < PARTITION_BATCH
                    && first.index == job.index
                    && first.attribute == job.attribute
                    && first.consistent == job.consistent
            });
            match open {
                Some(i) => groups[i].push(job),
                None => groups.push(vec![job]),
            }
        }
        futures::stream::iter(groups)
            .for_each_concurrent(max_in_flight, |jobs| {
                let inner = inner.clone();
                let gate = gate.clone();
                async move {
                    let first = &jobs[0];
                    let values: Vec<AttributeValue> =
                        jobs.iter().map(|j| j.value.clone()).collect();
                    let answer = inner
                        .query_partitions(
                            first.index.as_deref(),
                            &first.attribute,
                            &values,
                            first.consistent,
                        )
                        .await;
                    let _answering = gate.answering();
                    match answer {
                        Ok(found) => {
                            let share = found.consumed_capacity / jobs.len() as f64;
                            for (job, items) in jobs.into_iter().zip(found.items) {
                                job.answer(Ok(whole_partition(items, share)));
                            }
                        }
                        Err(e) if jobs.len() == 1 => {
                            jobs.into_iter().next().expect("one job").answer(Err(e));
                        }
                        Err(_) => {
                            for job in jobs {
                                let alone = inner
                                    .query_partitions(
                                        job.index.as_deref(),
                                        &job.attribute,
                                        std::slice::from_ref(&job.value),
                                        job.consistent,
                                    )
                                    .await
                                    .map(|found| {
                                        let items =
                                            found.items.into_iter().next().unwrap_or_default();
                                        whole_partition(items, found.consumed_capacity)
                                    });
                                job.answer(alone);
                            }
                        }
                    }
                }
            })
            .await;
    }
}

/// Pack chunks into shared requests: first fit, at most 25 items and no key
/// twice per request.
fn pack(jobs: Vec<WriteJob>) -> Vec<Vec<WriteJob>> {
    let mut requests: Vec<(usize, std::collections::HashSet<String>, Vec<WriteJob>)> = Vec::new();
    for job in jobs {
        let fits = requests.iter().position(|(n, keys, _)| {
            n + job.ops.len() <= WRITE_BATCH && !job.keys.iter().any(|k| keys.contains(k))
        });
        let i = fits.unwrap_or_else(|| {
            requests.push((0, Default::default(), Vec::new()));
            requests.len() - 1
        });
        let (n, keys, members) = &mut requests[i];
        *n += job.ops.len();
        keys.extend(job.keys.iter().cloned());
        members.push(job);
    }
    requests.into_iter().map(|(_, _, jobs)| jobs).collect()
}

/// Send queued writes until the queue stays empty.
async fn flush_writes(
    inner: Arc<dyn Store>,
    queue: Arc<Queue<WriteJob>>,
    gate: Arc<Gate>,
    max_in_flight: usize,
) {
    while let Some(jobs) = gather(&queue, &gate).await {
        futures::stream::iter(pack(jobs))
            .for_each_concurrent(max_in_flight, |jobs| {
                let inner = inner.clone();
                let gate = gate.clone();
                async move {
                    let ops: Vec<WriteOp> = jobs.iter().flat_map(|j| j.ops.clone()).collect();
                    let total = ops.len().max(1) as f64;
                    let answer = inner.batch_write(ops).await;
                    let _answering = gate.answering();
                    match answer {
                        Ok(report) => {
                            for job in jobs {
                                let part = job.ops.len() as f64 / total;
                                let _ = job.reply.send(Ok(WriteShare {
                                    requests: report.requests,
                                    retried_items: (report.retried_items as f64 * part).round()
                                        as usize,
                                    consumed_capacity: report.consumed_capacity * part,
                                }));
                            }
                        }
                        Err(e) if jobs.len() == 1 => {
                            let _ = jobs.into_iter().next().map(|j| j.reply.send(Err(e)));
                        }
                        Err(_) => {
                            for job in jobs {
                                let alone =
                                    inner.batch_write(job.ops.clone()).await.map(|report| {
                                        WriteShare {
                                            requests: report.requests,
                                            retried_items: report.retried_items,
                                            consumed_capacity: report.consumed_capacity,
                                        }
                                    });
                                let _ = job.reply.send(alone);
                            }
                        }
                    }
                }
            })
            .await;
    }
}

/// Point reads, whole-partition queries and batch writes are shared (see
/// the module documentation); a multi-partition read is one
/// whole-partition query per partition, so that it is shared too; every
/// other request passes straight through.
#[async_trait]
impl Store for Coalescing {
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
        match request {
            Request::Get { key, consistent } => {
                self.shared_get(key, consistent).await.map(Reply::Item)
            }
            Request::QueryPage { spec, start: None } if spec.as_partition().is_some() => {
                self.shared_partition(spec).await.map(Reply::Page)
            }
            Request::QueryPartitions {
                index,
                attribute,
                values,
                consistent,
            } => query_partitions_by_pages(self, index, attribute, values, consistent)
                .await
                .map(Reply::Partitions),
            Request::BatchWrite { ops } => self.shared_batch_write(ops).await.map(Reply::Batch),
            Request::WriteGuarded { guards, ops } => self
                .shared_write_guarded(guards, ops)
                .await
                .map(Reply::Guarded),
            other => self.inner.call(other).await,
        }
    }
}

impl Coalescing {
    /// A point read, sent with the others waiting at the same moment.
    async fn shared_get(&self, key: &Key, consistent: bool) -> Result<Option<Item>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let job = GetJob {
            key: key.clone(),
            id: key_id(key, self.keys()),
            consistent,
            replies: vec![reply],
        };
        self.enqueue(&self.gets, job, flush_gets);
        answer.await.map_err(|_| lost("BatchGetItem"))?
    }

    /// The first page of a whole-partition query
    /// ([`QuerySpec::as_partition`]): the whole partition, read with the
    /// others waiting at the same moment.
    async fn shared_partition(&self, spec: &QuerySpec) -> Result<Page, StoreError> {
        let Some((attribute, value)) = spec.as_partition() else {
            return self.inner.query_page(spec, None).await;
        };
        let (reply, answer) = oneshot::channel();
        let job = PartitionJob {
            index: spec.index.clone(),
            attribute: attribute.to_owned(),
            value: value.clone(),
            consistent: spec.consistent,
            replies: vec![reply],
        };
        self.enqueue(&self.partitions, job, flush_partitions);
        answer.await.map_err(|_| lost("ExecuteStatement"))?
    }

    /// Unconditional writes, chunk after chunk, each chunk sent with the
    /// others waiting at the same moment.
    async fn shared_batch_write(&self, ops: Vec<WriteOp>) -> Result<BatchWriteReport, StoreError> {
        let ops = dedupe_by_key(self.keys(), ops);
        let mut report = BatchWriteReport {
            items: ops.len(),
            ..Default::default()
        };
        let mut ops = ops.into_iter().peekable();
        while ops.peek().is_some() {
            let chunk: Vec<WriteOp> = ops.by_ref().take(WRITE_BATCH).collect();
            let share = self.write_chunk(chunk).await?;
            report.requests += share.requests;
            report.retried_items += share.retried_items;
            report.consumed_capacity += share.consumed_capacity;
        }
        Ok(report)
    }

    /// Guarded writes, transaction after transaction, each unconditional
    /// transaction sent with the others waiting at the same moment; the
    /// sequence stops at the first whose guard failed.
    async fn shared_write_guarded(
        &self,
        guards: &[Guard],
        ops: Vec<GuardedOp>,
    ) -> Result<GuardedReport, StoreError> {
        let keys = self.keys();
        if guards.len() >= MAX_TRANSACT_ACTIONS
            || guard_on_written_item(guards, &ops, keys).is_some()
        {
            // Refused by the store as it would be without sharing.
            return self.inner.write_guarded(guards, ops).await;
        }
        let plan = plan_transactions(guards.len(), &ops, keys)?;
        let planned: usize = plan.iter().map(Vec::len).sum();
        let mut slots: Vec<Option<GuardedOp>> = ops.into_iter().map(Some).collect();
        let guard_ids: Vec<String> = guards.iter().map(|g| key_id(&g.key, keys)).collect();
        let mut report = GuardedReport::default();
        let mut sent = 0;
        for indexes in plan {
            let chunk: Vec<GuardedOp> = indexes
                .into_iter()
                .map(|i| slots[i].take().expect("each op is planned once"))
                .collect();
            let n = chunk.len();
            let part = if chunk.iter().any(|op| op.condition().is_some()) {
                self.inner.write_guarded(guards, chunk).await?
            } else {
                let (reply, answer) = oneshot::channel();
                let job = GuardedJob {
                    guards: guards.to_vec(),
                    write_ids: chunk.iter().map(|op| key_id(op.target(), keys)).collect(),
                    guard_ids: guard_ids.clone(),
                    ops: chunk,
                    reply,
                };
                self.enqueue(&self.guarded, job, flush_guarded);
                answer.await.map_err(|_| lost("TransactWriteItems"))??
            };
            report.applied += part.applied;
            report.refused += part.refused;
            report.requests += part.requests;
            report.consumed_capacity += part.consumed_capacity;
            if !part.held() {
                report.withheld = planned - sent - part.applied - part.refused;
                return Ok(report);
            }
            sent += n;
        }
        Ok(report)
    }
}
