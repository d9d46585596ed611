//! The pure rules of the expiry job: the calendar (where a food stands on a
//! given day, its reminder dates), the flag and reminder plans of a
//! container change or of a reminder, the writes they make, the decision
//! for one stream change, and the notification entries. No I/O here (see
//! the module docs of [`super`] for the whole job).

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Days, NaiveDate, TimeDelta, Utc};
use chrono_tz::Tz;
use serde::Serialize;

use crate::config::Config;
use crate::datetime;
use crate::items::{Container, Entity, Food, Item};
use crate::keys::{ContainerId, FoodId, GroupId, ItemKey};
use crate::worker::{BatchFacts, Change};
use worker_engine::EventEntry;
use worker_engine::store::WriteOp;
use worker_engine::stream::ChangeKind;

/// The worker's TTL attribute (Number, epoch seconds); the same name the
/// invitation job uses, so the table has one TTL setting.
pub const TTL_ATTRIBUTE: &str = "WorkerExpiresAt";
/// `source` of the notification events.
pub const EVENT_SOURCE: &str = "nishiki.worker";
/// `detail-type` of the notification events.
pub const DETAIL_TYPE: &str = "FoodsNearingExpiry";
/// At most this many foods in one event (an entry must stay under 256 KB).
pub const MAX_FOODS_PER_EVENT: usize = 100;

/// Attribute names of the flag item.
pub mod flag_attr {
    /// The food's name, copied from the container.
    pub const NAME: &str = crate::items::attr::FOOD_NAME;
    /// The food's expiry instant (canonical datetime).
    pub const EXPIRY: &str = "Expiry";
    /// The expiry's date in the zone (`YYYY-MM-DD`).
    pub const EXPIRY_DATE: &str = "ExpiryDate";
    /// `nearing` or `expired` ([`super::FlagStatus`]).
    pub const STATUS: &str = "Status";
    /// `ExpiryDate - CheckedOn`, in days (a Number; 0 or less once
    /// expired).
    pub const DAYS_LEFT: &str = "DaysLeft";
    /// The date the flag was computed for (`YYYY-MM-DD`).
    pub const CHECKED_ON: &str = "CheckedOn";
    /// When the flag was written (canonical datetime).
    pub const FLAGGED_AT: &str = "FlaggedAt";
}

/// Attribute names of the reminder item.
pub mod reminder_attr {
    /// Why the reminder exists ([`super::ReminderReason`]), for people
    /// reading the table.
    pub const REASON: &str = "Reason";
    /// When it was written (canonical datetime), for people too.
    pub const WRITTEN_AT: &str = "WrittenAt";
}

const DATE_FORMAT: &str = "%Y-%m-%d";

// ---------------------------------------------------------------------------
// The calendar (pure)
// ---------------------------------------------------------------------------

/// Horizon, zone and retention: everything the decisions depend on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpiryRules {
    /// `h`: a food expiring up to the end of today + `h` days is nearing
    /// (`EXPIRY_HORIZON_DAYS`).
    pub horizon_days: u32,
    /// The zone days are counted in (`EXPIRY_TIME_ZONE`).
    pub zone: Tz,
    /// Days after its expiry a food's flag is retired
    /// (`FLAG_RETENTION_DAYS`).
    pub retention_days: u32,
}

