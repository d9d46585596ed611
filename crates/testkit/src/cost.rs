//! What a million stream records cost an app on AWS, from what its stream
//! function does to them on DynamoDB Local (each app's `cost` benchmark,
//! `BENCHMARKS.md`, "Cost per million records").
//!
//! A bench writes a mix of its service's writes to a table (or tables) on
//! a DynamoDB Local of its own, then [`Meter::drain`]s the streams through
//! the app's worker the way its event source mappings deliver them (the
//! template's `BatchSize` and `FilterCriteria`, Lambda's 6 MiB payload, a
//! failed batch retried from its first reported record), each invocation
//! from the event's bytes ([`Worker::handle_stream_bytes`], the Lambda
//! entry point). Around each invocation it takes:
//!
//! - the worker's CPU time: the calling thread's (`getrusage(RUSAGE_THREAD)`),
//!   so the bench runs on a current-thread runtime, as the Lambda
//!   bootstraps do: the handler, the SDK's HTTP client and its connections
//!   all run there; and, of it, what reading the event takes (the worker's
//!   decoder run once more on the same bytes, [`Run::decode_cpu`]);
//! - the requests of the worker's stores by kind, and the capacity DynamoDB
//!   Local reports for them ([`DynamoStore::metrics`]);
//! - through a [`Timed`] layer under the worker: the time at least one of
//!   its requests was in flight ([`busy`]), and what DynamoDB bills for the two kinds of request
//!   whose capacity DynamoDB Local reports otherwise: a guarded write
//!   (`TransactWriteItems`: 2 write units per KB of each item written and
//!   per condition check) and a PartiQL read (none reported on Local);
//!   an app's cross-table transactions go through [`TimedTransactions`].
//!
//! [`Costed::of`] turns a run into the cost of a million records at the
//! template's `MemorySize` and `Architectures` and the [`Prices`] stated,
//! by the formula its fields spell out (printed by [`print()`]).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};
use worker_engine::Worker;
use worker_engine::item::Item;
use worker_engine::schedule::JobName;
use worker_engine::store::{
    DynamoStore, GuardedOp, MetricsSnapshot, Reply, Request, Store, StoreError,
};
use worker_engine::store::{TransactOp, TransactOutcome, Transactions};
use worker_engine::stream::{SequenceNumber, StreamChange, encode_event};
use worker_toolkit::stream_reader::StreamTail;
use worker_toolkit::template::{Deployment, Evaluator, Pseudo, StreamMapping, filter};

/// The prices a cost assumes: AWS's public on-demand prices in us-east-1.
#[derive(Debug, Clone, Copy)]
pub struct Prices {
    /// Lambda compute, $ per GB-second, x86_64.
    pub lambda_gb_s_x86_64: f64,
    /// Lambda compute, $ per GB-second, arm64.
    pub lambda_gb_s_arm64: f64,
    /// Lambda, $ per million invocations.
    pub lambda_per_million_requests: f64,
    /// DynamoDB on-demand, $ per million write request units.
    pub per_million_wru: f64,
    /// DynamoDB on-demand, $ per million read request units.
    pub per_million_rru: f64,
}

/// us-east-1, on-demand. Lambda's reads of a DynamoDB stream for an event
/// source mapping are free.
pub const US_EAST_1: Prices = Prices {
    lambda_gb_s_x86_64: 0.000_016_666_7,
    lambda_gb_s_arm64: 0.000_013_333_4,
    lambda_per_million_requests: 0.20,
    per_million_wru: 0.625,
    per_million_rru: 0.125,
};

/// Lambda gives a function CPU in proportion to its memory: one vCPU at
/// 1,769 MB.
pub const MB_PER_VCPU: f64 = 1769.0;

/// Lambda's limit on an invocation's payload: the mapping cuts a batch
/// before it would exceed it, whatever its `BatchSize`.
pub const MAX_PAYLOAD_BYTES: usize = 6 * 1024 * 1024;

/// A stream function as its template deploys it.
#[derive(Debug, Clone)]
pub struct StreamFunction {
    /// The template's path, as given.
    pub template: String,
    /// The function's logical id.
    pub function: String,
    /// `MemorySize`, MB.
    pub memory_mb: u32,
    /// `Architectures` (with the parameters' defaults).
    pub architecture: String,
    /// Its event source mappings.
    pub mappings: Vec<StreamMapping>,
}

