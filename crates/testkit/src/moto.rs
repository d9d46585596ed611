//! A real local implementation of the AWS APIs the worker calls besides
//! DynamoDB: [moto](https://docs.getmoto.org/)'s server (PyPI
//! `moto[server]`), for SQS, S3, EventBridge and STS.
//!
//! Nothing here is a fake: the first use installs moto into a Python
//! virtual environment (like DynamoDB Local, [`worker_toolkit::local`]), then
//! starts `python -m moto.server` on a free loopback port. [`shared`] gives
//! every test of a process the same server (use unique queue, bucket and
//! bus names); [`start`] a private one, stopped when its handle drops. The
//! server never outlives the test process ([`worker_toolkit::local::Watched`]).
//!
//! # Environment
//!
//! * `MOTO_DIR`: the virtual environment (default: the workspace's
//!   git-ignored `.cache/moto`).
//! * `MOTO_ENDPOINT`: [`shared`] starts nothing and uses this server.
//!
//! moto's accounts are fixed: every request is account
//! [`ACCOUNT`], whatever the credentials.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

use worker_toolkit::local::{PortStart, Watched, http_answer, start_on_free_port};

/// The moto release the tests run against (bump on purpose).
pub const MOTO_VERSION: &str = "5.2.5";
/// Variable naming the virtual environment moto is installed into.
pub const DIR_ENV: &str = "MOTO_DIR";
/// Variable pointing [`shared`] at a moto server already running.
pub const ENDPOINT_ENV: &str = "MOTO_ENDPOINT";
/// The account moto answers for (`sts get-caller-identity`).
pub const ACCOUNT: &str = "123456789012";
/// The region the test kit's clients sign for.
pub const REGION: &str = "us-east-1";

const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A moto server: its endpoint and, when this process started it, the
/// process (stopped on drop).
#[derive(Debug)]
pub struct Moto {
    endpoint: String,
    log_path: PathBuf,
    _process: Option<Watched>,
}

impl Moto {
    /// `http://127.0.0.1:<port>`.
    pub fn endpoint_url(&self) -> &str {
        &self.endpoint
    }

    /// The server's log (empty for an external server).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// An SDK configuration for this server: region [`REGION`], dummy
    /// credentials, every service at [`Self::endpoint_url`].
    pub fn sdk_config(&self) -> aws_config::SdkConfig {
        aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(REGION))
            .credentials_provider(
                aws_credential_types::provider::SharedCredentialsProvider::new(
                    aws_credential_types::Credentials::new("moto", "moto", None, None, "moto"),
                ),
            )
            .endpoint_url(&self.endpoint)
            .http_client(worker_engine::aws::https_client())
            .build()
    }

    /// An SQS client of this server ([`Self::sdk_config`]).
    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.sdk_config())
    }

    /// Path-style addressing: `http://127.0.0.1:<port>/<bucket>/<key>`.
    pub fn s3(&self) -> aws_sdk_s3::Client {
        let config = aws_sdk_s3::config::Builder::from(&self.sdk_config())
            .force_path_style(true)
            .build();
        aws_sdk_s3::Client::from_conf(config)
    }

    /// An EventBridge client of this server ([`Self::sdk_config`]).
    pub fn eventbridge(&self) -> aws_sdk_eventbridge::Client {
        aws_sdk_eventbridge::Client::new(&self.sdk_config())
    }

    /// An STS client of this server ([`Self::sdk_config`]), for the
    /// account a command checks (`GetCallerIdentity`).
    pub fn sts(&self) -> aws_sdk_sts::Client {
        aws_sdk_sts::Client::new(&self.sdk_config())
    }

    /// The variables that send a child process's SQS, S3, EventBridge and
    /// STS clients here (the SDK's own `AWS_ENDPOINT_URL_<SERVICE>`), with
    /// the region and dummy credentials. DynamoDB's endpoint is left alone.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let e = || self.endpoint.clone();
        vec![
            ("AWS_ENDPOINT_URL_SQS", e()),
            ("AWS_ENDPOINT_URL_S3", e()),
            ("AWS_ENDPOINT_URL_EVENTBRIDGE", e()),
            ("AWS_ENDPOINT_URL_STS", e()),
            ("AWS_REGION", REGION.to_owned()),
            ("AWS_ACCESS_KEY_ID", "moto".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "moto".to_owned()),
        ]
    }
}

