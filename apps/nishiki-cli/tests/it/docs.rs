//! The documents and the program agree.
//!
//! - **Every command line** of the four CLIs written in a code block of
//!   `README.md`, `docs/*.md`, `events/README.md`, `events/*/README.md` and
//!   `apps/*/README.md` (`nishiki-worker ...`, `chat-worker ...`,
//!   `cargo run --bin X -- ...`, `cargo run -p X -- ...`, inside `eval
//!   "$(...)"` too) parses with that CLI's own parser: a renamed flag or
//!   subcommand fails here with the file and line.
//! - **Every `console` block** runs, in one shell per block (so `eval
//!   "$(nishiki-worker local start)"` carries into the next command), with
//!   the workspace's binaries first on `PATH`: each `$ command` must exit
//!   as written (`? N` on the line after it; 0 otherwise) and print what
//!   follows it (stdout and stderr together; `...` on a line of its own
//!   stands for any lines, `[..]` for any text within a line).
//! - **Every relative link** (`[text](path)`, `[text](path#anchor)`, images
//!   too) of every Markdown file of the repository leads to a file of the
//!   repository, and an anchor into a Markdown file to one of its headings
//!   (GitHub's anchors). A clone has nothing outside the repository, so no
//!   link leaves it (`../` above the root).
//!
//! Commands of other tools (`aws`, `sam`, `cargo`, `scripts/...`) are not
//! run: they need an AWS account or are the test suite itself.

use std::path::{Path, PathBuf};
use std::process::Command;

use worker_toolkit::cli::command;

fn root() -> PathBuf {
    crate::support::workspace()
}

/// The documents that show commands.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![root().join("README.md"), root().join("events/README.md")];
    for dir in ["docs", "events", "apps"] {
        let Ok(entries) = std::fs::read_dir(root().join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "md") && dir == "docs" {
                docs.push(path);
            } else if path.is_dir() && path.join("README.md").exists() {
                docs.push(path.join("README.md"));
            }
        }
    }
    docs.sort();
    docs
}

/// A fenced code block: its info string, first line number and lines.
struct Block {
    info: String,
    line: usize,
    lines: Vec<String>,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            match open.take() {
                Some(block) => out.push(block),
                None => {
                    open = Some(Block {
                        info: info.trim().to_owned(),
                        line: i + 2,
                        lines: Vec::new(),
                    })
                }
            }
        } else if let Some(block) = &mut open {
            block.lines.push(line.to_owned());
        }
    }
    out
}

/// The logical lines of a shell block (continuations joined), with the
/// line number each starts on.
fn commands(block: &Block) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in block.lines.iter().enumerate() {
        let line = raw.trim();
        let (start, mut text) = match pending.take() {
            Some((start, text)) => (start, format!("{text} {line}")),
            None => (block.line + i, line.to_owned()),
        };
        if let Some(joined) = text.strip_suffix('\\') {
            text = joined.trim_end().to_owned();
            pending = Some((start, text));
        } else {
            out.push((start, text));
        }
    }
    out
}

/// `text` without a trailing `# comment` (outside quotes).
fn without_comment(text: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b'#' if !single && !double && (i == 0 || bytes[i - 1] == b' ') => {
                return text[..i].trim_end();
            }
            _ => {}
        }
    }
    text
}

const APPS: [&str; 4] = [
    "nishiki-worker",
    "archive-worker",
    "chat-worker",
    "shop-worker",
];

