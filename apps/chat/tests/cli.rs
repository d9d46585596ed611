//! The `chat-worker` command line, parsed as `main` parses it and run
//! through the engine's command functions on a DynamoDB Local of its own:
//! `table create` makes the six tables, `dev --until-idle` follows all six
//! streams, and a dry run refuses the acceptance's transaction instead of
//! writing.

use std::process::ExitCode;

use chat_worker::cli::{Chat, parse_from};
use chat_worker::items::{RequestCopy, Status};
use chat_worker::keys::{self, ChatItem, ChatKind, RequestKey};
use chat_worker::schema::Table;
use worker_engine::cli::Command;
use worker_engine::cli::target::{AppTable, Target};
use worker_engine::store::{DynamoStore, ItemReader, ItemWriter, local_client};

fn command(args: &[&str]) -> Command {
    parse_from(args).expect("a valid command line").command
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_create_makes_six_tables_and_dev_follows_every_stream() {
    // Its own DynamoDB Local: the tables get the seed's names.
    let local = worker_engine::local::start().await.expect("DynamoDB Local");
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
    let followed =
        RequestCopy::from_item(&requests.get(&ku.key(), true).await.unwrap().unwrap()).unwrap();
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
    // The recount ran on the GroupChats stream: the count is the members'.
    let counted = store(Table::GroupChats)
        .get(&chat.key(), true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(counted[keys::NUM_MEMBERS].as_n().unwrap(), "1");

    // The same acceptance in a dry run: refused, nothing written.
    let target = Target::connect(
        &endpoint,
        Table::ChatRequests.name(),
        &AppTable::of::<Chat>(),
    )
    .await;
    let (worker, dry) = worker_engine::cli::replay::worker::<Chat>(&target, None, true, &[])
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
    let change = worker_engine::stream::decode::StreamChange {
        event_id: "e1".into(),
        kind: worker_engine::stream::decode::ChangeKind::Insert,
        sequence_number: Some("100".parse().unwrap()),
        approximate_creation: None,
        keys: other[1].key(),
        old_image: None,
        new_image: requests.get(&other[1].key(), true).await.unwrap(),
        event_source_arn: Some(format!(
            "arn:aws:dynamodb:ddblocal:000000000000:table/{}/stream/x",
            Table::ChatRequests.name()
        )),
        size_bytes: None,
    };
    let event = worker_engine::stream::decode::encode_event(&[change], None);
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
