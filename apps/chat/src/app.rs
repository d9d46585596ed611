//! The chat worker, described once ([`APP`]: its variables and jobs) and
//! assembled on the engine's [`Worker`]. The Lambda mains, the command line
//! and the tests all run events through [`worker`], so a replay runs
//! exactly the code Lambda runs.
//!
//! One stream function serves the six tables' streams (one event source
//! mapping each): [`ByTable`] routes a record by the table its
//! `eventSourceARN` names to the handlers of that table ([`TableHandler`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use lambda_runtime::Error;
use worker_engine::clock::Clock;
use worker_engine::job::AppSpec;
use worker_engine::lambda::Deployment;
use worker_engine::metrics::WriteCounter;
use worker_engine::runtime::{AllHandlers, EveryBatch, Worker};
use worker_engine::schedule::Scheduler;
use worker_engine::store::transact::Transactions;
use worker_engine::store::{DynamoStore, Store};
use worker_engine::stream::engine::RecordProcessor;
use worker_engine::stream::source::ByTable;

use crate::config::{self, Settings};
use crate::keys::Job;
use crate::schema::Table;
use crate::{cascade, members, requests};

/// What a handler or job does on one table: the DynamoDB actions (a
/// transaction needs its operations' own actions: `PutItem`,
/// `UpdateItem`, `ConditionCheckItem`) and the indexes it queries. The
/// template grants each function exactly these, table by table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableAccess {
    pub table: Table,
    pub actions: &'static [&'static str],
    pub indexes: &'static [&'static str],
}

/// The actions and indexes, per table, of the stream function (`None`) or
/// of a job's schedule function.
pub fn table_access(
    job: Option<Job>,
) -> BTreeMap<Table, (BTreeSet<&'static str>, BTreeSet<&'static str>)> {
    let lists: Vec<&[TableAccess]> = match job {
        None => vec![
            requests::STREAM_TABLES,
            members::STREAM_TABLES,
            cascade::STREAM_TABLES,
        ],
        Some(Job::ExpireRequests) => vec![requests::EXPIRE_TABLES],
        Some(Job::AuditRequests) => vec![requests::AUDIT_TABLES],
    };
    let mut out: BTreeMap<Table, (BTreeSet<_>, BTreeSet<_>)> = BTreeMap::new();
    for a in lists.into_iter().flatten() {
        let e = out.entry(a.table).or_default();
        e.0.extend(a.actions);
        e.1.extend(a.indexes);
    }
    out
}

/// A stream handler, with the table whose records it handles.
pub trait TableHandler: RecordProcessor {
    fn table(&self) -> Table;
}

/// A job of the chat worker, described once.
pub type JobSpec = worker_engine::job::JobSpec<Job, Deps, dyn TableHandler>;

/// The chat worker: its common variables and its jobs, in the order their
/// stream handlers see a change.
pub const APP: AppSpec<Job, Deps, dyn TableHandler> = AppSpec {
    name: "chat-worker",
    namespace: "ChatWorker",
    env: config::COMMON_ENV,
    jobs: &[&requests::SPEC, &members::SPEC, &cascade::SPEC],
};

/// The six tables' stores.
#[derive(Clone)]
pub struct Stores(BTreeMap<Table, Arc<dyn Store>>);

impl Stores {
    pub fn new(stores: impl IntoIterator<Item = (Table, Arc<dyn Store>)>) -> Self {
        let map: BTreeMap<_, _> = stores.into_iter().collect();
        assert!(
            Table::ALL.iter().all(|t| map.contains_key(t)),
            "a store per table"
        );
        Stores(map)
    }

    pub fn get(&self, table: Table) -> &Arc<dyn Store> {
        &self.0[&table]
    }
}

/// What the handlers and jobs are built from.
pub struct Deps {
    pub stores: Stores,
    /// Transactions over the tables (by name: [`Settings::tables`]).
    pub tx: Arc<dyn Transactions>,
    pub settings: Settings,
    pub clock: Arc<dyn Clock>,
    /// The stream handlers' writes (and conflicts), by metric.
    pub writes: Arc<WriteCounter>,
}

/// The worker over `stores`: every job registered.
pub fn worker(
    stores: Stores,
    tx: Arc<dyn Transactions>,
    settings: Settings,
    clock: Arc<dyn Clock>,
) -> Worker<Job> {
    let deps = Deps {
        stores,
        tx,
        settings,
        clock: clock.clone(),
        writes: Arc::default(),
    };
    let handlers = APP.handlers(&deps);
    let routes = Table::ALL
        .iter()
        .map(|t| {
            let mine: Vec<Arc<dyn RecordProcessor>> = handlers
                .iter()
                .filter(|h| h.table() == *t)
                .map(|h| h.clone() as Arc<dyn RecordProcessor>)
                .collect();
            let all: Arc<dyn RecordProcessor> = Arc::new(AllHandlers(mine));
            (deps.settings.table(*t).to_owned(), all)
        })
        .collect();
    let scheduler = APP
        .scheduled(&deps)
        .into_iter()
        .fold(Scheduler::default(), Scheduler::with);
    let mut worker_settings = APP.worker_settings(&deps.settings.common);
    worker_settings
        .writes_metrics
        .push(requests::REQUEST_CONFLICTS);
    Worker::new(
        Box::new(EveryBatch(ByTable::new(routes))),
        scheduler,
        clock,
        worker_settings,
    )
    .with_write_counter(deps.writes)
}

/// One store per table, named by `settings`, on `first`'s client and
/// counters (every table's requests in one invocation's metrics).
pub fn dynamo_stores(first: &DynamoStore, settings: &Settings) -> BTreeMap<Table, DynamoStore> {
    Table::ALL
        .iter()
        .map(|t| (*t, first.on_table(settings.table(*t), t.schema().key)))
        .collect()
}

/// The stores as the worker takes them.
pub fn stores_of(dynamo: &BTreeMap<Table, DynamoStore>) -> Stores {
    Stores::new(
        dynamo
            .iter()
            .map(|(t, s)| (*t, Arc::new(s.clone()) as Arc<dyn Store>)),
    )
}

/// The worker as Lambda runs it: settings from the environment, every
/// table's DynamoDB requests and capacity in the metrics, records that fail
/// for good parked in `PARKING_TABLE` when it is set.
pub async fn worker_from_env() -> Result<Worker<Job>, Error> {
    let settings = Settings::from_lookup(&|name| std::env::var(name).ok())?;
    let deployed = Deployment::of(&settings.common)?;
    let dynamo = dynamo_stores(&deployed.store, &settings);
    let tx = Arc::new(deployed.store.clone());
    let clock = deployed.clock.clone();
    Ok(deployed.finish(worker(stores_of(&dynamo), tx, settings, clock)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_holds_together() {
        APP.check().unwrap();
        let functions = APP.functions();
        let names: Vec<_> = functions.iter().map(|f| f.logical_id).collect();
        assert_eq!(
            names,
            [
                "StreamFunction",
                "ExpireRequestsFunction",
                "AuditRequestsFunction"
            ]
        );
    }
}
