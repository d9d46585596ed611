//! Store decorators: [`DryRunStore`] (reads pass through, writes are
//! recorded instead of sent). The fault and race layers tests use live in
//! the test kit (`worker-testkit`), out of what Lambda runs.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{
    BatchWriteReport, BatchWriter, Expr, ItemReader, ItemWriter, Key, Page, QuerySpec, QueryStore,
    ScanSpec, Store, StoreError, WriteOp, WriteOutcome,
};
use crate::item::Item;

/// A write a dry run would have made.
#[derive(Debug, Clone, PartialEq)]
pub enum PlannedWrite {
    Put {
        item: Item,
        condition: Option<String>,
    },
    Delete {
        key: Key,
        condition: Option<String>,
    },
    Update {
        key: Key,
        update: String,
        condition: Option<String>,
    },
}

impl PlannedWrite {
    /// The key the write touches.
    pub fn key(&self, key_attributes: (&str, &str)) -> Key {
        match self {
            PlannedWrite::Put { item, .. } => item
                .iter()
                .filter(|(k, _)| k.as_str() == key_attributes.0 || k.as_str() == key_attributes.1)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            PlannedWrite::Delete { key, .. } | PlannedWrite::Update { key, .. } => key.clone(),
        }
    }
}

/// Reads go to the inner store; writes are recorded and reported as applied.
pub struct DryRunStore {
    inner: Arc<dyn Store>,
    planned: Mutex<Vec<PlannedWrite>>,
}

impl DryRunStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        DryRunStore {
            inner,
            planned: Mutex::new(Vec::new()),
        }
    }

    /// Take the writes recorded so far.
    pub fn take_planned(&self) -> Vec<PlannedWrite> {
        std::mem::take(&mut *self.planned.lock().expect("planned lock"))
    }

    fn plan(&self, w: PlannedWrite) {
        self.planned.lock().expect("planned lock").push(w);
    }
}

#[async_trait]
impl ItemReader for DryRunStore {
    async fn get(&self, key: &Key, consistent: bool) -> Result<Option<Item>, StoreError> {
        self.inner.get(key, consistent).await
    }

    async fn get_many(
        &self,
        keys: &[Key],
        consistent: bool,
    ) -> Result<Vec<Option<Item>>, StoreError> {
        self.inner.get_many(keys, consistent).await
    }
}

#[async_trait]
impl QueryStore for DryRunStore {
    async fn query_page(&self, spec: &QuerySpec, start: Option<Key>) -> Result<Page, StoreError> {
        self.inner.query_page(spec, start).await
    }
    async fn scan_page(&self, spec: &ScanSpec, start: Option<Key>) -> Result<Page, StoreError> {
        self.inner.scan_page(spec, start).await
    }

    async fn query_partitions(
        &self,
        index: Option<&str>,
        attribute: &str,
        values: &[aws_sdk_dynamodb::types::AttributeValue],
        consistent: bool,
    ) -> Result<super::Partitions, StoreError> {
        self.inner
            .query_partitions(index, attribute, values, consistent)
            .await
    }
}

#[async_trait]
impl ItemWriter for DryRunStore {
    async fn put(&self, item: Item, condition: Option<Expr>) -> Result<WriteOutcome, StoreError> {
        self.plan(PlannedWrite::Put {
            item,
            condition: condition.map(|c| c.text),
        });
        Ok(WriteOutcome::Applied)
    }
    async fn delete(&self, key: &Key, condition: Option<Expr>) -> Result<WriteOutcome, StoreError> {
        self.plan(PlannedWrite::Delete {
            key: key.clone(),
            condition: condition.map(|c| c.text),
        });
        Ok(WriteOutcome::Applied)
    }
    async fn update(
        &self,
        key: &Key,
        update: Expr,
        condition: Option<Expr>,
    ) -> Result<WriteOutcome, StoreError> {
        self.plan(PlannedWrite::Update {
            key: key.clone(),
            update: update.text,
            condition: condition.map(|c| c.text),
        });
        Ok(WriteOutcome::Applied)
    }
}

#[async_trait]
impl BatchWriter for DryRunStore {
    async fn batch_write(&self, ops: Vec<WriteOp>) -> Result<BatchWriteReport, StoreError> {
        let items = ops.len();
        for op in ops {
            self.plan(match op {
                WriteOp::Put(item) => PlannedWrite::Put {
                    item,
                    condition: None,
                },
                WriteOp::Delete(key) => PlannedWrite::Delete {
                    key,
                    condition: None,
                },
            });
        }
        Ok(BatchWriteReport {
            items,
            ..Default::default()
        })
    }
}
