//! The store layer that writes down what a store was asked, for the command
//! line and for tests; nothing here runs in Lambda.
//!
//! [`RecordingStore`] passes every request on and records each call
//! ([`Call`]): what was asked ([`Asked`], the request with its arguments
//! owned), how it was answered ([`Answer`]), when (on the system's clock or
//! an injected one, and the instants it was sent and answered: the time a
//! write was in flight) and its place in the order of asking. It records
//! the writes, and the reads too when asked to ([`RecordingStore::with_reads`]).
//! What the calls say is read off them:
//!
//! - a command says what it changed without reading the table: the writes
//!   made, each with what became of it ([`RecordingStore::take_made`],
//!   [`MadeWrite`]);
//! - [`DryRunStore`] is the same record over a store that answers writes as
//!   applied without sending them: what a dry run would change
//!   ([`PlannedWrite`]);
//! - a test checks the calls themselves: what the worker wrote and when it
//!   was in flight (the soak tests), or every read and write, replayed
//!   (`worker_testkit::recorded`).
//!
//! The fault and race layers tests use live in the test kit
//! (`worker-testkit`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use worker_engine::clock::{Clock, SystemClock};
use worker_engine::item::Item;
use worker_engine::store::{
    BatchWriteReport, Expr, Guard, GuardedOp, GuardedReport, Key, QuerySpec, Reply, Request,
    ScanSpec, Store, StoreError, WriteOp, WriteOutcome,
};

/// A request as a [`RecordingStore`] keeps it: the [`Request`] variant of
/// the same name, its arguments owned (a single write as the store's
/// [`GuardedOp`]).
#[derive(Debug, Clone)]
pub enum Asked {
    /// A point read ([`Request::Get`]).
    Get {
        /// The item's primary key.
        key: Key,
        /// Whether the read was strongly consistent.
        consistent: bool,
    },
    /// Several point reads ([`Request::GetMany`]).
    GetMany {
        /// The primary keys, in the order asked (a key may repeat).
        keys: Vec<Key>,
        /// Whether the reads were strongly consistent.
        consistent: bool,
    },
    /// A PutItem, DeleteItem or UpdateItem, as the store's own op.
    Write(GuardedOp),
    /// One page of a query ([`Request::QueryPage`]).
    QueryPage {
        /// The query.
        spec: QuerySpec,
        /// Where the page starts (the previous page's last key); `None`: the
        /// first page.
        start: Option<Key>,
    },
    /// One page of a scan ([`Request::ScanPage`]).
    ScanPage {
        /// The scan.
        spec: ScanSpec,
        /// Where the page starts (the previous page's last key); `None`: the
        /// first page.
        start: Option<Key>,
    },
    /// Every item of several partitions ([`Request::QueryPartitions`]).
    QueryPartitions {
        /// The secondary index read; `None`: the table itself.
        index: Option<String>,
        /// The partition key attribute (of the index, when there is one).
        attribute: String,
        /// One partition key value per partition read, in the order asked.
        values: Vec<AttributeValue>,
        /// Whether the reads were strongly consistent.
        consistent: bool,
    },
    /// Bulk unconditional writes ([`Request::BatchWrite`]).
    BatchWrite {
        /// The writes, in the order given.
        ops: Vec<WriteOp>,
    },
    /// Writes that apply only while their guards hold
    /// ([`Request::WriteGuarded`]).
    WriteGuarded {
        /// The facts that had to still hold (checked, not written).
        guards: Vec<Guard>,
        /// The writes, all or none.
        ops: Vec<GuardedOp>,
    },
}

