//! The smallest `lambda_runtime` function: echoes its event. The floor of
//! the Lambda benchmark's cold start (`benches/lambda_process.rs`), built
//! with the profile of the `bootstrap`s:
//! `cargo build --profile bootstrap -p worker-testkit --example hello_lambda`.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    run(service_fn(|event: LambdaEvent<Value>| async move {
        Ok::<Value, Error>(event.payload)
    }))
    .await
}
