//! The unzip lifecycle: a retrieval is requested (`Unzipping` item), the
//! file is unzipped (`Unzipped` item), and expires after the retention.
//!
//! - [`rules`]: what must hold for one `KeyName` (pure);
//! - [`UnzipLifecycle`]: the stream handler. It converges what it owns (a
//!   file's `IsUnzipped`, the `Unzipping` items an `Unzipped` item
//!   finishes) to what exists now, not to the record's diff, so replays
//!   and any order of records decide the same; a value already right costs
//!   no write, which also ends the loop of its own flag write coming back
//!   through the stream;
//! - [`expire`]: the scheduled `expire-unzipped` job.
//!
//! # The stream handler's decisions
//!
//! | record | reads | writes (only when wrong) |
//! |---|---|---|
//! | `Unzipped` item, any change (for the `KeyName` of its old and of its new image) | one Query of the `KeyName` index (files, unzipped and unzipping items); consistent reads of the unzipped items and of the record's own (which the index may not show yet, or any more); a consistent read of each file | each file's `IsUnzipped` set to whether an `Unzipped` item exists; the `Unzipping` items the latest one finishes deleted |
//! | new or changed `Unzipping` item | the same | the same |
//! | `Unzipping` item removed | none | none: nothing follows |
//! | archived file written (INSERT, MODIFY) | one Query of its `KeyName` on the index; consistent reads of the `Unzipped` items it names; the file itself (consistently) only if its image shows the flag wrong | its own `IsUnzipped` |
//! | archived file removed | none | none: no flag to keep |
//!
//! A file's record is needed because the service writes files on its own:
//! a file archived again (a retried upload, with or without a delete first,
//! under either spelling of its key) or rewritten from a copy read before
//! the flag was set comes with `IsUnzipped = false` while an `Unzipped`
//! item of its `KeyName` exists, and no unzip record follows it. Its
//! image is the file as that write left it; a later write of the file has
//! a record of its own, delivered after this one (records of one item keep
//! their order), so a flag the image shows right is left without reading
//! the file.
//!
//! Every write holds at write time (in the same transaction):
//!
//! - a flag **set** is guarded on the latest `Unzipped` item still existing
//!   with this `KeyName`; a flag **cleared**, on each `Unzipped` item the
//!   index or the record named and the reads found gone still being gone
//!   (or of another `KeyName`; the newest 32); a flag cleared with no such
//!   item to check
//!   is a plain conditional update. Its own condition: the file still
//!   carries this `KeyName`, so it never creates or resurrects a file. A
//!   guard that fails withholds the write (counted): the change that made
//!   it stale has a record of its own, which reconciles the `KeyName`;
//! - an `Unzipping` item is deleted because an `Unzipped` item finishes
//!   it: the delete carries the same guard as a flag set, so an unzipped
//!   file deleted meanwhile never takes its request with it (withheld,
//!   counted), and its own condition (still this `KeyName`).
//!
//! A REMOVE record without an old image has no `KeyName` and is skipped as
//! the duplicate it is (the first REMOVE, with its image, reconciles).
//!
//! Left open: the index is eventually consistent. An `Unzipped` item
//! created under a `CreatedDate` nobody read cannot be guarded; its own
//! record sets the flag again, but only on the files the index shows by
//! then. So an `Unzipped` item and a file of its `KeyName` written within
//! the index's lag of each other may each miss the other (the item's
//! record not finding the file, the file's record not finding the item),
//! as may an `Unzipped` item created within the lag before another one's
//! removal is handled.

pub mod expire;
pub mod rules;

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use worker_engine::metrics::WriteCounter;
use worker_engine::settings::JobSettings;
use worker_engine::store::{Expr, Key, QuerySpec, Store, StoreError, WriteOutcome};
use worker_engine::store::{Guard, GuardedOp};
use worker_engine::stream::{ChangeKind, StreamChange};
use worker_engine::stream::{RecordOutcome, RecordProcessor};
use worker_engine::{
    Access, EnvVar, Fallback, HandlerError, ReadBy, Schedule, ScheduleSpec, StreamSpec,
};
use worker_engine::{ConfigError, Env};

use crate::app::JobSpec;
use crate::images::{Image, Images};
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

/// Hours an unzipped file is kept (default 24).
pub const UNZIPPED_RETENTION_HOURS: &str = "UNZIPPED_RETENTION_HOURS";
/// Hours after which an unzipping file is reported stuck (default 48).
pub const UNZIP_STUCK_HOURS: &str = "UNZIP_STUCK_HOURS";
/// The EventBridge bus of `UnzippedFileExpired` events (unset: none).
pub const NOTIFY_EVENT_BUS: &str = "NOTIFY_EVENT_BUS";

const JOB_ENV: &[ReadBy<Job>] = &[ReadBy::Job(Job::ExpireUnzipped)];

