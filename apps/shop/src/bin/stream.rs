//! Lambda bootstrap of the stream function: DynamoDB Streams batches of the
//! shop table. Its event source mapping sets
//! `FunctionResponseTypes: [ReportBatchItemFailures]`.

use shop_worker::app::{APP, worker_from_env};
use worker_engine::lambda::{Function, bootstrap};

fn main() -> Result<(), lambda_runtime::Error> {
    bootstrap(Function::Stream, APP.namespace, worker_from_env)
}
