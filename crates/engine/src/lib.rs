//! worker-engine: what a DynamoDB stream-and-schedule worker runs in
//! Lambda, whatever table it serves.
//!
//! An app gives the engine its table as data ([`schema::TableSchema`]),
//! its stream handlers (a [`stream::RecordProcessor`]) and its scheduled
//! jobs ([`schedule::ScheduledJob`], keyed by name); the engine decodes
//! events, runs batches with per-item order and partial-batch responses,
//! talks to DynamoDB ([`store`]), parks records that fail for good
//! ([`park`]), publishes events ([`notify`]), and writes logs and metrics.
//! Everything here runs in the Lambda bootstraps; what runs on a
//! developer's machine (the command line, replay, the dev loop, DynamoDB
//! Local) is the `worker-toolkit` crate, on top of this one. No app's
//! names, attributes or key strings appear here (`tests/it/no_app_names.rs`).
//!
//! See `docs/ENGINE.md` for how to serve a new table.

pub mod app;
pub mod aws;
pub mod checkpoint;
pub mod clock;
pub mod env;
pub mod error;
pub mod item;
pub mod job;
pub mod keys;
pub mod lambda;
pub mod metrics;
pub mod notify;
pub mod park;
pub mod runtime;
pub mod schedule;
pub mod schema;
pub mod settings;
pub mod store;
pub mod stream;
pub mod tables;
pub mod telemetry;

/// What an app's tables, handlers, jobs and descriptions are written with,
/// in one import (`use worker_engine::prelude::*;`); the rest of the
/// engine is imported by path.
pub mod prelude {
    pub use crate::app::{Sharing, TableDeps};
    pub use crate::env::ConfigError;
    pub use crate::error::HandlerError;
    pub use crate::item::Item;
    pub use crate::job::{Access, AppSpec, JobSpec, Schedule, ScheduleSpec, StreamSpec};
    pub use crate::metrics::{Metric, WriteCounter};
    pub use crate::runtime::Worker;
    pub use crate::schedule::{JobReport, JobRun, ScheduledJob};
    pub use crate::schema::{IndexSpec, KeySchema, TableSchema};
    pub use crate::settings::Settings;
    pub use crate::store::{Expr, Key, QuerySpec, Store, WriteOutcome};
    pub use crate::stream::decode::StreamChange;
    pub use crate::stream::engine::{ProcessError, RecordOutcome, RecordProcessor};
    pub use async_trait::async_trait;
    pub use aws_sdk_dynamodb::types::AttributeValue;
}

/// What the engine's macros name (`job_names!`), not an API.
#[doc(hidden)]
pub mod __private {
    pub use serde;
}
