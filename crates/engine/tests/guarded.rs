//! Guarded writes on DynamoDB Local: writes land only while the item the
//! decision was read from is as it was read; a guard that stops holding
//! withholds the rest of the sequence; a write's own condition refuses
//! only itself; the transactions and their capacity are counted.

use aws_sdk_dynamodb::types::AttributeValue;
use worker_engine::item::Item;
use worker_engine::schema::{DEFAULT_KEY, TableSchema};
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
