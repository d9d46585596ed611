//! The invitation-link sweep: expired invitation links are removed on a
//! schedule, at a cost that does not grow with the table; optionally, DynamoDB
//! TTL removes them as a second line.
//!
//! Every rule of the job is in this file:
//!
//! **Finding expired links** ([`SweepInvitations`], tick `sweep-invitations`,
//! default every 15 minutes).
//! - The sparse index `InvitationLinkExpiry` (partition `SK`, sort
//!   `LinkExpiryDatetime`, projecting `InvitationLinkHash`) holds only
//!   invitation links. The sweep queries
//!   `SK = "InvitationLinkHash" AND LinkExpiryDatetime < :upper`, page by page
//!   ([`index_query`]).
//! - Stored datetimes vary (`…:33.123Z`, no `Z`, 0–9 fraction digits), and
//!   string order is not instant order across forms (`…:33Z` sorts after
//!   `…:33.100Z`). So the string range is only a pre-filter: `:upper` is the
//!   canonical form of `now + 5 s` ([`query_upper_bound`]), which sorts after
//!   every stored form of every instant before `now` (the first 19 characters
//!   already differ), and the decision is taken on parsed instants
//!   ([`classify`]): a link is expired when its instant is strictly before
//!   `now`.
//! - A link whose datetime (or hash, or key) does not parse is reported with
//!   its group id and never deleted.
//! - Without the index (a table not migrated yet: the query fails with a
//!   missing-index error), the sweep falls back to a paginated Scan with the
//!   same condition as a filter ([`fallback_scan`]) and logs a warning with
//!   the Scan's consumed capacity. The index is tried again on every tick.
//!
//! **Deleting safely.**
//! - Each delete is conditional on the link being exactly the one seen:
//!   `LinkExpiryDatetime = :seen AND InvitationLinkHash = :hash`, with the raw
//!   stored strings ([`delete_condition`]). A link renewed (or replaced)
//!   between the read and the delete fails the condition and is kept; a
//!   consistent read then tells "kept, renewed" from "already gone".
//! - Nothing else is written: no half-state exists. Two ticks for the same
//!   scheduled time, or a retried tick, only find fewer links (the loser of
//!   a race counts `already_gone`).
//!
//! **Deadline.** `JobRun::has_time()` is checked before each page and before
//! each delete; the report says `complete: false` when the tick stopped
//! early. The index path needs no checkpoint: deleted links leave the index,
//! so the next tick's query starts on the rest. The fallback Scan saves where
//! it stopped in the worker checkpoint `WorkerCheckpoint`/`sweep-invitations`
//! (attribute [`RESUME_ATTRIBUTE`]) and the next fallback tick resumes there
//! (a full pass deletes the checkpoint), so a table too large to scan in one
//! tick is still covered.
//!
//! **TTL as an optional second line** ([`InvitationTtl`], stream handler,
//! `INVITATION_TTL=on`, off by default). With TTL enabled on the table for
//! [`TTL_ATTRIBUTE`] (`WorkerExpiresAt`, Number, epoch seconds of
//! `LinkExpiryDatetime` rounded up):
//! - on an invitation INSERT or MODIFY whose new image does not already carry
//!   the right value, the handler reads the link (consistent), checks it
//!   still has the same expiry instant, and stamps the attribute with an
//!   UpdateItem conditional on the raw `LinkExpiryDatetime` it read. Its own
//!   MODIFY carries the right value, so it does not loop. A renewal is a
//!   plain Put without the attribute, so TTL never removes a renewed link;
//!   the renewal's own record stamps the new value.
//! - TTL removals (`REMOVE` by the DynamoDB service) are counted
//!   ([`InvitationTtl::ttl_removals`]) and reported as such, never treated as
//!   user deletes.
//!
//! **Report** ([`SweepReport`], returned as `JobReport.details` and logged):
//! `expired_found`, `deleted`, `kept_renewed`, `already_gone`, `unparseable`
//! (with up to 20 group ids), `pages`, `items_read`, `consumed_read_capacity`
//! (of the Query/Scan pages), `used_index`, `resumed_scan`, `complete`.
//!
//! Logs never contain an invitation hash (it is the secret of the link).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, TimeDelta, Utc};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde::{Deserialize, Serialize};

use crate::datetime;
use crate::items::{Entity, InvitationLink, Item, attr};
use crate::keys::{GroupId, ItemKey, ItemKind, Job, SK};
use crate::schema::INVITATION_EXPIRY_INDEX;
use crate::worker::{BatchFacts, Change, ChangeHandler, HandlerOutcome};
use worker_engine::HandlerError;
use worker_engine::schedule::{JobReport, JobRun, ScheduledJob};
use worker_engine::store::{Expr, Key, Page, QuerySpec, ScanSpec, Store, StoreError, WriteOutcome};
use worker_engine::stream::ChangeKind;

