//! What a deleted user or community leaves behind, removed.
//!
//! - [`UserCascade`] (Users stream, a user removed): once a consistent read
//!   confirms the user is still gone (a user created again under the same
//!   id keeps everything), it deletes the user's community memberships
//!   (found through `CommunityMembersIndex`), group and private chat
//!   memberships (through `ChatMembersIndex`; the member count follows
//!   through [`crate::members`]), cancels the user's pending requests and
//!   deletes the user's notifications (their partition).
//! - [`CommunityCascade`] (Communities stream, a community's own item
//!   removed): once confirmed gone, the member and group-chat link items
//!   of its partition are deleted.
//!
//! **Every write holds only while its reason does.** Each delete and each
//! cancellation is decided from one fact read from another item: the user
//! (or the community) is absent. So each is written in a
//! `TransactWriteItems` whose first operation is a ConditionCheck that the
//! item is **still absent** ([`Guard`]): deletes in chunks of up to
//! [`CHUNK`] (DynamoDB's 100 actions, less the check), a request's two
//! copies in a transaction of their own. A user or community written again
//! while the cascade runs fails the check: nothing of that chunk is
//! written, the cascade stops there, and the record's outcome says how far
//! it got ("stopped: ... exists again after N writes", logged). That is a
//! normal outcome, not an error: the item exists again and its owner keeps
//! what is left; the removal that follows it, if any, has its own record.
//!
//! **A removed user's requests, all of them.** The cascade reads the
//! user's own partition of the ChatRequests table (`PK = USER#<user>`, a
//! consistent Query of the table, not the sparse index: a copy written
//! without `PendingId` has no index entry), and cancels every request
//! whose user copy is pending, or accepted and never joined (both copies
//! at once, `StatusReason = user-deleted`, through
//! [`crate::requests::refuse_copies`]: also checked against the request's
//! join mark). A copy the cascade cannot see (written after its query, or a
//! group chat's copy without its user's) is settled by the request handler,
//! which reads the user whenever it handles a pending copy (see
//! [`crate::requests`]): whichever record is handled first, the request is
//! cancelled.
//!
//! Every step is idempotent, so a redelivery or a retry after a partial
//! run finishes the job. Removals are read from the record's keys only: a
//! REMOVE without an old image (DynamoDB Local's second REMOVE of two
//! racing deletes) runs the cascade again, which finds nothing left.
//!
//! Indexes are eventually consistent: a membership written within the
//! index's lag before the cascade may be missed; its own record does not
//! bring it back to the cascade (left open, as for any index-driven
//! cleanup).

use std::sync::Arc;

use async_trait::async_trait;
use worker_engine::TableNames;
use worker_engine::item::Item;
use worker_engine::metrics::WriteCounter;
use worker_engine::store::{Expr, Key, QuerySpec, Store};
use worker_engine::store::{TransactOp, TransactOutcome, Transactions};
use worker_engine::stream::{ChangeKind, StreamChange};
use worker_engine::stream::{RecordOutcome, RecordProcessor};
use worker_engine::{Access, HandlerError, StreamSpec};

use crate::app::{JobSpec, Stores, TableAccess, TableHandler};
use crate::items::{RequestCopy, Status};
use crate::keys::{self, CommunityItem, KeyError};
use crate::requests::{Refused, refuse_copies, user_gone};
use crate::schema::Table;

/// Items deleted or requests cancelled by the cascades.
pub const CASCADE_WRITES: &str = "CascadeWrites";

/// Deletes per transaction: DynamoDB's 100 actions, less the check.
pub const CHUNK: usize = 99;

