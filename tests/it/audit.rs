//! The relationship audit against DynamoDB Local, with an injected clock:
//! leftovers of the live service are found, recorded as suspects, and
//! repaired only after the grace period and a consistent re-check; races
//! lose nothing; the scan resumes across ticks; costs are reported.

use crate::service;
use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDate, Utc};
use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::jobs::JobDeps;
use nishiki_worker::jobs::relationships::EmptyGroupPolicy;
use nishiki_worker::jobs::relationships::{
    AuditJob, AuditOptions, AuditReport, Checkpoint, KindCounts,
};
use nishiki_worker::keys::{ContainerId, FoodId, ItemKey, Job, UserId, Violation};
use service::*;
use support::{Drain, TestTable};
use worker_engine::RecordingPublisher;
use worker_engine::schedule::{JobRun, Tick, TickSource};
use worker_engine::store::Store;
use worker_testkit::layers::{RaceBeforeDelete, ServiceWrite};
use worker_toolkit::layers::{DryRunStore, PlannedWrite};

fn t0() -> DateTime<Utc> {
    "2024-03-25T00:00:00Z".parse().unwrap()
}

fn hours(h: i64) -> chrono::Duration {
    chrono::Duration::hours(h)
}

fn minutes(m: i64) -> chrono::Duration {
    chrono::Duration::minutes(m)
}

struct Harness {
    table: TestTable,
    store: Arc<dyn Store>,
    clock: ManualClock,
    app: App,
}

impl Harness {
    async fn new() -> Self {
        Self::with_config(|_| {}).await
    }

    async fn with_config(edit: impl FnOnce(&mut Config)) -> Self {
        let table = support::nishiki_table().await;
        let store: Arc<dyn Store> = table.store.clone();
        let clock = ManualClock::new(t0());
        let mut config = Config::for_table(&table.name);
        edit(&mut config);
        let app = App::new(store.clone(), config, Arc::new(clock.clone()));
        Harness {
            table,
            store,
            clock,
            app,
        }
    }

    /// Run the audit tick at `t0 + after` through the App, as the schedule does.
    async fn audit_at(&self, after: chrono::Duration) -> AuditReport {
        self.clock.set(t0() + after);
        let report = self.app.run_job(Job::Audit, None).await.expect("audit");
        assert_eq!(report.job, Job::Audit);
        assert_eq!(report.complete, report.details["complete"]);
        serde_json::from_value(report.details).expect("details")
    }

    /// Keys of the table without the audit's own records.
    async fn data_keys(&self) -> Vec<(String, String)> {
        self.table
            .keys()
            .await
            .into_iter()
            .filter(|(pk, _)| pk != "AuditSuspect" && pk != "WorkerCheckpoint")
            .collect()
    }

    async fn suspects(&self) -> Vec<ItemKey> {
        self.table
            .keys()
            .await
            .into_iter()
            .filter(|(pk, _)| pk == "AuditSuspect")
            .map(|(pk, sk)| ItemKey::decode(&pk, &sk).unwrap())
            .collect()
    }
}

fn counts(r: &AuditReport, v: Violation) -> KindCounts {
    r.violations[v.as_str()]
}

fn found(r: &AuditReport) -> BTreeMap<&'static str, u64> {
    Violation::ALL
        .into_iter()
        .map(|v| (v.as_str(), counts(r, v).found))
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn total(r: &AuditReport, f: impl Fn(KindCounts) -> u64) -> u64 {
    Violation::ALL.into_iter().map(|v| f(counts(r, v))).sum()
}

/// Every leftover pattern of `docs/NISHIKI-TABLE.md`, plus the live data around it.
struct Leftovers {
    /// Keys that must survive everything.
    live: Vec<ItemKey>,
    /// The empty group and what hangs off it (deleted after 24 h).
    empty: Vec<ItemKey>,
}

