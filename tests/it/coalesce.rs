//! The request-sharing store layer (`store::Coalescing`) and the
//! batched reads under it (`get_many`: BatchGetItem, `query_partitions`:
//! PartiQL `IN`), on DynamoDB Local: concurrent callers get exactly what
//! direct requests return, in far fewer requests.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::support::workload::{link, membership};
use aws_sdk_dynamodb::types::AttributeValue;
use nishiki_worker::items::{Item, attr};
use nishiki_worker::keys::{ContainerId, GroupId, ItemKey, PK, SK, UserId};
use nishiki_worker::schema::{GROUP_AND_CONTAINER_INDEX, USER_AND_GROUP_INDEX};
use support::{TestTable, key_of};
use worker_engine::store::Coalescing;
use worker_engine::store::{
    BatchWriter, ItemReader, MetricsSnapshot, QuerySpec, QueryStore, Store, StoreError, WriteOp,
};

fn coalescing(t: &TestTable) -> Coalescing {
    Coalescing::new(t.store.clone() as Arc<dyn Store>, (PK, SK))
}

fn raw(keys: &[ItemKey]) -> Vec<worker_engine::store::Key> {
    keys.iter().map(ItemKey::to_attributes).collect()
}

fn keys_of(items: &[Item]) -> BTreeSet<(String, String)> {
    items.iter().map(key_of).collect()
}

/// What `run` returns, and the requests it made of the table's store.
async fn measured<T>(t: &TestTable, run: impl Future<Output = T>) -> (T, MetricsSnapshot) {
    let before = t.store.metrics().snapshot();
    let out = run.await;
    (out, t.store.metrics().snapshot().since(&before))
}

/// Every answer is what a direct GetItem of its key returns.
async fn assert_gets_as_direct(
    t: &TestTable,
    keys: &[ItemKey],
    answers: Vec<Result<Option<Item>, StoreError>>,
) {
    for (k, answer) in keys.iter().zip(answers) {
        let direct = t.store.get(&k.to_attributes(), true).await.unwrap();
        assert_eq!(answer.unwrap(), direct, "{k:?}");
    }
}

/// 40 groups with 3 members each and 40 containers linked from one group
/// each; returns (groups, containers).
async fn seeded(t: &TestTable) -> (Vec<GroupId>, Vec<ContainerId>) {
    let mut items = Vec::new();
    let groups: Vec<GroupId> = (0..40).map(|_| GroupId::random()).collect();
    let containers: Vec<ContainerId> = (0..40).map(|_| ContainerId::random()).collect();
    for (g, c) in groups.iter().zip(&containers) {
        for _ in 0..3 {
            items.push(membership(UserId::random(), *g));
        }
        items.push(link(*g, *c));
    }
    support::seed_concurrently(&t.store, items, 4).await;
    (groups, containers)
}

/// The seeded links (present) and the containers they link (absent).
fn links_and_containers(groups: &[GroupId], containers: &[ContainerId]) -> Vec<ItemKey> {
    let mut keys: Vec<ItemKey> = groups
        .iter()
        .zip(containers)
        .map(|(g, c)| ItemKey::ContainerLink {
            group: *g,
            container: *c,
        })
        .collect();
    keys.extend(containers.iter().map(|c| ItemKey::Container(*c)));
    keys
}

#[tokio::test]
async fn concurrent_point_reads_share_batch_get_item_requests() {
    let t = support::nishiki_table().await;
    let (groups, containers) = seeded(&t).await;
    let c = coalescing(&t);
    // 80 reads (40 present, 40 absent, some keys twice), all at once.
    let mut keys = links_and_containers(&groups, &containers);
    keys.extend(keys[..10].to_vec());
    let (answers, used) = measured(
        &t,
        futures::future::join_all(raw(&keys).iter().map(|k| c.get(k, true))),
    )
    .await;
    assert_gets_as_direct(&t, &keys, answers).await;
    assert_eq!(used.get_item, 0, "no single GetItem");
    assert!(
        (1..=2).contains(&used.batch_get_item),
        "90 reads of 80 keys in {} BatchGetItem",
        used.batch_get_item
    );
}

