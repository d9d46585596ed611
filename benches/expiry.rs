//! Expiry-flag load driver against DynamoDB Local (run with
//! `cargo bench --bench expiry`; sizes with `EXPIRY_BENCH_SIZES=10000,100000`,
//! service rewrites with `EXPIRY_BENCH_WRITES=1000`).
//!
//! For each table size it seeds N containers (10 per group, each with a food
//! without expiry and a food expiring 1–13 months ahead) plus the same 200
//! foods entering the window on day D, with the reminders the stream would
//! have written, then:
//!
//! 1. runs the daily tick for D (after a warm-up tick for D-1 that sets the
//!    cursor) and prints its requests and consumed capacity: the tick reads
//!    only the reminder partitions, so its cost must not grow with N;
//! 2. rewrites random containers as the service does (container renamed,
//!    quantities changed, expiries untouched), runs the stream through the
//!    worker and counts the worker's requests: there must be none;
//! 3. for contrast, rewrites containers with a changed expiry.
//!
//! Figures come from `DynamoStore::metrics()` (requests, consumed capacity
//! as DynamoDB Local reports it) and wall time.
//!
//! `cargo bench --bench expiry -- --sizes 500,2000,10000` takes the sizes
//! (containers) as an argument and writes the tick's read capacity against
//! the table's size in items (everything seeded: groups, containers, links,
//! reminders) to `docs/plots/read-capacity-expiry.csv`, and redraws
//! `docs/plots/read-capacity.svg` (with the sweep bench's points if present).

#[path = "../tests/it/support/mod.rs"]
mod support;

#[path = "common/capacity.rs"]
mod capacity;

use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Days, NaiveDate, TimeDelta, Utc};
use futures::StreamExt;
use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::items::{Container, ContainerLink, Entity, Food, Group, Item};
use nishiki_worker::jobs::expiry::{ExpiryRules, container_ops, plan_container_change};
use nishiki_worker::keys::{ContainerId, FoodId, GroupId, Job};
use support::{Drain, TestTable};
use worker_engine::store::{BatchWriter, ItemWriter, MetricsSnapshot, WriteOp};

const DUE: usize = 200;
const CONTAINERS_PER_GROUP: usize = 10;

fn day() -> NaiveDate {
    NaiveDate::from_ymd_opt(2024, 4, 10).expect("date")
}

fn at(date: NaiveDate, h: u32, m: u32) -> DateTime<Utc> {
    date.and_hms_opt(h, m, 0).expect("time").and_utc()
}

fn food(name: &str, expiry: Option<DateTime<Utc>>) -> Food {
    Food {
        food_id: FoodId::random(),
        name: name.into(),
        unit: Some("pcs".into()),
        quantity: Some(1.0),
        category: Some("unselected".into()),
        expiry,
        created_at: at(day() - Days::new(30), 8, 0),
    }
}

struct Seeded {
    containers: Vec<(ContainerId, Container)>,
    items: usize,
    seconds: f64,
}

/// N containers with links and groups, and the worker items the stream
/// would have written for them (planned at D-10 by the job's own rules).
async fn seed(table: &TestTable, n: usize, rules: &ExpiryRules) -> Seeded {
    let started = Instant::now();
    let planned_at = at(day() - Days::new(10), 12, 0);
    let mut ops = Vec::with_capacity(n * 4);
    let mut containers = Vec::with_capacity(n);
    let mut group = GroupId::random();
    for i in 0..n {
        if i % CONTAINERS_PER_GROUP == 0 {
            group = GroupId::random();
            ops.push(WriteOp::Put(
                Entity::Group(Group {
                    id: group,
                    group_name: format!("Group {i}"),
                    extra: Item::new(),
                })
                .to_item(),
            ));
        }
        let id = ContainerId::random();
        // Far foods enter the window 27..392 days after D: never due on D.
        let far = at(day() + Days::new(30 + (i % 365) as u64), 12, 0);
        let mut foods = vec![food("Salt", None), food("Rice", Some(far))];
        if i < DUE {
            // Enters the window exactly on D.
            foods.push(food("Milk", Some(at(day() + Days::new(3), 12, 0))));
        }
        let c = Container {
            id,
            container_name: format!("Shelf {i}"),
            foods,
            extra: Item::new(),
        };
        ops.push(WriteOp::Put(Entity::Container(c.clone()).to_item()));
        ops.push(WriteOp::Put(
            Entity::ContainerLink(ContainerLink {
                group,
                container: id,
                extra: Item::new(),
            })
            .to_item(),
        ));
        let plans = plan_container_change(id, None, Some(&c), planned_at, rules);
        ops.extend(container_ops(&plans, &[group], planned_at, rules));
        containers.push((id, c));
    }
    let items = ops.len();
    let chunks: Vec<Vec<WriteOp>> = ops.chunks(500).map(<[WriteOp]>::to_vec).collect();
    let store = table.store.clone();
    let results: Vec<_> = futures::stream::iter(chunks.into_iter().map(|chunk| {
        let store = store.clone();
        async move { store.batch_write(chunk).await }
    }))
    .buffer_unordered(8)
    .collect()
    .await;
    for r in results {
        r.expect("seed batch");
    }
    Seeded {
        containers,
        items,
        seconds: started.elapsed().as_secs_f64(),
    }
}

