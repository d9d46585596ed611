//! Foundation against a real DynamoDB Local: the store adapter (conditional
//! outcomes, pagination, BatchWriteItem retries), the stream reader, and the
//! batch engine's failure semantics with an injected transient failure and a
//! malformed record inside a good batch.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::WriteRequest;
use chrono::{DateTime, Utc};
use nishiki_worker::config::ManualClock;
use nishiki_worker::items::{Entity, Group, Item, Membership, User};
use nishiki_worker::keys::{GroupId, ItemKey, ItemKind, UserId};
use nishiki_worker::schema::USER_AND_GROUP_INDEX;
use nishiki_worker::worker::{BatchFacts, Change, ChangeHandler, HandlerOutcome, Router};
use support::{Drain, TestTable, key_of};
use worker_engine::HandlerError;
use worker_engine::store::{
    Backoff, BatchSender, BatchWriter, DynamoStore, Expr, ItemReader, ItemWriter, QuerySpec,
    QueryStore, Store, StoreError, WriteOp, WriteOutcome, write_in_batches,
};
use worker_engine::stream::{ChangeKind, decode_event, encode_event};
use worker_engine::stream::{EngineConfig, RecordStatus, run_batch};
use worker_testkit::layers::{Fault, FaultOp, FaultyStore};

fn now() -> DateTime<Utc> {
    "2024-03-25T09:00:00Z".parse().unwrap()
}

fn user(id: UserId) -> Item {
    Entity::User(User {
        id,
        user_name: "Test User".into(),
        email_address: "someone@example.com".into(),
        extra: Item::new(),
    })
    .to_item()
}

fn group(id: GroupId) -> Item {
    Entity::Group(Group {
        id,
        group_name: "Home".into(),
        extra: Item::new(),
    })
    .to_item()
}

fn membership(user: UserId, group: GroupId) -> Item {
    Entity::Membership(Membership {
        user,
        group,
        extra: Item::new(),
    })
    .to_item()
}

#[tokio::test]
async fn conditional_writes_are_typed_outcomes() {
    let t = support::nishiki_table().await;
    let g = GroupId::random();
    let key = ItemKey::Group(g).to_attributes();
    let pk = nishiki_worker::keys::PK;

    assert_eq!(
        t.store
            .put(group(g), Some(Expr::not_exists(pk)))
            .await
            .unwrap(),
        WriteOutcome::Applied
    );
    assert_eq!(
        t.store
            .put(group(g), Some(Expr::not_exists(pk)))
            .await
            .unwrap(),
        WriteOutcome::ConditionFailed,
        "a second create must be a typed condition failure, not an error"
    );
    let wrong_name = Expr::new("#n = :n")
        .name("#n", "GroupName")
        .string(":n", "Other");
    assert_eq!(
        t.store.delete(&key, Some(wrong_name)).await.unwrap(),
        WriteOutcome::ConditionFailed
    );
    assert!(
        t.store.get(&key, true).await.unwrap().is_some(),
        "failed condition deletes nothing"
    );
    let right_name = Expr::new("#n = :n")
        .name("#n", "GroupName")
        .string(":n", "Home");
    assert_eq!(
        t.store.delete(&key, Some(right_name)).await.unwrap(),
        WriteOutcome::Applied
    );
    assert!(t.store.get(&key, true).await.unwrap().is_none());

    let m = t.store.metrics().snapshot();
    assert_eq!((m.put_item, m.delete_item, m.get_item), (2, 2, 2));
    assert!(
        m.write_capacity > 0.0,
        "DynamoDB Local reports consumed capacity: {m:?}"
    );
}

#[tokio::test]
async fn queries_and_scans_follow_pagination() {
    let t = support::nishiki_table().await;
    let g = GroupId::random();
    let users: Vec<UserId> = (0..60).map(|_| UserId::random()).collect();
    let ops = users
        .iter()
        .map(|u| WriteOp::Put(membership(*u, g)))
        .collect();
    let report = t.store.batch_write(ops).await.unwrap();
    assert_eq!(report.items, 60);
    assert_eq!(report.requests, 3, "60 items go in chunks of 25");

    let mut spec = QuerySpec::partition("GroupId", &g.to_string()).on_index(USER_AND_GROUP_INDEX);
    spec.limit = Some(7);
    let members = t.store.query_all(&spec).await.unwrap();
    assert_eq!(members.len(), 60);
    let mut found: Vec<UserId> = members
        .iter()
        .map(|i| match ItemKey::from_attributes(i).unwrap() {
            ItemKey::Membership { user, .. } => user,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    found.sort();
    let mut expected = users.clone();
    expected.sort();
    assert_eq!(found, expected);
    assert!(
        t.store.metrics().snapshot().query >= 9,
        "limit 7 needs at least 9 pages"
    );
}

/// Sends half of each batch to the real table and hands the rest back as
/// unprocessed, as DynamoDB does under throttling.
struct HalfProcessed<'a> {
    inner: &'a DynamoStore,
    calls: Mutex<u32>,
}

#[async_trait]
impl BatchSender for HalfProcessed<'_> {
    async fn send_batch(
        &self,
        mut requests: Vec<WriteRequest>,
    ) -> Result<(Vec<WriteRequest>, f64), StoreError> {
        *self.calls.lock().unwrap() += 1;
        let keep = requests.len().div_ceil(2);
        let deferred = requests.split_off(keep);
        let (unprocessed, consumed) = self.inner.send_batch(requests).await?;
        assert!(unprocessed.is_empty());
        Ok((deferred, consumed))
    }
}

