//! nishiki-worker: the stream-and-schedule worker of the Nishiki table.
//!
//! Layout (pure core first, side effects at the edges):
//! - [`keys`]: the shared key encoding (every `PK`/`SK` string lives there),
//!   [`schema`]: the table definition next to it;
//! - [`datetime`], [`items`]: typed items, lenient reading, canonical writing;
//! - [`local`]: the DynamoDB Local harness used by tests and the CLI.

pub mod app;
pub mod cli;
pub mod config;
pub mod datetime;
pub mod deploy;
pub mod items;
pub mod jobs;
pub mod keys;
pub mod metrics;
pub mod notify;
pub mod schedule;

pub mod schema;
pub mod worker;
