//! Food-expiry flags: foods nearing or past their expiry are flagged in
//! worker-owned items, at a cost that follows the foods that change, not the
//! table.
//!
//! Every rule of the job is in this file.
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
//!   `FoodId` ([`plan_container_change`]). Only a food that was added or
//!   removed, or whose `Expiry` or `Name` changed, is planned; a container
//!   rename or a change of `Quantity`, `Unit`, `Category` causes no write and
//!   no read. For a planned food:
//!   - inside the window (nearing or expired): the flag is put at once;
//!     otherwise a flag that may exist (old food nearing, expired or
//!     retired) is deleted;
//!   - when the expiry changed: the old expiry's reminders are deleted and
//!     the new one's next reminder is put (*enters window* while far,
//!     *expires* while nearing, none once expired). A name-only change
//!     rewrites the flag and leaves the reminders alone.
//! - **The owning group** is found through the `GroupAndContainerRelationship`
//!   index (keys only). With several links, only groups whose `Group` item
//!   exists count. All writes go out in one `BatchWriteItem` (unconditional
//!   puts and deletes: flags and reminders are derived data, recomputed from
//!   the container by whoever writes them).
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
//! The tick or the backfill may put a flag from a container read just
//! before the service removes the food; a nearing flag written that way
//! comes with an *expires* reminder, whose tick re-reads the container and
//! deletes it. An expired flag written that way stays until its TTL.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Days, NaiveDate, TimeDelta, Utc};
use chrono_tz::Tz;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::datetime;
use crate::items::{Container, Entity, Food, Item, attr};
use crate::keys::{ContainerId, FoodId, GroupId, ItemKey, ItemKind, Job, PK, SK};
use crate::notify::{EventBridgePublisher, EventEntry, EventPublisher};
use crate::schedule::{JobReport, JobRun, ScheduledJob};
use crate::schema::GROUP_AND_CONTAINER_INDEX;
use crate::worker::{BatchFacts, Change, ChangeHandler, HandlerOutcome};
use worker_engine::error::HandlerError;
use worker_engine::store::{
    Expr, Key, QuerySpec, ScanSpec, Store, StoreError, WriteOp, WriteOutcome,
};
use worker_engine::stream::decode::ChangeKind;

use super::JobDeps;

/// The worker's TTL attribute (Number, epoch seconds); the same name the
/// invitation job uses, so the table has one TTL setting.
pub const TTL_ATTRIBUTE: &str = "WorkerExpiresAt";
/// `source` of the notification events.
pub const EVENT_SOURCE: &str = "nishiki.worker";
/// `detail-type` of the notification events.
pub const DETAIL_TYPE: &str = "FoodsNearingExpiry";
/// At most this many foods in one event (an entry must stay under 256 KB).
pub const MAX_FOODS_PER_EVENT: usize = 100;
/// Without a checkpoint, the tick starts this many days before today.
pub const FIRST_RUN_LOOKBACK_DAYS: u64 = 7;
/// Pending notification events kept in the checkpoint at most.
pub const MAX_PENDING_EVENTS: usize = 50;
/// Containers handled at once by the tick and the backfill.
const CONCURRENCY: usize = 8;
/// Default backfill page (items evaluated per Scan page).
pub const DEFAULT_BACKFILL_PAGE: i32 = 1000;

/// Attribute names of the flag item.
pub mod flag_attr {
    pub const NAME: &str = "Name";
    pub const EXPIRY: &str = "Expiry";
    pub const EXPIRY_DATE: &str = "ExpiryDate";
    pub const STATUS: &str = "Status";
    pub const DAYS_LEFT: &str = "DaysLeft";
    pub const CHECKED_ON: &str = "CheckedOn";
    pub const FLAGGED_AT: &str = "FlaggedAt";
}

/// Attribute names of the reminder item.
pub mod reminder_attr {
    pub const REASON: &str = "Reason";
    pub const WRITTEN_AT: &str = "WrittenAt";
}

const DATE_FORMAT: &str = "%Y-%m-%d";

// ---------------------------------------------------------------------------
// The calendar (pure)
// ---------------------------------------------------------------------------

/// Horizon, zone and retention: everything the decisions depend on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpiryRules {
    pub horizon_days: u32,
    pub zone: Tz,
    pub retention_days: u32,
}

/// Where a food stands on a given day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// Outside the horizon; enters it on `enters_on`.
    Far { enters_on: NaiveDate },
    /// Inside the horizon, not passed; re-checked on `expires_check_on`.
    Nearing {
        days_left: i64,
        expires_check_on: NaiveDate,
    },
    /// The expiry instant has passed (`days_left` <= 0).
    Expired { days_left: i64 },
    /// Expired longer ago than the retention: no flag.
    Retired,
}

impl Window {
    /// The flag status this window calls for, if any.
    pub fn status(self) -> Option<FlagStatus> {
        match self {
            Window::Nearing { .. } => Some(FlagStatus::Nearing),
            Window::Expired { .. } => Some(FlagStatus::Expired),
            Window::Far { .. } | Window::Retired => None,
        }
    }

    /// Whether a flag may exist for a food in this window (it was flagged at
    /// some point): nearing, expired or retired.
    fn may_have_flag(self) -> bool {
        !matches!(self, Window::Far { .. })
    }

    /// The reminder the food needs next, if any.
    pub fn next_reminder(self) -> Option<Reminder> {
        match self {
            Window::Far { enters_on } => Some(Reminder {
                date: enters_on,
                reason: ReminderReason::EntersWindow,
            }),
            Window::Nearing {
                expires_check_on, ..
            } => Some(Reminder {
                date: expires_check_on,
                reason: ReminderReason::Expires,
            }),
            Window::Expired { .. } | Window::Retired => None,
        }
        .filter(|r| reminder_date_ok(r.date))
    }
}

/// Reminder keys hold `YYYY-MM-DD`: dates past year 9999 cannot be keyed
/// (and no food lasts that long).
fn reminder_date_ok(date: NaiveDate) -> bool {
    (1..=9999).contains(&chrono::Datelike::year(&date))
}

impl ExpiryRules {
    pub fn from_config(config: &Config) -> Self {
        ExpiryRules {
            horizon_days: config.expiry_horizon_days,
            zone: config.expiry_time_zone,
            retention_days: config.flag_retention_days,
        }
    }

    /// The date of an instant in the configured zone.
    pub fn local_date(&self, at: DateTime<Utc>) -> NaiveDate {
        at.with_timezone(&self.zone).date_naive()
    }

    /// Today, in the configured zone.
    pub fn today(&self, now: DateTime<Utc>) -> NaiveDate {
        self.local_date(now)
    }

    /// The day a food with this expiry enters the window (`expiry date - h`).
    pub fn enters_window_on(&self, expiry: DateTime<Utc>) -> NaiveDate {
        let d = self.local_date(expiry);
        d.checked_sub_days(Days::new(u64::from(self.horizon_days)))
            .unwrap_or(d)
    }

    /// The first day whose start is at or after the expiry instant: the
    /// expiry date when the food expires at the very first instant of its
    /// day (DST-safe: the instant just before lies on an earlier date),
    /// otherwise the next day.
    pub fn expired_check_on(&self, expiry: DateTime<Utc>) -> NaiveDate {
        let d = self.local_date(expiry);
        let starts_day = self.local_date(expiry - TimeDelta::nanoseconds(1)) < d;
        if starts_day {
            d
        } else {
            d.succ_opt().unwrap_or(d)
        }
    }

    /// Both reminder dates a food with this expiry can have.
    pub fn reminder_dates(&self, expiry: DateTime<Utc>) -> Vec<NaiveDate> {
        let mut v = vec![self.enters_window_on(expiry), self.expired_check_on(expiry)];
        v.dedup();
        v.retain(|d| reminder_date_ok(*d));
        v
    }

    /// The reminder dates of a food with this expiry that a change at `now`
    /// deletes: while it is far, only its *enters window* date (the
    /// *expires* reminder is written once the food is inside the window,
    /// and time only moves on); otherwise both ([`Self::reminder_dates`]),
    /// but only those dated after today. A reminder dated today or before
    /// is left to the tick. The stream only ever writes reminders for later
    /// days, and the tick runs just after local midnight, so by the time a
    /// change arrives the tick has nearly always consumed it (deleting it
    /// would be a write that changes nothing); otherwise the tick still
    /// will, since it reads today's date on this run and the next, re-reading
    /// the container and deleting the reminder of a food that is gone or
    /// changed ([`plan_reminder`]).
    pub fn reminder_dates_at(&self, expiry: DateTime<Utc>, now: DateTime<Utc>) -> Vec<NaiveDate> {
        let mut dates = match self.classify(expiry, now) {
            Window::Far { enters_on } => Some(enters_on)
                .filter(|d| reminder_date_ok(*d))
                .into_iter()
                .collect(),
            _ => self.reminder_dates(expiry),
        };
        let today = self.today(now);
        dates.retain(|d| *d > today);
        dates
    }

    /// Epoch seconds after which the flag may vanish (TTL).
    pub fn flag_expires_at(&self, expiry: DateTime<Utc>) -> i64 {
        (expiry + TimeDelta::days(i64::from(self.retention_days))).timestamp()
    }

    /// Where a food with this expiry stands at `now`.
    pub fn classify(&self, expiry: DateTime<Utc>, now: DateTime<Utc>) -> Window {
        let today = self.today(now);
        let expiry_date = self.local_date(expiry);
        let days_left = (expiry_date - today).num_days();
        if now >= expiry + TimeDelta::days(i64::from(self.retention_days)) {
            return Window::Retired;
        }
        if expiry <= now {
            return Window::Expired { days_left };
        }
        if days_left <= i64::from(self.horizon_days) {
            Window::Nearing {
                days_left,
                expires_check_on: self.expired_check_on(expiry),
            }
        } else {
            Window::Far {
                enters_on: self.enters_window_on(expiry),
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Plans (pure)
// ---------------------------------------------------------------------------

/// A flag's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlagStatus {
    Nearing,
    Expired,
}

impl FlagStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            FlagStatus::Nearing => "nearing",
            FlagStatus::Expired => "expired",
        }
    }
}

