//! Nishiki's integration-test support: the engine's test kit
//! (`worker-testkit`: tables on DynamoDB Local, the stream drain, fault
//! injection, recorded stores), plus what only Nishiki's tests need: the
//! seeded workload of its live service ([`workload`]) and the deployment
//! template's reading ([`template`]).
#![allow(dead_code, unused_imports)]

pub(crate) mod bad_input;
pub(crate) mod template;
pub(crate) mod workload;

pub(crate) use worker_testkit::*;

/// A fresh table with Nishiki's full schema (service indexes, the worker's
/// invitation-expiry index, a NEW_AND_OLD_IMAGES stream).
pub(crate) async fn nishiki_table() -> TestTable {
    TestTable::with_schema(&nishiki_worker::schema::nishiki()).await
}