async fn seed_leftovers(s: &Arc<dyn Store>) -> Leftovers {
    let mut live = Vec::new();
    // A live group with two members and an invitation.
    let l = sign_up(s).await;
    let y = UserId::random();
    parallel(s, vec![Call::Put(user(y))]).await;
    join(s, y, l.group).await;
    parallel(s, vec![Call::Put(invitation(l.group, &new_hash(), t0()))]).await;
    live.extend(l.keys());
    live.extend([
        ItemKey::User(y),
        ItemKey::Membership {
            user: y,
            group: l.group,
        },
        ItemKey::InvitationLink(l.group),
    ]);

    // Deleted group: memberships and link left; a renewal Put landed after
    // the delete (invitation of a deleted group); its flag left.
    let d = sign_up(s).await;
    let x = UserId::random();
    parallel(s, vec![Call::Put(user(x))]).await;
    join(s, x, d.group).await;
    parallel(
        s,
        vec![Call::Put(flag(d.group, d.container, FoodId::random()))],
    )
    .await;
    delete_group(s, d.group, &[d.container]).await;
    parallel(s, vec![Call::Put(invitation(d.group, &new_hash(), t0()))]).await;
    live.extend([ItemKey::User(d.user), ItemKey::User(x)]);

    // Deleted user, member of the live group: their sole group goes, their
    // memberships and their group's link stay.
    let u = sign_up(s).await;
    join(s, u.user, l.group).await;
    delete_user(s, u.user, &[(u.group, vec![u.container])]).await;

    // Deleted container whose link delete was lost, with its flag and reminder.
    let k = add_container(s, l.group).await;
    let food = FoodId::random();
    parallel(
        s,
        vec![
            Call::Put(flag(l.group, k, food)),
            Call::Put(reminder(
                NaiveDate::from_ymd_opt(2024, 3, 27).unwrap(),
                k,
                food,
            )),
        ],
    )
    .await;
    delete_container(s, l.group, k, true).await;

    // Orphan container (its link was never written).
    parallel(s, vec![Call::Put(container(ContainerId::random(), 1))]).await;

    // Empty group: its last member left.
    let e = sign_up(s).await;
    leave(s, e.user, e.group).await;
    live.push(ItemKey::User(e.user));
    let empty = vec![
        ItemKey::Group(e.group),
        ItemKey::Container(e.container),
        ItemKey::ContainerLink {
            group: e.group,
            container: e.container,
        },
    ];
    Leftovers { live, empty }
}

fn expected_found() -> BTreeMap<&'static str, u64> {
    BTreeMap::from([
        ("MembershipWithoutUser", 2),
        ("MembershipWithoutGroup", 2),
        ("LinkWithoutGroup", 2),
        ("LinkWithoutContainer", 1),
        ("OrphanContainer", 1),
        ("InvitationWithoutGroup", 1),
        ("EmptyGroup", 1),
        ("OrphanWorkerItem", 2),
    ])
}

#[tokio::test]
async fn leftovers_are_repaired_only_after_grace_and_recheck() {
    let h = Harness::new().await;
    let left = seed_leftovers(&h.store).await;
    let seeded = h.data_keys().await;

    // First audit: everything found and recorded, nothing deleted.
    let r1 = h.audit_at(chrono::Duration::zero()).await;
    assert_eq!(found(&r1), expected_found());
    assert_eq!(total(&r1, |c| c.new_suspects), 12);
    assert_eq!(total(&r1, |c| c.repaired), 0);
    assert!(r1.complete && r1.pass_complete && r1.whole_table);
    assert_eq!(r1.items_scanned, seeded.len() as u64);
    assert!(r1.read_capacity > 0.0, "{r1:?}");
    assert_eq!((r1.repair_writes, r1.write_requests), (0, 12));
    assert_eq!(h.data_keys().await, seeded);
    assert_eq!(h.suspects().await.len(), 12);

    // Within grace: still suspect, no write at all.
    let r2 = h.audit_at(minutes(30)).await;
    assert_eq!(found(&r2), expected_found());
    assert_eq!(total(&r2, |c| c.still_suspect), 12);
    assert_eq!(r2.write_requests, 0);
    assert_eq!(h.data_keys().await, seeded);

    // After the 1 h grace: all but the empty group repaired.
    let r3 = h.audit_at(minutes(61)).await;
    let repaired: u64 = total(&r3, |c| c.repaired);
    assert_eq!(repaired, 11, "{r3:?}");
    assert_eq!(counts(&r3, Violation::EmptyGroup).still_suspect, 1);
    assert_eq!(found(&r3), BTreeMap::from([("EmptyGroup", 1)]));
    let mut expected = left.live.clone();
    expected.extend(left.empty.clone());
    assert_eq!(h.data_keys().await, encoded(expected));
    // Write cost: exactly the deleted items, plus clearing 11 records.
    let deleted = seeded.len() - h.data_keys().await.len();
    assert_eq!(r3.repair_writes, deleted as u64);
    assert_eq!(r3.bookkeeping_writes, 11);

    // After the 24 h grace for empty groups: the group and what hangs off it.
    let r4 = h.audit_at(hours(25)).await;
    assert_eq!(counts(&r4, Violation::EmptyGroup).repaired, 1);
    assert_eq!(h.data_keys().await, encoded(left.live.clone()));
    assert!(h.suspects().await.is_empty());

    // Converged: nothing found, nothing written.
    let r5 = h.audit_at(hours(49)).await;
    assert!(found(&r5).is_empty(), "{r5:?}");
    assert_eq!(r5.write_requests, 0);
}

