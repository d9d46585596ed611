//! Lambda entry point: the DynamoDB Streams consumer. Configure the event
//! source mapping with `FunctionResponseTypes: [ReportBatchItemFailures]`.

use nishiki_worker::app::worker_from_env;
use nishiki_worker::metrics::NAMESPACE;
use worker_engine::lambda::{Stream, bootstrap};

fn main() -> Result<(), lambda_runtime::Error> {
    bootstrap(Stream, NAMESPACE, worker_from_env)
}
