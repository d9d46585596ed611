//! Chat requests: two copies kept in step, the sparse pending index kept
//! sparse, an acceptance turned into a membership and one notification.
//!
//! - [`rules`]: the plan for one request from its two copies (pure);
//! - [`RequestSync`]: the stream handler of the ChatRequests table. Any
//!   record of a copy (insert or modify) reads both copies (consistent,
//!   one BatchGetItem) and carries out the plan, each write conditional on
//!   what the plan was based on (`Status = pending` before a copy follows
//!   its twin; the status seen before `PendingId` is dropped). Decisions
//!   come from the copies as they are, so both copies changed in either
//!   order, redelivered or concurrent, end the same; a write that lost its
//!   condition was overtaken by a change with a record of its own.
//!   Two different terminal statuses are a conflict: counted
//!   (`RequestConflicts`), logged with the ids, never overwritten.
//! - **Acceptance.** The group chat's copy `accepted` and without
//!   `JoinedAt`: one transaction over four tables sets `JoinedAt` (only if
//!   still accepted and not joined), puts the member item (only if absent),
//!   moves `NumMembers` up by one (only while below `Capacity`), checks
//!   that the user still exists and puts the notification
//!   `NOTIFICATION#UNREAD#<JoinedAt>#chatrequest-<id>-accepted`. The
//!   `JoinedAt` condition makes it happen once per request: a redelivery
//!   finds `JoinedAt` set and writes nothing, so there is never a second
//!   member count or notification. A member item already there (joined
//!   some other way) or the notification already there (a client
//!   rewrote an accepted copy) is left out and the rest done: the count
//!   moves only with a member item this transaction puts. Two acceptances racing for the last
//!   seat: DynamoDB serializes the transactions on the chat item; the
//!   loser is cancelled (a conflict is retried as transient) and on its
//!   next attempt finds the chat full. A chat at `Capacity` (or deleted,
//!   or a user deleted meanwhile) turns the request `rejected` (or
//!   `cancelled`) with a `StatusReason`, on both copies in one
//!   transaction (so neither copy is ever seen alone in the new status,
//!   which would read as a conflict). This is the only time a terminal
//!   status changes, and only from an `accepted` never joined.
//! - [`expire`]: the scheduled `expire-requests`; [`audit`]: the scheduled
//!   `audit-requests` (a copy whose twin is missing).

pub mod audit;
pub mod expire;
pub mod rules;

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use worker_engine::clock::Clock;
use worker_engine::job::{Access, Schedule, ScheduleSpec, StreamSpec};
use worker_engine::metrics::WriteCounter;
use worker_engine::store::transact::{TransactOp, TransactOutcome, Transactions};
use worker_engine::store::{Expr, Store, StoreError, WriteOutcome};
use worker_engine::stream::decode::StreamChange;
use worker_engine::stream::engine::{ProcessError, RecordOutcome, RecordProcessor};

use crate::app::{Deps, JobSpec, Stores, TableAccess, TableHandler};
use crate::config::{EnvVar, REQUEST_EXPIRY_DAYS, ReadBy, Settings, TWIN_GRACE_MINUTES};
use crate::items::{GroupChat, Notification, RequestCopy, Status};
use crate::keys::{self, ChatItem, ChatKind, Job, Owner, RequestKey, RequestsItem};
use crate::schema::Table;
use rules::Plan;

/// Write requests of the stream handler.
pub const REQUEST_WRITES: &str = "RequestWrites";
/// Requests whose copies hold two different terminal statuses.
pub const REQUEST_CONFLICTS: &str = "RequestConflicts";
/// Requests expired by `expire-requests`.
pub const REQUESTS_EXPIRED: &str = "RequestsExpired";
/// Copies recreated from their twin by `audit-requests`.
pub const TWINS_RECREATED: &str = "RequestTwinsRecreated";
/// Copies without twin that `audit-requests` can only report.
pub const TWINS_MISSING: &str = "RequestTwinsMissing";

/// The stream handler's access, per table: both copies read together and
/// updated (also inside the acceptance and refusal transactions); the
/// acceptance's user check, notification, member item and count.
pub const STREAM_TABLES: &[TableAccess] = &[
    TableAccess {
        table: Table::ChatRequests,
        actions: &["dynamodb:BatchGetItem", "dynamodb:UpdateItem"],
        indexes: &[],
    },
    TableAccess {
        table: Table::Users,
        actions: &["dynamodb:ConditionCheckItem"],
        indexes: &[],
    },
    TableAccess {
        table: Table::Notifications,
        actions: &["dynamodb:PutItem"],
        indexes: &[],
    },
    TableAccess {
        table: Table::GroupChats,
        actions: &[
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
        ],
        indexes: &[],
    },
];

