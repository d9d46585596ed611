//! Nishiki's side of the stream engine: a raw stream change becomes a typed
//! [`Change`] (decoded key, typed old/new images), and the engine's
//! [`Router`] ignores worker-owned items (loop guard) and gives the
//! change to every [`ChangeHandler`] registered for its item kind, with
//! the [`BatchFacts`] of its batch. The handlers of a record run at once
//! (a Container REMOVE concerns both the relationship and the expiry job,
//! and both check the same container and links: at once, a sharing store
//! reads each of those once). A transient failure of any of them has the
//! record retried.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::items::{Entity, Item, ItemError, redact_quoted};
use crate::keys::{ContainerId, ItemKey, ItemKind, PK, SK};
pub use worker_engine::HandlerError;
pub use worker_engine::stream::{ChangeHandler, HandlerOutcome, InBatch, Router, TypedChange};
use worker_engine::stream::{
    ChangeKind, ChangeReader, EnvelopeError, RecordError, StreamChange, Typed,
    decode_event_bytes_with,
};

/// A stream record of the Nishiki table, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The record's `eventID` (what a batch item failure reports).
    pub event_id: String,
    /// INSERT, MODIFY, REMOVE, or a TTL removal.
    pub kind: ChangeKind,
    /// The item's key, from the record's `Keys`.
    pub key: ItemKey,
    /// The item before the change (`OldImage`); `None` for an INSERT, and
    /// for a REMOVE that came without an image.
    pub old: Option<Entity>,
    /// The item after the change (`NewImage`); `None` for a removal.
    pub new: Option<Entity>,
}

impl Change {
    /// Decode the key and both images of a raw stream change.
    ///
    /// The table's stream is `NEW_AND_OLD_IMAGES`: an INSERT without
    /// NewImage or a MODIFY without either image is rejected (a missing
    /// image would read as "every food removed"), and so is an image whose
    /// `PK`/`SK` differ from the record's `Keys`. A REMOVE without OldImage
    /// is taken from its keys (`old: None`): DynamoDB Local emits a second
    /// REMOVE without an image when two deletes of one item race. The
    /// cascades need only the key; a handler that needs the old image finds
    /// none and does nothing, the first REMOVE having carried it.
    pub fn from_stream(raw: &StreamChange) -> Result<Change, ItemError> {
        let key = ItemKey::from_attributes(&raw.keys)?;
        let problem = |reason: String| {
            let (pk, sk) = key.encode();
            ItemError::Attributes { pk, sk, reason }
        };
        let (needs_old, needs_new) = needed_images(raw.kind);
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

    /// The change of `raw`: as [`Reader`] typed it while the event was read,
    /// or else decoded from its items ([`Change::from_stream`]).
    pub fn of(raw: &StreamChange) -> Result<Cow<'_, Change>, ItemError> {
        match raw.typed.as_ref().and_then(Typed::get::<Change>) {
            Some(change) => Ok(Cow::Borrowed(change)),
            None => Change::from_stream(raw).map(Cow::Owned),
        }
    }

    /// Whether the item is gone after this change (a delete or a TTL removal).
    pub fn is_removal(&self) -> bool {
        matches!(self.kind, ChangeKind::Remove | ChangeKind::TtlRemove)
    }
}

/// Whether a change of this kind needs its old and its new image: the
/// table's stream is `NEW_AND_OLD_IMAGES`.
fn needed_images(kind: ChangeKind) -> (bool, bool) {
    (kind == ChangeKind::Modify, !kind.is_removal())
}

/// The stream function's reading of a Lambda event ([`crate::jobs::APP`]'s
/// `decode`): each record typed by [`Reader`] as the event is read.
pub fn decode_event(bytes: &[u8]) -> Result<Vec<Result<StreamChange, RecordError>>, EnvelopeError> {
    decode_event_bytes_with(bytes, &Reader)
}

/// Nishiki's [`ChangeReader`]: each record's [`Change`], its images typed
/// as the stream event is read ([`Entity::read_image`]), no item of an
/// image built. It takes a record only as [`Change::from_stream`] would
/// decode it, and refuses every other (then the event is decoded into
/// items, and [`Change::from_stream`] says why a record is malformed).
#[derive(Debug, Clone, Copy, Default)]
pub struct Reader;

impl ChangeReader for Reader {
    type Image = Entity;
    type Change = Change;

