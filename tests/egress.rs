//! No way from a tenant into the host's network. Every request a tenant
//! causes, a step's in any language or a completion webhook, leaves
//! through the host's egress: names are resolved once, by the host (here
//! from a hosts file the test writes, `--hosts-file`), addresses inside
//! the host's network are refused unless the allowlist names them as IP
//! literals, and no redirect is followed. Each case runs against real
//! loopback servers ([`Origin`]) and checks that nothing it must not reach
//! saw a request.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use stepstone_e2e::{
    Host, Origin, PAYMENTS_API_KEY, ReliabilityResult, Server, arg, guest, record_reliability, set_secret, token_hash,
};

const SECRET_KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const TOKEN: &str = "sst_egress";

/// Names a tenant controls, resolved by the host from its hosts file.
const HOSTS: &str = "\
127.0.0.1 pay.tenant.test hooks.tenant.test
169.254.169.254 metadata.tenant.test
10.0.0.7 db.tenant.test
::ffff:127.0.0.1 mapped.tenant.test
";

/// Files a case's result for docs/RELIABILITY.md, once its assertions passed.
fn record(fault: &str, outcome: &str) {
    record_reliability(&ReliabilityResult {
        suite: "egress",
        fault,
        trials: 1,
        outcome,
        lost: 0,
    });
}

/// A host resolving [`HOSTS`] from its hosts file, its default tenant
/// holding the payment service's key.
fn host() -> Host {
    let host = Host::new().with_env("STEPSTONE_SECRET_KEY", SECRET_KEY);
    let hosts = host.data_dir().join("hosts");
    std::fs::write(&hosts, HOSTS).expect("the hosts file is written");
    let host = host.with_env("STEPSTONE_HOSTS_FILE", arg(&hosts));
    let set = set_secret(&host, "payments-api-key", PAYMENTS_API_KEY, Some(SECRET_KEY));
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    host
}

