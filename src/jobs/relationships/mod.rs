//! Relationship consistency: stream cascades and a scheduled audit that
//! repairs drift without deleting live data. Every rule of the job is in
//! this directory, and summarised here:
//!
//! - [`rules`]: the pure decisions (graph, violations, suspects, re-check
//!   verdicts, repairs, checkpoint), unit-tested without a database;
//! - this file: the store access shared by both sides, the cascades and the
//!   stream handler;
//! - [`audit`]: the scheduled audit (I/O around the rules) and its report.
//!
//! # Invariants
//! 1. every membership (`user`/`Group#g`) has a live User and a live Group;
//! 2. every container link (`g`/`Container#c`) has a live Group and Container;
//! 3. every Container is linked from exactly one live group;
//! 4. every invitation link belongs to a live Group;
//! 5. every Group has at least one live member (membership + live User);
//! 6. worker-owned items (expiry flags `g`/`ExpiringFood#c#f`, reminders
//!    `ExpiryReminder#d`/`c#f`) go when their group or container goes.
//!
//! # Stream side ([`RelationshipHandler`]): removals only
//! - **Group REMOVE** → consistent GetItem: if the group exists again (an old
//!   record replayed) nothing happens. Otherwise [`cascade_group`]: members
//!   (index `UserAndGroupRelationship`), the group partition (links,
//!   invitation, flags), and each linked container unless it is already
//!   gone or a *live* other group links it too (index
//!   `GroupAndContainerRelationship` + consistent reads; all containers'
//!   checks at once). Order: containers first (they are found through the links,
//!   which go after them, so a retry after a partial failure finds them
//!   again), the invitation (conditional on the hash and expiry read), flags
//!   and links, memberships. A membership the index does not show yet (a
//!   join racing the deletion) is left to the audit.
//! - **User REMOVE** → consistent GetItem; if absent, delete the memberships
//!   in the user's partition. The group side follows from those removals.
//! - **Container REMOVE** → consistent GetItem; if absent, delete the links
//!   pointing to it (index) from groups that still exist (consistent reads;
//!   a removed group's links are its own cascade's). Its flags and reminders
//!   are removed by the expiry job on the same record; the audit repairs any
//!   it misses.
//! - **Membership REMOVE** → if the group still exists (consistent GetItem),
//!   the index shows no membership of it, and the membership is still gone
//!   (consistent GetItem; the index may lag), record an `EmptyGroup` suspect
//!   (first seen now) for the audit. Never deletes a group. The reads go in
//!   that order and stop at the first that decides: a group deletion's
//!   memberships end at the first, an ordinary leave at the second.
//! - INSERT/MODIFY are never acted on: the service writes parents and
//!   children with separate unordered calls, so a missing parent may simply
//!   not be written yet. Bulk deletes go through BatchWriteItem. Replaying a
//!   record gives the same table (everything is keyed, the suspect note is a
//!   conditional put that keeps the first-seen time).
//!
//! # Audit ([`AuditJob`], tick `audit`, daily)
//! A tick does, in order, while `JobRun::has_time()`:
//! 1. **Due suspects.** Every suspect record (`AuditSuspect`/
//!    `<Violation>#<subject PK>#<subject SK>`, attribute `FirstSeen`) older
//!    than its grace ([`grace`]: `AUDIT_GRACE_SECS`, `EMPTY_GROUP_GRACE_SECS`
//!    for empty groups) is re-checked with strongly consistent reads
//!    ([`still_violates`]). Healed → the record is deleted. Still violating →
//!    repaired ([`plan_repair`]) and the record deleted, except report-only
//!    cases (a container linked from two live groups; empty groups under
//!    `EMPTY_GROUP_POLICY=report`), which stay recorded and are reported.
//!    Suspects within grace are left alone (`still_suspect`).
//! 2. **Scan.** A parallel scan (`AUDIT_SEGMENTS`) projecting only `PK`, `SK`,
//!    `GroupId`, `ContainerId` (relationships are in the keys; the index
//!    attributes are checked against them) builds the graph ([`Graph`]), and
//!    [`find_violations`] lists every violation. Each violation without a
//!    suspect record gets one (`attribute_not_exists` put, so first-seen is
//!    never reset). A violation is never repaired in the tick that found it.
//!
//! **Resumable scan.** The position of each segment (its LastEvaluatedKey, or
//! "done") is saved in `WorkerCheckpoint`/`audit` when a tick stops early; the
//! next tick continues the same pass. The scan stops at the deadline margin
//! or when 3/4 of the tick's time is spent, keeping time to evaluate what it
//! read. Correctness across ticks: a tick evaluates exactly the items *it*
//! read. When one tick read the whole table, absence from the graph is
//! absence. When a pass spans ticks, references to items outside this
//! tick's part are resolved by targeted lookups ([`lookups_needed`]):
//! GetItem for parents, an index query for the members of a group or the
//! links of a container; what stays unknown is never a violation. Since
//! nothing is repaired without a later consistent re-check, a stale or
//! partial view can at worst create a suspect that heals. If a tick runs
//! out of time while evaluating, its checkpoint is not advanced (the part
//! is read again next tick; recording suspects is idempotent).
//!
//! **Repairs** never trust the scan: each re-reads consistently right before
//! writing. Containers are deleted only when no live group links them (the
//! re-check follows every index entry to the link item and its group). An
//! invitation is deleted only if its hash and expiry are still the ones read.
//! An empty group is deleted with a condition on the group item as read,
//! right after re-querying its members, then [`cascade_group`] runs. Index
//! queries are eventually consistent (DynamoDB offers nothing else): a member
//! written within the index lag before the final re-check of a group empty
//! for the whole grace period is the one residual race.
//!
//! Orphan worker items are recorded under their missing owner
//! (`OrphanWorkerItem#<owner PK>#<owner SK>`) with the orphan keys listed in
//! the attribute `Items`, because reminders live in date partitions that
//! cannot be found again from the container.
//!
//! **Report** ([`AuditReport`], the job's `details`): per violation kind
//! found / new suspects / repaired / still suspect / healed / reported /
//! conflicts; items scanned, pages, consumed read capacity of scans and
//! queries, GetItem count, write requests (repairs vs bookkeeping), and
//! whether the tick and the pass completed. Under `--dry-run`
//! (`DryRunStore`) the same report says what would be repaired.

