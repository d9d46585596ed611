//! Food-expiry flags: foods nearing or past their expiry are flagged in
//! worker-owned items, at a cost that follows the foods that change, not the
//! table.
//!
//! Every rule of the job is in this directory, and summarised here:
//!
//! - [`rules`]: the pure decisions (the calendar, the flag and reminder
//!   plans and their writes, the plan of one stream change, the
//!   notification entries), unit- and property-tested without a database;
//! - this file: the store access shared by both sides (a container's
//!   owning groups, the container as stored) and the stream handler
//!   ([`ExpiryHandler`]);
//! - [`tick`]: the scheduled side, the daily tick ([`FlagExpiringJob`]) and
//!   the backfill ([`BackfillJob`]), with their checkpoints.
//!
//! ## The calendar ([`ExpiryRules`])
//!
//! Days are counted in `EXPIRY_TIME_ZONE` (default UTC); *today* is the date
//! of `now` in that zone, and a food's *expiry date* is the date of its
//! `Expiry` instant in that zone. With horizon `h` (`EXPIRY_HORIZON_DAYS`,
//! default 3) a food is:
//!
//! - **expired** when its expiry instant has passed: `expiry <= now`;
//! - **nearing** when it has not passed and its expiry date is no later than
//!   `today + h`, i.e. the food expires before the end of the day `h` days
//!   after today. Today 2024-03-25 (UTC), h = 3: anything on 2024-03-28 up to
//!   `23:59:59.999` is nearing; `2024-03-29T00:00:00Z` is not (yet);
//! - **far** otherwise: it enters the window on the day `expiry date - h`;
//! - **retired** when `now >= expiry + FLAG_RETENTION_DAYS` (default 7): no
//!   flag any more (DynamoDB TTL removes the old one).
//!
//! A food with a `NULL` expiry is never flagged. Foods are identified by
//! `FoodId`; when a list repeats an id, the first occurrence counts.
//!
//! ## The items (worker-owned, keys from `crate::keys`)
//!
//! - **Flag** `PK=<groupId>`, `SK=ExpiringFood#<containerId>#<foodId>` in the
//!   group that owns the container, so the app lists a group's flags with one
//!   Query. Attributes: `Name`, `Expiry` (canonical), `ExpiryDate`
//!   (`YYYY-MM-DD` in the zone), `Status` (`nearing` | `expired`), `DaysLeft`
//!   (`ExpiryDate - CheckedOn`, in days; 0 or less once expired), `CheckedOn`
//!   (the date the flag was computed for), `FlaggedAt` (when it was written)
//!   and [`TTL_ATTRIBUTE`] `WorkerExpiresAt` (Number, epoch seconds of
//!   `expiry + FLAG_RETENTION_DAYS`). `DaysLeft` is exact on `CheckedOn`; the
//!   flag is rewritten when the food enters the window and when it expires,
//!   so clients that show a countdown between those days use `ExpiryDate`.
//!   No flag ever carries `GroupId`, `ContainerId` or another attribute a
//!   service index is keyed on.
//! - **Reminder** `PK=ExpiryReminder#<date>`, `SK=<containerId>#<foodId>`:
//!   "look at this food on that date". Attributes `Reason` and `WrittenAt`,
//!   for people only: the tick never trusts a reminder, it re-reads the
//!   container. A food has at most two reminder dates, both functions of its
//!   expiry alone ([`ExpiryRules::reminder_dates`]):
//!   - *enters window*: `expiry date - h`, while the food is far;
//!   - *expires*: the first day whose start is at or after the expiry instant
//!     (the expiry date when the food expires at the very start of its day,
//!     otherwise the day after), while the food is nearing. Any tick on that
//!     day sees the instant passed and flips the flag to `expired`.
//!
//!   Because the dates depend on the expiry only, removing a food deletes
//!   exactly its reminders without reading anything: only the *enters
//!   window* date while the food is still far (the *expires* reminder
//!   cannot exist yet), both dates otherwise, and of those only the ones
//!   dated after today ([`ExpiryRules::reminder_dates_at`]). A reminder
//!   dated today or before is the tick's: the stream writes reminders for
//!   later days only, the tick runs just after local midnight and covers
//!   every date from its checkpoint (today included, again on the next
//!   run), so it has consumed that reminder already or will, re-reading the
//!   container, finding the food gone or changed, and deleting the reminder
//!   itself ([`plan_reminder`]).
//! - **Checkpoints** `WorkerCheckpoint`/`flag-expiring` (`NextDate`, pending
//!   events) and `WorkerCheckpoint`/`backfill` (scan position, counters).
//!
//! ## Stream side ([`ExpiryHandler`], Container and ContainerLink changes)
//!
//! - **Container INSERT / MODIFY / REMOVE**: old and new `Foods` are diffed by
//!   `FoodId` ([`plan_container_change`]) to learn whether the record
//!   changed anything of the job's: a container rename or a change of
//!   `Quantity`, `Unit`, `Category` causes no write and no read. Otherwise
//!   the container is read as it is now (consistent GetItem) and the foods
//!   are planned from the record's old image to that
//!   ([`replan_from_current`]): the record says which foods to look at, the
//!   current item what their flags must be. Whatever order a container's
//!   records are handled in, and however often, the last one leaves the
//!   flags of the foods the container holds then; a REMOVE followed by a
//!   rewrite (the service put back a copy it read before the delete)
//!   deletes exactly the flags of the foods the copy no longer has. A
//!   REMOVE without an old image (a duplicate) plans nothing. For a planned
//!   food:
//!   - inside the window (nearing or expired): the flag is put at once;
//!     otherwise a flag that may exist (old food nearing, expired or
//!     retired) is deleted;
//!   - when the expiry changed: the old expiry's reminders are deleted and
//!     the new one's next reminder is put (*enters window* while far,
//!     *expires* while nearing, none once expired). A name-only change
//!     rewrites the flag and leaves the reminders alone.
//! - **The owning group** is found through the `GroupAndContainerRelationship`
//!   index (keys only). With several links, only groups whose `Group` item
//!   exists count. Reminders go out in one `BatchWriteItem`; flags in a
//!   guarded transaction (see "Flags land only while what they were
//!   decided from holds" below).
//! - **Link not written yet** (the service writes container and link with
//!   separate, unordered calls): the reminders are written anyway (they do
//!   not need the group), and the flags are placed by the link's own stream
//!   record: a **ContainerLink INSERT** reads the container (consistent) and
//!   puts the flags of its foods inside the window in that group. As a
//!   second line (index lag), a container whose in-window foods found no link
//!   also gets a reminder for *today*, so the next tick retries.
//! - **Container INSERT with its link's INSERT in the same batch** (the
//!   usual case: the service writes both at once): the link's record places
//!   the flags (the container exists when it reads it, its INSERT being in
//!   the batch), so the container's record writes only the reminders, with
//!   no index read ([`leave_flags_to_link`], [`BatchFacts`]). If either
//!   record does not finish, Lambda delivers it again with every later
//!   record of the batch.
//! - **ContainerLink REMOVE** (the service deletes the container, then its
//!   link): one consistent read of the group partition; unless it holds the
//!   link again, every flag of that container in it is deleted. A
//!   Container REMOVE deletes the reminders of its foods, and the flags in
//!   every group still linked to it whose Group item exists. A removed
//!   group's flags are the relationship job's cascade (the service deletes a
//!   group's containers with it, so both records come); its audit repairs
//!   orphans.
//!
//! ## Daily tick ([`FlagExpiringJob`], tick `flag-expiring`)
//!
//! - Reads the reminder partitions from the checkpoint's `NextDate` up to
//!   today (a missed day is caught up; first run: the last
//!   [`FIRST_RUN_LOOKBACK_DAYS`] days). It never scans flags or containers.
//! - Reminders are grouped by container; each container is read once with a
//!   strongly consistent GetItem and each food is re-decided from the current
//!   item ([`plan_reminder`]): flag put (nearing / expired), flag deleted (food
//!   gone, expiry NULL, far again, retired), next reminder put, processed
//!   reminder deleted. A container rewritten since the reminder was written
//!   is therefore never trusted from the reminder.
//! - Flags are put with the condition "absent or of another status"; when it
//!   holds, the food is *newly flagged* by this tick (entered the window, or
//!   turned expired); otherwise the flag is refreshed with a plain put.
//! - After a complete run `NextDate` stays *today*, so reminders written
//!   later today are read by tomorrow's tick. A second run on the same day
//!   finds the processed reminders gone: same table, no new notification.
//! - `JobRun::has_time()` is checked before every page and every container;
//!   an early stop saves `NextDate` at the date in progress (processed
//!   reminders are gone, so the next run continues with the rest).
//!
//! ## Notification (optional, `NOTIFY_EVENT_BUS`)
//!
//! After the tick, one EventBridge event per group with its newly flagged
//! foods: source [`EVENT_SOURCE`], detail-type [`DETAIL_TYPE`], detail
//! `{"date", "timeZone", "groupId", "foods": [{"containerId", "foodId",
//! "name", "expiry", "expiryDate", "status", "daysLeft"}]}` (at most
//! [`MAX_FOODS_PER_EVENT`] foods per event; ids, food names and dates only,
//! never a user name or an e-mail address; [`notification_entries`]).
//! Entries that fail are kept in the tick's checkpoint and sent first on the
//! next run. Foods flagged directly by the stream (added already inside the
//! window) are not announced: the person who added them just saw them.
//!
//! ## Backfill ([`BackfillJob`], tick / command `backfill`)
//!
//! Enabling a stream does not replay existing items. The backfill scans the
//! containers (consistent Scan, filter `SK = Container`, pages of
//! [`BackfillJob::with_page_size`] items) and writes for each exactly what the
//! stream would have written for its INSERT ([`plan_container_change`] with
//! no old image). Resumable: the scan position and counters are saved in its
//! checkpoint after every page; once complete, further runs do nothing until
//! [`BackfillJob::reset`]. Progress is reported through
//! [`BackfillJob::with_progress`].
//!
//! ## Races, knowingly accepted
//!
//! A new container that two groups link (the service never does this; the
//! audit reports it), one link's record handled in an earlier batch before
//! the container was written and the other's in the container's batch: the
//! first group's flags wait for the food's next reminder.
//!
//! ## Flags land only while what they were decided from holds
//!
//! Every flag write (stream, tick, backfill) is decided from the container
//! as read and from the links that make a group its owner, and the service
//! may change either before the write lands (a food removed right after the
//! read, a link's record handled in another lane). So flags go through
//! `Store::write_guarded` (`flag_guards`): beside the writes, a
//! `ConditionCheck` that the container's `Foods` are still the list read
//! (or the container still absent, for a removal), and for a live container
//! that each group's link is still there. A guard that fails withholds the
//! flags (counted in the outcome, `flags_withheld` in the tick's report):
//! the change that made the read stale has its own record, which plans from
//! the container again. Reminders are hints (the tick re-reads the
//! container before trusting one) and go unguarded in batches.

