//! An app's event fixtures (`events/<app>/`): the manifest, and the check
//! every app runs on it. Each entry of `manifest.json` is replayed twice
//! (idempotency) on a fresh table through the code of `<app> replay`, and
//! the table is compared with its golden snapshot (`UPDATE_GOLDEN=1`
//! rewrites the goldens instead). Also the pieces an app's `regenerate`
//! writes the fixtures with: the table the stream builds, stream captures,
//! ticks and the manifest.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use worker_engine::EventFunction;
use worker_engine::item::Item;
use worker_engine::schema::TableSchema;
use worker_engine::store::Store;
use worker_engine::stream::encode_event;
use worker_toolkit::cli::CliApp;
use worker_toolkit::cli::replay::{ReplayArgs, replay};
use worker_toolkit::cli::target::{AppTable, TableOpts, Target};
use worker_toolkit::replay::snapshot::{load_items, scan_table, snapshot_text};

use crate::workload::{Write, apply};
use crate::{Drain, TestTable};

/// One entry of a manifest.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
pub struct Fixture {
    /// The fixture's name, unique in its manifest (e.g. `group-deleted`):
    /// what a test selects it by.
    pub name: String,
    /// What the fixture shows, in a sentence for the reader of the
    /// manifest.
    pub about: String,
    /// The event files replayed in order (stream events, ticks), relative
    /// to the manifest's folder.
    pub events: Vec<String>,
    /// The table the fixture starts from (a snapshot file, relative to the
    /// manifest's folder).
    pub snapshot: String,
    /// The time every handler and job sees (RFC 3339, `replay --now`).
    pub now: String,
    /// Whether the service's own writes of each stream event are applied
    /// to the table before the worker handles it (`replay
    /// --apply-writes`).
    #[serde(rename = "applyWrites")]
    pub apply_writes: bool,
    /// The tables the replay must end with (a file relative to the
    /// manifest's folder, under `golden/`).
    pub golden: String,
}

impl Fixture {
    /// An entry whose golden is `golden/<golden>.json`.
    pub fn new(
        name: &str,
        about: &str,
        events: Vec<String>,
        snapshot: &str,
        now: &str,
        apply_writes: bool,
        golden: &str,
    ) -> Self {
        Fixture {
            name: name.into(),
            about: about.into(),
            events,
            snapshot: snapshot.into(),
            now: now.into(),
            apply_writes,
            golden: format!("golden/{golden}.json"),
        }
    }
}

/// The entries of `dir/manifest.json`.
pub fn manifest(dir: &Path) -> Vec<Fixture> {
    let path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).expect("the manifest is JSON");
    serde_json::from_value(v["fixtures"].clone()).expect("the manifest's shape")
}