    fn image<'de, D: serde::Deserializer<'de>>(
        &self,
        keys: &Item,
        d: D,
    ) -> Result<Entity, D::Error> {
        let key = ItemKey::from_attributes(keys).map_err(serde::de::Error::custom)?;
        Entity::read_image(key, keys, d)
    }

    fn change(
        &self,
        raw: &StreamChange,
        old: Option<Entity>,
        new: Option<Entity>,
    ) -> Option<Change> {
        let (needs_old, needs_new) = needed_images(raw.kind);
        if (needs_old && old.is_none()) || (needs_new && new.is_none()) {
            return None;
        }
        Some(Change {
            event_id: raw.event_id.clone(),
            kind: raw.kind,
            key: ItemKey::from_attributes(&raw.keys).ok()?,
            old,
            new,
        })
    }
}

/// What the records of one stream batch tell about each other, for a
/// handler that can leave part of its work to another record of the same
/// batch. A record of the batch that does not finish is delivered again
/// with every record after it (Lambda retries from the reported sequence
/// number), so work left to a record of the batch is done once that record
/// is handled, whichever of the two is handled first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchFacts {
    /// Containers a ContainerLink INSERT of the batch links (only records
    /// that decode: a malformed one is skipped and does nothing).
    linked: HashSet<ContainerId>,
}

impl BatchFacts {
    /// The facts of a decoded batch.
    pub fn of(records: &[Result<StreamChange, RecordError>]) -> Self {
        let linked = records
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .filter(|raw| raw.kind == ChangeKind::Insert)
            .filter_map(|raw| match ItemKey::from_attributes(&raw.keys) {
                Ok(ItemKey::ContainerLink { container, .. }) => Some((raw, container)),
                _ => None,
            })
            .filter(|(raw, _)| Change::of(raw).is_ok())
            .map(|(_, container)| container)
            .collect();
        BatchFacts { linked }
    }

    /// Whether a ContainerLink INSERT of this batch links `container`.
    pub fn link_inserted(&self, container: ContainerId) -> bool {
        self.linked.contains(&container)
    }
}

/// Nishiki's changes on the engine's router ([`Router`]): decoded by
/// [`Change::from_stream`] (a reason naming a key that holds an e-mail
/// address has its quoted values hidden), routed by [`ItemKind`],
/// worker-owned kinds ignored (the loop guard), each batch's
/// [`BatchFacts`] given to the handlers.
impl TypedChange for Change {
    type Kind = ItemKind;
    type Facts = BatchFacts;

    fn decode(raw: &StreamChange) -> Result<Self, String> {
        Change::from_stream(raw).map_err(|e| {
            let reason = e.to_string();
            if reason.contains('@') {
                redact_quoted(&reason)
            } else {
                reason
            }
        })
    }

    fn kind(&self) -> ItemKind {
        self.key.kind()
    }

    fn is_worker_owned(kind: ItemKind) -> bool {
        kind.is_worker_owned()
    }

