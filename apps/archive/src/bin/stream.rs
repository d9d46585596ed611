//! Lambda bootstrap of the stream function: DynamoDB Streams batches of the
//! archive table. Its event source mapping sets
//! `FunctionResponseTypes: [ReportBatchItemFailures]`.

use archive_worker::app::{APP, worker_from_env};
use worker_engine::lambda::{Stream, bootstrap};

fn main() -> Result<(), lambda_runtime::Error> {
    bootstrap(Stream, APP.namespace, worker_from_env)
}