impl Asked {
    /// `request` with its arguments copied.
    fn of(request: &Request<'_>) -> Asked {
        match request {
            Request::Get { key, consistent } => Asked::Get {
                key: (*key).clone(),
                consistent: *consistent,
            },
            Request::GetMany { keys, consistent } => Asked::GetMany {
                keys: keys.to_vec(),
                consistent: *consistent,
            },
            Request::Put { item, condition } => Asked::Write(GuardedOp::Put {
                item: item.clone(),
                condition: condition.clone(),
            }),
            Request::Delete { key, condition } => Asked::Write(GuardedOp::Delete {
                key: (*key).clone(),
                condition: condition.clone(),
            }),
            Request::Update {
                key,
                update,
                condition,
            } => Asked::Write(GuardedOp::Update {
                key: (*key).clone(),
                update: update.clone(),
                condition: condition.clone(),
            }),
            Request::QueryPage { spec, start } => Asked::QueryPage {
                spec: (*spec).clone(),
                start: start.clone(),
            },
            Request::ScanPage { spec, start } => Asked::ScanPage {
                spec: (*spec).clone(),
                start: start.clone(),
            },
            Request::QueryPartitions {
                index,
                attribute,
                values,
                consistent,
            } => Asked::QueryPartitions {
                index: index.map(str::to_owned),
                attribute: (*attribute).to_owned(),
                values: values.to_vec(),
                consistent: *consistent,
            },
            Request::BatchWrite { ops } => Asked::BatchWrite { ops: ops.clone() },
            Request::WriteGuarded { guards, ops } => Asked::WriteGuarded {
                guards: guards.to_vec(),
                ops: ops.clone(),
            },
        }
    }

    /// Its writes as guarded ops, in order (a batch's unconditional; none
    /// for a read).
    pub fn ops(&self) -> Vec<GuardedOp> {
        match self {
            Asked::Write(op) => vec![op.clone()],
            Asked::BatchWrite { ops } => ops
                .iter()
                .map(|op| match op {
                    WriteOp::Put(item) => GuardedOp::put(item.clone()),
                    WriteOp::Delete(key) => GuardedOp::delete(key.clone()),
                })
                .collect(),
            Asked::WriteGuarded { ops, .. } => ops.clone(),
            _ => Vec::new(),
        }
    }

    /// Its writes as a plan shows them: each write's condition is its own
    /// (if any) and every guard's, as `guard(<condition>)`.
    fn planned(&self) -> Vec<PlannedWrite> {
        let guard_text = match self {
            Asked::WriteGuarded { guards, .. } => guards
                .iter()
                .map(|g| format!("guard({})", g.condition.text))
                .collect::<Vec<_>>()
                .join(" AND "),
            _ => String::new(),
        };
        let condition = |own: Option<Expr>| {
            let mut parts: Vec<String> = own.map(|c| c.text).into_iter().collect();
            if !guard_text.is_empty() {
                parts.push(guard_text.clone());
            }
            (!parts.is_empty()).then(|| parts.join(" AND "))
        };
        self.ops()
            .into_iter()
            .map(|op| match op {
                GuardedOp::Put { item, condition: c } => PlannedWrite::Put {
                    item,
                    condition: condition(c),
                },
                GuardedOp::Delete { key, condition: c } => PlannedWrite::Delete {
                    key,
                    condition: condition(c),
                },
                GuardedOp::Update {
                    key,
                    update,
                    condition: c,
                } => PlannedWrite::Update {
                    key,
                    update: update.text,
                    condition: condition(c),
                },
            })
            .collect()
    }
}

/// How a recorded request was answered: the [`Reply`] variant of the same
/// name, a read's items left out.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A read ([`Reply::Item`], [`Reply::Items`], [`Reply::Page`],
    /// [`Reply::Partitions`]).
    Read,
    /// A single write's outcome ([`Reply::Written`]): applied, or its
    /// condition failed.
    Written(WriteOutcome),
    /// A batch's report ([`Reply::Batch`]).
    Batch(BatchWriteReport),
    /// A guarded write's report ([`Reply::Guarded`]): how many of its
    /// writes applied.
    Guarded(GuardedReport),
}

