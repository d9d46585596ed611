//! What the live Nishiki service does to the table, call by call (see
//! `docs/NISHIKI-TABLE.md`): single Puts and Deletes, parallel and unordered, no
//! conditions, and the leftovers that come with it. Shared by
//! `tests/it/relationships.rs` and `tests/it/audit.rs`.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, NaiveDate, Utc};
use nishiki_worker::items::{Container, Entity, Food, Group, InvitationLink, Item, User};
use nishiki_worker::keys::{ContainerId, FoodId, GroupId, ItemKey, UserId};
use rand::seq::SliceRandom;
use worker_engine::store::{Store, WriteOutcome};

/// One write call of the service.
#[derive(Debug, Clone)]
pub(crate) enum Call {
    Put(Item),
    Delete(ItemKey),
}

/// Run calls the way the service does: all at once, in random order.
pub(crate) async fn parallel(store: &Arc<dyn Store>, mut calls: Vec<Call>) {
    calls.shuffle(&mut rand::rng());
    let futures = calls.into_iter().map(|c| {
        let store = store.clone();
        async move {
            let out = match c {
                Call::Put(item) => store.put(item, None).await,
                Call::Delete(key) => store.delete(&key.to_attributes(), None).await,
            };
            assert_eq!(out.expect("service write"), WriteOutcome::Applied);
        }
    });
    futures::future::join_all(futures).await;
}

/// Run calls one after the other, in the given order.
pub(crate) async fn in_order(store: &Arc<dyn Store>, calls: Vec<Call>) {
    for c in calls {
        parallel(store, vec![c]).await;
    }
}

pub(crate) fn user(id: UserId) -> Item {
    Entity::User(User {
        id,
        user_name: "Alice Example".into(),
        email_address: format!("{id}@example.com"),
        extra: Item::new(),
    })
    .to_item()
}

pub(crate) fn group(id: GroupId) -> Item {
    Entity::Group(Group {
        id,
        group_name: "Home".into(),
        extra: Item::new(),
    })
    .to_item()
}

pub(crate) use crate::support::workload::{link, membership};

pub(crate) fn container(id: ContainerId, foods: usize) -> Item {
    let created: DateTime<Utc> = "2024-03-22T22:03:33.123Z".parse().unwrap();
    Entity::Container(Container {
        id,
        container_name: "Fridge".into(),
        foods: (0..foods)
            .map(|i| Food {
                food_id: FoodId::random(),
                name: format!("Food {i}"),
                unit: None,
                quantity: Some(1.0),
                category: Some("dairy".into()),
                // No expiry: the expiry job (registered in the same App) has
                // nothing to flag, so the tables here hold only what these
                // tests are about.
                expiry: None,
                created_at: created,
            })
            .collect(),
        extra: Item::new(),
    })
    .to_item()
}

pub(crate) fn invitation(group: GroupId, hash: &str, expiry: DateTime<Utc>) -> Item {
    Entity::InvitationLink(InvitationLink {
        group,
        invitation_link_hash: hash.into(),
        link_expiry_datetime: expiry,
        extra: Item::new(),
    })
    .to_item()
}

/// A worker-owned expiry flag (shape as the expiry job writes it: key plus
/// plain attributes, no indexed attribute).
pub(crate) fn flag(group: GroupId, container: ContainerId, food: FoodId) -> Item {
    let mut item = ItemKey::ExpiringFood {
        group,
        container,
        food,
    }
    .to_attributes();
    item.insert("Status".into(), AttributeValue::S("nearing".into()));
    item
}

/// A worker-owned expiry reminder.
pub(crate) fn reminder(date: NaiveDate, container: ContainerId, food: FoodId) -> Item {
    let mut item = ItemKey::ExpiryReminder {
        date,
        container,
        food,
    }
    .to_attributes();
    item.insert("Status".into(), AttributeValue::S("pending".into()));
    item
}

/// What one sign-up created.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Family {
    pub user: UserId,
    pub group: GroupId,
    pub container: ContainerId,
}

