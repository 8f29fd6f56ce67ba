//! The console, clicked through in headless Chromium (Debian's `chromium`
//! and `chromium-driver`, which `make test` installs) against a served host
//! with real runs of the order saga: every page, a signal sent, a run
//! cancelled and another upgraded from the UI, another tenant's crafted
//! URLs, pages at 390 px wide, and a run's stream shown live. Screenshots go to `target/ui-screens/`.
//!
//! One chromedriver, one browser and one server serve the whole file, so it
//! runs as one test.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::error::{CmdError, ErrorStatus};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use stepstone_e2e::{Server, order_input, root, token_hash as hash};

const ACME: &str = "sst_acme_console_token";
const GLOBEX: &str = "sst_globex_console_token";
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long the browser waits for something to appear.
const PATIENCE: Duration = Duration::from_secs(30);

type Result<T = (), E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

/// A chromedriver on a loopback port, killed when dropped.
struct Chromedriver {
    process: Child,
    url: String,
}

impl Chromedriver {
    fn start() -> Self {
        for path in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(path).exists(),
                "{path} is missing: run `make test` as root, which installs it, or `apt-get install -y chromium chromium-driver`"
            );
        }
        // A port found free may be taken by another test's server before
        // chromedriver binds it: then it exits, and another port is tried.
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free port")
                .port();
            let mut process = Command::new(CHROMEDRIVER)
                .args([format!("--port={port}"), "--allowed-ips=127.0.0.1".to_owned()])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("chromedriver starts");
            let stdout = process.stdout.take().expect("piped");
            // It says so once it listens; it ends its output if it cannot.
            let mut lines = BufReader::new(stdout).lines();
            let listening = lines
                .by_ref()
                .map_while(std::result::Result::ok)
                .any(|line| line.contains("started successfully"));
            if listening {
                // Read on, so that a line it writes later finds its pipe open.
                std::thread::spawn(move || lines.for_each(drop));
                return Self {
                    process,
                    url: format!("http://127.0.0.1:{port}"),
                };
            }
            let _ = process.kill();
            let _ = process.wait();
        }
        panic!("chromedriver did not listen on any of 5 ports");
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// A headless Chromium that reaches nothing but loopback, with a profile
/// of its own.
async fn browser(driver: &Chromedriver, profile: &Path) -> Result<Client> {
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
    ]
    .map(str::to_owned);
    let mut args = args.to_vec();
    args.push(format!("--user-data-dir={}", profile.display()));
    let capabilities = json!({"goog:chromeOptions": {"binary": CHROMIUM, "args": args}});
    let Value::Object(capabilities) = capabilities else {
        unreachable!("an object")
    };
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    Ok(ClientBuilder::new(connector)
        .capabilities(capabilities)
        .connect(&driver.url)
        .await?)
}

fn two_tenants() -> String {
    format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [\"{}\"]\n\n[[tenants]]\nid = \"globex\"\ntoken_sha256 = [\"{}\"]\n",
        hash(ACME),
        hash(GLOBEX)
    )
}

/// Starts run `run` of the order saga as acme, waiting for its approval
/// for up to 10 minutes; with `fail_shipping`, shipping fails for good.
fn order(server: &Server, token: &str, component: &str, run: &str, fail_shipping: bool) {
    let input = order_input(
        run,
        1,
        json!({"approval_timeout_ms": 600_000, "fail_shipping": fail_shipping}),
    );
    let body = json!({"component": component, "workflow": "place-order", "input": input, "run_id": run});
    server.post_json("/v1/runs", token, &body).expect(202);
}

fn approve(server: &Server, run: &str) {
    let reply = server.post_bytes(
        &format!("/v1/runs/{run}/signals/approve"),
        ACME,
        br#"{"approved":true}"#.to_vec(),
    );
    assert_eq!(reply.status, 202);
}

/// Waits until acme's run `run` is in `state`.
fn await_state(server: &Server, run: &str, state: &str) {
    await_state_of(server, ACME, run, state);
}

