//! nishiki-worker: the stream-and-schedule worker of the Nishiki table.
//!
//! Layout (pure core first, side effects at the edges):
//! - [`keys`]: the shared key encoding (every `PK`/`SK` string lives there),
//!   [`schema`]: the table definition next to it;
//! - [`datetime`], [`items`]: typed items, lenient reading, canonical writing;
//! - [`jobs`]: the three jobs, each described once, its rules in one file;
//! - [`app`], [`worker`]: the worker assembled; the Lambda bootstraps in
//!   `src/bin`. The command line is `apps/nishiki-cli` (`nishiki-worker`).

pub mod app;
pub mod config;
pub mod datetime;
pub mod items;
pub mod jobs;
pub mod keys;
pub mod metrics;
pub mod schema;
pub mod worker;
