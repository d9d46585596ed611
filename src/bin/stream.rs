//! Lambda entry point: the DynamoDB Streams consumer. Configure the event
//! source mapping with `FunctionResponseTypes: [ReportBatchItemFailures]`.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use nishiki_worker::app::{App, deadline_from_epoch_ms};
use serde_json::Value;
use worker_engine::stream::engine::BatchResponse;
use worker_engine::telemetry::{self, LogFormat};

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init(LogFormat::Json);
    // One CloudWatch EMF line per invocation on stdout (logs: stderr).
    let app = App::from_env()
        .await?
        .with_metrics(nishiki_worker::metrics::emitter_from_env("stream"));
    let app = &app;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = Some(deadline_from_epoch_ms(event.context.deadline));
        let report = app.handle_stream(&event.payload, deadline).await?;
        if report.retry_whole_batch {
            // A transient failure on a record without a sequence number:
            // only a failed invocation makes Lambda retry it.
            return Err(Error::from(
                "transient failure on a record without a sequence number; retrying the whole batch",
            ));
        }
        Ok::<BatchResponse, Error>(report.response())
    }))
    .await
}