pub mod rules;
pub mod tick;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

pub use rules::*;
pub use tick::{
    BackfillCheckpoint, BackfillJob, BackfillProgress, DEFAULT_BACKFILL_PAGE,
    FIRST_RUN_LOOKBACK_DAYS, FlagExpiringJob, MAX_PENDING_EVENTS, ProgressHook, TickCheckpoint,
    TickReport,
};

use super::{JobDeps, JobSpec};
use crate::config::{ConfigError, Env, EnvVar, ReadBy};
use crate::items::{Container, Entity, Item, attr};
use crate::keys::{ContainerId, GroupId, ItemKey, ItemKind, Job, PK};
use crate::schema::GROUP_AND_CONTAINER_INDEX;
use crate::worker::{BatchFacts, Change, ChangeHandler, HandlerOutcome};
use worker_engine::HandlerError;
use worker_engine::store::{
    Expr, Guard, GuardedOp, GuardedReport, QuerySpec, Store, StoreError, WriteOp,
};
use worker_engine::{Access, Schedule, ScheduleSpec, StreamSpec};

/// The metric the stream side's writes (flags, reminders) count under.
pub const EXPIRY_WRITES: &str = "ExpiryWrites";
/// The metric of the flags a tick wrote (new and refreshed).
pub const FOODS_FLAGGED: &str = "FoodsFlagged";

