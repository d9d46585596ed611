//! The service writes between the worker's read and its write (issue 29):
//! a write decided from another item's state must not land once that
//! state changed. Each test makes the race deterministic
//! ([`RaceBeforeWrite`]: the service's writes happen right before the
//! worker's write) and checks that what the service still shows as live
//! is left as it is.
//!
//! - unlisting a file (stream): decided from the file being gone;
//! - pruning a lookup entry (`rebuild-lookup`): decided from its file
//!   being gone;
//! - deleting an `Unzipping` request (stream): decided from an `Unzipped`
//!   item finishing it;
//! - setting a file's `IsUnzipped` (stream): decided from an `Unzipped`
//!   item of its `KeyName` existing, or from none existing.

use crate::support;

use std::sync::Arc;

use archive_worker::items::Stage;
use archive_worker::keys::{self, ItemKey};
use archive_worker::schema::schema;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::json;
use support::*;
use worker_engine::EventFunction;
use worker_engine::item::Item;
use worker_engine::store::ItemWriter;
use worker_testkit::race::{RaceBeforeWrite, ServiceOp, Trigger};
use worker_testkit::{Drain, TestTable};

#[tokio::test]
async fn a_file_written_again_before_its_unlisting_lands_stays_listed() {
    let table = TestTable::with_schema(&schema()).await;
    let mut drain = Drain::new(&table).await;
    let f = t("2024-03-01-10-00-00");
    put(table.store.as_ref(), &[file(f)]).await;
    drain.run(&app(table.store.clone())).await;
    table.store.delete(&f.key(), None).await.unwrap();
    let removal = drain.read().await;
    // The worker reads the file gone; the service writes it again before
    // the unlisting lands. Only the REMOVE is delivered: the file's new
    // INSERT has not been handled yet, so the lookup must still list it.
    let race = Arc::new(RaceBeforeWrite::at_first_write(
        table.store.clone(),
        vec![ServiceOp::Put(file(f))],
    ));
    deliver(&app(race.clone()), &removal).await;
    assert!(race.fired(), "the worker wrote after its read");
    assert_eq!(
        walk(table.store.as_ref()).await,
        [f].into(),
        "a live file was unlisted"
    );
}

#[tokio::test]
async fn a_file_written_again_before_its_pruning_lands_stays_listed() {
    let table = TestTable::with_schema(&schema()).await;
    let f = t("2024-03-01-10-00-00");
    // The lookup lists a file that is gone (a stale entry to prune).
    let items: Vec<Item> = expected_lookup([f])
        .into_iter()
        .map(|(pk, entries)| {
            let mut item = ItemKey::Lookup(keys::LookupKey::parse(&pk).unwrap()).key();
            item.insert(
                keys::SAVED_DATE.into(),
                AttributeValue::L(entries.into_iter().map(AttributeValue::S).collect()),
            );
            item
        })
        .collect();
    put(table.store.as_ref(), &items).await;
    let race = Arc::new(RaceBeforeWrite::at_first_write(
        table.store.clone(),
        vec![ServiceOp::Put(file(f))],
    ));
    let report = app(race.clone())
        .invoke_schedule(&json!({"job": "rebuild-lookup"}))
        .await
        .expect("rebuild runs");
    assert!(race.fired(), "the worker wrote after its read");
    assert_eq!(walk(table.store.as_ref()).await, [f].into());
    let details = &report["details"];
    assert_eq!(
        (&details["withheld"], &details["relisted"]),
        (&json!(1), &json!(0)),
        "the entry of a live file was pruned (and listed again after): {report}"
    );
}

#[tokio::test]
async fn an_unzipped_file_deleted_before_its_request_is_finished_keeps_the_request() {
    let table = TestTable::with_schema(&schema()).await;
    let mut drain = Drain::new(&table).await;
    let f = t("2024-03-01-10-00-00");
    let name = key_name(f);
    put(
        table.store.as_ref(),
        &[file(f), unzip_item(Stage::Unzipping, 100, &name)],
    )
    .await;
    drain.run(&app(table.store.clone())).await;
    put(
        table.store.as_ref(),
        &[unzip_item(Stage::Unzipped, 200, &name)],
    )
    .await;
    // The worker reads the Unzipped item and decides the request is
    // finished; the service deletes the Unzipped item before the delete of
    // the request lands.
    let request = ItemKey::Unzipping { created: 100 };
    let race = Arc::new(RaceBeforeWrite::new(
        table.store.clone(),
        Trigger::Touching(request.key()),
        vec![ServiceOp::Delete(ItemKey::Unzipped { created: 200 }.key())],
    ));
    let records = drain.read().await;
    deliver(&app(race.clone()), &records).await;
    assert!(race.fired(), "the worker wrote after its read");
    assert!(
        get(table.store.as_ref(), request).await.is_some(),
        "the request of a file no longer unzipped was deleted"
    );
}

