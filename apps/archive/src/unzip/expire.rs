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
use worker_engine::error::HandlerError;
use worker_engine::metrics::Metric;
use worker_engine::schedule::{JobReport, JobRun, ScheduledJob};
use worker_engine::store::{Expr, Page, QuerySpec, Store, StoreError, WriteOutcome};

use super::{EXPIRY_EVENTS, UNZIPPED_EXPIRED, UNZIPPING_STUCK, UnzipSettings, rules};
use crate::app::Deps;
use crate::items::{Checkpoint, UnzipItem};
use crate::keys::{self, Job};
use crate::notify::{EventEntry, EventPublisher, MAX_ENTRIES_PER_CALL};

const EXPIRE: &str = "expire";
const STUCK: &str = "stuck";
/// Stuck items' `CreatedDate`s listed in a report.
pub const MAX_LISTED: usize = 20;
/// The event's source and detail type.
pub const EVENT_SOURCE: &str = "archive.worker";
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

pub struct ExpireUnzipped {
    store: Arc<dyn Store>,
    settings: UnzipSettings,
    publisher: Arc<dyn EventPublisher>,
}

impl ExpireUnzipped {
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
}

#[async_trait]
impl ScheduledJob<Job> for ExpireUnzipped {
    fn job(&self) -> Job {
        Job::ExpireUnzipped
    }

    async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
        let (mut checkpoint, had_checkpoint) = self.load(run.now).await?;
        let (cutoff, stuck_cutoff) = (
            checkpoint.cutoff.unwrap_or_default(),
            checkpoint.stuck_cutoff.unwrap_or_default(),
        );
        let mut f = Figures::default();
        let mut complete = false;
        loop {
            if f.pages > 0 && !run.has_time() {
                break;
            }
            let expiring = checkpoint.phase == EXPIRE;
            let page = if expiring {
                self.page(
                    keys::unzipped_partition(),
                    cutoff,
                    MAX_ENTRIES_PER_CALL as i32,
                    checkpoint.pass.position.clone(),
                )
                .await?
            } else {
                self.page(
                    keys::unzipping_partition(),
                    stuck_cutoff,
                    STUCK_PAGE,
                    checkpoint.pass.position.clone(),
                )
                .await?
            };
            f.pages += 1;
            let items: Vec<UnzipItem> =
                page.items.iter().filter_map(UnzipItem::from_item).collect();
            if expiring {
                if !self.expire(&items, run.now, &mut f).await? {
                    break;
                }
            } else {
                for item in &items {
                    tracing::warn!(
                        created = item.created,
                        "unzipping for longer than UNZIP_STUCK_HOURS"
                    );
                    f.stuck += 1;
                    if f.stuck_created.len() < MAX_LISTED {
                        f.stuck_created.push(item.created);
                    }
                }
            }
            checkpoint.pass.position = page.last_evaluated_key;
            if checkpoint.pass.position.is_none() {
                if expiring {
                    checkpoint.phase = STUCK.to_owned();
                } else {
                    complete = true;
                    break;
                }
            }
        }
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
        let summary = format!(
            "{} unzipped file(s) expired, {} unzipping file(s) stuck{}",
            f.expired,
            f.stuck,
            if complete {
                ""
            } else {
                "; the next run continues"
            }
        );
        Ok(JobReport {
            job: Job::ExpireUnzipped,
            complete,
            summary,
            details: json!({
                "phase": checkpoint.phase,
                "cutoff": cutoff,
                "stuck_cutoff": stuck_cutoff,
                "due": f.due,
                "expired": f.expired,
                "changed": f.changed,
                "published": f.published,
                "rejected": f.rejected,
                "publish_error": f.publish_error,
                "stuck": f.stuck,
                "stuck_created": f.stuck_created,
                "pass_ticks": checkpoint.pass.ticks,
                "pass_expired": checkpoint.pass.total("expired"),
                "pass_stuck": checkpoint.pass.total("stuck"),
            }),
            metrics: vec![
                Metric::count(UNZIPPED_EXPIRED, f.expired),
                Metric::count(EXPIRY_EVENTS, f.published),
                Metric::count(UNZIPPING_STUCK, f.stuck),
            ],
        })
    }
}