/// The variables the stream side and both scheduled jobs read.
const READ_BY_ALL_SIDES: &[ReadBy] = &[
    ReadBy::Stream,
    ReadBy::Job(Job::FlagExpiring),
    ReadBy::Job(Job::Backfill),
];

/// The job, described once: flags and reminders kept by the stream, the
/// daily tick, and the on-demand backfill.
pub const SPEC: JobSpec = JobSpec {
    name: "expiry",
    summary: "flags foods nearing or past their expiry, as items the app lists with one Query",
    env: &[
        EnvVar {
            name: "EXPIRY_HORIZON_DAYS",
            read_by: READ_BY_ALL_SIDES,
            default: Some("3"),
            meaning: "flag foods expiring up to the end of today + N days",
        },
        EnvVar {
            name: "EXPIRY_TIME_ZONE",
            read_by: READ_BY_ALL_SIDES,
            default: Some("UTC"),
            meaning: "IANA zone the days are counted in",
        },
        EnvVar {
            name: "FLAG_RETENTION_DAYS",
            read_by: READ_BY_ALL_SIDES,
            default: Some("7"),
            meaning: "flags vanish (TTL) this long after the food expired",
        },
        EnvVar {
            name: "NOTIFY_EVENT_BUS",
            read_by: &[ReadBy::Job(Job::FlagExpiring)],
            default: None,
            meaning: "EventBridge bus for FoodsNearingExpiry events",
        },
    ],
    stream: Some(StreamSpec {
        handler: "expiry",
        writes_metric: EXPIRY_WRITES,
        access: Access {
            // Flags go in TransactWriteItems beside a ConditionCheck on the
            // container as read and on its links; reminders in batches.
            dynamodb_actions: &[
                "dynamodb:BatchGetItem",
                "dynamodb:BatchWriteItem",
                "dynamodb:ConditionCheckItem",
                "dynamodb:DeleteItem",
                "dynamodb:PartiQLSelect",
                "dynamodb:PutItem",
            ],
            indexes: &[GROUP_AND_CONTAINER_INDEX],
            fallbacks: &[],
            publishes_events: false,
        },
    }),
    scheduled: &[
        ScheduleSpec {
            job: Job::FlagExpiring,
            function: "FlagExpiringFunction",
            schedule: Schedule::Daily {
                zone_env: "EXPIRY_TIME_ZONE",
            },
            local_cron: "5 0 * * *",
            access: Access {
                dynamodb_actions: &[
                    "dynamodb:BatchWriteItem",
                    "dynamodb:ConditionCheckItem",
                    "dynamodb:DeleteItem",
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:Query",
                ],
                indexes: &[GROUP_AND_CONTAINER_INDEX],
                fallbacks: &[],
                publishes_events: true,
            },
            metrics: &[FOODS_FLAGGED],
        },
        ScheduleSpec {
            job: Job::Backfill,
            function: "BackfillFunction",
            schedule: Schedule::OnDemand,
            local_cron: "never",
            access: Access {
                dynamodb_actions: &[
                    "dynamodb:BatchWriteItem",
                    "dynamodb:ConditionCheckItem",
                    "dynamodb:DeleteItem",
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:Query",
                    "dynamodb:Scan",
                ],
                indexes: &[GROUP_AND_CONTAINER_INDEX],
                fallbacks: &[],
                publishes_events: false,
            },
            metrics: &[],
        },
    ],
    handlers: |deps| vec![Arc::new(ExpiryHandler::new(deps))],
    jobs: |deps| {
        vec![
            Arc::new(FlagExpiringJob::new(deps)),
            Arc::new(BackfillJob::new(deps)),
        ]
    },
};

