//! worker-engine: everything a DynamoDB stream-and-schedule worker needs
//! that does not depend on the table it serves.
//!
//! An app gives the engine its table as data ([`schema::TableSchema`]),
//! its stream handlers (a [`stream::RecordProcessor`]) and its scheduled
//! jobs ([`schedule::ScheduledJob`], keyed by name); the engine decodes
//! events, runs batches with per-item order and partial-batch responses,
//! talks to DynamoDB ([`store`]), replays captured events ([`replay`]),
//! runs a local event-source loop, and writes logs and metrics. No app's
//! names, attributes or key strings appear here (`tests/no_app_names.rs`).
//!
//! See `docs/ENGINE.md` for how to serve a new table.

pub mod aws;
pub mod cli;
pub mod clock;
pub mod deploy;
pub mod env;
pub mod error;
pub mod failure_message;
pub mod item;
pub mod job;
pub mod lambda;
pub mod local;
pub mod metrics;
pub mod notify;
pub mod park;
pub mod replay;
pub mod runtime;
pub mod schedule;
pub mod schema;
pub mod settings;
pub mod store;
pub mod stream;
pub mod stream_reader;
pub mod telemetry;
pub mod template;
