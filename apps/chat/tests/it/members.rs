//! `NumMembers` on DynamoDB Local: equal to the member items after joins
//! and leaves delivered at least once, shuffled, by concurrent workers.

use crate::support;

use chat_worker::keys::{ChatKind, Job};
use chat_worker::schema::Table;
use rand::Rng;
use support::*;
use worker_engine::EventFunction;
use worker_engine::Worker;
use worker_engine::stream::{StreamChange, encode_event};
use worker_testkit::workload::Seeded;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_count_follows_joins_and_leaves_under_redelivery_and_concurrency() {
    let mut chat = Chat::new().await;
    let mut rng = Seeded::new(11);
    // One chat counted from a wrong start, one without a count yet.
    chat.put(Table::GroupChats, group_chat("g1", Some(100), Some(7)))
        .await;
    chat.put(Table::GroupChats, group_chat("g2", None, None))
        .await;
    for _ in 0..300 {
        let g = if rng.rng().random_bool(0.5) {
            "g1"
        } else {
            "g2"
        };
        let u = format!("u{}", rng.rng().random_range(0..15));
        if rng.rng().random_bool(0.6) {
            chat.put(Table::GroupChats, member(ChatKind::Group, g, &u))
                .await;
        } else {
            chat.delete(Table::GroupChats, member(ChatKind::Group, g, &u))
                .await;
        }
    }
    let records: Vec<_> = chat.read().await;
    let delivery = rng.redelivered(records, 0.3);
    let batches = rng.batches(delivery, 20);
    let other = chat.another_worker();
    // Two workers take the batches at the same time, each in turn.
    let (even, odd): (Vec<_>, Vec<_>) = batches
        .into_iter()
        .enumerate()
        .partition(|(i, _)| i % 2 == 0);
    tokio::join!(run(&chat.worker, even), run(&other, odd));
    chat.settle().await;
    for g in ["g1", "g2"] {
        let (n, users) = chat.members(g).await;
        assert_eq!(n, Some(users.len() as i64), "{g}");
    }
    // Once settled, every record again changes nothing.
    let settled = chat.snapshot().await;
    let again = chat.read().await;
    assert!(again.is_empty());
    chat.put(Table::GroupChats, member(ChatKind::Group, "g1", "late"))
        .await;
    chat.settle().await;
    let (n, users) = chat.members("g1").await;
    assert_eq!(n, Some(users.len() as i64));
    assert_ne!(chat.snapshot().await, settled);
}

async fn run(worker: &Worker<Job>, batches: Vec<(usize, Vec<StreamChange>)>) {
    for (_, b) in batches {
        let report = worker.invoke_stream(&encode_event(&b, None)).await.unwrap();
        assert!(report.batch_item_failures.is_empty(), "{report:?}");
    }
}