impl Answer {
    /// What is kept of `reply`.
    fn of(reply: &Reply) -> Answer {
        match reply {
            Reply::Written(outcome) => Answer::Written(*outcome),
            Reply::Batch(report) => Answer::Batch(report.clone()),
            Reply::Guarded(report) => Answer::Guarded(*report),
            Reply::Item(_) | Reply::Items(_) | Reply::Page(_) | Reply::Partitions(_) => {
                Answer::Read
            }
        }
    }
}

/// One request sent through a [`RecordingStore`], recorded once answered.
#[derive(Debug, Clone)]
pub struct Call {
    /// Its place in the order of asking among the calls recorded (calls
    /// at once are recorded in the order they are answered).
    pub number: usize,
    /// The request.
    pub asked: Asked,
    /// Its answer, or the error that went back to the caller.
    pub answer: Result<Answer, StoreError>,
    /// The recording store's clock when it was asked.
    pub at: DateTime<Utc>,
    /// When it was sent to the inner store (a write is in flight from then
    /// until `answered`).
    pub sent: Instant,
    /// When its answer (or error) came back.
    pub answered: Instant,
}

impl Call {
    /// Its writes with what became of each: a batch's applied when the
    /// call returned; a guarded request's applied ones first (the
    /// sequence's order), then those a guard or their own condition kept
    /// out; every write of a failed call failed.
    fn made(&self) -> Vec<MadeWrite> {
        let result = |i: usize| match &self.answer {
            Err(_) => WriteResult::Failed,
            Ok(Answer::Guarded(r)) if i >= r.applied => WriteResult::ConditionFailed,
            Ok(Answer::Written(WriteOutcome::ConditionFailed)) => WriteResult::ConditionFailed,
            Ok(_) => WriteResult::Applied,
        };
        self.asked
            .planned()
            .into_iter()
            .enumerate()
            .map(|(i, write)| MadeWrite {
                write,
                result: result(i),
            })
            .collect()
    }
}

/// A write as a plan or a record shows it: its conditions and update as
/// their expressions' text.
#[derive(Debug, Clone, PartialEq)]
pub enum PlannedWrite {
    /// A PutItem of the whole item.
    Put {
        /// The item written, key attributes included.
        item: Item,
        /// The condition it was sent with, as expression text (its own and
        /// every guard's as `guard(<condition>)`, joined by `AND`); `None`:
        /// unconditional.
        condition: Option<String>,
    },
    /// A DeleteItem.
    Delete {
        /// The primary key of the item deleted.
        key: Key,
        /// The condition it was sent with, as for [`PlannedWrite::Put`];
        /// `None`: unconditional.
        condition: Option<String>,
    },
    /// An UpdateItem.
    Update {
        /// The primary key of the item updated.
        key: Key,
        /// The update expression's text (`SET ...`, `REMOVE ...`).
        update: String,
        /// The condition it was sent with, as for [`PlannedWrite::Put`];
        /// `None`: unconditional.
        condition: Option<String>,
    },
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
    /// The write, as a plan would show it.
    pub write: PlannedWrite,
    /// What became of it.
    pub result: WriteResult,
}

/// Every request goes to the inner store; each write (each read too,
/// [`RecordingStore::with_reads`]) is recorded as a [`Call`].
pub struct RecordingStore {
    inner: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    reads: bool,
    asked: AtomicUsize,
    calls: Mutex<Vec<Call>>,
}

impl RecordingStore {
    /// Recording the writes sent to `inner`, timed on the system clock.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        RecordingStore {
            inner,
            clock: Arc::new(SystemClock),
            reads: false,
            asked: AtomicUsize::new(0),
            calls: Mutex::default(),
        }
    }

    /// Record the reads too.
    pub fn with_reads(self) -> Self {
        RecordingStore {
            reads: true,
            ..self
        }
    }

    /// Note on `clock` when each call was asked ([`Call::at`]).
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        RecordingStore { clock, ..self }
    }

    /// Take the calls recorded so far, in the order they were answered.
    pub fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().expect("calls lock"))
    }

    /// Take the writes made so far, in the order their calls were
    /// answered, each with what became of it.
    pub fn take_made(&self) -> Vec<MadeWrite> {
        self.take().iter().flat_map(Call::made).collect()
    }
}

