//! Every key string and attribute name of the six chat tables, and the only
//! code that builds or parses their keys.
//!
//! | table | `PK` | `SK` |
//! |---|---|---|
//! | Users | `USER#<user>` | (none) |
//! | Communities | `COMMUNITY#<c>` | `COMMUNITY#<c>` / `USER#<user>` / `GROUPCHAT#<chat>` |
//! | Notifications | `USER#<user>` | `NOTIFICATION#UNREAD#<time>#<id>` / `NOTIFICATIONREAD#<time>#<id>` |
//! | GroupChats | `GROUPCHAT#<chat>` | `GROUPCHAT#<chat>` / `USER#<user>` / `MESSAGE#<time>#<id>` |
//! | PrivateChats | `PRIVATECHAT#<chat>` | `PRIVATECHAT#<chat>` / `USER#<user>` / `MESSAGE#<time>#<id>` |
//! | ChatRequests | `USER#<user>` / `GROUPCHAT#<chat>` | `CHATREQUEST#<time>#<request>` |
//! | ChatRequests (worker) | `WORKER#<job>` | `CHECKPOINT` |
//! | ChatRequests (worker) | `JOINED#<chat>` | `CHATREQUEST#<time>#<request>` |
//!
//! `<time>` is ISO-8601 (RFC 3339; written as `2024-05-01T10:00:00.000Z`);
//! ids are non-empty and hold no `#`. A request has two copies, one per
//! owner (the user and the group chat), with the same sort key.
//!
//! Errors ([`KeyError`]) carry key values only: the keys hold ids and
//! times, never a name or an e-mail address.

use chrono::{DateTime, SecondsFormat, Utc};
use worker_engine::item::Item;
use worker_engine::keys::{AttributeError, string, strings};
use worker_engine::schedule::JobName;
use worker_engine::store::Key;

/// The partition key attribute (S) of every table.
pub const PK: &str = "PK";
/// The sort key attribute (S) of every table but Users.
pub const SK: &str = "SK";

/// Chat requests: the request's id (S).
pub const ID: &str = "Id";
/// Chat requests: the requesting user (S).
pub const USER_ID: &str = "UserId";
/// Chat requests: the group chat (S).
pub const CHAT_ID: &str = "ChatId";
/// Chat requests, notifications: ISO-8601 creation time (S).
pub const CREATED_AT: &str = "CreatedAt";
/// Chat requests: `pending`, `accepted`, `rejected`, `cancelled`, `expired` (S).
pub const STATUS: &str = "Status";
/// Chat requests, notifications: seen by the user (BOOL).
pub const SEEN: &str = "Seen";
/// Chat requests: present while pending only; the sparse index's sort key (S).
pub const PENDING_ID: &str = "PendingId";
/// Chat requests: why the worker set the status (S): [`REASON_CAPACITY`], ...
pub const STATUS_REASON: &str = "StatusReason";
/// Chat requests (group chat copy): when the worker made the user a member (S).
pub const JOINED_AT: &str = "JoinedAt";
/// Group chats: most members (N).
pub const CAPACITY: &str = "Capacity";
/// Group chats: its `USER#` items, counted (N).
pub const NUM_MEMBERS: &str = "NumMembers";
/// Notifications (S).
pub const NOTIFICATION_TYPE: &str = "NotificationType";
/// Notifications: what it is about (S: the chat id).
pub const TARGET: &str = "Target";
/// Notifications (BOOL).
pub const READ: &str = "Read";
/// Checkpoints: the `PK` of the last item read (S).
pub const POSITION_PK: &str = "PositionPK";
/// Checkpoints: the `SK` of the last item read (S).
pub const POSITION_SK: &str = "PositionSK";

/// `StatusReason` of a request rejected because the chat was full.
pub const REASON_CAPACITY: &str = "capacity";
/// `StatusReason` of a request cancelled because its user was deleted.
pub const REASON_USER_DELETED: &str = "user-deleted";
/// `StatusReason` of a request rejected because its group chat is gone.
pub const REASON_CHAT_DELETED: &str = "chat-deleted";
/// `StatusReason` of a request that expired.
pub const REASON_EXPIRED: &str = "expired";
/// `NotificationType` of an accepted request.
pub const NOTIFICATION_REQUEST_ACCEPTED: &str = "ChatRequestAccepted";

