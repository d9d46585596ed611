//! `infra/shop.yaml` as the tests read it, through the test kit's
//! template reader ([`worker_testkit::template`]).

use std::path::PathBuf;

use serde_json::Value;

#[allow(unused_imports)]
pub(crate) use worker_testkit::template::{ACCOUNT, REGION, Stack, single, strings, table_arn};

/// The table stream the template is given (`TableStreamArn`).
pub(crate) const STREAM_ARN: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/shop-table-dev/stream/2024-01-01T00:00:00.000";

/// The path of `infra/shop.yaml` (the workspace's `infra/`).
pub(crate) fn template_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../infra/shop.yaml")
}

/// The template in CloudFormation's JSON form.
pub(crate) fn template() -> Value {
    worker_testkit::template::load(&template_path())
}

/// The shop stack, parameters overridden.
pub(crate) fn shop_stack(overrides: &[(&str, &str)]) -> Stack {
    Stack::new(template(), "shop-worker-dev", STREAM_ARN, overrides)
}