/// The unzip job: its stream handler and the expiry.
pub const SPEC: JobSpec = JobSpec {
    name: "unzip",
    summary: "an Unzipped item finishes its Unzipping item; a file's IsUnzipped is true exactly while an Unzipped item of its KeyName exists (from the unzip items' records and the file's own); unzipped files expire after the retention",
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
    /// `UNZIPPED_RETENTION_HOURS`: unzipped files created more than this many
    /// hours ago expire.
    pub retention_hours: u64,
    /// `UNZIP_STUCK_HOURS`: unzipping files created more than this many hours
    /// ago are reported.
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

impl JobSettings for UnzipSettings {
    fn from_env(env: &Env) -> Result<Self, ConfigError> {
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

/// At most this many guards on `Unzipped` items read gone (see
/// [`UnzipState::flag_guards`]).
const MAX_ABSENCE_GUARDS: usize = 32;

/// The `Unzipped` items of one `KeyName`, as read: what a flag is decided
/// from.
#[derive(Debug, Default)]
struct UnzipState {
    /// `CreatedDate` of those that exist with this `KeyName` (strongly
    /// consistent reads).
    existing: Vec<i64>,
    /// `CreatedDate` of those the index (or the record) named that do not.
    gone: Vec<i64>,
}

impl UnzipState {
    fn wanted(&self) -> bool {
        rules::wanted_flag(&self.existing)
    }

    /// What a flag written from this state checks in the same transaction:
    /// set, the latest `Unzipped` item still exists with this `KeyName`;
    /// cleared, each `Unzipped` item read gone is still gone or of another
    /// `KeyName` (the newest [`MAX_ABSENCE_GUARDS`]). One created later, under
    /// a `CreatedDate` nobody read, cannot be checked: its own record
    /// reconciles the `KeyName` after it.
    fn flag_guards(&self, key_name: &str) -> Vec<Guard> {
        match self.existing.iter().max() {
            Some(latest) => vec![Guard::new(
                ItemKey::Unzipped { created: *latest }.key(),
                UnzipLifecycle::same_key_name(key_name),
            )],
            None => self
                .gone
                .iter()
                .rev()
                .take(MAX_ABSENCE_GUARDS)
                .map(|c| {
                    Guard::new(
                        ItemKey::Unzipped { created: *c }.key(),
                        UnzipLifecycle::other_key_name(key_name),
                    )
                })
                .collect(),
        }
    }
}

/// What became of one file's flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flag {
    /// The file is gone or has another `KeyName` now.
    NotOfKey,
    /// Already right: nothing written.
    Right,
    Set,
    /// A guard failed: the `Unzipped` items changed since they were read
    /// (their own record reconciles).
    Withheld,
    /// The file's own condition failed: it went or changed its `KeyName`
    /// (its own record follows).
    Refused,
}

/// What reconciling one `KeyName` wrote.
#[derive(Debug, Default)]
struct Reconciled {
    flags_set: usize,
    unzipping_removed: usize,
    files: usize,
    /// Writes not made: the `Unzipped` items they were decided from
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

    /// Of the `Unzipped` items (`CreatedDate`), which exist with this
    /// `KeyName` (strongly consistent reads).
    async fn confirmed(
        &self,
        key_name: &str,
        created: &BTreeSet<i64>,
    ) -> Result<UnzipState, StoreError> {
        let reads = created.iter().map(|c| async move {
            let item = self
                .store
                .get(&ItemKey::Unzipped { created: *c }.key(), true)
                .await?;
            Ok::<_, StoreError>((
                *c,
                item.is_some_and(|i| items::key_name(&i) == Some(key_name)),
            ))
        });
        let mut state = UnzipState::default();
        for (c, exists) in futures::future::try_join_all(reads).await? {
            if exists {
                state.existing.push(c);
            } else {
                state.gone.push(c);
            }
        }
        Ok(state)
    }

    /// Only if the item still carries `key_name`.
    fn same_key_name(key_name: &str) -> Expr {
        Expr::new("#kn = :kn")
            .name("#kn", keys::KEY_NAME)
            .string(":kn", key_name)
    }

    /// Only if the item is gone or carries another `KeyName`.
    fn other_key_name(key_name: &str) -> Expr {
        Expr::new("attribute_not_exists(#kn) OR #kn <> :kn")
            .name("#kn", keys::KEY_NAME)
            .string(":kn", key_name)
    }

    /// Make the file stored under `key` have the flag `state` wants, if it
    /// still carries `key_name`: a strongly consistent read, and a write
    /// only when the flag is wrong. The write is conditional on the file
    /// (still this `KeyName`: never creates or resurrects it) and guarded
    /// on the `Unzipped` items it was decided from
    /// ([`UnzipState::flag_guards`]).
    async fn converge_flag(
        &self,
        key: &Key,
        key_name: &str,
        state: &UnzipState,
    ) -> Result<Flag, StoreError> {
        let Some(file) = self
            .store
            .get(key, true)
            .await?
            .as_ref()
            .and_then(ArchivedFile::from_item)
        else {
            return Ok(Flag::NotOfKey);
        };
        if file.key_name.as_deref() != Some(key_name) {
            return Ok(Flag::NotOfKey);
        }
        let wanted = state.wanted();
        if file.is_unzipped.unwrap_or(false) == wanted {
            return Ok(Flag::Right);
        }
        let update = Expr::set(keys::IS_UNZIPPED, AttributeValue::Bool(wanted));
        let condition = Some(Self::same_key_name(key_name));
        let guards = state.flag_guards(key_name);
        let outcome = if guards.is_empty() {
            // Decided from no Unzipped item at all: nothing to check.
            match self.store.update(key, update, condition).await? {
                WriteOutcome::Applied => Flag::Set,
                WriteOutcome::ConditionFailed => Flag::Refused,
            }
        } else {
            let report = self
                .store
                .write_guarded(
                    &guards,
                    vec![GuardedOp::Update {
                        key: key.clone(),
                        update,
                        condition,
                    }],
                )
                .await?;
            if !report.held() {
                Flag::Withheld
            } else if report.applied > 0 {
                Flag::Set
            } else {
                Flag::Refused
            }
        };
        if outcome == Flag::Set {
            self.writes.add(UNZIP_WRITES, 1);
        }
        Ok(outcome)
    }

    /// Reconcile `key_name` for a record of an unzip item (`own`: the
    /// record's item, which the index may not show yet or any more).
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
            Some(u) if u.key_name.as_deref() == Some(key_name) => unzipping.insert(u.created),
            _ => false,
        };
        let state = self.confirmed(key_name, &unzipped).await?;
        let mut done = Reconciled::default();

        for key in &related.files {
            match self.converge_flag(key, key_name, &state).await? {
                Flag::NotOfKey => continue,
                Flag::Set => done.flags_set += 1,
                Flag::Withheld => done.withheld += 1,
                Flag::Right | Flag::Refused => {}
            }
            done.files += 1;
        }

        let unzipping: Vec<i64> = unzipping.into_iter().collect();
        let finished = rules::finished_unzipping(&unzipping, &state.existing);
        // Decided from the latest `Unzipped` item: each delete lands only
        // while it still exists with this `KeyName`.
        let Some(latest) = state.existing.iter().max() else {
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

    /// A file's INSERT or MODIFY: its flag follows the `Unzipped` items of
    /// its `KeyName`. The image is the file as this write left it; a later
    /// write of it has a record of its own, delivered after this one, so a
    /// flag the image shows right costs no file read and no write.
    async fn file_written(&self, change: &StreamChange) -> Result<RecordOutcome, StoreError> {
        if change.kind.is_removal() {
            return Ok(RecordOutcome::skipped("file removed: no flag to keep"));
        }
        let images = Images::of(change);
        let Some(Image::File(file)) = &images.new else {
            return Ok(RecordOutcome::skipped("no image of the file"));
        };
        let Some(key_name) = file.key_name.as_deref() else {
            return Ok(RecordOutcome::skipped("file without KeyName"));
        };
        let unzipped: BTreeSet<i64> = self.related(key_name).await?.unzipped.into_iter().collect();
        let state = self.confirmed(key_name, &unzipped).await?;
        if file.is_unzipped.unwrap_or(false) == state.wanted() {
            return Ok(RecordOutcome::skipped("file flag already right"));
        }
        Ok(
            match self.converge_flag(&change.keys, key_name, &state).await? {
                Flag::Set => {
                    RecordOutcome::handled(format!("IsUnzipped set to {}", state.wanted()))
                }
                Flag::Right => RecordOutcome::skipped("file flag already right"),
                Flag::NotOfKey | Flag::Refused => {
                    RecordOutcome::skipped("file changed since: its own record follows")
                }
                Flag::Withheld => RecordOutcome::skipped(
                    "Unzipped items changed since they were read: their own record follows",
                ),
            },
        )
    }
}

#[async_trait]
impl RecordProcessor for UnzipLifecycle {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError> {
        let stage = match ItemKey::from_item(&change.keys) {
            Ok(ItemKey::Unzipped { .. }) => Stage::Unzipped,
            Ok(ItemKey::Unzipping { .. }) => Stage::Unzipping,
            Ok(ItemKey::File(_)) => return Ok(self.file_written(change).await?),
            _ => return Ok(RecordOutcome::skipped("not a file or an unzip item")),
        };
        if stage == Stage::Unzipping && change.kind.is_removal() {
            return Ok(RecordOutcome::skipped(
                "unzipping item removed: nothing follows",
            ));
        }
        let images = Images::of(change);
        let mut names: Vec<&str> = [&images.old, &images.new]
            .into_iter()
            .flatten()
            .filter_map(Image::key_name)
            .collect();
        names.sort_unstable();
        names.dedup();
        if names.is_empty() {
            return Ok(RecordOutcome::skipped("no KeyName in the record"));
        }
        // The record's own item: as written, or as it was before its
        // removal (an `Unzipped` item read gone is guarded on staying gone).
        let own = match change.kind {
            ChangeKind::Remove | ChangeKind::TtlRemove => &images.old,
            _ => &images.new,
        };
        let own = match own {
            Some(Image::Unzip(u)) => Some(u),
            _ => None,
        };
        let mut total = Reconciled::default();
        for name in names {
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
