//! Bad input gets one clear line on stderr, a non-zero exit, and leaves the
//! store untouched.

use stepstone_e2e::{Host, arg, guest};

/// Runs `stepstone ARGS`, expects failure, and checks nothing was stored.
fn refused(host: &Host, args: &[&str]) -> String {
    let stderr = host.run(args).failure();
    assert!(
        host.stored_objects().is_empty(),
        "something was stored: {:?}",
        host.stored_objects()
    );
    stderr
}

#[test]
fn a_file_that_is_not_a_component_is_refused() {
    let host = Host::new();
    let junk = host.data_dir().join("junk.wasm");
    std::fs::write(&junk, b"this is not wasm").unwrap();
    let stderr = refused(&host, &["run", arg(&junk), "greet"]);
    assert!(stderr.contains("is not a WebAssembly component"), "{stderr}");
}

#[test]
fn a_core_module_is_refused_with_the_command_that_fixes_it() {
    let host = Host::new();
    let module = host.data_dir().join("module.wasm");
    std::fs::write(&module, wat_module()).unwrap();
    let stderr = refused(&host, &["run", arg(&module), "greet"]);
    assert!(
        stderr.contains("core WebAssembly module")
            && stderr.contains("`stepstone componentize MODULE.wasm -o COMPONENT.wasm`"),
        "{stderr}"
    );
}

/// The smallest core module: the 8-byte header.
fn wat_module() -> Vec<u8> {
    b"\0asm\x01\0\0\0".to_vec()
}

#[test]
fn a_missing_file_is_named() {
    let host = Host::new();
    let stderr = refused(&host, &["run", "/nonexistent/hello.wasm", "greet"]);
    assert!(stderr.contains("cannot read /nonexistent/hello.wasm"), "{stderr}");
}

#[test]
fn a_component_lacking_the_workflow_is_refused_with_what_it_has() {
    let host = Host::new();
    let hello = guest("hello");
    let stderr = refused(&host, &["run", arg(&hello), "nope", "--input", "{}"]);
    assert!(
        stderr.contains("no workflow `nope`") && stderr.contains("greet"),
        "{stderr}"
    );
}

#[test]
fn malformed_input_json_is_refused() {
    let host = Host::new();
    let hello = guest("hello");
    let stderr = refused(&host, &["run", arg(&hello), "greet", "--input", "{name: Ada"]);
    assert!(stderr.contains("input is not valid JSON"), "{stderr}");
}

