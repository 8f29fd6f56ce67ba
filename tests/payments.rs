//! The checkout saga (examples-guests/checkout) against a payment service on
//! loopback (tests/origin.rs), which fails every idempotency key's first
//! request: its `charge` step, in Rust, Python or JavaScript, POSTs with the
//! tenant's API key and the call's idempotency key, and every order is
//! charged exactly once, after its retry, and after its host is killed
//! mid-request.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use stepstone_e2e::{
    Host, Origin, PAYMENTS_API_KEY, ReliabilityResult, Server, arg, guest, output_given, record_reliability,
    set_secret, token_hash,
};

const SECRET_KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn order(origin: &Origin, order_id: &str, charge_step: &str) -> Value {
    json!({"order_id": order_id, "amount_cents": 1200, "payments_url": origin.url(), "charge_step": charge_step})
}

/// An embedded host whose default tenant holds the payment service's key.
fn host_with_api_key() -> Host {
    let host = Host::new().with_env("STEPSTONE_SECRET_KEY", SECRET_KEY);
    let set = set_secret(&host, "payments-api-key", PAYMENTS_API_KEY, Some(SECRET_KEY));
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    host
}

/// `stepstone run checkout.wasm checkout` for `order`, allowed to reach
/// `allowed`, with the component of its `charge_step` linked if it is
/// another's (`py-steps/charge`).
fn checkout(host: &Host, allowed: &str, run: &str, order: &Value) -> std::process::Output {
    let component = order["charge_step"].as_str().and_then(|s| s.split_once('/'));
    let links: Vec<(&str, PathBuf)> = component.map(|(name, _)| (name, guest(name))).into_iter().collect();
    checkout_linked(host, allowed, run, order, &links)
}

/// `checkout`, with `links` (name, component) linked to the run.
fn checkout_linked(
    host: &Host,
    allowed: &str,
    run: &str,
    order: &Value,
    links: &[(&str, PathBuf)],
) -> std::process::Output {
    let wasm = guest("checkout");
    let input = order.to_string();
    let mut args = vec![
        "--allow-outbound",
        allowed,
        "run",
        arg(&wasm),
        "checkout",
        "--run-id",
        run,
        "--input",
        &input,
    ];
    let links: Vec<String> = links
        .iter()
        .map(|(name, path)| format!("{name}={}", arg(path)))
        .collect();
    for link in &links {
        args.extend(["--link", link]);
    }
    host.command(&args).output().expect("stepstone runs")
}

/// How many requests the service got under idempotency key `key`.
/// A server for the tenant `shop` (token `sst_shop`), allowed to reach
/// `origin`, with its payments API key set and the checkout uploaded;
/// `quotas` adds lines to its quotas.
fn shop(origin: &Origin, quotas: &str) -> Server {
    let tenants = format!(
        "[[tenants]]\nid = \"shop\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\n{quotas}allowed_outbound_hosts = [\"{}\"]\n",
        token_hash("sst_shop"),
        origin.url()
    );
    let host = Host::new().with_env("STEPSTONE_SECRET_KEY", SECRET_KEY);
    let config = host.data_dir().join("stepstone.toml");
    std::fs::write(&config, tenants).expect("the tenants file is written");
    let server = Server::start_with(host, &["--config", arg(&config)]);
    let put = server
        .request(reqwest::Method::PUT, "/v1/secrets/payments-api-key", "sst_shop")
        .body(PAYMENTS_API_KEY)
        .send()
        .expect("the server answers");
    assert_eq!(put.status(), 204);
    server.upload("sst_shop", "checkout");
    server
}

fn requests_under(origin: &Origin, key: &str) -> usize {
    origin
        .received()
        .iter()
        .filter(|r| r.path == "/charges" && r.header("idempotency-key") == Some(key))
        .count()
}

