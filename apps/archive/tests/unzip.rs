//! The unzip lifecycle from the stream, on DynamoDB Local: an `Unzipped`
//! item finishes its `Unzipping` item and flags its file while it exists;
//! replays and late records decide from what exists.

mod support;

use archive_worker::items::{ArchivedFile, Stage};
use archive_worker::keys::{FileTime, ItemKey};
use archive_worker::schema::schema;
use support::*;
use worker_engine::store::{ItemWriter, Store};
use worker_testkit::{Drain, TestTable};

const H: i64 = 3600;

async fn flag(store: &dyn Store, f: FileTime) -> Option<bool> {
    let item = get(store, ItemKey::File(f)).await.expect("the file exists");
    ArchivedFile::from_item(&item).expect("a file").is_unzipped
}

async fn exists(store: &dyn Store, stage: Stage, created: i64) -> bool {
    get(store, unzip_key(stage, created)).await.is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unzipped_item_finishes_its_request_and_flags_its_file_while_it_exists() {
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    let app = app(table.store.clone());
    let mut drain = Drain::new(&table).await;
    let now = now().timestamp();
    let (f1, f2) = (t("2024-01-10-08-00-00"), t("2024-01-11-09-00-00"));
    let (k1, k2) = (key_name(f1), key_name(f2));
    put(
        store,
        &[
            file(f1),
            file(f2),
            unzip_item(Stage::Unzipping, now - 10 * H, &k1),
            unzip_item(Stage::Unzipping, now - 5 * H, &k2),
        ],
    )
    .await;
    drain.run(&app).await;
    assert_eq!(
        flag(store, f1).await,
        Some(false),
        "requested, not unzipped yet"
    );

    // Unzipped: the request is finished, the file flagged; k2 untouched.
    put(store, &[unzip_item(Stage::Unzipped, now - H, &k1)]).await;
    let unzipped = drain.read().await;
    deliver(&app, &unzipped).await;
    drain.run(&app).await;
    assert!(!exists(store, Stage::Unzipping, now - 10 * H).await);
    assert_eq!(flag(store, f1).await, Some(true));
    assert!(exists(store, Stage::Unzipping, now - 5 * H).await);
    assert_eq!(flag(store, f2).await, Some(false));

    // A new request after the unzip is not finished by it.
    put(store, &[unzip_item(Stage::Unzipping, now, &k1)]).await;
    drain.run(&app).await;
    assert!(exists(store, Stage::Unzipping, now).await);

    // The Unzipped item goes: the flag returns to false.
    store
        .delete(&unzip_key(Stage::Unzipped, now - H).key(), None)
        .await
        .expect("delete");
    drain.run(&app).await;
    assert_eq!(flag(store, f1).await, Some(false));

    // The old insert, delivered again: it decides from what exists now.
    let settled = table_state(&table).await;
    deliver(&app, &unzipped).await;
    assert_eq!(table_state(&table).await, settled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flag_follows_every_unzipped_item_of_the_key_and_late_requests_are_finished() {
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    let app = app(table.store.clone());
    let mut drain = Drain::new(&table).await;
    let now = now().timestamp();
    let f = t("2024-02-01-00-00-00");
    let k = key_name(f);
    put(store, &[file(f)]).await;
    // Unzipped twice (two retrievals).
    put(
        store,
        &[
            unzip_item(Stage::Unzipped, now - 3 * H, &k),
            unzip_item(Stage::Unzipped, now - 2 * H, &k),
        ],
    )
    .await;
    drain.run(&app).await;
    assert_eq!(flag(store, f).await, Some(true));
    store
        .delete(&unzip_key(Stage::Unzipped, now - 3 * H).key(), None)
        .await
        .expect("delete");
    drain.run(&app).await;
    assert_eq!(flag(store, f).await, Some(true), "another one exists");

    // A request written late (created before the unzip it led to) is
    // finished when it arrives.
    put(store, &[unzip_item(Stage::Unzipping, now - 4 * H, &k)]).await;
    drain.run(&app).await;
    assert!(!exists(store, Stage::Unzipping, now - 4 * H).await);

    store
        .delete(&unzip_key(Stage::Unzipped, now - 2 * H).key(), None)
        .await
        .expect("delete");
    drain.run(&app).await;
    assert_eq!(flag(store, f).await, Some(false));

    // An unzipped item of a key no file has: nothing to do.
    put(
        store,
        &[unzip_item(Stage::Unzipped, now, "nobody/else.zip")],
    )
    .await;
    let before = table_state(&table).await;
    drain.run(&app).await;
    let last = drain.batches.last().expect("a batch");
    assert_eq!((last.handled, last.failed), (0, 0));
    assert_eq!(table_state(&table).await, before);
}
