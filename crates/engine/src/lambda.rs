//! The two Lambda entry points of every app, and [`bootstrap`], a
//! bootstrap's whole `main`: an app's is one line.
//!
//! - [`serve_stream`]: DynamoDB Streams batches; configure the event source
//!   mapping with `FunctionResponseTypes: [ReportBatchItemFailures]`. The
//!   response names the earliest record to retry; a transient failure on a
//!   record without a sequence number fails the invocation, the only way
//!   to have Lambda retry it, and so does an environment fault (a missing
//!   table or index, access denied: [`crate::error::FailureKind`]), so
//!   that nothing is skipped until the deployment is fixed.
//! - [`serve_schedule`]: schedule ticks (EventBridge Scheduler input or the
//!   rule envelope); a failed job fails the invocation (retried, then sent
//!   to the schedule's dead-letter queue).
//!
//! The deadline of an invocation is the runtime's. Where that is not a
//! deadline (already past or more than 900 s away when the invocation
//! starts: a local emulator's, such as cargo-lambda's fixed `600000`), it is
//! the function's timeout from the start of the invocation:
//! `AWS_LAMBDA_FUNCTION_TIMEOUT` seconds when set, else the templates'
//! timeouts, `STREAM_TIMEOUT` and `SCHEDULE_TIMEOUT`
//! (`invocation_deadline`).
//!
//! Each invocation runs inside the `invocation` span
//! (`invocation_span`): `cold_start` and the X-Ray
//! `trace_id` on every line it writes.

use lambda_runtime::{Context, Diagnostic, Error, LambdaEvent, run, service_fn};
use serde_json::Value;
use serde_json::value::RawValue;
use tracing::Instrument;

use std::time::Duration;

use crate::error::FailureKind;
use crate::runtime::{EventError, Worker, invocation_deadline};
use crate::schedule::{JobName, JobReport};
use crate::stream::engine::BatchResponse;
use crate::telemetry;

/// A stream function's timeout where the runtime gives no real deadline
/// (the `Timeout` of every template's stream function).
pub(crate) const STREAM_TIMEOUT: Duration = Duration::from_secs(120);

/// A schedule function's timeout where the runtime gives no real deadline
/// (the shortest `Timeout` of the templates' schedule functions).
pub(crate) const SCHEDULE_TIMEOUT: Duration = Duration::from_secs(300);

/// The function a bootstrap serves, as a type ([`Stream`] or
/// [`Schedule`]): each bootstrap links only its own side.
pub trait Function: Copy {
    /// Its name in the metrics when `AWS_LAMBDA_FUNCTION_NAME` is unset.
    const NAME: &'static str;
    /// Serve `worker` until the runtime stops.
    fn serve<J: JobName>(
        self,
        worker: &Worker<J>,
    ) -> impl std::future::Future<Output = Result<(), Error>>;
}

/// DynamoDB Streams batches ([`serve_stream`]).
#[derive(Debug, Clone, Copy)]
pub struct Stream;

/// Schedule ticks ([`serve_schedule`]).
#[derive(Debug, Clone, Copy)]
pub struct Schedule;

impl Function for Stream {
    const NAME: &'static str = "stream";
    fn serve<J: JobName>(
        self,
        worker: &Worker<J>,
    ) -> impl std::future::Future<Output = Result<(), Error>> {
        serve_stream(worker)
    }
}

impl Function for Schedule {
    const NAME: &'static str = "schedule";
    fn serve<J: JobName>(
        self,
        worker: &Worker<J>,
    ) -> impl std::future::Future<Output = Result<(), Error>> {
        serve_schedule(worker)
    }
}

/// A Lambda bootstrap's whole `main`: JSON logs ([`telemetry::init`]), the
/// worker `build` assembles from the environment, one CloudWatch EMF line
/// per invocation on stdout under `namespace` (logs: stderr), served as
/// `function` until the runtime stops.
///
/// On one thread: the work waits on DynamoDB, and a small function has a
/// fraction of a vCPU; one thread also keeps one allocator arena (the peak
/// memory of a 6 MB batch, BENCHMARKS.md).
pub fn bootstrap<S, J, F, Fut, E>(
    function: S,
    namespace: &'static str,
    build: F,
) -> Result<(), Error>
where
    S: Function,
    J: JobName,
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Worker<J>, E>>,
    E: Into<Error>,
{
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            telemetry::init(telemetry::LogFormat::Json);
            let worker = build()
                .await
                .map_err(Into::into)?
                .with_metrics(crate::metrics::Emitter::stdout_from_env(namespace, S::NAME));
            function.serve(&worker).await
        })
}

