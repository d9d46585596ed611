//! Typed changes routed by item kind: the stream side of an app whose
//! handlers read its own item types rather than raw images.
//!
//! The app says once how a raw [`StreamChange`] becomes its typed change
//! ([`TypedChange`]: the decoded key and images, the item kind, which kinds
//! the worker writes itself, and what a batch's records tell about each
//! other); each job's handler ([`ChangeHandler`]) says which kinds it wants
//! and reacts to one change. The [`Router`] decodes each record once and:
//!
//! - rejects a record that does not decode, for good, with the app's
//!   reason;
//! - skips changes of worker-owned items (the loop guard);
//! - runs the handlers that want the change's kind **at once**: they are
//!   separate jobs, each idempotent and correct whatever another has done,
//!   so their order does not matter, and their reads of the same item go
//!   out in the same round (a sharing store reads it once);
//! - reports the record handled with each handler's detail, in their
//!   order, or failed with the worst failure ([`FailureKind::worst`]): one
//!   handler failing transiently has the whole record retried, even when
//!   another failed for good (the retry lets the first finish);
//! - counts each handler's writes under the metric its job declares
//!   ([`Router::counting`]).
//!
//! The router serves each batch bound to that batch's facts
//! ([`TypedChange::facts`], through [`StreamSide`]).
//!
//! An app of notes whose `PK` is `NOTE#<id>`, its worker's own items
//! `WORKER#...`, and one handler of notes:
//!
//! ```
//! use std::sync::Arc;
//! use async_trait::async_trait;
//! use chrono::{DateTime, Utc};
//! use worker_engine::clock::SystemClock;
//! use worker_engine::HandlerError;
//! use worker_engine::stream::{RecordError, StreamChange, decode_event};
//! use worker_engine::stream::{RecordOutcome, RecordProcessor};
//! use worker_engine::stream::{ChangeHandler, HandlerOutcome, Router, TypedChange};
//!
//! #[derive(Debug, Clone, Copy, PartialEq)]
//! enum Kind { Note, Worker }
//!
//! /// A change of the notes table, its key read once.
//! struct NoteChange { kind: Kind, id: String }
//!
//! impl TypedChange for NoteChange {
//!     type Kind = Kind;
//!     type Facts = ();
//!     fn decode(raw: &StreamChange) -> Result<Self, String> {
//!         let pk = raw.keys.get("PK").and_then(|v| v.as_s().ok()).ok_or("no PK")?;
//!         match pk.split_once('#') {
//!             Some(("NOTE", id)) => Ok(NoteChange { kind: Kind::Note, id: id.to_owned() }),
//!             Some(("WORKER", id)) => Ok(NoteChange { kind: Kind::Worker, id: id.to_owned() }),
//!             _ => Err(format!("PK {pk:?} is not NOTE#<id> or WORKER#<id>")),
//!         }
//!     }
//!     fn kind(&self) -> Kind { self.kind }
//!     fn is_worker_owned(kind: Kind) -> bool { kind == Kind::Worker }
//!     fn facts(_: &[Result<StreamChange, RecordError>]) {}
//! }
//!
//! /// Reacts to notes (it would write through its store).
//! struct Notes;
//!
//! #[async_trait]
//! impl ChangeHandler<NoteChange> for Notes {
//!     fn name(&self) -> &'static str { "notes" }
//!     fn wants(&self, kind: Kind) -> bool { kind == Kind::Note }
//!     async fn handle_in_batch(
//!         &self, change: &NoteChange, _now: DateTime<Utc>, _: &(),
//!     ) -> Result<HandlerOutcome, HandlerError> {
//!         Ok(HandlerOutcome::Nothing(format!("note {} seen", change.id)))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let router = Router::<NoteChange>::new(Arc::new(SystemClock)).with(Arc::new(Notes));
//! let event = serde_json::json!({"Records": [
//!     {"eventID": "1", "eventName": "INSERT", "dynamodb": {
//!         "Keys": {"PK": {"S": "NOTE#n1"}}, "NewImage": {"PK": {"S": "NOTE#n1"}},
//!         "SequenceNumber": "1"}},
//!     {"eventID": "2", "eventName": "INSERT", "dynamodb": {
//!         "Keys": {"PK": {"S": "WORKER#w1"}}, "NewImage": {"PK": {"S": "WORKER#w1"}},
//!         "SequenceNumber": "2"}},
//! ]});
//! let records = decode_event(&event).unwrap();
//! let note = router.process(records[0].as_ref().unwrap()).await.unwrap();
//! assert_eq!(note, RecordOutcome::handled("notes: note n1 seen"));
//! let own = router.process(records[1].as_ref().unwrap()).await.unwrap();
//! assert_eq!(own, RecordOutcome::skipped("worker-owned item (loop guard)"));
//! # }
//! ```

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::decode::{RecordError, StreamChange, Typed};
use super::engine::{RecordOutcome, RecordProcessor};
use crate::clock::Clock;
use crate::error::{FailureKind, HandlerError};
use crate::metrics::WriteCounter;
use crate::runtime::StreamSide;

