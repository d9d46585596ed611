//! The six chat tables as data: what tests, the command line and the
//! template create. [`Table`] names each; its name at run time comes from
//! its own variable ([`Table::env_var`]).
//!
//! **The indexes.**
//!
//! - `CommunityMembersIndex` (Communities, the seed's): inverted, `SK` then
//!   `PK`, so a user's communities are one Query of `USER#<user>`. Keys
//!   only: the user cascade needs the keys to delete, nothing else.
//! - `PendingRequestsIndex` (ChatRequests, the seed's sparse index):
//!   `PK`, `PendingId`. Only copies with a `PendingId` are in it, and the
//!   worker removes `PendingId` from every copy that left `pending`, so
//!   the index holds the pending requests only: the expiry job reads it
//!   (never the table), and a user's or a chat's pending requests are one
//!   Query. It projects the keys (`SK` carries the request's time) and
//!   `UserId`, `ChatId`: all the expiry and the user cascade need before
//!   their conditional writes, so neither reads the table to decide.
//! - `ChatMembersIndex` (GroupChats and PrivateChats, the worker's own):
//!   inverted like `CommunityMembersIndex`, so the user cascade finds the
//!   user's chat memberships without a scan. Its price: every message is
//!   in it too (a keys-only entry each), since the design gives member
//!   items no attribute of their own to make it sparse.

use worker_engine::TableSet;
use worker_engine::schema::{IndexSpec, KeySchema, TableSchema};

use crate::keys;

/// One of the six tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// Users: `USER#<user>`, no sort key.
    Users,
    /// Communities: the community, its members and group-chat links.
    Communities,
    /// Notifications: a user's notifications.
    Notifications,
    /// GroupChats: the chat, its members and messages.
    GroupChats,
    /// PrivateChats: the chat, its members and messages.
    PrivateChats,
    /// ChatRequests: request copies, and the worker's join marks and
    /// checkpoints.
    ChatRequests,
}

/// `CommunityMembersIndex` (Communities): inverted, a user's communities
/// (see the module's doc).
pub const COMMUNITY_MEMBERS: IndexSpec = IndexSpec {
    name: keys::COMMUNITY_MEMBERS_INDEX,
    partition_key: keys::SK,
    sort_key: Some(keys::PK),
    include: None,
};

/// `ChatMembersIndex` (GroupChats, PrivateChats, the worker's own):
/// inverted, a user's chat memberships.
pub const CHAT_MEMBERS: IndexSpec = IndexSpec {
    name: keys::CHAT_MEMBERS_INDEX,
    partition_key: keys::SK,
    sort_key: Some(keys::PK),
    include: None,
};

/// `PendingRequestsIndex` (ChatRequests, sparse): pending copies only.
pub const PENDING_REQUESTS: IndexSpec = IndexSpec {
    name: keys::PENDING_REQUESTS_INDEX,
    partition_key: keys::PK,
    sort_key: Some(keys::PENDING_ID),
    include: Some(&[keys::USER_ID, keys::CHAT_ID]),
};

impl Table {
    /// Every table, once each (`Users` first).
    pub const ALL: [Table; 6] = [
        Table::Users,
        Table::Communities,
        Table::Notifications,
        Table::GroupChats,
        Table::PrivateChats,
        Table::ChatRequests,
    ];

    /// The variable holding its name.
    pub const fn env_var(self) -> &'static str {
        match self {
            Table::Users => "USERS_TABLE",
            Table::Communities => "COMMUNITIES_TABLE",
            Table::Notifications => "NOTIFICATIONS_TABLE",
            Table::GroupChats => "GROUP_CHATS_TABLE",
            Table::PrivateChats => "PRIVATE_CHATS_TABLE",
            Table::ChatRequests => "CHAT_REQUESTS_TABLE",
        }
    }

    /// Its name in the seed (and the local default).
    pub const fn name(self) -> &'static str {
        match self {
            Table::Users => "Users",
            Table::Communities => "Communities",
            Table::Notifications => "Notifications",
            Table::GroupChats => "GroupChats",
            Table::PrivateChats => "PrivateChats",
            Table::ChatRequests => "ChatRequests",
        }
    }

    /// Its logical id in the template.
    pub const fn logical_id(self) -> &'static str {
        match self {
            Table::Users => "UsersTable",
            Table::Communities => "CommunitiesTable",
            Table::Notifications => "NotificationsTable",
            Table::GroupChats => "GroupChatsTable",
            Table::PrivateChats => "PrivateChatsTable",
            Table::ChatRequests => "ChatRequestsTable",
        }
    }

    /// Keys, indexes and a NEW_AND_OLD_IMAGES stream.
    pub fn schema(self) -> TableSchema {
        let composite = TableSchema::new(KeySchema::composite(keys::PK, keys::SK));
        match self {
            Table::Users => TableSchema::new(KeySchema {
                partition_key: keys::PK,
                sort_key: None,
            }),
            Table::Communities => composite.with_index(COMMUNITY_MEMBERS),
            Table::Notifications => composite,
            Table::GroupChats | Table::PrivateChats => composite.with_index(CHAT_MEMBERS),
            Table::ChatRequests => composite.with_index(PENDING_REQUESTS),
        }
    }
}

/// The worker's own store (its transactions and request counts) is on
/// ChatRequests.
impl TableSet for Table {
    const ALL: &'static [Table] = &Table::ALL;
    const HOME: Table = Table::ChatRequests;
    fn env_var(self) -> &'static str {
        Table::env_var(self)
    }
    fn default_name(self) -> &'static str {
        self.name()
    }
    fn schema(self) -> TableSchema {
        Table::schema(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_resources() {
        let users = &Table::Users.schema().to_cloudformation(json!("u"))["Properties"];
        assert_eq!(
            users["KeySchema"],
            json!([{"AttributeName": "PK", "KeyType": "HASH"}])
        );
        let requests = &Table::ChatRequests.schema().to_cloudformation(json!("r"))["Properties"];
        assert_eq!(
            requests["GlobalSecondaryIndexes"][0]["KeySchema"],
            json!([
                {"AttributeName": "PK", "KeyType": "HASH"},
                {"AttributeName": "PendingId", "KeyType": "RANGE"},
            ])
        );
        let communities = &Table::Communities.schema().to_cloudformation(json!("c"))["Properties"];
        assert_eq!(
            communities["GlobalSecondaryIndexes"][0]["KeySchema"],
            json!([
                {"AttributeName": "SK", "KeyType": "HASH"},
                {"AttributeName": "PK", "KeyType": "RANGE"},
            ])
        );
        let mut vars: Vec<_> = Table::ALL.iter().map(|t| t.env_var()).collect();
        vars.dedup();
        assert_eq!(vars.len(), 6);
    }
}