/// The cascades' access, per table: the removed item confirmed gone (and
/// checked in every transaction), what it leaves found (indexes,
/// partitions) and deleted in transactions; requests read and cancelled
/// (transactions of updates, checked against the join mark).
pub const STREAM_TABLES: &[TableAccess] = &[
    TableAccess {
        table: Table::Users,
        actions: &["dynamodb:ConditionCheckItem", "dynamodb:GetItem"],
        indexes: &[],
    },
    TableAccess {
        table: Table::Communities,
        actions: &[
            "dynamodb:ConditionCheckItem",
            "dynamodb:DeleteItem",
            "dynamodb:GetItem",
            "dynamodb:Query",
        ],
        indexes: &[keys::COMMUNITY_MEMBERS_INDEX],
    },
    TableAccess {
        table: Table::GroupChats,
        actions: &["dynamodb:DeleteItem", "dynamodb:Query"],
        indexes: &[keys::CHAT_MEMBERS_INDEX],
    },
    TableAccess {
        table: Table::PrivateChats,
        actions: &["dynamodb:DeleteItem", "dynamodb:Query"],
        indexes: &[keys::CHAT_MEMBERS_INDEX],
    },
    TableAccess {
        table: Table::ChatRequests,
        actions: &[
            "dynamodb:ConditionCheckItem",
            "dynamodb:GetItem",
            "dynamodb:Query",
            "dynamodb:UpdateItem",
        ],
        indexes: &[],
    },
    TableAccess {
        table: Table::Notifications,
        actions: &["dynamodb:DeleteItem", "dynamodb:Query"],
        indexes: &[],
    },
];

