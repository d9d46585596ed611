//! What the worker asked of the table (tests check what it wrote), and the
//! same asks sent again with perfect batching (`benches/load.rs`, the
//! *oracle* figures).
//!
//! The worker's store is wrapped in the toolkit's recording layer
//! (`RecordingStore::new(store).with_reads()`); [`Log::of`] sorts the calls
//! it recorded into every read (point reads, whole-partition reads, other
//! queries) and every write, in the order asked. [`replay_reads`] and
//! [`replay_writes`] then send that log to another table, seeded like the
//! one the worker served, the cheapest way the DynamoDB API allows: each
//! key and partition read once, BatchGetItem with 100 keys, PartiQL `IN`
//! with 50 partitions, BatchWriteItem with 25 items, one request after the
//! other. The time they take is what the worker's reads and writes cost by
//! themselves, apart from how the worker schedules them; the baseline's
//! time is what the minimal writes cost.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use worker_engine::item::Item;
use worker_engine::store::{
    BatchWriter, DynamoStore, Expr, Guard, GuardedOp, GuardedWriter, ItemReader, ItemWriter, Key,
    QuerySpec, QueryStore, WriteOp,
};
use worker_toolkit::layers::{Asked, Call};

/// A single-item write, as it was asked.
#[derive(Clone)]
pub enum Single {
    /// A PutItem of the item, under its condition if any.
    Put(Item, Option<Expr>),
    /// A DeleteItem of the key, under its condition if any.
    Delete(Key, Option<Expr>),
    /// An UpdateItem of the key: the update expression, then its
    /// condition if any.
    Update(Key, Expr, Option<Expr>),
}

/// Everything asked of the store, in order of asking.
#[derive(Default, Clone)]
pub struct Log {
    /// Point reads: key, strongly consistent.
    pub gets: Vec<(Key, bool)>,
    /// Whole-partition reads: index, attribute, value, strongly consistent.
    pub partitions: Vec<(Option<String>, String, AttributeValue, bool)>,
    /// Other queries and scans (sent again as they were).
    pub queries: Vec<QuerySpec>,
    /// Items of batch writes, in order.
    pub batch_ops: Vec<WriteOp>,
    /// Single (conditional) writes.
    pub singles: Vec<Single>,
    /// Guarded writes (transactions checking the items a decision was read
    /// from), as asked.
    pub guarded: Vec<(Vec<Guard>, Vec<GuardedOp>)>,
}

impl Log {
    /// What `calls` asked, in the order asked.
    pub fn of(mut calls: Vec<Call>) -> Log {
        calls.sort_by_key(|c| c.number);
        let mut log = Log::default();
        for call in calls {
            log.add(call.asked);
        }
        log
    }

    /// Write down what `asked` asks: a whole-partition query by its first
    /// page (its later pages are not asked again), other queries page by
    /// page; scans are not replayed.
    fn add(&mut self, asked: Asked) {
        match asked {
            Asked::Get { key, consistent } => self.gets.push((key, consistent)),
            Asked::GetMany { keys, consistent } => {
                self.gets.extend(keys.into_iter().map(|k| (k, consistent)))
            }
            Asked::QueryPage { spec, start } => match spec.as_partition() {
                Some((attribute, value)) if start.is_none() => self.partitions.push((
                    spec.index.clone(),
                    attribute.to_owned(),
                    value.clone(),
                    spec.consistent,
                )),
                Some(_) => {}
                None => self.queries.push(spec),
            },
            Asked::ScanPage { .. } => {}
            Asked::QueryPartitions {
                index,
                attribute,
                values,
                consistent,
            } => self.partitions.extend(
                values
                    .into_iter()
                    .map(|v| (index.clone(), attribute.clone(), v, consistent)),
            ),
            Asked::Write(GuardedOp::Put { item, condition }) => {
                self.singles.push(Single::Put(item, condition))
            }
            Asked::Write(GuardedOp::Delete { key, condition }) => {
                self.singles.push(Single::Delete(key, condition))
            }
            Asked::Write(GuardedOp::Update {
                key,
                update,
                condition,
            }) => self.singles.push(Single::Update(key, update, condition)),
            Asked::BatchWrite { ops } => self.batch_ops.extend(ops),
            Asked::WriteGuarded { guards, ops } => self.guarded.push((guards, ops)),
        }
    }
}