/// The job's settings (the variables of [`SPEC`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ExpirySettings {
    /// `EXPIRY_HORIZON_DAYS` (default 3, at most 365): foods expiring up to
    /// the end of today + this many days are nearing.
    pub horizon_days: u32,
    /// `EXPIRY_TIME_ZONE` (an IANA zone, default UTC): the zone days are
    /// counted in.
    pub time_zone: chrono_tz::Tz,
    /// `FLAG_RETENTION_DAYS` (default 7, at most 3650): a flag is retired
    /// (and expires by TTL) this long after its food expired.
    pub flag_retention_days: u32,
    /// `NOTIFY_EVENT_BUS`: the EventBridge bus the tick announces newly
    /// flagged foods on; `None` (unset or empty) announces nothing.
    pub notify_event_bus: Option<String>,
}

impl Default for ExpirySettings {
    fn default() -> Self {
        ExpirySettings {
            horizon_days: 3,
            time_zone: chrono_tz::Tz::UTC,
            flag_retention_days: 7,
            notify_event_bus: None,
        }
    }
}

impl ExpirySettings {
    /// Read from the environment; defaults where unset.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let mut s = Self::default();
        if let Some(v) = env.number("EXPIRY_HORIZON_DAYS")? {
            s.horizon_days = v.min(365) as u32;
        }
        if let Some(v) = env.number("FLAG_RETENTION_DAYS")? {
            s.flag_retention_days = v.min(3650) as u32;
        }
        if let Some(v) = env.from_str(
            "EXPIRY_TIME_ZONE",
            "expected an IANA time zone such as UTC or Asia/Tokyo",
        )? {
            s.time_zone = v;
        }
        s.notify_event_bus = env.non_empty("NOTIFY_EVENT_BUS");
        Ok(s)
    }
}

// ---------------------------------------------------------------------------
// Store helpers (I/O)
// ---------------------------------------------------------------------------

