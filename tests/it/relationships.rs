//! The relationship job's stream side against DynamoDB Local: the table is
//! driven the way the live service drives it (separate unordered Puts and
//! Deletes, with its leftovers), then the table's stream is drained through
//! `App::handle_stream` like Lambda does.

use crate::service;
use crate::support;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::keys::{ContainerId, FoodId, ItemKey, Violation};
use service::*;
use support::{Drain, TestTable};
use worker_engine::store::{Store, WriteOp};
use worker_toolkit::layers::RecordingStore;

fn t0() -> DateTime<Utc> {
    "2024-03-25T00:00:00Z".parse().unwrap()
}

fn app(table: &TestTable) -> App {
    let store: Arc<dyn Store> = table.store.clone();
    App::new(
        store,
        Config::for_table(&table.name),
        Arc::new(ManualClock::new(t0())),
    )
}

fn store(table: &TestTable) -> Arc<dyn Store> {
    table.store.clone()
}

fn assert_no_failures(drain: &Drain) {
    for b in &drain.batches {
        assert_eq!(b.failed + b.malformed, 0, "{b:?}");
        assert!(b.batch_item_failures.is_empty(), "{b:?}");
    }
}

#[tokio::test]
async fn group_deletion_cascades_in_one_drain() {
    let table = support::nishiki_table().await;
    let s = store(&table);
    let app = app(&table);
    let mut drain = Drain::new(&table).await;

    let a = sign_up(&s).await;
    let b = sign_up(&s).await;
    join(&s, b.user, a.group).await;
    // c2 is shared with b's live group; c3 is a container the service's
    // group deletion will miss.
    let c2 = add_container(&s, a.group).await;
    parallel(&s, vec![Call::Put(link(b.group, c2))]).await;
    let c3 = add_container(&s, a.group).await;
    parallel(
        &s,
        vec![
            Call::Put(invitation(a.group, &new_hash(), t0())),
            Call::Put(flag(a.group, a.container, FoodId::random())),
            Call::Put(flag(a.group, c3, FoodId::random())),
        ],
    )
    .await;
    drain.run(&app).await;
    let before = table.keys().await;
    assert_eq!(before.len(), 10 + 1 + 2 + 1 + 2 + 3, "{before:?}");

    // The service deletes the group: only a.container, the invitation and
    // the Group item go (c2's and c3's deletes are lost, memberships and
    // links stay).
    delete_group(&s, a.group, &[a.container]).await;
    // A renewal's Put landing after the delete brings the link back.
    parallel(&s, vec![Call::Put(invitation(a.group, &new_hash(), t0()))]).await;
    drain.run(&app).await;
    assert_no_failures(&drain);

    let mut expected = b.keys();
    expected.push(ItemKey::User(a.user));
    expected.push(ItemKey::Container(c2)); // still linked by b's live group
    expected.push(ItemKey::ContainerLink {
        group: b.group,
        container: c2,
    });
    assert_eq!(table.keys().await, encoded(expected));
}

#[tokio::test]
async fn user_deletion_cascades_and_notes_emptied_groups() {
    let table = support::nishiki_table().await;
    let s = store(&table);
    let app = app(&table);
    let mut drain = Drain::new(&table).await;

    let a = sign_up(&s).await;
    let b = sign_up(&s).await;
    join(&s, a.user, b.group).await;
    drain.run(&app).await;

    // The service deletes user a: a's sole group goes (container, group),
    // then the User item; a's memberships and a's group's link stay.
    delete_user(&s, a.user, &[(a.group, vec![a.container])]).await;
    drain.run(&app).await;
    assert_no_failures(&drain);
    assert_eq!(table.keys().await, encoded(b.keys()));

    // b leaves their own group: the group stays, noted for the audit.
    leave(&s, b.user, b.group).await;
    drain.run(&app).await;
    let mut expected = b.keys();
    expected.retain(|k| {
        *k != ItemKey::Membership {
            user: b.user,
            group: b.group,
        }
    });
    expected.push(ItemKey::AuditSuspect {
        violation: Violation::EmptyGroup,
        subject: Box::new(ItemKey::Group(b.group)),
    });
    assert_eq!(table.keys().await, encoded(expected));
    let note = table
        .snapshot()
        .await
        .into_iter()
        .find(|i| support::key_of(i).0 == "AuditSuspect")
        .unwrap();
    assert_eq!(
        note["FirstSeen"],
        aws_sdk_dynamodb::types::AttributeValue::S("2024-03-25T00:00:00.000Z".into())
    );
}