/// The call is passed on; a write (or, recording reads, any request) is
/// recorded once answered.
#[async_trait]
impl Store for RecordingStore {
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
        if !self.reads && !request.is_write() {
            return self.inner.call(request).await;
        }
        let asked = Asked::of(&request);
        let number = self.asked.fetch_add(1, Ordering::Relaxed);
        let at = self.clock.now();
        let sent = Instant::now();
        let reply = self.inner.call(request).await;
        let call = Call {
            number,
            asked,
            answer: reply.as_ref().map(Answer::of).map_err(Clone::clone),
            at,
            sent,
            answered: Instant::now(),
        };
        self.calls.lock().expect("calls lock").push(call);
        reply
    }
}

/// Reads go to the inner store; writes are recorded and answered as
/// applied, never sent: a [`RecordingStore`] over `Unsent`.
pub struct DryRunStore(RecordingStore);

impl DryRunStore {
    /// Over `inner`, which answers the reads and is sent no write.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        DryRunStore(RecordingStore::new(Arc::new(Unsent(inner))))
    }

    /// Take the writes planned so far.
    pub fn take_planned(&self) -> Vec<PlannedWrite> {
        self.0
            .take_made()
            .into_iter()
            .filter(|m| m.result == WriteResult::Applied)
            .map(|m| m.write)
            .collect()
    }
}

/// Recorded by the [`RecordingStore`] inside.
#[async_trait]
impl Store for DryRunStore {
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
        self.0.call(request).await
    }
}

/// Writes answered as applied and not sent (a batch as written in no
/// request); reads passed to the inner store. A write it has no answer
/// for (a new [`Request`] variant) is refused, never sent.
struct Unsent(Arc<dyn Store>);