/// Waits until the run `run` of the tenant of `token` is in `state`.
fn await_state_of(server: &Server, token: &str, run: &str, state: &str) {
    server.await_state(token, run, state);
}

/// Where screenshots go: target/ui-screens/.
fn screens() -> PathBuf {
    let dir = root().join("target/ui-screens");
    std::fs::create_dir_all(&dir).expect("target/ui-screens is made");
    dir
}

async fn screenshot(client: &Client, name: &str) -> Result {
    let png = client.screenshot().await?;
    assert!(png.starts_with(b"\x89PNG"), "{name} is a PNG");
    std::fs::write(screens().join(format!("{name}.png")), png)?;
    Ok(())
}

// The runs table and a live run's timeline replace themselves every 2 s
// (`console.js`): an element found by one WebDriver command may be gone by
// the next. So texts are read in one script, and clicks find their link
// again if it was replaced under them.

/// The text of the first element matching `css`, if there is one now.
async fn shown_text(client: &Client, css: &str) -> Result<Option<String>> {
    let script = "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;";
    Ok(serde_json::from_value(client.execute(script, vec![json!(css)]).await?)?)
}

/// The text of the first element matching `css`, once there is one.
async fn text(client: &Client, css: &str) -> Result<String> {
    await_shown(client, css).await?;
    Ok(shown_text(client, css).await?.ok_or("an element's text")?)
}

