//! The local event-source loop (`nishiki-worker dev`'s core) against a real
//! DynamoDB Local: the service deletes a group the way it does, the loop
//! reads the stream like Lambda's event source mapping and the cascade
//! completes; an injected transient failure is retried from the failed
//! record's sequence number; a failure that persists is discarded after the
//! bounded retries.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nishiki_cli::KEYS;
use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::keys::{ContainerId, GroupId, ItemKey};
use support::TestTable;
use worker_engine::store::{ItemWriter, Store};
use worker_testkit::layers::{Fault, FaultOp, FaultyStore};
use worker_toolkit::mapping::{Action, Invocation, MappingConfig};
use worker_toolkit::replay::dev::EventSourceLoop;
use worker_toolkit::replay::snapshot::{load_items, read_snapshot, snapshot_text};
use worker_toolkit::stream_reader::{StartAt, StreamTail};

const NOW: &str = "2024-03-25T09:00:00Z";
const HOME: &str = "9e000000-0000-4000-8000-00000000a001";

fn events(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("events")
        .join(rel)
}

fn app(t: &TestTable, store: Arc<dyn Store>) -> App {
    App::new(
        store,
        Config::for_table(&t.name),
        Arc::new(ManualClock::new(NOW.parse().unwrap())),
    )
}

/// The household table and a loop that starts after its existing records.
async fn setup(config: MappingConfig) -> (TestTable, EventSourceLoop<StreamTail>) {
    let t = support::nishiki_table().await;
    let items = read_snapshot(&events("tables/household.json"), KEYS).unwrap();
    load_items(t.store.clone(), items, 4, None).await.unwrap();
    let arn = t.store.stream_arn().await.unwrap().unwrap();
    let client = worker_toolkit::stream_reader::local_client(&t.endpoint);
    let mut l = EventSourceLoop::new(StreamTail::new(client, arn, StartAt::TrimHorizon), config);
    l.skip_existing().await.unwrap();
    (t, l)
}

/// The service deletes the Home group: containers, invitation, group item,
/// with single unconditional deletes (memberships and links stay).
async fn service_deletes_home(t: &TestTable) {
    let home: GroupId = HOME.parse().unwrap();
    let fridge: ContainerId = "c0000000-0000-4000-8000-0000000c0001".parse().unwrap();
    let freezer: ContainerId = "c0000000-0000-4000-8000-0000000c0002".parse().unwrap();
    for key in [
        ItemKey::Container(fridge),
        ItemKey::Container(freezer),
        ItemKey::InvitationLink(home),
        ItemKey::Group(home),
    ] {
        t.store.delete(&key.to_attributes(), None).await.unwrap();
    }
}

fn golden_group_deleted() -> String {
    std::fs::read_to_string(events("golden/group-deleted.json")).unwrap()
}

#[tokio::test]
async fn group_deletion_cascade_finishes_through_the_loop() {
    let (t, mut l) = setup(MappingConfig {
        batch_size: 2,
        ..MappingConfig::default()
    })
    .await;
    let app = app(&t, t.store.clone());
    service_deletes_home(&t).await;
    let logs = l
        .run_until_idle(&app, Duration::from_secs(30))
        .await
        .unwrap();
    // 4 service records in batches of 2, then the worker's own deletes
    // (skipped by the loop guard).
    assert!(logs.len() >= 2, "{logs:?}");
    assert!(logs.iter().all(|b| b.records <= 2));
    assert!(
        logs.iter().all(|b| b.invocation == Invocation::Succeeded),
        "{logs:?}"
    );
    assert!(logs.iter().any(|b| b.handled > 0));
    assert_eq!(l.pending(), 0);
    assert_eq!(
        snapshot_text(&t.snapshot().await, KEYS),
        golden_group_deleted(),
        "the live loop ends where the replay of the captured deletion ends"
    );
}