/// The CLI and its arguments, if `line` runs one of the four.
fn invocation(line: &str) -> Option<(String, Vec<String>)> {
    let line = line.strip_prefix("$ ").unwrap_or(line);
    let line = without_comment(line);
    // eval "$(nishiki-worker local start)"
    let line = match line.strip_prefix("eval \"$(") {
        Some(rest) => rest.strip_suffix(")\"")?,
        None => line,
    };
    let tokens = shlex::split(line)?;
    let mut tokens = tokens.into_iter().skip_while(|t| {
        t.contains('=')
            && !t.starts_with('-')
            && t.split('=').next().is_some_and(|n| {
                n.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            })
    });
    let first = tokens.next()?;
    let rest: Vec<String> = tokens.collect();
    if APPS.contains(&first.as_str()) {
        return Some((first, rest));
    }
    if first == "cargo" && rest.first().is_some_and(|t| t == "run") {
        let dash = rest.iter().position(|t| t == "--")?;
        let opts = &rest[1..dash];
        let named = |flag: &str| {
            opts.iter()
                .position(|t| t == flag)
                .and_then(|i| opts.get(i + 1))
                .cloned()
        };
        // An app's binary is built by its command line's package
        // (`apps/<app>-cli`), not by the app's own (which builds only the
        // Lambda bootstraps): `-p archive-worker` runs nothing.
        let package = named("-p").or_else(|| named("--package"));
        if let Some(package) = &package {
            assert!(
                !APPS.contains(&package.as_str()),
                "`{line}`: package {package} has no command line binary; use --bin {package} or -p {}",
                package.replace("-worker", "-cli")
            );
        }
        let app = named("--bin")
            .or_else(|| package.map(|p| p.replace("-cli", "-worker")))
            .unwrap_or_else(|| "nishiki-worker".to_owned());
        return APPS
            .contains(&app.as_str())
            .then(|| (app, rest[dash + 1..].to_vec()));
    }
    None
}

fn parser(app: &str) -> clap::Command {
    match app {
        "nishiki-worker" => command::<nishiki_cli::Nishiki>(),
        "archive-worker" => command::<archive_cli::Archive>(),
        "chat-worker" => command::<chat_cli::Chat>(),
        "shop-worker" => command::<shop_cli::Shop>(),
        other => unreachable!("{other}"),
    }
}

#[test]
fn every_command_line_in_the_documents_parses() {
    let mut checked = 0;
    let mut problems = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(root()).unwrap().display().to_string();
        for block in blocks(&text) {
            if !matches!(block.info.as_str(), "sh" | "console" | "bash" | "") {
                continue;
            }
            for (line, command) in commands(&block) {
                let Some((app, args)) = invocation(&command) else {
                    continue;
                };
                checked += 1;
                let argv = std::iter::once(app.clone()).chain(args);
                if let Err(e) = parser(&app).try_get_matches_from(argv) {
                    use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
                    if !matches!(e.kind(), DisplayHelp | DisplayVersion) {
                        let first = e.to_string().lines().next().unwrap_or("").to_owned();
                        problems.push(format!("{name}:{line}: `{command}`: {first}"));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        checked >= 15,
        "the documents show the CLIs ({checked} command lines found)"
    );
}

/// One `$ command` of a console block: what it must print and exit with.
struct Step {
    line: usize,
    command: String,
    expected: String,
    code: i32,
}

fn steps(block: &Block) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    let mut continuing = false;
    for (i, raw) in block.lines.iter().enumerate() {
        if continuing {
            let step = out.last_mut().expect("a step");
            let line = raw.trim();
            continuing = line.ends_with('\\');
            step.command.push(' ');
            step.command
                .push_str(line.trim_end_matches('\\').trim_end());
        } else if let Some(command) = raw.strip_prefix("$ ") {
            continuing = command.ends_with('\\');
            out.push(Step {
                line: block.line + i,
                command: command.trim_end_matches('\\').trim_end().to_owned(),
                expected: String::new(),
                code: 0,
            });
        } else if let Some(step) = out.last_mut() {
            match raw.strip_prefix("? ") {
                Some(code) if step.expected.is_empty() => {
                    step.code = code.trim().parse().expect("? <exit status>")
                }
                _ => {
                    step.expected.push_str(raw);
                    step.expected.push('\n');
                }
            }
        }
    }
    out
}

/// The folder of the `nishiki-worker` binary this `cargo test` built.
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_nishiki-worker"))
        .parent()
        .expect("the binary's folder")
        .to_owned()
}

/// Run a console block's steps in one shell; the problems found.
fn run_block(name: &str, block: &Block) -> Vec<String> {
    let steps = steps(block);
    // Everything a command prints, stderr too (also inside `eval "$(...)"`).
    let mut script = String::from("exec 2>&1\n");
    for (i, step) in steps.iter().enumerate() {
        script.push_str(&format!(
            "printf '\\n@@step {i}\\n'\n{} 2>&1\nprintf '\\n@@exit %s\\n' \"$?\"\n",
            step.command
        ));
    }
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("bash")
        .args(["-c", &script])
        .current_dir(root())
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_ENDPOINT_URL_DYNAMODB")
        .env_remove("DYNAMODB_ENDPOINT_URL")
        .output()
        .expect("bash");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut problems = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let start = format!("\n@@step {i}\n");
        let Some(from) = text.find(&start).map(|p| p + start.len()) else {
            problems.push(format!(
                "{name}:{}: `{}` did not run",
                step.line, step.command
            ));
            continue;
        };
        let rest = &text[from..];
        let end = rest.find("\n@@exit ").unwrap_or(rest.len());
        let printed = &rest[..end];
        let code: i32 = rest[end..]
            .strip_prefix("\n@@exit ")
            .and_then(|r| r.lines().next())
            .and_then(|c| c.trim().parse().ok())
            .unwrap_or(-1);
        if code != step.code {
            problems.push(format!(
                "{name}:{}: `{}` exited {code}, the document says {}:\n{printed}",
                step.line, step.command, step.code
            ));
            continue;
        }
        let expected = snapbox::Data::text(step.expected.trim_end().to_owned());
        let actual = snapbox::Data::text(printed.trim().to_owned());
        if let Err(e) = snapbox::Assert::new().try_eq(None, actual, expected) {
            problems.push(format!(
                "{name}:{}: `{}` printed something else:\n{e}",
                step.line, step.command
            ));
        }
    }
    problems
}