/// Why moto could not be installed or started; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum MotoError {
    #[error(
        "cannot install moto[server]=={MOTO_VERSION} into {dir}: {reason}; it needs python3 with \
         venv and pip (Debian: `apt-get install python3-venv`) and PyPI, or set {ENDPOINT_ENV} \
         to a moto server you run yourself"
    )]
    /// The virtual environment could not be made, or pip could not
    /// install moto into it.
    Install {
        /// The install folder ([`install_dir`]).
        dir: String,
        /// What failed: the command's error or its output.
        reason: String,
    },
    #[error("moto did not start: {reason} (log {log}: {tail})")]
    /// moto is installed but its server did not come up.
    Start {
        /// What failed (no free port, the process exited, no answer in
        /// time).
        reason: String,
        /// The server's log file (empty if none was made yet).
        log: String,
        /// The log's last lines, newest first, joined by ` | `.
        tail: String,
    },
}

/// Where moto is installed: `$MOTO_DIR`, else the workspace's `.cache/moto`.
pub fn install_dir() -> PathBuf {
    match std::env::var_os(DIR_ENV).filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => crate::venv::cache_dir("moto"),
    }
}

/// The virtual environment's Python, with moto installed (first use:
/// [`crate::venv::ensure`]).
pub fn ensure_installed(dir: &Path) -> Result<PathBuf, MotoError> {
    crate::venv::ensure(dir, &format!("moto[server]=={MOTO_VERSION}")).map_err(|reason| {
        MotoError::Install {
            dir: dir.display().to_string(),
            reason,
        }
    })?;
    Ok(dir.join("bin").join("python"))
}

/// A moto server of this process's own, on a free loopback port.
///
/// The port is free when chosen, but another process (a DynamoDB Local of
/// the test kit's pool, another test binary's moto) may bind it before
/// moto does; moto then exits, and the start is tried again on another port
/// (up to 3 attempts).
pub async fn start() -> Result<Moto, MotoError> {
    let dir = install_dir();
    let python = tokio::task::spawn_blocking(move || ensure_installed(&dir))
        .await
        .map_err(|e| MotoError::Install {
            dir: install_dir().display().to_string(),
            reason: e.to_string(),
        })??;
    let no_port = |e: io::Error| MotoError::Start {
        reason: format!("no free port: {e}"),
        log: String::new(),
        tail: String::new(),
    };
    start_on_free_port(
        "moto",
        || free_port().map_err(no_port),
        |port| start_on(&python, port),
    )
    .await
}

/// moto on `port`, once it answers there.
async fn start_on(python: &Path, port: u16) -> Result<Moto, PortStart<MotoError>> {
    let log_path =
        std::env::temp_dir().join(format!("worker-moto-{}-{port}.log", std::process::id()));
    let start_error = |reason: String, log_path: &Path| {
        let log = fs::read_to_string(log_path).unwrap_or_default();
        let err = MotoError::Start {
            reason,
            log: log_path.display().to_string(),
            tail: log.lines().rev().take(10).collect::<Vec<_>>().join(" | "),
        };
        if log.contains("Address already in use") {
            PortStart::Taken(err)
        } else {
            PortStart::Failed(err)
        }
    };
    let log = File::create(&log_path).map_err(|e| start_error(e.to_string(), &log_path))?;
    let args: Vec<OsString> = ["-m", "moto.server", "-H", "127.0.0.1", "-p"]
        .into_iter()
        .map(OsString::from)
        .chain([port.to_string().into()])
        .collect();
    let mut process = Watched::spawn(python, &args, &std::env::temp_dir(), log)
        .map_err(|reason| start_error(reason, &log_path))?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(why) = process.exited() {
            return Err(start_error(why, &log_path));
        }
        let up = tokio::task::spawn_blocking(move || http_probe(port))
            .await
            .is_ok_and(|r| r.is_ok());
        if up {
            break;
        }
        if Instant::now() >= deadline {
            return Err(start_error(
                format!(
                    "no answer on port {port} within {} s",
                    READY_TIMEOUT.as_secs()
                ),
                &log_path,
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(Moto {
        endpoint: format!("http://127.0.0.1:{port}"),
        log_path,
        _process: Some(process),
    })
}

/// The process-wide server, started on first use (or `$MOTO_ENDPOINT`).
pub async fn shared() -> Result<&'static Moto, MotoError> {
    static SHARED: tokio::sync::OnceCell<Moto> = tokio::sync::OnceCell::const_new();
    SHARED
        .get_or_try_init(|| async {
            match std::env::var(ENDPOINT_ENV) {
                Ok(endpoint) if !endpoint.trim().is_empty() => Ok(Moto {
                    endpoint: endpoint.trim().trim_end_matches('/').to_owned(),
                    log_path: PathBuf::new(),
                    _process: None,
                }),
                _ => start().await,
            }
        })
        .await
}

/// The shared server, or a test failure that says why.
pub async fn moto() -> &'static Moto {
    match shared().await {
        Ok(m) => m,
        Err(e) => panic!("{e}"),
    }
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// The server is up when `GET /moto-api/` answers with moto's dashboard.
/// Any HTTP answer is not enough: until moto binds its port, another
/// process that took it meanwhile (a DynamoDB Local) may answer there.
fn http_probe(port: u16) -> io::Result<()> {
    let request =
        format!("GET /moto-api/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if answers_as_moto(&http_answer(port, &request)?) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the port answers, but not as moto",
        ))
    }
}

