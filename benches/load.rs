//! End-to-end load driver (`cargo bench --bench load -- --users 2000 --seed 7`).
//!
//! Against a DynamoDB Local of its own, it
//!
//! 1. generates a workload ([`crate::support::workload`]: a population of
//!    users, groups, containers with foods and invitation links, and the live
//!    service's write calls including its leftovers), creates table A (full
//!    schema, NEW_AND_OLD_IMAGES stream), seeds the population with
//!    BatchWriteItem and runs the expiry backfill on it, so A is a table the
//!    worker has been serving (every food's flags and reminders are there;
//!    `--no-backfill` leaves them out); the stream records of all this are
//!    skipped (read and dropped before the first service call);
//! 2. applies the service's calls the way the service does: operation after
//!    operation, the calls of one operation as parallel single Put/Delete;
//! 3. snapshots A (*before*);
//! 4. **worker**: drains A's stream the way the deployed event source
//!    mapping does (`infra/template.yaml`): records its `FilterCriteria`
//!    drops (the worker's own flags, reminders, suspects, checkpoints) never
//!    reach the function, the rest go to `App::handle_stream` in batches of
//!    its `BatchSize` (or `--batch-size`) and of at most Lambda's 6 MiB
//!    payload, retrying from the first reported failure, until a read of
//!    the stream returns nothing (the worker's own writes produce records
//!    too). Before timing, one request of each read
//!    kind warms DynamoDB Local up ([`warm_up`]);
//! 5. snapshots A (*after*) and diffs it against *before*: the keys the
//!    worker deleted and the items it put — the minimal set of writes that
//!    takes the table from *before* to *after*.
//!    Steps 1 to 4 run [`WORKER_RUNS`] times, each on a DynamoDB Local of
//!    its own, spread between the baseline runs of step 6
//!    ([`worker_turn`]); every run must start from and end in the same
//!    tables but for the keys an operation of the service both puts and
//!    deletes at once ([`raced_keys`]: which call lands last varies), and
//!    the median run by records per second gives every figure of the
//!    drain (one drain on a fresh JVM varied by 25% from the next);
//! 6. **baseline**, [`BASELINE_RUNS`] times: starts a DynamoDB Local of its
//!    own, creates table B there, seeds it with *before*, issues exactly the
//!    minimal set with the raw `aws_sdk_dynamodb::Client` (BatchWriteItem in
//!    chunks of 25, one request after the other, retrying unprocessed
//!    items), and checks that B now equals A. The median run counts.
//!    Before it is timed, the fresh instance puts and deletes 2,000
//!    scratch items ([`engine::warm_writes`]), as the worker's instance
//!    has written and deleted before its drain. Its requests ask for the
//!    consumed capacity (`ReturnConsumedCapacity: TOTAL`), as every
//!    request of the worker's store does: AWS computes it anyway, but
//!    DynamoDB Local charges 17-51% more CPU per written item and up to
//!    twice the wall time per BatchWriteItem for it (`cargo bench --bench
//!    local_costs`), so a baseline without it would count a cost of the
//!    emulator as the worker's. Interleaved with
//!    those runs, as many *plain* runs leave it out (`ratio_plain`), and as
//!    many *guarded* runs make the writes the worker must guard as the
//!    worker does (`ratio_guarded`, [`guarded_plan`]): each write of the
//!    minimal set that the worker made in a guarded transaction, with the
//!    same effect, goes in that transaction again (the same condition
//!    checks, the transaction's other ops cut down to the minimal set's),
//!    sent before the rest in BatchWriteItem; every guard must hold. Each
//!    run has an instance of its own because DynamoDB Local slows writes
//!    down on every further table with a stream (`cargo bench --bench
//!    local_tables`): on A's instance, B would be the second such table and
//!    its writes 1.5x slower than A's;
//! 7. **oracle**: the worker's store is wrapped in the toolkit's recording
//!    store, which notes every read and write the worker sent
//!    (`worker_testkit::recorded`); on a DynamoDB Local of its own, seeded with *before* and
//!    warmed up (scratch writes, one read of each kind), the recorded
//!    reads (each distinct key and partition once, BatchGetItem of 100,
//!    PartiQL of 50) and then the recorded writes
//!    (BatchWriteItem of 25, single writes as sent) go out one request after
//!    the other. That is what the worker's own reads and writes cost by
//!    themselves, whatever the order and sharing the worker gave them: the
//!    best any scheduling of the same requests could do;
//! 8. **bulk deletes**: seeds a group with 60 members, 4 containers and an
//!    invitation link, removes the Group item and runs the group cascade
//!    (`jobs::relationships::cascade_group`) on a DynamoDB Local of its
//!    own; asserts that the cascade's BatchWriteItem requests are at most
//!    `ceil(n / 25)`, `n` the items it deleted (its conditional single
//!    deletes, e.g. the invitation link, are counted apart).
//!
//! # Figures (printed as a table and as one JSON line for BENCHMARKS.md)
//!
//! - `records`: stream records handed to the worker (first attempts; a
//!   retried record is counted once); `filtered_records` the ones the
//!   filter kept from it;
//! - `worker_secs`: the sum of the wall time of every `handle_stream` call
//!   (what Lambda bills; reading the stream is the event source mapping's
//!   part and is not included) in the median worker run
//!   (`worker_runs_secs`: every run); `worker_rps = records / worker_secs`;
//! - `requests_per_record`, `rcu_per_record`, `wcu_per_record`: the worker
//!   store's `StoreMetrics` (every DynamoDB request the worker made, and the
//!   consumed capacity DynamoDB Local reports) divided by `records`;
//! - `batch_p50_ms`, `batch_p99_ms`: nearest-rank percentiles of the
//!   per-`handle_stream` wall times;
//! - `peak_heap_bytes`: the highest heap in use (counting global allocator)
//!   during the drain, `peak_heap_growth_bytes` that peak minus the heap in
//!   use when the drain started; `max_rss_kib`: `VmHWM` of the process
//!   (Linux), i.e. the whole bench's peak RSS, DynamoDB Local excluded;
//! - `worker_engine_cpu_secs`, `baseline_engine_cpu_secs`: CPU seconds
//!   DynamoDB Local's JVM used during the `handle_stream` calls and during
//!   the median baseline run (where the time goes: the engine, not the
//!   worker's process); `worker_own_cpu_secs`: CPU seconds of the
//!   bench's own process (the worker) during the `handle_stream` calls;
//! - `baseline_secs`: wall time of the median baseline run's BatchWriteItem
//!   requests (`baseline_runs_secs`: every run);
//!   `baseline_rps = records / baseline_secs` (the first worker run's
//!   records, whose table gave the baseline its writes, handled by writing
//!   only their minimal effect); **`ratio = worker_rps / baseline_rps`**
//!   (no goal: see `ratio_guarded`), i.e. `baseline_secs / worker_secs` up to the few
//!   records by which the runs' races differ;
//!   `baseline_wcu_per_record`: the baseline's consumed write capacity
//!   per record (the least the records can cost);
//! - `plain_baseline_secs` (`plain_baseline_runs_secs`,
//!   `plain_baseline_engine_cpu_secs`): the median plain baseline run, and
//!   `ratio_plain` the same ratio against it;
//! - `guarded_baseline` (`secs`, `runs_secs`, `engine_cpu_secs`, its
//!   requests and transactions): the median guarded baseline run, and
//!   **`ratio_guarded`** (goal >= 0.9) the same ratio against it: the
//!   worker against the least a writer that guards the same writes must
//!   send;
//! - `batch_writes`: the items the worker wrote with BatchWriteItem,
//!   applied in order to *before*, by item kind and effect (`put new`,
//!   `put changed`, `put as stored`, `delete existing`, `delete missing`);
//!   `noops` counts the last two, which change nothing; `rewritten_keys`
//!   the keys written more than once, by kind and sequence (`PD`: put,
//!   then deleted by a later record);
//! - `oracle`: the oracle's requests, items, wall time and DynamoDB Local
//!   CPU for reads and for writes, and `oracle.ratio = baseline_secs /
//!   (oracle read secs + oracle write secs)`: the ratio a worker sending
//!   exactly these requests could reach with perfect batching.
//!
//! Options: `--users N` (default 300), `--seed S` (default 7),
//! `--operations N` (default: one per user), `--leftover-rate F` (default
//! 0.1), `--concurrency N` (the worker's `STREAM_CONCURRENCY`, default 1000;
//! `1` handles each batch strictly in order), `--batch-size N` (default: the
//! template's `BatchSize`), `--no-backfill` (a table the worker never
//! served), `--parallelization-factor N[,M...]` (default: the template's
//! `ParallelizationFactor`): the drain as a mapping with that factor does
//! it, each read's records split by a hash of their partition key into N
//! lanes (`worker_toolkit::mapping::split_by_partition_key`), each lane
//! cut into batches and invoked in order (retried by itself), the lanes
//! concurrently (a task each); with several factors (`1,10`) every worker
//! run is made at each factor, the first factor's runs give every figure
//! above and each factor gets a line of its own (`parallelization`: worker
//! time, records/s and ratio to the same baseline, invocations, the
//! table's keys that differ from the first run's). With a factor above 1,
//! `worker_secs` is the time at least one `handle_stream` was in flight
//! (the union of the calls' intervals; at factor 1 it is their sum) and
//! `billed_secs` the sum (what Lambda bills); the CPU figures are taken
//! per read's lanes together. `LOAD_TRACE=1` prints each batch's size, record kinds and time;
//! `LOAD_TRACE=2` also every DynamoDB request's span (busy and idle time).
//! The default run takes well under 2 minutes.

