//! Reading and writing the date lookup items, safely under concurrency.
//!
//! **One item: compare-and-set on its contents.** A change to a lookup
//! item is a read-modify-write: a strongly consistent read, the rules'
//! `plan`, and a write conditional on the `SavedDate` value read being
//! still there (`SavedDate = :seen`; `attribute_not_exists(PK)` when the
//! item was absent). A failed condition means another writer got there
//! first: read again and re-plan (bounded, with jittered backoff; then a
//! transient error and Lambda retries the record). No update is lost and a
//! list never holds a duplicate, whatever runs at the same time on other
//! shards or by other writers. The condition is on the list itself rather
//! than on a version attribute, so a writer that knows nothing of this
//! worker (the service appending to a list) is also caught.
//!
//! **Within one invocation: group commit.** The engine runs a batch's
//! records concurrently; a hundred files of one day would otherwise race
//! for the same day item. Changes to one item queue up; one caller (the
//! first) reads, applies every queued change in order, writes once and
//! answers all of them, and repeats while changes arrive.
//!
//! **Across items: the order of the protocol.** An item must never be
//! listed by its parent while it lists nothing, nor the reverse once
//! everything is written:
//!
//! - listing a file ([`LookupStore::list_file`]) writes bottom-up: the day,
//!   then the month, the year and the root, each only after the one below
//!   is written;
//! - unlisting it ([`LookupStore::unlist_file`]) takes the file out of its
//!   day; an item left empty is deleted and taken out of its parent, and
//!   then read again: if a file arrived meanwhile (another shard listed it
//!   between our two steps), it is listed in its parent again, up to the
//!   root. Either that read sees the other writer's item, or the other
//!   writer's next step (its parent) comes after our removal and re-adds
//!   it: the later of the two writes wins, and it is the right one.
//!
//! **A removal decided from another item carries a guard on it (issue
//! 29).** Taking a file out of its day is decided from the file being
//! gone; taking a day out of its month, from the day being gone. Those are
//! facts about other items, which the condition on the lookup item cannot
//! state. [`LookupStore::apply_guarded`] sends such a write with
//! [`Guard`]s (the file absent under every spelling read, the child
//! lookup item absent or exactly as read) through
//! [`GuardedWriter::write_guarded`](worker_engine::store::GuardedWriter):
//! a transaction of the guards' `ConditionCheck`s and the lookup item's
//! write (a Put of the item as read with the new list, on the same
//! `unchanged` condition; a lookup item holds nothing but its list). If a
//! guard fails (the file was written again, the day refilled) the removal
//! is *withheld*: a normal outcome ([`Applied::withheld`]), and the change
//! that made it stale has its own stream record, which lists it. A group
//! commit holding guarded changes tries them together; withheld, it
//! commits the unguarded changes and then each guarded one alone, so one
//! stale removal never holds back the others.
//!
//! Additions are not guarded: listing is decided from the file being
//! present, and a file removed meanwhile has a REMOVE record, handled
//! after the INSERT of the same key (order is per item), which unlists it;
//! `rebuild-lookup` reads each listed file again after listing it.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use tokio::sync::oneshot;
use worker_engine::item::Item;
use worker_engine::metrics::WriteCounter;
use worker_engine::store::{Backoff, Expr, Key, Store, StoreError, WriteOutcome};
use worker_engine::store::{Guard, GuardedOp};

use super::rules::{self, Change, Listed, Op, Plan};
use crate::keys::{self, Child, FileTime, LookupKey};

/// Read-modify-write attempts on one item before giving up (transient).
const MAX_ATTEMPTS: u32 = 12;

/// Between attempts after a failed condition.
const BACKOFF: Backoff = Backoff {
    max_attempts: MAX_ATTEMPTS,
    base: Duration::from_millis(10),
    max: Duration::from_millis(500),
};

/// What a change did to one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The caller's ops changed what the item lists.
    pub changed: bool,
    /// The item lists nothing after the change (it is absent).
    pub empty_after: bool,
    /// The caller's ops were not applied: a guard stopped holding (the
    /// fact they were decided from changed).
    pub withheld: bool,
}

/// A lookup item as read.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The item's key.
    pub key: LookupKey,
    /// The item exists.
    pub exists: bool,
    /// Its `SavedDate`, as stored (the write's condition).
    pub saved: Option<AttributeValue>,
    /// The children `SavedDate` names, read leniently.
    pub listed: Listed,
    /// The item as read.
    pub item: Option<Item>,
}