impl StreamFunction {
    /// Function `function` of the template at `template` (relative to the
    /// workspace's root), its parameters at their defaults.
    ///
    /// # Panics
    /// If the template cannot be read or the function has no `MemorySize`,
    /// architecture or stream mapping.
    pub fn of(template: &str, function: &str) -> Self {
        let path = workspace_root().join(template);
        let t = worker_toolkit::template::load(&path).expect("the template reads");
        let eval = Evaluator::new(&t, Pseudo::local());
        let props = eval.resolve(&t["Resources"][function]["Properties"]);
        let globals = eval.resolve(&t["Globals"]["Function"]);
        let pick = |name: &str| match &props[name] {
            Value::Null => globals[name].clone(),
            v => v.clone(),
        };
        let memory_mb = match pick("MemorySize") {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        }
        .unwrap_or_else(|| panic!("{template}: {function} has no MemorySize"))
            as u32;
        let architecture = pick("Architectures")[0]
            .as_str()
            .unwrap_or_else(|| panic!("{template}: {function} has no Architectures"))
            .to_owned();
        let mappings: Vec<StreamMapping> = Deployment::from_template(&t, template)
            .expect("the template's mappings read")
            .streams
            .into_iter()
            .filter(|m| m.function == function)
            .collect();
        assert!(
            !mappings.is_empty(),
            "{template}: {function} has no stream mapping"
        );
        StreamFunction {
            template: template.to_owned(),
            function: function.to_owned(),
            memory_mb,
            architecture,
            mappings,
        }
    }

    /// The mapping of the stream of table `table` (its logical id), or the
    /// function's only mapping with `None`.
    ///
    /// # Panics
    /// If there is no such mapping.
    pub fn mapping(&self, table: Option<&str>) -> &StreamMapping {
        match table {
            None => {
                assert_eq!(
                    self.mappings.len(),
                    1,
                    "{}: several mappings",
                    self.function
                );
                &self.mappings[0]
            }
            Some(t) => self
                .mappings
                .iter()
                .find(|m| m.table.as_deref() == Some(t))
                .unwrap_or_else(|| panic!("{}: no mapping of table {t}", self.function)),
        }
    }

    /// The `BatchSize` of its mappings (the largest, if they differ).
    pub fn batch_size(&self) -> usize {
        self.mappings
            .iter()
            .map(|m| m.batch_size as usize)
            .max()
            .unwrap_or(100)
    }

    /// The CPU share Lambda gives it: `MemorySize / 1,769 MB`, at most 1.
    pub fn cpu_share(&self) -> f64 {
        (f64::from(self.memory_mb) / MB_PER_VCPU).min(1.0)
    }
}

/// The workspace's root (the test kit's crate is `crates/testkit`).
fn workspace_root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace's root")
}

/// CPU time (user and system) the calling thread has used so far
/// (`getrusage(RUSAGE_THREAD)`, Linux).
pub fn thread_cpu() -> Duration {
    // SAFETY: `getrusage` writes a `rusage` into the zeroed struct it is
    // given and reads nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(
            libc::getrusage(libc::RUSAGE_THREAD, &mut usage),
            0,
            "getrusage"
        );
        usage
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// DynamoDB's size of an attribute value, bytes (what its capacity units
/// are counted from).
pub fn value_size(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        // Numbers: about one byte per two digits, plus one.
        AttributeValue::N(n) => n.len().div_ceil(2) + 1,
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
        AttributeValue::Ns(v) => v.iter().map(|n| n.len().div_ceil(2) + 1).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(v) => 3 + v.iter().map(|e| 1 + value_size(e)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, e)| 1 + k.len() + value_size(e))
                .sum::<usize>()
        }
        _ => 0,
    }
}

/// DynamoDB's size of an item, bytes: its attributes' names and values.
pub fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

/// The time at least one request of a [`Timed`] layer (or a
/// [`TimedTransactions`]) was in flight, over every layer of the process:
/// a worker sends many requests at once, and the time each spends in
/// flight overlaps the others'. The union of their intervals is what an
/// invocation waited on the database.
static BUSY: Mutex<Busy> = Mutex::new(Busy {
    in_flight: 0,
    since: None,
    total: Duration::ZERO,
});

struct Busy {
    in_flight: u32,
    since: Option<Instant>,
    total: Duration,
}

/// A request leaves for the database.
fn request_started() {
    let mut b = BUSY.lock().expect("busy lock");
    if b.in_flight == 0 {
        b.since = Some(Instant::now());
    }
    b.in_flight += 1;
}

/// A request is answered.
fn request_ended() {
    let mut b = BUSY.lock().expect("busy lock");
    b.in_flight -= 1;
    if b.in_flight == 0
        && let Some(since) = b.since.take()
    {
        b.total += since.elapsed();
    }
}

/// A request in flight, from [`InFlight::start`] until dropped (answered,
/// or its future dropped).
struct InFlight;

impl InFlight {
    fn start() -> Self {
        request_started();
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        request_ended();
    }
}