impl Family {
    pub(crate) fn new() -> Self {
        Family {
            user: UserId::random(),
            group: GroupId::random(),
            container: ContainerId::random(),
        }
    }

    /// The five writes of a sign-up.
    pub(crate) fn sign_up_calls(&self) -> Vec<Call> {
        vec![
            Call::Put(user(self.user)),
            Call::Put(group(self.group)),
            Call::Put(membership(self.user, self.group)),
            Call::Put(container(self.container, 2)),
            Call::Put(link(self.group, self.container)),
        ]
    }

    /// Every key a sign-up creates.
    pub(crate) fn keys(&self) -> Vec<ItemKey> {
        vec![
            ItemKey::User(self.user),
            ItemKey::Group(self.group),
            ItemKey::Membership {
                user: self.user,
                group: self.group,
            },
            ItemKey::Container(self.container),
            ItemKey::ContainerLink {
                group: self.group,
                container: self.container,
            },
        ]
    }
}

/// Sign-up: user, group, membership, container and link written in parallel.
pub(crate) async fn sign_up(store: &Arc<dyn Store>) -> Family {
    let f = Family::new();
    parallel(store, f.sign_up_calls()).await;
    f
}

/// Joining through a link: the membership, with no check that the group exists.
pub(crate) async fn join(store: &Arc<dyn Store>, user: UserId, group: GroupId) {
    parallel(store, vec![Call::Put(membership(user, group))]).await;
}

/// Adding a container to a group.
pub(crate) async fn add_container(store: &Arc<dyn Store>, group: GroupId) -> ContainerId {
    let c = ContainerId::random();
    parallel(
        store,
        vec![Call::Put(container(c, 1)), Call::Put(link(group, c))],
    )
    .await;
    c
}

/// Deleting a group: its containers, its invitation link and the Group item;
/// memberships and container links are left behind.
pub(crate) async fn delete_group(
    store: &Arc<dyn Store>,
    group: GroupId,
    containers: &[ContainerId],
) {
    let mut calls: Vec<Call> = containers
        .iter()
        .map(|c| Call::Delete(ItemKey::Container(*c)))
        .collect();
    calls.push(Call::Delete(ItemKey::InvitationLink(group)));
    calls.push(Call::Delete(ItemKey::Group(group)));
    parallel(store, calls).await;
}

/// Deleting a user: groups where they were the only member (as above) and
/// the User item; their memberships are left behind.
pub(crate) async fn delete_user(
    store: &Arc<dyn Store>,
    user: UserId,
    sole_groups: &[(GroupId, Vec<ContainerId>)],
) {
    for (g, cs) in sole_groups {
        delete_group(store, *g, cs).await;
    }
    parallel(store, vec![Call::Delete(ItemKey::User(user))]).await;
}

/// Deleting a container: the Container item first, then its link "without
/// waiting" (here: the link delete is lost when `lose_link`).
pub(crate) async fn delete_container(
    store: &Arc<dyn Store>,
    group: GroupId,
    container: ContainerId,
    lose_link: bool,
) {
    in_order(store, vec![Call::Delete(ItemKey::Container(container))]).await;
    if !lose_link {
        in_order(
            store,
            vec![Call::Delete(ItemKey::ContainerLink { group, container })],
        )
        .await;
    }
}

/// Leaving a group: the membership only (the last member may leave).
pub(crate) async fn leave(store: &Arc<dyn Store>, user: UserId, group: GroupId) {
    parallel(
        store,
        vec![Call::Delete(ItemKey::Membership { user, group })],
    )
    .await;
}

/// A random 32-hex invitation hash.
pub(crate) fn new_hash() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Every `(PK, SK)` of a set of keys, sorted (to compare with `TestTable::keys`).
pub(crate) fn encoded(keys: impl IntoIterator<Item = ItemKey>) -> Vec<(String, String)> {
    let set: BTreeSet<(String, String)> = keys.into_iter().map(|k| k.encode()).collect();
    set.into_iter().collect()
}