#[tokio::test]
async fn races_lose_nothing() {
    let h = Harness::new().await;
    let s = &h.store;
    let live = sign_up(s).await;

    // (a) a group empty at the first audit gets a member before the second.
    let a = sign_up(s).await;
    leave(s, a.user, a.group).await;
    // (b) an orphan container re-linked before the second audit.
    let b = ContainerId::random();
    parallel(s, vec![Call::Put(container(b, 1))]).await;
    // (c) children written (and audited) before their parents.
    let c = Family::new();
    in_order(
        s,
        vec![
            Call::Put(membership(c.user, c.group)),
            Call::Put(link(c.group, c.container)),
        ],
    )
    .await;
    // (d) an invitation left by a deleted group, renewed while the repair runs.
    let d = sign_up(s).await;
    delete_group(s, d.group, &[d.container]).await;
    in_order(
        s,
        vec![
            Call::Delete(ItemKey::Membership {
                user: d.user,
                group: d.group,
            }),
            Call::Delete(ItemKey::ContainerLink {
                group: d.group,
                container: d.container,
            }),
        ],
    )
    .await; // (the stream's cascade did this part)
    let hash = new_hash();
    parallel(s, vec![Call::Put(invitation(d.group, &hash, t0()))]).await;

    let r1 = h.audit_at(chrono::Duration::zero()).await;
    assert_eq!(counts(&r1, Violation::EmptyGroup).new_suspects, 1);
    assert_eq!(counts(&r1, Violation::OrphanContainer).new_suspects, 1);
    assert_eq!(
        counts(&r1, Violation::MembershipWithoutUser).new_suspects,
        1
    );
    assert_eq!(counts(&r1, Violation::LinkWithoutGroup).new_suspects, 1);
    assert_eq!(
        counts(&r1, Violation::InvitationWithoutGroup).new_suspects,
        1
    );

    join(s, a.user, a.group).await; // (a)
    parallel(s, vec![Call::Put(link(live.group, b))]).await; // (b)
    parallel(s, c.sign_up_calls()).await; // (c): the parents arrive
    let before = h.data_keys().await;

    // The second audit, past every grace, with the renewal racing (d).
    let renewed = invitation(d.group, &hash, t0() + hours(24));
    let racing: Arc<dyn Store> = Arc::new(RaceBeforeDelete::new(
        h.store.clone(),
        ItemKey::InvitationLink(d.group).to_attributes(),
        ServiceWrite::Put(renewed.clone()),
    ));
    h.clock.set(t0() + hours(25));
    let app = App::new(
        racing,
        Config::for_table(&h.table.name),
        Arc::new(h.clock.clone()),
    );
    let report = app.run_job(Job::Audit, None).await.unwrap();
    let r2: AuditReport = serde_json::from_value(report.details).unwrap();

    assert_eq!(total(&r2, |c| c.repaired), 0, "{r2:?}");
    assert_eq!(counts(&r2, Violation::EmptyGroup).healed, 1);
    assert_eq!(counts(&r2, Violation::OrphanContainer).healed, 1);
    assert_eq!(counts(&r2, Violation::MembershipWithoutUser).healed, 1);
    assert_eq!(counts(&r2, Violation::LinkWithoutGroup).healed, 1);
    assert_eq!(counts(&r2, Violation::InvitationWithoutGroup).conflicts, 1);
    assert_eq!(h.data_keys().await, before, "nothing was deleted");
    let stored = h
        .table
        .snapshot()
        .await
        .into_iter()
        .find(|i| support::key_of(i) == ItemKey::InvitationLink(d.group).encode())
        .unwrap();
    assert_eq!(stored, renewed, "the renewed link survives as renewed");
    assert!(h.suspects().await.is_empty(), "{:?}", h.suspects().await);
}

