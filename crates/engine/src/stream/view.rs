//! An app's view of each image: what its handlers read of an image, read
//! as the Lambda event is read ([`decode_views`], by a [`ViewReader`]), or
//! from the items of an event the reader does not take ([`Images::of`]),
//! the same either way.
//!
//! For an app whose handlers take the engine's [`StreamChange`] and read a
//! few attributes of its images: the app writes its view ([`ImageView`]),
//! names `decode_views::<MyImage>` as its `AppSpec::decode`, and its
//! handlers take `Images::<MyImage>::of(change)`. No item of an image is
//! built on the Lambda path; an event the reader does not take whole is
//! decoded into items, as [`decode_event_bytes_with`] says.

use std::borrow::Cow;
use std::marker::PhantomData;

use serde::Deserializer;

use super::decode::{
    ChangeReader, EnvelopeError, RecordError, StreamChange, decode_event_bytes_with,
};
use crate::item::Item;

/// What an app's handlers read of an image.
pub trait ImageView: Sized + Send + Sync + 'static {
    /// The view of the image whose record's key is `keys`, from its
    /// DynamoDB JSON text (as [`crate::item::text`] reads it): what
    /// [`Self::from_item`] reads from that image's item, or an error where
    /// it cannot tell (then the event is decoded into items).
    fn read<'de, D: Deserializer<'de>>(keys: &Item, d: D) -> Result<Self, D::Error>;
    /// The view of `item`, an image of the record whose key is `keys`.
    fn from_item(keys: &Item, item: &Item) -> Self;
}

/// A record's images, as an app's handlers read them.
#[derive(Debug, Clone, PartialEq)]
pub struct Images<V> {
    /// The item before the change.
    pub old: Option<V>,
    /// The item after it.
    pub new: Option<V>,
}

impl<V> Default for Images<V> {
    fn default() -> Self {
        Images {
            old: None,
            new: None,
        }
    }
}

impl<V: ImageView + Clone> Images<V> {
    /// The images of `change`: as the reader read them, or from its items
    /// (an event the reader did not take).
    pub fn of(change: &StreamChange) -> Cow<'_, Images<V>> {
        if let Some(images) = change.typed.as_ref().and_then(|t| t.get::<Images<V>>()) {
            return Cow::Borrowed(images);
        }
        let view = |item: &Option<Item>| item.as_ref().map(|item| V::from_item(&change.keys, item));
        Cow::Owned(Images {
            old: view(&change.old_image),
            new: view(&change.new_image),
        })
    }
}

/// The [`ChangeReader`] of views: each image read as `V` ([`ImageView::read`]),
/// each record its [`Images`].
pub struct ViewReader<V>(PhantomData<fn() -> V>);

impl<V> ViewReader<V> {
    /// The reader of `V`.
    pub fn new() -> Self {
        ViewReader(PhantomData)
    }
}

impl<V> Default for ViewReader<V> {
    fn default() -> Self {
        ViewReader::new()
    }
}

impl<V: ImageView> ChangeReader for ViewReader<V> {
    type Image = V;
    type Change = Images<V>;

    fn image<'de, D: Deserializer<'de>>(&self, keys: &Item, d: D) -> Result<V, D::Error> {
        V::read(keys, d)
    }

    fn change(&self, _: &StreamChange, old: Option<V>, new: Option<V>) -> Option<Images<V>> {
        Some(Images { old, new })
    }
}

/// A Lambda event's records, each record's images read as `V` as the
/// event is read ([`decode_event_bytes_with`] a [`ViewReader`]): an app's
/// `AppSpec::decode`, as `decode_views::<MyImage>`.
pub fn decode_views<V: ImageView>(
    bytes: &[u8],
) -> Result<Vec<Result<StreamChange, RecordError>>, EnvelopeError> {
    decode_event_bytes_with(bytes, &ViewReader::<V>::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{decode_event_bytes, encode_event};
    use aws_sdk_dynamodb::types::AttributeValue;
    use serde::Deserialize;

    /// A view of a note's `Title`.
    #[derive(Debug, Clone, PartialEq)]
    struct Title(Option<String>);

    impl ImageView for Title {
        fn read<'de, D: Deserializer<'de>>(keys: &Item, d: D) -> Result<Self, D::Error> {
            #[derive(Deserialize)]
            struct Text {
                #[serde(rename = "Title")]
                title: Option<String>,
            }
            let key: Vec<(&str, &AttributeValue)> =
                keys.iter().map(|(k, v)| (k.as_str(), v)).collect();
            let text: Text = crate::item::text::read_image(d, &key)?;
            Ok(Title(text.title))
        }
        fn from_item(_: &Item, item: &Item) -> Self {
            Title(item.get("Title").and_then(|v| v.as_s().ok()).cloned())
        }
    }

    fn note(title: &str) -> Item {
        Item::from([
            ("PK".to_owned(), AttributeValue::S("NOTE#1".into())),
            ("Title".to_owned(), AttributeValue::S(title.into())),
            ("Body".to_owned(), AttributeValue::S("text".into())),
        ])
    }

    #[test]
    fn views_read_as_the_event_is_read_are_those_of_the_items() {
        let change = StreamChange {
            event_id: "e".into(),
            kind: crate::stream::ChangeKind::Modify,
            sequence_number: Some("1".parse().unwrap()),
            approximate_creation: None,
            keys: Item::from([("PK".to_owned(), AttributeValue::S("NOTE#1".into()))]),
            old_image: Some(note("a")),
            new_image: Some(note("b")),
            event_source_arn: None,
            size_bytes: None,
            typed: None,
        };
        let bytes = serde_json::to_vec(&encode_event(&[change], None)).unwrap();
        let read = decode_views::<Title>(&bytes).unwrap().remove(0).unwrap();
        let items = decode_event_bytes(&bytes).unwrap().remove(0).unwrap();
        assert!(read.typed.is_some() && read.new_image.is_none());
        assert!(items.typed.is_none() && items.new_image.is_some());
        let want = Images {
            old: Some(Title(Some("a".into()))),
            new: Some(Title(Some("b".into()))),
        };
        assert!(matches!(Images::<Title>::of(&read), Cow::Borrowed(_)));
        assert_eq!(*Images::<Title>::of(&read), want);
        assert_eq!(*Images::<Title>::of(&items), want);
    }
}
