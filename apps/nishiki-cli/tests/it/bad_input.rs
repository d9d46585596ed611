//! `nishiki-worker replay` on the bad-input corpus (`tests/bad_input/`):
//! bytes that are not JSON, or JSON that is not a stream event, are refused
//! in one line naming the file, exit status 1, with no personal data.

use crate::bad_input_corpus::*;
use worker_engine::schedule::is_schedule_event;

/// `nishiki-worker replay FILE` on a file that is not a stream event: a
/// one-line error naming the file, exit status 1, before any table is
/// touched. (A schedule event is not a stream event, but `replay` runs it
/// as the tick it is: left out here.)
#[test]
fn replay_names_the_bad_file_and_exits_1() {
    let cases = corpus();
    let private = all_private(&cases);
    for case in cases.iter().filter(|c| match c.class {
        Class::NotJson => true,
        Class::Envelope => !is_schedule_event(&value(c)),
        _ => false,
    }) {
        let path = dir().join(&case.file);
        let out = crate::support::nishiki_worker()
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .arg("replay")
            .arg(&path)
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", case.file);
        assert!(out.stdout.is_empty(), "{}", case.file);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{}: {stderr}", case.file);
        assert!(
            lines[0].starts_with("error: ") && lines[0].contains(&path.display().to_string()),
            "{}: {stderr}",
            case.file
        );
        if case.class == Class::NotJson {
            assert!(
                lines[0].contains("not JSON") || lines[0].contains("UTF-8"),
                "{}: {stderr}",
                case.file
            );
        }
        assert_private(&stderr, &private, &case.file);
    }
}
