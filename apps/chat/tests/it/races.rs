//! The worker's first promise, one race at a time: it never deletes or
//! settles live data on a decision that stopped being true before its
//! write landed. Each test pauses the worker between the read its
//! decision came from and its write ([`support::race`]), makes the
//! service's write right then, and checks that the worker's write did
//! not land (or landed only where the decision still held).

use crate::support;

use std::sync::Arc;

use chat_worker::items::{Notification, Status};
use chat_worker::keys::{self, ChatItem, ChatKind, CommunityItem};
use chat_worker::schema::Table;
use support::race::{RaceStore, RaceTx, Step, action, reads, scans};
use support::*;
use worker_engine::store::TransactOp;
use worker_engine::store::{ItemWriter, Store};
use worker_engine::stream::RecordStatus;

const CREATED: &str = "2024-05-30T12:00:00Z";

/// A user with one of everything the user cascade removes: a community
/// link, a group and a private chat membership, a pending request and
/// `notes` notifications.
async fn user_with_everything(chat: &mut Chat, u: &str, notes: usize) -> Request {
    chat.put(Table::Users, user(u)).await;
    chat.put(Table::Communities, community("c1")).await;
    chat.put(Table::Communities, community_member("c1", u))
        .await;
    chat.put(Table::GroupChats, group_chat("g1", Some(10), Some(1)))
        .await;
    chat.put(Table::GroupChats, member(ChatKind::Group, "g1", u))
        .await;
    chat.put(Table::PrivateChats, member(ChatKind::Private, "p1", u))
        .await;
    chat.put(Table::GroupChats, group_chat("g2", Some(10), Some(0)))
        .await;
    let r = Request::new("r1", u, "g2", CREATED);
    for c in r.both(Status::Pending) {
        chat.put(Table::ChatRequests, c).await;
    }
    let copy = chat_worker::items::RequestCopy::from_item(&r.copy(0, Status::Accepted)).unwrap();
    for i in 0..notes {
        let mut c = copy.clone();
        c.id = format!("n{i:03}");
        let (_, item) = Notification::accepted(&c, now());
        chat.put(Table::Notifications, item).await;
    }
    chat.settle().await;
    r
}

async fn assert_user_kept_everything(chat: &Chat, u: &str, r: &Request, notes: usize) {
    assert!(chat.get(Table::Users, &keys::user(u)).await.is_some());
    let link = CommunityItem::Member {
        community: "c1".into(),
        user: u.into(),
    };
    assert!(chat.get(Table::Communities, &link.key()).await.is_some());
    assert_eq!(chat.members("g1").await, (Some(1), vec![u.to_owned()]));
    let private = ChatItem::Member {
        kind: ChatKind::Private,
        chat: "p1".into(),
        user: u.into(),
    };
    assert!(
        chat.get(Table::PrivateChats, &private.key())
            .await
            .is_some()
    );
    assert_eq!(
        chat.statuses(r).await,
        (Some(Status::Pending), Some(Status::Pending))
    );
    assert_eq!(notifications(chat, u).await.len(), notes);
}

/// The user cascade read that the user is gone; the user is written
/// again before any of its writes. Nothing of the user's may go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_written_again_after_the_cascade_read_keeps_everything() {
    let mut chat = Chat::new().await;
    let r = user_with_everything(&mut chat, "u1", 3).await;
    let users = chat.store(Table::Users).clone();
    let race = Arc::new(RaceStore::new(
        users.clone(),
        Step::After,
        |req| reads(req, &keys::user("u1")),
        action(move || async move {
            users.put(user("u1"), None).await.expect("the user again");
        }),
    ));
    let layer = race.clone();
    chat.rewire(
        move |t, s| {
            if t == Table::Users {
                layer.clone() as Arc<dyn Store>
            } else {
                s
            }
        },
        |tx| tx,
    );
    chat.delete(Table::Users, keys::user("u1")).await;
    chat.settle().await;
    assert!(race.fired(), "the cascade read the user");
    assert_user_kept_everything(&chat, "u1", &r, 3).await;
}