pub mod audit;
pub mod rules;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;

pub use audit::{AuditJob, AuditOptions, AuditReport, KindCounts};
pub use rules::*;

use super::{JobDeps, JobSpec};
use crate::config::{ConfigError, Env, EnvVar, ReadBy};
use crate::items::{Item, attr};
use crate::keys::{ContainerId, GroupId, ItemKey, ItemKind, Job, PK, UserId, Violation};
use crate::schema::{GROUP_AND_CONTAINER_INDEX, USER_AND_GROUP_INDEX};
use crate::worker::{BatchFacts, Change, ChangeHandler, HandlerOutcome};
use worker_engine::HandlerError;
use worker_engine::store::{
    Expr, Guard, GuardedOp, GuardedReport, QuerySpec, Store, StoreError, WriteOutcome,
};
use worker_engine::{Access, Schedule, ScheduleSpec, StreamSpec};

/// The metric the cascades' and the audit's repair writes count under.
pub const ITEMS_REPAIRED: &str = "ItemsRepaired";

/// The job, described once: stream cascades and the daily audit.
pub const SPEC: JobSpec = JobSpec {
    name: "relationships",
    summary: "stream cascades and a daily audit that repairs drift without deleting live data",
    env: &[
        EnvVar {
            name: "AUDIT_GRACE_SECS",
            read_by: &[ReadBy::Job(Job::Audit)],
            default: Some("3600"),
            meaning: "a violation must persist this long before it is repaired",
        },
        EnvVar {
            name: "EMPTY_GROUP_GRACE_SECS",
            read_by: &[ReadBy::Job(Job::Audit)],
            default: Some("86400"),
            meaning: "the same, for groups without members",
        },
        EnvVar {
            name: "EMPTY_GROUP_POLICY",
            read_by: &[ReadBy::Job(Job::Audit)],
            default: Some("delete"),
            meaning: "delete or report empty groups",
        },
        EnvVar {
            name: "AUDIT_SEGMENTS",
            read_by: &[ReadBy::Job(Job::Audit)],
            default: Some("4"),
            meaning: "parallel scan segments of the audit",
        },
    ],
    // Consistent reads, index reads for members and links, and deletes
    // guarded by the removed parent's absence (TransactWriteItems: a
    // ConditionCheck beside the deletes); partition reads, on the table and
    // on the indexes, are PartiQL SELECTs (the coalescing store's shared
    // requests), so no Query.
    stream: Some(StreamSpec {
        handler: "relationships",
        writes_metric: ITEMS_REPAIRED,
        access: Access {
            dynamodb_actions: &[
                "dynamodb:BatchGetItem",
                "dynamodb:ConditionCheckItem",
                "dynamodb:DeleteItem",
                "dynamodb:PartiQLSelect",
                "dynamodb:PutItem",
            ],
            indexes: &[USER_AND_GROUP_INDEX, GROUP_AND_CONTAINER_INDEX],
            fallbacks: &[],
            publishes_events: false,
        },
    }),
    scheduled: &[ScheduleSpec {
        job: Job::Audit,
        function: "AuditFunction",
        schedule: Schedule::Daily {
            zone_env: "EXPIRY_TIME_ZONE",
        },
        local_cron: "0 3 * * *",
        access: Access {
            dynamodb_actions: &[
                "dynamodb:ConditionCheckItem",
                "dynamodb:DeleteItem",
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:Query",
                "dynamodb:Scan",
            ],
            indexes: &[USER_AND_GROUP_INDEX, GROUP_AND_CONTAINER_INDEX],
            fallbacks: &[],
            publishes_events: false,
        },
        metrics: &[ITEMS_REPAIRED],
    }],
    handlers: |deps| vec![Arc::new(RelationshipHandler::new(deps))],
    jobs: |deps| vec![Arc::new(AuditJob::new(deps))],
};