/// The cascades of a user's and a community's removal.
pub const SPEC: JobSpec = JobSpec {
    name: "cascades",
    summary: "a user removed leaves no memberships, pending requests or notifications; a community removed leaves no member or group-chat links; every write checked against the removed item's absence",
    env: &[],
    stream: Some(StreamSpec {
        handler: "cascade",
        writes_metric: CASCADE_WRITES,
        access: Access {
            dynamodb_actions: &[
                "dynamodb:ConditionCheckItem",
                "dynamodb:DeleteItem",
                "dynamodb:GetItem",
                "dynamodb:Query",
                "dynamodb:UpdateItem",
            ],
            indexes: &[keys::CHAT_MEMBERS_INDEX, keys::COMMUNITY_MEMBERS_INDEX],
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
                tables: d.settings.tables.clone(),
                writes: d.writes.clone(),
            }),
            Arc::new(CommunityCascade {
                store: d.stores.get(Table::Communities).clone(),
                tx: d.tx.clone(),
                table: d.settings.tables.name(Table::Communities).to_owned(),
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
) -> Result<Vec<Item>, HandlerError> {
    let mut spec = QuerySpec::partition(attribute, value);
    spec.index = index.map(str::to_owned);
    spec.consistent = index.is_none();
    // A page size keeps this a plain Query.
    spec.limit = Some(100);
    Ok(store.query_all(&spec).await?)
}

/// The table's key (`PK`, and `SK` when it has one) of an item.
fn key_of(item: Item) -> Key {
    item.into_iter()
        .filter(|(k, _)| k == keys::PK || k == keys::SK)
        .collect()
}

/// The condition every write of a cascade carries: the removed item is
/// still absent (a ConditionCheck, first in each transaction).
#[derive(Debug, Clone)]
pub struct Guard {
    /// Its table's name.
    pub table: String,
    /// The removed item's key in that table (the user's, the community's).
    pub key: Key,
}

impl Guard {
    fn check(&self) -> TransactOp {
        TransactOp::Check {
            table: self.table.clone(),
            key: self.key.clone(),
            condition: Expr::not_exists(keys::PK),
        }
    }
}

/// The cascade stopped: the removed item exists again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stopped;

/// Delete `keys` from `table`, in transactions of up to [`CHUNK`] deletes
/// each carrying `guard`'s check; how many were deleted, or [`Stopped`]
/// (with those deleted before) when the check failed.
async fn delete_guarded(
    tx: &dyn Transactions,
    guard: &Guard,
    table: &str,
    keys: Vec<Key>,
    writes: &WriteCounter,
    done: &mut usize,
) -> Result<Result<usize, Stopped>, HandlerError> {
    let mut n = 0;
    for chunk in keys.chunks(CHUNK) {
        let mut ops = vec![guard.check()];
        ops.extend(chunk.iter().map(|k| TransactOp::Delete {
            table: table.to_owned(),
            key: k.clone(),
            condition: None,
        }));
        let outcome = tx.transact_write(ops).await?;
        writes.add(CASCADE_WRITES, 1);
        match outcome {
            TransactOutcome::Applied => {
                n += chunk.len();
                *done += chunk.len();
            }
            o if o.failed(0) => return Ok(Err(Stopped)),
            TransactOutcome::Cancelled(_) => {
                return Err(HandlerError::transient(
                    "a cascade transaction was cancelled on no condition; again",
                ));
            }
        }
    }
    Ok(Ok(n))
}

/// Removes what a deleted user leaves.
pub struct UserCascade {
    stores: Stores,
    tx: Arc<dyn Transactions>,
    tables: TableNames<Table>,
    writes: Arc<WriteCounter>,
}

/// What a user's cascade did.
#[derive(Debug, Default)]
struct Removed {
    communities: usize,
    chats: usize,
    requests: usize,
    notifications: usize,
    /// Writes that landed (items deleted, requests cancelled).
    writes: usize,
    /// Stopped: the user exists again.
    stopped: bool,
}

impl UserCascade {
    async fn run(&self, user: &str) -> Result<Removed, HandlerError> {
        let member_sk = keys::community_member_sk(user);
        let guard = Guard {
            table: self.tables.name(Table::Users).to_owned(),
            key: keys::user(user),
        };
        let mut r = Removed::default();
        let communities = self.stores.get(Table::Communities);
        let links: Vec<Key> = partition(
            communities.as_ref(),
            Some(keys::COMMUNITY_MEMBERS_INDEX),
            keys::SK,
            &member_sk,
        )
        .await?
        .into_iter()
        .filter(|i| matches!(CommunityItem::parse(i), Ok(CommunityItem::Member { .. })))
        .map(key_of)
        .collect();
        let table = self.tables.name(Table::Communities);
        match delete_guarded(
            self.tx.as_ref(),
            &guard,
            table,
            links,
            &self.writes,
            &mut r.writes,
        )
        .await?
        {
            Ok(n) => r.communities = n,
            Err(Stopped) => return Ok(stopped(r)),
        }
        for t in [Table::GroupChats, Table::PrivateChats] {
            let store = self.stores.get(t);
            let members: Vec<Key> = partition(
                store.as_ref(),
                Some(keys::CHAT_MEMBERS_INDEX),
                keys::SK,
                &member_sk,
            )
            .await?
            .into_iter()
            .map(key_of)
            .collect();
            let table = self.tables.name(t);
            match delete_guarded(
                self.tx.as_ref(),
                &guard,
                table,
                members,
                &self.writes,
                &mut r.writes,
            )
            .await?
            {
                Ok(n) => r.chats += n,
                Err(Stopped) => return Ok(stopped(r)),
            }
        }
        match self.cancel_requests(user, &mut r.writes).await? {
            Ok(n) => r.requests = n,
            Err(Stopped) => return Ok(stopped(r)),
        }
        let notifications = self.stores.get(Table::Notifications);
        let all: Vec<Key> = partition(notifications.as_ref(), None, keys::PK, &keys::user_pk(user))
            .await?
            .into_iter()
            .map(key_of)
            .collect();
        let table = self.tables.name(Table::Notifications);
        match delete_guarded(
            self.tx.as_ref(),
            &guard,
            table,
            all,
            &self.writes,
            &mut r.writes,
        )
        .await?
        {
            Ok(n) => r.notifications = n,
            Err(Stopped) => return Ok(stopped(r)),
        }
        Ok(r)
    }

    /// Every request of the user's partition (the table, not the sparse
    /// index) that is pending, or accepted and never joined, cancelled on
    /// both copies, each request in a transaction checking that the user
    /// is still absent; how many requests were cancelled.
    async fn cancel_requests(
        &self,
        user: &str,
        done: &mut usize,
    ) -> Result<Result<usize, Stopped>, HandlerError> {
        let store = self.stores.get(Table::ChatRequests);
        let mine = partition(store.as_ref(), None, keys::PK, &keys::user_pk(user)).await?;
        let mut cancelled = 0;
        for item in mine {
            // A copy that does not read is the request handler's to report.
            let Ok(copy) = RequestCopy::from_item(&item) else {
                continue;
            };
            let open = copy.status == Status::Pending
                || (copy.status == Status::Accepted && copy.joined_at.is_none());
            if !open {
                continue;
            }
            // The chat's copy is found from the user's (its ChatId).
            let twin = match store.get(&copy.twin_key().key(), true).await? {
                Some(i) => RequestCopy::from_item(&i).ok(),
                None => None,
            };
            let outcome = refuse_copies(
                self.tx.as_ref(),
                self.tables.name(Table::ChatRequests),
                [Some(&copy), twin.as_ref()],
                Status::Cancelled,
                keys::REASON_USER_DELETED,
                user_gone(self.tables.name(Table::Users), user),
            )
            .await?;
            self.writes.add(CASCADE_WRITES, 1);
            match outcome {
                Refused::Applied => {
                    cancelled += 1;
                    *done += 1;
                }
                Refused::ReasonGone => return Ok(Err(Stopped)),
                // Joined, or changed since the read: its record decides.
                Refused::Joined | Refused::Changed | Refused::NoCopies => {}
            }
        }
        Ok(Ok(cancelled))
    }
}

fn stopped(mut r: Removed) -> Removed {
    r.stopped = true;
    r
}

#[async_trait]
impl RecordProcessor for UserCascade {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError> {
        if change.kind == ChangeKind::Insert || change.kind == ChangeKind::Modify {
            return Ok(RecordOutcome::skipped("user not removed"));
        }
        let user = match keys::parse_user(&change.keys) {
            Ok(u) => u,
            Err(e @ KeyError::Foreign { .. }) => return Ok(RecordOutcome::foreign(e.to_string())),
            Err(e) => {
                return Err(HandlerError::permanent(e.to_string()));
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
        let figures = format!(
            "{} community link(s), {} chat membership(s), {} request(s) cancelled, {} notification(s)",
            r.communities, r.chats, r.requests, r.notifications
        );
        if r.stopped {
            tracing::info!(
                user = %user,
                writes = r.writes,
                "user exists again: cascade stopped"
            );
            let text = format!(
                "user exists again: cascade stopped after {} write(s): {figures}",
                r.writes
            );
            return Ok(if r.writes == 0 {
                RecordOutcome::skipped(text)
            } else {
                RecordOutcome::handled(text)
            });
        }
        Ok(RecordOutcome::handled(format!("user removed: {figures}")))
    }
}

impl TableHandler<Table> for UserCascade {
    fn table(&self) -> Table {
        Table::Users
    }
}

/// Removes a deleted community's members and group-chat links.
pub struct CommunityCascade {
    store: Arc<dyn Store>,
    tx: Arc<dyn Transactions>,
    /// The Communities table's name.
    table: String,
    writes: Arc<WriteCounter>,
}

#[async_trait]
impl RecordProcessor for CommunityCascade {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError> {
        if !change.kind.is_removal() {
            return Ok(RecordOutcome::skipped("community not removed"));
        }
        let community = match CommunityItem::parse(&change.keys) {
            Ok(CommunityItem::Community { community }) => community,
            Ok(_) => return Ok(RecordOutcome::skipped("a link removed")),
            Err(e @ KeyError::Foreign { .. }) => return Ok(RecordOutcome::foreign(e.to_string())),
            Err(e) => {
                return Err(HandlerError::permanent(e.to_string()));
            }
        };
        let own = CommunityItem::Community {
            community: community.clone(),
        }
        .key();
        if self.store.get(&own, true).await?.is_some() {
            return Ok(RecordOutcome::skipped("community exists again"));
        }
        let pk = own[keys::PK].as_s().cloned().unwrap_or_default();
        // The community's own item is the guard, never a delete (written
        // again meanwhile, it is in the partition read).
        let links: Vec<Key> = partition(self.store.as_ref(), None, keys::PK, &pk)
            .await?
            .into_iter()
            .map(key_of)
            .filter(|k| *k != own)
            .collect();
        let guard = Guard {
            table: self.table.clone(),
            key: own,
        };
        let mut done = 0;
        match delete_guarded(
            self.tx.as_ref(),
            &guard,
            &self.table,
            links,
            &self.writes,
            &mut done,
        )
        .await?
        {
            Ok(n) => Ok(RecordOutcome::handled(format!(
                "community removed: {n} link(s) deleted"
            ))),
            Err(Stopped) => {
                tracing::info!(
                    community = %community,
                    writes = done,
                    "community exists again: cascade stopped"
                );
                let text =
                    format!("community exists again: cascade stopped after {done} delete(s)");
                Ok(if done == 0 {
                    RecordOutcome::skipped(text)
                } else {
                    RecordOutcome::handled(text)
                })
            }
        }
    }
}

impl TableHandler<Table> for CommunityCascade {
    fn table(&self) -> Table {
        Table::Communities
    }
}