/// Communities by member (inverted: `SK`, `PK`).
pub const COMMUNITY_MEMBERS_INDEX: &str = "CommunityMembersIndex";
/// Group / private chats by member (inverted: `SK`, `PK`, keys only).
pub const CHAT_MEMBERS_INDEX: &str = "ChatMembersIndex";
/// Pending chat requests (sparse: `PK`, `PendingId`).
pub const PENDING_REQUESTS_INDEX: &str = "PendingRequestsIndex";

const USER: &str = "USER#";
const COMMUNITY: &str = "COMMUNITY#";
const GROUPCHAT: &str = "GROUPCHAT#";
const PRIVATECHAT: &str = "PRIVATECHAT#";
const MESSAGE: &str = "MESSAGE#";
const UNREAD: &str = "NOTIFICATION#UNREAD#";
const READ_PREFIX: &str = "NOTIFICATIONREAD#";
const CHATREQUEST: &str = "CHATREQUEST#";
const WORKER: &str = "WORKER#";
const JOINED: &str = "JOINED#";
const CHECKPOINT: &str = "CHECKPOINT";

worker_engine::job_names! {
    /// The scheduled jobs of the chat worker (also the checkpoint keys).
    pub enum Job {
        /// Pending requests older than `REQUEST_EXPIRY_DAYS` become `expired`.
        ExpireRequests = "expire-requests",
        /// A request copy whose twin is missing is repaired or reported.
        AuditRequests = "audit-requests",
    }
}

/// A key that does not read. Texts carry key values only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A key attribute is missing or not a string.
    #[error(transparent)]
    Attribute(#[from] AttributeError),
    /// Not an item of this table's design (left alone).
    #[error("{attribute} {value:?} is not a key of the {table} table")]
    Foreign {
        /// The table's name (`Users`, `ChatRequests`, ...).
        table: &'static str,
        /// The attribute that does not read (`PK` or `SK`).
        attribute: &'static str,
        /// Its value, as read.
        value: String,
    },
    /// An item of the design whose key does not parse: an empty id, an id
    /// holding `#`, a time that is not ISO-8601, an `SK` naming another
    /// partition than its `PK`.
    #[error("{what} {value:?} is malformed: {reason}")]
    Malformed {
        /// What was read (`user id`, `chat request SK`, ...).
        what: &'static str,
        /// The value, as read.
        value: String,
        /// Why it does not parse.
        reason: &'static str,
    },
}

fn foreign(table: &'static str, attribute: &'static str, value: &str) -> KeyError {
    KeyError::Foreign {
        table,
        attribute,
        value: value.to_owned(),
    }
}

/// An id: non-empty, no `#`.
fn id<'a>(what: &'static str, v: &'a str) -> Result<&'a str, KeyError> {
    let reason = if v.is_empty() {
        "empty"
    } else if v.contains('#') {
        "holds '#'"
    } else {
        return Ok(v);
    };
    Err(KeyError::Malformed {
        what,
        value: v.to_owned(),
        reason,
    })
}

/// `<time>#<id>`: an ISO-8601 time (which holds no `#`) and an id.
fn time_and_id(what: &'static str, v: &str) -> Result<(DateTime<Utc>, String), KeyError> {
    let malformed = |reason| KeyError::Malformed {
        what,
        value: v.to_owned(),
        reason,
    };
    let (time, rest) = v
        .split_once('#')
        .ok_or_else(|| malformed("expected <time>#<id>"))?;
    let time = parse_time(time).ok_or_else(|| malformed("the time is not ISO-8601"))?;
    Ok((time, id(what, rest)?.to_owned()))
}

/// An ISO-8601 (RFC 3339) time, in UTC.
pub fn parse_time(v: &str) -> Option<DateTime<Utc>> {
    written_time(v).or_else(|| {
        DateTime::parse_from_rfc3339(v)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    })
}

/// A time spelled as [`format_time`] writes it (`2024-05-01T10:00:00.000Z`),
/// read in place: every request copy's key holds one. `None` for any other
/// text (then chrono's RFC 3339 reading reads it).
fn written_time(v: &str) -> Option<DateTime<Utc>> {
    let b = v.as_bytes();
    let layout = [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
        (23, b'Z'),
    ];
    if b.len() != 24 || layout.iter().any(|&(i, c)| b[i] != c) {
        return None;
    }
    let digits = |from: usize, n: usize| {
        b[from..from + n].iter().try_fold(0u32, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
        })
    };
    let date = chrono::NaiveDate::from_ymd_opt(
        i32::try_from(digits(0, 4)?).ok()?,
        digits(5, 2)?,
        digits(8, 2)?,
    )?;
    // A leap second (`:60`) is left to chrono.
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if second > 59 {
        return None;
    }
    date.and_hms_milli_opt(hour, minute, second, digits(20, 3)?)
        .map(|t| t.and_utc())
}