#[test]
fn every_console_block_of_the_documents_runs_as_written() {
    // The blocks show a machine where DynamoDB Local is installed: its
    // first use prints one more line, the install's (README.md says so).
    // Installed here first, so that this test may be the first to use it.
    worker_toolkit::local::ensure_installed(&worker_toolkit::local::default_install_dir())
        .expect("DynamoDB Local installs");
    let mut ran = 0;
    let mut problems = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(root()).unwrap().display().to_string();
        for block in blocks(&text).iter().filter(|b| b.info == "console") {
            ran += 1;
            problems.extend(run_block(&name, block));
        }
    }
    // A walkthrough that failed half-way must not leave its DynamoDB Local.
    let _ = crate::support::nishiki_worker()
        .args(["local", "stop"])
        .output();
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    assert!(ran >= 2, "the documents' console blocks ({ran} found)");
}

/// Every Markdown file of the repository, hidden folders and `target`
/// left out.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if name.starts_with('.') || name == "target" {
                continue;
            }
            if kind.is_dir() {
                walk(&entry.path(), out);
            } else if name.ends_with(".md") {
                out.push(entry.path());
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out.sort();
    out
}

/// The lines of `text` outside fenced code blocks, with their numbers, and
/// inline code (which may run on to the next line of its paragraph)
/// blanked out.
fn prose(text: &str) -> Vec<(usize, String)> {
    let (mut fenced, mut code) = (false, false);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if line.trim().is_empty() {
            code = false;
        }
        let mut kept = String::with_capacity(line.len());
        for c in line.chars() {
            if c == '`' {
                code = !code;
            }
            kept.push(if code || c == '`' { ' ' } else { c });
        }
        out.push((i + 1, kept));
    }
    out
}

/// The targets of a document's links (`[text](target)`, `![alt](target)`),
/// with the line each is on.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (line, prose) in prose(text) {
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest
                .find(|c: char| c == ')' || c.is_whitespace())
                .unwrap_or(rest.len());
            let target = rest[..end].trim_start_matches('<').trim_end_matches('>');
            out.push((line, target.to_owned()));
            rest = &rest[end..];
        }
    }
    out
}

/// A heading's text, if `line` is one (`## Text`).
fn heading(line: &str) -> Option<&str> {
    let level = line.len() - line.trim_start_matches('#').len();
    let rest = &line[level..];
    ((1..=6).contains(&level) && (rest.is_empty() || rest.starts_with(' ')))
        .then(|| rest.trim().trim_end_matches('#').trim_end())
}

/// GitHub's anchor of a heading: lower case, spaces as `-`, punctuation
/// dropped.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a document's headings, a repeated one numbered as
/// GitHub does (`-1`, `-2`, ...).
fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let Some(text) = heading(line).filter(|_| !fenced) else {
            continue;
        };
        let base = slug(text);
        let mut anchor = base.clone();
        let mut n = 0;
        while out.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        out.push(anchor);
    }
    out
}

