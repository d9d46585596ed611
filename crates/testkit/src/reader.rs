//! An app's [`ChangeReader`] held beside the items: the same event decoded
//! through the reader ([`decode_event_bytes_with`]) and into items
//! ([`decode_event_bytes`]) must give the same records, and each record
//! the same view (what the app's handlers read of it, typed by the reader
//! or read from the items).

use std::fmt::Debug;
use std::path::Path;

use worker_engine::stream::{
    ChangeReader, ImageView, Images, StreamChange, ViewReader, decode_event_bytes,
    decode_event_bytes_with,
};

/// Whether `reader` takes `event` whole. Either way, checks that the event
/// decodes through it as into items: the same envelope errors, the same
/// record errors in the same slots, each record's envelope equal (its
/// images only in the items when the reader took it) and `view` of each
/// record equal; a reader takes every record of an event or none.
pub fn read_as_the_items_decode<R: ChangeReader, T: PartialEq + Debug>(
    event: &str,
    reader: &R,
    view: impl Fn(&StreamChange) -> T,
) -> bool {
    let typed = decode_event_bytes_with(event.as_bytes(), reader);
    let items = decode_event_bytes(event.as_bytes());
    let (typed, items) = match (typed, items) {
        (Ok(typed), Ok(items)) => (typed, items),
        (typed, items) => {
            assert_eq!(typed, items);
            return false;
        }
    };
    assert_eq!(typed.len(), items.len());
    let mut taken = Vec::new();
    for (t, i) in typed.iter().zip(&items) {
        let (t, i) = match (t, i) {
            (Ok(t), Ok(i)) => (t, i),
            (t, i) => {
                assert_eq!(t, i);
                taken.push(false);
                continue;
            }
        };
        taken.push(t.typed.is_some());
        let envelope = |c: &StreamChange, images_read: bool| {
            let mut c = c.clone();
            c.typed = None;
            if images_read {
                c.old_image = None;
                c.new_image = None;
            }
            c
        };
        assert_eq!(envelope(t, false), envelope(i, t.typed.is_some()));
        assert_eq!(view(t), view(i), "record {}", t.event_id);
    }
    assert!(
        taken.iter().all(|&t| t == taken[0]),
        "all or none: {taken:?}"
    );
    taken.first().copied().unwrap_or(false)
}

/// Every stream fixture of `dir` (`events/.../stream`), by name, in name
/// order: each as written, and compacted as `serde_json` writes it (no
/// spaces; in each record's `dynamodb`, `Keys` first).
pub fn stream_fixtures(dir: &Path) -> Vec<(String, [String; 2])> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(dir.join(&name)).unwrap();
            let compact = serde_json::from_str::<serde_json::Value>(&text)
                .unwrap()
                .to_string();
            (name, [text, compact])
        })
        .collect()
}

/// [`read_as_the_items_decode`] for an app's views ([`ViewReader`]): each
/// record's [`Images`] the same.
pub fn views_read_as_the_items_decode<V: ImageView + Clone + PartialEq + Debug>(
    event: &str,
) -> bool {
    read_as_the_items_decode(event, &ViewReader::<V>::new(), |c| {
        Images::<V>::of(c).into_owned()
    })
}

/// Every stream fixture of `dir` (at least `at_least` of them), as written
/// and compacted, read whole by the views `V` and as its items decode.
pub fn assert_every_fixture_read<V: ImageView + Clone + PartialEq + Debug>(
    dir: &Path,
    at_least: usize,
) {
    let fixtures = stream_fixtures(dir);
    assert!(fixtures.len() >= at_least, "{}", fixtures.len());
    for (name, events) in &fixtures {
        for event in events {
            assert!(views_read_as_the_items_decode::<V>(event), "{name}");
        }
    }
}

/// A stream fixture, compacted (as `serde_json` writes it), and its first
/// record edited: the events a reader's tests hold beside the items.
pub struct Edits {
    event: String,
}