/// The time at least one request was in flight so far (the current span
/// included).
pub fn busy() -> Duration {
    let b = BUSY.lock().expect("busy lock");
    b.total + b.since.map_or(Duration::ZERO, |s| s.elapsed())
}

/// What [`Timed`] saw of the calls that went through it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    /// Calls (a call may send several requests: a batch of more than one
    /// request's items, a guarded write of several transactions).
    pub calls: u64,
    /// Time spent in them, end to end (concurrent calls each count theirs:
    /// [`busy`] is the time any was in flight).
    pub in_calls: Duration,
    /// `TransactWriteItems` actions sent: writes, and each transaction's
    /// condition checks.
    pub guarded_actions: u64,
    /// The write capacity DynamoDB Local reported for them.
    pub guarded_local_wcu: f64,
    /// What DynamoDB bills for them: 2 write units per KB of each item put
    /// (rounded up), 2 per delete, update and condition check (items of up
    /// to 1 KB).
    pub guarded_billed_wcu: f64,
    /// The read capacity DynamoDB Local reported for PartiQL reads.
    pub partiql_local_rcu: f64,
    /// What DynamoDB bills for them: per partition read, a read unit per
    /// 4 KB of its items (rounded up, at least one), half of it for an
    /// eventually consistent read.
    pub partiql_billed_rcu: f64,
}

impl Tally {
    fn since(&self, earlier: &Tally) -> Tally {
        Tally {
            calls: self.calls - earlier.calls,
            in_calls: self.in_calls - earlier.in_calls,
            guarded_actions: self.guarded_actions - earlier.guarded_actions,
            guarded_local_wcu: self.guarded_local_wcu - earlier.guarded_local_wcu,
            guarded_billed_wcu: self.guarded_billed_wcu - earlier.guarded_billed_wcu,
            partiql_local_rcu: self.partiql_local_rcu - earlier.partiql_local_rcu,
            partiql_billed_rcu: self.partiql_billed_rcu - earlier.partiql_billed_rcu,
        }
    }

    fn add(&mut self, other: &Tally) {
        self.calls += other.calls;
        self.in_calls += other.in_calls;
        self.guarded_actions += other.guarded_actions;
        self.guarded_local_wcu += other.guarded_local_wcu;
        self.guarded_billed_wcu += other.guarded_billed_wcu;
        self.partiql_local_rcu += other.partiql_local_rcu;
        self.partiql_billed_rcu += other.partiql_billed_rcu;
    }
}

/// A store layer that times every call and works out what DynamoDB bills
/// for guarded writes and PartiQL reads ([`Tally`]); every request passes
/// through unchanged. Put it right over the [`DynamoStore`], under the
/// app's own layers, so that it sees the requests the table gets.
pub struct Timed {
    inner: Arc<dyn Store>,
    tally: Mutex<Tally>,
}

impl Timed {
    /// A layer over `inner` (the table's [`DynamoStore`]), its tally empty.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Timed {
            inner,
            tally: Mutex::new(Tally::default()),
        }
    }

    /// What it saw so far.
    pub fn tally(&self) -> Tally {
        *self.tally.lock().expect("tally lock")
    }
}

/// Write units DynamoDB bills a transactional write of `op`.
fn guarded_units(op: &GuardedOp) -> f64 {
    match op {
        GuardedOp::Put { item, .. } => 2.0 * item_size(item).div_ceil(1024).max(1) as f64,
        GuardedOp::Delete { .. } | GuardedOp::Update { .. } => 2.0,
    }
}

#[async_trait]
impl Store for Timed {
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
        let guarded = match &request {
            Request::WriteGuarded { guards, ops } => Some((
                guards.len(),
                ops.len(),
                ops.iter().map(guarded_units).sum::<f64>(),
            )),
            _ => None,
        };
        let partiql = match &request {
            Request::QueryPartitions { consistent, .. } => Some(*consistent),
            _ => None,
        };
        let started = Instant::now();
        let in_flight = InFlight::start();
        let reply = self.inner.call(request).await;
        drop(in_flight);
        let took = started.elapsed();
        let mut t = self.tally.lock().expect("tally lock");
        t.calls += 1;
        t.in_calls += took;
        match (&reply, guarded, partiql) {
            (Ok(Reply::Guarded(report)), Some((guards, ops, units)), _) => {
                let transactions = u64::from(report.requests);
                let checks = guards as u64 * transactions;
                t.guarded_actions += ops as u64 + checks;
                t.guarded_local_wcu += report.consumed_capacity;
                t.guarded_billed_wcu += units + 2.0 * checks as f64;
            }
            (Ok(Reply::Partitions(p)), _, Some(consistent)) => {
                t.partiql_local_rcu += p.consumed_capacity;
                let per_unit = if consistent { 1.0 } else { 0.5 };
                t.partiql_billed_rcu += p
                    .items
                    .iter()
                    .map(|items| {
                        let bytes: usize = items.iter().map(item_size).sum();
                        bytes.div_ceil(4096).max(1) as f64 * per_unit
                    })
                    .sum::<f64>();
            }
            _ => {}
        }
        drop(t);
        reply
    }
}

