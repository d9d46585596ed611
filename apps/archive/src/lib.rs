//! archive-worker: the stream-and-schedule worker of the file-archive
//! table, on `worker-engine` (see `docs/ENGINE.md`).
//!
//! The table (a contract; `PK` S, `SK` N): archived files under their UTC
//! time, a four-level date lookup (`root` → `YYYY` → `YYYY-MM` →
//! `YYYY-MM-DD`, each listing the level below in `SavedDate`), and the
//! `Unzipped` / `Unzipping` partitions. The worker
//!
//! - keeps the date lookup equal to the files, from the stream
//!   ([`lookup`]), and rebuilds it on demand (`rebuild-lookup`);
//! - runs the unzip lifecycle from the stream ([`unzip`]): an `Unzipped`
//!   item finishes its `Unzipping` item and flags its file `IsUnzipped`
//!   while it exists; `expire-unzipped` deletes unzipped files after the
//!   retention (one `UnzippedFileExpired` event each) and reports stuck
//!   unzipping ones.
//!
//! Layout, pure core first: [`keys`] (every key string, built and parsed
//! there only), [`schema`] (the table and its `KeyName` index, and why),
//! [`items`] (typed items), [`images`] (what the stream handlers read of
//! a record's images, typed as the Lambda event is read), `lookup::rules` and `unzip::rules` (decisions
//! without I/O); then the handlers and jobs, [`app`] (the description and
//! the assembled worker), and the Lambda bootstraps in `src/bin`; its command line is
//! `apps/archive-cli`.

pub mod app;
pub mod config;
pub mod images;
pub mod items;
pub mod keys;
pub mod lookup;
pub mod schema;
pub mod unzip;