#[path = "../tests/it/support/mod.rs"]
mod support;

#[path = "common/engine.rs"]
mod engine;

use engine::cpu_secs;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::workload::{self, ServiceCall, WorkloadSpec};
use aws_sdk_dynamodb::types::{
    AttributeValue, DeleteRequest, PutRequest, ReturnConsumedCapacity, WriteRequest,
};
use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::items::Item;
use nishiki_worker::jobs::relationships::cascade_group;
use nishiki_worker::keys::{ItemKey, Job, PK, SK};
use worker_engine::store::{
    self, DynamoStore, Guard, GuardedOp, GuardedWriter, ItemReader, ItemWriter, MetricsSnapshot,
    QueryStore, ScanSpec, WriteOutcome,
};
use worker_engine::stream::{SequenceNumber, StreamChange, encode_event};
use worker_toolkit::layers::RecordingStore;
use worker_toolkit::stream_reader::{self, StartAt, StreamTail};

// ---------------------------------------------------------------------------
// Peak heap: a counting allocator

struct Counting;

static HEAP: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = HEAP.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are
// updated around it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        HEAP.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's arguments.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                HEAP.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak resident set size of this process (`VmHWM`, KiB; Linux only).
fn max_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

// ---------------------------------------------------------------------------
// Options

struct Options {
    users: usize,
    seed: u64,
    operations: Option<usize>,
    leftover_rate: Option<f64>,
    concurrency: Option<usize>,
    batch_size: Option<usize>,
    no_backfill: bool,
    parallelization: Vec<usize>,
}

fn options() -> Options {
    let mut o = Options {
        users: 300,
        seed: 7,
        operations: None,
        leftover_rate: None,
        concurrency: None,
        batch_size: None,
        no_backfill: false,
        parallelization: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
            None => (a.clone(), None),
        };
        let mut value = |what: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .unwrap_or_else(|| panic!("{what} needs a value"))
        };
        match name.as_str() {
            "--users" => o.users = value("--users").parse().expect("--users: a number"),
            "--seed" => o.seed = value("--seed").parse().expect("--seed: a number"),
            "--operations" => {
                o.operations = Some(
                    value("--operations")
                        .parse()
                        .expect("--operations: a number"),
                )
            }
            "--leftover-rate" => {
                o.leftover_rate = Some(
                    value("--leftover-rate")
                        .parse()
                        .expect("--leftover-rate: a probability"),
                )
            }
            "--concurrency" => {
                o.concurrency = Some(
                    value("--concurrency")
                        .parse()
                        .expect("--concurrency: a number"),
                )
            }
            "--batch-size" => {
                o.batch_size = Some(
                    value("--batch-size")
                        .parse()
                        .expect("--batch-size: a number"),
                )
            }
            "--no-backfill" => o.no_backfill = true,
            "--parallelization-factor" => {
                o.parallelization = value("--parallelization-factor")
                    .split(',')
                    .map(|n| {
                        let n: usize = n
                            .trim()
                            .parse()
                            .expect("--parallelization-factor: numbers, e.g. 1,10");
                        assert!(
                            (1..=10).contains(&n),
                            "--parallelization-factor: 1 to 10, as Lambda allows"
                        );
                        n
                    })
                    .collect()
            }
            // cargo passes `--bench`; anything else is ignored too.
            _ => {}
        }
    }
    o
}

// ---------------------------------------------------------------------------
// Table helpers

/// Baseline runs of each kind (with and without the consumed capacity, and
/// guarded), each on a DynamoDB Local and a copy of B of its own; the median
/// counts.
/// A single run varies by up to 45% from the next (fresh JVMs), so five.
const BASELINE_RUNS: usize = 5;

/// Worker runs (steps 1 to 4), each on a DynamoDB Local of its own, spread
/// between the baseline runs ([`worker_turn`]); the median counts. One
/// drain of the same records varied by 25% from the next on a fresh JVM.
const WORKER_RUNS: usize = 3;

/// Concurrent BatchWriteItem tasks while seeding.
const SEED_TASKS: usize = 8;

async fn create(endpoint: &str, name: &str) -> Arc<DynamoStore> {
    let store = DynamoStore::new(store::local_client(endpoint), name);
    store
        .create_table(&nishiki_worker::schema::nishiki())
        .await
        .expect("create table");
    Arc::new(store)
}

fn key_of(item: &Item) -> (String, String) {
    let s = |n: &str| match item.get(n) {
        Some(AttributeValue::S(s)) => s.clone(),
        _ => String::new(),
    };
    (s(PK), s(SK))
}

/// The whole table by `(PK, SK)` (consistent scan, on a store whose metrics
/// are not the worker's).
async fn snapshot(store: &DynamoStore) -> BTreeMap<(String, String), Item> {
    store
        .scan_all(&ScanSpec {
            consistent: true,
            ..Default::default()
        })
        .await
        .expect("scan")
        .into_iter()
        .map(|i| (key_of(&i), i))
        .collect()
}

/// Apply the service's calls: operation after operation, the calls of one
/// operation in parallel.
async fn apply(store: &Arc<DynamoStore>, w: &workload::Workload) {
    for op in &w.operations {
        let calls = w.calls_of(op).iter().map(|c| {
            let store = store.clone();
            async move {
                let out = match c {
                    ServiceCall::Put(item) => store.put(item.clone(), None).await,
                    ServiceCall::Delete(key) => store.delete(&key.to_attributes(), None).await,
                };
                assert_eq!(out.expect("service write"), WriteOutcome::Applied);
            }
        });
        futures::future::join_all(calls).await;
    }
}

// ---------------------------------------------------------------------------
// The worker's drain

struct DrainStats {
    records: usize,
    invocations: usize,
    latencies: Vec<Duration>,
    worker: Duration,
    reads: usize,
    /// DynamoDB Local's CPU seconds during the `handle_stream` calls.
    engine_cpu: f64,
    /// CPU of the bench's own process (the worker) in `handle_stream`.
    own_cpu: f64,
    /// Records the event source's filter keeps from the function (the
    /// worker's own flags, reminders, suspects and checkpoints).
    filtered: usize,
    /// The largest event handed to `handle_stream`, in bytes of JSON.
    max_payload: usize,
    /// The sum of the `handle_stream` calls' wall times (what Lambda
    /// bills); `worker` is the time at least one was in flight, the same
    /// at factor 1.
    billed: Duration,
    /// The most lanes with records in one read.
    lanes_used: usize,
}

/// What one lane of one read did.
struct LaneStats {
    invocations: usize,
    /// When each `handle_stream` call started and ended.
    calls: Vec<(Instant, Instant)>,
    max_payload: usize,
    engine_cpu: f64,
    own_cpu: f64,
}