/// The user is written again half-way through the cascade (before its
/// second chunk of notification deletes): the chunks after it stop,
/// which the record's outcome reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_written_again_mid_cascade_stops_it_at_the_next_chunk() {
    let mut chat = Chat::new().await;
    user_with_everything(&mut chat, "u1", 150).await;
    let users = chat.store(Table::Users).clone();
    let user_pk = keys::user_pk("u1");
    let race = Arc::new(
        RaceTx::new(
            chat.store(Table::ChatRequests).clone(),
            move |ops| {
                ops.iter().any(|op| {
                    matches!(op, TransactOp::Delete { key, .. }
                        if key.get(keys::PK).and_then(|v| v.as_s().ok()) == Some(&user_pk))
                })
            },
            action(move || async move {
                users.put(user("u1"), None).await.expect("the user again");
            }),
        )
        .on_match(1),
    );
    let layer = race.clone();
    chat.rewire(|_, s| s, move |_| layer);
    chat.delete(Table::Users, keys::user("u1")).await;
    let records = chat.read_table(Table::Users).await;
    let report = chat.deliver_report(&records).await;
    assert!(race.fired(), "a second chunk of notification deletes");
    assert!(report.batch_item_failures.is_empty(), "{report:?}");
    let detail = match &report.records[0].status {
        RecordStatus::Handled { detail } => detail.clone(),
        other => panic!("{other:?}"),
    };
    assert!(detail.contains("user exists again"), "{detail}");
    // The first chunk (99 deletes and the check) landed; the rest not.
    assert_eq!(notifications(&chat, "u1").await.len(), 150 - 99);
    chat.settle().await;
    assert_eq!(notifications(&chat, "u1").await.len(), 150 - 99);
}

/// The community cascade read that the community is gone; the community
/// is created again and a member joins before its deletes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_community_created_again_after_the_cascade_read_keeps_its_links() {
    let mut chat = Chat::new().await;
    chat.put(Table::Communities, community("c1")).await;
    for u in ["u1", "u2"] {
        chat.put(Table::Communities, community_member("c1", u))
            .await;
    }
    chat.put(Table::Communities, community_chat("c1", "g1"))
        .await;
    chat.settle().await;
    let communities = chat.store(Table::Communities).clone();
    let own = CommunityItem::Community {
        community: "c1".into(),
    }
    .key();
    let race = Arc::new(RaceStore::new(
        communities.clone(),
        Step::After,
        move |req| reads(req, &own),
        action(move || async move {
            communities.put(community("c1"), None).await.unwrap();
            communities
                .put(community_member("c1", "u3"), None)
                .await
                .unwrap();
        }),
    ));
    let layer = race.clone();
    chat.rewire(
        move |t, s| {
            if t == Table::Communities {
                layer.clone() as Arc<dyn Store>
            } else {
                s
            }
        },
        |tx| tx,
    );
    chat.delete(Table::Communities, community("c1").clone())
        .await;
    chat.settle().await;
    assert!(race.fired());
    let left = chat.tables[&Table::Communities].snapshot().await;
    assert_eq!(left.len(), 5, "the community, three members, one chat");
}

/// An acceptance found the chat full; the chat's capacity is raised
/// before the refusal lands. The request is not rejected: it joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_with_room_again_does_not_reject_the_acceptance() {
    let mut chat = Chat::new().await;
    let r = Request::new("r1", "u1", "g1", CREATED);
    chat.put(Table::Users, user("u1")).await;
    chat.put(Table::GroupChats, group_chat("g1", Some(1), Some(1)))
        .await;
    chat.put(Table::GroupChats, member(ChatKind::Group, "g1", "u0"))
        .await;
    for c in r.both(Status::Pending) {
        chat.put(Table::ChatRequests, c).await;
    }
    chat.settle().await;
    let chats = chat.store(Table::GroupChats).clone();
    let key = ChatItem::Chat {
        kind: ChatKind::Group,
        chat: "g1".into(),
    }
    .key();
    let race = Arc::new(RaceStore::new(
        chats.clone(),
        Step::After,
        move |req| reads(req, &key),
        action(move || async move {
            chats
                .put(group_chat("g1", Some(5), Some(1)), None)
                .await
                .unwrap();
        }),
    ));
    let layer = race.clone();
    chat.rewire(
        move |t, s| {
            if t == Table::GroupChats {
                layer.clone() as Arc<dyn Store>
            } else {
                s
            }
        },
        |tx| tx,
    );
    chat.put(Table::ChatRequests, r.copy(1, Status::Accepted))
        .await;
    chat.settle().await;
    assert!(race.fired(), "the refusal read the chat");
    assert_eq!(
        chat.statuses(&r).await,
        (Some(Status::Accepted), Some(Status::Accepted))
    );
    let (n, mut users) = chat.members("g1").await;
    users.sort();
    assert_eq!((n, users), (Some(2), vec!["u0".into(), "u1".into()]));
}