/// The content of one flag (the group comes with the write).
#[derive(Debug, Clone, PartialEq)]
pub struct FlagData {
    pub container: ContainerId,
    pub food: FoodId,
    pub name: String,
    pub expiry: DateTime<Utc>,
    pub expiry_date: NaiveDate,
    pub status: FlagStatus,
    pub days_left: i64,
    pub checked_on: NaiveDate,
    pub flagged_at: DateTime<Utc>,
    /// [`TTL_ATTRIBUTE`]: epoch seconds.
    pub expires_at: i64,
}

impl FlagData {
    fn new(
        container: ContainerId,
        food: &Food,
        expiry: DateTime<Utc>,
        status: FlagStatus,
        now: DateTime<Utc>,
        rules: &ExpiryRules,
    ) -> Self {
        let checked_on = rules.today(now);
        let expiry_date = rules.local_date(expiry);
        FlagData {
            container,
            food: food.food_id,
            name: food.name.clone(),
            expiry,
            expiry_date,
            status,
            days_left: (expiry_date - checked_on).num_days(),
            checked_on,
            flagged_at: now,
            expires_at: rules.flag_expires_at(expiry),
        }
    }

    /// The flag's key in `group`.
    pub fn key(&self, group: GroupId) -> ItemKey {
        ItemKey::ExpiringFood {
            group,
            container: self.container,
            food: self.food,
        }
    }

    /// The flag item in `group`.
    pub fn to_item(&self, group: GroupId) -> Item {
        let mut item = self.key(group).to_attributes();
        let s = |v: String| AttributeValue::S(v);
        item.insert(flag_attr::NAME.into(), s(self.name.clone()));
        item.insert(flag_attr::EXPIRY.into(), s(datetime::format(self.expiry)));
        item.insert(
            flag_attr::EXPIRY_DATE.into(),
            s(self.expiry_date.format(DATE_FORMAT).to_string()),
        );
        item.insert(flag_attr::STATUS.into(), s(self.status.as_str().into()));
        item.insert(
            flag_attr::DAYS_LEFT.into(),
            AttributeValue::N(self.days_left.to_string()),
        );
        item.insert(
            flag_attr::CHECKED_ON.into(),
            s(self.checked_on.format(DATE_FORMAT).to_string()),
        );
        item.insert(
            flag_attr::FLAGGED_AT.into(),
            s(datetime::format(self.flagged_at)),
        );
        item.insert(
            TTL_ATTRIBUTE.into(),
            AttributeValue::N(self.expires_at.to_string()),
        );
        item
    }
}

/// What to do with a food's flag.
#[derive(Debug, Clone, PartialEq)]
pub enum FlagAction {
    /// Leave it as it is (none exists, or it is still right).
    Keep,
    /// Put it, in every owning group.
    Put(FlagData),
    /// Delete it, in every owning group.
    Delete,
}

/// Why a reminder exists (for people reading the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReminderReason {
    /// The food enters the window on that day.
    EntersWindow,
    /// The food's expiry instant has passed by the start of that day.
    Expires,
    /// The food is inside the window but no group link was found yet.
    RetryUnlinked,
}

impl ReminderReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ReminderReason::EntersWindow => "enters-window",
            ReminderReason::Expires => "expires",
            ReminderReason::RetryUnlinked => "retry-unlinked",
        }
    }
}

/// A reminder to put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reminder {
    pub date: NaiveDate,
    pub reason: ReminderReason,
}

/// Everything planned for one food of one container.
#[derive(Debug, Clone, PartialEq)]
pub struct FoodPlan {
    pub container: ContainerId,
    pub food: FoodId,
    pub flag: FlagAction,
    pub delete_reminders: Vec<NaiveDate>,
    pub put_reminder: Option<Reminder>,
}

impl FoodPlan {
    fn is_empty(&self) -> bool {
        self.flag == FlagAction::Keep
            && self.delete_reminders.is_empty()
            && self.put_reminder.is_none()
    }

    fn reminder_key(&self, date: NaiveDate) -> ItemKey {
        ItemKey::ExpiryReminder {
            date,
            container: self.container,
            food: self.food,
        }
    }
}

/// Foods by id, first occurrence wins, in list order.
fn by_id(foods: &[Food]) -> Vec<(FoodId, &Food)> {
    let mut seen = BTreeSet::new();
    foods
        .iter()
        .filter(|f| seen.insert(f.food_id))
        .map(|f| (f.food_id, f))
        .collect()
}

/// The stream rule: diff a container's old and new foods by `FoodId` and
/// plan the writes at `now`. `None` stands for "no image" (INSERT: no old;
/// REMOVE: no new). Only foods added, removed, or with a changed `Expiry`
/// or `Name` are planned; everything else plans nothing.
pub fn plan_container_change(
    container: ContainerId,
    old: Option<&Container>,
    new: Option<&Container>,
    now: DateTime<Utc>,
    rules: &ExpiryRules,
) -> Vec<FoodPlan> {
    let old_foods = old.map(|c| by_id(&c.foods)).unwrap_or_default();
    let new_foods = new.map(|c| by_id(&c.foods)).unwrap_or_default();
    let new_map: HashMap<FoodId, &Food> = new_foods.iter().copied().collect();
    let old_map: HashMap<FoodId, &Food> = old_foods.iter().copied().collect();
    let ids = old_foods.iter().map(|(id, _)| *id).chain(
        new_foods
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !old_map.contains_key(id)),
    );
    let mut plans = Vec::new();
    for id in ids {
        let o = old_map.get(&id).copied();
        let n = new_map.get(&id).copied();
        if let Some(plan) = plan_food_change(container, id, o, n, now, rules) {
            plans.push(plan);
        }
    }
    plans
}

fn plan_food_change(
    container: ContainerId,
    food: FoodId,
    old: Option<&Food>,
    new: Option<&Food>,
    now: DateTime<Utc>,
    rules: &ExpiryRules,
) -> Option<FoodPlan> {
    let old_expiry = old.and_then(|f| f.expiry);
    let new_expiry = new.and_then(|f| f.expiry);
    if old_expiry.is_none() && new_expiry.is_none() {
        return None;
    }
    if let (Some(o), Some(n)) = (old, new)
        && old_expiry == new_expiry
        && o.name == n.name
    {
        return None;
    }
    let new_window = new_expiry.map(|e| (e, rules.classify(e, now)));
    let flag = match (new, new_window) {
        (Some(n), Some((e, w))) if w.status().is_some() => FlagAction::Put(FlagData::new(
            container,
            n,
            e,
            w.status().expect("checked"),
            now,
            rules,
        )),
        _ if old_expiry.is_some_and(|e| rules.classify(e, now).may_have_flag()) => {
            FlagAction::Delete
        }
        _ => FlagAction::Keep,
    };
    let (put_reminder, delete_reminders) = if old_expiry == new_expiry {
        // Name only: the reminders depend on the expiry alone.
        (None, Vec::new())
    } else {
        let put = new_window.and_then(|(_, w)| w.next_reminder());
        let delete = old_expiry
            .map(|e| rules.reminder_dates_at(e, now))
            .unwrap_or_default()
            .into_iter()
            .filter(|d| Some(*d) != put.map(|r| r.date))
            .collect();
        (put, delete)
    };
    let plan = FoodPlan {
        container,
        food,
        flag,
        delete_reminders,
        put_reminder,
    };
    (!plan.is_empty()).then_some(plan)
}

/// The tick rule: re-decide one reminded food from the container as it is
/// now (`food` is `None` when the container or the food is gone). The
/// processed reminder is deleted unless it is the one the food needs next.
pub fn plan_reminder(
    reminder_date: NaiveDate,
    container: ContainerId,
    food_id: FoodId,
    food: Option<&Food>,
    now: DateTime<Utc>,
    rules: &ExpiryRules,
) -> FoodPlan {
    let (flag, put_reminder) = match food.and_then(|f| f.expiry.map(|e| (f, e))) {
        None => (FlagAction::Delete, None),
        Some((f, e)) => {
            let w = rules.classify(e, now);
            let flag = match w.status() {
                Some(status) => FlagAction::Put(FlagData::new(container, f, e, status, now, rules)),
                None => FlagAction::Delete,
            };
            (flag, w.next_reminder())
        }
    };
    let keep_this = put_reminder.is_some_and(|r| r.date == reminder_date);
    FoodPlan {
        container,
        food: food_id,
        flag,
        delete_reminders: if keep_this {
            Vec::new()
        } else {
            vec![reminder_date]
        },
        put_reminder: put_reminder.filter(|_| !keep_this),
    }
}

/// The reminder item.
pub fn reminder_item(key: &ItemKey, reason: ReminderReason, now: DateTime<Utc>) -> Item {
    let mut item = key.to_attributes();
    item.insert(
        reminder_attr::REASON.into(),
        AttributeValue::S(reason.as_str().into()),
    );
    item.insert(
        reminder_attr::WRITTEN_AT.into(),
        AttributeValue::S(datetime::format(now)),
    );
    item
}

/// The reminder writes of a plan (puts before deletes).
pub fn reminder_ops(plan: &FoodPlan, now: DateTime<Utc>) -> Vec<WriteOp> {
    let mut ops = Vec::new();
    if let Some(r) = plan.put_reminder {
        ops.push(WriteOp::Put(reminder_item(
            &plan.reminder_key(r.date),
            r.reason,
            now,
        )));
    }
    for d in &plan.delete_reminders {
        ops.push(WriteOp::Delete(plan.reminder_key(*d).to_attributes()));
    }
    ops
}