/// Where an attribute is put first in the first record's new image.
const NEW_IMAGE: &str = r#""NewImage":{"#;

impl Edits {
    /// The fixture `name` of `dir`, compacted.
    pub fn of(dir: &Path, name: &str) -> Edits {
        let [_, event] = stream_fixtures(dir)
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no fixture {name} in {}", dir.display()))
            .1;
        Edits { event }
    }

    /// The event as it is.
    pub fn event(&self) -> &str {
        &self.event
    }

    /// The event with `attributes` (`"Name":{"S":"v"},...`) first in its
    /// first record's new image.
    pub fn in_new(&self, attributes: &str) -> String {
        assert!(self.event.contains(NEW_IMAGE), "no new image");
        self.event
            .replacen(NEW_IMAGE, &format!("{NEW_IMAGE}{attributes},"), 1)
    }

    /// The event with its first record's `dynamodb` changed by `change`.
    pub fn edit(&self, change: impl Fn(&mut serde_json::Value)) -> String {
        let mut event: serde_json::Value = serde_json::from_str(&self.event).unwrap();
        change(&mut event["Records"][0]["dynamodb"]);
        event.to_string()
    }

    /// The event with the attribute `name` of its first record's new image
    /// set to `value`.
    pub fn set(&self, name: &str, value: serde_json::Value) -> String {
        self.edit(|d| d["NewImage"][name] = value.clone())
    }

    /// The event without the attribute `name` in its first record's new
    /// image.
    pub fn remove(&self, name: &str) -> String {
        self.edit(|d| {
            d["NewImage"].as_object_mut().unwrap().remove(name);
        })
    }

    /// What every reader must leave to the items: a binary value, the
    /// first record's images before its `Keys`, an image whose text might
    /// be over the item limit (and one that is), an escaped field name (its
    /// place in the event is unknown).
    pub fn refusals(&self) -> Vec<String> {
        let event: serde_json::Value = serde_json::from_str(&self.event).unwrap();
        let keys = event["Records"][0]["dynamodb"]["Keys"].to_string();
        let big = |n: usize| self.in_new(&format!(r#""Big":{{"S":"{}"}}"#, "x".repeat(n)));
        vec![
            self.in_new(r#""Blob":{"B":"AQ=="}"#),
            self.event
                .replacen(r#""Keys":"#, r#""Keys0":"#, 1)
                .replacen(
                    r#""SequenceNumber""#,
                    &format!(r#""Keys":{keys},"SequenceNumber""#),
                    1,
                ),
            big(250_000),
            big(410_000),
            self.event.replacen(NEW_IMAGE, r#""New\u0049mage":{"#, 1),
        ]
    }

    /// What every reader takes as the items read it: attributes of every
    /// type, an image of 150 KB.
    pub fn taken(&self) -> Vec<String> {
        vec![
            self.in_new(r#""Note":{"S":"n"},"Tags":{"L":[]},"Deep":{"M":{"x":{"NS":["1"]}}}"#),
            self.in_new(&format!(r#""Big":{{"S":"{}"}}"#, "x".repeat(150_000))),
        ]
    }
}

/// Checks that the views `V` take every event of `taken` and leave every
/// one of `refused` to the items, each read as its items decode
/// ([`views_read_as_the_items_decode`]); each an edit of one of
/// `originals`, so none of them is one of those unchanged.
pub fn assert_views_take_and_refuse<V: ImageView + Clone + PartialEq + Debug>(
    originals: &[&Edits],
    taken: &[String],
    refused: &[String],
) {
    let edited = |n: usize, event: &str| {
        assert!(
            originals.iter().all(|o| o.event() != event),
            "case {n} changes the event"
        );
    };
    for (n, event) in taken.iter().enumerate() {
        edited(n, event);
        assert!(views_read_as_the_items_decode::<V>(event), "case {n} taken");
    }
    for (n, event) in refused.iter().enumerate() {
        edited(n, event);
        assert!(
            !views_read_as_the_items_decode::<V>(event),
            "case {n} refused"
        );
    }
}