/// Where `path`, a link of `doc` (both relative to the root), leads,
/// relative to the root; `None` when it leaves the repository.
fn resolve(doc: &Path, path: &str) -> Option<PathBuf> {
    if path.is_empty() {
        return Some(doc.to_owned());
    }
    // `/path` starts from the root, as GitHub reads it.
    let from = if path.starts_with('/') {
        None
    } else {
        doc.parent()
    };
    let mut parts: Vec<String> = from
        .into_iter()
        .flat_map(Path::components)
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part.to_owned()),
        }
    }
    Some(parts.iter().collect())
}

/// Whether a relative link of `doc` leads to a file of the repository
/// and, with an anchor into a Markdown file, to one of its headings.
fn check_link(doc: &Path, target: &str) -> Result<(), String> {
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let file = resolve(doc, path).ok_or("it leaves the repository")?;
    let full = root().join(&file);
    if !full.exists() {
        return Err(format!("{} does not exist", file.display()));
    }
    let markdown = file.extension().is_some_and(|e| e == "md");
    if let Some(anchor) = anchor.filter(|_| markdown) {
        let text = std::fs::read_to_string(&full).map_err(|e| e.to_string())?;
        if !anchors(&text).iter().any(|a| a == anchor) {
            return Err(format!("{} has no heading #{anchor}", file.display()));
        }
    }
    Ok(())
}

#[test]
fn every_link_of_the_documents_resolves_inside_the_repository() {
    let mut checked = 0;
    let mut problems = Vec::new();
    for doc in markdown_files() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(root()).unwrap();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            if let Err(problem) = check_link(name, &target) {
                let name = name.display();
                problems.push(format!("{name}:{line}: ({target}): {problem}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        checked >= 50,
        "the documents link each other ({checked} links found)"
    );
}

#[test]
fn the_link_reader_sees_targets_and_anchors() {
    let text = "# A title\n\nSee [x](docs/A.md#b-c), ![p](<p.svg>) and `[no](link)`\n`[no](link\nacross)` lines.\n```sh\n[no](link)\n# not a heading\n```\n## B: c\n## B: c\n";
    assert_eq!(
        links(text),
        [(3, "docs/A.md#b-c".to_owned()), (3, "p.svg".to_owned())]
    );
    assert_eq!(anchors(text), ["a-title", "b-c", "b-c-1"]);
    assert_eq!(
        slug("Migrating the live table (the service's CDK stack)"),
        "migrating-the-live-table-the-services-cdk-stack"
    );
    assert_eq!(heading("#3 REMOVE"), None);
    let doc = Path::new("apps/chat/README.md");
    assert_eq!(
        resolve(doc, "../../docs/A.md"),
        Some(PathBuf::from("docs/A.md"))
    );
    assert_eq!(resolve(doc, ""), Some(doc.to_owned()));
    assert_eq!(resolve(doc, "../../../shared/seeds/x.txt"), None);
}

#[test]
fn the_block_reader_sees_commands_and_outputs() {
    let text = "text\n```console\n$ nishiki-worker run audit \\\n    --now 2024-03-25T09:00:00Z\n? 3\nran audit[..]\n...\n```\n";
    let bs = blocks(text);
    assert_eq!(bs.len(), 1);
    let steps = steps(&bs[0]);
    assert_eq!(steps.len(), 1);
    assert_eq!(
        steps[0].command,
        "nishiki-worker run audit --now 2024-03-25T09:00:00Z"
    );
    assert_eq!(steps[0].code, 3);
    assert_eq!(steps[0].expected, "ran audit[..]\n...\n");
    assert_eq!(
        invocation("eval \"$(nishiki-worker local start)\"  # comment"),
        Some((
            "nishiki-worker".into(),
            vec!["local".into(), "start".into()]
        ))
    );
    assert_eq!(
        invocation("cargo run -p chat-cli -- replay x.json").map(|(a, _)| a),
        Some("chat-worker".into())
    );
    assert_eq!(
        invocation("cargo run --bin chat-worker -- replay x.json").map(|(a, _)| a),
        Some("chat-worker".into())
    );
    let rules_package =
        std::panic::catch_unwind(|| invocation("cargo run -p chat-worker -- replay x.json"));
    assert!(
        rules_package.is_err(),
        "the app's own package has no command line binary"
    );
    assert_eq!(
        invocation("T=t nishiki-worker run audit").map(|(_, args)| args),
        Some(vec!["run".into(), "audit".into()])
    );
    assert_eq!(invocation("aws dynamodb scan --table-name t"), None);
}
