//! `infra/archive.yaml` checked against the code, by the test kit's template
//! checks (`worker_testkit::infra`, which lists them):
//! the sandbox table against `src/schema.rs` (the `KeyName` index); every function, role,
//! variable, event source, schedule, queue, log group, alarm and output
//! against the jobs' descriptions (`APP.functions()`); the parking table,
//! tracing, logging controls and alarms on the worker's own metrics.
//!
//! `cargo test -p archive-worker --test it infra::`; `scripts/lint-infra
//! infra/archive.yaml` runs cfn-lint on the same file.

use crate::support;

use archive_worker::app::{APP, Deps};
use archive_worker::config::Settings;
use archive_worker::keys::Job;
use support::template::{STREAM_ARN, archive_stack, template_path};
use worker_engine::stream::RecordProcessor;
use worker_testkit::infra::{AppTemplate, SettingsView};

fn template() -> AppTemplate<Job, Deps, dyn RecordProcessor> {
    AppTemplate {
        app: &APP,
        table: "archive-table-dev",
        table_prefix: "archive-table-",
        sandbox_table: "ArchiveTable",
        binary_prefix: "archive-",
        manifest_dir: env!("CARGO_MANIFEST_DIR"),
        template_path: template_path(),
        stream_arn: STREAM_ARN,
        stack: archive_stack,
        settings: |lookup| {
            let s = Settings::from_lookup(lookup).map_err(|e| e.to_string())?;
            Ok(SettingsView::of(&s.common, s.event_bus.clone()))
        },
    }
}

worker_testkit::template_tests!(template());
