//! Commands of an app whose worker serves several tables
//! ([`super::CliApp::other_tables`]): besides the target table (`--table`), each
//! other table is named by its variable (the process environment), or its
//! default name. The embedded DynamoDB Local and `table create` make
//! them all; `replay` and `run` give the worker a store per table (dry-run
//! layered when asked); `--apply-writes` writes each record to the table
//! its `eventSourceARN` names; `dev` follows every event source of the
//! template, each on its table (without one, every table's stream).
//!
//! Table diffs and snapshots cover every table ([`CommandTable`], the
//! target first): `replay` and `run` compare every table around what they
//! run, each change labelled with its table
//! ([`crate::replay::diff::TablesDiff`]); a snapshot file holds every
//! table as one JSON object of arrays by table name
//! ([`crate::replay::snapshot::tables_text`]), and `--snapshot`, `dev
//! --snapshot` and `table load` load every table the file names (a plain
//! array is the target table). The writes a command lists (a dry run's,
//! or those made on a table it did not start) are each table's, through a
//! [`WriteLayer`] per table. A one-table app has no other tables and
//! nothing here changes what its commands do or print.

use std::path::Path;
use std::sync::Arc;

use indicatif::ProgressBar;
use serde_json::{Value, json};

use super::CliError;
use super::target::{AppTable, Target};
use crate::replay::apply::WritePlan;
use crate::replay::diff::{NamedDiff, TablesDiff, diff_tables};
use crate::replay::snapshot::{
    SnapshotError, SnapshotTable, TableItems, load_items, read_tables, scan_table, write_tables,
};
use worker_engine::app::{Sharing, TableDeps};
use worker_engine::clock::Clock;
use worker_engine::env::ConfigError;
use worker_engine::item::Item;
use worker_engine::job::AppSpec;
use worker_engine::notify::RecordingPublisher;
use worker_engine::runtime::Worker;
use worker_engine::schedule::JobName;
use worker_engine::schema::TableSchema;
use worker_engine::settings::{JobSettings, Settings};
use worker_engine::store::layers::{DryRunStore, MadeWrite, PlannedWrite, RecordingStore};
use worker_engine::store::transact::{TransactOp, TransactOutcome, Transactions};
use worker_engine::store::{BatchWriteReport, DynamoStore, ItemWriter, Store, StoreError, WriteOp};
use worker_engine::stream::decode::{RecordError, StreamChange};
use worker_engine::stream::engine::RecordProcessor;
use worker_engine::stream::source::table_name;
use worker_engine::tables::{Stores, TableSet};

/// A table the worker serves besides the target table.
#[derive(Debug, Clone)]
pub struct OtherTable {
    /// The variable naming it (`ORDERS_TABLE`).
    pub var: &'static str,
    /// Its name when the variable is not set.
    pub default_name: &'static str,
    pub schema: TableSchema,
}

impl OtherTable {
    /// Its name for a command: the variable's value, else the default.
    pub fn name(&self) -> String {
        std::env::var(self.var)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| self.default_name.to_owned())
    }
}

/// The tables of `T` but its home table: the target of a command is the
/// home table.
pub fn others_of<T: TableSet>() -> Vec<OtherTable> {
    T::ALL
        .iter()
        .filter(|t| **t != T::HOME)
        .map(|t| OtherTable {
            var: t.env_var(),
            default_name: t.default_name(),
            schema: t.schema(),
        })
        .collect()
}

/// Another table of a command, open.
#[derive(Clone)]
pub struct OpenTable {
    pub table: OtherTable,
    pub name: String,
    pub store: Arc<DynamoStore>,
}

/// The other tables on `target`'s client and counters.
pub fn open_others(target: &DynamoStore, others: &[OtherTable]) -> Vec<OpenTable> {
    others
        .iter()
        .cloned()
        .map(|t| {
            let name = t.name();
            let store = Arc::new(target.on_table(&name, t.schema.key));
            OpenTable {
                table: t,
                name,
                store,
            }
        })
        .collect()
}

