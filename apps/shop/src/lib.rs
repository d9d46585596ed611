//! shop-worker: the stream-and-schedule worker of the shop single table,
//! on `worker-engine` (see `docs/ENGINE.md`).
//!
//! The table (a contract, from the seed `004`): categories, brands,
//! products, users and orders under `PK`/`SK`, found through a local index
//! on `SKU` and two global indexes (`GSI1PK/GSI1SK`, `GSI2PK/GSI2SK`)
//! whose keys are composites of each entity's own fields. The worker
//!
//! - derives those index attributes from the fields, from the stream, and
//!   never overwrites a newer write with stale keys ([`mod@derive`]); derives
//!   them for every existing item on demand (`backfill`);
//! - reports and flags products whose brand or category does not exist
//!   (`audit`), and a deleted brand's or category's products ([`refs`]);
//! - reports orders stuck in a status (`stuck-orders`, [`stuck`]).
//!
//! Layout, pure core first: [`keys`] (every key string, built and parsed
//! there only), [`schema`], [`items`] (typed items), [`images`] (what the
//! stream handler reads of a record's images, as the Lambda event is
//! read), `derive::rules`,
//! `refs::rules` and `stuck::rules` (decisions without I/O); then the
//! handlers and jobs, [`app`], and the Lambda bootstraps in
//! `src/bin`; its command line is `apps/shop-cli`.

pub mod app;
pub mod checkpoint;
pub mod config;
pub mod derive;
pub mod images;
pub mod items;
pub mod keys;
pub mod refs;
pub mod schema;
pub mod stuck;
