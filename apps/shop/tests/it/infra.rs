//! `infra/shop.yaml` checked against the code, by the test kit's template
//! checks (`worker_testkit::infra`, which lists them):
//! the sandbox table against `src/schema.rs` (the LSI, GSI1 and GSI2); every function, role,
//! variable, event source, schedule, queue, log group, alarm and output
//! against the jobs' descriptions (`APP.functions()`); the parking table,
//! tracing, logging controls and alarms on the worker's own metrics.
//!
//! `cargo test -p shop-worker --test it infra::`; `scripts/lint-infra
//! infra/shop.yaml` runs cfn-lint on the same file.

use crate::support;

use shop_worker::app::{APP, Deps};
use shop_worker::config::Settings;
use shop_worker::keys::Job;
use support::template::{STREAM_ARN, shop_stack, template_path};
use worker_engine::stream::RecordProcessor;
use worker_testkit::infra::{AppTemplate, SettingsView};

fn template() -> AppTemplate<Job, Deps, dyn RecordProcessor> {
    AppTemplate {
        app: &APP,
        table: "shop-table-dev",
        table_prefix: "shop-table-",
        sandbox_table: "ShopTable",
        binary_prefix: "shop-",
        manifest_dir: env!("CARGO_MANIFEST_DIR"),
        template_path: template_path(),
        stream_arn: STREAM_ARN,
        stack: shop_stack,
        settings: |lookup| {
            let s = Settings::from_lookup(lookup).map_err(|e| e.to_string())?;
            Ok(SettingsView::of(&s.common, s.event_bus.clone()))
        },
    }
}

worker_testkit::template_tests!(
    template(),
    alarms >= 4,
    "RecordsFailed, ProductsMissingRefs, OrdersStuck, OrderStuckEventsFailed"
);
