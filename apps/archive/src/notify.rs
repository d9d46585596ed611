//! Publishing events: the engine's publisher (`worker_engine::notify`),
//! re-exported under the name the archive's code has always used.

pub use worker_engine::notify::*;
