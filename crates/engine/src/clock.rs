//! Where jobs and handlers read the time from: injected, so tests and
//! `--now` control it.

use std::sync::Arc;

use chrono::{DateTime, Utc};

/// Where jobs read the time from (injected, so tests and `--now` control it).
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> DateTime<Utc>;
}

/// The real time.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that can be set and moved by hand.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<std::sync::Mutex<DateTime<Utc>>>);

impl ManualClock {
    pub fn new(at: DateTime<Utc>) -> Self {
        ManualClock(Arc::new(std::sync::Mutex::new(at)))
    }
    pub fn set(&self, at: DateTime<Utc>) {
        *self.0.lock().expect("clock lock") = at;
    }
    pub fn advance(&self, by: chrono::Duration) {
        let mut t = self.0.lock().expect("clock lock");
        *t += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().expect("clock lock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves() {
        let t0 = "2024-03-25T00:00:00Z".parse().unwrap();
        let c = ManualClock::new(t0);
        c.advance(chrono::Duration::hours(1));
        assert_eq!(c.now(), t0 + chrono::Duration::hours(1));
    }
}
