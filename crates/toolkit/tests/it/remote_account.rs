//! `--allow-remote-writes` names the account before the first write: the
//! account STS GetCallerIdentity answers for the command's credentials,
//! here moto's STS (`worker_testkit::moto`, account `123456789012`).
//!
//! How the command line decides: a write is remote when the DynamoDB
//! endpoint is not on this machine (`is_loopback`), and the account is
//! asked of STS only when that endpoint is AWS's own (`*.amazonaws.com`,
//! `is_aws`); for any other remote endpoint it prints `n/a`. So the line
//! with an account needs a DynamoDB endpoint at an AWS host name, which
//! this machine cannot reach (and must not try to). The real binary's
//! first DynamoDB request would go there, so it is not run here; instead
//! the function every writing command calls, `Target::announce_writes`,
//! runs in a process of its own (this test binary, re-run) whose
//! environment is the one the binary would have: moto's
//! `AWS_ENDPOINT_URL_STS`, region and credentials. `announce_writes`
//! sends nothing to DynamoDB (opening a `Target` with `connect_with`
//! sends nothing either), so the line it prints is the binary's, from the
//! SDK's own reading of the environment to the text on stderr.

use std::process::Command;

use worker_engine::schema::{DEFAULT_KEY, TableSchema};
use worker_testkit::moto;
use worker_toolkit::cli::target::{AppTable, AwsOpts, Target};

/// The child's marker: run the announcement, nothing else.
const CHILD: &str = "WORKER_TEST_ANNOUNCE_CHILD";
const AWS_ENDPOINT: &str = "https://dynamodb.us-east-1.amazonaws.com";
const TABLE: &str = "live-table";

fn app() -> AppTable {
    AppTable::single("test-worker", TableSchema::new(DEFAULT_KEY))
}

/// In the child: what a writing command does before its first write.
async fn announce() {
    let target = Target::connect_with(AWS_ENDPOINT, TABLE, &app(), &AwsOpts::default()).await;
    let d = target
        .announce_writes()
        .await
        .expect("an AWS endpoint is remote: announced");
    // A line of its own (the harness prints the test's name before it).
    println!("\n{}", serde_json::to_string(&d).expect("JSON"));
}

/// This test binary re-run as `test` alone, with only `env` (and the
/// child marker) in its environment: (stdout, stderr).
fn child(test: &str, env: &[(&str, String)]) -> (String, String) {
    // The harness names a test by its path below the crate (`module::test`).
    let test = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_owned(),
    };
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args([&test, "--exact", "--nocapture", "--test-threads=1"])
        .env_clear()
        .env(CHILD, "1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        // No profile of this machine's user is read.
        .env("AWS_CONFIG_FILE", "/nonexistent/aws-config")
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/aws-credentials",
        );
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "child failed: {stdout}\n{stderr}");
    (stdout, stderr)
}

/// The `writing to table ...` line of a child's stderr.
fn announced(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.starts_with("writing to table "))
        .unwrap_or_else(|| panic!("no announcement on stderr: {stderr}"))
}

#[tokio::test]
async fn remote_writes_name_the_account_sts_answers_for() {
    if std::env::var_os(CHILD).is_some() {
        return announce().await;
    }
    let moto = moto::moto().await;
    let (stdout, stderr) = child(
        "remote_writes_name_the_account_sts_answers_for",
        &moto.env(),
    );
    assert_eq!(
        announced(&stderr),
        format!(
            "writing to table {TABLE} at {AWS_ENDPOINT} (account {}, region {})",
            moto::ACCOUNT,
            moto::REGION
        )
    );
    assert_eq!(moto::ACCOUNT, "123456789012");
    let d: serde_json::Value = stdout
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no destination on stdout: {stdout}"));
    assert_eq!(d["account"], moto::ACCOUNT);
}

/// STS not answering does not stop the command: the account is unknown,
/// and the line says why.
#[tokio::test]
async fn an_unanswered_account_check_says_why() {
    if std::env::var_os(CHILD).is_some() {
        return announce().await;
    }
    // A loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env = [
        ("AWS_ENDPOINT_URL_STS", format!("http://127.0.0.1:{port}")),
        ("AWS_REGION", "eu-west-1".to_owned()),
        ("AWS_ACCESS_KEY_ID", "test".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
    ];
    let (_, stderr) = child("an_unanswered_account_check_says_why", &env);
    let line = announced(&stderr);
    assert!(
        line.starts_with(&format!(
            "writing to table {TABLE} at {AWS_ENDPOINT} (account unknown (STS GetCallerIdentity failed: "
        )),
        "{line}"
    );
    assert!(line.ends_with(", region eu-west-1)"), "{line}");
}

/// A DynamoDB that is remote but not AWS's has no account: STS is not
/// asked (its endpoint, a listener here, is never contacted).
#[tokio::test]
async fn a_remote_endpoint_that_is_not_aws_asks_no_account() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let sts = format!("http://{}", listener.local_addr().unwrap());
    let config = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(&sts)
        .http_client(worker_engine::aws::https_client())
        .build();
    // TEST-NET-1: never contacted (opening the target sends nothing).
    let target = Target::connect("http://192.0.2.1:8000", TABLE, &app()).await;
    let d = target.write_destination(&config).await;
    assert_eq!(
        d.to_string(),
        format!(
            "writing to table {TABLE} at http://192.0.2.1:8000 (account n/a (not an AWS endpoint), region us-east-1)"
        )
    );
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("STS was asked: {other:?}"),
    }
}
