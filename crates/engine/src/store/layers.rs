//! Store decorators: [`DryRunStore`] (reads pass through, writes are
//! recorded instead of sent). The fault and race layers tests use live in
//! the test kit (`worker-testkit`), out of what Lambda runs.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{
    BatchWriteReport, Expr, Key, Reply, Request, Store, StoreError, WriteOp, WriteOutcome,
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

/// Writes are planned and answered as applied (a batch as written in no
/// request); reads pass straight through. A write this layer has no plan
/// for (a new [`Request`] variant) is refused, never sent.
#[async_trait]
impl Store for DryRunStore {
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
        let planned = match request {
            Request::Put { item, condition } => PlannedWrite::Put {
                item,
                condition: text(condition),
            },
            Request::Delete { key, condition } => PlannedWrite::Delete {
                key: key.clone(),
                condition: text(condition),
            },
            Request::Update {
                key,
                update,
                condition,
            } => PlannedWrite::Update {
                key: key.clone(),
                update: update.text,
                condition: text(condition),
            },
            Request::BatchWrite { ops } => {
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
                return Ok(Reply::Batch(BatchWriteReport {
                    items,
                    ..Default::default()
                }));
            }
            read if !read.is_write() => return self.inner.call(read).await,
            write => {
                return Err(StoreError::Permanent {
                    operation: "DryRun",
                    code: "NotPlanned".into(),
                    message: format!("a dry run has no plan for {write:?}"),
                });
            }
        };
        self.plan(planned);
        Ok(Reply::Written(WriteOutcome::Applied))
    }
}

/// A condition as a plan shows it: its expression's text.
fn text(condition: Option<Expr>) -> Option<String> {
    condition.map(|c| c.text)
}