/// A [`Transactions`] layer over a [`DynamoStore`] of its own (so that the
/// store's metrics count its transactions only): times every transaction
/// and works out what DynamoDB bills for it, as [`Timed`] does for a
/// guarded write (2 write units per KB of each item put, 2 per update,
/// delete and condition check).
pub struct TimedTransactions {
    inner: Arc<DynamoStore>,
    tally: Mutex<Tally>,
}

impl TimedTransactions {
    /// `inner` must serve nothing but these transactions.
    pub fn new(inner: Arc<DynamoStore>) -> Self {
        TimedTransactions {
            inner,
            tally: Mutex::new(Tally::default()),
        }
    }

    /// What it saw so far; the capacity DynamoDB Local reported is its
    /// store's.
    pub fn tally(&self) -> Tally {
        let mut t = *self.tally.lock().expect("tally lock");
        t.guarded_local_wcu = self.inner.metrics().snapshot().write_capacity;
        t
    }
}

#[async_trait]
impl Transactions for TimedTransactions {
    async fn transact_write(&self, ops: Vec<TransactOp>) -> Result<TransactOutcome, StoreError> {
        let actions = ops.len() as u64;
        let units: f64 = ops
            .iter()
            .map(|op| match op {
                TransactOp::Put { item, .. } => 2.0 * item_size(item).div_ceil(1024).max(1) as f64,
                _ => 2.0,
            })
            .sum();
        let started = Instant::now();
        let in_flight = InFlight::start();
        let out = self.inner.transact_write(ops).await;
        drop(in_flight);
        let took = started.elapsed();
        let mut t = self.tally.lock().expect("tally lock");
        t.calls += 1;
        t.in_calls += took;
        t.guarded_actions += actions;
        t.guarded_billed_wcu += units;
        drop(t);
        out
    }
}

/// A layer the [`Meter`] reads: a [`Timed`] store or [`TimedTransactions`].
pub trait Tallied: Send + Sync {
    /// What the layer saw so far.
    fn tally(&self) -> Tally;
}

impl Tallied for Timed {
    fn tally(&self) -> Tally {
        Timed::tally(self)
    }
}

impl Tallied for TimedTransactions {
    fn tally(&self) -> Tally {
        TimedTransactions::tally(self)
    }
}

fn add_metrics(a: &MetricsSnapshot, b: &MetricsSnapshot) -> MetricsSnapshot {
    MetricsSnapshot {
        get_item: a.get_item + b.get_item,
        put_item: a.put_item + b.put_item,
        delete_item: a.delete_item + b.delete_item,
        update_item: a.update_item + b.update_item,
        query: a.query + b.query,
        scan: a.scan + b.scan,
        batch_write_item: a.batch_write_item + b.batch_write_item,
        batch_get_item: a.batch_get_item + b.batch_get_item,
        execute_statement: a.execute_statement + b.execute_statement,
        transact_write_items: a.transact_write_items + b.transact_write_items,
        read_capacity: a.read_capacity + b.read_capacity,
        write_capacity: a.write_capacity + b.write_capacity,
    }
}

/// A stream to drain: its reader and the mapping that delivers it.
pub struct Stream {
    /// A reader of the table's stream: the drain reads on from where it
    /// stands (a fresh tail, from the stream's beginning).
    pub tail: StreamTail,
    /// The template's mapping of that stream: its `BatchSize` and
    /// `FilterCriteria` ([`StreamFunction::mappings`]).
    pub mapping: StreamMapping,
}

/// What a drain measured.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Records delivered to the function (first deliveries).
    pub records: u64,
    /// Records the mappings' `FilterCriteria` kept from it.
    pub filtered: u64,
    /// Invocations, retries included.
    pub invocations: u64,
    /// Records of failed invocations delivered again.
    pub retried_records: u64,
    /// The worker's CPU time over the invocations.
    pub cpu: Duration,
    /// Of what [`Self::cpu`] covers, the reading of the events: the CPU
    /// time of the worker's decoder ([`Worker::decoder`]) on the same
    /// bytes, run once more beside each invocation.
    pub decode_cpu: Duration,
    /// Wall time of the invocations on DynamoDB Local.
    pub wall: Duration,
    /// The time at least one of their requests was in flight ([`busy`]).
    pub busy: Duration,
    /// The worker's requests and the capacity DynamoDB Local reported.
    pub metrics: MetricsSnapshot,
    /// What the [`Timed`] layers saw.
    pub tally: Tally,
}

