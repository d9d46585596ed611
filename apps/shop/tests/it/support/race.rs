//! The service writing between the worker's read and its write, for the
//! shop worker: the worker over [`worker_testkit::race::RaceBeforeWrite`],
//! whose first write (a guarded flag update included) is preceded by the
//! service's writes.

use std::sync::Arc;

use worker_engine::Worker;
use worker_engine::store::DynamoStore;
use worker_testkit::race::{RaceBeforeWrite, ServiceOp};

/// The worker on `table`, its first write preceded by `service`.
pub(crate) fn raced(
    table: &Arc<DynamoStore>,
    service: Vec<ServiceOp>,
) -> (Worker<shop_worker::keys::Job>, Arc<RaceBeforeWrite>) {
    let race = Arc::new(RaceBeforeWrite::at_first_write(table.clone(), service));
    (super::app(race.clone()), race)
}