#[test]
fn each_language_charges_each_order_once_after_a_retry() {
    let (host, origin) = (host_with_api_key(), Origin::start());
    let steps = [
        ("rust", "charge"),
        ("python", "py-steps/charge"),
        ("javascript", "js-steps/charge"),
    ];
    for (language, step) in steps {
        let run = format!("order-{language}");
        let done = checkout(&host, &origin.url(), &run, &order(&origin, &run, step));
        let stdout = String::from_utf8_lossy(&done.stdout);
        assert!(
            done.status.success(),
            "{language}: {stdout}\n{}",
            String::from_utf8_lossy(&done.stderr)
        );
        let output: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("JSON output");
        assert_eq!(output["status"], "shipped", "{language}: {output}");
        assert_eq!(output["charge"]["order_id"], run.as_str(), "{language}: {output}");
        let key = format!("default/{run}/0");
        assert_eq!(
            requests_under(&origin, &key),
            2,
            "{language}: refused once, then charged"
        );
    }
    let charges = origin.charges();
    let orders: Vec<&str> = charges.iter().map(|c| c.order_id.as_str()).collect();
    assert_eq!(orders, ["order-rust", "order-python", "order-javascript"]);
    for request in origin.received() {
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {PAYMENTS_API_KEY}").as_str())
        );
        assert_eq!(request.header("content-type"), Some("application/json"));
    }
}

#[test]
fn a_host_killed_mid_charge_charges_once() {
    let origin = Origin::start();
    let server = shop(&origin, "");

    origin.hold_answers(true);
    let start = json!({"component": "checkout", "workflow": "checkout", "input": order(&origin, "o-1", "charge"), "run_id": "o-1"});
    server.post_json("/v1/runs", "sst_shop", &start).expect(202);
    // The charge is made, its answer never comes: the host dies waiting.
    origin.await_charges(1, Duration::from_secs(60));
    origin.hold_answers(false);
    let server = server.restart_after("KILL");
    let done = server.get("/v1/runs/o-1/wait?timeout=60s", "sst_shop").expect(200);
    assert_eq!(done["state"], "completed", "{done}");
    let charges = origin.charges();
    assert_eq!(charges.len(), 1, "one charge however often it was sent: {charges:?}");
    assert_eq!(done["output"]["charge"]["charge_id"], charges[0].id.as_str(), "{done}");
    let sent = requests_under(&origin, "shop/o-1/0");
    assert_eq!(sent, 3, "refused, charged but unanswered, answered again");
    record_reliability(&ReliabilityResult {
        suite: "outbound",
        fault: "a host SIGKILLed while its step's charge request was in flight",
        trials: 1,
        outcome: "the new host's attempt sent the same idempotency key; the service answered the charge it had made",
        lost: 0,
    });
}

/// Issue 55, path 5: an order id used again once retention deleted its
/// run is a new incarnation of it: its charge goes under another
/// idempotency key, so the service charges the new amount rather than
/// answering the old charge, with a fencing token above every token the
/// old run sent.
#[test]
fn an_order_id_used_again_after_retention_is_charged_anew_under_a_higher_token() {
    let origin = Origin::start();
    let server = shop(&origin, "retention_ms = 1000\n");
    let checkout = |amount_cents: u64| {
        let mut input = order(&origin, "o-7", "charge");
        input["amount_cents"] = json!(amount_cents);
        let start = json!({"component": "checkout", "workflow": "checkout", "input": input, "run_id": "o-7"});
        // Retention holds an id it deleted a run of for a while (late
        // writes may land): 409 until then, as a client retrying is told.
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            let reply = server.post_json("/v1/runs", "sst_shop", &start);
            if reply.status != 409 {
                assert_eq!(reply.status, 202, "{}", reply.body);
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the id was never free again: {}",
                reply.body
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        let done = server.get("/v1/runs/o-7/wait?timeout=60s", "sst_shop").expect(200);
        done["output"].clone()
    };

    let first = checkout(1200);
    server.await_gone("/v1/runs/o-7", "sst_shop");
    let second = checkout(1500);

    assert_eq!(first["charge"]["amount_cents"], 1200, "{first}");
    assert_eq!(
        second["charge"]["amount_cents"], 1500,
        "charged anew, not answered the old charge: {second}"
    );
    let charges = origin.charges();
    let keys: Vec<&str> = charges.iter().map(|charge| charge.idempotency_key.as_str()).collect();
    assert_eq!(keys, ["shop/o-7/0", "shop/o-7/1/0"], "{charges:?}");
    let tokens = |key: &str| -> Vec<u64> {
        let sent = origin
            .received()
            .into_iter()
            .filter(|r| r.header("idempotency-key") == Some(key));
        sent.filter_map(|r| r.header("fencing-token")?.parse().ok()).collect()
    };
    let (old, new) = (tokens("shop/o-7/0"), tokens("shop/o-7/1/0"));
    assert!(!old.is_empty() && !new.is_empty(), "{old:?} {new:?}");
    assert!(
        new.iter().min() > old.iter().max(),
        "the new run's tokens {new:?} lie above the old one's {old:?}"
    );
}

#[test]
fn a_missing_api_key_fails_for_good_and_a_failed_shipment_is_refunded() {
    let origin = Origin::start();
    let keyless = Host::new().with_env("STEPSTONE_SECRET_KEY", SECRET_KEY);
    let failed = checkout(&keyless, &origin.url(), "no-key", &order(&origin, "no-key", "charge"));
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success());
    assert!(
        stderr.contains("the tenant has no secret `payments-api-key`") && stderr.contains("1 attempt"),
        "{stderr}"
    );
    assert!(origin.received().is_empty(), "nothing sent without the key");

    let host = host_with_api_key();
    let mut unshippable = order(&origin, "o-2", "charge");
    unshippable["fail_shipping"] = json!(true);
    let failed = checkout(&host, &origin.url(), "o-2", &unshippable);
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success());
    assert!(
        stderr.contains("nothing to ship order o-2 with; refunded ch_1"),
        "{stderr}"
    );
    let charges = origin.charges();
    assert!(charges.len() == 1 && charges[0].refunded, "{charges:?}");
}

