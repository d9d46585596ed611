//! The scheduled audit (`Job::Audit`): the I/O around [`super::rules`] and
//! the report (see the module docs of [`super`] for the whole job).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::RelationshipSettings;
use super::rules::*;
use super::{Io, cascade_group_io};
use crate::datetime;
use crate::items::{Item, attr};
use crate::jobs::JobDeps;
use crate::keys::{GroupId, ItemKey, ItemKind, Job, PK, SK, Violation};
use worker_engine::HandlerError;
use worker_engine::metrics::Metric;
use worker_engine::schedule::{JobReport, JobRun, ScheduledJob};
use worker_engine::store::{Expr, GuardedOp, ScanSpec, Store, StoreError, WriteOutcome};

/// Repaired keys listed in the report (the counts are always complete).
const MAX_LISTED_REPAIRS: usize = 200;

/// At most this many absences guard one repair (a transaction holds 100
/// actions); a verdict resting on more is reported, never repaired
/// unguarded.
const MAX_REPAIR_GUARDS: usize = 50;

/// Counts for one violation kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindCounts {
    /// Seen by this tick's scan.
    pub found: u64,
    /// Suspect records created by this tick.
    pub new_suspects: u64,
    /// Confirmed by a consistent re-check after grace, and repaired.
    pub repaired: u64,
    /// Recorded earlier, grace not over yet (or not re-checked: no time left).
    pub still_suspect: u64,
    /// Re-check found no violation any more; the record was cleared.
    pub healed: u64,
    /// Confirmed but report-only (policy or a human decision).
    pub reported: u64,
    /// The subject changed between the re-check and the delete: kept.
    pub conflicts: u64,
}

/// What one audit tick did (the job's `details`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditReport {
    /// Counts per violation, by name ([`Violation::as_str`]); every
    /// violation is listed, zeros included.
    pub violations: BTreeMap<String, KindCounts>,
    /// Items the scan read in this tick (every kind).
    pub items_scanned: u64,
    /// Scan pages read in this tick.
    pub pages: u64,
    /// Consumed read capacity of scans and queries (GetItem calls are counted
    /// in `get_requests`: the store returns no capacity for them).
    pub read_capacity: f64,
    /// GetItem requests sent.
    pub get_requests: u64,
    /// Query requests sent.
    pub query_requests: u64,
    /// Every write request (single or inside a batch).
    pub write_requests: u64,
    /// Of which repairs (deletes of drifted items).
    pub repair_writes: u64,
    /// Of which suspect records and the checkpoint.
    pub bookkeeping_writes: u64,
    /// Items whose key is not a key of this table ([`Graph::unreadable_keys`]):
    /// reported, never touched.
    pub unreadable_keys: u64,
    /// Memberships and links whose index attribute disagrees with their
    /// sort key ([`Graph::index_attribute_mismatches`]): reported.
    pub index_attribute_mismatches: u64,
    /// Suspect records that did not decode: deleted, with a warning.
    pub unusable_suspect_records: u64,
    /// Suspects deferred because the tick ran out of time.
    pub deferred_suspects: u64,
    /// Whether this tick read the whole table by itself.
    pub whole_table: bool,
    /// Whether the scan pass finished in this tick.
    pub pass_complete: bool,
    /// When the current pass started (canonical datetime).
    pub pass_started_at: String,
    /// Ticks spent on the current pass so far.
    pub pass_ticks: u64,
    /// Everything this tick had to do was done (else the next tick continues).
    pub complete: bool,
    /// Repaired subjects as `PK / SK` (ids only), at most 200.
    pub repaired_keys: Vec<String>,
    /// Wall-clock time of the tick, in milliseconds.
    pub elapsed_ms: u64,
}

impl AuditReport {
    fn kind(&mut self, v: Violation) -> &mut KindCounts {
        self.violations.entry(v.as_str().to_owned()).or_default()
    }