/// What to do with a group nobody belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EmptyGroupPolicy {
    /// Delete it (with its containers, links, invitation and flags) after the grace period.
    Delete,
    /// Only report it.
    Report,
}

impl std::str::FromStr for EmptyGroupPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "delete" => Ok(EmptyGroupPolicy::Delete),
            "report" => Ok(EmptyGroupPolicy::Report),
            _ => Err("expected delete or report".into()),
        }
    }
}

/// The job's settings (the variables of [`SPEC`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RelationshipSettings {
    /// `AUDIT_GRACE_SECS` (default 1 hour): how long a violation must
    /// persist before the audit repairs it.
    pub audit_grace: std::time::Duration,
    /// `EMPTY_GROUP_GRACE_SECS` (default 1 day): the same, for a group
    /// without members.
    pub empty_group_grace: std::time::Duration,
    /// `EMPTY_GROUP_POLICY` (`delete`, the default, or `report`).
    pub empty_group_policy: EmptyGroupPolicy,
    /// `AUDIT_SEGMENTS` (default 4, kept within 1 to 64): segments of the
    /// audit's parallel scan.
    pub audit_segments: u32,
}

impl Default for RelationshipSettings {
    fn default() -> Self {
        RelationshipSettings {
            audit_grace: std::time::Duration::from_secs(3600),
            empty_group_grace: std::time::Duration::from_secs(86_400),
            empty_group_policy: EmptyGroupPolicy::Delete,
            audit_segments: 4,
        }
    }
}

impl RelationshipSettings {
    /// Read from the environment; defaults where unset.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let mut s = Self::default();
        if let Some(v) = env.number("AUDIT_GRACE_SECS")? {
            s.audit_grace = std::time::Duration::from_secs(v);
        }
        if let Some(v) = env.number("EMPTY_GROUP_GRACE_SECS")? {
            s.empty_group_grace = std::time::Duration::from_secs(v);
        }
        if let Some(v) = env.number("AUDIT_SEGMENTS")? {
            s.audit_segments = v.clamp(1, 64) as u32;
        }
        if let Some(v) = env.parse("EMPTY_GROUP_POLICY", str::parse)? {
            s.empty_group_policy = v;
        }
        Ok(s)
    }
}

/// What a cascade deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CascadeReport {
    /// Memberships deleted.
    pub memberships: usize,
    /// Container links deleted.
    pub links: usize,
    /// Containers deleted.
    pub containers: usize,
    /// Containers kept because another live group links them.
    pub containers_kept: usize,
    /// Linked containers already gone (the service deletes a group's
    /// containers itself): nothing to delete.
    pub containers_gone: usize,
    /// Invitation links deleted (0 or 1).
    pub invitations: usize,
    /// Invitations kept because they changed since they were read.
    pub invitations_kept: usize,
    /// Expiry flags deleted.
    pub flags: usize,
    /// Deletes that landed, all kinds together.
    pub writes: usize,
    /// Deletes not made because what they were decided from changed before
    /// they landed (the group, or a group that linked a container, exists
    /// again): that change has its own record.
    pub withheld: usize,
}

