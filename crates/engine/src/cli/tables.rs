//! Commands of an app whose worker serves several tables
//! ([`super::CliApp::other_tables`]): besides the target table (`--table`), each
//! other table is named by its variable (the process environment), or its
//! default name. The embedded DynamoDB Local and `table create` make
//! them all; `replay` and `run` give the worker a store per table (dry-run
//! layered when asked); `--apply-writes` writes each record to the table
//! its `eventSourceARN` names; `dev` follows every event source of the
//! template, each on its table (without one, every table's stream). Table
//! diffs and snapshots are of the target table. A one-table app has no
//! other tables and nothing here changes what its commands do.

use std::sync::Arc;

use crate::replay::apply::WritePlan;
use crate::schema::TableSchema;
use crate::store::layers::DryRunStore;
use crate::store::transact::{TransactOp, TransactOutcome, Transactions};
use crate::store::{DynamoStore, ItemWriter, Store, StoreError, WriteOp};
use crate::stream::decode::{RecordError, StreamChange};
use crate::stream::source::table_name;

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
