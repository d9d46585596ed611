//! `NumMembers` of a group chat equals the number of its `USER#` items.
//!
//! **How the count stays right without blind `ADD`s.** Two writers move it:
//!
//! - an acceptance (see [`crate::requests`]) puts the member item and adds
//!   one to `NumMembers` in one transaction, conditional on the member
//!   item not existing and on the request not joined yet: it applies once
//!   however often it is delivered, and the count moves only with an item
//!   that was really added;
//! - [`MemberCount`], the stream handler of the GroupChats table, recounts:
//!   on a member item inserted or removed (by anyone), and on the chat
//!   item inserted or its `NumMembers` changed, it reads the chat item,
//!   then counts the `USER#` items (a consistent Query of the partition,
//!   keys only), and sets `NumMembers` to the count **on the condition that
//!   `NumMembers` is still the value it read**. A recount never adds to
//!   what is there: redelivered, it counts again and finds nothing to do.
//!
//! Why the result is right after any interleaving: consider the last
//! change to the partition (a member added or removed, or `NumMembers`
//! written). Its record triggers a recount that starts after it, so it
//! counts the final members. If it finds `NumMembers` right, done; if
//! not, its conditional write either applies (a `NumMembers` change whose
//! own record recounts once more and finds it right) or fails because
//! `NumMembers` changed meanwhile, which is a later change, whose record
//! recounts. A recount that counted before a membership change can only
//! write a stale number if `NumMembers` did not change since it read it;
//! that write is itself a change, and its record's recount fixes it.
//! The cost: one Query per member change, and one more per count written.
//!
//! **What the write's condition covers** (the rule that a write decided
//! from another item carries a condition on it). The count is decided from
//! two reads: the chat item's `NumMembers` and the partition's `USER#`
//! items. The condition covers the first (`NumMembers` as read, and the
//! chat item still there: a deleted chat is never recreated by a count).
//! The member items cannot be covered: a condition names items, and a
//! member added after the Query is one nobody has named yet. This is safe
//! because the count is derived, never a deletion or a settlement of
//! anyone's data, and a count written from a stale Query is overwritten by
//! the recount of the change that made it stale (whose record starts after
//! it, see above): it converges to the member items, which the worker's
//! concurrent test checks after quiet.

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use worker_engine::metrics::WriteCounter;
use worker_engine::store::{Expr, QuerySpec, Store, WriteOutcome};
use worker_engine::stream::{ChangeKind, StreamChange};
use worker_engine::stream::{RecordOutcome, RecordProcessor};
use worker_engine::{Access, HandlerError, StreamSpec};

use crate::app::{JobSpec, TableAccess, TableHandler};
use crate::images::{Image, Images};
use crate::items::GroupChat;
use crate::keys::{self, ChatItem, ChatKind};
use crate::schema::Table;

/// `NumMembers` writes.
pub const MEMBER_COUNT_WRITES: &str = "MemberCountWrites";

/// The recount's access: the chat item read and updated, its members
/// counted.
pub const STREAM_TABLES: &[TableAccess] = &[TableAccess {
    table: Table::GroupChats,
    actions: &["dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"],
    indexes: &[],
}];

/// The members job: the count of a group chat's members.
pub const SPEC: JobSpec = JobSpec {
    name: "members",
    summary: "keeps a group chat's NumMembers equal to its USER# items (recount, conditional on the value read)",
    env: &[],
    stream: Some(StreamSpec {
        handler: "member-count",
        writes_metric: MEMBER_COUNT_WRITES,
        access: Access {
            dynamodb_actions: &["dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"],
            indexes: &[],
            fallbacks: &[],
            publishes_events: false,
        },
    }),
    scheduled: &[],
    handlers: |d| {
        vec![Arc::new(MemberCount {
            store: d.stores.get(Table::GroupChats).clone(),
            writes: d.writes.clone(),
        })]
    },
    jobs: |_| vec![],
};

/// Recounts a group chat's members on every change that may move the count.
pub struct MemberCount {
    store: Arc<dyn Store>,
    writes: Arc<WriteCounter>,
}

/// Whether a change to `item` may leave `NumMembers` wrong.
fn moves_count(item: &ChatItem, change: &StreamChange) -> bool {
    match item {
        ChatItem::Member { .. } => change.kind != ChangeKind::Modify,
        ChatItem::Chat { .. } => match change.kind {
            ChangeKind::Insert => true,
            ChangeKind::Modify => {
                let images = Images::of(change);
                let n = |i: Option<&Image>| i.and_then(|i| i.num_members.clone());
                n(images.old.as_ref()) != n(images.new.as_ref())
            }
            _ => false,
        },
        ChatItem::Message { .. } => false,
    }
}

impl MemberCount {
    /// The number of `USER#` items of `chat` (consistent).
    async fn count(&self, chat: &str) -> Result<i64, HandlerError> {
        let spec = QuerySpec {
            key_condition: Expr::new("#pk = :pk AND begins_with(#sk, :user)")
                .name("#pk", keys::PK)
                .name("#sk", keys::SK)
                .string(":pk", keys::chat_pk(ChatKind::Group, chat))
                .string(":user", keys::MEMBER_SK_PREFIX),
            projection: Some(Expr::new("#pk").name("#pk", keys::PK)),
            consistent: true,
            forward: true,
            ..Default::default()
        };
        Ok(self.store.query_all(&spec).await?.len() as i64)
    }

    /// Recount `chat`; what it did.
    pub async fn recount(&self, chat: &str) -> Result<RecordOutcome, HandlerError> {
        let key = ChatItem::Chat {
            kind: ChatKind::Group,
            chat: chat.to_owned(),
        }
        .key();
        let Some(item) = self.store.get(&key, true).await? else {
            return Ok(RecordOutcome::skipped("chat gone"));
        };
        let seen = GroupChat::from_item(&item)
            .map_err(HandlerError::permanent)?
            .num_members;
        let counted = self.count(chat).await?;
        if seen == Some(counted) {
            return Ok(RecordOutcome::skipped("count right"));
        }
        let update = Expr::set(keys::NUM_MEMBERS, AttributeValue::N(counted.to_string()));
        let seen = seen.map(|n| AttributeValue::N(n.to_string()));
        let unchanged =
            Expr::unchanged(keys::NUM_MEMBERS, seen.as_ref()).and(Expr::exists(keys::PK));
        let outcome = self.store.update(&key, update, Some(unchanged)).await?;
        self.writes.add(MEMBER_COUNT_WRITES, 1);
        Ok(match outcome {
            WriteOutcome::Applied => RecordOutcome::handled("NumMembers recounted"),
            WriteOutcome::ConditionFailed => {
                RecordOutcome::skipped("NumMembers changed meanwhile (its record recounts)")
            }
        })
    }
}

#[async_trait]
impl RecordProcessor for MemberCount {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError> {
        let item = match ChatItem::parse(ChatKind::Group, &change.keys) {
            Ok(i) => i,
            Err(e @ keys::KeyError::Foreign { .. }) => {
                return Ok(RecordOutcome::foreign(e.to_string()));
            }
            Err(e) => {
                return Err(HandlerError::permanent(e.to_string()));
            }
        };
        if !moves_count(&item, change) {
            return Ok(RecordOutcome::skipped("count unaffected"));
        }
        self.recount(item.chat()).await
    }
}

impl TableHandler<Table> for MemberCount {
    fn table(&self) -> Table {
        Table::GroupChats
    }
}
