//! `archive-worker replay`, the binary this `cargo test` built.

/// Records of another app's table are not the archive's: each is reported
/// as `foreign`, skipped (Lambda retries nothing), and the command exits 3
/// (the records were not handled).
#[test]
fn another_apps_records_are_foreign_and_exit_3() {
    let events = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_archive-worker"))
        .args(["replay", "--json"])
        .arg(events.join("shop/stream/brand-deleted.json"))
        .env("NO_COLOR", "1")
        .output()
        .expect("run archive-worker");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let file = &v["files"][0];
    assert_eq!(file["records"][0]["outcome"], "foreign", "{file}");
    assert_eq!(
        file["batchItemFailures"],
        serde_json::json!({"batchItemFailures": []})
    );
    assert_eq!(v["failed"], true);
}
