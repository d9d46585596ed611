//! The workload generator against DynamoDB Local, and the bulk-delete bound
//! of the group cascade.
//!
//! - A generated population seeds a table and every item decodes and reads
//!   back identical; the generated service calls, applied the way the
//!   service does (operation after operation, the calls of one operation in
//!   parallel), succeed, and after draining the stream through the worker
//!   the relationship invariants the stream side guarantees hold: every
//!   membership has its user and group, every container link its group and
//!   container, every invitation link its group, every container a link.
//! - A group cascade deleting `n` items uses at most `ceil(n / 25)`
//!   BatchWriteItem requests, plus its conditional single deletes.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::items::{Entity, Item};
use nishiki_worker::jobs::relationships::cascade_group;
use nishiki_worker::keys::{ItemKey, ItemKind};
use nishiki_worker::workload::{self, ServiceCall, Workload, WorkloadSpec};
use support::{Drain, TestTable};
use worker_engine::store::{
    BatchWriter, DynamoStore, ItemWriter, Store, WriteOp, WriteOutcome, local_client,
};

async fn seed(store: &DynamoStore, items: &[Item]) {
    let ops = items.iter().cloned().map(WriteOp::Put).collect();
    store.batch_write(ops).await.expect("seed");
}

async fn apply(store: &Arc<DynamoStore>, w: &Workload) {
    for op in &w.operations {
        let calls = w.calls_of(op).iter().map(|c| {
            let store = store.clone();
            async move {
                let out = match c {
                    ServiceCall::Put(item) => store.put(item.clone(), None).await,
                    ServiceCall::Delete(key) => store.delete(&key.to_attributes(), None).await,
                };
                assert_eq!(out.expect("service write"), WriteOutcome::Applied);
            }
        });
        futures::future::join_all(calls).await;
    }
}

fn keyed(items: &[Item]) -> BTreeMap<ItemKey, Item> {
    items
        .iter()
        .map(|i| (ItemKey::from_attributes(i).expect("key"), i.clone()))
        .collect()
}

#[tokio::test]
async fn population_seeds_and_reads_back_identical() {
    let table = TestTable::new().await;
    let w = workload::generate(&WorkloadSpec::small(11));
    seed(&table.store, &w.population).await;
    let read = keyed(&table.snapshot().await);
    assert_eq!(read, keyed(&w.population));
    for item in read.into_values() {
        Entity::from_item(item).expect("every item decodes");
    }
}

/// Applying a workload and draining the stream leaves no relationship drift
/// that the stream side repairs.
#[tokio::test]
async fn drained_workload_keeps_relationships_consistent() {
    for seed in [1u64, 2, 3] {
        let table = TestTable::new().await;
        let mut spec = WorkloadSpec::small(seed);
        spec.operations = 40;
        spec.leftover_rate = 0.5;
        let w = workload::generate(&spec);
        assert!(w.operations.iter().any(|o| o.leftover), "seed {seed}");
        seed_and_drain(&table, &w, &spec).await;

        let items = keyed(&table.snapshot().await);
        let has = |k: &ItemKey| items.contains_key(k);
        let mut linked = BTreeSet::new();
        for key in items.keys() {
            match key {
                ItemKey::Membership { user, group } => {
                    assert!(
                        has(&ItemKey::User(*user)),
                        "seed {seed}: {key:?} without user"
                    );
                    assert!(
                        has(&ItemKey::Group(*group)),
                        "seed {seed}: {key:?} without group"
                    );
                }
                ItemKey::ContainerLink { group, container } => {
                    assert!(
                        has(&ItemKey::Group(*group)),
                        "seed {seed}: {key:?} without group"
                    );
                    assert!(
                        has(&ItemKey::Container(*container)),
                        "seed {seed}: {key:?} without container"
                    );
                    linked.insert(*container);
                }
                ItemKey::InvitationLink(group) => {
                    assert!(
                        has(&ItemKey::Group(*group)),
                        "seed {seed}: {key:?} without group"
                    )
                }
                _ => {}
            }
        }
        for key in items.keys() {
            if let ItemKey::Container(c) = key {
                assert!(
                    linked.contains(c),
                    "seed {seed}: container {c} without a link"
                );
            }
        }
        // The worker never deleted a live relationship: every membership
        // the service believes in (created in the population or by a Put,
        // not deleted by the service, its user and group live) is there.
        let service_view = service_view(&w);
        for key in &service_view {
            if let ItemKey::Membership { user, group } = key
                && service_view.contains(&ItemKey::User(*user))
                && service_view.contains(&ItemKey::Group(*group))
            {
                assert!(has(key), "seed {seed}: live membership {key:?} deleted");
            }
        }
    }
}

async fn seed_and_drain(table: &TestTable, w: &Workload, spec: &WorkloadSpec) {
    seed(&table.store, &w.population).await;
    let mut drain = Drain::new(table).await;
    drain.skip_existing().await;
    apply(&table.store, w).await;
    let store: Arc<dyn Store> = table.store.clone();
    let app = App::new(
        store,
        Config::for_table(&table.name),
        Arc::new(ManualClock::new(spec.now)),
    );
    let handled = drain.run(&app).await;
    assert!(handled >= w.calls.len(), "every call makes a record");
    for b in &drain.batches {
        assert_eq!(b.failed + b.malformed, 0, "{b:?}");
        assert!(b.batch_item_failures.is_empty(), "{b:?}");
    }
}

/// The keys that exist after the calls if every write lands in call order
/// (the service's own view; renewals end with the link present or absent,
/// both are fine here).
fn service_view(w: &Workload) -> BTreeSet<ItemKey> {
    let mut keys: BTreeSet<ItemKey> = keyed(&w.population).into_keys().collect();
    for c in &w.calls {
        match c {
            ServiceCall::Put(_) => keys.insert(c.key()),
            ServiceCall::Delete(k) => keys.remove(k),
        };
    }
    keys
}

/// A group cascade deleting n >= 60 dependents uses at most ceil(n/25)
/// BatchWriteItem requests, plus its conditional single deletes.
#[tokio::test]
async fn group_cascade_bulk_deletes_within_ceil_n_over_25() {
    let table = TestTable::new().await;
    let now = WorkloadSpec::small(0).now;
    let big = workload::big_group(99, 60, 4, now);
    assert!(big.dependents >= 60);
    seed(&table.store, &big.items).await;
    table
        .store
        .delete(&ItemKey::Group(big.group).to_attributes(), None)
        .await
        .expect("delete the group");

    // A store of its own: its metrics count only the cascade.
    let store = DynamoStore::new(local_client(&table.endpoint), &table.name);
    let report = cascade_group(&store, big.group).await.expect("cascade");
    let m = store.metrics().snapshot();
    let n = report.memberships + report.links + report.containers + report.invitations;
    assert_eq!(n, big.dependents, "{report:?}");
    let conditional = m.delete_item + m.put_item + m.update_item;
    assert!(
        conditional <= 1,
        "only the invitation delete is conditional: {m:?}"
    );
    assert!(
        m.batch_write_item <= n.div_ceil(25) as u64,
        "{} BatchWriteItem requests for {n} deletes (bound ceil(n/25) = {}), \
         plus {conditional} conditional single deletes: {report:?}",
        m.batch_write_item,
        n.div_ceil(25)
    );

    // Nothing of the group is left; the users stay.
    let left = keyed(&table.snapshot().await);
    assert!(
        left.keys().all(|k| k.kind() == ItemKind::User),
        "{:?}",
        left.keys().collect::<Vec<_>>()
    );
    assert_eq!(left.len(), 60);
}