/// With the mapping's ParallelizationFactor at 10 (records split by
/// partition key into lanes that run at once, order kept per key only) the
/// cascade ends exactly where the in-order replay of the capture ends.
#[tokio::test]
async fn group_deletion_cascade_finishes_at_parallelization_factor_10() {
    let (t, mut l) = setup(MappingConfig {
        batch_size: 2,
        parallelization_factor: 10,
        partition_key: Some("PK".into()),
        ..MappingConfig::default()
    })
    .await;
    let app = app(&t, t.store.clone());
    service_deletes_home(&t).await;
    let logs = l
        .run_until_idle(&app, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(
        logs.iter().all(|b| b.invocation == Invocation::Succeeded),
        "{logs:?}"
    );
    let lanes: std::collections::BTreeSet<usize> = logs.iter().filter_map(|b| b.lane).collect();
    assert!(
        lanes.len() > 1,
        "the records went to several lanes: {logs:?}"
    );
    assert!(logs.iter().all(|b| b.records <= 2));
    assert_eq!(l.pending(), 0);
    assert_eq!(
        snapshot_text(&t.snapshot().await, KEYS),
        golden_group_deleted(),
        "the loop at factor 10 ends where the replay of the captured deletion ends"
    );
}

#[tokio::test]
async fn transient_failure_is_retried_from_the_failed_sequence_number() {
    let (t, mut l) = setup(MappingConfig::default()).await;
    let faulty = Arc::new(FaultyStore::new(t.store.clone()));
    // The cascade's membership deletes (PK=<user>, SK=Group#<home>) fail once.
    faulty.inject(Fault {
        op: FaultOp::Write,
        key_contains: format!("SK=Group#{HOME}"),
        times: 1,
    });
    // One record at a time: with records handled together, the cascade's
    // deletes may share a request with another record's writes, and a
    // failed shared request is resent per caller, which would absorb this
    // one-shot fault instead of reporting it.
    let mut config = Config::for_table(&t.name);
    config.common.stream_concurrency = 1;
    let app = App::new(
        faulty.clone(),
        config,
        Arc::new(ManualClock::new(NOW.parse().unwrap())),
    );
    service_deletes_home(&t).await;
    let logs = l
        .run_until_idle(&app, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(faulty.injected(), 1);

    let first = &logs[0];
    assert_eq!(first.records, 4, "the four service records in one batch");
    let Invocation::PartialFailure { failed_sequence } = &first.invocation else {
        panic!("{first:?}");
    };
    assert_eq!(first.handled, 3, "the records before the group's were done");
    assert_eq!(
        first.action,
        Action::Retry {
            from_sequence: Some(failed_sequence.clone()),
            records: 100
        }
    );
    assert_eq!(
        first.last_sequence.as_ref(),
        Some(failed_sequence),
        "the group REMOVE came last"
    );
    assert!(
        first
            .line()
            .contains(&format!("retrying from seq {failed_sequence}"))
    );
    let retry = &logs[1];
    assert_eq!(retry.attempt, 2);
    assert_eq!(
        retry.first_sequence.as_ref(),
        Some(failed_sequence),
        "retried from the failed record"
    );
    assert_eq!(retry.invocation, Invocation::Succeeded);
    assert_eq!(
        snapshot_text(&t.snapshot().await, KEYS),
        golden_group_deleted(),
        "the cascade completed"
    );
}

#[tokio::test]
async fn a_failure_that_persists_is_discarded_after_the_retries() {
    let (t, mut l) = setup(MappingConfig {
        max_retries: 2,
        ..MappingConfig::default()
    })
    .await;
    let faulty = Arc::new(FaultyStore::new(t.store.clone()));
    faulty.inject(Fault {
        op: FaultOp::Write,
        key_contains: format!("SK=Group#{HOME}"),
        times: 1000,
    });
    let app = app(&t, faulty.clone());
    service_deletes_home(&t).await;
    let logs = l
        .run_until_idle(&app, Duration::from_secs(30))
        .await
        .unwrap();
    let attempts: Vec<u32> = logs.iter().take(3).map(|b| b.attempt).collect();
    assert_eq!(attempts, [1, 2, 3], "{logs:?}");
    let Invocation::PartialFailure { failed_sequence } = &logs[0].invocation else {
        panic!("{:?}", logs[0]);
    };
    // The retries start at the group's record; what Lambda would discard is
    // that record and whatever the retried batch held after it (here the
    // worker's own writes of the first records, read meanwhile).
    let Action::Discard {
        from_sequence,
        records,
    } = &logs[2].action
    else {
        panic!("{:?}", logs[2]);
    };
    assert_eq!(from_sequence.as_ref(), Some(failed_sequence));
    assert!(*records >= 1);
    assert!(logs[2].line().contains("DISCARDED"));
    assert_eq!(l.pending(), 0, "the loop moved on");
    let keys = t.keys().await;
    assert!(
        keys.iter().any(|(_, sk)| *sk == format!("Group#{HOME}")),
        "the discarded cascade left the memberships (the audit repairs them)"
    );
}