impl Seen {
    /// What `item` (`None`: absent) shows of the lookup item `key`.
    pub fn from_item(key: LookupKey, item: Option<&Item>) -> Seen {
        let saved = item.and_then(|i| i.get(keys::SAVED_DATE)).cloned();
        Seen {
            key,
            exists: item.is_some(),
            listed: rules::read_list(key, saved.as_ref()),
            saved,
            item: item.cloned(),
        }
    }

    /// A guard that this item is still exactly as seen (a decision read
    /// from it, e.g. "it lists nothing").
    pub fn guard(&self) -> Guard {
        Guard::new(self.key.key(), self.unchanged())
    }

    /// The condition that the item is still exactly as seen.
    pub fn unchanged(&self) -> Expr {
        match (&self.saved, self.exists) {
            (_, false) => Expr::not_exists(keys::PK),
            (Some(v), true) => Expr::new("#sd = :seen")
                .name("#sd", keys::SAVED_DATE)
                .value(":seen", v.clone()),
            (None, true) => Expr::new("attribute_exists(#pk) AND attribute_not_exists(#sd)")
                .name("#pk", keys::PK)
                .name("#sd", keys::SAVED_DATE),
        }
    }
}

struct Waiter {
    ops: Vec<Op>,
    guards: Vec<Guard>,
    reply: oneshot::Sender<Result<Applied, StoreError>>,
}

/// The lookup items of one table, changed through group commits.
pub struct LookupStore {
    store: Arc<dyn Store>,
    writes: Arc<WriteCounter>,
    metric: &'static str,
    /// Changes waiting, by item; an entry exists while a leader runs.
    queues: Mutex<HashMap<LookupKey, Vec<Waiter>>>,
}

impl LookupStore {
    /// Writes are counted in `writes` under `metric`.
    pub fn new(store: Arc<dyn Store>, writes: Arc<WriteCounter>, metric: &'static str) -> Self {
        LookupStore {
            store,
            writes,
            metric,
            queues: Mutex::default(),
        }
    }

    fn queues(&self) -> MutexGuard<'_, HashMap<LookupKey, Vec<Waiter>>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A strongly consistent read of a lookup item.
    pub async fn read(&self, key: LookupKey) -> Result<Seen, StoreError> {
        let item = self.store.get(&key.key(), true).await?;
        let seen = Seen::from_item(key, item.as_ref());
        if seen.listed.unreadable > 0 {
            tracing::warn!(
                lookup = %key,
                unreadable = seen.listed.unreadable,
                "lookup item has entries that name nothing; the next write drops them"
            );
        }
        Ok(seen)
    }

    /// Apply `ops` to one item (with whatever else is queued for it).
    pub async fn apply(&self, key: LookupKey, ops: Vec<Op>) -> Result<Applied, StoreError> {
        self.apply_guarded(key, ops, Vec::new()).await
    }

    /// Apply `ops` to one item only while every guard holds (the facts
    /// about other items they were decided from); see the module docs.
    pub async fn apply_guarded(
        &self,
        key: LookupKey,
        ops: Vec<Op>,
        guards: Vec<Guard>,
    ) -> Result<Applied, StoreError> {
        let (reply, answer) = oneshot::channel();
        let waiter = Waiter { ops, guards, reply };
        let lead = match self.queues().entry(key) {
            Entry::Occupied(mut e) => {
                e.get_mut().push(waiter);
                false
            }
            Entry::Vacant(e) => {
                e.insert(vec![waiter]);
                true
            }
        };
        if lead {
            self.lead(key).await;
        }
        answer.await.unwrap_or_else(|_| Err(abandoned(key)))
    }

    /// Commit what is queued for `key` until nothing is.
    async fn lead(&self, key: LookupKey) {
        let mut guard = Leading {
            owner: self,
            key,
            done: false,
        };
        loop {
            let batch = {
                let mut queues = self.queues();
                let waiting = queues.get_mut(&key).map(std::mem::take).unwrap_or_default();
                if waiting.is_empty() {
                    queues.remove(&key);
                    guard.done = true;
                    return;
                }
                waiting
            };
            self.commit_batch(key, batch).await;
        }
    }

