//! Lambda entry point: schedule ticks (EventBridge Scheduler input or the
//! rule envelope) for every scheduled job.

use nishiki_worker::app::worker_from_env;
use nishiki_worker::metrics::NAMESPACE;
use worker_engine::lambda::{Schedule, bootstrap};

fn main() -> Result<(), lambda_runtime::Error> {
    bootstrap(Schedule, NAMESPACE, worker_from_env)
}
