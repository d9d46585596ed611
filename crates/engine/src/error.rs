//! The error every job returns, classified as retryable or not.

use crate::store::StoreError;

/// Why a stream handler or a scheduled job could not finish.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HandlerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The change cannot be handled, ever (retrying will not help).
    #[error("{0}")]
    Invalid(String),
}

impl HandlerError {
    pub fn is_retryable(&self) -> bool {
        match self {
            HandlerError::Store(e) => e.is_retryable(),
            HandlerError::Invalid(_) => false,
        }
    }
}
