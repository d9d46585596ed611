//! Lambda bootstrap of the schedule functions (one per job, pinned with
//! `WORKER_JOB`): EventBridge Scheduler input or rule events.

use chat_worker::app::{APP, worker_from_env};
use lambda_runtime::Error;
use worker_engine::metrics::Emitter;
use worker_engine::telemetry::{self, LogFormat};

// One thread: the work waits on DynamoDB, and a small function has a
// fraction of a vCPU; one thread also keeps one allocator arena (the peak
// memory of a 6 MB batch, BENCHMARKS.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    telemetry::init(LogFormat::Json);
    let worker = worker_from_env()
        .await?
        .with_metrics(Emitter::stdout_from_env(APP.namespace, "schedule"));
    worker_engine::lambda::serve_schedule(&worker).await
}
