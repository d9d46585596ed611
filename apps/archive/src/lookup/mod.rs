//! The date lookup: `root` lists the years that have files, each year its
//! months, each month its days, each day its files' `hh-mm-ss`; a client
//! walks them with four GetItems and gets a file by `PK` + `SK`.
//!
//! - [`rules`]: which items list a file, how a list reads and what a
//!   change writes (pure, tested without a database);
//! - [`store`]: the items' reads and conditional writes, and the order in
//!   which a file is listed and unlisted (safe under concurrent shards);
//! - [`DateLookup`]: the stream handler. A record of an archived file
//!   (insert or removal) makes the lookup follow whether the file exists
//!   *now*, by a strongly consistent read: a record delivered again, late
//!   or out of order (a replay of an old batch) cannot list a removed file
//!   or unlist a present one. A file written, removed and written again
//!   ends listed. Modifications are skipped: a file's time is its key.
//!   The unlisting is decided from the file being absent, so it is
//!   written only while the file is still absent under every key read
//!   ([`store`]: a guard in the same transaction); a file written again
//!   meanwhile withholds it. A REMOVE record without an old image (a
//!   second REMOVE when two deletes of one item race) is handled from its
//!   keys like any other: the decision reads the table, not the image;
//! - [`rebuild`]: the `rebuild-lookup` job (on demand).

pub mod rebuild;
pub mod rules;
pub mod store;

use std::sync::Arc;

use async_trait::async_trait;
use worker_engine::store::{Key, Store, StoreError};
use worker_engine::stream::{ChangeKind, StreamChange};
use worker_engine::stream::{RecordOutcome, RecordProcessor};
use worker_engine::{Access, Fallback, HandlerError, Schedule, ScheduleSpec, StreamSpec};

use crate::app::{Deps, JobSpec};
use crate::keys::{FileTime, ItemKey, Job};
use store::LookupStore;

/// Lookup items written by the stream handler.
pub const LOOKUP_WRITES: &str = "LookupWrites";
/// Lookup items written by `rebuild-lookup`.
pub const LOOKUP_ITEMS_REBUILT: &str = "LookupItemsRebuilt";
/// Archived files `rebuild-lookup` found.
pub const FILES_SCANNED: &str = "FilesScanned";

/// The date lookup job: its stream handler and its rebuild.
pub const SPEC: JobSpec = JobSpec {
    name: "date-lookup",
    summary: "keeps the root/year/month/day lookup lists equal to the archived files; rebuilds them on demand",
    env: &[],
    // Consistent reads (shared BatchGetItem; a lone one may go as GetItem)
    // and conditional writes of lookup items.
    stream: Some(StreamSpec {
        handler: "date-lookup",
        writes_metric: LOOKUP_WRITES,
        access: Access {
            dynamodb_actions: &[
                "dynamodb:BatchGetItem",
                "dynamodb:ConditionCheckItem",
                "dynamodb:DeleteItem",
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
            ],
            indexes: &[],
            fallbacks: &[],
            publishes_events: false,
        },
    }),
    scheduled: &[ScheduleSpec {
        job: Job::RebuildLookup,
        function: "RebuildLookupFunction",
        schedule: Schedule::OnDemand,
        local_cron: "never",
        access: Access {
            dynamodb_actions: &[
                "dynamodb:BatchGetItem",
                "dynamodb:ConditionCheckItem",
                "dynamodb:DeleteItem",
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:Scan",
                "dynamodb:UpdateItem",
            ],
            indexes: &[],
            fallbacks: &[Fallback {
                action: "dynamodb:PutItem",
                why: "a pass cut short by the deadline saves where it resumes (WorkerCheckpoint#rebuild-lookup)",
            }],
            publishes_events: false,
        },
        metrics: &[LOOKUP_ITEMS_REBUILT, FILES_SCANNED],
    }],
    handlers: |d| vec![Arc::new(DateLookup::new(d))],
    jobs: |d| vec![Arc::new(rebuild::RebuildLookup::new(d))],
};

/// Keeps the date lookup equal to the archived files.
pub struct DateLookup {
    store: Arc<dyn Store>,
    lookup: LookupStore,
}

impl DateLookup {
    /// The handler over the stream store and write counter of `deps`.
    pub fn new(deps: &Deps) -> Self {
        DateLookup {
            store: deps.stream_store.clone(),
            lookup: LookupStore::new(
                deps.stream_store.clone(),
                deps.writes.clone(),
                LOOKUP_WRITES,
            ),
        }
    }
}

/// Whether a file at `t` exists now: a strongly consistent read of the
/// record's own key and of the time's spellings.
pub async fn file_exists(
    store: &dyn Store,
    t: FileTime,
    own: Option<&Key>,
) -> Result<bool, StoreError> {
    let mut keys = t.spellings();
    if let Some(own) = own
        && !keys.contains(own)
    {
        keys.push(own.clone());
    }
    let reads = keys.iter().map(|k| store.get(k, true));
    let found = futures::future::try_join_all(reads).await?;
    Ok(found.iter().any(Option::is_some))
}

#[async_trait]
impl RecordProcessor for DateLookup {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError> {
        let t = match ItemKey::from_item(&change.keys) {
            Ok(ItemKey::File(t)) => t,
            Ok(_) => return Ok(RecordOutcome::skipped("not an archived file")),
            Err(e) if e.about_file() => {
                return Err(HandlerError::permanent(format!(
                    "archived file with a malformed key: {e}"
                )));
            }
            // Not the archive table's design: another partition, or keys of
            // another table's types (the table enforces its own).
            Err(
                e @ (crate::keys::KeyError::Foreign { .. }
                | crate::keys::KeyError::WrongType { .. }
                | crate::keys::KeyError::Missing(_)),
            ) => {
                return Ok(RecordOutcome::foreign(e.to_string()));
            }
            Err(_) => return Ok(RecordOutcome::skipped("not an archived file")),
        };
        if change.kind == ChangeKind::Modify {
            return Ok(RecordOutcome::skipped(
                "file modified: its listing cannot change",
            ));
        }
        let own: Key = change.keys.clone();
        if file_exists(self.store.as_ref(), t, Some(&own)).await? {
            let n = self.lookup.list_file(t).await?;
            Ok(if n == 0 {
                RecordOutcome::skipped("file already listed")
            } else {
                RecordOutcome::handled(format!("file listed ({n} lookup item(s) changed)"))
            })
        } else {
            let n = self
                .lookup
                .unlist_file(t, std::slice::from_ref(&own))
                .await?;
            Ok(if n == 0 {
                RecordOutcome::skipped("file already unlisted")
            } else {
                RecordOutcome::handled(format!("file unlisted ({n} lookup item(s) changed)"))
            })
        }
    }
}