#[test]
fn an_unknown_run_id_is_reported() {
    let host = Host::new();
    for args in [
        vec!["status", "ghost"],
        vec!["history", "ghost"],
        vec!["replay", "ghost"],
        vec!["signal", "ghost", "go", "{}"],
    ] {
        let stderr = refused(&host, &args);
        assert!(stderr.contains("no run `ghost`"), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: not one line: {stderr}");
    }
}

#[test]
fn every_error_is_one_line() {
    let host = Host::new();
    let hello = guest("hello");
    let stderr = refused(&host, &["run", arg(&hello), "greet", "--input", "[1,"]);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
}

#[test]
fn a_reader_that_stops_reading_ends_the_command_quietly() {
    let host = Host::new();
    let mut child = host
        .command(&["list", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("stepstone starts");
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("stepstone ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_corrupt_run_record_is_named_and_passed_over_while_the_others_go_on() {
    let host = Host::new();
    let order = guest("order");
    for run in ["broken", "healthy"] {
        let input = stepstone_e2e::order_input(run, 0, serde_json::json!({"approval_timeout_ms": 600_000}));
        host.run_detached(&order, "place-order", run, &input.to_string());
    }
    host.run(&["signal", "healthy", "approve", r#"{"approved":true}"#])
        .success();
    let record = host.data_dir().join("objects/tenants/default/runs/broken/run");
    assert!(record.exists(), "{} is where the run record lives", record.display());
    std::fs::write(&record, b"not a record").unwrap();

    let listed = host.run(&["list"]);
    assert!(!listed.0.status.success(), "list says something is wrong");
    assert!(listed.stdout().contains("healthy"), "{}", listed.stdout());
    let stderr = listed.stderr();
    assert!(
        stderr.contains("broken") && stderr.contains("runs/broken/run"),
        "{stderr}"
    );

    let resumed = host.run(&["resume", "--detach-after", "1s"]);
    assert!(resumed.stdout().contains("healthy completed"), "{}", resumed.stdout());
    let stderr = resumed.stderr();
    assert!(
        stderr.contains("run broken cannot be resumed") && stderr.contains("corrupt record at"),
        "{stderr}"
    );
    assert!(!resumed.0.status.success());
    assert_eq!(
        std::fs::read(&record).unwrap(),
        b"not a record",
        "nothing overwrote the corrupt record"
    );
}

#[test]
fn a_store_that_cannot_be_used_is_named_with_what_to_check() {
    let host = Host::new();
    let stderr = host.run(&["--store", "nowhere", "list"]).failure();
    assert!(
        stderr.contains("cannot use the store nowhere") && stderr.contains("s3://BUCKET/PREFIX"),
        "{stderr}"
    );

    let s3 = stepstone_e2e::seaweedfs();
    let against = |store: &str, secret: &str| {
        let mut command = host.command(&["--store", store, "list"]);
        command.envs(s3.env()).env("AWS_SECRET_ACCESS_KEY", secret);
        stepstone_e2e::Run(command.output().expect("stepstone starts")).failure()
    };
    let good_secret = s3
        .env()
        .into_iter()
        .find(|(k, _)| *k == "AWS_SECRET_ACCESS_KEY")
        .unwrap()
        .1;
    let missing = against("s3://no-such-bucket/x", &good_secret);
    assert!(
        missing.contains("cannot use the store s3://no-such-bucket/x"),
        "{missing}"
    );
    assert!(missing.contains("check the bucket exists"), "{missing}");
    let unsigned = against(&s3.fresh_store(), "not-the-secret");
    assert!(unsigned.contains("credentials"), "{unsigned}");
    assert_eq!(unsigned.lines().count(), 1, "one line: {unsigned}");
}

/// A store whose create-only writes overwrite (s3rver ignores
/// `If-None-Match: *`) is refused before anything runs, by `stepstone
/// store check`, by any command and by `serve`, in one line naming the
/// store and what to use instead; a store that honours them (SeaweedFS)
/// passes the same check.
#[test]
fn a_store_ignoring_create_only_writes_is_refused_before_anything_runs() {
    let ignoring = stepstone_e2e::s3rver();
    let mut host = Host::new().with_env("STEPSTONE_STORE", &ignoring.store());
    for (name, value) in ignoring.env() {
        host = host.with_env(name, &value);
    }
    let says_why = |refused: &str| {
        assert!(
            refused.contains(&format!("cannot use the store {}", ignoring.store())),
            "{refused}"
        );
        assert!(refused.contains("replaced the first instead of failing"), "{refused}");
        assert!(refused.contains("use one that honours them"), "{refused}");
        assert_eq!(refused.lines().count(), 1, "one line: {refused}");
    };
    says_why(&host.run(&["store", "check"]).failure());
    says_why(&host.run(&["list"]).failure());
    let mut serving = host.spawn(&["serve", "--listen", "127.0.0.1:0"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let exited = loop {
        if let Some(exited) = serving.try_wait().expect("the server is waited for") {
            break exited;
        }
        if std::time::Instant::now() > deadline {
            let _ = serving.kill();
            panic!("serve kept running on a store that ignores create-only writes");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(!exited.success(), "serve refused the store");
    let output = serving.wait_with_output().expect("its output");
    says_why(stepstone_e2e::Run(output).stderr().trim());

    let honouring = Host::on_s3().run(&["store", "check"]).success();
    assert!(
        honouring.stdout().contains("answers and honours create-only writes"),
        "{}",
        honouring.stdout()
    );
}

/// A lease shorter than a second would lapse at the first slow store call:
/// refused, naming the floor; a second is taken.
#[test]
fn a_lease_ttl_under_a_second_is_refused_naming_the_floor() {
    let host = Host::new();
    for ttl in ["999ms", "0s"] {
        let refused = host.run(&["--lease-ttl", ttl, "list"]).failure();
        assert!(refused.contains("is shorter than 1s"), "{ttl}: {refused}");
    }
    host.run(&["--lease-ttl", "1s", "list"]).success();
}
