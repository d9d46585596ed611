//! Arbitrary bytes through the stream path, without I/O: the byte-level
//! decoder the CLI uses (`decode_event_bytes`), then, for every record that
//! decodes, the typed decoding the router does (`Change::from_stream`: key,
//! images, entities), the renderings that reach log lines, and the
//! encode/decode round trip fixtures and captures rely on.
//!
//! A panic anywhere is a crash. Run: `scripts/fuzz [SECONDS]`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nishiki_worker::worker::Change;
use worker_engine::stream::{
    DEFAULT_KEY_ATTRIBUTES, decode_event, decode_event_bytes, encode_event, is_stream_event,
};

fuzz_target!(|data: &[u8]| {
    let Ok(records) = decode_event_bytes(data) else {
        return;
    };
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = is_stream_event(&value);
    }
    for record in records {
        match record {
            Ok(change) => {
                let _ = change.key_string(DEFAULT_KEY_ATTRIBUTES);
                let _ = format!("{change:?}");
                if let Ok(typed) = Change::from_stream(&change) {
                    let _ = format!("{typed:?}");
                    for entity in [&typed.old, &typed.new].into_iter().flatten() {
                        let _ = entity.to_item();
                    }
                }
                // What Lambda would deliver for this change decodes back to it.
                let event = encode_event(std::slice::from_ref(&change), None);
                let back = decode_event(&event).expect("an encoded event is a stream event");
                assert_eq!(back.len(), 1);
                match &back[0] {
                    Ok(again) => assert_eq!(again, &change, "round trip"),
                    Err(e) => panic!("an encoded change does not decode: {e}"),
                }
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
});