/// The groups owning a container, through the `GroupAndContainerRelationship`
/// index. With more than one link, only groups whose item exists count.
pub async fn owning_groups(
    store: &dyn Store,
    container: ContainerId,
) -> Result<Vec<GroupId>, StoreError> {
    let groups = linked_groups(store, container).await?;
    if groups.len() > 1 {
        super::existing_groups(store, groups).await
    } else {
        Ok(groups)
    }
}

/// The groups linking a container, as the index shows them.
async fn linked_groups(
    store: &dyn Store,
    container: ContainerId,
) -> Result<Vec<GroupId>, StoreError> {
    let spec = QuerySpec::partition(attr::CONTAINER_ID, &container.to_string())
        .on_index(GROUP_AND_CONTAINER_INDEX);
    let mut groups: Vec<GroupId> = store
        .query_all(&spec)
        .await?
        .iter()
        .filter_map(|item| match ItemKey::from_attributes(item) {
            Ok(ItemKey::ContainerLink {
                group,
                container: c,
            }) if c == container => Some(group),
            _ => None,
        })
        .collect();
    groups.sort();
    groups.dedup();
    Ok(groups)
}

/// A container as read, and the guard that it is still so (see
/// [`container_as_read`]).
pub(crate) struct ContainerRead {
    /// `Ok(None)` when gone, `Err(reason)` when it does not decode.
    pub container: Result<Option<Container>, String>,
    pub as_read: Guard,
}

/// A container as stored now (strongly consistent).
async fn read_container(store: &dyn Store, id: ContainerId) -> Result<ContainerRead, StoreError> {
    let item = store
        .get(&ItemKey::Container(id).to_attributes(), true)
        .await?;
    let as_read = container_as_read(id, item.as_ref());
    let container = match item {
        None => Ok(None),
        Some(item) => match Entity::from_keyed_item(ItemKey::Container(id), item) {
            Ok(Entity::Container(c)) => Ok(Some(c)),
            Ok(_) => Err("not a container".into()),
            Err(e) => Err(e.to_string()),
        },
    };
    Ok(ContainerRead { container, as_read })
}

/// What every flag write is decided from: the container's foods as read
/// (or its absence). A flag written from an older read than the container's
/// last change would outlive or misstate its food, so it lands only while
/// `Foods` is still what was read; the change has its own record, which
/// plans again.
pub(crate) fn container_as_read(id: ContainerId, item: Option<&Item>) -> Guard {
    let key = ItemKey::Container(id).to_attributes();
    let Some(item) = item else {
        return Guard::absent(key, PK);
    };
    let foods = Expr::unchanged(attr::FOODS, item.get(attr::FOODS));
    Guard::new(key, Expr::exists(PK).and(foods))
}

/// The guards of flag writes in `groups`: the container as read, and each
/// group's link to it still there (a flag put in a group the container
/// left would stay; the link's REMOVE has its own record).
pub(crate) fn flag_guards(
    as_read: &Guard,
    container: ContainerId,
    groups: &[GroupId],
) -> Vec<Guard> {
    std::iter::once(as_read.clone())
        .chain(groups.iter().map(|g| {
            Guard::present(
                ItemKey::ContainerLink {
                    group: *g,
                    container,
                }
                .to_attributes(),
                PK,
            )
        }))
        .collect()
}

/// Of `groups`, those whose link item to `container` exists now
/// (consistent reads, all at once): the index may still show a link that
/// is gone, and a flag is only written guarded by its link being there.
pub(crate) async fn linked_now(
    store: &dyn Store,
    container: ContainerId,
    groups: Vec<GroupId>,
) -> Result<Vec<GroupId>, StoreError> {
    let checks = groups.into_iter().map(|group| async move {
        let link = ItemKey::ContainerLink { group, container };
        let found = store.get(&link.to_attributes(), true).await?;
        Ok::<_, StoreError>(found.map(|_| group))
    });
    Ok(futures::future::try_join_all(checks)
        .await?
        .into_iter()
        .flatten()
        .collect())
}

/// Write flags only while `guards` hold ([`flag_guards`]).
pub(crate) async fn write_flags(
    store: &dyn Store,
    guards: &[Guard],
    ops: Vec<WriteOp>,
) -> Result<GuardedReport, StoreError> {
    if ops.is_empty() {
        return Ok(GuardedReport::default());
    }
    store
        .write_guarded(guards, ops.into_iter().map(GuardedOp::from).collect())
        .await
}

/// How many times a flag write withheld by a change (the container or a
/// link changed after the read) is decided again from a fresh read before
/// the record is left to Lambda's retry.
pub(crate) const FLAG_ATTEMPTS: usize = 4;

