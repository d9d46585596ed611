//! The unzip lifecycle: a retrieval is requested (`Unzipping` item), the
//! file is unzipped (`Unzipped` item), and expires after the retention.
//!
//! - [`rules`]: what must hold for one `KeyName` (pure);
//! - [`UnzipLifecycle`]: the stream handler. A record of an `Unzipped` item
//!   (any change) or of a new `Unzipping` item reconciles its `KeyName`:
//!   one Query of the `KeyName` index finds the file(s), the unzipped and
//!   the unzipping items; consistent reads confirm the unzipped items
//!   (and the record's own, which the index may not show yet); then the
//!   files' `IsUnzipped` is set to whether one exists, and the `Unzipping`
//!   items it finishes are deleted, each write conditional on the item
//!   still having that `KeyName`. The decision depends on what exists, not
//!   on the record, so replays and any order of records decide the same.
//!   An `Unzipping` item is deleted because an `Unzipped` item finishes
//!   it: the delete carries a guard on that `Unzipped` item (it still
//!   exists with this `KeyName`), so an unzipped file deleted meanwhile
//!   never takes its request with it (withheld, counted). Left open (needs
//!   a guarded UpdateItem in the engine): the `IsUnzipped` flag is decided
//!   from the `Unzipped` items too, but carries only the file's own
//!   condition. A REMOVE record without an old image has no `KeyName`
//!   and is skipped as the duplicate it is (the first REMOVE, with its
//!   image, reconciles);
//!   Left open: the index is eventually consistent, so an `Unzipped` item
//!   created within the index's lag before another one's removal is
//!   handled may be missed by that removal's reconciliation (it sets the
//!   flag false; the new item's own record sets it true again only if
//!   handled later);
//! - [`expire`]: the scheduled `expire-unzipped` job.

pub mod expire;
pub mod rules;

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use worker_engine::env::{ConfigError, Env};
use worker_engine::job::{Access, EnvVar, Fallback, ReadBy, Schedule, ScheduleSpec, StreamSpec};
use worker_engine::metrics::WriteCounter;
use worker_engine::store::guarded::{Guard, GuardedOp};
use worker_engine::store::{Expr, QuerySpec, Store, StoreError, WriteOutcome};
use worker_engine::stream::decode::{ChangeKind, StreamChange};
use worker_engine::stream::engine::{ProcessError, RecordOutcome, RecordProcessor};

use crate::app::JobSpec;
use crate::items::{self, ArchivedFile, Stage, UnzipItem};
use crate::keys::{self, ItemKey, Job};

/// Writes of the stream handler (file flags, finished unzipping items).
pub const UNZIP_WRITES: &str = "UnzipWrites";
/// Unzipped items deleted by `expire-unzipped`.
pub const UNZIPPED_EXPIRED: &str = "UnzippedExpired";
/// `UnzippedFileExpired` events published.
pub const EXPIRY_EVENTS: &str = "UnzippedExpiryEvents";
/// Unzipping items older than `UNZIP_STUCK_HOURS`.
pub const UNZIPPING_STUCK: &str = "UnzippingStuck";

pub const UNZIPPED_RETENTION_HOURS: &str = "UNZIPPED_RETENTION_HOURS";
pub const UNZIP_STUCK_HOURS: &str = "UNZIP_STUCK_HOURS";
pub const NOTIFY_EVENT_BUS: &str = "NOTIFY_EVENT_BUS";

const JOB_ENV: &[ReadBy<Job>] = &[ReadBy::Job(Job::ExpireUnzipped)];