use super::{JobDeps, JobSpec};
use crate::config::{ConfigError, Env, EnvVar, ReadBy};
use worker_engine::metrics::{ENVIRONMENT_FAULTS, Metric};
use worker_engine::{Access, Fallback, Schedule, ScheduleSpec, StreamSpec};

/// The metric of the TTL stamps the stream side writes.
pub const INVITATION_WRITES: &str = "InvitationWrites";
/// The metric of the links a sweep deleted.
pub const LINKS_SWEPT: &str = "LinksSwept";

/// The job, described once: the sweep of expired invitation links, and the
/// optional TTL stamp the stream side writes.
pub const SPEC: JobSpec = JobSpec {
    name: "invitations",
    summary: "removes expired invitation links on a schedule, never one renewed meanwhile",
    env: &[EnvVar {
        name: "INVITATION_TTL",
        read_by: &[ReadBy::Stream],
        default: Some("off"),
        meaning: "on: stamp WorkerExpiresAt on invitation links for TTL",
    }],
    // A consistent read of the link (shared BatchGetItem) and a conditional
    // update of its stamp.
    stream: Some(StreamSpec {
        handler: "invitations",
        writes_metric: INVITATION_WRITES,
        access: Access {
            dynamodb_actions: &["dynamodb:BatchGetItem", "dynamodb:UpdateItem"],
            indexes: &[],
            fallbacks: &[],
            publishes_events: false,
        },
    }),
    scheduled: &[ScheduleSpec {
        job: Job::SweepInvitations,
        function: "SweepInvitationsFunction",
        schedule: Schedule::Rate("rate(15 minutes)"),
        local_cron: "*/15 * * * *",
        access: Access {
            dynamodb_actions: &[
                "dynamodb:DeleteItem",
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:Query",
                "dynamodb:Scan",
            ],
            indexes: &[INVITATION_EXPIRY_INDEX],
            fallbacks: &[
                Fallback {
                    action: "dynamodb:Scan",
                    why: "the sweep scans the table while the InvitationLinkExpiry index is missing or not ACTIVE yet (migration)",
                },
                Fallback {
                    action: "dynamodb:PutItem",
                    why: "a fallback scan cut short by the deadline saves where it resumes (WorkerCheckpoint/sweep-invitations)",
                },
            ],
            publishes_events: false,
        },
        metrics: &[LINKS_SWEPT],
    }],
    handlers: |deps| vec![Arc::new(InvitationTtl::new(deps))],
    jobs: |deps| vec![Arc::new(SweepInvitations::new(deps))],
};

/// The job's settings (the variables of [`SPEC`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InvitationSettings {
    /// `INVITATION_TTL`: stamp links for DynamoDB's TTL.
    pub ttl: bool,
}

impl InvitationSettings {
    /// Read from the environment; defaults where unset.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(InvitationSettings {
            ttl: env.switch("INVITATION_TTL")?.unwrap_or(false),
        })
    }
}

/// The worker's TTL attribute on invitation links: Number, epoch seconds.
pub const TTL_ATTRIBUTE: &str = "WorkerExpiresAt";
/// Attribute of the sweep's checkpoint item holding the fallback Scan's
/// resume key (a map `{PK, SK}`).
pub const RESUME_ATTRIBUTE: &str = "ScanResumeKey";
/// Attribute of the checkpoint item: when it was saved (canonical datetime).
pub const SAVED_AT_ATTRIBUTE: &str = "SavedAt";
/// How far past `now` the query's string bound reaches (at least one second,
/// so that every stored form of every instant before `now` sorts below it).
pub const QUERY_SLACK_SECS: i64 = 5;
/// Conditional deletes in flight at once.
pub const DEFAULT_DELETE_CONCURRENCY: usize = 8;
/// How many unparseable links the report lists by group id.
pub const MAX_LISTED: usize = 20;

/// The `SK` literal of invitation links (the index's partition value),
/// taken from the key encoding.
fn invitation_sk() -> &'static str {
    ItemKey::invitation_sort_key()
}

// ---------------------------------------------------------------------------
// Pure rules
// ---------------------------------------------------------------------------

/// The string upper bound of the query: canonical `now + 5 s`. Every stored
/// form of an instant before `now` sorts strictly below it.
pub fn query_upper_bound(now: DateTime<Utc>) -> String {
    datetime::format(now + TimeDelta::seconds(QUERY_SLACK_SECS))
}

/// The page query on the `InvitationLinkExpiry` index.
pub fn index_query(upper: &str, page_size: Option<i32>) -> QuerySpec {
    QuerySpec {
        index: Some(INVITATION_EXPIRY_INDEX.to_owned()),
        key_condition: Expr::new("#sk = :sk AND #exp < :upper")
            .name("#sk", SK)
            .name("#exp", attr::LINK_EXPIRY_DATETIME)
            .string(":sk", invitation_sk())
            .string(":upper", upper),
        limit: page_size,
        forward: true,
        ..Default::default()
    }
}

