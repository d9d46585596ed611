//! `audit-requests` (daily): a request copy whose twin is missing.
//!
//! A pass scans the ChatRequests table (pages of [`PAGE`]) and reads each
//! page's twins in one consistent BatchGetItem. A copy created more than
//! `TWIN_GRACE_MINUTES` ago whose twin is missing is
//!
//! - recreated from the surviving copy while it is `pending` (the same
//!   attributes under the other owner's key). The decision is read from
//!   the surviving copy, so the put is a transaction with a ConditionCheck
//!   on that copy: still `pending`, with the `PendingId` it was read with
//!   (or still none); the put itself only while the twin is absent. A copy
//!   settled or deleted after the page was read recreates nothing;
//! - otherwise reported: counted (`RequestTwinsMissing`) and logged with
//!   its ids; a terminal request's lost copy is not invented.
//!
//! Resumable: a tick that stops before the deadline saves the last key
//! read in `WORKER#audit-requests` / `CHECKPOINT`, and the next tick goes
//! on from there; a finished pass deletes the checkpoint.

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Duration;
use serde_json::json;
use worker_engine::HandlerError;
use worker_engine::item::Item;
use worker_engine::metrics::Metric;
use worker_engine::schedule::{JobReport, JobRun, ScheduledJob};
use worker_engine::store::{Expr, Key, ScanSpec, Store};
use worker_engine::store::{TransactOp, TransactOutcome, Transactions};

use super::{TWINS_MISSING, TWINS_RECREATED};
use crate::app::Deps;
use crate::items::{RequestCopy, Status};
use crate::keys::{self, Job, RequestsItem};
use crate::schema::Table;

/// Items scanned per page.
pub const PAGE: i32 = 100;

/// The `audit-requests` job (daily): see the module's doc.
pub struct AuditRequests {
    store: Arc<dyn Store>,
    tx: Arc<dyn Transactions>,
    /// The ChatRequests table's name (transactions name it).
    table: String,
    grace_minutes: u64,
}

/// The condition that `copy` is as the audit read it: pending, with the
/// same `PendingId` (or still none).
fn unchanged_pending(copy: &RequestCopy) -> Expr {
    let pending = Expr::equals(
        keys::STATUS,
        AttributeValue::S(Status::Pending.as_str().into()),
    );
    let pid = copy.pending_id.clone().map(AttributeValue::S);
    pending.and(Expr::unchanged(keys::PENDING_ID, pid.as_ref()))
}

impl AuditRequests {
    /// The job over the ChatRequests table, its transactions and
    /// `TWIN_GRACE_MINUTES` from `d`.
    pub fn new(d: &Deps) -> Self {
        AuditRequests {
            store: d.stores.get(Table::ChatRequests).clone(),
            tx: d.tx.clone(),
            table: d.settings.tables.name(Table::ChatRequests).to_owned(),
            grace_minutes: d.settings.requests.twin_grace_minutes,
        }
    }

    /// `copy`'s twin put from it, only while the twin is absent and `copy`
    /// is unchanged; whether it was.
    async fn recreate(&self, copy: &RequestCopy) -> Result<bool, HandlerError> {
        let mut recreated = copy.clone();
        recreated.key = Some(copy.twin_key());
        let ops = vec![
            TransactOp::Put {
                table: self.table.clone(),
                item: recreated.to_item(),
                condition: Some(Expr::not_exists(keys::PK)),
            },
            TransactOp::Check {
                table: self.table.clone(),
                key: copy.key().key(),
                condition: unchanged_pending(copy),
            },
        ];
        Ok(self.tx.transact_write(ops).await? == TransactOutcome::Applied)
    }

    async fn position(&self) -> Result<Option<Key>, HandlerError> {
        let Some(item) = self
            .store
            .get(&keys::checkpoint(Job::AuditRequests), true)
            .await?
        else {
            return Ok(None);
        };
        let (Some(pk), Some(sk)) = (item.get(keys::POSITION_PK), item.get(keys::POSITION_SK))
        else {
            tracing::warn!("audit-requests checkpoint has no position; starting a new pass");
            return Ok(None);
        };
        Ok(Some(Key::from([
            (keys::PK.to_owned(), pk.clone()),
            (keys::SK.to_owned(), sk.clone()),
        ])))
    }

    async fn save(&self, position: Option<Key>) -> Result<(), HandlerError> {
        let key = keys::checkpoint(Job::AuditRequests);
        match position {
            None => {
                self.store.delete(&key, None).await?;
            }
            Some(p) => {
                let mut item: Item = key;
                for (from, to) in [(keys::PK, keys::POSITION_PK), (keys::SK, keys::POSITION_SK)] {
                    if let Some(v) = p.get(from) {
                        item.insert(to.to_owned(), v.clone());
                    }
                }
                self.store.put(item, None).await?;
            }
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Figures {
    copies: u64,
    recreated: u64,
    missing: u64,
}

#[async_trait]
impl ScheduledJob<Job> for AuditRequests {
    fn job(&self) -> Job {
        Job::AuditRequests
    }

    async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
        let grace_end = run.now - Duration::minutes(self.grace_minutes.min(5_256_000) as i64);
        let resumed = self.position().await?;
        let was_resumed = resumed.is_some();
        let mut start = resumed;
        let spec = ScanSpec {
            consistent: true,
            limit: Some(PAGE),
            ..Default::default()
        };
        let mut f = Figures::default();
        let mut pages = 0;
        let complete = loop {
            // At least one page a tick, so a late tick still progresses.
            if pages > 0 && !run.has_time() {
                break false;
            }
            pages += 1;
            let page = self.store.scan_page(&spec, start.clone()).await?;
            let copies: Vec<RequestCopy> = page
                .items
                .iter()
                .filter(|i| matches!(RequestsItem::parse(i), Ok(RequestsItem::Copy(_))))
                .filter_map(|i| RequestCopy::from_item(i).ok())
                .filter(|c| c.key().created < grace_end)
                .collect();
            f.copies += copies.len() as u64;
            let twin_keys: Vec<Key> = copies.iter().map(|c| c.twin_key().key()).collect();
            let twins = if twin_keys.is_empty() {
                Vec::new()
            } else {
                self.store.get_many(&twin_keys, true).await?
            };
            for (copy, twin) in copies.iter().zip(twins) {
                if twin.is_some() {
                    continue;
                }
                if copy.status == Status::Pending {
                    if self.recreate(copy).await? {
                        f.recreated += 1;
                    }
                } else {
                    f.missing += 1;
                    tracing::warn!(
                        request = %copy.id,
                        user = %copy.user_id,
                        chat = %copy.chat_id,
                        status = copy.status.as_str(),
                        "request copy without its twin (not pending: reported, not recreated)"
                    );
                }
            }
            match page.last_evaluated_key {
                None => break true,
                Some(k) => start = Some(k),
            }
        };
        if complete {
            if was_resumed {
                self.save(None).await?;
            }
        } else {
            self.save(start).await?;
        }
        Ok(JobReport {
            job: Job::AuditRequests,
            complete,
            summary: format!(
                "{} copies past the grace audited: {} twins recreated, {} missing reported",
                f.copies, f.recreated, f.missing
            ),
            details: json!({
                "copies": f.copies,
                "recreated": f.recreated,
                "missing": f.missing,
                "resumed": was_resumed,
                "pages": pages,
            }),
            metrics: vec![
                Metric::count(TWINS_RECREATED, f.recreated),
                Metric::count(TWINS_MISSING, f.missing),
            ],
        })
    }
}
