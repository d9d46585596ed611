//! worker-testkit: what the tests and benchmarks of every app on the
//! engine share. A dev-dependency only: no Lambda binary links it.
//!
//! - [`app::TestApp`]: an app on one table as its tests run it, at a fixed
//!   time;
//! - [`TestTable`]: a fresh table of any [`TableSchema`] on the test
//!   process's pool of DynamoDB Locals ([`instance`]: two at a time, each
//!   replaced after a dozen tests; started on first use, installed if
//!   absent);
//!   [`lease_local`]: a second instance, lent to one test at a time, for
//!   tables that must keep fixed names;
//! - [`Drain`]: reads a table's stream and runs it through an app the way
//!   Lambda's event source mapping would (the toolkit's
//!   [`worker_toolkit::mapping`], which the `dev` loop runs too), until the
//!   table is quiet (with
//!   [`Drain::with_parallelization`], as a mapping with a
//!   `ParallelizationFactor` does: [`parallel`]);
//! - [`follow`]: the worker following streams in real time while a soak
//!   test's service writes, and the streams handled to quiet after;
//! - [`written`]: writes on one clock, and what they say an item certainly
//!   was over a span of time;
//! - [`fault_proxy`]: a loopback proxy that injects throttles, 500s, drops
//!   and latency between a client and DynamoDB Local;
//! - [`layers`]: store layers that inject failures or race a delete;
//! - [`race`]: the service's writes landing between the worker's read and
//!   its write, deterministically;
//! - [`reader`]: an app's stream reader held beside the items, on its
//!   fixtures;
//! - [`recorded`]: what a worker asked (the calls the toolkit's recording
//!   store wrote down), replayed with perfect batching (the load driver's
//!   oracle);
//! - [`raw_batch_write`]: the raw-SDK baseline of bulk writes;
//! - [`workload`]: seeded histories delivered at least once, in any order;
//! - [`template`]: a SAM template read and evaluated, to check it against
//!   the code;
//! - [`runtime_api`]: a local Lambda Runtime API, to run a real `bootstrap`
//!   process;
//! - [`lambda_process`]: an app's `bootstrap`s built as they ship and run as
//!   processes, their peak memory measured (each package's
//!   `lambda_process` benchmark);
//! - [`moto`]: moto's server, the real local SQS, S3, EventBridge and STS;
//! - [`venv`]: the Python tools the tests run (moto, cargo-lambda), pinned
//!   and installed on first use under `.cache/`;
//! - [`eventbridge`]: a bus on moto routed by a rule to a queue, to read
//!   back what a publisher put on it;
//! - [`on_failure`]: what a stream mapping's on-failure destination (SQS,
//!   S3) receives, built as Lambda builds it;
//! - [`assert_every_file_is_a_module`]: each package's integration tests
//!   are one binary, and none of its files is left out of it;
//!   [`in_own_process`]: a test of that binary that needs the process to
//!   itself runs in a child of it;
//! - [`cli`]: what every app's command line must hold;
//! - [`mod@env`]: variables for a test, as the settings read them;
//! - [`cost`]: what a million stream records cost an app on AWS, from a
//!   drain of its streams on DynamoDB Local (each app's `cost` benchmark);
//! - [`mod@bench`]: the load drivers' `--sizes`, seeded tables, metered runs
//!   and the verdict on read capacity growth;
//! - [`environment`]: every fixture of an app run in a broken deployment
//!   (denied, table deleted, indexes missing) must stop with an
//!   environment fault.