impl CascadeReport {
    fn describe(&self) -> String {
        let mut d = format!(
            "deleted {} memberships, {} links, {} containers ({} kept: linked by a live group; \
             {} already gone), {} invitations ({} kept: changed), {} flags",
            self.memberships,
            self.links,
            self.containers,
            self.containers_kept,
            self.containers_gone,
            self.invitations,
            self.invitations_kept,
            self.flags
        );
        if self.withheld > 0 {
            d.push_str(&withheld_note(self.withheld));
        }
        d
    }
}

/// How an outcome says that guarded deletes were withheld.
fn withheld_note(n: usize) -> String {
    format!("; {n} deletes withheld: what they were decided from changed before they landed")
}

/// The store, with the reads and writes of one handler call or tick counted.
struct Io<'a> {
    store: &'a dyn Store,
    gets: AtomicU64,
    queries: AtomicU64,
    /// Milli-RCU of queries.
    query_milli: AtomicU64,
    writes: AtomicU64,
    /// Writes a guard withheld (their decision went stale before they landed).
    withheld: AtomicU64,
}

impl<'a> Io<'a> {
    fn new(store: &'a dyn Store) -> Self {
        Io {
            store,
            gets: AtomicU64::new(0),
            queries: AtomicU64::new(0),
            query_milli: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            withheld: AtomicU64::new(0),
        }
    }

    fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    fn withheld(&self) -> u64 {
        self.withheld.load(Ordering::Relaxed)
    }