struct Figures {
    n: usize,
    seeded_items: usize,
    seed_s: f64,
    tick: MetricsSnapshot,
    tick_ms: f64,
    tick_details: serde_json::Value,
    service_writes: usize,
    worker_on_plain_writes: MetricsSnapshot,
    expiry_writes: usize,
    worker_on_expiry_writes: MetricsSnapshot,
}

async fn measure(n: usize, plain_writes: usize) -> Figures {
    let (_local, table) = TestTable::on_own_local(
        format!("expiry-bench-{n}"),
        &nishiki_worker::schema::nishiki(),
    )
    .await;
    let clock = ManualClock::new(at(day() - Days::new(1), 0, 5));
    let config = Config::for_table(&table.name);
    let rules = ExpiryRules::from_config(&config);
    let app = App::new(table.store.clone(), config, Arc::new(clock.clone()));
    let seeded = seed(&table, n, &rules).await;
    eprintln!(
        "  {n}: seeded {} items in {:.1} s",
        seeded.items, seeded.seconds
    );

    // Warm-up tick for D-1 (sets the cursor), then the measured tick for D.
    app.run_job(Job::FlagExpiring, None)
        .await
        .expect("warm-up tick");
    clock.set(at(day(), 0, 5));
    let metrics = table.store.metrics();
    let before = metrics.snapshot();
    let started = Instant::now();
    let report = app.run_job(Job::FlagExpiring, None).await.expect("tick");
    let tick_ms = started.elapsed().as_secs_f64() * 1000.0;
    let tick = metrics.snapshot().since(&before);
    assert!(report.complete, "{report:?}");
    assert_eq!(report.details["flags_new"], DUE as u64, "{report:?}");

    // The service rewrites containers without touching an expiry.
    let mut drain = Drain::new(&table).await;
    let skip_started = Instant::now();
    drain.skip_existing().await;
    eprintln!(
        "  {n}: skipped the seeded stream records in {:.1} s",
        skip_started.elapsed().as_secs_f64()
    );
    let step = (seeded.containers.len() / plain_writes.max(1)).max(1);
    let mut service_writes = 0;
    for (k, (_, c)) in seeded
        .containers
        .iter()
        .step_by(step)
        .take(plain_writes)
        .enumerate()
    {
        let mut c = c.clone();
        c.container_name = format!("Renamed {k}");
        for f in &mut c.foods {
            f.quantity = Some(k as f64 + 2.0);
            f.unit = Some("kg".into());
        }
        table
            .store
            .put(Entity::Container(c).to_item(), None)
            .await
            .expect("service write");
        service_writes += 1;
    }
    let before = metrics.snapshot();
    let handled = drain.run(&app).await;
    let worker_on_plain_writes = metrics.snapshot().since(&before);
    assert_eq!(handled, service_writes);

    // For contrast: rewrites that move an expiry (a far food, still far).
    let expiry_writes = 100;
    for (k, (_, c)) in seeded
        .containers
        .iter()
        .skip(DUE)
        .take(expiry_writes)
        .enumerate()
    {
        let mut c = c.clone();
        for f in &mut c.foods {
            if let Some(e) = f.expiry {
                f.expiry = Some(e + TimeDelta::days(7 + k as i64 % 3));
            }
        }
        table
            .store
            .put(Entity::Container(c).to_item(), None)
            .await
            .expect("service write");
    }
    let before = metrics.snapshot();
    drain.run(&app).await;
    let worker_on_expiry_writes = metrics.snapshot().since(&before);

    Figures {
        n,
        seeded_items: seeded.items,
        seed_s: seeded.seconds,
        tick,
        tick_ms,
        tick_details: report.details,
        service_writes,
        worker_on_plain_writes,
        expiry_writes,
        worker_on_expiry_writes,
    }
}

