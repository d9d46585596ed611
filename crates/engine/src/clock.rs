//! Where jobs and handlers read the time from: injected, so tests and
//! `--now` control it.

use std::sync::Arc;

use chrono::{DateTime, Utc};

/// Where jobs read the time from (injected, so tests and `--now` control it).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time, in UTC.
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
    /// A clock stopped at `at` until set or advanced.
    pub fn new(at: DateTime<Utc>) -> Self {
        ManualClock(Arc::new(std::sync::Mutex::new(at)))
    }
    /// Move the clock to `at` (backwards too); its clones move with it.
    pub fn set(&self, at: DateTime<Utc>) {
        *self.0.lock().expect("clock lock") = at;
    }
    /// Move the clock by `by` (a negative duration moves it back); its
    /// clones move with it.
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

/// `WORKER_NOW`: the time every job and handler of a function reads, for
/// a local run only (e.g. a fixture's day under `cargo lambda watch`).
pub const NOW_VAR: &str = "WORKER_NOW";

/// The clock of a function: the real time, or the time `WORKER_NOW` names
/// (RFC 3339) where the function's table is on this machine
/// (`dynamodb_endpoint` a loopback address). Anywhere else the variable is
/// an error: a deployed function never runs on a fixed clock.
pub fn from_env(
    env: &crate::env::Env,
    dynamodb_endpoint: Option<&str>,
) -> Result<Arc<dyn Clock>, crate::env::ConfigError> {
    let Some(value) = env.non_empty(NOW_VAR) else {
        return Ok(Arc::new(SystemClock));
    };
    let error = |reason: &str| crate::env::ConfigError {
        name: NOW_VAR,
        value: value.clone(),
        reason: reason.to_owned(),
    };
    if !dynamodb_endpoint.is_some_and(crate::aws::is_loopback) {
        return Err(error(
            "a fixed clock is for a local run only (a DynamoDB endpoint on this machine); unset it",
        ));
    }
    let at = DateTime::parse_from_rfc3339(&value)
        .map_err(|_| error("expected an RFC 3339 time, e.g. 2024-03-25T09:00:00Z"))?;
    Ok(Arc::new(ManualClock::new(at.to_utc())))
}

/// A time as RFC 3339 with `Z` (`2024-03-25T09:00:00Z`).
pub fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_now_fixes_the_clock_of_a_local_run_only() {
        let vars = |now: &'static str| move |name: &str| (name == NOW_VAR).then(|| now.to_owned());
        let lookup = vars("2024-03-25T09:00:00Z");
        let env = crate::env::Env::new(&lookup);
        let local = from_env(&env, Some("http://127.0.0.1:8000")).unwrap();
        assert_eq!(
            local.now(),
            "2024-03-25T09:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        let e = from_env(&env, Some("https://dynamodb.eu-west-1.amazonaws.com")).unwrap_err();
        assert_eq!(e.name, NOW_VAR);
        assert!(from_env(&env, None).is_err());
        let lookup = vars("yesterday");
        let e = from_env(
            &crate::env::Env::new(&lookup),
            Some("http://localhost:8000"),
        )
        .unwrap_err();
        assert!(e.reason.contains("RFC 3339"), "{e:?}");
        let unset = |_: &str| None;
        let real = from_env(&crate::env::Env::new(&unset), None).unwrap();
        assert!((Utc::now() - real.now()).num_seconds().abs() < 5);
    }

    #[test]
    fn manual_clock_moves() {
        let t0 = "2024-03-25T00:00:00Z".parse().unwrap();
        let c = ManualClock::new(t0);
        c.advance(chrono::Duration::hours(1));
        assert_eq!(c.now(), t0 + chrono::Duration::hours(1));
    }
}
