//! What a deleted user or community leaves behind, removed.
//!
//! - [`UserCascade`] (Users stream, a user removed): once a consistent read
//!   confirms the user is still gone (a user created again under the same
//!   id keeps everything), it deletes the user's community memberships
//!   (found through `CommunityMembersIndex`), group and private chat
//!   memberships (through `ChatMembersIndex`; the member count follows
//!   through [`crate::members`]), cancels the user's pending requests
//!   (found through the sparse `PendingRequestsIndex`; both copies in one
//!   transaction, `StatusReason = user-deleted`, only while pending or
//!   accepted and never joined) and
//!   deletes the user's notifications (their partition). Every step is
//!   idempotent, so a redelivery or a retry after a partial run finishes
//!   the job. An acceptance racing the deletion is refused by the
//!   acceptance's own check that the user exists (see
//!   [`crate::requests`]).
//! - [`CommunityCascade`] (Communities stream, a community's own item
//!   removed): once confirmed gone, the member and group-chat link items
//!   of its partition are deleted.
//!
//! Indexes are eventually consistent: an item written within the index's
//! lag before the cascade may be missed; its own record does not bring it
//! back to the cascade (left open, as for any index-driven cleanup).

use std::sync::Arc;

use async_trait::async_trait;
use worker_engine::item::Item;
use worker_engine::job::{Access, StreamSpec};
use worker_engine::metrics::WriteCounter;
use worker_engine::store::transact::{TransactOutcome, Transactions};
use worker_engine::store::{QuerySpec, Store, WriteOp};
use worker_engine::stream::decode::{ChangeKind, StreamChange};
use worker_engine::stream::engine::{ProcessError, RecordOutcome, RecordProcessor};

use crate::app::{JobSpec, Stores, TableAccess, TableHandler};
use crate::items::RequestCopy;
use crate::items::Status;
use crate::keys::{self, CommunityItem, KeyError, RequestKey};
use crate::requests::refuse_copies;
use crate::schema::Table;

/// Items deleted or requests cancelled by the cascades.
pub const CASCADE_WRITES: &str = "CascadeWrites";

/// The cascades' access, per table: the removed item confirmed gone,
/// what it leaves found (indexes, partitions) and deleted; pending
/// requests read and cancelled (a transaction of updates).
pub const STREAM_TABLES: &[TableAccess] = &[
    TableAccess {
        table: Table::Users,
        actions: &["dynamodb:GetItem"],
        indexes: &[],
    },
    TableAccess {
        table: Table::Communities,
        actions: &[
            "dynamodb:BatchWriteItem",
            "dynamodb:GetItem",
            "dynamodb:Query",
        ],
        indexes: &[keys::COMMUNITY_MEMBERS_INDEX],
    },
    TableAccess {
        table: Table::GroupChats,
        actions: &["dynamodb:BatchWriteItem", "dynamodb:Query"],
        indexes: &[keys::CHAT_MEMBERS_INDEX],
    },
    TableAccess {
        table: Table::PrivateChats,
        actions: &["dynamodb:BatchWriteItem", "dynamodb:Query"],
        indexes: &[keys::CHAT_MEMBERS_INDEX],
    },
    TableAccess {
        table: Table::ChatRequests,
        actions: &["dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"],
        indexes: &[keys::PENDING_REQUESTS_INDEX],
    },
    TableAccess {
        table: Table::Notifications,
        actions: &["dynamodb:BatchWriteItem", "dynamodb:Query"],
        indexes: &[],
    },
];

