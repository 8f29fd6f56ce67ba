//! An embedder's `Runtime`, given a tenant's policy from the tenants file,
//! holds the tenant to it exactly as `stepstone serve` does: the same calls
//! are refused with the same words, and a step gets the same fuel.

use serde_json::{Value, json};
use stepstone::component::CodeCache;
use stepstone::config::HostConfig;
use stepstone::journal::{Outcome, Payload};
use stepstone::runtime::{Progress, RunError, Runtime, Submission};
use stepstone::store::{ComponentName, GroupId, RunId, Storage, TenantId};
use stepstone::tenancy::{LiveTenants, Tenants};
use stepstone_e2e::{Server, guest, token_hash};

const TOKEN: &str = "sst_acme_token";

fn tenants_file() -> String {
    format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\n\
         max_payload_bytes = 100\nmax_components = 1\nmax_new_runs_per_minute = 2\nstep_fuel = 10000000\n",
        token_hash(TOKEN)
    )
}

/// A step asking for far more fuel than the tenant's quota.
fn spin() -> Value {
    json!({"step": "spin", "options": {"fuel": 1_000_000_000_000u64}})
}

fn oversized() -> Value {
    json!({"step": "spin", "padding": "x".repeat(200)})
}

/// What `serve` answers: the refusals' messages and the capped step's
/// error kind, in the order the calls were made.
fn served() -> Vec<String> {
    let server = Server::start(&tenants_file());
    let mut seen = Vec::new();
    server.upload(TOKEN, "hostile");
    let bytes = std::fs::read(guest("order")).expect("the order saga is built");
    let refused = server.post_bytes("/v1/components?name=order", TOKEN, bytes).expect(403);
    seen.push(refused["error"].as_str().unwrap_or_default().to_owned());
    let start = |input: Value, run: &str| {
        let body = json!({"component": "hostile", "workflow": "call-limited", "input": input, "run_id": run});
        server.post_json("/v1/runs", TOKEN, &body)
    };
    let refused = start(oversized(), "big").expect(413);
    seen.push(refused["error"].as_str().unwrap_or_default().to_owned());
    start(spin(), "capped").expect(202);
    let capped = server.get("/v1/runs/capped/wait?timeout=60s", TOKEN).expect(200);
    seen.push(capped["output"]["error_kind"].as_str().unwrap_or_default().to_owned());
    start(json!({"step": "boom"}), "second").expect(202);
    let refused = start(json!({"step": "boom"}), "third").expect(429);
    seen.push(refused["error"].as_str().unwrap_or_default().to_owned());
    seen
}

/// The same calls through the library, on a runtime that follows the same
/// tenants file.
async fn embedded() -> Vec<String> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("stepstone.toml");
    std::fs::write(&file, tenants_file()).expect("the tenants file is written");
    let tenants = LiveTenants::from(Tenants::load(&file).expect("a valid tenants file"));
    let storage = Storage::local(&dir.path().join("objects")).expect("a local store");
    let runtime = Runtime::new(HostConfig::new(), storage, CodeCache::disabled()).expect("a runtime");
    runtime.follow_tenants(&tenants);
    let acme = TenantId::new("acme").expect("a valid id");
    let read = |name: &str| bytes::Bytes::from(std::fs::read(guest(name)).expect("the guest is built"));
    let name = |name: &str| ComponentName::new(name).expect("a valid name");

    let mut seen = Vec::new();
    let hostile = (runtime.upload(&acme, read("hostile"), Some(&name("hostile"))).await).expect("within the quota");
    let refused = runtime.upload(&acme, read("order"), Some(&name("order"))).await;
    seen.push(refusal(refused));
    let submission = |input: Value, run: &str| {
        let mut submission = Submission::new(hostile.clone(), "call-limited", &input.to_string());
        submission.run_id = Some(RunId::new(run).expect("a valid id"));
        submission
    };
    seen.push(refusal(runtime.submit(&acme, submission(oversized(), "big")).await));
    // A group with one oversized input is refused whole: nothing of it is
    // stored, and it costs the tenant none of its runs a minute.
    let group = GroupId::new("mixed").expect("a valid id");
    let runs = vec![
        submission(json!({"step": "boom"}), "fits"),
        submission(oversized(), "too-big"),
    ];
    let group_refused = runtime.groups().submit(&acme, Some(group.clone()), runs).await;
    assert!(refusal(group_refused).contains("quota allows at most 100"));
    assert!(matches!(
        runtime.groups().get(&acme, &group).await,
        Err(RunError::UnknownGroup { .. })
    ));
    let capped = runtime
        .submit(&acme, submission(spin(), "capped"))
        .await
        .expect("admitted");
    seen.push(error_kind(
        runtime.run_to_end(&acme, &capped, None).await.expect("it ends"),
    ));
    let second = submission(json!({"step": "boom"}), "second");
    runtime.submit(&acme, second).await.expect("the second run a minute");
    let third = submission(json!({"step": "boom"}), "third");
    seen.push(refusal(runtime.submit(&acme, third).await));
    seen
}

fn refusal<T>(result: Result<T, RunError>) -> String {
    match result {
        Ok(_) => panic!("the policy should have refused this"),
        Err(e) => e.to_string(),
    }
}

fn error_kind(progress: Progress) -> String {
    let Progress::Finished(Outcome::Completed {
        output: Payload::Inline(output),
    }) = progress
    else {
        panic!("the run did not complete: {progress:?}");
    };
    let output: Value = serde_json::from_str(&output).expect("JSON output");
    output["error_kind"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn an_embedded_runtime_holds_a_tenant_to_its_policy_exactly_as_serve_does() {
    let served = served();
    let embedded = tokio::runtime::Runtime::new()
        .expect("a Tokio runtime")
        .block_on(embedded());
    assert_eq!(served[2], "fuel-exhausted", "{served:?}");
    assert!(served[0].contains("1 components stored"), "{served:?}");
    assert!(served[1].contains("quota allows at most 100"), "{served:?}");
    assert!(served[3].contains("2 runs a minute"), "{served:?}");
    assert_eq!(embedded, served);
}
