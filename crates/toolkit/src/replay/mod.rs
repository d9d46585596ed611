//! The generic machinery behind a worker's command line: nothing here
//! knows an app's item design (only the names of the two key
//! attributes are passed in).
//!
//! - [`ddbjson`]: DynamoDB JSON items (strict reading, stable writing,
//!   readable rendering);
//! - [`snapshot`]: table snapshots (a JSON array of items, as a Scan's
//!   `Items`), scanning and loading a table;
//! - [`diff`]: what changed between two states of a table;
//! - [`apply`]: the writes a stream batch describes, performed in order;
//! - [`redact`]: stable placeholders for personal values in captures;
//! - [`report`]: serialisable views of a stream batch's outcome;
//! - [`dev`]: the local event-source loop (Lambda's event source mapping for
//!   a DynamoDB stream) and cron-driven schedule ticks.

pub mod apply;
pub mod ddbjson;
pub mod dev;
pub mod diff;
pub mod redact;
pub mod report;
pub mod snapshot;