/// A container that changed under every attempt: transient, so the record
/// is retried (and decides from the container as it is then).
pub(crate) fn still_changing(container: ContainerId) -> HandlerError {
    HandlerError::from(StoreError::Transient {
        operation: "TransactWriteItems",
        code: "ContainerStillChanging".into(),
        message: format!(
            "container {container} or its links changed after each of {FLAG_ATTEMPTS} reads; its flags were withheld each time"
        ),
    })
}

// ---------------------------------------------------------------------------
// Stream handler
// ---------------------------------------------------------------------------

/// The stream side: Container and ContainerLink changes.
pub struct ExpiryHandler {
    store: Arc<dyn Store>,
    rules: ExpiryRules,
}

impl ExpiryHandler {
    /// The handler over the stream store, its calendar from the settings.
    pub fn new(deps: &JobDeps) -> Self {
        ExpiryHandler {
            store: deps.stream_store.clone(),
            rules: ExpiryRules::from_config(&deps.settings),
        }
    }

    /// Apply a container's change: nothing when its record planned nothing,
    /// else read, decide and write ([`Self::container_attempt`]) until its
    /// flags land or [`FLAG_ATTEMPTS`] reads have all been overtaken.
    async fn container_changed(
        &self,
        change: ContainerChange<'_>,
        now: DateTime<Utc>,
    ) -> Result<HandlerOutcome, HandlerError> {
        let id = change.id;
        if change.plans.is_empty() {
            return Ok(HandlerOutcome::Nothing(if change.flags_by_link {
                format!("container {id}: no reminder to write; {BY_LINK}")
            } else {
                "no food added, removed, or with a changed expiry or name".into()
            }));
        }
        // A flag write withheld because the container or a link changed
        // after the read is decided again from a fresh read: the change's
        // own record plans only the foods *it* changed.
        for _ in 0..FLAG_ATTEMPTS {
            if let Some(outcome) = self.container_attempt(&change, now).await? {
                return Ok(outcome);
            }
        }
        Err(still_changing(id))
    }

    /// One read-decide-write of [`Self::container_changed`]; `None` when
    /// its flags were withheld.
    async fn container_attempt(
        &self,
        change: &ContainerChange<'_>,
        now: DateTime<Utc>,
    ) -> Result<Option<HandlerOutcome>, HandlerError> {
        let id = change.id;
        let replan = self.read_and_replan(change, now).await?;
        if replan.plans.is_empty() {
            return Ok(Some(HandlerOutcome::Nothing(format!(
                "container {id}: its current foods need no flag or reminder change"
            ))));
        }
        let groups = self.flag_groups(id, &replan).await?;
        let ops = container_writes(&replan, &groups, now, &self.rules);
        if ops.reminders.is_empty() && ops.flags.is_empty() {
            return Ok(Some(HandlerOutcome::Nothing(format!(
                "{} food(s) changed; nothing to write without a group link",
                replan.plans.len()
            ))));
        }
        let Some(writes) = self.write_container(id, &replan, &groups, ops).await? else {
            return Ok(None);
        };
        Ok(Some(container_outcome(change, &replan, &groups, writes)))
    }

    /// Read the container as it is now and plan the change's foods again,
    /// from the record's old image to it: the record says which foods
    /// changed, the container as it is now what their flags must be (a
    /// record handled after later writes, a removal followed by a
    /// rewrite).
    async fn read_and_replan(
        &self,
        change: &ContainerChange<'_>,
        now: DateTime<Utc>,
    ) -> Result<Replan, StoreError> {
        let read = read_container(self.store.as_ref(), change.id).await?;
        Ok(match read.container {
            Ok(current) => Replan {
                removal: current.is_none(),
                plans: replan_from_current(
                    change.id,
                    change.before,
                    current.as_ref(),
                    change.flags_by_link,
                    now,
                    &self.rules,
                ),
                as_read: Some(read.as_read),
            },
            // The stored item does not decode (its own record says why):
            // this record's images are all there is to go by.
            Err(_) => Replan {
                removal: change.removal,
                plans: change.plans.clone(),
                as_read: None,
            },
        })
    }

    /// The groups whose flags the plans change (none when no flag changes):
    /// for a removed container the live groups still linked to it, else
    /// the owning groups whose link is there now.
    async fn flag_groups(
        &self,
        id: ContainerId,
        replan: &Replan,
    ) -> Result<Vec<GroupId>, StoreError> {
        let store = self.store.as_ref();
        if !replan.needs_group() {
            Ok(Vec::new())
        } else if replan.removal {
            // The flags in a removed group are its cascade's (the service
            // deletes a group's containers with it): only live groups here.
            let linked = linked_groups(store, id).await?;
            super::existing_groups(store, linked).await
        } else {
            let owning = owning_groups(store, id).await?;
            linked_now(store, id, owning).await
        }
    }

