//! Flags follow the container as it is, not the records' diffs, against
//! DynamoDB Local: whatever order a container's records are handled in,
//! and however often, the flags left are those of the foods the container
//! holds when the last record is handled. The service rewrites containers
//! with plain Puts, also one it read just before it was deleted.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::items::{Container, ContainerLink, Entity, Food, Group, Item};
use nishiki_worker::keys::{ContainerId, FoodId, GroupId, ItemKey};
use support::{Drain, TestTable};
use worker_engine::store::Store;

fn t(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

const NOW: &str = "2024-03-25T10:00:00Z";

fn food(name: &str, expiry: &str) -> Food {
    Food {
        food_id: FoodId::random(),
        name: name.into(),
        unit: None,
        quantity: Some(1.0),
        category: Some("unselected".into()),
        expiry: Some(t(expiry)),
        created_at: t("2024-03-01T08:00:00Z"),
    }
}

fn container(id: ContainerId, foods: &[Food]) -> Item {
    Entity::Container(Container {
        id,
        container_name: "Fridge".into(),
        foods: foods.to_vec(),
        extra: Item::new(),
    })
    .to_item()
}

struct Fx {
    table: TestTable,
    store: Arc<dyn Store>,
    app: App,
    drain: Drain,
    group: GroupId,
    id: ContainerId,
}

impl Fx {
    async fn new() -> Fx {
        let table = support::nishiki_table().await;
        let store: Arc<dyn Store> = table.store.clone();
        let drain = Drain::new(&table).await;
        let app = App::new(
            store.clone(),
            Config::for_table(&table.name),
            Arc::new(ManualClock::new(t(NOW))),
        );
        let group = GroupId::random();
        let id = ContainerId::random();
        let g = Entity::Group(Group {
            id: group,
            group_name: "Home".into(),
            extra: Item::new(),
        });
        let l = Entity::ContainerLink(ContainerLink {
            group,
            container: id,
            extra: Item::new(),
        });
        store.put(g.to_item(), None).await.unwrap();
        store.put(l.to_item(), None).await.unwrap();
        Fx {
            table,
            store,
            app,
            drain,
            group,
            id,
        }
    }

    async fn put(&self, item: Item) {
        self.store.put(item, None).await.unwrap();
    }

    async fn remove(&self) {
        self.store
            .delete(&ItemKey::Container(self.id).to_attributes(), None)
            .await
            .unwrap();
    }

    async fn flagged(&self) -> BTreeSet<FoodId> {
        self.table
            .keys()
            .await
            .iter()
            .filter_map(|(pk, sk)| match ItemKey::decode(pk, sk) {
                Ok(ItemKey::ExpiringFood {
                    group,
                    container,
                    food,
                }) if group == self.group && container == self.id => Some(food),
                _ => None,
            })
            .collect()
    }

    async fn reminded(&self) -> BTreeSet<FoodId> {
        self.table
            .keys()
            .await
            .iter()
            .filter_map(|(pk, sk)| match ItemKey::decode(pk, sk) {
                Ok(ItemKey::ExpiryReminder { food, .. }) => Some(food),
                _ => None,
            })
            .collect()
    }

    /// Delete every flag and reminder (a fresh start for the next order).
    async fn clear_worker_items(&self) {
        for (pk, sk) in self.table.keys().await {
            if let Ok(k @ (ItemKey::ExpiringFood { .. } | ItemKey::ExpiryReminder { .. })) =
                ItemKey::decode(&pk, &sk)
            {
                self.store.delete(&k.to_attributes(), None).await.unwrap();
            }
        }
    }
}

fn ids(foods: &[&Food]) -> BTreeSet<FoodId> {
    foods.iter().map(|f| f.food_id).collect()
}

#[tokio::test]
async fn a_removal_followed_by_a_rewrite_leaves_no_flag_of_the_food_gone() {
    let mut fx = Fx::new().await;
    let x = food("Milk", "2024-03-27T08:00:00Z");
    fx.put(container(fx.id, std::slice::from_ref(&x))).await;
    fx.drain.run(&fx.app).await;
    assert_eq!(fx.flagged().await, ids(&[&x]));

    // MODIFY (A added), REMOVE, INSERT without A: the service rewrote a
    // container it had read just before it was deleted.
    let a = food("Yogurt", "2024-03-26T08:00:00Z");
    fx.put(container(fx.id, &[x.clone(), a.clone()])).await;
    fx.drain.run(&fx.app).await;
    assert_eq!(fx.flagged().await, ids(&[&x, &a]));
    fx.remove().await;
    fx.put(container(fx.id, std::slice::from_ref(&x))).await;
    fx.drain.run(&fx.app).await;

    assert_eq!(fx.flagged().await, ids(&[&x]), "A's flag went with A");
    assert!(
        !fx.reminded().await.contains(&a.food_id),
        "and its reminders"
    );
}

#[tokio::test]
async fn any_order_of_a_containers_records_repeated_leaves_the_current_foods_flags() {
    let mut fx = Fx::new().await;
    let x = food("Milk", "2024-03-27T08:00:00Z");
    let a = food("Yogurt", "2024-03-26T08:00:00Z");
    let mut a_far = a.clone();
    a_far.expiry = Some(t("2025-01-01T00:00:00Z"));
    let b = food("Tofu", "2024-03-27T12:00:00Z");
    fx.drain.skip_existing().await;
    // INSERT, MODIFY (A added), MODIFY (A's expiry moved out of the
    // window), REMOVE, INSERT (B added, A gone): all written before the
    // worker handles any of them.
    fx.put(container(fx.id, std::slice::from_ref(&x))).await;
    fx.put(container(fx.id, &[x.clone(), a.clone()])).await;
    fx.put(container(fx.id, &[x.clone(), a_far.clone()])).await;
    fx.remove().await;
    fx.put(container(fx.id, &[x.clone(), b.clone()])).await;
    let records: Vec<_> = fx
        .drain
        .read()
        .await
        .into_iter()
        .filter(|c| ItemKey::from_attributes(&c.keys).is_ok_and(|k| k == ItemKey::Container(fx.id)))
        .collect();
    assert_eq!(records.len(), 5);
    let expected = ids(&[&x, &b]);

    // Every order of the five records (each handled twice in a row), on a
    // fresh set of worker items each time.
    let mut order: Vec<usize> = (0..records.len()).collect();
    let mut all = Vec::new();
    every_order(&mut order, &mut |o| all.push(o.to_vec()));
    assert_eq!(all.len(), 120);
    // 120 orders on DynamoDB Local are slow; every 7th keeps the test short
    // while covering every record first and last.
    for o in all.iter().step_by(7) {
        fx.clear_worker_items().await;
        for &i in o {
            for _ in 0..2 {
                let one = std::slice::from_ref(&records[i]);
                fx.drain.run_batch(&fx.app, one).await;
            }
        }
        assert_eq!(fx.flagged().await, expected, "order {o:?}");
        assert_eq!(
            fx.reminded().await,
            expected,
            "only the current foods have reminders, order {o:?}"
        );
    }
}

/// Heap's algorithm: call `f` with every permutation of `v`.
fn every_order(v: &mut [usize], f: &mut dyn FnMut(&[usize])) {
    fn go(k: usize, v: &mut [usize], f: &mut dyn FnMut(&[usize])) {
        if k <= 1 {
            f(v);
            return;
        }
        go(k - 1, v, f);
        for i in 0..k - 1 {
            if k.is_multiple_of(2) {
                v.swap(i, k - 1);
            } else {
                v.swap(0, k - 1);
            }
            go(k - 1, v, f);
        }
    }
    let n = v.len();
    go(n, v, f);
}

/// A flag is decided from the container as read; the service removes the
/// food (and that change's own record is handled, deleting the food's
/// flags) between the worker's read and its write. The stale flag must not
/// land: it would outlive its food, with no later record to remove it.
#[tokio::test]
async fn a_flag_decided_from_a_container_read_before_its_food_went_does_not_land() {
    use worker_testkit::race::{RaceBeforeWrite, ServiceOp};
    let mut fx = Fx::new().await;
    let x = food("Milk", "2024-03-27T08:00:00Z");
    let a = food("Yogurt", "2024-03-26T08:00:00Z");
    fx.put(container(fx.id, &[x.clone(), a.clone()])).await;
    fx.drain.run(&fx.app).await;
    assert_eq!(fx.flagged().await, ids(&[&x, &a]));

    // The container is shared into a second group: the link's INSERT
    // places its flags there.
    let other = GroupId::random();
    fx.put(
        Entity::Group(Group {
            id: other,
            group_name: "Office".into(),
            extra: Item::new(),
        })
        .to_item(),
    )
    .await;
    fx.put(
        Entity::ContainerLink(ContainerLink {
            group: other,
            container: fx.id,
            extra: Item::new(),
        })
        .to_item(),
    )
    .await;
    let flag = |group| ItemKey::ExpiringFood {
        group,
        container: fx.id,
        food: a.food_id,
    };
    // Right before the worker's flag puts land: A is removed, and its
    // MODIFY's handler deletes A's flags (in both groups; the new group
    // has none yet).
    let racing = Arc::new(RaceBeforeWrite::at_first_write(
        fx.store.clone(),
        vec![
            ServiceOp::Put(container(fx.id, std::slice::from_ref(&x))),
            ServiceOp::Delete(flag(fx.group).to_attributes()),
            ServiceOp::Delete(flag(other).to_attributes()),
        ],
    ));
    let app = App::new(
        racing.clone(),
        Config::for_table(&fx.table.name),
        Arc::new(ManualClock::new(t(NOW))),
    );
    let changes = fx.drain.read().await;
    fx.drain.run_batch(&app, &changes).await;
    assert!(racing.fired());
    let keys = fx.table.keys().await;
    assert!(
        !keys.contains(&flag(other).encode()),
        "the flag of the food gone did not land in the new group"
    );
    let outcomes = format!("{:?}", fx.drain.batches.last().unwrap().records);
    assert!(outcomes.contains("withheld"), "{outcomes}");

    // The rest of the stream (the container's MODIFY) settles the flags:
    // X in both groups, A nowhere.
    fx.drain.run(&fx.app).await;
    let keys = fx.table.keys().await;
    for g in [fx.group, other] {
        assert!(
            keys.contains(
                &ItemKey::ExpiringFood {
                    group: g,
                    container: fx.id,
                    food: x.food_id
                }
                .encode()
            ),
            "X flagged in {g}"
        );
        assert!(!keys.contains(&flag(g).encode()), "A not flagged in {g}");
    }
}