#[tokio::test]
async fn report_only_cases_are_never_repaired() {
    let h = Harness::with_config(|c| c.relationships.empty_group_policy = EmptyGroupPolicy::Report)
        .await;
    let s = &h.store;
    let a = sign_up(s).await;
    let b = sign_up(s).await;
    // b's container also linked from a's live group; a's group emptied.
    parallel(s, vec![Call::Put(link(a.group, b.container))]).await;
    let e = sign_up(s).await;
    leave(s, e.user, e.group).await;
    let seeded = h.data_keys().await;

    let r1 = h.audit_at(chrono::Duration::zero()).await;
    assert_eq!(
        found(&r1),
        BTreeMap::from([("EmptyGroup", 1), ("MultiplyLinkedContainer", 1)])
    );
    for after in [hours(25), hours(49)] {
        let r = h.audit_at(after).await;
        assert_eq!(counts(&r, Violation::EmptyGroup).reported, 1);
        assert_eq!(counts(&r, Violation::MultiplyLinkedContainer).reported, 1);
        assert_eq!(total(&r, |c| c.repaired), 0);
        assert_eq!(r.write_requests, 0, "report-only costs no writes");
    }
    assert_eq!(h.data_keys().await, seeded);
    assert_eq!(h.suspects().await.len(), 2, "still recorded for operators");
    let _ = b;
}

#[tokio::test]
async fn dry_run_reports_what_it_would_repair_and_writes_nothing() {
    let h = Harness::new().await;
    seed_leftovers(&h.store).await;
    h.audit_at(chrono::Duration::zero()).await;
    let before = h.table.snapshot().await;

    let dry = Arc::new(DryRunStore::new(h.store.clone()));
    h.clock.set(t0() + hours(25));
    let app = App::new(
        dry.clone(),
        Config::for_table(&h.table.name),
        Arc::new(h.clock.clone()),
    );
    let report = app.run_job(Job::Audit, None).await.unwrap();
    let r: AuditReport = serde_json::from_value(report.details).unwrap();
    assert_eq!(total(&r, |c| c.repaired), 12, "{r:?}");
    assert_eq!(r.repaired_keys.len(), 12);
    assert!(report.summary.contains("repaired 12"), "{}", report.summary);
    assert_eq!(h.table.snapshot().await, before, "a dry run writes nothing");
    let planned = dry.take_planned();
    let deletes = planned
        .iter()
        .filter(|w| matches!(w, PlannedWrite::Delete { .. }))
        .count();
    assert_eq!(deletes as u64, r.write_requests);
    assert!(r.repair_writes > 12, "{r:?}");
}

fn job_run(now: DateTime<Utc>, deadline: Option<Instant>) -> JobRun<Job> {
    JobRun {
        now,
        tick: Tick {
            job: Job::Audit,
            scheduled_time: None,
            source: TickSource::Manual,
        },
        deadline,
        margin: Duration::from_millis(500),
    }
}