/// `expire-requests`: a Scan of the sparse index, conditional updates.
pub const EXPIRE_TABLES: &[TableAccess] = &[TableAccess {
    table: Table::ChatRequests,
    actions: &["dynamodb:Scan", "dynamodb:UpdateItem"],
    indexes: &[keys::PENDING_REQUESTS_INDEX],
}];

/// `audit-requests`: a Scan of the table, the twins read, recreated; its
/// checkpoint read, written and deleted.
pub const AUDIT_TABLES: &[TableAccess] = &[TableAccess {
    table: Table::ChatRequests,
    actions: &[
        "dynamodb:BatchGetItem",
        "dynamodb:DeleteItem",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Scan",
    ],
    indexes: &[],
}];

/// The requests job: its stream handler, the expiry and the twin audit.
pub const SPEC: JobSpec = JobSpec {
    name: "requests",
    summary: "keeps a request's two copies in step and PendingId on pending copies only; an acceptance adds the member (below Capacity) and one notification; old pending requests expire; a missing twin is recreated or reported",
    env: &[
        EnvVar {
            name: REQUEST_EXPIRY_DAYS,
            read_by: &[ReadBy::Job(Job::ExpireRequests)],
            default: Some("30"),
            meaning: "pending requests older than this many days expire",
        },
        EnvVar {
            name: TWIN_GRACE_MINUTES,
            read_by: &[ReadBy::Job(Job::AuditRequests)],
            default: Some("60"),
            meaning: "a copy's twin may be missing this many minutes before the audit acts",
        },
    ],
    stream: Some(StreamSpec {
        handler: "request-sync",
        writes_metric: REQUEST_WRITES,
        access: Access {
            dynamodb_actions: &[
                "dynamodb:BatchGetItem",
                "dynamodb:ConditionCheckItem",
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
            ],
            indexes: &[],
            fallbacks: &[],
            publishes_events: false,
        },
    }),
    scheduled: &[
        ScheduleSpec {
            job: Job::ExpireRequests,
            function: "ExpireRequestsFunction",
            schedule: Schedule::Rate("rate(1 hour)"),
            local_cron: "0 * * * *",
            access: Access {
                dynamodb_actions: &["dynamodb:Scan", "dynamodb:UpdateItem"],
                indexes: &[keys::PENDING_REQUESTS_INDEX],
                fallbacks: &[],
                publishes_events: false,
            },
            metrics: &[REQUESTS_EXPIRED],
        },
        ScheduleSpec {
            job: Job::AuditRequests,
            function: "AuditRequestsFunction",
            schedule: Schedule::Rate("rate(1 day)"),
            local_cron: "30 3 * * *",
            access: Access {
                dynamodb_actions: &[
                    "dynamodb:BatchGetItem",
                    "dynamodb:DeleteItem",
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:Scan",
                ],
                indexes: &[],
                fallbacks: &[],
                publishes_events: false,
            },
            metrics: &[TWINS_RECREATED, TWINS_MISSING],
        },
    ],
    handlers: |d| vec![Arc::new(RequestSync::new(d))],
    jobs: |d| {
        vec![
            Arc::new(expire::ExpireRequests::new(d)),
            Arc::new(audit::AuditRequests::new(d)),
        ]
    },
};

/// Keeps each request's copies in step; turns acceptances into members.
pub struct RequestSync {
    stores: Stores,
    tx: Arc<dyn Transactions>,
    settings: Settings,
    clock: Arc<dyn Clock>,
    writes: Arc<WriteCounter>,
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn status_is(placeholder: &str, status: Status) -> Expr {
    Expr::new(format!("#st = {placeholder}"))
        .name("#st", keys::STATUS)
        .string(placeholder, status.as_str())
}

/// The update setting a copy's terminal `status` (and `reason`), without
/// `PendingId`.
pub fn set_terminal(status: Status, reason: Option<&str>) -> Expr {
    let text = if reason.is_some() {
        "SET #st = :new, #why = :why REMOVE #pid"
    } else {
        "SET #st = :new REMOVE #pid"
    };
    let mut e = Expr::new(text)
        .name("#st", keys::STATUS)
        .name("#pid", keys::PENDING_ID)
        .string(":new", status.as_str());
    if let Some(r) = reason {
        e = e.name("#why", keys::STATUS_REASON).string(":why", r);
    }
    e
}

/// What a failed acceptance turns the request into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    Full,
    ChatGone,
    UserGone,
}