/// The flag writes of a plan, in every group.
pub fn flag_ops(plan: &FoodPlan, groups: &[GroupId]) -> Vec<WriteOp> {
    groups
        .iter()
        .filter_map(|g| match &plan.flag {
            FlagAction::Keep => None,
            FlagAction::Put(data) => Some(WriteOp::Put(data.to_item(*g))),
            FlagAction::Delete => Some(WriteOp::Delete(
                ItemKey::ExpiringFood {
                    group: *g,
                    container: plan.container,
                    food: plan.food,
                }
                .to_attributes(),
            )),
        })
        .collect()
}

/// Every write of a container's plans. Without an owning group, a flag that
/// should be put becomes a reminder for today (the tick retries), and a flag
/// delete is left to the link's removal.
pub fn container_ops(
    plans: &[FoodPlan],
    groups: &[GroupId],
    now: DateTime<Utc>,
    rules: &ExpiryRules,
) -> Vec<WriteOp> {
    let today = rules.today(now);
    let mut ops = Vec::new();
    for plan in plans {
        ops.extend(flag_ops(plan, groups));
        ops.extend(reminder_ops(plan, now));
        if groups.is_empty() && matches!(plan.flag, FlagAction::Put(_)) {
            let mut retry = plan.clone();
            retry.put_reminder = Some(Reminder {
                date: today,
                reason: ReminderReason::RetryUnlinked,
            });
            retry.delete_reminders.clear();
            ops.extend(reminder_ops(&retry, now));
        }
    }
    ops
}

