//! Cascades on DynamoDB Local: a user removed (memberships, pending
//! requests, notifications), a user removed while a request of theirs is
//! pending and being accepted, a community removed.

use crate::support;

use chat_worker::items::{Notification, Status};
use chat_worker::keys::{self, ChatKind};
use chat_worker::schema::Table;
use support::*;

const CREATED: &str = "2024-05-30T12:00:00Z";

fn pks(items: &[worker_engine::item::Item]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|i| {
            (
                i["PK"].as_s().unwrap().clone(),
                i.get("SK")
                    .map(|v| v.as_s().unwrap().clone())
                    .unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_user_leaves_no_memberships_pending_requests_or_notifications() {
    let mut chat = Chat::new().await;
    for u in ["u1", "u2"] {
        chat.put(Table::Users, user(u)).await;
    }
    chat.put(Table::Communities, community("c1")).await;
    for u in ["u1", "u2"] {
        chat.put(Table::Communities, community_member("c1", u))
            .await;
    }
    chat.put(Table::Communities, community_chat("c1", "g1"))
        .await;
    chat.put(Table::GroupChats, group_chat("g1", Some(10), Some(2)))
        .await;
    chat.put(Table::GroupChats, group_chat("g2", Some(10), Some(0)))
        .await;
    for u in ["u1", "u2"] {
        chat.put(Table::GroupChats, member(ChatKind::Group, "g1", u))
            .await;
        chat.put(Table::PrivateChats, member(ChatKind::Private, "p1", u))
            .await;
    }
    let pending = Request::new("r1", "u1", "g2", CREATED);
    let decided = Request::new("r0", "u1", "g2", "2024-05-01T00:00:00Z");
    let others = Request::new("r2", "u2", "g2", CREATED);
    for c in pending
        .both(Status::Pending)
        .into_iter()
        .chain(decided.both(Status::Rejected))
        .chain(others.both(Status::Pending))
    {
        chat.put(Table::ChatRequests, c).await;
    }
    let copy = chat.copy(&decided.keys()[0]).await.unwrap();
    for (i, u) in ["u1", "u1", "u2"].iter().enumerate() {
        let mut c = copy.clone();
        c.id = format!("r{i}");
        c.user_id = (*u).into();
        let (_, item) = Notification::accepted(&c, now());
        chat.put(Table::Notifications, item).await;
    }
    chat.settle().await;

    chat.delete(Table::Users, keys::user("u1")).await;
    chat.settle().await;

    let all = chat.snapshot().await;
    for (t, items) in &all {
        for (pk, sk) in pks(items) {
            if *t == Table::ChatRequests {
                continue;
            }
            assert!(
                !pk.contains("u1") && !sk.contains("u1"),
                "{t:?} still holds {pk} / {sk}"
            );
        }
    }
    assert_eq!(pks(&all[&Table::Communities]).len(), 3);
    assert_eq!(chat.members("g1").await, (Some(1), vec!["u2".to_owned()]));
    assert_eq!(notifications(&chat, "u2").await.len(), 1);
    for k in pending.keys() {
        let c = chat.copy(&k).await.unwrap();
        assert_eq!(c.status, Status::Cancelled);
        assert_eq!(c.status_reason.as_deref(), Some(keys::REASON_USER_DELETED));
    }
    assert_eq!(
        chat.statuses(&decided).await,
        (Some(Status::Rejected), Some(Status::Rejected))
    );
    let index = chat.pending_index().await;
    assert_eq!(index.len(), 2, "only u2's request is pending");
    assert!(
        pks(&index)
            .iter()
            .all(|(pk, sk)| pk == "USER#u2" || sk.ends_with("#r2"))
    );

    // Delivered again: nothing changes.
    let settled = chat.snapshot().await;
    chat.put(Table::Users, user("u1")).await;
    chat.delete(Table::Users, keys::user("u1")).await;
    chat.settle().await;
    assert_eq!(chat.snapshot().await, settled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_removed_while_their_request_is_pending_and_accepted_meanwhile() {
    let mut chat = Chat::new().await;
    chat.put(Table::Users, user("u1")).await;
    chat.put(Table::GroupChats, group_chat("g1", Some(10), Some(0)))
        .await;
    let racing = Request::new("r1", "u1", "g1", CREATED);
    let waiting = Request::new("r2", "u1", "g1", "2024-05-31T00:00:00Z");
    for r in [&racing, &waiting] {
        for c in r.both(Status::Pending) {
            chat.put(Table::ChatRequests, c).await;
        }
    }
    chat.settle().await;
    // The user is deleted; before the worker sees it, the chat accepts.
    chat.delete(Table::Users, keys::user("u1")).await;
    chat.put(Table::ChatRequests, racing.copy(1, Status::Accepted))
        .await;
    chat.settle().await;

    assert_eq!(chat.members("g1").await, (Some(0), vec![]));
    assert!(notifications(&chat, "u1").await.is_empty());
    for r in [&racing, &waiting] {
        for k in r.keys() {
            let c = chat.copy(&k).await.unwrap();
            assert_eq!(c.status, Status::Cancelled, "{k:?}");
            assert_eq!(c.status_reason.as_deref(), Some(keys::REASON_USER_DELETED));
            assert_eq!(c.pending_id, None);
        }
    }
    assert!(chat.pending_index().await.is_empty());
    assert_eq!(chat.metric("RequestConflicts"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_community_leaves_no_links() {
    let mut chat = Chat::new().await;
    for c in ["c1", "c2"] {
        chat.put(Table::Communities, community(c)).await;
        chat.put(Table::Communities, community_member(c, "u1"))
            .await;
        chat.put(Table::Communities, community_member(c, "u2"))
            .await;
        chat.put(Table::Communities, community_chat(c, "g1")).await;
    }
    chat.settle().await;
    chat.delete(Table::Communities, community("c1")).await;
    chat.settle().await;
    let left = pks(&chat.tables[&Table::Communities].snapshot().await);
    assert_eq!(left.len(), 4);
    assert!(left.iter().all(|(pk, _)| pk == "COMMUNITY#c2"));
    // A link removed alone leaves the community as it is.
    chat.delete(Table::Communities, community_member("c2", "u1"))
        .await;
    chat.settle().await;
    assert_eq!(chat.tables[&Table::Communities].snapshot().await.len(), 3);
}
