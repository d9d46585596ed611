//! Store layers for tests: [`FaultyStore`] injects transient failures into
//! a real store; [`BeforeDelete`] runs a hook before each delete, single,
//! batched or guarded (a service write racing the worker's delete, or a
//! delay).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::Serialize;
use worker_engine::item::Item;
use worker_engine::store::{
    GuardedOp, Key, Reply, Request, Store, StoreError, WriteOp, query_partitions_by_pages,
};

/// The kind of call a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FaultOp {
    /// Gets, queries and scans (a scan is checked as the empty key).
    Read,
    /// Puts, deletes, updates, batch and guarded writes.
    Write,
    /// Any call of the two.
    Any,
}

/// One injected fault: calls of `op` touching a key whose rendering
/// contains `key_contains` fail transiently, `times` times.
#[derive(Debug, Clone)]
pub struct Fault {
    /// The calls it applies to.
    pub op: FaultOp,
    /// A piece of the key as rendered (`PK=...,SK=...`, attributes sorted
    /// by name), e.g. `SK=Group#...`; empty matches every key.
    pub key_contains: String,
    /// How many matching calls fail; the fault is spent after that.
    pub times: u32,
}

/// A real store that fails transiently on chosen calls.
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    faults: Mutex<Vec<Fault>>,
    injected: Mutex<u32>,
}

impl FaultyStore {
    /// `inner` with no fault injected yet ([`FaultyStore::inject`]).
    pub fn new(inner: Arc<dyn Store>) -> Self {
        FaultyStore {
            inner,
            faults: Mutex::new(Vec::new()),
            injected: Mutex::new(0),
        }
    }

    /// Add a fault.
    pub fn inject(&self, fault: Fault) {
        self.faults.lock().expect("faults lock").push(fault);
    }

    /// How many failures were injected so far.
    pub fn injected(&self) -> u32 {
        *self.injected.lock().expect("injected lock")
    }

    fn check<'a>(
        &self,
        op: FaultOp,
        keys: impl IntoIterator<Item = &'a Key>,
    ) -> Result<(), StoreError> {
        let rendered: Vec<String> = keys.into_iter().map(render_key).collect();
        let mut faults = self.faults.lock().expect("faults lock");
        for f in faults.iter_mut() {
            let op_matches = f.op == FaultOp::Any || f.op == op;
            if f.times > 0 && op_matches && rendered.iter().any(|k| k.contains(&f.key_contains)) {
                f.times -= 1;
                *self.injected.lock().expect("injected lock") += 1;
                return Err(StoreError::Transient {
                    operation: "injected",
                    code: "InjectedFault".into(),
                    message: format!("injected transient failure on {}", f.key_contains),
                });
            }
        }
        Ok(())
    }
}

fn render_key(key: &Key) -> String {
    let mut parts: Vec<String> = key
        .iter()
        .map(|(k, v)| match v {
            aws_sdk_dynamodb::types::AttributeValue::S(s) => format!("{k}={s}"),
            other => format!("{k}={other:?}"),
        })
        .collect();
    parts.sort();
    parts.join(",")
}

/// Each request is checked against the faults first, then passed on: point
/// reads by their keys, a query by its key condition's values, a scan as
/// the empty key, writes by the keys (items) they write. A multi-partition
/// read is one query per partition, each checked.
#[async_trait]
impl Store for FaultyStore {
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
        match &request {
            Request::Get { key, .. } => self.check(FaultOp::Read, [*key])?,
            Request::GetMany { keys, .. } => self.check(FaultOp::Read, keys.iter())?,
            Request::QueryPage { spec, .. } => {
                self.check(FaultOp::Read, [&spec.key_condition.values])?
            }
            Request::ScanPage { .. } => self.check(FaultOp::Read, [&Key::new()])?,
            Request::QueryPartitions {
                index,
                attribute,
                values,
                consistent,
            } => {
                return query_partitions_by_pages(self, *index, attribute, values, *consistent)
                    .await
                    .map(Reply::Partitions);
            }
            Request::Put { item, .. } => self.check(FaultOp::Write, [item])?,
            Request::Delete { key, .. } | Request::Update { key, .. } => {
                self.check(FaultOp::Write, [*key])?
            }
            Request::BatchWrite { ops } => self.check(
                FaultOp::Write,
                ops.iter().map(|op| match op {
                    WriteOp::Put(item) => item,
                    WriteOp::Delete(key) => key,
                }),
            )?,
            Request::WriteGuarded { guards, ops } => self.check(
                FaultOp::Write,
                ops.iter()
                    .map(|op| op.target())
                    .chain(guards.iter().map(|g| &g.key)),
            )?,
        }
        self.inner.call(request).await
    }
}