/// A time as the worker writes it (`2024-05-01T10:00:00.000Z`).
pub fn format_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn prefixed<'a>(v: &'a str, prefix: &str) -> Option<&'a str> {
    v.strip_prefix(prefix)
}

/// `PK = USER#<user>` of Users, of Notifications and of the user's request
/// copies.
pub fn user_pk(user: &str) -> String {
    format!("{USER}{user}")
}

/// The user of a `USER#<user>` value.
pub fn user_of(v: &str) -> Result<&str, KeyError> {
    let user = prefixed(v, USER).ok_or_else(|| foreign("Users", PK, v))?;
    id("user id", user)
}

/// The key of a user (Users table: partition key only).
pub fn user(user: &str) -> Key {
    strings([(PK, user_pk(user))])
}

/// The user id of a Users item.
pub fn parse_user(item: &Item) -> Result<String, KeyError> {
    user_of(string(item, PK)?).map(str::to_owned)
}

/// An item of the Communities table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommunityItem {
    /// The community's own item (`SK` = its `PK`).
    Community {
        /// The community's id.
        community: String,
    },
    /// A member of the community (`SK = USER#<user>`).
    Member {
        /// The community's id.
        community: String,
        /// The member's user id.
        user: String,
    },
    /// A group chat of the community (`SK = GROUPCHAT#<chat>`).
    GroupChat {
        /// The community's id.
        community: String,
        /// The group chat's id.
        chat: String,
    },
}

impl CommunityItem {
    /// The community the item belongs to (its `PK`).
    pub fn community(&self) -> &str {
        match self {
            CommunityItem::Community { community }
            | CommunityItem::Member { community, .. }
            | CommunityItem::GroupChat { community, .. } => community,
        }
    }

    /// The item's key: `COMMUNITY#<c>` and its `SK`.
    pub fn key(&self) -> Key {
        let pk = format!("{COMMUNITY}{}", self.community());
        let sk = match self {
            CommunityItem::Community { .. } => pk.clone(),
            CommunityItem::Member { user, .. } => user_pk(user),
            CommunityItem::GroupChat { chat, .. } => format!("{GROUPCHAT}{chat}"),
        };
        strings([(PK, pk), (SK, sk)])
    }

    /// A Communities item from its key, or why it is not one.
    pub fn parse(item: &Item) -> Result<Self, KeyError> {
        let pk = string(item, PK)?;
        let sk = string(item, SK)?;
        let community = prefixed(pk, COMMUNITY).ok_or_else(|| foreign("Communities", PK, pk))?;
        let community = id("community id", community)?.to_owned();
        if let Some(c) = prefixed(sk, COMMUNITY) {
            if c != community {
                return Err(KeyError::Malformed {
                    what: "community SK",
                    value: sk.to_owned(),
                    reason: "names another community than its PK",
                });
            }
            Ok(CommunityItem::Community { community })
        } else if let Some(user) = prefixed(sk, USER) {
            let user = id("user id", user)?.to_owned();
            Ok(CommunityItem::Member { community, user })
        } else if let Some(chat) = prefixed(sk, GROUPCHAT) {
            let chat = id("group chat id", chat)?.to_owned();
            Ok(CommunityItem::GroupChat { community, chat })
        } else {
            Err(foreign("Communities", SK, sk))
        }
    }
}

/// The `SK` of a community's member items: `USER#<user>` (the partition key
/// of [`COMMUNITY_MEMBERS_INDEX`]).
pub fn community_member_sk(user: &str) -> String {
    user_pk(user)
}

/// A group chat or a private chat (two tables of one design).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChatKind {
    /// A group chat (GroupChats table, `GROUPCHAT#`).
    Group,
    /// A private chat (PrivateChats table, `PRIVATECHAT#`).
    Private,
}

impl ChatKind {
    fn prefix(self) -> &'static str {
        match self {
            ChatKind::Group => GROUPCHAT,
            ChatKind::Private => PRIVATECHAT,
        }
    }

    fn table(self) -> &'static str {
        match self {
            ChatKind::Group => "GroupChats",
            ChatKind::Private => "PrivateChats",
        }
    }
}

