//! What every app's command line must hold, checked once: the app's
//! `-cli` package calls [`check_command_line`] and compares
//! [`local_crons`] with its jobs' schedules.

use worker_engine::schedule::JobName;
use worker_toolkit::cli::table::TableCommand;
use worker_toolkit::cli::target::{AppTable, Scope};
use worker_toolkit::cli::{AppCommand, CliApp, Command, command, dev, parse_from};

/// The app's command as clap checks it (`debug_assert`), every `--table`
/// falling back to the app's table at any depth (`run`, `table create`),
/// `run` refusing an unknown job with the app's job names, each example's
/// subcommand shown its example, and the app's template where its path
/// says (from the workspace's root).
pub fn check_command_line<A: CliApp>() {
    command::<A>().debug_assert();
    let job = A::Job::ALL[0].as_str();
    let cli = parse_from::<A, _, _>([A::NAME, "run", job]).expect("run JOB parses");
    let AppCommand::Toolkit(Command::Run(run)) = cli.command else {
        panic!("`{} run {job}` is the toolkit's run", A::NAME);
    };
    assert_eq!(
        target_table::<A>(&run.table.table),
        A::DEFAULT_TABLE,
        "run's --table"
    );
    let create = [
        A::NAME,
        "table",
        "create",
        "--endpoint-url",
        "http://127.0.0.1:1",
    ];
    let cli = parse_from::<A, _, _>(create).expect("table create parses");
    let AppCommand::Toolkit(Command::Table(table)) = cli.command else {
        panic!("`{} table create` is the toolkit's table", A::NAME);
    };
    let TableCommand::Create(create) = table.command else {
        panic!("table create");
    };
    assert_eq!(
        target_table::<A>(&create.endpoint.table),
        A::DEFAULT_TABLE,
        "a nested --table"
    );
    let e = parse_from::<A, _, _>([A::NAME, "run", "vacuum"])
        .expect_err("an unknown job is refused")
        .to_string();
    for j in A::Job::ALL {
        assert!(e.contains(j.as_str()), "{e}");
    }
    for (name, example) in A::examples() {
        let sub = command::<A>()
            .find_subcommand(&name)
            .unwrap_or_else(|| panic!("an example for `{name}`, which is no subcommand"))
            .clone();
        let help = sub.get_after_long_help().map(|h| h.to_string());
        assert!(
            help.is_some_and(|h| h.contains(&example)),
            "{name}'s example"
        );
    }
    if let Some(path) = A::TEMPLATE {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert!(root.join(path).is_file(), "{path}: the app's template");
    }
}

/// The target table a command of `A` names with these `--table` values.
fn target_table<A: CliApp>(values: &[String]) -> String {
    AppTable::of::<A>()
        .named(values, Scope::Every)
        .expect("the default --table names the tables")
        .1
}

/// Each job with its schedule in `dev` when no `--cron` overrides it.
pub fn local_crons<A: CliApp>() -> Vec<(String, String)> {
    dev::schedules::<A>(&[])
        .expect("the app's own schedules are valid")
        .into_iter()
        .map(|(job, cron, _)| (job, cron))
        .collect()
}
