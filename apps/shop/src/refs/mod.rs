//! References: a product's `brand_id` and `category_id` name an existing
//! brand and category ([`rules`]).
//!
//! - [`DeletedReferences`], the stream handler: the removal of a brand or a
//!   category reports its products, found through `GSI1` (`GSI1PK =
//!   BRAND#<id>`) or `GSI2` (`GSI2PK = CAT#<id>`) instead of a scan, and
//!   flags each with `worker_missing_refs` (an `ADD` to the set). A record
//!   of a brand or category that exists again (a consistent read) flags
//!   nothing. The index is eventually consistent: a product whose keys
//!   were derived within the index's lag may be missed; the `audit` finds
//!   it. A REMOVE record without an old image (DynamoDB emits a second
//!   one when two deletes of one item race) is handled from its keys
//!   like any other;
//! - [`audit::Audit`], scheduled: every product's references checked
//!   against the brands and categories that exist; the flag set or removed
//!   to match, the products missing one reported by id.
//!
//! # The rule every flag write follows (issue 29)
//!
//! A flag is decided from two kinds of item: the product (which ids it
//! names) and the brand and category (whether they exist). The write
//! carries a condition on each, in one transaction
//! ([`rules::write_flag`], the store's guarded write):
//!
//! - on the product, its own condition ([`rules::same_refs`]): it exists
//!   and still names the ids read;
//! - on each referenced brand and category, a guard
//!   ([`rules::guards`]): absent when the flag names its field, present
//!   when it does not. A brand written again between the read and the
//!   write withholds the flag.
//!
//! Either failing is a normal outcome, counted in the record's outcome and
//! the audit's report (`withheld`, `refused`), not an error: the change
//! that made the decision stale has a stream record of its own (and the
//! next audit looks again).

pub mod audit;
pub mod rules;

use std::sync::Arc;

use async_trait::async_trait;
use worker_engine::metrics::WriteCounter;
use worker_engine::store::Guard;
use worker_engine::store::{QuerySpec, Store};
use worker_engine::stream::StreamChange;
use worker_engine::stream::{RecordOutcome, RecordProcessor};
use worker_engine::{Access, Fallback, HandlerError, Schedule, ScheduleSpec, StreamSpec};

use crate::app::JobSpec;
use crate::items::ProductRefs;
use crate::keys::{self, ItemKey, Job};

/// Flags written by the stream handler (products of a deleted reference).
pub const REF_FLAG_WRITES: &str = "ReferenceFlagWrites";
/// Products `audit` found with a missing reference.
pub const PRODUCTS_MISSING_REFS: &str = "ProductsMissingRefs";
/// Flags `audit` set, changed or removed.
pub const REF_FLAGS_CHANGED: &str = "ReferenceFlagsChanged";

/// Product ids listed in a report or a log line, at most.
pub const MAX_LISTED: usize = 50;

/// The references job: its stream handler and the audit.
pub const SPEC: JobSpec = JobSpec {
    name: "references",
    summary: "products whose brand or category does not exist are flagged (worker_missing_refs) and reported; a deleted brand's or category's products are found through GSI1/GSI2",
    env: &[],
    stream: Some(StreamSpec {
        handler: "deleted-references",
        writes_metric: REF_FLAG_WRITES,
        access: Access {
            dynamodb_actions: &[
                "dynamodb:ConditionCheckItem",
                "dynamodb:GetItem",
                "dynamodb:Query",
                "dynamodb:UpdateItem",
            ],
            indexes: &[keys::GSI1, keys::GSI2],
            fallbacks: &[],
            publishes_events: false,
        },
    }),
    scheduled: &[ScheduleSpec {
        job: Job::Audit,
        function: "AuditFunction",
        schedule: Schedule::Rate("rate(1 day)"),
        local_cron: "0 3 * * *",
        access: Access {
            dynamodb_actions: &[
                "dynamodb:ConditionCheckItem",
                "dynamodb:DeleteItem",
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:Query",
                "dynamodb:UpdateItem",
            ],
            indexes: &[],
            fallbacks: &[Fallback {
                action: "dynamodb:PutItem",
                why: "a pass cut short by the deadline saves where it resumes (WORKER/CHECKPOINT#audit)",
            }],
            publishes_events: false,
        },
        metrics: &[PRODUCTS_MISSING_REFS, REF_FLAGS_CHANGED],
    }],
    handlers: |d| {
        vec![Arc::new(DeletedReferences {
            store: d.store.clone(),
            writes: d.writes.clone(),
        })]
    },
    jobs: |d| vec![Arc::new(audit::Audit::new(d.store.clone()))],
};