/// Probes the page until what it finds is `wanted`. An action's answer is
/// a new page, and a click returns before that has replaced the old one:
/// what the old page shows must not pass for the answer.
async fn eventually<T: std::fmt::Debug>(
    mut probe: impl AsyncFnMut() -> Result<T>,
    wanted: impl Fn(&T) -> bool,
) -> Result {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let found = probe().await?;
        if wanted(&found) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("the page still shows {found:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the first element matching `css` has a text that is
/// `wanted`.
async fn await_text(client: &Client, css: &str, wanted: impl Fn(&str) -> bool) -> Result {
    let read = async || shown_text(client, css).await;
    eventually(read, |shown| shown.as_deref().is_some_and(&wanted)).await
}

/// The ids of the runs the runs page lists now.
async fn listed_runs(client: &Client) -> Result<Vec<String>> {
    let script = "return Array.from(document.querySelectorAll('table.runs tbody tr[data-run]'), \
                  (row) => row.getAttribute('data-run'));";
    Ok(serde_json::from_value(client.execute(script, Vec::new()).await?)?)
}

/// Clicks the link reading `text`.
async fn click_link(client: &Client, text: &str) -> Result {
    for _ in 0..10 {
        match client.find(Locator::LinkText(text)).await?.click().await {
            Err(CmdError::Standard(e)) if e.error == ErrorStatus::StaleElementReference => continue,
            clicked => return Ok(clicked?),
        }
    }
    Err(format!("the link {text} was replaced ten times in a row").into())
}

/// Waits until the page shows an element matching `css`, without
/// reloading it: what the page's own refresh brings.
async fn await_shown(client: &Client, css: &str) -> Result {
    client.wait().at_most(PATIENCE).for_element(Locator::Css(css)).await?;
    Ok(())
}

/// Whether the page fits the window's width, without scrolling sideways.
async fn fits_width(client: &Client) -> Result<bool> {
    let fits = client
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth;",
            Vec::new(),
        )
        .await?;
    Ok(fits == Value::Bool(true))
}

/// Fills the form `form` (its fields by name) and submits it.
async fn submit(client: &Client, form: &str, fields: &[(&str, &str)]) -> Result {
    for (name, value) in fields {
        let field = client.find(Locator::Css(&format!("{form} [name=\"{name}\"]"))).await?;
        field.clear().await?;
        field.send_keys(value).await?;
    }
    client
        .find(Locator::Css(&format!("{form} button[type=submit]")))
        .await?
        .click()
        .await?;
    Ok(())
}

#[test]
fn the_console_shows_a_tenants_runs_and_acts_on_them_and_nothing_of_another_tenants() -> Result {
    let driver = Chromedriver::start();
    let server = Server::start(&two_tenants());
    let base = server.url.clone();
    server.upload(ACME, "order");
    let patched = server
        .post_bytes(
            "/v1/components?name=order-patched",
            ACME,
            std::fs::read(stepstone_e2e::guest("order-patched"))?,
        )
        .expect(201);
    let hello = server.upload(GLOBEX, "hello");
    server.upload(GLOBEX, "order");
    for (run, fail) in [
        ("o-done", false),
        ("o-wait", false),
        ("o-cancel", false),
        ("o-fail", true),
    ] {
        order(&server, ACME, "order", run, fail);
    }
    order(&server, GLOBEX, "order", "g-secret", false);
    for run in ["o-done", "o-fail"] {
        await_state(&server, run, "awaiting-signal");
        approve(&server, run);
    }
    await_state(&server, "o-done", "completed");
    await_state(&server, "o-fail", "failed");
    for run in ["o-wait", "o-cancel"] {
        await_state(&server, run, "awaiting-signal");
    }
    let hook = json!({"component": "order", "workflow": "place-order", "headers": ["X-Shop"]});
    let stored = server
        .request(reqwest::Method::PUT, "/v1/hooks/orders", ACME)
        .json(&hook)
        .send()?;
    assert_eq!(stored.status(), 200);

    let profile = tempfile::tempdir()?;
    let runtime = tokio::runtime::Runtime::new()?;
    let client = runtime.block_on(browser(&driver, profile.path()))?;
    let walked = runtime.block_on(async {
        let session = walk_every_page(&client, &base, &hello["digest"], &patched["digest"]).await;
        // The browser goes whatever the walk came to.
        let closed = client.clone().close().await;
        let cookie = session?;
        closed?;
        Ok::<String, Box<dyn std::error::Error>>(cookie)
    })?;

    // What the UI did, as the API sees it.
    await_state(&server, "o-wait", "completed");
    let moved = server.get("/v1/runs/o-wait", ACME).expect(200);
    assert_eq!(moved["component"], patched["digest"], "o-wait was upgraded from the UI");
    let cancelled = server.get("/v1/runs/o-cancel", ACME).expect(200);
    assert_eq!(cancelled["state"], "cancelled");
    assert_eq!(cancelled["reason"], "customer called");
    let untouched = server.get("/v1/runs/g-secret", GLOBEX).expect(200);
    assert_eq!(untouched["state"], "awaiting-signal", "globex's run was not touched");

    refusals_without_a_browser(&server, &walked);
    a_page_reads_at_most_1000_runs(&server);
    Ok(())
}

/// A component's page pauses every unfinished run of it at once (each
/// keeping the reason given), and none of another component's, then
/// resumes them, saying how many each time. A run's page shows its
/// stream live: its values one by one as the run appends them, then its
/// end.
#[test]
fn the_console_pauses_a_components_runs_and_shows_a_runs_stream_live() -> Result {
    let driver = Chromedriver::start();
    let server = Server::start(&two_tenants());
    let base = server.url.clone();
    server.upload(ACME, "hello");
    server.upload(ACME, "order");
    for run in ["h-1", "h-2"] {
        let body = json!({"component": "hello", "workflow": "await-go", "input": {}, "run_id": run});
        server.post_json("/v1/runs", ACME, &body).expect(202);
        await_state(&server, run, "awaiting-signal");
    }
    order(&server, ACME, "order", "o-apart", false);
    await_state(&server, "o-apart", "awaiting-signal");

    let profile = tempfile::tempdir()?;
    let runtime = tokio::runtime::Runtime::new()?;
    let client = runtime.block_on(browser(&driver, profile.path()))?;
    runtime.block_on(async {
        let walked = async {
            client.goto(&format!("{base}/ui/components/hello")).await?;
            submit(&client, "main.signin form", &[("token", ACME)]).await?;
            await_shown(&client, "#batch-pause-form").await?;
            submit(&client, "#batch-pause-form", &[("reason", "a bad deploy")]).await?;
            await_text(&client, "p.notice", |t| {
                t == "Paused 2 unfinished runs of this component."
            })
            .await?;
            for (run, paused) in [("h-2", true), ("o-apart", false)] {
                client.goto(&format!("{base}/ui/runs/{run}")).await?;
                let standing = text(&client, "#live p.standing").await?;
                assert_eq!(standing.contains("a bad deploy"), paused, "{run}: {standing}");
            }
            client.goto(&format!("{base}/ui/components/hello")).await?;
            submit(&client, "#batch-resume-form", &[]).await?;
            await_text(&client, "p.notice", |t| {
                t == "Resumed 2 unfinished runs of this component."
            })
            .await?;
            watch_a_stream(&client, &server, &base).await?;
            Ok::<(), Box<dyn std::error::Error>>(())
        };
        let walked = walked.await;
        client.clone().close().await?;
        walked
    })?;
    for run in ["h-1", "h-2", "o-apart"] {
        let status = server.get(&format!("/v1/runs/{run}"), ACME).expect(200);
        assert!(status.get("paused").is_none(), "{status}");
        assert_eq!(status["state"], "awaiting-signal", "{status}");
    }
    Ok(())
}

/// The values the run page's stream `ticks` shows now.
async fn stream_values(client: &Client) -> Result<Vec<String>> {
    let script = "return Array.from(document.querySelectorAll('#streams .stream ol li'), (li) => li.innerText);";
    Ok(serde_json::from_value(client.execute(script, Vec::new()).await?)?)
}

/// Opens the page of a run streaming six ticks, a second apart, as soon
/// as it starts: the ticks come one by one, then the stream's end.
async fn watch_a_stream(client: &Client, server: &Server, base: &str) -> Result {
    let body = json!({"component": "hello", "workflow": "stream-ticks", "input": {"ticks": 6, "every_ms": 1000}, "run_id": "ticker"});
    server.post_json("/v1/runs", ACME, &body).expect(202);
    client.goto(&format!("{base}/ui/runs/ticker")).await?;
    eventually(async || stream_values(client).await, |shown| !shown.is_empty()).await?;
    let first_seen = stream_values(client).await?;
    assert!(first_seen.len() < 6, "the ticks came one by one: {first_seen:?}");
    await_shown(client, "#streams .stream[data-ended]").await?;
    let ticks: Vec<String> = (0..6).map(|tick| format!(r#"{{"tick":{tick}}}"#)).collect();
    assert_eq!(stream_values(client).await?, ticks);
    assert_eq!(text(client, "#streams .stream h3").await?, "ticks");
    screenshot(client, "run-stream").await?;
    Ok(())
}

/// Signs in, goes through every page and action, and returns the session
/// cookie it was given (for the refusals checked without a browser).
async fn walk_every_page(client: &Client, base: &str, globex_digest: &Value, patched: &Value) -> Result<String> {
    // Signing in: a page of the console sends a stranger to the form, and
    // back where it was once signed in.
    client.goto(&format!("{base}/ui/runs?state=completed")).await?;
    await_shown(client, "main.signin form").await?;
    assert!(client.current_url().await?.as_str().contains("/ui/login?next="));
    screenshot(client, "sign-in").await?;
    submit(client, "main.signin form", &[("token", "sst_not_a_token")]).await?;
    assert!(text(client, ".refusal").await?.contains("not known"));
    submit(client, "main.signin form", &[("token", ACME)]).await?;
    await_shown(client, "table.runs").await?;
    assert!(
        client
            .current_url()
            .await?
            .as_str()
            .ends_with("/ui/runs?state=completed")
    );
    assert_eq!(listed_runs(client).await?, ["o-done"]);
    let source = client.source().await?;
    assert!(!source.contains(ACME), "no page shows the token");
    let session = client.get_named_cookie("stepstone_session").await?;
    assert_eq!(session.http_only(), Some(true));
    assert_eq!(format!("{:?}", session.same_site()), "Some(Strict)");

    // The runs page: newest first, filtered from its form.
    client.goto(&format!("{base}/ui/runs")).await?;
    await_shown(client, "table.runs").await?;
    assert_eq!(listed_runs(client).await?, ["o-fail", "o-cancel", "o-wait", "o-done"]);
    assert_eq!(text(client, "#tenant").await?, "acme");
    screenshot(client, "runs").await?;
    let state = client.find(Locator::Css("form.filters select[name=state]")).await?;
    state.select_by_value("failed").await?;
    client
        .find(Locator::Css("form.filters button[type=submit]"))
        .await?
        .click()
        .await?;
    eventually(async || listed_runs(client).await, |runs| runs == &["o-fail"]).await?;
    client
        .goto(&format!(
            "{base}/ui/runs?order=oldest&workflow=place-order&component=order"
        ))
        .await?;
    await_shown(client, "table.runs").await?;
    assert_eq!(listed_runs(client).await?, ["o-done", "o-wait", "o-cancel", "o-fail"]);
    for filter in [
        "workflow=no-such-workflow",
        "from=2099-01-01T00:00",
        "to=2001-01-01T00:00",
    ] {
        client.goto(&format!("{base}/ui/runs?{filter}")).await?;
        assert_eq!(text(client, "p.empty").await?, "No runs match.", "{filter}");
    }
    client
        .goto(&format!("{base}/ui/runs?from=2001-01-01T00:00&to=2099-01-01T00:00"))
        .await?;
    await_shown(client, "table.runs").await?;
    assert_eq!(listed_runs(client).await?.len(), 4);
    client.goto(&format!("{base}/ui/runs?from=yesterday")).await?;
    assert!(text(client, "p.message").await?.contains("not a time"));

    // A finished run: its timeline, payloads, log lines; a replay check.
    client.goto(&format!("{base}/ui/runs")).await?;
    click_link(client, "o-done").await?;
    await_shown(client, "table.timeline").await?;
    let timeline = text(client, "table.timeline").await?;
    for expected in [
        "reserve",
        "charge",
        "attempt 1",
        "attempt 2",
        "sleep",
        "approve",
        "ship",
    ] {
        assert!(
            timeline.contains(expected),
            "{expected} missing from the timeline:\n{timeline}"
        );
    }
    assert!(text(client, "#output").await?.contains("\"tracking\": \"trk-o-done\""));
    assert!(text(client, "#input").await?.contains("\"order_id\": \"o-done\""));
    let logs = text(client, "table.logs").await?;
    for expected in [
        "reserving book for o-done",
        "attempt 1 failed",
        "charging 1200 cents",
        "shipping book",
    ] {
        assert!(logs.contains(expected), "{expected} missing from the log:\n{logs}");
    }
    screenshot(client, "run").await?;
    submit(client, "#replay-form", &[]).await?;
    await_text(client, "p.notice", |t| t.starts_with("Replay identical")).await?;

    // A run waiting for its approval: upgraded from the UI, then signalled;
    // the page follows it to its end without being reloaded.
    client.goto(&format!("{base}/ui/runs/o-wait")).await?;
    await_shown(client, "#live .state[data-state=awaiting-signal]").await?;
    assert!(text(client, "table.timeline").await?.contains("waiting, until"));
    let patched = patched.as_str().ok_or("a digest")?;
    submit(client, "#upgrade-form", &[("to", "order-patched")]).await?;
    let moved = format!("Moved to build {}", &patched[..12]);
    await_text(client, "p.notice", |t| t.starts_with(&moved)).await?;
    submit(
        client,
        "#signal-form",
        &[("name", "approve"), ("payload", r#"{"approved": true}"#)],
    )
    .await?;
    await_text(client, "p.notice", |t| t.starts_with("Signal sent")).await?;
    await_shown(client, "#live .state[data-state=completed]").await?;
    assert!(text(client, "#output").await?.contains("trk-o-wait"));

    // Cancelled from the UI, after a dry run of an upgrade it fails.
    client.goto(&format!("{base}/ui/runs/o-cancel")).await?;
    client
        .find(Locator::Css("#upgrade-form [name=dry_run]"))
        .await?
        .click()
        .await?;
    submit(client, "#upgrade-form", &[("to", "order-patched")]).await?;
    await_text(client, "p.notice", |t| t.contains("can move")).await?;
    submit(client, "#signal-form", &[("name", "bad name!"), ("payload", "{}")]).await?;
    await_text(client, "p.notice.refused", |t| t.contains("invalid signal name")).await?;
    // Paused and resumed from the UI before it is cancelled.
    submit(client, "#pause-form", &[("reason", "checking a deploy")]).await?;
    await_text(client, "p.notice", |t| t.starts_with("Paused")).await?;
    await_text(client, "#live p.standing", |t| {
        t.contains("paused") && t.contains("checking a deploy")
    })
    .await?;
    submit(client, "#resume-form", &[]).await?;
    await_text(client, "p.notice", |t| t.starts_with("Resumed")).await?;
    assert!(!text(client, "#live p.standing").await?.contains("paused"));
    await_shown(client, "#advance-form button").await?;
    submit(client, "#cancel-form", &[("reason", "customer called")]).await?;
    await_shown(client, "#live .state[data-state=cancelled]").await?;
    client.refresh().await?;
    await_shown(client, "#replay-form").await?;
    assert!(
        client.find(Locator::Css("#advance-form")).await.is_err(),
        "a finished run has no timer to advance"
    );
    assert!(text(client, "table.timeline").await?.contains("release"), "compensated");
    // Restarted from the UI: past its journal it is refused; from seq 1
    // (its reservation kept) a new run starts, linked to it.
    submit(client, "#restart-form", &[("seq", "999")]).await?;
    await_text(client, "p.notice.refused", |t| t.contains("or earlier")).await?;
    submit(client, "#restart-form", &[("seq", "1")]).await?;
    await_text(client, "p.notice", |t| t.starts_with("Restarted")).await?;
    let link = text(client, "#restarted-from").await?;
    assert!(link.contains("o-cancel") && link.contains("before seq 1"), "{link}");
    // The new run waits for its approval again: advanced from the UI, its
    // wait times out now, and the order fails for want of an approval.
    await_shown(client, "#live .state[data-state=awaiting-signal]").await?;
    submit(client, "#advance-form", &[]).await?;
    await_text(client, "p.notice", |t| t.starts_with("Advanced")).await?;
    await_shown(client, "#live .state[data-state=failed]").await?;
    assert!(text(client, "section.summary").await?.contains("no approval within"));

    // A failed run says why.
    client.goto(&format!("{base}/ui/runs/o-fail")).await?;
    assert!(text(client, "section.summary").await?.contains("no carrier takes book"));

    // Components, and one of them with the runs using it.
    client.goto(&format!("{base}/ui/components")).await?;
    await_shown(client, "table.components").await?;
    screenshot(client, "components").await?;
    click_link(client, "order").await?;
    await_shown(client, "#workflows").await?;
    assert_eq!(text(client, "#workflows").await?, "place-order");
    assert!(text(client, "#steps").await?.contains("reserve"));
    assert!(text(client, "table.runs").await?.contains("o-done"));
    screenshot(client, "component").await?;

    // The tenant: quotas, usage and its HTTP hooks.
    client.goto(&format!("{base}/ui/tenant")).await?;
    let hooks = text(client, "#hooks").await?;
    assert!(
        hooks.contains("POST /hooks/acme/orders") && hooks.contains("place-order") && hooks.contains("x-shop"),
        "{hooks}"
    );
    let started = client
        .find(Locator::XPath(
            "//table[@id='gauges']//tr[th='Runs started today']/td[1]",
        ))
        .await?;
    assert_eq!(started.text().await?, "5", "four runs and a restart");
    assert!(text(client, "#quotas").await?.contains("max_active_runs"));
    screenshot(client, "tenant").await?;

    // Another tenant's run and component, by crafted URLs: 404, nothing shown.
    let globex_digest = globex_digest.as_str().ok_or("a digest")?;
    for path in [
        "/ui/runs/g-secret".to_owned(),
        "/ui/runs/g-secret/live".to_owned(),
        format!("/ui/components/{globex_digest}"),
    ] {
        client.goto(&format!("{base}{path}")).await?;
        let page = client.source().await?;
        assert!(page.contains("404 Not Found"), "{path}: {page}");
        assert!(
            !page.contains("order_id") && !page.contains("awaiting-signal") && !page.contains("place-order"),
            "{path} shows nothing of it: {page}"
        );
    }

    // 390 px wide: every page fits.
    client.set_window_size(390, 844).await?;
    for (path, name) in [
        ("/ui/runs", "runs-390"),
        ("/ui/runs/o-done", "run-390"),
        ("/ui/components", ""),
        ("/ui/tenant", ""),
    ] {
        client.goto(&format!("{base}{path}")).await?;
        await_shown(client, "main").await?;
        assert!(fits_width(client).await?, "{path} scrolls sideways at 390 px");
        if !name.is_empty() {
            screenshot(client, name).await?;
        }
    }
    client.set_window_size(1280, 1000).await?;

    // Signing out ends the session in this browser.
    client.goto(&format!("{base}/ui/runs")).await?;
    client.find(Locator::Css("form.signout button")).await?.click().await?;
    await_shown(client, "main.signin").await?;
    client.goto(&format!("{base}/ui/runs")).await?;
    await_shown(client, "main.signin").await?;
    Ok(session.value().to_owned())
}

/// What a forged request gets, with and without the session's cookie.
fn refusals_without_a_browser(server: &Server, cookie: &str) {
    let client = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client");
    let post = |path: &str, cookie: Option<&str>, origin: Option<&str>, form: &[(&str, &str)]| {
        let mut request = client.post(format!("{}{path}", server.url)).form(form);
        if let Some(cookie) = cookie {
            request = request.header("cookie", format!("stepstone_session={cookie}"));
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send().expect("an answer").status().as_u16()
    };
    let cancel = [("csrf", "0123456789abcdef0123456789abcdef"), ("reason", "forged")];
    assert_eq!(
        post("/ui/runs/o-fail/cancel", Some(cookie), None, &cancel),
        403,
        "a wrong CSRF token"
    );
    assert_eq!(
        post(
            "/ui/runs/o-fail/cancel",
            Some(cookie),
            Some("http://evil.example"),
            &cancel
        ),
        403,
        "another site's form"
    );
    assert_eq!(
        post("/ui/runs/o-wait/advance", Some(cookie), None, &cancel),
        403,
        "an advance with a wrong CSRF token"
    );
    assert_eq!(
        post("/ui/components/order/pause", Some(cookie), None, &cancel),
        403,
        "a batch pause with a wrong CSRF token"
    );
    assert_eq!(
        post("/ui/runs/o-fail/cancel", None, None, &cancel),
        303,
        "no session: to the sign-in form"
    );
    let sign_in = |token: &str| {
        let answer = client
            .post(format!("{}/ui/login", server.url))
            .form(&[("token", token)])
            .send();
        answer.expect("an answer").status().as_u16()
    };
    assert_eq!(
        form_status(server, 4 << 20),
        401,
        "a form of exactly 4 MiB is read (its token is no tenant's)"
    );
    assert_eq!(
        form_status(server, (4 << 20) + 1),
        413,
        "a form one byte over 4 MiB is refused"
    );
    assert_eq!(
        sign_in(&format!("{ACME}{}", " ".repeat(300))),
        303,
        "spaces around a token are trimmed"
    );
    assert_eq!(sign_in(&"x".repeat(300)), 401);
    let page = client.get(format!("{}/ui/runs", server.url)).send().expect("an answer");
    assert_eq!(page.status().as_u16(), 303);
    let headers = client
        .get(format!("{}/ui/login", server.url))
        .send()
        .expect("an answer");
    let policy = headers.headers()["content-security-policy"].to_str().expect("text");
    assert!(policy.contains("script-src 'self'") && policy.contains("frame-ancestors 'none'"));
}

/// The status a sign-in form of `length` bytes is answered with: past its
/// limit the server stops reading it and answers, while the rest is
/// still being sent (a client such as reqwest then sees the connection
/// closed under it, so the form goes over a socket of its own).
fn form_status(server: &Server, length: usize) -> u16 {
    use std::io::{Read, Write};
    let address = server.url.trim_start_matches("http://").to_owned();
    let mut stream = std::net::TcpStream::connect(&address).expect("the server accepts");
    stream.set_read_timeout(Some(PATIENCE)).expect("a timeout");
    let mut writer = stream.try_clone().expect("a second handle");
    let sender = std::thread::spawn(move || {
        let head = format!(
            "POST /ui/login HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {length}\r\nConnection: close\r\n\r\ntoken="
        );
        let body = vec![b'x'; length - "token=".len()];
        // The server closes the connection once it has answered: writing
        // the rest then fails, as it should.
        let _ = writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(&body));
    });
    let mut status_line = [0u8; 12];
    stream.read_exact(&mut status_line).expect("an answer");
    drop(stream);
    let _ = sender.join();
    let text = String::from_utf8_lossy(&status_line);
    text.trim_start_matches("HTTP/1.1 ").parse().expect("a status")
}

/// The runs page's read limit at its edge: globex's newest 999 runs are
/// greetings, completed, then `g-edge` and `g-secret` await approval.
/// Filtered on that state (which no index holds: each run's status is
/// read), the first page reads 1,000 runs: `g-edge`, the 1,000th, is on
/// it, and `g-secret`, the 1,001st, is on the page its link goes on to.
fn a_page_reads_at_most_1000_runs(server: &Server) {
    order(server, GLOBEX, "order", "g-edge", false);
    await_state_of(server, GLOBEX, "g-edge", "awaiting-signal");
    let greetings: Vec<Value> = (0..999)
        .map(|i| json!({"component": "hello", "workflow": "greet", "input": {"name": format!("n{i}")}}))
        .collect();
    server
        .post_json(
            "/v1/groups",
            GLOBEX,
            &json!({"group_id": "greetings", "runs": greetings}),
        )
        .expect(202);
    let deadline = Instant::now() + PATIENCE;
    while server.get("/v1/groups/greetings", GLOBEX).expect(200)["counts"]["completed"] != 999 {
        assert!(Instant::now() < deadline, "the greetings never completed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let client = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client");
    let signed_in = client
        .post(format!("{}/ui/login", server.url))
        .form(&[("token", GLOBEX)])
        .send()
        .expect("an answer");
    let cookie = signed_in.headers()["set-cookie"].to_str().expect("text");
    let cookie = cookie.split(';').next().expect("a cookie").to_owned();
    let page = |query: &str| {
        let answer = client
            .get(format!("{}/ui/runs?{query}", server.url))
            .header("cookie", &cookie)
            .send()
            .expect("an answer");
        assert_eq!(answer.status().as_u16(), 200);
        answer.text().expect("a page")
    };
    let first = page("state=awaiting-signal");
    let listed = |page: &str, run: &str| page.contains(&format!("data-run=\"{run}\""));
    assert!(listed(&first, "g-edge"), "the 1,000th run read is on the first page");
    assert!(!listed(&first, "g-secret"), "the 1,001st run read is not");
    assert!(first.contains("Fewer runs matched among the next 1000 read"), "{first}");
    let next = first
        .split("href=\"/ui/runs?")
        .skip(1)
        .filter_map(|link| link.split('"').next())
        .find(|query| query.contains("cursor="))
        .expect("a link to the next page")
        .replace("&amp;", "&");
    let second = page(&next);
    assert!(listed(&second, "g-secret") && !listed(&second, "g-edge"), "{second}");
}
