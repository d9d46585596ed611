//! Lambda entry point: schedule ticks (EventBridge Scheduler input or the
//! rule envelope) for every scheduled job.

use lambda_runtime::Error;
use nishiki_worker::app::App;
use nishiki_worker::metrics::emitter_from_env;
use worker_engine::telemetry::{self, LogFormat};

// One thread: the work waits on DynamoDB, and a small function has a
// fraction of a vCPU; one thread also keeps one allocator arena (the peak
// memory of a 6 MB batch, BENCHMARKS.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    telemetry::init(LogFormat::Json);
    // One CloudWatch EMF line per invocation on stdout (logs: stderr).
    let app = App::from_env()
        .await?
        .with_metrics(emitter_from_env("schedule"));
    worker_engine::lambda::serve_schedule(app.worker()).await
}
