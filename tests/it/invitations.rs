//! The invitation-link sweep and the optional invitation TTL, against a real
//! DynamoDB Local (`tests/it/support`): expired links go, valid ones stay in
//! every stored datetime form; a renewal between the read and the delete
//! survives; the fallback Scan gives the same result without the index; a
//! tick that runs out of time leaves no half-state and the next one finishes.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, TimeDelta, Utc};
use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::datetime;
use nishiki_worker::items::{Item, attr};
use nishiki_worker::jobs::invitations::{
    InvitationTtl, RESUME_ATTRIBUTE, SweepInvitations, SweepReport, TTL_ATTRIBUTE, ttl_seconds,
};
use nishiki_worker::keys::{GroupId, ItemKey, Job, UserId};
use nishiki_worker::worker::{Change, ChangeHandler, HandlerOutcome};
use serde_json::json;
use support::{Drain, TestTable, key_of};
use uuid::Uuid;
use worker_engine::schedule::{JobReport, JobRun, Tick, TickSource};
use worker_engine::store::{BatchWriter, ItemReader, ItemWriter, QueryStore, Store, WriteOp};
use worker_engine::stream::{ChangeKind, StreamChange, encode_event};
use worker_testkit::layers::{BeforeDelete, DelayDeletes, RaceBeforeDelete, ServiceWrite};

const NOW: &str = "2024-03-25T00:00:00.500Z";

fn now() -> DateTime<Utc> {
    datetime::parse(NOW).unwrap()
}

/// A deterministic group id (same ids on every table of a test).
fn group(n: u128) -> GroupId {
    GroupId(Uuid::from_u128(
        0x9b2e_7c1a_4d3f_4a8b_9c0d_0000_0000_0000 + n,
    ))
}

fn hash(n: u128) -> String {
    format!("{:032x}", 0xabcd_0000_0000_0000_0000_0000_0000_0000u128 + n)
}

/// An invitation link exactly as the service writes it (a plain item).
fn link(g: GroupId, hash: &str, expiry: &str) -> Item {
    let mut item = ItemKey::InvitationLink(g).to_attributes();
    item.insert(
        attr::INVITATION_LINK_HASH.into(),
        AttributeValue::S(hash.into()),
    );
    item.insert(
        attr::LINK_EXPIRY_DATETIME.into(),
        AttributeValue::S(expiry.into()),
    );
    item
}

fn group_item(g: GroupId) -> Item {
    let mut item = ItemKey::Group(g).to_attributes();
    item.insert("GroupName".into(), AttributeValue::S("Home".into()));
    item
}

fn membership(u: UserId, g: GroupId) -> Item {
    let mut item = ItemKey::Membership { user: u, group: g }.to_attributes();
    item.insert(attr::GROUP_ID.into(), AttributeValue::S(g.to_string()));
    item
}

fn key_pair(key: &ItemKey) -> (String, String) {
    key.encode()
}

/// Expired (before `NOW`) in every stored form.
const EXPIRED_FORMS: [&str; 7] = [
    "2024-03-25T00:00:00.499Z",
    "2024-03-25T00:00:00Z",
    "2024-03-25T00:00:00",
    "2024-03-24T23:59:59.9",
    "2024-03-24T12:00:00.123456789Z",
    "2023-12-23T12:21:10.10",
    "2024-03-25T00:00:00.49",
];

/// Not expired at `NOW`, some of them inside the query's string range.
const VALID_FORMS: [&str; 7] = [
    "2024-03-25T00:00:00.5",
    "2024-03-25T00:00:00.501Z",
    "2024-03-25T00:00:01",
    "2024-03-25T00:00:03.9Z",
    "2024-03-26T00:00:00.000Z",
    "3023-12-23T12:21:10.10",
    "2024-03-25T00:00:00.500000001",
];

