//! Guarded writes on DynamoDB Local: writes land only while the item the
//! decision was read from is as it was read; a guard that stops holding
//! withholds the rest of the sequence; a write's own condition refuses
//! only itself; the transactions and their capacity are counted.

use aws_sdk_dynamodb::types::AttributeValue;
use worker_engine::item::Item;
use worker_engine::schema::{DEFAULT_KEY, TableSchema};
use worker_engine::store::Coalescing;
use worker_engine::store::{
    Expr, Guard, GuardedOp, GuardedReport, GuardedWriter, ItemReader, ItemWriter, Key,
};
use worker_testkit::TestTable;
use worker_testkit::race::{RaceBeforeWrite, ServiceOp};

fn key(pk: &str, sk: &str) -> Key {
    Key::from([
        ("PK".to_owned(), AttributeValue::S(pk.into())),
        ("SK".to_owned(), AttributeValue::S(sk.into())),
    ])
}

fn item(pk: &str, sk: &str) -> Item {
    let mut i = key(pk, sk);
    i.insert("V".into(), AttributeValue::S("x".into()));
    i
}

async fn table() -> TestTable {
    TestTable::with_schema(&TableSchema::new(DEFAULT_KEY)).await
}

async fn seed_children(t: &TestTable, n: usize) -> Vec<GuardedOp> {
    let mut ops = Vec::new();
    for i in 0..n {
        let child = item("parent", &format!("Child#{i:04}"));
        t.store.put(child, None).await.unwrap();
        ops.push(GuardedOp::delete(key("parent", &format!("Child#{i:04}"))));
    }
    ops
}

#[tokio::test]
async fn deletes_land_in_transactions_while_the_parent_stays_absent() {
    let t = table().await;
    let ops = seed_children(&t, 230).await;
    let before = t.store.metrics().snapshot();
    let guard = Guard::absent(key("parent", "Parent"), "PK");
    let report = t.store.write_guarded(&[guard], ops).await.unwrap();
    assert_eq!(
        (
            report.applied,
            report.withheld,
            report.refused,
            report.requests
        ),
        (230, 0, 0, 3),
        "99 deletes beside the check per transaction"
    );
    assert!(report.held());
    assert_eq!(t.keys().await, Vec::<(String, String)>::new());
    let used = t.store.metrics().snapshot().since(&before);
    assert_eq!(used.transact_write_items, 3);
    assert_eq!(used.write_requests(), 3);
}

#[tokio::test]
async fn a_parent_written_again_withholds_every_delete() {
    let t = table().await;
    let ops = seed_children(&t, 5).await;
    t.store.put(item("parent", "Parent"), None).await.unwrap();
    let guard = Guard::absent(key("parent", "Parent"), "PK");
    let report = t.store.write_guarded(&[guard], ops).await.unwrap();
    assert_eq!(
        report,
        GuardedReport {
            withheld: 5,
            requests: 1,
            ..Default::default()
        }
    );
    assert_eq!(t.keys().await.len(), 6, "nothing deleted");
}

#[tokio::test]
async fn a_parent_written_between_the_read_and_the_write_is_seen() {
    let t = table().await;
    let ops = seed_children(&t, 3).await;
    // The worker read the parent as absent; the service writes it again
    // right before the worker's write lands.
    let raced = RaceBeforeWrite::at_first_write(
        t.store.clone(),
        vec![ServiceOp::Put(item("parent", "Parent"))],
    );
    assert!(
        raced
            .get(&key("parent", "Parent"), true)
            .await
            .unwrap()
            .is_none()
    );
    let guard = Guard::absent(key("parent", "Parent"), "PK");
    let report = raced.write_guarded(&[guard], ops).await.unwrap();
    assert!(raced.fired());
    assert_eq!((report.applied, report.withheld), (0, 3));
    assert_eq!(
        t.keys().await.len(),
        4,
        "the live parent keeps its children"
    );
}