fn args_for(dir: &Path, f: &Fixture, table: &TestTable, with_snapshot: bool) -> ReplayArgs {
    ReplayArgs {
        files: f.events.iter().map(|e| dir.join(e)).collect(),
        snapshot: with_snapshot.then(|| dir.join(&f.snapshot)),
        apply_writes: f.apply_writes,
        now: Some(f.now.parse().expect("an RFC 3339 time")),
        write_snapshot: None,
        dry_run: false,
        json: false,
        env: Vec::new(),
        table: TableOpts {
            endpoint_url: Some(table.endpoint.clone()),
            table: vec![table.name.clone()],
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Replay every entry of `dir`'s manifest twice through `A`'s `replay`
/// and compare the table with its golden (or rewrite the golden with
/// `UPDATE_GOLDEN=1`). Panics listing every problem.
pub async fn replay_every_fixture_twice<A: CliApp>(dir: &Path, at_least: usize) {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let fixtures = manifest(dir);
    assert!(
        fixtures.len() >= at_least,
        "the manifest lists every fixture"
    );
    let app = AppTable::of::<A>();
    let keys = app.keys();
    let mut problems = Vec::new();
    for f in &fixtures {
        let table = TestTable::with_schema(&A::schema()).await;
        let target = Target::connect(&table.endpoint, &table.name, &AppTable::of::<A>()).await;
        let first = replay::<A>(&target, &args_for(dir, f, &table, true))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", f.name));
        for file in first.files.iter().filter(|file| file.lambda_failed()) {
            problems.push(format!(
                "{}: {} failed: {:?}",
                f.name, file.file, file.error
            ));
        }
        let scan = async || {
            snapshot_text(
                &scan_table(table.store.as_ref(), keys, None)
                    .await
                    .expect("scan"),
                keys,
            )
        };
        let once = scan().await;
        replay::<A>(&target, &args_for(dir, f, &table, false))
            .await
            .unwrap_or_else(|e| panic!("{} (again): {e}", f.name));
        if once != scan().await {
            problems.push(format!("{}: a second replay changed the table", f.name));
        }
        let golden = dir.join(&f.golden);
        if update {
            if std::fs::read_to_string(&golden).ok().as_deref() != Some(once.as_str()) {
                std::fs::create_dir_all(golden.parent().expect("a folder")).expect("mkdir");
                std::fs::write(&golden, &once).expect("write the golden");
            }
        } else {
            let expected = std::fs::read_to_string(&golden)
                .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", golden.display()));
            if expected != once {
                problems.push(format!(
                    "{}: the table differs from {} (intended? UPDATE_GOLDEN=1)",
                    f.name, f.golden
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every event file under `stream/` and `schedule/` is replayed by an
/// entry, and every file an entry names exists.
pub fn the_manifest_covers_every_fixture(dir: &Path) {
    let fixtures = manifest(dir);
    let used: BTreeSet<String> = fixtures.iter().flat_map(|f| f.events.clone()).collect();
    for sub in ["stream", "schedule"] {
        for entry in std::fs::read_dir(dir.join(sub)).expect("a folder") {
            let name = format!(
                "{sub}/{}",
                entry.expect("an entry").file_name().to_string_lossy()
            );
            assert!(used.contains(&name), "{name} is not in the manifest");
        }
    }
    for f in &fixtures {
        for p in f.events.iter().chain([&f.snapshot, &f.golden]) {
            assert!(dir.join(p).is_file(), "{}: {p} does not exist", f.name);
        }
    }
}

/// Write pretty JSON (and the folder).
pub fn write_json(path: &Path, v: &Value) {
    std::fs::create_dir_all(path.parent().expect("a folder")).expect("mkdir");
    let text = serde_json::to_string_pretty(v).expect("JSON") + "\n";
    std::fs::write(path, text).expect("write");
}

/// Write a tick of `job` in both EventBridge shapes:
/// `schedule/<job>.scheduler.json` (Scheduler input) and
/// `schedule/<job>.rule.json` (a rule of `app`'s).
pub fn write_ticks(dir: &Path, app: &str, job: &str, now: &str) {
    write_json(
        &dir.join(format!("schedule/{job}.scheduler.json")),
        &json!({"job": job, "scheduledTime": now}),
    );
    write_json(
        &dir.join(format!("schedule/{job}.rule.json")),
        &json!({
            "version": "0",
            "id": "7d3c2b1a-0f9e-4d8c-b7a6-958473625140",
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": "123456789012",
            "time": now,
            "region": "eu-west-1",
            "resources": [format!("arn:aws:events:eu-west-1:123456789012:rule/{app}-{job}")],
            "detail": {},
        }),
    );
}

/// What a fixture's golden holds: what `--write-snapshot` writes of every
/// table of `target` (a one-table app's table as snapshot text; an app of
/// several tables, every table as one JSON object, each table's items,
/// sorted, one a line, under its name, the names in order).
pub async fn tables_text(target: &Target) -> String {
    let scans = worker_toolkit::cli::tables::scan_all(target, None)
        .await
        .expect("scan");
    let tables = target.tables();
    let parts: Vec<_> = tables
        .iter()
        .zip(&scans)
        .map(|(t, items)| (t.snapshot(), items.as_slice()))
        .collect();
    worker_toolkit::replay::snapshot::tables_text(&parts)
}

/// `events/<app>` of the workspace, from a package's folder two levels
/// below it (`apps/<app>`).
pub fn events_dir(manifest_dir: &str, app: &str) -> PathBuf {
    Path::new(manifest_dir).join("../../events").join(app)
}

/// Whether `REGENERATE_FIXTURES` is set (else says so: the `regenerate`
/// test of `app` rewrites `events/<app>` only when it is).
pub fn regenerating(app: &str) -> bool {
    let on = std::env::var_os("REGENERATE_FIXTURES").is_some();
    if !on {
        eprintln!("set REGENERATE_FIXTURES=1 to rewrite events/{app}");
    }
    on
}

/// The items of a table of `schema` once `items` are put by the service
/// and the stream is handled by `app` (over the table's store), scanned
/// in `keys` order.
pub async fn streamed_items<F: EventFunction>(
    schema: &TableSchema,
    items: &[Item],
    app: impl FnOnce(Arc<dyn Store>) -> F,
    keys: (&str, &str),
) -> Vec<Item> {
    let table = TestTable::with_schema(schema).await;
    let mut drain = Drain::new(&table).await;
    let puts: Vec<Write> = items.iter().cloned().map(Write::Put).collect();
    apply(table.store.as_ref(), &puts).await;
    drain.run(&app(table.store.clone())).await;
    scan_table(table.store.as_ref(), keys, None)
        .await
        .expect("scan")
}

/// One stream fixture: its name, what it shows, and the service's writes
/// it captures.
pub type StreamFixture = (&'static str, &'static str, Vec<Write>);

/// Each of `fixtures` captured: on a fresh table of `schema` holding
/// `items` (the snapshot `snapshot`), its writes applied and their records
/// read back from the stream, written as `stream/<name>.json` of `dir`
/// (the event Lambda delivers, from `stream_arn`). Their manifest
/// entries: replayed at `now` with their writes applied, each to its
/// golden `<name>`.
pub async fn capture_stream_fixtures(
    dir: &Path,
    schema: &TableSchema,
    items: &[Item],
    snapshot: &str,
    stream_arn: &str,
    now: &str,
    fixtures: Vec<StreamFixture>,
) -> Vec<Fixture> {
    let mut entries = Vec::new();
    for (name, about, writes) in fixtures {
        let table = TestTable::with_schema(schema).await;
        load_items(table.store.clone(), items.to_vec(), 4, None)
            .await
            .expect("load");
        let mut drain = Drain::new(&table).await;
        drain.skip_existing().await;
        apply(table.store.as_ref(), &writes).await;
        let records = drain.read().await;
        assert_eq!(records.len(), writes.len(), "{name}");
        write_json(
            &dir.join(format!("stream/{name}.json")),
            &encode_event(&records, Some(stream_arn)),
        );
        entries.push(Fixture::new(
            name,
            about,
            vec![format!("stream/{name}.json")],
            snapshot,
            now,
            true,
            name,
        ));
    }
    entries
}

/// `dir/manifest.json`: `entries`, replayed by the test at `test` (a path
/// in the workspace).
pub fn write_manifest(dir: &Path, test: &str, entries: &[Fixture]) {
    write_json(
        &dir.join("manifest.json"),
        &json!({
            "about": format!("Fixtures replayed by {test}: each entry loads `snapshot`, replays `events` with `--now` (and `--apply-writes` when set) and must leave the table equal to `golden`."),
            "fixtures": entries,
        }),
    );
}
