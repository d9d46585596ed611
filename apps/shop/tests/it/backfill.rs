//! `backfill` on DynamoDB Local: a table written without index attributes
//! ends as the stream would have left it, across ticks that stop early and
//! resume from the checkpoint.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use shop_worker::derive::backfill::Backfill;
use shop_worker::keys::{self, Job};
use shop_worker::schema::schema;
use support::*;
use worker_engine::EventFunction;
use worker_engine::schedule::{JobRun, Tick, TickSource};
use worker_engine::store::ItemReader;
use worker_testkit::workload::{Seeded, apply_batched};
use worker_testkit::{Drain, TestTable};

fn run(deadline: Option<Instant>) -> JobRun<Job> {
    JobRun {
        now: now(),
        tick: Tick {
            job: Job::Backfill,
            scheduled_time: None,
            source: TickSource::Manual,
        },
        deadline,
        margin: Duration::ZERO,
    }
}

#[tokio::test]
async fn backfill_equals_the_streams_result_and_resumes() {
    let h = history(&mut Seeded::new(77), 600);
    let streamed = TestTable::with_schema(&schema()).await;
    let mut drain = Drain::new(&streamed).await;
    apply_batched(streamed.store.as_ref(), &h.writes).await;
    drain.run(&app(streamed.store.clone())).await;

    let backfilled = TestTable::with_schema(&schema()).await;
    apply_batched(backfilled.store.as_ref(), &h.writes).await;
    let before = backfilled.snapshot().await;
    assert!(
        before
            .iter()
            .all(|i| !i.contains_key(keys::GSI1PK) && !i.contains_key(keys::SKU))
    );

    // Ticks out of time after each page: the pass resumes where it stopped.
    let job = Backfill::new(backfilled.store.clone()).with_page_size(25);
    let checkpoint = keys::checkpoint(Job::Backfill);
    let mut ticks = 0;
    let progress = std::sync::atomic::AtomicU64::new(0);
    loop {
        ticks += 1;
        let report = job
            .tick(&run(Some(Instant::now())), &|f| {
                progress.fetch_max(f.scanned, std::sync::atomic::Ordering::Relaxed);
            })
            .await
            .unwrap();
        let stored = backfilled.store.get(&checkpoint, true).await.unwrap();
        if report.complete {
            assert!(stored.is_none(), "a complete pass leaves no checkpoint");
            // Every item, and the checkpoint when the scan passed it.
            let scanned = report.details["pass_scanned"].as_u64().unwrap() as usize;
            assert!(
                (before.len()..=before.len() + 1).contains(&scanned),
                "{scanned}"
            );
            break;
        }
        assert!(stored.is_some(), "an incomplete pass saves its position");
        assert!(ticks < 100, "the pass progresses");
    }
    assert!(ticks >= before.len() / 25, "{ticks} ticks");
    assert!(
        progress.into_inner() >= 25,
        "the progress hook sees the pages"
    );
    assert_eq!(backfilled.snapshot().await, streamed.snapshot().await);

    // Again, as a tick of the app: nothing left to write.
    let report = app(backfilled.store.clone())
        .invoke_schedule(&json!({"job": "backfill", "scheduledTime": NOW}))
        .await
        .unwrap();
    assert_eq!(report["complete"], json!(true));
    assert_eq!(report["details"]["written"], json!(0));
    assert_eq!(report["details"]["up_to_date"], json!(before.len()));
}

/// `shop-worker backfill` on a table: the whole pass in one run.
#[tokio::test]
async fn the_command_line_backfills_a_table() {
    let h = history(&mut Seeded::new(8), 150);
    let table = TestTable::with_schema(&schema()).await;
    apply_batched(table.store.as_ref(), &h.writes).await;
    let cli = worker_toolkit::cli::parse_from::<shop_cli::Shop, _, _>([
        "shop-worker",
        "backfill",
        "--endpoint-url",
        &table.endpoint,
        "--table",
        &table.name,
    ])
    .unwrap();
    let code = cli.run::<shop_cli::Shop>().await.expect("backfill runs");
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    for item in table.snapshot().await {
        let d = shop_worker::derive::rules::Derivation::of(&item)
            .unwrap()
            .unwrap();
        assert!(d.satisfied_by(&item), "{}", d.key);
    }
    assert!(
        table
            .store
            .get(&keys::checkpoint(Job::Backfill), true)
            .await
            .unwrap()
            .is_none()
    );
}