/// What a Lambda function's worker runs on, from its environment: the
/// clock, the table's store and the parking table (on one client).
pub struct Deployment {
    /// The system clock, or `WORKER_NOW`'s in a local run
    /// ([`crate::clock::from_env`]).
    pub clock: std::sync::Arc<dyn crate::clock::Clock>,
    /// The function's table, on Lambda's credentials and region.
    pub store: crate::store::DynamoStore,
    /// Where records that fail for good go; `None` when no parking table is
    /// configured (they are only logged and counted).
    pub parking: Option<crate::park::Parking>,
}

impl Deployment {
    /// On `table_name` at `endpoint_url` (`None`: AWS), parking records in
    /// `parking` when set; the clock is `WORKER_NOW`'s (local runs only) or
    /// the system's.
    pub fn from_env(
        endpoint_url: Option<&str>,
        table_name: &str,
        parking: Option<&crate::park::ParkingSettings>,
    ) -> Result<Self, crate::env::ConfigError> {
        let lookup = |name: &str| std::env::var(name).ok();
        let clock = crate::clock::from_env(&crate::env::Env::new(&lookup), endpoint_url)?;
        let client = crate::store::lambda_client(endpoint_url);
        let store = crate::store::DynamoStore::new(client.clone(), table_name);
        let parking = parking.map(|p| crate::park::Parking::dynamo(client, p));
        Ok(Deployment {
            clock,
            store,
            parking,
        })
    }

    /// [`Deployment::from_env`] with an app's common settings.
    pub fn of<J>(
        common: &crate::settings::CommonSettings<J>,
    ) -> Result<Self, crate::env::ConfigError> {
        Self::from_env(
            common.endpoint_url.as_deref(),
            &common.table_name,
            common.parking.as_ref(),
        )
    }

    /// `worker` as Lambda runs it: the store's DynamoDB requests and
    /// capacity in its metrics, records that fail for good parked.
    pub fn finish<J: JobName>(self, worker: Worker<J>) -> Worker<J> {
        worker
            .with_store_metrics(&self.store)
            .with_parking(self.parking)
    }
}

/// The span of this invocation of `worker`.
fn span_of<J: JobName>(worker: &Worker<J>, context: &Context) -> tracing::Span {
    let trace = telemetry::trace_id(context.xray_trace_id.as_deref());
    telemetry::invocation_span(worker.is_cold(), trace.as_deref())
}

/// Serve stream batches until the runtime stops.
///
/// The event is taken as its JSON text and read straight from it
/// ([`Worker::handle_stream_bytes`]): no `Value` of a 6 MB batch.
pub async fn serve_stream<J: JobName>(worker: &Worker<J>) -> Result<(), Error> {
    run(service_fn(move |event: LambdaEvent<Box<RawValue>>| async move {
        let deadline = Some(invocation_deadline(event.context.deadline, STREAM_TIMEOUT));
        let span = span_of(worker, &event.context);
        let report = worker
            .handle_stream_bytes(event.payload.get().as_bytes(), deadline)
            .instrument(span)
            .await
            .map_err(|e| Diagnostic::from(Error::from(e)))?;
        if let Some(fault) = &report.environment_fault {
            return Err(Diagnostic {
                error_type: "EnvironmentFault".into(),
                error_message: format!("the whole batch is retried: {fault}"),
            });
        }
        if report.retry_whole_batch {
            return Err(Diagnostic {
                error_type: "TransientFailure".into(),
                error_message: "transient failure on a record without a sequence number; retrying the whole batch".into(),
            });
        }
        Ok::<BatchResponse, Diagnostic>(report.response())
    }))
    .await
}

/// A failed tick as Lambda reports it: `errorType` `EnvironmentFault` when
/// the deployment is at fault (the run is retried, then its tick lands in
/// the dead-letter queue; the alarm on `EnvironmentFaults` says why).
fn job_error<J: JobName>(e: EventError<J>) -> Diagnostic {
    match &e {
        EventError::Job(job) if job.kind() == FailureKind::Environment => Diagnostic {
            error_type: "EnvironmentFault".into(),
            error_message: e.to_string(),
        },
        _ => Diagnostic::from(Error::from(e)),
    }
}

/// Serve schedule ticks until the runtime stops.
pub async fn serve_schedule<J: JobName>(worker: &Worker<J>) -> Result<(), Error> {
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = Some(invocation_deadline(
            event.context.deadline,
            SCHEDULE_TIMEOUT,
        ));
        let span = span_of(worker, &event.context);
        let report = worker
            .handle_schedule(&event.payload, deadline)
            .instrument(span)
            .await
            .map_err(job_error)?;
        Ok::<JobReport<J>, Diagnostic>(report)
    }))
    .await
}