pub mod app;
pub mod bench;
pub mod cargo_lambda;
pub mod cli;
pub mod cost;
pub mod deploy;
pub mod env;
pub mod environment;
pub mod eventbridge;
pub mod fault_proxy;
pub mod fixtures;
pub mod follow;
pub mod infra;
pub mod lambda_process;
pub mod layers;
mod modules;
pub use modules::{assert_every_file_is_a_module, in_own_process};
pub mod moto;
pub mod on_failure;
pub mod parallel;
pub mod race;
pub mod reader;
pub mod recorded;
pub mod runtime_api;
pub mod template;
pub mod venv;
pub mod workload;
pub mod written;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::Value;
use worker_engine::EventFunction;
use worker_engine::item::Item;
use worker_engine::schema::{DEFAULT_KEY, TableSchema};
use worker_engine::store::{self, DynamoStore, QueryStore, ScanSpec};
use worker_engine::stream::{BatchReport, StreamChange};
use worker_toolkit::mapping::{Action, BatchLog, Invocation, Mapping, MappingConfig};

/// A table of its own on one of the test process's DynamoDB Locals
/// ([`instance`]), deleted on drop.
pub struct TestTable {
    /// A store of the table with the schema's key attributes, on its own
    /// client to the instance.
    pub store: Arc<DynamoStore>,
    /// The table's name: the one given, or `test-<pid>-<n>-<test name>`
    /// for the pool's tables.
    pub name: String,
    /// The instance's endpoint (e.g. `http://127.0.0.1:PORT`).
    pub endpoint: String,
    /// The pool's instance the table is on, kept running while it lives.
    instance: Option<Arc<Instance>>,
}

impl TestTable {
    /// A table on a DynamoDB Local of its own (benchmarks: a second large
    /// table in one instance seeds far slower, which would time the
    /// database, not the worker), with the JVM's full compilers for a long
    /// load ([`worker_toolkit::local::Jit::Full`]). Keep the instance alive
    /// with the table.
    pub async fn on_own_local(
        name: impl Into<String>,
        schema: &TableSchema,
    ) -> (worker_toolkit::local::DynamoDbLocal, Self) {
        let local = worker_toolkit::local::start_jit(worker_toolkit::local::Jit::Full)
            .await
            .expect("DynamoDB Local must start (see the error for what to install)");
        let table = TestTable::create(&local.endpoint_url(), name, schema).await;
        (local, table)
    }

    /// A table named `name` of this schema, created at `endpoint` (a
    /// [`LocalLease`]'s, for a fixed name: the pool's tables get names of
    /// their own, [`TestTable::with_schema`]), deleted on drop.
    pub async fn create(endpoint: &str, name: impl Into<String>, schema: &TableSchema) -> Self {
        let name = name.into();
        let store = DynamoStore::new(store::local_client(endpoint), &name).with_key(schema.key);
        store.create_table(schema).await.expect("create table");
        TestTable {
            store: Arc::new(store),
            name,
            endpoint: endpoint.to_owned(),
            instance: None,
        }
    }

    /// A fresh table of this schema on the process's pool of DynamoDB
    /// Locals ([`instance`]), named after the test (deleted on drop).
    pub async fn with_schema(schema: &TableSchema) -> Self {
        TestTable::on(instance().await, schema).await
    }

