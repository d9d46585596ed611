//! Nishiki's side of the stream engine: a raw stream change becomes a typed
//! [`Change`] (decoded key, typed old/new images), worker-owned items are
//! ignored (loop guard), and the change goes to every [`ChangeHandler`]
//! registered for its item kind.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::config::Clock;
pub use crate::error::HandlerError;
use crate::items::{Entity, ItemError, redact_quoted};
use crate::keys::{ItemKey, ItemKind, PK, SK};
use crate::stream::decode::{ChangeKind, StreamChange};
use crate::stream::engine::{ProcessError, RecordOutcome, RecordProcessor};

/// A stream record of the Nishiki table, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub event_id: String,
    pub kind: ChangeKind,
    pub key: ItemKey,
    pub old: Option<Entity>,
    pub new: Option<Entity>,
}

impl Change {
    /// Decode the key and both images of a raw stream change.
    ///
    /// The table's stream is `NEW_AND_OLD_IMAGES`: an INSERT without
    /// NewImage, a MODIFY without either image or a REMOVE without OldImage
    /// is rejected (a missing image would read as "every food removed"), and
    /// so is an image whose `PK`/`SK` differ from the record's `Keys`.
    pub fn from_stream(raw: &StreamChange) -> Result<Change, ItemError> {
        let key = ItemKey::from_attributes(&raw.keys)?;
        let problem = |reason: String| {
            let (pk, sk) = key.encode();
            ItemError::Attributes { pk, sk, reason }
        };
        let needs_new = !raw.kind.is_removal();
        let needs_old = raw.kind.is_removal() || raw.kind == ChangeKind::Modify;
        for (section, image, needed) in [
            ("NewImage", &raw.new_image, needs_new),
            ("OldImage", &raw.old_image, needs_old),
        ] {
            let Some(image) = image else {
                if needed {
                    return Err(problem(format!(
                        "{} without {section} (the stream must be NEW_AND_OLD_IMAGES)",
                        raw.kind.event_name()
                    )));
                }
                continue;
            };
            for name in [PK, SK] {
                if image.get(name) != raw.keys.get(name) {
                    return Err(problem(format!("{section} key differs from Keys ({name})")));
                }
            }
        }
        let image = |img: &Option<crate::items::Item>| -> Result<Option<Entity>, ItemError> {
            img.as_ref()
                .map(|i| Entity::from_keyed_item_ref(key.clone(), i))
                .transpose()
        };
        Ok(Change {
            event_id: raw.event_id.clone(),
            kind: raw.kind,
            old: image(&raw.old_image)?,
            new: image(&raw.new_image)?,
            key,
        })
    }

    /// Whether the item is gone after this change (a delete or a TTL removal).
    pub fn is_removal(&self) -> bool {
        matches!(self.kind, ChangeKind::Remove | ChangeKind::TtlRemove)
    }
}

/// What a handler did with a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerOutcome {
    /// Wrote to the table (`writes` write requests).
    Wrote { writes: usize, detail: String },
    /// Nothing to do, and why.
    Nothing(String),
}

/// One job's reaction to stream changes. Must be idempotent: the same change
/// may arrive twice, and changes of different items arrive in any order.
#[async_trait]
pub trait ChangeHandler: Send + Sync {
    /// Short name for reports (`relationships`, `invitations`, `expiry`).
    fn name(&self) -> &'static str;
    /// Whether this handler wants changes of this kind of item.
    fn wants(&self, kind: ItemKind) -> bool;
    /// React to one change; `now` comes from the injected clock.
    async fn handle(
        &self,
        change: &Change,
        now: DateTime<Utc>,
    ) -> Result<HandlerOutcome, HandlerError>;
}

/// Routes typed changes to the handlers registered for their item kind.
pub struct Router {
    handlers: Vec<Arc<dyn ChangeHandler>>,
    clock: Arc<dyn Clock>,
}

impl Router {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Router {
            handlers: Vec::new(),
            clock,
        }
    }

    /// Register a handler.
    pub fn with(mut self, handler: Arc<dyn ChangeHandler>) -> Self {
        self.handlers.push(handler);
        self
    }

    pub fn handler_names(&self) -> Vec<&'static str> {
        self.handlers.iter().map(|h| h.name()).collect()
    }
}

#[async_trait]
impl RecordProcessor for Router {
    async fn process(&self, raw: &StreamChange) -> Result<RecordOutcome, ProcessError> {
        let change = Change::from_stream(raw).map_err(|e| {
            let reason = e.to_string();
            ProcessError::Permanent {
                // A key holding an e-mail address is quoted in the message:
                // hide the quoted values then.
                reason: if reason.contains('@') {
                    redact_quoted(&reason)
                } else {
                    reason
                },
            }
        })?;
        let kind = change.key.kind();
        if kind.is_worker_owned() {
            return Ok(RecordOutcome::Skipped {
                reason: "worker-owned item (loop guard)".into(),
            });
        }
        let now = self.clock.now();
        let mut done = Vec::new();
        for h in self.handlers.iter().filter(|h| h.wants(kind)) {
            match h.handle(&change, now).await {
                Ok(HandlerOutcome::Wrote { writes, detail }) => {
                    done.push(format!("{}: {detail} ({writes} writes)", h.name()))
                }
                Ok(HandlerOutcome::Nothing(why)) => done.push(format!("{}: {why}", h.name())),
                Err(e) if e.is_retryable() => {
                    return Err(ProcessError::Transient {
                        reason: format!("{}: {e}", h.name()),
                    });
                }
                Err(e) => {
                    return Err(ProcessError::Permanent {
                        reason: format!("{}: {e}", h.name()),
                    });
                }
            }
        }
        if done.is_empty() {
            return Ok(RecordOutcome::Skipped {
                reason: format!("no handler for {kind:?} changes"),
            });
        }
        Ok(RecordOutcome::Handled {
            detail: done.join("; "),
        })
    }
}