    fn totals(&self) -> KindCounts {
        self.violations
            .values()
            .fold(KindCounts::default(), |a, c| KindCounts {
                found: a.found + c.found,
                new_suspects: a.new_suspects + c.new_suspects,
                repaired: a.repaired + c.repaired,
                still_suspect: a.still_suspect + c.still_suspect,
                healed: a.healed + c.healed,
                reported: a.reported + c.reported,
                conflicts: a.conflicts + c.conflicts,
            })
    }

    /// One line for logs and the CLI.
    pub fn summary(&self) -> String {
        let t = self.totals();
        format!(
            "scanned {} items in {} pages ({:.1} RCU, {} gets); found {}, new suspects {}, \
             repaired {}, healed {}, still suspect {}, reported {}, conflicts {}; {} writes \
             ({} repairs); pass {} ({} ticks){}",
            self.items_scanned,
            self.pages,
            self.read_capacity,
            self.get_requests,
            t.found,
            t.new_suspects,
            t.repaired,
            t.healed,
            t.still_suspect,
            t.reported,
            t.conflicts,
            self.write_requests,
            self.repair_writes,
            if self.pass_complete {
                "complete"
            } else {
                "continues next tick"
            },
            self.pass_ticks,
            if self.complete {
                ""
            } else {
                "; stopped early (deadline)"
            }
        )
    }
}

/// Knobs for tests and benchmarks (production uses the defaults).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuditOptions {
    /// Scan page size (`Limit`); default: DynamoDB's 1 MB pages.
    pub page_limit: Option<i32>,
    /// Stop the scan after this many pages in one tick, as if the deadline
    /// had come (exercises resumption deterministically).
    pub max_pages_per_tick: Option<u64>,
}

/// The scheduled audit (`Job::Audit`).
pub struct AuditJob {
    store: Arc<dyn Store>,
    config: RelationshipSettings,
    options: AuditOptions,
}

/// What one scan segment read in this tick, and where it stopped.
struct SegmentRead {
    items: Vec<Item>,
    pages: u64,
    read_milli: u64,
    position: Position,
}

/// The pass a tick works on: its checkpoint, and whether one was stored
/// (deleted once the pass completes).
struct Pass {
    checkpoint: Checkpoint,
    stored: bool,
}

/// The suspect records a tick started with, and those it settled.
struct KnownSuspects {
    recorded: BTreeMap<ItemKey, Suspect>,
    settled: BTreeSet<ItemKey>,
}

impl KnownSuspects {
    /// Whether the suspect with this key was recorded or just settled.
    fn contains(&self, key: &ItemKey) -> bool {
        self.recorded.contains_key(key) || self.settled.contains(key)
    }
}

/// What a tick's scan read: its graph, where each segment stopped, and
/// whether it is the whole table (a fresh pass finished in one tick).
struct ScanPart {
    graph: Graph,
    positions: Vec<Position>,
    whole_table: bool,
}

/// Whether a step of the tick finished or stopped for lack of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Finished,
    OutOfTime,
}

impl AuditJob {
    /// The audit over the table's store, with the relationship settings
    /// and the default [`AuditOptions`].
    pub fn new(deps: &JobDeps) -> Self {
        AuditJob {
            store: deps.store.clone(),
            config: deps.settings.relationships.clone(),
            options: AuditOptions::default(),
        }
    }

    /// The same audit with `options` (tests and benchmarks).
    pub fn with_options(mut self, options: AuditOptions) -> Self {
        self.options = options;
        self
    }

    /// Run one tick and return its report.
    pub async fn audit(&self, run: &JobRun<Job>) -> Result<AuditReport, HandlerError> {
        let started = Instant::now();
        let io = Io::new(self.store.as_ref());
        let mut report = AuditReport {
            complete: true,
            ..Default::default()
        };
        for v in Violation::ALL {
            report.kind(v);
        }
        let result = self.tick(&io, run, &mut report, started).await;
        report.get_requests = io.gets.load(Ordering::Relaxed);
        report.query_requests += io.queries.load(Ordering::Relaxed);
        report.read_capacity += io.query_milli.load(Ordering::Relaxed) as f64 / 1000.0;
        report.write_requests = io.writes();
        report.bookkeeping_writes = report.write_requests - report.repair_writes;
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        result.map_err(HandlerError::from)?;
        Ok(report)
    }