/// Never processes anything.
struct Stuck;

#[async_trait]
impl BatchSender for Stuck {
    async fn send_batch(
        &self,
        requests: Vec<WriteRequest>,
    ) -> Result<(Vec<WriteRequest>, f64), StoreError> {
        Ok((requests, 0.0))
    }
}

#[tokio::test]
async fn batch_write_retries_unprocessed_items() {
    let t = support::nishiki_table().await;
    let g = GroupId::random();
    let users: Vec<UserId> = (0..30).map(|_| UserId::random()).collect();
    let ops: Vec<WriteOp> = users
        .iter()
        .map(|u| WriteOp::Put(membership(*u, g)))
        .collect();
    let sender = HalfProcessed {
        inner: &t.store,
        calls: Mutex::new(0),
    };
    let fast = Backoff {
        max_attempts: 10,
        base: Duration::from_millis(1),
        max: Duration::from_millis(20),
    };
    let report = write_in_batches(&sender, ("PK", "SK"), ops.clone(), fast)
        .await
        .unwrap();
    // Chunk of 25: 13+6+3+2+1 sent over 5 calls; chunk of 5: 3+1+1 over 3 calls.
    assert_eq!(report.requests, 8);
    assert_eq!(*sender.calls.lock().unwrap(), 8);
    assert_eq!(report.retried_items, 12 + 6 + 3 + 1 + 2 + 1);
    let keys = t.keys().await;
    assert_eq!(
        keys.len(),
        30,
        "every unprocessed item was retried until written"
    );

    let err = write_in_batches(&Stuck, ("PK", "SK"), ops, fast)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Unprocessed {
                operation: "BatchWriteItem",
                remaining: 25,
                attempts: 10
            }
        ),
        "{err:?}"
    );
    assert!(
        err.is_retryable(),
        "left-over items make the record retry, never vanish"
    );
}

/// A stream handler for the engine tests: reads the changed item's key
/// (through whatever store it is given) and remembers what it saw.
struct Touch {
    store: Arc<dyn Store>,
    seen: Mutex<Vec<ItemKey>>,
}

#[async_trait]
impl ChangeHandler<Change> for Touch {
    fn name(&self) -> &'static str {
        "touch"
    }
    fn wants(&self, kind: ItemKind) -> bool {
        !kind.is_worker_owned()
    }
    async fn handle_in_batch(
        &self,
        change: &Change,
        _now: DateTime<Utc>,
        _batch: &BatchFacts,
    ) -> Result<HandlerOutcome, HandlerError> {
        self.store.get(&change.key.to_attributes(), true).await?;
        self.seen.lock().unwrap().push(change.key.clone());
        Ok(HandlerOutcome::Nothing("looked".into()))
    }
}

async fn seeded_stream(t: &TestTable) -> Vec<worker_engine::stream::StreamChange> {
    let g = GroupId::random();
    let u1 = UserId::random();
    let u2 = UserId::random();
    for item in [
        group(g),
        user(u1),
        membership(u1, g),
        user(u2),
        membership(u2, g),
    ] {
        t.store.put(item, None).await.unwrap();
    }
    t.store
        .delete(
            &ItemKey::Membership { user: u2, group: g }.to_attributes(),
            None,
        )
        .await
        .unwrap();
    let mut drain = Drain::new(t).await;
    let changes = drain.read().await;
    assert_eq!(
        changes.len(),
        6,
        "five inserts and one removal on the stream"
    );
    assert_eq!(changes[5].kind, ChangeKind::Remove);
    changes
}

