//! Chat requests on DynamoDB Local: the copies in step in either order and
//! redelivered, conflicts reported and left, acceptance (members,
//! capacity, one notification), and the sparse index after a shuffled
//! history.

use crate::support;

use chat_worker::items::Status;
use chat_worker::keys::{self, ChatKind};
use chat_worker::schema::Table;
use support::*;
use worker_engine::stream::StreamChange;
use worker_testkit::workload::{Seeded, Write, apply_batched};

const CREATED: &str = "2024-05-30T12:00:00Z";

fn attr<'a>(i: &'a worker_engine::item::Item, name: &str) -> Option<&'a str> {
    i.get(name).and_then(|v| v.as_s().ok()).map(String::as_str)
}

/// Deliver `changes` grouped by table, each table's records twice.
async fn redeliver(chat: &Chat, changes: &[StreamChange]) {
    for t in Table::ALL {
        let name = &chat.tables[&t].name;
        let mine: Vec<_> = changes
            .iter()
            .filter(|c| {
                c.event_source_arn
                    .as_deref()
                    .and_then(worker_engine::stream::table_name)
                    == Some(name.as_str())
            })
            .cloned()
            .collect();
        if !mine.is_empty() {
            chat.deliver(&mine).await;
            chat.deliver(&mine).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_copy_follows_in_either_order_and_redelivery_changes_nothing() {
    let mut chat = Chat::new().await;
    let by_user = Request::new("r1", "u1", "g1", CREATED);
    let by_chat = Request::new("r2", "u2", "g1", CREATED);
    chat.put(Table::Users, user("u1")).await;
    chat.put(Table::Users, user("u2")).await;
    chat.put(Table::GroupChats, group_chat("g1", Some(10), Some(0)))
        .await;
    for r in [&by_user, &by_chat] {
        for c in r.both(Status::Pending) {
            chat.put(Table::ChatRequests, c).await;
        }
    }
    chat.settle().await;
    assert_eq!(chat.pending_index().await.len(), 4);

    // The user cancels on their copy; the chat's copy of the other
    // request is cancelled by the chat.
    chat.put(Table::ChatRequests, by_user.copy(0, Status::Cancelled))
        .await;
    chat.put(Table::ChatRequests, by_chat.copy(1, Status::Cancelled))
        .await;
    let records = chat.read().await;
    redeliver(&chat, &records).await;
    chat.settle().await;
    for r in [&by_user, &by_chat] {
        assert_eq!(
            chat.statuses(r).await,
            (Some(Status::Cancelled), Some(Status::Cancelled))
        );
        for k in r.keys() {
            let c = chat.copy(&k).await.unwrap();
            assert_eq!(c.pending_id, None, "a cancelled copy leaves the index");
        }
    }
    assert!(chat.pending_index().await.is_empty());

    // The decisions' records again, twice: nothing changes.
    let settled = chat.snapshot().await;
    redeliver(&chat, &records).await;
    assert_eq!(chat.snapshot().await, settled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_terminal_statuses_are_reported_and_left() {
    let mut chat = Chat::new().await;
    let r = Request::new("r1", "u1", "g1", CREATED);
    chat.put(Table::Users, user("u1")).await;
    chat.put(Table::ChatRequests, r.copy(0, Status::Cancelled))
        .await;
    chat.put(Table::ChatRequests, r.copy(1, Status::Expired))
        .await;
    chat.settle().await;
    assert_eq!(
        chat.statuses(&r).await,
        (Some(Status::Cancelled), Some(Status::Expired))
    );
    assert!(chat.metric("RequestConflicts") >= 1.0);
    assert!(chat.pending_index().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acceptance_adds_the_member_and_one_notification() {
    let mut chat = Chat::new().await;
    let r = Request::new("r1", "u1", "g1", CREATED);
    chat.put(Table::Users, user("u1")).await;
    chat.put(Table::GroupChats, group_chat("g1", Some(5), Some(0)))
        .await;
    for c in r.both(Status::Pending) {
        chat.put(Table::ChatRequests, c).await;
    }
    chat.settle().await;
    // The chat accepts on its copy.
    chat.put(Table::ChatRequests, r.copy(1, Status::Accepted))
        .await;
    let records = chat.read().await;
    redeliver(&chat, &records).await;
    chat.settle().await;

    assert_eq!(
        chat.statuses(&r).await,
        (Some(Status::Accepted), Some(Status::Accepted))
    );
    assert_eq!(chat.members("g1").await, (Some(1), vec!["u1".to_owned()]));
    let notes = notifications(&chat, "u1").await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    let sk = attr(&notes[0], "SK").unwrap();
    assert!(
        sk.starts_with("NOTIFICATION#UNREAD#") && sk.ends_with("#chatrequest-r1-accepted"),
        "{sk}"
    );
    let joined = chat.copy(&r.keys()[1]).await.unwrap().joined_at;
    assert_eq!(joined.as_deref(), Some("2024-06-01T00:00:00.000Z"));

    // Later deliveries (another time, the same records) add nothing.
    chat.clock.advance(chrono::Duration::hours(1));
    let settled = chat.snapshot().await;
    redeliver(&chat, &records).await;
    chat.settle().await;
    assert_eq!(chat.snapshot().await, settled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_chat_rejects_the_acceptance_on_both_copies() {
    let mut chat = Chat::new().await;
    let r = Request::new("r1", "u1", "g1", CREATED);
    chat.put(Table::Users, user("u1")).await;
    chat.put(Table::GroupChats, group_chat("g1", Some(1), Some(1)))
        .await;
    chat.put(Table::GroupChats, member(ChatKind::Group, "g1", "u0"))
        .await;
    chat.put(Table::ChatRequests, r.copy(0, Status::Pending))
        .await;
    chat.put(Table::ChatRequests, r.copy(1, Status::Accepted))
        .await;
    chat.settle().await;
    assert_eq!(
        chat.statuses(&r).await,
        (Some(Status::Rejected), Some(Status::Rejected))
    );
    for k in r.keys() {
        let c = chat.copy(&k).await.unwrap();
        assert_eq!(c.status_reason.as_deref(), Some(keys::REASON_CAPACITY));
        assert_eq!(c.pending_id, None);
    }
    assert_eq!(chat.members("g1").await, (Some(1), vec!["u0".to_owned()]));
    assert!(notifications(&chat, "u1").await.is_empty());
    assert_eq!(chat.metric("RequestConflicts"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_acceptances_for_the_last_seat_add_exactly_one_member() {
    let mut chat = Chat::new().await;
    let a = Request::new("ra", "ua", "g1", CREATED);
    let b = Request::new("rb", "ub", "g1", CREATED);
    chat.put(Table::Users, user("ua")).await;
    chat.put(Table::Users, user("ub")).await;
    chat.put(Table::GroupChats, group_chat("g1", Some(2), Some(1)))
        .await;
    chat.put(Table::GroupChats, member(ChatKind::Group, "g1", "u0"))
        .await;
    for r in [&a, &b] {
        chat.put(Table::ChatRequests, r.copy(0, Status::Pending))
            .await;
    }
    chat.settle().await;
    for r in [&a, &b] {
        chat.put(Table::ChatRequests, r.copy(1, Status::Accepted))
            .await;
    }
    // Each acceptance handled by its own worker, at the same time.
    let records: Vec<_> = chat
        .read()
        .await
        .into_iter()
        .filter(|c| attr(&c.keys, "PK") == Some("GROUPCHAT#g1"))
        .collect();
    assert_eq!(records.len(), 2);
    let other = chat.another_worker();
    let event =
        |c: &StreamChange| worker_engine::stream::encode_event(std::slice::from_ref(c), None);
    use worker_engine::EventFunction;
    let (e0, e1) = (event(&records[0]), event(&records[1]));
    let (x, y) = tokio::join!(chat.worker.invoke_stream(&e0), other.invoke_stream(&e1));
    // A transaction that lost the race is retried, as Lambda would.
    for (report, record) in [(x, &records[0]), (y, &records[1])] {
        if !report.unwrap().batch_item_failures.is_empty() {
            chat.deliver(std::slice::from_ref(record)).await;
        }
    }
    chat.settle().await;

    let (n, users) = chat.members("g1").await;
    assert_eq!(users.len(), 2, "{users:?}");
    assert_eq!(n, Some(2));
    let outcomes = [chat.statuses(&a).await, chat.statuses(&b).await];
    let accepted = outcomes
        .iter()
        .filter(|s| **s == (Some(Status::Accepted), Some(Status::Accepted)))
        .count();
    let rejected = outcomes
        .iter()
        .filter(|s| **s == (Some(Status::Rejected), Some(Status::Rejected)))
        .count();
    assert_eq!((accepted, rejected), (1, 1), "{outcomes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sparse_index_holds_only_pending_requests_after_a_shuffled_history() {
    let mut chat = Chat::new().await;
    let mut rng = Seeded::new(3);
    let terminal = [
        Status::Accepted,
        Status::Rejected,
        Status::Cancelled,
        Status::Expired,
    ];
    chat.put(Table::GroupChats, group_chat("g0", Some(1_000), Some(0)))
        .await;
    chat.put(Table::GroupChats, group_chat("g1", Some(1_000), Some(0)))
        .await;
    // 2,000 client writes: requests created (two copies), some decided on
    // one copy or the other (sometimes both, sometimes differently), some
    // copies rewritten as they are.
    let mut histories: Vec<Vec<(Table, worker_engine::item::Item)>> = Vec::new();
    let mut writes = 0;
    let mut i = 0;
    while writes < 2_000 {
        let user = format!("u{}", i % 37);
        if i < 37 {
            histories.push(vec![(Table::Users, support::user(&user))]);
            writes += 1;
        }
        let r = Request::new(&format!("r{i}"), &user, &format!("g{}", i % 2), CREATED);
        let mut h: Vec<_> = r
            .both(Status::Pending)
            .into_iter()
            .map(|c| (Table::ChatRequests, c))
            .collect();
        use rand::Rng;
        let dice = rng.rng().random_range(0..10);
        if dice >= 3 {
            let which = rng.rng().random_range(0..2);
            let st = terminal[rng.rng().random_range(0..4)];
            h.push((Table::ChatRequests, r.copy(which, st)));
            if dice == 9 {
                let st2 = terminal[rng.rng().random_range(0..4)];
                h.push((Table::ChatRequests, r.copy(1 - which, st2)));
            }
        }
        if dice == 1 {
            h.push((Table::ChatRequests, r.copy(0, Status::Pending)));
        }
        writes += h.len();
        histories.push(h);
        i += 1;
    }
    // Interleave the requests' histories at random, each in its own order.
    let mut order: Vec<usize> = histories
        .iter()
        .enumerate()
        .flat_map(|(i, h)| std::iter::repeat_n(i, h.len()))
        .collect();
    order = rng.shuffled(order);
    let mut next = vec![0; histories.len()];
    let mut writes: Vec<(Table, Write)> = Vec::new();
    for h in order {
        let (t, item) = histories[h][next[h]].clone();
        next[h] += 1;
        writes.push((t, Write::Put(item)));
    }
    // In that order, each table's run of writes in batches (each copy's
    // writes in its order; the records are delivered shuffled below).
    for run in writes.chunk_by(|a, b| a.0 == b.0) {
        let w: Vec<Write> = run.iter().map(|(_, w)| w.clone()).collect();
        apply_batched(chat.store(run[0].0), &w).await;
    }
    // The records delivered shuffled, some twice, in batches.
    let records = chat.read().await;
    let requests_table = chat.tables[&Table::ChatRequests].name.clone();
    let mine: Vec<_> = records
        .into_iter()
        .filter(|c| {
            c.event_source_arn
                .as_deref()
                .and_then(worker_engine::stream::table_name)
                == Some(requests_table.as_str())
        })
        .collect();
    // (A put of an unchanged item writes no record.)
    assert!(mine.len() >= 1_800, "{}", mine.len());
    let delivery = rng.redelivered(mine, 0.1);
    for batch in rng.batches(delivery, 100) {
        chat.deliver(&batch).await;
    }
    chat.settle().await;

    // A Scan of the index: every entry is a pending copy, and every
    // pending copy has an entry.
    let index = chat.pending_index().await;
    let all = chat.tables[&Table::ChatRequests].snapshot().await;
    let mut pending = 0;
    // The copies (the table also holds the worker's join marks).
    let all: Vec<_> = all
        .into_iter()
        .filter(|i| {
            matches!(
                keys::RequestsItem::parse(i),
                Ok(keys::RequestsItem::Copy(_))
            )
        })
        .collect();
    for item in &all {
        let c = chat_worker::items::RequestCopy::from_item(item).unwrap();
        if c.status == Status::Pending {
            pending += 1;
            assert!(c.pending_id.is_some());
        } else {
            assert_eq!(c.pending_id, None, "{:?}", c.key());
        }
    }
    assert!(pending > 0 && pending < all.len(), "{pending}");
    assert_eq!(index.len(), pending);
    for entry in &index {
        let k = keys::RequestKey::parse(entry).unwrap();
        assert_eq!(chat.copy(&k).await.unwrap().status, Status::Pending);
    }
    // Copies agree, except the conflicts (both decided, differently).
    let mut conflicts = 0;
    for item in all
        .iter()
        .filter(|i| attr(i, "PK").unwrap().starts_with("USER#"))
    {
        let c = chat_worker::items::RequestCopy::from_item(item).unwrap();
        let twin = chat.copy(&c.twin_key()).await.unwrap();
        if twin.status != c.status {
            assert!(c.status.is_terminal() && twin.status.is_terminal());
            conflicts += 1;
        }
    }
    assert!(chat.metric("RequestConflicts") >= conflicts as f64);
    // Members match their counts.
    for g in ["g0", "g1"] {
        let (n, users) = chat.members(g).await;
        assert_eq!(n, Some(users.len() as i64));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_copies_are_skipped_without_stalling_the_stream() {
    let mut chat = Chat::new().await;
    let good = Request::new("r1", "u1", "g1", CREATED);
    // A time that is not ISO-8601, an unknown status, a copy filed under
    // another user than its UserId: each rejected alone.
    let mut bad_time = good.copy(0, Status::Pending);
    bad_time.insert("SK".into(), s("CHATREQUEST#yesterday#r2"));
    let mut bad_status = Request::new("r3", "u1", "g1", CREATED).copy(0, Status::Pending);
    bad_status.insert("Status".into(), s("maybe"));
    let mut misfiled = Request::new("r4", "u1", "g1", CREATED).copy(0, Status::Pending);
    misfiled.insert("UserId".into(), s("u9"));
    for item in [bad_time, bad_status, misfiled] {
        chat.put(Table::ChatRequests, item).await;
    }
    chat.put(Table::ChatRequests, good.copy(0, Status::Cancelled))
        .await;
    chat.put(Table::ChatRequests, good.copy(1, Status::Pending))
        .await;
    let records = chat.read().await;
    let event = worker_engine::stream::encode_event(&records, None);
    use worker_engine::EventFunction;
    let report = chat.worker.invoke_stream(&event).await.expect("a batch");
    assert!(report.batch_item_failures.is_empty(), "{report:?}");
    assert_eq!(report.rejected, 3, "{report:?}");
    chat.settle().await;
    assert_eq!(
        chat.statuses(&good).await,
        (Some(Status::Cancelled), Some(Status::Cancelled))
    );
}