    /// One tick: settle the due suspects, scan this tick's part of the
    /// pass, record a suspect for each new violation in it, and save where
    /// the pass is (see the module docs of [`super`]).
    async fn tick(
        &self,
        io: &Io<'_>,
        run: &JobRun<Job>,
        report: &mut AuditReport,
        started: Instant,
    ) -> Result<(), StoreError> {
        let pass = self.load_pass(io, run.now).await?;

        // 1. Due suspects.
        let known = self.settle_due_suspects(io, run, report).await?;

        // 2. Scan (part of) the table.
        report.pass_started_at = datetime::format(pass.checkpoint.pass_started);
        if !run.has_time() {
            report.complete = false;
            report.pass_ticks = pass.checkpoint.ticks;
            return Ok(());
        }
        let part = self
            .scan_part(run, &pass.checkpoint, started, report)
            .await?;

        // 3. Judge what was read.
        let judged = match self.judge(io, run, &part).await? {
            Some(found) => {
                self.record_suspects(io, run, &found, &known, report)
                    .await?
            }
            None => Step::OutOfTime,
        };
        if judged == Step::OutOfTime {
            self.out_of_time(report, &pass.checkpoint);
            return Ok(());
        }

        // 4. Save where the pass is.
        self.save_pass(io, pass, part.positions, report).await
    }

    /// The pass in progress (its stored checkpoint, if it fits the
    /// configured segments), or a fresh one starting `now`.
    async fn load_pass(&self, io: &Io<'_>, now: DateTime<Utc>) -> Result<Pass, StoreError> {
        let segments = self.config.audit_segments.max(1);
        let stored = io.get(&Checkpoint::key()).await?;
        let checkpoint = stored
            .as_ref()
            .and_then(Checkpoint::from_item)
            .filter(|c| c.positions.len() == segments as usize)
            .unwrap_or_else(|| Checkpoint::new(now, segments));
        Ok(Pass {
            checkpoint,
            stored: stored.is_some(),
        })
    }

    /// Step 1: re-check every due suspect while there is time (the others
    /// stay suspect); the suspects recorded and those settled.
    async fn settle_due_suspects(
        &self,
        io: &Io<'_>,
        run: &JobRun<Job>,
        report: &mut AuditReport,
    ) -> Result<KnownSuspects, StoreError> {
        let recorded = self.load_suspects(io, report).await?;
        let mut settled: BTreeSet<ItemKey> = BTreeSet::new();
        for s in recorded.values() {
            if !s.is_due(run.now, &self.config) {
                report.kind(s.violation).still_suspect += 1;
                continue;
            }
            if !run.has_time() {
                report.deferred_suspects += 1;
                report.kind(s.violation).still_suspect += 1;
                report.complete = false;
                continue;
            }
            self.settle(io, s, report).await?;
            settled.insert(s.key());
        }
        Ok(KnownSuspects { recorded, settled })
    }

    /// Step 2: scan this tick's part of the pass (until 3/4 of the time
    /// left is spent) and build its graph; the report gets the pages, the
    /// capacity and the graph's counts.
    async fn scan_part(
        &self,
        run: &JobRun<Job>,
        checkpoint: &Checkpoint,
        started: Instant,
        report: &mut AuditReport,
    ) -> Result<ScanPart, StoreError> {
        let fresh = checkpoint.is_fresh();
        let scan_until = run.deadline.map(|d| {
            let left = d.saturating_duration_since(started);
            d.checked_sub(left / 4).unwrap_or(d)
        });
        let reads = self.scan(run, checkpoint, scan_until).await?;
        let mut graph = Graph::default();
        let mut positions = Vec::with_capacity(reads.len());
        for r in reads {
            report.pages += r.pages;
            report.read_capacity += r.read_milli as f64 / 1000.0;
            for item in &r.items {
                graph.add_item(item);
            }
            positions.push(r.position);
        }
        report.items_scanned = graph.items;
        report.unreadable_keys = graph.unreadable_keys;
        report.index_attribute_mismatches = graph.index_attribute_mismatches;
        let whole_table = fresh && positions.iter().all(|p| *p == Position::Done);
        report.whole_table = whole_table;
        Ok(ScanPart {
            graph,
            positions,
            whole_table,
        })
    }