    async fn get(&self, key: &ItemKey) -> Result<Option<Item>, StoreError> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.store.get(&key.to_attributes(), true).await
    }

    async fn exists(&self, key: &ItemKey) -> Result<bool, StoreError> {
        Ok(self.get(key).await?.is_some())
    }

    /// Every key a query returns (following pages), undecodable keys skipped.
    async fn query_keys(&self, spec: &QuerySpec) -> Result<Vec<(ItemKey, Item)>, StoreError> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            self.queries.fetch_add(1, Ordering::Relaxed);
            let page = self.store.query_page(spec, start).await?;
            self.query_milli.fetch_add(
                (page.consumed_capacity * 1000.0).round() as u64,
                Ordering::Relaxed,
            );
            for item in page.items {
                if let Ok(k) = ItemKey::from_attributes(&item) {
                    out.push((k, item));
                }
            }
            match page.last_evaluated_key {
                Some(k) => start = Some(k),
                None => return Ok(out),
            }
        }
    }

    /// Memberships of a group, from the index.
    async fn memberships_of(&self, group: GroupId) -> Result<Vec<UserId>, StoreError> {
        let spec =
            QuerySpec::partition(attr::GROUP_ID, &group.to_string()).on_index(USER_AND_GROUP_INDEX);
        Ok(self
            .query_keys(&spec)
            .await?
            .into_iter()
            .filter_map(|(k, _)| match k {
                ItemKey::Membership { user, group: g } if g == group => Some(user),
                _ => None,
            })
            .collect())
    }

    /// Groups linking a container, from the index.
    async fn links_to(&self, container: ContainerId) -> Result<Vec<GroupId>, StoreError> {
        let spec = QuerySpec::partition(attr::CONTAINER_ID, &container.to_string())
            .on_index(GROUP_AND_CONTAINER_INDEX);
        Ok(self
            .query_keys(&spec)
            .await?
            .into_iter()
            .filter_map(|(k, _)| match k {
                ItemKey::ContainerLink {
                    group,
                    container: c,
                } if c == container => Some(group),
                _ => None,
            })
            .collect())
    }

    /// Every item of one partition, read consistently.
    async fn partition(&self, pk_of: &ItemKey) -> Result<Vec<(ItemKey, Item)>, StoreError> {
        let (pk, _) = pk_of.encode();
        let mut spec = QuerySpec::partition(PK, &pk);
        spec.consistent = true;
        self.query_keys(&spec).await
    }

    /// Links to `container` whose link item and group are live (consistent
    /// reads behind the index), ignoring `except`; with, for every other
    /// link the index shows, the absence that makes it dead (the link item
    /// or its group): the facts a "no live link" decision rests on.
    async fn live_links(
        &self,
        container: ContainerId,
        except: Option<GroupId>,
    ) -> Result<Liveness, StoreError> {
        let groups = self.links_to(container).await?;
        // Every link and group at once: one round of shared point reads.
        let checks = groups
            .into_iter()
            .filter(|g| Some(*g) != except)
            .map(|group| async move {
                let link = ItemKey::ContainerLink { group, container };
                let group = ItemKey::Group(group);
                let (l, g) = futures::try_join!(self.exists(&link), self.exists(&group))?;
                Ok::<_, StoreError>(match (l, g) {
                    (true, true) => None,
                    (false, _) => Some(link),
                    (true, false) => Some(group),
                })
            });
        let mut out = Liveness::default();
        for dead in futures::future::try_join_all(checks).await? {
            match dead {
                None => out.live += 1,
                Some(absent) => out.absent.push(absent),
            }
        }
        Ok(out)
    }

    /// Of `groups`, those whose Group item exists ([`super::existing_groups`]).
    async fn live_groups(&self, groups: Vec<GroupId>) -> Result<Vec<GroupId>, StoreError> {
        self.gets.fetch_add(groups.len() as u64, Ordering::Relaxed);
        super::existing_groups(self.store, groups).await
    }

    /// Members of `group` whose membership and user are live (stops at
    /// `enough`), with the absence that makes each other one dead.
    async fn live_members(&self, group: GroupId, enough: usize) -> Result<Liveness, StoreError> {
        let mut out = Liveness::default();
        for user in self.memberships_of(group).await? {
            let m = ItemKey::Membership { user, group };
            if !self.exists(&m).await? {
                out.absent.push(m);
            } else if !self.exists(&ItemKey::User(user)).await? {
                out.absent.push(ItemKey::User(user));
            } else {
                out.live += 1;
                if out.live >= enough {
                    break;
                }
            }
        }
        Ok(out)
    }

    async fn delete(
        &self,
        key: &ItemKey,
        condition: Option<Expr>,
    ) -> Result<WriteOutcome, StoreError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.store.delete(&key.to_attributes(), condition).await
    }

    async fn put(&self, item: Item, condition: Option<Expr>) -> Result<WriteOutcome, StoreError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.store.put(item, condition).await
    }

    /// Writes that land only while every item of `absent` is still absent
    /// (TransactWriteItems, a ConditionCheck per item beside the writes:
    /// see `worker_engine::store::guarded`). A write decided from another
    /// item's absence goes through here, never unconditionally.
    async fn write_while_absent(
        &self,
        absent: &[ItemKey],
        ops: Vec<GuardedOp>,
    ) -> Result<GuardedReport, StoreError> {
        if ops.is_empty() {
            return Ok(GuardedReport::default());
        }
        let guards: Vec<Guard> = absent
            .iter()
            .map(|k| Guard::absent(k.to_attributes(), PK))
            .collect();
        let report = self.store.write_guarded(&guards, ops).await?;
        self.writes
            .fetch_add(report.applied as u64, Ordering::Relaxed);
        self.withheld
            .fetch_add(report.withheld as u64, Ordering::Relaxed);
        Ok(report)
    }

    /// Deletes of `keys`, each landing only while every item of `absent`
    /// is still absent; how many landed.
    async fn delete_while_absent(
        &self,
        absent: &[ItemKey],
        keys: &[ItemKey],
    ) -> Result<GuardedReport, StoreError> {
        let ops = keys
            .iter()
            .map(|k| GuardedOp::delete(k.to_attributes()))
            .collect();
        self.write_while_absent(absent, ops).await
    }
}

/// What a liveness check found: how many live, and for each dead one the
/// absent item that makes it dead (a decision taken on "none live" is
/// guarded by those absences when it is written).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Liveness {
    pub live: usize,
    pub absent: Vec<ItemKey>,
}

