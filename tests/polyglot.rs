//! Guests written in Python, JavaScript and C (examples-guests/py-*, js-*,
//! c-*) run through `stepstone run` like the Rust ones: their steps under a
//! Rust workflow (examples-guests/polyglot), their workflows calling a Rust
//! step, and replays of those workflows find them deterministic, Python's
//! and JavaScript's own clocks and random numbers included; each SDK's
//! patch marker sends a new run down the changed path, its continue-as-new
//! call ends a generation and starts the next, and its stream call appends
//! values `stepstone stream` reads.

use serde_json::{Value, json};
use stepstone_e2e::{Host, Run, arg, guest};

/// The step components, each linked to the run under its own name, and
/// the language its `wrap` step answers with.
const STEP_COMPONENTS: [(&str, &str); 4] = [
    ("py-steps", "python"),
    ("js-steps", "javascript"),
    ("c-steps", "c"),
    ("wat-step", "wat"),
];

#[test]
fn a_rust_workflow_calls_python_javascript_c_and_wat_steps_by_qualified_name() {
    let host = Host::new();
    let polyglot = guest("polyglot");
    let links: Vec<String> = STEP_COMPONENTS
        .iter()
        .map(|(component, _)| format!("{component}={}", arg(&guest(component))))
        .collect();
    let value = json!({"n": [1, 2, "three"], "text": "héllo \"quoted\""});
    let input = json!({"value": value}).to_string();
    let mut args = vec!["run", arg(&polyglot), "polyglot", "--input", &input];
    for link in &links {
        args.extend(["--link", link]);
    }
    let run = host.run(&args).success();
    let expected: serde_json::Map<String, Value> = STEP_COMPONENTS
        .iter()
        .map(|(component, language)| (component.to_string(), json!({"from": language, "value": value})))
        .collect();
    assert_eq!(run.json_line(), Value::Object(expected));
}

/// A C step reads its call's idempotency key and fencing token through the
/// C SDK, as a service would be sent them: `{tenant}/{run}/{seq}` for a
/// run's first incarnation, under its creator's token 0.
#[test]
fn a_c_step_reads_its_calls_idempotency_key_and_fencing_token() {
    let host = Host::new();
    let link = format!("c-steps={}", arg(&guest("c-steps")));
    let input = json!({"value": null, "via": ["c-steps"], "step": "key"}).to_string();
    let polyglot = guest("polyglot");
    let args = [
        "run",
        arg(&polyglot),
        "polyglot",
        "--run-id",
        "keyed-1",
        "--input",
        &input,
        "--link",
        &link,
    ];
    let run = host.run(&args).success();
    assert_eq!(
        run.json_line(),
        json!({"c-steps": {"idempotency_key": "default/keyed-1/0", "fencing_token": 0}})
    );
}

/// `stepstone run WORKFLOW_COMPONENT workflow --run-id RUN --link hello=...`,
/// not yet checked.
fn run_with_hello(host: &Host, component: &str, workflow: &str, run: &str, input: &str) -> Run {
    let (workflows, hello) = (guest(component), guest("hello"));
    let link = format!("hello={}", arg(&hello));
    let args = [
        "run",
        arg(&workflows),
        workflow,
        "--run-id",
        run,
        "--link",
        &link,
        "--input",
        input,
    ];
    host.run(&args)
}

fn assert_replays_deterministically(host: &Host, run: &str) -> Run {
    let replay = host.run(&["replay", run]).success();
    assert!(
        replay.stdout().contains("deterministic: output identical"),
        "replay of {run}: {}\n{}",
        replay.stdout(),
        replay.stderr()
    );
    replay
}

/// The numbers of the line `stamp` prints, `time <time> random <random>`,
/// which the host logs from the workflow's stdout.
fn printed_stamp(stderr: &str) -> (f64, f64) {
    let line = stderr
        .lines()
        .find_map(|line| line.split_once("time ").map(|(_, rest)| rest.to_owned()))
        .unwrap_or_else(|| panic!("no `time ... random ...` line in:\n{stderr}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    match words[..] {
        // Parsed as the output is (serde_json's parser may differ from
        // `str::parse` in the last bit).
        [time, "random", random, ..] => (number(time), number(random)),
        _ => panic!("not a stamp line: {line}"),
    }
}

fn number(text: &str) -> f64 {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?} is not a number: {e}"))
}