fn main() {
    let plot_sizes = capacity::sizes_arg();
    let sizes: Vec<usize> = plot_sizes.clone().unwrap_or_else(|| {
        std::env::var("EXPIRY_BENCH_SIZES")
            .unwrap_or_else(|_| "10000,100000".into())
            .split(',')
            .map(|s| s.trim().parse().expect("EXPIRY_BENCH_SIZES: numbers"))
            .collect()
    });
    assert!(
        sizes.iter().all(|&n| n >= DUE),
        "sizes (containers) must be at least {DUE}"
    );
    let writes: usize = std::env::var("EXPIRY_BENCH_WRITES")
        .ok()
        .map(|s| s.parse().expect("EXPIRY_BENCH_WRITES: a number"))
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        eprintln!(
            "expiry bench: {DUE} foods due on {} (UTC, horizon 3 days), {writes} service rewrites",
            day()
        );
        let mut all = Vec::new();
        for n in sizes {
            all.push(measure(n, writes).await);
        }
        println!();
        println!("## Daily tick for {} ({DUE} foods due)", day());
        println!();
        println!(
            "| containers | items seeded | seed s | reminders read | newly flagged | Query | GetItem | PutItem | BatchWriteItem | read CU | write CU | tick ms |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for f in &all {
            println!(
                "| {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.0} |",
                f.n,
                f.seeded_items,
                f.seed_s,
                f.tick_details["reminders"],
                f.tick_details["flags_new"],
                f.tick.query,
                f.tick.get_item,
                f.tick.put_item,
                f.tick.batch_write_item,
                f.tick.read_capacity,
                f.tick.write_capacity,
                f.tick_ms
            );
        }
        println!();
        println!("## Worker requests caused by service container writes");
        println!();
        println!(
            "| containers | service writes | expiry changed | worker write requests | per 1,000 | worker reads | worker write CU |"
        );
        println!("|---:|---:|:---:|---:|---:|---:|---:|");
        for f in &all {
            for (count, changed, m) in [
                (f.service_writes, "no", &f.worker_on_plain_writes),
                (f.expiry_writes, "yes", &f.worker_on_expiry_writes),
            ] {
                println!(
                    "| {} | {} | {} | {} | {:.1} | {} | {:.1} |",
                    f.n,
                    count,
                    changed,
                    m.write_requests(),
                    m.write_requests() as f64 * 1000.0 / count.max(1) as f64,
                    m.read_requests(),
                    m.write_capacity
                );
            }
        }
        println!();
        if let (Some(small), Some(large)) = (all.first(), all.last())
            && all.len() > 1
        {
            let ratio = large.tick.read_capacity / small.tick.read_capacity.max(f64::MIN_POSITIVE);
            println!(
                "tick read capacity ratio {} / {} containers: {ratio:.3} (limit 1.1): {}",
                large.n,
                small.n,
                if ratio <= 1.1 { "PASS" } else { "FAIL" }
            );
        }
        if plot_sizes.is_some() {
            let points: Vec<capacity::Point> = all
                .iter()
                .map(|f| capacity::Point {
                    series: format!("expiry tick ({DUE} foods due)"),
                    items: f.seeded_items as u64,
                    rcu: f.tick.read_capacity,
                })
                .collect();
            capacity::record(
                "expiry",
                &points,
                "one run per size; each job run once on a fresh DynamoDB Local; see BENCHMARKS.md",
            );
        }
        let plain: u64 = all.iter().map(|f| f.worker_on_plain_writes.write_requests()).sum();
        println!(
            "worker writes on service writes without expiry change: {plain}: {}",
            if plain == 0 { "PASS" } else { "FAIL" }
        );
    });
}
