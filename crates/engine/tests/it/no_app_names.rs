//! The engine and its toolkit serve any table: no app's name, attribute,
//! key string or job may appear in them. The compiler already stops them
//! from naming an app's code (the apps depend on them, never the reverse);
//! this test stops the strings: every file of both crates (sources, tests,
//! manifests) is read and none may hold a word that belongs to an app.

use std::path::{Path, PathBuf};

/// Words that belong to the apps served by the engine (their attributes,
/// key strings and jobs; and Nishiki's name). Compared case-sensitively,
/// except the app's name.
const APP_WORDS: &[&str] = &[
    // attributes of the Nishiki table
    "GroupId",
    "ContainerId",
    "InvitationLinkHash",
    "LinkExpiryDatetime",
    "EMailAddress",
    "UserName",
    "Foods",
    "FoodId",
    // its key strings and worker-owned items
    "Group#",
    "Container#",
    "ExpiringFood",
    "ExpiryReminder",
    "AuditSuspect",
    "WorkerCheckpoint",
    "WorkerExpiresAt",
    "InvitationLinkExpiry",
    // its jobs
    "sweep-invitations",
    "flag-expiring",
    // the archive app (apps/archive): attributes, key strings, jobs
    "SavedDate",
    "IsUnzipped",
    "Unzipped",
    "Unzipping",
    "KeyName",
    "expire-unzipped",
    "rebuild-lookup",
    // the chat app (apps/chat): attributes, key strings, indexes, jobs,
    // table variables
    "PendingId",
    "NumMembers",
    "ChatId",
    "JoinedAt",
    "StatusReason",
    "GROUPCHAT#",
    "PRIVATECHAT#",
    "CHATREQUEST#",
    "COMMUNITY#",
    "NOTIFICATION#",
    "NOTIFICATIONREAD#",
    "CommunityMembersIndex",
    "ChatMembersIndex",
    "PendingRequestsIndex",
    "expire-requests",
    "audit-requests",
    "USERS_TABLE",
    "CHAT_REQUESTS_TABLE",
    "GROUP_CHATS_TABLE",
    // the shop app (apps/shop): derived index attributes, key strings,
    // fields, worker-owned attributes, jobs, events and variables
    "GSI1PK",
    "GSI1SK",
    "GSI2PK",
    "GSI2SK",
    "SKU",
    "ORDER#STATUS",
    "BRAND#",
    "PRO#",
    "CAT#",
    "EMAIL#",
    "brand_id",
    "category_id",
    "total_price",
    "worker_missing_refs",
    "CHECKPOINT#",
    "stuck-orders",
    "OrderStuck",
    "STUCK_STATUSES",
    "STUCK_AFTER_HOURS",
];

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the crate's directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                files(&path, out);
            }
        } else if path
            .extension()
            .is_some_and(|e| e == "rs" || e == "toml" || e == "md")
        {
            out.push(path);
        }
    }
}

#[test]
fn the_engine_holds_no_app_names() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut all = Vec::new();
    files(root, &mut all);
    let engine_files = all.len();
    files(&root.join("../toolkit"), &mut all);
    let this = Path::new(file!()).file_name().expect("this file's name");
    let mut found = Vec::new();
    for path in &all {
        if path.file_name() == Some(this) {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("UTF-8 source");
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            let hits = APP_WORDS
                .iter()
                .copied()
                .filter(|w| line.contains(w))
                .chain(lower.contains("nishiki").then_some("nishiki"));
            for word in hits {
                found.push(format!(
                    "{}:{}: {word}",
                    path.strip_prefix(root).unwrap_or(path).display(),
                    n + 1
                ));
            }
        }
    }
    assert!(
        engine_files > 10 && all.len() - engine_files > 10,
        "only {engine_files} engine and {} toolkit files read: are the crates' paths right?",
        all.len() - engine_files
    );
    assert!(
        found.is_empty(),
        "app names in the engine (move the code to the app, or make the name data the app passes in):\n{}",
        found.join("\n")
    );
}

/// The test above would pass on an empty list; it must catch a leak.
#[test]
fn the_check_catches_a_leak() {
    let line = "let k = format!(\"Group#{id}\"); // Nishiki";
    assert!(APP_WORDS.iter().any(|w| line.contains(w)));
    assert!(line.to_lowercase().contains("nishiki"));
}