/// What the worker of a command gets for its other tables: `(variable,
/// name, store)`, each store dry-run layered when the command is a dry run.
pub type WorkerTables = Vec<(&'static str, String, Arc<dyn Store>)>;

/// The other tables as the worker of a command sees them.
pub fn worker_tables(others: &[OpenTable], dry_run: bool) -> WorkerTables {
    others
        .iter()
        .map(|o| {
            let base: Arc<dyn Store> = o.store.clone();
            let store: Arc<dyn Store> = if dry_run {
                Arc::new(DryRunStore::new(base))
            } else {
                base
            };
            (o.table.var, o.name.clone(), store)
        })
        .collect()
}

/// What a command gives the app's worker ([`super::CliApp::worker`]).
pub struct WorkerParts<'a> {
    /// The target table's store.
    pub store: Arc<dyn Store>,
    /// The other tables' (none for an app of one table).
    pub others: WorkerTables,
    /// Transactions (refused in a dry run: [`NoTransactions`]).
    pub tx: Arc<dyn Transactions>,
    /// The process environment with the command's `--env` overrides and
    /// `TABLE_NAME` set to the target table.
    pub lookup: &'a dyn Fn(&str) -> Option<String>,
    pub clock: Arc<dyn Clock>,
}

impl WorkerParts<'_> {
    /// The worker of an app on one table (`worker_engine::app`): its
    /// settings from [`WorkerParts::lookup`], its events recorded and
    /// dropped (a local run never publishes).
    pub fn table_worker<J: JobName, S: JobSettings>(
        self,
        app: &AppSpec<J, TableDeps<Settings<J, S>>, dyn RecordProcessor>,
        sharing: Sharing,
    ) -> Result<Worker<J>, ConfigError> {
        let settings = Settings::from_lookup(self.lookup)?;
        let publisher = Arc::new(RecordingPublisher::default());
        Ok(app.table_worker(self.store, settings, publisher, self.clock, sharing))
    }

    /// The variables of an app of several tables: [`WorkerParts::lookup`]
    /// with every table's name, its variable, else the target's
    /// (`TABLE_NAME`) for the home table, else the name the command opened
    /// it under.
    pub fn table_lookup<T: TableSet>(&self) -> impl Fn(&str) -> Option<String> + '_ {
        move |name: &str| {
            (self.lookup)(name).or_else(|| {
                if name == T::HOME.env_var() {
                    (self.lookup)(worker_engine::settings::TABLE_NAME)
                } else {
                    self.others
                        .iter()
                        .find(|(v, _, _)| *v == name)
                        .map(|(_, n, _)| n.clone())
                }
            })
        }
    }

    /// The store of each table of `T`: the target's for the home table,
    /// each other's by its variable.
    ///
    /// # Panics
    /// If a table of `T` is neither: [`super::CliApp::other_tables`] is
    /// not [`others_of::<T>`](others_of).
    pub fn stores<T: TableSet>(&self) -> Stores<T> {
        Stores::new(T::ALL.iter().map(|t| {
            let store = if *t == T::HOME {
                self.store.clone()
            } else {
                let (_, _, s) = self
                    .others
                    .iter()
                    .find(|(v, _, _)| *v == t.env_var())
                    .expect("other_tables is others_of the app's TableSet");
                s.clone()
            };
            (*t, store)
        }))
    }
}

/// What a command's worker writes to one table, kept to be shown: the
/// dry-run layer (writes planned, not sent) or the recording layer (writes
/// sent and written down with their outcome).
#[derive(Clone)]
pub struct WriteLayer {
    pub table: String,
    pub keys: (&'static str, &'static str),
    pub dry: Option<Arc<DryRunStore>>,
    pub recorder: Option<Arc<RecordingStore>>,
}

