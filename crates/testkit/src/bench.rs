//! The load drivers' shared part (`benches/*.rs` of every app): the
//! `--sizes` argument, a table seeded on a DynamoDB Local of its own, one
//! job run metered by the store's metrics, and the verdict on how the read
//! capacity grows with the table.
//!
//! A driver measures one run per size ([`Metered`]), prints its own table
//! of figures, then [`Growth::of`] its runs and [`finish`] with its JSON
//! line: the bench exits non-zero when the bound does not hold.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use worker_engine::item::Item;
use worker_engine::schema::TableSchema;
use worker_engine::store::{DynamoStore, MetricsSnapshot};
use worker_toolkit::local::DynamoDbLocal;

use crate::TestTable;

/// `--sizes 1000,5000` or `--sizes=1000,5000` among `args` (cargo adds
/// `--bench`, which is ignored); `None` without it.
pub fn sizes_from(args: impl IntoIterator<Item = String>) -> Option<Vec<usize>> {
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let list = if a == "--sizes" {
            args.next().expect("--sizes needs a comma-separated list")
        } else if let Some(list) = a.strip_prefix("--sizes=") {
            list.to_owned()
        } else {
            continue;
        };
        return Some(
            list.split(',')
                .map(|n| n.trim().parse().expect("--sizes: comma-separated numbers"))
                .collect(),
        );
    }
    None
}

/// The bench's `--sizes`, if given.
pub fn sizes_arg() -> Option<Vec<usize>> {
    sizes_from(std::env::args().skip(1))
}

/// The bench's `--sizes`, else `default`.
pub fn sizes_or(default: &[usize]) -> Vec<usize> {
    sizes_arg().unwrap_or_else(|| default.to_vec())
}

/// The bench's `--sizes`, else `default`; each at least `min` (a test
/// failure naming `unit` otherwise: the fixed part of the table must fit).
pub fn sizes_at_least(default: &[usize], min: usize, unit: &str) -> Vec<usize> {
    let sizes = sizes_or(default);
    assert!(
        sizes.iter().all(|&n| n >= min),
        "sizes must be at least {min} {unit}"
    );
    sizes
}

/// A table of its own DynamoDB Local, seeded (keep `local` alive with
/// the table).
pub struct Seeded {
    /// The table's own DynamoDB Local: dropping it stops the JVM it started.
    pub local: DynamoDbLocal,
    /// The seeded table (deleted on drop).
    pub table: TestTable,
    /// Seconds the seeding took.
    pub seed_s: f64,
}

/// A table `name` of `schema` on a DynamoDB Local of its own, `items` put
/// by `tasks` concurrent BatchWriteItem sequences.
pub async fn seeded(
    name: impl Into<String>,
    schema: &TableSchema,
    items: Vec<Item>,
    tasks: usize,
) -> Seeded {
    let (local, table) = TestTable::on_own_local(name, schema).await;
    let started = Instant::now();
    crate::seed_concurrently(&table.store, items, tasks).await;
    Seeded {
        local,
        table,
        seed_s: started.elapsed().as_secs_f64(),
    }
}

/// What a run returned, with what it cost the store and how long it took.
pub struct Metered<T> {
    /// What the run returned.
    pub value: T,
    /// The store's metrics over the run.
    pub cost: MetricsSnapshot,
    /// Wall-clock time of the run, in milliseconds.
    pub run_ms: f64,
}

/// `run` timed, with `store`'s metrics over it.
pub async fn metered<T>(store: &Arc<DynamoStore>, run: impl Future<Output = T>) -> Metered<T> {
    let before = store.metrics().snapshot();
    let started = Instant::now();
    let value = run.await;
    let run_ms = started.elapsed().as_secs_f64() * 1000.0;
    Metered {
        value,
        cost: store.metrics().snapshot().since(&before),
        run_ms,
    }
}

/// How the read capacity of a run grows from the smallest table to the
/// largest.
#[derive(Debug, Clone, Copy)]
pub struct Growth {
    /// The smallest table's size (the runs' `size`, e.g. items seeded).
    pub smallest: usize,
    /// The largest table's size, in the same unit.
    pub largest: usize,
    /// The largest's read capacity over the smallest's.
    pub ratio: f64,
}

impl Growth {
    /// Of `runs`, each with its table's size and its cost.
    pub fn of<M>(
        runs: &[M],
        size: impl Fn(&M) -> usize,
        cost: impl Fn(&M) -> &MetricsSnapshot,
    ) -> Self {
        let smallest = runs.iter().min_by_key(|m| size(m)).expect("a size");
        let largest = runs.iter().max_by_key(|m| size(m)).expect("a size");
        Growth {
            smallest: size(smallest),
            largest: size(largest),
            ratio: cost(largest).read_capacity / cost(smallest).read_capacity,
        }
    }

    /// Whether the growth is within `bound` and `count` (of what else
    /// must not happen, named `what`) is 0; printed as the verdict line.
    pub fn verdict(&self, bound: f64, what: &str, count: u64) -> bool {
        let ok = self.ratio <= bound && count == 0;
        println!();
        println!(
            "RCU growth {}/{}: {:.3} (goal <= {bound}); {what}: {count} (goal 0): {}",
            self.largest,
            self.smallest,
            self.ratio,
            if ok { "ok" } else { "FAILED" }
        );
        ok
    }
}

/// Print the bench's JSON `line` (an object) with the growth's
/// `rcu_ratio`, the `bound` and `ok`; exit non-zero unless `ok`.
pub fn finish(mut line: Value, growth: &Growth, bound: f64, ok: bool) {
    line["rcu_ratio"] = growth.ratio.into();
    line["bound"] = bound.into();
    line["ok"] = ok.into();
    println!("{line}");
    if !ok {
        std::process::exit(1);
    }
}
