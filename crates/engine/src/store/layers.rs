//! Store decorators: [`DryRunStore`] (reads pass through, writes are
//! recorded instead of sent) and [`RecordingStore`] (everything passes
//! through, the writes made are written down with their outcome, so a
//! command can say what it changed without reading the table). The fault
//! and race layers tests use live in the test kit (`worker-testkit`), out
//! of what Lambda runs.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{
    BatchWriteReport, Expr, Guard, GuardedOp, GuardedReport, Key, Reply, Request, Store,
    StoreError, WriteOp, WriteOutcome,
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
            Request::WriteGuarded { guards, ops } => {
                let applied = ops.len();
                for w in guarded_plans(guards, &ops) {
                    self.plan(w);
                }
                return Ok(Reply::Guarded(GuardedReport {
                    applied,
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

/// The writes of a guarded request as a plan shows them: each write's
/// condition is its own (if any) and every guard's, as
/// `guard(<condition>)`.
fn guarded_plans(guards: &[Guard], ops: &[GuardedOp]) -> Vec<PlannedWrite> {
    let guard_text = guards
        .iter()
        .map(|g| format!("guard({})", g.condition.text))
        .collect::<Vec<_>>()
        .join(" AND ");
    let condition = |own: Option<&Expr>| {
        let mut parts: Vec<String> = own.map(|c| c.text.clone()).into_iter().collect();
        if !guard_text.is_empty() {
            parts.push(guard_text.clone());
        }
        (!parts.is_empty()).then(|| parts.join(" AND "))
    };
    ops.iter()
        .map(|op| match op {
            GuardedOp::Put { item, condition: c } => PlannedWrite::Put {
                item: item.clone(),
                condition: condition(c.as_ref()),
            },
            GuardedOp::Delete { key, condition: c } => PlannedWrite::Delete {
                key: key.clone(),
                condition: condition(c.as_ref()),
            },
            GuardedOp::Update {
                key,
                update,
                condition: c,
            } => PlannedWrite::Update {
                key: key.clone(),
                update: update.text.clone(),
                condition: condition(c.as_ref()),
            },
        })
        .collect()
}

/// What became of a write sent through a [`RecordingStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteResult {
    /// The table accepted it.
    Applied,
    /// Its condition did not hold: nothing changed.
    ConditionFailed,
    /// The request failed (the error went back to the caller); the table
    /// may or may not have it (a timeout after the write).
    Failed,
}

/// A write made through a [`RecordingStore`], in the order it was sent.
#[derive(Debug, Clone, PartialEq)]
pub struct MadeWrite {
    pub write: PlannedWrite,
    pub result: WriteResult,
}

/// Every request goes to the inner store; the writes are recorded with
/// their outcome (a batch as one entry per item, applied when the batch
/// call returned).
pub struct RecordingStore {
    inner: Arc<dyn Store>,
    made: Mutex<Vec<MadeWrite>>,
}

impl RecordingStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        RecordingStore {
            inner,
            made: Mutex::new(Vec::new()),
        }
    }

    /// Take the writes made so far.
    pub fn take_made(&self) -> Vec<MadeWrite> {
        std::mem::take(&mut *self.made.lock().expect("made lock"))
    }

    fn record(&self, writes: Vec<PlannedWrite>, result: WriteResult) {
        let mut made = self.made.lock().expect("made lock");
        made.extend(writes.into_iter().map(|write| MadeWrite { write, result }));
    }
}

#[async_trait]
impl Store for RecordingStore {
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
        if !request.is_write() {
            return self.inner.call(request).await;
        }
        let writes = match &request {
            Request::Put { item, condition } => vec![PlannedWrite::Put {
                item: item.clone(),
                condition: condition.as_ref().map(|c| c.text.clone()),
            }],
            Request::Delete { key, condition } => vec![PlannedWrite::Delete {
                key: (*key).clone(),
                condition: condition.as_ref().map(|c| c.text.clone()),
            }],
            Request::Update {
                key,
                update,
                condition,
            } => vec![PlannedWrite::Update {
                key: (*key).clone(),
                update: update.text.clone(),
                condition: condition.as_ref().map(|c| c.text.clone()),
            }],
            Request::BatchWrite { ops } => ops
                .iter()
                .map(|op| match op {
                    WriteOp::Put(item) => PlannedWrite::Put {
                        item: item.clone(),
                        condition: None,
                    },
                    WriteOp::Delete(key) => PlannedWrite::Delete {
                        key: key.clone(),
                        condition: None,
                    },
                })
                .collect(),
            Request::WriteGuarded { guards, ops } => guarded_plans(guards, ops),
            other => {
                return Err(StoreError::Permanent {
                    operation: "Recording",
                    code: "NotRecorded".into(),
                    message: format!("the recording layer cannot describe {other:?}"),
                });
            }
        };
        let reply = self.inner.call(request).await;
        match &reply {
            // Per write: the applied ones first (the sequence's order), then
            // those a guard or their own condition kept out.
            Ok(Reply::Guarded(r)) => {
                let mut writes = writes.into_iter();
                self.record(
                    writes.by_ref().take(r.applied).collect(),
                    WriteResult::Applied,
                );
                self.record(writes.collect(), WriteResult::ConditionFailed);
            }
            Ok(Reply::Written(WriteOutcome::ConditionFailed)) => {
                self.record(writes, WriteResult::ConditionFailed)
            }
            Ok(_) => self.record(writes, WriteResult::Applied),
            Err(_) => self.record(writes, WriteResult::Failed),
        }
        reply
    }
}