    /// A fresh table of this schema on `instance`, named after the test
    /// (deleted on drop): for a test that reaches it through something
    /// made before it (a proxy in front of the instance).
    pub async fn on(instance: Arc<Instance>, schema: &TableSchema) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "test-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            std::thread::current()
                .name()
                .unwrap_or("t")
                .rsplit("::")
                .next()
                .unwrap_or("t")
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                .take(100)
                .collect::<String>()
        );
        let mut table = TestTable::create(&instance.endpoint, name, schema).await;
        table.instance = Some(instance);
        table
    }

    /// Put items given in DynamoDB JSON (`{"PK": {"S": ...}, ...}`).
    pub async fn put_json(&self, items: &[Value]) {
        for v in items {
            let item = ddb(v.clone());
            self.store
                .client()
                .put_item()
                .table_name(&self.name)
                .set_item(Some(item))
                .send()
                .await
                .expect("put");
        }
    }

    /// The whole table, sorted by PK then SK.
    pub async fn snapshot(&self) -> Vec<Item> {
        let mut items = self
            .store
            .scan_all(&ScanSpec {
                consistent: true,
                ..Default::default()
            })
            .await
            .expect("scan");
        items.sort_by_key(key_of);
        items
    }

    /// `(PK, SK)` of every item, sorted.
    pub async fn keys(&self) -> Vec<(String, String)> {
        self.snapshot().await.iter().map(key_of).collect()
    }

    /// The table's stream ARN and every record its stream holds, as
    /// `(shard id, change)`, shard by shard in order.
    pub async fn stream_records(&self) -> (String, Vec<(String, StreamChange)>) {
        let (arn, mut tail) = self.stream_tail().await;
        let records = tail.poll().await.expect("read the stream");
        (arn, records)
    }

    /// The table's stream ARN, and a reader of its stream from the
    /// beginning.
    pub async fn stream_tail(&self) -> (String, worker_toolkit::stream_reader::StreamTail) {
        use worker_toolkit::stream_reader::{StartAt, StreamTail, local_client};
        let arn = self
            .store
            .stream_arn()
            .await
            .expect("describe table")
            .expect("the table has a stream");
        let tail = StreamTail::new(
            local_client(&self.endpoint),
            arn.clone(),
            StartAt::TrimHorizon,
        );
        (arn, tail)
    }
}

impl Drop for TestTable {
    fn drop(&mut self) {
        // Drop may run inside a runtime; delete from a thread of its own,
        // with a client of its own: the test's client pools connections of
        // the test's runtime, and using them from this one stalls ~20 s.
        let store = DynamoStore::new(store::local_client(&self.endpoint), &self.name);
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let _ = rt.block_on(store.delete_table());
        })
        .join();
    }
}

/// One DynamoDB Local of the test process's pool.
pub struct Instance {
    endpoint: String,
    /// What [`next_instance`] handed this instance out for: a test's first
    /// table, or each lane of a test that spreads its load over the pool.
    tests: AtomicU32,
    /// `None` for an instance of `DYNAMODB_LOCAL_ENDPOINT`'s.
    _local: Option<worker_toolkit::local::DynamoDbLocal>,
}

impl Instance {
    /// `http://127.0.0.1:PORT`.
    pub fn endpoint_url(&self) -> &str {
        &self.endpoint
    }
}

/// How many DynamoDB Locals a test process runs at once: each serves its
/// requests on about one core, so two keep a 2-core machine busy while the
/// tests run two at a time.
const POOL_SIZE: usize = 2;
/// Tests served by one instance before the pool starts a fresh one for the
/// next tests. DynamoDB Local keeps the stream records of a deleted table
/// and slows down as they pile up (1.6x slower writes after 30,000 records,
/// even once their table is gone), so a long test process would time the
/// database more and more. A replaced instance stops when its last table is
/// dropped. Counted by test, not by table: a chat test makes six tables
/// (one per table of the app), and counting 24 tables started a fresh JVM
/// every four chat tests, each paying its start and its JIT's warm-up
/// again: chat-worker's tests ran 19 JVMs and 75 CPU-s of DynamoDB Local
/// by tables, 11 and 54 by tests. Twelve tests keep Nishiki's rate (18
/// JVMs and 92 CPU-s by tables, 20 and 95 by tests).
const TESTS_PER_INSTANCE: u32 = 12;

/// An instance of the process's pool for a new table: the pool's instances
/// in turn, each replaced by a fresh one after `TESTS_PER_INSTANCE`
/// tests (started on first use, installed if absent). With
/// `DYNAMODB_LOCAL_ENDPOINT` set, always that one. Keep the `Arc` as long
/// as the tables made on it ([`TestTable`] does).
pub async fn instance() -> Arc<Instance> {
    // A test makes its tables on one instance: an app of several tables
    // reaches them all through one client (and a parking table beside the
    // app's), so the instance a thread got first serves its later tables.
    // Each test runs on a thread of its own (and its runtime's workers).
    thread_local! {
        static AFFINITY: std::cell::RefCell<std::sync::Weak<Instance>> =
            const { std::cell::RefCell::new(std::sync::Weak::new()) };
    }
    // A test's later tables do not count: the instance counts tests.
    if let Some(instance) = AFFINITY.with(|a| a.borrow().upgrade()) {
        return instance;
    }
    let instance = next_instance().await;
    AFFINITY.with(|a| *a.borrow_mut() = Arc::downgrade(&instance));
    instance
}

