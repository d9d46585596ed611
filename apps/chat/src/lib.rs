//! chat-worker: one stream-and-schedule worker over the six tables of the
//! chat application, on `worker-engine` (see `docs/ENGINE.md`).
//!
//! Each table's stream has an event source mapping of its own; a record's
//! `eventSourceARN` names its table, and the engine's
//! `stream::ByTable` hands it to that table's handlers. The worker
//!
//! - keeps the two copies of a chat request in step, the sparse pending
//!   index sparse, and turns an acceptance into a membership and one
//!   notification ([`requests`]);
//! - keeps a group chat's `NumMembers` equal to its member items
//!   ([`members`]);
//! - removes what a deleted user or community leaves behind ([`cascade`]);
//! - expires old pending requests and repairs or reports request copies
//!   whose twin is missing (`expire-requests`, `audit-requests`).
//!
//! Layout, pure core first: [`keys`] (every key string, built and parsed
//! there only), [`schema`] (the six tables and their indexes, and why),
//! [`items`] (typed items), [`images`] (what the stream handlers read of
//! a record's images, typed as the Lambda event is read), `requests::rules` (decisions without I/O);
//! then the handlers and jobs, [`app`] (the description and the assembled
//! worker), and the Lambda bootstraps in `src/bin`; its command line is
//! `apps/chat-cli`.

pub mod app;
pub mod cascade;
pub mod config;
pub mod images;
pub mod items;
pub mod keys;
pub mod members;
pub mod requests;
pub mod schema;