/// An item of the GroupChats or PrivateChats table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatItem {
    /// The chat's own item (`SK` = its `PK`).
    Chat {
        /// Which of the two tables.
        kind: ChatKind,
        /// The chat's id.
        chat: String,
    },
    /// A member of the chat (`SK = USER#<user>`).
    Member {
        /// Which of the two tables.
        kind: ChatKind,
        /// The chat's id.
        chat: String,
        /// The member's user id.
        user: String,
    },
    /// A message (`SK = MESSAGE#<time>#<id>`).
    Message {
        /// Which of the two tables.
        kind: ChatKind,
        /// The chat's id.
        chat: String,
        /// When the message was sent (the `<time>` of its `SK`).
        time: DateTime<Utc>,
        /// The message's id.
        id: String,
    },
}

impl ChatItem {
    /// Which table the item is in.
    pub fn kind(&self) -> ChatKind {
        match self {
            ChatItem::Chat { kind, .. }
            | ChatItem::Member { kind, .. }
            | ChatItem::Message { kind, .. } => *kind,
        }
    }

    /// The chat's id (its partition).
    pub fn chat(&self) -> &str {
        match self {
            ChatItem::Chat { chat, .. }
            | ChatItem::Member { chat, .. }
            | ChatItem::Message { chat, .. } => chat,
        }
    }

    /// The item's key, canonical (times written as [`format_time`] writes
    /// them).
    pub fn key(&self) -> Key {
        let pk = chat_pk(self.kind(), self.chat());
        let sk = match self {
            ChatItem::Chat { .. } => pk.clone(),
            ChatItem::Member { user, .. } => user_pk(user),
            ChatItem::Message { time, id, .. } => format!("{MESSAGE}{}#{id}", format_time(*time)),
        };
        strings([(PK, pk), (SK, sk)])
    }

    /// An item of the `kind` table.
    pub fn parse(kind: ChatKind, item: &Item) -> Result<Self, KeyError> {
        let pk = string(item, PK)?;
        let sk = string(item, SK)?;
        let chat = prefixed(pk, kind.prefix()).ok_or_else(|| foreign(kind.table(), PK, pk))?;
        let chat = id("chat id", chat)?.to_owned();
        if let Some(c) = prefixed(sk, kind.prefix()) {
            if c != chat {
                return Err(KeyError::Malformed {
                    what: "chat SK",
                    value: sk.to_owned(),
                    reason: "names another chat than its PK",
                });
            }
            Ok(ChatItem::Chat { kind, chat })
        } else if let Some(user) = prefixed(sk, USER) {
            let user = id("user id", user)?.to_owned();
            Ok(ChatItem::Member { kind, chat, user })
        } else if let Some(rest) = prefixed(sk, MESSAGE) {
            let (time, id) = time_and_id("message SK", rest)?;
            Ok(ChatItem::Message {
                kind,
                chat,
                time,
                id,
            })
        } else {
            Err(foreign(kind.table(), SK, sk))
        }
    }
}

/// `PK` of a chat's partition.
pub fn chat_pk(kind: ChatKind, chat: &str) -> String {
    format!("{}{chat}", kind.prefix())
}

/// The condition text's value for "`SK` begins with `USER#`" (members).
pub const MEMBER_SK_PREFIX: &str = USER;

/// A notification (Notifications table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationKey {
    /// The user it is for (`PK = USER#<user>`).
    pub user: String,
    /// Read (`NOTIFICATIONREAD#...`) or not (`NOTIFICATION#UNREAD#...`).
    pub read: bool,
    /// The `<time>` of its `SK`: when it was created.
    pub time: DateTime<Utc>,
    /// The notification's id (the worker's: [`acceptance_notification_id`]).
    pub id: String,
}

impl NotificationKey {
    /// The notification's key (Notifications table).
    pub fn key(&self) -> Key {
        let prefix = if self.read { READ_PREFIX } else { UNREAD };
        let sk = format!("{prefix}{}#{}", format_time(self.time), self.id);
        strings([(PK, user_pk(&self.user)), (SK, sk)])
    }