#[tokio::test]
async fn a_write_with_its_own_condition_refuses_only_itself() {
    let t = table().await;
    let mut ops = seed_children(&t, 2).await;
    t.store
        .put(item("parent", "Invitation"), None)
        .await
        .unwrap();
    // Read with V = "x"; it is "renewed" (another value) meanwhile.
    let mut renewed = item("parent", "Invitation");
    renewed.insert("V".into(), AttributeValue::S("renewed".into()));
    t.store.put(renewed, None).await.unwrap();
    ops.insert(
        1,
        GuardedOp::Delete {
            key: key("parent", "Invitation"),
            condition: Some(Expr::new("#v = :v").name("#v", "V").string(":v", "x")),
        },
    );
    let guard = Guard::absent(key("parent", "Parent"), "PK");
    let report = t.store.write_guarded(&[guard], ops).await.unwrap();
    assert_eq!(
        (
            report.applied,
            report.refused,
            report.withheld,
            report.requests
        ),
        (2, 1, 0, 3)
    );
    assert_eq!(
        t.keys().await,
        vec![("parent".to_owned(), "Invitation".to_owned())]
    );
}

#[tokio::test]
async fn replaying_a_guarded_write_leaves_the_same_table() {
    let t = table().await;
    let ops = seed_children(&t, 4).await;
    let guard = [Guard::absent(key("parent", "Parent"), "PK")];
    t.store.write_guarded(&guard, ops.clone()).await.unwrap();
    let after_once = t.snapshot().await;
    let again = t.store.write_guarded(&guard, ops).await.unwrap();
    assert_eq!(again.applied, 4, "deleting what is gone succeeds");
    assert_eq!(t.snapshot().await, after_once);
}

#[tokio::test]
async fn a_guard_on_an_item_it_also_writes_is_refused_before_sending() {
    let t = table().await;
    let guard = [Guard::absent(key("parent", "Parent"), "PK")];
    let err = t
        .store
        .write_guarded(&guard, vec![GuardedOp::delete(key("parent", "Parent"))])
        .await
        .unwrap_err();
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("GuardOnWrittenItem"), "{err}");
}

// ---------------------------------------------------------------------------
// Shared transactions: callers waiting together (the coalescing store)
// ---------------------------------------------------------------------------

/// `n` parents (absent), each with `children` children; per parent, the
/// guard on its absence and the deletes of its children.
async fn families(t: &TestTable, n: usize, children: usize) -> Vec<(Guard, Vec<GuardedOp>)> {
    let mut out = Vec::new();
    for p in 0..n {
        let pk = format!("parent{p}");
        let mut ops = Vec::new();
        for c in 0..children {
            let sk = format!("Child#{c:04}");
            t.store.put(item(&pk, &sk), None).await.unwrap();
            ops.push(GuardedOp::delete(key(&pk, &sk)));
        }
        out.push((Guard::absent(key(&pk, "Parent"), "PK"), ops));
    }
    out
}

/// Run every caller's guarded write at once, as a stream batch's records
/// run (one gathered task), through a coalescing store.
async fn together(t: &TestTable, callers: Vec<(Vec<Guard>, Vec<GuardedOp>)>) -> Vec<GuardedReport> {
    let shared = Coalescing::new(t.store.clone(), ("PK", "SK"));
    let calls = callers.iter().map(|(guards, ops)| {
        let shared = &shared;
        async move { shared.write_guarded(guards, ops.clone()).await.unwrap() }
    });
    shared.gathered(futures::future::join_all(calls)).await
}

#[tokio::test]
async fn callers_waiting_together_share_one_transaction() {
    let t = table().await;
    let callers: Vec<_> = families(&t, 10, 3)
        .await
        .into_iter()
        .map(|(g, ops)| (vec![g], ops))
        .collect();
    let before = t.store.metrics().snapshot();
    let reports = together(&t, callers).await;
    for r in &reports {
        assert_eq!((r.applied, r.withheld, r.refused), (3, 0, 0));
    }
    assert!(t.keys().await.is_empty());
    let used = t.store.metrics().snapshot().since(&before);
    assert_eq!(
        used.transact_write_items, 1,
        "10 guards and 30 deletes: one transaction of 40 actions"
    );
}

