//! The two Lambda entry points of every app, so an app's `main` is three
//! lines: set up logs, assemble its [`Worker`], serve it.
//!
//! - [`serve_stream`]: DynamoDB Streams batches; configure the event source
//!   mapping with `FunctionResponseTypes: [ReportBatchItemFailures]`. The
//!   response names the earliest record to retry; a transient failure on a
//!   record without a sequence number fails the invocation, the only way
//!   to have Lambda retry it.
//! - [`serve_schedule`]: schedule ticks (EventBridge Scheduler input or the
//!   rule envelope); a failed job fails the invocation (retried, then sent
//!   to the schedule's dead-letter queue).

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

use crate::runtime::{Worker, deadline_from_epoch_ms};
use crate::schedule::{JobName, JobReport};
use crate::stream::engine::BatchResponse;

/// Serve stream batches until the runtime stops.
pub async fn serve_stream<J: JobName>(worker: &Worker<J>) -> Result<(), Error> {
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = Some(deadline_from_epoch_ms(event.context.deadline));
        let report = worker.handle_stream_event(event.payload, deadline).await?;
        if report.retry_whole_batch {
            return Err(Error::from(
                "transient failure on a record without a sequence number; retrying the whole batch",
            ));
        }
        Ok::<BatchResponse, Error>(report.response())
    }))
    .await
}

/// Serve schedule ticks until the runtime stops.
pub async fn serve_schedule<J: JobName>(worker: &Worker<J>) -> Result<(), Error> {
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = Some(deadline_from_epoch_ms(event.context.deadline));
        let report = worker.handle_schedule(&event.payload, deadline).await?;
        Ok::<JobReport<J>, Error>(report)
    }))
    .await
}
