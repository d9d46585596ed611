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
use super::target::{AppTable, Scope, Target};
use crate::layers::{DryRunStore, MadeWrite, PlannedWrite, RecordingStore};
use crate::replay::apply::WritePlan;
use crate::replay::diff::{NamedDiff, TablesDiff, diff_tables};
use crate::replay::snapshot::{
    SnapshotError, SnapshotTable, TableItems, load_items, read_tables, scan_table, write_tables,
};
use worker_engine::AppSpec;
use worker_engine::ConfigError;
use worker_engine::RecordingPublisher;
use worker_engine::Worker;
use worker_engine::clock::Clock;
use worker_engine::item::Item;
use worker_engine::schedule::JobName;
use worker_engine::schema::TableSchema;
use worker_engine::settings::{JobSettings, Settings};
use worker_engine::store::{BatchWriteReport, DynamoStore, ItemWriter, Store, StoreError, WriteOp};
use worker_engine::store::{TransactOp, TransactOutcome, Transactions};
use worker_engine::stream::RecordProcessor;
use worker_engine::stream::table_name;
use worker_engine::stream::{RecordError, StreamChange};
use worker_engine::{Sharing, TableDeps};
use worker_engine::{Stores, TableSet};

/// A table the worker serves besides the target table.
#[derive(Debug, Clone)]
pub struct OtherTable {
    /// The variable naming it (`ORDERS_TABLE`).
    pub var: &'static str,
    /// Its name when nothing else names it, and its role in `--table
    /// ROLE=NAME`.
    pub default_name: &'static str,
    /// Its name for a command: the variable's value, else the default
    /// ([`OtherTable::of`]), else what `--table` says ([`name_tables`]).
    pub name: String,
    /// The table as the app expects it (keys, indexes, stream): what
    /// `table create` creates.
    pub schema: TableSchema,
}

impl OtherTable {
    /// The table its variable names in the process environment (else its
    /// default name).
    pub fn of(var: &'static str, default_name: &'static str, schema: TableSchema) -> Self {
        OtherTable {
            var,
            default_name,
            name: var_or(var, default_name),
            schema,
        }
    }
}

