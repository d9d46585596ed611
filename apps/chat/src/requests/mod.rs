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
//!   still accepted and not joined), checks that the user still exists,
//!   puts the request's **join mark** ([`keys::JoinMark`]:
//!   `JOINED#<chat>` / the request's `SK`, only if absent), puts the
//!   member item (only if absent), moves `NumMembers` up by one (only
//!   while below `Capacity`) and puts the notification
//!   `NOTIFICATION#UNREAD#<JoinedAt>#chatrequest-<id>-accepted`.
//!   **Once per request, whatever clients write later.** `JoinedAt` on
//!   the copy is not enough: a client writing the accepted copy again
//!   drops it. The join mark is the worker's own item, which no client
//!   writes and nothing deletes, so the notification and the member add
//!   (which only ever happen in the transaction that creates the mark)
//!   happen at most once per request, even after the user read or
//!   deleted the notification or left the chat. A rewritten copy finds the
//!   mark: the transaction is cancelled on it, and `JoinedAt` is set back
//!   to the mark's time (conditional on the copy still accepted and
//!   without `JoinedAt`), nothing else. A member item already there
//!   (joined some other way) or the notification already there is left
//!   out and the rest done: the count moves only with a member item this
//!   transaction puts. Two acceptances racing for the last seat:
//!   DynamoDB serializes the transactions on the chat item; the loser is
//!   cancelled (a conflict is retried as transient) and on its next
//!   attempt finds the chat full.
//! - **Refusals.** A chat at `Capacity` (or deleted, or a user deleted
//!   meanwhile) turns the request `rejected` (or `cancelled`) with a
//!   `StatusReason`, on both copies in one transaction (so neither copy is
//!   ever seen alone in the new status, which would read as a conflict).
//!   This is the only time a terminal status changes, and only from an
//!   `accepted` never joined. [`refuse_copies`] puts first in that
//!   transaction a ConditionCheck that the **reason still holds** (the user
//!   still absent, the chat still absent, the chat still full: the item the
//!   decision was read from), then one that the request has no join mark,
//!   then the copies' updates (each: still pending, or accepted without
//!   `JoinedAt`). A reason that stopped holding writes nothing and the
//!   record is decided again (a transient error: Lambda delivers it
//!   again).
//! - **A removed user's requests.** A record of a request one of whose
//!   copies is pending reads the user (consistent): a user that is gone
//!   gets the request cancelled (`user-deleted`) through [`refuse_copies`]
//!   (checked: the user still absent). With the user cascade reading the
//!   user's whole request partition ([`crate::cascade`]), a removed user's
//!   pending copy is settled whichever record is handled first, `PendingId`
//!   or not.
//!
//! **Every write and the item its decision is read from** (the rule: a
//! write decided from another item carries a condition on that item):
//!
//! | write | decided from | condition |
//! |---|---|---|
//! | `PendingId` removed | the copy (terminal) | the copy: status as read, `PendingId` present |
//! | `PendingId` added | the copy (pending) | the copy: pending, no `PendingId` |
//! | a copy follows its twin | the twin (terminal) | the copy: pending; ConditionCheck on the twin: status as read |
//! | acceptance transaction | the chat's copy (accepted), the user, the chat | the copy: accepted, no `JoinedAt`; user exists; mark absent; member absent; chat exists, below `Capacity` |
//! | `JoinedAt` restored | the join mark | the copy: accepted, no `JoinedAt` (the mark never changes) |
//! | refusal (both copies) | the user / the chat | ConditionCheck: user absent / chat absent / chat full; mark absent; each copy pending or accepted without `JoinedAt` |
//! | expiry ([`expire`]) | the index entry | the copy: pending (its age is in its key) |
//! | twin recreated ([`audit`]) | the surviving copy | twin absent; ConditionCheck on the copy: pending, `PendingId` as read |
//! - [`expire`]: the scheduled `expire-requests`; [`audit`]: the scheduled
//!   `audit-requests` (a copy whose twin is missing).

pub mod audit;
pub mod expire;
pub mod rules;

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use worker_engine::clock::Clock;
use worker_engine::metrics::WriteCounter;
use worker_engine::store::{Expr, Key, Store, StoreError, WriteOutcome};
use worker_engine::store::{TransactOp, TransactOutcome, Transactions};
use worker_engine::stream::StreamChange;
use worker_engine::stream::{RecordOutcome, RecordProcessor};
use worker_engine::{Access, HandlerError, Schedule, ScheduleSpec, StreamSpec};