/// The cascades of a user's and a community's removal.
pub const SPEC: JobSpec = JobSpec {
    name: "cascades",
    summary: "a user removed leaves no memberships, pending requests or notifications; a community removed leaves no member or group-chat links",
    env: &[],
    stream: Some(StreamSpec {
        handler: "cascade",
        writes_metric: CASCADE_WRITES,
        access: Access {
            dynamodb_actions: &[
                "dynamodb:BatchWriteItem",
                "dynamodb:GetItem",
                "dynamodb:Query",
                "dynamodb:UpdateItem",
            ],
            indexes: &[
                keys::CHAT_MEMBERS_INDEX,
                keys::COMMUNITY_MEMBERS_INDEX,
                keys::PENDING_REQUESTS_INDEX,
            ],
            fallbacks: &[],
            publishes_events: false,
        },
    }),
    scheduled: &[],
    handlers: |d| {
        vec![
            Arc::new(UserCascade {
                stores: d.stores.clone(),
                tx: d.tx.clone(),
                requests_table: d.settings.table(Table::ChatRequests).to_owned(),
                writes: d.writes.clone(),
            }),
            Arc::new(CommunityCascade {
                store: d.stores.get(Table::Communities).clone(),
                writes: d.writes.clone(),
            }),
        ]
    },
    jobs: |_| vec![],
};

/// Every item of one partition of `store`'s table, or of one of its index
/// partitions (keys only).
async fn partition(
    store: &dyn Store,
    index: Option<&str>,
    attribute: &str,
    value: &str,
) -> Result<Vec<Item>, ProcessError> {
    let mut spec = QuerySpec::partition(attribute, value);
    spec.index = index.map(str::to_owned);
    spec.consistent = index.is_none();
    // A page size keeps this a plain Query.
    spec.limit = Some(100);
    Ok(store.query_all(&spec).await?)
}

/// Delete `items` (by their keys) from `store`'s table.
async fn delete_all(
    store: &dyn Store,
    items: Vec<Item>,
    writes: &WriteCounter,
) -> Result<usize, ProcessError> {
    let n = items.len();
    if n == 0 {
        return Ok(0);
    }
    let ops = items
        .into_iter()
        .map(|i| {
            let key = i
                .into_iter()
                .filter(|(k, _)| k == keys::PK || k == keys::SK)
                .collect();
            WriteOp::Delete(key)
        })
        .collect();
    let report = store.batch_write(ops).await?;
    writes.add(CASCADE_WRITES, report.requests as usize);
    Ok(n)
}

/// Removes what a deleted user leaves.
pub struct UserCascade {
    stores: Stores,
    tx: Arc<dyn Transactions>,
    requests_table: String,
    writes: Arc<WriteCounter>,
}

/// What a user's cascade did.
#[derive(Debug, Default)]
struct Removed {
    communities: usize,
    chats: usize,
    requests: usize,
    notifications: usize,
}

impl UserCascade {
    async fn run(&self, user: &str) -> Result<Removed, ProcessError> {
        let member_sk = keys::community_member_sk(user);
        let mut removed = Removed::default();
        let communities = self.stores.get(Table::Communities);
        let links = partition(
            communities.as_ref(),
            Some(keys::COMMUNITY_MEMBERS_INDEX),
            keys::SK,
            &member_sk,
        )
        .await?;
        let links = links
            .into_iter()
            .filter(|i| matches!(CommunityItem::parse(i), Ok(CommunityItem::Member { .. })))
            .collect();
        removed.communities = delete_all(communities.as_ref(), links, &self.writes).await?;
        for t in [Table::GroupChats, Table::PrivateChats] {
            let store = self.stores.get(t);
            let members = partition(
                store.as_ref(),
                Some(keys::CHAT_MEMBERS_INDEX),
                keys::SK,
                &member_sk,
            )
            .await?;
            removed.chats += delete_all(store.as_ref(), members, &self.writes).await?;
        }
        removed.requests = self.cancel_pending(user).await?;
        let notifications = self.stores.get(Table::Notifications);
        let all = partition(notifications.as_ref(), None, keys::PK, &keys::user_pk(user)).await?;
        removed.notifications = delete_all(notifications.as_ref(), all, &self.writes).await?;
        Ok(removed)
    }

