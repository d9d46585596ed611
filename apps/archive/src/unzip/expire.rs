//! `expire-unzipped` (hourly): unzipped files past their retention are
//! announced and deleted; unzipping files past the stuck threshold are
//! reported.
//!
//! A pass has two phases, each a key-range Query, so its reads follow the
//! due items, not the table:
//!
//! 1. **expire**: `PK = Unzipped AND SK < now − UNZIPPED_RETENTION_HOURS`,
//!    ten items a page (one `PutEvents` call). With `NOTIFY_EVENT_BUS` set,
//!    one `UnzippedFileExpired` event per item is published first, then
//!    each item is deleted on the condition that its `KeyName` is still the
//!    one announced (a replaced item is kept, and counted). An entry the
//!    bus rejects keeps its item for the next pass. Events are at least
//!    once: a tick dying between publish and delete announces again;
//! 2. **stuck**: `PK = Unzipping AND SK < now − UNZIP_STUCK_HOURS`, read
//!    only: each is logged (key only) and counted, the first
//!    [`MAX_LISTED`] `CreatedDate`s are in the report.
//!
//! The cutoffs are fixed when a pass starts. A tick finishes at least one
//! page, then continues while [`JobRun::has_time`]; stopped early, it saves
//! the phase, the cutoffs and the last key read in
//! `WorkerCheckpoint#expire-unzipped` and the next tick resumes there
//! (deleted items are gone from the range anyway; the position skips the
//! kept ones). A publish failure stops the tick the same way, before the
//! page's deletes.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::json;
use worker_engine::HandlerError;
use worker_engine::metrics::Metric;
use worker_engine::schedule::{JobReport, JobRun, ScheduledJob};
use worker_engine::store::{Expr, Page, QuerySpec, Store, StoreError, WriteOutcome};

use super::{EXPIRY_EVENTS, UNZIPPED_EXPIRED, UNZIPPING_STUCK, UnzipSettings, rules};
use crate::app::Deps;
use crate::items::{Checkpoint, UnzipItem};
use crate::keys::{self, Job};
use worker_engine::{EventEntry, EventPublisher, MAX_ENTRIES_PER_CALL};

const EXPIRE: &str = "expire";
const STUCK: &str = "stuck";
/// Stuck items' `CreatedDate`s listed in a report.
pub const MAX_LISTED: usize = 20;
/// The event's source.
pub const EVENT_SOURCE: &str = "archive.worker";
/// The event's detail type.
pub const EVENT_TYPE: &str = "UnzippedFileExpired";
const STUCK_PAGE: i32 = 100;

/// What one run did.
#[derive(Debug, Default)]
struct Figures {
    pages: u64,
    due: u64,
    expired: u64,
    changed: u64,
    rejected: u64,
    published: u64,
    stuck: u64,
    stuck_created: Vec<i64>,
    publish_error: Option<String>,
}

impl Figures {
    /// Count the stuck `items` (each logged, key only), listing the first
    /// [`MAX_LISTED`].
    fn stuck(&mut self, items: &[UnzipItem]) {
        for item in items {
            tracing::warn!(
                created = item.created,
                "unzipping for longer than UNZIP_STUCK_HOURS"
            );
            self.stuck += 1;
            if self.stuck_created.len() < MAX_LISTED {
                self.stuck_created.push(item.created);
            }
        }
    }

