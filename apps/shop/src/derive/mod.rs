//! Derived index attributes: after any write of an entity, its `SKU`,
//! `GSI1PK/GSI1SK` and `GSI2PK/GSI2SK` equal what its fields say
//! ([`rules`]).
//!
//! [`DeriveKeys`], the stream handler, decides from the record's new image
//! alone (its key and the attributes a derivation reads, `crate::images`):
//! derived attributes already right cost nothing (this also ends the loop
//! of the handler's own write coming back); otherwise one
//! UpdateItem sets (or removes) them, on the condition that the item
//! exists and its source fields still hold the values derived from. A
//! stale record delivered after a newer write fails that condition and is
//! skipped: the newer write has a record of its own, which derives the
//! newer keys. An order's status change moves it in `GSI1` with its own
//! record. [`backfill`] applies the same rules to every existing item.

pub mod backfill;
pub mod rules;

use std::sync::Arc;

use async_trait::async_trait;
use worker_engine::metrics::WriteCounter;
use worker_engine::store::{Store, StoreError, WriteOutcome};
use worker_engine::stream::StreamChange;
use worker_engine::stream::{RecordOutcome, RecordProcessor};
use worker_engine::{Access, Fallback, HandlerError, Schedule, ScheduleSpec, StreamSpec};

use crate::app::JobSpec;
use crate::items::Fields;
use crate::keys::Job;
use rules::Derivation;

/// Updates of derived attributes by the stream handler.
pub const DERIVED_WRITES: &str = "DerivedKeyWrites";
/// Items whose derived attributes `backfill` wrote.
pub const BACKFILL_WRITES: &str = "BackfillWrites";
/// Items `backfill` read.
pub const BACKFILL_SCANNED: &str = "BackfillScanned";

/// The derived keys: the stream handler, and the backfill.
pub const SPEC: JobSpec = JobSpec {
    name: "derived-keys",
    summary: "keeps SKU, GSI1PK/GSI1SK and GSI2PK/GSI2SK equal to what each entity's fields say, never over a newer write; derives them for every item on demand",
    env: &[],
    stream: Some(StreamSpec {
        handler: "derive-keys",
        writes_metric: DERIVED_WRITES,
        access: Access {
            dynamodb_actions: &["dynamodb:UpdateItem"],
            ..Access::NONE
        },
    }),
    scheduled: &[ScheduleSpec {
        job: Job::Backfill,
        function: "BackfillFunction",
        schedule: Schedule::OnDemand,
        local_cron: "never",
        access: Access {
            dynamodb_actions: &[
                "dynamodb:DeleteItem",
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:Scan",
                "dynamodb:UpdateItem",
            ],
            indexes: &[],
            fallbacks: &[Fallback {
                action: "dynamodb:PutItem",
                why: "a pass cut short by the deadline saves where it resumes (WORKER/CHECKPOINT#backfill)",
            }],
            publishes_events: false,
        },
        metrics: &[BACKFILL_WRITES, BACKFILL_SCANNED],
    }],
    handlers: |d| {
        vec![Arc::new(DeriveKeys {
            store: d.store.clone(),
            writes: d.writes.clone(),
        })]
    },
    jobs: |d| vec![Arc::new(backfill::Backfill::new(d.store.clone()))],
};

/// What deriving one item did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Derived {
    /// Not an entity of the design (a checkpoint, another design's item).
    NotAnEntity,
    /// Already right: no write.
    UpToDate,
    /// The derived attributes were wrong or missing: updated (conditional on
    /// the fields seen).
    Written,
    /// The item changed (or went) since it was read: left to the newer
    /// write's own record.
    ChangedSince,
}

/// Derive one item's attributes: no write when they are right, else a
/// conditional update.
pub async fn derive<F: Fields + Sync + ?Sized>(
    store: &dyn Store,
    item: &F,
) -> Result<Result<Derived, rules::DeriveError>, StoreError> {
    let d = match Derivation::of(item) {
        Ok(Some(d)) => d,
        Ok(None) => return Ok(Ok(Derived::NotAnEntity)),
        Err(e) => return Ok(Err(e)),
    };
    if d.satisfied_by(item) {
        return Ok(Ok(Derived::UpToDate));
    }
    let (update, condition) = d.update();
    Ok(Ok(
        match store.update(&d.key.key(), update, Some(condition)).await? {
            WriteOutcome::Applied => Derived::Written,
            WriteOutcome::ConditionFailed => Derived::ChangedSince,
        },
    ))
}

/// The stream handler.
pub struct DeriveKeys {
    store: Arc<dyn Store>,
    writes: Arc<WriteCounter>,
}

#[async_trait]
impl RecordProcessor for DeriveKeys {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError> {
        if let Err(e) = crate::keys::ItemKey::from_item(&change.keys)
            && e.is_foreign()
        {
            return Ok(RecordOutcome::foreign(e.to_string()));
        }
        if change.kind.is_removal() {
            return Ok(RecordOutcome::skipped("removed"));
        }
        let images = crate::images::Images::of(change);
        let Some(image) = &images.new else {
            return Err(HandlerError::permanent(
                "no new image (the stream must be NEW_AND_OLD_IMAGES)",
            ));
        };
        match derive(self.store.as_ref(), image).await? {
            Err(e) => Err(HandlerError::permanent(e.to_string())),
            Ok(Derived::NotAnEntity) => Ok(RecordOutcome::skipped("not an entity")),
            Ok(Derived::UpToDate) => Ok(RecordOutcome::skipped("derived attributes up to date")),
            Ok(Derived::ChangedSince) => Ok(RecordOutcome::skipped(
                "changed since this record: the newer write's record derives it",
            )),
            Ok(Derived::Written) => {
                self.writes.add(DERIVED_WRITES, 1);
                Ok(RecordOutcome::handled("derived attributes written"))
            }
        }
    }
}