    /// The user's pending requests cancelled, both copies at once (also a
    /// copy accepted meanwhile but never joined); how many requests.
    async fn cancel_pending(&self, user: &str) -> Result<usize, ProcessError> {
        let store = self.stores.get(Table::ChatRequests);
        let pending = partition(
            store.as_ref(),
            Some(keys::PENDING_REQUESTS_INDEX),
            keys::PK,
            &keys::user_pk(user),
        )
        .await?;
        let mut changed = 0;
        for entry in pending {
            let key = RequestKey::parse(&entry).map_err(|e| ProcessError::Permanent {
                reason: e.to_string(),
            })?;
            // The chat's copy is found from the user's (its ChatId).
            let Some(item) = store.get(&key.key(), true).await? else {
                continue;
            };
            let copy = RequestCopy::from_item(&item)
                .map_err(|reason| ProcessError::Permanent { reason })?;
            let twin = match store.get(&copy.twin_key().key(), true).await? {
                Some(i) => Some(
                    RequestCopy::from_item(&i)
                        .map_err(|reason| ProcessError::Permanent { reason })?,
                ),
                None => None,
            };
            let outcome = refuse_copies(
                self.tx.as_ref(),
                &self.requests_table,
                [Some(&copy), twin.as_ref()],
                Status::Cancelled,
                keys::REASON_USER_DELETED,
            )
            .await?;
            self.writes.add(CASCADE_WRITES, 1);
            if outcome == TransactOutcome::Applied {
                changed += 1;
            }
        }
        Ok(changed)
    }
}

#[async_trait]
impl RecordProcessor for UserCascade {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, ProcessError> {
        if change.kind == ChangeKind::Insert || change.kind == ChangeKind::Modify {
            return Ok(RecordOutcome::skipped("user not removed"));
        }
        let user = match keys::parse_user(&change.keys) {
            Ok(u) => u,
            Err(e @ KeyError::Foreign { .. }) => return Ok(RecordOutcome::skipped(e.to_string())),
            Err(e) => {
                return Err(ProcessError::Permanent {
                    reason: e.to_string(),
                });
            }
        };
        if self
            .stores
            .get(Table::Users)
            .get(&keys::user(&user), true)
            .await?
            .is_some()
        {
            return Ok(RecordOutcome::skipped("user exists again"));
        }
        let r = self.run(&user).await?;
        Ok(RecordOutcome::handled(format!(
            "user removed: {} community link(s), {} chat membership(s), {} request copies cancelled, {} notification(s)",
            r.communities, r.chats, r.requests, r.notifications
        )))
    }
}

impl TableHandler for UserCascade {
    fn table(&self) -> Table {
        Table::Users
    }
}

/// Removes a deleted community's members and group-chat links.
pub struct CommunityCascade {
    store: Arc<dyn Store>,
    writes: Arc<WriteCounter>,
}

#[async_trait]
impl RecordProcessor for CommunityCascade {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, ProcessError> {
        if !change.kind.is_removal() {
            return Ok(RecordOutcome::skipped("community not removed"));
        }
        let community = match CommunityItem::parse(&change.keys) {
            Ok(CommunityItem::Community { community }) => community,
            Ok(_) => return Ok(RecordOutcome::skipped("a link removed")),
            Err(e @ KeyError::Foreign { .. }) => return Ok(RecordOutcome::skipped(e.to_string())),
            Err(e) => {
                return Err(ProcessError::Permanent {
                    reason: e.to_string(),
                });
            }
        };
        let own = CommunityItem::Community {
            community: community.clone(),
        };
        if self.store.get(&own.key(), true).await?.is_some() {
            return Ok(RecordOutcome::skipped("community exists again"));
        }
        let pk = own.key()[keys::PK].as_s().cloned().unwrap_or_default();
        let items = partition(self.store.as_ref(), None, keys::PK, &pk).await?;
        let n = delete_all(self.store.as_ref(), items, &self.writes).await?;
        Ok(RecordOutcome::handled(format!(
            "community removed: {n} link(s) deleted"
        )))
    }
}

impl TableHandler for CommunityCascade {
    fn table(&self) -> Table {
        Table::Communities
    }
}