    /// Write the reminders (unguarded), then the flags, which land only
    /// while the container is as read (a removed one still absent) and, for
    /// a live one, each group still links it; the writes made, `None` when
    /// the flags were withheld.
    async fn write_container(
        &self,
        id: ContainerId,
        replan: &Replan,
        groups: &[GroupId],
        ops: ContainerWrites,
    ) -> Result<Option<usize>, StoreError> {
        let mut writes = 0;
        if !ops.reminders.is_empty() {
            writes += self.store.batch_write(ops.reminders).await?.items;
        }
        let flagged = match &replan.as_read {
            Some(as_read) => {
                let guards = if replan.removal {
                    vec![as_read.clone()]
                } else {
                    flag_guards(as_read, id, groups)
                };
                write_flags(self.store.as_ref(), &guards, ops.flags).await?
            }
            None => GuardedReport::default(),
        };
        if !flagged.held() {
            return Ok(None);
        }
        Ok(Some(writes + flagged.applied))
    }

    async fn link_inserted(
        &self,
        group: GroupId,
        container: ContainerId,
        now: DateTime<Utc>,
    ) -> Result<HandlerOutcome, HandlerError> {
        let mut withheld = 0;
        for _ in 0..FLAG_ATTEMPTS {
            let store = self.store.as_ref();
            let (read, linked) = futures::try_join!(
                read_container(store, container),
                linked_now(store, container, vec![group])
            )?;
            if linked.is_empty() {
                return Ok(HandlerOutcome::Nothing(format!(
                    "the link of container {container} to group {group} is gone again; its removal's record handles the flags"
                )));
            }
            let c = match read.container {
                Ok(Some(c)) => c,
                Ok(None) => {
                    return Ok(HandlerOutcome::Nothing(format!(
                        "container {container} not written yet; its own record places the flags"
                    )));
                }
                Err(reason) => {
                    return Err(HandlerError::invalid(format!(
                        "container {container} does not decode: {reason}"
                    )));
                }
            };
            // Only the flags: the container's own records keep its reminders.
            let ops: Vec<WriteOp> =
                plan_container_change(container, None, Some(&c), now, &self.rules)
                    .iter()
                    .filter(|p| matches!(p.flag, FlagAction::Put(_)))
                    .flat_map(|p| flag_ops(p, &[group]))
                    .collect();
            if ops.is_empty() {
                return Ok(HandlerOutcome::Nothing(format!(
                    "container {container} has no food inside the window"
                )));
            }
            // Only while the container holds what was read and the link is
            // still there; otherwise read and decide again.
            let guards = flag_guards(&read.as_read, container, &[group]);
            let report = write_flags(self.store.as_ref(), &guards, ops).await?;
            if report.held() {
                let mut detail =
                    format!("placed the flags of container {container} in group {group}");
                if withheld > 0 {
                    detail.push_str(&format!(
                        " ({withheld} withheld first: the container or link changed after the read; decided again)"
                    ));
                }
                return Ok(outcome(report.applied, detail));
            }
            withheld += report.withheld;
        }
        Err(still_changing(container))
    }

    async fn link_removed(
        &self,
        group: GroupId,
        container: ContainerId,
    ) -> Result<HandlerOutcome, HandlerError> {
        // One consistent read of the group's partition answers both
        // questions: is the link there again, and which flags of this
        // container are there. (A whole-partition read shares its request
        // with the other records' partition reads, where a `begins_with`
        // query would go alone; the partition holds the group, its links,
        // its invitation and its flags.)
        let link = ItemKey::ContainerLink { group, container };
        let mut spec = QuerySpec::partition(PK, &link.encode().0);
        spec.consistent = true;
        let mut relinked = false;
        let mut ops = Vec::new();
        for item in self.store.query_all(&spec).await? {
            match ItemKey::from_attributes(&item) {
                Ok(key) if key == link => relinked = true,
                Ok(key @ ItemKey::ExpiringFood { container: c, .. }) if c == container => {
                    ops.push(WriteOp::Delete(key.to_attributes()));
                }
                _ => {}
            }
        }
        if relinked {
            return Ok(HandlerOutcome::Nothing(format!(
                "container {container} is linked to group {group} again; its flags stay"
            )));
        }
        if ops.is_empty() {
            return Ok(HandlerOutcome::Nothing(format!(
                "no flag of container {container} in group {group}"
            )));
        }
        let report = self.store.batch_write(ops).await?;
        Ok(HandlerOutcome::Wrote {
            writes: report.items,
            detail: format!("removed the flags of container {container} from group {group}"),
        })
    }
}

