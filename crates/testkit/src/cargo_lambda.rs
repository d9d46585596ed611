//! An app's Lambda functions the way a Rust Lambda developer runs them:
//! `cargo lambda watch` at the repository root serves every function of
//! the workspace, and `cargo lambda invoke <function> --data-file
//! <fixture>` hands one an event. [`invoke_fixtures`] does that for
//! fixtures of an app's manifest and checks the answer and the table
//! against the fixture's golden.
//!
//! cargo-lambda is pinned ([`CARGO_LAMBDA_VERSION`]) and installed on
//! first use, as DynamoDB Local and moto are: a plain `cargo test` on a
//! fresh machine needs nothing installed beforehand.
//! The functions reach the table through the SDK's own variable
//! (`AWS_ENDPOINT_URL_DYNAMODB`) and run on the fixture's clock
//! (`WORKER_NOW`).

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use worker_engine::stream::decode_event;
use worker_toolkit::cli::CliApp;
use worker_toolkit::cli::target::{AppTable, Target};
use worker_toolkit::replay::apply;
use worker_toolkit::replay::snapshot::{load_items, read_snapshot};

/// The workspace root (this crate is `crates/testkit`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The cargo-lambda release the tests run (bump on purpose; `scripts/package`
/// builds the bundles with the same one).
pub const CARGO_LAMBDA_VERSION: &str = "1.9.2";
/// Variable naming the virtual environment cargo-lambda is installed into.
pub const DIR_ENV: &str = "CARGO_LAMBDA_DIR";

