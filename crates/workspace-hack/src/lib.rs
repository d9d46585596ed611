//! Feature pins of the workspace: see this crate's `Cargo.toml`. It has no
//! code; depending on it turns on, for every build, the dependency features
//! that `cargo test` would otherwise add.