impl WriteLayer {
    /// `base`, the store of `table`, layered for a command: planned with
    /// `dry_run`, else recorded.
    pub fn over(
        table: &str,
        keys: (&'static str, &'static str),
        base: Arc<dyn Store>,
        dry_run: bool,
    ) -> (Arc<dyn Store>, WriteLayer) {
        let mut layer = WriteLayer {
            table: table.to_owned(),
            keys,
            dry: None,
            recorder: None,
        };
        let store: Arc<dyn Store> = if dry_run {
            let d = Arc::new(DryRunStore::new(base));
            layer.dry = Some(d.clone());
            d
        } else {
            let r = Arc::new(RecordingStore::new(base));
            layer.recorder = Some(r.clone());
            r
        };
        (store, layer)
    }
}

/// The writes a command's worker made to one table (or planned), in the
/// order it made them.
#[derive(Debug, Clone, PartialEq)]
pub struct TableWrites<W> {
    pub table: String,
    pub keys: (&'static str, &'static str),
    pub writes: Vec<W>,
}

/// The writes planned so far in each layer (taken), in the layers' order.
pub fn take_planned(layers: &[WriteLayer]) -> Vec<TableWrites<PlannedWrite>> {
    layers
        .iter()
        .filter_map(|l| {
            l.dry.as_ref().map(|d| TableWrites {
                table: l.table.clone(),
                keys: l.keys,
                writes: d.take_planned(),
            })
        })
        .collect()
}

/// The writes made so far in each layer (taken), in the layers' order.
pub fn take_made(layers: &[WriteLayer]) -> Vec<TableWrites<MadeWrite>> {
    layers
        .iter()
        .filter_map(|l| {
            l.recorder.as_ref().map(|r| TableWrites {
                table: l.table.clone(),
                keys: l.keys,
                writes: r.take_made(),
            })
        })
        .collect()
}

/// The other tables as the worker of a command that shows its writes sees
/// them, each store planned (`dry_run`) or recorded, with its layer.
pub fn recorded_worker_tables(
    others: &[OpenTable],
    dry_run: bool,
) -> (WorkerTables, Vec<WriteLayer>) {
    others
        .iter()
        .map(|o| {
            let (store, layer) = WriteLayer::over(
                &o.name,
                o.table.schema.key.names(),
                o.store.clone(),
                dry_run,
            );
            ((o.table.var, o.name.clone(), store), layer)
        })
        .unzip()
}

/// Transactions refused: a dry run writes nothing, and a transaction
/// cannot be recorded instead of sent.
pub struct NoTransactions;

#[async_trait::async_trait]
impl Transactions for NoTransactions {
    async fn transact_write(&self, _ops: Vec<TransactOp>) -> Result<TransactOutcome, StoreError> {
        Err(StoreError::Permanent {
            operation: "TransactWriteItems",
            code: "DryRun".into(),
            message: "a dry run does not run transactions".into(),
        })
    }
}

/// Perform `plan`'s writes, each on the table its record's
/// `eventSourceARN` names (the target table when it names none of the
/// others). Returns how many were performed.
pub async fn apply_by_table(
    target: &dyn ItemWriter,
    others: &[OpenTable],
    records: &[Result<StreamChange, RecordError>],
    plan: &WritePlan,
) -> Result<usize, StoreError> {
    for w in &plan.writes {
        let table = records
            .get(w.index)
            .and_then(|r| r.as_ref().ok())
            .and_then(|c| c.event_source_arn.as_deref())
            .and_then(table_name);
        let store: &dyn ItemWriter = match others.iter().find(|o| Some(o.name.as_str()) == table) {
            Some(o) => o.store.as_ref(),
            None => target,
        };
        match &w.op {
            WriteOp::Put(item) => store.put(item.clone(), None).await?,
            WriteOp::Delete(key) => store.delete(key, None).await?,
        };
    }
    Ok(plan.writes.len())
}

/// One table of a command, as snapshots and diffs see it
/// ([`Target::tables`]).
#[derive(Clone, Copy)]
pub struct CommandTable<'a> {
    pub name: &'a str,
    /// Its key attribute names (an empty sort key: it has none).
    pub keys: (&'static str, &'static str),
    pub store: &'a Arc<DynamoStore>,
}

