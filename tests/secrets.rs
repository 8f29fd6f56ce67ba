//! Tenants' secrets: set through the CLI or the API, sealed in the store,
//! read by the tenant's steps through `wasi:config/store` and by nothing
//! else: not by workflows, not by another tenant, not through the API, not
//! in the journal or the log.

use serde_json::json;
use stepstone_e2e::{
    Host, Origin, ReliabilityResult, Server, arg, guest, output_given, record_reliability, set_secret, token_hash,
};

const KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const VALUE: &str = "sk_live_not-a-real-key-7f3a";

#[test]
fn a_step_sends_its_tenants_secret_which_is_stored_sealed_and_never_shown() {
    let host = Host::new();
    let origin = Origin::start();
    let refused = set_secret(&host, "api-key", VALUE, None);
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && message.contains("STEPSTONE_SECRET_KEY"),
        "{message}"
    );

    let set = set_secret(&host, "api-key", VALUE, Some(KEY));
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    let listed = host.command(&["secret", "list"]).output().expect("stepstone runs");
    assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), "api-key");

    let fetch = json!({"url": format!("{}/ok", origin.url()), "secret_header": ["authorization", "api-key"]});
    let input = json!({"fetch": fetch}).to_string();
    let allowed = origin.url();
    let wasm = guest("fetcher");
    let args = [
        "--allow-outbound",
        &allowed,
        "run",
        arg(&wasm),
        "fetch-once",
        "--run-id",
        "paid",
        "--input",
        &input,
    ];
    let done = host
        .command(&args)
        .env("STEPSTONE_SECRET_KEY", KEY)
        .output()
        .expect("stepstone runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr),
    );
    assert!(
        done.status.success() && stdout.contains(r#""status":200"#),
        "{stdout}\n{stderr}"
    );
    let received = origin.received();
    assert_eq!(received[0].header("authorization"), Some(VALUE));

    // Nowhere in the store, the journal or the log in the clear.
    let history = host.run(&["history", "paid", "--json"]).success().stdout();
    assert!(!history.contains(VALUE) && !stderr.contains(VALUE) && !stdout.contains(VALUE));
    for path in host.stored_objects() {
        let bytes = std::fs::read(&path).expect("a stored object is readable");
        assert!(
            !bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()),
            "{} holds the value",
            path.display()
        );
    }

    // A workflow reads nothing.
    let input = json!("api-key").to_string();
    let workflow = host
        .command(&["run", arg(&wasm), "secret-in-workflow", "--input", &input])
        .env("STEPSTONE_SECRET_KEY", KEY)
        .output()
        .expect("stepstone runs");
    assert_eq!(String::from_utf8_lossy(&workflow.stdout).trim(), "null");
}

#[test]
fn over_the_api_secrets_are_write_only_and_each_tenants_own() {
    let origin = Origin::start();
    let tenants = format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\nallowed_outbound_hosts = [\"{url}\"]\n\n\
         [[tenants]]\nid = \"globex\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\nallowed_outbound_hosts = [\"{url}\"]\n",
        token_hash("sst_acme"),
        token_hash("sst_globex"),
        url = origin.url()
    );
    let host = Host::new();
    let config = host.data_dir().join("stepstone.toml");
    std::fs::write(&config, tenants).expect("the tenants file is written");
    let server = Server::start_with(host.with_env("STEPSTONE_SECRET_KEY", KEY), &["--config", arg(&config)]);
    let put = |token: &str, name: &str, value: &[u8]| {
        server
            .request(reqwest::Method::PUT, &format!("/v1/secrets/{name}"), token)
            .body(value.to_vec())
            .send()
            .expect("the server answers")
            .status()
            .as_u16()
    };
    assert_eq!(put("sst_acme", "api-key", VALUE.as_bytes()), 204);
    assert_eq!(put("sst_acme", "bad-value", &[0xff, 0xfe]), 400);
    assert_eq!(put("sst_acme", "empty", b""), 400);
    assert_eq!(put("sst_acme", "too-big", &vec![b'x'; (16 << 10) + 1]), 413);
    assert_eq!(
        put("sst_acme", ".hidden", b"x"),
        400,
        "a name that cannot be part of a key"
    );
    let listed = server.get("/v1/secrets", "sst_acme").expect(200);
    assert_eq!(listed, json!({"names": ["api-key"]}));
    assert!(!listed.to_string().contains(VALUE));
    assert_eq!(
        server.get("/v1/secrets", "sst_globex").expect(200),
        json!({"names": []})
    );

    let fetch =
        json!({"fetch": {"url": format!("{}/ok", origin.url()), "secret_header": ["authorization", "api-key"]}});
    let outputs: Vec<serde_json::Value> = [("sst_acme", "a-1"), ("sst_globex", "g-1")]
        .iter()
        .map(|(token, run)| server.run_to_end(token, "fetcher", "fetch-once", &fetch, run))
        .collect();
    assert_eq!(outputs[0]["status"], 200, "{}", outputs[0]);
    assert!(
        outputs[1]["message"]
            .as_str()
            .is_some_and(|m| m.contains("the tenant has no secret `api-key`")),
        "{}",
        outputs[1]
    );
    assert_eq!(origin.received().len(), 1);
    assert_eq!(origin.received()[0].header("authorization"), Some(VALUE));

    // The CLI sets and lists them over the same API, for its token's tenant.
    let remote = |args: &[&str], stdin: &str| {
        let mut full = vec!["--server", server.url.as_str(), "--token", "sst_globex", "secret"];
        full.extend_from_slice(args);
        output_given(server.host.command(&full), stdin)
    };
    let set = remote(&["set", "api-key"], "globex-key\n");
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    let listed = remote(&["list"], "");
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "api-key\n");
    let refused = remote(&["set", "empty"], "");
    assert!(
        !refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("(HTTP 400)"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let globex = server.run_to_end("sst_globex", "fetcher", "fetch-once", &fetch, "g-2");
    assert_eq!(globex["status"], 200, "{globex}");
    assert_eq!(origin.received()[1].header("authorization"), Some("globex-key"));
    assert!(remote(&["delete", "api-key"], "").status.success());

    let delete = |token: &str| {
        server
            .request(reqwest::Method::DELETE, "/v1/secrets/api-key", token)
            .send()
            .expect("the server answers")
            .status()
            .as_u16()
    };
    assert_eq!(
        delete("sst_globex"),
        404,
        "another tenant's secret is not there to delete"
    );
    assert_eq!(delete("sst_acme"), 204);
    assert_eq!(server.get("/v1/secrets", "sst_acme").expect(200), json!({"names": []}));
    record_reliability(&ReliabilityResult {
        suite: "outbound",
        fault: "a step reading another tenant's secret, and deleting it over the API",
        trials: 1,
        outcome: "the step found no such secret and sent nothing; the delete answered 404; the owner's steps got it",
        lost: 0,
    });
}
