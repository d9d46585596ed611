//! The scheduled side of the expiry job: the daily tick (`flag-expiring`),
//! the backfill (`backfill`) and their checkpoints; the I/O around
//! [`super::rules`] (see the module docs of [`super`] for the whole job).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Days, NaiveDate, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::rules::*;
use super::{
    FLAG_ATTEMPTS, container_as_read, flag_guards, linked_now, owning_groups, read_container,
    write_flags,
};
use crate::datetime;
use crate::items::{Entity, Item};
use crate::jobs::JobDeps;
use crate::keys::{ContainerId, FoodId, GroupId, ItemKey, Job, PK, SK};
use worker_engine::HandlerError;
use worker_engine::metrics::Metric;
use worker_engine::schedule::{JobReport, JobRun, ScheduledJob};
use worker_engine::store::{
    Expr, Guard, GuardedOp, Key, QuerySpec, ScanSpec, Store, StoreError, WriteOp,
};
use worker_engine::{EventEntry, EventPublisher};

/// Without a checkpoint, the tick starts this many days before today.
pub const FIRST_RUN_LOOKBACK_DAYS: u64 = 7;
/// Pending notification events kept in the checkpoint at most.
pub const MAX_PENDING_EVENTS: usize = 50;
/// Containers handled at once by the tick and the backfill.
const CONCURRENCY: usize = 8;
/// Default backfill page (items evaluated per Scan page).
pub const DEFAULT_BACKFILL_PAGE: i32 = 1000;

// ---------------------------------------------------------------------------
// Checkpoints
// ---------------------------------------------------------------------------

async fn load_checkpoint<T: for<'de> Deserialize<'de> + Default>(
    store: &dyn Store,
    job: Job,
) -> Result<T, HandlerError> {
    let Some(mut item) = store
        .get(&ItemKey::Checkpoint(job).to_attributes(), true)
        .await?
    else {
        return Ok(T::default());
    };
    item.remove(PK);
    item.remove(SK);
    serde_dynamo::from_item(item).map_err(|e| {
        HandlerError::invalid(format!(
            "checkpoint of {job} does not decode ({}); delete the item WorkerCheckpoint/{job} to start over",
            crate::items::redact_quoted(&e.to_string())
        ))
    })
}

async fn save_checkpoint<T: Serialize>(
    store: &dyn Store,
    job: Job,
    state: &T,
) -> Result<(), StoreError> {
    let mut item: Item = serde_dynamo::to_item(state).expect("checkpoints always serialize");
    item.retain(|_, v| !matches!(v, AttributeValue::Null(_)));
    item.extend(ItemKey::Checkpoint(job).to_attributes());
    store.put(item, None).await?;
    Ok(())
}

/// The tick's checkpoint (`WorkerCheckpoint`/`flag-expiring`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TickCheckpoint {
    /// The first reminder date not known to be fully processed.
    #[serde(default)]
    pub next_date: Option<NaiveDate>,
    /// Notification entries not accepted yet; sent first next time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_events: Vec<EventEntry>,
    /// When a tick last saved it (canonical datetime); `None` before the
    /// first run.
    #[serde(default)]
    pub updated_at: Option<String>,
}

// ---------------------------------------------------------------------------
// Daily tick
// ---------------------------------------------------------------------------

