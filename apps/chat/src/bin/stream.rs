//! Lambda bootstrap of the stream function: DynamoDB Streams batches of the
//! six chat tables (one event source mapping per table; each record's
//! `eventSourceARN` names its table). Each mapping sets
//! `FunctionResponseTypes: [ReportBatchItemFailures]`.

use chat_worker::app::{APP, worker_from_env};
use worker_engine::lambda::{Stream, bootstrap};

fn main() -> Result<(), lambda_runtime::Error> {
    bootstrap(Stream, APP.namespace, worker_from_env)
}