#[tokio::test]
async fn a_transient_failure_returns_exactly_that_record_and_stops() {
    let t = support::nishiki_table().await;
    let changes = seeded_stream(&t).await;
    let faulty = Arc::new(FaultyStore::new(t.store.clone()));
    // The third record (the first membership) hits a throttling-like failure.
    let victim = ItemKey::from_attributes(&changes[2].keys).unwrap();
    let (pk, sk) = victim.encode();
    faulty.inject(Fault {
        op: FaultOp::Read,
        key_contains: format!("PK={pk},SK={sk}"),
        times: 1,
    });
    let touch = Arc::new(Touch {
        store: faulty.clone(),
        seen: Mutex::new(Vec::new()),
    });
    let router = Router::new(Arc::new(ManualClock::new(now()))).with(touch.clone());

    let event = encode_event(&changes, None);
    let records = decode_event(&event).unwrap();
    let report = run_batch(records, &router, &EngineConfig::default()).await;

    assert_eq!(
        report.batch_item_failures,
        vec![changes[2].sequence_number.clone().unwrap().to_string()],
        "exactly the failed record's sequence number goes back to Lambda"
    );
    assert_eq!(faulty.injected(), 1);
    assert_eq!(
        touch.seen.lock().unwrap().len(),
        2,
        "records after the failure are not processed"
    );
    assert!(matches!(
        report.records[2].status,
        RecordStatus::Failed { .. }
    ));
    for r in &report.records[3..] {
        assert!(
            matches!(r.status, RecordStatus::NotAttempted { .. }),
            "{r:?}"
        );
    }
    assert_eq!(report.response().batch_item_failures.len(), 1);

    // Lambda retries from the failed record: everything goes through.
    let retry = encode_event(&changes[2..], None);
    let report = run_batch(
        decode_event(&retry).unwrap(),
        &router,
        &EngineConfig::default(),
    )
    .await;
    assert!(report.batch_item_failures.is_empty());
    assert_eq!(touch.seen.lock().unwrap().len(), 6);
}

#[tokio::test]
async fn a_malformed_record_is_skipped_and_the_rest_processed() {
    let t = support::nishiki_table().await;
    let changes = seeded_stream(&t).await;
    let mut event = encode_event(&changes, None);
    let records = event["Records"].as_array_mut().unwrap();
    // One record whose key is not a key of this table, one that is not a record at all.
    let mut bad_key = records[1].clone();
    bad_key["eventID"] = "bad-key-event".into();
    bad_key["dynamodb"]["Keys"]["SK"] = serde_json::json!({"S": "USER"});
    records.insert(2, bad_key);
    records.insert(4, serde_json::json!({"eventID": "garbage", "dynamodb": 42}));

    let touch = Arc::new(Touch {
        store: t.store.clone(),
        seen: Mutex::new(Vec::new()),
    });
    let router = Router::new(Arc::new(ManualClock::new(now()))).with(touch.clone());
    let report = run_batch(
        decode_event(&event).unwrap(),
        &router,
        &EngineConfig::default(),
    )
    .await;

    assert!(
        report.batch_item_failures.is_empty(),
        "bad input never stalls the stream"
    );
    assert_eq!((report.malformed, report.rejected), (1, 1), "{report:?}");
    assert_eq!(
        touch.seen.lock().unwrap().len(),
        6,
        "every good record was processed"
    );
    let bad = report
        .records
        .iter()
        .find(|r| r.event_id.as_deref() == Some("bad-key-event"))
        .unwrap();
    let RecordStatus::Rejected { reason } = &bad.status else {
        panic!("{bad:?}")
    };
    assert!(reason.contains("wrong case"), "{reason}");
    assert!(bad.keys.as_deref().unwrap_or_default().contains("USER"));
}

#[tokio::test]
async fn stream_changes_decode_to_typed_images() {
    let t = TestTable::with_schema(&nishiki_worker::schema::nishiki()).await;
    let changes = seeded_stream(&t).await;
    let typed: Vec<Change> = changes
        .iter()
        .map(|c| Change::from_stream(c).unwrap())
        .collect();
    assert!(matches!(typed[0].new, Some(Entity::Group(_))));
    assert!(matches!(typed[1].new, Some(Entity::User(_))));
    let removal = &typed[5];
    assert!(removal.is_removal());
    assert!(removal.new.is_none());
    assert!(matches!(removal.old, Some(Entity::Membership(_))));
    // The stream round-trips through the Lambda event shape unchanged.
    let again: Vec<_> = decode_event(&encode_event(&changes, None))
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(again, changes);
    // And the table holds what the service wrote.
    let keys: Vec<_> = t.snapshot().await.iter().map(key_of).collect();
    assert_eq!(keys.len(), 4);
}
