//! The assembled worker: one store, one configuration, one clock, every
//! job's stream handler and scheduled job. The Lambda entry points and the
//! CLI both run events through [`App`], so a replay runs exactly the code
//! Lambda runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tracing::Instrument;

use crate::config::{Clock, Config, SystemClock};
use crate::jobs::{self, JobDeps};
use crate::keys::Job;
use crate::keys::{PK, SK};
use crate::metrics::{self, CountedHandler, Emitter, WriteCounter};
use crate::schedule::{self, JobReport, JobRun, Scheduler, Tick, TickError, TickSource};
use crate::worker::Router;
use worker_engine::error::HandlerError;
use worker_engine::store::coalesce::Coalescing;
use worker_engine::store::{self, DynamoStore, Store};
use worker_engine::stream::decode::{self, EnvelopeError};
use worker_engine::stream::engine::{self, BatchReport, EngineConfig};

/// Why an event could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error(transparent)]
    Stream(#[from] EnvelopeError),
    #[error(transparent)]
    Tick(#[from] TickError),
    #[error(transparent)]
    Job(#[from] HandlerError),
    #[error(
        "not an event this worker handles: expected a DynamoDB Streams event (\"Records\") or a schedule event (\"job\" or \"detail-type\": \"Scheduled Event\")"
    )]
    UnknownEvent,
    #[error(
        "this function runs only the {pinned} job (WORKER_JOB={pinned}) but the tick names {got}: check the schedule's target"
    )]
    WrongJob { pinned: Job, got: Job },
}

/// What running one event did.
#[derive(Debug)]
pub enum EventOutcome {
    Stream(BatchReport),
    Schedule(JobReport),
}

/// The worker, assembled.
pub struct App {
    deps: JobDeps,
    /// The stream handlers' store (shares their requests).
    coalescing: Arc<Coalescing>,
    router: Router,
    scheduler: Scheduler,
    observe: Observe,
}

/// What the metrics of an invocation are made of (see [`crate::metrics`]).
#[derive(Default)]
struct Observe {
    /// Write requests of each stream handler.
    writes: Arc<WriteCounter>,
    /// Where EMF lines go; none: no metrics (the CLI).
    emitter: Option<Emitter>,
    /// The DynamoDB store whose request and capacity counters the metrics
    /// report (a clone shares the counters).
    metered: Option<DynamoStore>,
}

impl App {
    /// Assemble the worker over a store, with every job registered.
    pub fn new(store: Arc<dyn Store>, config: Config, clock: Arc<dyn Clock>) -> Self {
        let deps = JobDeps {
            store,
            config,
            clock: clock.clone(),
        };
        let observe = Observe::default();
        let coalescing = Arc::new(Coalescing::new(deps.store.clone(), (PK, SK)));
        // Stream handlers run for many items at once (see the engine): their
        // point reads and bulk writes share requests.
        let stream_deps = JobDeps {
            store: coalescing.clone(),
            ..deps.clone()
        };
        let router = jobs::handlers(&stream_deps)
            .into_iter()
            .map(|h| CountedHandler::wrap(h, observe.writes.clone()))
            .fold(Router::new(clock), Router::with);
        let scheduler = jobs::scheduled(&deps)
            .into_iter()
            .fold(Scheduler::default(), Scheduler::with);
        App {
            deps,
            coalescing,
            router,
            scheduler,
            observe,
        }
    }

    /// Write one CloudWatch EMF line per stream batch and per job run (the
    /// Lambda functions: [`Emitter::stdout_from_env`]; tests capture them).
    pub fn with_metrics(mut self, emitter: Emitter) -> Self {
        self.observe.emitter = Some(emitter);
        self
    }

    /// Report this store's DynamoDB requests and consumed capacity in the
    /// metrics (`from_env` does it for its own store).
    pub fn with_store_metrics(mut self, store: &DynamoStore) -> Self {
        self.observe.metered = Some(store.clone());
        self
    }

    /// Assemble from the environment (Lambda): `TABLE_NAME`, optional
    /// `DYNAMODB_ENDPOINT_URL`, and the rest of [`Config`].
    pub async fn from_env() -> Result<Self, crate::config::ConfigError> {
        let config = Config::from_env()?;
        let client = store::client(config.endpoint_url.as_deref()).await;
        let store = Arc::new(DynamoStore::new(client, &config.table_name));
        Ok(App::new(store.clone(), config, Arc::new(SystemClock)).with_store_metrics(&store))
    }

