//! `rebuild-lookup` (on demand): make the date lookup what the stream
//! would have built from the files in the table, e.g. after enabling the
//! stream on a table with files, or after a bad import.
//!
//! A pass is two paged Scans, each page one unit of work:
//!
//! 1. **prune**: every lookup item found loses the entries whose child is
//!    gone (a file absent under its spellings, a lookup item listing
//!    nothing) and is rewritten in canonical form if it is not; an item
//!    left empty is deleted and taken out of its parent. As in the stream,
//!    each removed child is read again afterwards and listed again if it
//!    came back meanwhile;
//! 2. **add**: every file found is listed (the page's files grouped by
//!    lookup item, days first, root last), then read again: one removed
//!    meanwhile is unlisted (its removal may have been handled before our
//!    write).
//!
//! Each entry pruned is decided from its child being gone, so its removal
//! carries a guard on that child ([`LookupStore::apply_guarded`]): the
//! file absent under each spelling read, the child lookup item exactly as
//! read (listing nothing). A child written again between the read and the
//! write withholds the removal (counted in `withheld`); it stays listed.
//! Tidying a list (its canonical form) is decided from the item itself
//! and carries the item's own condition.
//!
//! Pruning first means an entry wrongly pruned (a file under a spelling
//! the check does not try) is listed again by the second scan. The pass
//! resumes across ticks from a checkpoint (`WorkerCheckpoint#rebuild-lookup`:
//! phase and `LastEvaluatedKey`); a tick always finishes at least one page,
//! then continues while [`JobRun::has_time`]. Items written by the
//! service or the stream meanwhile are kept right by the same conditional
//! writes as the stream's.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use serde_json::json;
use worker_engine::HandlerError;
use worker_engine::item::Item;
use worker_engine::metrics::{Metric, WriteCounter};
use worker_engine::schedule::{JobReport, JobRun, ScheduledJob};
use worker_engine::store::Guard;
use worker_engine::store::{Expr, ScanSpec, Store, StoreError};

use super::rules::{self, Op};
use super::store::{LookupStore, file_gone};
use super::{FILES_SCANNED, LOOKUP_ITEMS_REBUILT};
use crate::app::Deps;
use crate::items::Checkpoint;
use crate::keys::{self, Child, FileTime, ItemKey, Job, LookupKey};

const PRUNE: &str = "prune";
const ADD: &str = "add";
/// Items per Scan page (one unit of work).
pub const PAGE_SIZE: i32 = 100;
/// Lookup items handled at once within a page.
const CONCURRENCY: usize = 8;

/// What one run did.
#[derive(Debug, Default)]
struct Figures {
    pages: u64,
    files: u64,
    lookup_items: u64,
    stale_entries: u64,
    relisted: u64,
    /// Removals not written: their child changed since it was read.
    withheld: u64,
    noncanonical: u64,
}

/// Rebuilds the date lookup from the files.
pub struct RebuildLookup {
    store: Arc<dyn Store>,
    page_size: i32,
}

impl RebuildLookup {
    /// The job over the table of `deps`, [`PAGE_SIZE`] items a Scan page.
    pub fn new(deps: &Deps) -> Self {
        RebuildLookup {
            store: deps.store.clone(),
            page_size: PAGE_SIZE,
        }
    }

