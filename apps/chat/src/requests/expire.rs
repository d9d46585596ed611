//! `expire-requests` (hourly): pending requests older than
//! `REQUEST_EXPIRY_DAYS` become `expired`, on both copies.
//!
//! It reads only the sparse `PendingRequestsIndex` (a Scan of the index,
//! pages of [`PAGE`]): the index holds one entry per pending copy and
//! nothing else, so the read cost follows the pending requests, not the
//! tables' size. The entry's `SK` holds the request's time; a due entry's
//! copy is set `expired` (`StatusReason = expired`, `PendingId` removed)
//! on the condition that it is still `pending`, so a request accepted or
//! cancelled since the index was read keeps its status (the decision is
//! read from the index entry: the copy's age, which its key holds and no
//! write changes, and its being pending, which the condition re-checks on
//! the copy itself, so the write needs no other item's check). Each copy has its
//! own entry, so both copies are expired by the pass (and the stream
//! handler makes the twin follow if the pass stops between them).
//!
//! Resumable without a checkpoint: an expired copy leaves the index, so a
//! tick that stops early (it checks the deadline between copies and
//! pages, after at least one copy) leaves exactly the remaining due copies
//! for the next tick. The price of no checkpoint: a resumed pass reads the
//! not-yet-due entries before the stop again (the pending set, once more).

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use worker_engine::HandlerError;
use worker_engine::metrics::Metric;
use worker_engine::schedule::{JobReport, JobRun, ScheduledJob};
use worker_engine::store::{Expr, ScanSpec, Store, WriteOutcome};

use super::{REQUESTS_EXPIRED, set_terminal};
use crate::app::Deps;
use crate::items::Status;
use crate::keys::{self, Job, RequestKey};
use crate::schema::Table;

/// Index entries read per page.
pub const PAGE: i32 = 500;

/// The `expire-requests` job (hourly): see the module's doc.
pub struct ExpireRequests {
    store: Arc<dyn Store>,
    expiry_days: u64,
}

/// The creation time before which a pending request is due at `now`.
pub fn cutoff(now: DateTime<Utc>, days: u64) -> DateTime<Utc> {
    now - Duration::days(days.min(36_500) as i64)
}

impl ExpireRequests {
    /// The job over the ChatRequests table and `REQUEST_EXPIRY_DAYS` from `d`.
    pub fn new(d: &Deps) -> Self {
        ExpireRequests {
            store: d.stores.get(Table::ChatRequests).clone(),
            expiry_days: d.settings.requests.expiry_days,
        }
    }
}

#[async_trait]
impl ScheduledJob<Job> for ExpireRequests {
    fn job(&self) -> Job {
        Job::ExpireRequests
    }

    async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
        let cutoff = cutoff(run.now, self.expiry_days);
        let spec = ScanSpec {
            index: Some(keys::PENDING_REQUESTS_INDEX.into()),
            limit: Some(PAGE),
            ..Default::default()
        };
        let (mut read, mut due, mut expired, mut changed, mut malformed) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        let mut start = None;
        let mut complete = true;
        'pages: loop {
            let page = self.store.scan_page(&spec, start).await?;
            for entry in &page.items {
                read += 1;
                let Ok(key) = RequestKey::parse(entry) else {
                    malformed += 1;
                    continue;
                };
                if key.created >= cutoff {
                    continue;
                }
                // At least one copy a tick, so a late tick still progresses.
                if due > 0 && !run.has_time() {
                    complete = false;
                    break 'pages;
                }
                due += 1;
                let pending = AttributeValue::S(Status::Pending.as_str().into());
                let still_pending = Expr::equals(keys::STATUS, pending);
                match self
                    .store
                    .update(
                        &key.key(),
                        set_terminal(Status::Expired, Some(keys::REASON_EXPIRED)),
                        Some(still_pending),
                    )
                    .await?
                {
                    WriteOutcome::Applied => expired += 1,
                    WriteOutcome::ConditionFailed => changed += 1,
                }
            }
            match page.last_evaluated_key {
                Some(k) if run.has_time() => start = Some(k),
                Some(_) => {
                    complete = false;
                    break;
                }
                None => break,
            }
        }
        Ok(JobReport {
            job: Job::ExpireRequests,
            complete,
            summary: format!(
                "{expired} request copies expired of {due} due ({read} pending entries read)"
            ),
            details: json!({
                "cutoff": keys::format_time(cutoff),
                "entries_read": read,
                "due": due,
                "expired": expired,
                "changed_meanwhile": changed,
                "malformed": malformed,
            }),
            metrics: vec![Metric::count(REQUESTS_EXPIRED, expired)],
        })
    }
}