/// Where a food stands on a given day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// Outside the horizon; enters it on `enters_on`.
    Far {
        /// The date it becomes nearing: `expiry date - h`.
        enters_on: NaiveDate,
    },
    /// Inside the horizon, not passed; re-checked on `expires_check_on`.
    Nearing {
        /// Expiry date minus today, in days (0 to `h`).
        days_left: i64,
        /// The first day whose start is at or after the expiry instant
        /// ([`ExpiryRules::expired_check_on`]).
        expires_check_on: NaiveDate,
    },
    /// The expiry instant has passed (`days_left` <= 0).
    Expired {
        /// Expiry date minus today, in days (0 or less).
        days_left: i64,
    },
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
    /// The rules of the expiry job's settings ([`crate::config::JobsSettings::expiry`]).
    pub fn from_config(config: &Config) -> Self {
        ExpiryRules {
            horizon_days: config.expiry.horizon_days,
            zone: config.expiry.time_zone,
            retention_days: config.expiry.flag_retention_days,
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
    /// Not expired yet, expiring within the horizon.
    Nearing,
    /// The expiry instant has passed (the flag stays until retired).
    Expired,
}

impl FlagStatus {
    /// The stored `Status`: `nearing` or `expired`.
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
    /// The food's container (in the flag's `SK`).
    pub container: ContainerId,
    /// The food (in the flag's `SK`).
    pub food: FoodId,
    /// [`flag_attr::NAME`]: the food's name as the container holds it.
    pub name: String,
    /// [`flag_attr::EXPIRY`]: the food's expiry instant.
    pub expiry: DateTime<Utc>,
    /// [`flag_attr::EXPIRY_DATE`]: the expiry's date in the zone.
    pub expiry_date: NaiveDate,
    /// [`flag_attr::STATUS`].
    pub status: FlagStatus,
    /// [`flag_attr::DAYS_LEFT`]: `expiry_date - checked_on`, in days.
    pub days_left: i64,
    /// [`flag_attr::CHECKED_ON`]: today, when the flag was decided.
    pub checked_on: NaiveDate,
    /// [`flag_attr::FLAGGED_AT`]: `now`, when the flag was decided.
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
    /// The stored [`reminder_attr::REASON`] (`enters-window`, `expires`,
    /// `retry-unlinked`).
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
    /// The day the tick looks at the food (the reminder's partition).
    pub date: NaiveDate,
    /// Why.
    pub reason: ReminderReason,
}

/// Everything planned for one food of one container.
#[derive(Debug, Clone, PartialEq)]
pub struct FoodPlan {
    /// The food's container.
    pub container: ContainerId,
    /// The food.
    pub food: FoodId,
    /// What happens to its flag, in every owning group.
    pub flag: FlagAction,
    /// The dates of its reminders to delete (one already gone is no
    /// error).
    pub delete_reminders: Vec<NaiveDate>,
    /// The reminder to put, if the food needs one.
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

/// A list's foods sorted by id, the first of each id in list order kept
/// (the stable sort keeps a repeated id's foods in list order, and
/// `dedup` the first of them): looked up by [`food_by_id`].
fn by_id(foods: &[Food]) -> Vec<(FoodId, &Food)> {
    let mut by_id: Vec<_> = foods.iter().map(|f| (f.food_id, f)).collect();
    by_id.sort_by_key(|(id, _)| *id);
    by_id.dedup_by_key(|(id, _)| *id);
    by_id
}

/// The food `id` names in a list sorted by [`by_id`].
fn food_by_id<'a>(by_id: &[(FoodId, &'a Food)], id: FoodId) -> Option<&'a Food> {
    let at = by_id.binary_search_by_key(&id, |(id, _)| *id).ok()?;
    Some(by_id[at].1)
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
    let old_foods = old.map_or(&[][..], |c| &c.foods);
    let new_foods = new.map_or(&[][..], |c| &c.foods);
    let old_by_id = by_id(old_foods);
    let new_by_id = by_id(new_foods);
    // Each id once, at its first food: the old list's ids in order, then
    // the new list's that the old lacks.
    let first = |by_id: &[(FoodId, &Food)], f: &Food| {
        food_by_id(by_id, f.food_id).is_some_and(|kept| std::ptr::eq(kept, f))
    };
    let ids = old_foods
        .iter()
        .filter(|f| first(&old_by_id, f))
        .chain(
            new_foods
                .iter()
                .filter(|f| first(&new_by_id, f) && food_by_id(&old_by_id, f.food_id).is_none()),
        )
        .map(|f| f.food_id);
    let mut plans = Vec::new();
    for id in ids {
        let o = food_by_id(&old_by_id, id);
        let n = food_by_id(&new_by_id, id);
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

/// The flag writes of [`container_ops`] (written guarded by the container
/// as read and its links).
pub fn container_flag_ops(plans: &[FoodPlan], groups: &[GroupId]) -> Vec<WriteOp> {
    plans.iter().flat_map(|p| flag_ops(p, groups)).collect()
}

/// The reminder writes of [`container_ops`] (hints for the tick, which
/// re-reads the container: written unguarded).
pub fn container_reminder_ops(
    plans: &[FoodPlan],
    groups: &[GroupId],
    now: DateTime<Utc>,
    rules: &ExpiryRules,
) -> Vec<WriteOp> {
    let flags = container_flag_ops(plans, groups);
    container_ops(plans, groups, now, rules)
        .into_iter()
        .filter(|op| !flags.contains(op))
        .collect()
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
// Stream plans (pure)
// ---------------------------------------------------------------------------

/// The plans of a container record, made against the container as it is
/// now (`current`, `None` when gone) rather than the record's new image:
/// from `before` (the record's old image) to `current`. Whatever order the
/// records of a container are handled in, and however often, the record
/// handled last leaves the flags of the foods the container holds then: a
/// food whose flag an earlier record wrote from a state that changed since
/// is in the old image of the record of that change, so that record plans
/// it again. A stale removal (the container written again since) deletes
/// exactly the flags of the foods that are no longer there.
pub fn replan_from_current(
    id: ContainerId,
    before: Option<&Container>,
    current: Option<&Container>,
    flags_by_link: bool,
    now: DateTime<Utc>,
    rules: &ExpiryRules,
) -> Vec<FoodPlan> {
    let plans = plan_container_change(id, before, current, now, rules);
    if flags_by_link {
        leave_flags_to_link(plans)
    } else {
        plans
    }
}

fn container_of(entity: &Option<Entity>) -> Option<&Container> {
    match entity {
        Some(Entity::Container(c)) => Some(c),
        _ => None,
    }
}

/// The expiry job's decision for one stream change (no I/O): what
/// [`ExpiryHandler`](super::ExpiryHandler) then reads and writes.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamPlan<'a> {
    /// A container changed: its foods' plans from the record's own images
    /// (empty: nothing to write, nothing to read). Otherwise the handler
    /// reads the container as it is now and plans again from `before` (the
    /// record's old image) to that ([`replan_from_current`]): the record
    /// says which foods to look at, the current item says what their flags
    /// must be. `flags_by_link`: a new container whose link's INSERT is in
    /// the same batch; its plans keep only the reminders
    /// ([`leave_flags_to_link`]) and it needs no group.
    Container {
        /// The container.
        id: ContainerId,
        /// Whether the record removed it.
        removal: bool,
        /// The record's old image, if any.
        before: Option<&'a Container>,
        /// The foods' plans from the record's images.
        plans: Vec<FoodPlan>,
        /// Whether its link's INSERT in the same batch places the flags.
        flags_by_link: bool,
    },
    /// A container link was inserted: place the container's flags in the
    /// group (after reading the container).
    PlaceFlags {
        /// The group the link is in.
        group: GroupId,
        /// The linked container.
        container: ContainerId,
    },
    /// A container link was removed: remove the container's flags from the
    /// group (unless the link exists again).
    RemoveFlags {
        /// The group the link was in.
        group: GroupId,
        /// The container it linked.
        container: ContainerId,
    },
    /// Nothing to do, and why.
    Nothing(&'static str),
}

/// Decide what a stream change of a batch with these facts asks of the
/// expiry job, at `now`.
pub fn plan_stream_change<'a>(
    change: &'a Change,
    now: DateTime<Utc>,
    rules: &ExpiryRules,
    batch: &BatchFacts,
) -> StreamPlan<'a> {
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
                before: old,
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
// Tests of the pure rules
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use crate::items::attr;
    use crate::jobs::expiry::TickCheckpoint;
    use crate::keys::Job;
    use proptest::prelude::*;
    use std::collections::HashMap;

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

    /// [`plan_container_change`] as it was written with a `BTreeSet` of
    /// the ids seen and a `HashMap` per image: what it must still plan, in
    /// the same order.
    fn plan_container_change_by_maps(
        container: ContainerId,
        old: Option<&Container>,
        new: Option<&Container>,
        now: DateTime<Utc>,
        rules: &ExpiryRules,
    ) -> Vec<FoodPlan> {
        fn by_id(foods: &[Food]) -> Vec<(FoodId, &Food)> {
            let mut seen = std::collections::BTreeSet::new();
            foods
                .iter()
                .filter(|f| seen.insert(f.food_id))
                .map(|f| (f.food_id, f))
                .collect()
        }
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
        ids.filter_map(|id| {
            let o = old_map.get(&id).copied();
            let n = new_map.get(&id).copied();
            plan_food_change(container, id, o, n, now, rules)
        })
        .collect()
    }

    proptest! {
        /// Ids repeated within a list and across the two plan as the maps
        /// planned them: the same plans, in the same order.
        #[test]
        fn plans_as_the_maps_did(
            old in proptest::option::of(proptest::collection::vec((0u128..6, arb_food()), 0..10)),
            new in proptest::option::of(proptest::collection::vec((0u128..6, arb_food()), 0..10)),
            now_offset in 0i64..40 * 86_400,
            horizon in 0u32..10,
        ) {
            let with_ids = |foods: Vec<(u128, Food)>| {
                container(
                    foods
                        .into_iter()
                        .map(|(id, f)| Food { food_id: FoodId(uuid::Uuid::from_u128(id)), ..f })
                        .collect(),
                )
            };
            let (old, new) = (old.map(with_ids), new.map(with_ids));
            let r = ExpiryRules { horizon_days: horizon, ..utc() };
            let now = t("2024-03-25T00:00:00Z") + TimeDelta::seconds(now_offset);
            prop_assert_eq!(
                plan_container_change(cid(), old.as_ref(), new.as_ref(), now, &r),
                plan_container_change_by_maps(cid(), old.as_ref(), new.as_ref(), now, &r)
            );
        }
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
