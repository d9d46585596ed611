//! The engine's schedule types, instantiated for Nishiki's jobs
//! ([`Job`]); see [`worker_engine::schedule`].

pub use worker_engine::schedule::{
    JobName, ScheduledJob, TickError, TickSource, is_schedule_event,
};

use crate::keys::Job;

/// A tick naming one of Nishiki's jobs.
pub type Tick = worker_engine::schedule::Tick<Job>;
/// The time budget and clock of one run of a Nishiki job.
pub type JobRun = worker_engine::schedule::JobRun<Job>;
/// What a run of a Nishiki job did.
pub type JobReport = worker_engine::schedule::JobReport<Job>;
/// Nishiki's scheduled jobs, by name.
pub type Scheduler = worker_engine::schedule::Scheduler<Job>;

/// Parse a tick naming one of Nishiki's jobs.
pub fn parse_tick(v: &serde_json::Value) -> Result<Tick, TickError> {
    worker_engine::schedule::parse_tick(v)
}