/// An app's stream record, typed.
pub trait TypedChange: Sized + Send + Sync + 'static {
    /// The kind of item a change is of (what handlers subscribe to).
    type Kind: Copy + std::fmt::Debug + PartialEq + Send + Sync;
    /// What the records of one batch tell about each other, for a handler
    /// that can leave part of its work to another record of the batch.
    type Facts: Default + Send + Sync;
    /// Decode a raw change; the error's text says why (no attribute value
    /// but keys).
    fn decode(raw: &StreamChange) -> Result<Self, String>;
    /// The kind of the changed item.
    fn kind(&self) -> Self::Kind;
    /// Whether the worker writes items of this kind itself (their changes
    /// are ignored: the loop guard).
    fn is_worker_owned(kind: Self::Kind) -> bool;
    /// The facts of a decoded batch.
    fn facts(records: &[Result<StreamChange, RecordError>]) -> Self::Facts;
}

/// What a handler did with a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerOutcome {
    /// Wrote to the table (`writes` write requests).
    Wrote {
        /// Write requests sent (counted under the metric the handler was
        /// registered with, if any).
        writes: usize,
        /// What was written, for the log line (no attribute values).
        detail: String,
    },
    /// Nothing to do, and why.
    Nothing(String),
}

/// One job's reaction to typed stream changes. Must be idempotent: the
/// same change may arrive twice, and changes of different items arrive in
/// any order. The handlers of one record run at once, so none may count on
/// another having run first.
#[async_trait]
pub trait ChangeHandler<C: TypedChange>: Send + Sync {
    /// Short name for reports (`relationships`, `expiry`).
    fn name(&self) -> &'static str;
    /// Whether this handler wants changes of this kind of item.
    fn wants(&self, kind: C::Kind) -> bool;
    /// React to one change of a batch whose facts are `batch`; `now` comes
    /// from the injected clock. (A decorator forwards this, so the facts
    /// reach the handler it wraps.)
    async fn handle_in_batch(
        &self,
        change: &C,
        now: DateTime<Utc>,
        batch: &C::Facts,
    ) -> Result<HandlerOutcome, HandlerError>;
    /// React to one change as if it were alone in its batch.
    async fn handle(&self, change: &C, now: DateTime<Utc>) -> Result<HandlerOutcome, HandlerError> {
        self.handle_in_batch(change, now, &C::Facts::default())
            .await
    }
}

/// A handler and the metric its writes count under.
struct Registered<C: TypedChange> {
    handler: Arc<dyn ChangeHandler<C>>,
    metric: Option<&'static str>,
}

/// Routes typed changes to the handlers registered for their item kind.
pub struct Router<C: TypedChange> {
    handlers: Vec<Registered<C>>,
    clock: Arc<dyn Clock>,
    writes: Option<Arc<WriteCounter>>,
}

