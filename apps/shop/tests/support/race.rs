//! The service writing between the worker's read and its write, for the
//! shop worker: [`worker_testkit::race::RaceBeforeWrite`] for the store's
//! writes, and the same service writes before the first guarded update
//! (a transaction, which does not go through the store), whichever the
//! worker makes first. The service's writes happen once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use shop_worker::guarded::{Guarded, GuardedUpdates};
use worker_engine::store::guarded::Guard;
use worker_engine::store::{DynamoStore, Expr, ItemWriter, Key, Reply, Request, Store, StoreError};
use worker_testkit::race::ServiceOp;

/// A store and a guarded updater that race the worker's first write.
pub struct Race {
    inner: Arc<DynamoStore>,
    updates: Arc<dyn GuardedUpdates>,
    service: Vec<ServiceOp>,
    fired: AtomicBool,
}

impl Race {
    pub fn new(inner: Arc<DynamoStore>, service: Vec<ServiceOp>) -> Arc<Self> {
        Arc::new(Race {
            updates: super::updates_on(&inner),
            inner,
            service,
            fired: AtomicBool::new(false),
        })
    }

    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    async fn fire(&self) -> Result<(), StoreError> {
        if self.fired.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        for op in &self.service {
            match op {
                ServiceOp::Put(item) => self.inner.put(item.clone(), None).await?,
                ServiceOp::Delete(key) => self.inner.delete(key, None).await?,
            };
        }
        Ok(())
    }
}

#[async_trait]
impl Store for Race {
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
        if request.is_write() {
            self.fire().await?;
        }
        self.inner.call(request).await
    }
}

#[async_trait]
impl GuardedUpdates for Race {
    async fn update_guarded(
        &self,
        guards: &[Guard],
        key: &Key,
        update: Expr,
        condition: Option<Expr>,
    ) -> Result<Guarded, StoreError> {
        self.fire().await?;
        self.updates
            .update_guarded(guards, key, update, condition)
            .await
    }
}

/// The worker on `table`, its first write preceded by `service`.
pub fn raced(
    table: &Arc<DynamoStore>,
    service: Vec<ServiceOp>,
) -> (
    worker_engine::runtime::Worker<shop_worker::keys::Job>,
    Arc<Race>,
) {
    let race = Race::new(table.clone(), service);
    let worker = super::app_on(
        race.clone(),
        race.clone(),
        shop_worker::config::Settings::for_table("test"),
        Arc::new(worker_engine::notify::RecordingPublisher::default()),
    );
    (worker, race)
}