/// Something to do right before a delete reaches the store: a service
/// write racing the job, a slow network, ...
#[async_trait]
pub trait DeleteHook: Send + Sync {
    /// Run before the delete of `key` goes on to `inner` (the store under
    /// the layer); an error fails the request before it is made.
    async fn before_delete(&self, key: &Key, inner: &dyn Store) -> Result<(), StoreError>;
}

/// A real store that runs a [`DeleteHook`] before every delete; every
/// other call passes straight through.
pub struct BeforeDelete<H> {
    inner: Arc<dyn Store>,
    hook: H,
}

impl<H: DeleteHook> BeforeDelete<H> {
    /// `inner` with `hook` run before each of its deletes.
    pub fn with_hook(inner: Arc<dyn Store>, hook: H) -> Self {
        BeforeDelete { inner, hook }
    }

    /// The hook, for a test to read what it saw or did.
    pub fn hook(&self) -> &H {
        &self.hook
    }
}

/// The hook runs before each delete (a single one, or each delete of a
/// batch or a guarded write), which then goes on; every other request
/// passes straight through.
#[async_trait]
impl<H: DeleteHook> Store for BeforeDelete<H> {
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
        let deleted: Vec<&Key> = match &request {
            Request::Delete { key, .. } => vec![*key],
            Request::BatchWrite { ops } => ops
                .iter()
                .filter_map(|op| match op {
                    WriteOp::Delete(key) => Some(key),
                    WriteOp::Put(_) => None,
                })
                .collect(),
            Request::WriteGuarded { ops, .. } => ops
                .iter()
                .filter_map(|op| match op {
                    GuardedOp::Delete { key, .. } => Some(key),
                    GuardedOp::Put { .. } | GuardedOp::Update { .. } => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        for key in deleted {
            self.hook.before_delete(key, self.inner.as_ref()).await?;
        }
        self.inner.call(request).await
    }
}

/// A write someone else makes (the service, in tests and the dev loop).
#[derive(Debug, Clone, PartialEq)]
pub enum ServiceWrite {
    /// A plain Put of the whole item (how the service writes).
    Put(Item),
    /// A plain Delete of the key.
    Delete,
}

/// Hook: make a service write once, right before the first delete of one
/// key.
pub struct ServiceWriteOnce {
    target: Key,
    write: ServiceWrite,
    fired: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl DeleteHook for ServiceWriteOnce {
    async fn before_delete(&self, key: &Key, inner: &dyn Store) -> Result<(), StoreError> {
        if *key == self.target && !self.fired.swap(true, std::sync::atomic::Ordering::SeqCst) {
            match &self.write {
                ServiceWrite::Put(item) => inner.put(item.clone(), None).await?,
                ServiceWrite::Delete => inner.delete(key, None).await?,
            };
        }
        Ok(())
    }
}

/// A real store that makes a service write right before the first delete of
/// one key: the race between a job's read and its delete, made
/// deterministic (a renewal landing just before the sweep's or the audit's
/// conditional delete, for instance).
pub type RaceBeforeDelete = BeforeDelete<ServiceWriteOnce>;

impl BeforeDelete<ServiceWriteOnce> {
    /// `inner`, the service making `write` right before the first delete
    /// of `target` (once; later deletes of it go straight through).
    pub fn new(inner: Arc<dyn Store>, target: Key, write: ServiceWrite) -> Self {
        BeforeDelete::with_hook(
            inner,
            ServiceWriteOnce {
                target,
                write,
                fired: std::sync::atomic::AtomicBool::new(false),
            },
        )
    }

    /// Whether the service write happened.
    pub fn fired(&self) -> bool {
        self.hook.fired.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Hook: every delete waits this long first (a slow network), so a job runs
/// into its deadline part-way.
pub struct DelayDeletes(pub std::time::Duration);

#[async_trait]
impl DeleteHook for DelayDeletes {
    async fn before_delete(&self, _key: &Key, _inner: &dyn Store) -> Result<(), StoreError> {
        tokio::time::sleep(self.0).await;
        Ok(())
    }
}