/// The pool's next instance in turn, whichever this thread used before:
/// for a test that spreads its own load over the pool (each of its lanes
/// on the next instance), where [`instance`] would keep them all on one.
pub async fn next_instance() -> Arc<Instance> {
    static SLOTS: [tokio::sync::Mutex<Option<Arc<Instance>>>; POOL_SIZE] =
        [const { tokio::sync::Mutex::const_new(None) }; POOL_SIZE];
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let external =
        std::env::var(worker_toolkit::local::ENDPOINT_ENV).is_ok_and(|e| !e.trim().is_empty());
    let slot = if external {
        &SLOTS[0]
    } else {
        &SLOTS[NEXT.fetch_add(1, Ordering::Relaxed) % POOL_SIZE]
    };
    let mut current = slot.lock().await;
    if let Some(instance) = current.as_ref()
        && (external || instance.tests.load(Ordering::Relaxed) < TESTS_PER_INSTANCE)
    {
        instance.tests.fetch_add(1, Ordering::Relaxed);
        return instance.clone();
    }
    let instance = if external {
        let shared = worker_toolkit::local::shared()
            .await
            .expect("DYNAMODB_LOCAL_ENDPOINT");
        Instance {
            endpoint: shared.endpoint_url(),
            tests: AtomicU32::new(1),
            _local: None,
        }
    } else {
        let local = start_local().await;
        Instance {
            endpoint: local.endpoint_url(),
            tests: AtomicU32::new(1),
            _local: Some(local),
        }
    };
    let instance = Arc::new(instance);
    *current = Some(instance.clone());
    instance
}

/// A new DynamoDB Local of this process (installed if absent), or a test
/// failure that says what to install.
async fn start_local() -> worker_toolkit::local::DynamoDbLocal {
    worker_toolkit::local::start()
        .await
        .expect("DynamoDB Local must start (see the error for what to install)")
}

/// A DynamoDB Local lent to one test at a time, for tests whose tables
/// must keep fixed names (a multi-table app's tables by their seed names,
/// `table create` with no names given): on the shared instance two such
/// tests would collide. The kit starts one per test process, on first use,
/// and lends it out in turn; each lease starts with no tables (those of the
/// previous lease are deleted), so a process starts at most two JVMs, not
/// one per test.
pub struct LocalLease {
    local: tokio::sync::MutexGuard<'static, Option<worker_toolkit::local::DynamoDbLocal>>,
}

impl LocalLease {
    /// The lent instance's endpoint (`http://127.0.0.1:PORT`).
    pub fn endpoint_url(&self) -> String {
        self.local
            .as_ref()
            .expect("a lease holds a started instance")
            .endpoint_url()
    }
}

/// Wait for the process's lendable DynamoDB Local (see [`LocalLease`]),
/// emptied of the previous lease's tables.
pub async fn lease_local() -> LocalLease {
    static LENDABLE: tokio::sync::Mutex<Option<worker_toolkit::local::DynamoDbLocal>> =
        tokio::sync::Mutex::const_new(None);
    let mut local = LENDABLE.lock().await;
    if local.is_none() {
        *local = Some(start_local().await);
    }
    let lease = LocalLease { local };
    let client = store::local_client(&lease.endpoint_url());
    let tables = client
        .list_tables()
        .send()
        .await
        .expect("list the lent instance's tables");
    for name in tables.table_names() {
        client
            .delete_table()
            .table_name(name)
            .send()
            .await
            .expect("delete the previous lease's table");
    }
    lease
}