impl<C: TypedChange> Router<C> {
    /// A router with no handler, reading the time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Router {
            handlers: Vec::new(),
            clock,
            writes: None,
        }
    }

    /// Count the handlers' writes in `writes` (each under the metric it was
    /// registered with: `Router::with_metric`).
    pub fn counting(mut self, writes: Arc<WriteCounter>) -> Self {
        self.writes = Some(writes);
        self
    }

    /// Register a handler (its writes not counted).
    pub fn with(mut self, handler: Arc<dyn ChangeHandler<C>>) -> Self {
        self.handlers.push(Registered {
            handler,
            metric: None,
        });
        self
    }

    /// Register a handler whose writes count under `metric`.
    pub(crate) fn with_metric(
        mut self,
        handler: Arc<dyn ChangeHandler<C>>,
        metric: &'static str,
    ) -> Self {
        self.handlers.push(Registered {
            handler,
            metric: Some(metric),
        });
        self
    }

    /// This router for the records of one batch: its handlers get the
    /// batch's facts. (The router itself processes each record as if it
    /// were alone in its batch.)
    pub fn for_batch(&self, records: &[Result<StreamChange, RecordError>]) -> InBatch<'_, C> {
        InBatch {
            router: self,
            facts: C::facts(records),
        }
    }

    async fn process_in(
        &self,
        raw: &StreamChange,
        batch: &C::Facts,
    ) -> Result<RecordOutcome, HandlerError> {
        let decoded;
        let change = match raw.typed.as_ref().and_then(Typed::get::<C>) {
            Some(change) => change,
            None => {
                decoded = C::decode(raw).map_err(HandlerError::permanent)?;
                &decoded
            }
        };
        let kind = change.kind();
        if C::is_worker_owned(kind) {
            return Ok(RecordOutcome::Skipped {
                reason: "worker-owned item (loop guard)".into(),
            });
        }
        let now = self.clock.now();
        let wanted: Vec<&Registered<C>> = self
            .handlers
            .iter()
            .filter(|r| r.handler.wants(kind))
            .collect();
        let outcomes = futures::future::join_all(
            wanted
                .iter()
                .map(|r| r.handler.handle_in_batch(change, now, batch)),
        )
        .await;
        let mut done = Vec::new();
        let mut failures = Vec::new();
        for (r, outcome) in wanted.iter().zip(outcomes) {
            let name = r.handler.name();
            match outcome {
                Ok(HandlerOutcome::Wrote { writes, detail }) => {
                    if let (Some(counter), Some(metric)) = (&self.writes, r.metric) {
                        counter.add(metric, writes);
                    }
                    done.push(format!("{name}: {detail} ({writes} writes)"))
                }
                Ok(HandlerOutcome::Nothing(why)) => done.push(format!("{name}: {why}")),
                Err(e) => failures.push((e.kind(), format!("{name}: {}", e.reason()))),
            }
        }
        if let Some(kind) = FailureKind::worst(failures.iter().map(|(k, _)| *k)) {
            failures.sort_by_key(|(k, _)| (*k != kind, *k));
            let reasons: Vec<String> = failures.into_iter().map(|(_, r)| r).collect();
            return Err(HandlerError::of_kind(kind, reasons.join("; ")));
        }
        if done.is_empty() {
            return Ok(RecordOutcome::Skipped {
                reason: format!("no handler for {kind:?} changes"),
            });
        }
        Ok(RecordOutcome::Handled {
            detail: done.join("; "),
        })
    }
}

/// The engine runs each batch through the router bound to it.
impl<C: TypedChange> StreamSide for Router<C> {
    fn for_batch<'a>(
        &'a self,
        records: &[Result<StreamChange, RecordError>],
    ) -> Box<dyn RecordProcessor + 'a> {
        Box::new(Router::for_batch(self, records))
    }
}

#[async_trait]
impl<C: TypedChange> RecordProcessor for Router<C> {
    async fn process(&self, raw: &StreamChange) -> Result<RecordOutcome, HandlerError> {
        self.process_in(raw, &C::Facts::default()).await
    }
}

/// A [`Router`] bound to the facts of one batch ([`Router::for_batch`]).
pub struct InBatch<'a, C: TypedChange> {
    router: &'a Router<C>,
    facts: C::Facts,
}

#[async_trait]
impl<C: TypedChange> RecordProcessor for InBatch<'_, C> {
    async fn process(&self, raw: &StreamChange) -> Result<RecordOutcome, HandlerError> {
        self.router.process_in(raw, &self.facts).await
    }
}

#[cfg(test)]
mod tests {
    //! The router with a toy change: a key `PK` of `kind#id`; kind `own` is
    //! the worker's; a key without `#` does not decode. (The handlers
    //! running at once and the worst failure deciding are tested with an
    //! app's own changes, beside its typed change.)
    use super::*;
    use crate::clock::ManualClock;
    use crate::item::Item;
    use crate::stream::ChangeKind;

    struct Toy {
        kind: &'static str,
    }