/// `stepstone run checkout.wasm checkout` charging through `charge_step`
/// at `payments_url`, steps allowed to reach `allowed`: stdout and stderr.
fn checkout(host: &Host, allowed: &[&str], run: &str, charge_step: &str, payments_url: &str) -> (bool, String) {
    let order =
        json!({"order_id": run, "amount_cents": 1200, "payments_url": payments_url, "charge_step": charge_step});
    let input = order.to_string();
    let wasm = guest("checkout");
    let mut args: Vec<String> = Vec::new();
    for origin in allowed {
        args.extend(["--allow-outbound".into(), (*origin).to_owned()]);
    }
    args.extend(["run", arg(&wasm), "checkout", "--run-id", run, "--input", &input].map(String::from));
    let links: Vec<PathBuf> = charge_step
        .split_once('/')
        .map(|(name, _)| guest(name))
        .into_iter()
        .collect();
    for (link, path) in charge_step.split_once('/').iter().zip(&links) {
        args.extend(["--link".into(), format!("{}={}", link.0, arg(path))]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = host.command(&args).output().expect("stepstone runs");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
    (done.status.success(), said)
}

#[test]
fn a_name_the_tenant_points_inside_the_host_reaches_nothing_in_any_language() {
    let (host, origin) = (host(), Origin::start());
    let named = format!("http://pay.tenant.test:{}", origin.port());
    let literal = origin.url();
    for step in ["charge", "py-steps/charge", "js-steps/charge"] {
        let run = format!("inside-{}", step.replace('/', "-"));
        let (ok, said) = checkout(&host, &[&named], &run, step, &named);
        assert!(!ok, "{step}: {said}");
        let refusal = format!("{named} resolves to 127.0.0.1, a loopback address");
        let fix = format!("add `--allow-outbound {literal}` to the command");
        let failure = said
            .lines()
            .find(|line| line.contains("the host refused a request of this attempt"))
            .unwrap_or_else(|| panic!("{step}: the failure does not say why: {said}"));
        assert!(
            failure.contains(&refusal) && failure.contains(&fix),
            "{step}: {failure}"
        );
    }
    assert!(origin.received().is_empty(), "a request reached the service");

    // Named as an IP literal too, the same address is the operator's choice.
    let (ok, said) = checkout(&host, &[&named, &literal], "allowed", "charge", &named);
    assert!(ok, "{said}");
    assert_eq!(origin.charges().len(), 1, "{said}");
    record(
        "a step (Rust, Python, JavaScript) calling an allowed name the tenant points at 127.0.0.1",
        "refused before any connection (destination-IP-prohibited); the step's failure names the address, its class and the --allow-outbound entry that would allow it; allowed once the allowlist names 127.0.0.1:PORT as a literal",
    );
}

#[test]
fn the_metadata_service_private_and_mapped_addresses_are_refused_behind_a_wildcard() {
    let host = host();
    let wasm = guest("fetcher");
    for (name, address, class) in [
        ("metadata.tenant.test", "169.254.169.254", "link-local (cloud metadata)"),
        ("db.tenant.test", "10.0.0.7", "private"),
        ("mapped.tenant.test", "127.0.0.1", "loopback"),
    ] {
        let url = format!("http://{name}/latest/meta-data/iam?token=s3cret");
        let input = json!({"fetch": {"url": url}}).to_string();
        let args = [
            "--allow-outbound",
            "http://*.tenant.test",
            "run",
            arg(&wasm),
            "fetch-once",
            "--input",
            &input,
        ];
        let done = host.run(&args).success();
        let outcome = done.json_line();
        let message = outcome["message"].as_str().unwrap_or_default();
        assert!(message.contains("DestinationIpProhibited"), "{outcome}");
        assert!(
            message.contains(&format!("http://{name}:80 resolves to {address}, a {class} address")),
            "{outcome}"
        );
        // The guest's own message may quote its URL; the host's refusal
        // names the origin only.
        let log = done.stderr();
        let refusals: Vec<&str> = log.lines().filter(|line| line.contains("WARN")).collect();
        assert!(!refusals.is_empty(), "{log}");
        assert!(
            refusals.iter().all(|line| !line.contains("s3cret")),
            "a query string was logged: {log}"
        );
        let host_part = message.split("the host refused").nth(1).unwrap_or_default();
        assert!(!host_part.is_empty() && !host_part.contains("s3cret"), "{message}");
    }
    record(
        "a step calling names under an allowed `*.` entry that resolve to 169.254.169.254, 10.0.0.7 and ::ffff:127.0.0.1",
        "each refused before any connection, named by its class; the refusal logs scheme, host and port, never the query",
    );
}

/// A tenant allowed `allowed`, with the signing key set, on a server
/// resolving [`HOSTS`].
fn hooks_server(allowed: &str) -> Server {
    let tenants = format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n[tenants.quotas]\nallowed_outbound_hosts = [\"{allowed}\"]\n",
        token_hash(TOKEN),
    );
    let server = Server::start_on(host(), &tenants);
    let put = server
        .request(reqwest::Method::PUT, "/v1/secrets/notify-signing-key", TOKEN)
        .body("whsec_egress")
        .send()
        .expect("the server answers");
    assert_eq!(put.status(), 204);
    server.upload(TOKEN, "hello");
    server
}

/// Starts run `run` of `hello/greet`, notifying `notify` once it ends.
fn start_told(server: &Server, run: &str, notify: &str) {
    let body =
        json!({"component": "hello", "workflow": "greet", "input": {"name": "Ada"}, "run_id": run, "notify": notify});
    server.post_json("/v1/runs", TOKEN, &body).expect(202);
}

#[test]
fn a_webhook_is_never_redirected() {
    let (receiver, internal) = (Origin::start(), Origin::start());
    let server = hooks_server(&receiver.url());
    let admin = format!("{}/internal/admin", internal.port());
    start_told(&server, "told", &format!("{}/moved/{admin}", receiver.url()));
    server.await_log("which is not followed", Duration::from_secs(60));
    let log = server.log();
    assert!(
        log.contains(&format!("a redirect to \"http://127.0.0.1:{admin}\"")),
        "the Location is not logged: {log}"
    );
    assert!(!log.contains("notification delivered"), "{log}");
    assert!(internal.received().is_empty(), "the redirect was followed");
    assert_eq!(receiver.received().len(), 1);
    let failed = server.metric(r#"stepstone_notifications_total{tenant="acme",outcome="failed"}"#);
    assert!(failed >= 1.0, "{failed}");
    record(
        "a completion webhook answered 307 to a server off the allowlist",
        "not followed: a failed try, logged with its Location and retried later; the other server saw nothing, and nothing was logged as delivered",
    );
}

#[test]
fn a_webhook_to_a_name_pointed_inside_the_host_is_refused() {
    let receiver = Origin::start();
    let named = format!("http://hooks.tenant.test:{}", receiver.port());
    let server = hooks_server(&named);
    start_told(&server, "told", &format!("{named}/hooks"));
    let refusal = format!("{named} resolves to 127.0.0.1, a loopback address");
    server.await_log(&refusal, Duration::from_secs(60));
    assert!(
        server.log().contains(&format!("`{}`", receiver.url())),
        "{}",
        server.log()
    );
    assert!(receiver.received().is_empty(), "the webhook reached the receiver");
    let status: Value = server.get("/v1/runs/told", TOKEN).expect(200);
    assert_eq!(status["state"], "completed", "the run is unaffected: {status}");
    record(
        "a completion webhook to an allowed name the tenant points at 127.0.0.1",
        "refused before any connection, logged with the literal entry that would allow it; the receiver saw nothing",
    );
}
