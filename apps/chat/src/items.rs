//! Typed items of the chat tables over the engine's `Item`, with
//! `serde_dynamo` (`worker_engine::item::decode`, `encode`): no attribute
//! value reaches a decoding error, nor a log line.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use worker_engine::item::{Item, decode, encode};

use crate::keys::{self, RequestKey};

/// A request's status. `pending` first, then one terminal status that never
/// goes back to `pending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Open: neither accepted nor refused yet; the copy carries `PendingId`.
    Pending,
    /// Accepted (by a client); from the group chat's copy the worker then
    /// makes the user a member, once per request.
    Accepted,
    /// Refused (by a client, or by the worker: the chat full, `capacity`, or
    /// gone, `chat-deleted`).
    Rejected,
    /// Cancelled (by a client, or by the worker when the user was deleted:
    /// `user-deleted`).
    Cancelled,
    /// Still pending after `REQUEST_EXPIRY_DAYS` (set by `expire-requests`).
    Expired,
}

impl Status {
    /// The value stored in `Status` (`pending`, `accepted`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Accepted => "accepted",
            Status::Rejected => "rejected",
            Status::Cancelled => "cancelled",
            Status::Expired => "expired",
        }
    }

    /// Whether the status is final (anything but `pending`): it never changes
    /// back.
    pub fn is_terminal(self) -> bool {
        self != Status::Pending
    }
}

/// One copy of a chat request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RequestCopy {
    /// The copy's key: set by [`Self::from_item`], never stored as an attribute.
    #[serde(skip)]
    pub key: Option<RequestKey>,
    /// `Id`: the request's id, the same on both copies and in the `SK`.
    pub id: String,
    /// `UserId`: the user asking to join.
    pub user_id: String,
    /// `ChatId`: the group chat asked to join.
    pub chat_id: String,
    /// `CreatedAt`: ISO-8601, as the client wrote it.
    pub created_at: String,
    /// `Status`: where the request stands.
    pub status: Status,
    /// `Seen`: whether the user has seen the copy (absent: `false`).
    #[serde(default)]
    pub seen: bool,
    /// `PendingId`: present while pending only; the sort key of the sparse
    /// `PendingRequestsIndex`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_id: Option<String>,
    /// `StatusReason`: why the worker set a terminal status (`capacity`,
    /// `user-deleted`, `chat-deleted`, `expired`); `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// `JoinedAt` (the group chat's copy): when the worker made the user a
    /// member; `None` until then, and after a client rewrites the copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joined_at: Option<String>,
}

impl RequestCopy {
    /// A request copy, or why it is not one (no attribute value in the text).
    pub fn from_item(item: &Item) -> Result<RequestCopy, String> {
        let key = RequestKey::parse(item).map_err(|e| e.to_string())?;
        RequestCopy::of_key(key, decode(item, "chat request")?)
    }

    /// `copy`, read from the item whose key is `key`, with its key; or why
    /// its attributes disagree with the key.
    pub fn of_key(key: RequestKey, mut copy: RequestCopy) -> Result<RequestCopy, String> {
        if copy.id != key.request {
            return Err("chat request: Id differs from the request id of its key".into());
        }
        let owner_matches = match &key.owner {
            keys::Owner::User(u) => *u == copy.user_id,
            keys::Owner::GroupChat(c) => *c == copy.chat_id,
        };
        if !owner_matches {
            return Err("chat request: UserId or ChatId differs from the owner in its PK".into());
        }
        copy.key = Some(key);
        Ok(copy)
    }

    /// The copy's key.
    ///
    /// # Panics
    ///
    /// On a copy not read by [`Self::from_item`] (which sets the key).
    pub fn key(&self) -> &RequestKey {
        self.key.as_ref().expect("a decoded copy has its key")
    }

    /// The item, keys included.
    pub fn to_item(&self) -> Item {
        encode(self, self.key().key())
    }

    /// The other copy's key (`None`: the ids disagree with the key, which
    /// [`Self::from_item`] rejects).
    pub fn twin_key(&self) -> RequestKey {
        let key = self.key();
        let other = match key.owner {
            keys::Owner::User(_) => keys::Owner::GroupChat(self.chat_id.clone()),
            keys::Owner::GroupChat(_) => keys::Owner::User(self.user_id.clone()),
        };
        key.twin(other)
    }
}