use crate::app::{Deps, JobSpec, Stores, TableAccess, TableHandler};
use crate::config::{EnvVar, ReadBy, Settings};
use crate::images::Images;
use crate::items::{GroupChat, Notification, RequestCopy, Status};
use crate::keys::{self, ChatItem, ChatKind, Job, JoinMark, Owner, RequestKey, RequestsItem};
use crate::schema::Table;
use rules::Plan;
use worker_engine::{ConfigError, Env};

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
        actions: &[
            "dynamodb:BatchGetItem",
            "dynamodb:ConditionCheckItem",
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
        ],
        indexes: &[],
    },
    TableAccess {
        table: Table::Users,
        actions: &["dynamodb:ConditionCheckItem", "dynamodb:GetItem"],
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
            "dynamodb:ConditionCheckItem",
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

/// `audit-requests`: a Scan of the table, the twins read, recreated (a
/// transaction checking the surviving copy); its checkpoint read, written
/// and deleted.
pub const AUDIT_TABLES: &[TableAccess] = &[TableAccess {
    table: Table::ChatRequests,
    actions: &[
        "dynamodb:BatchGetItem",
        "dynamodb:ConditionCheckItem",
        "dynamodb:DeleteItem",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Scan",
    ],
    indexes: &[],
}];

/// Days after its creation a pending request expires (default 30).
pub const REQUEST_EXPIRY_DAYS: &str = "REQUEST_EXPIRY_DAYS";
/// Minutes a copy's twin may be missing before the audit acts (default 60).
pub const TWIN_GRACE_MINUTES: &str = "TWIN_GRACE_MINUTES";

/// The settings of the expiry and the twin audit (the variables of
/// [`SPEC`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSettings {
    /// `REQUEST_EXPIRY_DAYS`: pending requests created more than this many
    /// days ago expire (capped at 100 years).
    pub expiry_days: u64,
    /// `TWIN_GRACE_MINUTES`: a copy created less than this many minutes ago
    /// may still be waiting for its twin; the audit leaves it alone.
    pub twin_grace_minutes: u64,
}

impl Default for RequestSettings {
    fn default() -> Self {
        RequestSettings {
            expiry_days: 30,
            twin_grace_minutes: 60,
        }
    }
}

impl RequestSettings {
    /// The settings from `env`, defaults for unset variables; an error when
    /// one is set but not a whole number.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let d = RequestSettings::default();
        Ok(RequestSettings {
            expiry_days: env.number(REQUEST_EXPIRY_DAYS)?.unwrap_or(d.expiry_days),
            twin_grace_minutes: env
                .number(TWIN_GRACE_MINUTES)?
                .unwrap_or(d.twin_grace_minutes),
        })
    }
}

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
                    "dynamodb:ConditionCheckItem",
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

/// The parts of an acceptance's transaction, in the order they are sent.
struct Acceptance {
    /// `JoinedAt` on the chat's copy: only if still accepted and not joined.
    mark_joined: TransactOp,
    /// The user still exists.
    user_exists: TransactOp,
    /// The request's join mark, only if absent.
    put_mark: TransactOp,
    /// The notification, only if absent.
    notify: TransactOp,
    /// The member item, only if absent.
    put_member: TransactOp,
    /// `NumMembers` up by one, only while below `Capacity`.
    count: TransactOp,
    /// The request's join mark.
    mark: JoinMark,
}

/// One attempt of an acceptance's transaction.
struct Attempt {
    ops: Vec<TransactOp>,
    /// Where the notification is among `ops`, when it is sent.
    notify_at: Option<usize>,
    /// Where the member item is among `ops` (its count next), when sent.
    member_at: Option<usize>,
}

impl Acceptance {
    /// The transaction with the notification and the member (item and
    /// count) only when asked for.
    fn attempt(&self, with_notification: bool, with_member: bool) -> Attempt {
        let mut ops = vec![
            self.mark_joined.clone(),
            self.user_exists.clone(),
            self.put_mark.clone(),
        ];
        let notify_at = with_notification.then(|| {
            ops.push(self.notify.clone());
            ops.len() - 1
        });
        let member_at = with_member.then(|| {
            ops.push(self.put_member.clone());
            ops.push(self.count.clone());
            ops.len() - 2
        });
        Attempt {
            ops,
            notify_at,
            member_at,
        }
    }
}