impl Refusal {
    fn outcome(self) -> (Status, &'static str) {
        match self {
            Refusal::Full => (Status::Rejected, keys::REASON_CAPACITY),
            Refusal::ChatGone => (Status::Rejected, keys::REASON_CHAT_DELETED),
            Refusal::UserGone => (Status::Cancelled, keys::REASON_USER_DELETED),
        }
    }
}

impl RequestSync {
    pub fn new(d: &Deps) -> Self {
        RequestSync {
            stores: d.stores.clone(),
            tx: d.tx.clone(),
            settings: d.settings.clone(),
            clock: d.clock.clone(),
            writes: d.writes.clone(),
        }
    }

    fn table(&self, t: Table) -> String {
        self.settings.table(t).to_owned()
    }

    fn requests(&self) -> &Arc<dyn Store> {
        self.stores.get(Table::ChatRequests)
    }

    /// Both copies as they are now: (user's, group chat's).
    async fn copies(
        &self,
        key: &RequestKey,
        twin: &RequestKey,
    ) -> Result<(Option<RequestCopy>, Option<RequestCopy>), ProcessError> {
        let read = self
            .requests()
            .get_many(&[key.key(), twin.key()], true)
            .await?;
        let mut decoded = Vec::new();
        for item in read.into_iter() {
            decoded.push(match item {
                None => None,
                Some(i) => Some(
                    RequestCopy::from_item(&i)
                        .map_err(|reason| ProcessError::Permanent { reason })?,
                ),
            });
        }
        let twin_copy = decoded.pop().flatten();
        let this = decoded.pop().flatten();
        Ok(match key.owner {
            Owner::User(_) => (this, twin_copy),
            Owner::GroupChat(_) => (twin_copy, this),
        })
    }

    async fn write(&self, key: &RequestKey, update: Expr, cond: Expr) -> Result<bool, StoreError> {
        let applied = self
            .requests()
            .update(&key.key(), update, Some(cond))
            .await?;
        self.writes.add(REQUEST_WRITES, 1);
        Ok(applied == WriteOutcome::Applied)
    }