/// A loopback port held by another HTTP server, which answers every
/// request with `answer` (and stays up for the process): what a server's
/// start finds when another process bound the free port it had chosen.
pub fn port_held_by(answer: &'static str) -> u16 {
    use std::io::{Read, Write};
    let other = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .expect("a free loopback port");
    let port = other.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        for mut stream in other.incoming().flatten() {
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    port
}

/// DynamoDB JSON to an item.
pub fn ddb(v: Value) -> Item {
    let item: serde_dynamo::Item = serde_json::from_value(v).expect("DynamoDB JSON item");
    item.into()
}

/// `(PK, SK)` of an item as strings (the default key attributes; a
/// missing or non-string value is empty).
pub fn key_of(item: &Item) -> (String, String) {
    let s = |n: &str| match item.get(n) {
        Some(AttributeValue::S(s)) => s.clone(),
        _ => String::new(),
    };
    let (pk, sk) = DEFAULT_KEY.names();
    (s(pk), s(sk))
}

/// Put `items` with `tasks` concurrent BatchWriteItem sequences (seeding
/// large tables for benchmarks).
pub async fn seed_concurrently(store: &Arc<DynamoStore>, items: Vec<Item>, tasks: usize) {
    use worker_engine::store::{BatchWriter, WriteOp};
    let chunk = items.len().div_ceil(tasks.max(1)).max(1);
    let mut handles = Vec::new();
    let mut items = items;
    while !items.is_empty() {
        let rest = items.split_off(chunk.min(items.len()));
        let ops: Vec<WriteOp> = std::mem::replace(&mut items, rest)
            .into_iter()
            .map(WriteOp::Put)
            .collect();
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            store.batch_write(ops).await.expect("seed batch")
        }));
    }
    for h in handles {
        h.await.expect("seed task");
    }
}

/// Reads the table's stream and runs it through an app, the way
/// Lambda's event source mapping would, until the table is quiet: the
/// worker's own writes produce records too, and cascades follow them. The
/// mapping is the toolkit's ([`worker_toolkit::mapping`], the one the `dev`
/// loop runs), set as every app's template deploys it: batches of up to
/// 100 records (no batching window), `BisectBatchOnFunctionError` (a retry
/// after a partial failure holds only the rest of the batch), 5 attempts
/// of a record. By default one batch at a time, in stream order; with
/// [`Drain::with_parallelization`] as a mapping with that
/// `ParallelizationFactor`. A function error, an environment fault or a
/// batch given up on is a test failure.
pub struct Drain {
    tail: worker_toolkit::stream_reader::StreamTail,
    /// Every invocation's report, in the order made.
    pub batches: Vec<BatchReport>,
    /// The table's partition key attribute, which splits the records.
    partition_key: String,
    mapping: Mapping,
}

impl Drain {
    /// Start following the table's stream from its beginning.
    pub async fn new(table: &TestTable) -> Self {
        let (_, tail) = table.stream_tail().await;
        let partition_key = table.store.key_attributes().0.to_owned();
        Drain {
            tail,
            batches: Vec::new(),
            mapping: Mapping::new(mapping_config(100, 1, &partition_key, 5)),
            partition_key,
        }
    }

    /// Drain as an event source mapping with `ParallelizationFactor` `n`
    /// (1 to 10; 1 is the default, one batch at a time in stream order):
    /// each shard's records are split by a hash of their partition key into
    /// `n` lanes ([`parallel::lanes`]), each lane keeps its records' order
    /// and is cut into batches of up to 100 that go to the app one after
    /// the other, each retried by itself from its first failed sequence
    /// number, and the lanes run concurrently. Records of one partition key
    /// reach the app in stream order; records of different keys in any
    /// order. [`Drain::batches`] holds the reports lane by lane, each
    /// retry after the lanes' turn it failed in.
    ///
    /// # Panics
    /// If `n` is not within 1 to 10 (Lambda refuses other factors).
    pub fn with_parallelization(mut self, n: usize) -> Self {
        assert!(
            (1..=parallel::MAX_PARALLELIZATION_FACTOR).contains(&n),
            "ParallelizationFactor {n}: Lambda allows 1 to 10"
        );
        self.mapping = Mapping::new(mapping_config(100, n, &self.partition_key, 5));
        self
    }

