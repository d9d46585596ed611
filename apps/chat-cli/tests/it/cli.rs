//! The `chat-worker` command line, parsed as `main` parses it and run
//! through the engine's command functions on a DynamoDB Local of its own:
//! `table create` makes the six tables, `dev --until-idle` follows all six
//! streams, and a dry run refuses the acceptance's transaction instead of
//! writing. The binary itself: `dev` follows the six event sources of
//! `infra/chat.yaml` (its default template), each with its own settings.

use std::path::{Path, PathBuf};
use std::process::{ExitCode, Output};

use chat_cli::Chat;
use chat_worker::items::{RequestCopy, Status};
use chat_worker::keys::{self, ChatItem, ChatKind, RequestKey};
use chat_worker::schema::Table;
use worker_engine::store::{DynamoStore, ItemReader, ItemWriter, local_client};
use worker_toolkit::cli::Command;
use worker_toolkit::cli::target::{AppTable, Target};

fn command(args: &[&str]) -> Command {
    let cli = worker_toolkit::cli::parse_from::<Chat, _, _>(args).expect("a valid command line");
    let worker_toolkit::cli::AppCommand::Toolkit(command) = cli.command;
    command
}

fn copy(key: RequestKey, status: Status) -> worker_engine::item::Item {
    RequestCopy {
        key: Some(key),
        id: "r1".into(),
        user_id: "u1".into(),
        chat_id: "g1".into(),
        created_at: "2024-05-30T12:00:00.000Z".into(),
        status,
        seen: false,
        pending_id: (status == Status::Pending).then(|| "p1".into()),
        status_reason: None,
        joined_at: None,
    }
    .to_item()
}

/// The user, the group chat and the request's two copies (the user's
/// pending, the chat's accepted) on the seed's tables: the acceptance and
/// the recount follow from them. Returns the pending copy's key and the
/// chat.
async fn seed_acceptance(client: &aws_sdk_dynamodb::Client) -> (RequestKey, ChatItem) {
    let store = |t: Table| DynamoStore::new(client.clone(), t.name()).with_key(t.schema().key);
    let mut user = keys::user("u1");
    user.insert(
        "Id".into(),
        aws_sdk_dynamodb::types::AttributeValue::S("u1".into()),
    );
    store(Table::Users).put(user, None).await.unwrap();
    let chat = ChatItem::Chat {
        kind: ChatKind::Group,
        chat: "g1".into(),
    };
    store(Table::GroupChats)
        .put(chat.key(), None)
        .await
        .unwrap();
    let [ku, kg] = RequestKey::copies(
        "u1",
        "g1",
        keys::parse_time("2024-05-30T12:00:00Z").unwrap(),
        "r1",
    );
    let requests = store(Table::ChatRequests);
    requests
        .put(copy(ku.clone(), Status::Pending), None)
        .await
        .unwrap();
    requests
        .put(copy(kg, Status::Accepted), None)
        .await
        .unwrap();
    (ku, chat)
}