    /// A notification from its key, or why it is not one.
    pub fn parse(item: &Item) -> Result<Self, KeyError> {
        let pk = string(item, PK)?;
        let sk = string(item, SK)?;
        let user = user_of(pk)
            .map_err(|_| foreign("Notifications", PK, pk))?
            .to_owned();
        let (read, rest) = if let Some(rest) = prefixed(sk, UNREAD) {
            (false, rest)
        } else if let Some(rest) = prefixed(sk, READ_PREFIX) {
            (true, rest)
        } else {
            return Err(foreign("Notifications", SK, sk));
        };
        let (time, id) = time_and_id("notification SK", rest)?;
        Ok(NotificationKey {
            user,
            read,
            time,
            id,
        })
    }
}

/// The notification id of the acceptance of `request`: one per request,
/// whatever the deliveries.
pub fn acceptance_notification_id(request: &str) -> String {
    format!("chatrequest-{request}-accepted")
}

/// Who a request copy is filed under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Owner {
    /// The user's copy (`PK = USER#<user>`).
    User(String),
    /// The group chat's copy (`PK = GROUPCHAT#<chat>`).
    GroupChat(String),
}

impl Owner {
    /// The copy's `PK`.
    pub fn pk(&self) -> String {
        match self {
            Owner::User(u) => user_pk(u),
            Owner::GroupChat(c) => chat_pk(ChatKind::Group, c),
        }
    }

    /// The owner of a ChatRequests `PK`, or why it has none.
    pub fn parse(pk: &str) -> Result<Self, KeyError> {
        if let Some(u) = prefixed(pk, USER) {
            Ok(Owner::User(id("user id", u)?.to_owned()))
        } else if let Some(c) = prefixed(pk, GROUPCHAT) {
            Ok(Owner::GroupChat(id("group chat id", c)?.to_owned()))
        } else {
            Err(foreign("ChatRequests", PK, pk))
        }
    }
}

/// One copy of a chat request (ChatRequests table).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestKey {
    /// Who the copy is filed under.
    pub owner: Owner,
    /// When the request was made (the `<time>` of the `SK`).
    pub created: DateTime<Utc>,
    /// The request's id (the `<request>` of the `SK`, its `Id`).
    pub request: String,
}

impl RequestKey {
    /// The copy under the user and the one under the group chat.
    pub fn copies(user: &str, chat: &str, created: DateTime<Utc>, request: &str) -> [Self; 2] {
        let copy = |owner| RequestKey {
            owner,
            created,
            request: request.to_owned(),
        };
        [
            copy(Owner::User(user.to_owned())),
            copy(Owner::GroupChat(chat.to_owned())),
        ]
    }

    /// `CHATREQUEST#<time>#<request>`: the same on both copies.
    pub fn sk(&self) -> String {
        format!(
            "{CHATREQUEST}{}#{}",
            format_time(self.created),
            self.request
        )
    }

    /// The copy's key.
    pub fn key(&self) -> Key {
        strings([(PK, self.owner.pk()), (SK, self.sk())])
    }

    /// The other copy's key, given the other owner.
    pub fn twin(&self, other: Owner) -> RequestKey {
        RequestKey {
            owner: other,
            ..self.clone()
        }
    }

    /// A request copy from its key, or why it is not one.
    pub fn parse(item: &Item) -> Result<Self, KeyError> {
        let pk = string(item, PK)?;
        let sk = string(item, SK)?;
        let owner = Owner::parse(pk)?;
        let rest = prefixed(sk, CHATREQUEST).ok_or_else(|| foreign("ChatRequests", SK, sk))?;
        let (created, request) = time_and_id("chat request SK", rest)?;
        Ok(RequestKey {
            owner,
            created,
            request,
        })
    }
}

/// The worker's mark that a request was joined (its member added, its
/// notification written): `PK = JOINED#<chat>`, `SK` the request's own
/// `SK`. Written once, in the acceptance's transaction, only while absent;
/// never written by a client, never deleted. It is what tells a request
/// joined before from one accepted now, whatever a client later writes on
/// the copies (a rewrite drops `JoinedAt`) or does with the member item
/// and the notification (leaves, reads, deletes).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JoinMark {
    /// The group chat joined.
    pub chat: String,
    /// When the request was made (as in its copies' `SK`).
    pub created: DateTime<Utc>,
    /// The request's id.
    pub request: String,
}

impl JoinMark {
    /// The mark of the request one of whose copies is `key`, in `chat`.
    pub fn of(chat: &str, key: &RequestKey) -> Self {
        JoinMark {
            chat: chat.to_owned(),
            created: key.created,
            request: key.request.clone(),
        }
    }