    /// The `ParallelizationFactor` the drain runs with.
    pub fn parallelization(&self) -> usize {
        self.mapping.config().parallelization_factor
    }

    /// Skip everything written so far (e.g. a table seeded before the
    /// stream's consumer existed).
    pub async fn skip_existing(&mut self) {
        self.tail.poll().await.expect("read stream");
    }

    /// The records written since the last call, without handling them.
    pub async fn read(&mut self) -> Vec<StreamChange> {
        self.tail
            .poll()
            .await
            .expect("read stream")
            .into_iter()
            .map(|(_, c)| c)
            .collect()
    }

    /// Handle every new record until no new record appears; returns how
    /// many records were handled.
    pub async fn run(&mut self, app: &dyn EventFunction) -> usize {
        let mut total = 0;
        for _round in 0..50 {
            let records = self.tail.poll().await.expect("read stream");
            if records.is_empty() {
                return total;
            }
            total += records.len();
            let logs = settle(&mut self.mapping, records, app, |_| Default::default()).await;
            self.batches.extend(reports(logs));
        }
        panic!("the stream did not settle after 50 rounds: the worker keeps writing");
    }

    /// Run `chunk` as one batch (one shard, however many records) through
    /// the drain's mapping: on failure retried from the first failed
    /// sequence number (up to 5 attempts).
    pub async fn run_batch(&mut self, app: &dyn EventFunction, chunk: &[StreamChange]) {
        let mut mapping = Mapping::new(mapping_config(chunk.len(), 1, &self.partition_key, 5));
        let records = chunk.iter().map(|c| (String::new(), c.clone())).collect();
        let logs = settle(&mut mapping, records, app, |_| Default::default()).await;
        self.batches.extend(reports(logs));
    }
}

/// The kit's mappings ([`Drain`], [`follow::Mapping`]): batches of
/// `batch_size`, `factor` lanes by `partition_key`, no batching window,
/// bisect on, `attempts` of a record at most.
fn mapping_config(batch_size: usize, factor: usize, pk: &str, attempts: usize) -> MappingConfig {
    MappingConfig {
        batch_size,
        batching_window: std::time::Duration::ZERO,
        max_retries: attempts.saturating_sub(1) as u32,
        bisect_on_error: true,
        parallelization_factor: factor,
        partition_key: Some(pk.to_owned()),
    }
}

/// `records` through `mapping` into `app`, polled until none is pending,
/// waiting `pause(polls so far)` before each poll after the first; every
/// invocation. A test failure on a function error, an environment fault,
/// or records given up on.
async fn settle(
    mapping: &mut Mapping,
    mut records: Vec<(String, StreamChange)>,
    app: &dyn EventFunction,
    pause: impl Fn(u64) -> std::time::Duration,
) -> Vec<BatchLog> {
    let mut logs = Vec::new();
    for poll in 0.. {
        if poll > 0 && !pause(poll).is_zero() {
            tokio::time::sleep(pause(poll)).await;
        }
        let polled = mapping.poll(std::mem::take(&mut records), app).await;
        if let Some(fault) = polled.environment_fault {
            panic!("stream event: environment fault: {fault}");
        }
        for batch in polled.batches {
            match (&batch.invocation, &batch.action) {
                (Invocation::FunctionError { error }, _) => panic!("stream event: {error}"),
                (_, Action::Discard { .. }) => panic!("a batch kept failing: {}", batch.line()),
                _ => logs.push(batch),
            }
        }
        if mapping.pending() == 0 {
            break;
        }
    }
    logs
}

/// Every invocation's report.
fn reports(logs: Vec<BatchLog>) -> impl Iterator<Item = BatchReport> {
    logs.into_iter().filter_map(|b| b.report)
}