    async fn carry_out(
        &self,
        plan: &Plan,
        chat_copy: Option<&RequestCopy>,
    ) -> Result<Vec<&'static str>, ProcessError> {
        let mut done = Vec::new();
        for (key, status) in &plan.drop_pending_id {
            let update = Expr::new("REMOVE #pid").name("#pid", keys::PENDING_ID);
            let cond = status_is(":seen", *status).and(Expr::exists(keys::PENDING_ID));
            if self.write(key, update, cond).await? {
                done.push("PendingId removed");
            }
        }
        if let Some(key) = &plan.add_pending_id {
            let update = Expr::new("SET #pid = :pid")
                .name("#pid", keys::PENDING_ID)
                .string(":pid", &key.request);
            let cond = status_is(":pending", Status::Pending)
                .and(Expr::new("attribute_not_exists(#pid)").name("#pid", keys::PENDING_ID));
            if self.write(key, update, cond).await? {
                done.push("PendingId added");
            }
        }
        if let Some(f) = &plan.follow {
            let cond = status_is(":pending", Status::Pending);
            if self
                .write(&f.copy, set_terminal(f.status, f.reason.as_deref()), cond)
                .await?
            {
                done.push("copy followed its twin");
            }
        }
        if let Some((user, chat)) = plan.conflict
            && let Some(c) = chat_copy
        {
            self.writes.add(REQUEST_CONFLICTS, 1);
            tracing::warn!(
                request = %c.id,
                user = %c.user_id,
                chat = %c.chat_id,
                user_copy = user.as_str(),
                chat_copy = chat.as_str(),
                "request copies hold different terminal statuses; left as they are"
            );
            done.push("conflict reported");
        }
        if plan.join
            && let Some(c) = chat_copy
        {
            done.push(self.join(c).await?);
        }
        Ok(done)
    }

    /// The member, its count and the notification of an accepted request,
    /// once; or its refusal.
    async fn join(&self, copy: &RequestCopy) -> Result<&'static str, ProcessError> {
        let now = self.clock.now();
        let joined_at = keys::format_time(now);
        let member = ChatItem::Member {
            kind: ChatKind::Group,
            chat: copy.chat_id.clone(),
            user: copy.user_id.clone(),
        };
        let mut member_item = member.key();
        member_item.insert(keys::JOINED_AT.into(), s(&joined_at));
        let chat = ChatItem::Chat {
            kind: ChatKind::Group,
            chat: copy.chat_id.clone(),
        };
        let (_, notification) = Notification::accepted(copy, now);
        let mark_joined = TransactOp::Update {
            table: self.table(Table::ChatRequests),
            key: copy.key().key(),
            update: Expr::new("SET #ja = :ja")
                .name("#ja", keys::JOINED_AT)
                .string(":ja", &joined_at),
            condition: Some(
                status_is(":acc", Status::Accepted)
                    .and(Expr::new("attribute_not_exists(#ja)").name("#ja", keys::JOINED_AT)),
            ),
        };
        let user_exists = TransactOp::Check {
            table: self.table(Table::Users),
            key: keys::user(&copy.user_id),
            condition: Expr::exists(keys::PK),
        };
        let notify = TransactOp::Put {
            table: self.table(Table::Notifications),
            item: notification,
            condition: Some(Expr::not_exists(keys::PK)),
        };
        let put_member = TransactOp::Put {
            table: self.table(Table::GroupChats),
            item: member_item,
            condition: Some(Expr::not_exists(keys::PK)),
        };
        let count = TransactOp::Update {
            table: self.table(Table::GroupChats),
            key: chat.key(),
            update: Expr::new("SET #n = if_not_exists(#n, :zero) + :one")
                .name("#n", keys::NUM_MEMBERS)
                .value(":zero", AttributeValue::N("0".into()))
                .value(":one", AttributeValue::N("1".into())),
            condition: Some(
                Expr::new(
                    "attribute_exists(#pk) AND (attribute_not_exists(#cap) OR #n < #cap \
                     OR (attribute_not_exists(#n) AND #cap > :zero))",
                )
                .name("#pk", keys::PK)
                .name("#cap", keys::CAPACITY)
                .name("#n", keys::NUM_MEMBERS)
                .value(":zero", AttributeValue::N("0".into())),
            ),
        };
        // Parts already there (a member who joined some other way, the
        // notification of an earlier acceptance of the same request
        // rewritten by a client) are left out and the rest tried again.
        let (mut with_notification, mut with_member) = (true, true);
        let mut chat_refused = false;
        for _attempt in 0..3 {
            let mut ops = vec![mark_joined.clone(), user_exists.clone()];
            let notify_at = with_notification.then(|| {
                ops.push(notify.clone());
                ops.len() - 1
            });
            let member_at = with_member.then(|| {
                ops.push(put_member.clone());
                ops.push(count.clone());
                ops.len() - 2
            });
            let outcome = self.tx.transact_write(ops).await?;
            self.writes.add(REQUEST_WRITES, 1);
            if outcome == TransactOutcome::Applied {
                return Ok(match (with_member, with_notification) {
                    (true, true) => "member added",
                    (false, _) => "already a member; request marked joined",
                    (true, false) => "member added (notified before)",
                });
            }
            if outcome.failed(0) {
                return Ok("already joined or no longer accepted");
            }
            if outcome.failed(1) {
                return self.refuse(copy, Refusal::UserGone).await;
            }
            let notified = notify_at.is_some_and(|i| outcome.failed(i));
            let member = member_at.is_some_and(|i| outcome.failed(i));
            if notified {
                with_notification = false;
            }
            if member {
                with_member = false;
            }
            if !notified && !member {
                chat_refused = member_at.is_some_and(|i| outcome.failed(i + 1));
                break;
            }
        }
        if !chat_refused {
            return Err(ProcessError::Transient {
                reason: "the acceptance's items changed meanwhile; deciding again".into(),
            });
        }
        // The chat's condition: gone, or full.
        let chat_item = self
            .stores
            .get(Table::GroupChats)
            .get(&chat.key(), true)
            .await?;
        let refusal = match chat_item {
            None => Refusal::ChatGone,
            Some(item) => {
                let g = GroupChat::from_item(&item)
                    .map_err(|reason| ProcessError::Permanent { reason })?;
                if g.capacity.is_some() {
                    Refusal::Full
                } else {
                    return Err(ProcessError::Transient {
                        reason: "the chat changed during the acceptance; deciding again".into(),
                    });
                }
            }
        };
        self.refuse(copy, refusal).await
    }

    /// Both copies of an accepted (or pending), never joined request turned
    /// into `refusal`'s status and reason, in one transaction.
    async fn refuse(
        &self,
        copy: &RequestCopy,
        refusal: Refusal,
    ) -> Result<&'static str, ProcessError> {
        let (status, reason) = refusal.outcome();
        let (user_copy, chat_copy) = self.copies(copy.key(), &copy.twin_key()).await?;
        let outcome = refuse_copies(
            self.tx.as_ref(),
            self.settings.table(Table::ChatRequests),
            [user_copy.as_ref(), chat_copy.as_ref()],
            status,
            reason,
        )
        .await?;
        self.writes.add(REQUEST_WRITES, 1);
        Ok(match (outcome, refusal) {
            (TransactOutcome::Applied, Refusal::Full) => "chat full: request rejected",
            (TransactOutcome::Applied, Refusal::ChatGone) => "chat gone: request rejected",
            (TransactOutcome::Applied, Refusal::UserGone) => "user gone: request cancelled",
            (TransactOutcome::Cancelled(_), _) => "request changed meanwhile",
        })
    }
}

