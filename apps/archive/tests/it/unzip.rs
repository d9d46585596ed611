//! The unzip lifecycle from the stream, on DynamoDB Local: an `Unzipped`
//! item finishes its `Unzipping` item and flags its file while it exists;
//! replays and late records decide from what exists.

use crate::support;

use std::sync::Arc;

use archive_worker::items::{ArchivedFile, Stage};
use archive_worker::keys::{FileTime, ItemKey};
use archive_worker::schema::schema;
use support::*;
use worker_engine::store::{ItemReader, ItemWriter, Store};
use worker_testkit::recorded::{Log, Single};
use worker_testkit::{Drain, TestTable};
use worker_toolkit::layers::RecordingStore;

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

/// A file written while an `Unzipped` item of its `KeyName` exists (the
/// service archives it again, with or without a delete first, under either
/// spelling, or rewrites it from a copy read before the flag was set) gets
/// its flag from its own record; the flag's write coming back through the
/// stream, and a file whose flag is right, cost reads only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_again_while_unzipped_gets_its_flag_back() {
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    let app = app(table.store.clone());
    let mut drain = Drain::new(&table).await;
    let now = now().timestamp();
    let f = t("2024-01-02-00-01-00");
    let k = key_name(f);
    put(store, &[file(f), unzip_item(Stage::Unzipped, now - H, &k)]).await;
    drain.run(&app).await;
    assert_eq!(flag(store, f).await, Some(true));

    // Deleted and archived again (IsUnzipped = false).
    store.delete(&f.key(), None).await.expect("delete");
    put(store, &[file(f)]).await;
    let archived = drain.read().await;
    deliver(&app, &archived).await;
    assert_eq!(flag(store, f).await, Some(true), "archived again");

    // The flag's own write comes back: nothing to write, nothing follows.
    let echo = drain.read().await;
    assert_eq!(echo.len(), 1, "the flag's MODIFY");
    let before = table.store.metrics().snapshot();
    deliver(&app, &echo).await;
    let cost = table.store.metrics().snapshot().since(&before);
    assert_eq!(cost.write_requests(), 0, "a flag already right: {cost:?}");
    assert!(drain.read().await.is_empty());

    // Rewritten from a copy read before the flag was set.
    put(store, &[file(f)]).await;
    drain.run(&app).await;
    assert_eq!(flag(store, f).await, Some(true), "rewritten from a copy");

    // Archived again under the unpadded spelling a lenient writer uses.
    store.delete(&f.key(), None).await.expect("delete");
    let lenient = f.spellings()[1].clone();
    let mut item = file(f);
    item.extend(lenient.clone());
    put(store, &[item]).await;
    drain.run(&app).await;
    let stored = store
        .get(&lenient, true)
        .await
        .expect("get")
        .expect("the file");
    assert_eq!(
        ArchivedFile::from_item(&stored).and_then(|a| a.is_unzipped),
        Some(true),
        "archived again under the other spelling"
    );

    // A file of a KeyName never unzipped: its flag is not written.
    let g = t("2024-01-03-00-00-00");
    put(store, &[file(g)]).await;
    let inserted = drain.read().await;
    let recorded = Arc::new(RecordingStore::new(table.store.clone()));
    deliver(&support::app(recorded.clone()), &inserted).await;
    assert_eq!(flag(store, g).await, Some(false));
    let log = Log::of(recorded.take());
    let written = log
        .guarded
        .iter()
        .flat_map(|(_, ops)| ops.iter().map(|op| op.target().clone()))
        .chain(log.singles.iter().map(|w| match w {
            Single::Put(item, _) => item.clone(),
            Single::Delete(key, _) | Single::Update(key, _, _) => key.clone(),
        }));
    assert!(
        written.into_iter().all(|k| k != g.key()),
        "the flag of a file never unzipped was written"
    );
}