/// The value of variable `var` in the process environment, else `default`.
fn var_or(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// The tables of `T` but its home table: the target of a command is the
/// home table.
pub fn others_of<T: TableSet>() -> Vec<OtherTable> {
    T::ALL
        .iter()
        .filter(|t| **t != T::HOME)
        .map(|t| OtherTable::of(t.env_var(), t.default_name(), t.schema()))
        .collect()
}

/// `app` with its tables named by a command's `--table` values, and the
/// target table's name ([`AppTable::named`]).
///
/// - An app of one table: the last `NAME` (clap gives the default and
///   `TABLE_NAME`).
/// - An app of several: each table is named by its variable, else its
///   role (its default name); `ROLE=NAME` names the table of that role
///   for this command. A bare `ROLE` picks that table alone where `scope`
///   allows it (the app comes back narrowed to that table, still
///   [`AppTable::several`]); elsewhere it is refused with the roles and
///   their variables, as is a role the app does not have.
pub fn name_tables(
    app: &AppTable,
    values: &[String],
    scope: Scope,
) -> Result<(AppTable, String), CliError> {
    if !app.several {
        let name = values.last().map_or(app.role, String::as_str);
        return Ok((app.clone(), name.to_owned()));
    }
    let mut named = app.clone();
    let mut home = var_or(app.var, app.role);
    // 0 is the target table, i + 1 the other table i.
    let mut picked: Option<usize> = None;
    for value in values {
        let (role, name) = match value.split_once('=') {
            Some((role, name)) => (role.trim(), Some(name.trim())),
            None => (value.trim(), None),
        };
        let Some(index) = role_index(app, role) else {
            return Err(role_error(
                app,
                value,
                &format!("{} has no table {role:?}", app.app),
            ));
        };
        match name {
            Some("") => return Err(role_error(app, value, "the name after `=` is empty")),
            Some(name) if index == 0 => home = name.to_owned(),
            Some(name) => named.others[index - 1].name = name.to_owned(),
            None if scope == Scope::Every => {
                return Err(role_error(
                    app,
                    value,
                    "this command works on every table; name one as ROLE=NAME",
                ));
            }
            None if picked.is_some_and(|p| p != index) => {
                return Err(role_error(app, value, "one table at a time"));
            }
            None => picked = Some(index),
        }
    }
    Ok(match picked {
        None => (named, home),
        Some(0) => (
            AppTable {
                others: Vec::new(),
                ..named
            },
            home,
        ),
        Some(i) => {
            let o = named.others.swap_remove(i - 1);
            let narrowed = AppTable {
                schema: o.schema,
                role: o.default_name,
                var: o.var,
                others: Vec::new(),
                ..named
            };
            (narrowed, o.name)
        }
    })
}

/// The table of `role` (a role or its variable, in any case): 0 for the
/// target table, i + 1 for the other table i.
fn role_index(app: &AppTable, role: &str) -> Option<usize> {
    let is = |default: &str, var: &str| role.eq_ignore_ascii_case(default) || role == var;
    if is(app.role, app.var) {
        return Some(0);
    }
    app.others
        .iter()
        .position(|o| is(o.default_name, o.var))
        .map(|i| i + 1)
}

/// `--table VALUE: PROBLEM`, then how the app's tables are named.
fn role_error(app: &AppTable, value: &str, problem: &str) -> CliError {
    let roles: Vec<String> = std::iter::once((app.role, app.var))
        .chain(app.others.iter().map(|o| (o.default_name, o.var)))
        .map(|(role, var)| format!("{role} ({var})"))
        .collect();
    CliError::Usage(format!(
        "--table {value}: {problem}. Each table of {} is named by `--table ROLE=NAME`, \
         else by its variable, else by its role; roles (variables): {}",
        app.app,
        roles.join(", ")
    ))
}

/// Another table of a command, open.
#[derive(Clone)]
pub struct OpenTable {
    /// The table as the app declares it.
    pub table: OtherTable,
    /// Its name for this command (the same as `table.name`).
    pub name: String,
    /// The store on it, on the command's client.
    pub store: Arc<DynamoStore>,
}

/// The other tables on `target`'s client and counters.
pub fn open_others(target: &DynamoStore, others: &[OtherTable]) -> Vec<OpenTable> {
    others
        .iter()
        .cloned()
        .map(|t| {
            let name = t.name.clone();
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
    /// The worker's clock: the system's, or fixed at `--now`.
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
    /// with each table's variable set to the name the command opened it
    /// under ([`name_tables`]; the home table's is the target's,
    /// `TABLE_NAME`), so that the worker tells the tables apart by the
    /// names the command uses.
    pub fn table_lookup<T: TableSet>(&self) -> impl Fn(&str) -> Option<String> + '_ {
        move |name: &str| {
            if name == T::HOME.env_var() {
                return (self.lookup)(worker_engine::settings::TABLE_NAME);
            }
            self.others
                .iter()
                .find(|(v, _, _)| *v == name)
                .map(|(_, n, _)| n.clone())
                .or_else(|| (self.lookup)(name))
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
    /// The table's name.
    pub table: String,
    /// Its key attribute names (for rendering keys; an empty sort key: it
    /// has none).
    pub keys: (&'static str, &'static str),
    /// The dry-run layer, for a dry run (writes planned, not sent).
    pub dry: Option<Arc<DryRunStore>>,
    /// The recording layer, otherwise (writes sent, with their outcome).
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
    /// The table's name.
    pub table: String,
    /// Its key attribute names (for rendering keys; an empty sort key: it
    /// has none).
    pub keys: (&'static str, &'static str),
    /// The writes, in the order made.
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
    /// The table's name.
    pub name: &'a str,
    /// Its key attribute names (an empty sort key: it has none).
    pub keys: (&'static str, &'static str),
    /// The store on it.
    pub store: &'a Arc<DynamoStore>,
}

impl<'a> CommandTable<'a> {
    /// The table as a snapshot of the app's tables names it.
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
    /// The snapshot's path, as given.
    pub file: String,
    /// `(table name, items written)` per table.
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
/// array, several as one object ([`crate::replay::snapshot::tables_text`]);
/// one table of an app of several ([`AppTable::several`]) as an object
/// that names it.
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
    write_tables(path, &parts, target.app.several)?;
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
    fn the_worker_sees_the_names_the_command_opened() {
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
            Some("People"),
            "the name the command opened it under (its variable was read then)"
        );
        assert_eq!(l("CHATS_TABLE").as_deref(), Some("Chats-local"));
        let stores = parts.stores::<T>();
        assert!(Arc::ptr_eq(stores.get(T::Requests), &parts.store));
        assert!(Arc::ptr_eq(stores.get(T::Chats), &parts.others[1].2));
    }

    /// An app of `T`'s tables, as a command sees it before `--table`.
    fn app() -> AppTable {
        AppTable {
            others: others_of::<T>(),
            role: T::HOME.default_name(),
            var: T::HOME.env_var(),
            several: true,
            ..AppTable::single("t-worker", T::HOME.schema())
        }
    }

    fn names(app: &AppTable, target: &str) -> Vec<String> {
        app.table_names(target)
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    }

    fn values(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_table_is_named_by_its_role() {
        let app = app();
        let (named, target) = app.named(&[], Scope::Every).unwrap();
        assert_eq!(target, "Requests", "the role, where no variable names it");
        assert_eq!(names(&named, &target), ["Requests", "People", "Chats"]);
        let v = values(&[
            "People=dev-people",
            "requests=dev-requests",
            "CHATS_TABLE=c",
        ]);
        let (named, target) = app.named(&v, Scope::Every).unwrap();
        assert_eq!(target, "dev-requests");
        assert_eq!(names(&named, &target), ["dev-requests", "dev-people", "c"]);
        assert!(named.several);
    }

    #[test]
    fn a_role_alone_picks_one_table_where_the_command_reads_one() {
        let app = app();
        let (one, target) = app.named(&values(&["People"]), Scope::OneOrEvery).unwrap();
        assert_eq!(target, "People");
        assert_eq!(names(&one, &target), ["People"], "that table alone");
        assert!(one.several, "its snapshot still names the table");
        let v = values(&["People", "People=dev-people"]);
        let (_, target) = app.named(&v, Scope::OneOrEvery).unwrap();
        assert_eq!(target, "dev-people", "picked and named");
        let (one, target) = app
            .named(&values(&["Requests"]), Scope::OneOrEvery)
            .unwrap();
        assert_eq!(names(&one, &target), ["Requests"]);
    }

    #[test]
    fn a_value_that_names_no_table_is_refused_with_the_roles() {
        let app = app();
        let roles = "roles (variables): Requests (REQUESTS_TABLE), People (PEOPLE_TABLE), \
                     Chats (CHATS_TABLE)";
        for (v, scope, problem) in [
            (
                "People",
                Scope::Every,
                "--table People: this command works on every table",
            ),
            (
                "Users=u",
                Scope::Every,
                "--table Users=u: t-worker has no table \"Users\"",
            ),
            (
                "Users",
                Scope::OneOrEvery,
                "t-worker has no table \"Users\"",
            ),
            ("People=", Scope::Every, "the name after `=` is empty"),
        ] {
            let e = app.named(&values(&[v]), scope).unwrap_err().to_string();
            assert!(e.contains(problem) && e.contains(roles), "{v}: {e}");
        }
        let e = app
            .named(&values(&["People", "Chats"]), Scope::OneOrEvery)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--table Chats: one table at a time"), "{e}");
    }

    #[test]
    fn an_app_of_one_table_takes_its_name() {
        let app = AppTable {
            role: "t-local",
            ..AppTable::single("t-worker", T::HOME.schema())
        };
        let (named, target) = app.named(&values(&["People"]), Scope::Every).unwrap();
        assert_eq!((target.as_str(), named.several), ("People", false));
        assert_eq!(app.named(&[], Scope::Every).unwrap().1, "t-local");
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
