//! The bad-input corpus as its tests read it: `manifest.json`'s cases and
//! the personal data no output may show. Read by `tests/it/bad_input.rs` (the
//! Lambda path) and `apps/nishiki-cli/tests/it/bad_input.rs` (the command
//! line).
#![allow(dead_code)] // each test binary uses a part

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// The valid records around each case: personal data too.
pub(crate) const GOOD_EMAIL: &str = "good.user@example.org";
pub(crate) const GOOD_NAME: &str = "Good User";

/// How a case must fail (or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Class {
    /// The bytes are not JSON: `decode_event_bytes` rejects them (Lambda's
    /// runtime never calls the handler with them).
    NotJson,
    /// JSON, but not a DynamoDB Streams event: `handle_stream` fails.
    Envelope,
    /// Every record of the file does not decode: `Malformed`, skipped.
    Malformed,
    /// Every record decodes but is unusable: `Rejected`, skipped.
    Rejected,
    /// Odd but valid: every record is handled.
    Accepted,
}

/// One line of `tests/bad_input/manifest.json`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Case {
    pub file: String,
    pub what: String,
    pub class: Class,
    /// Part of the error text (or `handled` for accepted cases).
    pub fragment: String,
    /// The key the report must show for every bad record, when decodable.
    #[serde(default)]
    pub key: Option<String>,
    /// Personal data in the case that no error text or log line may show.
    #[serde(default)]
    pub private: Vec<String>,
}

/// `tests/bad_input/` of the workspace (this file is read by the tests of
/// two packages).
pub(crate) fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|d| d.join("tests/bad_input"))
        .find(|d| d.join("manifest.json").is_file())
        .expect("tests/bad_input/manifest.json in the workspace")
}

pub(crate) fn corpus() -> Vec<Case> {
    let text = std::fs::read_to_string(dir().join("manifest.json")).expect("manifest");
    serde_json::from_str(&text).expect("manifest.json is a list of cases")
}

pub(crate) fn bytes(case: &Case) -> Vec<u8> {
    std::fs::read(dir().join(&case.file)).expect("case file")
}

pub(crate) fn value(case: &Case) -> Value {
    serde_json::from_slice(&bytes(case)).unwrap_or_else(|e| panic!("{}: {e}", case.file))
}

/// Every personal string of the corpus (checked against everything).
pub(crate) fn all_private(cases: &[Case]) -> Vec<String> {
    let mut all: Vec<String> = cases.iter().flat_map(|c| c.private.clone()).collect();
    all.extend([GOOD_EMAIL.to_owned(), GOOD_NAME.to_owned()]);
    all.sort();
    all.dedup();
    all
}

pub(crate) fn assert_private(text: &str, private: &[String], context: &str) {
    for p in private {
        assert!(
            !text.contains(p.as_str()),
            "{context}: shows personal data {p:?}: {text}"
        );
    }
}