/// What one tick did (`JobReport.details`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TickReport {
    /// Today in `EXPIRY_TIME_ZONE`: the last reminder date the tick reads.
    pub today: Option<NaiveDate>,
    /// The first reminder date read: the checkpoint's `NextDate` (first
    /// run: today minus the lookback), never after today.
    pub from_date: Option<NaiveDate>,
    /// Reminder dates read to their last page.
    pub dates_read: u64,
    /// Query pages read from the reminder partitions.
    pub pages: u64,
    /// Reminders read.
    pub reminders: u64,
    /// Container reads (consistent GetItem), retries after a withheld
    /// write included.
    pub containers_read: u64,
    /// Flags put where none of that status existed: foods newly flagged
    /// (these are announced).
    pub flags_new: u64,
    /// Flags put over one of the same status (values brought up to date).
    pub flags_refreshed: u64,
    /// Flags deleted (food gone, expiry removed, far again, retired).
    pub flags_deleted: u64,
    /// Next reminders put.
    pub reminders_written: u64,
    /// Reminders deleted, the processed ones included.
    pub reminders_deleted: u64,
    /// Foods inside the window whose container has no group link.
    pub unlinked: u64,
    /// Reminders whose container or food is gone.
    pub gone: u64,
    /// Containers that do not decode (their reminders are dropped; the
    /// container's next write replans it).
    pub unreadable_containers: u64,
    /// Containers whose flags were withheld at every attempt (the
    /// container or a link kept changing after each read): their reminders
    /// stay for the next run.
    #[serde(skip_serializing_if = "is_zero")]
    pub flags_withheld: u64,
    /// Items in a reminder partition that are not reminders.
    pub malformed: u64,
    /// Containers left for the next run (deadline).
    pub deferred: u64,
    /// Notification entries EventBridge accepted (earlier runs' pending
    /// ones included).
    pub events_sent: u64,
    /// Entries kept in the checkpoint for the next tick (rejected or not
    /// sent).
    pub events_pending: u64,
}