/// Callers waiting for the same key or the same partition in one round
/// share one read of it: 100 keys asked for twice each fit one
/// BatchGetItem (200 separate keys would need two), 50 partitions asked for
/// twice each one PartiQL SELECT; every caller gets the item or items.
#[tokio::test]
async fn callers_asking_for_the_same_key_or_partition_share_one_read() {
    let t = support::nishiki_table().await;
    let (groups, containers) = seeded(&t).await;
    let c = coalescing(&t);
    let mut keys = links_and_containers(&groups, &containers);
    keys.extend((0..20).map(|_| ItemKey::User(UserId::random())));
    assert_eq!(keys.len(), 100);
    let twice: Vec<ItemKey> = keys.iter().chain(&keys).cloned().collect();
    let (answers, used) = measured(
        &t,
        c.gathered(futures::future::join_all(
            raw(&twice).iter().map(|k| c.get(k, true)),
        )),
    )
    .await;
    assert_gets_as_direct(&t, &twice, answers).await;
    assert_eq!(used.batch_get_item, 1, "200 reads of 100 keys");
    assert_eq!(used.get_item, 0);

    let mut specs: Vec<QuerySpec> = groups
        .iter()
        .map(|g| {
            QuerySpec::partition(attr::GROUP_ID, &g.to_string()).on_index(USER_AND_GROUP_INDEX)
        })
        .chain((0..10).map(|_| {
            QuerySpec::partition(attr::GROUP_ID, &GroupId::random().to_string())
                .on_index(USER_AND_GROUP_INDEX)
        }))
        .collect();
    assert_eq!(specs.len(), 50);
    specs.extend(specs.clone());
    let (pages, used) = measured(
        &t,
        c.gathered(futures::future::join_all(
            specs.iter().map(|s| c.query_page(s, None)),
        )),
    )
    .await;
    for (spec, page) in specs.iter().zip(pages) {
        let direct = t.store.query_all(spec).await.unwrap();
        assert_eq!(keys_of(&page.unwrap().items), keys_of(&direct), "{spec:?}");
    }
    assert_eq!(used.execute_statement, 1, "100 queries of 50 partitions");
    assert_eq!(used.query, 0);
}

#[tokio::test]
async fn concurrent_partition_queries_share_partiql_requests() {
    let t = support::nishiki_table().await;
    let (groups, containers) = seeded(&t).await;
    let c = coalescing(&t);
    let member_specs: Vec<QuerySpec> = groups
        .iter()
        .map(|g| {
            QuerySpec::partition(attr::GROUP_ID, &g.to_string()).on_index(USER_AND_GROUP_INDEX)
        })
        .collect();
    let link_specs: Vec<QuerySpec> = containers
        .iter()
        .map(|c| {
            QuerySpec::partition(attr::CONTAINER_ID, &c.to_string())
                .on_index(GROUP_AND_CONTAINER_INDEX)
        })
        .collect();
    let mut partition_specs: Vec<QuerySpec> = groups
        .iter()
        .map(|g| {
            let (pk, _) = ItemKey::Group(*g).encode();
            let mut spec = QuerySpec::partition(PK, &pk);
            spec.consistent = true;
            spec
        })
        .collect();
    // An empty partition and a partition asked for twice.
    let mut empty = QuerySpec::partition(PK, "Group#00000000-0000-4000-8000-000000000000");
    empty.consistent = true;
    partition_specs.push(empty);
    partition_specs.push(partition_specs[0].clone());
    let specs: Vec<QuerySpec> = member_specs
        .into_iter()
        .chain(link_specs)
        .chain(partition_specs)
        .collect();
    let (pages, used) = measured(
        &t,
        futures::future::join_all(specs.iter().map(|s| c.query_page(s, None))),
    )
    .await;
    for (spec, page) in specs.iter().zip(pages) {
        let page = page.unwrap();
        assert!(page.last_evaluated_key.is_none());
        let direct = t.store.query_all(spec).await.unwrap();
        assert_eq!(keys_of(&page.items), keys_of(&direct), "{spec:?}");
    }
    assert_eq!(used.query, 0, "no single Query");
    // 3 kinds of partition (two indexes, the table): 40, 40 and 42 callers.
    assert!(
        (3..=4).contains(&used.execute_statement),
        "122 partition queries in {} PartiQL SELECTs",
        used.execute_statement
    );
    // A query that is not a whole-partition read passes through.
    let mut limited = QuerySpec::partition(PK, &ItemKey::Group(groups[0]).encode().0);
    limited.limit = Some(1);
    assert!(limited.as_partition().is_none());
    let page = c.query_page(&limited, None).await.unwrap();
    assert_eq!(page.items.len(), 1);
}

