//! The API contract, checked by a third-party client: schemathesis (PyPI,
//! installed by `make test` under target/tools/schemathesis) generates
//! requests from the served `/v1/openapi.json`, valid ones and invalid ones,
//! and runs every check it has on the answers. It must find nothing: every
//! status and body documented, every request the document allows accepted,
//! every one it forbids refused.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};
use stepstone_e2e::{Server, token_hash, tool};

const TOKEN: &str = "sst_contract_token";

/// Requests per operation and phase, for each seed: enough to meet every
/// constraint's edges, few enough that each seed's run takes under a
/// minute on 2 cores.
const MAX_EXAMPLES: &str = "100";
/// Fixed, so a failure is reproduced by running the test again; several,
/// because each seed meets edges the others miss.
const SEEDS: [&str; 4] = ["20261201", "42", "6", "1"];

fn schemathesis() -> PathBuf {
    tool("schemathesis/bin/schemathesis", "schemathesis")
}

/// Starts a run of the `hello` example (cancelled if it awaits a signal)
/// and waits until it ends in `state`.
fn finished_run(server: &Server, run_id: &str, workflow: &str, input: Value, state: &str) {
    let body = json!({"component": "hello", "workflow": workflow, "input": input, "run_id": run_id});
    server.post_json("/v1/runs", TOKEN, &body).expect(202);
    if workflow == "await-go" {
        server
            .post_json(&format!("/v1/runs/{run_id}/cancel"), TOKEN, &json!({}))
            .expect(202);
    }
    let ended = server
        .get(&format!("/v1/runs/{run_id}/wait?timeout=60s"), TOKEN)
        .expect(200);
    assert_eq!(ended["state"], state, "{ended}");
}

/// The schemathesis configuration: real ids mixed into the generated ones,
/// so that operations reach existing runs and components, not only 404s.
fn config(digest: &str, cursor: &str) -> String {
    format!(
        r#"
[cache]
enabled = false

[dictionaries.runs]
values = ["greeted", "failed", "cancelled"]
[dictionaries.components]
values = ["hello", "{digest}"]
[dictionaries.workflows]
values = ["greet", "stamp"]
[dictionaries.cursors]
values = ["{cursor}"]
[dictionaries.schedules]
values = ["nightly"]
[dictionaries.crons]
values = ["0 2 * * *", "*/5 * * * * *"]
[dictionaries.waits]
values = ["0s", "10ms"]

# An oversized body is refused (413) before anything in it is read, so a
# request that also breaks the document elsewhere answers 413 too.
[checks.negative_data_rejection]
expected-statuses = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]

[parameters]
"path.id" = {{ dictionary = "runs", probability = 0.5 }}
"path.reference" = {{ dictionary = "components", probability = 0.5 }}
"query.cursor" = {{ dictionary = "cursors", probability = 0.5 }}
"body.component" = {{ dictionary = "components", probability = 0.5 }}
"body.workflow" = {{ dictionary = "workflows", probability = 0.5 }}
"body.cron" = {{ dictionary = "crons", probability = 0.5 }}
"path.name" = {{ dictionary = "schedules", probability = 0.3 }}
# Short waits only: a generated run may be scheduled a year ahead, and a
# start that waits for it would hold the suite a minute (tests/server.rs
# tries malformed waits).
"query.wait" = {{ dictionary = "waits", probability = 1.0 }}

# No schema can say "a valid Stepstone component": other bytes, which the
# document allows as a body, are refused with the documented 400.
[[operations]]
include-name = "POST /v1/components"
checks.positive_data_acceptance.expected-statuses = [201, 400, 401, 403, 413]

# Nor "a time within a year and a day of now" (`start_at` or `delay`,
# `deadline` or `timeout`), nor "not both of them", nor "a URL whose origin
# the tenant may reach" (`notify`): such a run is refused with the
# documented 400. A start that waits answers 200.
[[operations]]
include-name = "POST /v1/runs"
checks.positive_data_acceptance.expected-statuses = [200, 202, 400, 401, 403, 404, 409, 429]

# A group's runs are refused as `POST /v1/runs` refuses them.
[[operations]]
include-name = "POST /v1/groups"
checks.positive_data_acceptance.expected-statuses = [202, 400, 401, 403, 404, 409, 429]

# Nor "a cron pattern whose values are in range and that fires again", nor
# "a `catch_up` of at most 7 days": 400 for one that is not; and a name
# taken by another schedule is 409.
[[operations]]
include-name = "POST /v1/schedules"
checks.positive_data_acceptance.expected-statuses = [201, 400, 401, 403, 404, 409]
"#
    )
}

#[test]
fn schemathesis_finds_the_server_true_to_its_openapi_document() {
    let schemathesis = schemathesis();
    let tenants = format!(
        "[[tenants]]\nid = \"contract\"\ntoken_sha256 = [\"{}\"]\n",
        token_hash(TOKEN)
    );
    // With a host key, so that setting secrets is in play, not refused.
    let host = stepstone_e2e::Host::new().with_env("STEPSTONE_SECRET_KEY", &"5a".repeat(32));
    let server = Server::start_on(host, &tenants);
    let digest = server.upload(TOKEN, "hello")["digest"]
        .as_str()
        .expect("a digest")
        .to_owned();
    finished_run(&server, "greeted", "greet", json!({"name": "Ada"}), "completed");
    finished_run(&server, "failed", "greet", json!(5), "failed");
    finished_run(&server, "cancelled", "await-go", json!({}), "cancelled");
    let nightly = json!({"name": "nightly", "component": "hello", "workflow": "greet",
        "input": {"name": "Ada"}, "cron": "0 2 * * *"});
    server.post_json("/v1/schedules", TOKEN, &nightly).expect(201);
    let page = server.get("/v1/runs?limit=1", TOKEN).expect(200);
    let cursor = page["next_cursor"].as_str().expect("a second page");

    // Its own directory: schemathesis and hypothesis keep files in the
    // current one.
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let config_file = scratch.path().join("schemathesis.toml");
    std::fs::write(&config_file, config(&digest, cursor)).expect("the config is written");
    let failures: Vec<String> = SEEDS
        .iter()
        .filter_map(|seed| {
            let output = Command::new(&schemathesis)
                .current_dir(scratch.path())
                .arg("--config-file")
                .arg(&config_file)
                .args(["run", &format!("{}/v1/openapi.json", server.url)])
                .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
                .args(["--checks", "all", "--max-examples", MAX_EXAMPLES, "--seed", seed])
                .args(["--workers", "1", "--generation-database", "none", "--no-color"])
                .output()
                .expect("schemathesis starts");
            let stdout = String::from_utf8_lossy(&output.stdout);
            println!("seed {seed}:\n{stdout}");
            let stderr = String::from_utf8_lossy(&output.stderr);
            (!output.status.success()).then(|| format!("seed {seed} ({}):\n{stdout}\n{stderr}", output.status))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "schemathesis found the server at odds with its document:\n{}\nserver log:\n{}",
        failures.join("\n"),
        server.log()
    );
}
