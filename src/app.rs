//! The assembled Nishiki worker: one store, one configuration, one clock,
//! every job's stream handler and scheduled job, run by the engine's
//! [`Worker`]. The Lambda entry points and the CLI both run events through
//! [`App`], so a replay runs exactly the code Lambda runs.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use crate::config::{Clock, Config};
use crate::jobs::APP;
use crate::keys::Job;
use crate::keys::{PK, SK};
use crate::metrics::Emitter;
use worker_engine::EventBridgePublisher;
use worker_engine::HandlerError;
use worker_engine::InvokeError;
use worker_engine::Sharing;
use worker_engine::Worker;
use worker_engine::schedule::JobReport;
use worker_engine::store::{DynamoStore, Store};
use worker_engine::stream::BatchReport;

/// Why an event could not be run at all.
pub type EventError = worker_engine::EventError<Job>;
/// What running one event did.
pub type EventOutcome = worker_engine::EventOutcome<Job>;

/// The stream handlers run for many items at once (see the engine): their
/// point reads and bulk writes share requests.
pub const SHARING: Sharing = Sharing::Coalesced((PK, SK));

/// The worker, assembled.
pub struct App {
    store: Arc<dyn Store>,
    config: Config,
    clock: Arc<dyn Clock>,
    worker: Worker<Job>,
}

/// The worker as Lambda runs it (`lambda::Deployment`), its events to
/// EventBridge.
pub async fn worker_from_env() -> Result<Worker<Job>, crate::config::ConfigError> {
    APP.table_worker_from_env(SHARING)
}

impl App {
    /// Assemble the worker over a store, with every job registered
    /// (`APP.table_worker`), its events to EventBridge when
    /// `NOTIFY_EVENT_BUS` names a bus.
    pub fn new(store: Arc<dyn Store>, config: Config, clock: Arc<dyn Clock>) -> Self {
        let publisher = Arc::new(EventBridgePublisher::default());
        let worker = APP.table_worker(
            store.clone(),
            config.clone(),
            publisher,
            clock.clone(),
            SHARING,
        );
        App {
            store,
            config,
            clock,
            worker,
        }
    }

    /// Write one CloudWatch EMF line per stream batch and per job run (the
    /// Lambda functions: [`crate::metrics::emitter_from_env`]; tests capture
    /// them).
    pub fn with_metrics(mut self, emitter: Emitter) -> Self {
        self.worker = self.worker.with_metrics(emitter);
        self
    }

    /// Report this store's DynamoDB requests and consumed capacity in the
    /// metrics (`worker_from_env` does it for its own store).
    pub fn with_store_metrics(mut self, store: &DynamoStore) -> Self {
        self.worker = self.worker.with_store_metrics(store);
        self
    }

    /// The configuration the worker was assembled with.
    pub fn config(&self) -> &Config {
        &self.config
    }
    /// The store every job reads and writes (as given to [`App::new`]).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }
    /// The clock every handler and job reads `now` from (a fixed one in
    /// tests and replays).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
    /// The engine's worker this app runs on.
    pub fn worker(&self) -> &Worker<Job> {
        &self.worker
    }

    /// The engine's worker alone (the command line runs it).
    pub fn into_worker(self) -> Worker<Job> {
        self.worker
    }

    /// Run a DynamoDB Streams event through the batch engine.
    pub async fn handle_stream(
        &self,
        event: &Value,
        deadline: Option<Instant>,
    ) -> Result<BatchReport, EventError> {
        self.worker.handle_stream(event, deadline).await
    }

    /// Run a schedule tick (either EventBridge shape).
    pub async fn handle_schedule(
        &self,
        event: &Value,
        deadline: Option<Instant>,
    ) -> Result<JobReport<Job>, EventError> {
        self.worker.handle_schedule(event, deadline).await
    }

    /// Run one job now (the CLI's `run JOB`).
    pub async fn run_job(
        &self,
        job: Job,
        deadline: Option<Instant>,
    ) -> Result<JobReport<Job>, HandlerError> {
        self.worker.run_job(job, deadline).await
    }

    /// Run any event, detected from its content.
    pub async fn handle(
        &self,
        event: &Value,
        deadline: Option<Instant>,
    ) -> Result<EventOutcome, EventError> {
        self.worker.handle(event, deadline).await
    }
}

/// The local event-source loop (`dev`) and the test kit's drain invoke the
/// worker as Lambda would.
#[async_trait::async_trait]
impl worker_engine::EventFunction for App {
    async fn invoke_stream(&self, event: &Value) -> Result<BatchReport, InvokeError> {
        self.worker.invoke_stream(event).await
    }

    async fn invoke_schedule(&self, event: &Value) -> Result<Value, InvokeError> {
        self.worker.invoke_schedule(event).await
    }
}