/// Drains streams through a worker, measuring every invocation.
pub struct Meter {
    stores: Vec<Arc<DynamoStore>>,
    timed: Vec<Arc<dyn Tallied>>,
    /// What the drains so far measured, summed ([`Costed::of`] reads it).
    pub run: Run,
}

impl Meter {
    /// A meter of the requests of `stores` (every table the worker writes
    /// to, each store the worker's own, not the service's) and of the
    /// [`Timed`] (and [`TimedTransactions`]) layers over them.
    pub fn new(stores: Vec<Arc<DynamoStore>>, timed: Vec<Arc<dyn Tallied>>) -> Self {
        Meter {
            stores,
            timed,
            run: Run::default(),
        }
    }

    /// Deliver every record of `streams` to `worker` the way their mappings
    /// do, until a read of every stream returns nothing (the worker's own
    /// writes make records too): each read's records that pass the
    /// mapping's filter, cut into batches of its `BatchSize` and of at most
    /// [`MAX_PAYLOAD_BYTES`], one invocation after the other, a failed one
    /// delivered again from its first reported record (up to 5 times).
    ///
    /// # Panics
    /// If a batch still fails after 5 attempts, or the streams do not
    /// settle within 50 rounds.
    pub async fn drain<J: JobName>(&mut self, worker: &Worker<J>, streams: &mut [Stream]) {
        for _round in 0..50 {
            let mut any = false;
            for stream in streams.iter_mut() {
                let changes: Vec<StreamChange> = stream
                    .tail
                    .poll()
                    .await
                    .expect("read the stream")
                    .into_iter()
                    .map(|(_, c)| c)
                    .collect();
                if changes.is_empty() {
                    continue;
                }
                any = true;
                let total = changes.len();
                let delivered: Vec<StreamChange> = changes
                    .into_iter()
                    .filter(|c| filter::delivered(&stream.mapping.filters, &lambda_record(c)))
                    .collect();
                self.run.filtered += (total - delivered.len()) as u64;
                for batch in batches(&delivered, stream.mapping.batch_size as usize) {
                    self.invoke(worker, batch).await;
                }
            }
            if !any {
                return;
            }
        }
        panic!("the streams did not settle after 50 rounds: the worker keeps writing");
    }

    /// One batch, as Lambda invokes with it, retried from its first
    /// reported failure.
    async fn invoke<J: JobName>(&mut self, worker: &Worker<J>, batch: &[StreamChange]) {
        self.run.records += batch.len() as u64;
        let mut pending = batch.to_vec();
        for attempt in 0..5 {
            if attempt > 0 {
                self.run.retried_records += pending.len() as u64;
            }
            let bytes = serde_json::to_vec(&encode_event(&pending, None)).expect("an event");
            let before: Vec<MetricsSnapshot> =
                self.stores.iter().map(|s| s.metrics().snapshot()).collect();
            let tallies: Vec<Tally> = self.timed.iter().map(|t| t.tally()).collect();
            let busy_before = busy();
            let cpu = thread_cpu();
            let started = Instant::now();
            let report = worker
                .handle_stream_bytes(&bytes, None)
                .await
                .expect("a stream event");
            self.run.wall += started.elapsed();
            self.run.cpu += thread_cpu() - cpu;
            self.run.busy += busy() - busy_before;
            self.run.invocations += 1;
            for (store, before) in self.stores.iter().zip(&before) {
                let d = store.metrics().snapshot().since(before);
                self.run.metrics = add_metrics(&self.run.metrics, &d);
            }
            for (timed, before) in self.timed.iter().zip(&tallies) {
                self.run.tally.add(&timed.tally().since(before));
            }
            // The reading alone, on the same bytes, once the invocation's
            // own figures are taken: what share of its CPU reading the
            // event takes.
            let cpu = thread_cpu();
            drop(std::hint::black_box((worker.decoder())(&bytes)));
            self.run.decode_cpu += thread_cpu() - cpu;
            let Some(failed) = report.batch_item_failures.first() else {
                return;
            };
            let failed: SequenceNumber = failed
                .parse()
                .expect("Lambda item identifiers are sequence numbers");
            pending.retain(|c| c.sequence_number.as_ref().is_some_and(|s| *s >= failed));
        }
        panic!("a batch kept failing after 5 attempts");
    }
}

