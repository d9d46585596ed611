//! `infra/shop.yaml` checked against the code, by the test kit's template
//! checks (`worker_testkit::infra`, which lists them):
//! the sandbox table against `src/schema.rs` (the LSI, GSI1 and GSI2); every function, role,
//! variable, event source, schedule, queue, log group, alarm and output
//! against the jobs' descriptions (`APP.functions()`); the parking table,
//! tracing, logging controls and alarms on the worker's own metrics.
//!
//! `cargo test -p shop-worker --test infra`; `scripts/lint-infra
//! infra/shop.yaml` runs cfn-lint on the same file.

mod support;

use shop_worker::app::{APP, Deps};
use shop_worker::config::Settings;
use shop_worker::keys::Job;
use shop_worker::schema::schema;
use support::template::{STREAM_ARN, shop_stack, template_path};
use worker_engine::stream::engine::RecordProcessor;
use worker_testkit::infra::{AppTemplate, SettingsView};

fn template() -> AppTemplate<Job, Deps, dyn RecordProcessor> {
    AppTemplate {
        app: &APP,
        schema: schema(),
        table: "shop-table-dev",
        table_prefix: "shop-table-",
        sandbox_table: "ShopTable",
        binary_prefix: "shop-",
        manifest_dir: env!("CARGO_MANIFEST_DIR"),
        template_path: template_path(),
        stream_arn: STREAM_ARN,
        stack: shop_stack,
        settings: |lookup| {
            Settings::from_lookup(lookup)
                .map(|s| SettingsView {
                    job: s.common.job,
                    table_name: s.common.table_name,
                    event_bus: s.own.stuck.event_bus,
                })
                .map_err(|e| e.to_string())
        },
    }
}

#[test]
fn the_sandbox_table_is_the_schema_in_code() {
    template().the_sandbox_table_is_the_schema_in_code();
}

/// Parked, traced, logged through Lambda's controls and alarmed on the
/// worker's own metrics (worker_testkit::template::operations_problems).
#[test]
fn the_template_parks_traces_and_alarms_on_the_workers_metrics() {
    template().operations();
}

#[test]
fn every_function_runs_its_binary_with_exactly_its_variables() {
    template().every_function_runs_its_binary_with_exactly_its_variables();
}

#[test]
fn every_role_grants_exactly_what_its_function_calls() {
    template().every_role_grants_exactly_what_its_function_calls();
}

#[test]
fn the_stream_event_source_reports_batch_item_failures_and_is_bounded() {
    template().the_stream_event_source_reports_batch_item_failures_and_is_bounded();
}

/// The queue by default; with OnFailureDestination=bucket an encrypted,
/// private, TLS-only bucket whose objects expire.
#[test]
fn stream_failures_go_to_the_queue_or_an_encrypted_bucket() {
    template().stream_failures_go_to_the_queue_or_an_encrypted_bucket();
}

#[test]
fn every_job_has_a_schedule_with_its_expression_and_a_dead_letter_queue() {
    template().every_job_has_a_schedule_with_its_expression_and_a_dead_letter_queue();
}

#[test]
fn logs_alarms_and_outputs_cover_every_function_and_queue() {
    template().logs_alarms_and_outputs_cover_every_function_and_queue();
}

#[test]
fn alarms_on_the_workers_metrics_name_metrics_their_function_writes() {
    let alarms = template().alarms_on_the_workers_metrics_name_metrics_their_function_writes();
    assert!(
        alarms >= 4,
        "RecordsFailed, ProductsMissingRefs, OrdersStuck, OrderStuckEventsFailed"
    );
}