#[tokio::test]
async fn the_scan_resumes_across_ticks_and_finds_the_same() {
    let h = Harness::new().await;
    let s = &h.store;
    let mut calls = Vec::new();
    for _ in 0..40 {
        calls.extend(Family::new().sign_up_calls());
    }
    parallel(s, calls).await;
    seed_leftovers(s).await;
    let items = h.data_keys().await.len() as u64;

    let mut config = Config::for_table(&h.table.name);
    config.relationships.audit_segments = 3;
    let deps = JobDeps::new(
        h.store.clone(),
        config,
        Arc::new(RecordingPublisher::default()),
    );
    let job = AuditJob::new(&deps).with_options(AuditOptions {
        page_limit: Some(10),
        max_pages_per_tick: Some(4),
    });

    // A tick at its deadline does nothing and says so.
    let r = job
        .audit(&job_run(t0(), Some(Instant::now())))
        .await
        .unwrap();
    assert!(!r.complete && r.items_scanned == 0 && r.write_requests == 0);

    let mut ticks = 0;
    let mut scanned = 0;
    let mut found_total: BTreeMap<&'static str, u64> = BTreeMap::new();
    loop {
        ticks += 1;
        let r = job.audit(&job_run(t0(), None)).await.unwrap();
        assert!(r.pages <= 4);
        scanned += r.items_scanned;
        for (k, n) in found(&r) {
            *found_total.entry(k).or_default() += n;
        }
        let checkpoint = h.store.get(&Checkpoint::key().to_attributes(), true).await;
        if r.pass_complete {
            assert!(r.complete);
            assert!(checkpoint.unwrap().is_none(), "a finished pass clears it");
            break;
        }
        assert!(!r.complete && !r.whole_table);
        assert!(checkpoint.unwrap().is_some(), "an unfinished pass is saved");
        assert!(ticks < 100);
    }
    assert!(ticks > 3, "{ticks}");
    // Every item read once (the suspects written on the way are not data).
    assert!(scanned >= items, "{scanned} < {items}");
    // Per-tick counts may count one owner of orphan items twice (its flag and
    // its reminder read by different ticks); the records are what matter.
    assert_eq!(
        found_total.keys().collect::<Vec<_>>(),
        expected_found().keys().collect::<Vec<_>>()
    );
    let recorded = h.suspects().await;
    assert_eq!(recorded.len(), 12, "{recorded:?}");

    // A single whole-table pass agrees, and records nothing new.
    let whole = AuditJob::new(&deps);
    let r = whole.audit(&job_run(t0(), None)).await.unwrap();
    assert!(r.whole_table);
    assert_eq!(found(&r), expected_found());
    assert_eq!(total(&r, |c| c.new_suspects), 0);
    assert_eq!(h.suspects().await, recorded);
}

#[tokio::test]
async fn stream_and_audit_together_converge() {
    let h = Harness::new().await;
    let s = &h.store;
    let mut drain = Drain::new(&h.table).await;
    let a = sign_up(s).await;
    let b = sign_up(s).await;
    join(s, b.user, a.group).await;
    let c = sign_up(s).await;
    drain.run(&h.app).await;

    // Group a deleted, user c deleted, b leaves their own group.
    delete_group(s, a.group, &[a.container]).await;
    delete_user(s, c.user, &[(c.group, vec![c.container])]).await;
    leave(s, b.user, b.group).await;
    drain.run(&h.app).await;

    // The stream removed every leftover; only the empty group remains, and
    // the stream already noted it.
    let r1 = h.audit_at(chrono::Duration::zero()).await;
    assert_eq!(found(&r1), BTreeMap::from([("EmptyGroup", 1)]));
    assert_eq!(total(&r1, |c| c.new_suspects), 0);
    assert_eq!(r1.write_requests, 0);

    let r2 = h.audit_at(hours(25)).await;
    assert_eq!(counts(&r2, Violation::EmptyGroup).repaired, 1);
    drain.run(&h.app).await; // the audit's deletes flow through the stream
    assert_eq!(
        h.table.keys().await,
        encoded([ItemKey::User(a.user), ItemKey::User(b.user)])
    );
}

#[tokio::test]
async fn a_consistent_table_costs_reads_only() {
    let h = Harness::new().await;
    let s = &h.store;
    for _ in 0..5 {
        let f = sign_up(s).await;
        parallel(s, vec![Call::Put(invitation(f.group, &new_hash(), t0()))]).await;
    }
    let before = h.table.snapshot().await;
    let r = h.audit_at(chrono::Duration::zero()).await;
    assert!(found(&r).is_empty(), "{r:?}");
    assert_eq!(r.items_scanned, 30);
    assert!(r.pages >= 1 && r.read_capacity > 0.0);
    assert_eq!(r.write_requests, 0);
    assert_eq!(h.table.snapshot().await, before);
}
