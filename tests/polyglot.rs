//! Guests written in Python, JavaScript and C (examples-guests/py-*, js-*,
//! c-steps) run through `stepstone run` like the Rust ones: their steps
//! under a Rust workflow, their workflows calling a Rust step, and replays
//! of those workflows find them deterministic, Python's and JavaScript's
//! own clocks and random numbers included.

use serde_json::{Value, json};
use stepstone_e2e::{Host, Run, arg, guest};

/// Runs hello's `wrap-with-wat` — a Rust workflow calling step `wat/wrap` —
/// with the step component `steps` linked to the run as `wat`.
fn wrap_through_rust(host: &Host, steps: &str, input: &Value) -> Value {
    let (hello, steps) = (guest("hello"), guest(steps));
    let link = format!("wat={}", arg(&steps));
    let input = input.to_string();
    let run = host.run(&["run", arg(&hello), "wrap-with-wat", "--link", &link, "--input", &input]);
    run.success().json_line()
}

#[test]
fn python_javascript_and_c_steps_run_under_a_rust_workflow() {
    let host = Host::with_shared_code_cache();
    let input = json!({"n": [1, 2, "three"], "text": "héllo \"quoted\""});
    for (component, language) in [("py-steps", "python"), ("js-steps", "javascript"), ("c-steps", "c")] {
        assert_eq!(
            wrap_through_rust(&host, component, &input),
            json!({"from": language, "value": input}),
            "step `wrap` of {component}"
        );
    }
}

/// `stepstone run WORKFLOW_COMPONENT workflow --run-id RUN --link hello=...`.
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
    host.run(&args).success()
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

#[test]
fn python_and_javascript_workflows_call_a_rust_step_and_replay_deterministically() {
    let host = Host::with_shared_code_cache();
    for (component, via) in [("py-workflow", "python"), ("js-workflow", "javascript")] {
        let run = format!("greet-{via}");
        let greeted = run_with_hello(&host, component, "greet", &run, r#"{"name":"Ada"}"#);
        assert_eq!(greeted.json_line(), json!({"greeting": "Hello, Ada!", "via": via}));
        let steps: Vec<Value> = host
            .history(&run)
            .into_iter()
            .filter(|e| e["call"]["kind"] == "Step")
            .collect();
        assert_eq!(steps.len(), 1, "one step journaled: {steps:?}");
        assert_replays_deterministically(&host, &run);
    }
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
        [time, "random", random, ..] => (time.parse().expect("a time"), random.parse().expect("a number")),
        _ => panic!("not a stamp line: {line}"),
    }
}

#[test]
fn python_and_javascript_clocks_and_randomness_replay_the_same_values() {
    let host = Host::with_shared_code_cache();
    for component in ["py-workflow", "js-workflow"] {
        let mut randoms = Vec::new();
        for run in [format!("stamp-{component}-1"), format!("stamp-{component}-2")] {
            let first = run_with_hello(&host, component, "stamp", &run, "null");
            let stamped = first.json_line();
            let (time, random) = (stamped["time"].as_f64().unwrap(), stamped["random"].as_f64().unwrap());
            assert!(time > 1.0e9, "{component}: the workflow sees the real time: {stamped}");
            assert!((0.0..1.0).contains(&random), "{component}: {stamped}");
            assert_eq!(
                printed_stamp(&first.stderr()),
                (time, random),
                "{component}: printed what it returned"
            );
            // The replay re-runs the workflow from the start: the same
            // output means it printed the same values again.
            assert_replays_deterministically(&host, &run);
            randoms.push(random);
        }
        assert_ne!(
            randoms[0], randoms[1],
            "{component}: each run has its own random numbers"
        );
    }
}
