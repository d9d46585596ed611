//! What one request of each kind costs DynamoDB Local
//! (`cargo bench --bench local_costs`).
//!
//! On a DynamoDB Local of its own, it creates a table with the Nishiki
//! schema (stream on), seeds [`PARTITIONS`] partitions of [`PER_PARTITION`]
//! synthetic 200-byte items, checks that the idle engine uses no CPU, puts
//! and deletes 2,000 scratch items (a fresh engine compiles its write paths
//! on its first writes), then sends [`REPS`] requests of each kind one
//! after the other (after 5 untimed ones) and prints, per request kind,
//! the engine's CPU time per request and per item (from
//! `/proc/<pid>/stat`, 10 ms resolution, hence the repetitions) and the
//! wall time per request.
//!
//! It tells where a drain's time can go: a fixed cost per request, and a
//! cost per item written that is several times the cost per item read,
//! and what asking for the consumed capacity (`ReturnConsumedCapacity:
//! TOTAL`, which the worker's store does on every request) adds to it. The
//! figures are in BENCHMARKS.md ("What DynamoDB Local charges").

#[path = "common/engine.rs"]
mod engine;
#[path = "../tests/it/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, KeysAndAttributes, Put, ReturnConsumedCapacity,
    TransactWriteItem, WriteRequest,
};
use engine::{cpu_secs, delete, item, key, put};
use worker_engine::store::{self, DynamoStore};

const TABLE: &str = "local-costs";
const PARTITIONS: usize = 400;
const PER_PARTITION: usize = 16;
const REPS: usize = 60;

fn pk(p: usize) -> String {
    format!("p{}", p % PARTITIONS)
}

fn sk(s: usize) -> String {
    format!("s{s}")
}

/// One BatchWriteItem of at most 25 requests (DynamoDB Local does not
/// throttle, so nothing is left unprocessed).
async fn batch_write(client: &Client, requests: Vec<WriteRequest>) {
    let (sent, _) = support::raw_batch_write(client, TABLE, requests).await;
    assert_eq!(sent, 1, "one request");
}

/// [`batch_write`] asking for the consumed capacity, as the worker's store
/// does on every request.
async fn batch_write_total(client: &Client, requests: Vec<WriteRequest>) {
    let n = requests.len() as f64;
    let sent =
        support::raw_batch_write_with(client, TABLE, requests, Some(ReturnConsumedCapacity::Total))
            .await;
    assert_eq!(sent.requests, 1, "one request");
    assert!(sent.consumed_capacity >= n, "capacity reported");
}

/// One TransactWriteItems as the worker's guarded writes send it: a
/// ConditionCheck that `absent` is absent, beside `writes` (puts of new
/// items or deletes of keys), with the consumed capacity asked for.
async fn transact(client: &Client, absent: (&str, &str), writes: Vec<TransactWriteItem>) {
    let check = TransactWriteItem::builder()
        .condition_check(
            ConditionCheck::builder()
                .table_name(TABLE)
                .set_key(Some(key(absent.0, absent.1)))
                .condition_expression("attribute_not_exists(PK)")
                .build()
                .expect("check"),
        )
        .build();
    client
        .transact_write_items()
        .set_transact_items(Some(std::iter::once(check).chain(writes).collect()))
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await
        .expect("TransactWriteItems");
}

fn transact_put(pk: &str, sk: &str) -> TransactWriteItem {
    TransactWriteItem::builder()
        .put(
            Put::builder()
                .table_name(TABLE)
                .set_item(Some(item(pk, sk)))
                .build()
                .expect("put"),
        )
        .build()
}

fn transact_delete(pk: &str, sk: &str) -> TransactWriteItem {
    TransactWriteItem::builder()
        .delete(
            Delete::builder()
                .table_name(TABLE)
                .set_key(Some(key(pk, sk)))
                .build()
                .expect("delete"),
        )
        .build()
}

async fn batch_get(
    client: &Client,
    keys: Vec<HashMap<String, AttributeValue>>,
    capacity: Option<ReturnConsumedCapacity>,
) {
    let keys = KeysAndAttributes::builder()
        .set_keys(Some(keys))
        .consistent_read(true)
        .build()
        .expect("keys set");
    client
        .batch_get_item()
        .request_items(TABLE, keys)
        .set_return_consumed_capacity(capacity)
        .send()
        .await
        .expect("BatchGetItem");
}