    /// Step 3a: the violations in what was read, after looking up what a
    /// partial pass needs to judge it; `None` when out of time.
    async fn judge(
        &self,
        io: &Io<'_>,
        run: &JobRun<Job>,
        part: &ScanPart,
    ) -> Result<Option<Vec<Found>>, StoreError> {
        let lookups = if part.whole_table {
            Lookups::default()
        } else {
            match self.look_up(io, run, &lookups_needed(&part.graph)).await? {
                Some(l) => l,
                None => return Ok(None),
            }
        };
        Ok(Some(find_violations(&Facts {
            graph: &part.graph,
            whole_table: part.whole_table,
            lookups: &lookups,
        })))
    }

    /// Step 3b: count what was found and record a suspect (first seen now)
    /// for each violation not known yet.
    async fn record_suspects(
        &self,
        io: &Io<'_>,
        run: &JobRun<Job>,
        found: &[Found],
        known: &KnownSuspects,
        report: &mut AuditReport,
    ) -> Result<Step, StoreError> {
        for f in found {
            report.kind(f.violation).found += 1;
            // Already recorded, or settled a moment ago (an eventually
            // consistent scan may still see what was just deleted).
            if known.contains(&f.suspect_key()) {
                continue;
            }
            if !run.has_time() {
                return Ok(Step::OutOfTime);
            }
            let item = Suspect::new(f, run.now).to_item();
            if io.put(item, Some(Expr::not_exists(PK))).await? == WriteOutcome::Applied {
                report.kind(f.violation).new_suspects += 1;
            }
        }
        Ok(Step::Finished)
    }

    /// Step 4: save where the pass is, or, once it is complete, delete its
    /// stored checkpoint.
    async fn save_pass(
        &self,
        io: &Io<'_>,
        pass: Pass,
        positions: Vec<Position>,
        report: &mut AuditReport,
    ) -> Result<(), StoreError> {
        let mut checkpoint = pass.checkpoint;
        checkpoint.ticks += 1;
        checkpoint.positions = positions;
        let pass_complete = checkpoint.is_done();
        report.pass_complete = pass_complete;
        report.pass_ticks = checkpoint.ticks;
        if pass_complete {
            if pass.stored {
                io.delete(&Checkpoint::key(), None).await?;
            }
        } else {
            report.complete = false;
            io.put(checkpoint.to_item(), None).await?;
        }
        Ok(())
    }

    /// Stopped while judging: the checkpoint stays where it was, so the
    /// part read by this tick is read again by the next one.
    fn out_of_time(&self, report: &mut AuditReport, checkpoint: &Checkpoint) {
        report.complete = false;
        report.pass_complete = false;
        report.pass_ticks = checkpoint.ticks;
    }

    async fn load_suspects(
        &self,
        io: &Io<'_>,
        report: &mut AuditReport,
    ) -> Result<BTreeMap<ItemKey, Suspect>, StoreError> {
        let any = suspect_key(Violation::EmptyGroup, &ItemKey::Group(GroupId::default()));
        let mut out = BTreeMap::new();
        for (key, item) in io.partition(&any).await? {
            match Suspect::from_item(&item) {
                Ok(s) => {
                    out.insert(key, s);
                }
                Err(why) => {
                    report.unusable_suspect_records += 1;
                    tracing::warn!(reason = %why, "unusable audit suspect record deleted");
                    io.delete(&key, None).await?;
                }
            }
        }
        Ok(out)
    }