#[tokio::test]
async fn query_partitions_matches_queries_beyond_fifty_values() {
    let t = support::nishiki_table().await;
    let mut items = Vec::new();
    let mut values = Vec::new();
    for _ in 0..120 {
        let (g, c) = (GroupId::random(), ContainerId::random());
        items.push(link(g, c));
        values.push(AttributeValue::S(c.to_string()));
    }
    support::seed_concurrently(&t.store, items, 4).await;
    values.push(AttributeValue::S("no-such-container".into()));
    let (found, used) = measured(
        &t,
        t.store.query_partitions(
            Some(GROUP_AND_CONTAINER_INDEX),
            attr::CONTAINER_ID,
            &values,
            false,
        ),
    )
    .await;
    let found = found.unwrap();
    assert_eq!(found.items.len(), 121);
    assert!(found.items[120].is_empty());
    for (value, items) in values.iter().zip(&found.items).take(120) {
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].get(attr::CONTAINER_ID), Some(value));
    }
    assert!(
        (3..=6).contains(&used.execute_statement),
        "121 values in chunks of 50: {} requests",
        used.execute_statement
    );
    // DynamoDB Local reports no consumed capacity for ExecuteStatement
    // (AWS does); the figure is passed on as reported.
    assert!(found.consumed_capacity >= 0.0);
}

#[tokio::test]
async fn concurrent_batch_writes_share_requests_and_keep_keys_apart() {
    let t = support::nishiki_table().await;
    let c = coalescing(&t);
    // 30 callers writing 3 items each; callers 0 and 1 write the same key.
    let shared = ItemKey::Group(GroupId::random());
    let mut calls: Vec<Vec<WriteOp>> = (0..30)
        .map(|_| {
            (0..3)
                .map(|_| WriteOp::Put(ItemKey::Group(GroupId::random()).to_attributes()))
                .collect()
        })
        .collect();
    calls[0].push(WriteOp::Put(shared.to_attributes()));
    calls[1].push(WriteOp::Delete(shared.to_attributes()));
    let (reports, used) = measured(
        &t,
        futures::future::join_all(calls.iter().map(|ops| c.batch_write(ops.clone()))),
    )
    .await;
    for (ops, report) in calls.iter().zip(reports) {
        assert_eq!(report.unwrap().items, ops.len());
    }
    assert!(
        used.batch_write_item <= 6,
        "92 items in {} BatchWriteItem (one at a time would be 30)",
        used.batch_write_item
    );
    let keys: BTreeSet<(String, String)> = t.keys().await.into_iter().collect();
    for ops in &calls[2..] {
        for op in ops {
            let WriteOp::Put(item) = op else {
                unreachable!()
            };
            assert!(keys.contains(&key_of(item)));
        }
    }
    assert_eq!(
        keys.len(),
        90 + usize::from(keys.contains(&key_of(&shared.to_attributes())))
    );
}