/// The unzip job: its stream handler and the expiry.
pub const SPEC: JobSpec = JobSpec {
    name: "unzip",
    summary: "an Unzipped item finishes its Unzipping item and sets IsUnzipped on its file while it exists; unzipped files expire after the retention",
    env: &[
        EnvVar {
            name: UNZIPPED_RETENTION_HOURS,
            read_by: JOB_ENV,
            default: Some("24"),
            meaning: "unzipped files older than this many hours expire",
        },
        EnvVar {
            name: UNZIP_STUCK_HOURS,
            read_by: JOB_ENV,
            default: Some("48"),
            meaning: "unzipping files older than this many hours are reported",
        },
        EnvVar {
            name: NOTIFY_EVENT_BUS,
            read_by: JOB_ENV,
            default: None,
            meaning: "EventBridge bus of UnzippedFileExpired events (unset: none)",
        },
    ],
    stream: Some(StreamSpec {
        handler: "unzip-lifecycle",
        writes_metric: UNZIP_WRITES,
        access: Access {
            dynamodb_actions: &[
                "dynamodb:BatchGetItem",
                "dynamodb:ConditionCheckItem",
                "dynamodb:DeleteItem",
                "dynamodb:GetItem",
                "dynamodb:Query",
                "dynamodb:UpdateItem",
            ],
            indexes: &[keys::BY_KEY_NAME_INDEX],
            fallbacks: &[],
            publishes_events: false,
        },
    }),
    scheduled: &[ScheduleSpec {
        job: Job::ExpireUnzipped,
        function: "ExpireUnzippedFunction",
        schedule: Schedule::Rate("rate(1 hour)"),
        local_cron: "0 * * * *",
        access: Access {
            dynamodb_actions: &[
                "dynamodb:DeleteItem",
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:Query",
            ],
            indexes: &[],
            fallbacks: &[Fallback {
                action: "dynamodb:PutItem",
                why: "a pass cut short by the deadline saves where it resumes (WorkerCheckpoint#expire-unzipped)",
            }],
            publishes_events: true,
        },
        metrics: &[UNZIPPED_EXPIRED, EXPIRY_EVENTS, UNZIPPING_STUCK],
    }],
    handlers: |d| {
        vec![Arc::new(UnzipLifecycle {
            store: d.stream_store.clone(),
            writes: d.writes.clone(),
        })]
    },
    jobs: |d| vec![Arc::new(expire::ExpireUnzipped::new(d))],
};

/// The settings of the unzip job (the variables of [`SPEC`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnzipSettings {
    pub retention_hours: u64,
    pub stuck_hours: u64,
    /// Where `UnzippedFileExpired` events go (`None`: not published).
    pub event_bus: Option<String>,
}

impl Default for UnzipSettings {
    fn default() -> Self {
        UnzipSettings {
            retention_hours: 24,
            stuck_hours: 48,
            event_bus: None,
        }
    }
}

impl UnzipSettings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let d = UnzipSettings::default();
        Ok(UnzipSettings {
            retention_hours: env
                .number(UNZIPPED_RETENTION_HOURS)?
                .unwrap_or(d.retention_hours),
            stuck_hours: env.number(UNZIP_STUCK_HOURS)?.unwrap_or(d.stuck_hours),
            event_bus: env.non_empty(NOTIFY_EVENT_BUS),
        })
    }
}

/// Keeps files' `IsUnzipped` and the `Unzipping` items in line with the
/// `Unzipped` items.
pub struct UnzipLifecycle {
    store: Arc<dyn Store>,
    writes: Arc<WriteCounter>,
}

/// What reconciling one `KeyName` wrote.
#[derive(Debug, Default)]
struct Reconciled {
    flags_set: usize,
    unzipping_removed: usize,
    files: usize,
    /// Deletes not written: the `Unzipped` item they were decided from
    /// changed meanwhile.
    withheld: usize,
}

impl UnzipLifecycle {
    /// Every item carrying `key_name`, by the index (keys only).
    async fn related(&self, key_name: &str) -> Result<rules::Related, StoreError> {
        let mut spec =
            QuerySpec::partition(keys::KEY_NAME, key_name).on_index(keys::BY_KEY_NAME_INDEX);
        // A page size keeps this a plain Query (not merged into PartiQL).
        spec.limit = Some(100);
        Ok(rules::related(&self.store.query_all(&spec).await?))
    }

    /// Of the `Unzipped` items (`CreatedDate`), those that exist with this
    /// `KeyName` (strongly consistent reads).
    async fn confirmed(
        &self,
        key_name: &str,
        created: &BTreeSet<i64>,
    ) -> Result<Vec<i64>, StoreError> {
        let reads = created.iter().map(|c| async move {
            let item = self
                .store
                .get(&ItemKey::Unzipped { created: *c }.key(), true)
                .await?;
            Ok::<_, StoreError>(
                item.filter(|i| items::key_name(i) == Some(key_name))
                    .map(|_| *c),
            )
        });
        Ok(futures::future::try_join_all(reads)
            .await?
            .into_iter()
            .flatten()
            .collect())
    }

    /// Only if the item still carries `key_name`.
    fn same_key_name(key_name: &str) -> Expr {
        Expr::new("#kn = :kn")
            .name("#kn", keys::KEY_NAME)
            .string(":kn", key_name)
    }

