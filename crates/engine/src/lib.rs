//! worker-engine: what a DynamoDB stream-and-schedule worker runs in
//! Lambda, whatever table it serves.
//!
//! An app gives the engine its table as data ([`TableSchema`]), its stream
//! handlers (a [`RecordProcessor`], or typed handlers behind a
//! [`stream::Router`]) and its scheduled jobs ([`ScheduledJob`], keyed by
//! name), and describes them once in an [`AppSpec`]; the engine decodes
//! events, runs batches with per-item order and partial-batch responses,
//! talks to DynamoDB ([`Store`]), parks records that fail for good
//! ([`park`]), publishes events ([`EventPublisher`]), and writes logs and
//! metrics. Everything here runs in the Lambda bootstraps; what runs on a
//! developer's machine (the command line, replay, the dev loop, DynamoDB
//! Local) is the `worker-toolkit` crate, on top of this one. No app's
//! names, attributes or key strings appear here (`tests/it/no_app_names.rs`).
//!
//! What an app is written with is at the crate root (one
//! `use worker_engine::{...}`); the public modules hold the rest, by
//! concern: [`store`] (requests, batches, transactions, guarded writes),
//! [`stream`] (decoding, batches, routing), [`schedule`], [`schema`],
//! [`item`], [`keys`], [`settings`], [`metrics`], [`park`], [`clock`],
//! [`aws`], [`telemetry`] and [`lambda`] (the bootstrap's `main`).
//!
//! See `docs/ENGINE.md` for how to serve a new table.

mod app;
pub mod aws;
mod checkpoint;
pub mod clock;
mod env;
mod error;
pub mod item;
mod job;
pub mod keys;
pub mod lambda;
pub mod metrics;
mod notify;
pub mod park;
mod runtime;
pub mod schedule;
pub mod schema;
pub mod settings;
pub mod store;
pub mod stream;
mod tables;
pub mod telemetry;

pub use app::{Sharing, TableDeps};
pub use checkpoint::{Pass, PassAttributes};
pub use env::{ConfigError, Env};
pub use error::{FailureKind, HandlerError};
pub use job::{
    Access, AppSpec, EnvVar, Fallback, JobSpec, ReadBy, Schedule, ScheduleSpec, StreamSpec,
};
pub use notify::{
    EventBridgePublisher, EventEntry, EventPublisher, MAX_ENTRIES_PER_CALL, NotifyError,
    PublishReport, RecordingPublisher,
};
pub use runtime::{
    EventError, EventFunction, EventOutcome, EveryBatch, InvokeError, StreamSide, Worker,
    WorkerSettings,
};
pub use tables::{Grants, Stores, TableAccess, TableHandler, TableNames, TableSet};

// What an app's tables, handlers and jobs are written with, from the
// public modules, so that one `use worker_engine::{...}` serves an app.
pub use async_trait::async_trait;
pub use aws_sdk_dynamodb::types::AttributeValue;
pub use item::Item;
pub use metrics::{Metric, WriteCounter};
pub use schedule::{JobReport, JobRun, ScheduledJob};
pub use schema::{IndexSpec, KeySchema, TableSchema};
pub use settings::Settings;
pub use store::{Expr, Key, QuerySpec, Store, WriteOutcome};
pub use stream::{RecordOutcome, RecordProcessor, StreamChange};

/// What the engine's macros name (`job_names!`), not an API.
#[doc(hidden)]
pub mod __private {
    pub use serde;
}