/// Delete everything hanging off a group that is gone (the caller has
/// checked, with a consistent read or a conditional delete, that it is).
/// Every delete lands only while the group is still absent; a container's
/// only while the other groups that linked it are still dead too.
pub async fn cascade_group(store: &dyn Store, group: GroupId) -> Result<CascadeReport, StoreError> {
    cascade_group_io(&Io::new(store), group).await
}

/// [`cascade_group`] through `io` (its reads and writes counted there):
/// read what hangs off the group, check its linked containers, then delete.
async fn cascade_group_io(io: &Io<'_>, group: GroupId) -> Result<CascadeReport, StoreError> {
    let writes_before = io.writes();
    let withheld_before = io.withheld();
    let mut r = CascadeReport::default();
    let items = read_group_items(io, group).await?;
    let containers = check_containers(io, group, &items.links, &mut r).await?;
    // Order matters for retries: containers first (found through the
    // links, which go after them, so a retry after a partial run finds them
    // again), then flags and links, memberships, and the invitation last
    // (its own transaction: it is deleted only if its hash and expiry are
    // still the ones read; last, it does not split the others). Each
    // transaction checks that the group is still absent; the first that
    // finds it back stops the rest.
    if delete_shared_containers(io, group, containers.shared, &mut r).await? {
        delete_group_items(io, group, &containers.alone, &items, &mut r).await?;
    }
    r.writes = (io.writes() - writes_before) as usize;
    r.withheld = (io.withheld() - withheld_before) as usize;
    Ok(r)
}

/// What hangs off a group: its memberships (from the index) and, from its
/// partition, its container links, expiry flags and invitation (as read).
struct GroupItems {
    members: Vec<ItemKey>,
    links: Vec<ItemKey>,
    flags: Vec<ItemKey>,
    invitation: Option<Item>,
}

/// The linked containers a cascade deletes: those no other group linked
/// (with the group's own deletes), and those other, dead, groups linked
/// too (each with those groups' absences as guards).
struct ContainerDeletes {
    alone: Vec<ItemKey>,
    shared: Vec<(ItemKey, Vec<ItemKey>)>,
}

/// Read what hangs off a group.
async fn read_group_items(io: &Io<'_>, group: GroupId) -> Result<GroupItems, StoreError> {
    let members: Vec<ItemKey> = io
        .memberships_of(group)
        .await?
        .into_iter()
        .map(|user| ItemKey::Membership { user, group })
        .collect();
    let mut items = GroupItems {
        members,
        links: Vec::new(),
        flags: Vec::new(),
        invitation: None,
    };
    for (key, item) in io.partition(&ItemKey::Group(group)).await? {
        match key {
            ItemKey::ContainerLink { .. } => items.links.push(key),
            ItemKey::ExpiringFood { .. } => items.flags.push(key),
            ItemKey::InvitationLink(_) => items.invitation = Some(item),
            _ => {}
        }
    }
    Ok(items)
}

/// Check every linked container at once (their reads share requests): kept
/// if another live group links it (counted), skipped if already gone
/// (counted), otherwise deleted alone or guarded by the other links' dead
/// groups.
async fn check_containers(
    io: &Io<'_>,
    group: GroupId,
    links: &[ItemKey],
    r: &mut CascadeReport,
) -> Result<ContainerDeletes, StoreError> {
    let checks = links.iter().filter_map(|link| match link {
        ItemKey::ContainerLink { container, .. } => Some(async move {
            let key = ItemKey::Container(*container);
            let (exists, others) =
                futures::try_join!(io.exists(&key), io.live_links(*container, Some(group)))?;
            Ok::<_, StoreError>((key, exists, others))
        }),
        _ => None,
    });
    let mut deletes = ContainerDeletes {
        alone: Vec::new(),
        shared: Vec::new(),
    };
    for (key, exists, others) in futures::future::try_join_all(checks).await? {
        if others.live > 0 {
            r.containers_kept += 1;
        } else if !exists {
            r.containers_gone += 1;
        } else if others.absent.is_empty() {
            deletes.alone.push(key);
        } else {
            deletes.shared.push((key, others.absent));
        }
    }
    Ok(deletes)
}

/// Delete the containers other dead groups linked too, each only while the
/// group and those others are still absent; whether every guard held.
async fn delete_shared_containers(
    io: &Io<'_>,
    group: GroupId,
    shared: Vec<(ItemKey, Vec<ItemKey>)>,
    r: &mut CascadeReport,
) -> Result<bool, StoreError> {
    let mut held = true;
    for (key, mut absent) in shared {
        absent.push(ItemKey::Group(group));
        let report = io.delete_while_absent(&absent, &[key]).await?;
        r.containers += report.applied;
        held &= report.held();
    }
    Ok(held)
}