/// The fallback Scan page (a table without the index): the same condition
/// as a filter, reading only the attributes the sweep needs.
pub fn fallback_scan(upper: &str, page_size: Option<i32>) -> ScanSpec {
    ScanSpec {
        filter: Some(
            Expr::new("#sk = :sk AND #exp < :upper")
                .name("#sk", SK)
                .name("#exp", attr::LINK_EXPIRY_DATETIME)
                .string(":sk", invitation_sk())
                .string(":upper", upper),
        ),
        projection: Some(
            Expr::new("#pk, #sk, #exp, #hash")
                .name("#pk", crate::keys::PK)
                .name("#hash", attr::INVITATION_LINK_HASH),
        ),
        limit: page_size,
        ..Default::default()
    }
}

/// An expired link, exactly as it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredLink {
    /// The link's group (its `PK`).
    pub group: GroupId,
    /// `LinkExpiryDatetime` as stored (the delete condition compares it).
    pub seen_expiry: String,
    /// `InvitationLinkHash` as stored. Never logged.
    pub hash: String,
    /// `seen_expiry` parsed: the instant the link expired (before `now`).
    pub expired_at: DateTime<Utc>,
}

impl ExpiredLink {
    /// The link item's key (`PK=<groupId>`, `SK=InvitationLinkHash`).
    pub fn key(&self) -> Key {
        ItemKey::InvitationLink(self.group).to_attributes()
    }
}

/// A link the sweep cannot judge; reported, never deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnparseableLink {
    /// The group id (the item's `PK`).
    pub group: String,
    /// Why (never the hash).
    pub reason: String,
}

/// What the sweep makes of one item read from the index or the scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Expired (its instant is before `now`): delete it conditionally.
    Expired(ExpiredLink),
    /// In the string range but not expired as an instant: keep.
    NotExpired,
    /// Cannot be judged: report, keep.
    Unparseable(UnparseableLink),
}

fn string_attr<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s),
        _ => None,
    }
}

/// Decide what to do with one item, on parsed instants.
pub fn classify(item: &Item, now: DateTime<Utc>) -> Verdict {
    let raw_pk = string_attr(item, crate::keys::PK)
        .unwrap_or("?")
        .chars()
        .take(80)
        .collect::<String>();
    let unparseable = |reason: String| {
        Verdict::Unparseable(UnparseableLink {
            group: raw_pk.clone(),
            reason,
        })
    };
    let group = match ItemKey::from_attributes(item) {
        Ok(ItemKey::InvitationLink(g)) => g,
        Ok(other) => return unparseable(format!("not an invitation link: {:?}", other.kind())),
        Err(e) => return unparseable(format!("bad key: {e}")),
    };
    let Some(seen) = string_attr(item, attr::LINK_EXPIRY_DATETIME) else {
        return unparseable("LinkExpiryDatetime missing or not a string".into());
    };
    let Some(hash) = string_attr(item, attr::INVITATION_LINK_HASH) else {
        return unparseable("InvitationLinkHash missing or not a string".into());
    };
    let at = match datetime::parse(seen) {
        Ok(at) => at,
        Err(e) => {
            return unparseable(format!(
                "LinkExpiryDatetime is not an ISO 8601 datetime ({})",
                e.reason
            ));
        }
    };
    if at < now {
        Verdict::Expired(ExpiredLink {
            group,
            seen_expiry: seen.to_owned(),
            hash: hash.to_owned(),
            expired_at: at,
        })
    } else {
        Verdict::NotExpired
    }
}

/// The delete condition: the link is exactly the one that was seen.
pub fn delete_condition(link: &ExpiredLink) -> Expr {
    Expr::new("#exp = :seen AND #hash = :hash")
        .name("#exp", attr::LINK_EXPIRY_DATETIME)
        .name("#hash", attr::INVITATION_LINK_HASH)
        .string(":seen", link.seen_expiry.clone())
        .string(":hash", link.hash.clone())
}

/// The TTL value of a link: epoch seconds of its expiry, rounded up (TTL
/// never removes a link before it expired).
pub fn ttl_seconds(expiry: DateTime<Utc>) -> i64 {
    expiry.timestamp() + i64::from(expiry.timestamp_subsec_nanos() > 0)
}

/// The TTL value an item carries, if any.
pub fn stamped_ttl(attributes: &Item) -> Option<i64> {
    match attributes.get(TTL_ATTRIBUTE) {
        Some(AttributeValue::N(n)) => n.parse().ok(),
        _ => None,
    }
}

/// The TTL value to stamp on a link seen in a new image, or `None` when it
/// already carries it (the worker's own MODIFY: no loop).
pub fn ttl_to_stamp(link: &InvitationLink) -> Option<i64> {
    let want = ttl_seconds(link.link_expiry_datetime);
    (stamped_ttl(&link.extra) != Some(want)).then_some(want)
}