/// How an acceptance's transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Accepted {
    /// Written, or nothing to do: the record's outcome.
    Done(&'static str),
    /// The user is gone: the request is cancelled.
    UserGone,
    /// The request has a join mark: joined before.
    JoinedBefore,
    /// The chat's count condition failed: the chat is gone or full.
    ChatRefused,
    /// Its items kept changing: decided again.
    Changed,
}

/// The update moving the group chat `chat`'s `NumMembers` up by one, only
/// while the chat exists and is below its `Capacity`.
fn count_member(table: String, chat: Key) -> TransactOp {
    TransactOp::Update {
        table,
        key: chat,
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
    }
}

impl RequestSync {
    /// The handler over the tables, transactions, settings, clock and write
    /// counter of `d`.
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
        self.settings.tables.name(t).to_owned()
    }

    fn requests(&self) -> &Arc<dyn Store> {
        self.stores.get(Table::ChatRequests)
    }

    /// Both copies as they are now: (user's, group chat's).
    async fn copies(
        &self,
        key: &RequestKey,
        twin: &RequestKey,
    ) -> Result<(Option<RequestCopy>, Option<RequestCopy>), HandlerError> {
        let read = self
            .requests()
            .get_many(&[key.key(), twin.key()], true)
            .await?;
        let mut decoded = Vec::new();
        for item in read.into_iter() {
            decoded.push(match item {
                None => None,
                Some(i) => Some(RequestCopy::from_item(&i).map_err(HandlerError::permanent)?),
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
    ) -> Result<Vec<&'static str>, HandlerError> {
        let mut done = Vec::new();
        for (key, status) in &plan.drop_pending_id {
            let update = Expr::new("REMOVE #pid").name("#pid", keys::PENDING_ID);
            let cond = status_is(":seen", *status).and(Expr::exists(keys::PENDING_ID));
            if self.write(key, update, cond).await? {
                done.push("PendingId removed");
            }
        }
        if let Some(key) = &plan.add_pending_id {
            let update = Expr::set(keys::PENDING_ID, AttributeValue::S(key.request.clone()));
            let cond =
                status_is(":pending", Status::Pending).and(Expr::unchanged(keys::PENDING_ID, None));
            if self.write(key, update, cond).await? {
                done.push("PendingId added");
            }
        }
        if let Some(f) = &plan.follow {
            let requests = self.table(Table::ChatRequests);
            let ops = vec![
                TransactOp::Update {
                    table: requests.clone(),
                    key: f.copy.key(),
                    update: set_terminal(f.status, f.reason.as_deref()),
                    condition: Some(status_is(":pending", Status::Pending)),
                },
                // Decided from the twin: only while it holds that status.
                TransactOp::Check {
                    table: requests,
                    key: f.twin.key(),
                    condition: status_is(":seen", f.status),
                },
            ];
            let outcome = self.tx.transact_write(ops).await?;
            self.writes.add(REQUEST_WRITES, 1);
            if outcome == TransactOutcome::Applied {
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
    async fn join(&self, copy: &RequestCopy) -> Result<&'static str, HandlerError> {
        let acceptance = self.acceptance(copy);
        match self.accept(&acceptance).await? {
            Accepted::Done(what) => Ok(what),
            Accepted::UserGone => self.refuse(copy, Refusal::UserGone).await,
            Accepted::JoinedBefore => self.restore_joined(copy, &acceptance.mark).await,
            Accepted::ChatRefused => {
                let refusal = self.chat_refusal(copy).await?;
                self.refuse(copy, refusal).await
            }
            Accepted::Changed => Err(HandlerError::transient(
                "the acceptance's items changed meanwhile; deciding again",
            )),
        }
    }

    /// The parts of the acceptance transaction of `copy` (the group chat's
    /// copy, accepted), joining now.
    fn acceptance(&self, copy: &RequestCopy) -> Acceptance {
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
        let mark = JoinMark::of(&copy.chat_id, copy.key());
        let mut mark_item = mark.key();
        mark_item.insert(keys::USER_ID.into(), s(&copy.user_id));
        mark_item.insert(keys::JOINED_AT.into(), s(&joined_at));
        let absent = || Some(Expr::not_exists(keys::PK));
        Acceptance {
            mark_joined: TransactOp::Update {
                table: self.table(Table::ChatRequests),
                key: copy.key().key(),
                update: Expr::set(keys::JOINED_AT, AttributeValue::S(joined_at)),
                condition: Some(
                    status_is(":acc", Status::Accepted).and(Expr::unchanged(keys::JOINED_AT, None)),
                ),
            },
            user_exists: TransactOp::Check {
                table: self.table(Table::Users),
                key: keys::user(&copy.user_id),
                condition: Expr::exists(keys::PK),
            },
            put_mark: TransactOp::Put {
                table: self.table(Table::ChatRequests),
                item: mark_item,
                condition: absent(),
            },
            notify: TransactOp::Put {
                table: self.table(Table::Notifications),
                item: notification,
                condition: absent(),
            },
            put_member: TransactOp::Put {
                table: self.table(Table::GroupChats),
                item: member_item,
                condition: absent(),
            },
            count: count_member(self.table(Table::GroupChats), chat.key()),
            mark,
        }
    }

    /// Run the acceptance transaction: parts already there (a member who
    /// joined some other way, the notification of an earlier acceptance of
    /// the same request rewritten by a client) are left out and the rest
    /// tried again, three attempts in all. How it ended.
    async fn accept(&self, acceptance: &Acceptance) -> Result<Accepted, HandlerError> {
        let (mut with_notification, mut with_member) = (true, true);
        for _attempt in 0..3 {
            let attempt = acceptance.attempt(with_notification, with_member);
            let outcome = self.tx.transact_write(attempt.ops).await?;
            self.writes.add(REQUEST_WRITES, 1);
            if outcome == TransactOutcome::Applied {
                return Ok(Accepted::Done(match (with_member, with_notification) {
                    (true, true) => "member added",
                    (false, _) => "already a member; request marked joined",
                    (true, false) => "member added (notified before)",
                }));
            }
            if outcome.failed(0) {
                return Ok(Accepted::Done("already joined or no longer accepted"));
            }
            if outcome.failed(1) {
                return Ok(Accepted::UserGone);
            }
            if outcome.failed(2) {
                return Ok(Accepted::JoinedBefore);
            }
            let notified = attempt.notify_at.is_some_and(|i| outcome.failed(i));
            let member = attempt.member_at.is_some_and(|i| outcome.failed(i));
            if notified {
                with_notification = false;
            }
            if member {
                with_member = false;
            }
            if !notified && !member {
                let chat_refused = attempt.member_at.is_some_and(|i| outcome.failed(i + 1));
                return Ok(if chat_refused {
                    Accepted::ChatRefused
                } else {
                    Accepted::Changed
                });
            }
        }
        Ok(Accepted::Changed)
    }

    /// Why the chat refused the member of `copy`'s request (its count's
    /// condition failed): the chat is gone, or full; an error when neither
    /// holds (it changed meanwhile).
    async fn chat_refusal(&self, copy: &RequestCopy) -> Result<Refusal, HandlerError> {
        let chat = ChatItem::Chat {
            kind: ChatKind::Group,
            chat: copy.chat_id.clone(),
        };
        let chat_item = self
            .stores
            .get(Table::GroupChats)
            .get(&chat.key(), true)
            .await?;
        let Some(item) = chat_item else {
            return Ok(Refusal::ChatGone);
        };
        let g = GroupChat::from_item(&item).map_err(HandlerError::permanent)?;
        if g.capacity.is_some() {
            Ok(Refusal::Full)
        } else {
            Err(HandlerError::transient(
                "the chat changed during the acceptance; deciding again",
            ))
        }
    }

    /// A request joined before (its mark exists) whose copy lost
    /// `JoinedAt` (a client wrote it again): `JoinedAt` set back to the
    /// mark's, nothing else.
    async fn restore_joined(
        &self,
        copy: &RequestCopy,
        mark: &JoinMark,
    ) -> Result<&'static str, HandlerError> {
        let Some(item) = self.requests().get(&mark.key(), true).await? else {
            return Err(HandlerError::transient(
                "the join mark is not readable yet; deciding again",
            ));
        };
        let Some(joined_at) = item.get(keys::JOINED_AT).and_then(|v| v.as_s().ok()) else {
            return Err(HandlerError::permanent("the join mark has no JoinedAt"));
        };
        let update = Expr::set(keys::JOINED_AT, AttributeValue::S(joined_at.clone()));
        let cond = status_is(":acc", Status::Accepted).and(Expr::unchanged(keys::JOINED_AT, None));
        Ok(if self.write(copy.key(), update, cond).await? {
            "joined before: JoinedAt restored, nothing added"
        } else {
            "joined before; the copy changed meanwhile"
        })
    }

    /// The ConditionCheck that `refusal`'s reason still holds: the item
    /// the decision was read from, as it was read.
    fn still(&self, copy: &RequestCopy, refusal: Refusal) -> TransactOp {
        let chat = ChatItem::Chat {
            kind: ChatKind::Group,
            chat: copy.chat_id.clone(),
        }
        .key();
        match refusal {
            Refusal::UserGone => user_gone(self.settings.tables.name(Table::Users), &copy.user_id),
            Refusal::ChatGone => TransactOp::Check {
                table: self.table(Table::GroupChats),
                key: chat,
                condition: Expr::not_exists(keys::PK),
            },
            // The negation of the acceptance's count condition.
            Refusal::Full => TransactOp::Check {
                table: self.table(Table::GroupChats),
                key: chat,
                condition: Expr::new(
                    "attribute_exists(#pk) AND attribute_exists(#cap) AND \
                     (#n >= #cap OR (attribute_not_exists(#n) AND #cap <= :zero))",
                )
                .name("#pk", keys::PK)
                .name("#cap", keys::CAPACITY)
                .name("#n", keys::NUM_MEMBERS)
                .value(":zero", AttributeValue::N("0".into())),
            },
        }
    }

    /// Both copies of an accepted (or pending), never joined request turned
    /// into `refusal`'s status and reason, in one transaction.
    async fn refuse(
        &self,
        copy: &RequestCopy,
        refusal: Refusal,
    ) -> Result<&'static str, HandlerError> {
        let (status, reason) = refusal.outcome();
        let (user_copy, chat_copy) = self.copies(copy.key(), &copy.twin_key()).await?;
        let outcome = refuse_copies(
            self.tx.as_ref(),
            self.settings.tables.name(Table::ChatRequests),
            [user_copy.as_ref(), chat_copy.as_ref()],
            status,
            reason,
            self.still(copy, refusal),
        )
        .await?;
        self.writes.add(REQUEST_WRITES, 1);
        Ok(match (outcome, refusal) {
            (Refused::Applied, Refusal::Full) => "chat full: request rejected",
            (Refused::Applied, Refusal::ChatGone) => "chat gone: request rejected",
            (Refused::Applied, Refusal::UserGone) => "user gone: request cancelled",
            (Refused::ReasonGone, _) => {
                return Err(HandlerError::transient(
                    "the refusal's reason stopped holding before it landed; deciding again",
                ));
            }
            (Refused::Joined, _) => "joined before: not refused",
            (Refused::Changed | Refused::NoCopies, _) => "request changed meanwhile",
        })
    }

    /// A request with a pending copy whose user is gone: cancelled
    /// (checked: the user still absent). `None`: the user exists (or came
    /// back before the write), carry on.
    async fn settle_if_user_gone(
        &self,
        user: Option<&RequestCopy>,
        chat: Option<&RequestCopy>,
    ) -> Result<Option<RecordOutcome>, HandlerError> {
        let copies: Vec<&RequestCopy> = [user, chat].into_iter().flatten().collect();
        let open = |c: &&RequestCopy| {
            c.status == Status::Pending || (c.status == Status::Accepted && c.joined_at.is_none())
        };
        // A copy already settled otherwise: the plan makes the pending one
        // follow it. An accepted copy alone is the acceptance's (which
        // checks the user in its own transaction).
        if !copies.iter().all(open) {
            return Ok(None);
        }
        let Some(any) = copies.iter().find(|c| c.status == Status::Pending) else {
            return Ok(None);
        };
        let users = self.stores.get(Table::Users);
        if users.get(&keys::user(&any.user_id), true).await?.is_some() {
            return Ok(None);
        }
        let outcome = refuse_copies(
            self.tx.as_ref(),
            self.settings.tables.name(Table::ChatRequests),
            [user, chat],
            Status::Cancelled,
            keys::REASON_USER_DELETED,
            user_gone(self.settings.tables.name(Table::Users), &any.user_id),
        )
        .await?;
        self.writes.add(REQUEST_WRITES, 1);
        Ok(match outcome {
            Refused::Applied => Some(RecordOutcome::handled("user gone: request cancelled")),
            Refused::ReasonGone => None,
            Refused::Joined | Refused::Changed | Refused::NoCopies => Some(RecordOutcome::skipped(
                "request changed meanwhile (its record decides again)",
            )),
        })
    }
}

/// The ConditionCheck "user `user` is absent" (on the Users table
/// `users_table`): the reason of a cancellation because the user is gone.
pub fn user_gone(users_table: &str, user: &str) -> TransactOp {
    TransactOp::Check {
        table: users_table.to_owned(),
        key: keys::user(user),
        condition: Expr::not_exists(keys::PK),
    }
}

/// What [`refuse_copies`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The copies that exist hold the refusal now.
    Applied,
    /// The reason's check failed (the user or the chat is back, the chat
    /// has room): nothing written.
    ReasonGone,
    /// The request has a join mark: it was joined; nothing written.
    Joined,
    /// A copy is neither pending nor accepted without `JoinedAt` any more:
    /// nothing written.
    Changed,
    /// No copy to refuse.
    NoCopies,
}

