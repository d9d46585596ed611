//! The two Lambda entry points of every app, so an app's `main` is three
//! lines: set up logs, assemble its [`Worker`], serve it.
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
//! timeouts, [`STREAM_TIMEOUT`] and [`SCHEDULE_TIMEOUT`]
//! ([`crate::runtime::invocation_deadline`]).
//!
//! Each invocation runs inside the `invocation` span
//! ([`crate::telemetry::invocation_span`]): `cold_start` and the X-Ray
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
pub const STREAM_TIMEOUT: Duration = Duration::from_secs(120);

/// A schedule function's timeout where the runtime gives no real deadline
/// (the shortest `Timeout` of the templates' schedule functions).
pub const SCHEDULE_TIMEOUT: Duration = Duration::from_secs(300);

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