/// Where a container change's flags are placed when its link's INSERT is
/// in the same batch.
const BY_LINK: &str = "flags: its link's INSERT in this batch places them";

/// A container's stream change as planned from its record (the fields of
/// [`StreamPlan::Container`]).
struct ContainerChange<'a> {
    id: ContainerId,
    removal: bool,
    /// The record's old image.
    before: Option<&'a Container>,
    plans: Vec<FoodPlan>,
    /// A new container whose link's INSERT is in the same batch.
    flags_by_link: bool,
}

/// A container change planned again from the container as read now.
struct Replan {
    /// Whether the container is gone.
    removal: bool,
    plans: Vec<FoodPlan>,
    /// The guard that the container is still as read; `None` when it does
    /// not decode (the plans are then the record's own).
    as_read: Option<Guard>,
}

impl Replan {
    /// Whether a flag is put or deleted (which needs the owning groups).
    fn needs_group(&self) -> bool {
        self.plans.iter().any(|p| p.flag != FlagAction::Keep)
    }
}

/// The writes of a container change: reminders (hints, unguarded) and
/// flags (guarded).
struct ContainerWrites {
    reminders: Vec<WriteOp>,
    flags: Vec<WriteOp>,
}

/// The writes of `replan` in `groups`. A container that does not decode
/// has no guard for its flags: every write of [`container_ops`] then goes
/// unguarded, with the reminders.
fn container_writes(
    replan: &Replan,
    groups: &[GroupId],
    now: DateTime<Utc>,
    rules: &ExpiryRules,
) -> ContainerWrites {
    let plans = &replan.plans;
    match &replan.as_read {
        Some(_) => ContainerWrites {
            reminders: container_reminder_ops(plans, groups, now, rules),
            flags: container_flag_ops(plans, groups),
        },
        None => ContainerWrites {
            reminders: container_ops(plans, groups, now, rules),
            flags: Vec::new(),
        },
    }
}

/// What a container change that landed (`writes` writes) says it did.
fn container_outcome(
    change: &ContainerChange<'_>,
    replan: &Replan,
    groups: &[GroupId],
    writes: usize,
) -> HandlerOutcome {
    let id = change.id;
    let n = replan.plans.len();
    let detail = if replan.removal {
        format!("container {id} removed: flags and reminders of {n} food(s) removed")
    } else if change.flags_by_link {
        format!("container {id}: reminders of {n} food(s) written; {BY_LINK}")
    } else if replan.needs_group() && groups.is_empty() {
        format!(
            "container {id}: {n} food(s) replanned in 0 group(s) (no group link yet: flags wait for the link)"
        )
    } else {
        format!(
            "container {id}: {n} food(s) replanned in {} group(s)",
            groups.len()
        )
    };
    HandlerOutcome::Wrote { writes, detail }
}

fn outcome(writes: usize, detail: String) -> HandlerOutcome {
    if writes == 0 {
        HandlerOutcome::Nothing(detail)
    } else {
        HandlerOutcome::Wrote { writes, detail }
    }
}

#[async_trait]
impl ChangeHandler<Change> for ExpiryHandler {
    fn name(&self) -> &'static str {
        "expiry"
    }

    fn wants(&self, kind: ItemKind) -> bool {
        matches!(kind, ItemKind::Container | ItemKind::ContainerLink)
    }

    async fn handle_in_batch(
        &self,
        change: &Change,
        now: DateTime<Utc>,
        batch: &BatchFacts,
    ) -> Result<HandlerOutcome, HandlerError> {
        match plan_stream_change(change, now, &self.rules, batch) {
            StreamPlan::Container {
                id,
                removal,
                before,
                plans,
                flags_by_link,
            } => {
                let change = ContainerChange {
                    id,
                    removal,
                    before,
                    plans,
                    flags_by_link,
                };
                self.container_changed(change, now).await
            }
            StreamPlan::PlaceFlags { group, container } => {
                self.link_inserted(group, container, now).await
            }
            StreamPlan::RemoveFlags { group, container } => {
                self.link_removed(group, container).await
            }
            StreamPlan::Nothing(why) => Ok(HandlerOutcome::Nothing(why.into())),
        }
    }
}