/// Groups 0..7 hold expired links, 100..107 valid ones, 200 an unparseable
/// one inside the range, 201 one outside it; every group has its Group item
/// and a member. Returns the keys of the expired links.
async fn seed_forms(table: &TestTable) -> BTreeSet<(String, String)> {
    let mut ops = Vec::new();
    let mut expired = BTreeSet::new();
    let user = UserId(Uuid::from_u128(7));
    let add_group = |g: GroupId, l: Item, ops: &mut Vec<WriteOp>| {
        ops.push(WriteOp::Put(group_item(g)));
        ops.push(WriteOp::Put(membership(user, g)));
        ops.push(WriteOp::Put(l));
    };
    for (i, expiry) in EXPIRED_FORMS.iter().enumerate() {
        let g = group(i as u128);
        add_group(g, link(g, &hash(i as u128), expiry), &mut ops);
        expired.insert(key_pair(&ItemKey::InvitationLink(g)));
    }
    for (i, expiry) in VALID_FORMS.iter().enumerate() {
        let g = group(100 + i as u128);
        add_group(g, link(g, &hash(100 + i as u128), expiry), &mut ops);
    }
    add_group(
        group(200),
        link(group(200), &hash(200), "2024-03-24 22:03:33"),
        &mut ops,
    );
    add_group(
        group(201),
        link(group(201), &hash(201), "next tuesday"),
        &mut ops,
    );
    table.store.batch_write(ops).await.expect("seed");
    expired
}

fn app_on(store: Arc<dyn Store>, table: &TestTable, at: DateTime<Utc>, ttl: bool) -> App {
    let mut config = Config::for_table(&table.name);
    config.invitations.ttl = ttl;
    App::new(store, config, Arc::new(ManualClock::new(at)))
}

fn app(table: &TestTable) -> App {
    app_on(table.store.clone(), table, now(), false)
}

/// A schedule tick exactly as EventBridge Scheduler sends it.
async fn tick(app: &App, deadline: Option<Instant>) -> (JobReport<Job>, SweepReport) {
    let event = json!({"job": "sweep-invitations", "scheduledTime": "2024-03-25T00:00:00Z"});
    let report = app.handle_schedule(&event, deadline).await.expect("tick");
    assert_eq!(report.job, Job::SweepInvitations);
    let details = report.details.clone();
    (report, parse_details(&details))
}

fn parse_details(v: &serde_json::Value) -> SweepReport {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("report details {v}: {e}"))
}

fn job_run(deadline: Option<Instant>, margin: Duration) -> JobRun<Job> {
    JobRun {
        now: now(),
        tick: Tick {
            job: Job::SweepInvitations,
            scheduled_time: None,
            source: TickSource::Manual,
        },
        deadline,
        margin,
    }
}

