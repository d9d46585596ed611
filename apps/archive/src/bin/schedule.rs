//! Lambda bootstrap of the schedule functions (one per job, pinned with
//! `WORKER_JOB`): EventBridge Scheduler input or rule events.

use archive_worker::app::{APP, worker_from_env};
use worker_engine::lambda::{Function, bootstrap};

fn main() -> Result<(), lambda_runtime::Error> {
    bootstrap(Function::Schedule, APP.namespace, worker_from_env)
}
