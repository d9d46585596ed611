//! Races made deterministic: a store (or transactions) wrapper that lets
//! one chosen request of the worker through, then makes the service's
//! write right then, before the worker's next step.
//!
//! [`RaceStore`] wraps an `Arc<dyn Store>` and matches on
//! [`Request`] variants ([`Step`]: after a matching read, or before a
//! matching write); [`RaceTx`] wraps an `Arc<dyn Transactions>` and
//! matches on the operations of a transaction. Each fires its service
//! write once (the first match), and says whether it fired.
//!
//! Candidates for `worker_testkit::layers`: `RaceBeforeDelete` there
//! covers single deletes only; these two cover any request, reads
//! included (the window this module exists for is the one between a
//! read and the write decided from it), and transactions.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use worker_engine::store::{Reply, Request, Store, StoreError};
use worker_engine::store::{TransactOp, TransactOutcome, Transactions};

/// The service's write: run once, on whatever stores it captured.
pub(crate) type ServiceAction =
    Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// Build a [`ServiceAction`] from an async block.
pub(crate) fn action<F>(f: impl FnOnce() -> F + Send + 'static) -> ServiceAction
where
    F: Future<Output = ()> + Send + 'static,
{
    Box::new(move || Box::pin(f()))
}

/// Where the service's write goes relative to the matched request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Right after the request returned (the worker has read, not yet
    /// written).
    After,
    /// Right before the request is sent.
    Before,
}

type Matcher = Box<dyn for<'a> Fn(&Request<'a>) -> bool + Send + Sync>;

/// A store whose `nth` matching request (0: the first) is followed (or
/// preceded) by one service write.
pub(crate) struct RaceStore {
    inner: Arc<dyn Store>,
    step: Step,
    matches: Matcher,
    nth: usize,
    seen: AtomicUsize,
    write: Mutex<Option<ServiceAction>>,
    fired: AtomicBool,
    /// Held exclusively by the request that fires, from its own call to
    /// the end of the service's write: every other request waits, so a
    /// concurrent handler (the other copy of a request) reads the table
    /// before or after the race, never halfway, whatever the scheduling.
    gate: tokio::sync::RwLock<()>,
}

impl RaceStore {
    pub(crate) fn new(
        inner: Arc<dyn Store>,
        step: Step,
        matches: impl for<'a> Fn(&Request<'a>) -> bool + Send + Sync + 'static,
        write: ServiceAction,
    ) -> Self {
        RaceStore {
            inner,
            step,
            matches: Box::new(matches),
            nth: 0,
            seen: AtomicUsize::new(0),
            write: Mutex::new(Some(write)),
            fired: AtomicBool::new(false),
            gate: tokio::sync::RwLock::new(()),
        }
    }

    /// Fire on the `nth` match instead of the first.
    pub(crate) fn on_match(mut self, nth: usize) -> Self {
        self.nth = nth;
        self
    }

    pub(crate) fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    fn take(&self, request: &Request<'_>) -> Option<ServiceAction> {
        if !(self.matches)(request) {
            return None;
        }
        if self.seen.fetch_add(1, Ordering::SeqCst) != self.nth {
            return None;
        }
        let w = self.write.lock().expect("race lock").take();
        if w.is_some() {
            self.fired.store(true, Ordering::SeqCst);
        }
        w
    }
}

#[async_trait]
impl Store for RaceStore {
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
        let write = self.take(&request);
        let _gate = match write {
            None => Err(self.gate.read().await),
            Some(_) => Ok(self.gate.write().await),
        };
        match (write, self.step) {
            (None, _) => self.inner.call(request).await,
            (Some(w), Step::Before) => {
                w().await;
                self.inner.call(request).await
            }
            (Some(w), Step::After) => {
                let reply = self.inner.call(request).await;
                w().await;
                reply
            }
        }
    }
}

type TxMatcher = Box<dyn Fn(&[TransactOp]) -> bool + Send + Sync>;

/// Transactions whose `nth` matching transaction is preceded by one
/// service write; every transaction is recorded with its outcome.
pub(crate) struct RaceTx {
    inner: Arc<dyn Transactions>,
    matches: TxMatcher,
    nth: usize,
    seen: AtomicUsize,
    write: Mutex<Option<ServiceAction>>,
    fired: AtomicBool,
    /// (operations, outcome) of every transaction sent.
    pub log: Mutex<Vec<(usize, Result<TransactOutcome, String>)>>,
}

impl RaceTx {
    pub(crate) fn new(
        inner: Arc<dyn Transactions>,
        matches: impl Fn(&[TransactOp]) -> bool + Send + Sync + 'static,
        write: ServiceAction,
    ) -> Self {
        RaceTx {
            inner,
            matches: Box::new(matches),
            nth: 0,
            seen: AtomicUsize::new(0),
            write: Mutex::new(Some(write)),
            fired: AtomicBool::new(false),
            log: Mutex::new(Vec::new()),
        }
    }

    /// Fire before the `nth` matching transaction instead of the first.
    pub(crate) fn on_match(mut self, nth: usize) -> Self {
        self.nth = nth;
        self
    }

    pub(crate) fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Transactions for RaceTx {
    async fn transact_write(&self, ops: Vec<TransactOp>) -> Result<TransactOutcome, StoreError> {
        if (self.matches)(&ops) && self.seen.fetch_add(1, Ordering::SeqCst) == self.nth {
            let w = self.write.lock().expect("race lock").take();
            if let Some(w) = w {
                self.fired.store(true, Ordering::SeqCst);
                w().await;
            }
        }
        let n = ops.len();
        let out = self.inner.transact_write(ops).await;
        self.log
            .lock()
            .expect("log lock")
            .push((n, out.clone().map_err(|e| e.to_string())));
        out
    }
}

/// Whether `request` is a point read of `key` (alone or among others).
pub(crate) fn reads(request: &Request<'_>, key: &worker_engine::store::Key) -> bool {
    match request {
        Request::Get { key: k, .. } => *k == key,
        Request::GetMany { keys, .. } => keys.contains(key),
        _ => false,
    }
}

/// Whether `request` is a scan (of the table or an index).
pub(crate) fn scans(request: &Request<'_>) -> bool {
    matches!(request, Request::ScanPage { .. })
}

/// Whether `op` touches `key` (any kind of operation).
pub(crate) fn touches(op: &TransactOp, key: &worker_engine::store::Key) -> bool {
    match op {
        TransactOp::Put { item, .. } => key.iter().all(|(k, v)| item.get(k) == Some(v)),
        TransactOp::Update { key: k, .. }
        | TransactOp::Delete { key: k, .. }
        | TransactOp::Check { key: k, .. } => k == key,
    }
}