    fn facts(records: &[Result<StreamChange, RecordError>]) -> BatchFacts {
        BatchFacts::of(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::items::{ContainerLink, Item};
    use crate::keys::GroupId;
    use async_trait::async_trait;
    use chrono::{DateTime, Utc};
    use std::sync::Arc;
    use worker_engine::FailureKind;
    use worker_engine::stream::{RecordOutcome, RecordProcessor};
    use worker_testkit::reader::Edits;

    fn record(kind: ChangeKind, key: &ItemKey, image: Option<Item>) -> StreamChange {
        let (old_image, new_image) = if kind.is_removal() {
            (image, None)
        } else {
            (None, image)
        };
        StreamChange {
            event_id: "e".into(),
            kind,
            sequence_number: None,
            approximate_creation: None,
            keys: key.to_attributes(),
            old_image,
            new_image,
            event_source_arn: None,
            size_bytes: None,
            typed: None,
        }
    }

    fn link_image(group: GroupId, container: ContainerId) -> Item {
        Entity::ContainerLink(ContainerLink {
            group,
            container,
            extra: Item::new(),
        })
        .to_item()
    }

    /// A handler of Container changes that meets the other one at a
    /// barrier (both must be running at once) and then answers `answer`.
    struct Meeting {
        name: &'static str,
        barrier: Arc<tokio::sync::Barrier>,
        answer: fn() -> Result<HandlerOutcome, HandlerError>,
    }

    #[async_trait]
    impl ChangeHandler<Change> for Meeting {
        fn name(&self) -> &'static str {
            self.name
        }
        fn wants(&self, kind: ItemKind) -> bool {
            kind == ItemKind::Container
        }
        async fn handle_in_batch(
            &self,
            _: &Change,
            _: DateTime<Utc>,
            _: &BatchFacts,
        ) -> Result<HandlerOutcome, HandlerError> {
            self.barrier.wait().await;
            (self.answer)()
        }
    }

    async fn process_with(
        first: fn() -> Result<HandlerOutcome, HandlerError>,
        second: fn() -> Result<HandlerOutcome, HandlerError>,
    ) -> Result<RecordOutcome, HandlerError> {
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let router = Router::new(Arc::new(crate::config::ManualClock::new(Utc::now())))
            .with(Arc::new(Meeting {
                name: "first",
                barrier: barrier.clone(),
                answer: first,
            }))
            .with(Arc::new(Meeting {
                name: "second",
                barrier,
                answer: second,
            }));
        let c = ContainerId::random();
        let raw = record(
            ChangeKind::Insert,
            &ItemKey::Container(c),
            Some(
                Entity::Container(crate::items::Container {
                    id: c,
                    container_name: "shelf".into(),
                    foods: Vec::new(),
                    extra: Item::new(),
                })
                .to_item(),
            ),
        );
        // Handlers run one after the other would wait at the barrier forever.
        tokio::time::timeout(std::time::Duration::from_secs(5), router.process(&raw))
            .await
            .expect("the handlers of a record run at once")
    }

    fn wrote() -> Result<HandlerOutcome, HandlerError> {
        Ok(HandlerOutcome::Wrote {
            writes: 2,
            detail: "did it".into(),
        })
    }

    fn throttled() -> Result<HandlerOutcome, HandlerError> {
        Err(HandlerError::from(
            worker_engine::store::StoreError::Transient {
                operation: "BatchGetItem",
                code: "ThrottlingException".into(),
                message: "slow down".into(),
            },
        ))
    }

    fn invalid() -> Result<HandlerOutcome, HandlerError> {
        Err(HandlerError::invalid("bad food"))
    }

    #[tokio::test]
    async fn a_records_handlers_run_at_once_and_report_in_their_order() {
        let outcome = process_with(wrote, || Ok(HandlerOutcome::Nothing("why".into()))).await;
        assert_eq!(
            outcome.unwrap(),
            RecordOutcome::Handled {
                detail: "first: did it (2 writes); second: why".into()
            }
        );
    }

    #[tokio::test]
    async fn one_handler_failing_transiently_has_the_record_retried() {
        // Even when the other failed for good: the retry lets the first
        // finish, and the record is reported permanent only then.
        let outcome = process_with(invalid, throttled).await;
        match outcome {
            Err(e) if e.kind() == FailureKind::Transient => {
                let reason = e.reason();
                assert!(reason.starts_with("second: "), "{reason}");
                assert!(reason.contains("first: bad food"), "{reason}");
            }
            other => panic!("not transient: {other:?}"),
        }
        let outcome = process_with(wrote, invalid).await;
        assert!(
            matches!(&outcome, Err(e) if e.kind() == FailureKind::Record && e.reason() == "second: bad food"),
            "{outcome:?}"
        );
    }

    /// The records of `event` as [`Reader`] types them and as their items
    /// decode: the same records, the same changes (or the same error), the
    /// same facts. Whether the reader took the event (it takes all of its
    /// records or none).
    fn read_as_the_items_decode(event: &str) -> bool {
        use worker_engine::stream::{decode_event_bytes, decode_event_bytes_with};
        let view = |c: &StreamChange| {
            Change::of(c)
                .map(Cow::into_owned)
                .map_err(|e| e.to_string())
        };
        let taken = worker_testkit::reader::read_as_the_items_decode(event, &Reader, view);
        if let (Ok(typed), Ok(items)) = (
            decode_event_bytes_with(event.as_bytes(), &Reader),
            decode_event_bytes(event.as_bytes()),
        ) {
            assert_eq!(BatchFacts::of(&typed), BatchFacts::of(&items));
        }
        taken
    }

    fn fixtures() -> Vec<(String, [String; 2])> {
        let dir = format!("{}/events/stream", env!("CARGO_MANIFEST_DIR"));
        worker_testkit::reader::stream_fixtures(std::path::Path::new(&dir))
    }

    #[test]
    fn the_reader_types_the_fixtures_as_their_items_decode() {
        let fixtures = fixtures();
        let mut left = Vec::new();
        for (name, [written, compact]) in &fixtures {
            if !read_as_the_items_decode(written) {
                left.push(name.as_str());
            }
            assert_eq!(
                read_as_the_items_decode(compact),
                !left.contains(&name.as_str())
            );
        }
        assert!(fixtures.len() >= 10, "{}", fixtures.len());
        // A malformed record, and DynamoDB Local's untagged empty list in
        // a container's foods: left to the items.
        assert_eq!(
            left,
            ["malformed-record-in-batch.json", "untagged-empty-list.json"]
        );
    }

    #[test]
    fn what_the_reader_refuses_is_decoded_from_the_items() {
        let dir = std::path::PathBuf::from(format!("{}/events/stream", env!("CARGO_MANIFEST_DIR")));
        let modify = Edits::of(&dir, "container-foods-changed.json");
        let member = Edits::of(&dir, "last-members-left.json");
        let mut taken = modify.taken();
        // Attributes of no type are kept, as the items keep them; untagged
        // empties among them too.
        taken.push(modify.in_new(r#""Note":{"S":"n"},"Tags":[],"Deep":{"M":{"x":{}}}"#));
        for event in &taken {
            assert!(read_as_the_items_decode(event), "taken");
        }
        let pk = "c0000000-0000-4000-8000-0000000c0001";
        let mut refused = modify.refusals();
        refused.extend([
            // An image's key that is not the record's, or none.
            modify.set(
                "PK",
                serde_json::json!({"S": "c0000000-0000-4000-8000-0000000c0009"}),
            ),
            modify.remove("SK"),
            // A NULL that is false.
            modify.set("ContainerName", serde_json::json!({"NULL": false})),
            // A name twice.
            modify.in_new(r#""ContainerName":{"S":"again"}"#),
            modify.in_new(r#""Note":{"S":"n"},"Note":{"S":"m"}"#),
            modify.in_new(&format!(r#""PK":{{"S":"{pk}"}}"#)),
            // A MODIFY without its old image.
            modify.edit(|d| {
                d.as_object_mut().unwrap().remove("OldImage");
            }),
            // A membership whose group is not its key's.
            member.edit(|d| {
                d["OldImage"]["GroupId"]["S"] = "9e000000-0000-4000-8000-00000000a009".into()
            }),
            // An item of no kind of the table.
            modify
                .event()
                .replace(&format!(r#""S":"{pk}""#), r#""S":"not-an-id""#),
        ]);
        for (n, event) in refused.iter().enumerate() {
            assert_ne!(event, modify.event(), "case {n} changes the event");
            assert!(!read_as_the_items_decode(event), "case {n} refused");
        }
    }

    #[test]
    fn batch_facts_name_the_containers_a_decodable_link_insert_links() {
        let g = GroupId::random();
        let [linked, unlinked, malformed, alone] = [(); 4].map(|_| ContainerId::random());
        let link = |c| ItemKey::ContainerLink {
            group: g,
            container: c,
        };
        let mut other_key = link_image(g, malformed);
        other_key.insert(SK.into(), link(alone).to_attributes()[SK].clone());
        let records = vec![
            Ok(record(
                ChangeKind::Insert,
                &link(linked),
                Some(link_image(g, linked)),
            )),
            // A removal links nothing.
            Ok(record(
                ChangeKind::Remove,
                &link(unlinked),
                Some(link_image(g, unlinked)),
            )),
            // An INSERT whose image is not its key's is skipped by the
            // router (malformed), so it places no flags.
            Ok(record(
                ChangeKind::Insert,
                &link(malformed),
                Some(other_key),
            )),
            // A container's own record is no link.
            Ok(record(ChangeKind::Insert, &ItemKey::Container(alone), None)),
        ];
        let facts = BatchFacts::of(&records);
        assert!(facts.link_inserted(linked));
        for c in [unlinked, malformed, alone] {
            assert!(!facts.link_inserted(c));
        }
        assert_eq!(BatchFacts::of(&[]), BatchFacts::default());
    }
}
