//! The `chat-worker` binary's snapshots and diffs cover the six tables:
//!
//! - `replay --apply-writes --write-snapshot` of the request-accepted
//!   fixture writes a file equal to its golden (one JSON object of the six
//!   tables), and its diff, in text and in `--json`, shows what the
//!   acceptance did beyond ChatRequests: the GroupChats member and
//!   `NumMembers`, the Notifications item, each labelled with its table;
//! - `run --snapshot` of that golden loads every table (the job sees them
//!   and a `--write-snapshot` gives the same file back), a plain array is
//!   the ChatRequests table, and `table load` / `table snapshot` make the
//!   same round trip on a DynamoDB Local that outlives them;
//! - the writes a dry run plans, or a run on a table it did not start
//!   makes, are listed by table;
//! - a snapshot naming a table the app does not have is refused with its
//!   name and the names expected, before anything starts;
//! - `--table ROLE=NAME` names each table for a command, `table snapshot
//!   --table ROLE` writes that table alone, and a bare role where a
//!   command works on every table, or a role the app does not have, is
//!   refused with the roles and their variables.
//!
//! `cargo test -p chat-cli --test it snapshots::`

use std::path::{Path, PathBuf};
use std::process::Output;

use chat_worker::schema::Table;
use serde_json::Value;

/// The workspace's root (where `events/` is).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn events(path: &str) -> String {
    workspace()
        .join("events/chat")
        .join(path)
        .display()
        .to_string()
}

/// The request-accepted fixture's event files (`events/chat/manifest.json`).
fn accepted_events() -> Vec<String> {
    [
        "stream/users-created.json",
        "stream/chat-created.json",
        "stream/requests-created.json",
        "stream/request-accepted.json",
    ]
    .into_iter()
    .map(events)
    .collect()
}

fn golden() -> String {
    std::fs::read_to_string(events("golden/request-accepted.json")).expect("the golden")
}

/// A scratch folder of this test process.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("chat-snapshots-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

/// `chat-worker ARGS` in the workspace, the tables by their seed names.
fn chat_worker(args: &[&str]) -> Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_chat-worker"));
    c.current_dir(workspace())
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1");
    for t in Table::ALL {
        c.env_remove(t.env_var());
    }
    c.env_remove("TABLE_NAME")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The entries of a `--json` diff list of one table.
fn of_table<'a>(diff: &'a Value, list: &str, table: &str) -> Vec<&'a Value> {
    diff[list]
        .as_array()
        .unwrap_or_else(|| panic!("a {list} list: {diff}"))
        .iter()
        .filter(|e| e["table"] == table)
        .collect()
}

