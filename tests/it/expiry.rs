//! Food-expiry flags against DynamoDB Local, with an injected clock: the
//! stream side (through the table's real stream and `App::handle_stream`),
//! the daily tick, the backfill and the notification.

use crate::support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, NaiveDate, Utc};
use nishiki_worker::app::App;
use nishiki_worker::config::{Clock, Config, ManualClock};
use nishiki_worker::items::{
    Container, ContainerLink, Entity, Food, Group, Item, Membership, User, attr,
};
use nishiki_worker::jobs::JobDeps;
use nishiki_worker::jobs::expiry::{
    BackfillJob, BackfillProgress, FlagExpiringJob, TTL_ATTRIBUTE, flag_attr,
};
use nishiki_worker::keys::{ContainerId, FoodId, GroupId, ItemKey, ItemKind, Job, UserId};
use nishiki_worker::schema::{GROUP_AND_CONTAINER_INDEX, USER_AND_GROUP_INDEX};
use support::{Drain, TestTable};
use worker_engine::RecordingPublisher;
use worker_engine::schedule::{JobReport, JobRun, ScheduledJob, Tick, TickSource};
use worker_engine::store::{ItemReader, ItemWriter, QuerySpec, QueryStore, WriteOp};
use worker_engine::stream::RecordStatus;
use worker_toolkit::layers::RecordingStore;

fn t(s: &str) -> DateTime<Utc> {
    s.parse().expect("RFC 3339 instant")
}

fn d(s: &str) -> NaiveDate {
    s.parse().expect("YYYY-MM-DD")
}

/// A table with its stream drained through an `App` on a manual clock.
struct Fx {
    table: TestTable,
    clock: ManualClock,
    app: App,
    drain: Drain,
}

impl Fx {
    async fn new(now: &str) -> Fx {
        Fx::with_config(now, |_| {}).await
    }

    async fn with_config(now: &str, edit: impl FnOnce(&mut Config)) -> Fx {
        let table = support::nishiki_table().await;
        let drain = Drain::new(&table).await;
        let clock = ManualClock::new(t(now));
        let mut config = Config::for_table(&table.name);
        edit(&mut config);
        let app = App::new(table.store.clone(), config, Arc::new(clock.clone()));
        Fx {
            table,
            clock,
            app,
            drain,
        }
    }

    fn deps(&self) -> JobDeps {
        JobDeps::new(
            self.table.store.clone(),
            self.app.config().clone(),
            Arc::new(RecordingPublisher::default()),
        )
    }

    /// A service write (PutItem of the whole item, like the service).
    async fn put(&self, e: Entity) {
        self.table.store.put(e.to_item(), None).await.expect("put");
    }

    async fn delete(&self, key: ItemKey) {
        self.table
            .store
            .delete(&key.to_attributes(), None)
            .await
            .expect("delete");
    }

    async fn group(&self) -> GroupId {
        let id = GroupId::random();
        self.put(Entity::Group(Group {
            id,
            group_name: "Home".into(),
            extra: Item::new(),
        }))
        .await;
        id
    }

    async fn link(&self, group: GroupId, container: ContainerId) {
        self.put(Entity::ContainerLink(ContainerLink {
            group,
            container,
            extra: Item::new(),
        }))
        .await;
    }

    async fn write_container(&self, id: ContainerId, name: &str, foods: &[Food]) {
        self.put(Entity::Container(Container {
            id,
            container_name: name.into(),
            foods: foods.to_vec(),
            extra: Item::new(),
        }))
        .await;
    }

    /// A container and its link, written as the service does.
    async fn container(&self, group: GroupId, foods: &[Food]) -> ContainerId {
        let id = ContainerId::random();
        self.write_container(id, "Fridge", foods).await;
        self.link(group, id).await;
        id
    }

    async fn drain(&mut self) -> usize {
        self.drain.run(&self.app).await
    }

    async fn tick_at(&self, now: &str) -> JobReport<Job> {
        self.clock.set(t(now));
        self.app
            .run_job(Job::FlagExpiring, None)
            .await
            .expect("tick")
    }

    /// The flags of a group: food id -> item.
    async fn flags(&self, group: GroupId) -> BTreeMap<FoodId, Item> {
        self.table
            .snapshot()
            .await
            .into_iter()
            .filter_map(|i| match ItemKey::from_attributes(&i) {
                Ok(ItemKey::ExpiringFood { group: g, food, .. }) if g == group => Some((food, i)),
                _ => None,
            })
            .collect()
    }

    /// Every reminder: (date, food).
    async fn reminders(&self) -> Vec<(NaiveDate, FoodId)> {
        let mut v: Vec<_> = self
            .table
            .snapshot()
            .await
            .iter()
            .filter_map(|i| match ItemKey::from_attributes(i) {
                Ok(ItemKey::ExpiryReminder { date, food, .. }) => Some((date, food)),
                _ => None,
            })
            .collect();
        v.sort();
        v
    }

    /// Every flag and reminder, whole.
    async fn worker_items(&self) -> Vec<Item> {
        self.table
            .snapshot()
            .await
            .into_iter()
            .filter(|i| {
                matches!(
                    ItemKey::from_attributes(i).map(|k| k.kind()),
                    Ok(ItemKind::ExpiringFood | ItemKind::ExpiryReminder)
                )
            })
            .collect()
    }
}

