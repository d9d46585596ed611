//! The error every job returns, and the three kinds of failure the worker
//! tells apart.

use crate::store::StoreError;

/// What a failure says about what to do with the work that met it.
///
/// - [`FailureKind::Transient`]: throttling, a 5xx, a timeout, a dropped
///   connection. The same request may succeed in a moment: the record is
///   retried (the batch stops there and Lambda delivers it again).
/// - [`FailureKind::Environment`]: the deployment is wrong, not the record:
///   a table or index that does not exist, access denied, an invalid or
///   expired credential, a key schema that is not the app's. Every record
///   would fail the same way, so none may be parked or skipped: the
///   invocation fails (the mapping retries, then hands the batch to its
///   on-failure destination), the `EnvironmentFaults` metric counts it and
///   its alarm fires, and a local command stops with the cause.
/// - [`FailureKind::Record`]: the record itself cannot be handled (it does
///   not decode, or a rule rejects it): it is logged, counted and parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureKind {
    /// The same request may succeed in a moment: retry the record.
    Transient,
    /// The deployment is wrong: fail the invocation, park and skip nothing.
    Environment,
    /// The record cannot be handled, ever: log, count and park it.
    Record,
}

impl FailureKind {
    /// The kind that decides for several failures of one record: the
    /// environment over a transient failure (retrying will not fix a
    /// missing table), a transient failure over the record's own (the retry
    /// lets the other handler finish).
    pub fn worst(kinds: impl IntoIterator<Item = FailureKind>) -> Option<FailureKind> {
        kinds.into_iter().min_by_key(|k| match k {
            FailureKind::Environment => 0,
            FailureKind::Transient => 1,
            FailureKind::Record => 2,
        })
    }
}

/// Why a stream handler or a scheduled job could not finish.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HandlerError {
    /// A DynamoDB call failed; its kind is the store error's
    /// ([`StoreError::kind`]).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The change cannot be handled, ever (retrying will not help).
    #[error("{0}")]
    Invalid(String),
}

impl HandlerError {
    /// Whether the same work may succeed later ([`FailureKind::Transient`]).
    pub fn is_retryable(&self) -> bool {
        self.kind() == FailureKind::Transient
    }

    /// Which of the three kinds of failure this is.
    pub fn kind(&self) -> FailureKind {
        match self {
            HandlerError::Store(e) => e.kind(),
            HandlerError::Invalid(_) => FailureKind::Record,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_decides_over_a_transient_failure_over_the_records_own() {
        use FailureKind::*;
        assert_eq!(FailureKind::worst([Record, Transient]), Some(Transient));
        assert_eq!(
            FailureKind::worst([Transient, Environment, Record]),
            Some(Environment)
        );
        assert_eq!(FailureKind::worst([Record]), Some(Record));
        assert_eq!(FailureKind::worst([]), None);
    }
}
