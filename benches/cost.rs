//! Cost per million stream records of Nishiki's `StreamFunction`
//! (`cargo bench -p nishiki-worker --bench cost -- --users 2000 --seed 7`;
//! `cargo bench --bench cost` runs the other apps' too): the measurement
//! of `worker_testkit::cost`, on the load driver's workload.
//!
//! On a DynamoDB Local of its own, a generated population
//! (`tests/it/support/workload.rs`, `--users`, `--seed`) is seeded and
//! backfilled as a table the worker has been serving, its stream records
//! skipped; the service's calls are applied (operation after operation,
//! the calls of one operation at once); then the stream is drained through
//! the worker as `infra/template.yaml`'s mapping delivers it (its
//! `FilterCriteria` and `BatchSize`), each invocation metered: the worker
//! thread's CPU (a current-thread runtime, as the Lambda bootstrap), its
//! requests and capacity, the time in its store's calls. Prints the
//! formula with its numbers and the cost per million records, then a JSON
//! line.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::sync::Arc;

use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::keys::Job;
use support::workload::{self, ServiceCall, WorkloadSpec};
use worker_engine::store::{self, DynamoStore, ItemWriter, Store, WriteOutcome};
use worker_testkit::cost::{self, Costed, Meter, StreamFunction, Tallied, Timed, US_EAST_1, arg};
use worker_toolkit::stream_reader::{self, StartAt, StreamTail};

const TABLE: &str = "cost-nishiki";

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let users = arg("--users", 2000) as usize;
    let seed = arg("--seed", 7);
    let spec = WorkloadSpec::sized(seed, users);
    let w = workload::generate(&spec);
    eprintln!(
        "workload seed {seed}: {users} users, population {} items, {} service calls",
        w.population.len(),
        w.calls.len()
    );
    let function = StreamFunction::of("infra/template.yaml", "StreamFunction");

    let local = worker_toolkit::local::start_jit(worker_toolkit::local::Jit::Full)
        .await
        .expect("DynamoDB Local must start (see the error for what to install)");
    let endpoint = local.endpoint_url();
    let service = Arc::new(DynamoStore::new(store::local_client(&endpoint), TABLE));
    service
        .create_table(&nishiki_worker::schema::nishiki())
        .await
        .expect("create table");
    support::seed_concurrently(&service, w.population.clone(), 8).await;
    App::new(
        service.clone(),
        Config::for_table(TABLE),
        Arc::new(ManualClock::new(spec.now)),
    )
    .run_job(Job::Backfill, None)
    .await
    .expect("backfill the population");
    let arn = service
        .stream_arn()
        .await
        .expect("describe table")
        .expect("stream enabled");
    let mut tail = StreamTail::new(
        stream_reader::local_client(&endpoint),
        arn,
        StartAt::TrimHorizon,
    );
    tail.poll().await.expect("read the stream");

    for op in &w.operations {
        let calls = w.calls_of(op).iter().map(|c| {
            let service = service.clone();
            async move {
                let out = match c {
                    ServiceCall::Put(item) => service.put(item.clone(), None).await,
                    ServiceCall::Delete(key) => service.delete(&key.to_attributes(), None).await,
                };
                assert_eq!(out.expect("a service write"), WriteOutcome::Applied);
            }
        });
        futures::future::join_all(calls).await;
    }

    let worker_store = Arc::new(DynamoStore::new(store::local_client(&endpoint), TABLE));
    let timed = Arc::new(Timed::new(worker_store.clone()));
    let app = App::new(
        timed.clone() as Arc<dyn Store>,
        Config::for_table(TABLE),
        Arc::new(ManualClock::new(spec.now)),
    );
    let mut meter = Meter::new(vec![worker_store], vec![timed as Arc<dyn Tallied>]);
    let mut streams = [cost::Stream {
        tail,
        mapping: function.mapping(None).clone(),
    }];
    meter.drain(app.worker(), &mut streams).await;
    cost::print(&Costed::of("nishiki", &function, US_EAST_1, &meter.run));
}