async fn partiql(client: &Client, partitions: Vec<String>) {
    let list = vec!["?"; partitions.len()].join(", ");
    let mut next: Option<String> = None;
    loop {
        let out = client
            .execute_statement()
            .statement(format!(
                "SELECT * FROM \"{TABLE}\" WHERE \"PK\" IN [{list}]"
            ))
            .set_parameters(Some(
                partitions.iter().cloned().map(AttributeValue::S).collect(),
            ))
            .consistent_read(true)
            .set_next_token(next.take())
            .send()
            .await
            .expect("ExecuteStatement");
        next = out.next_token().map(str::to_owned);
        if next.is_none() {
            return;
        }
    }
}

async fn query(client: &Client, p: usize, prefix: Option<&str>) {
    let q = client
        .query()
        .table_name(TABLE)
        .consistent_read(true)
        .expression_attribute_values(":p", AttributeValue::S(pk(p)));
    let q = match prefix {
        Some(prefix) => q
            .key_condition_expression("PK = :p AND begins_with(SK, :s)")
            .expression_attribute_values(":s", AttributeValue::S(prefix.into())),
        None => q.key_condition_expression("PK = :p"),
    };
    q.send().await.expect("Query");
}

/// One line of the report.
struct Cost {
    name: &'static str,
    items: usize,
    cpu_ms: f64,
    wall_ms: f64,
}

