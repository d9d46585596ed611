//! The tests of `nishiki-worker`, Nishiki's command line, in one binary
//! (`cargo test -p nishiki-cli --test it`): they run the binary this
//! `cargo test` built (`CARGO_BIN_EXE_nishiki-worker`) against DynamoDB
//! Local and moto, and every command of the documents.

mod bad_input;
mod cli;
mod docs;
mod redrive;
mod replay;
mod stream_view;

/// The bad-input corpus of the workspace's `tests/bad_input/`.
#[path = "../../../../tests/it/support/bad_input.rs"]
mod bad_input_corpus;

/// What these tests share: the engine's test kit, and Nishiki's table.
mod support {
    pub(crate) use worker_testkit::*;

    /// The workspace's root, where `events/`, `infra/` and the documents
    /// are.
    pub(crate) fn workspace() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// `nishiki-worker`, the binary this `cargo test` built, run from the
    /// workspace's root as an operator runs it (`infra/template.yaml`,
    /// `events/` found there).
    pub(crate) fn nishiki_worker() -> std::process::Command {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_nishiki-worker"));
        c.current_dir(workspace());
        c
    }

    /// A fresh table with Nishiki's full schema.
    pub(crate) async fn nishiki_table() -> TestTable {
        TestTable::with_schema(&nishiki_worker::schema::nishiki()).await
    }
}

/// A file of this folder that is not declared above would never be
/// compiled, so its tests would silently never run.
#[test]
fn every_file_of_the_folder_is_a_module_of_this_binary() {
    worker_testkit::assert_every_file_is_a_module(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it"),
        include_str!("main.rs"),
    );
}