/// The raw `LinkExpiryDatetime` of the stored link, when it is still the
/// instant the stream change showed (else the link changed since; the newer
/// change stamps it).
pub fn same_expiry(stored: &Item, expected: DateTime<Utc>) -> Option<String> {
    let raw = string_attr(stored, attr::LINK_EXPIRY_DATETIME)?;
    (datetime::parse(raw).ok()? == expected).then(|| raw.to_owned())
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

/// What one sweep tick did (`JobReport.details`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    /// Expired links read (before deleting).
    pub expired_found: u64,
    /// Expired links deleted (the condition held: the link was still the
    /// one read).
    pub deleted: u64,
    /// The delete's condition failed and the link is still there: renewed
    /// (or replaced) since it was read. Kept.
    pub kept_renewed: u64,
    /// The delete's condition failed and the link is gone (deleted by the
    /// service, TTL or a concurrent tick).
    pub already_gone: u64,
    /// Links whose key, hash or datetime does not parse: kept.
    pub unparseable: u64,
    /// Group ids of the first unparseable links.
    pub unparseable_groups: Vec<UnparseableLink>,
    /// Query or Scan pages read.
    pub pages: u64,
    /// Items those pages returned (after the Scan's filter).
    pub items_read: u64,
    /// Read capacity consumed by the pages.
    pub consumed_read_capacity: f64,
    /// Whether the index was used (false: fallback Scan).
    pub used_index: bool,
    /// Whether the fallback Scan resumed from a checkpoint.
    pub resumed_scan: bool,
    /// False when the tick stopped before the deadline; the next one continues.
    pub complete: bool,
}

impl SweepReport {
    /// One line for logs and the CLI.
    pub fn summary(&self) -> String {
        let how = if self.used_index {
            format!("index {INVITATION_EXPIRY_INDEX}")
        } else {
            format!("full Scan, index {INVITATION_EXPIRY_INDEX} missing")
        };
        format!(
            "invitation sweep{}: {} expired found, {} deleted, {} kept (renewed), {} already gone, {} unparseable; {} page(s), {:.1} RCU via {how}",
            if self.complete {
                ""
            } else {
                " stopped at the deadline"
            },
            self.expired_found,
            self.deleted,
            self.kept_renewed,
            self.already_gone,
            self.unparseable,
            self.pages,
            self.consumed_read_capacity,
        )
    }

    fn add_unparseable(&mut self, link: UnparseableLink) {
        self.unparseable += 1;
        if self.unparseable_groups.len() < MAX_LISTED {
            self.unparseable_groups.push(link);
        }
    }
}

// ---------------------------------------------------------------------------
// Scheduled job
// ---------------------------------------------------------------------------

/// Where a page comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Index,
    Scan,
}

/// What one conditional delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deleted {
    Yes,
    KeptRenewed,
    AlreadyGone,
}

/// The scheduled sweep of expired invitation links (`sweep-invitations`).
pub struct SweepInvitations {
    store: Arc<dyn Store>,
    page_size: Option<i32>,
    concurrency: usize,
}

impl SweepInvitations {
    /// The sweep over the table's store.
    pub fn new(deps: &JobDeps) -> Self {
        SweepInvitations::with_store(deps.store.clone())
    }

    /// The sweep over `store`: DynamoDB's own page size,
    /// [`DEFAULT_DELETE_CONCURRENCY`] deletes in flight.
    pub fn with_store(store: Arc<dyn Store>) -> Self {
        SweepInvitations {
            store,
            page_size: None,
            concurrency: DEFAULT_DELETE_CONCURRENCY,
        }
    }

    /// Items per Query/Scan page (default: DynamoDB's 1 MB pages).
    pub fn with_page_size(mut self, items: i32) -> Self {
        self.page_size = Some(items.max(1));
        self
    }