#[async_trait]
impl Store for Unsent {
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
        match request {
            Request::Put { .. } | Request::Delete { .. } | Request::Update { .. } => {
                Ok(Reply::Written(WriteOutcome::Applied))
            }
            Request::BatchWrite { ops } => Ok(Reply::Batch(BatchWriteReport {
                items: ops.len(),
                ..Default::default()
            })),
            Request::WriteGuarded { ops, .. } => Ok(Reply::Guarded(GuardedReport {
                applied: ops.len(),
                ..Default::default()
            })),
            read if !read.is_write() => self.0.call(read).await,
            write => Err(StoreError::Permanent {
                operation: "DryRun",
                code: "NotPlanned".into(),
                message: format!("a dry run has no plan for {write:?}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use worker_engine::clock::ManualClock;

    fn key(pk: &str) -> Key {
        Key::from([("PK".to_owned(), AttributeValue::S(pk.into()))])
    }

    /// A table of no items that counts what reaches it: puts applied,
    /// deletes refused by their condition, updates failed, guarded writes
    /// applied but for the last, reads answered empty.
    #[derive(Default)]
    struct Table {
        reached: AtomicUsize,
    }

    #[async_trait]
    impl Store for Table {
        async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
            self.reached.fetch_add(1, Ordering::Relaxed);
            match request {
                Request::Put { .. } => Ok(Reply::Written(WriteOutcome::Applied)),
                Request::Delete { .. } => Ok(Reply::Written(WriteOutcome::ConditionFailed)),
                Request::Update { .. } => Err(StoreError::Transient {
                    operation: "UpdateItem",
                    code: "Timeout".into(),
                    message: "no answer".into(),
                }),
                Request::BatchWrite { ops } => Ok(Reply::Batch(BatchWriteReport {
                    items: ops.len(),
                    ..Default::default()
                })),
                Request::WriteGuarded { ops, .. } => Ok(Reply::Guarded(GuardedReport {
                    applied: ops.len() - 1,
                    refused: 1,
                    ..Default::default()
                })),
                _ => Ok(Reply::Item(None)),
            }
        }
    }

    /// One request of each kind a command's worker makes.
    async fn requests(store: &dyn Store) {
        let condition = || Some(Expr::new("attribute_exists(PK)"));
        store.get(&key("r"), true).await.unwrap();
        store.put(key("p"), condition()).await.unwrap();
        store.delete(&key("d"), condition()).await.unwrap();
        // Failed when sent, applied in a dry run.
        let _ = store.update(&key("u"), Expr::new("SET n = :n"), None).await;
        store
            .batch_write(vec![WriteOp::Put(key("b1")), WriteOp::Delete(key("b2"))])
            .await
            .unwrap();
        let guards = [Guard {
            key: key("g"),
            condition: Expr::new("attribute_not_exists(PK)"),
        }];
        let ops = vec![
            GuardedOp::Put {
                item: key("w1"),
                condition: condition(),
            },
            GuardedOp::delete(key("w2")),
        ];
        store.write_guarded(&guards, ops).await.unwrap();
    }

    fn put(pk: &str, condition: Option<&str>) -> PlannedWrite {
        PlannedWrite::Put {
            item: key(pk),
            condition: condition.map(str::to_owned),
        }
    }

    fn delete(pk: &str, condition: Option<&str>) -> PlannedWrite {
        PlannedWrite::Delete {
            key: key(pk),
            condition: condition.map(str::to_owned),
        }
    }

    #[tokio::test]
    async fn writes_are_recorded_with_what_became_of_each() {
        let recording = RecordingStore::new(Arc::new(Table::default()));
        requests(&recording).await;
        let made: Vec<(PlannedWrite, WriteResult)> = recording
            .take_made()
            .into_iter()
            .map(|m| (m.write, m.result))
            .collect();
        let guarded = "guard(attribute_not_exists(PK))";
        assert_eq!(
            made,
            [
                (put("p", Some("attribute_exists(PK)")), WriteResult::Applied),
                (
                    delete("d", Some("attribute_exists(PK)")),
                    WriteResult::ConditionFailed
                ),
                (
                    PlannedWrite::Update {
                        key: key("u"),
                        update: "SET n = :n".into(),
                        condition: None,
                    },
                    WriteResult::Failed
                ),
                (put("b1", None), WriteResult::Applied),
                (delete("b2", None), WriteResult::Applied),
                (
                    put("w1", Some(&format!("attribute_exists(PK) AND {guarded}"))),
                    WriteResult::Applied
                ),
                (delete("w2", Some(guarded)), WriteResult::ConditionFailed),
            ]
        );
        assert!(recording.take().is_empty(), "taken");
    }

    #[tokio::test]
    async fn reads_are_recorded_when_asked_with_the_clock_and_order_of_asking() {
        let t = "2024-03-25T09:00:00Z".parse().unwrap();
        let recording = RecordingStore::new(Arc::new(Table::default()))
            .with_reads()
            .with_clock(Arc::new(ManualClock::new(t)));
        requests(&recording).await;
        let calls = recording.take();
        assert_eq!(calls.len(), 6);
        assert!(matches!(
            &calls[0],
            Call {
                number: 0,
                asked: Asked::Get {
                    consistent: true,
                    ..
                },
                answer: Ok(Answer::Read),
                ..
            }
        ));
        assert!(matches!(calls[3].answer, Err(StoreError::Transient { .. })));
        assert_eq!(calls[5].asked.ops().len(), 2);
        for (n, call) in calls.iter().enumerate() {
            assert_eq!((call.number, call.at), (n, t));
            assert!(call.sent <= call.answered);
        }
    }

    #[tokio::test]
    async fn a_dry_run_plans_the_writes_and_sends_only_the_reads() {
        let table = Arc::new(Table::default());
        let dry = DryRunStore::new(table.clone());
        requests(&dry).await;
        assert_eq!(table.reached.load(Ordering::Relaxed), 1, "the read");
        let planned = dry.take_planned();
        assert_eq!(planned.len(), 7, "{planned:?}");
        assert_eq!(planned[4], delete("b2", None));
        assert!(dry.take_planned().is_empty(), "taken");
    }
}