    /// The run's report, from where the pass stands after it.
    fn report(&self, checkpoint: &Checkpoint, complete: bool) -> JobReport<Job> {
        let summary = format!(
            "{} unzipped file(s) expired, {} unzipping file(s) stuck{}",
            self.expired,
            self.stuck,
            if complete {
                ""
            } else {
                "; the next run continues"
            }
        );
        JobReport {
            job: Job::ExpireUnzipped,
            complete,
            summary,
            details: json!({
                "phase": checkpoint.phase,
                "cutoff": checkpoint.cutoff.unwrap_or_default(),
                "stuck_cutoff": checkpoint.stuck_cutoff.unwrap_or_default(),
                "due": self.due,
                "expired": self.expired,
                "changed": self.changed,
                "published": self.published,
                "rejected": self.rejected,
                "publish_error": self.publish_error,
                "stuck": self.stuck,
                "stuck_created": self.stuck_created,
                "pass_ticks": checkpoint.pass.ticks,
                "pass_expired": checkpoint.pass.total("expired"),
                "pass_stuck": checkpoint.pass.total("stuck"),
            }),
            metrics: vec![
                Metric::count(UNZIPPED_EXPIRED, self.expired),
                Metric::count(EXPIRY_EVENTS, self.published),
                Metric::count(UNZIPPING_STUCK, self.stuck),
            ],
        }
    }
}

/// The `expire-unzipped` job (hourly): see the module's doc.
pub struct ExpireUnzipped {
    store: Arc<dyn Store>,
    settings: UnzipSettings,
    publisher: Arc<dyn EventPublisher>,
}

impl ExpireUnzipped {
    /// The job over the table, unzip settings and publisher of `deps`.
    pub fn new(deps: &Deps) -> Self {
        ExpireUnzipped {
            store: deps.store.clone(),
            settings: deps.settings.own.clone(),
            publisher: deps.publisher.clone(),
        }
    }

    /// The pass to continue, or a new one from `now`; and whether a
    /// checkpoint was stored.
    async fn load(&self, now: DateTime<Utc>) -> Result<(Checkpoint, bool), StoreError> {
        let stored = self
            .store
            .get(&keys::checkpoint(Job::ExpireUnzipped), true)
            .await?;
        let had = stored.is_some();
        let resumed =
            stored.and_then(
                |item| match Checkpoint::from_item(Job::ExpireUnzipped, &item) {
                    Ok(c)
                        if (c.phase == EXPIRE || c.phase == STUCK)
                            && c.cutoff.is_some()
                            && c.stuck_cutoff.is_some() =>
                    {
                        Some(c)
                    }
                    _ => {
                        tracing::warn!(
                            "expire-unzipped checkpoint does not decode; starting a new pass"
                        );
                        None
                    }
                },
            );
        let checkpoint = resumed.unwrap_or_else(|| {
            let mut c = Checkpoint::new(Job::ExpireUnzipped, EXPIRE, now);
            c.cutoff = Some(rules::cutoff(now, self.settings.retention_hours));
            c.stuck_cutoff = Some(rules::cutoff(now, self.settings.stuck_hours));
            c
        });
        Ok((checkpoint, had))
    }

    /// One page of `partition` with `SK < cutoff`, from `start`.
    async fn page(
        &self,
        partition: aws_sdk_dynamodb::types::AttributeValue,
        cutoff: i64,
        limit: i32,
        start: Option<worker_engine::store::Key>,
    ) -> Result<Page, StoreError> {
        let mut spec = QuerySpec::below((keys::PK, partition), keys::SK, keys::n(cutoff));
        spec.limit = Some(limit);
        self.store.query_page(&spec, start).await
    }

