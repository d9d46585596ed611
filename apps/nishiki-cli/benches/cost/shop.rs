//! Cost per million stream records of the shop's `StreamFunction`
//! (`cargo bench -p nishiki-cli --bench cost -- --app shop --writes 5000 --seed 7`):
//! the measurement of `worker_testkit::cost` on the shop tests' seeded
//! history of service writes.
//!
//! On a DynamoDB Local of its own, an empty table receives `--writes`
//! writes of the shop's service, one after the other
//! (`tests/it/support`'s `history`: 8 categories and 8 brands, then users
//! 10%, renamed categories and brands 5%, products 40% and orders 40%, new
//! or new versions, as whole items without index attributes, and deletes of
//! products and orders 5%). Then the stream is drained through the worker
//! as `infra/shop.yaml`'s mapping delivers it, each invocation metered
//! (`worker_testkit::cost::Meter`), and the cost is printed.

#[path = "../../../shop/tests/it/support/mod.rs"]
mod support;

use std::sync::Arc;

use shop_worker::schema::schema;
use worker_engine::store::{DynamoStore, Store, local_client};
use worker_testkit::TestTable;
use worker_testkit::cost::arg;
use worker_testkit::cost::{self, Costed, Meter, StreamFunction, Tallied, Timed, US_EAST_1};
use worker_testkit::workload::{Seeded, apply};

pub(crate) async fn run() -> Costed {
    let writes = arg("--writes", 5000) as usize;
    let mut rng = Seeded::new(arg("--seed", 7));
    let function = StreamFunction::of("infra/shop.yaml", "StreamFunction");
    let history = support::history(&mut rng, writes);
    eprintln!(
        "{} service writes: {} categories, {} brands, {} users, {} products, {} orders",
        history.writes.len(),
        history.categories.len(),
        history.brands.len(),
        history.users.len(),
        history.products.len(),
        history.orders.len()
    );

    let (local, table) = TestTable::on_own_local("cost-shop", &schema()).await;
    let (_, tail) = table.stream_tail().await;
    apply(table.store.as_ref(), &history.writes).await;

    let worker_store = Arc::new(
        DynamoStore::new(local_client(&local.endpoint_url()), &table.name).with_key(schema().key),
    );
    let timed = Arc::new(Timed::new(worker_store.clone()));
    let worker = support::app(timed.clone() as Arc<dyn Store>);
    let mut meter = Meter::new(vec![worker_store], vec![timed as Arc<dyn Tallied>]);
    let mut streams = [cost::Stream {
        tail,
        mapping: function.mapping(None).clone(),
    }];
    meter.drain(&worker, &mut streams).await;
    Costed::of("shop", &function, US_EAST_1, &meter.run)
}