    /// Conditional deletes in flight at once (default 8).
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Run one sweep: read expired links page by page and delete each one
    /// conditionally, until done or out of time.
    pub async fn sweep(&self, run: &JobRun<Job>) -> Result<SweepReport, StoreError> {
        let now = run.now;
        let upper = query_upper_bound(now);
        let mut report = SweepReport {
            used_index: true,
            complete: true,
            ..Default::default()
        };
        let mut source = Source::Index;
        let mut start: Option<Key> = None;
        loop {
            if !run.has_time() {
                report.complete = false;
                break;
            }
            let page = match self.read_page(source, &upper, start.clone()).await {
                Ok(page) => page,
                Err(e) if source == Source::Index && e.is_missing_index() => {
                    tracing::warn!(error = %e, "invitation-expiry index missing (an environment fault, counted in EnvironmentFaults); falling back to a Scan");
                    source = Source::Scan;
                    report.used_index = false;
                    start = self.load_resume_key().await?;
                    report.resumed_scan = start.is_some();
                    continue;
                }
                Err(e) => return Err(e),
            };
            report.pages += 1;
            report.items_read += page.items.len() as u64;
            report.consumed_read_capacity += page.consumed_capacity;

            let mut expired = Vec::new();
            for item in &page.items {
                match classify(item, now) {
                    Verdict::Expired(link) => expired.push(link),
                    Verdict::NotExpired => {}
                    Verdict::Unparseable(link) => {
                        tracing::warn!(
                            group = %link.group,
                            reason = %link.reason,
                            "invitation link cannot be judged; kept"
                        );
                        report.add_unparseable(link);
                    }
                }
            }
            report.expired_found += expired.len() as u64;
            let stopped = self.delete_links(&expired, run, &mut report).await?;
            if stopped {
                report.complete = false;
                break;
            }
            match page.last_evaluated_key {
                Some(next) => start = Some(next),
                None => {
                    start = None;
                    break;
                }
            }
        }

        if source == Source::Scan {
            // Save the start of the page that was not finished; after a
            // full pass that resumed, clear the checkpoint (a pass that did
            // not resume had none: no write).
            if !report.complete {
                self.save_resume_key(start.as_ref(), now).await?;
            } else if report.resumed_scan {
                self.save_resume_key(None, now).await?;
            }
            tracing::warn!(
                index = INVITATION_EXPIRY_INDEX,
                consumed_read_capacity = report.consumed_read_capacity,
                pages = report.pages,
                "index {INVITATION_EXPIRY_INDEX} is missing: the invitation sweep scanned the table instead, consuming {:.1} read capacity units over {} page(s); add the index (see docs/DEPLOY.md) to make the sweep cost independent of the table size",
                report.consumed_read_capacity,
                report.pages,
            );
        }
        Ok(report)
    }

    async fn read_page(
        &self,
        source: Source,
        upper: &str,
        start: Option<Key>,
    ) -> Result<Page, StoreError> {
        match source {
            Source::Index => {
                self.store
                    .query_page(&index_query(upper, self.page_size), start)
                    .await
            }
            Source::Scan => {
                self.store
                    .scan_page(&fallback_scan(upper, self.page_size), start)
                    .await
            }
        }
    }

    /// Delete the links conditionally (bounded concurrency), checking the
    /// deadline before each delete. Returns whether it stopped early.
    async fn delete_links(
        &self,
        links: &[ExpiredLink],
        run: &JobRun<Job>,
        report: &mut SweepReport,
    ) -> Result<bool, StoreError> {
        let mut pending = links.iter();
        let mut in_flight = FuturesUnordered::new();
        let mut stopped = false;
        loop {
            while !stopped && in_flight.len() < self.concurrency {
                let Some(link) = pending.next() else { break };
                if !run.has_time() {
                    stopped = true;
                    break;
                }
                in_flight.push(self.delete_one(link));
            }
            let Some(outcome) = in_flight.next().await else {
                break;
            };
            match outcome? {
                Deleted::Yes => report.deleted += 1,
                Deleted::KeptRenewed => report.kept_renewed += 1,
                Deleted::AlreadyGone => report.already_gone += 1,
            }
        }
        Ok(stopped)
    }

    async fn delete_one(&self, link: &ExpiredLink) -> Result<Deleted, StoreError> {
        let key = link.key();
        match self
            .store
            .delete(&key, Some(delete_condition(link)))
            .await?
        {
            WriteOutcome::Applied => {
                tracing::debug!(group = %link.group, "expired invitation link deleted");
                Ok(Deleted::Yes)
            }
            WriteOutcome::ConditionFailed => match self.store.get(&key, true).await? {
                None => Ok(Deleted::AlreadyGone),
                Some(_) => {
                    tracing::info!(
                        group = %link.group,
                        "invitation link changed since it was read (renewed); kept"
                    );
                    Ok(Deleted::KeptRenewed)
                }
            },
        }
    }

    async fn load_resume_key(&self) -> Result<Option<Key>, StoreError> {
        let key = ItemKey::Checkpoint(Job::SweepInvitations).to_attributes();
        let item = self.store.get(&key, true).await?;
        Ok(match item.and_then(|mut i| i.remove(RESUME_ATTRIBUTE)) {
            Some(AttributeValue::M(m)) if !m.is_empty() => Some(m),
            _ => None,
        })
    }