/// The copies (those that exist) of a request that is pending, or accepted
/// and never joined, set to `status` with `reason`, in one transaction:
/// neither copy is seen in the new status alone. `because` (a
/// ConditionCheck on the item the refusal was decided from) comes first,
/// then a check that the request has no join mark, then the copies'
/// updates: the refusal lands only while its reason holds and the
/// request was never joined.
pub async fn refuse_copies(
    tx: &dyn Transactions,
    requests_table: &str,
    copies: [Option<&RequestCopy>; 2],
    status: Status,
    reason: &str,
    because: TransactOp,
) -> Result<Refused, StoreError> {
    let Some(first) = copies.iter().flatten().next() else {
        return Ok(Refused::NoCopies);
    };
    let mark = JoinMark::of(&first.chat_id, first.key());
    let cond = Expr::new("(#st = :p OR #st = :a) AND attribute_not_exists(#ja)")
        .name("#st", keys::STATUS)
        .name("#ja", keys::JOINED_AT)
        .string(":p", Status::Pending.as_str())
        .string(":a", Status::Accepted.as_str());
    let mut ops = vec![
        because,
        TransactOp::Check {
            table: requests_table.to_owned(),
            key: mark.key(),
            condition: Expr::not_exists(keys::PK),
        },
    ];
    ops.extend(copies.into_iter().flatten().map(|c| TransactOp::Update {
        table: requests_table.to_owned(),
        key: c.key().key(),
        update: set_terminal(status, Some(reason)),
        condition: Some(cond.clone()),
    }));
    Ok(match tx.transact_write(ops).await? {
        TransactOutcome::Applied => Refused::Applied,
        o if o.failed(0) => Refused::ReasonGone,
        o if o.failed(1) => Refused::Joined,
        TransactOutcome::Cancelled(_) => Refused::Changed,
    })
}