/// Runs `greet` of a workflow component, which calls the Rust step
/// `hello/make-greeting`, and replays it.
fn check_greet(host: &Host, component: &str, via: &str) {
    let greet = format!("greet-{via}");
    let greeted = run_with_hello(host, component, "greet", &greet, r#"{"name":"Ada"}"#).success();
    assert_eq!(greeted.json_line(), json!({"greeting": "Hello, Ada!", "via": via}));
    let steps = host
        .history(&greet)
        .into_iter()
        .filter(|e| e["call"]["kind"] == "Step")
        .count();
    assert_eq!(steps, 1, "{component}: one step journaled");
    assert_replays_deterministically(host, &greet);
}

/// Runs `greet-again`, `greet` changed behind the patch marker
/// `greet-again`: a new run journals the marker once, between the two
/// greetings, takes the changed path, and replays identically.
fn check_greet_again(host: &Host, component: &str, via: &str) {
    let run = format!("greet-again-{via}");
    let greeted = run_with_hello(host, component, "greet-again", &run, r#"{"name":"Ada"}"#).success();
    assert_eq!(
        greeted.json_line(),
        json!({"greeting": "Hello, Ada!", "again": "Hello, Ada!", "via": via})
    );
    let calls: Vec<Value> = host
        .history(&run)
        .iter()
        .map(|e| json!([e["call"]["kind"], e["call"]["name"]]))
        .collect();
    let step = json!(["Step", "hello/make-greeting"]);
    assert_eq!(
        calls,
        [step.clone(), json!(["Patch", "greet-again"]), step],
        "{component}"
    );
    assert_replays_deterministically(host, &run);
}

/// Runs `greet`, `greet-again` and `stamp` (the language's own clock and
/// random numbers, printed) of a workflow component, and replays them.
fn check_workflows(component: &str, via: &str) {
    let host = Host::new();
    check_greet(&host, component, via);
    check_greet_again(&host, component, via);

    let mut randoms = Vec::new();
    for stamp in [format!("stamp-{via}-1"), format!("stamp-{via}-2")] {
        let first = run_with_hello(&host, component, "stamp", &stamp, "null").success();
        let stamped = first.json_line();
        let (time, random) = (stamped["time"].as_f64().unwrap(), stamped["random"].as_f64().unwrap());
        assert!(time > 1.0e9, "{component}: the workflow sees the real time: {stamped}");
        assert!((0.0..1.0).contains(&random), "{component}: {stamped}");
        assert_eq!(
            printed_stamp(&first.stderr()),
            (time, random),
            "{component}: printed what it returned"
        );
        // The replay re-runs the workflow from the start: the same output
        // means it computed, and printed, the same values again.
        assert_replays_deterministically(&host, &stamp);
        randoms.push(random);
    }
    assert_ne!(
        randoms[0], randoms[1],
        "{component}: each run has its own random numbers"
    );
}

#[test]
fn a_python_workflow_calls_a_rust_step_and_replays_its_clock_and_random_numbers() {
    check_workflows("py-workflow", "python");
}

#[test]
fn a_javascript_workflow_calls_a_rust_step_and_replays_its_clock_and_random_numbers() {
    check_workflows("js-workflow", "javascript");
}

/// C has no WASI clock or random numbers to replay (the C workflow imports
/// only `durable`), so it has `greet` and `greet-again` only. It finds the greeting in the
/// step's JSON output without a parser, whatever the name holds; a failed
/// step call fails the run with the step's error.
#[test]
fn a_c_workflow_calls_a_rust_step_and_passes_its_failure_on() {
    let host = Host::new();
    check_greet(&host, "c-workflow", "c");
    check_greet_again(&host, "c-workflow", "c");
    let name = r#"Ada "{[,]}" \ Lovelace"#;
    let input = json!({"name": name}).to_string();
    let greeted = run_with_hello(&host, "c-workflow", "greet", "greet-quoted", &input).success();
    assert_eq!(
        greeted.json_line(),
        json!({"greeting": format!("Hello, {name}!"), "via": "c"})
    );
    let failed = run_with_hello(&host, "c-workflow", "greet", "greet-nobody", r#"{"nickname":"Ada"}"#).failure();
    assert!(
        failed.contains("step `hello/make-greeting` failed after 1 attempt: ")
            && failed.contains("missing field `name`"),
        "{failed}"
    );
}

/// Runs `countdown` of a workflow component from 3: one generation per
/// number, each continuing as new through the language's SDK call, and
/// the chain's final output printed for the root.
fn check_countdown(component: &str, via: &str) {
    let host = Host::new();
    let root = format!("countdown-{via}");
    let run = host
        .run(&[
            "run",
            arg(&guest(component)),
            "countdown",
            "--run-id",
            &root,
            "--input",
            "3",
        ])
        .success();
    assert_eq!(run.json_line(), json!({"done": true, "via": via}), "{component}");
    let status = host.status(&root).expect("the root exists");
    assert_eq!(status["run_id"], format!("{root}.g3"), "{component}: {status}");
    assert_eq!(status["chain"]["generation"], 3, "{component}: {status}");
    let listed = host.run(&["list", "--json"]).success().json();
    for generation in 1..3 {
        let id = format!("{root}.g{generation}");
        let own = listed
            .as_array()
            .and_then(|runs| runs.iter().find(|r| r["run_id"] == id.as_str()))
            .unwrap_or_else(|| panic!("{component}: {id} is not listed: {listed}"));
        assert_eq!(
            own["continued_as"],
            format!("{root}.g{}", generation + 1),
            "{component}"
        );
    }
}

#[test]
fn python_javascript_and_c_workflows_continue_as_new_through_their_sdks() {
    for (component, via) in [
        ("py-workflow", "python"),
        ("js-workflow", "javascript"),
        ("c-workflow", "c"),
    ] {
        check_countdown(component, via);
    }
}

#[test]
fn python_javascript_and_c_workflows_append_to_a_stream_through_their_sdks() {
    let host = Host::new();
    for (component, via) in [
        ("py-workflow", "python"),
        ("js-workflow", "javascript"),
        ("c-workflow", "c"),
    ] {
        let run = format!("progress-{via}");
        let wasm = guest(component);
        let args = ["run", arg(&wasm), "progress", "--run-id", &run, "--input", "3"];
        let done = host.run(&args).success();
        assert_eq!(done.json_line(), json!({"streamed": 3, "via": via}), "{component}");
        let streamed = host.run(&["stream", &run, "progress"]).success();
        let values: Vec<Value> = streamed
            .stdout()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON value a line"))
            .collect();
        assert_eq!(
            values,
            [json!({"done": 1}), json!({"done": 2}), json!({"done": 3})],
            "{component}"
        );
        assert_replays_deterministically(&host, &run);
    }
}