/// The time covered by at least one of `calls` (their union's length).
fn busy_time(calls: &mut [(Instant, Instant)]) -> Duration {
    calls.sort();
    let mut total = Duration::ZERO;
    let mut current: Option<(Instant, Instant)> = None;
    for &(start, end) in calls.iter() {
        current = match current {
            Some((s, e)) if start <= e => Some((s, e.max(end))),
            Some((s, e)) => {
                total += e - s;
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    if let Some((s, e)) = current {
        total += e - s;
    }
    total
}

/// Lambda's limit on an invocation's payload: the event source mapping
/// cuts a batch before it would exceed it, whatever its `BatchSize`.
const MAX_PAYLOAD_BYTES: usize = 6 * 1024 * 1024;

/// The bytes of `{"Records":[]}` around the records of an event.
const EVENT_ENVELOPE_BYTES: usize = r#"{"Records":[]}"#.len();

fn json_len(event: &serde_json::Value) -> usize {
    serde_json::to_vec(event)
        .expect("an event serializes")
        .len()
}

/// Cut `changes` into Lambda batches like the event source mapping: at
/// most `batch_size` records and at most [`MAX_PAYLOAD_BYTES`] of event
/// JSON each.
fn lambda_batches(changes: &[StreamChange], batch_size: usize) -> Vec<&[StreamChange]> {
    let mut batches = Vec::new();
    let (mut start, mut bytes) = (0, EVENT_ENVELOPE_BYTES);
    for (i, c) in changes.iter().enumerate() {
        // The record's JSON and the comma before it.
        let size =
            json_len(&encode_event(std::slice::from_ref(c), None)) - EVENT_ENVELOPE_BYTES + 1;
        if i > start && (i - start == batch_size || bytes + size > MAX_PAYLOAD_BYTES) {
            batches.push(&changes[start..i]);
            (start, bytes) = (i, EVENT_ENVELOPE_BYTES);
        }
        bytes += size;
    }
    if start < changes.len() {
        batches.push(&changes[start..]);
    }
    batches
}

/// A record as Lambda's event filtering sees it (the patterns look at the
/// keys only).
fn filter_view(change: &StreamChange) -> serde_json::Value {
    let keys: serde_json::Map<String, serde_json::Value> = change
        .keys
        .iter()
        .filter_map(|(name, value)| match value {
            AttributeValue::S(s) => Some((name.clone(), serde_json::json!({ "S": s }))),
            _ => None,
        })
        .collect();
    serde_json::json!({ "eventSource": "aws:dynamodb", "dynamodb": { "Keys": keys } })
}

/// Drain the stream like the deployed event source mapping: records its
/// `FilterCriteria` drops never reach the function, the rest go in batches
/// of up to `batch_size`; with a `factor` above 1, each read's records go
/// to `factor` lanes by partition key, the lanes at once (a task each).
async fn drain(
    app: &Arc<App>,
    tail: &mut StreamTail,
    patterns: &[serde_json::Value],
    batch_size: usize,
    engine: Option<u32>,
    factor: usize,
) -> DrainStats {
    let mut s = DrainStats {
        engine_cpu: 0.0,
        own_cpu: 0.0,
        filtered: 0,
        records: 0,
        invocations: 0,
        latencies: Vec::new(),
        worker: Duration::ZERO,
        reads: 0,
        max_payload: 0,
        billed: Duration::ZERO,
        lanes_used: 0,
    };
    let mut calls = Vec::new();
    // Quiet: two consecutive empty reads (DynamoDB Local publishes a write's
    // record with the write, but be safe).
    let mut empty = 0;
    for _round in 0..200 {
        let read: Vec<StreamChange> = tail
            .poll()
            .await
            .expect("read stream")
            .into_iter()
            .map(|(_, c)| c)
            .collect();
        s.reads += 1;
        let quiet = read.is_empty();
        let read_len = read.len();
        let changes: Vec<StreamChange> = read
            .into_iter()
            .filter(|c| support::template::delivered(patterns, &filter_view(c)))
            .collect();
        s.filtered += read_len - changes.len();
        if quiet {
            empty += 1;
            if empty >= 2 {
                s.worker = busy_time(&mut calls);
                return s;
            }
            continue;
        }
        empty = 0;
        s.records += changes.len();
        let lanes: Vec<Vec<StreamChange>> =
            worker_toolkit::mapping::split_by_partition_key(changes, Some(PK), factor)
                .into_iter()
                .filter(|l| !l.is_empty())
                .collect();
        s.lanes_used = s.lanes_used.max(lanes.len());
        // At factor 1 the CPU is taken per call, as before; lanes at once
        // share the process and the engine, so per read.
        let per_call_cpu = factor <= 1;
        let cpu_at_start = cpu_secs(engine);
        let own_at_start = cpu_secs(Some(std::process::id()));
        let tasks: Vec<_> = lanes
            .into_iter()
            .map(|lane| {
                tokio::spawn(drain_lane(
                    app.clone(),
                    lane,
                    batch_size,
                    engine,
                    per_call_cpu,
                ))
            })
            .collect();
        for t in tasks {
            let lane = t.await.expect("a lane's task");
            s.invocations += lane.invocations;
            s.max_payload = s.max_payload.max(lane.max_payload);
            s.engine_cpu += lane.engine_cpu;
            s.own_cpu += lane.own_cpu;
            for &(start, end) in &lane.calls {
                s.latencies.push(end - start);
                s.billed += end - start;
            }
            calls.extend(lane.calls);
        }
        if !per_call_cpu {
            s.engine_cpu += cpu_secs(engine) - cpu_at_start;
            s.own_cpu += cpu_secs(Some(std::process::id())) - own_at_start;
        }
    }
    panic!("the stream did not settle after 200 reads");
}

/// One lane of one read: its records in Lambda batches, one after the
/// other, each retried from its first reported failure.
async fn drain_lane(
    app: Arc<App>,
    lane: Vec<StreamChange>,
    batch_size: usize,
    engine: Option<u32>,
    per_call_cpu: bool,
) -> LaneStats {
    let mut s = LaneStats {
        invocations: 0,
        calls: Vec::new(),
        max_payload: 0,
        engine_cpu: 0.0,
        own_cpu: 0.0,
    };
    for chunk in lambda_batches(&lane, batch_size) {
        let mut pending = chunk.to_vec();
        for attempt in 0.. {
            assert!(attempt < 5, "a batch kept failing after 5 attempts");
            let event = encode_event(&pending, None);
            let payload = json_len(&event);
            assert!(
                payload <= MAX_PAYLOAD_BYTES,
                "a batch over Lambda's payload limit"
            );
            s.max_payload = s.max_payload.max(payload);
            // As Lambda delivers it: the event's bytes, read by the
            // stream entry point's decoder.
            let bytes = serde_json::to_vec(&event).expect("an event serializes");
            drop(event);
            let cpu_at_start = per_call_cpu.then(|| cpu_secs(engine));
            let own_at_start = per_call_cpu.then(|| cpu_secs(Some(std::process::id())));
            let started = Instant::now();
            let report = app
                .worker()
                .handle_stream_bytes(&bytes, None)
                .await
                .expect("stream event");
            let ended = Instant::now();
            let took = ended - started;
            if let (Some(cpu), Some(own)) = (cpu_at_start, own_at_start) {
                s.engine_cpu += cpu_secs(engine) - cpu;
                s.own_cpu += cpu_secs(Some(std::process::id())) - own;
            }
            if std::env::var_os("LOAD_TRACE").is_some() {
                let kinds = pending.iter().fold(BTreeMap::new(), |mut m, c| {
                    let item = ItemKey::from_attributes(&c.keys)
                        .map(|k| format!("{:?}", k.kind()))
                        .unwrap_or_else(|_| "?".into());
                    *m.entry(format!("{:?} {item}", c.kind)).or_insert(0) += 1;
                    m
                });
                eprintln!(
                    "batch {} records {:?}: {:.1} ms",
                    pending.len(),
                    kinds,
                    took.as_secs_f64() * 1000.0
                );
            }
            s.calls.push((started, ended));
            s.invocations += 1;
            let Some(seq) = report.batch_item_failures.first() else {
                break;
            };
            let failed: SequenceNumber = seq.parse().expect("a sequence number");
            pending.retain(|c| c.sequence_number.as_ref().is_some_and(|s| *s >= failed));
        }
    }
    s
}

/// One request of each read kind the worker uses, before timing: DynamoDB
/// Local compiles each code path on first use (its first PartiQL SELECT
/// takes ~1 s), a one-off cost of the emulator that neither the service nor
/// the baseline's BatchWriteItem (warmed by the seeding) pays in the timed
/// part.
async fn warm_up(store: &DynamoStore) {
    let absent = AttributeValue::S("warm-up".into());
    let key: worker_engine::store::Key = [
        (PK.to_owned(), absent.clone()),
        (SK.to_owned(), absent.clone()),
    ]
    .into();
    store
        .get_many(&[key], true)
        .await
        .expect("warm-up BatchGetItem");
    for index in [
        nishiki_worker::schema::USER_AND_GROUP_INDEX,
        nishiki_worker::schema::GROUP_AND_CONTAINER_INDEX,
    ] {
        let attribute = if index == nishiki_worker::schema::USER_AND_GROUP_INDEX {
            nishiki_worker::items::attr::GROUP_ID
        } else {
            nishiki_worker::items::attr::CONTAINER_ID
        };
        store
            .query_partitions(Some(index), attribute, std::slice::from_ref(&absent), false)
            .await
            .expect("warm-up PartiQL SELECT");
    }
    store
        .query_partitions(None, PK, std::slice::from_ref(&absent), true)
        .await
        .expect("warm-up PartiQL SELECT");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

// ---------------------------------------------------------------------------
// The raw-SDK baseline

fn requests(d: &MetricsSnapshot) -> u64 {
    d.requests()
}

// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// One worker run

/// What every worker run is given.
struct Setup<'a> {
    o: &'a Options,
    spec: &'a WorkloadSpec,
    w: &'a workload::Workload,
    patterns: &'a [serde_json::Value],
    batch_size: usize,
}

type Table = BTreeMap<(String, String), Item>;

/// One worker run (steps 1 to 4, and the *after* snapshot of step 5).
struct WorkerRun {
    before: Table,
    after: Table,
    stats: DrainStats,
    /// The worker store's metrics over the drain.
    d: MetricsSnapshot,
    /// Every read and write the worker asked for.
    asked: support::recorded::Log,
    drain_wall: Duration,
    heap_at_start: usize,
    peak_heap: usize,
}

/// Steps 1 to 4 on a DynamoDB Local of its own: table A seeded and
/// backfilled, the service's calls applied, *before* snapshotted, the
/// stream drained through the worker, *after* snapshotted.
async fn worker_run(s: &Setup<'_>, factor: usize) -> WorkerRun {
    let (o, spec, w) = (s.o, s.spec, s.w);
    let local = worker_toolkit::local::start_jit(worker_toolkit::local::Jit::Full)
        .await
        .expect("DynamoDB Local must start (see the error for what to install)");
    let endpoint = local.endpoint_url();

    // 1. Table A, seeded; the seeding's stream records are skipped.
    let service = create(&endpoint, "load-worker").await;
    let started = Instant::now();
    support::seed_concurrently(&service, w.population.clone(), SEED_TASKS).await;
    // The worker's derived items of a table it has been serving (flags and
    // reminders of every food): without them every removal would delete
    // reminders and flags that a served table has but this one lacks.
    let backfill = if o.no_backfill {
        "not backfilled (--no-backfill)".to_owned()
    } else {
        App::new(
            service.clone(),
            Config::for_table("load-worker"),
            Arc::new(ManualClock::new(spec.now)),
        )
        .run_job(Job::Backfill, None)
        .await
        .expect("backfill the population")
        .summary
    };
    let arn = service
        .stream_arn()
        .await
        .expect("describe table")
        .expect("stream enabled");
    let mut tail = StreamTail::new(
        stream_reader::local_client(&endpoint),
        arn,
        StartAt::TrimHorizon,
    );
    let skipped = tail.poll().await.expect("read stream").len();
    eprintln!(
        "seeded {} items; backfill: {}; in {:.1} s (skipped {skipped} stream records)",
        w.population.len(),
        backfill,
        started.elapsed().as_secs_f64()
    );

    // 2. The service's calls.
    let started = Instant::now();
    apply(&service, w).await;
    eprintln!(
        "applied {} service calls in {:.1} s",
        w.calls.len(),
        started.elapsed().as_secs_f64()
    );

    // 3. Snapshot (table B, a copy of it, is made for each baseline run).
    let before = snapshot(&service).await;

    // 4. The worker drains A's stream.
    let worker_store = Arc::new(DynamoStore::new(
        store::local_client(&endpoint),
        "load-worker",
    ));
    let mut config = Config::for_table("load-worker");
    if let Some(n) = o.concurrency {
        config.common.stream_concurrency = n.max(1);
    }
    let recording = Arc::new(RecordingStore::new(worker_store.clone()).with_reads());
    let app = Arc::new(App::new(
        recording.clone(),
        config,
        Arc::new(ManualClock::new(spec.now)),
    ));
    warm_up(&worker_store).await;
    let m0 = worker_store.metrics().snapshot();
    let heap_at_start = HEAP.load(Ordering::Relaxed);
    PEAK.store(heap_at_start, Ordering::Relaxed);
    let wall = Instant::now();
    let stats = drain(
        &app,
        &mut tail,
        s.patterns,
        s.batch_size,
        local.pid(),
        factor,
    )
    .await;
    let drain_wall = wall.elapsed();
    let peak_heap = PEAK.load(Ordering::Relaxed);
    let d = worker_store.metrics().snapshot().since(&m0);
    drop(app);
    let asked = support::recorded::Log::of(recording.take());
    let after = snapshot(&service).await;
    eprintln!(
        "worker run, parallelization factor {factor}: {} records in {:.3} s ({:.3} s billed, {} invocations)",
        stats.records,
        stats.worker.as_secs_f64(),
        stats.billed.as_secs_f64(),
        stats.invocations
    );
    WorkerRun {
        before,
        after,
        stats,
        d,
        asked,
        drain_wall,
        heap_at_start,
        peak_heap,
    }
}

impl WorkerRun {
    /// Records handled per second of `handle_stream`.
    fn rps(&self) -> f64 {
        self.stats.records as f64 / self.stats.worker.as_secs_f64()
    }
}

/// The keys one operation of the service both puts and deletes, its calls
/// going out at once: which call lands last differs from run to run, and
/// with it the table and a few stream records.
fn raced_keys(w: &workload::Workload) -> std::collections::BTreeSet<(String, String)> {
    let mut raced = std::collections::BTreeSet::new();
    for op in &w.operations {
        let calls = w.calls_of(op);
        let deleted: Vec<(String, String)> = calls
            .iter()
            .filter_map(|c| match c {
                ServiceCall::Delete(key) => Some(key_of(&key.to_attributes())),
                ServiceCall::Put(_) => None,
            })
            .collect();
        for c in calls {
            if let ServiceCall::Put(item) = c
                && deleted.contains(&key_of(item))
            {
                raced.insert(key_of(item));
            }
        }
    }
    raced
}

/// `a, b, ...` of times in seconds, to the millisecond.
fn secs_text(secs: &[f64]) -> String {
    secs.iter()
        .map(|t| format!("{t:.3}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `kind n, kind n, ...` of counts by kind.
fn counts_text(counts: &BTreeMap<String, usize>) -> String {
    counts
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A worker run at a parallelization factor other than the first.
struct FactorRun {
    stats: DrainStats,
    /// Keys where its table differs from the first run's.
    differ: usize,
}

/// One worker run at each of `factors`, each table compared with the
/// first run's by `differing` (reported, not asserted: what a factor
/// changes is a finding).
async fn runs_at(
    setup: &Setup<'_>,
    factors: &[usize],
    differing: &dyn Fn(&WorkerRun) -> Vec<(String, String)>,
) -> Vec<FactorRun> {
    let mut out = Vec::new();
    for &f in factors {
        let run = worker_run(setup, f).await;
        let differ = differing(&run);
        if !differ.is_empty() {
            eprintln!(
                "parallelization factor {f}: the table differs from the first run's at {} keys, e.g. {:?}",
                differ.len(),
                &differ[..differ.len().min(5)]
            );
        }
        out.push(FactorRun {
            stats: run.stats,
            differ: differ.len(),
        });
    }
    out
}

/// The guarded baseline's writes: the minimal set, each write the worker
/// made with that same effect in a guarded transaction sent in that
/// transaction again (its guards as condition checks, its ops cut down to
/// the minimal set's; a key the worker wrote in several goes to the last
/// one), the rest in BatchWriteItem as the plain baseline sends them.
struct GuardedPlan {
    transactions: Vec<(Vec<Guard>, Vec<GuardedOp>)>,
    batch: Vec<WriteRequest>,
}

/// The guarded baseline's plan for `minimal`, the plain baseline's writes.
fn guarded_plan(minimal: &[WriteRequest], guarded: &[(Vec<Guard>, Vec<GuardedOp>)]) -> GuardedPlan {
    // Each write of the minimal set by key: `Some` puts the item, `None`
    // deletes the key.
    fn effect(w: &WriteRequest) -> ((String, String), Option<&Item>) {
        match (w.put_request(), w.delete_request()) {
            (Some(put), _) => (key_of(put.item()), Some(put.item())),
            (None, Some(delete)) => (key_of(delete.key()), None),
            (None, None) => unreachable!("a WriteRequest puts or deletes"),
        }
    }
    let net: BTreeMap<(String, String), Option<&Item>> = minimal.iter().map(effect).collect();
    let mut last = BTreeMap::new();
    for (i, (_, ops)) in guarded.iter().enumerate() {
        for op in ops {
            let key = key_of(op.target());
            let same = match (op, net.get(&key)) {
                (GuardedOp::Put { item, .. }, Some(Some(put))) => item == *put,
                (GuardedOp::Delete { .. }, Some(None)) => true,
                (GuardedOp::Update { .. }, Some(Some(_))) => true,
                _ => false,
            };
            if same {
                last.insert(key, i);
            }
        }
    }
    let transactions = guarded
        .iter()
        .enumerate()
        .filter_map(|(i, (guards, ops))| {
            let ops: Vec<GuardedOp> = ops
                .iter()
                .filter(|op| last.get(&key_of(op.target())) == Some(&i))
                .cloned()
                .collect();
            (!ops.is_empty()).then(|| (guards.clone(), ops))
        })
        .collect();
    let batch = minimal
        .iter()
        .filter(|w| !last.contains_key(&effect(w).0))
        .cloned()
        .collect();
    GuardedPlan {
        transactions,
        batch,
    }
}

/// What a guarded baseline run sent and what it took.
struct GuardedSent {
    transactions: usize,
    transacted_items: usize,
    batch_requests: usize,
    withheld: usize,
    time: Duration,
}

impl GuardedSent {
    fn requests(&self) -> usize {
        self.transactions + self.batch_requests
    }
}

/// The guarded baseline: its transactions (as the worker's store sends
/// them, one after the other), then its BatchWriteItem requests.
async fn send_guarded(store: &DynamoStore, table: &str, plan: &GuardedPlan) -> GuardedSent {
    let started = Instant::now();
    let mut sent = GuardedSent {
        transactions: 0,
        transacted_items: 0,
        batch_requests: 0,
        withheld: 0,
        time: Duration::ZERO,
    };
    for (guards, ops) in &plan.transactions {
        let report = store
            .write_guarded(guards, ops.clone())
            .await
            .expect("TransactWriteItems");
        sent.transactions += report.requests as usize;
        sent.transacted_items += ops.len();
        sent.withheld += report.withheld + report.refused;
    }
    let batch = support::raw_batch_write_with(
        store.client(),
        table,
        plan.batch.clone(),
        Some(ReturnConsumedCapacity::Total),
    )
    .await;
    sent.batch_requests = batch.requests;
    sent.time = started.elapsed();
    sent
}

/// Whether a worker run goes before baseline turn `i` (a like-for-like,
/// a plain and a guarded run): [`WORKER_RUNS`] spread evenly over the
/// [`BASELINE_RUNS`] turns, the first before turn 0
/// (its table gives the baseline its writes).
fn worker_turn(i: usize) -> bool {
    i * WORKER_RUNS % BASELINE_RUNS < WORKER_RUNS
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let o = options();
    if std::env::var("LOAD_TRACE").as_deref() == Ok("2") {
        tracing_subscriber::fmt()
            .with_env_filter("aws_sdk_dynamodb=debug,off")
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(std::io::stderr)
            .init();
    }
    let mut spec = WorkloadSpec::sized(o.seed, o.users);
    if let Some(n) = o.operations {
        spec.operations = n;
    }
    if let Some(r) = o.leftover_rate {
        spec.leftover_rate = r;
    }
    let generated_at = Instant::now();
    let w = workload::generate(&spec);
    let generate_ms = generated_at.elapsed().as_secs_f64() * 1000.0;
    let leftovers = w.operations.iter().filter(|op| op.leftover).count();
    eprintln!(
        "workload seed {}: {} users, {} groups, population {} items, {} operations ({} with leftovers), {} calls (generated in {generate_ms:.0} ms)",
        spec.seed,
        spec.users,
        spec.groups,
        w.population.len(),
        w.operations.len(),
        leftovers,
        w.calls.len()
    );

    let template = support::template::template();
    let source = support::template::stream_event_source(&template);
    let patterns = support::template::filter_patterns(source);
    let batch_size = o.batch_size.unwrap_or_else(|| {
        source["BatchSize"]
            .as_u64()
            .expect("the stream event source sets BatchSize") as usize
    });
    let setup = Setup {
        o: &o,
        spec: &spec,
        w: &w,
        patterns: &patterns,
        batch_size: batch_size.max(1),
    };

    // The parallelization factors: the first one's runs give every figure,
    // each other one gets a line of its own.
    let factors: Vec<usize> = if o.parallelization.is_empty() {
        let d =
            worker_toolkit::template::Deployment::from_template(&template, "infra/template.yaml")
                .expect("the template's stream settings");
        vec![
            d.streams
                .first()
                .map_or(1, |s| s.parallelization_factor as usize),
        ]
    } else {
        o.parallelization.clone()
    };
    let primary = factors[0];
    let mut factor_runs: Vec<(usize, Vec<FactorRun>)> =
        factors[1..].iter().map(|f| (*f, Vec::new())).collect();

    // 1-4. The first worker run: its table gives the minimal set of writes.
    let mut worker_runs = vec![worker_run(&setup, primary).await];
    let raced = raced_keys(&w);
    let before = std::mem::take(&mut worker_runs[0].before);
    let after = std::mem::take(&mut worker_runs[0].after);
    // The keys where a run's table differs from the first run's (but for
    // the keys the service both puts and deletes at once).
    let differing = |this: &WorkerRun| -> Vec<(String, String)> {
        let mut keys = Vec::new();
        for (first, this) in [(&before, &this.before), (&after, &this.after)] {
            keys.extend(
                first
                    .iter()
                    .filter(|(k, v)| this.get(*k) != Some(*v))
                    .map(|(k, _)| k)
                    .chain(this.keys().filter(|k| !first.contains_key(*k)))
                    .filter(|k| !raced.contains(*k))
                    .cloned(),
            );
        }
        keys
    };
    let others: Vec<usize> = factor_runs.iter().map(|(f, _)| *f).collect();
    for (run, (_, runs)) in runs_at(&setup, &others, &differing)
        .await
        .into_iter()
        .zip(factor_runs.iter_mut())
    {
        runs.push(run);
    }

    // 5. What the worker changed.
    let deleted: Vec<&(String, String)> =
        before.keys().filter(|k| !after.contains_key(*k)).collect();
    let put: Vec<&Item> = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .map(|(_, v)| v)
        .collect();
    let mut ops: Vec<WriteRequest> = deleted
        .iter()
        .map(|(pk, sk)| {
            let key = Item::from([
                (PK.to_owned(), AttributeValue::S(pk.clone())),
                (SK.to_owned(), AttributeValue::S(sk.clone())),
            ]);
            WriteRequest::builder()
                .delete_request(DeleteRequest::builder().set_key(Some(key)).build().unwrap())
                .build()
        })
        .collect();
    ops.extend(put.iter().map(|item| {
        WriteRequest::builder()
            .put_request(
                PutRequest::builder()
                    .set_item(Some((*item).clone()))
                    .build()
                    .unwrap(),
            )
            .build()
    }));
    let minimal_writes = ops.len();
    // The minimal set by item kind (deleted, put).
    let mut net_by_kind: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let kind_of = |pk: &str, sk: &str| {
        let key = Item::from([
            (PK.to_owned(), AttributeValue::S(pk.to_owned())),
            (SK.to_owned(), AttributeValue::S(sk.to_owned())),
        ]);
        ItemKey::from_attributes(&key)
            .map(|k| format!("{:?}", k.kind()))
            .unwrap_or_else(|_| "?".into())
    };
    for (pk, sk) in &deleted {
        net_by_kind.entry(kind_of(pk, sk)).or_default().0 += 1;
    }
    for item in &put {
        let (pk, sk) = key_of(item);
        net_by_kind.entry(kind_of(&pk, &sk)).or_default().1 += 1;
    }
    let net_by_kind_text = net_by_kind
        .iter()
        .map(|(k, (d, p))| format!("{k} -{d} +{p}"))
        .collect::<Vec<_>>()
        .join(", ");

    // 6. The baseline on B: its requests ask for the consumed capacity as
    // the worker's store does (DynamoDB Local charges for computing it,
    // AWS does not); the plain runs leave it out.
    let mut base_times = Vec::new();
    let mut plain_times = Vec::new();
    let mut guarded_times = Vec::new();
    let mut guarded_sent = None;
    let mut base_requests = 0;
    let mut base_wcu = 0.0;
    let mut identical = true;
    let plan = guarded_plan(&ops, &worker_runs[0].asked.guarded);
    for run in 0..3 * BASELINE_RUNS {
        // Like-for-like, plain and guarded runs in turn.
        let like_worker = run % 3 == 0;
        let guarded = run % 3 == 2;
        if like_worker && run > 0 && worker_turn(run / 3) {
            let again = worker_run(&setup, primary).await;
            for (name, first, this) in [
                ("before", &before, &again.before),
                ("after", &after, &again.after),
            ] {
                let differ: Vec<_> = first
                    .iter()
                    .filter(|(k, v)| this.get(*k) != Some(*v))
                    .map(|(k, _)| k)
                    .chain(this.keys().filter(|k| !first.contains_key(*k)))
                    .filter(|k| !raced.contains(*k))
                    .take(5)
                    .collect();
                assert!(
                    differ.is_empty(),
                    "every worker run must start from and end in the same table \
                     (but for keys the service both puts and deletes at once); \
                     {name} differs at {differ:?}"
                );
            }
            // Only the first run's tables are needed from here on; the
            // bench's peak RSS stays that of one run's.
            let again = WorkerRun {
                before: Table::new(),
                after: Table::new(),
                ..again
            };
            worker_runs.push(again);
            for (run, (_, runs)) in runs_at(&setup, &others, &differing)
                .await
                .into_iter()
                .zip(factor_runs.iter_mut())
            {
                runs.push(run);
            }
        }
        // A DynamoDB Local of its own: there a write to the k-th table with
        // a stream slows down with k (see `benches/local_tables.rs`), and
        // A is the first table of the worker's instance.
        let local = worker_toolkit::local::start_jit(worker_toolkit::local::Jit::Full)
            .await
            .expect("DynamoDB Local for the baseline");
        let store = create(&local.endpoint_url(), "load-baseline").await;
        support::seed_concurrently(&store, before.values().cloned().collect(), SEED_TASKS).await;
        let capacity = (like_worker || guarded).then_some(ReturnConsumedCapacity::Total);
        engine::warm_writes(store.client(), "load-baseline", capacity.clone()).await;
        let cpu_at_start = cpu_secs(local.pid());
        if guarded {
            let sent = send_guarded(&store, "load-baseline", &plan).await;
            guarded_times.push((sent.time, cpu_secs(local.pid()) - cpu_at_start));
            guarded_sent = Some(sent);
            identical &= snapshot(&store).await == after;
            continue;
        }
        let sent =
            support::raw_batch_write_with(store.client(), "load-baseline", ops.clone(), capacity)
                .await;
        let took = (sent.time, cpu_secs(local.pid()) - cpu_at_start);
        if like_worker {
            base_requests = sent.requests;
            base_wcu = sent.consumed_capacity;
            base_times.push(took);
        } else {
            plain_times.push(took);
        }
        identical &= snapshot(&store).await == after;
    }
    let base_runs: Vec<f64> = base_times.iter().map(|(t, _)| t.as_secs_f64()).collect();
    let plain_runs: Vec<f64> = plain_times.iter().map(|(t, _)| t.as_secs_f64()).collect();
    base_times.sort_by_key(|(t, _)| *t);
    plain_times.sort_by_key(|(t, _)| *t);
    let (base_time, base_engine_cpu) = base_times[base_times.len() / 2];
    let (plain_time, plain_engine_cpu) = plain_times[plain_times.len() / 2];
    let guarded_runs: Vec<f64> = guarded_times.iter().map(|(t, _)| t.as_secs_f64()).collect();
    guarded_times.sort_by_key(|(t, _)| *t);
    let (guarded_time, guarded_engine_cpu) = guarded_times[guarded_times.len() / 2];
    let guarded_sent = guarded_sent.expect("a guarded baseline run");
    // The median worker run counts, for every figure of the drain.
    let worker_runs_secs: Vec<f64> = worker_runs
        .iter()
        .map(|r| r.stats.worker.as_secs_f64())
        .collect();
    let baseline_records = worker_runs[0].stats.records;
    worker_runs.sort_by(|a, b| a.rps().total_cmp(&b.rps()));
    let WorkerRun {
        stats,
        d,
        asked,
        drain_wall,
        heap_at_start,
        peak_heap,
        ..
    } = worker_runs.swap_remove(worker_runs.len() / 2);
    drop(worker_runs);

    // The worker's batch-written items by effect, applied in order to
    // *before*: a delete of a missing key or a put of the item as stored
    // changes nothing (DynamoDB still charges it).
    let mut write_effects: BTreeMap<String, usize> = BTreeMap::new();
    let mut noop_writes = 0;
    {
        let mut state = before.clone();
        for op in &asked.batch_ops {
            let (kind, effect) = match op {
                store::WriteOp::Put(item) => {
                    let k = key_of(item);
                    let effect = match state.insert(k.clone(), item.clone()) {
                        None => "put new",
                        Some(old) if old == *item => "put as stored",
                        Some(_) => "put changed",
                    };
                    (kind_of(&k.0, &k.1), effect)
                }
                store::WriteOp::Delete(key) => {
                    let k = key_of(key);
                    let effect = match state.remove(&k) {
                        Some(_) => "delete existing",
                        None => "delete missing",
                    };
                    (kind_of(&k.0, &k.1), effect)
                }
            };
            noop_writes += usize::from(matches!(effect, "put as stored" | "delete missing"));
            *write_effects.entry(format!("{kind} {effect}")).or_default() += 1;
        }
    }
    // Keys the worker batch-wrote more than once in the drain, by kind and
    // sequence of writes (`D` delete, `P` put): `ExpiryReminder PD` is a
    // reminder put by one record and deleted by a later one.
    let mut rewrites: BTreeMap<String, usize> = BTreeMap::new();
    {
        let mut seq: BTreeMap<(String, String), String> = BTreeMap::new();
        for op in &asked.batch_ops {
            let (k, c) = match op {
                store::WriteOp::Put(item) => (key_of(item), 'P'),
                store::WriteOp::Delete(key) => (key_of(key), 'D'),
            };
            seq.entry(k).or_default().push(c);
        }
        for ((pk, sk), s) in seq {
            if s.len() > 1 {
                *rewrites
                    .entry(format!("{} {s}", kind_of(&pk, &sk)))
                    .or_default() += 1;
            }
        }
    }
    let rewrites_text = counts_text(&rewrites);
    let write_effects_text = counts_text(&write_effects);

    // The worker's reads by what they read: point reads by item kind,
    // whole-partition reads by index (`table` for a PK partition).
    let mut read_mix: BTreeMap<String, usize> = BTreeMap::new();
    for (key, _) in &asked.gets {
        let kind = ItemKey::from_attributes(key)
            .map(|k| format!("{:?}", k.kind()))
            .unwrap_or_else(|_| "?".into());
        *read_mix.entry(format!("get {kind}")).or_default() += 1;
    }
    for (index, attribute, _, _) in &asked.partitions {
        let on = index.as_deref().unwrap_or("table");
        *read_mix
            .entry(format!("partition {on} by {attribute}"))
            .or_default() += 1;
    }
    let read_mix_text = counts_text(&read_mix);

    // 7. The oracle: the worker's own reads and writes (as recorded), each
    // sent once with perfect batching, one request after the other, on a
    // table seeded with *before* on a DynamoDB Local of its own.
    let oracle = {
        let local = worker_toolkit::local::start_jit(worker_toolkit::local::Jit::Full)
            .await
            .expect("DynamoDB Local for the oracle");
        let store = create(&local.endpoint_url(), "load-oracle").await;
        support::seed_concurrently(&store, before.values().cloned().collect(), SEED_TASKS).await;
        engine::warm_writes(
            store.client(),
            "load-oracle",
            Some(ReturnConsumedCapacity::Total),
        )
        .await;
        warm_up(&store).await;
        let cpu = cpu_secs(local.pid());
        let reads = support::recorded::replay_reads(&store, &asked).await;
        let cpu_reads = cpu_secs(local.pid()) - cpu;
        let cpu = cpu_secs(local.pid());
        let writes = support::recorded::replay_writes(&store, &asked).await;
        let cpu_writes = cpu_secs(local.pid()) - cpu;
        (reads, cpu_reads, writes, cpu_writes)
    };
    let (oracle_reads, oracle_reads_cpu, oracle_writes, oracle_writes_cpu) = oracle;
    // 7b. The same writes in the baseline's order (deletes, then puts, each
    // by key) on a DynamoDB Local of its own: how much of the oracle's gap
    // to the baseline is the order DynamoDB Local receives writes in. For
    // the time only (a key put then deleted ends otherwise).
    let sorted_writes = {
        let local = worker_toolkit::local::start_jit(worker_toolkit::local::Jit::Full)
            .await
            .expect("DynamoDB Local for the sorted oracle");
        let store = create(&local.endpoint_url(), "load-oracle").await;
        support::seed_concurrently(&store, before.values().cloned().collect(), SEED_TASKS).await;
        engine::warm_writes(
            store.client(),
            "load-oracle",
            Some(ReturnConsumedCapacity::Total),
        )
        .await;
        let mut sorted = asked.clone();
        sorted.batch_ops.sort_by_cached_key(|op| match op {
            worker_engine::store::WriteOp::Delete(k) => (0, key_of(k)),
            worker_engine::store::WriteOp::Put(item) => (1, key_of(item)),
        });
        let cpu = cpu_secs(local.pid());
        let sorted_time = support::recorded::replay_writes(&store, &sorted).await;
        (sorted_time, cpu_secs(local.pid()) - cpu)
    };
    let oracle_secs = (oracle_reads.time + oracle_writes.time).as_secs_f64();

    // 8. Bulk deletes of one group cascade, on a DynamoDB Local of its own.
    let local = worker_toolkit::local::start_jit(worker_toolkit::local::Jit::Full)
        .await
        .expect("DynamoDB Local for the group cascade");
    let endpoint = local.endpoint_url();
    let service = create(&endpoint, "load-worker").await;
    let big = workload::big_group(o.seed ^ 0x5eed, 60, 4, spec.now);
    support::seed_concurrently(&service, big.items.clone(), SEED_TASKS).await;
    service
        .delete(&ItemKey::Group(big.group).to_attributes(), None)
        .await
        .expect("delete the group");
    let cascade_store = DynamoStore::new(store::local_client(&endpoint), "load-worker");
    let report = cascade_group(&cascade_store, big.group)
        .await
        .expect("cascade");
    let c = cascade_store.metrics().snapshot();
    let cascade_deleted =
        report.memberships + report.links + report.containers + report.invitations + report.flags;
    let conditional = c.delete_item + c.put_item + c.update_item;
    let bulk_bound = cascade_deleted.div_ceil(25) as u64;
    let bulk_ok = c.batch_write_item <= bulk_bound;

    // Figures.
    let records = stats.records.max(1) as f64;
    let worker_secs = stats.worker.as_secs_f64();
    let worker_rps = stats.records as f64 / worker_secs;
    let baseline_secs = base_time.as_secs_f64();
    let baseline_rps = baseline_records as f64 / baseline_secs;
    let ratio = worker_rps / baseline_rps;
    let plain_secs = plain_time.as_secs_f64();
    let ratio_plain = worker_rps / (baseline_records as f64 / plain_secs);
    let guarded_secs = guarded_time.as_secs_f64();
    let ratio_guarded = worker_rps / (baseline_records as f64 / guarded_secs);
    let mut lat = stats.latencies.clone();
    lat.sort();
    let p50 = percentile(&lat, 50.0).as_secs_f64() * 1000.0;
    let p99 = percentile(&lat, 99.0).as_secs_f64() * 1000.0;
    let rss = max_rss_kib();

    // Each parallelization factor side by side, against the same baseline
    // (the first factor's line repeats the figures above).
    let factor_figures = |factor: usize, stats: &DrainStats, runs_secs: &[f64], differ: usize| {
        let secs = stats.worker.as_secs_f64();
        let rps = stats.records as f64 / secs;
        let mut lat = stats.latencies.clone();
        lat.sort();
        let p50 = percentile(&lat, 50.0).as_secs_f64() * 1000.0;
        let p99 = percentile(&lat, 99.0).as_secs_f64() * 1000.0;
        let text = format!(
            "{} records, worker {secs:.3} s (runs: {}), billed {:.3} s, {rps:.1} records/s, ratio {:.3}, {} invocations in up to {} lanes, batch p50 / p99 {p50:.0} / {p99:.0} ms, table differs at {differ} keys",
            stats.records,
            secs_text(runs_secs),
            stats.billed.as_secs_f64(),
            rps / baseline_rps,
            stats.invocations,
            stats.lanes_used,
        );
        let json = serde_json::json!({
            "factor": factor,
            "records": stats.records,
            "worker_secs": secs,
            "worker_runs_secs": runs_secs,
            "billed_secs": stats.billed.as_secs_f64(),
            "worker_rps": rps,
            "ratio": rps / baseline_rps,
            "invocations": stats.invocations,
            "lanes_used": stats.lanes_used,
            "batch_p50_ms": p50,
            "batch_p99_ms": p99,
            "worker_engine_cpu_secs": stats.engine_cpu,
            "worker_own_cpu_secs": stats.own_cpu,
            "table_differs_keys": differ,
        });
        (text, json)
    };
    let mut by_factor = vec![factor_figures(primary, &stats, &worker_runs_secs, 0)];
    for (factor, mut runs) in factor_runs {
        let runs_secs: Vec<f64> = runs.iter().map(|r| r.stats.worker.as_secs_f64()).collect();
        let differ = runs.iter().map(|r| r.differ).max().unwrap_or(0);
        let rps = |r: &FactorRun| r.stats.records as f64 / r.stats.worker.as_secs_f64();
        runs.sort_by(|a, b| rps(a).total_cmp(&rps(b)));
        let median = runs.swap_remove(runs.len() / 2);
        by_factor.push(factor_figures(factor, &median.stats, &runs_secs, differ));
    }

    println!();
    println!(
        "load driver: seed {}, {} users, {} operations, leftover rate {} (DynamoDB Local)",
        spec.seed, spec.users, spec.operations, spec.leftover_rate
    );
    let rows: Vec<(&str, String)> = vec![
        ("stream records handled", stats.records.to_string()),
        (
            "records dropped by the FilterCriteria",
            stats.filtered.to_string(),
        ),
        ("batch size (template BatchSize)", batch_size.to_string()),
        ("handle_stream invocations", stats.invocations.to_string()),
        (
            "largest event (limit 6 MiB)",
            format!("{:.2} MiB", stats.max_payload as f64 / (1024.0 * 1024.0)),
        ),
        (
            "worker time (sum of handle_stream)",
            format!(
                "{worker_secs:.3} s (median of runs: {})",
                secs_text(&worker_runs_secs)
            ),
        ),
        (
            "DynamoDB Local CPU in handle_stream",
            format!("{:.3} s", stats.engine_cpu),
        ),
        (
            "the worker's own CPU in handle_stream",
            format!("{:.3} s", stats.own_cpu),
        ),
        (
            "drain wall time (incl. stream reads)",
            format!("{:.3} s", drain_wall.as_secs_f64()),
        ),
        ("worker records/s", format!("{worker_rps:.1}")),
        (
            "DynamoDB requests / record",
            format!("{:.3}", requests(&d) as f64 / records),
        ),
        (
            "  GetItem / BatchGetItem / Query / PartiQL / Scan",
            format!(
                "{} / {} / {} / {} / {}",
                d.get_item, d.batch_get_item, d.query, d.execute_statement, d.scan
            ),
        ),
        (
            "  Put / Delete / Update / BatchWriteItem",
            format!(
                "{} / {} / {} / {}",
                d.put_item, d.delete_item, d.update_item, d.batch_write_item
            ),
        ),
        ("RCU / record", format!("{:.3}", d.read_capacity / records)),
        ("WCU / record", format!("{:.3}", d.write_capacity / records)),
        ("batch latency p50", format!("{p50:.1} ms")),
        ("batch latency p99", format!("{p99:.1} ms")),
        (
            "peak heap during drain",
            format!(
                "{:.1} MiB (+{:.1} MiB over start)",
                peak_heap as f64 / 1048576.0,
                peak_heap.saturating_sub(heap_at_start) as f64 / 1048576.0
            ),
        ),
        (
            "max RSS of the bench (VmHWM)",
            rss.map_or("n/a".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0)),
        ),
        (
            "worker's net writes (deleted + put)",
            format!("{} ({} + {})", minimal_writes, deleted.len(), put.len()),
        ),
        ("  by kind (-deleted +put)", net_by_kind_text),
        (
            "baseline BatchWriteItem requests",
            base_requests.to_string(),
        ),
        (
            "baseline time (median of runs)",
            format!("{baseline_secs:.3} s (runs: {})", secs_text(&base_runs)),
        ),
        (
            "DynamoDB Local CPU in the baseline",
            format!("{base_engine_cpu:.3} s"),
        ),
        (
            "baseline WCU / record",
            format!("{:.3}", base_wcu / records),
        ),
        ("baseline records/s", format!("{baseline_rps:.1}")),
        ("ratio worker/baseline", format!("{ratio:.3}")),
        (
            "plain baseline (no ReturnConsumedCapacity)",
            format!(
                "{plain_secs:.3} s (runs: {}), engine CPU {plain_engine_cpu:.3} s, ratio {ratio_plain:.3}",
                secs_text(&plain_runs)
            ),
        ),
        (
            "guarded baseline (the worker's transactions)",
            format!(
                "{guarded_secs:.3} s (runs: {}), {} requests ({} TransactWriteItems of {} items, \
                 {} withheld), engine CPU {guarded_engine_cpu:.3} s",
                secs_text(&guarded_runs),
                guarded_sent.requests(),
                guarded_sent.transactions,
                guarded_sent.transacted_items,
                guarded_sent.withheld
            ),
        ),
        (
            "ratio worker/guarded baseline (goal >= 0.9)",
            format!("{ratio_guarded:.3}"),
        ),
        (
            "worker's batch-written items / of them no-ops",
            format!("{} / {noop_writes}", asked.batch_ops.len()),
        ),
        ("  by kind and effect", write_effects_text),
        ("  keys written more than once", rewrites_text),
        ("worker's reads (as asked) by kind", read_mix_text),
        (
            "oracle: worker's reads, batched once",
            format!(
                "{} requests, {} keys/partitions, {:.3} s, engine CPU {oracle_reads_cpu:.3} s",
                oracle_reads.requests,
                oracle_reads.items,
                oracle_reads.time.as_secs_f64()
            ),
        ),
        (
            "oracle: worker's writes, batched once",
            format!(
                "{} requests, {} items, {:.3} s, engine CPU {oracle_writes_cpu:.3} s",
                oracle_writes.requests,
                oracle_writes.items,
                oracle_writes.time.as_secs_f64()
            ),
        ),
        (
            "oracle: the same writes in key order",
            format!(
                "{} requests, {} items, {:.3} s, engine CPU {:.3} s",
                sorted_writes.0.requests,
                sorted_writes.0.items,
                sorted_writes.0.time.as_secs_f64(),
                sorted_writes.1
            ),
        ),
        (
            "oracle ratio (baseline / oracle time)",
            format!("{:.3}", baseline_secs / oracle_secs),
        ),
        ("baseline table == worker table", identical.to_string()),
        (
            "group cascade: deleted n",
            format!("{cascade_deleted} (of {} dependents)", big.dependents),
        ),
        (
            "group cascade: BatchWriteItem (bound ceil(n/25))",
            format!(
                "{} (bound {bulk_bound}): {}",
                c.batch_write_item,
                if bulk_ok { "ok" } else { "FAILED" }
            ),
        ),
        (
            "group cascade: conditional single writes",
            conditional.to_string(),
        ),
    ];
    for (name, value) in &rows {
        println!("{name:<46} {value}");
    }
    println!(
        "{:<46} {:.3} s",
        "billed (sum of handle_stream)",
        stats.billed.as_secs_f64()
    );
    for (text, json) in &by_factor {
        let name = format!("parallelization factor {}", json["factor"]);
        println!("{name:<46} {text}");
    }
    println!(
        "ratio = worker_rps / baseline_rps, worker_rps = records / sum(handle_stream), \
         baseline_rps = records / time of the minimal BatchWriteItem set"
    );
    let mut json = serde_json::json!({
        "bench": "load",
        "seed": spec.seed,
        "users": spec.users,
        "groups": spec.groups,
        "operations": spec.operations,
        "leftover_rate": spec.leftover_rate,
        "population": w.population.len(),
        "calls": w.calls.len(),
        "records": stats.records,
        "filtered_records": stats.filtered,
        "batch_size": batch_size,
        "invocations": stats.invocations,
        "max_payload_bytes": stats.max_payload,
        "worker_secs": worker_secs,
        "worker_runs_secs": worker_runs_secs,
        "worker_rps": worker_rps,
        "requests_per_record": requests(&d) as f64 / records,
        "rcu_per_record": d.read_capacity / records,
        "wcu_per_record": d.write_capacity / records,
        "batch_p50_ms": p50,
        "batch_p99_ms": p99,
        "peak_heap_bytes": peak_heap,
        "peak_heap_growth_bytes": peak_heap.saturating_sub(heap_at_start),
        "max_rss_kib": rss,
        "minimal_writes": minimal_writes,
        "baseline_requests": base_requests,
        "baseline_runs_secs": base_runs,
        "baseline_engine_cpu_secs": base_engine_cpu,
        "worker_engine_cpu_secs": stats.engine_cpu,
        "worker_own_cpu_secs": stats.own_cpu,
        "backfilled": !o.no_backfill,
        "baseline_secs": baseline_secs,
        "baseline_rps": baseline_rps,
        "ratio": ratio,
        "baseline_identical": identical,
        "cascade_deleted": cascade_deleted,
        "cascade_batch_requests": c.batch_write_item,
        "cascade_bound": bulk_bound,
        "cascade_conditional": conditional,
        "store": d,
    });
    // Apart: one json! call this size exceeds the macro recursion limit.
    let extra = serde_json::json!({
        "baseline_wcu_per_record": base_wcu / records,
        "plain_baseline_secs": plain_secs,
        "plain_baseline_runs_secs": plain_runs,
        "plain_baseline_engine_cpu_secs": plain_engine_cpu,
        "ratio_plain": ratio_plain,
        "guarded_baseline": {
            "secs": guarded_secs,
            "runs_secs": guarded_runs,
            "engine_cpu_secs": guarded_engine_cpu,
            "requests": guarded_sent.requests(),
            "transactions": guarded_sent.transactions,
            "transacted_items": guarded_sent.transacted_items,
            "withheld": guarded_sent.withheld,
        },
        "ratio_guarded": ratio_guarded,
        "billed_secs": stats.billed.as_secs_f64(),
        "parallelization": by_factor.iter().map(|(_, j)| j.clone()).collect::<Vec<_>>(),
        "reads_by_kind": read_mix,
        "batch_writes": {
            "items": asked.batch_ops.len(),
            "noops": noop_writes,
            "by_effect": write_effects,
            "rewritten_keys": rewrites,
        },
        "oracle": {
            "read_requests": oracle_reads.requests,
            "read_items": oracle_reads.items,
            "read_secs": oracle_reads.time.as_secs_f64(),
            "read_engine_cpu_secs": oracle_reads_cpu,
            "write_requests": oracle_writes.requests,
            "write_items": oracle_writes.items,
            "write_secs": oracle_writes.time.as_secs_f64(),
            "write_engine_cpu_secs": oracle_writes_cpu,
            "sorted_write_secs": sorted_writes.0.time.as_secs_f64(),
            "sorted_write_engine_cpu_secs": sorted_writes.1,
            "ratio": baseline_secs / oracle_secs,
        },
    });
    if let (Some(json), serde_json::Value::Object(extra)) = (json.as_object_mut(), extra) {
        json.extend(extra);
    }
    println!("{json}");

    assert!(
        identical,
        "the baseline's writes must give the worker's table"
    );
    assert!(
        bulk_ok,
        "group cascade: {} BatchWriteItem requests for {cascade_deleted} deletes (bound {bulk_bound})",
        c.batch_write_item
    );
    assert_eq!(
        guarded_sent.withheld, 0,
        "every guard of the guarded baseline must hold (it writes the worker's table)"
    );
    if ratio_guarded < 0.9 {
        eprintln!(
            "ratio_guarded {ratio_guarded:.3} is below the goal of 0.9 (see the report for where time goes)"
        );
    }
}