#[tokio::test]
async fn a_failing_guard_withholds_only_its_own_callers_writes() {
    let t = table().await;
    let callers: Vec<_> = families(&t, 5, 2)
        .await
        .into_iter()
        .map(|(g, ops)| (vec![g], ops))
        .collect();
    // Parent 3 was written again: its children stay, everyone else's go.
    t.store.put(item("parent3", "Parent"), None).await.unwrap();
    let before = t.store.metrics().snapshot();
    let reports = together(&t, callers).await;
    let applied: Vec<(usize, usize)> = reports.iter().map(|r| (r.applied, r.withheld)).collect();
    assert_eq!(applied, vec![(2, 0), (2, 0), (2, 0), (0, 2), (2, 0)]);
    let mut left = t.keys().await;
    left.sort();
    assert_eq!(
        left,
        vec![
            ("parent3".to_owned(), "Child#0000".to_owned()),
            ("parent3".to_owned(), "Child#0001".to_owned()),
            ("parent3".to_owned(), "Parent".to_owned()),
        ]
    );
    let used = t.store.metrics().snapshot().since(&before);
    assert_eq!(
        used.transact_write_items, 6,
        "the shared transaction, cancelled, then each caller's alone"
    );
}

#[tokio::test]
async fn callers_sharing_a_guard_check_it_once() {
    let t = table().await;
    let mut fams = families(&t, 1, 4).await;
    let (guard, mut ops) = fams.pop().unwrap();
    let second = ops.split_off(2);
    let before = t.store.metrics().snapshot();
    // Two records decided from the same absence (a REMOVE and its replay
    // in one batch, say), writing different items.
    let reports = together(&t, vec![(vec![guard.clone()], ops), (vec![guard], second)]).await;
    assert_eq!(
        reports.iter().map(|r| r.applied).sum::<usize>(),
        4,
        "{reports:?}"
    );
    assert!(t.keys().await.is_empty());
    let used = t.store.metrics().snapshot().since(&before);
    assert_eq!(
        used.transact_write_items, 1,
        "one check of the shared guard (two would be refused by DynamoDB)"
    );
}

#[tokio::test]
async fn what_does_not_fit_or_clashes_goes_in_another_transaction() {
    let t = table().await;
    let callers: Vec<_> = families(&t, 3, 40)
        .await
        .into_iter()
        .map(|(g, ops)| (vec![g], ops))
        .collect();
    // A fourth caller deletes parent0's first child too (one item twice
    // in a transaction is refused), guarded by another absence.
    let mut callers = callers;
    callers.push((
        vec![Guard::absent(key("other", "Parent"), "PK")],
        vec![GuardedOp::delete(key("parent0", "Child#0000"))],
    ));
    let before = t.store.metrics().snapshot();
    let reports = together(&t, callers).await;
    let applied: Vec<usize> = reports.iter().map(|r| r.applied).collect();
    assert_eq!(applied, vec![40, 40, 40, 1]);
    assert!(t.keys().await.is_empty());
    let used = t.store.metrics().snapshot().since(&before);
    assert_eq!(
        used.transact_write_items, 2,
        "123 actions need two transactions; the clashing delete rides in the second"
    );
}

#[tokio::test]
async fn a_long_sequence_keeps_its_order_and_stops_at_its_own_guard() {
    let t = table().await;
    let (guard, ops) = families(&t, 1, 230).await.pop().unwrap();
    let before = t.store.metrics().snapshot();
    let reports = together(&t, vec![(vec![guard], ops)]).await;
    assert_eq!((reports[0].applied, reports[0].requests), (230, 3));
    let used = t.store.metrics().snapshot().since(&before);
    assert_eq!(used.transact_write_items, 3);
    // The same with the parent back: the first transaction is withheld,
    // and so is the rest of the sequence.
    let (guard, ops) = families(&t, 1, 230).await.pop().unwrap();
    t.store.put(item("parent0", "Parent"), None).await.unwrap();
    let reports = together(&t, vec![(vec![guard], ops)]).await;
    assert_eq!((reports[0].applied, reports[0].withheld), (0, 230));
    assert_eq!(t.keys().await.len(), 231);
}
