//! `audit` (daily): every product's `brand_id` and `category_id` checked
//! against the brands and categories that exist; `worker_missing_refs` set
//! to the missing ones, or removed. The products missing a reference are
//! reported by id.
//!
//! The brands and categories are read once per tick, long before a
//! product's flag is written; so each flag write carries, besides its own
//! condition (the product still names the ids read: [`rules::same_refs`]),
//! a guard on each brand and category it was decided from
//! ([`rules::guards`]: absent if flagged missing, present if not). A
//! product or a reference changed meanwhile is left to its stream record
//! and the next pass, and counted (`flags_refused`, `flags_withheld`).
//!
//! A tick reads the brands' and categories' keys (`PK = BRAND`, `PK =
//! CAT`, keys only), then the products (`PK = PROD`) page by page: a
//! Query of the partitions, never a Scan of the table. It finishes at
//! least one page and continues while [`JobRun::has_time`]; stopped early,
//! it saves the position in `WORKER/CHECKPOINT#audit`.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use worker_engine::HandlerError;
use worker_engine::metrics::Metric;
use worker_engine::schedule::{JobReport, JobRun, ScheduledJob};
use worker_engine::store::{Expr, QuerySpec, Store, StoreError};

use super::{MAX_LISTED, PRODUCTS_MISSING_REFS, REF_FLAGS_CHANGED, rules};
use crate::checkpoint::StoredPass;
use crate::items::ProductRefs;
use crate::keys::{self, Id, ItemKey, Job, Listing};

/// Products per Query page (one unit of work).
pub const PAGE_SIZE: i32 = 200;

/// The `audit` job (daily): see the module's doc.
pub struct Audit {
    store: Arc<dyn Store>,
    page_size: i32,
}

impl Audit {
    /// The job over `store`, [`PAGE_SIZE`] products a page.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Audit {
            store,
            page_size: PAGE_SIZE,
        }
    }

    /// With another page size (tests).
    pub fn with_page_size(mut self, n: i32) -> Self {
        self.page_size = n.max(1);
        self
    }

    /// The ids of a partition's items (keys only).
    async fn ids(&self, listing: Listing) -> Result<BTreeSet<Id>, StoreError> {
        let mut spec = QuerySpec::partition(keys::PK, listing.pk());
        spec.projection = Some(
            Expr::new("#pk, #sk")
                .name("#pk", keys::PK)
                .name("#sk", keys::SK),
        );
        Ok(self
            .store
            .query_all(&spec)
            .await?
            .iter()
            .filter_map(|item| match ItemKey::from_item(item) {
                Ok(ItemKey::Brand(id) | ItemKey::Category(id)) => Some(id),
                _ => None,
            })
            .collect())
    }
}

#[async_trait]
impl ScheduledJob<Job> for Audit {
    fn job(&self) -> Job {
        Job::Audit
    }

    async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
        let pass = StoredPass::new(self.store.clone(), Job::Audit);
        let (mut cp, had) = pass.load(run.now).await?;
        let brands = self.ids(Listing::Brands).await?;
        let categories = self.ids(Listing::Categories).await?;
        let (mut products, mut missing, mut changed, mut pages) = (0u64, 0u64, 0u64, 0u64);
        let (mut refused, mut withheld) = (0u64, 0u64);
        let mut listed = Vec::new();
        let complete = loop {
            let mut spec = QuerySpec::partition(keys::PK, Listing::Products.pk());
            spec.limit = Some(self.page_size);
            spec.projection = Some(
                Expr::new("#pk, #sk, #b, #c, #m")
                    .name("#pk", keys::PK)
                    .name("#sk", keys::SK)
                    .name("#b", keys::BRAND_ID)
                    .name("#c", keys::CATEGORY_ID)
                    .name("#m", keys::MISSING_REFS),
            );
            let page = self
                .store
                .query_page(&spec, cp.pass.position.clone())
                .await?;
            pages += 1;
            for item in &page.items {
                let Ok(Some(p)) = ProductRefs::from_item(item) else {
                    continue;
                };
                products += 1;
                let want = rules::missing(&p, &brands, &categories);
                if !want.is_empty() {
                    missing += 1;
                    if listed.len() < MAX_LISTED {
                        listed.push(json!({"product_id": p.id, "missing": want}));
                    }
                }
                if want != p.missing {
                    let guards = rules::guards(&p, &want);
                    let r =
                        rules::write_flag(self.store.as_ref(), &guards, &p, rules::set_flag(&want))
                            .await?;
                    changed += r.applied as u64;
                    refused += r.refused as u64;
                    withheld += r.withheld as u64;
                }
            }
            cp.pass.position = page.last_evaluated_key;
            if cp.pass.position.is_none() {
                break true;
            }
            if !run.has_time() {
                break false;
            }
        };
        cp.pass.add("products", products);
        cp.pass.add("missing", missing);
        if complete {
            pass.finish(had).await?;
        } else {
            cp.pass.ticks += 1;
            pass.save(&cp).await?;
        }
        if missing > 0 {
            tracing::warn!(
                missing,
                "products name a brand or category that does not exist"
            );
        }
        Ok(JobReport {
            job: Job::Audit,
            complete,
            summary: format!(
                "{products} product(s) checked, {missing} missing a reference, {changed} flag(s) changed{}",
                if complete {
                    ""
                } else {
                    "; continues next tick"
                }
            ),
            details: json!({
                "pages": pages,
                "products": products,
                "missing": missing,
                "flags_changed": changed,
                "flags_refused": refused,
                "flags_withheld": withheld,
                "brands": brands.len(),
                "categories": categories.len(),
                "listed": listed,
            }),
            metrics: vec![
                Metric::count(PRODUCTS_MISSING_REFS, missing),
                Metric::count(REF_FLAGS_CHANGED, changed),
            ],
        })
    }
}