/// Issue `ops` with the raw SDK client: BatchWriteItem in chunks of 25, one
/// after the other, retrying unprocessed items (no backoff: DynamoDB Local
/// does not throttle). Returns (requests sent, time taken).
pub async fn raw_batch_write(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    ops: Vec<aws_sdk_dynamodb::types::WriteRequest>,
) -> (usize, std::time::Duration) {
    let sent = raw_batch_write_with(client, table, ops, None).await;
    (sent.requests, sent.time)
}

/// What [`raw_batch_write_with`] sent.
#[derive(Debug, Clone, Copy)]
pub struct RawWrites {
    /// BatchWriteItem requests sent, retries of unprocessed items
    /// included.
    pub requests: usize,
    /// Wall-clock time of all of them.
    pub time: std::time::Duration,
    /// Write capacity DynamoDB reported (0 unless it was asked for).
    pub consumed_capacity: f64,
}

/// [`raw_batch_write`], each request asking for `capacity`
/// (`ReturnConsumedCapacity`; `None` leaves it out, as `NONE`).
pub async fn raw_batch_write_with(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    ops: Vec<aws_sdk_dynamodb::types::WriteRequest>,
    capacity: Option<aws_sdk_dynamodb::types::ReturnConsumedCapacity>,
) -> RawWrites {
    let started = std::time::Instant::now();
    let mut requests = 0;
    let mut consumed_capacity = 0.0;
    for chunk in ops.chunks(25) {
        let mut pending = chunk.to_vec();
        while !pending.is_empty() {
            requests += 1;
            let out = client
                .batch_write_item()
                .request_items(table, pending)
                .set_return_consumed_capacity(capacity.clone())
                .send()
                .await
                .expect("BatchWriteItem");
            consumed_capacity += out
                .consumed_capacity()
                .iter()
                .filter_map(|c| c.capacity_units())
                .sum::<f64>();
            pending = out
                .unprocessed_items()
                .and_then(|m| m.get(table))
                .cloned()
                .unwrap_or_default();
        }
    }
    RawWrites {
        requests,
        time: started.elapsed(),
        consumed_capacity,
    }
}

/// The on-failure message Lambda sends when a DynamoDB stream mapping
/// gives up on a batch (`worker_toolkit::failure_message` reads it), for the
/// records `start..=end` of `shard` of `stream_arn`.
pub fn on_failure_message(
    stream_arn: &str,
    shard: &str,
    start: &str,
    end: &str,
    batch_size: u64,
) -> Value {
    serde_json::json!({
        "requestContext": {
            "requestId": "316aa6d0-8154-4a3b-9af7-85d5f4a6bc81",
            "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:worker-stream",
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": 11
        },
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
        "version": "1.0",
        "timestamp": "2024-03-25T09:00:49.717Z",
        "DDBStreamBatchInfo": {
            "shardId": shard,
            "startSequenceNumber": start,
            "endSequenceNumber": end,
            "approximateArrivalOfFirstRecord": "2024-03-25T09:00:19Z",
            "approximateArrivalOfLastRecord": "2024-03-25T09:00:21Z",
            "batchSize": batch_size,
            "streamArn": stream_arn
        }
    })
}

/// `records` handed to `worker`'s stream handler as one event, as Lambda
/// delivers them (an event the handler refuses is a test failure); its
/// report.
pub async fn handle_records<J: worker_engine::schedule::JobName>(
    worker: &worker_engine::Worker<J>,
    records: &[StreamChange],
) -> BatchReport {
    worker
        .handle_stream(&worker_engine::stream::encode_event(records, None), None)
        .await
        .expect("a stream event")
}

/// A test failure unless every record of `report` was handled: none failed
/// and none is to retry.
pub fn assert_handled(report: &BatchReport) {
    assert_eq!(
        (report.failed, report.batch_item_failures.len()),
        (0, 0),
        "{:?}",
        report.records
    );
}