#[tokio::test]
async fn dangling_link_of_a_deleted_container_is_removed() {
    let table = support::nishiki_table().await;
    let s = store(&table);
    let app = app(&table);
    let mut drain = Drain::new(&table).await;

    let a = sign_up(&s).await;
    let c2 = add_container(&s, a.group).await;
    drain.run(&app).await;
    delete_container(&s, a.group, c2, true).await;
    drain.run(&app).await;
    assert_no_failures(&drain);
    assert_eq!(table.keys().await, encoded(a.keys()));
}

#[tokio::test]
async fn children_written_before_their_parents_are_never_touched() {
    let table = support::nishiki_table().await;
    let s = store(&table);
    let app = app(&table);
    let mut drain = Drain::new(&table).await;

    // Sign-up where every child lands (and is streamed) before its parents.
    let f = Family::new();
    let hash = new_hash();
    in_order(
        &s,
        vec![
            Call::Put(link(f.group, f.container)),
            Call::Put(membership(f.user, f.group)),
            Call::Put(invitation(f.group, &hash, t0())),
        ],
    )
    .await;
    drain.run(&app).await;
    in_order(
        &s,
        vec![
            Call::Put(container(f.container, 1)),
            Call::Put(group(f.group)),
            Call::Put(user(f.user)),
        ],
    )
    .await;
    drain.run(&app).await;
    assert_no_failures(&drain);
    let mut expected = f.keys();
    expected.push(ItemKey::InvitationLink(f.group));
    assert_eq!(table.keys().await, encoded(expected.clone()));

    // An old REMOVE of an item that exists again (a restore) cascades nothing.
    in_order(
        &s,
        vec![
            Call::Delete(ItemKey::Group(f.group)),
            Call::Put(group(f.group)),
            Call::Delete(ItemKey::User(f.user)),
            Call::Put(user(f.user)),
            Call::Delete(ItemKey::Container(f.container)),
            Call::Put(container(f.container, 1)),
        ],
    )
    .await;
    drain.run(&app).await;
    assert_no_failures(&drain);
    assert_eq!(table.keys().await, encoded(expected));
}

#[tokio::test]
async fn replaying_a_batch_twice_gives_the_same_table() {
    let table = support::nishiki_table().await;
    let s = store(&table);
    let app = app(&table);
    let mut drain = Drain::new(&table).await;

    let a = sign_up(&s).await;
    let b = sign_up(&s).await;
    join(&s, b.user, a.group).await;
    join(&s, a.user, b.group).await;
    let c2: ContainerId = add_container(&s, a.group).await;
    parallel(
        &s,
        vec![
            Call::Put(invitation(a.group, &new_hash(), t0())),
            Call::Put(flag(a.group, c2, FoodId::random())),
        ],
    )
    .await;
    drain.run(&app).await;

    // Group a deleted, user b deleted, in one batch of service writes.
    delete_group(&s, a.group, &[a.container]).await;
    delete_user(&s, b.user, &[]).await;
    let batch = drain.read().await;
    assert!(batch.len() >= 3, "{}", batch.len());
    drain.run_batch(&app, &batch).await;
    drain.run(&app).await; // the worker's own writes, as Lambda would see them
    let once = table.snapshot().await;
    drain.run_batch(&app, &batch).await;
    drain.run(&app).await;
    let twice = table.snapshot().await;
    assert_eq!(once, twice);
    assert_no_failures(&drain);

    // a stays, with a's membership of b's group (so b's group is not empty);
    // b's group, container and link stay; everything of a's group and of
    // user b is gone.
    let mut expected = vec![
        ItemKey::User(a.user),
        ItemKey::Membership {
            user: a.user,
            group: b.group,
        },
    ];
    expected.extend(
        b.keys()
            .into_iter()
            .filter(|k| !matches!(k, ItemKey::User(_) | ItemKey::Membership { .. })),
    );
    assert_eq!(
        once.iter().map(support::key_of).collect::<Vec<_>>(),
        encoded(expected)
    );
}

