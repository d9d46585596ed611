//! An app on one table, assembled: what its handlers and jobs are built
//! from ([`TableDeps`]) and its worker over a store, in a test or a local
//! run ([`AppSpec::table_worker`]) or as Lambda runs it
//! ([`AppSpec::table_worker_from_env`]).
//!
//! The handlers are the engine's record processors, or an app's handlers
//! of typed changes ([`crate::stream::routed`]): `table_worker` assembles
//! either. An app whose jobs need more (a clock of their own, other
//! tables: [`crate::tables`]) builds its own deps and calls
//! [`AppSpec::worker`].

use std::sync::Arc;

use crate::clock::Clock;
use crate::env::ConfigError;
use crate::job::AppSpec;
use crate::lambda::Deployment;
use crate::metrics::WriteCounter;
use crate::notify::{EventBridgePublisher, EventPublisher};
use crate::runtime::Worker;
use crate::schedule::JobName;
use crate::settings::{JobSettings, Settings};
use crate::store::Store;
use crate::store::coalesce::Coalescing;
use crate::stream::engine::RecordProcessor;
use crate::stream::routed::{ChangeHandler, TypedChange};

/// What the handlers and jobs of an app on one table are built from.
pub struct TableDeps<S> {
    /// The table, for the scheduled jobs.
    pub store: Arc<dyn Store>,
    /// The same table for the stream handlers: with [`Sharing::Coalesced`],
    /// the concurrent reads and writes of a batch share requests; else
    /// `store` itself.
    pub stream_store: Arc<dyn Store>,
    /// The app's settings (in an app's worker, [`crate::Settings`]: the
    /// common ones and the app's own, read from the environment once).
    pub settings: S,
    /// Where the jobs' events go (EventBridge on Lambda; recorded and
    /// dropped in a local run).
    pub publisher: Arc<dyn EventPublisher>,
    /// The stream handlers' writes, by metric.
    pub writes: Arc<WriteCounter>,
}

/// Whether the stream handlers' requests are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// Each handler's own requests.
    Separate,
    /// Concurrent point reads, partition reads and bulk writes of a batch
    /// share requests (`store::coalesce`), on a table of these key
    /// attributes.
    Coalesced((&'static str, &'static str)),
}

impl<S> TableDeps<S> {
    /// The deps of `store` with `settings`: the stream handlers on the same
    /// store ([`Sharing::Separate`]), their writes counted afresh.
    pub fn new(store: Arc<dyn Store>, settings: S, publisher: Arc<dyn EventPublisher>) -> Self {
        TableDeps {
            stream_store: store.clone(),
            store,
            settings,
            publisher,
            writes: Arc::default(),
        }
    }

    /// The deps over `store` shared as `sharing` says, and the coalescing
    /// layer of the stream handlers' requests when there is one.
    fn shared(
        store: Arc<dyn Store>,
        settings: S,
        publisher: Arc<dyn EventPublisher>,
        sharing: Sharing,
    ) -> (Self, Option<Arc<Coalescing>>) {
        let coalescing = match sharing {
            Sharing::Separate => None,
            Sharing::Coalesced(keys) => Some(Arc::new(Coalescing::new(store.clone(), keys))),
        };
        let mut deps = TableDeps::new(store, settings, publisher);
        if let Some(c) = &coalescing {
            deps.stream_store = c.clone();
        }
        (deps, coalescing)
    }
}

/// `worker` with the stream handlers' requests shared through `coalescing`.
fn coalesced<J: JobName>(worker: Worker<J>, coalescing: Option<Arc<Coalescing>>) -> Worker<J> {
    match coalescing {
        Some(c) => worker.with_coalescing(c),
        None => worker,
    }
}

impl<J: JobName, S: JobSettings> AppSpec<J, TableDeps<Settings<J, S>>, dyn RecordProcessor> {
    /// The worker over `store`: every job registered
    /// ([`AppSpec::worker`]), the handlers' writes counted.
    pub fn table_worker(
        &self,
        store: Arc<dyn Store>,
        settings: Settings<J, S>,
        publisher: Arc<dyn EventPublisher>,
        clock: Arc<dyn Clock>,
        sharing: Sharing,
    ) -> Worker<J> {
        let (deps, coalescing) = TableDeps::shared(store, settings, publisher, sharing);
        let worker = self
            .worker(&deps, clock, &deps.settings.common)
            .with_write_counter(deps.writes);
        coalesced(worker, coalescing)
    }

    /// The worker as Lambda runs it: settings from the environment, the
    /// table, clock and parking table of the deployment
    /// ([`Deployment`]: its requests in the metrics), events to
    /// EventBridge.
    pub fn table_worker_from_env(&self, sharing: Sharing) -> Result<Worker<J>, ConfigError> {
        from_env(|store, settings, publisher, clock| {
            self.table_worker(store, settings, publisher, clock, sharing)
        })
    }
}

impl<J: JobName, S: JobSettings, C: TypedChange>
    AppSpec<J, TableDeps<Settings<J, S>>, dyn ChangeHandler<C>>
{
    /// The worker over `store` of an app of typed changes
    /// ([`AppSpec::routed_worker`]), the handlers' writes counted.
    pub fn table_worker(
        &self,
        store: Arc<dyn Store>,
        settings: Settings<J, S>,
        publisher: Arc<dyn EventPublisher>,
        clock: Arc<dyn Clock>,
        sharing: Sharing,
    ) -> Worker<J> {
        let (deps, coalescing) = TableDeps::shared(store, settings, publisher, sharing);
        let worker = self.routed_worker(&deps, clock, &deps.settings.common, deps.writes.clone());
        coalesced(worker, coalescing)
    }

    /// The worker as Lambda runs it (see the other apps'
    /// `table_worker_from_env`).
    pub fn table_worker_from_env(&self, sharing: Sharing) -> Result<Worker<J>, ConfigError> {
        from_env(|store, settings, publisher, clock| {
            self.table_worker(store, settings, publisher, clock, sharing)
        })
    }
}

/// The worker `build` makes from the deployment's store, settings read
/// from the environment, an EventBridge publisher and the deployment's
/// clock, finished as the deployment says (its requests in the metrics,
/// its parking table).
fn from_env<J: JobName, S: JobSettings>(
    build: impl FnOnce(
        Arc<dyn Store>,
        Settings<J, S>,
        Arc<dyn EventPublisher>,
        Arc<dyn Clock>,
    ) -> Worker<J>,
) -> Result<Worker<J>, ConfigError> {
    let settings = Settings::<J, S>::from_env()?;
    let deployed = Deployment::of(&settings.common)?;
    let store = Arc::new(deployed.store.clone());
    let publisher = Arc::new(EventBridgePublisher::default());
    let clock = deployed.clock.clone();
    let worker = build(store, settings, publisher, clock);
    Ok(deployed.finish(worker))
}