    /// Re-check a due suspect with consistent reads; repair, clear or report.
    async fn settle(
        &self,
        io: &Io<'_>,
        s: &Suspect,
        report: &mut AuditReport,
    ) -> Result<(), StoreError> {
        let observed = observe(io, s).await?;
        let v = s.violation;
        if !still_violates(v, &observed) {
            io.delete(&s.key(), None).await?;
            report.kind(v).healed += 1;
            return Ok(());
        }
        if observed.absent.len() > MAX_REPAIR_GUARDS {
            // More facts than one transaction can check beside the write:
            // never repaired unguarded, only reported.
            report.kind(v).reported += 1;
            return Ok(());
        }
        let before = io.writes();
        let absent = &observed.absent;
        let repaired = match plan_repair(v, &observed, self.config.empty_group_policy) {
            Repair::ReportOnly => {
                report.kind(v).reported += 1;
                return Ok(());
            }
            Repair::DeleteSubject => {
                io.delete_while_absent(absent, std::slice::from_ref(&s.subject))
                    .await?
                    .applied
                    == 1
            }
            Repair::DeleteSubjectIf(cond) => {
                let op = GuardedOp::Delete {
                    key: s.subject.to_attributes(),
                    condition: Some(cond),
                };
                io.write_while_absent(absent, vec![op]).await?.applied == 1
            }
            Repair::DeleteGroup(cond) => {
                let ItemKey::Group(g) = s.subject else {
                    unreachable!("EmptyGroup suspects are about groups (checked on load)")
                };
                // Members again, immediately before the conditional delete,
                // which is guarded by what this last look found dead.
                let members = io.live_members(g, 1).await?;
                if members.live > 0 || members.absent.len() > MAX_REPAIR_GUARDS {
                    false
                } else {
                    let op = GuardedOp::Delete {
                        key: s.subject.to_attributes(),
                        condition: Some(cond),
                    };
                    if io
                        .write_while_absent(&members.absent, vec![op])
                        .await?
                        .applied
                        == 1
                    {
                        cascade_group_io(io, g).await?;
                        true
                    } else {
                        false
                    }
                }
            }
            Repair::DeleteItems(keys) => io.delete_while_absent(absent, &keys).await?.held(),
        };
        report.repair_writes += io.writes() - before;
        io.delete(&s.key(), None).await?;
        if repaired {
            report.kind(v).repaired += 1;
            if report.repaired_keys.len() < MAX_LISTED_REPAIRS {
                let (pk, sk) = s.subject.encode();
                report.repaired_keys.push(format!("{v}: {pk} / {sk}"));
            }
        } else {
            // Changed since the re-check: the next scan judges it afresh.
            report.kind(v).conflicts += 1;
        }
        Ok(())
    }

    /// Scan every unfinished segment in parallel until done, out of time or
    /// out of page budget.
    async fn scan(
        &self,
        run: &JobRun<Job>,
        checkpoint: &Checkpoint,
        scan_until: Option<Instant>,
    ) -> Result<Vec<SegmentRead>, StoreError> {
        let total = checkpoint.positions.len() as i32;
        let pages_left = AtomicU64::new(self.options.max_pages_per_tick.unwrap_or(u64::MAX));
        let projection = Expr::new("#pk, #sk, #gid, #cid")
            .name("#pk", PK)
            .name("#sk", SK)
            .name("#gid", attr::GROUP_ID)
            .name("#cid", attr::CONTAINER_ID);
        let may_read = || {
            run.has_time()
                && scan_until.is_none_or(|t| Instant::now() < t)
                && pages_left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
        };
        let segment = |index: usize, start: Position| {
            let spec = ScanSpec {
                projection: Some(projection.clone()),
                segment: (total > 1).then_some((index as i32, total)),
                limit: self.options.page_limit,
                ..Default::default()
            };
            let may_read = &may_read;
            async move {
                let mut read = SegmentRead {
                    items: Vec::new(),
                    pages: 0,
                    read_milli: 0,
                    position: start,
                };
                loop {
                    let from = match &read.position {
                        Position::Done => break,
                        Position::Start => None,
                        Position::At(k) => Some(k.clone()),
                    };
                    if !may_read() {
                        break;
                    }
                    let page = self.store.scan_page(&spec, from).await?;
                    read.pages += 1;
                    read.read_milli += (page.consumed_capacity * 1000.0).round() as u64;
                    read.items.extend(page.items);
                    read.position = match page.last_evaluated_key {
                        Some(k) => Position::At(k),
                        None => Position::Done,
                    };
                }
                Ok::<_, StoreError>(read)
            }
        };
        let futures = checkpoint
            .positions
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, p)| segment(i, p));
        futures::future::join_all(futures)
            .await
            .into_iter()
            .collect()
    }

    /// Resolve a partial pass's references; `None` when out of time.
    async fn look_up(
        &self,
        io: &Io<'_>,
        run: &JobRun<Job>,
        needed: &Needed,
    ) -> Result<Option<Lookups>, StoreError> {
        let mut l = Lookups::default();
        for key in &needed.gets {
            if !run.has_time() {
                return Ok(None);
            }
            // Eventually consistent is enough to decide what to suspect.
            io.gets.fetch_add(1, Ordering::Relaxed);
            if self.store.get(&key.to_attributes(), false).await?.is_some() {
                l.present.insert(key.clone());
            } else {
                l.absent.insert(key.clone());
            }
        }
        for &g in &needed.members_of {
            if !run.has_time() {
                return Ok(None);
            }
            l.members.insert(g, io.memberships_of(g).await?);
        }
        for &c in &needed.links_of {
            if !run.has_time() {
                return Ok(None);
            }
            l.linked_by.insert(c, io.links_to(c).await?);
        }
        Ok(Some(l))
    }
}