fn food(name: &str, expiry: Option<&str>) -> Food {
    Food {
        food_id: FoodId::random(),
        name: name.into(),
        unit: None,
        quantity: Some(1.0),
        category: Some("unselected".into()),
        expiry: expiry.map(t),
        created_at: t("2024-03-01T08:00:00Z"),
    }
}

fn s(item: &Item, name: &str) -> String {
    match item.get(name) {
        Some(AttributeValue::S(v)) => v.clone(),
        Some(AttributeValue::N(v)) => v.clone(),
        other => panic!("{name}: {other:?}"),
    }
}

fn status(item: &Item) -> (String, String) {
    (s(item, flag_attr::STATUS), s(item, flag_attr::DAYS_LEFT))
}

fn sn(status: &str, days: i64) -> (String, String) {
    (status.to_owned(), days.to_string())
}

#[tokio::test]
async fn flags_appear_inside_the_horizon_in_the_owning_group_only() {
    let mut fx = Fx::new("2024-03-25T10:00:00Z").await;
    let home = fx.group().await;
    let other = fx.group().await;
    let user = UserId::random();
    fx.put(Entity::User(User {
        id: user,
        user_name: "Alice".into(),
        email_address: "alice@example.com".into(),
        extra: Item::new(),
    }))
    .await;
    fx.put(Entity::Membership(Membership {
        user,
        group: home,
        extra: Item::new(),
    }))
    .await;
    let last_second = food("Milk", Some("2024-03-28T23:59:59.999Z"));
    let next_day = food("Cheese", Some("2024-03-29T00:00:00Z"));
    let at_midnight = food("Tofu", Some("2024-03-28T00:00:00Z"));
    let yesterday = food("Eggs", Some("2024-03-24T12:00:00Z"));
    let an_hour_ago = food("Yogurt", Some("2024-03-25T09:00:00Z"));
    let in_a_moment = food("Bread", Some("2024-03-25T10:00:00.001Z"));
    let no_expiry = food("Salt", None);
    let far = food("Rice", Some("2025-01-01T00:00:00Z"));
    let long_gone = food("Jam", Some("2024-03-10T00:00:00Z"));
    let c_home = fx
        .container(
            home,
            &[
                last_second.clone(),
                next_day.clone(),
                at_midnight.clone(),
                yesterday.clone(),
                an_hour_ago.clone(),
                in_a_moment.clone(),
                no_expiry.clone(),
                far.clone(),
                long_gone.clone(),
            ],
        )
        .await;
    let soon = food("Ham", Some("2024-03-26T18:00:00Z"));
    fx.container(other, std::slice::from_ref(&soon)).await;
    fx.drain().await;

    let flags = fx.flags(home).await;
    let got: BTreeMap<FoodId, (String, String)> =
        flags.iter().map(|(f, i)| (*f, status(i))).collect();
    assert_eq!(
        got,
        BTreeMap::from([
            (last_second.food_id, sn("nearing", 3)),
            (at_midnight.food_id, sn("nearing", 3)),
            (yesterday.food_id, sn("expired", -1)),
            (an_hour_ago.food_id, sn("expired", 0)),
            (in_a_moment.food_id, sn("nearing", 0)),
        ]),
        "NULL expiry, beyond the horizon and past retention get no flag"
    );
    let milk = &flags[&last_second.food_id];
    assert_eq!(s(milk, flag_attr::NAME), "Milk");
    assert_eq!(s(milk, flag_attr::EXPIRY), "2024-03-28T23:59:59.999Z");
    assert_eq!(s(milk, flag_attr::EXPIRY_DATE), "2024-03-28");
    assert_eq!(s(milk, flag_attr::CHECKED_ON), "2024-03-25");
    assert_eq!(s(milk, flag_attr::FLAGGED_AT), "2024-03-25T10:00:00.000Z");
    assert_eq!(
        s(milk, TTL_ATTRIBUTE),
        t("2024-04-04T23:59:59Z").timestamp().to_string(),
        "TTL = expiry + 7 days, epoch seconds"
    );
    for item in flags.values() {
        for a in attr::INDEXED {
            assert!(!item.contains_key(a), "a flag carries {a}");
        }
    }
    let other_flags = fx.flags(other).await;
    assert_eq!(
        other_flags.keys().copied().collect::<Vec<_>>(),
        vec![soon.food_id]
    );

    // Reminders: far foods on the day they enter the window, nearing foods
    // on the first day that starts after their expiry.
    let mut expected = vec![
        (d("2024-03-26"), next_day.food_id),
        (d("2024-03-29"), last_second.food_id),
        (d("2024-03-28"), at_midnight.food_id),
        (d("2024-03-26"), in_a_moment.food_id),
        (d("2024-12-29"), far.food_id),
        (d("2024-03-27"), soon.food_id),
    ];
    expected.sort();
    assert_eq!(fx.reminders().await, expected);

    // The service's indexes see none of the worker's items.
    let query = |index: &str, attribute: &str, value: String| {
        let store = fx.table.store.clone();
        let spec = QuerySpec::partition(attribute, &value).on_index(index);
        async move {
            store
                .query_all(&spec)
                .await
                .unwrap()
                .iter()
                .map(|i| ItemKey::from_attributes(i).unwrap())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        query(USER_AND_GROUP_INDEX, attr::GROUP_ID, home.to_string()).await,
        vec![ItemKey::Membership { user, group: home }]
    );
    assert_eq!(
        query(
            GROUP_AND_CONTAINER_INDEX,
            attr::CONTAINER_ID,
            c_home.to_string()
        )
        .await,
        vec![ItemKey::ContainerLink {
            group: home,
            container: c_home
        }]
    );
}

#[tokio::test]
async fn the_window_is_counted_in_the_configured_zone() {
    let mut fx = Fx::with_config("2024-03-25T16:00:00Z", |c| {
        c.expiry.time_zone = chrono_tz::Asia::Tokyo;
    })
    .await;
    // Now is 2024-03-26 01:00 in Tokyo: the window ends 2024-03-29 24:00 JST.
    let g = fx.group().await;
    let last_second = food("Milk", Some("2024-03-29T14:59:59Z"));
    let next_day = food("Cheese", Some("2024-03-29T15:00:00Z"));
    let tokyo_midnight = food("Tofu", Some("2024-03-26T15:00:00Z"));
    fx.container(
        g,
        &[
            last_second.clone(),
            next_day.clone(),
            tokyo_midnight.clone(),
        ],
    )
    .await;
    fx.drain().await;
    let flags = fx.flags(g).await;
    assert_eq!(
        flags
            .iter()
            .map(|(f, i)| (*f, status(i)))
            .collect::<BTreeMap<_, _>>(),
        BTreeMap::from([
            (last_second.food_id, sn("nearing", 3)),
            (tokyo_midnight.food_id, sn("nearing", 1)),
        ])
    );
    assert_eq!(
        s(&flags[&last_second.food_id], flag_attr::EXPIRY_DATE),
        "2024-03-29"
    );
    let mut expected = vec![
        (d("2024-03-27"), next_day.food_id),
        (d("2024-03-30"), last_second.food_id),
        (d("2024-03-27"), tokyo_midnight.food_id),
    ];
    expected.sort();
    assert_eq!(fx.reminders().await, expected);

    // On 2024-03-27 (Tokyo) the cheese enters the window and the tofu,
    // which expired at the first instant of that day, turns expired.
    let report = fx.tick_at("2024-03-26T15:00:00Z").await;
    assert!(report.complete, "{report:?}");
    let flags = fx.flags(g).await;
    assert_eq!(status(&flags[&next_day.food_id]), sn("nearing", 3));
    assert_eq!(status(&flags[&tokyo_midnight.food_id]), sn("expired", 0));
}

#[tokio::test]
async fn the_tick_flags_foods_entering_the_window_and_catches_up_missed_days() {
    let mut fx = Fx::new("2024-03-25T10:00:00Z").await;
    let g = fx.group().await;
    let a = food("Milk", Some("2024-03-30T12:00:00Z"));
    let b = food("Ham", Some("2024-04-02T00:00:00Z"));
    fx.container(g, &[a.clone(), b.clone()]).await;
    fx.drain().await;
    assert!(fx.flags(g).await.is_empty());
    assert_eq!(
        fx.reminders().await,
        vec![(d("2024-03-27"), a.food_id), (d("2024-03-30"), b.food_id)]
    );

    let r = fx.tick_at("2024-03-25T10:00:00Z").await;
    assert_eq!(r.details["reminders"], 0, "{r:?}");
    fx.tick_at("2024-03-26T00:05:00Z").await;
    assert!(fx.flags(g).await.is_empty());

    let r = fx.tick_at("2024-03-27T00:05:00Z").await;
    assert_eq!(r.details["flags_new"], 1, "{r:?}");
    let flags = fx.flags(g).await;
    assert_eq!(status(&flags[&a.food_id]), sn("nearing", 3));
    assert_eq!(
        fx.reminders().await,
        vec![(d("2024-03-30"), b.food_id), (d("2024-03-31"), a.food_id)]
    );

    // No tick on 03-28, 03-29 and 03-30: the tick of 03-31 catches up.
    let r = fx.tick_at("2024-03-31T00:05:00Z").await;
    assert!(r.complete);
    assert_eq!(r.details["from_date"], "2024-03-27");
    assert_eq!(r.details["dates_read"], 5);
    let flags = fx.flags(g).await;
    assert_eq!(status(&flags[&b.food_id]), sn("nearing", 2));
    assert_eq!(status(&flags[&a.food_id]), sn("expired", -1));
    assert_eq!(s(&flags[&a.food_id], flag_attr::CHECKED_ON), "2024-03-31");
    assert_eq!(fx.reminders().await, vec![(d("2024-04-02"), b.food_id)]);

    // Twice on the same day: the same flags and reminders.
    let before = fx.worker_items().await;
    let r = fx.tick_at("2024-03-31T09:00:00Z").await;
    assert_eq!(r.details["reminders"], 0);
    assert_eq!(fx.worker_items().await, before);
}

#[tokio::test]
async fn edits_that_do_not_touch_expiry_or_name_cause_no_worker_write() {
    let mut fx = Fx::new("2024-03-25T10:00:00Z").await;
    let g = fx.group().await;
    let near = food("Milk", Some("2024-03-27T00:00:00Z"));
    let far = food("Rice", Some("2024-06-01T00:00:00Z"));
    let none = food("Salt", None);
    let c = fx
        .container(g, &[near.clone(), far.clone(), none.clone()])
        .await;
    fx.drain().await;
    let worker_before = fx.worker_items().await;
    assert_eq!(worker_before.len(), 3, "one flag, two reminders");

    let store = fx.table.store.clone();
    let metrics = store.metrics();
    let before = metrics.snapshot();
    let mut foods = vec![near.clone(), far.clone(), none.clone()];
    for i in 0..10 {
        foods[i % 3].quantity = Some(i as f64);
        foods[(i + 1) % 3].unit = Some(format!("unit{i}"));
        foods[(i + 2) % 3].category = Some(format!("cat{i}"));
        foods.rotate_left(1);
        fx.write_container(c, &format!("Fridge {i}"), &foods).await;
    }
    let service = metrics.snapshot().since(&before);
    assert_eq!(service.put_item, 10);
    let before = metrics.snapshot();
    let handled = fx.drain().await;
    assert_eq!(handled, 10);
    let worker = metrics.snapshot().since(&before);
    assert_eq!(worker.write_requests(), 0, "{worker:?}");
    assert_eq!(
        (worker.get_item, worker.query),
        (0, 0),
        "no read either: {worker:?}"
    );
    assert_eq!(fx.worker_items().await, worker_before);

    // A rename of a flagged food rewrites its flag, in one request.
    foods
        .iter_mut()
        .find(|f| f.food_id == near.food_id)
        .unwrap()
        .name = "Oat milk".into();
    fx.write_container(c, "Fridge", &foods).await;
    let before = metrics.snapshot();
    fx.drain().await;
    assert_eq!(metrics.snapshot().since(&before).write_requests(), 1);
    assert_eq!(
        s(&fx.flags(g).await[&near.food_id], flag_attr::NAME),
        "Oat milk"
    );
}

#[tokio::test]
async fn removing_foods_containers_or_groups_takes_flags_and_reminders_away() {
    let mut fx = Fx::new("2024-03-25T10:00:00Z").await;
    let g = fx.group().await;
    let milk = food("Milk", Some("2024-03-27T10:00:00Z"));
    let rice = food("Rice", Some("2024-05-01T00:00:00Z"));
    let eggs = food("Eggs", Some("2024-03-26T00:00:00Z"));
    let c1 = fx
        .container(g, &[milk.clone(), rice.clone(), eggs.clone()])
        .await;
    let tofu = food("Tofu", Some("2024-03-26T00:00:00Z"));
    let beans = food("Beans", Some("2024-08-01T00:00:00Z"));
    let c2 = fx.container(g, &[tofu.clone(), beans.clone()]).await;
    let g2 = fx.group().await;
    let ham = food("Ham", Some("2024-03-27T00:00:00Z"));
    let kale = food("Kale", Some("2024-04-27T00:00:00Z"));
    let c3 = fx.container(g2, &[ham.clone(), kale.clone()]).await;
    fx.drain().await;
    assert_eq!(fx.flags(g).await.len(), 3);
    assert_eq!(fx.flags(g2).await.len(), 1);
    assert_eq!(fx.reminders().await.len(), 7);

    // Milk eaten, rice's expiry moved, eggs' expiry pushed out of the window.
    let mut rice2 = rice.clone();
    rice2.expiry = Some(t("2024-05-20T00:00:00Z"));
    let mut eggs2 = eggs.clone();
    eggs2.expiry = Some(t("2024-04-10T00:00:00Z"));
    fx.write_container(c1, "Fridge", &[rice2.clone(), eggs2.clone()])
        .await;
    fx.drain().await;
    assert!(fx.flags(g).await.keys().all(|f| *f == tofu.food_id));
    let reminders = fx.reminders().await;
    assert!(!reminders.iter().any(|(_, f)| *f == milk.food_id));
    assert!(reminders.contains(&(d("2024-05-17"), rice.food_id)));
    assert!(!reminders.contains(&(d("2024-04-28"), rice.food_id)));
    assert!(reminders.contains(&(d("2024-04-07"), eggs.food_id)));
    assert!(!reminders.contains(&(d("2024-03-26"), eggs.food_id)));

    // Container deleted as the service does: the item, then its link.
    fx.delete(ItemKey::Container(c2)).await;
    fx.delete(ItemKey::ContainerLink {
        group: g,
        container: c2,
    })
    .await;
    fx.drain().await;
    assert!(fx.flags(g).await.is_empty());
    let reminders = fx.reminders().await;
    assert!(
        !reminders
            .iter()
            .any(|(_, f)| *f == tofu.food_id || *f == beans.food_id),
        "{reminders:?}"
    );

    // Group deleted as the service does: its containers and the Group item;
    // the links stay behind.
    fx.delete(ItemKey::Container(c3)).await;
    fx.delete(ItemKey::Group(g2)).await;
    fx.drain().await;
    assert!(fx.flags(g2).await.is_empty());
    let reminders = fx.reminders().await;
    assert!(
        !reminders
            .iter()
            .any(|(_, f)| *f == ham.food_id || *f == kale.food_id),
        "{reminders:?}"
    );
    // What is left belongs to c1 only.
    assert_eq!(
        reminders,
        vec![
            (d("2024-04-07"), eggs.food_id),
            (d("2024-05-17"), rice.food_id)
        ]
    );
}

#[tokio::test]
async fn the_tick_rechecks_a_container_rewritten_after_its_reminder() {
    let mut fx = Fx::new("2024-03-25T10:00:00Z").await;
    let g = fx.group().await;
    let eaten = food("Milk", Some("2024-03-30T12:00:00Z"));
    let moved = food("Ham", Some("2024-03-30T12:00:00Z"));
    let renamed = food("Tofu", Some("2024-03-30T12:00:00Z"));
    let c = fx
        .container(g, &[eaten.clone(), moved.clone(), renamed.clone()])
        .await;
    fx.drain().await;
    assert_eq!(fx.reminders().await.len(), 3);

    // The service rewrites the container; its stream record is not handled
    // yet when the tick runs.
    let mut moved2 = moved.clone();
    moved2.expiry = Some(t("2024-04-20T00:00:00Z"));
    let mut renamed2 = renamed.clone();
    renamed2.name = "Silken tofu".into();
    fx.write_container(c, "Fridge", &[moved2.clone(), renamed2.clone()])
        .await;

    let r = fx.tick_at("2024-03-27T00:05:00Z").await;
    assert_eq!(r.details["reminders"], 3, "{r:?}");
    let flags = fx.flags(g).await;
    assert_eq!(
        flags.keys().copied().collect::<Vec<_>>(),
        vec![renamed.food_id],
        "only the food still inside the window, as stored now"
    );
    assert_eq!(s(&flags[&renamed.food_id], flag_attr::NAME), "Silken tofu");
    let mut expected = vec![
        (d("2024-04-17"), moved.food_id),
        (d("2024-03-31"), renamed.food_id),
    ];
    expected.sort();
    assert_eq!(fx.reminders().await, expected);

    // The stream catches up: the same outcome.
    fx.drain().await;
    assert_eq!(
        fx.flags(g).await.keys().copied().collect::<Vec<_>>(),
        vec![renamed.food_id]
    );
    assert_eq!(fx.reminders().await, expected);
}

#[tokio::test]
async fn a_link_written_after_its_container_places_the_flags() {
    let mut fx = Fx::new("2024-03-25T10:00:00Z").await;
    let g = fx.group().await;
    let milk = food("Milk", Some("2024-03-27T00:00:00Z"));
    let rice = food("Rice", Some("2024-06-01T00:00:00Z"));
    let ham = food("Ham", Some("2024-03-27T00:00:00Z"));
    let (c1, c2) = (ContainerId::random(), ContainerId::random());
    fx.write_container(c1, "Fridge", &[milk.clone(), rice.clone()])
        .await;
    fx.write_container(c2, "Freezer", std::slice::from_ref(&ham))
        .await;
    fx.drain().await;
    assert!(fx.flags(g).await.is_empty());
    let mut expected = vec![
        (d("2024-03-25"), milk.food_id), // retry: no link yet
        (d("2024-03-27"), milk.food_id),
        (d("2024-05-29"), rice.food_id),
        (d("2024-03-25"), ham.food_id), // retry: no link yet
        (d("2024-03-27"), ham.food_id),
    ];
    expected.sort();
    assert_eq!(fx.reminders().await, expected);

    // The first link's own record places its container's flags.
    fx.link(g, c1).await;
    fx.drain().await;
    let flags = fx.flags(g).await;
    assert_eq!(
        flags.keys().copied().collect::<Vec<_>>(),
        vec![milk.food_id]
    );
    assert_eq!(status(&flags[&milk.food_id]), sn("nearing", 2));

    // The second link's record is read but not handled (as if lost): the
    // tick's retry reminder places the flag.
    fx.link(g, c2).await;
    assert_eq!(fx.drain.read().await.len(), 1);
    assert_eq!(fx.flags(g).await.len(), 1);
    let r = fx.tick_at("2024-03-25T23:00:00Z").await;
    assert_eq!(r.details["flags_new"], 1, "{r:?}");
    assert_eq!(r.details["flags_refreshed"], 1, "{r:?}");
    let flags = fx.flags(g).await;
    assert_eq!(status(&flags[&ham.food_id]), sn("nearing", 2));
    assert_eq!(status(&flags[&milk.food_id]), sn("nearing", 2));
    let mut expected = vec![
        (d("2024-03-27"), milk.food_id),
        (d("2024-05-29"), rice.food_id),
        (d("2024-03-27"), ham.food_id),
    ];
    expected.sort();
    assert_eq!(fx.reminders().await, expected, "the retries are done");
}

/// A link removal reads the group's partition once: the flags of that
/// container in that group go, the group's other flags and the container's
/// flags in other groups stay, and a link written again before the removal
/// is handled keeps its flags.
#[tokio::test]
async fn unlinking_a_container_takes_its_flags_out_of_that_group_only() {
    let mut fx = Fx::new("2024-03-25T10:00:00Z").await;
    let (g1, g2) = (fx.group().await, fx.group().await);
    let milk = food("Milk", Some("2024-03-27T00:00:00Z"));
    let ham = food("Ham", Some("2024-03-26T00:00:00Z"));
    let c1 = fx.container(g1, std::slice::from_ref(&milk)).await;
    fx.link(g2, c1).await;
    fx.container(g1, std::slice::from_ref(&ham)).await;
    fx.drain().await;
    let ids = |flags: BTreeMap<FoodId, Item>| flags.into_keys().collect::<Vec<_>>();
    let mut both = vec![milk.food_id, ham.food_id];
    both.sort();
    assert_eq!(ids(fx.flags(g1).await), both);
    assert_eq!(ids(fx.flags(g2).await), vec![milk.food_id]);

    fx.delete(ItemKey::ContainerLink {
        group: g1,
        container: c1,
    })
    .await;
    fx.drain().await;
    assert_eq!(
        ids(fx.flags(g1).await),
        vec![ham.food_id],
        "c2's flag stays"
    );
    assert_eq!(
        ids(fx.flags(g2).await),
        vec![milk.food_id],
        "g2 still links c1"
    );

    // Removed and written again before the worker sees the removal.
    fx.delete(ItemKey::ContainerLink {
        group: g2,
        container: c1,
    })
    .await;
    fx.link(g2, c1).await;
    fx.drain().await;
    assert_eq!(ids(fx.flags(g2).await), vec![milk.food_id], "linked again");
    assert_eq!(ids(fx.flags(g1).await), vec![ham.food_id]);
}

/// The service deletes a group with its containers: the group's cascade
/// deletes its flags, and the containers' removals leave them to it, so
/// each flag is deleted once.
#[tokio::test]
async fn a_group_deletion_deletes_its_flags_once() {
    let mut fx = Fx::new("2024-03-25T10:00:00Z").await;
    let g = fx.group().await;
    let c1 = fx
        .container(g, &[food("Milk", Some("2024-03-27T00:00:00Z"))])
        .await;
    let c2 = fx
        .container(g, &[food("Ham", Some("2024-03-26T00:00:00Z"))])
        .await;
    fx.drain().await;
    assert_eq!(fx.flags(g).await.len(), 2);

    fx.delete(ItemKey::Container(c1)).await;
    fx.delete(ItemKey::Container(c2)).await;
    fx.delete(ItemKey::Group(g)).await;
    let recorded = Arc::new(RecordingStore::new(fx.table.store.clone()));
    let watched = App::new(
        recorded.clone(),
        fx.app.config().clone(),
        fx.app.clock().clone(),
    );
    fx.drain.run(&watched).await;
    assert!(fx.flags(g).await.is_empty());
    let log = support::recorded::Log::of(recorded.take());
    let is_flag = |key: &worker_engine::store::Key| {
        matches!(
            ItemKey::from_attributes(key).map(|k| k.kind()),
            Ok(ItemKind::ExpiringFood)
        )
    };
    // Batched (the expiry job) or guarded by the group's absence (the
    // group cascade).
    let flag_deletes = log
        .batch_ops
        .iter()
        .filter(|op| matches!(op, WriteOp::Delete(key) if is_flag(key)))
        .count()
        + log
            .guarded
            .iter()
            .flat_map(|(_, ops)| ops)
            .filter(|op| {
                matches!(op, worker_engine::store::GuardedOp::Delete { key, .. } if is_flag(key))
            })
            .count();
    assert_eq!(flag_deletes, 2, "each flag deleted once");
}

/// The same data, written into a table (deterministic ids).
async fn populate(fx: &Fx, data: &[(Option<GroupId>, ContainerId, Vec<Food>)]) {
    for (g, c, foods) in data {
        fx.write_container(*c, "Shelf", foods).await;
        if let Some(g) = g {
            fx.link(*g, *c).await;
        }
    }
    let groups: std::collections::BTreeSet<GroupId> = data.iter().filter_map(|x| x.0).collect();
    for g in groups {
        fx.put(Entity::Group(Group {
            id: g,
            group_name: "Home".into(),
            extra: Item::new(),
        }))
        .await;
    }
}

#[tokio::test]
async fn backfill_gives_the_same_flags_as_the_stream_path_and_resumes() {
    let (g1, g2) = (GroupId::random(), GroupId::random());
    let mut data = Vec::new();
    for i in 0..7u32 {
        let g = if i % 2 == 0 { g1 } else { g2 };
        data.push((
            Some(g),
            ContainerId::random(),
            vec![
                food("Milk", Some(&format!("2024-03-{:02}T08:00:00Z", 20 + i))),
                food("Rice", Some("2024-09-01T00:00:00Z")),
                food("Salt", None),
            ],
        ));
    }
    // A container whose link does not exist (yet).
    data.push((
        None,
        ContainerId::random(),
        vec![food("Ham", Some("2024-03-26T00:00:00Z"))],
    ));

    // Stream path.
    let mut streamed = Fx::new("2024-03-25T10:00:00Z").await;
    populate(&streamed, &data).await;
    streamed.drain().await;
    let expected = streamed.worker_items().await;
    assert!(expected.len() > 10, "{}", expected.len());

    // A table populated before any stream consumer: backfill, in runs of
    // one page of 4 items.
    let fx = Fx::new("2024-03-25T10:00:00Z").await;
    populate(&fx, &data).await;
    let seen = Arc::new(Mutex::new(Vec::<BackfillProgress>::new()));
    let hook_seen = seen.clone();
    let job = BackfillJob::new(&fx.deps())
        .with_page_size(4)
        .with_max_pages_per_run(1)
        .with_progress(Arc::new(move |p| hook_seen.lock().unwrap().push(p)));
    let run = JobRun {
        now: fx.clock.now(),
        tick: Tick {
            job: Job::Backfill,
            scheduled_time: None,
            source: TickSource::Manual,
        },
        deadline: None,
        margin: Duration::from_secs(2),
    };
    let mut runs = 0;
    loop {
        runs += 1;
        let r = job.run(&run).await.expect("backfill");
        if r.complete {
            break;
        }
        assert!(runs < 50, "backfill does not finish");
    }
    assert!(runs >= 4, "{runs} runs: the scan must have resumed");
    assert_eq!(fx.worker_items().await, expected);
    let seen = seen.lock().unwrap().clone();
    assert!(seen.windows(2).all(|w| w[0].scanned <= w[1].scanned));
    let last = seen.last().copied().unwrap();
    assert_eq!((last.containers, last.unreadable), (8, 0));
    assert!(
        last.scanned >= 17,
        "every service item is scanned: {last:?}"
    );

    // Complete: running it again (as a schedule tick) writes nothing.
    let before = fx.table.store.metrics().snapshot();
    let r = fx.app.run_job(Job::Backfill, None).await.expect("backfill");
    assert!(
        r.complete && r.summary.contains("already complete"),
        "{r:?}"
    );
    assert_eq!(
        fx.table
            .store
            .metrics()
            .snapshot()
            .since(&before)
            .write_requests(),
        0
    );
}

#[tokio::test]
async fn the_tick_notifies_each_group_once_with_its_newly_flagged_foods() {
    let mut fx = Fx::with_config("2024-03-25T10:00:00Z", |c| {
        c.expiry.notify_event_bus = Some("nishiki-test-bus".into());
    })
    .await;
    let (home, office) = (fx.group().await, fx.group().await);
    let user = UserId::random();
    fx.put(Entity::User(User {
        id: user,
        user_name: "Alice Example".into(),
        email_address: "alice@example.com".into(),
        extra: Item::new(),
    }))
    .await;
    fx.put(Entity::Membership(Membership {
        user,
        group: home,
        extra: Item::new(),
    }))
    .await;
    let milk = food("Milk", Some("2024-03-30T12:00:00Z"));
    let flagged_already = food("Tofu", Some("2024-03-26T12:00:00Z"));
    let c_home = fx
        .container(home, &[milk.clone(), flagged_already.clone()])
        .await;
    let ham = food("Ham", Some("2024-03-30T00:00:00Z"));
    let c_office = fx.container(office, std::slice::from_ref(&ham)).await;
    fx.drain().await;
    assert_eq!(
        fx.flags(home).await.len(),
        1,
        "the tofu is flagged by the stream"
    );

    let recorder = Arc::new(RecordingPublisher::default());
    let job = FlagExpiringJob::new(&fx.deps()).with_publisher(recorder.clone());
    let run_at = |now: &str| JobRun {
        now: t(now),
        tick: Tick {
            job: Job::FlagExpiring,
            scheduled_time: None,
            source: TickSource::Scheduler,
        },
        deadline: None,
        margin: Duration::from_secs(2),
    };
    let r = job.run(&run_at("2024-03-27T00:05:00Z")).await.unwrap();
    assert_eq!(r.details["events_sent"], 2, "{r:?}");
    let sent = recorder.sent();
    assert_eq!(sent.len(), 2);
    let mut by_group = BTreeMap::new();
    for e in &sent {
        assert_eq!(e.source, "nishiki.worker");
        assert_eq!(e.detail_type, "FoodsNearingExpiry");
        assert_eq!(e.event_bus_name, "nishiki-test-bus");
        assert!(
            !e.detail.contains('@') && !e.detail.contains("Alice"),
            "{}",
            e.detail
        );
        let v: serde_json::Value = serde_json::from_str(&e.detail).unwrap();
        by_group.insert(v["groupId"].as_str().unwrap().to_owned(), v);
    }
    let food_json = |c: ContainerId, f: &Food, status: &str, days: i64, date: &str| {
        serde_json::json!({
            "containerId": c.to_string(), "foodId": f.food_id.to_string(), "name": f.name,
            "expiry": nishiki_worker::datetime::format(f.expiry.unwrap()),
            "expiryDate": date, "status": status, "daysLeft": days,
        })
    };
    // Home: the milk entered the window, the tofu (flagged by the stream
    // when it was added) turned expired. Foods are sorted by container, food.
    let mut home_foods = vec![
        food_json(c_home, &milk, "nearing", 3, "2024-03-30"),
        food_json(c_home, &flagged_already, "expired", -1, "2024-03-26"),
    ];
    home_foods.sort_by_key(|x| x["foodId"].as_str().unwrap().to_owned());
    assert_eq!(
        by_group[&home.to_string()],
        serde_json::json!({
            "date": "2024-03-27", "timeZone": "UTC", "groupId": home.to_string(),
            "foods": home_foods,
        })
    );
    assert_eq!(
        by_group[&office.to_string()],
        serde_json::json!({
            "date": "2024-03-27", "timeZone": "UTC", "groupId": office.to_string(),
            "foods": [food_json(c_office, &ham, "nearing", 3, "2024-03-30")],
        })
    );

    // The same day again: same table, nothing sent.
    let before = fx.table.snapshot().await;
    job.run(&run_at("2024-03-27T08:00:00Z")).await.unwrap();
    assert_eq!(recorder.sent().len(), 2);
    let after = fx.table.snapshot().await;
    let without_checkpoint = |v: Vec<Item>| -> Vec<Item> {
        v.into_iter()
            .filter(|i| !matches!(ItemKey::from_attributes(i), Ok(ItemKey::Checkpoint(_))))
            .collect()
    };
    assert_eq!(without_checkpoint(after), without_checkpoint(before));

    // A failed publication is kept and sent by the next tick, once.
    recorder.fail_next(1);
    let r = job.run(&run_at("2024-03-31T00:05:00Z")).await.unwrap();
    assert_eq!(r.details["events_pending"], 2, "{r:?}");
    assert_eq!(recorder.sent().len(), 2);
    let r = job.run(&run_at("2024-03-31T01:00:00Z")).await.unwrap();
    assert_eq!(
        (
            r.details["events_sent"].clone(),
            r.details["events_pending"].clone()
        ),
        (2.into(), 0.into())
    );
    let late = recorder.sent();
    assert_eq!(late.len(), 4);
    assert!(late[2..].iter().all(|e| e.detail.contains("\"expired\"")));
    let cp = fx
        .table
        .store
        .get(
            &ItemKey::Checkpoint(Job::FlagExpiring).to_attributes(),
            true,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s(&cp, "NextDate"), "2024-03-31");
}

#[tokio::test]
async fn replaying_a_batch_leaves_the_same_table() {
    let mut fx = Fx::new("2024-03-25T10:00:00Z").await;
    let g = fx.group().await;
    let milk = food("Milk", Some("2024-03-27T00:00:00Z"));
    let rice = food("Rice", Some("2024-06-01T00:00:00Z"));
    let c = fx.container(g, &[milk.clone(), rice.clone()]).await;
    let mut milk2 = milk.clone();
    milk2.expiry = Some(t("2024-03-26T00:00:00Z"));
    fx.write_container(
        c,
        "Fridge",
        &[milk2, food("Eggs", Some("2024-03-24T00:00:00Z"))],
    )
    .await;
    let changes = fx.drain.read().await;
    assert_eq!(changes.len(), 4);
    fx.drain.run_batch(&fx.app, &changes).await;
    let once = fx.table.snapshot().await;
    fx.drain.run_batch(&fx.app, &changes).await;
    assert_eq!(fx.table.snapshot().await, once);
    assert_eq!(fx.flags(g).await.len(), 2);
    fx.drain().await; // the worker's own records are skipped; the stream settles
    assert_eq!(fx.table.snapshot().await, once);
}

/// The service writes a container and its link at once, so their records
/// usually share a batch: the link's record places the flags and the
/// container's writes only its reminders, without an index read, so no
/// flag is put twice. The two records in one batch in either order, or in
/// two batches in either order, end in the same table.
#[tokio::test]
async fn a_container_and_its_link_in_one_batch_place_each_flag_once() {
    let mut fx = Fx::new("2024-03-25T10:00:00Z").await;
    let g = fx.group().await;
    fx.drain().await;
    let milk = food("Milk", Some("2024-03-27T00:00:00Z"));
    let rice = food("Rice", Some("2024-06-01T00:00:00Z"));
    let c = fx.container(g, &[milk.clone(), rice.clone()]).await;
    let changes = fx.drain.read().await;
    assert_eq!(changes.len(), 2, "the container's INSERT and its link's");
    let (container_first, link_first) = (
        changes.clone(),
        vec![changes[1].clone(), changes[0].clone()],
    );

    let metrics = fx.table.store.metrics().snapshot();
    fx.drain.run_batch(&fx.app, &container_first).await;
    let asked = fx.table.store.metrics().snapshot().since(&metrics);
    assert_eq!(
        asked.execute_statement + asked.query,
        0,
        "no index read: {asked:?}"
    );
    let report = fx.drain.batches.last().unwrap().clone();
    let detail = |i: usize| match &report.records[i].status {
        RecordStatus::Handled { detail } => detail.clone(),
        other => panic!("record {i}: {other:?}"),
    };
    assert!(
        detail(0).contains("its link's INSERT in this batch places them")
            && detail(0).contains("(2 writes)"),
        "the container's record writes its two reminders only: {}",
        detail(0)
    );
    assert!(
        detail(1).contains(&format!(
            "placed the flags of container {c} in group {g} (1 writes)"
        )),
        "{}",
        detail(1)
    );
    let flags = fx.flags(g).await;
    assert_eq!(
        flags.keys().copied().collect::<Vec<_>>(),
        vec![milk.food_id]
    );
    assert_eq!(status(&flags[&milk.food_id]), sn("nearing", 2));
    let mut expected = vec![
        (d("2024-03-27"), milk.food_id),
        (d("2024-05-29"), rice.food_id),
    ];
    expected.sort();
    assert_eq!(
        fx.reminders().await,
        expected,
        "no retry reminder for today"
    );
    let served = fx.worker_items().await;

    // Every other arrangement, from the table before the worker, ends the same.
    let arrangements: [Vec<Vec<_>>; 3] = [
        vec![link_first.clone()],
        vec![container_first[..1].to_vec(), container_first[1..].to_vec()],
        vec![link_first[..1].to_vec(), link_first[1..].to_vec()],
    ];
    for batches in arrangements {
        for item in fx.worker_items().await {
            fx.delete(ItemKey::from_attributes(&item).unwrap()).await;
        }
        for batch in &batches {
            fx.drain.run_batch(&fx.app, batch).await;
        }
        assert_eq!(
            fx.worker_items().await,
            served,
            "{} batch(es)",
            batches.len()
        );
    }
}