    /// The mark's key: `JOINED#<chat>`, the request's `SK`.
    pub fn key(&self) -> Key {
        let copy = RequestKey {
            owner: Owner::GroupChat(self.chat.clone()),
            created: self.created,
            request: self.request.clone(),
        };
        strings([(PK, format!("{JOINED}{}", self.chat)), (SK, copy.sk())])
    }
}

/// An item of the ChatRequests table: a request copy, a worker checkpoint
/// or a join mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestsItem {
    /// One of a request's two copies.
    Copy(RequestKey),
    /// A scheduled job's checkpoint (`WORKER#<job>` / `CHECKPOINT`).
    Checkpoint(Job),
    /// A request's join mark.
    Joined(JoinMark),
}

impl RequestsItem {
    /// A ChatRequests item from its key, or why it is not one of the design
    /// (a `WORKER#` partition of no job is foreign).
    pub fn parse(item: &Item) -> Result<Self, KeyError> {
        let pk = string(item, PK)?;
        if let Some(job) = prefixed(pk, WORKER) {
            return Job::parse(job)
                .map(RequestsItem::Checkpoint)
                .ok_or_else(|| foreign("ChatRequests", PK, pk));
        }
        if let Some(chat) = prefixed(pk, JOINED) {
            let chat = id("group chat id", chat)?.to_owned();
            let sk = string(item, SK)?;
            let rest = prefixed(sk, CHATREQUEST).ok_or_else(|| foreign("ChatRequests", SK, sk))?;
            let (created, request) = time_and_id("join mark SK", rest)?;
            return Ok(RequestsItem::Joined(JoinMark {
                chat,
                created,
                request,
            }));
        }
        RequestKey::parse(item).map(RequestsItem::Copy)
    }
}

