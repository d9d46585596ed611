//! Shared by the benches that look at DynamoDB Local itself
//! (`benches/load.rs`, `benches/local_tables.rs`, `benches/local_costs.rs`;
//! included with `#[path]`, beside `tests/it/support` as `support`): the
//! engine process's CPU time, the items of a synthetic table (keys
//! `PK`/`SK`, a 200-byte `Data` attribute; no Nishiki item, so no key
//! encoding is involved) and the warm-up of a fresh instance's writes.
#![allow(dead_code)]

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeValue, DeleteRequest, PutRequest, ReturnConsumedCapacity, WriteRequest,
};

/// `sysconf(_SC_CLK_TCK)` on Linux.
const CLOCK_TICKS_PER_SEC: f64 = 100.0;

/// CPU seconds (user + system) a process has used so far, from
/// `/proc/<pid>/stat` (Linux; 0 elsewhere; resolution 10 ms). DynamoDB
/// Local's JVM is where a drain's time goes: it saturates both cores while
/// the worker's own process stays mostly idle.
pub(crate) fn cpu_secs(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else { return 0.0 };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name: utime and stime are the 12th and 13th.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / CLOCK_TICKS_PER_SEC
}

/// The key of a synthetic item.
pub(crate) fn key(pk: &str, sk: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("PK".to_owned(), AttributeValue::S(pk.to_owned())),
        ("SK".to_owned(), AttributeValue::S(sk.to_owned())),
    ])
}

/// A synthetic item: its key and 200 bytes of `Data`.
pub(crate) fn item(pk: &str, sk: &str) -> HashMap<String, AttributeValue> {
    let mut item = key(pk, sk);
    item.insert("Data".into(), AttributeValue::S("x".repeat(200)));
    item
}

/// A BatchWriteItem put of [`item`].
pub(crate) fn put(pk: &str, sk: &str) -> WriteRequest {
    WriteRequest::builder()
        .put_request(
            PutRequest::builder()
                .set_item(Some(item(pk, sk)))
                .build()
                .expect("item set"),
        )
        .build()
}

/// A BatchWriteItem delete of [`key`].
pub(crate) fn delete(pk: &str, sk: &str) -> WriteRequest {
    WriteRequest::builder()
        .delete_request(
            DeleteRequest::builder()
                .set_key(Some(key(pk, sk)))
                .build()
                .expect("key set"),
        )
        .build()
}

/// Scratch items a fresh instance writes and deletes before it is timed
/// ([`warm_writes`]).
pub(crate) const WARM_WRITES: usize = 2_000;

/// Put [`WARM_WRITES`] scratch items into `table` and delete them again, each
/// request asking for `capacity`, so a fresh DynamoDB Local has compiled its
/// write paths before it is timed (the first 2,000 deletes of a fresh
/// instance cost it about twice the CPU of later ones).
pub(crate) async fn warm_writes(
    client: &Client,
    table: &str,
    capacity: Option<ReturnConsumedCapacity>,
) {
    let sks: Vec<String> = (0..WARM_WRITES).map(|n| format!("scratch#{n}")).collect();
    for ops in [
        sks.iter().map(|sk| put("warm-up", sk)).collect::<Vec<_>>(),
        sks.iter().map(|sk| delete("warm-up", sk)).collect(),
    ] {
        crate::support::raw_batch_write_with(client, table, ops, capacity.clone()).await;
    }
}