    /// Save (or clear, with `None`) where the fallback Scan resumes.
    async fn save_resume_key(
        &self,
        resume: Option<&Key>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let key = ItemKey::Checkpoint(Job::SweepInvitations).to_attributes();
        match resume {
            Some(resume) => {
                let mut item = key;
                item.insert(RESUME_ATTRIBUTE.into(), AttributeValue::M(resume.clone()));
                item.insert(
                    SAVED_AT_ATTRIBUTE.into(),
                    AttributeValue::S(datetime::format(now)),
                );
                self.store.put(item, None).await?;
            }
            None => {
                self.store.delete(&key, None).await?;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ScheduledJob<Job> for SweepInvitations {
    fn job(&self) -> Job {
        Job::SweepInvitations
    }

    async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
        let report = self.sweep(run).await?;
        Ok(JobReport {
            job: Job::SweepInvitations,
            complete: report.complete,
            summary: report.summary(),
            details: serde_json::to_value(&report).map_err(|e| {
                HandlerError::invalid(format!("cannot serialize the sweep report: {e}"))
            })?,
            metrics: vec![
                Metric::count(LINKS_SWEPT, report.deleted),
                // A missing index is the deployment's fault: the sweep
                // still runs (by Scan, at a higher cost) but the alarm on
                // environment faults fires until the index is there.
                Metric::count(ENVIRONMENT_FAULTS, u64::from(!report.used_index)),
            ],
        })
    }
}

// ---------------------------------------------------------------------------
// Stream handler (optional TTL)
// ---------------------------------------------------------------------------

/// The invitation stream handler: stamps [`TTL_ATTRIBUTE`] when
/// `INVITATION_TTL=on`, and counts TTL removals of links.
pub struct InvitationTtl {
    store: Arc<dyn Store>,
    enabled: bool,
    ttl_removals: AtomicU64,
}

impl InvitationTtl {
    /// The handler over the stream store, stamping links when the settings
    /// say `INVITATION_TTL=on`.
    pub fn new(deps: &JobDeps) -> Self {
        InvitationTtl::with_store(deps.stream_store.clone(), deps.settings.invitations.ttl)
    }

    /// The handler over `store`; `enabled`: stamp [`TTL_ATTRIBUTE`] (else
    /// it only counts TTL removals).
    pub fn with_store(store: Arc<dyn Store>, enabled: bool) -> Self {
        InvitationTtl {
            store,
            enabled,
            ttl_removals: AtomicU64::new(0),
        }
    }

    /// TTL removals of invitation links seen by this handler instance.
    pub fn ttl_removals(&self) -> u64 {
        self.ttl_removals.load(Ordering::Relaxed)
    }

    async fn stamp(&self, link: &InvitationLink, value: i64) -> Result<HandlerOutcome, StoreError> {
        let key = ItemKey::InvitationLink(link.group).to_attributes();
        let Some(stored) = self.store.get(&key, true).await? else {
            return Ok(HandlerOutcome::Nothing(
                "invitation link gone since this change".into(),
            ));
        };
        let Some(seen) = same_expiry(&stored, link.link_expiry_datetime) else {
            return Ok(HandlerOutcome::Nothing(
                "invitation link changed since this change; its own change stamps it".into(),
            ));
        };
        if stamped_ttl(&stored) == Some(value) {
            return Ok(HandlerOutcome::Nothing("TTL already stamped".into()));
        }
        let update = Expr::set(TTL_ATTRIBUTE, AttributeValue::N(value.to_string()));
        let condition = Expr::equals(attr::LINK_EXPIRY_DATETIME, AttributeValue::S(seen));
        Ok(
            match self.store.update(&key, update, Some(condition)).await? {
                WriteOutcome::Applied => HandlerOutcome::Wrote {
                    writes: 1,
                    detail: format!("stamped {TTL_ATTRIBUTE}"),
                },
                WriteOutcome::ConditionFailed => HandlerOutcome::Nothing(
                    "invitation link changed before the stamp; its own change stamps it".into(),
                ),
            },
        )
    }
}

#[async_trait]
impl ChangeHandler<Change> for InvitationTtl {
    fn name(&self) -> &'static str {
        "invitations"
    }

    fn wants(&self, kind: ItemKind) -> bool {
        kind == ItemKind::InvitationLink
    }

    async fn handle_in_batch(
        &self,
        change: &Change,
        _now: DateTime<Utc>,
        _batch: &BatchFacts,
    ) -> Result<HandlerOutcome, HandlerError> {
        match change.kind {
            ChangeKind::TtlRemove => {
                self.ttl_removals.fetch_add(1, Ordering::Relaxed);
                Ok(HandlerOutcome::Nothing(
                    "TTL removal of an expired invitation link (counted; not a user delete)".into(),
                ))
            }
            ChangeKind::Remove => Ok(HandlerOutcome::Nothing(
                "invitation link deleted; nothing to do".into(),
            )),
            ChangeKind::Insert | ChangeKind::Modify => {
                if !self.enabled {
                    return Ok(HandlerOutcome::Nothing(
                        "invitation TTL is off (INVITATION_TTL)".into(),
                    ));
                }
                let Some(Entity::InvitationLink(link)) = &change.new else {
                    return Ok(HandlerOutcome::Nothing(
                        "no new image of the invitation link".into(),
                    ));
                };
                match ttl_to_stamp(link) {
                    None => Ok(HandlerOutcome::Nothing("TTL already stamped".into())),
                    Some(value) => Ok(self.stamp(link, value).await?),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    const G: &str = "9b2e7c1a-4d3f-4a8b-9c0d-1e2f3a4b5c6d";
    const HASH: &str = "0123456789abcdef0123456789abcdef";

    fn link_item(group: GroupId, expiry: &str) -> Item {
        let mut item = ItemKey::InvitationLink(group).to_attributes();
        item.insert(
            attr::INVITATION_LINK_HASH.into(),
            AttributeValue::S(HASH.into()),
        );
        item.insert(
            attr::LINK_EXPIRY_DATETIME.into(),
            AttributeValue::S(expiry.into()),
        );
        item
    }

    fn now() -> DateTime<Utc> {
        datetime::parse("2024-03-25T00:00:00.500Z").unwrap()
    }

    fn verdict(expiry: &str) -> Verdict {
        classify(&link_item(G.parse().unwrap(), expiry), now())
    }

    #[test]
    fn expired_in_every_stored_form() {
        for expiry in [
            "2024-03-25T00:00:00.499Z",
            "2024-03-25T00:00:00Z",
            "2024-03-25T00:00:00",
            "2024-03-25T00:00:00.4",
            "2024-03-25T00:00:00.49",
            "2024-03-25T00:00:00.499999999Z",
            "2024-03-24T12:00:00.10",
            "1999-01-01T00:00:00",
        ] {
            let Verdict::Expired(link) = verdict(expiry) else {
                panic!("{expiry} must be expired")
            };
            assert_eq!(link.seen_expiry, expiry, "the raw string is kept");
            assert_eq!(link.hash, HASH);
            assert_eq!(link.group.to_string(), G);
        }
    }

    #[test]
    fn not_expired_at_or_after_now_in_every_form() {
        for expiry in [
            "2024-03-25T00:00:00.500Z",
            "2024-03-25T00:00:00.5",
            "2024-03-25T00:00:00.500000001",
            "2024-03-25T00:00:01Z",
            "2024-03-25T00:00:01",
            "3023-12-23T12:21:10.10",
        ] {
            assert_eq!(verdict(expiry), Verdict::NotExpired, "{expiry}");
        }
    }

    #[test]
    fn unparseable_links_are_reported_with_their_group_never_expired() {
        let Verdict::Unparseable(u) = verdict("2024-03-24 10:00:00") else {
            panic!()
        };
        assert_eq!(u.group, G);
        assert!(u.reason.contains("ISO 8601"), "{}", u.reason);

        let mut no_hash = link_item(G.parse().unwrap(), "2020-01-01T00:00:00Z");
        no_hash.remove(attr::INVITATION_LINK_HASH);
        assert!(matches!(classify(&no_hash, now()), Verdict::Unparseable(_)));

        let mut bad_key = link_item(G.parse().unwrap(), "2020-01-01T00:00:00Z");
        bad_key.insert("PK".into(), AttributeValue::S("NOT-A-UUID".into()));
        let Verdict::Unparseable(u) = classify(&bad_key, now()) else {
            panic!()
        };
        assert_eq!(u.group, "NOT-A-UUID");
        assert!(!u.reason.contains(HASH), "{}", u.reason);
    }

    #[test]
    fn delete_condition_compares_the_raw_strings_seen() {
        let Verdict::Expired(link) = verdict("2024-03-25T00:00:00") else {
            panic!()
        };
        let c = delete_condition(&link);
        assert_eq!(c.text, "#exp = :seen AND #hash = :hash");
        assert_eq!(c.names["#exp"], "LinkExpiryDatetime");
        assert_eq!(c.names["#hash"], "InvitationLinkHash");
        assert_eq!(
            c.values[":seen"],
            AttributeValue::S("2024-03-25T00:00:00".into())
        );
        assert_eq!(c.values[":hash"], AttributeValue::S(HASH.into()));
        assert_eq!(
            link.key(),
            ItemKey::InvitationLink(link.group).to_attributes()
        );
    }

    #[test]
    fn queries_name_the_index_and_the_canonical_bound() {
        let upper = query_upper_bound(now());
        assert_eq!(upper, "2024-03-25T00:00:05.500Z");
        let q = index_query(&upper, Some(10));
        assert_eq!(q.index.as_deref(), Some("InvitationLinkExpiry"));
        assert_eq!(
            q.key_condition.values[":sk"],
            AttributeValue::S("InvitationLinkHash".into())
        );
        assert_eq!(q.limit, Some(10));
        let s = fallback_scan(&upper, None);
        let f = s.filter.unwrap();
        assert_eq!(f.text, q.key_condition.text, "same condition both ways");
        assert_eq!(f.values, q.key_condition.values);
        assert!(s.index.is_none());
    }

    /// Every stored form of an instant: 0–9 fraction digits (truncated), with
    /// or without `Z`.
    fn forms(at: DateTime<Utc>) -> Vec<String> {
        let base = at.format("%Y-%m-%dT%H:%M:%S").to_string();
        let nanos = format!("{:09}", at.timestamp_subsec_nanos());
        let mut out = Vec::new();
        for digits in 0..=9 {
            let frac = if digits == 0 {
                String::new()
            } else {
                format!(".{}", &nanos[..digits])
            };
            out.push(format!("{base}{frac}"));
            out.push(format!("{base}{frac}Z"));
        }
        out
    }

    proptest! {
        /// The string range never hides an expired link: every stored form
        /// of every instant before `now` sorts below the bound, and the
        /// parsed decision agrees with the instant order.
        #[test]
        fn prefilter_never_hides_an_expired_link(
            now_ms in 0i64..253_402_300_000_000,
            back_ns in 1i64..200_000_000_000,
        ) {
            let now = Utc.timestamp_millis_opt(now_ms).unwrap();
            let upper = query_upper_bound(now);
            let at = now - TimeDelta::nanoseconds(back_ns);
            prop_assume!(at.timestamp() >= 0);
            for f in forms(at) {
                prop_assert!(f.as_str() < upper.as_str(), "{} !< {}", f, upper);
                let parsed = datetime::parse(&f).unwrap();
                prop_assert!(parsed <= at);
                let v = classify(&link_item(GroupId::default(), &f), now);
                prop_assert!(matches!(v, Verdict::Expired(_)), "{} at {}", f, now);
            }
        }

        /// A link expiring at or after `now` is never judged expired,
        /// whatever its stored form (forms truncate, so only the full one).
        #[test]
        fn valid_links_are_never_expired(now_ms in 0i64..253_402_200_000_000, ahead_ms in 0i64..100_000_000) {
            let now = Utc.timestamp_millis_opt(now_ms).unwrap();
            let at = now + TimeDelta::milliseconds(ahead_ms);
            let v = classify(&link_item(GroupId::default(), &datetime::format(at)), now);
            prop_assert_eq!(v, Verdict::NotExpired);
        }
    }

    #[test]
    fn ttl_rounds_up_and_skips_when_already_stamped() {
        let at = datetime::parse("2024-03-25T00:00:00Z").unwrap();
        assert_eq!(ttl_seconds(at), 1_711_324_800);
        let at_ms = datetime::parse("2024-03-25T00:00:00.001Z").unwrap();
        assert_eq!(ttl_seconds(at_ms), 1_711_324_801);

        let mut link = InvitationLink {
            group: G.parse().unwrap(),
            invitation_link_hash: HASH.into(),
            link_expiry_datetime: at_ms,
            extra: Item::new(),
        };
        assert_eq!(ttl_to_stamp(&link), Some(1_711_324_801));
        link.extra
            .insert(TTL_ATTRIBUTE.into(), AttributeValue::N("1711324800".into()));
        assert_eq!(ttl_to_stamp(&link), Some(1_711_324_801), "stale value");
        link.extra
            .insert(TTL_ATTRIBUTE.into(), AttributeValue::N("1711324801".into()));
        assert_eq!(ttl_to_stamp(&link), None, "own write: no loop");
    }

    #[test]
    fn same_expiry_compares_instants_and_returns_the_raw_form() {
        let stored = link_item(G.parse().unwrap(), "2024-03-25T00:00:00.10");
        let at = datetime::parse("2024-03-25T00:00:00.100Z").unwrap();
        assert_eq!(
            same_expiry(&stored, at).as_deref(),
            Some("2024-03-25T00:00:00.10")
        );
        assert_eq!(same_expiry(&stored, at + TimeDelta::hours(24)), None);
    }

    #[test]
    fn report_has_the_documented_fields() {
        let mut r = SweepReport {
            expired_found: 3,
            deleted: 2,
            kept_renewed: 1,
            pages: 1,
            consumed_read_capacity: 0.5,
            used_index: true,
            complete: true,
            ..Default::default()
        };
        for i in 0..25 {
            r.add_unparseable(UnparseableLink {
                group: format!("g{i}"),
                reason: "x".into(),
            });
        }
        assert_eq!(r.unparseable, 25);
        assert_eq!(r.unparseable_groups.len(), MAX_LISTED);
        let v = serde_json::to_value(&r).unwrap();
        for field in [
            "expired_found",
            "deleted",
            "kept_renewed",
            "already_gone",
            "unparseable",
            "pages",
            "consumed_read_capacity",
            "used_index",
            "complete",
        ] {
            assert!(v.get(field).is_some(), "{field}");
        }
        let s = r.summary();
        assert!(
            s.contains("2 deleted") && s.contains("1 kept (renewed)"),
            "{s}"
        );
        assert!(s.contains("index InvitationLinkExpiry"), "{s}");
    }
}
