//! DynamoDB Local's write cost by table position
//! (`cargo bench --bench local_tables`).
//!
//! On one DynamoDB Local (`-inMemory -sharedDb`), it creates [`TABLES`]
//! tables with the Nishiki schema (stream on, or off with `--no-stream`),
//! seeds each with [`SEED`] items, then writes the same kind of load (300
//! deletes and 300 puts of 200-byte items, BatchWriteItem in chunks of 25,
//! one after the other) to each table in creation order, twice around.
//!
//! With streams, the same writes take longer on every later table (measured
//! on the 2-core machine of BENCHMARKS.md: 0.40, 0.75, 1.02 and 1.66 s for
//! tables 1 to 4, and again 0.37 s for table 1 on the second round); without
//! streams they take 0.21 to 0.39 s on every table. This is an
//! artefact of the emulator, not of DynamoDB, and the reason
//! `benches/load.rs` runs its baseline on a DynamoDB Local of its own: on
//! the worker's instance, the baseline's table would be the second one and
//! pay for it.

#[path = "common/engine.rs"]
mod engine;
#[path = "../tests/it/support/mod.rs"]
mod support;

use aws_sdk_dynamodb::types::WriteRequest;
use worker_engine::store::{self, DynamoStore};

const TABLES: usize = 4;
const SEED: usize = 2000;
const WRITES: usize = 300;

/// The synthetic item `i`: 200 partitions, one sort key per item.
fn put(i: usize) -> WriteRequest {
    engine::put(&format!("p{}", i % 200), &format!("s{i}"))
}

fn delete(i: usize) -> WriteRequest {
    engine::delete(&format!("p{}", i % 200), &format!("s{i}"))
}

/// Send `requests` (BatchWriteItem, 25 at a time); the seconds taken.
async fn write(client: &aws_sdk_dynamodb::Client, table: &str, requests: Vec<WriteRequest>) -> f64 {
    support::raw_batch_write(client, table, requests)
        .await
        .1
        .as_secs_f64()
}

#[tokio::main]
async fn main() {
    let stream = !std::env::args().any(|a| a == "--no-stream");
    let local = worker_toolkit::local::start_jit(worker_toolkit::local::Jit::Full)
        .await
        .expect("DynamoDB Local must start (see the error for what to install)");
    let client = store::local_client(&local.endpoint_url());
    let schema = nishiki_worker::schema::nishiki();
    let schema = if stream {
        schema
    } else {
        schema.without_stream()
    };
    let names: Vec<String> = (1..=TABLES).map(|n| format!("position-{n}")).collect();
    for name in &names {
        DynamoStore::new(client.clone(), name)
            .create_table(&schema)
            .await
            .expect("create table");
        write(&client, name, (0..SEED).map(put).collect()).await;
    }
    println!(
        "DynamoDB Local, {TABLES} tables, stream {}",
        if stream { "on" } else { "off" }
    );
    let mut figures = Vec::new();
    for round in 0..2 {
        for (n, name) in names.iter().enumerate() {
            let first = round * WRITES;
            let mut requests: Vec<WriteRequest> = (first..first + WRITES).map(delete).collect();
            requests.extend((0..WRITES).map(|i| put(100_000 * (round + 1) + i)));
            let secs = write(&client, name, requests).await;
            println!(
                "round {} table {} ({}): {} writes in {secs:.3} s",
                round + 1,
                n + 1,
                name,
                2 * WRITES
            );
            figures.push(serde_json::json!({"round": round + 1, "table": n + 1, "secs": secs}));
        }
    }
    println!(
        "{}",
        serde_json::json!({"bench": "local_tables", "stream": stream, "runs": figures})
    );
}