impl<'a> CommandTable<'a> {
    pub fn snapshot(&self) -> SnapshotTable<'a> {
        SnapshotTable {
            name: self.name,
            keys: self.keys,
        }
    }
}

/// Read a snapshot file of `app`'s tables for a command whose target table
/// is `target` ([`read_tables`]): checked before anything starts.
pub fn read_app_snapshot(
    path: &Path,
    app: &AppTable,
    target: &str,
) -> Result<TableItems, SnapshotError> {
    let names = app.table_names(target);
    let tables: Vec<SnapshotTable<'_>> = names
        .iter()
        .map(|(name, keys)| SnapshotTable { name, keys: *keys })
        .collect();
    read_tables(path, &tables)
}

/// Every item of every table (consistent scans, sorted by key), in the
/// order of [`Target::tables`]; `progress` counts the items read.
pub async fn scan_all(
    target: &Target,
    progress: Option<&ProgressBar>,
) -> Result<Vec<Vec<Item>>, StoreError> {
    let mut out = Vec::new();
    for t in target.tables() {
        out.push(scan_table(t.store.as_ref(), t.keys, progress).await?);
    }
    Ok(out)
}

/// What changed in every table between two [`scan_all`]s.
pub fn diff_all(target: &Target, before: &[Vec<Item>], after: &[Vec<Item>]) -> TablesDiff {
    TablesDiff {
        tables: target
            .tables()
            .iter()
            .zip(before.iter().zip(after))
            .map(|(t, (b, a))| NamedDiff {
                table: t.name.to_owned(),
                keys: t.keys,
                diff: diff_tables(b, a, t.keys),
            })
            .collect(),
    }
}

/// A snapshot file written: where, and how many items of each table (in
/// the order of [`Target::tables`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotWritten {
    pub file: String,
    pub tables: Vec<(String, usize)>,
}

impl SnapshotWritten {
    /// The items of every table.
    pub fn items(&self) -> usize {
        self.tables.iter().map(|(_, n)| n).sum()
    }

    /// `FILE (N items)`; of several tables, each table's count after it:
    /// `FILE (N items: Orders 5, Customers 2, ...)`.
    pub fn describe(&self) -> String {
        if self.tables.len() < 2 {
            return format!("{} ({} items)", self.file, self.items());
        }
        format!(
            "{} ({} items: {})",
            self.file,
            self.items(),
            table_counts(&self.tables)
        )
    }

    /// `{"file", "items"}`; of several tables also `"tables": {name: n}`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"file": self.file, "items": self.items()});
        if self.tables.len() > 1 {
            v["tables"] = counts_json(&self.tables);
        }
        v
    }
}