    /// Announce and delete one page of due items. `false` when publishing
    /// failed (nothing deleted; the page is done again next time).
    async fn expire(
        &self,
        items: &[UnzipItem],
        now: DateTime<Utc>,
        f: &mut Figures,
    ) -> Result<bool, StoreError> {
        f.due += items.len() as u64;
        let mut rejected = vec![false; items.len()];
        if let Some(bus) = &self.settings.event_bus {
            let mut entries = Vec::new();
            let mut of_item = Vec::new();
            for (i, item) in items.iter().enumerate() {
                if let Some(detail) = rules::expired_detail(item, now) {
                    entries.push(EventEntry {
                        source: EVENT_SOURCE.into(),
                        detail_type: EVENT_TYPE.into(),
                        event_bus_name: bus.clone(),
                        detail: detail.to_string(),
                    });
                    of_item.push(i);
                }
            }
            if !entries.is_empty() {
                match self.publisher.publish(&entries).await {
                    Ok(report) => {
                        f.published += report.sent as u64;
                        for (entry, code) in report.rejected {
                            let Some(&i) = of_item.get(entry) else {
                                continue;
                            };
                            tracing::warn!(
                                created = items[i].created,
                                code,
                                "expiry event rejected; the item is kept for the next pass"
                            );
                            rejected[i] = true;
                            f.rejected += 1;
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "publishing expiry events failed; stopping this tick");
                        f.publish_error = Some(e.to_string());
                        return Ok(false);
                    }
                }
            }
        }
        for (item, rejected) in items.iter().zip(rejected) {
            if rejected {
                continue;
            }
            // Only the item announced: same KeyName (or still none).
            let unchanged = match &item.key_name {
                Some(k) => Expr::new("#kn = :kn")
                    .name("#kn", keys::KEY_NAME)
                    .string(":kn", k),
                None => Expr::new("attribute_exists(#pk) AND attribute_not_exists(#kn)")
                    .name("#pk", keys::PK)
                    .name("#kn", keys::KEY_NAME),
            };
            match self.store.delete(&item.key(), Some(unchanged)).await? {
                WriteOutcome::Applied => f.expired += 1,
                WriteOutcome::ConditionFailed => f.changed += 1,
            }
        }
        Ok(true)
    }

    /// Go through the pass's pages from where `checkpoint` stands (moving
    /// it on) while the tick has time, at least one page; whether the pass
    /// is complete.
    async fn pages(
        &self,
        run: &JobRun<Job>,
        checkpoint: &mut Checkpoint,
        f: &mut Figures,
    ) -> Result<bool, StoreError> {
        let (cutoff, stuck_cutoff) = (
            checkpoint.cutoff.unwrap_or_default(),
            checkpoint.stuck_cutoff.unwrap_or_default(),
        );
        loop {
            if f.pages > 0 && !run.has_time() {
                return Ok(false);
            }
            let expiring = checkpoint.phase == EXPIRE;
            let position = checkpoint.pass.position.clone();
            let page = if expiring {
                let limit = MAX_ENTRIES_PER_CALL as i32;
                self.page(keys::unzipped_partition(), cutoff, limit, position)
                    .await?
            } else {
                self.page(
                    keys::unzipping_partition(),
                    stuck_cutoff,
                    STUCK_PAGE,
                    position,
                )
                .await?
            };
            f.pages += 1;
            let items: Vec<UnzipItem> =
                page.items.iter().filter_map(UnzipItem::from_item).collect();
            if expiring {
                if !self.expire(&items, run.now, f).await? {
                    return Ok(false);
                }
            } else {
                f.stuck(&items);
            }
            checkpoint.pass.position = page.last_evaluated_key;
            if checkpoint.pass.position.is_none() {
                if expiring {
                    checkpoint.phase = STUCK.to_owned();
                } else {
                    return Ok(true);
                }
            }
        }
    }

    /// Count the tick in the pass; then drop the checkpoint of a complete
    /// pass (if one was stored), else store where the pass stands.
    async fn save(
        &self,
        checkpoint: &mut Checkpoint,
        had_checkpoint: bool,
        complete: bool,
        f: &Figures,
    ) -> Result<(), StoreError> {
        checkpoint.pass.ticks += 1;
        checkpoint.pass.add("expired", f.expired);
        checkpoint.pass.add("stuck", f.stuck);
        if complete {
            if had_checkpoint {
                self.store
                    .delete(&keys::checkpoint(Job::ExpireUnzipped), None)
                    .await?;
            }
        } else {
            self.store.put(checkpoint.to_item(), None).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl ScheduledJob<Job> for ExpireUnzipped {
    fn job(&self) -> Job {
        Job::ExpireUnzipped
    }

    async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
        let (mut checkpoint, had_checkpoint) = self.load(run.now).await?;
        let mut f = Figures::default();
        let complete = self.pages(run, &mut checkpoint, &mut f).await?;
        self.save(&mut checkpoint, had_checkpoint, complete, &f)
            .await?;
        Ok(f.report(&checkpoint, complete))
    }
}
