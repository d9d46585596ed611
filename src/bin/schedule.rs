//! Lambda entry point: schedule ticks (EventBridge Scheduler input or the
//! rule envelope) for every scheduled job.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use nishiki_worker::app::{App, deadline_from_epoch_ms};
use nishiki_worker::schedule::JobReport;
use serde_json::Value;
use worker_engine::telemetry::{self, LogFormat};

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init(LogFormat::Json);
    // One CloudWatch EMF line per invocation on stdout (logs: stderr).
    let app = App::from_env()
        .await?
        .with_metrics(nishiki_worker::metrics::emitter_from_env("schedule"));
    let app = &app;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = Some(deadline_from_epoch_ms(event.context.deadline));
        let report = app.handle_schedule(&event.payload, deadline).await?;
        Ok::<JobReport, Error>(report)
    }))
    .await
}