/// The checkpoint of `job` (in the ChatRequests table).
pub fn checkpoint(job: Job) -> Key {
    strings([(PK, format!("{WORKER}{job}")), (SK, CHECKPOINT.into())])
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    fn t() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2024, 5, 1, 10, 0, 0).unwrap()
    }

    fn item(pk: &str, sk: Option<&str>) -> Item {
        let mut i = Item::from([(PK.to_owned(), s(pk))]);
        if let Some(sk) = sk {
            i.insert(SK.to_owned(), s(sk));
        }
        i
    }

    #[test]
    fn keys_as_the_seed_writes_them() {
        assert_eq!(user("u1")[PK], s("USER#u1"));
        let [u, g] = RequestKey::copies("u1", "g1", t(), "r1");
        assert_eq!(u.key()[PK], s("USER#u1"));
        assert_eq!(g.key()[PK], s("GROUPCHAT#g1"));
        assert_eq!(u.key()[SK], s("CHATREQUEST#2024-05-01T10:00:00.000Z#r1"));
        let n = NotificationKey {
            user: "u1".into(),
            read: false,
            time: t(),
            id: "n1".into(),
        };
        assert_eq!(
            n.key()[SK],
            s("NOTIFICATION#UNREAD#2024-05-01T10:00:00.000Z#n1")
        );
        let read = NotificationKey { read: true, ..n };
        assert_eq!(
            read.key()[SK],
            s("NOTIFICATIONREAD#2024-05-01T10:00:00.000Z#n1")
        );
        let m = ChatItem::Member {
            kind: ChatKind::Private,
            chat: "p".into(),
            user: "u".into(),
        };
        assert_eq!(m.key()[PK], s("PRIVATECHAT#p"));
        assert_eq!(m.key()[SK], s("USER#u"));
        assert_eq!(
            checkpoint(Job::AuditRequests)[PK],
            s("WORKER#audit-requests")
        );
    }

    #[test]
    fn times_are_read_in_any_offset() {
        let k = RequestKey::parse(&item(
            "USER#u",
            Some("CHATREQUEST#2024-05-01T12:00:00+02:00#r"),
        ))
        .unwrap();
        assert_eq!(k.created, t());
    }

    #[test]
    fn typed_errors() {
        assert_eq!(
            parse_user(&Item::new()).unwrap_err(),
            KeyError::Attribute(AttributeError::Missing("PK"))
        );
        let mut n = item("USER#u", None);
        n.insert(PK.into(), AttributeValue::N("1".into()));
        assert_eq!(
            parse_user(&n).unwrap_err(),
            KeyError::Attribute(AttributeError::NotString("PK"))
        );
        assert_eq!(
            parse_user(&n).unwrap_err().to_string(),
            "PK is not a string"
        );
        assert!(matches!(
            parse_user(&item("GROUP#u", None)),
            Err(KeyError::Foreign { .. })
        ));
        assert!(matches!(
            parse_user(&item("USER#", None)),
            Err(KeyError::Malformed {
                reason: "empty",
                ..
            })
        ));
        assert!(matches!(
            RequestKey::parse(&item("USER#u", Some("CHATREQUEST#yesterday#r"))),
            Err(KeyError::Malformed {
                reason: "the time is not ISO-8601",
                ..
            })
        ));
        assert!(matches!(
            RequestKey::parse(&item("USER#u", Some("CHATREQUEST#r"))),
            Err(KeyError::Malformed { .. })
        ));
        assert!(matches!(
            CommunityItem::parse(&item("COMMUNITY#a", Some("COMMUNITY#b"))),
            Err(KeyError::Malformed { .. })
        ));
        assert!(matches!(
            ChatItem::parse(ChatKind::Group, &item("PRIVATECHAT#a", Some("USER#u"))),
            Err(KeyError::Foreign { .. })
        ));
        assert!(matches!(
            NotificationKey::parse(&item("USER#u", Some("NOTE#x"))),
            Err(KeyError::Foreign { .. })
        ));
        let e = RequestKey::parse(&item("ORDER#o", Some("x"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "PK \"ORDER#o\" is not a key of the ChatRequests table"
        );
        assert_eq!(
            RequestsItem::parse(&item("WORKER#expire-requests", Some("CHECKPOINT"))),
            Ok(RequestsItem::Checkpoint(Job::ExpireRequests))
        );
    }

    fn ids() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9_.:-]{1,20}"
    }

    fn times() -> impl Strategy<Value = DateTime<Utc>> {
        // Millisecond precision: what the keys hold.
        (0i64..4_102_444_800_000).prop_map(|ms| Utc.timestamp_millis_opt(ms).unwrap())
    }

    fn as_item(key: Key) -> Item {
        key
    }

    proptest! {
        #[test]
        fn a_written_time_reads_as_chrono_reads_it(
            y in 0u32..10_000, mo in 0u32..14, d in 0u32..33, h in 0u32..26, mi in 0u32..62,
            sec in 0u32..62, ms in 0u32..1000,
        ) {
            // Every field in and just out of its range.
            let v = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{sec:02}.{ms:03}Z");
            let chrono = DateTime::parse_from_rfc3339(&v).ok().map(|t| t.with_timezone(&Utc));
            prop_assert_eq!(parse_time(&v), chrono);
            if sec < 60 {
                prop_assert_eq!(written_time(&v), chrono);
            }
        }

        #[test]
        fn every_key_reads_back(u in ids(), c in ids(), r in ids(), time in times(), read: bool, group: bool) {
            prop_assert_eq!(parse_user(&as_item(user(&u))), Ok(u.clone()));
            for k in [
                CommunityItem::Community { community: c.clone() },
                CommunityItem::Member { community: c.clone(), user: u.clone() },
                CommunityItem::GroupChat { community: c.clone(), chat: r.clone() },
            ] {
                prop_assert_eq!(CommunityItem::parse(&k.key()), Ok(k));
            }
            let kind = if group { ChatKind::Group } else { ChatKind::Private };
            for k in [
                ChatItem::Chat { kind, chat: c.clone() },
                ChatItem::Member { kind, chat: c.clone(), user: u.clone() },
                ChatItem::Message { kind, chat: c.clone(), time, id: r.clone() },
            ] {
                prop_assert_eq!(ChatItem::parse(kind, &k.key()), Ok(k));
            }
            let n = NotificationKey { user: u.clone(), read, time, id: r.clone() };
            prop_assert_eq!(NotificationKey::parse(&n.key()), Ok(n));
            for k in RequestKey::copies(&u, &c, time, &r) {
                prop_assert_eq!(RequestKey::parse(&k.key()), Ok(k.clone()));
                let mark = JoinMark::of(&c, &k);
                prop_assert_eq!(RequestsItem::parse(&mark.key()), Ok(RequestsItem::Joined(mark)));
            }
        }
    }
}