    pub fn config(&self) -> &Config {
        &self.deps.config
    }
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.deps.store
    }
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.deps.clock
    }
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// Run a DynamoDB Streams event through the batch engine.
    pub async fn handle_stream(
        &self,
        event: &Value,
        deadline: Option<Instant>,
    ) -> Result<BatchReport, EventError> {
        let records = decode::decode_event(event)?;
        let config = EngineConfig {
            deadline,
            deadline_margin: self.deps.config.deadline_margin,
            concurrency: self.deps.config.stream_concurrency,
            ..EngineConfig::default()
        };
        let lags = metrics::stream_lags_ms(&records, self.deps.clock.now());
        let (writes, requests) = self.counters();
        // The batch's records know of each other (BatchFacts); one poll pass
        // of the batch's lanes, one shared request per kind.
        let router = self.router.for_batch(&records);
        let report = self
            .coalescing
            .gathered(engine::run_batch(records, &router, &config))
            .await;
        if let Some(emitter) = &self.observe.emitter {
            let store = self.store_delta(requests);
            let m = metrics::stream_metrics(
                &report,
                &lags,
                &self.observe.writes.since(&writes),
                store.as_ref(),
            );
            emitter.emit(self.deps.clock.now(), None, &m);
        }
        Ok(report)
    }

    /// The handler write counts and store counters now (for deltas).
    fn counters(&self) -> (metrics::HandlerWrites, Option<store::MetricsSnapshot>) {
        (
            self.observe.writes.snapshot(),
            self.observe
                .metered
                .as_ref()
                .map(|s| s.metrics().snapshot()),
        )
    }

    /// The store counters accumulated since `before`.
    fn store_delta(
        &self,
        before: Option<store::MetricsSnapshot>,
    ) -> Option<store::MetricsSnapshot> {
        let now = self.observe.metered.as_ref()?.metrics().snapshot();
        Some(now.since(&before.unwrap_or_default()))
    }

    /// Run a schedule tick (either EventBridge shape).
    pub async fn handle_schedule(
        &self,
        event: &Value,
        deadline: Option<Instant>,
    ) -> Result<JobReport, EventError> {
        let tick = schedule::parse_tick(event)?;
        // A function pinned to one job (WORKER_JOB) has only that job's
        // permissions: refuse any other tick instead of failing halfway.
        if let Some(pinned) = self.deps.config.job
            && pinned != tick.job
        {
            return Err(EventError::WrongJob {
                pinned,
                got: tick.job,
            });
        }
        Ok(self.run_tick(tick, deadline).await?)
    }

    /// Run one job now (the CLI's `run JOB`).
    pub async fn run_job(
        &self,
        job: Job,
        deadline: Option<Instant>,
    ) -> Result<JobReport, HandlerError> {
        let tick = Tick {
            job,
            scheduled_time: None,
            source: TickSource::Manual,
        };
        self.run_tick(tick, deadline).await
    }

    async fn run_tick(
        &self,
        tick: Tick,
        deadline: Option<Instant>,
    ) -> Result<JobReport, HandlerError> {
        let span = tracing::info_span!("job", job = %tick.job, source = ?tick.source);
        let job = tick.job;
        let run = JobRun {
            now: self.deps.clock.now(),
            tick,
            deadline,
            margin: self.deps.config.deadline_margin,
        };
        let (_, requests) = self.counters();
        let result = self.scheduler.run(&run).instrument(span).await;
        if let Some(emitter) = &self.observe.emitter {
            let store = self.store_delta(requests);
            let m = metrics::job_metrics(result.as_ref(), store.as_ref());
            emitter.emit(self.deps.clock.now(), Some(job.as_str()), &m);
        }
        result
    }

    /// Run any event, detected from its content.
    pub async fn handle(
        &self,
        event: &Value,
        deadline: Option<Instant>,
    ) -> Result<EventOutcome, EventError> {
        if decode::is_stream_event(event) {
            Ok(EventOutcome::Stream(
                self.handle_stream(event, deadline).await?,
            ))
        } else if schedule::is_schedule_event(event) {
            Ok(EventOutcome::Schedule(
                self.handle_schedule(event, deadline).await?,
            ))
        } else {
            Err(EventError::UnknownEvent)
        }
    }
}

/// The Lambda deadline (milliseconds since the epoch) as an [`Instant`].
pub fn deadline_from_epoch_ms(deadline_ms: u64) -> Instant {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    Instant::now() + Duration::from_millis(deadline_ms.saturating_sub(now_ms))
}

/// The local event-source loop (`dev`) invokes the worker as Lambda would.
#[async_trait::async_trait]
impl worker_engine::replay::dev::EventFunction for App {
    async fn invoke_stream(&self, event: &Value) -> Result<BatchReport, String> {
        self.handle_stream(event, None)
            .await
            .map_err(|e| e.to_string())
    }

    async fn invoke_schedule(&self, event: &Value) -> Result<Value, String> {
        let report = self
            .handle_schedule(event, None)
            .await
            .map_err(|e| e.to_string())?;
        serde_json::to_value(report).map_err(|e| e.to_string())
    }
}