/// Reports and flags the products of a deleted brand or category.
pub struct DeletedReferences {
    store: Arc<dyn Store>,
    writes: Arc<WriteCounter>,
}

#[async_trait]
impl RecordProcessor for DeletedReferences {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError> {
        if !change.kind.is_removal() {
            return Ok(RecordOutcome::skipped("not a removal"));
        }
        let key = match ItemKey::from_item(&change.keys) {
            Ok(k @ (ItemKey::Brand(_) | ItemKey::Category(_))) => k,
            Err(e) if e.is_foreign() => return Ok(RecordOutcome::foreign(e.to_string())),
            _ => return Ok(RecordOutcome::skipped("not a brand or category")),
        };
        if self.store.get(&key.key(), true).await?.is_some() {
            return Ok(RecordOutcome::skipped("exists again"));
        }
        let (spec, field, what, deleted) = match &key {
            ItemKey::Brand(id) => (
                QuerySpec::partition(keys::GSI1PK, &keys::brand_partition(id)).on_index(keys::GSI1),
                keys::BRAND_ID,
                "brand",
                id,
            ),
            ItemKey::Category(id) => (
                QuerySpec::partition(keys::GSI2PK, &keys::category_partition(id))
                    .on_index(keys::GSI2),
                keys::CATEGORY_ID,
                "category",
                id,
            ),
            _ => unreachable!("matched above"),
        };
        let found = self.store.query_all(&spec).await?;
        // The decision: the reference is gone. Each flag lands only while
        // it still is.
        let gone = [Guard::absent(key.key(), keys::PK)];
        let (mut flagged, mut refused, mut withheld) = (0, 0, 0);
        let mut ids = Vec::new();
        for item in &found {
            let Ok(Some(p)) = ProductRefs::from_item(item) else {
                continue;
            };
            ids.push(p.id.to_string());
            let seen = if field == keys::BRAND_ID {
                &p.brand_id
            } else {
                &p.category_id
            };
            if seen.as_ref() != Some(deleted) {
                continue; // the index lags a change of reference
            }
            if withheld > 0 {
                // The reference exists again: no later flag either.
                withheld += 1;
                continue;
            }
            let r =
                rules::write_flag(self.store.as_ref(), &gone, &p, rules::add_flag(field)).await?;
            flagged += r.applied;
            refused += r.refused;
            withheld += r.withheld;
        }
        self.writes.add(REF_FLAG_WRITES, flagged);
        if ids.is_empty() {
            return Ok(RecordOutcome::skipped(format!(
                "deleted {what} had no product"
            )));
        }
        ids.truncate(MAX_LISTED);
        tracing::warn!(
            deleted = %key,
            products = found.len(),
            flagged,
            withheld,
            refused,
            product_ids = %ids.join(","),
            "products name a deleted {what}"
        );
        let stale = if withheld + refused > 0 {
            format!(
                "; {withheld} withheld ({what} written again), {refused} refused (product changed)"
            )
        } else {
            String::new()
        };
        let text = format!(
            "{} product(s) of the deleted {what}, {flagged} flagged{stale}",
            found.len()
        );
        Ok(RecordOutcome::handled(text))
    }
}