    async fn reconcile(
        &self,
        key_name: &str,
        own: Option<&UnzipItem>,
    ) -> Result<Reconciled, StoreError> {
        let related = self.related(key_name).await?;
        let mut unzipped: BTreeSet<i64> = related.unzipped.iter().copied().collect();
        let mut unzipping: BTreeSet<i64> = related.unzipping.iter().copied().collect();
        match own {
            Some(u) if u.stage == Stage::Unzipped => unzipped.insert(u.created),
            Some(u) => unzipping.insert(u.created),
            None => false,
        };
        let existing = self.confirmed(key_name, &unzipped).await?;
        let mut done = Reconciled::default();

        let wanted = rules::wanted_flag(&existing);
        for key in &related.files {
            let Some(file) = self
                .store
                .get(key, true)
                .await?
                .as_ref()
                .and_then(ArchivedFile::from_item)
            else {
                continue;
            };
            if file.key_name.as_deref() != Some(key_name) {
                continue;
            }
            done.files += 1;
            if file.is_unzipped.unwrap_or(false) == wanted {
                continue;
            }
            let set = Expr::new("SET #u = :u")
                .name("#u", keys::IS_UNZIPPED)
                .value(":u", AttributeValue::Bool(wanted));
            if self
                .store
                .update(key, set, Some(Self::same_key_name(key_name)))
                .await?
                == WriteOutcome::Applied
            {
                self.writes.add(UNZIP_WRITES, 1);
                done.flags_set += 1;
            }
        }

        let unzipping: Vec<i64> = unzipping.into_iter().collect();
        let finished = rules::finished_unzipping(&unzipping, &existing);
        // Decided from the latest `Unzipped` item: each delete lands only
        // while it still exists with this `KeyName`.
        let Some(latest) = existing.iter().max() else {
            return Ok(done);
        };
        let finisher = [Guard::new(
            ItemKey::Unzipped { created: *latest }.key(),
            Self::same_key_name(key_name),
        )];
        for created in finished {
            let key = ItemKey::Unzipping { created }.key();
            let report = self
                .store
                .write_guarded(
                    &finisher,
                    vec![GuardedOp::Delete {
                        key,
                        condition: Some(Self::same_key_name(key_name)),
                    }],
                )
                .await?;
            if !report.held() {
                done.withheld += 1;
                break;
            }
            if report.applied > 0 {
                self.writes.add(UNZIP_WRITES, 1);
                done.unzipping_removed += 1;
            }
        }
        Ok(done)
    }
}

#[async_trait]
impl RecordProcessor for UnzipLifecycle {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, ProcessError> {
        let stage = match ItemKey::from_item(&change.keys) {
            Ok(ItemKey::Unzipped { .. }) => Stage::Unzipped,
            Ok(ItemKey::Unzipping { .. }) => Stage::Unzipping,
            _ => return Ok(RecordOutcome::skipped("not an unzip item")),
        };
        if stage == Stage::Unzipping && change.kind.is_removal() {
            return Ok(RecordOutcome::skipped(
                "unzipping item removed: nothing follows",
            ));
        }
        let images = [change.old_image.as_ref(), change.new_image.as_ref()];
        let mut names: Vec<&str> = images
            .into_iter()
            .flatten()
            .filter_map(items::key_name)
            .collect();
        names.sort_unstable();
        names.dedup();
        if names.is_empty() {
            return Ok(RecordOutcome::skipped("no KeyName in the record"));
        }
        // The record's own item, unless it was removed.
        let own = match change.kind {
            ChangeKind::Remove | ChangeKind::TtlRemove => None,
            _ => change.new_image.as_ref().and_then(UnzipItem::from_item),
        };
        let mut total = Reconciled::default();
        for name in names {
            let own = own.as_ref().filter(|o| o.key_name.as_deref() == Some(name));
            let done = self.reconcile(name, own).await?;
            total.flags_set += done.flags_set;
            total.unzipping_removed += done.unzipping_removed;
            total.files += done.files;
            total.withheld += done.withheld;
        }
        if total.files == 0 && total.unzipping_removed == 0 {
            return Ok(RecordOutcome::skipped("no archived file has this KeyName"));
        }
        Ok(if total.flags_set + total.unzipping_removed == 0 {
            RecordOutcome::skipped("unzip state already right")
        } else {
            RecordOutcome::handled(format!(
                "{} file flag(s) set, {} unzipping item(s) removed, {} withheld",
                total.flags_set, total.unzipping_removed, total.withheld
            ))
        })
    }
}
