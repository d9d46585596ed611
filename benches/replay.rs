//! What the replay tooling costs on a large table (DynamoDB Local):
//! `table load` (BatchWriteItem, concurrent), `table snapshot` (paged
//! consistent Scan), the snapshot file, the table diff, and a `replay` of a
//! group deletion, whose before/after scans make it grow with the table.
//!
//! `cargo bench --bench replay` (ITEMS=100000 by default).

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::Instant;

use aws_sdk_dynamodb::types::AttributeValue;
use nishiki_cli::{KEYS, Nishiki};
use nishiki_worker::items::Item;
use nishiki_worker::keys::{GroupId, ItemKey, UserId};
use worker_toolkit::cli::replay::{ReplayArgs, replay};
use worker_toolkit::cli::target::{AppTable, TableOpts, Target};
use worker_toolkit::replay::diff::diff_tables;
use worker_toolkit::replay::snapshot::{load_items, read_snapshot, scan_table, snapshot_text};

fn filler(n: usize) -> Vec<Item> {
    (0..n)
        .map(|i| {
            let group: GroupId = format!("9e100000-0000-4000-8000-{i:012}").parse().unwrap();
            let mut item = ItemKey::Membership {
                user: UserId::random(),
                group,
            }
            .to_attributes();
            item.insert("GroupId".into(), AttributeValue::S(group.to_string()));
            item
        })
        .collect()
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let events = Path::new(env!("CARGO_MANIFEST_DIR")).join("events");
    let table = support::nishiki_table().await;
    let household = read_snapshot(&events.join("tables/household.json"), KEYS).unwrap();
    let mut items = filler(n);
    items.extend(household);
    let total = items.len();
    println!(
        "replay bench: {total} items on DynamoDB Local (table {})",
        table.name
    );

    let t = Instant::now();
    let report = load_items(table.store.clone(), items.clone(), 8, None)
        .await
        .unwrap();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "table load:      {total} items in {secs:.1} s ({:.0} items/s), {} BatchWriteItem requests, {} retried, {:.0} WCU",
        total as f64 / secs,
        report.requests,
        report.retried_items,
        report.consumed_capacity
    );

    let before = table.store.metrics().snapshot();
    let t = Instant::now();
    let scanned = scan_table(table.store.as_ref(), KEYS, None).await.unwrap();
    let secs = t.elapsed().as_secs_f64();
    let m = table.store.metrics().snapshot().since(&before);
    println!(
        "table snapshot:  {} items in {secs:.1} s, {} scan pages, {:.1} RCU (consistent)",
        scanned.len(),
        m.scan,
        m.read_capacity
    );
    assert_eq!(scanned.len(), total);

    let t = Instant::now();
    let text = snapshot_text(&scanned, KEYS);
    println!(
        "snapshot file:   {:.1} MB written in {:.2} s",
        text.len() as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );

    let mut after = scanned.clone();
    after.truncate(total - 10);
    let t = Instant::now();
    let diff = diff_tables(&scanned, &after, KEYS);
    println!(
        "table diff:      {} vs {} items in {:.2} s ({})",
        scanned.len(),
        after.len(),
        t.elapsed().as_secs_f64(),
        diff.summary()
    );

    let target = Target::connect(&table.endpoint, &table.name, &AppTable::of::<Nishiki>()).await;
    let args = ReplayArgs {
        files: vec![events.join("stream/group-deleted.json")],
        snapshot: None,
        apply_writes: true,
        now: Some("2024-03-25T09:00:00Z".parse().unwrap()),
        write_snapshot: None,
        dry_run: false,
        json: false,
        env: vec![],
        table: TableOpts {
            endpoint_url: Some(table.endpoint.clone()),
            table: vec![table.name.clone()],
            ..Default::default()
        },
        ..Default::default()
    };
    let before = target.store.metrics().snapshot();
    let t = Instant::now();
    let r = replay::<Nishiki>(&target, &args).await.unwrap();
    let secs = t.elapsed().as_secs_f64();
    let m = target.store.metrics().snapshot().since(&before);
    println!(
        "replay:          group-deleted (4 records, --apply-writes) in {secs:.1} s: {}; {} scan pages, {:.1} RCU, {} write requests, {:.1} WCU",
        r.files[0].diff.summary(),
        m.scan,
        m.read_capacity,
        m.write_requests(),
        m.write_capacity
    );
}