/// Requests sent and time taken by a replay.
#[derive(Debug, Clone, Copy, Default)]
pub struct Replayed {
    /// Requests sent to DynamoDB, BatchWriteItem's retries of unprocessed
    /// items included.
    pub requests: usize,
    /// What the requests carried: keys read, partitions queried (a query
    /// counts as one), items written.
    pub items: usize,
    /// Wall-clock time of the whole replay.
    pub time: Duration,
}

/// The identity of an item's key: its key attributes' values (a map's own
/// `Debug` text is not, its order varies).
fn key_id(item: &Item, (pk, sk): (&str, &str)) -> String {
    format!("{:?}\u{1f}{:?}", item.get(pk), item.get(sk))
}

/// Send the reads of `log` to `store`, each distinct key and partition
/// once, as few requests as the API allows, one after the other.
pub async fn replay_reads(store: &DynamoStore, log: &Log) -> Replayed {
    let started = Instant::now();
    let mut r = Replayed::default();
    let mut gets: BTreeMap<bool, Vec<Key>> = BTreeMap::new();
    let mut seen = HashSet::new();
    for (key, consistent) in &log.gets {
        if seen.insert((key_id(key, store.key_attributes()), *consistent)) {
            gets.entry(*consistent).or_default().push(key.clone());
        }
    }
    for (consistent, keys) in gets {
        for chunk in keys.chunks(100) {
            store
                .get_many(chunk, consistent)
                .await
                .expect("BatchGetItem");
            r.requests += 1;
            r.items += chunk.len();
        }
    }
    type Group = (Option<String>, String, bool);
    let mut partitions: BTreeMap<Group, Vec<AttributeValue>> = BTreeMap::new();
    let mut seen = HashSet::new();
    for (index, attribute, value, consistent) in &log.partitions {
        let group = (index.clone(), attribute.clone(), *consistent);
        if seen.insert(format!("{group:?}{value:?}")) {
            partitions.entry(group).or_default().push(value.clone());
        }
    }
    for ((index, attribute, consistent), values) in partitions {
        for chunk in values.chunks(50) {
            store
                .query_partitions(index.as_deref(), &attribute, chunk, consistent)
                .await
                .expect("PartiQL SELECT");
            r.requests += 1;
            r.items += chunk.len();
        }
    }
    for spec in &log.queries {
        store.query_all(spec).await.expect("Query");
        r.requests += 1;
        r.items += 1;
    }
    r.time = started.elapsed();
    r
}

/// Send the writes of `log` to `store` in the order asked: batch items in
/// BatchWriteItem requests of 25 (a new request where a key would repeat),
/// single writes as they were asked, one request after the other.
pub async fn replay_writes(store: &DynamoStore, log: &Log) -> Replayed {
    let started = Instant::now();
    let mut r = Replayed::default();
    let keys = store.key_attributes();
    let mut chunk: Vec<WriteOp> = Vec::new();
    let mut in_chunk = HashSet::new();
    let mut chunks = Vec::new();
    for op in &log.batch_ops {
        let key = match op {
            WriteOp::Put(item) => key_id(item, keys),
            WriteOp::Delete(k) => key_id(k, keys),
        };
        if chunk.len() == 25 || in_chunk.contains(&key) {
            chunks.push(std::mem::take(&mut chunk));
            in_chunk.clear();
        }
        in_chunk.insert(key);
        chunk.push(op.clone());
    }
    if !chunk.is_empty() {
        chunks.push(chunk);
    }
    for chunk in chunks {
        r.items += chunk.len();
        let report = store.batch_write(chunk).await.expect("BatchWriteItem");
        r.requests += report.requests as usize;
    }
    for single in &log.singles {
        let _ = match single.clone() {
            Single::Put(item, c) => store.put(item, c).await,
            Single::Delete(key, c) => store.delete(&key, c).await,
            Single::Update(key, u, c) => store.update(&key, u, c).await,
        }
        .expect("single write");
        r.requests += 1;
        r.items += 1;
    }
    for (guards, ops) in &log.guarded {
        r.items += ops.len();
        let report = store
            .write_guarded(guards, ops.clone())
            .await
            .expect("TransactWriteItems");
        r.requests += report.requests as usize;
    }
    r.time = started.elapsed();
    r
}