/// The copies (those that exist) of a request that is pending, or accepted
/// and never joined, set to `status` with `reason`, in one transaction:
/// neither copy is seen in the new status alone. Cancelled (nothing
/// written) when a copy is neither any more.
pub async fn refuse_copies(
    tx: &dyn Transactions,
    requests_table: &str,
    copies: [Option<&RequestCopy>; 2],
    status: Status,
    reason: &str,
) -> Result<TransactOutcome, StoreError> {
    let cond = Expr::new("(#st = :p OR #st = :a) AND attribute_not_exists(#ja)")
        .name("#st", keys::STATUS)
        .name("#ja", keys::JOINED_AT)
        .string(":p", Status::Pending.as_str())
        .string(":a", Status::Accepted.as_str());
    let ops: Vec<TransactOp> = copies
        .into_iter()
        .flatten()
        .map(|c| TransactOp::Update {
            table: requests_table.to_owned(),
            key: c.key().key(),
            update: set_terminal(status, Some(reason)),
            condition: Some(cond.clone()),
        })
        .collect();
    if ops.is_empty() {
        return Ok(TransactOutcome::Cancelled(Vec::new()));
    }
    tx.transact_write(ops).await
}

#[async_trait]
impl RecordProcessor for RequestSync {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, ProcessError> {
        if change.kind.is_removal() {
            return Ok(RecordOutcome::skipped(
                "copy removed (the audit looks after its twin)",
            ));
        }
        let key = match RequestsItem::parse(&change.keys) {
            Ok(RequestsItem::Copy(k)) => k,
            Ok(RequestsItem::Checkpoint(_)) => return Ok(RecordOutcome::skipped("checkpoint")),
            Err(e @ keys::KeyError::Foreign { .. }) => {
                return Ok(RecordOutcome::skipped(e.to_string()));
            }
            Err(e) => {
                return Err(ProcessError::Permanent {
                    reason: e.to_string(),
                });
            }
        };
        let Some(image) = change.new_image.as_ref() else {
            return Err(ProcessError::Permanent {
                reason: "the record has no new image (the stream must carry NEW_AND_OLD_IMAGES)"
                    .into(),
            });
        };
        let seen =
            RequestCopy::from_item(image).map_err(|reason| ProcessError::Permanent { reason })?;
        let (user, chat) = self.copies(&key, &seen.twin_key()).await?;
        if user.is_none() && chat.is_none() {
            return Ok(RecordOutcome::skipped("request gone"));
        }
        let plan = rules::plan(user.as_ref(), chat.as_ref());
        if plan == Plan::default() {
            return Ok(RecordOutcome::skipped("copies in step"));
        }
        let done = self.carry_out(&plan, chat.as_ref()).await?;
        Ok(if done.is_empty() {
            RecordOutcome::skipped("overtaken by a newer change")
        } else {
            RecordOutcome::handled(done.join(", "))
        })
    }
}

impl TableHandler for RequestSync {
    fn table(&self) -> Table {
        Table::ChatRequests
    }
}
