//! The error every handler, record processor and job returns, and the
//! three kinds of failure the worker tells apart.

use std::fmt;
use std::sync::Arc;

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

/// Why a stream handler, a record processor or a scheduled job could not
/// finish: the one error all of them return. Reasons must not contain
/// attribute values (they are logged and parked).
///
/// - [`HandlerError::kind`] says what to do with the work that met it
///   ([`FailureKind`]); [`HandlerError::reason`] is the text a log line, a
///   parked record or a batch report keeps.
/// - Made from another error (a [`StoreError`] with `?` or `From`, anything
///   else with [`HandlerError::from_source`]), it keeps that error:
///   [`std::error::Error::source`] returns it (the SDK's failure stays
///   reachable in an error chain), its text is the reason and, for a store
///   error, its kind is the store error's ([`StoreError::kind`]). It
///   displays as that error does (what log lines and messages have always
///   shown), so a printer that also walks the sources shows the text twice.
/// - Made from a reason alone: [`HandlerError::permanent`],
///   [`HandlerError::transient`] or [`HandlerError::environment`] (displayed
///   after its kind: `transient failure: throttled`), or
///   [`HandlerError::invalid`] (a record's failure displayed as is).
#[derive(Debug, Clone)]
pub struct HandlerError(Repr);

#[derive(Debug, Clone)]
enum Repr {
    /// Made from another error: its text is the reason and the display.
    Source {
        kind: FailureKind,
        reason: String,
        source: Arc<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A reason that says it all ([`HandlerError::invalid`]): displayed as is.
    Invalid(String),
    /// A kind and a reason: displayed after the kind.
    Reason { kind: FailureKind, reason: String },
}

impl HandlerError {
    /// The record cannot be handled, ever (the change itself is unusable):
    /// it is logged, skipped and parked ([`FailureKind::Record`]).
    /// Displayed as `permanent failure: {reason}`.
    pub fn permanent(reason: impl Into<String>) -> Self {
        Self::of_kind(FailureKind::Record, reason)
    }

    /// Retrying may help (throttling, network): the batch stops, Lambda
    /// retries from this record ([`FailureKind::Transient`]). Displayed as
    /// `transient failure: {reason}`.
    pub fn transient(reason: impl Into<String>) -> Self {
        Self::of_kind(FailureKind::Transient, reason)
    }

    /// The deployment is wrong, not the record (a missing table or index,
    /// access denied, a bad credential): the batch stops and the invocation
    /// fails; nothing is parked or skipped ([`FailureKind::Environment`]).
    /// Displayed as `environment fault: {reason}`.
    pub fn environment(reason: impl Into<String>) -> Self {
        Self::of_kind(FailureKind::Environment, reason)
    }

    /// The change or the run cannot be handled, ever (retrying will not
    /// help): a [`FailureKind::Record`] failure whose reason says it all,
    /// displayed as is (a job's `cannot serialize the sweep report: ...`).
    pub fn invalid(reason: impl Into<String>) -> Self {
        HandlerError(Repr::Invalid(reason.into()))
    }

    /// A failure of `kind` caused by `source`: its text is the reason, and
    /// [`std::error::Error::source`] returns it.
    pub fn from_source(
        kind: FailureKind,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        HandlerError(Repr::Source {
            kind,
            reason: source.to_string(),
            source: Arc::new(source),
        })
    }

    /// The error of a failure of `kind`, displayed after its kind.
    pub(crate) fn of_kind(kind: FailureKind, reason: impl Into<String>) -> Self {
        HandlerError(Repr::Reason {
            kind,
            reason: reason.into(),
        })
    }

    /// Whether the same work may succeed later ([`FailureKind::Transient`]):
    /// Lambda delivers the record again by itself (an environment fault
    /// fails the invocation instead).
    pub fn is_retryable(&self) -> bool {
        self.kind() == FailureKind::Transient
    }

    /// Which of the three kinds of failure this is.
    pub fn kind(&self) -> FailureKind {
        match &self.0 {
            Repr::Source { kind, .. } | Repr::Reason { kind, .. } => *kind,
            Repr::Invalid(_) => FailureKind::Record,
        }
    }