#[tokio::test]
async fn a_failed_shared_request_fails_every_caller() {
    let t = support::nishiki_table().await;
    // A table that does not exist: every shared request fails.
    let missing = Arc::new(worker_engine::store::DynamoStore::new(
        t.store.client().clone(),
        "no-such-table",
    ));
    let c = Coalescing::new(missing as Arc<dyn Store>, (PK, SK));
    let keys: Vec<ItemKey> = (0..5).map(|_| ItemKey::Group(GroupId::random())).collect();
    let answers = futures::future::join_all(raw(&keys).iter().map(|k| c.get(k, true))).await;
    for a in answers {
        assert!(matches!(a, Err(StoreError::NotFound { .. })), "{a:?}");
    }
    let writes = futures::future::join_all(
        keys.iter()
            .map(|k| c.batch_write(vec![WriteOp::Delete(k.to_attributes())])),
    )
    .await;
    for w in writes {
        assert!(matches!(w, Err(StoreError::NotFound { .. })), "{w:?}");
    }
}

#[tokio::test]
async fn one_callers_failure_does_not_fail_the_others_sharing_its_request() {
    use worker_testkit::layers::{Fault, FaultOp, FaultyStore};
    let t = support::nishiki_table().await;
    let bad = GroupId::random();
    let faulty = Arc::new(FaultyStore::new(t.store.clone() as Arc<dyn Store>));
    for op in [FaultOp::Write, FaultOp::Read] {
        faulty.inject(Fault {
            op,
            key_contains: bad.to_string(),
            times: 1000,
        });
    }
    let c = Coalescing::new(faulty as Arc<dyn Store>, (PK, SK));
    let groups: Vec<GroupId> = (0..10)
        .map(|i| if i == 4 { bad } else { GroupId::random() })
        .collect();
    let keys: Vec<ItemKey> = groups.iter().map(|g| ItemKey::Group(*g)).collect();
    let writes = futures::future::join_all(
        keys.iter()
            .map(|k| c.batch_write(vec![WriteOp::Put(k.to_attributes())])),
    )
    .await;
    let reads = futures::future::join_all(raw(&keys).iter().map(|k| c.get(k, true))).await;
    for (i, (w, r)) in writes.iter().zip(&reads).enumerate() {
        if i == 4 {
            assert!(
                w.is_err() && r.is_err(),
                "the faulty key fails: {w:?} {r:?}"
            );
        } else {
            assert_eq!(w.as_ref().unwrap().items, 1, "caller {i}");
            assert!(r.as_ref().unwrap().is_some(), "caller {i} reads its item");
        }
    }
}

/// Callers polled by one task, each reading in two dependent rounds (a point
/// read, then another point read and a partition read): inside
/// `Coalescing::gathered` each round of all callers goes out as one request
/// per kind, however the runtime schedules the flusher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gathered_poll_pass_sends_each_round_once() {
    let t = support::nishiki_table().await;
    let (groups, containers) = seeded(&t).await;
    let c = coalescing(&t);
    for attempt in 0..5 {
        let before = t.store.metrics().snapshot();
        let callers = groups.iter().zip(&containers).map(|(g, k)| {
            let c = &c;
            async move {
                let link = ItemKey::ContainerLink {
                    group: *g,
                    container: *k,
                };
                let first = c.get(&link.to_attributes(), true).await.unwrap();
                assert!(first.is_some(), "the link was seeded");
                let (pk, _) = ItemKey::Group(*g).encode();
                let mut partition = QuerySpec::partition(PK, &pk);
                partition.consistent = true;
                let container = ItemKey::Container(*k).to_attributes();
                let (container, page) =
                    futures::join!(c.get(&container, true), c.query_page(&partition, None));
                assert_eq!(container.unwrap(), None, "containers were not seeded");
                assert_eq!(
                    page.unwrap().items.len(),
                    1,
                    "the group partition: its link"
                );
            }
        });
        c.gathered(futures::future::join_all(callers)).await;
        let used = t.store.metrics().snapshot().since(&before);
        assert_eq!(
            (used.batch_get_item, used.execute_statement),
            (2, 1),
            "attempt {attempt}: 2 rounds of 40 point reads, 1 round of 40 partition reads"
        );
    }
}