/// Delete, in one guarded sequence while the group is still absent, the
/// containers only it linked, its flags, links, memberships and (if
/// unchanged) its invitation; count what landed.
async fn delete_group_items(
    io: &Io<'_>,
    group: GroupId,
    containers: &[ItemKey],
    items: &GroupItems,
    r: &mut CascadeReport,
) -> Result<(), StoreError> {
    let ops = group_deletes(group, containers, items);
    let report = io.write_while_absent(&[ItemKey::Group(group)], ops).await?;
    count_deleted(r, &report, containers.len(), items);
    Ok(())
}

/// The deletes of [`delete_group_items`], in the order they are sent.
fn group_deletes(group: GroupId, containers: &[ItemKey], items: &GroupItems) -> Vec<GuardedOp> {
    let mut ops: Vec<GuardedOp> = containers
        .iter()
        .chain(&items.flags)
        .chain(&items.links)
        .chain(&items.members)
        .map(|k| GuardedOp::delete(k.to_attributes()))
        .collect();
    if let Some(item) = &items.invitation {
        ops.push(GuardedOp::Delete {
            key: ItemKey::InvitationLink(group).to_attributes(),
            condition: Some(unchanged(
                Some(item),
                &[attr::INVITATION_LINK_HASH, attr::LINK_EXPIRY_DATETIME],
            )),
        });
    }
    ops
}

/// Count what [`group_deletes`] deleted: everything when every guard held
/// (an invitation that changed is kept), else what landed, in the order
/// sent.
fn count_deleted(
    r: &mut CascadeReport,
    report: &GuardedReport,
    containers: usize,
    items: &GroupItems,
) {
    let invitations = usize::from(items.invitation.is_some());
    if report.held() {
        r.containers += containers;
        r.invitations = invitations - report.refused;
        r.invitations_kept = report.refused;
        r.flags = items.flags.len();
        r.links = items.links.len();
        r.memberships = items.members.len();
        return;
    }
    // Stopped part-way: say what landed, in the order sent.
    let mut left = report.applied;
    let mut take = |n: usize| {
        let t = n.min(left);
        left -= t;
        t
    };
    r.containers += take(containers);
    r.flags = take(items.flags.len());
    r.links = take(items.links.len());
    r.memberships = take(items.members.len());
    r.invitations = take(invitations);
}

/// The stream handler: cascades on removals of groups, users, containers,
/// and notes groups a membership removal may have emptied.
pub struct RelationshipHandler {
    store: Arc<dyn Store>,
}

impl RelationshipHandler {
    /// The handler over the stream store (its point reads and writes
    /// shared with the batch's other records).
    pub fn new(deps: &JobDeps) -> Self {
        RelationshipHandler {
            store: deps.stream_store.clone(),
        }
    }

    async fn group_removed(&self, io: &Io<'_>, g: GroupId) -> Result<HandlerOutcome, StoreError> {
        if io.exists(&ItemKey::Group(g)).await? {
            return Ok(HandlerOutcome::Nothing(
                "group exists (an old REMOVE replayed): nothing to cascade".into(),
            ));
        }
        let r = cascade_group_io(io, g).await?;
        Ok(outcome(r.writes, r.describe()))
    }