    async fn load(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(Checkpoint, bool), StoreError> {
        let stored = self
            .store
            .get(&keys::checkpoint(Job::RebuildLookup), true)
            .await?;
        let had = stored.is_some();
        let resumed =
            stored.and_then(
                |item| match Checkpoint::from_item(Job::RebuildLookup, &item) {
                    Ok(c) if c.phase == PRUNE || c.phase == ADD => Some(c),
                    Ok(_) | Err(_) => {
                        tracing::warn!(
                            "rebuild-lookup checkpoint does not decode; starting a new pass"
                        );
                        None
                    }
                },
            );
        Ok((
            resumed.unwrap_or_else(|| Checkpoint::new(Job::RebuildLookup, PRUNE, now)),
            had,
        ))
    }

    /// Prune one page's lookup items.
    async fn prune(
        &self,
        lookup: &LookupStore,
        items: &[Item],
        f: &mut Figures,
    ) -> Result<(), StoreError> {
        let mut found = Vec::new();
        for item in items {
            if let Ok(ItemKey::Lookup(key)) = ItemKey::from_item(item) {
                if ItemKey::Lookup(key).is_canonical_in(item) {
                    found.push(key);
                } else {
                    // Not where a client looks: left alone, counted.
                    f.noncanonical += 1;
                }
            }
        }
        f.lookup_items += found.len() as u64;
        let results: Vec<(u64, u64, u64)> = futures::stream::iter(found)
            .map(|key| self.prune_item(lookup, key))
            .buffer_unordered(CONCURRENCY)
            .try_collect()
            .await?;
        for (stale, relisted, withheld) in results {
            f.stale_entries += stale;
            f.relisted += relisted;
            f.withheld += withheld;
        }
        Ok(())
    }

    /// One lookup item: (stale entries removed, children listed again,
    /// removals withheld).
    async fn prune_item(
        &self,
        lookup: &LookupStore,
        key: LookupKey,
    ) -> Result<(u64, u64, u64), StoreError> {
        let seen = lookup.read(key).await?;
        let children = &seen.listed.children;
        let (present, gone) = self.present(lookup, children).await?;
        let stale: Vec<Child> = children
            .iter()
            .filter(|c| !present.contains(c))
            .copied()
            .collect();
        // Each removal only while its child is as read (gone); the tidy-up
        // on the item's own condition. They commit together when they can.
        let removals = stale.iter().map(|c| {
            let guards = gone.get(c).cloned().unwrap_or_default();
            lookup.apply_guarded(key, vec![Op::Remove(*c)], guards)
        });
        let (removed, _tidied) = futures::future::try_join(
            futures::future::try_join_all(removals),
            lookup.apply(key, vec![Op::Tidy]),
        )
        .await?;
        let withheld = removed.iter().filter(|a| a.withheld).count() as u64;
        // A child removed may have come back since (one withheld is still
        // listed).
        let removed: BTreeSet<Child> = stale
            .iter()
            .zip(&removed)
            .filter(|(_, a)| !a.withheld)
            .map(|(c, _)| *c)
            .collect();
        let (back, _) = self.present(lookup, &removed).await?;
        for child in &back {
            match child {
                Child::File(t) => lookup.list_file(*t).await?,
                Child::Lookup(k) => lookup.relist(*k).await?,
            };
        }
        if back.is_empty() && !lookup.read(key).await?.exists {
            lookup.unlink(key).await?;
        }
        Ok((stale.len() as u64 - withheld, back.len() as u64, withheld))
    }

    /// Of `children`, those present now (strongly consistent reads): a
    /// file under one of its spellings, a lookup item listing something;
    /// and for each of the others, the guards that it is still as read
    /// (the file absent under each spelling, the lookup item unchanged).
    async fn present(
        &self,
        lookup: &LookupStore,
        children: &BTreeSet<Child>,
    ) -> Result<(BTreeSet<Child>, HashMap<Child, Vec<Guard>>), StoreError> {
        let files: Vec<FileTime> = children
            .iter()
            .filter_map(|c| match c {
                Child::File(t) => Some(*t),
                Child::Lookup(_) => None,
            })
            .collect();
        let existing = existing_files(self.store.as_ref(), &files).await?;
        let mut present = BTreeSet::new();
        let mut gone = HashMap::new();
        for t in files {
            if existing.contains(&t) {
                present.insert(Child::File(t));
            } else {
                gone.insert(Child::File(t), file_gone(t, &[]));
            }
        }
        let lookups = children.iter().filter_map(|c| match c {
            Child::Lookup(k) => Some(async move {
                let seen = lookup.read(*k).await?;
                Ok::<_, StoreError>((*c, seen))
            }),
            Child::File(_) => None,
        });
        for (c, seen) in futures::future::try_join_all(lookups).await? {
            if seen.listed.children.is_empty() {
                gone.insert(c, vec![seen.guard()]);
            } else {
                present.insert(c);
            }
        }
        Ok((present, gone))
    }

    /// List one page's files, then unlist those removed meanwhile.
    async fn add(
        &self,
        lookup: &LookupStore,
        items: &[Item],
        f: &mut Figures,
    ) -> Result<(), StoreError> {
        let files: Vec<FileTime> = items
            .iter()
            .filter_map(|item| match ItemKey::from_item(item) {
                Ok(ItemKey::File(t)) => Some(t),
                _ => None,
            })
            .collect();
        f.files += files.len() as u64;
        for level in rules::by_level(rules::lookup_of(files.iter().copied())) {
            futures::stream::iter(level)
                .map(|(key, children)| {
                    lookup.apply(key, children.into_iter().map(Op::Add).collect())
                })
                .buffer_unordered(CONCURRENCY)
                .try_collect::<Vec<_>>()
                .await?;
        }
        let present = existing_files(self.store.as_ref(), &files).await?;
        for t in files.iter().filter(|t| !present.contains(t)) {
            lookup.unlist_file(*t, &[]).await?;
        }
        Ok(())
    }
}

/// Of `times`, those with a file under one of their spellings (strongly
/// consistent BatchGetItem).
pub async fn existing_files(
    store: &dyn Store,
    times: &[FileTime],
) -> Result<BTreeSet<FileTime>, StoreError> {
    let keys: Vec<_> = times.iter().flat_map(|t| t.spellings()).collect();
    if keys.is_empty() {
        return Ok(BTreeSet::new());
    }
    let found = store.get_many(&keys, true).await?;
    Ok(found
        .iter()
        .flatten()
        .filter_map(|item| match ItemKey::from_item(item) {
            Ok(ItemKey::File(t)) => Some(t),
            _ => None,
        })
        .collect())
}

#[async_trait]
impl ScheduledJob<Job> for RebuildLookup {
    fn job(&self) -> Job {
        Job::RebuildLookup
    }

