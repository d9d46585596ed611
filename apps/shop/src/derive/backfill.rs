//! `backfill` (on demand): derive the index attributes of every existing
//! item, e.g. after the worker starts serving a table written without
//! them. Each item goes through [`super::derive`], the stream handler's
//! own decision (no write when right, a write conditional on the fields
//! seen), so the table ends as the stream would have left it, and items
//! written meanwhile are never overwritten with stale keys.
//!
//! A pass is a paged Scan, each page one unit of work (its items derived
//! [`CONCURRENCY`] at a time). A tick finishes at least one page, then
//! continues while [`JobRun::has_time`]; stopped early, it saves the
//! Scan's `LastEvaluatedKey` in `WORKER/CHECKPOINT#backfill` and the next
//! tick resumes there. The command line runs it with a progress bar
//! (`shop-worker backfill`).

use std::sync::Arc;

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use serde_json::json;
use worker_engine::HandlerError;
use worker_engine::metrics::Metric;
use worker_engine::schedule::{JobReport, JobRun, ScheduledJob};
use worker_engine::store::{ScanSpec, Store};

use super::{BACKFILL_SCANNED, BACKFILL_WRITES, Derived, derive};
use crate::checkpoint::StoredPass;
use crate::keys::Job;

/// Items per Scan page (one unit of work).
pub const PAGE_SIZE: i32 = 200;
/// Items of a page derived at once.
pub const CONCURRENCY: usize = 16;

/// What a pass did so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    /// Scan pages read by this tick.
    pub pages: u64,
    /// Items scanned by the pass so far (earlier ticks' total from the
    /// checkpoint, plus this tick's).
    pub scanned: u64,
    /// Items written by the pass so far (earlier ticks' total from the
    /// checkpoint, plus this tick's).
    pub written: u64,
    /// Items of this tick already right: no write.
    pub up_to_date: u64,
    /// Items of this tick changed or deleted since the Scan read them: left to
    /// their own stream records.
    pub changed_since: u64,
    /// Items of this tick whose attributes cannot be derived (a malformed key
    /// or field; logged by key, not written).
    pub malformed: u64,
}

/// Derives every item's index attributes.
pub struct Backfill {
    store: Arc<dyn Store>,
    page_size: i32,
}

impl Backfill {
    /// The job over `store`, [`PAGE_SIZE`] items a page.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Backfill {
            store,
            page_size: PAGE_SIZE,
        }
    }

    /// With another page size (tests: several pages on a small table).
    pub fn with_page_size(mut self, n: i32) -> Self {
        self.page_size = n.max(1);
        self
    }

    /// One tick of the pass; `progress` sees the pass's figures after each
    /// page.
    pub async fn tick(
        &self,
        run: &JobRun<Job>,
        progress: &(dyn Fn(&Figures) + Sync),
    ) -> Result<JobReport<Job>, HandlerError> {
        let pass = StoredPass::new(self.store.clone(), Job::Backfill);
        let (mut cp, had) = pass.load(run.now).await?;
        let mut f = Figures {
            scanned: cp.pass.total("scanned"),
            written: cp.pass.total("written"),
            ..Figures::default()
        };
        let (scanned0, written0) = (f.scanned, f.written);
        let complete = loop {
            let spec = ScanSpec {
                limit: Some(self.page_size),
                ..Default::default()
            };
            let page = self
                .store
                .scan_page(&spec, cp.pass.position.clone())
                .await?;
            f.pages += 1;
            f.scanned += page.items.len() as u64;
            let next = page.last_evaluated_key;
            let outcomes: Vec<_> = futures::stream::iter(page.items)
                .map(|item| {
                    let store = self.store.clone();
                    async move { derive(store.as_ref(), &item).await }
                })
                .buffer_unordered(CONCURRENCY)
                .try_collect()
                .await?;
            for o in outcomes {
                match o {
                    Ok(Derived::Written) => f.written += 1,
                    Ok(Derived::UpToDate) => f.up_to_date += 1,
                    Ok(Derived::ChangedSince) => f.changed_since += 1,
                    Ok(Derived::NotAnEntity) => {}
                    Err(e) => {
                        f.malformed += 1;
                        tracing::warn!(error = %e, "backfill: item not derived");
                    }
                }
            }
            progress(&f);
            cp.pass.position = next;
            if cp.pass.position.is_none() {
                break true;
            }
            if !run.has_time() {
                break false;
            }
        };
        if complete {
            pass.finish(had).await?;
        } else {
            cp.pass.ticks += 1;
            cp.pass.add("scanned", f.scanned - cp.pass.total("scanned"));
            cp.pass.add("written", f.written - cp.pass.total("written"));
            pass.save(&cp).await?;
        }
        Ok(JobReport {
            job: Job::Backfill,
            complete,
            summary: format!(
                "{} item(s) read, {} written{}",
                f.scanned - scanned0,
                f.written - written0,
                if complete {
                    "; pass complete"
                } else {
                    "; continues next tick"
                }
            ),
            details: json!({
                "pages": f.pages,
                "scanned": f.scanned - scanned0,
                "written": f.written - written0,
                "up_to_date": f.up_to_date,
                "changed_since": f.changed_since,
                "malformed": f.malformed,
                "pass_scanned": f.scanned,
                "pass_written": f.written,
            }),
            metrics: vec![
                Metric::count(BACKFILL_WRITES, f.written - written0),
                Metric::count(BACKFILL_SCANNED, f.scanned - scanned0),
            ],
        })
    }
}

#[async_trait]
impl ScheduledJob<Job> for Backfill {
    fn job(&self) -> Job {
        Job::Backfill
    }

    async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
        self.tick(run, &|_| {}).await
    }
}