/// The plans of a new container whose link's INSERT is in the same batch:
/// the link's record reads the container (strongly consistent; it exists,
/// its INSERT being in the batch) and puts the flags of its foods inside
/// the window, so the container's own record keeps only the reminders. It
/// then needs no index read for its group, and no flag is put twice.
pub fn leave_flags_to_link(plans: Vec<FoodPlan>) -> Vec<FoodPlan> {
    plans
        .into_iter()
        .map(|mut p| {
            if matches!(p.flag, FlagAction::Put(_)) {
                p.flag = FlagAction::Keep;
            }
            p
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// The notification entries: one per group (split every
/// [`MAX_FOODS_PER_EVENT`] foods), foods sorted by container and food id.
pub fn notification_entries(
    bus: &str,
    today: NaiveDate,
    zone: Tz,
    newly: &BTreeMap<GroupId, Vec<FlagData>>,
) -> Vec<EventEntry> {
    let mut entries = Vec::new();
    for (group, flags) in newly {
        let mut flags: Vec<&FlagData> = flags.iter().collect();
        flags.sort_by_key(|f| (f.container, f.food));
        flags.dedup_by_key(|f| (f.container, f.food));
        for chunk in flags.chunks(MAX_FOODS_PER_EVENT) {
            let foods: Vec<serde_json::Value> = chunk
                .iter()
                .map(|f| {
                    serde_json::json!({
                        "containerId": f.container.to_string(),
                        "foodId": f.food.to_string(),
                        "name": f.name,
                        "expiry": datetime::format(f.expiry),
                        "expiryDate": f.expiry_date.format(DATE_FORMAT).to_string(),
                        "status": f.status.as_str(),
                        "daysLeft": f.days_left,
                    })
                })
                .collect();
            let detail = serde_json::json!({
                "date": today.format(DATE_FORMAT).to_string(),
                "timeZone": zone.name(),
                "groupId": group.to_string(),
                "foods": foods,
            });
            entries.push(EventEntry {
                source: EVENT_SOURCE.into(),
                detail_type: DETAIL_TYPE.into(),
                event_bus_name: bus.into(),
                detail: detail.to_string(),
            });
        }
    }
    entries
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

/// A container as stored now (strongly consistent), `Ok(None)` when gone,
/// `Err(reason)` inside when it does not decode.
async fn read_container(
    store: &dyn Store,
    id: ContainerId,
) -> Result<Result<Option<Container>, String>, StoreError> {
    let Some(item) = store
        .get(&ItemKey::Container(id).to_attributes(), true)
        .await?
    else {
        return Ok(Ok(None));
    };
    Ok(
        match Entity::from_keyed_item(ItemKey::Container(id), item) {
            Ok(Entity::Container(c)) => Ok(Some(c)),
            Ok(_) => Err("not a container".into()),
            Err(e) => Err(e.to_string()),
        },
    )
}

fn container_of(entity: &Option<Entity>) -> Option<&Container> {
    match entity {
        Some(Entity::Container(c)) => Some(c),
        _ => None,
    }
}

/// The expiry job's decision for one stream change (no I/O): what
/// [`ExpiryHandler`] then reads and writes.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamPlan {
    /// A container changed: its foods' plans (empty: nothing to write).
    /// On a removal the handler first checks that the container does not
    /// exist again. `flags_by_link`: a new container whose link's INSERT is
    /// in the same batch; its plans keep only the reminders
    /// ([`leave_flags_to_link`]) and it needs no group.
    Container {
        id: ContainerId,
        removal: bool,
        plans: Vec<FoodPlan>,
        flags_by_link: bool,
    },
    /// A container link was inserted: place the container's flags in the
    /// group (after reading the container).
    PlaceFlags {
        group: GroupId,
        container: ContainerId,
    },
    /// A container link was removed: remove the container's flags from the
    /// group (unless the link exists again).
    RemoveFlags {
        group: GroupId,
        container: ContainerId,
    },
    /// Nothing to do, and why.
    Nothing(&'static str),
}

/// Decide what a stream change of a batch with these facts asks of the
/// expiry job, at `now`.
pub fn plan_stream_change(
    change: &Change,
    now: DateTime<Utc>,
    rules: &ExpiryRules,
    batch: &BatchFacts,
) -> StreamPlan {
    match change.key {
        ItemKey::Container(id) => {
            let removal = change.is_removal();
            let old = container_of(&change.old);
            let new = if removal {
                None
            } else {
                container_of(&change.new)
            };
            let plans = plan_container_change(id, old, new, now, rules);
            let flags_by_link = change.kind == ChangeKind::Insert && batch.link_inserted(id);
            StreamPlan::Container {
                id,
                removal,
                plans: if flags_by_link {
                    leave_flags_to_link(plans)
                } else {
                    plans
                },
                flags_by_link,
            }
        }
        ItemKey::ContainerLink { group, container } => match change.kind {
            ChangeKind::Insert => StreamPlan::PlaceFlags { group, container },
            ChangeKind::Remove | ChangeKind::TtlRemove => {
                StreamPlan::RemoveFlags { group, container }
            }
            ChangeKind::Modify => StreamPlan::Nothing("link rewritten; its container is unchanged"),
        },
        _ => StreamPlan::Nothing("not an expiry concern"),
    }
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
    pub fn new(deps: &JobDeps) -> Self {
        ExpiryHandler {
            store: deps.store.clone(),
            rules: ExpiryRules::from_config(&deps.config),
        }
    }

    async fn container_changed(
        &self,
        id: ContainerId,
        removal: bool,
        plans: Vec<FoodPlan>,
        flags_by_link: bool,
        now: DateTime<Utc>,
    ) -> Result<HandlerOutcome, HandlerError> {
        const BY_LINK: &str = "flags: its link's INSERT in this batch places them";
        if removal {
            // A replayed or stale removal: if the container exists again,
            // its flags are its current foods' and its own records keep them.
            if let Ok(Some(_)) = read_container(self.store.as_ref(), id).await? {
                return Ok(HandlerOutcome::Nothing(format!(
                    "container {id} exists again; stale removal ignored"
                )));
            }
        }
        if plans.is_empty() {
            return Ok(HandlerOutcome::Nothing(if flags_by_link {
                format!("container {id}: no reminder to write; {BY_LINK}")
            } else {
                "no food added, removed, or with a changed expiry or name".into()
            }));
        }
        let needs_group = plans.iter().any(|p| p.flag != FlagAction::Keep);
        let groups = if !needs_group {
            Vec::new()
        } else if removal {
            // The flags in a removed group are its cascade's (the service
            // deletes a group's containers with it): only live groups here.
            let linked = linked_groups(self.store.as_ref(), id).await?;
            super::existing_groups(self.store.as_ref(), linked).await?
        } else {
            owning_groups(self.store.as_ref(), id).await?
        };
        let ops = container_ops(&plans, &groups, now, &self.rules);
        if ops.is_empty() {
            return Ok(HandlerOutcome::Nothing(format!(
                "{} food(s) changed; nothing to write without a group link",
                plans.len()
            )));
        }
        let report = self.store.batch_write(ops).await?;
        if removal {
            return Ok(HandlerOutcome::Wrote {
                writes: report.items,
                detail: format!(
                    "container {id} removed: flags and reminders of {} food(s) removed",
                    plans.len()
                ),
            });
        }
        let n = plans.len();
        let detail = if flags_by_link {
            format!("container {id}: reminders of {n} food(s) written; {BY_LINK}")
        } else if needs_group && groups.is_empty() {
            format!(
                "container {id}: {n} food(s) replanned in 0 group(s) (no group link yet: flags wait for the link)"
            )
        } else {
            format!(
                "container {id}: {n} food(s) replanned in {} group(s)",
                groups.len()
            )
        };
        Ok(HandlerOutcome::Wrote {
            writes: report.items,
            detail,
        })
    }

    async fn link_inserted(
        &self,
        group: GroupId,
        container: ContainerId,
        now: DateTime<Utc>,
    ) -> Result<HandlerOutcome, HandlerError> {
        let c = match read_container(self.store.as_ref(), container).await? {
            Ok(Some(c)) => c,
            Ok(None) => {
                return Ok(HandlerOutcome::Nothing(format!(
                    "container {container} not written yet; its own record places the flags"
                )));
            }
            Err(reason) => {
                return Err(HandlerError::Invalid(format!(
                    "container {container} does not decode: {reason}"
                )));
            }
        };
        // Only the flags: the container's own records keep its reminders.
        let ops: Vec<WriteOp> = plan_container_change(container, None, Some(&c), now, &self.rules)
            .iter()
            .filter(|p| matches!(p.flag, FlagAction::Put(_)))
            .flat_map(|p| flag_ops(p, &[group]))
            .collect();
        if ops.is_empty() {
            return Ok(HandlerOutcome::Nothing(format!(
                "container {container} has no food inside the window"
            )));
        }
        let report = self.store.batch_write(ops).await?;
        Ok(HandlerOutcome::Wrote {
            writes: report.items,
            detail: format!("placed the flags of container {container} in group {group}"),
        })
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

#[async_trait]
impl ChangeHandler for ExpiryHandler {
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
                plans,
                flags_by_link,
            } => {
                self.container_changed(id, removal, plans, flags_by_link, now)
                    .await
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

// ---------------------------------------------------------------------------
// Checkpoints
// ---------------------------------------------------------------------------

async fn load_checkpoint<T: for<'de> Deserialize<'de> + Default>(
    store: &dyn Store,
    job: Job,
) -> Result<T, HandlerError> {
    let Some(mut item) = store
        .get(&ItemKey::Checkpoint(job).to_attributes(), true)
        .await?
    else {
        return Ok(T::default());
    };
    item.remove(PK);
    item.remove(SK);
    serde_dynamo::from_item(item).map_err(|e| {
        HandlerError::Invalid(format!(
            "checkpoint of {job} does not decode ({}); delete the item WorkerCheckpoint/{job} to start over",
            crate::items::redact_quoted(&e.to_string())
        ))
    })
}

async fn save_checkpoint<T: Serialize>(
    store: &dyn Store,
    job: Job,
    state: &T,
) -> Result<(), StoreError> {
    let mut item: Item = serde_dynamo::to_item(state).expect("checkpoints always serialize");
    item.retain(|_, v| !matches!(v, AttributeValue::Null(_)));
    item.extend(ItemKey::Checkpoint(job).to_attributes());
    store.put(item, None).await?;
    Ok(())
}

/// The tick's checkpoint (`WorkerCheckpoint`/`flag-expiring`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TickCheckpoint {
    /// The first reminder date not known to be fully processed.
    #[serde(default)]
    pub next_date: Option<NaiveDate>,
    /// Notification entries not accepted yet; sent first next time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_events: Vec<EventEntry>,
    #[serde(default)]
    pub updated_at: Option<String>,
}

// ---------------------------------------------------------------------------
// Daily tick
// ---------------------------------------------------------------------------

/// What one tick did (`JobReport.details`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TickReport {
    pub today: Option<NaiveDate>,
    pub from_date: Option<NaiveDate>,
    pub dates_read: u64,
    pub pages: u64,
    pub reminders: u64,
    pub containers_read: u64,
    pub flags_new: u64,
    pub flags_refreshed: u64,
    pub flags_deleted: u64,
    pub reminders_written: u64,
    pub reminders_deleted: u64,
    /// Foods inside the window whose container has no group link.
    pub unlinked: u64,
    /// Reminders whose container or food is gone.
    pub gone: u64,
    /// Containers that do not decode (their reminders are dropped; the
    /// container's next write replans it).
    pub unreadable_containers: u64,
    /// Items in a reminder partition that are not reminders.
    pub malformed: u64,
    /// Containers left for the next run (deadline).
    pub deferred: u64,
    pub events_sent: u64,
    pub events_pending: u64,
}

impl TickReport {
    fn add(&mut self, o: &TickReport) {
        self.containers_read += o.containers_read;
        self.flags_new += o.flags_new;
        self.flags_refreshed += o.flags_refreshed;
        self.flags_deleted += o.flags_deleted;
        self.reminders_written += o.reminders_written;
        self.reminders_deleted += o.reminders_deleted;
        self.unlinked += o.unlinked;
        self.gone += o.gone;
        self.unreadable_containers += o.unreadable_containers;
        self.deferred += o.deferred;
    }
}

/// The daily tick (`flag-expiring`).
pub struct FlagExpiringJob {
    store: Arc<dyn Store>,
    rules: ExpiryRules,
    bus: Option<String>,
    publisher: Arc<dyn EventPublisher>,
}

impl FlagExpiringJob {
    /// The tick; notifies through EventBridge when `NOTIFY_EVENT_BUS` is set.
    pub fn new(deps: &JobDeps) -> Self {
        FlagExpiringJob {
            store: deps.store.clone(),
            rules: ExpiryRules::from_config(&deps.config),
            bus: deps.config.notify_event_bus.clone(),
            publisher: Arc::new(EventBridgePublisher::from_env()),
        }
    }

    /// Publish through another publisher (tests, dry runs). Events are only
    /// published when a bus is configured.
    pub fn with_publisher(mut self, publisher: Arc<dyn EventPublisher>) -> Self {
        self.publisher = publisher;
        self
    }

    fn reminder_query(date: NaiveDate) -> QuerySpec {
        QuerySpec::partition(PK, &ItemKey::reminder_partition(date))
    }

    /// Re-decide every reminded food of one container. Flags are put here
    /// (conditionally, to tell newly flagged foods); the flag deletes and
    /// reminder writes are returned, for one batch per page.
    async fn process_container(
        &self,
        date: NaiveDate,
        container: ContainerId,
        foods: Vec<FoodId>,
        run: &JobRun,
        newly: &std::sync::Mutex<BTreeMap<GroupId, Vec<FlagData>>>,
    ) -> Result<(TickReport, Vec<WriteOp>), StoreError> {
        let mut r = TickReport::default();
        if !run.has_time() {
            r.deferred += 1;
            return Ok((r, Vec::new()));
        }
        let store = self.store.as_ref();
        r.containers_read += 1;
        let current = match read_container(store, container).await? {
            Ok(c) => c,
            Err(reason) => {
                tracing::warn!(%container, %reason, "expiry tick: container does not decode; its reminders are dropped");
                r.unreadable_containers += 1;
                None
            }
        };
        let plans: Vec<FoodPlan> = foods
            .iter()
            .map(|f| {
                let food = current
                    .as_ref()
                    .and_then(|c| c.foods.iter().find(|x| x.food_id == *f));
                if food.and_then(|x| x.expiry).is_none() {
                    r.gone += 1;
                }
                plan_reminder(date, container, *f, food, run.now, &self.rules)
            })
            .collect();
        let needs_group = plans.iter().any(|p| p.flag != FlagAction::Keep);
        let groups = if needs_group {
            owning_groups(store, container).await?
        } else {
            Vec::new()
        };
        let mut batch = Vec::new();
        for plan in &plans {
            match &plan.flag {
                FlagAction::Put(_) if groups.is_empty() => r.unlinked += 1,
                FlagAction::Put(data) => {
                    for g in &groups {
                        if self.put_flag(*g, data).await? {
                            r.flags_new += 1;
                            newly
                                .lock()
                                .expect("newly lock")
                                .entry(*g)
                                .or_default()
                                .push(data.clone());
                        } else {
                            r.flags_refreshed += 1;
                        }
                    }
                }
                FlagAction::Delete => {
                    let ops = flag_ops(plan, &groups);
                    r.flags_deleted += ops.len() as u64;
                    batch.extend(ops);
                }
                FlagAction::Keep => {}
            }
            r.reminders_written += u64::from(plan.put_reminder.is_some());
            r.reminders_deleted += plan.delete_reminders.len() as u64;
            batch.extend(reminder_ops(plan, run.now));
        }
        Ok((r, batch))
    }

    /// Put a flag; `true` when it is new or changed status (newly flagged).
    async fn put_flag(&self, group: GroupId, data: &FlagData) -> Result<bool, StoreError> {
        let item = data.to_item(group);
        let condition = Expr::new("attribute_not_exists(#pk) OR #status <> :status")
            .name("#pk", PK)
            .name("#status", flag_attr::STATUS)
            .string(":status", data.status.as_str());
        match self.store.put(item.clone(), Some(condition)).await? {
            WriteOutcome::Applied => Ok(true),
            WriteOutcome::ConditionFailed => {
                self.store.put(item, None).await?;
                Ok(false)
            }
        }
    }

    /// Process one page of reminders of `date`.
    async fn process_page(
        &self,
        date: NaiveDate,
        items: Vec<Item>,
        run: &JobRun,
        report: &mut TickReport,
        newly: &std::sync::Mutex<BTreeMap<GroupId, Vec<FlagData>>>,
    ) -> Result<(), StoreError> {
        let mut by_container: BTreeMap<ContainerId, Vec<FoodId>> = BTreeMap::new();
        for item in &items {
            match ItemKey::from_attributes(item) {
                Ok(ItemKey::ExpiryReminder {
                    container, food, ..
                }) => {
                    report.reminders += 1;
                    by_container.entry(container).or_default().push(food);
                }
                _ => report.malformed += 1,
            }
        }
        let results: Vec<Result<(TickReport, Vec<WriteOp>), StoreError>> = futures::stream::iter(
            by_container
                .into_iter()
                .map(|(c, foods)| self.process_container(date, c, foods, run, newly)),
        )
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
        let mut first_error = None;
        let mut batch = Vec::new();
        for res in results {
            match res {
                Ok((r, ops)) => {
                    report.add(&r);
                    batch.extend(ops);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        // Written even when a container failed: its reminders stay for the
        // next run, the others are done.
        if !batch.is_empty() {
            self.store.batch_write(batch).await?;
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Publish pending and new events; what fails stays pending.
    async fn publish(
        &self,
        today: NaiveDate,
        checkpoint: &mut TickCheckpoint,
        newly: BTreeMap<GroupId, Vec<FlagData>>,
        report: &mut TickReport,
    ) {
        let Some(bus) = &self.bus else {
            return;
        };
        let mut entries = std::mem::take(&mut checkpoint.pending_events);
        entries.extend(notification_entries(bus, today, self.rules.zone, &newly));
        if entries.is_empty() {
            return;
        }
        let pending = match self.publisher.publish(&entries).await {
            Ok(r) => {
                report.events_sent += r.sent as u64;
                for f in &r.failed {
                    tracing::warn!(code = %f.code, "expiry notification rejected; kept for the next tick");
                }
                r.failed.into_iter().map(|f| f.entry).collect()
            }
            Err(e) => {
                tracing::warn!(error = %e, events = entries.len(), "expiry notifications not sent; kept for the next tick");
                entries
            }
        };
        let overflow = pending.len().saturating_sub(MAX_PENDING_EVENTS);
        if overflow > 0 {
            tracing::warn!(
                dropped = overflow,
                "too many pending expiry notifications; dropping the oldest"
            );
        }
        checkpoint.pending_events = pending.into_iter().skip(overflow).collect();
        report.events_pending = checkpoint.pending_events.len() as u64;
    }
}

#[async_trait]
impl ScheduledJob<Job> for FlagExpiringJob {
    fn job(&self) -> Job {
        Job::FlagExpiring
    }

    async fn run(&self, run: &JobRun) -> Result<JobReport, HandlerError> {
        let store = self.store.as_ref();
        let today = self.rules.today(run.now);
        let mut checkpoint: TickCheckpoint = load_checkpoint(store, Job::FlagExpiring).await?;
        let first_run_start = today
            .checked_sub_days(Days::new(FIRST_RUN_LOOKBACK_DAYS))
            .unwrap_or(today);
        let start = checkpoint.next_date.unwrap_or(first_run_start).min(today);
        let mut report = TickReport {
            today: Some(today),
            from_date: Some(start),
            ..Default::default()
        };
        let newly = std::sync::Mutex::new(BTreeMap::new());
        let mut stopped_at = None;
        let mut failure = None;
        let mut date = start;
        'dates: loop {
            let mut page_start = None;
            loop {
                if !run.has_time() {
                    stopped_at = Some(date);
                    break 'dates;
                }
                let page = match store
                    .query_page(&Self::reminder_query(date), page_start)
                    .await
                {
                    Ok(p) => p,
                    Err(e) => {
                        failure = Some(e);
                        stopped_at = Some(date);
                        break 'dates;
                    }
                };
                report.pages += 1;
                let next = page.last_evaluated_key.clone();
                if let Err(e) = self
                    .process_page(date, page.items, run, &mut report, &newly)
                    .await
                {
                    failure = Some(e);
                    stopped_at = Some(date);
                    break 'dates;
                }
                match next {
                    Some(k) => page_start = Some(k),
                    None => break,
                }
            }
            report.dates_read += 1;
            if report.deferred > 0 {
                stopped_at = Some(date);
                break;
            }
            if date >= today {
                break;
            }
            date = date.succ_opt().unwrap_or(today);
        }
        let complete = stopped_at.is_none();
        checkpoint.next_date = Some(stopped_at.unwrap_or(today));
        checkpoint.updated_at = Some(datetime::format(run.now));
        let newly = newly.into_inner().expect("newly lock");
        self.publish(today, &mut checkpoint, newly, &mut report)
            .await;
        save_checkpoint(store, Job::FlagExpiring, &checkpoint).await?;
        if let Some(e) = failure {
            return Err(e.into());
        }
        let summary = format!(
            "flag-expiring {today} ({zone}): {dates} day(s) from {start}, {rem} reminder(s), {new} newly flagged, {refreshed} refreshed, {deleted} flag(s) removed, {unlinked} without group link{more}",
            zone = self.rules.zone.name(),
            dates = report.dates_read,
            rem = report.reminders,
            new = report.flags_new,
            refreshed = report.flags_refreshed,
            deleted = report.flags_deleted,
            unlinked = report.unlinked,
            more = if complete {
                String::new()
            } else {
                format!(
                    "; stopped early at {}, the next tick continues",
                    checkpoint.next_date.unwrap_or(today)
                )
            },
        );
        Ok(JobReport {
            job: Job::FlagExpiring,
            complete,
            summary,
            details: serde_json::to_value(&report).unwrap_or_default(),
        })
    }
}

// ---------------------------------------------------------------------------
// Backfill
// ---------------------------------------------------------------------------

/// Backfill progress, cumulative over runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BackfillProgress {
    /// Items evaluated by the Scan (every kind).
    pub scanned: u64,
    /// Containers planned.
    pub containers: u64,
    /// Flags written.
    pub flags: u64,
    /// Reminders written.
    pub reminders: u64,
    /// Containers skipped because they do not decode.
    pub unreadable: u64,
}

/// Called after every page with the cumulative progress (e.g. to move a
/// progress bar: `scanned` against the table's item count).
pub type ProgressHook = Arc<dyn Fn(BackfillProgress) + Send + Sync>;

/// The backfill's checkpoint (`WorkerCheckpoint`/`backfill`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BackfillCheckpoint {
    /// Where the Scan continues: the `PK`/`SK` of the last evaluated key.
    #[serde(default)]
    pub scan_position: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub progress: BackfillProgress,
    #[serde(default)]
    pub complete: bool,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
}

fn key_to_position(key: &Key) -> BTreeMap<String, String> {
    key.iter()
        .filter_map(|(k, v)| match v {
            AttributeValue::S(s) => Some((k.clone(), s.clone())),
            _ => None,
        })
        .collect()
}

fn position_to_key(pos: &BTreeMap<String, String>) -> Key {
    pos.iter()
        .map(|(k, v)| (k.clone(), AttributeValue::S(v.clone())))
        .collect()
}

/// The backfill (`backfill`): creates the flags and reminders the stream
/// would have created for the containers that existed before it.
pub struct BackfillJob {
    store: Arc<dyn Store>,
    rules: ExpiryRules,
    page_size: i32,
    max_pages_per_run: Option<u64>,
    progress: Option<ProgressHook>,
}

impl BackfillJob {
    pub fn new(deps: &JobDeps) -> Self {
        BackfillJob {
            store: deps.store.clone(),
            rules: ExpiryRules::from_config(&deps.config),
            page_size: DEFAULT_BACKFILL_PAGE,
            max_pages_per_run: None,
            progress: None,
        }
    }

    /// Items evaluated per Scan page (default [`DEFAULT_BACKFILL_PAGE`]).
    pub fn with_page_size(mut self, items: i32) -> Self {
        self.page_size = items.max(1);
        self
    }

    /// Stop after this many pages in one run, as if the deadline had come
    /// (bounds a CLI step; exercises resumption deterministically in tests).
    pub fn with_max_pages_per_run(mut self, pages: u64) -> Self {
        self.max_pages_per_run = Some(pages.max(1));
        self
    }

    /// Call `hook` after every page with the cumulative progress.
    pub fn with_progress(mut self, hook: ProgressHook) -> Self {
        self.progress = Some(hook);
        self
    }

    /// Forget the checkpoint: the next run scans from the start again.
    pub async fn reset(&self) -> Result<(), StoreError> {
        self.store
            .delete(&ItemKey::Checkpoint(Job::Backfill).to_attributes(), None)
            .await?;
        Ok(())
    }

    /// The saved progress (for a CLI's status line).
    pub async fn checkpoint(&self) -> Result<BackfillCheckpoint, HandlerError> {
        load_checkpoint(self.store.as_ref(), Job::Backfill).await
    }

    async fn plan_item(
        &self,
        item: Item,
        now: DateTime<Utc>,
    ) -> Result<(Vec<WriteOp>, BackfillProgress), StoreError> {
        let mut p = BackfillProgress::default();
        let container = match Entity::from_item(item) {
            Ok(Entity::Container(c)) => c,
            Ok(_) => return Ok((Vec::new(), p)),
            Err(e) => {
                tracing::warn!(error = %e, "backfill: container does not decode; skipped");
                p.unreadable += 1;
                return Ok((Vec::new(), p));
            }
        };
        p.containers += 1;
        let plans = plan_container_change(container.id, None, Some(&container), now, &self.rules);
        let needs_group = plans.iter().any(|pl| pl.flag != FlagAction::Keep);
        let groups = if needs_group {
            owning_groups(self.store.as_ref(), container.id).await?
        } else {
            Vec::new()
        };
        let ops = container_ops(&plans, &groups, now, &self.rules);
        for op in &ops {
            if let WriteOp::Put(i) = op {
                match ItemKey::from_attributes(i).map(|k| k.kind()) {
                    Ok(ItemKind::ExpiringFood) => p.flags += 1,
                    Ok(ItemKind::ExpiryReminder) => p.reminders += 1,
                    _ => {}
                }
            }
        }
        Ok((ops, p))
    }
}

#[async_trait]
impl ScheduledJob<Job> for BackfillJob {
    fn job(&self) -> Job {
        Job::Backfill
    }

    async fn run(&self, run: &JobRun) -> Result<JobReport, HandlerError> {
        let store = self.store.as_ref();
        let mut cp: BackfillCheckpoint = load_checkpoint(store, Job::Backfill).await?;
        if cp.complete {
            return Ok(JobReport {
                job: Job::Backfill,
                complete: true,
                summary: format!(
                    "backfill already complete ({} containers, {} flags, {} reminders); reset its checkpoint to run it again",
                    cp.progress.containers, cp.progress.flags, cp.progress.reminders
                ),
                details: serde_json::to_value(&cp).unwrap_or_default(),
            });
        }
        if cp.started_at.is_none() {
            cp.started_at = Some(datetime::format(run.now));
        }
        let (_, container_sk) = ItemKey::Container(ContainerId::default()).encode();
        let spec = ScanSpec {
            filter: Some(
                Expr::new("#sk = :container")
                    .name("#sk", SK)
                    .string(":container", container_sk),
            ),
            consistent: true,
            limit: Some(self.page_size),
            ..Default::default()
        };
        let mut pages = 0u64;
        let complete = loop {
            if !run.has_time() || self.max_pages_per_run.is_some_and(|m| pages >= m) {
                break false;
            }
            let start = cp.scan_position.as_ref().map(position_to_key);
            let page = store.scan_page(&spec, start).await?;
            pages += 1;
            cp.progress.scanned += page.scanned_count.max(0) as u64;
            let results: Vec<Result<(Vec<WriteOp>, BackfillProgress), StoreError>> =
                futures::stream::iter(page.items.into_iter().map(|i| self.plan_item(i, run.now)))
                    .buffer_unordered(CONCURRENCY)
                    .collect()
                    .await;
            let mut ops = Vec::new();
            for res in results {
                let (o, p) = res?;
                ops.extend(o);
                cp.progress.containers += p.containers;
                cp.progress.flags += p.flags;
                cp.progress.reminders += p.reminders;
                cp.progress.unreadable += p.unreadable;
            }
            if !ops.is_empty() {
                store.batch_write(ops).await?;
            }
            cp.scan_position = page.last_evaluated_key.as_ref().map(key_to_position);
            cp.complete = cp.scan_position.is_none();
            cp.updated_at = Some(datetime::format(run.now));
            save_checkpoint(store, Job::Backfill, &cp).await?;
            if let Some(hook) = &self.progress {
                hook(cp.progress);
            }
            if cp.complete {
                break true;
            }
        };
        let p = cp.progress;
        Ok(JobReport {
            job: Job::Backfill,
            complete,
            summary: format!(
                "backfill {}: {} item(s) scanned, {} container(s), {} flag(s), {} reminder(s) written ({} page(s) this run){}",
                if complete {
                    "complete"
                } else {
                    "stopped early"
                },
                p.scanned,
                p.containers,
                p.flags,
                p.reminders,
                pages,
                if complete {
                    ""
                } else {
                    "; the next run continues"
                }
            ),
            details: serde_json::to_value(&cp).unwrap_or_default(),
        })
    }
}

// ---------------------------------------------------------------------------
// Tests of the pure rules
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }
    fn d(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }
    fn utc() -> ExpiryRules {
        ExpiryRules {
            horizon_days: 3,
            zone: Tz::UTC,
            retention_days: 7,
        }
    }
    const C: &str = "5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d";
    const G: &str = "9b2e7c1a-4d3f-4a8b-9c0d-1e2f3a4b5c6d";
    fn cid() -> ContainerId {
        C.parse().unwrap()
    }
    fn food(n: u128, name: &str, expiry: Option<&str>) -> Food {
        Food {
            food_id: FoodId(uuid::Uuid::from_u128(n)),
            name: name.into(),
            unit: None,
            quantity: Some(1.0),
            category: Some("dairy".into()),
            expiry: expiry.map(t),
            created_at: t("2024-03-01T00:00:00Z"),
        }
    }
    fn container(foods: Vec<Food>) -> Container {
        Container {
            id: cid(),
            container_name: "Fridge".into(),
            foods,
            extra: Item::new(),
        }
    }

    #[test]
    fn horizon_boundaries_in_utc() {
        let r = utc();
        let now = t("2024-03-25T10:00:00Z");
        // The last instant of today + 3 is nearing; the next day is not.
        assert_eq!(
            r.classify(t("2024-03-28T23:59:59.999Z"), now),
            Window::Nearing {
                days_left: 3,
                expires_check_on: d("2024-03-29")
            }
        );
        assert_eq!(
            r.classify(t("2024-03-28T23:59:59Z"), now).status(),
            Some(FlagStatus::Nearing)
        );
        assert_eq!(
            r.classify(t("2024-03-29T00:00:00Z"), now),
            Window::Far {
                enters_on: d("2024-03-26")
            }
        );
        // Exactly at midnight: the day it starts; checked on that day.
        assert_eq!(
            r.classify(t("2024-03-28T00:00:00Z"), now),
            Window::Nearing {
                days_left: 3,
                expires_check_on: d("2024-03-28")
            }
        );
        // The instant itself counts as passed.
        assert_eq!(r.classify(now, now), Window::Expired { days_left: 0 });
        assert_eq!(
            r.classify(now + TimeDelta::milliseconds(1), now),
            Window::Nearing {
                days_left: 0,
                expires_check_on: d("2024-03-26")
            }
        );
        assert_eq!(
            r.classify(t("2024-03-24T23:59:59.999Z"), now),
            Window::Expired { days_left: -1 }
        );
        // Retention: 7 days after the expiry instant, no flag any more.
        assert_eq!(r.classify(t("2024-03-18T10:00:00Z"), now), Window::Retired);
        assert_eq!(
            r.classify(t("2024-03-18T10:00:00.001Z"), now),
            Window::Expired { days_left: -7 }
        );
    }

    #[test]
    fn horizon_boundaries_in_another_zone() {
        let r = ExpiryRules {
            zone: chrono_tz::Asia::Tokyo,
            ..utc()
        };
        // 16:00 UTC on the 25th is 01:00 on the 26th in Tokyo.
        let now = t("2024-03-25T16:00:00Z");
        assert_eq!(r.today(now), d("2024-03-26"));
        // 2024-03-29 23:59:59 JST is nearing, 2024-03-30 00:00 JST is not.
        assert_eq!(
            r.classify(t("2024-03-29T14:59:59Z"), now),
            Window::Nearing {
                days_left: 3,
                expires_check_on: d("2024-03-30")
            }
        );
        assert_eq!(
            r.classify(t("2024-03-29T15:00:00Z"), now),
            Window::Far {
                enters_on: d("2024-03-27")
            }
        );
        // Midnight in Tokyo is the start of its day there.
        assert_eq!(
            r.expired_check_on(t("2024-03-29T15:00:00Z")),
            d("2024-03-30")
        );
        // The same instants in UTC fall on other days.
        assert_eq!(utc().today(now), d("2024-03-25"));
        assert_eq!(
            utc().classify(t("2024-03-29T14:59:59Z"), now),
            Window::Far {
                enters_on: d("2024-03-26")
            }
        );
    }

    #[test]
    fn days_are_calendar_days_across_dst() {
        let r = ExpiryRules {
            zone: chrono_tz::America::New_York,
            ..utc()
        };
        // 2024-03-10 has 23 hours in New York.
        let now = t("2024-03-07T05:30:00Z"); // 00:30 EST on the 7th
        assert_eq!(r.today(now), d("2024-03-07"));
        // 23:59 EDT on the 10th = 03:59 UTC on the 11th.
        assert_eq!(
            r.classify(t("2024-03-11T03:59:00Z"), now).status(),
            Some(FlagStatus::Nearing)
        );
        // 00:00 EDT on the 11th = 04:00 UTC.
        assert_eq!(
            r.classify(t("2024-03-11T04:00:00Z"), now),
            Window::Far {
                enters_on: d("2024-03-08")
            }
        );
        assert_eq!(
            r.expired_check_on(t("2024-03-11T04:00:00Z")),
            d("2024-03-11")
        );
    }

    #[test]
    fn reminder_dates_depend_on_the_expiry_only() {
        let r = utc();
        assert_eq!(
            r.reminder_dates(t("2024-03-28T10:00:00Z")),
            vec![d("2024-03-25"), d("2024-03-29")]
        );
        assert_eq!(
            r.reminder_dates(t("2024-03-28T00:00:00Z")),
            vec![d("2024-03-25"), d("2024-03-28")]
        );
        let r0 = ExpiryRules {
            horizon_days: 0,
            ..r
        };
        assert_eq!(
            r0.reminder_dates(t("2024-03-28T00:00:00Z")),
            vec![d("2024-03-28")]
        );
        assert!(r.reminder_dates(t("9999-12-31T10:00:00Z")).len() == 1);
    }

    #[test]
    fn a_far_food_can_only_have_its_enters_window_reminder() {
        let r = utc();
        let expiry = t("2024-03-28T10:00:00Z");
        // Far until 2024-03-25 (horizon 3): only the enters-window date.
        assert_eq!(
            r.reminder_dates_at(expiry, t("2024-03-24T23:59:59Z")),
            vec![d("2024-03-25")]
        );
        assert_eq!(
            r.reminder_dates(expiry),
            vec![d("2024-03-25"), d("2024-03-29")]
        );
        // From the day it enters the window, only the dates after today: a
        // reminder dated today or before is the tick's, which runs just
        // after midnight and has consumed it (or will, re-reading today's
        // date on its next run).
        assert_eq!(
            r.reminder_dates_at(expiry, t("2024-03-25T00:00:00Z")),
            vec![d("2024-03-29")]
        );
        assert_eq!(
            r.reminder_dates_at(expiry, t("2024-03-28T12:00:00Z")),
            vec![d("2024-03-29")]
        );
        assert!(
            r.reminder_dates_at(expiry, t("2024-03-29T08:00:00Z"))
                .is_empty()
        );
        assert!(
            r.reminder_dates_at(expiry, t("2024-05-01T00:00:00Z"))
                .is_empty()
        );
        // Removing a far food deletes its enters-window reminder; a food
        // that entered the window today, its expires reminder.
        let milk = || food(1, "milk", Some("2024-03-28T10:00:00Z"));
        let far = plan_container_change(
            cid(),
            Some(&container(vec![milk()])),
            Some(&container(vec![])),
            t("2024-03-20T00:00:00Z"),
            &r,
        );
        assert_eq!(far[0].delete_reminders, vec![d("2024-03-25")]);
        let nearing = plan_container_change(
            cid(),
            Some(&container(vec![milk()])),
            Some(&container(vec![])),
            t("2024-03-25T06:00:00Z"),
            &r,
        );
        assert_eq!(nearing[0].delete_reminders, vec![d("2024-03-29")]);
    }

    #[test]
    fn added_foods_are_flagged_or_reminded() {
        let r = utc();
        let now = t("2024-03-25T10:00:00Z");
        let c = container(vec![
            food(1, "Milk", Some("2024-03-27T00:00:00Z")),
            food(2, "Rice", Some("2024-04-30T00:00:00Z")),
            food(3, "Salt", None),
            food(4, "Eggs", Some("2024-03-24T00:00:00Z")),
        ]);
        let plans = plan_container_change(cid(), None, Some(&c), now, &r);
        assert_eq!(plans.len(), 3, "NULL expiry plans nothing");
        let FlagAction::Put(milk) = &plans[0].flag else {
            panic!("{:?}", plans[0])
        };
        assert_eq!((milk.status, milk.days_left), (FlagStatus::Nearing, 2));
        assert_eq!(
            plans[0].put_reminder,
            Some(Reminder {
                date: d("2024-03-27"),
                reason: ReminderReason::Expires
            })
        );
        assert_eq!(plans[1].flag, FlagAction::Keep);
        assert_eq!(
            plans[1].put_reminder,
            Some(Reminder {
                date: d("2024-04-27"),
                reason: ReminderReason::EntersWindow
            })
        );
        let FlagAction::Put(eggs) = &plans[2].flag else {
            panic!()
        };
        assert_eq!((eggs.status, eggs.days_left), (FlagStatus::Expired, -1));
        assert_eq!(plans[2].put_reminder, None);
        assert!(plans.iter().all(|p| p.delete_reminders.is_empty()));
    }

    #[test]
    fn removed_and_changed_foods_take_flags_and_reminders_away() {
        let r = utc();
        let now = t("2024-03-25T10:00:00Z");
        let old = container(vec![
            food(1, "Milk", Some("2024-03-27T10:00:00Z")),
            food(2, "Rice", Some("2024-04-30T00:00:00Z")),
            food(3, "Tofu", Some("2024-03-26T00:00:00Z")),
        ]);
        let new = container(vec![
            food(2, "Rice", Some("2024-05-30T00:00:00Z")),
            food(3, "Tofu", None),
        ]);
        let plans = plan_container_change(cid(), Some(&old), Some(&new), now, &r);
        assert_eq!(plans.len(), 3);
        // Milk removed: flag and its expires reminder; its enters-window
        // reminder (2024-03-24) is behind today, the tick's to consume.
        assert_eq!(plans[0].flag, FlagAction::Delete);
        assert_eq!(plans[0].delete_reminders, vec![d("2024-03-28")]);
        // Rice moved further: it was far, so no flag to delete and no
        // expires reminder yet; the enters-window reminder moves.
        assert_eq!(plans[1].flag, FlagAction::Keep);
        assert_eq!(plans[1].delete_reminders, vec![d("2024-04-27")]);
        assert_eq!(plans[1].put_reminder.unwrap().date, d("2024-05-27"));
        // Tofu's expiry cleared: flag and reminders go.
        assert_eq!(plans[2].flag, FlagAction::Delete);
        assert_eq!(plans[2].put_reminder, None);
        // The container removed: every food with an expiry is unplanned.
        let gone = plan_container_change(cid(), Some(&old), None, now, &r);
        assert_eq!(gone.len(), 3);
        assert!(gone[..2].iter().all(|p| p.put_reminder.is_none()));
    }

    #[test]
    fn a_rename_inside_the_window_rewrites_only_the_flag() {
        let r = utc();
        let now = t("2024-03-25T10:00:00Z");
        let old = container(vec![
            food(1, "Milk", Some("2024-03-27T00:00:00Z")),
            food(2, "Rice", Some("2024-04-30T00:00:00Z")),
        ]);
        let new = container(vec![
            food(1, "Oat milk", Some("2024-03-27T00:00:00Z")),
            food(2, "Brown rice", Some("2024-04-30T00:00:00Z")),
        ]);
        let plans = plan_container_change(cid(), Some(&old), Some(&new), now, &r);
        assert_eq!(plans.len(), 1, "a far food's name is in no worker item");
        let FlagAction::Put(f) = &plans[0].flag else {
            panic!()
        };
        assert_eq!(f.name, "Oat milk");
        assert!(plans[0].delete_reminders.is_empty() && plans[0].put_reminder.is_none());
    }

    #[test]
    fn a_new_container_whose_link_is_in_its_batch_keeps_only_its_reminders() {
        let r = utc();
        let now = t("2024-03-25T10:00:00Z");
        let c = container(vec![
            food(1, "Milk", Some("2024-03-27T00:00:00Z")),
            food(2, "Rice", Some("2024-04-30T00:00:00Z")),
            food(3, "Ham", Some("2024-03-24T00:00:00Z")),
        ]);
        let plans = plan_container_change(cid(), None, Some(&c), now, &r);
        assert_eq!(plans.len(), 3);
        let left = leave_flags_to_link(plans.clone());
        // Milk keeps its expires reminder, Rice its enters-window one; Ham,
        // expired, had only its flag to write.
        assert_eq!(left.len(), 2);
        assert!(left.iter().all(|p| p.flag == FlagAction::Keep));
        assert_eq!(
            left.iter().map(|p| p.put_reminder).collect::<Vec<_>>(),
            vec![plans[0].put_reminder, plans[1].put_reminder]
        );
        // Without a group, nothing but those reminders is written: no flag,
        // no retry reminder for today.
        let ops = container_ops(&left, &[], now, &r);
        assert_eq!(ops.len(), 2);
        assert!(ops.iter().all(|op| matches!(op, WriteOp::Put(item)
            if matches!(ItemKey::from_attributes(item), Ok(ItemKey::ExpiryReminder { date, .. }) if date > r.today(now)))));
    }

    #[test]
    fn moving_an_expiry_keeps_a_reminder_that_is_still_needed() {
        let r = utc();
        let now = t("2024-03-25T10:00:00Z");
        // Same day, another hour: the enters-window date is shared.
        let old = container(vec![food(1, "Rice", Some("2024-04-30T00:00:00Z"))]);
        let new = container(vec![food(1, "Rice", Some("2024-04-30T12:00:00Z"))]);
        let plans = plan_container_change(cid(), Some(&old), Some(&new), now, &r);
        assert_eq!(plans[0].put_reminder.unwrap().date, d("2024-04-27"));
        // Far, so its only possible reminder is the one it keeps.
        assert!(plans[0].delete_reminders.is_empty());
        // Nearing: the old expires reminder goes, the new one is put (the
        // enters-window reminder, 2024-04-27, is behind today: the tick's).
        let now = t("2024-04-28T10:00:00Z");
        let plans = plan_container_change(cid(), Some(&old), Some(&new), now, &r);
        assert_eq!(plans[0].put_reminder.unwrap().date, d("2024-05-01"));
        assert_eq!(plans[0].delete_reminders, vec![d("2024-04-30")]);
    }

    #[test]
    fn the_tick_re_decides_from_the_current_container() {
        let r = utc();
        let c = cid();
        let f = FoodId(uuid::Uuid::from_u128(1));
        let day = d("2024-03-25");
        let now = t("2024-03-25T00:05:00Z");
        // Entering the window: flag, next reminder, processed one deleted.
        let milk = food(1, "Milk", Some("2024-03-28T09:00:00Z"));
        let p = plan_reminder(day, c, f, Some(&milk), now, &r);
        assert!(
            matches!(&p.flag, FlagAction::Put(x) if x.status == FlagStatus::Nearing && x.days_left == 3)
        );
        assert_eq!(p.put_reminder.unwrap().date, d("2024-03-29"));
        assert_eq!(p.delete_reminders, vec![day]);
        // Expiry day passed: expired, no further reminder.
        let p = plan_reminder(
            d("2024-03-29"),
            c,
            f,
            Some(&milk),
            t("2024-03-29T00:05:00Z"),
            &r,
        );
        assert!(
            matches!(&p.flag, FlagAction::Put(x) if x.status == FlagStatus::Expired && x.days_left == -1)
        );
        assert_eq!(p.put_reminder, None);
        // The food was moved out by the service: flag removed, new reminder.
        let later = food(1, "Milk", Some("2024-04-28T09:00:00Z"));
        let p = plan_reminder(day, c, f, Some(&later), now, &r);
        assert_eq!(p.flag, FlagAction::Delete);
        assert_eq!(p.put_reminder.unwrap().date, d("2024-04-25"));
        // Gone: flag removed, reminder deleted.
        let p = plan_reminder(day, c, f, None, now, &r);
        assert_eq!(
            (p.flag, p.put_reminder, p.delete_reminders),
            (FlagAction::Delete, None, vec![day])
        );
    }

    #[test]
    fn without_a_group_the_flag_becomes_a_retry_reminder_for_today() {
        let r = utc();
        let now = t("2024-03-25T10:00:00Z");
        let c = container(vec![food(1, "Milk", Some("2024-03-27T00:00:00Z"))]);
        let plans = plan_container_change(cid(), None, Some(&c), now, &r);
        let ops = container_ops(&plans, &[], now, &r);
        let keys: Vec<ItemKey> = ops
            .iter()
            .map(|op| match op {
                WriteOp::Put(i) => ItemKey::from_attributes(i).unwrap(),
                WriteOp::Delete(k) => panic!("unexpected delete {k:?}"),
            })
            .collect();
        let f = FoodId(uuid::Uuid::from_u128(1));
        assert_eq!(
            keys,
            vec![
                ItemKey::ExpiryReminder {
                    date: d("2024-03-27"),
                    container: cid(),
                    food: f
                },
                ItemKey::ExpiryReminder {
                    date: d("2024-03-25"),
                    container: cid(),
                    food: f
                },
            ]
        );
        let g: GroupId = G.parse().unwrap();
        let linked = container_ops(&plans, &[g], now, &r);
        assert_eq!(linked.len(), 2);
        let WriteOp::Put(flag) = &linked[0] else {
            panic!()
        };
        assert_eq!(
            ItemKey::from_attributes(flag).unwrap(),
            ItemKey::ExpiringFood {
                group: g,
                container: cid(),
                food: f
            }
        );
    }

    #[test]
    fn worker_items_carry_no_indexed_attribute() {
        let r = utc();
        let now = t("2024-03-25T10:00:00Z");
        let c = container(vec![
            food(1, "Milk", Some("2024-03-27T00:00:00Z")),
            food(2, "Rice", Some("2024-04-30T00:00:00Z")),
        ]);
        let g: GroupId = G.parse().unwrap();
        let plans = plan_container_change(cid(), None, Some(&c), now, &r);
        let mut items: Vec<Item> = container_ops(&plans, &[g], now, &r)
            .into_iter()
            .filter_map(|op| match op {
                WriteOp::Put(i) => Some(i),
                WriteOp::Delete(_) => None,
            })
            .collect();
        let mut cp: Item = serde_dynamo::to_item(TickCheckpoint {
            next_date: Some(d("2024-03-25")),
            ..Default::default()
        })
        .unwrap();
        cp.extend(ItemKey::Checkpoint(Job::FlagExpiring).to_attributes());
        items.push(cp);
        assert_eq!(items.len(), 4);
        for item in &items {
            for a in attr::INDEXED {
                assert!(!item.contains_key(a), "{a} in {item:?}");
            }
        }
        let flag = &items[0];
        assert_eq!(flag[flag_attr::STATUS], AttributeValue::S("nearing".into()));
        assert_eq!(flag[flag_attr::DAYS_LEFT], AttributeValue::N("2".into()));
        assert_eq!(
            flag[flag_attr::EXPIRY_DATE],
            AttributeValue::S("2024-03-27".into())
        );
        assert_eq!(
            flag[TTL_ATTRIBUTE],
            AttributeValue::N(t("2024-04-03T00:00:00Z").timestamp().to_string())
        );
    }

    #[test]
    fn one_event_per_group_with_exact_detail() {
        let r = utc();
        let now = t("2024-03-25T00:05:00Z");
        let g: GroupId = G.parse().unwrap();
        let milk = food(2, "Milk", Some("2024-03-28T00:00:00Z"));
        let eggs = food(1, "Eggs", Some("2024-03-24T12:00:00Z"));
        let flags = vec![
            FlagData::new(
                cid(),
                &milk,
                milk.expiry.unwrap(),
                FlagStatus::Nearing,
                now,
                &r,
            ),
            FlagData::new(
                cid(),
                &eggs,
                eggs.expiry.unwrap(),
                FlagStatus::Expired,
                now,
                &r,
            ),
        ];
        let newly = BTreeMap::from([(g, flags)]);
        let entries = notification_entries("bus", d("2024-03-25"), Tz::UTC, &newly);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].source, "nishiki.worker");
        assert_eq!(entries[0].detail_type, "FoodsNearingExpiry");
        assert_eq!(entries[0].event_bus_name, "bus");
        let detail: serde_json::Value = serde_json::from_str(&entries[0].detail).unwrap();
        assert_eq!(
            detail,
            serde_json::json!({
                "date": "2024-03-25", "timeZone": "UTC", "groupId": G,
                "foods": [
                    {"containerId": C, "foodId": "00000000-0000-0000-0000-000000000001",
                     "name": "Eggs", "expiry": "2024-03-24T12:00:00.000Z", "expiryDate": "2024-03-24",
                     "status": "expired", "daysLeft": -1},
                    {"containerId": C, "foodId": "00000000-0000-0000-0000-000000000002",
                     "name": "Milk", "expiry": "2024-03-28T00:00:00.000Z", "expiryDate": "2024-03-28",
                     "status": "nearing", "daysLeft": 3},
                ]
            })
        );
        let many = BTreeMap::from([(
            g,
            (0..250)
                .map(|i| {
                    let f = food(i, "X", Some("2024-03-28T00:00:00Z"));
                    FlagData::new(cid(), &f, f.expiry.unwrap(), FlagStatus::Nearing, now, &r)
                })
                .collect(),
        )]);
        assert_eq!(
            notification_entries("bus", d("2024-03-25"), Tz::UTC, &many).len(),
            3
        );
    }

    fn arb_food() -> impl Strategy<Value = Food> {
        (
            any::<u128>(),
            "[A-Za-z ]{1,30}",
            proptest::option::of("[a-z]{1,5}"),
            proptest::option::of(0.0f64..1000.0),
            proptest::option::of("[a-z]{1,10}"),
            proptest::option::of(-20i64 * 86_400_000..60 * 86_400_000),
        )
            .prop_map(|(id, name, unit, quantity, category, offset)| Food {
                food_id: FoodId(uuid::Uuid::from_u128(id)),
                name,
                unit,
                quantity,
                category,
                expiry: offset.map(|ms| t("2024-03-25T00:00:00Z") + TimeDelta::milliseconds(ms)),
                created_at: t("2024-03-01T00:00:00Z"),
            })
    }

    proptest! {
        #[test]
        fn edits_that_keep_expiry_and_name_plan_nothing(
            foods in proptest::collection::vec(arb_food(), 0..12),
            edits in proptest::collection::vec((proptest::option::of("[a-z]{1,5}"), proptest::option::of(0.0f64..99.0), proptest::option::of("[a-z]{1,8}")), 12),
            rename in "[A-Za-z ]{1,20}",
            now_offset in 0i64..40 * 86_400,
            horizon in 0u32..10,
            shuffle_seed in any::<u64>(),
        ) {
            let r = ExpiryRules { horizon_days: horizon, ..utc() };
            let now = t("2024-03-25T00:00:00Z") + TimeDelta::seconds(now_offset);
            let old = container(foods.clone());
            // Identical lists plan nothing.
            prop_assert!(plan_container_change(cid(), Some(&old), Some(&old), now, &r).is_empty());
            // Quantity / Unit / Category edits, a container rename and a new order plan nothing.
            let mut edited: Vec<Food> = foods
                .iter()
                .zip(edits.iter())
                .map(|(f, (unit, quantity, category))| Food {
                    unit: unit.clone(),
                    quantity: *quantity,
                    category: category.clone(),
                    ..f.clone()
                })
                .collect();
            let len = edited.len().max(1);
            edited.rotate_left((shuffle_seed as usize) % len);
            let mut new = container(edited);
            new.container_name = rename;
            prop_assert!(plan_container_change(cid(), Some(&old), Some(&new), now, &r).is_empty());
        }

        /// Whatever reminder the stream or a tick wrote for a food at `t0`,
        /// a removal planned at any later `t1` deletes it, or, when it is
        /// dated on or before the day of `t1`, leaves it to the tick, whose
        /// plan for a food that is gone deletes it and writes nothing else.
        #[test]
        fn a_removal_deletes_every_reminder_written_before_it(
            food in arb_food(),
            t0_offset in 0i64..40 * 86_400,
            later in 0i64..40 * 86_400,
            horizon in 0u32..8,
        ) {
            let r = ExpiryRules { horizon_days: horizon, ..utc() };
            let t0 = t("2024-03-25T00:00:00Z") + TimeDelta::seconds(t0_offset);
            let t1 = t0 + TimeDelta::seconds(later);
            let c = container(vec![food.clone()]);
            let mut written: Vec<NaiveDate> = plan_container_change(cid(), None, Some(&c), t0, &r)
                .iter()
                .filter_map(|p| p.put_reminder.map(|r| r.date))
                .collect();
            let tick = plan_reminder(r.today(t0), cid(), food.food_id, Some(&food), t0, &r);
            written.extend(tick.put_reminder.map(|r| r.date));
            let removal = plan_container_change(cid(), Some(&c), None, t1, &r);
            for date in written {
                if date > r.today(t1) {
                    prop_assert!(
                        removal.iter().any(|p| p.delete_reminders.contains(&date)),
                        "reminder {} written at {} survives a removal at {}", date, t0, t1
                    );
                } else {
                    prop_assert!(removal.iter().all(|p| !p.delete_reminders.contains(&date)));
                    let late_tick = plan_reminder(date, cid(), food.food_id, None, t1, &r);
                    prop_assert_eq!(late_tick.delete_reminders, vec![date]);
                    prop_assert!(late_tick.put_reminder.is_none());
                    prop_assert!(!matches!(late_tick.flag, FlagAction::Put(_)));
                }
            }
        }

        #[test]
        fn every_food_with_an_expiry_is_flagged_or_reminded(food in arb_food(), now_offset in 0i64..40 * 86_400) {
            let r = utc();
            let now = t("2024-03-25T00:00:00Z") + TimeDelta::seconds(now_offset);
            let c = container(vec![food.clone()]);
            let plans = plan_container_change(cid(), None, Some(&c), now, &r);
            match food.expiry.map(|e| r.classify(e, now)) {
                None | Some(Window::Retired) => prop_assert!(plans.is_empty()),
                Some(w) => {
                    prop_assert_eq!(plans.len(), 1);
                    prop_assert_eq!(matches!(plans[0].flag, FlagAction::Put(_)), w.status().is_some());
                    if let Some(rem) = plans[0].put_reminder {
                        prop_assert!(rem.date > r.today(now), "reminders are in the future");
                        prop_assert!(r.reminder_dates(food.expiry.unwrap()).contains(&rem.date));
                    }
                }
            }
        }
    }
}