#[test]
fn replay_writes_and_shows_every_table() {
    let dir = scratch("replay");
    let out = dir.join("after.json").display().to_string();
    let mut args = vec![
        "replay",
        "--apply-writes",
        "--now",
        "2024-06-01T00:00:00Z",
        "--write-snapshot",
        &out,
    ];
    let files = accepted_events();
    args.extend(files.iter().map(String::as_str));
    let o = chat_worker(&args);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(
        std::fs::read_to_string(&out).expect("the snapshot written"),
        golden(),
        "--write-snapshot writes the six tables as the golden holds them"
    );
    let text = stdout(&o);
    let accepted = text
        .split("▶ ")
        .find(|f| f.contains("stream/request-accepted.json"))
        .unwrap_or_else(|| panic!("the acceptance's file: {text}"));
    let worker = accepted
        .split_once("table changes by the worker: ")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("the worker's changes: {accepted}"));
    for line in [
        "3 added, 3 changed, 0 removed",
        "    ChatRequests: 1 added, 2 changed, 0 removed",
        "    GroupChats: 1 added, 1 changed, 0 removed",
        "      + GROUPCHAT#g1/USER#u1 {JoinedAt: \"2024-06-01T00:00:00.000Z\"}",
        "      ~ GROUPCHAT#g1/GROUPCHAT#g1: NumMembers: 0 → 1",
        "    Notifications: 1 added, 0 changed, 0 removed",
        "      + USER#u1/NOTIFICATION#UNREAD#2024-06-01T00:00:00.000Z#chatrequest-r1-accepted {CreatedAt: \"2024-06-01T00:00:00.000Z\", Id: \"chatrequest-r1-accepted\", NotificationType: \"ChatRequestAccepted\", Read: false, Seen: false, Target: \"g1\"}",
    ] {
        assert!(
            worker.lines().any(|l| l == line),
            "{line:?} is not in:\n{worker}"
        );
    }
    // The service's writes of the other tables are shown too.
    let chat_created = text
        .split("▶ ")
        .find(|f| f.contains("stream/chat-created.json"))
        .expect("the chat's file");
    assert!(
        chat_created.contains(
            "    GroupChats: 1 added, 0 changed, 0 removed\n      + GROUPCHAT#g1/GROUPCHAT#g1 {Capacity: 2, Id: \"g1\", NumMembers: 0}"
        ),
        "{chat_created}"
    );
    assert!(
        text.contains(&format!(
            "snapshot written: {out} (10 items: ChatRequests 5, Users 2, Communities 0, Notifications 1, GroupChats 2, PrivateChats 0)"
        )),
        "{text}"
    );

    // The same in --json: every change carries its table.
    args.retain(|a| *a != "--write-snapshot" && *a != out);
    args.push("--json");
    let o = chat_worker(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    let diff = &v["files"][3]["diff"];
    let member = of_table(diff, "added", "GroupChats");
    assert_eq!(member.len(), 1, "{diff}");
    assert_eq!(
        member[0]["key"],
        serde_json::json!({"PK": {"S": "GROUPCHAT#g1"}, "SK": {"S": "USER#u1"}})
    );
    let counted = of_table(diff, "changed", "GroupChats");
    assert_eq!(counted.len(), 1, "{diff}");
    assert_eq!(
        counted[0]["changes"],
        serde_json::json!([{"path": "NumMembers", "old": {"N": "0"}, "new": {"N": "1"}}])
    );
    let notified = of_table(diff, "added", "Notifications");
    assert_eq!(notified.len(), 1, "{diff}");
    assert_eq!(
        notified[0]["item"]["NotificationType"]["S"],
        "ChatRequestAccepted"
    );
    assert_eq!(of_table(diff, "changed", "ChatRequests").len(), 2, "{diff}");
    assert_eq!(
        diff["added"].as_array().map(Vec::len),
        Some(3),
        "nothing unlabelled: {diff}"
    );
    assert_eq!(
        v["files"][1]["applied"]["diff"]["added"][0]["table"], "GroupChats",
        "{v}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_snapshot_of_the_six_tables_loads_each_table() {
    let dir = scratch("load");
    let out = dir.join("after.json").display().to_string();
    let accepted = events("golden/request-accepted.json");
    // audit-requests reads ChatRequests, finds every copy with its twin.
    let o = chat_worker(&[
        "run",
        "audit-requests",
        "--snapshot",
        &accepted,
        "--now",
        "2024-06-01T00:00:00Z",
        "--write-snapshot",
        &out,
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(v["report"]["details"]["copies"], 4, "{v}");
    assert_eq!(
        v["diff"],
        serde_json::json!({"added": [], "changed": [], "removed": []})
    );
    assert_eq!(
        v["snapshotWritten"]["tables"],
        serde_json::json!({"ChatRequests": 5, "Users": 2, "Communities": 0,
            "Notifications": 1, "GroupChats": 2, "PrivateChats": 0}),
        "{v}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), golden());

    // Two months on, expire-requests expires u2's pending request on
    // both copies of the loaded ChatRequests table; the others stay.
    let o = chat_worker(&[
        "run",
        "expire-requests",
        "--snapshot",
        &accepted,
        "--now",
        "2024-08-01T00:00:00Z",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("table changes: 0 added, 2 changed, 0 removed\n  ChatRequests: 0 added, 2 changed, 0 removed\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "    ~ USER#u2/CHATREQUEST#2024-05-31T08:00:00.000Z#r2: Status: \"pending\" → \"expired\""
        ),
        "{text}"
    );

    // A dry run lists what the worker would write to each table: here
    // the recount of a chat whose NumMembers misses its member.
    let miscounted = dir.join("miscounted.json");
    std::fs::write(
        &miscounted,
        golden().replace(r#""NumMembers":{"N":"1"}"#, r#""NumMembers":{"N":"0"}"#),
    )
    .unwrap();
    let chat_created = events("stream/chat-created.json");
    let o = chat_worker(&[
        "replay",
        "--dry-run",
        "--snapshot",
        &miscounted.display().to_string(),
        &chat_created,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains(
            "  planned writes (dry run, nothing written): 1\n    GroupChats (1):\n      UPDATE GROUPCHAT#g1/GROUPCHAT#g1 SET #NumMembers = :NumMembers if "
        ),
        "{text}"
    );

    // A plain array is the ChatRequests table.
    let items: Value = serde_json::from_str(&golden()).unwrap();
    let requests = dir.join("requests.json");
    std::fs::write(&requests, items["ChatRequests"].to_string()).unwrap();
    let o = chat_worker(&[
        "run",
        "audit-requests",
        "--snapshot",
        &requests.display().to_string(),
        "--now",
        "2024-06-01T00:00:00Z",
        "--write-snapshot",
        &out,
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(written["ChatRequests"], items["ChatRequests"]);
    assert_eq!(written["GroupChats"], serde_json::json!([]));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_load_and_snapshot_cover_the_six_tables() {
    let local = worker_testkit::lease_local().await;
    let endpoint = local.endpoint_url();
    let dir = scratch("table");
    let out = dir.join("tables.json").display().to_string();
    let accepted = events("golden/request-accepted.json");
    // Before the tables exist, the first missing one is named.
    let o = chat_worker(&["table", "snapshot", &out, "--endpoint-url", &endpoint]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "table \"ChatRequests\" does not exist at {endpoint}: run `chat-worker table create --endpoint-url {endpoint} --table ChatRequests=ChatRequests`"
        )),
        "{}",
        stderr(&o)
    );
    // With ChatRequests only, the first other table missing is named.
    let requests = Table::ChatRequests;
    worker_engine::store::DynamoStore::new(
        worker_engine::store::local_client(&endpoint),
        requests.name(),
    )
    .with_key(requests.schema().key)
    .create_table(&requests.schema())
    .await
    .expect("the ChatRequests table");
    let o = chat_worker(&["table", "snapshot", &out, "--endpoint-url", &endpoint]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "table \"Users\" (USERS_TABLE) does not exist at {endpoint}: run `chat-worker table create --endpoint-url {endpoint}` with the same table names (it creates every table of the app), or check USERS_TABLE and --table"
        )),
        "{}",
        stderr(&o)
    );
    let o = chat_worker(&["table", "create", "--endpoint-url", &endpoint]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = chat_worker(&["table", "load", &accepted, "--endpoint-url", &endpoint]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(&format!(
            "loaded 10 items from {accepted} into 6 tables at {endpoint} (ChatRequests 5, Users 2, Communities 0, Notifications 1, GroupChats 2, PrivateChats 0) in "
        )),
        "{}",
        stdout(&o)
    );
    let o = chat_worker(&[
        "table",
        "snapshot",
        &out,
        "--endpoint-url",
        &endpoint,
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["items"].as_u64(), v["tables"]["GroupChats"].as_u64()),
        (Some(10), Some(2)),
        "{v}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), golden());

    // On a table the command did not start, the writes made are listed by
    // table: the recount of a chat whose NumMembers misses its member.
    let miscounted = dir.join("miscounted.json");
    std::fs::write(
        &miscounted,
        golden().replace(r#""NumMembers":{"N":"1"}"#, r#""NumMembers":{"N":"0"}"#),
    )
    .unwrap();
    let o = chat_worker(&[
        "table",
        "load",
        &miscounted.display().to_string(),
        "--endpoint-url",
        &endpoint,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = chat_worker(&[
        "replay",
        "--endpoint-url",
        &endpoint,
        &events("stream/chat-created.json"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains(
            "  writes made by the worker: 1\n    GroupChats (1):\n      UPDATE GROUPCHAT#g1/GROUPCHAT#g1 SET #NumMembers = :NumMembers if "
        ),
        "{text}"
    );
    let o = chat_worker(&["table", "snapshot", &out, "--endpoint-url", &endpoint]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        golden(),
        "recounted"
    );
    drop(local);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_table_the_app_does_not_have_is_refused_with_its_name() {
    let dir = scratch("unknown");
    let bad = dir.join("rooms.json");
    std::fs::write(&bad, r#"{"ChatRequests": [], "Rooms": []}"#).unwrap();
    let bad = bad.display().to_string();
    let accepted = events("stream/request-accepted.json");
    for args in [
        vec!["replay", "--snapshot", &bad, &accepted],
        vec!["run", "audit-requests", "--snapshot", &bad],
        vec![
            "table",
            "load",
            &bad,
            "--endpoint-url",
            "http://127.0.0.1:9",
        ],
    ] {
        let o = chat_worker(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains(&format!(
                "{bad}: \"Rooms\" is not a table of this app: expected \"ChatRequests\", \"Users\", \"Communities\", \"Notifications\", \"GroupChats\", \"PrivateChats\""
            )),
            "{args:?}: {e}"
        );
        assert!(
            !e.contains("starting DynamoDB Local"),
            "{args:?}: refused before anything starts: {e}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Each table named for the command by its role, `ROLE=p-ROLE`.
fn prefixed(p: &str) -> Vec<String> {
    Table::ALL
        .iter()
        .flat_map(|t| {
            [
                "--table".to_owned(),
                format!("{}={p}{}", t.name(), t.name()),
            ]
        })
        .collect()
}

/// `--table ROLE=NAME` names each table, `table snapshot --table ROLE`
/// writes that table alone (named in the file, so that `table load` puts
/// it back there), and a command that works on every table refuses a
/// bare role, or a name that is no role, with the roles and variables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_are_named_by_role_and_a_snapshot_of_one_writes_that_table() {
    let local = worker_testkit::lease_local().await;
    let endpoint = local.endpoint_url();
    let dir = scratch("roles");
    let p = format!("roles{}-", std::process::id());
    let named = prefixed(&p);
    let with = |args: &[&str]| -> Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--endpoint-url", &endpoint]);
        all.extend(named.iter().map(String::as_str));
        chat_worker(&all)
    };
    let o = with(&["table", "create"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("created table {p}Users (USERS_TABLE)")),
        "{}",
        stdout(&o)
    );
    // The golden, its tables renamed as this command names them.
    let golden: serde_json::Map<String, Value> = serde_json::from_str(&golden()).unwrap();
    let renamed: serde_json::Map<String, Value> = golden
        .into_iter()
        .map(|(name, items)| (format!("{p}{name}"), items))
        .collect();
    let file = dir.join("renamed.json");
    std::fs::write(&file, Value::Object(renamed).to_string()).unwrap();
    let o = with(&["table", "load", &file.display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("into 6 tables at"), "{}", stdout(&o));

    // The Users table alone, picked by its role and named by it too.
    let users = dir.join("users.json");
    let o = with(&[
        "table",
        "snapshot",
        "--table",
        "Users",
        &users.display().to_string(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(&format!("wrote 2 items of table {p}Users at {endpoint}")),
        "{}",
        stdout(&o)
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&users).unwrap()).unwrap();
    let tables: Vec<&String> = v
        .as_object()
        .expect("an object by table name")
        .keys()
        .collect();
    assert_eq!(tables, [&format!("{p}Users")], "that table alone, named");
    assert_eq!(v[format!("{p}Users")].as_array().map(Vec::len), Some(2));
    let o = with(&["table", "load", &users.display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("into 1 table at {endpoint} ({p}Users 2)")),
        "{}",
        stdout(&o)
    );

    let roles = "roles (variables): ChatRequests (CHAT_REQUESTS_TABLE), Users (USERS_TABLE), \
                 Communities (COMMUNITIES_TABLE), Notifications (NOTIFICATIONS_TABLE), \
                 GroupChats (GROUP_CHATS_TABLE), PrivateChats (PRIVATE_CHATS_TABLE)";
    let chat_created = events("stream/chat-created.json");
    for (args, problem) in [
        (
            vec!["replay", "--table", "Users", &chat_created],
            "--table Users: this command works on every table; name one as ROLE=NAME",
        ),
        (
            vec![
                "table",
                "snapshot",
                "--table",
                "Rooms",
                "x.json",
                "--endpoint-url",
                "http://127.0.0.1:9",
            ],
            "--table Rooms: chat-worker has no table \"Rooms\"",
        ),
        (
            vec!["run", "audit-requests", "--table", "Rooms=r"],
            "--table Rooms=r: chat-worker has no table \"Rooms\"",
        ),
    ] {
        let o = chat_worker(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(problem) && e.contains(roles), "{args:?}: {e}");
        assert!(!e.contains("starting DynamoDB Local"), "{args:?}: {e}");
    }
    drop(local);
    let _ = std::fs::remove_dir_all(dir);
}