/// `200 OK` and moto's dashboard page.
fn answers_as_moto(answer: &[u8]) -> bool {
    let text = String::from_utf8_lossy(answer);
    text.starts_with("HTTP/1.1 200") && text.contains("<title>Moto</title>")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port another server took before moto could bind it is told apart
    /// from moto's: moto exits on the port in use, and [`start`] tries
    /// another port, instead of handing out the other server's endpoint.
    #[tokio::test]
    async fn a_port_taken_by_another_server_is_not_taken_for_moto() {
        // Another HTTP server (a DynamoDB Local of the pool, as it answers).
        let port = crate::port_held_by(DYNAMODB_LOCAL_REFUSAL);
        let python = ensure_installed(&install_dir()).expect("moto installed");
        match start_on(&python, port).await {
            Err(PortStart::Taken(_)) => {}
            Err(PortStart::Failed(err)) => panic!("not seen as the port taken: {err}"),
            Ok(moto) => panic!("another server taken for moto at {}", moto.endpoint_url()),
        }
    }

    #[test]
    fn only_moto_s_dashboard_tells_that_moto_is_up() {
        assert!(answers_as_moto(MOTO_DASHBOARD.as_bytes()));
        assert!(!answers_as_moto(DYNAMODB_LOCAL_REFUSAL.as_bytes()));
        assert!(!answers_as_moto(
            b"HTTP/1.1 404 Not Found\r\n\r\n<title>Moto</title>"
        ));
        assert!(!answers_as_moto(b""));
    }

    /// moto's answer to `GET /moto-api/` (moto 5.2.5), shortened.
    const MOTO_DASHBOARD: &str = "HTTP/1.1 200 OK\r\nServer: Werkzeug/3.1.9 Python/3.11.7\r\n\
        Content-Type: text/html; charset=utf-8\r\nConnection: close\r\n\r\n\n<!DOCTYPE html>\n\
        <html lang=\"en\" data-bs-theme=\"light\">\n<head>\n  <title>Moto</title>\n</head>";
    /// DynamoDB Local's answer to the same request.
    const DYNAMODB_LOCAL_REFUSAL: &str = "HTTP/1.1 400 Bad Request\r\nServer: Jetty(12.0.31)\r\n\
        Content-Type: application/x-amz-json-1.0\r\nConnection: close\r\n\r\n\
        {\"__type\":\"com.amazonaws.dynamodb.v20120810#MissingAuthenticationToken\",\
        \"Message\":\"Request must contain either a valid (registered) AWS access key ID or X.509 certificate.\"}";

    /// The server answers each service the worker uses, as AWS would.
    #[tokio::test]
    async fn moto_serves_sqs_s3_eventbridge_and_sts() {
        let moto = moto().await;
        let who = moto.sts().get_caller_identity().send().await.unwrap();
        assert_eq!(who.account(), Some(ACCOUNT));

        let sqs = moto.sqs();
        let url = sqs
            .create_queue()
            .queue_name("testkit-probe")
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap();
        sqs.send_message()
            .queue_url(&url)
            .message_body("hello")
            .send()
            .await
            .unwrap();
        let got = sqs.receive_message().queue_url(&url).send().await.unwrap();
        assert_eq!(got.messages()[0].body(), Some("hello"));

        let s3 = moto.s3();
        s3.create_bucket()
            .bucket("testkit-probe")
            .send()
            .await
            .unwrap();
        s3.put_object()
            .bucket("testkit-probe")
            .key("a/b.json")
            .body(b"{}".to_vec().into())
            .send()
            .await
            .unwrap();
        let listed = s3
            .list_objects_v2()
            .bucket("testkit-probe")
            .send()
            .await
            .unwrap();
        assert_eq!(listed.contents()[0].key(), Some("a/b.json"));

        let buses = moto.eventbridge().list_event_buses().send().await.unwrap();
        assert!(
            buses
                .event_buses()
                .iter()
                .any(|b| b.name() == Some("default"))
        );
    }
}