    /// Commit one batch of waiters: together when no guard fails; else
    /// the unguarded ones together, then each guarded one alone.
    async fn commit_batch(&self, key: LookupKey, batch: Vec<Waiter>) {
        let together = union_of_guards(&batch);
        if let Some(guards) = together {
            let ops: Vec<Op> = batch.iter().flat_map(|w| w.ops.iter().copied()).collect();
            match self.commit(key, &ops, &guards).await {
                // Several waiters: find the ones still good, below.
                Ok(Committed::Withheld) if batch.len() > 1 => {}
                result => return answer(batch, &result),
            }
        }
        let (guarded, plain): (Vec<Waiter>, Vec<Waiter>) =
            batch.into_iter().partition(|w| !w.guards.is_empty());
        if !plain.is_empty() {
            let ops: Vec<Op> = plain.iter().flat_map(|w| w.ops.iter().copied()).collect();
            let result = self.commit(key, &ops, &[]).await;
            answer(plain, &result);
        }
        for w in guarded {
            let result = self.commit(key, &w.ops, &dedup(&w.guards)).await;
            answer(vec![w], &result);
        }
    }

    /// One read-modify-write of `key`, retried on a failed condition; with
    /// guards, as a guarded write (withheld when a guard fails).
    async fn commit(
        &self,
        key: LookupKey,
        ops: &[Op],
        guards: &[Guard],
    ) -> Result<Committed, StoreError> {
        for attempt in 1..=MAX_ATTEMPTS {
            let seen = self.read(key).await?;
            let plan = rules::plan(seen.exists, &seen.listed, ops);
            let written = match &plan.change {
                Change::Unchanged => return Ok(Committed::Applied(plan)),
                _ if !guards.is_empty() => {
                    let op = match &plan.change {
                        Change::Write(list) => {
                            let mut item = seen.item.clone().unwrap_or_else(|| key.key());
                            item.insert(keys::SAVED_DATE.to_owned(), list_value(list));
                            GuardedOp::Put {
                                item,
                                condition: Some(seen.unchanged()),
                            }
                        }
                        _ => GuardedOp::Delete {
                            key: key.key(),
                            condition: Some(seen.unchanged()),
                        },
                    };
                    let report = self.store.write_guarded(guards, vec![op]).await?;
                    if !report.held() {
                        tracing::info!(lookup = %key, "removal withheld: what it was decided from changed");
                        return Ok(Committed::Withheld);
                    }
                    report.applied > 0
                }
                Change::Write(list) => {
                    let set = Expr::new("SET #sd = :list")
                        .name("#sd", keys::SAVED_DATE)
                        .value(":list", list_value(list));
                    self.store
                        .update(&key.key(), set, Some(seen.unchanged()))
                        .await?
                        == WriteOutcome::Applied
                }
                Change::Delete => {
                    self.store
                        .delete(&key.key(), Some(seen.unchanged()))
                        .await?
                        == WriteOutcome::Applied
                }
            };
            if written {
                self.writes.add(self.metric, 1);
                return Ok(Committed::Applied(plan));
            }
            tracing::debug!(lookup = %key, attempt, "lookup item changed since read; again");
            tokio::time::sleep(BACKOFF.delay(attempt)).await;
        }
        Err(StoreError::Transient {
            operation: "UpdateItem",
            code: "LookupContention".into(),
            message: format!("lookup item {key} changed under each of {MAX_ATTEMPTS} attempts"),
        })
    }

    /// List the file at `t`: its day, month, year and the root, bottom-up.
    /// Returns how many items this call changed.
    pub async fn list_file(&self, t: FileTime) -> Result<usize, StoreError> {
        let mut changed = 0;
        for (key, child) in rules::path(t) {
            changed += usize::from(self.apply(key, vec![Op::Add(child)]).await?.changed);
        }
        Ok(changed)
    }

    /// Unlist the file at `t`, decided from the file being absent under
    /// `gone` (the keys read; its spellings when empty); each item it
    /// leaves empty is taken out of its parent. Returns how many items
    /// this call changed; nothing when the file came back meanwhile.
    pub async fn unlist_file(&self, t: FileTime, gone: &[Key]) -> Result<usize, StoreError> {
        let day = LookupKey::Day(t.date());
        let applied = self
            .apply_guarded(day, vec![Op::Remove(Child::File(t))], file_gone(t, gone))
            .await?;
        let mut changed = usize::from(applied.changed);
        if applied.empty_after && !applied.withheld {
            changed += self.unlink(day).await?;
        }
        Ok(changed)
    }