    impl TypedChange for Toy {
        type Kind = &'static str;
        type Facts = usize;
        fn decode(raw: &StreamChange) -> Result<Self, String> {
            let pk = raw.keys["PK"].as_s().map_err(|_| "PK is no string")?;
            match pk.split_once('#') {
                Some(("note", _)) => Ok(Toy { kind: "note" }),
                Some(("own", _)) => Ok(Toy { kind: "own" }),
                _ => Err(format!("PK {pk:?} is no kind#id")),
            }
        }
        fn kind(&self) -> &'static str {
            self.kind
        }
        fn is_worker_owned(kind: &'static str) -> bool {
            kind == "own"
        }
        fn facts(records: &[Result<StreamChange, RecordError>]) -> usize {
            records.len()
        }
    }

    /// Writes one item per record of its batch.
    struct PerRecord;

    #[async_trait]
    impl ChangeHandler<Toy> for PerRecord {
        fn name(&self) -> &'static str {
            "notes"
        }
        fn wants(&self, kind: &'static str) -> bool {
            kind == "note"
        }
        async fn handle_in_batch(
            &self,
            _: &Toy,
            _: DateTime<Utc>,
            batch: &usize,
        ) -> Result<HandlerOutcome, HandlerError> {
            Ok(HandlerOutcome::Wrote {
                writes: *batch,
                detail: "counted".into(),
            })
        }
    }

    fn change(pk: &str) -> Result<StreamChange, RecordError> {
        let mut keys = Item::new();
        keys.insert(
            "PK".into(),
            aws_sdk_dynamodb::types::AttributeValue::S(pk.into()),
        );
        Ok(StreamChange {
            event_id: "e".into(),
            kind: ChangeKind::Insert,
            sequence_number: None,
            approximate_creation: None,
            keys,
            old_image: None,
            new_image: None,
            event_source_arn: None,
            size_bytes: None,
            typed: None,
        })
    }

    #[tokio::test]
    async fn a_change_typed_as_the_event_was_read_is_routed_without_decoding() {
        let router =
            Router::<Toy>::new(Arc::new(ManualClock::new(Utc::now()))).with(Arc::new(PerRecord));
        // Its key does not decode; its typed change is used.
        let mut raw = change("no-kind").unwrap();
        raw.typed = Some(Typed::new(Toy { kind: "note" }));
        let out = router.process(&raw).await.unwrap();
        assert!(matches!(out, RecordOutcome::Handled { .. }), "{out:?}");
        raw.typed = Some(Typed::new(Toy { kind: "own" }));
        let out = router.process(&raw).await.unwrap();
        assert!(matches!(out, RecordOutcome::Skipped { .. }), "{out:?}");
        // Typed as something else: decoded, and refused.
        raw.typed = Some(Typed::new("not a toy"));
        assert!(router.process(&raw).await.is_err());
    }

    #[tokio::test]
    async fn changes_are_decoded_guarded_routed_and_their_writes_counted() {
        let writes = Arc::new(WriteCounter::default());
        let router = Router::<Toy>::new(Arc::new(ManualClock::new(Utc::now())))
            .counting(writes.clone())
            .with_metric(Arc::new(PerRecord), "NoteWrites");
        let batch = [change("note#1"), change("own#1"), change("x")];
        let bound = router.for_batch(&batch);
        let note = bound.process(batch[0].as_ref().unwrap()).await;
        assert_eq!(
            note.unwrap(),
            RecordOutcome::handled("notes: counted (3 writes)"),
            "the batch's facts reach the handler"
        );
        assert_eq!(writes.snapshot().get("NoteWrites"), Some(&3));
        let own = bound.process(batch[1].as_ref().unwrap()).await;
        assert_eq!(
            own.unwrap(),
            RecordOutcome::skipped("worker-owned item (loop guard)")
        );
        let bad = router.process(batch[2].as_ref().unwrap()).await;
        assert!(
            matches!(&bad, Err(e) if e.kind() == FailureKind::Record && e.reason() == "PK \"x\" is no kind#id"),
            "{bad:?}"
        );
        let unwanted = Router::<Toy>::new(Arc::new(ManualClock::new(Utc::now())))
            .process(batch[0].as_ref().unwrap())
            .await;
        assert_eq!(
            unwanted.unwrap(),
            RecordOutcome::skipped("no handler for \"note\" changes")
        );
    }
}
