//! Where a paged pass resumes: the job's [`Checkpoint`] item, read at the
//! start of a tick, saved when the tick stops early, deleted when the pass
//! completes (shared by `backfill` and `audit`).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use worker_engine::store::{Store, StoreError};

use crate::items::Checkpoint;
use crate::keys::{self, Job};

/// A job's checkpoint in the table.
pub struct StoredPass {
    store: Arc<dyn Store>,
    job: Job,
}

impl StoredPass {
    /// The checkpoint of `job` in `store` (nothing read until [`Self::load`]).
    pub fn new(store: Arc<dyn Store>, job: Job) -> Self {
        StoredPass { store, job }
    }

    /// The pass to continue, or a new one from `now`; and whether one was
    /// stored. A checkpoint that does not decode starts a new pass.
    pub async fn load(&self, now: DateTime<Utc>) -> Result<(Checkpoint, bool), StoreError> {
        let stored = self.store.get(&keys::checkpoint(self.job), true).await?;
        let had = stored.is_some();
        let resumed = stored.and_then(|item| match Checkpoint::from_item(self.job, &item) {
            Ok(c) => Some(c),
            Err(reason) => {
                tracing::warn!(job = %self.job, reason, "checkpoint does not decode; starting a new pass");
                None
            }
        });
        Ok((
            resumed.unwrap_or_else(|| Checkpoint::new(self.job, now)),
            had,
        ))
    }

    /// Save where the next tick resumes.
    pub async fn save(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        self.store.put(checkpoint.to_item(), None).await.map(|_| ())
    }

    /// The pass is complete: remove its checkpoint, if one was stored.
    pub async fn finish(&self, had: bool) -> Result<(), StoreError> {
        if had {
            self.store.delete(&keys::checkpoint(self.job), None).await?;
        }
        Ok(())
    }
}