/// A record as Lambda delivers it (what its event filtering looks at).
fn lambda_record(change: &StreamChange) -> Value {
    encode_event(std::slice::from_ref(change), None)["Records"][0].take()
}

/// The bytes of `{"Records":[]}` around the records of an event.
const ENVELOPE_BYTES: usize = r#"{"Records":[]}"#.len();

/// `changes` cut like an event source mapping cuts them: at most
/// `batch_size` records and [`MAX_PAYLOAD_BYTES`] of event JSON each.
pub fn batches(changes: &[StreamChange], batch_size: usize) -> Vec<&[StreamChange]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, ENVELOPE_BYTES);
    for (i, c) in changes.iter().enumerate() {
        // The record's JSON and the comma before it.
        let size = serde_json::to_vec(&lambda_record(c))
            .expect("a record")
            .len()
            + 1;
        if i > start && (i - start == batch_size || bytes + size > MAX_PAYLOAD_BYTES) {
            out.push(&changes[start..i]);
            (start, bytes) = (i, ENVELOPE_BYTES);
        }
        bytes += size;
    }
    if start < changes.len() {
        out.push(&changes[start..]);
    }
    out
}

/// A drain's cost per record and per million records.
#[derive(Debug, Clone)]
pub struct Costed {
    /// The app's name as the figures print it (e.g. `shop`).
    pub app: String,
    /// The stream function the cost is of, as its template deploys it.
    pub function: StreamFunction,
    /// The prices the dollar figures assume.
    pub prices: Prices,
    /// The drain the figures come from.
    pub run: Run,
    /// Records per invocation the cost assumes: the mappings' `BatchSize`.
    pub batch_size: usize,
    /// The worker's CPU per record, ms (measured, this process's profile).
    pub cpu_ms: f64,
    /// Of it, the reading of the event ([`Run::decode_cpu`]) per record,
    /// ms.
    pub decode_ms: f64,
    /// Requests per record.
    pub requests: f64,
    /// Time per request on DynamoDB Local, ms: the time at least one
    /// request was in flight ([`busy`]) over the requests sent, so that
    /// requests times latency is the time the invocations waited on the
    /// database.
    pub latency_ms: f64,
    /// Read units per record: DynamoDB Local's, PartiQL reads as DynamoDB
    /// bills them.
    pub rcu: f64,
    /// Write units per record: DynamoDB Local's, guarded writes as DynamoDB
    /// bills them.
    pub wcu: f64,
    /// Write units per record as DynamoDB Local reported them.
    pub wcu_local: f64,
    /// Billed ms of an invocation of `batch_size` records: its CPU over
    /// the CPU share, plus its requests times the latency, rounded up to
    /// 1 ms.
    pub billed_ms: f64,
    /// Its CPU part, ms.
    pub billed_cpu_ms: f64,
    /// Its requests' part, ms.
    pub billed_wait_ms: f64,
    /// $ per million records, Lambda compute: the invocations of
    /// `batch_size` records it takes, each `billed_ms` at `MemorySize`.
    pub compute: f64,
    /// $ per million records, Lambda requests (one per `batch_size`
    /// records).
    pub invocations: f64,
    /// $ per million records, DynamoDB writes (`wcu` per record).
    pub writes: f64,
    /// $ per million records, DynamoDB reads (`rcu` per record).
    pub reads: f64,
}

impl Costed {
    /// The cost of `run` of `app`'s `function` at `prices`.
    pub fn of(app: &str, function: &StreamFunction, prices: Prices, run: &Run) -> Self {
        let records = run.records.max(1) as f64;
        let m = &run.metrics;
        let t = &run.tally;
        let batch_size = function.batch_size();
        let cpu_ms = run.cpu.as_secs_f64() * 1000.0 / records;
        let decode_ms = run.decode_cpu.as_secs_f64() * 1000.0 / records;
        let requests = m.requests() as f64 / records;
        let latency_ms = if m.requests() == 0 {
            0.0
        } else {
            run.busy.as_secs_f64() * 1000.0 / m.requests() as f64
        };
        let rcu = (m.read_capacity - t.partiql_local_rcu + t.partiql_billed_rcu) / records;
        let wcu = (m.write_capacity - t.guarded_local_wcu + t.guarded_billed_wcu) / records;
        let b = batch_size as f64;
        let billed_cpu_ms = b * cpu_ms / function.cpu_share();
        let billed_wait_ms = b * requests * latency_ms;
        let billed_ms = (billed_cpu_ms + billed_wait_ms).ceil();
        let per_gb_s = if function.architecture == "arm64" {
            prices.lambda_gb_s_arm64
        } else {
            prices.lambda_gb_s_x86_64
        };
        let invocations_per_million = 1e6 / b;
        let gb = f64::from(function.memory_mb) / 1024.0;
        Costed {
            app: app.to_owned(),
            function: function.clone(),
            prices,
            run: run.clone(),
            batch_size,
            cpu_ms,
            decode_ms,
            requests,
            latency_ms,
            rcu,
            wcu,
            wcu_local: m.write_capacity / records,
            billed_ms,
            billed_cpu_ms,
            billed_wait_ms,
            compute: invocations_per_million * billed_ms / 1000.0 * gb * per_gb_s,
            invocations: invocations_per_million * prices.lambda_per_million_requests / 1e6,
            writes: wcu * prices.per_million_wru,
            reads: rcu * prices.per_million_rru,
        }
    }

