//! A service writing between the worker's read and its write, made
//! deterministic: [`RaceBeforeWrite`] passes every request to a real store
//! and, the first time the worker is about to write (or to write a chosen
//! key), makes the service's writes first. The worker has read and decided;
//! its write then lands on a table that changed under it, which is exactly
//! the window a live service opens. A decision that carries a condition on
//! what it was read from is refused there; one that does not deletes live
//! data, and the test sees it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use worker_engine::item::Item;
use worker_engine::store::{Key, Reply, Request, Store, StoreError, WriteOp};

/// One write of the service: a plain Put or Delete, as the service writes.
#[derive(Debug, Clone, PartialEq)]
pub enum ServiceOp {
    /// Put this whole item (replacing the one of its key, if any).
    Put(Item),
    /// Delete the item of this key (nothing if it is absent).
    Delete(Key),
}

/// When the service's writes happen.
#[derive(Debug, Clone, PartialEq)]
pub enum Trigger {
    /// Before the worker's first write request of any kind.
    FirstWrite,
    /// Before the first write request that writes this key.
    Touching(Key),
}

/// A real store whose first matching write is preceded by the service's
/// writes (see the module docs).
pub struct RaceBeforeWrite {
    inner: Arc<dyn Store>,
    trigger: Trigger,
    service: Vec<ServiceOp>,
    fired: AtomicBool,
}

impl RaceBeforeWrite {
    /// `inner`, the service making `service`'s writes in order (once)
    /// right before the first write request that matches `trigger`.
    pub fn new(inner: Arc<dyn Store>, trigger: Trigger, service: Vec<ServiceOp>) -> Self {
        RaceBeforeWrite {
            inner,
            trigger,
            service,
            fired: AtomicBool::new(false),
        }
    }

    /// The service's writes race the worker's first write.
    pub fn at_first_write(inner: Arc<dyn Store>, service: Vec<ServiceOp>) -> Self {
        Self::new(inner, Trigger::FirstWrite, service)
    }

    /// Whether the service's writes happened.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    fn matches(&self, request: &Request<'_>) -> bool {
        if !request.is_write() {
            return false;
        }
        let Trigger::Touching(target) = &self.trigger else {
            return true;
        };
        written_keys(request)
            .into_iter()
            .any(|k| target.iter().all(|(n, v)| k.get(n) == Some(v)))
    }
}

/// The items (or keys) a write request writes.
pub fn written_keys<'a>(request: &'a Request<'_>) -> Vec<&'a Item> {
    match request {
        Request::Put { item, .. } => vec![item],
        Request::Delete { key, .. } | Request::Update { key, .. } => vec![*key],
        Request::BatchWrite { ops } => ops
            .iter()
            .map(|op| match op {
                WriteOp::Put(item) => item,
                WriteOp::Delete(key) => key,
            })
            .collect(),
        Request::WriteGuarded { ops, .. } => ops.iter().map(|op| op.target()).collect(),
        _ => Vec::new(),
    }
}

#[async_trait]
impl Store for RaceBeforeWrite {
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
        if self.matches(&request) && !self.fired.swap(true, Ordering::SeqCst) {
            for op in &self.service {
                let reply = match op {
                    ServiceOp::Put(item) => {
                        self.inner
                            .call(Request::Put {
                                item: item.clone(),
                                condition: None,
                            })
                            .await
                    }
                    ServiceOp::Delete(key) => {
                        self.inner
                            .call(Request::Delete {
                                key,
                                condition: None,
                            })
                            .await
                    }
                };
                reply?;
            }
        }
        self.inner.call(request).await
    }
}