#[tokio::test]
async fn an_unzipped_item_deleted_before_the_flag_lands_leaves_the_file_not_unzipped() {
    let table = TestTable::with_schema(&schema()).await;
    let mut drain = Drain::new(&table).await;
    let f = t("2024-03-01-10-00-00");
    put(table.store.as_ref(), &[file(f)]).await;
    drain.run(&app(table.store.clone())).await;
    put(
        table.store.as_ref(),
        &[unzip_item(Stage::Unzipped, 200, &key_name(f))],
    )
    .await;
    // The worker reads the Unzipped item and decides the file is unzipped;
    // the service deletes the Unzipped item before the flag lands.
    let race = Arc::new(RaceBeforeWrite::new(
        table.store.clone(),
        Trigger::Touching(f.key()),
        vec![ServiceOp::Delete(ItemKey::Unzipped { created: 200 }.key())],
    ));
    let records = drain.read().await;
    deliver(&app(race.clone()), &records).await;
    assert!(race.fired(), "the worker wrote after its read");
    assert_eq!(
        unzipped_flag(table.store.as_ref(), f).await,
        Some(false),
        "flagged unzipped with no Unzipped item left"
    );
}

#[tokio::test]
async fn an_unzipped_item_written_again_before_the_flag_is_cleared_keeps_the_flag() {
    let table = TestTable::with_schema(&schema()).await;
    let mut drain = Drain::new(&table).await;
    let f = t("2024-03-01-10-00-00");
    let unzipped = unzip_item(Stage::Unzipped, 200, &key_name(f));
    put(table.store.as_ref(), &[file(f), unzipped.clone()]).await;
    drain.run(&app(table.store.clone())).await;
    assert_eq!(unzipped_flag(table.store.as_ref(), f).await, Some(true));
    table
        .store
        .delete(&ItemKey::Unzipped { created: 200 }.key(), None)
        .await
        .unwrap();
    // The worker reads the Unzipped item gone and decides the flag is
    // false; the service writes it again before the flag lands.
    let race = Arc::new(RaceBeforeWrite::new(
        table.store.clone(),
        Trigger::Touching(f.key()),
        vec![ServiceOp::Put(unzipped)],
    ));
    let records = drain.read().await;
    deliver(&app(race.clone()), &records).await;
    assert!(race.fired(), "the worker wrote after its read");
    assert_eq!(
        unzipped_flag(table.store.as_ref(), f).await,
        Some(true),
        "flag cleared while the Unzipped item exists"
    );
}

async fn unzipped_flag(store: &dyn worker_engine::store::Store, f: keys::FileTime) -> Option<bool> {
    let item = get(store, ItemKey::File(f)).await.expect("the file");
    archive_worker::items::ArchivedFile::from_item(&item)
        .expect("a file")
        .is_unzipped
}

/// DynamoDB emits a second REMOVE, without an old image, when two deletes
/// of one item race. It is handled from its keys (a file's lookup follows
/// the table) or skipped as the duplicate it is (an unzip item's record
/// needs its `KeyName`), never failed or parked.
#[tokio::test]
async fn a_removal_without_an_old_image_is_handled_from_its_keys_or_skipped() {
    let table = TestTable::with_schema(&schema()).await;
    let mut drain = Drain::new(&table).await;
    let (f, g) = (t("2024-03-01-10-00-00"), t("2024-03-02-10-00-00"));
    let name = key_name(f);
    put(
        table.store.as_ref(),
        &[file(f), file(g), unzip_item(Stage::Unzipped, 200, &name)],
    )
    .await;
    let worker = app(table.store.clone());
    drain.run(&worker).await;
    for key in [f.key(), ItemKey::Unzipped { created: 200 }.key()] {
        table.store.delete(&key, None).await.unwrap();
    }
    let mut removals = drain.read().await;
    assert_eq!(removals.len(), 2);
    for r in &mut removals {
        r.old_image = None;
    }
    let report = worker_testkit::handle_records(&worker, &removals).await;
    worker_testkit::assert_handled(&report);
    assert_eq!(
        walk(table.store.as_ref()).await,
        [g].into(),
        "the file removed is unlisted from its keys"
    );
}