    /// $ per million records, all parts.
    pub fn total(&self) -> f64 {
        self.compute + self.invocations + self.writes + self.reads
    }

    /// The figures as one JSON object.
    pub fn json(&self) -> Value {
        let m = &self.run.metrics;
        json!({
            "app": self.app,
            "template": self.function.template,
            "function": self.function.function,
            "memory_mb": self.function.memory_mb,
            "architecture": self.function.architecture,
            "cpu_share": self.function.cpu_share(),
            "batch_size": self.batch_size,
            "records": self.run.records,
            "filtered_records": self.run.filtered,
            "invocations": self.run.invocations,
            "retried_records": self.run.retried_records,
            "cpu_ms_per_record": self.cpu_ms,
            "decode_ms_per_record": self.decode_ms,
            "wall_ms_per_record_on_local": self.run.wall.as_secs_f64() * 1000.0 / self.run.records.max(1) as f64,
            "requests_per_record": self.requests,
            "requests": {
                "GetItem": m.get_item, "BatchGetItem": m.batch_get_item,
                "Query": m.query, "Scan": m.scan, "ExecuteStatement": m.execute_statement,
                "PutItem": m.put_item, "DeleteItem": m.delete_item, "UpdateItem": m.update_item,
                "BatchWriteItem": m.batch_write_item, "TransactWriteItems": m.transact_write_items,
            },
            "transact_actions": self.run.tally.guarded_actions,
            "latency_ms_per_request_on_local": self.latency_ms,
            "busy_ms_per_record_on_local": self.run.busy.as_secs_f64() * 1000.0 / self.run.records.max(1) as f64,
            "in_calls_ms_per_request_on_local": self.run.tally.in_calls.as_secs_f64() * 1000.0 / m.requests().max(1) as f64,
            "rcu_per_record": self.rcu,
            "rcu_per_record_local": m.read_capacity / self.run.records.max(1) as f64,
            "wcu_per_record": self.wcu,
            "wcu_per_record_local": self.wcu_local,
            "billed_ms_per_invocation": self.billed_ms,
            "billed_cpu_ms_per_invocation": self.billed_cpu_ms,
            "billed_wait_ms_per_invocation": self.billed_wait_ms,
            "usd_per_million_records": {
                "lambda_compute": self.compute,
                "lambda_requests": self.invocations,
                "dynamodb_writes": self.writes,
                "dynamodb_reads": self.reads,
                "total": self.total(),
            },
        })
    }
}

/// Print `c`: what was measured, the formula with its numbers, and the
/// cost; then its JSON line.
pub fn print(c: &Costed) {
    let r = &c.run;
    let m = &r.metrics;
    let f = &c.function;
    println!();
    println!(
        "{}: {} of {} at {} MB, {}, BatchSize {}",
        c.app, f.function, f.template, f.memory_mb, f.architecture, c.batch_size
    );
    println!(
        "  measured: {} records ({} dropped by the filter), {} invocations ({} records retried)",
        r.records, r.filtered, r.invocations, r.retried_records
    );
    println!(
        "  requests: {} ({:.4} per record): GetItem {}, BatchGetItem {}, Query {}, Scan {}, ExecuteStatement {}, PutItem {}, DeleteItem {}, UpdateItem {}, BatchWriteItem {}, TransactWriteItems {} ({} actions)",
        m.requests(),
        c.requests,
        m.get_item,
        m.batch_get_item,
        m.query,
        m.scan,
        m.execute_statement,
        m.put_item,
        m.delete_item,
        m.update_item,
        m.batch_write_item,
        m.transact_write_items,
        r.tally.guarded_actions
    );
    println!(
        "  capacity per record: RCU {:.4} (Local {:.4}), WCU {:.4} (Local {:.4})",
        c.rcu,
        m.read_capacity / r.records.max(1) as f64,
        c.wcu,
        c.wcu_local
    );
    println!(
        "  worker CPU {:.4} ms per record; on DynamoDB Local: {:.3} ms per request (requests in flight {:.3} ms per record), {:.3} ms of wall time per record",
        c.cpu_ms,
        c.latency_ms,
        r.busy.as_secs_f64() * 1000.0 / r.records.max(1) as f64,
        r.wall.as_secs_f64() * 1000.0 / r.records.max(1) as f64
    );
    println!(
        "  of the worker CPU, reading the events (its decoder on the same bytes): {:.4} ms per record ({:.1}%)",
        c.decode_ms,
        100.0 * c.decode_ms / c.cpu_ms.max(f64::MIN_POSITIVE)
    );
    println!(
        "  billed per {}-record invocation: {} x {:.4} ms / {:.4} (CPU share) + {} x {:.4} requests x {:.3} ms = {:.1} + {:.1} -> {:.0} ms",
        c.batch_size,
        c.batch_size,
        c.cpu_ms,
        f.cpu_share(),
        c.batch_size,
        c.requests,
        c.latency_ms,
        c.billed_cpu_ms,
        c.billed_wait_ms,
        c.billed_ms
    );
    println!(
        "  $ per million records: compute {:.4} + requests {:.4} + writes {:.4} + reads {:.4} = {:.4}",
        c.compute,
        c.invocations,
        c.writes,
        c.reads,
        c.total()
    );
    println!("{}", c.json());
}