/// The service deletes a group with its containers; the worker then gets
/// the Group REMOVE and every Container REMOVE, in one batch. Each
/// dependent is deleted exactly once, and nothing already gone is deleted
/// again: the cascade skips the containers the service removed, and the
/// container removals leave the links of the removed group to its cascade.
#[tokio::test]
async fn a_group_deletion_deletes_each_dependent_once() {
    let table = support::nishiki_table().await;
    let s = store(&table);
    let mut drain = Drain::new(&table).await;
    let a = sign_up(&s).await;
    let b = sign_up(&s).await;
    join(&s, b.user, a.group).await;
    let c2 = add_container(&s, a.group).await;
    let flags = [
        flag(a.group, a.container, FoodId::random()),
        flag(a.group, c2, FoodId::random()),
    ];
    parallel(&s, flags.iter().cloned().map(Call::Put).collect()).await;
    drain.run(&app(&table)).await;

    delete_group(&s, a.group, &[a.container, c2]).await;
    let recorded = Arc::new(RecordingStore::new(table.store.clone()));
    let watched = App::new(
        recorded.clone(),
        Config::for_table(&table.name),
        Arc::new(ManualClock::new(t0())),
    );
    let before: std::collections::BTreeSet<(String, String)> =
        table.keys().await.into_iter().collect();
    drain.run(&watched).await;
    assert_no_failures(&drain);

    let mut expected = b.keys();
    expected.push(ItemKey::User(a.user));
    assert_eq!(table.keys().await, encoded(expected));

    let asked = support::recorded::Log::of(recorded.take());
    // Batched (the expiry job) or guarded by the parent's absence (the
    // cascades).
    let mut deleted: Vec<(String, String)> = asked
        .batch_ops
        .iter()
        .filter_map(|op| match op {
            WriteOp::Delete(key) => Some(support::key_of(key)),
            WriteOp::Put(_) => None,
        })
        .chain(
            asked
                .guarded
                .iter()
                .flat_map(|(_, ops)| ops)
                .filter_map(|op| match op {
                    worker_engine::store::GuardedOp::Delete { key, .. } => {
                        Some(support::key_of(key))
                    }
                    _ => None,
                }),
        )
        .collect();
    deleted.sort();
    // The flags (the cascade's: the container removals leave them alone)
    // and the reminders (the expiry job's) aside, the relationship deletes.
    let (worker_owned, mut deleted): (Vec<_>, Vec<_>) =
        deleted.into_iter().partition(|(pk, sk)| {
            let key = ItemKey::decode(pk, sk).expect("a worker delete decodes");
            key.kind().is_worker_owned()
        });
    let flag_keys: Vec<(String, String)> = flags.iter().map(support::key_of).collect();
    for f in &flag_keys {
        let times = worker_owned.iter().filter(|k| *k == f).count();
        assert_eq!(times, 1, "flag {f:?} deleted {times} times");
    }
    deleted.sort();
    let mut want = encoded(vec![
        ItemKey::Membership {
            user: a.user,
            group: a.group,
        },
        ItemKey::Membership {
            user: b.user,
            group: a.group,
        },
        ItemKey::ContainerLink {
            group: a.group,
            container: a.container,
        },
        ItemKey::ContainerLink {
            group: a.group,
            container: c2,
        },
    ]);
    want.sort();
    assert_eq!(deleted, want, "each dependent deleted once, nothing twice");
    assert!(deleted.iter().all(|k| before.contains(k)));
}
