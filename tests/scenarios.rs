//! `stepstone test` as a workflow author runs it: the example scenarios of
//! every language pass on virtual time (a day-long saga without waiting a
//! day); a wrong expectation, a build that would not replay, a workflow
//! that depends on which step finishes first, and a run that never ends
//! each fail their scenario saying why; JUnit XML is written; bad scenario
//! files are named with what is wrong.

use std::path::{Path, PathBuf};

use stepstone_e2e::{Host, Run, arg, guest, root};

/// Every scenario file in `examples-guests/{example}/scenarios/`.
fn scenarios_of(example: &str) -> Vec<PathBuf> {
    let folder = root().join("examples-guests").join(example).join("scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
        .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
        .map(|entry| entry.expect("a folder entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    files
}

/// `stepstone test ARGS FILES`.
fn test(host: &Host, args: &[&str], files: &[PathBuf]) -> Run {
    let mut all = vec!["test"];
    all.extend(args);
    all.extend(files.iter().map(|file| arg(file)));
    host.run(&all)
}

/// The report line of scenario `name`.
fn line<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find(|line| line.split_whitespace().nth(1) == Some(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no report of {name} in:\n{stdout}"))
}

/// A scenario file in `folder`.
fn write_scenario(folder: &Path, name: &str, text: &str) -> PathBuf {
    let path = folder.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("the scenario is written");
    path
}

#[test]
fn the_order_sagas_scenarios_pass_and_a_day_passes_at_once() {
    let host = Host::new();
    let junit = host.data_dir().join("junit.xml");
    let files = scenarios_of("order");
    let run = test(&host, &["--junit", arg(&junit)], &files).success();
    let stdout = run.stdout();
    for file in &files {
        let name = file.file_stem().and_then(|stem| stem.to_str()).expect("a name");
        assert!(line(&stdout, name).starts_with("PASS "), "{stdout}");
    }
    assert!(
        stdout.contains(&format!("{0} of {0} scenario runs passed", files.len())),
        "{stdout}"
    );
    let approved = line(&stdout, "approved-after-a-day");
    assert!(
        approved.contains("after 1day 30m"),
        "the day's sleep and half the approval hour: {approved}"
    );
    assert!(approved.contains("replayed identically"), "{approved}");
    let timed_out = line(&stdout, "approval-times-out");
    assert!(timed_out.contains("after 1day 1h"), "{timed_out}");
    let advanced = line(&stdout, "advanced-by-an-operator");
    assert!(advanced.contains("after 1h 30m"), "both waits cut short: {advanced}");
    let paused = line(&stdout, "paused-for-two-days");
    assert!(paused.contains("after 2days 1h"), "nothing ran while paused: {paused}");
    let xml = std::fs::read_to_string(&junit).expect("the JUnit report is written");
    assert!(
        xml.contains(&format!(
            r#"tests="{}" skipped="0" errors="0" failures="0""#,
            files.len()
        )),
        "{xml}"
    );
    assert!(xml.contains(r#"<testcase name="approved-after-a-day""#), "{xml}");
}

#[test]
fn the_python_javascript_c_and_fan_out_scenarios_pass() {
    let host = Host::new();
    let files: Vec<PathBuf> = ["py-workflow", "js-workflow", "c-workflow", "fanout"]
        .into_iter()
        .flat_map(scenarios_of)
        .collect();
    let run = test(&host, &[], &files).success();
    let stdout = run.stdout();
    assert_eq!(
        stdout.lines().filter(|line| line.starts_with("PASS ")).count(),
        files.len(),
        "{stdout}"
    );
}

#[test]
fn a_wrong_expectation_fails_its_scenario_naming_what_differs() {
    let host = Host::new();
    let scenario = write_scenario(
        host.data_dir(),
        "wrong",
        r#"
        workflow = "place-order"
        input = { order_id = "o-9", item = "book", amount_cents = 1200 }
        [[signals]]
        at = "3s"
        name = "approve"
        payload = { approved = true }
        [expect]
        output_contains = { tracking = "trk-o-1" }
        steps = [{ step = "reserve" }, { step = "charge", attempts = 1 }, { step = "ship" }]
        streams = { progress = [1] }
        "#,
    );
    let run = test(&host, &["--component", arg(&guest("order"))], &[scenario]);
    let stdout = run.stdout();
    assert!(!run.0.status.success(), "{stdout}");
    let report = &stdout[stdout.find("FAIL wrong:").unwrap_or_else(|| panic!("{stdout}"))..];
    assert!(
        report.contains(r#"expected the output to contain {"tracking":"trk-o-1"}"#),
        "{report}"
    );
    assert!(
        report.contains("expected `charge` to take 1 attempts, it took 2"),
        "{report}"
    );
    assert!(
        report.contains("expected stream `progress` to hold [1], got []"),
        "{report}"
    );
    assert!(stdout.contains("0 of 1 scenario runs passed"), "{stdout}");
}

#[test]
fn a_build_that_would_not_replay_fails_at_its_first_divergence() {
    let host = Host::new();
    let approved = root().join("examples-guests/order/scenarios/approved-after-a-day.toml");
    let run = test(&host, &["--replay-with", arg(&guest("order-reordered"))], &[approved]);
    let stdout = run.stdout();
    assert!(!run.0.status.success(), "{stdout}");
    let report = line(&stdout, "approved-after-a-day");
    assert!(report.starts_with("FAIL "), "{stdout}");
    assert!(
        stdout.contains("diverged at seq 0: non-determinism at seq 0: the journal recorded step `reserve`"),
        "{stdout}"
    );
    assert!(
        stdout.contains("but the workflow now asks for step `charge`"),
        "{stdout}"
    );
    assert!(stdout.contains("runs in flight would fail on that build"), "{stdout}");
}

#[test]
fn a_change_behind_a_patch_marker_replays_every_scenario_and_the_same_change_unguarded_does_not() {
    let host = Host::new();
    let files = scenarios_of("order");
    let patched = test(&host, &["--replay-with", arg(&guest("order-patched"))], &files).success();
    assert!(
        patched
            .stdout()
            .contains(&format!("{0} of {0} scenario runs passed", files.len())),
        "{}",
        patched.stdout()
    );
    let unguarded = test(&host, &["--replay-with", arg(&guest("order-fraud-check"))], &files);
    let stdout = unguarded.stdout();
    assert!(!unguarded.0.status.success(), "{stdout}");
    assert!(
        line(&stdout, "approved-after-a-day").starts_with("FAIL "),
        "the fraud check comes where the journal has `charge`: {stdout}"
    );
    assert!(stdout.contains("diverged at seq 1"), "{stdout}");
    assert!(
        line(&stdout, "payment-declined").starts_with("FAIL "),
        "every scenario that got past `reserve` diverges: {stdout}"
    );
}

#[test]
fn shuffled_completions_catch_a_workflow_that_takes_the_first_step_to_finish() {
    let host = Host::new();
    let first_of = write_scenario(
        host.data_dir(),
        "first-of",
        r#"
        workflow = "first-of"
        input = { items = [1, 2, 3] }
        [expect]
        output = { index = 0, square = 1 }
        "#,
    );
    let fan_out = root().join("examples-guests/fanout/scenarios/fan-out.toml");
    let run = test(
        &host,
        &["--component", arg(&guest("fanout")), "--shuffle-completions=4"],
        &[first_of, fan_out],
    );
    let stdout = run.stdout();
    assert!(!run.0.status.success(), "{stdout}");
    assert!(
        line(&stdout, "first-of").starts_with("PASS "),
        "in call order the first step wins: {stdout}"
    );
    let shuffled_failures = stdout
        .lines()
        .filter(|line| line.starts_with("FAIL first-of (completions shuffled, seed "))
        .count();
    assert!(shuffled_failures >= 1, "some order lets another step win: {stdout}");
    assert_eq!(
        stdout.lines().filter(|line| line.starts_with("PASS fan-out")).count(),
        5,
        "awaiting all is the same in every order: {stdout}"
    );
}

#[test]
fn a_run_that_does_not_end_in_its_time_fails_saying_where_it_stands() {
    let host = Host::new();
    let scenario = write_scenario(
        host.data_dir(),
        "stuck",
        r#"
        workflow = "place-order"
        input = { order_id = "o-7", item = "book", amount_cents = 1200, sleep_ms = 86_400_000 }
        until = "1h"
        "#,
    );
    let run = test(&host, &["--component", arg(&guest("order"))], &[scenario]);
    let stdout = run.stdout();
    assert!(!run.0.status.success(), "{stdout}");
    assert!(
        stdout.contains("the run had not finished after 1h of virtual time (the scenario's `until`); it stands"),
        "{stdout}"
    );
    assert!(stdout.contains("sleeping"), "the status names the sleep: {stdout}");
}

#[test]
fn stubs_are_held_to_the_hosts_limits() {
    let host = Host::new();
    // One byte over the default 64 MiB with its quotes.
    let too_large = "x".repeat((64 << 20) - 1);
    let scenario = write_scenario(
        host.data_dir(),
        "too-large",
        &format!(
            r#"
            workflow = "place-order"
            input = {{ order_id = "o-8", item = "book", amount_cents = 1200 }}
            [steps.reserve]
            output = "{too_large}"
            [expect]
            outcome = "failed"
            error_contains = "exceeds the limit of 67108864 bytes"
            steps = [{{ step = "reserve", attempts = 1, error_kind = "output-too-large" }}]
            "#
        ),
    );
    let run = test(&host, &["--component", arg(&guest("order"))], &[scenario]).success();
    assert!(
        line(&run.stdout(), "too-large").starts_with("PASS "),
        "{}",
        run.stdout()
    );
}

#[test]
fn hostile_times_and_signals_end_the_scenario_cleanly() {
    let host = Host::new();
    let scenario = write_scenario(
        host.data_dir(),
        "hostile",
        r#"
        workflow = "place-order"
        input = { order_id = "o-8", item = "book", amount_cents = 1200, sleep_ms = 9223372036854775807 }
        start_time = "9999-12-31T23:59:59Z"
        until = "2days"
        cancel_at = "500000000000years"
        [[signals]]
        at = "500000000000years"
        name = "approve"
        [[signals]]
        at = "1s"
        name = "no such/name"
        "#,
    );
    let run = test(&host, &["--component", arg(&guest("order"))], &[scenario]);
    let stdout = run.stdout();
    assert!(!run.0.status.success(), "{stdout}");
    let report = &stdout[stdout.find("FAIL hostile:").unwrap_or_else(|| panic!("{stdout}"))..];
    assert!(
        report.contains("signal `no such/name` at 1s could not be sent"),
        "{report}"
    );
    assert!(
        report.contains("signals never sent (due after the scenario ended): approve at"),
        "{report}"
    );
    assert!(
        report.contains("the run had not finished after 2days of virtual time"),
        "{report}"
    );
}

#[test]
fn bad_scenario_files_are_named_with_what_is_wrong_and_the_others_still_run() {
    let host = Host::new();
    let folder = host.data_dir();
    let unknown_field = write_scenario(folder, "typo", "workflow = \"place-order\"\nimput = 1\n");
    let no_component = write_scenario(folder, "bare", "workflow = \"place-order\"\n");
    let no_workflow = write_scenario(
        folder,
        "nameless",
        "component = \"../no-such.wasm\"\nworkflow = \"place-order\"\n",
    );
    let missing = folder.join("missing.toml");
    let good = root().join("examples-guests/order/scenarios/payment-declined.toml");
    let run = test(&host, &[], &[unknown_field, no_component, no_workflow, missing, good]);
    let stdout = run.stdout();
    assert!(!run.0.status.success(), "{stdout}");
    assert!(
        stdout.contains("ERROR typo: ") && stdout.contains("typo.toml: TOML parse error"),
        "{stdout}"
    );
    assert!(stdout.contains("unknown field `imput`"), "{stdout}");
    assert!(stdout.contains("the scenario names no component"), "{stdout}");
    assert!(
        stdout.contains("cannot read") && stdout.contains("no-such.wasm"),
        "{stdout}"
    );
    assert!(
        stdout.contains("cannot read scenario") && stdout.contains("missing.toml"),
        "{stdout}"
    );
    assert!(line(&stdout, "payment-declined").starts_with("PASS "), "{stdout}");
    assert!(stdout.contains("1 of 5 scenario runs passed"), "{stdout}");
    let unknown_workflow = write_scenario(folder, "unknown", "workflow = \"ship-it\"\n");
    let run = test(&host, &["--component", arg(&guest("order"))], &[unknown_workflow]);
    assert!(
        run.stdout()
            .contains("has no workflow `ship-it`; it exports: place-order"),
        "{}",
        run.stdout()
    );
}
