//! The assembled worker: one store, one configuration, one clock, every
//! job's stream handler and scheduled job. The Lambda entry points and the
//! CLI both run events through [`App`], so a replay runs exactly the code
//! Lambda runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::{Clock, Config, SystemClock};
use crate::error::HandlerError;
use crate::jobs::{self, JobDeps};
use crate::keys::Job;
use crate::schedule::{self, JobReport, JobRun, Scheduler, Tick, TickError, TickSource};
use crate::store::{self, DynamoStore, Store};
use crate::stream::decode::{self, EnvelopeError};
use crate::stream::engine::{self, BatchReport, EngineConfig};
use crate::worker::Router;

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
    router: Router,
    scheduler: Scheduler,
}

impl App {
    /// Assemble the worker over a store, with every job registered.
    pub fn new(store: Arc<dyn Store>, config: Config, clock: Arc<dyn Clock>) -> Self {
        let deps = JobDeps {
            store,
            config,
            clock: clock.clone(),
        };
        let router = jobs::handlers(&deps)
            .into_iter()
            .fold(Router::new(clock), Router::with);
        let scheduler = jobs::scheduled(&deps)
            .into_iter()
            .fold(Scheduler::default(), Scheduler::with);
        App {
            deps,
            router,
            scheduler,
        }
    }

    /// Assemble from the environment (Lambda): `TABLE_NAME`, optional
    /// `DYNAMODB_ENDPOINT_URL`, and the rest of [`Config`].
    pub async fn from_env() -> Result<Self, crate::config::ConfigError> {
        let config = Config::from_env()?;
        let client = store::client(config.endpoint_url.as_deref()).await;
        let store = Arc::new(DynamoStore::new(client, &config.table_name));
        Ok(App::new(store, config, Arc::new(SystemClock)))
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
            ..EngineConfig::default()
        };
        Ok(engine::run_batch(records, &self.router, &config).await)
    }

    /// Run a schedule tick (either EventBridge shape).
    pub async fn handle_schedule(
        &self,
        event: &Value,
        deadline: Option<Instant>,
    ) -> Result<JobReport, EventError> {
        let tick = schedule::parse_tick(event)?;
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
        let run = JobRun {
            now: self.deps.clock.now(),
            tick,
            deadline,
            margin: self.deps.config.deadline_margin,
        };
        self.scheduler.run(&run).await
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