    async fn user_removed(&self, io: &Io<'_>, u: UserId) -> Result<HandlerOutcome, StoreError> {
        if io.exists(&ItemKey::User(u)).await? {
            return Ok(HandlerOutcome::Nothing(
                "user exists (an old REMOVE replayed): nothing to cascade".into(),
            ));
        }
        let memberships: Vec<ItemKey> = io
            .partition(&ItemKey::User(u))
            .await?
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| k.kind() == ItemKind::Membership)
            .collect();
        // Only while the user is still gone: a user written again (renamed
        // while being deleted) keeps its memberships.
        let report = io
            .delete_while_absent(&[ItemKey::User(u)], &memberships)
            .await?;
        let n = report.applied;
        let mut detail = format!("deleted {n} memberships of the removed user");
        if !report.held() {
            detail.push_str(&withheld_note(report.withheld));
        }
        Ok(outcome(n, detail))
    }

    async fn container_removed(
        &self,
        io: &Io<'_>,
        c: ContainerId,
    ) -> Result<HandlerOutcome, StoreError> {
        if io.exists(&ItemKey::Container(c)).await? {
            return Ok(HandlerOutcome::Nothing(
                "container exists (an old REMOVE replayed): nothing to cascade".into(),
            ));
        }
        // A link in a group that is gone is its group's cascade's (the
        // service deletes a group's containers with it, so both records
        // arrive): deleting it here too would only write twice.
        let groups = io.links_to(c).await?;
        let linked = groups.len();
        let links: Vec<ItemKey> = io
            .live_groups(groups)
            .await?
            .into_iter()
            .map(|group| ItemKey::ContainerLink {
                group,
                container: c,
            })
            .collect();
        let left = linked - links.len();
        // Only while the container is still gone.
        let report = io
            .delete_while_absent(&[ItemKey::Container(c)], &links)
            .await?;
        let n = report.applied;
        let mut detail = format!(
            "deleted {n} links to the removed container \
             ({left} in removed groups left to their cascades)"
        );
        if !report.held() {
            detail.push_str(&withheld_note(report.withheld));
        }
        Ok(outcome(n, detail))
    }

    async fn membership_removed(
        &self,
        io: &Io<'_>,
        user: UserId,
        group: GroupId,
        now: DateTime<Utc>,
    ) -> Result<HandlerOutcome, StoreError> {
        // Cheapest decisive read first: a group deletion removes every
        // membership (each comes back here), so most removals end at the
        // group read, and most of the rest at the index.
        if !io.exists(&ItemKey::Group(group)).await? {
            return Ok(HandlerOutcome::Nothing(
                "group gone: its own removal cascades".into(),
            ));
        }
        if !io.memberships_of(group).await?.is_empty() {
            return Ok(HandlerOutcome::Nothing("group still has members".into()));
        }
        // The index may lag behind a membership written again.
        if io.exists(&ItemKey::Membership { user, group }).await? {
            return Ok(HandlerOutcome::Nothing("membership exists again".into()));
        }
        let found = Found::new(Violation::EmptyGroup, ItemKey::Group(group));
        let note = Suspect::new(&found, now).to_item();
        Ok(match io.put(note, Some(Expr::not_exists(PK))).await? {
            WriteOutcome::Applied => outcome(1, "group may be empty: noted for the audit".into()),
            WriteOutcome::ConditionFailed => {
                HandlerOutcome::Nothing("group already noted for the audit".into())
            }
        })
    }
}

fn outcome(writes: usize, detail: String) -> HandlerOutcome {
    if writes == 0 {
        HandlerOutcome::Nothing(detail)
    } else {
        HandlerOutcome::Wrote { writes, detail }
    }
}

#[async_trait]
impl ChangeHandler<Change> for RelationshipHandler {
    fn name(&self) -> &'static str {
        "relationships"
    }

    fn wants(&self, kind: ItemKind) -> bool {
        matches!(
            kind,
            ItemKind::Group | ItemKind::User | ItemKind::Container | ItemKind::Membership
        )
    }

    async fn handle_in_batch(
        &self,
        change: &Change,
        now: DateTime<Utc>,
        _batch: &BatchFacts,
    ) -> Result<HandlerOutcome, HandlerError> {
        let cascade = plan_stream_change(change);
        if cascade == StreamCascade::LeftToAudit {
            return Ok(HandlerOutcome::Nothing(
                "inserts and modifies are left to the audit (a parent may not be written yet)"
                    .into(),
            ));
        }
        let io = Io::new(self.store.as_ref());
        let r = match cascade {
            StreamCascade::Group(g) => self.group_removed(&io, g).await,
            StreamCascade::User(u) => self.user_removed(&io, u).await,
            StreamCascade::Container(c) => self.container_removed(&io, c).await,
            StreamCascade::Membership { user, group } => {
                self.membership_removed(&io, user, group, now).await
            }
            StreamCascade::LeftToAudit | StreamCascade::NotRelationship => {
                Ok(HandlerOutcome::Nothing("not a relationship item".into()))
            }
        };
        r.map_err(HandlerError::from)
    }
}