    /// `key` was seen empty (absent): take it out of its parent, and on up
    /// while that leaves the parent empty; each removal only while the
    /// child is still absent (withheld once it is refilled: its refiller
    /// lists it). Each removal is followed by a fresh read of the child:
    /// one listing something again is listed again, up to the root.
    pub async fn unlink(&self, key: LookupKey) -> Result<usize, StoreError> {
        let mut changed = 0;
        let mut child = key;
        while let Some(parent) = child.parent() {
            let applied = self
                .apply_guarded(
                    parent,
                    vec![Op::Remove(Child::Lookup(child))],
                    vec![Guard::absent(child.key(), keys::PK)],
                )
                .await?;
            if applied.withheld {
                tracing::info!(lookup = %child, "refilled meanwhile: left listed");
                return Ok(changed);
            }
            changed += usize::from(applied.changed);
            if !self.read(child).await?.listed.children.is_empty() {
                tracing::info!(lookup = %child, "refilled meanwhile: listed again");
                return Ok(changed + self.relist(child).await?);
            }
            if !applied.empty_after {
                break;
            }
            child = parent;
        }
        Ok(changed)
    }

    /// List `key` in its parent, and so on up to the root.
    pub async fn relist(&self, key: LookupKey) -> Result<usize, StoreError> {
        let mut changed = 0;
        let mut child = key;
        while let Some(parent) = child.parent() {
            let applied = self
                .apply(parent, vec![Op::Add(Child::Lookup(child))])
                .await?;
            changed += usize::from(applied.changed);
            child = parent;
        }
        Ok(changed)
    }
}

/// Fails the waiters of a leader that stopped before answering them (its
/// future dropped), so none waits forever and the next caller leads.
struct Leading<'a> {
    owner: &'a LookupStore,
    key: LookupKey,
    done: bool,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let left = self.owner.queues().remove(&self.key).unwrap_or_default();
        for waiter in left {
            let _ = waiter.reply.send(Err(abandoned(self.key)));
        }
    }
}

/// What one commit did.
enum Committed {
    Applied(Plan),
    /// A guard failed: nothing written.
    Withheld,
}

/// Answer `batch`'s waiters with their part of `result`.
fn answer(batch: Vec<Waiter>, result: &Result<Committed, StoreError>) {
    let mut offset = 0;
    for waiter in batch {
        let n = waiter.ops.len();
        let reply = match result {
            Ok(Committed::Applied(plan)) => Ok(Applied {
                changed: plan.changed[offset..offset + n].iter().any(|c| *c),
                empty_after: plan.after.is_empty(),
                withheld: false,
            }),
            Ok(Committed::Withheld) => Ok(Applied {
                changed: false,
                empty_after: false,
                withheld: true,
            }),
            Err(e) => Err(e.clone()),
        };
        offset += n;
        let _ = waiter.reply.send(reply);
    }
}

/// Guards without repeats.
fn dedup(guards: &[Guard]) -> Vec<Guard> {
    let mut out: Vec<Guard> = Vec::new();
    for g in guards {
        if !out.contains(g) {
            out.push(g.clone());
        }
    }
    out
}

/// Every waiter's guards, for one transaction: `None` when they cannot go
/// in one (two conditions on one item, or too many).
fn union_of_guards(batch: &[Waiter]) -> Option<Vec<Guard>> {
    let all: Vec<Guard> = batch
        .iter()
        .flat_map(|w| w.guards.iter().cloned())
        .collect();
    let guards = dedup(&all);
    let distinct = guards
        .iter()
        .enumerate()
        .all(|(i, g)| guards[..i].iter().all(|h| h.key != g.key));
    (distinct && guards.len() < MAX_GUARDS).then_some(guards)
}

/// Guards of one transaction, at most (the rest of its 100 actions is the
/// write).
const MAX_GUARDS: usize = 99;

/// The guards of "the file at `t` is gone": absent under every key read
/// (its spellings, and any other key the decision read).
pub fn file_gone(t: FileTime, read: &[Key]) -> Vec<Guard> {
    let mut read_keys = t.spellings();
    for k in read {
        if !read_keys.contains(k) {
            read_keys.push(k.clone());
        }
    }
    read_keys
        .into_iter()
        .map(|k| Guard::absent(k, keys::PK))
        .collect()
}

fn list_value(list: &[String]) -> AttributeValue {
    AttributeValue::L(list.iter().map(|e| AttributeValue::S(e.clone())).collect())
}

fn abandoned(key: LookupKey) -> StoreError {
    StoreError::Transient {
        operation: "UpdateItem",
        code: "Abandoned".into(),
        message: format!("the change of lookup item {key} was abandoned; retry"),
    }
}