/// The user's copy followed the chat's (accepted), the member was added
/// and the recount ran on the GroupChats stream.
async fn assert_acceptance_followed(
    client: &aws_sdk_dynamodb::Client,
    pending: &RequestKey,
    chat: &ChatItem,
) {
    let store = |t: Table| DynamoStore::new(client.clone(), t.name()).with_key(t.schema().key);
    let followed = RequestCopy::from_item(
        &store(Table::ChatRequests)
            .get(&pending.key(), true)
            .await
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(followed.status, Status::Accepted);
    let member = ChatItem::Member {
        kind: ChatKind::Group,
        chat: "g1".into(),
        user: "u1".into(),
    };
    assert!(
        store(Table::GroupChats)
            .get(&member.key(), true)
            .await
            .unwrap()
            .is_some()
    );
    // The count is the members'.
    let counted = store(Table::GroupChats)
        .get(&chat.key(), true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(counted[keys::NUM_MEMBERS].as_n().unwrap(), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_create_makes_six_tables_and_dev_follows_every_stream() {
    // The lent DynamoDB Local: the tables get the seed's names.
    let local = worker_testkit::lease_local().await;
    let endpoint = local.endpoint_url();
    let status = command(&[
        "chat-worker",
        "table",
        "create",
        "--endpoint-url",
        &endpoint,
    ])
    .run::<Chat>()
    .await
    .expect("table create");
    assert_eq!(status, ExitCode::SUCCESS);
    let client = local_client(&endpoint);
    let mut names = client
        .list_tables()
        .send()
        .await
        .expect("list tables")
        .table_names()
        .to_vec();
    names.sort();
    let mut expected: Vec<String> = Table::ALL.iter().map(|t| t.name().to_owned()).collect();
    expected.sort();
    assert_eq!(names, expected);

    let store = |t: Table| DynamoStore::new(client.clone(), t.name()).with_key(t.schema().key);
    let (ku, chat) = seed_acceptance(&client).await;
    let requests = store(Table::ChatRequests);

    let status = command(&[
        "chat-worker",
        "dev",
        "--endpoint-url",
        &endpoint,
        "--until-idle",
        "--starting-position",
        "trim-horizon",
    ])
    .run::<Chat>()
    .await
    .expect("dev");
    assert_eq!(status, ExitCode::SUCCESS);
    assert_acceptance_followed(&client, &ku, &chat).await;

    // The same acceptance in a dry run: refused, nothing written.
    let target = Target::connect(
        &endpoint,
        Table::ChatRequests.name(),
        &AppTable::of::<Chat>(),
    )
    .await;
    let (worker, dry) = worker_toolkit::cli::replay::worker::<Chat>(&target, None, true, &[])
        .expect("a dry-run worker");
    assert!(dry.is_some());
    let other = RequestKey::copies("u1", "g1", ku.created, "r9");
    let mut accepted = copy(other[1].clone(), Status::Accepted);
    accepted.insert(
        "Id".into(),
        aws_sdk_dynamodb::types::AttributeValue::S("r9".into()),
    );
    requests.put(accepted, None).await.unwrap();
    let before = store(Table::GroupChats)
        .get(&chat.key(), true)
        .await
        .unwrap();
    let change = worker_engine::stream::StreamChange {
        event_id: "e1".into(),
        kind: worker_engine::stream::ChangeKind::Insert,
        sequence_number: Some("100".parse().unwrap()),
        approximate_creation: None,
        keys: other[1].key(),
        old_image: None,
        new_image: requests.get(&other[1].key(), true).await.unwrap(),
        event_source_arn: Some(
            format!(
                "arn:aws:dynamodb:ddblocal:000000000000:table/{}/stream/x",
                Table::ChatRequests.name()
            )
            .into(),
        ),
        size_bytes: None,
        typed: None,
    };
    let event = worker_engine::stream::encode_event(&[change], None);
    let report = worker.handle_stream(&event, None).await.expect("a batch");
    assert_eq!(report.rejected, 1, "{report:?}");
    assert_eq!(
        store(Table::GroupChats)
            .get(&chat.key(), true)
            .await
            .unwrap(),
        before
    );
    drop(local);
}

/// The workspace's root (where `infra/` is).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `chat-worker ARGS` in `dir`, the tables by their seed names.
fn chat_worker(dir: &Path, args: &[&str]) -> Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_chat-worker"));
    c.current_dir(dir)
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

/// infra/chat.yaml with the first `from` after `event:` replaced, as a file
/// in `dir`.
fn template_with(dir: &Path, edits: &[(&str, &str, &str)]) -> String {
    let mut text = std::fs::read_to_string(workspace().join("infra/chat.yaml")).unwrap();
    for (event, from, to) in edits {
        let at = text
            .find(&format!("{event}:"))
            .expect("the event is in the template");
        let i = at + text[at..].find(from).expect("the setting is in the event");
        text.replace_range(i..i + from.len(), to);
    }
    let path = dir.join("chat-edited.yaml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// `chat-worker dev --template infra/chat.yaml`: one loop follows the six
/// event sources of the template, each on its own table with its own
/// mapping, and the acceptance and the recount (records of two tables)
/// complete. A copy whose GroupChats source takes batches of 2 and whose
/// Notifications source starts at LATEST changes only those sources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_follows_every_event_source_of_the_template() {
    let local = worker_testkit::lease_local().await;
    let endpoint = local.endpoint_url();
    let dir = std::env::temp_dir().join(format!("chat-dev-sources-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = chat_worker(&dir, &["table", "create", "--endpoint-url", &endpoint]);
    assert!(o.status.success(), "{o:?}");
    let client = local_client(&endpoint);
    let (pending, chat) = seed_acceptance(&client).await;

    let dev = |template: &str| {
        let o = chat_worker(
            &dir,
            &[
                "dev",
                "--template",
                template,
                "--endpoint-url",
                &endpoint,
                "--until-idle",
                "--json",
            ],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let mapping_of = |v: &serde_json::Value, table: &str| {
        v["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["table"] == table)
            .unwrap_or_else(|| panic!("a source on {table}: {v}"))["mapping"]
            .clone()
    };
    let deployed = workspace().join("infra/chat.yaml").display().to_string();
    let v = dev(&deployed);
    let sources = v["sources"].as_array().unwrap();
    let mut tables: Vec<&str> = sources
        .iter()
        .map(|s| s["table"].as_str().unwrap())
        .collect();
    assert_eq!(tables[0], "ChatRequests", "the target table's first: {v}");
    tables.sort();
    let mut expected: Vec<&str> = Table::ALL.iter().map(|t| t.name()).collect();
    expected.sort();
    assert_eq!(tables, expected, "one source per table: {v}");
    for t in Table::ALL {
        let source = sources.iter().find(|s| s["table"] == t.name()).unwrap();
        assert_eq!(
            source["id"],
            format!("StreamFunction.{}Stream", t.name()),
            "{source}"
        );
        let m = &source["mapping"];
        assert_eq!(m["batchSize"], 100, "{m}");
        assert_eq!(m["batchingWindowSecs"], 1, "{m}");
        assert_eq!(m["maxRetries"], 10, "{m}");
        assert_eq!(m["maxRecordAgeSecs"], 21600, "{m}");
        assert_eq!(m["startingPosition"], "TRIM_HORIZON", "{m}");
        assert_eq!(m["failureFile"], "dev-failures.jsonl", "{m}");
        assert_eq!(m["timeoutSecs"], 120.0, "{m}");
    }
    assert!(!v["batches"].as_array().unwrap().is_empty(), "{v}");
    assert_acceptance_followed(&client, &pending, &chat).await;

    // From the workspace's root, infra/chat.yaml is the default.
    let o = chat_worker(
        &workspace(),
        &["dev", "--endpoint-url", &endpoint, "--until-idle", "--json"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["template"], "infra/chat.yaml", "{v}");
    assert_eq!(v["sources"].as_array().unwrap().len(), 6, "{v}");
    assert_eq!(v["mapping"]["batchSize"], 100, "{v}");

    let edited = template_with(
        &dir,
        &[
            ("GroupChatsStream", "BatchSize: 100", "BatchSize: 2"),
            (
                "NotificationsStream",
                "StartingPosition: TRIM_HORIZON",
                "StartingPosition: LATEST",
            ),
        ],
    );
    let v = dev(&edited);
    assert_eq!(mapping_of(&v, "GroupChats")["batchSize"], 2, "{v}");
    assert_eq!(mapping_of(&v, "Users")["batchSize"], 100, "{v}");
    assert_eq!(
        mapping_of(&v, "Notifications")["startingPosition"],
        "LATEST",
        "{v}"
    );
    assert_eq!(
        mapping_of(&v, "GroupChats")["startingPosition"],
        "TRIM_HORIZON",
        "{v}"
    );
    let _ = std::fs::remove_dir_all(dir);
    drop(local);
}