/// `cargo-lambda` [`CARGO_LAMBDA_VERSION`], installed on first use (PyPI,
/// into `$CARGO_LAMBDA_DIR`, else the workspace's `.cache/cargo-lambda`,
/// where `scripts/package` finds it too). Panics with what to install when
/// it cannot be.
pub fn cargo_lambda() -> PathBuf {
    static INSTALLED: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let installed = INSTALLED.get_or_init(|| {
        let dir = std::env::var_os(DIR_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::venv::cache_dir("cargo-lambda"));
        crate::venv::ensure(&dir, &format!("cargo-lambda=={CARGO_LAMBDA_VERSION}"))
            .map(|()| dir.join("bin").join("cargo-lambda"))
            .map_err(|reason| {
                format!(
                    "cannot install cargo-lambda=={CARGO_LAMBDA_VERSION} into {}: {reason}; it needs \
                     python3 with venv and pip (Debian: `apt-get install python3-venv`) and PyPI",
                    dir.display()
                )
            })
    });
    match installed {
        Ok(path) => path.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// `cmd` without the variables `cargo test` sets for the running test
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, `OUT_DIR`, ...): `cargo lambda
/// watch` runs `cargo run`, whose build scripts would see them (ring's
/// tracks `CARGO_MANIFEST_DIR`) and build again what `cargo test` built.
/// The watch then sees the environment a developer's shell has.
fn without_test_env(cmd: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else {
            continue;
        };
        let set_by_cargo_test = name == "OUT_DIR"
            || name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_")
            || matches!(
                name,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
            );
        if set_by_cargo_test {
            cmd.env_remove(name);
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `cargo lambda watch` on a port of its own, stopped on drop.
pub struct Watch {
    child: Child,
    port: u16,
}

impl Watch {
    /// Start it at the workspace root with `env` for every function.
    pub fn start(env: &[(String, String)]) -> Watch {
        let port = free_port();
        let mut cmd = Command::new(cargo_lambda());
        cmd.arg("lambda")
            .args(["watch", "--ignore-changes", "--quiet"])
            .args(["--invoke-address", "127.0.0.1"])
            .args(["--invoke-port", &port.to_string()])
            .current_dir(root())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        for (k, v) in env {
            cmd.args(["--env-var", &format!("{k}={v}")]);
        }
        without_test_env(&mut cmd);
        let child = cmd.spawn().expect("start cargo lambda watch");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "cargo lambda watch did not listen on {port} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Watch { child, port }
    }

    /// `cargo lambda invoke <function> --data-file <file>`: its output.
    pub fn invoke(&self, function: &str, file: &Path) -> Output {
        Command::new(cargo_lambda())
            .arg("lambda")
            .args(["invoke", function, "--output-format", "json"])
            .args(["--invoke-address", "127.0.0.1"])
            .args(["--invoke-port", &self.port.to_string()])
            .arg("--data-file")
            .arg(file)
            .current_dir(root())
            .output()
            .expect("run cargo lambda invoke")
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // The whole group: cargo-lambda, `cargo run` and the functions.
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// Which function serves an event file: the stream function for a
/// DynamoDB Streams event (`Records`), the schedule function otherwise.
pub struct Functions<'a> {
    /// The stream function's binary name, as `cargo lambda watch` serves
    /// it (e.g. `chat-stream`).
    pub stream: &'a str,
    /// The schedule function's binary name (e.g. `chat-schedule`).
    pub schedule: &'a str,
}

/// One entry of a manifest as this check reads it (the apps' manifests
/// differ in what they may leave out: no snapshot, `applyWrites` implied).
struct Entry {
    events: Vec<String>,
    snapshot: Option<String>,
    now: String,
    apply_writes: bool,
    golden: String,
}

fn entry(dir: &Path, name: &str) -> Entry {
    let path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let manifest: Value = serde_json::from_str(&text).expect("the manifest is JSON");
    let f = manifest["fixtures"]
        .as_array()
        .and_then(|fs| fs.iter().find(|f| f["name"] == name))
        .unwrap_or_else(|| panic!("no fixture {name} in {}", path.display()));
    let text = |k: &str| f[k].as_str().map(str::to_owned);
    Entry {
        events: f["events"]
            .as_array()
            .expect("events")
            .iter()
            .map(|e| e.as_str().expect("a file").to_owned())
            .collect(),
        snapshot: text("snapshot"),
        now: text("now").expect("now"),
        apply_writes: f["applyWrites"].as_bool().unwrap_or(true),
        golden: text("golden").expect("golden"),
    }
}

/// For each named fixture of `dir/manifest.json`: fresh tables on the
/// test process's lent DynamoDB Local ([`crate::lease_local`]) holding the fixture's snapshot, and
/// `cargo lambda watch` with the app's variables (`table_var` names the
/// target table, the other tables their own variables). Then each of the
/// fixture's event files in order: the service's own writes of a stream
/// event (with `applyWrites`), and `cargo lambda invoke` of the function
/// that serves it. Every answer must report no failure and a complete job,
/// and the table must end equal to the fixture's golden.
pub async fn invoke_fixtures<A: CliApp>(
    dir: &Path,
    table_var: &str,
    functions: Functions<'_>,
    names: &[&str],
) {
    let app = AppTable::of::<A>();
    let mut problems = Vec::new();
    for name in names {
        let f = entry(dir, name);
        let tables = FixtureTables::create::<A>(&app, dir, &f).await;
        let watch = Watch::start(&tables.env(table_var, &f.now));
        for file in &f.events {
            let event = Invocation {
                dir,
                file,
                fixture: name,
                apply_writes: f.apply_writes,
            };
            problems.extend(event.run(&tables.target, &watch, &functions).await);
        }
        drop(watch);
        let after = crate::fixtures::tables_text(&tables.target).await;
        let golden = std::fs::read_to_string(dir.join(&f.golden)).expect("the golden");
        if after != golden {
            problems.push(format!(
                "{name}: the table differs from {}:\n{after}",
                f.golden
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A fixture's tables: the app's, by their default names (as the
/// fixture's golden has them), fresh on the lent DynamoDB Local (not the
/// shared one), holding the fixture's snapshot. Dropped in this order: the
/// target, the table, the lease.
struct FixtureTables {
    target: Target,
    table: crate::TestTable,
    _local: crate::LocalLease,
}

impl FixtureTables {
    /// The tables of app `A` for fixture `f` of `dir`.
    async fn create<A: CliApp>(app: &AppTable, dir: &Path, f: &Entry) -> Self {
        let local = crate::lease_local().await;
        let table =
            crate::TestTable::create(&local.endpoint_url(), A::DEFAULT_TABLE, &A::schema()).await;
        let target = Target::connect(&table.endpoint, &table.name, app).await;
        for o in &target.others {
            o.store
                .create_table(&o.table.schema)
                .await
                .expect("create table");
        }
        if let Some(snapshot) = &f.snapshot {
            let items = read_snapshot(&dir.join(snapshot), app.keys()).expect("the snapshot");
            load_items(target.store.clone(), items, 4, None)
                .await
                .expect("load the snapshot");
        }
        FixtureTables {
            target,
            table,
            _local: local,
        }
    }

    /// The functions' variables: `table_var` the target table, the other
    /// tables their own, the SDK's endpoint, the clock at `now`.
    fn env(&self, table_var: &str, now: &str) -> Vec<(String, String)> {
        let mut env = vec![
            (table_var.to_owned(), self.table.name.clone()),
            (
                "AWS_ENDPOINT_URL_DYNAMODB".to_owned(),
                self.table.endpoint.clone(),
            ),
            ("WORKER_NOW".to_owned(), now.to_owned()),
        ];
        env.extend(
            self.target
                .others
                .iter()
                .map(|o| (o.table.var.to_owned(), o.name.clone())),
        );
        env
    }
}

/// One event file of a fixture, handed to the function that serves it.
struct Invocation<'a> {
    dir: &'a Path,
    /// The event file, in `dir`.
    file: &'a str,
    /// The fixture's name.
    fixture: &'a str,
    /// Whether the service's own writes of a stream event are applied first.
    apply_writes: bool,
}

impl Invocation<'_> {
    /// The service's writes (a stream event, with `applyWrites`), then
    /// `cargo lambda invoke`: what went wrong, if anything.
    async fn run(
        &self,
        target: &Target,
        watch: &Watch,
        functions: &Functions<'_>,
    ) -> Option<String> {
        let path = self.dir.join(self.file);
        let event: Value =
            serde_json::from_slice(&std::fs::read(&path).expect("the event")).expect("JSON");
        let stream = event.get("Records").is_some();
        if stream && self.apply_writes {
            let decoded = decode_event(&event).expect("a stream event");
            let plan = apply::plan(&decoded);
            worker_toolkit::cli::tables::apply_by_table(
                target.store.as_ref(),
                &target.others,
                &decoded,
                &plan,
            )
            .await
            .expect("the service's writes");
        }
        let function = if stream {
            functions.stream
        } else {
            functions.schedule
        };
        let out = watch.invoke(function, &path);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let what = format!("{}: {} via {function}", self.fixture, self.file);
        if !out.status.success() {
            return Some(format!(
                "{what}: cargo lambda invoke failed ({}): {stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        match serde_json::from_str::<Value>(stdout.trim()) {
            Err(e) => Some(format!("{what}: the answer is not JSON ({e}): {stdout}")),
            Ok(answer) if stream => (answer["batchItemFailures"] != Value::Array(Vec::new()))
                .then(|| format!("{what}: records failed: {answer}")),
            Ok(answer) => (answer["complete"] != Value::Bool(true))
                .then(|| format!("{what}: the job did not complete: {answer}")),
        }
    }
}