#[tokio::main]
async fn main() {
    let local = worker_toolkit::local::start_jit(worker_toolkit::local::Jit::Full)
        .await
        .expect("DynamoDB Local must start (see the error for what to install)");
    let pid = local.pid();
    let client = store::local_client(&local.endpoint_url());
    DynamoStore::new(client.clone(), TABLE)
        .create_table(&nishiki_worker::schema::nishiki())
        .await
        .expect("create table");
    let seed = (0..PARTITIONS)
        .flat_map(|p| (0..PER_PARTITION).map(move |s| put(&pk(p), &sk(s))))
        .collect();
    support::raw_batch_write(&client, TABLE, seed).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_from = cpu_secs(pid);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = cpu_secs(pid) - idle_from;
    println!("DynamoDB Local idle for 3 s: {idle:.2} s CPU");

    // A fresh instance compiles its write paths on its first thousands of
    // writes: warm them up, so the first measures are not charged for it.
    engine::warm_writes(&client, TABLE, None).await;

    let mut costs: Vec<Cost> = Vec::new();
    // `$body` sends one request; run it 5 times untimed, then REPS times.
    macro_rules! measure {
        ($name:expr, $items:expr, $body:expr) => {{
            for _ in 0..5 {
                $body;
            }
            let cpu = cpu_secs(pid);
            let started = Instant::now();
            for _ in 0..REPS {
                $body;
            }
            costs.push(Cost {
                name: $name,
                items: $items,
                cpu_ms: (cpu_secs(pid) - cpu) / REPS as f64 * 1000.0,
                wall_ms: started.elapsed().as_secs_f64() / REPS as f64 * 1000.0,
            });
        }};
    }
    // Fresh sort keys for new items and missing keys; `n` moves on each use.
    let mut n = 1_000;
    let mut next = || {
        n += 1;
        n
    };
    measure!("BatchWriteItem: 25 puts of new items", 25, {
        let s = next();
        batch_write(&client, (0..25).map(|i| put(&pk(i * 7), &sk(s))).collect()).await
    });
    measure!("BatchWriteItem: 25 puts of items as stored", 25, {
        let p = next();
        batch_write(&client, (0..25).map(|i| put(&pk(p + i), &sk(1))).collect()).await
    });
    measure!(
        "BatchWriteItem: 25 puts of new items, capacity TOTAL",
        25,
        {
            let s = next();
            batch_write_total(&client, (0..25).map(|i| put(&pk(i * 7), &sk(s))).collect()).await
        }
    );
    // Seeded items `s6`..`s15` are deleted here, 400 per sort key.
    let mut deleted = 0;
    // The next 25 seeded items to delete.
    let mut next_deletes = || {
        let first = deleted;
        deleted += 25;
        (first..deleted)
            .map(|d| delete(&pk(d), &sk(6 + d / PARTITIONS)))
            .collect::<Vec<_>>()
    };
    measure!("BatchWriteItem: 25 deletes of existing items", 25, {
        batch_write(&client, next_deletes()).await
    });
    measure!(
        "BatchWriteItem: 25 deletes of existing items, capacity TOTAL",
        25,
        batch_write_total(&client, next_deletes()).await
    );
    assert!(
        deleted <= PARTITIONS * (PER_PARTITION - 6),
        "deleted only seeded items"
    );
    measure!("BatchWriteItem: 25 deletes of missing keys", 25, {
        let s = next() + 100_000;
        batch_write(&client, (0..25).map(|i| delete(&pk(i), &sk(s))).collect()).await
    });
    // The guarded writes' transactions, beside the batches above.
    measure!(
        "TransactWriteItems: 1 check + 24 puts of new items, TOTAL",
        25,
        {
            let s = next() + 300_000;
            transact(
                &client,
                ("absent", "parent"),
                (0..24).map(|i| transact_put(&pk(i * 7), &sk(s))).collect(),
            )
            .await
        }
    );
    measure!(
        "TransactWriteItems: 1 check + 24 deletes of missing keys, TOTAL",
        25,
        {
            let s = next() + 400_000;
            transact(
                &client,
                ("absent", "parent"),
                (0..24).map(|i| transact_delete(&pk(i), &sk(s))).collect(),
            )
            .await
        }
    );
    measure!(
        "TransactWriteItems: 1 check + 99 deletes of missing keys, TOTAL",
        100,
        {
            let s = next() + 500_000;
            transact(
                &client,
                ("absent", "parent"),
                (0..99).map(|i| transact_delete(&pk(i), &sk(s))).collect(),
            )
            .await
        }
    );
    measure!("TransactWriteItems: 1 check + 1 delete, TOTAL", 2, {
        let s = next() + 600_000;
        transact(
            &client,
            ("absent", "parent"),
            vec![transact_delete(&pk(3), &sk(s))],
        )
        .await
    });
    measure!("BatchWriteItem: 1 put of a new item", 1, {
        let s = next() + 200_000;
        batch_write(&client, vec![put(&pk(2), &sk(s))]).await
    });
    measure!("BatchWriteItem: 1 delete of a missing key", 1, {
        let s = next() + 100_000;
        batch_write(&client, vec![delete(&pk(1), &sk(s))]).await
    });
    // 100 seeded keys from partition `p` on.
    let hundred_keys = |p: usize| -> Vec<HashMap<String, AttributeValue>> {
        (0..100)
            .map(|i| key(&pk(p + i * 3), &sk(1 + i % 3)))
            .collect()
    };
    measure!("BatchGetItem: 100 keys", 100, {
        batch_get(&client, hundred_keys(next()), None).await
    });
    measure!("BatchGetItem: 100 keys, capacity TOTAL", 100, {
        batch_get(
            &client,
            hundred_keys(next()),
            Some(ReturnConsumedCapacity::Total),
        )
        .await
    });
    measure!("BatchGetItem: 1 key", 1, {
        batch_get(&client, vec![key(&pk(next()), &sk(2))], None).await
    });
    measure!("GetItem", 1, {
        client
            .get_item()
            .table_name(TABLE)
            .set_key(Some(key(&pk(next()), &sk(3))))
            .consistent_read(true)
            .send()
            .await
            .expect("GetItem")
    });
    measure!("PartiQL SELECT: 50 partitions", 50, {
        let p = next();
        partiql(&client, (0..50).map(|i| pk(p + i * 5)).collect()).await
    });
    measure!("PartiQL SELECT: 10 partitions", 10, {
        let p = next();
        partiql(&client, (0..10).map(|i| pk(p + i * 5)).collect()).await
    });
    measure!("PartiQL SELECT: 1 partition", 1, {
        partiql(&client, vec![pk(next())]).await
    });
    measure!("Query: 1 partition", 1, query(&client, next(), None).await);
    measure!(
        "Query: 1 partition, begins_with",
        1,
        query(&client, next(), Some("s2")).await
    );

    println!(
        "{:<62} {:>5} {:>12} {:>12} {:>12}",
        "request", "items", "CPU ms/req", "CPU ms/item", "wall ms/req"
    );
    for c in &costs {
        println!(
            "{:<62} {:>5} {:>12.2} {:>12.3} {:>12.2}",
            c.name,
            c.items,
            c.cpu_ms,
            c.cpu_ms / c.items as f64,
            c.wall_ms
        );
    }
    let json: Vec<serde_json::Value> = costs
        .iter()
        .map(|c| {
            serde_json::json!({"request": c.name, "items": c.items,
                "cpu_ms_per_request": c.cpu_ms, "wall_ms_per_request": c.wall_ms})
        })
        .collect();
    println!(
        "{}",
        serde_json::json!({"bench": "local_costs", "reps": REPS, "idle_cpu_secs_3s": idle, "costs": json})
    );
}