/// `Orders 5, Customers 2`.
pub fn table_counts(counts: &[(String, usize)]) -> String {
    counts
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `{"Orders": 5, "Customers": 2}`.
pub fn counts_json(counts: &[(String, usize)]) -> Value {
    Value::Object(
        counts
            .iter()
            .map(|(name, n)| (name.clone(), Value::from(*n)))
            .collect(),
    )
}

/// Write a [`scan_all`] of every table to `path`: one table as the plain
/// array, several as one object ([`crate::replay::snapshot::tables_text`]).
pub fn write_all(
    path: &Path,
    target: &Target,
    scans: &[Vec<Item>],
) -> Result<SnapshotWritten, SnapshotError> {
    let tables = target.tables();
    let parts: Vec<(SnapshotTable<'_>, &[Item])> = tables
        .iter()
        .zip(scans)
        .map(|(t, items)| (t.snapshot(), items.as_slice()))
        .collect();
    write_tables(path, &parts)?;
    Ok(SnapshotWritten {
        file: path.display().to_string(),
        tables: tables
            .iter()
            .zip(scans)
            .map(|(t, items)| (t.name.to_owned(), items.len()))
            .collect(),
    })
}

/// Put every item of a snapshot's tables into the table of its name
/// (BatchWriteItem, `concurrency` batches in flight per table); what was
/// written to each, in the snapshot's order.
pub async fn load_all(
    target: &Target,
    snapshot: TableItems,
    concurrency: usize,
    progress: Option<&ProgressBar>,
) -> Result<Vec<(String, BatchWriteReport)>, CliError> {
    let tables = target.tables();
    let mut out = Vec::new();
    for (name, items) in snapshot {
        let store = tables
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.store.clone())
            .ok_or_else(|| CliError::Usage(format!("no table {name:?} in this command")))?;
        let report = load_items(store, items, concurrency, progress).await?;
        out.push((name, report));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use worker_engine::clock::SystemClock;
    use worker_engine::schema::KeySchema;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    enum T {
        People,
        Chats,
        Requests,
    }

    impl TableSet for T {
        const ALL: &'static [T] = &[T::People, T::Chats, T::Requests];
        const HOME: T = T::Requests;
        fn env_var(self) -> &'static str {
            match self {
                T::People => "PEOPLE_TABLE",
                T::Chats => "CHATS_TABLE",
                T::Requests => "REQUESTS_TABLE",
            }
        }
        fn default_name(self) -> &'static str {
            match self {
                T::People => "People",
                T::Chats => "Chats",
                T::Requests => "Requests",
            }
        }
        fn schema(self) -> TableSchema {
            TableSchema::new(KeySchema::composite("PK", "SK"))
        }
    }

    #[test]
    fn the_target_names_the_home_table_and_variables_the_others() {
        let others: Vec<_> = others_of::<T>().iter().map(|o| o.var).collect();
        assert_eq!(others, ["PEOPLE_TABLE", "CHATS_TABLE"]);
        let lookup = |name: &str| match name {
            "TABLE_NAME" => Some("requests-copy".to_owned()),
            "PEOPLE_TABLE" => Some("people".to_owned()),
            _ => None,
        };
        let store = |name: &str| -> Arc<dyn Store> {
            Arc::new(DynamoStore::new(
                worker_engine::store::local_client("http://127.0.0.1:9"),
                name,
            ))
        };
        let parts = WorkerParts {
            store: store("requests-copy"),
            others: vec![
                ("PEOPLE_TABLE", "People".to_owned(), store("People")),
                (
                    "CHATS_TABLE",
                    "Chats-local".to_owned(),
                    store("Chats-local"),
                ),
            ],
            tx: Arc::new(NoTransactions),
            lookup: &lookup,
            clock: Arc::new(SystemClock),
        };
        let l = parts.table_lookup::<T>();
        assert_eq!(l("REQUESTS_TABLE").as_deref(), Some("requests-copy"));
        assert_eq!(
            l("PEOPLE_TABLE").as_deref(),
            Some("people"),
            "its variable first"
        );
        assert_eq!(l("CHATS_TABLE").as_deref(), Some("Chats-local"));
        let stores = parts.stores::<T>();
        assert!(Arc::ptr_eq(stores.get(T::Requests), &parts.store));
        assert!(Arc::ptr_eq(stores.get(T::Chats), &parts.others[1].2));
    }

    #[test]
    fn a_snapshot_of_several_tables_counts_each() {
        let one = SnapshotWritten {
            file: "s.json".into(),
            tables: vec![("T".into(), 3)],
        };
        assert_eq!(one.describe(), "s.json (3 items)");
        assert_eq!(one.to_json(), json!({"file": "s.json", "items": 3}));
        let several = SnapshotWritten {
            file: "s.json".into(),
            tables: vec![("Requests".into(), 3), ("Users".into(), 2)],
        };
        assert_eq!(several.describe(), "s.json (5 items: Requests 3, Users 2)");
        assert_eq!(
            several.to_json(),
            json!({"file": "s.json", "items": 5, "tables": {"Requests": 3, "Users": 2}})
        );
    }
}