    /// The reason given, whatever the kind (without the kind's words): what
    /// a log line, a parked record or a batch report keeps.
    pub fn reason(&self) -> &str {
        match &self.0 {
            Repr::Source { reason, .. } | Repr::Reason { reason, .. } | Repr::Invalid(reason) => {
                reason
            }
        }
    }

    /// The store error this was made from, if it was.
    pub fn store_error(&self) -> Option<&StoreError> {
        match &self.0 {
            Repr::Source { source, .. } => source.downcast_ref::<StoreError>(),
            _ => None,
        }
    }
}

/// A store failure, of the store error's kind ([`StoreError::kind`]),
/// which stays the source.
impl From<StoreError> for HandlerError {
    fn from(e: StoreError) -> Self {
        HandlerError::from_source(e.kind(), e)
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Source { reason, .. } | Repr::Invalid(reason) => f.write_str(reason),
            Repr::Reason { kind, reason } => {
                let kind = match kind {
                    FailureKind::Record => "permanent failure",
                    FailureKind::Transient => "transient failure",
                    FailureKind::Environment => "environment fault",
                };
                write!(f, "{kind}: {reason}")
            }
        }
    }
}

impl std::error::Error for HandlerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0 {
            Repr::Source { source, .. } => Some(source.as_ref()),
            _ => None,
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

    #[test]
    fn an_error_from_a_store_error_keeps_it_as_its_source_and_kind() {
        let throttled = StoreError::Transient {
            operation: "Query",
            code: "ThrottlingException".into(),
            message: "slow down".into(),
        };
        let e = HandlerError::from(throttled.clone());
        assert_eq!(e.kind(), throttled.kind());
        assert!(e.is_retryable());
        let source = std::error::Error::source(&e).expect("the store error is kept");
        assert_eq!(source.to_string(), throttled.to_string());
        assert!(matches!(
            source.downcast_ref::<StoreError>(),
            Some(StoreError::Transient { code, .. }) if code == "ThrottlingException"
        ));
        assert!(e.store_error().is_some());
        assert_eq!(e.reason(), throttled.to_string());
        assert_eq!(e.to_string(), throttled.to_string());

        let missing = StoreError::NotFound {
            operation: "GetItem",
            message: "Requested resource not found".into(),
        };
        let e: HandlerError = missing.clone().into();
        assert_eq!(e.kind(), FailureKind::Environment);
        assert_eq!(e.kind(), missing.kind());
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn each_constructor_has_its_kind_and_no_source() {
        let cases = [
            (
                HandlerError::permanent("bad"),
                FailureKind::Record,
                "permanent failure: bad",
            ),
            (
                HandlerError::transient("slow"),
                FailureKind::Transient,
                "transient failure: slow",
            ),
            (
                HandlerError::environment("no table"),
                FailureKind::Environment,
                "environment fault: no table",
            ),
            (
                HandlerError::invalid("bad food"),
                FailureKind::Record,
                "bad food",
            ),
        ];
        for (e, kind, text) in cases {
            assert_eq!(e.kind(), kind, "{e}");
            assert_eq!(e.is_retryable(), kind == FailureKind::Transient, "{e}");
            assert_eq!(e.to_string(), text);
            assert!(text.ends_with(e.reason()), "{e}");
            assert!(std::error::Error::source(&e).is_none(), "{e}");
            assert!(e.store_error().is_none(), "{e}");
        }
    }

    #[test]
    fn an_error_from_any_source_keeps_it() {
        let parse = "x".parse::<u32>().unwrap_err();
        let e = HandlerError::from_source(FailureKind::Record, parse.clone());
        assert_eq!(e.kind(), FailureKind::Record);
        assert_eq!(e.reason(), parse.to_string());
        assert_eq!(
            std::error::Error::source(&e).map(ToString::to_string),
            Some(parse.to_string())
        );
        assert!(e.store_error().is_none());
    }
}