/// Read, consistently, what decides whether a suspect still holds.
async fn observe(io: &Io<'_>, s: &Suspect) -> Result<Observed, StoreError> {
    let mut o = Observed {
        subject: io.get(&s.subject).await?,
        ..Default::default()
    };
    if o.subject.is_none() && s.violation != Violation::OrphanWorkerItem {
        return Ok(o);
    }
    if let Some(parent) = missing_parent(s.violation, &s.subject) {
        o.parent_present = io.exists(&parent).await?;
        if !o.parent_present {
            o.absent.push(parent);
        }
    }
    match (s.violation, &s.subject) {
        (Violation::OrphanContainer, ItemKey::Container(c)) => {
            let links = io.live_links(*c, None).await?;
            o.live_links = links.live;
            o.absent.extend(links.absent);
        }
        (Violation::MultiplyLinkedContainer, ItemKey::Container(c)) => {
            o.live_links = io.live_links(*c, None).await?.live;
        }
        (Violation::EmptyGroup, ItemKey::Group(g)) => {
            let members = io.live_members(*g, 1).await?;
            o.live_members = members.live;
            o.absent.extend(members.absent);
        }
        (Violation::OrphanWorkerItem, owner) if o.subject.is_none() => {
            o.absent.push(owner.clone());
            let mut left: BTreeSet<ItemKey> = BTreeSet::new();
            if let ItemKey::Group(_) = owner {
                // Every flag still in the dead group's partition.
                for (k, _) in io.partition(owner).await? {
                    if k.kind() == ItemKind::ExpiringFood {
                        left.insert(k);
                    }
                }
            }
            for k in &s.items {
                if !left.contains(k) && io.exists(k).await? {
                    left.insert(k.clone());
                }
            }
            o.orphans_left = left.into_iter().collect();
        }
        _ => {}
    }
    Ok(o)
}

#[async_trait]
impl ScheduledJob<Job> for AuditJob {
    fn job(&self) -> Job {
        Job::Audit
    }

    async fn run(&self, run: &JobRun<Job>) -> Result<JobReport<Job>, HandlerError> {
        let report = self.audit(run).await?;
        Ok(JobReport {
            job: Job::Audit,
            complete: report.complete,
            summary: report.summary(),
            details: serde_json::to_value(&report).unwrap_or_default(),
            metrics: vec![Metric::count(super::ITEMS_REPAIRED, report.repair_writes)],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_summary_has_the_totals() {
        let mut r = AuditReport::default();
        r.kind(Violation::EmptyGroup).found = 2;
        r.kind(Violation::LinkWithoutGroup).repaired = 3;
        r.items_scanned = 10;
        r.pass_complete = true;
        r.complete = true;
        let s = r.summary();
        assert!(s.contains("found 2") && s.contains("repaired 3"), "{s}");
        assert!(!s.contains("stopped early"), "{s}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["violations"]["EmptyGroup"]["found"], 2);
    }
}
