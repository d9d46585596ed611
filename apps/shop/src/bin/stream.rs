//! Lambda bootstrap of the stream function: DynamoDB Streams batches of the
//! shop table. Its event source mapping sets
//! `FunctionResponseTypes: [ReportBatchItemFailures]`.

use shop_worker::app::{APP, worker_from_env};
use worker_engine::lambda::{Stream, bootstrap};

fn main() -> Result<(), lambda_runtime::Error> {
    bootstrap(Stream, APP.namespace, worker_from_env)
}