/// A charge to an origin off the allowlist (the same service, named
/// `localhost`), and one to a service that is down, fail in every language
/// as failed requests, retried and then failed for good, never a trap; the
/// first reaches nothing.
#[test]
fn a_charge_to_an_origin_off_the_list_or_down_fails_in_every_language() {
    let (host, origin) = (host_with_api_key(), Origin::start());
    for step in ["charge", "py-steps/charge", "js-steps/charge"] {
        let mut elsewhere = order(&origin, "o-3", step);
        elsewhere["payments_url"] = json!(format!("http://localhost:{}", origin.port()));
        let failed = checkout(
            &host,
            &origin.url(),
            &format!("off-list-{}", step.replace('/', "-")),
            &elsewhere,
        );
        let stderr = String::from_utf8_lossy(&failed.stderr);
        assert!(!failed.status.success(), "{step}: {stderr}");
        assert!(stderr.contains("(failed, 5 attempts)"), "{step}: {stderr}");
        assert!(
            stderr.contains(&format!("http://localhost:{} is not among the origins", origin.port())),
            "{step}: {stderr}"
        );
    }
    assert!(origin.received().is_empty(), "no request reached the service");

    let down = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        format!("http://{}", listener.local_addr().expect("an address"))
    };
    for step in ["charge", "py-steps/charge", "js-steps/charge"] {
        let mut refused = order(&origin, "o-4", step);
        refused["payments_url"] = json!(down);
        let failed = checkout(&host, &down, &format!("down-{}", step.replace('/', "-")), &refused);
        let stderr = String::from_utf8_lossy(&failed.stderr);
        assert!(!failed.status.success(), "{step}: {stderr}");
        assert!(stderr.contains("(failed, 5 attempts)"), "{step}: {stderr}");
    }
}

/// A secret set for a component name is what that component's steps read,
/// called as `billing/charge`, in place of the tenant's of the same name:
/// the tenant's key is refused by the service, the component's charges.
#[test]
fn a_components_secret_is_read_by_its_steps_in_place_of_the_tenants() {
    let origin = Origin::start();
    let host = Host::new().with_env("STEPSTONE_SECRET_KEY", SECRET_KEY);
    let set = set_secret(&host, "payments-api-key", "sk_wrong_tenant_wide", Some(SECRET_KEY));
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    let scoped = host.command(&["secret", "set", "payments-api-key", "--component", "billing"]);
    let set = output_given(scoped, PAYMENTS_API_KEY);
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    let listed = host
        .command(&["secret", "list", "--component", "billing"])
        .output()
        .expect("stepstone runs");
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "payments-api-key\n");

    let own = checkout(&host, &origin.url(), "own", &order(&origin, "own", "charge"));
    let stderr = String::from_utf8_lossy(&own.stderr);
    assert!(stderr.contains("payment service refused the charge: 401"), "{stderr}");
    let billing = order(&origin, "billed", "billing/charge");
    let links = [("billing", guest("checkout"))];
    let done = checkout_linked(&host, &origin.url(), "billed", &billing, &links);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let charges = origin.charges();
    assert_eq!(charges.len(), 1, "{charges:?}");
    assert_eq!(charges[0].order_id, "billed");
}