#[async_trait]
impl RecordProcessor for RequestSync {
    async fn process(&self, change: &StreamChange) -> Result<RecordOutcome, HandlerError> {
        if change.kind.is_removal() {
            return Ok(RecordOutcome::skipped(
                "copy removed (the audit looks after its twin)",
            ));
        }
        let key = match RequestsItem::parse(&change.keys) {
            Ok(RequestsItem::Copy(k)) => k,
            Ok(RequestsItem::Checkpoint(_)) => return Ok(RecordOutcome::skipped("checkpoint")),
            Ok(RequestsItem::Joined(_)) => return Ok(RecordOutcome::skipped("join mark")),
            Err(e @ keys::KeyError::Foreign { .. }) => {
                return Ok(RecordOutcome::foreign(e.to_string()));
            }
            Err(e) => {
                return Err(HandlerError::permanent(e.to_string()));
            }
        };
        let images = Images::of(change);
        let Some(image) = &images.new else {
            return Err(HandlerError::permanent(
                "the record has no new image (the stream must carry NEW_AND_OLD_IMAGES)",
            ));
        };
        // Read as a copy: the record's key is a copy's.
        let seen = match &image.copy {
            Some(Ok(copy)) => copy,
            Some(Err(reason)) => return Err(HandlerError::permanent(reason.clone())),
            None => {
                return Err(HandlerError::permanent(
                    "the new image is not a request copy",
                ));
            }
        };
        let (user, chat) = self.copies(&key, &seen.twin_key()).await?;
        if user.is_none() && chat.is_none() {
            return Ok(RecordOutcome::skipped("request gone"));
        }
        if let Some(settled) = self
            .settle_if_user_gone(user.as_ref(), chat.as_ref())
            .await?
        {
            return Ok(settled);
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

impl TableHandler<Table> for RequestSync {
    fn table(&self) -> Table {
        Table::ChatRequests
    }
}
