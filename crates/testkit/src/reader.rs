//! An app's [`ChangeReader`] held beside the items: the same event decoded
//! through the reader ([`decode_event_bytes_with`]) and into items
//! ([`decode_event_bytes`]) must give the same records, and each record
//! the same view (what the app's handlers read of it, typed by the reader
//! or read from the items).

use std::fmt::Debug;
use std::path::Path;

use worker_engine::stream::{
    ChangeReader, StreamChange, decode_event_bytes, decode_event_bytes_with,
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