/// A group chat's own item (`GROUPCHAT#<id>` / `GROUPCHAT#<id>`): the
/// attributes the worker reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct GroupChat {
    /// `Capacity`: the most members the chat takes (`None`: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<i64>,
    /// `NumMembers`: the worker's count of the chat's member items (`None`:
    /// not written yet; the acceptance counts it as 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_members: Option<i64>,
}

impl GroupChat {
    /// The chat's attributes, or why they do not decode (no attribute value in
    /// the text).
    pub fn from_item(item: &Item) -> Result<GroupChat, String> {
        decode(item, "group chat")
    }
}

/// The notification of an accepted request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Notification {
    /// `Id`: `chatrequest-<request>-accepted`, one per request.
    pub id: String,
    /// `NotificationType`: `ChatRequestAccepted`.
    pub notification_type: String,
    /// The chat the notification is about.
    pub target: String,
    /// `CreatedAt`: the acceptance's `JoinedAt`, ISO-8601.
    pub created_at: String,
    /// `Read`: `false` when the worker writes it.
    pub read: bool,
    /// `Seen`: `false` when the worker writes it.
    pub seen: bool,
}

impl Notification {
    /// The notification telling `copy`'s user that the request was
    /// accepted, at `now`; its key.
    pub fn accepted(copy: &RequestCopy, now: DateTime<Utc>) -> (keys::NotificationKey, Item) {
        let id = keys::acceptance_notification_id(&copy.id);
        let key = keys::NotificationKey {
            user: copy.user_id.clone(),
            read: false,
            time: now,
            id: id.clone(),
        };
        let n = Notification {
            id,
            notification_type: keys::NOTIFICATION_REQUEST_ACCEPTED.into(),
            target: copy.chat_id.clone(),
            created_at: keys::format_time(now),
            read: false,
            seen: false,
        };
        let item = encode(&n, key.key());
        (key, item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;
    use chrono::TimeZone;

    fn copy() -> RequestCopy {
        let t = Utc.with_ymd_and_hms(2024, 5, 1, 10, 0, 0).unwrap();
        let [k, _] = RequestKey::copies("u1", "g1", t, "r1");
        RequestCopy {
            key: Some(k),
            id: "r1".into(),
            user_id: "u1".into(),
            chat_id: "g1".into(),
            created_at: keys::format_time(t),
            status: Status::Pending,
            seen: false,
            pending_id: Some("p1".into()),
            status_reason: None,
            joined_at: None,
        }
    }

    #[test]
    fn a_copy_reads_back_and_knows_its_twin() {
        let c = copy();
        let item = c.to_item();
        assert_eq!(item["Status"], AttributeValue::S("pending".into()));
        assert_eq!(RequestCopy::from_item(&item), Ok(c.clone()));
        assert_eq!(c.twin_key().owner, keys::Owner::GroupChat("g1".into()));
        assert_eq!(c.twin_key().twin(c.key().owner.clone()), *c.key());
    }

    #[test]
    fn bad_copies_say_why_without_values() {
        let mut item = copy().to_item();
        item.insert("Status".into(), AttributeValue::S("secret-status".into()));
        let e = RequestCopy::from_item(&item).unwrap_err();
        assert!(e.contains("does not decode"), "{e}");
        assert!(!e.contains("secret-status"), "{e}");
        let mut item = copy().to_item();
        item.insert("Id".into(), AttributeValue::S("r2".into()));
        assert!(
            RequestCopy::from_item(&item)
                .unwrap_err()
                .contains("Id differs")
        );
    }

    #[test]
    fn the_acceptance_notification_is_named_after_the_request() {
        let now = Utc.with_ymd_and_hms(2024, 5, 2, 0, 0, 0).unwrap();
        let (key, item) = Notification::accepted(&copy(), now);
        assert_eq!(key.id, "chatrequest-r1-accepted");
        assert_eq!(
            item["SK"],
            AttributeValue::S(
                "NOTIFICATION#UNREAD#2024-05-02T00:00:00.000Z#chatrequest-r1-accepted".into()
            )
        );
        assert_eq!(item["Target"], AttributeValue::S("g1".into()));
    }
}
