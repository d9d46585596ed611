//! worker-toolkit: the local side of a worker-engine app, on a developer's
//! or operator's machine; nothing here runs in Lambda (the bootstraps link
//! `worker-engine` only).
//!
//! - [`cli`]: an app's command line, generic over the app ([`cli::CliApp`]):
//!   `replay`, `run`, `table`, `capture`, `dev`, `redrive`, `checkpoints`,
//!   `local`, `completions`;
//! - [`replay`]: DynamoDB JSON, snapshots, diffs, the writes a captured
//!   batch describes, redaction, and the local event-source loop;
//! - [`local`]: DynamoDB Local, installed on first use and started;
//! - [`mapping`]: Lambda's event source mapping for a DynamoDB stream
//!   (batch cut, partial-batch responses, retry and bisect, lanes,
//!   checkpoints), which the dev loop and the test kit's drain both run;
//! - [`layers`]: the store layer that records what a store was asked (the
//!   writes a command made, a dry run's plan, what a test's worker asked);
//! - [`template`]: the settings of an app's SAM template;
//! - [`stream_reader`]: a table's DynamoDB Stream read through the Streams
//!   API (capture, the dev loop, redrive);
//! - [`failure_message`]: what Lambda's on-failure destinations receive.
//!
//! No app's names, attributes or key strings appear here
//! (`crates/engine/tests/it/no_app_names.rs` reads this crate too).

pub mod cli;
pub mod failure_message;
pub mod layers;
pub mod local;
pub mod mapping;
pub mod replay;
pub mod stream_reader;
pub mod template;