/// The handler read the user's copy cancelled and decided the chat's
/// copy follows; the client writes its copy again as pending (the
/// request made again) before that write. The chat's copy stays
/// pending, and so does the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_written_again_after_the_read_is_not_followed() {
    let mut chat = Chat::new().await;
    let r = Request::new("r1", "u1", "g1", CREATED);
    chat.put(Table::Users, user("u1")).await;
    for c in r.both(Status::Pending) {
        chat.put(Table::ChatRequests, c).await;
    }
    chat.settle().await;
    let requests = chat.store(Table::ChatRequests).clone();
    let [user_key, _] = r.keys();
    let again = r.copy(0, Status::Pending);
    let race = Arc::new(RaceStore::new(
        requests.clone(),
        Step::After,
        move |req| reads(req, &user_key.key()),
        action(move || async move {
            requests.put(again, None).await.unwrap();
        }),
    ));
    let layer = race.clone();
    chat.rewire(
        move |t, s| {
            if t == Table::ChatRequests {
                layer.clone() as Arc<dyn Store>
            } else {
                s
            }
        },
        |tx| tx,
    );
    chat.put(Table::ChatRequests, r.copy(0, Status::Cancelled))
        .await;
    chat.settle().await;
    assert!(race.fired());
    assert_eq!(
        chat.statuses(&r).await,
        (Some(Status::Pending), Some(Status::Pending))
    );
}

/// The audit read a pending copy whose twin is missing; the service
/// deletes the copy (the request withdrawn) before the twin is
/// recreated. No twin is invented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_deleted_after_the_audit_read_is_not_recreated() {
    let mut chat = Chat::new().await;
    let r = Request::new("r1", "u1", "g1", "2024-05-01T00:00:00Z");
    chat.put(Table::Users, user("u1")).await;
    chat.put(Table::ChatRequests, r.copy(0, Status::Pending))
        .await;
    chat.settle().await;
    let requests = chat.store(Table::ChatRequests).clone();
    let [user_key, chat_key] = r.keys();
    let race = Arc::new(RaceStore::new(
        requests.clone(),
        Step::After,
        move |req| reads(req, &chat_key.key()),
        action(move || async move {
            requests.delete(&user_key.key(), None).await.unwrap();
        }),
    ));
    let layer = race.clone();
    chat.rewire(
        move |t, s| {
            if t == Table::ChatRequests {
                layer.clone() as Arc<dyn Store>
            } else {
                s
            }
        },
        |tx| tx,
    );
    let report = chat.tick("audit-requests").await;
    assert!(race.fired());
    assert_eq!(report["details"]["recreated"], 0, "{report}");
    chat.settle().await;
    assert_eq!(chat.statuses(&r).await, (None, None));
}

/// The expiry read a pending copy from the index; the request is
/// accepted before the expiry's write. It stays accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_accepted_after_the_expiry_read_is_not_expired() {
    let mut chat = Chat::new().await;
    let r = Request::new("r1", "u1", "g1", "2024-04-01T00:00:00Z");
    chat.put(Table::Users, user("u1")).await;
    chat.put(Table::GroupChats, group_chat("g1", Some(5), Some(0)))
        .await;
    for c in r.both(Status::Pending) {
        chat.put(Table::ChatRequests, c).await;
    }
    chat.settle().await;
    let requests = chat.store(Table::ChatRequests).clone();
    let accepted = r.both(Status::Accepted);
    let race = Arc::new(RaceStore::new(
        requests.clone(),
        Step::After,
        scans,
        action(move || async move {
            for c in accepted {
                requests.put(c, None).await.unwrap();
            }
        }),
    ));
    let layer = race.clone();
    chat.rewire(
        move |t, s| {
            if t == Table::ChatRequests {
                layer.clone() as Arc<dyn Store>
            } else {
                s
            }
        },
        |tx| tx,
    );
    let report = chat.tick("expire-requests").await;
    assert!(race.fired());
    assert_eq!(report["details"]["expired"], 0, "{report}");
    chat.settle().await;
    assert_eq!(
        chat.statuses(&r).await,
        (Some(Status::Accepted), Some(Status::Accepted))
    );
    assert_eq!(chat.members("g1").await, (Some(1), vec!["u1".to_owned()]));
}

/// The request handler read that a pending copy's user is gone; the user
/// is written again before the cancellation. The request stays pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_written_again_after_the_request_handler_read_keeps_the_request() {
    let mut chat = Chat::new().await;
    let r = Request::new("r1", "u1", "g1", CREATED);
    let users = chat.store(Table::Users).clone();
    let race = Arc::new(RaceStore::new(
        users.clone(),
        Step::After,
        |req| reads(req, &keys::user("u1")),
        action(move || async move {
            users.put(user("u1"), None).await.unwrap();
        }),
    ));
    let layer = race.clone();
    chat.rewire(
        move |t, s| {
            if t == Table::Users {
                layer.clone() as Arc<dyn Store>
            } else {
                s
            }
        },
        |tx| tx,
    );
    // Copies of a user not (yet) written: the handler finds no user.
    for c in r.both(Status::Pending) {
        chat.put(Table::ChatRequests, c).await;
    }
    let records = chat.read_table(Table::ChatRequests).await;
    chat.deliver(&records).await;
    chat.settle().await;
    assert_eq!(
        chat.statuses(&r).await,
        (Some(Status::Pending), Some(Status::Pending))
    );
    assert!(race.fired(), "the handler read the user");
}
