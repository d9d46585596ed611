//! What clients write besides the happy path, on DynamoDB Local:
//!
//! - an accepted copy written again (without `JoinedAt`), after the
//!   notification was read and the member left: one notification, one
//!   member add, ever;
//! - copies written without `PendingId` by a user who is then removed,
//!   whichever stream is handled first: cancelled;
//! - REMOVE records without an old image (DynamoDB Local's second REMOVE
//!   of two racing deletes): handled from their keys, never rejected.

use crate::support;

use chat_worker::items::Status;
use chat_worker::keys::{self, ChatKind};
use chat_worker::schema::Table;
use support::*;
use worker_engine::item::Item;
use worker_engine::stream::ChangeKind;

const CREATED: &str = "2024-05-30T12:00:00Z";

fn sk(i: &Item) -> String {
    i["SK"].as_s().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_copy_written_again_joins_and_notifies_once() {
    let mut chat = Chat::new().await;
    let r = Request::new("r1", "u1", "g1", CREATED);
    chat.put(Table::Users, user("u1")).await;
    chat.put(Table::GroupChats, group_chat("g1", Some(5), Some(0)))
        .await;
    for c in r.both(Status::Pending) {
        chat.put(Table::ChatRequests, c).await;
    }
    chat.settle().await;
    chat.put(Table::ChatRequests, r.copy(1, Status::Accepted))
        .await;
    chat.settle().await;
    assert_eq!(chat.members("g1").await, (Some(1), vec!["u1".to_owned()]));
    assert_eq!(notifications(&chat, "u1").await.len(), 1);
    let joined = chat.copy(&r.keys()[1]).await.unwrap().joined_at;
    assert!(joined.is_some());

    // An hour later the client writes the accepted copy again, as it
    // wrote it first (no JoinedAt).
    chat.clock.advance(chrono::Duration::hours(1));
    chat.put(Table::ChatRequests, r.copy(1, Status::Accepted))
        .await;
    chat.settle().await;
    assert_eq!(chat.members("g1").await, (Some(1), vec!["u1".to_owned()]));
    let notes = notifications(&chat, "u1").await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(
        chat.copy(&r.keys()[1]).await.unwrap().joined_at,
        joined,
        "the first join's time, restored"
    );

    // The user reads the notification (its key moves to READ) and leaves
    // the chat; both copies are written again.
    let unread = notes[0].clone();
    let mut read = unread.clone();
    read.insert(
        "SK".into(),
        s(&sk(&unread).replace("NOTIFICATION#UNREAD#", "NOTIFICATIONREAD#")),
    );
    read.insert(keys::READ.into(), AttributeValueExt::bool(true));
    chat.put(Table::Notifications, read).await;
    chat.delete(
        Table::Notifications,
        [("PK", unread["PK"].clone()), ("SK", unread["SK"].clone())]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
    .await;
    chat.delete(
        Table::GroupChats,
        chat_worker::keys::ChatItem::Member {
            kind: ChatKind::Group,
            chat: "g1".into(),
            user: "u1".into(),
        }
        .key(),
    )
    .await;
    chat.settle().await;
    assert_eq!(chat.members("g1").await, (Some(0), vec![]));
    chat.clock.advance(chrono::Duration::hours(1));
    for c in r.both(Status::Accepted) {
        chat.put(Table::ChatRequests, c).await;
    }
    chat.settle().await;
    let notes = notifications(&chat, "u1").await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(sk(&notes[0]).starts_with("NOTIFICATIONREAD#"));
    assert_eq!(
        chat.members("g1").await,
        (Some(0), vec![]),
        "no second join"
    );
    assert_eq!(
        chat.statuses(&r).await,
        (Some(Status::Accepted), Some(Status::Accepted))
    );
}

struct AttributeValueExt;
impl AttributeValueExt {
    fn bool(b: bool) -> aws_sdk_dynamodb::types::AttributeValue {
        aws_sdk_dynamodb::types::AttributeValue::Bool(b)
    }
}

/// A request whose copies carry no `PendingId` (the client left it out).
fn without_pending_id(r: &Request) -> [Item; 2] {
    r.both(Status::Pending).map(|mut c| {
        c.remove(keys::PENDING_ID);
        c
    })
}

async fn assert_cancelled(chat: &Chat, r: &Request) {
    assert_copies_cancelled(chat, r).await;
    assert!(chat.pending_index().await.is_empty());
}

async fn assert_copies_cancelled(chat: &Chat, r: &Request) {
    for k in r.keys() {
        let c = chat.copy(&k).await.unwrap();
        assert_eq!(c.status, Status::Cancelled, "{k:?}");
        assert_eq!(c.status_reason.as_deref(), Some(keys::REASON_USER_DELETED));
        assert_eq!(c.pending_id, None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_without_pending_id_of_a_removed_user_are_cancelled_user_record_first() {
    let mut chat = Chat::new().await;
    let r = Request::new("r1", "u1", "g1", CREATED);
    chat.put(Table::Users, user("u1")).await;
    chat.put(Table::GroupChats, group_chat("g1", Some(5), Some(0)))
        .await;
    for c in without_pending_id(&r) {
        chat.put(Table::ChatRequests, c).await;
    }
    chat.delete(Table::Users, keys::user("u1")).await;
    // The Users stream first: the cascade runs before the request's
    // records are handled (no PendingId, so no index entry yet).
    chat.settle_table(Table::Users).await;
    chat.settle().await;
    assert_cancelled(&chat, &r).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_without_pending_id_of_a_removed_user_are_cancelled_request_record_first() {
    let mut chat = Chat::new().await;
    let r = Request::new("r1", "u1", "g1", CREATED);
    chat.put(Table::Users, user("u1")).await;
    chat.put(Table::GroupChats, group_chat("g1", Some(5), Some(0)))
        .await;
    chat.settle().await;
    chat.delete(Table::Users, keys::user("u1")).await;
    for c in without_pending_id(&r) {
        chat.put(Table::ChatRequests, c).await;
    }
    chat.settle_table(Table::ChatRequests).await;
    chat.settle().await;
    assert_cancelled(&chat, &r).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_written_after_their_user_was_removed_are_cancelled() {
    let mut chat = Chat::new().await;
    let r = Request::new("r1", "u1", "g1", CREATED);
    chat.put(Table::Users, user("u1")).await;
    chat.settle().await;
    chat.delete(Table::Users, keys::user("u1")).await;
    chat.settle().await;
    // A late client: the user's cascade is over.
    for c in without_pending_id(&r) {
        chat.put(Table::ChatRequests, c).await;
    }
    chat.settle().await;
    assert_cancelled(&chat, &r).await;
}

/// DynamoDB Local emits a second REMOVE without an old image when two
/// deletes of one item race. Every table's handlers take it from its
/// keys: the user's cascade runs, a member's removal recounts, the rest
/// is skipped; nothing is rejected (which would park it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removals_without_an_old_image_are_handled_from_their_keys() {
    let mut chat = Chat::new().await;
    let r = Request::new("r1", "u1", "g2", CREATED);
    chat.put(Table::Users, user("u1")).await;
    chat.put(Table::Users, user("u2")).await;
    chat.put(Table::Communities, community("c1")).await;
    chat.put(Table::Communities, community_member("c1", "u1"))
        .await;
    chat.put(Table::Communities, community("c2")).await;
    chat.put(Table::Communities, community_member("c2", "u2"))
        .await;
    chat.put(Table::GroupChats, group_chat("g1", Some(5), Some(2)))
        .await;
    chat.put(Table::GroupChats, group_chat("g2", Some(5), Some(0)))
        .await;
    for u in ["u1", "u2"] {
        chat.put(Table::GroupChats, member(ChatKind::Group, "g1", u))
            .await;
    }
    chat.put(Table::PrivateChats, member(ChatKind::Private, "p1", "u1"))
        .await;
    let withdrawn = Request::new("r2", "u2", "g2", CREATED);
    for c in r
        .both(Status::Pending)
        .into_iter()
        .chain(withdrawn.both(Status::Pending))
    {
        chat.put(Table::ChatRequests, c).await;
    }
    chat.settle().await;

    // The removals, read but not handled.
    chat.delete(Table::Users, keys::user("u1")).await;
    chat.delete(Table::Communities, community("c2")).await;
    chat.delete(Table::GroupChats, member(ChatKind::Group, "g1", "u2"))
        .await;
    chat.delete(Table::PrivateChats, member(ChatKind::Private, "p1", "u1"))
        .await;
    chat.delete(Table::ChatRequests, withdrawn.keys()[0].key())
        .await;
    let mut removals = chat.read().await;
    assert_eq!(removals.len(), 5);
    for c in &mut removals {
        assert_eq!(c.kind, ChangeKind::Remove);
        c.old_image = None;
    }
    for t in Table::ALL {
        let name = chat.tables[&t].name.clone();
        let mine: Vec<_> = removals
            .iter()
            .filter(|c| {
                c.event_source_arn
                    .as_deref()
                    .and_then(worker_engine::stream::table_name)
                    == Some(name.as_str())
            })
            .cloned()
            .collect();
        if mine.is_empty() {
            continue;
        }
        // Twice: the duplicate, as DynamoDB Local sends it.
        for _ in 0..2 {
            let report = chat.deliver_report(&mine).await;
            assert!(report.batch_item_failures.is_empty(), "{t:?}: {report:?}");
            assert_eq!(
                (report.rejected, report.malformed, report.parked),
                (0, 0, 0),
                "{t:?}: {report:?}"
            );
        }
    }
    chat.settle().await;
    // The cascades ran from the keys alone, and the count followed.
    assert_eq!(chat.members("g1").await, (Some(0), vec![]));
    let left = chat.tables[&Table::Communities].snapshot().await;
    assert_eq!(left.len(), 1, "only c1 itself: {left:?}");
    assert_copies_cancelled(&chat, &r).await;
    assert_eq!(
        chat.statuses(&withdrawn).await,
        (None, Some(Status::Pending)),
        "a copy's removal is left to the audit"
    );
}