impl TickReport {
    fn add(&mut self, o: &TickReport) {
        self.containers_read += o.containers_read;
        self.flags_new += o.flags_new;
        self.flags_refreshed += o.flags_refreshed;
        self.flags_deleted += o.flags_deleted;
        self.reminders_written += o.reminders_written;
        self.reminders_deleted += o.reminders_deleted;
        self.unlinked += o.unlinked;
        self.gone += o.gone;
        self.unreadable_containers += o.unreadable_containers;
        self.flags_withheld += o.flags_withheld;
        self.deferred += o.deferred;
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The daily tick (`flag-expiring`).
pub struct FlagExpiringJob {
    store: Arc<dyn Store>,
    rules: ExpiryRules,
    bus: Option<String>,
    publisher: Arc<dyn EventPublisher>,
}

impl FlagExpiringJob {
    /// The tick; notifies through the deps' publisher (EventBridge in
    /// Lambda) when `NOTIFY_EVENT_BUS` is set.
    pub fn new(deps: &JobDeps) -> Self {
        FlagExpiringJob {
            store: deps.store.clone(),
            rules: ExpiryRules::from_config(&deps.settings),
            bus: deps.settings.expiry.notify_event_bus.clone(),
            publisher: deps.publisher.clone(),
        }
    }

    /// Publish through another publisher (tests, dry runs). Events are only
    /// published when a bus is configured.
    pub fn with_publisher(mut self, publisher: Arc<dyn EventPublisher>) -> Self {
        self.publisher = publisher;
        self
    }

    fn reminder_query(date: NaiveDate) -> QuerySpec {
        QuerySpec::partition(PK, &ItemKey::reminder_partition(date))
    }

    /// Re-decide every reminded food of one container. Flags are put here
    /// (conditionally, to tell newly flagged foods; guarded by the
    /// container as read and its links); the reminder writes are returned,
    /// for one batch per page. A flag withheld because the container
    /// changed after the read is decided again from a fresh read; after
    /// [`FLAG_ATTEMPTS`] the container's reminders are left for the next
    /// run (counted in `flags_withheld`).
    async fn process_container(
        &self,
        date: NaiveDate,
        container: ContainerId,
        foods: Vec<FoodId>,
        run: &JobRun<Job>,
        newly: &std::sync::Mutex<BTreeMap<GroupId, Vec<FlagData>>>,
    ) -> Result<(TickReport, Vec<WriteOp>), StoreError> {
        let mut total = TickReport::default();
        if !run.has_time() {
            total.deferred += 1;
            return Ok((total, Vec::new()));
        }
        for _ in 0..FLAG_ATTEMPTS {
            let (r, batch) = self
                .decide_container(date, container, &foods, run, newly)
                .await?;
            let withheld = r.flags_withheld;
            total.add(&TickReport {
                flags_withheld: 0,
                ..r
            });
            if withheld == 0 {
                return Ok((total, batch));
            }
        }
        total.flags_withheld += 1;
        Ok((total, Vec::new()))
    }

    /// One read-decide-write of [`Self::process_container`].
    async fn decide_container(
        &self,
        date: NaiveDate,
        container: ContainerId,
        foods: &[FoodId],
        run: &JobRun<Job>,
        newly: &std::sync::Mutex<BTreeMap<GroupId, Vec<FlagData>>>,
    ) -> Result<(TickReport, Vec<WriteOp>), StoreError> {
        let mut r = TickReport::default();
        let store = self.store.as_ref();
        r.containers_read += 1;
        let read = read_container(store, container).await?;
        let as_read = read.as_read;
        let current = match read.container {
            Ok(c) => c,
            Err(reason) => {
                tracing::warn!(%container, %reason, "expiry tick: container does not decode; its reminders are dropped");
                r.unreadable_containers += 1;
                None
            }
        };
        let plans: Vec<FoodPlan> = foods
            .iter()
            .map(|f| {
                let food = current
                    .as_ref()
                    .and_then(|c| c.foods.iter().find(|x| x.food_id == *f));
                if food.and_then(|x| x.expiry).is_none() {
                    r.gone += 1;
                }
                plan_reminder(date, container, *f, food, run.now, &self.rules)
            })
            .collect();
        let needs_group = plans.iter().any(|p| p.flag != FlagAction::Keep);
        let groups = if needs_group {
            linked_now(store, container, owning_groups(store, container).await?).await?
        } else {
            Vec::new()
        };
        let mut batch = Vec::new();
        let mut deletes = Vec::new();
        for plan in &plans {
            match &plan.flag {
                FlagAction::Put(_) if groups.is_empty() => r.unlinked += 1,
                FlagAction::Put(data) => {
                    for g in &groups {
                        let guards = flag_guards(&as_read, container, &[*g]);
                        match self.put_flag(&guards, *g, data).await? {
                            Some(true) => {
                                r.flags_new += 1;
                                newly
                                    .lock()
                                    .expect("newly lock")
                                    .entry(*g)
                                    .or_default()
                                    .push(data.clone());
                            }
                            Some(false) => r.flags_refreshed += 1,
                            None => r.flags_withheld += 1,
                        }
                    }
                }
                FlagAction::Delete => deletes.extend(flag_ops(plan, &groups)),
                FlagAction::Keep => {}
            }
            r.reminders_written += u64::from(plan.put_reminder.is_some());
            r.reminders_deleted += plan.delete_reminders.len() as u64;
            batch.extend(reminder_ops(plan, run.now));
        }
        let deleted =
            write_flags(store, &flag_guards(&as_read, container, &groups), deletes).await?;
        r.flags_deleted += deleted.applied as u64;
        r.flags_withheld += deleted.withheld as u64;
        Ok((r, batch))
    }

    /// Put a flag while `guards` hold (the container as read, the link):
    /// `Some(true)` when it is new or changed status (newly flagged),
    /// `Some(false)` when refreshed, `None` when a guard withheld it.
    async fn put_flag(
        &self,
        guards: &[Guard],
        group: GroupId,
        data: &FlagData,
    ) -> Result<Option<bool>, StoreError> {
        let item = data.to_item(group);
        let condition = Expr::new("attribute_not_exists(#pk) OR #status <> :status")
            .name("#pk", PK)
            .name("#status", flag_attr::STATUS)
            .string(":status", data.status.as_str());
        let put = GuardedOp::Put {
            item: item.clone(),
            condition: Some(condition),
        };
        let first = self.store.write_guarded(guards, vec![put]).await?;
        if !first.held() {
            return Ok(None);
        }
        if first.applied == 1 {
            return Ok(Some(true));
        }
        let refresh = self
            .store
            .write_guarded(guards, vec![GuardedOp::put(item)])
            .await?;
        Ok(refresh.held().then_some(false))
    }

    /// Process one page of reminders of `date`.
    async fn process_page(
        &self,
        date: NaiveDate,
        items: Vec<Item>,
        run: &JobRun<Job>,
        report: &mut TickReport,
        newly: &std::sync::Mutex<BTreeMap<GroupId, Vec<FlagData>>>,
    ) -> Result<(), StoreError> {
        let mut by_container: BTreeMap<ContainerId, Vec<FoodId>> = BTreeMap::new();
        for item in &items {
            match ItemKey::from_attributes(item) {
                Ok(ItemKey::ExpiryReminder {
                    container, food, ..
                }) => {
                    report.reminders += 1;
                    by_container.entry(container).or_default().push(food);
                }
                _ => report.malformed += 1,
            }
        }
        let results: Vec<Result<(TickReport, Vec<WriteOp>), StoreError>> = futures::stream::iter(
            by_container
                .into_iter()
                .map(|(c, foods)| self.process_container(date, c, foods, run, newly)),
        )
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
        let mut first_error = None;
        let mut batch = Vec::new();
        for res in results {
            match res {
                Ok((r, ops)) => {
                    report.add(&r);
                    batch.extend(ops);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        // Written even when a container failed: its reminders stay for the
        // next run, the others are done.
        if !batch.is_empty() {
            self.store.batch_write(batch).await?;
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Publish pending and new events; what fails stays pending.
    async fn publish(
        &self,
        today: NaiveDate,
        checkpoint: &mut TickCheckpoint,
        newly: BTreeMap<GroupId, Vec<FlagData>>,
        report: &mut TickReport,
    ) {
        let Some(bus) = &self.bus else {
            return;
        };
        let mut entries = std::mem::take(&mut checkpoint.pending_events);
        entries.extend(notification_entries(bus, today, self.rules.zone, &newly));
        if entries.is_empty() {
            return;
        }
        let pending = match self.publisher.publish(&entries).await {
            Ok(r) => {
                report.events_sent += r.sent as u64;
                r.rejected
                    .into_iter()
                    .map(|(i, code)| {
                        tracing::warn!(%code, "expiry notification rejected; kept for the next tick");
                        entries[i].clone()
                    })
                    .collect()
            }
            Err(e) => {
                tracing::warn!(error = %e, events = entries.len(), "expiry notifications not sent; kept for the next tick");
                entries
            }
        };
        let overflow = pending.len().saturating_sub(MAX_PENDING_EVENTS);
        if overflow > 0 {
            tracing::warn!(
                dropped = overflow,
                "too many pending expiry notifications; dropping the oldest"
            );
        }
        checkpoint.pending_events = pending.into_iter().skip(overflow).collect();
        report.events_pending = checkpoint.pending_events.len() as u64;
    }
}

#[async_trait]
impl ScheduledJob<Job> for FlagExpiringJob {
    fn job(&self) -> Job {
        Job::FlagExpiring
    }

    async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
        let store = self.store.as_ref();
        let today = self.rules.today(run.now);
        let mut checkpoint: TickCheckpoint = load_checkpoint(store, Job::FlagExpiring).await?;
        let first_run_start = today
            .checked_sub_days(Days::new(FIRST_RUN_LOOKBACK_DAYS))
            .unwrap_or(today);
        let start = checkpoint.next_date.unwrap_or(first_run_start).min(today);
        let mut report = TickReport {
            today: Some(today),
            from_date: Some(start),
            ..Default::default()
        };
        let newly = std::sync::Mutex::new(BTreeMap::new());
        let mut stopped_at = None;
        let mut failure = None;
        let mut date = start;
        'dates: loop {
            let mut page_start = None;
            loop {
                if !run.has_time() {
                    stopped_at = Some(date);
                    break 'dates;
                }
                let page = match store
                    .query_page(&Self::reminder_query(date), page_start)
                    .await
                {
                    Ok(p) => p,
                    Err(e) => {
                        failure = Some(e);
                        stopped_at = Some(date);
                        break 'dates;
                    }
                };
                report.pages += 1;
                let next = page.last_evaluated_key.clone();
                if let Err(e) = self
                    .process_page(date, page.items, run, &mut report, &newly)
                    .await
                {
                    failure = Some(e);
                    stopped_at = Some(date);
                    break 'dates;
                }
                match next {
                    Some(k) => page_start = Some(k),
                    None => break,
                }
            }
            report.dates_read += 1;
            if report.deferred > 0 {
                stopped_at = Some(date);
                break;
            }
            if date >= today {
                break;
            }
            date = date.succ_opt().unwrap_or(today);
        }
        let complete = stopped_at.is_none();
        checkpoint.next_date = Some(stopped_at.unwrap_or(today));
        checkpoint.updated_at = Some(datetime::format(run.now));
        let newly = newly.into_inner().expect("newly lock");
        self.publish(today, &mut checkpoint, newly, &mut report)
            .await;
        save_checkpoint(store, Job::FlagExpiring, &checkpoint).await?;
        if let Some(e) = failure {
            return Err(e.into());
        }
        let summary = format!(
            "flag-expiring {today} ({zone}): {dates} day(s) from {start}, {rem} reminder(s), {new} newly flagged, {refreshed} refreshed, {deleted} flag(s) removed, {unlinked} without group link{more}",
            zone = self.rules.zone.name(),
            dates = report.dates_read,
            rem = report.reminders,
            new = report.flags_new,
            refreshed = report.flags_refreshed,
            deleted = report.flags_deleted,
            unlinked = report.unlinked,
            more = if complete {
                String::new()
            } else {
                format!(
                    "; stopped early at {}, the next tick continues",
                    checkpoint.next_date.unwrap_or(today)
                )
            },
        );
        Ok(JobReport {
            job: Job::FlagExpiring,
            complete,
            summary,
            details: serde_json::to_value(&report).unwrap_or_default(),
            metrics: vec![Metric::count(
                super::FOODS_FLAGGED,
                report.flags_new + report.flags_refreshed,
            )],
        })
    }
}

// ---------------------------------------------------------------------------
// Backfill
// ---------------------------------------------------------------------------

/// Backfill progress, cumulative over runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BackfillProgress {
    /// Items evaluated by the Scan (every kind).
    pub scanned: u64,
    /// Containers planned.
    pub containers: u64,
    /// Flags written.
    pub flags: u64,
    /// Reminders written.
    pub reminders: u64,
    /// Containers skipped because they do not decode.
    pub unreadable: u64,
}

/// Called after every page with the cumulative progress (e.g. to move a
/// progress bar: `scanned` against the table's item count).
pub type ProgressHook = Arc<dyn Fn(BackfillProgress) + Send + Sync>;

/// The backfill's checkpoint (`WorkerCheckpoint`/`backfill`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BackfillCheckpoint {
    /// Where the Scan continues: the `PK`/`SK` of the last evaluated key.
    #[serde(default)]
    pub scan_position: Option<BTreeMap<String, String>>,
    /// What the backfill did so far, over all its runs.
    #[serde(default)]
    pub progress: BackfillProgress,
    /// Whether the Scan reached the end of the table: further runs do
    /// nothing until [`BackfillJob::reset`].
    #[serde(default)]
    pub complete: bool,
    /// When the first run of this backfill started (canonical datetime).
    #[serde(default)]
    pub started_at: Option<String>,
    /// When a run last saved it (canonical datetime).
    #[serde(default)]
    pub updated_at: Option<String>,
}

/// The backfill's checkpoint as its report's details: snake_case like
/// every job's details (the stored checkpoint keeps its attribute names).
fn backfill_details(cp: &BackfillCheckpoint) -> serde_json::Value {
    let p = cp.progress;
    serde_json::json!({
        "scan_position": cp.scan_position,
        "progress": {
            "scanned": p.scanned,
            "containers": p.containers,
            "flags": p.flags,
            "reminders": p.reminders,
            "unreadable": p.unreadable,
        },
        "complete": cp.complete,
        "started_at": cp.started_at,
        "updated_at": cp.updated_at,
    })
}

fn key_to_position(key: &Key) -> BTreeMap<String, String> {
    key.iter()
        .filter_map(|(k, v)| match v {
            AttributeValue::S(s) => Some((k.clone(), s.clone())),
            _ => None,
        })
        .collect()
}

fn position_to_key(pos: &BTreeMap<String, String>) -> Key {
    pos.iter()
        .map(|(k, v)| (k.clone(), AttributeValue::S(v.clone())))
        .collect()
}

/// The backfill (`backfill`): creates the flags and reminders the stream
/// would have created for the containers that existed before it.
pub struct BackfillJob {
    store: Arc<dyn Store>,
    rules: ExpiryRules,
    page_size: i32,
    max_pages_per_run: Option<u64>,
    progress: Option<ProgressHook>,
}

impl BackfillJob {
    /// The backfill over the table's store, scanning pages of
    /// [`DEFAULT_BACKFILL_PAGE`] items, with no page limit per run.
    pub fn new(deps: &JobDeps) -> Self {
        BackfillJob {
            store: deps.store.clone(),
            rules: ExpiryRules::from_config(&deps.settings),
            page_size: DEFAULT_BACKFILL_PAGE,
            max_pages_per_run: None,
            progress: None,
        }
    }

    /// Items evaluated per Scan page (default [`DEFAULT_BACKFILL_PAGE`]).
    pub fn with_page_size(mut self, items: i32) -> Self {
        self.page_size = items.max(1);
        self
    }

    /// Stop after this many pages in one run, as if the deadline had come
    /// (bounds a CLI step; exercises resumption deterministically in tests).
    pub fn with_max_pages_per_run(mut self, pages: u64) -> Self {
        self.max_pages_per_run = Some(pages.max(1));
        self
    }

    /// Call `hook` after every page with the cumulative progress.
    pub fn with_progress(mut self, hook: ProgressHook) -> Self {
        self.progress = Some(hook);
        self
    }

    /// Forget the checkpoint: the next run scans from the start again.
    pub async fn reset(&self) -> Result<(), StoreError> {
        self.store
            .delete(&ItemKey::Checkpoint(Job::Backfill).to_attributes(), None)
            .await?;
        Ok(())
    }

    /// The saved progress (for a CLI's status line).
    pub async fn checkpoint(&self) -> Result<BackfillCheckpoint, HandlerError> {
        load_checkpoint(self.store.as_ref(), Job::Backfill).await
    }

    async fn plan_item(
        &self,
        item: Item,
        now: DateTime<Utc>,
    ) -> Result<(Vec<WriteOp>, BackfillProgress), StoreError> {
        let mut p = BackfillProgress::default();
        // The scan's copy (consistent) is what the flags are decided from.
        let id = ItemKey::from_attributes(&item).ok().and_then(|k| match k {
            ItemKey::Container(id) => Some(id),
            _ => None,
        });
        let as_read = id.map(|id| container_as_read(id, Some(&item)));
        let container = match Entity::from_item(item) {
            Ok(Entity::Container(c)) => c,
            Ok(_) => return Ok((Vec::new(), p)),
            Err(e) => {
                tracing::warn!(error = %e, "backfill: container does not decode; skipped");
                p.unreadable += 1;
                return Ok((Vec::new(), p));
            }
        };
        let (Some(as_read), Some(id)) = (as_read, id) else {
            return Ok((Vec::new(), p));
        };
        p.containers += 1;
        // The scan's copy (consistent) first; when a change after it
        // withholds the flags, the container as it is then.
        let mut attempt = Some((container, as_read));
        for _ in 0..FLAG_ATTEMPTS {
            let (container, as_read) = match attempt.take() {
                Some(first) => first,
                None => {
                    let read = read_container(self.store.as_ref(), id).await?;
                    match read.container {
                        Ok(Some(c)) => (c, read.as_read),
                        // Gone or unreadable now: its own record handles it.
                        _ => return Ok((Vec::new(), p)),
                    }
                }
            };
            let plans =
                plan_container_change(container.id, None, Some(&container), now, &self.rules);
            let needs_group = plans.iter().any(|pl| pl.flag != FlagAction::Keep);
            let groups = if needs_group {
                {
                    let store = self.store.as_ref();
                    linked_now(
                        store,
                        container.id,
                        owning_groups(store, container.id).await?,
                    )
                    .await?
                }
            } else {
                Vec::new()
            };
            // Flags only while the container is as read and still linked;
            // reminders go with the page.
            let flags = container_flag_ops(&plans, &groups);
            let guards = flag_guards(&as_read, container.id, &groups);
            let report = write_flags(self.store.as_ref(), &guards, flags).await?;
            if report.held() {
                p.flags += report.applied as u64;
                let ops = container_reminder_ops(&plans, &groups, now, &self.rules);
                p.reminders += ops
                    .iter()
                    .filter(|op| matches!(op, WriteOp::Put(_)))
                    .count() as u64;
                return Ok((ops, p));
            }
        }
        Err(StoreError::Transient {
            operation: "TransactWriteItems",
            code: "ContainerStillChanging".into(),
            message: format!(
                "a container changed after each of {FLAG_ATTEMPTS} reads; the page is backfilled again"
            ),
        })
    }
}

#[async_trait]
impl ScheduledJob<Job> for BackfillJob {
    fn job(&self) -> Job {
        Job::Backfill
    }

    async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
        let store = self.store.as_ref();
        let mut cp: BackfillCheckpoint = load_checkpoint(store, Job::Backfill).await?;
        if cp.complete {
            return Ok(JobReport {
                job: Job::Backfill,
                complete: true,
                summary: format!(
                    "backfill already complete ({} containers, {} flags, {} reminders); reset its checkpoint to run it again",
                    cp.progress.containers, cp.progress.flags, cp.progress.reminders
                ),
                details: backfill_details(&cp),
                metrics: Vec::new(),
            });
        }
        if cp.started_at.is_none() {
            cp.started_at = Some(datetime::format(run.now));
        }
        let (_, container_sk) = ItemKey::Container(ContainerId::default()).encode();
        let spec = ScanSpec {
            filter: Some(Expr::equals(SK, AttributeValue::S(container_sk))),
            consistent: true,
            limit: Some(self.page_size),
            ..Default::default()
        };
        let mut pages = 0u64;
        let complete = loop {
            if !run.has_time() || self.max_pages_per_run.is_some_and(|m| pages >= m) {
                break false;
            }
            let start = cp.scan_position.as_ref().map(position_to_key);
            let page = store.scan_page(&spec, start).await?;
            pages += 1;
            cp.progress.scanned += page.scanned_count.max(0) as u64;
            let results: Vec<Result<(Vec<WriteOp>, BackfillProgress), StoreError>> =
                futures::stream::iter(page.items.into_iter().map(|i| self.plan_item(i, run.now)))
                    .buffer_unordered(CONCURRENCY)
                    .collect()
                    .await;
            let mut ops = Vec::new();
            for res in results {
                let (o, p) = res?;
                ops.extend(o);
                cp.progress.containers += p.containers;
                cp.progress.flags += p.flags;
                cp.progress.reminders += p.reminders;
                cp.progress.unreadable += p.unreadable;
            }
            if !ops.is_empty() {
                store.batch_write(ops).await?;
            }
            cp.scan_position = page.last_evaluated_key.as_ref().map(key_to_position);
            cp.complete = cp.scan_position.is_none();
            cp.updated_at = Some(datetime::format(run.now));
            save_checkpoint(store, Job::Backfill, &cp).await?;
            if let Some(hook) = &self.progress {
                hook(cp.progress);
            }
            if cp.complete {
                break true;
            }
        };
        let p = cp.progress;
        Ok(JobReport {
            job: Job::Backfill,
            complete,
            summary: format!(
                "backfill {}: {} item(s) scanned, {} container(s), {} flag(s), {} reminder(s) written ({} page(s) this run){}",
                if complete {
                    "complete"
                } else {
                    "stopped early"
                },
                p.scanned,
                p.containers,
                p.flags,
                p.reminders,
                pages,
                if complete {
                    ""
                } else {
                    "; the next run continues"
                }
            ),
            details: backfill_details(&cp),
            // Totals over every run, not this run's figures: only the run
            // counters.
            metrics: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backfill_details_are_snake_case() {
        let cp = BackfillCheckpoint {
            progress: BackfillProgress {
                scanned: 3,
                ..Default::default()
            },
            ..Default::default()
        };
        let details = backfill_details(&cp);
        assert_eq!(details["progress"]["scanned"], 3);
        let keys: Vec<&String> = details.as_object().unwrap().keys().collect();
        assert!(
            keys.iter()
                .all(|k| k.chars().all(|c| c.is_ascii_lowercase() || c == '_')),
            "{keys:?}"
        );
        // The stored checkpoint keeps its attribute names.
        assert!(serde_json::to_value(&cp).unwrap().get("Progress").is_some());
    }
}