    async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
        let (mut checkpoint, had_checkpoint) = self.load(run.now).await?;
        let writes = Arc::new(WriteCounter::default());
        let lookup = LookupStore::new(self.store.clone(), writes.clone(), LOOKUP_ITEMS_REBUILT);
        let mut f = Figures::default();
        let mut complete = false;
        loop {
            // At least one page per tick, then while there is time.
            if f.pages > 0 && !run.has_time() {
                break;
            }
            let prune = checkpoint.phase == PRUNE;
            // Keys only: lookup items are read again, consistently.
            let spec = ScanSpec {
                projection: Some(
                    Expr::new("#pk, #sk")
                        .name("#pk", keys::PK)
                        .name("#sk", keys::SK),
                ),
                limit: Some(self.page_size),
                ..Default::default()
            };
            let page = self
                .store
                .scan_page(&spec, checkpoint.pass.position.clone())
                .await?;
            if prune {
                self.prune(&lookup, &page.items, &mut f).await?;
            } else {
                self.add(&lookup, &page.items, &mut f).await?;
            }
            f.pages += 1;
            checkpoint.pass.position = page.last_evaluated_key;
            if checkpoint.pass.position.is_none() {
                if prune {
                    checkpoint.phase = ADD.to_owned();
                } else {
                    complete = true;
                    break;
                }
            }
        }
        let written = writes
            .snapshot()
            .get(LOOKUP_ITEMS_REBUILT)
            .copied()
            .unwrap_or(0);
        checkpoint.pass.ticks += 1;
        checkpoint.pass.add("files", f.files);
        checkpoint.pass.add("writes", written);
        checkpoint.pass.add("stale", f.stale_entries);
        if complete {
            if had_checkpoint {
                self.store
                    .delete(&keys::checkpoint(Job::RebuildLookup), None)
                    .await?;
            }
        } else {
            self.store.put(checkpoint.to_item(), None).await?;
        }
        let summary = if complete {
            format!(
                "lookup rebuilt: {} file(s), {} lookup write(s) in the pass",
                checkpoint.pass.total("files"),
                checkpoint.pass.total("writes")
            )
        } else {
            format!(
                "rebuild stopped in the {} phase; the next run continues",
                checkpoint.phase
            )
        };
        Ok(JobReport {
            job: Job::RebuildLookup,
            complete,
            summary,
            details: json!({
                "phase": checkpoint.phase,
                "pages": f.pages,
                "files": f.files,
                "lookup_items": f.lookup_items,
                "stale_entries": f.stale_entries,
                "relisted": f.relisted,
                "withheld": f.withheld,
                "noncanonical_lookup_items": f.noncanonical,
                "lookup_writes": written,
                "pass_ticks": checkpoint.pass.ticks,
                "pass_files": checkpoint.pass.total("files"),
                "pass_writes": checkpoint.pass.total("writes"),
            }),
            metrics: vec![
                Metric::count(LOOKUP_ITEMS_REBUILT, written),
                Metric::count(FILES_SCANNED, f.files),
            ],
        })
    }
}