fn keys_of(items: &[Item]) -> BTreeSet<(String, String)> {
    items.iter().map(key_of).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_links_go_and_valid_ones_stay_in_every_stored_form() {
    let table = support::nishiki_table().await;
    let expired = seed_forms(&table).await;
    let before = table.snapshot().await;
    let app = app(&table);

    let (job, r) = tick(&app, None).await;
    assert!(job.complete && r.complete, "{}", job.summary);
    assert!(r.used_index);
    assert_eq!(
        r.expired_found,
        EXPIRED_FORMS.len() as u64,
        "{}",
        job.summary
    );
    assert_eq!(r.deleted, EXPIRED_FORMS.len() as u64);
    assert_eq!((r.kept_renewed, r.already_gone), (0, 0));
    // Only the unparseable link inside the string range is read; it is kept.
    assert_eq!(r.unparseable, 1);
    assert_eq!(r.unparseable_groups[0].group, group(200).to_string());
    assert!(r.pages >= 1);
    assert!(
        r.consumed_read_capacity > 0.0,
        "DynamoDB reports consumed capacity"
    );
    // The index read only the range: expired, unparseable, and valid links
    // within the 5 s slack (5 of them), never the far-future ones.
    assert_eq!(r.items_read, EXPIRED_FORMS.len() as u64 + 1 + 5);

    // Exactly the expired links are gone; everything else is untouched.
    let after = table.snapshot().await;
    let expected: Vec<Item> = before
        .iter()
        .filter(|i| !expired.contains(&key_of(i)))
        .cloned()
        .collect();
    assert_eq!(after, expected);

    // A second tick (retried or duplicate) finds nothing and changes nothing.
    let (_, again) = tick(&app, None).await;
    assert_eq!((again.expired_found, again.deleted), (0, 0));
    assert_eq!(again.unparseable, 1);
    assert_eq!(table.snapshot().await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_renewed_between_query_and_delete_survives() {
    let table = support::nishiki_table().await;
    seed_forms(&table).await;
    // Group 3's link is expired; the service renews it (same hash, expiry
    // now + 24 h, canonical) after the sweep's query, before its delete.
    let renewed_group = group(3);
    let renewed_expiry = datetime::format(now() + TimeDelta::hours(24));
    let renewal = link(renewed_group, &hash(3), &renewed_expiry);
    // And group 5's link is deleted by someone else in the same window.
    let gone_group = group(5);

    let renew = Arc::new(RaceBeforeDelete::new(
        table.store.clone(),
        ItemKey::InvitationLink(renewed_group).to_attributes(),
        ServiceWrite::Put(renewal.clone()),
    ));
    let remove = Arc::new(RaceBeforeDelete::new(
        renew.clone(),
        ItemKey::InvitationLink(gone_group).to_attributes(),
        ServiceWrite::Delete,
    ));
    let app = app_on(remove.clone(), &table, now(), false);

    let (job, r) = tick(&app, None).await;
    assert!(renew.fired() && remove.fired());
    assert_eq!(
        r.expired_found,
        EXPIRED_FORMS.len() as u64,
        "{}",
        job.summary
    );
    assert_eq!(r.kept_renewed, 1, "{}", job.summary);
    assert_eq!(r.already_gone, 1, "{}", job.summary);
    assert_eq!(r.deleted, EXPIRED_FORMS.len() as u64 - 2);
    assert!(job.summary.contains("1 kept (renewed)"), "{}", job.summary);

    // The renewed link is exactly the service's renewal.
    let stored = table
        .store
        .get(
            &ItemKey::InvitationLink(renewed_group).to_attributes(),
            true,
        )
        .await
        .unwrap()
        .expect("the renewed link survives");
    assert_eq!(stored, renewal);
    // No other expired link is left.
    let left: Vec<_> = table
        .snapshot()
        .await
        .into_iter()
        .filter(|i| {
            EXPIRED_FORMS
                .iter()
                .any(|f| i.get(attr::LINK_EXPIRY_DATETIME) == Some(&AttributeValue::S((*f).into())))
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_scan_gives_the_same_result_without_the_index() {
    let with_index = support::nishiki_table().await;
    let without =
        TestTable::with_schema(&nishiki_worker::schema::without_invitation_expiry_index()).await;
    seed_forms(&with_index).await;
    seed_forms(&without).await;

    // What DynamoDB Local answers for a missing index is recognised.
    let err = without
        .store
        .query_page(
            &nishiki_worker::jobs::invitations::index_query("2024-01-01T00:00:00.000Z", None),
            None,
        )
        .await
        .expect_err("the index does not exist");
    eprintln!("DynamoDB Local answers a query on a missing index with: {err}");
    assert!(err.is_missing_index(), "not recognised: {err}");
    assert!(!err.is_retryable());

    let (_, a) = tick(&app(&with_index), None).await;
    let (job_b, b) = tick(&app(&without), None).await;
    assert!(a.used_index && !b.used_index, "{}", job_b.summary);
    assert!(job_b.summary.contains("full Scan"), "{}", job_b.summary);
    assert!(b.complete && !b.resumed_scan);
    let counts = |r: &SweepReport| {
        (
            r.expired_found,
            r.deleted,
            r.kept_renewed,
            r.already_gone,
            r.unparseable,
        )
    };
    assert_eq!(counts(&a), counts(&b));
    assert_eq!(a.unparseable_groups, b.unparseable_groups);
    assert!(b.consumed_read_capacity > 0.0);
    assert_eq!(with_index.snapshot().await, without.snapshot().await);
    // A complete pass leaves no checkpoint behind.
    let checkpoint = ItemKey::Checkpoint(Job::SweepInvitations).to_attributes();
    assert_eq!(without.store.get(&checkpoint, true).await.unwrap(), None);
}

/// `n` expired links (groups 0..n) and `n` valid ones (1000..1000+n), with
/// their groups.
async fn seed_many(table: &TestTable, n: u128) -> BTreeSet<(String, String)> {
    let mut ops = Vec::new();
    let mut expired = BTreeSet::new();
    for i in 0..n {
        let g = group(i);
        ops.push(WriteOp::Put(group_item(g)));
        ops.push(WriteOp::Put(link(g, &hash(i), "2024-03-24T00:00:00.000Z")));
        expired.insert(key_pair(&ItemKey::InvitationLink(g)));
        let v = group(1000 + i);
        ops.push(WriteOp::Put(group_item(v)));
        ops.push(WriteOp::Put(link(
            v,
            &hash(1000 + i),
            "2024-03-26T00:00:00",
        )));
    }
    table.store.batch_write(ops).await.expect("seed");
    expired
}

/// After a partial tick: the table is the seed minus some expired links,
/// nothing else changed (every delete is whole; nothing half-written).
fn assert_only_expired_links_removed(
    before: &[Item],
    after: &[Item],
    expired: &BTreeSet<(String, String)>,
) -> usize {
    let after_keys = keys_of(after);
    let removed: Vec<_> = keys_of(before).difference(&after_keys).cloned().collect();
    assert!(
        removed.iter().all(|k| expired.contains(k)),
        "only expired links may go: {removed:?}"
    );
    let kept: Vec<Item> = before
        .iter()
        .filter(|i| after_keys.contains(&key_of(i)))
        .cloned()
        .collect();
    assert_eq!(after, kept.as_slice(), "kept items are unchanged");
    removed.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_out_of_time_leaves_no_half_state_and_the_next_finishes() {
    let table = support::nishiki_table().await;
    let expired = seed_many(&table, 20).await;
    let before = table.snapshot().await;
    let slow: Arc<dyn Store> = Arc::new(BeforeDelete::with_hook(
        table.store.clone(),
        DelayDeletes(Duration::from_millis(100)),
    ));
    let job = SweepInvitations::with_store(slow)
        .with_page_size(5)
        .with_concurrency(1);
    use worker_engine::schedule::ScheduledJob;

    // A deadline already passed: nothing is read or written.
    let past = job
        .run(&job_run(Some(Instant::now()), Duration::from_millis(10)))
        .await
        .unwrap();
    assert!(!past.complete);
    assert_eq!(past.details["pages"], 0);
    assert_eq!(table.snapshot().await, before);

    // A deadline that allows part of the work (20 deletes take 2 s).
    let first = job
        .run(&job_run(
            Some(Instant::now() + Duration::from_millis(900)),
            Duration::ZERO,
        ))
        .await
        .unwrap();
    let r1 = parse_details(&first.details);
    assert!(!first.complete && !r1.complete, "{}", first.summary);
    assert!(first.summary.contains("stopped at the deadline"));
    assert!(
        r1.deleted > 0 && r1.deleted < 20,
        "partial work expected: {}",
        first.summary
    );
    let after_first = table.snapshot().await;
    let removed = assert_only_expired_links_removed(&before, &after_first, &expired);
    assert_eq!(removed as u64, r1.deleted);

    // The next tick picks up the rest.
    let second = job.run(&job_run(None, Duration::ZERO)).await.unwrap();
    let r2 = parse_details(&second.details);
    assert!(second.complete, "{}", second.summary);
    assert_eq!(r1.deleted + r2.deleted, 20, "{}", second.summary);
    assert_eq!(r2.expired_found, 20 - r1.deleted);
    let after = table.snapshot().await;
    assert_eq!(
        assert_only_expired_links_removed(&before, &after, &expired),
        20
    );
    assert!(keys_of(&after).is_disjoint(&expired));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_scan_resumes_where_a_tick_ran_out_of_time() {
    let table =
        TestTable::with_schema(&nishiki_worker::schema::without_invitation_expiry_index()).await;
    let expired = seed_many(&table, 12).await;
    let before = table.snapshot().await;
    let slow: Arc<dyn Store> = Arc::new(BeforeDelete::with_hook(
        table.store.clone(),
        DelayDeletes(Duration::from_millis(150)),
    ));
    let job = SweepInvitations::with_store(slow)
        .with_page_size(4)
        .with_concurrency(1);
    use worker_engine::schedule::ScheduledJob;

    let first = job
        .run(&job_run(
            Some(Instant::now() + Duration::from_millis(1200)),
            Duration::ZERO,
        ))
        .await
        .unwrap();
    let r1 = parse_details(&first.details);
    assert!(!r1.complete && !r1.used_index, "{}", first.summary);
    assert!(r1.deleted < 12, "{}", first.summary);
    let checkpoint_key = ItemKey::Checkpoint(Job::SweepInvitations).to_attributes();
    // A page holds at most 4 links (600 ms of deletes), 12 links need
    // 1.8 s: the tick stops after its first page and saves where it was.
    let checkpoint = table
        .store
        .get(&checkpoint_key, true)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("a checkpoint after a partial Scan: {}", first.summary));
    // The checkpoint is a worker item: no service-index attribute.
    assert!(
        attr::INDEXED.iter().all(|a| !checkpoint.contains_key(*a)),
        "{checkpoint:?}"
    );
    assert!(matches!(
        checkpoint.get(RESUME_ATTRIBUTE),
        Some(AttributeValue::M(_))
    ));
    let mut after_first = table.snapshot().await;
    after_first.retain(|i| key_of(i) != key_of(&checkpoint_key));
    assert_only_expired_links_removed(&before, &after_first, &expired);

    let second = job.run(&job_run(None, Duration::ZERO)).await.unwrap();
    let r2 = parse_details(&second.details);
    assert!(r2.complete, "{}", second.summary);
    assert!(r2.resumed_scan, "{}", second.summary);
    // Whatever the first tick did not finish, the next one did.
    let after = table.snapshot().await;
    assert!(keys_of(&after).is_disjoint(&expired), "{}", second.summary);
    assert_eq!(
        assert_only_expired_links_removed(&before, &after, &expired),
        12
    );
    assert_eq!(r1.deleted + r2.deleted, 12);
    assert_eq!(table.store.get(&checkpoint_key, true).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_ticks_for_the_same_scheduled_time_do_no_harm() {
    let table = support::nishiki_table().await;
    let expired = seed_many(&table, 15).await;
    let before = table.snapshot().await;
    let app = app(&table);
    let ((_, a), (_, b)) = tokio::join!(tick(&app, None), tick(&app, None));
    assert_eq!(a.deleted + b.deleted, 15, "{a:?} {b:?}");
    for r in [&a, &b] {
        assert_eq!(r.kept_renewed, 0);
        assert_eq!(r.deleted + r.already_gone, r.expired_found);
        assert!(r.complete);
    }
    let after = table.snapshot().await;
    assert_eq!(
        assert_only_expired_links_removed(&before, &after, &expired),
        15
    );
}

fn ttl_of(item: &Item) -> Option<i64> {
    match item.get(TTL_ATTRIBUTE) {
        Some(AttributeValue::N(n)) => n.parse().ok(),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_is_stamped_on_inserts_and_renewals_without_looping() {
    let table = support::nishiki_table().await;
    let app = app_on(table.store.clone(), &table, now(), true);
    let mut drain = Drain::new(&table).await;
    let g = group(1);
    let key = ItemKey::InvitationLink(g).to_attributes();
    table.store.put(group_item(g), None).await.unwrap();
    // A non-canonical stored form: the stamp's condition compares it raw.
    let expiry = "2024-03-25T10:00:00.10";
    table
        .store
        .put(link(g, &hash(1), expiry), None)
        .await
        .unwrap();
    let updates = || table.store.metrics().snapshot().update_item;
    let updates_before = updates();
    drain.run(&app).await;
    let stored = table.store.get(&key, true).await.unwrap().unwrap();
    let want = ttl_seconds(datetime::parse(expiry).unwrap());
    assert_eq!(ttl_of(&stored), Some(want));
    assert_eq!(stored.len(), 5, "only the TTL attribute was added");
    assert_eq!(
        stored[attr::LINK_EXPIRY_DATETIME],
        AttributeValue::S(expiry.into())
    );
    // One stamp; the worker's own MODIFY is recognised (the drain settles).
    assert_eq!(updates() - updates_before, 1);
    // Replaying the whole stream (at-least-once delivery) writes nothing.
    let mut replay = Drain::new(&table).await;
    replay.run(&app).await;
    assert_eq!(
        updates() - updates_before,
        1,
        "a replay must not stamp again"
    );

    // The service renews the link: a plain Put without the attribute.
    let renewed = datetime::format(now() + TimeDelta::hours(24));
    table
        .store
        .put(link(g, &hash(1), &renewed), None)
        .await
        .unwrap();
    drain.run(&app).await;
    assert_eq!(updates() - updates_before, 2);
    let stored = table.store.get(&key, true).await.unwrap().unwrap();
    assert_eq!(
        ttl_of(&stored),
        Some(ttl_seconds(datetime::parse(&renewed).unwrap()))
    );

    // With INVITATION_TTL off nothing is stamped.
    let off = app_on(table.store.clone(), &table, now(), false);
    let g2 = group(2);
    table.store.put(group_item(g2), None).await.unwrap();
    table
        .store
        .put(link(g2, &hash(2), "2024-03-26T00:00:00.000Z"), None)
        .await
        .unwrap();
    drain.run(&off).await;
    let stored = table
        .store
        .get(&ItemKey::InvitationLink(g2).to_attributes(), true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ttl_of(&stored), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_removals_are_counted_not_treated_as_user_deletes() {
    let table = support::nishiki_table().await;
    let g = group(1);
    let mut old = link(g, &hash(1), "2024-03-24T00:00:00.000Z");
    old.insert(TTL_ATTRIBUTE.into(), AttributeValue::N("1711238400".into()));
    let removal = |kind: ChangeKind, id: &str, seq: &str| StreamChange {
        event_id: id.into(),
        kind,
        sequence_number: Some(seq.parse().unwrap()),
        approximate_creation: Some(now()),
        keys: ItemKey::InvitationLink(g).to_attributes(),
        old_image: Some(old.clone()),
        new_image: None,
        event_source_arn: None,
        size_bytes: Some(120),
        typed: None,
    };
    let ttl = removal(ChangeKind::TtlRemove, "e1", "100");
    let user = removal(ChangeKind::Remove, "e2", "200");

    // Through the whole stream path, as Lambda delivers it.
    let app = app_on(table.store.clone(), &table, now(), true);
    let report = app
        .handle_stream(&encode_event(&[ttl.clone(), user.clone()], None), None)
        .await
        .unwrap();
    let status = |i: usize| format!("{:?}", report.records[i].status);
    assert_eq!(report.records[0].kind, Some(ChangeKind::TtlRemove));
    assert!(
        status(0).contains("TTL removal") && status(0).contains("not a user delete"),
        "{}",
        status(0)
    );
    assert!(!status(1).contains("TTL"), "{}", status(1));
    assert!(report.batch_item_failures.is_empty());

    // The handler counts them.
    let handler = InvitationTtl::with_store(table.store.clone(), true);
    for raw in [&ttl, &user, &ttl] {
        let change = Change::from_stream(raw).unwrap();
        let out = handler.handle(&change, now()).await.unwrap();
        assert!(matches!(out, HandlerOutcome::Nothing(_)), "{out:?}");
    }
    assert_eq!(handler.ttl_removals(), 2);
    assert!(table.keys().await.is_empty(), "nothing was written");
}