/// The number given after the bench's option `name` (`-- --users 300`),
/// else `default`; any other argument (cargo's `--bench`) is ignored.
pub fn arg(name: &str, default: u64) -> u64 {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == name {
            return args
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name}: a number"));
        }
    }
    default
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(memory_mb: u32, batch_size: u32) -> StreamFunction {
        let mapping = StreamMapping {
            function: "StreamFunction".into(),
            event: "TableStream".into(),
            table: None,
            table_variables: Vec::new(),
            batch_size,
            batching_window_secs: 0,
            max_retries: None,
            bisect: false,
            max_record_age_secs: None,
            parallelization_factor: 1,
            filters: Vec::new(),
            on_failure: None,
            starting_position: None,
            timeout_secs: None,
        };
        StreamFunction {
            template: "t.yaml".into(),
            function: "StreamFunction".into(),
            memory_mb,
            architecture: "x86_64".into(),
            mappings: vec![mapping],
        }
    }

    #[test]
    fn the_sum_is_the_documented_formula() {
        // 100 records: 0.5 ms of CPU (0.1 ms of it reading the event) and
        // 1.5 requests each, 20 ms in flight each; 2 WCU (one guarded put
        // of 1 KB reported as 1), 1.5 RCU.
        let run = Run {
            records: 100,
            cpu: Duration::from_millis(50),
            decode_cpu: Duration::from_millis(10),
            busy: Duration::from_millis(2000),
            metrics: MetricsSnapshot {
                get_item: 150,
                read_capacity: 150.0,
                write_capacity: 100.0,
                ..Default::default()
            },
            tally: Tally {
                guarded_local_wcu: 100.0,
                guarded_billed_wcu: 200.0,
                ..Default::default()
            },
            ..Default::default()
        };
        let c = Costed::of("app", &function(128, 100), US_EAST_1, &run);
        let share = 128.0 / 1769.0;
        assert!((c.billed_cpu_ms - 100.0 * 0.5 / share).abs() < 1e-9);
        assert!((c.billed_wait_ms - 2000.0).abs() < 1e-9);
        assert_eq!(c.billed_ms, (100.0 * 0.5 / share + 2000.0_f64).ceil());
        assert!((c.wcu - 2.0).abs() < 1e-12 && (c.rcu - 1.5).abs() < 1e-12);
        let compute = 1e6 / 100.0 * c.billed_ms / 1000.0 * 0.125 * 0.000_016_666_7;
        assert!((c.compute - compute).abs() < 1e-12);
        assert!((c.invocations - 0.002).abs() < 1e-12);
        assert!((c.total() - (compute + 0.002 + 2.0 * 0.625 + 1.5 * 0.125)).abs() < 1e-12);
        // Reading the event is part of the CPU, not added to it.
        assert!((c.decode_ms - 0.1).abs() < 1e-12);
        assert_eq!(c.json()["decode_ms_per_record"], json!(c.decode_ms));
    }

    #[test]
    fn sizes_count_names_and_values() {
        let item: Item = [
            ("PK".to_owned(), AttributeValue::S("abc".into())),
            ("N".to_owned(), AttributeValue::N("12345".into())),
            ("B".to_owned(), AttributeValue::Bool(true)),
        ]
        .into();
        assert_eq!(item_size(&item), 2 + 3 + 1 + 4 + 1 + 1);
    }
}
