//! Lambda bootstrap of the schedule functions (one per job, pinned with
//! `WORKER_JOB`): EventBridge Scheduler input or rule events.

use chat_worker::app::{APP, worker_from_env};
use worker_engine::lambda::{Schedule, bootstrap};

fn main() -> Result<(), lambda_runtime::Error> {
    bootstrap(Schedule, APP.namespace, worker_from_env)
}
