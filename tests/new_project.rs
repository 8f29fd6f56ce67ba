//! `stepstone new`: each language's project, written into an empty folder,
//! builds and runs as its README says (the block marked
//! `recipe=build-and-run`, run as written with the tools `make guests`
//! installs on the PATH and no checkout of this repository named), and the
//! names and folders it must refuse are refused, with nothing written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use stepstone_e2e::{Host, Run, polyglot_pin, recipes, root};

/// `stepstone ARGS` run in `folder`.
fn stepstone_in(host: &Host, folder: &Path, args: &[&str]) -> Run {
    Run(host
        .command(args)
        .current_dir(folder)
        .output()
        .expect("stepstone starts"))
}

/// Writes a `lang` project named `name` into a fresh folder; returns that
/// folder and the project's.
fn new_project(host: &Host, lang: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
    let parent = tempfile::tempdir().expect("an empty folder");
    stepstone_in(host, parent.path(), &["new", "--lang", lang, name]).success();
    let project = parent.path().join(name);
    (parent, project)
}

fn readme(project: &Path) -> String {
    std::fs::read_to_string(project.join("README.md")).expect("the project has a README")
}

/// Every file under `dir` with its contents.
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    files_under(dir)
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).expect("a file");
            (path, bytes)
        })
        .collect()
}

/// Writes a project, runs its README's build-and-run commands as written
/// and checks what they print, and that the build changed none of the
/// files written (Rust's lockfile among them: it was complete).
fn builds_and_runs_as_its_readme_says(lang: &str) {
    let host = Host::new();
    let (_parent, project) = new_project(&host, lang, "hello-guest");
    let written = contents(&project);
    let mut recipes = recipes(&readme(&project));
    let recipe = recipes
        .remove("build-and-run")
        .expect("the README has its build-and-run block");
    assert!(
        recipes.is_empty() && recipe.files.is_empty(),
        "{lang}: only commands to run"
    );
    recipe.run(lang, &project, &host, &[]);
    let after = contents(&project);
    for (path, bytes) in &written {
        assert!(
            after.get(path) == Some(bytes),
            "{lang}: the build changed {}",
            path.display()
        );
    }
    assert!(
        after.contains_key(&project.join("hello-guest.wasm")),
        "{lang}: the component is built"
    );
}

#[test]
fn a_rust_project_builds_and_runs_as_its_readme_says() {
    builds_and_runs_as_its_readme_says("rust");
}

#[test]
fn a_python_project_builds_and_runs_as_its_readme_says() {
    builds_and_runs_as_its_readme_says("python");
}

#[test]
fn a_javascript_project_builds_and_runs_as_its_readme_says() {
    builds_and_runs_as_its_readme_says("js");
}

#[test]
fn a_c_project_builds_and_runs_as_its_readme_says() {
    builds_and_runs_as_its_readme_says("c");
}

#[test]
fn the_rust_lockfile_pins_the_versions_the_examples_are_built_with() {
    let host = Host::new();
    let (_parent, project) = new_project(&host, "rust", "pinned");
    let lock = std::fs::read_to_string(project.join("Cargo.lock")).expect("a lockfile");
    let examples = std::fs::read_to_string(root().join("examples-guests/Cargo.lock")).expect("the examples' lockfile");
    let packages = |lock: &str| -> Vec<String> {
        lock.split("\n\n")
            .filter(|block| block.starts_with("[[package]]") && block.contains("\nsource = "))
            .map(|block| block.lines().take(3).collect::<Vec<_>>().join("\n"))
            .collect()
    };
    let pinned = packages(&lock);
    assert!(
        pinned
            .iter()
            .any(|p| p.contains("\"wit-bindgen\"\nversion = \"0.60.0\"")),
        "{pinned:?}"
    );
    let examples = packages(&examples);
    for package in &pinned {
        assert!(examples.contains(package), "the examples build {package} too");
    }
}

#[test]
fn each_readme_installs_the_tools_at_the_versions_the_build_pins() {
    let host = Host::new();
    let python = readme(&new_project(&host, "python", "p").1);
    let install = format!(
        "pip install componentize-py=={}",
        polyglot_pin("COMPONENTIZE_PY_VERSION")
    );
    assert!(python.contains(&install), "{install}");
    let c = readme(&new_project(&host, "c", "c").1);
    let install = format!("--version {} wit-bindgen-cli", polyglot_pin("WIT_BINDGEN_VERSION"));
    assert!(c.contains(&install), "{install}");
    let (_parent, js) = new_project(&host, "javascript", "j");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(js.join("package.json")).expect("package.json")).expect("JSON");
    let readme = readme(&js);
    assert!(readme.contains("npm ci"));
    for tool in ["componentize-js", "preview2-shim"] {
        let version = manifest["devDependencies"][format!("@bytecodealliance/{tool}")]
            .as_str()
            .expect("a pinned version");
        assert!(readme.contains(&format!("{tool} {version}")), "{tool} {version}");
    }
}

#[test]
fn a_project_needs_no_checkout_its_contract_is_the_hosts() {
    let host = Host::new();
    let (_parent, project) = new_project(&host, "c", "standalone");
    for file in ["wit/worlds.wit", "wit/durable.wit", "wit/deps/http.wit"] {
        let theirs = std::fs::read(root().join(file)).expect("the repository's file");
        assert_eq!(std::fs::read(project.join(file)).ok(), Some(theirs), "{file}");
    }
}

/// Every file under `dir`, as paths below it.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}

#[test]
fn hostile_names_are_refused_and_nothing_is_written() {
    let host = Host::new();
    let parent = tempfile::tempdir().expect("an empty folder");
    let absolute = parent.path().join("absolute");
    let huge = "a".repeat(10_000);
    let refusals = [
        ("", "empty"),
        ("../x", "cannot name a folder"),
        (absolute.to_str().expect("UTF-8"), "cannot name a folder"),
        ("Greeter", "cannot name a folder"),
        ("1st", "cannot name a folder"),
        ("x y", "cannot name a folder"),
        (huge.as_str(), "10000 characters long: at most 64"),
    ];
    for (name, says) in refusals {
        let error = stepstone_in(&host, parent.path(), &["new", "--lang", "python", name]).failure();
        assert!(error.contains(says), "{name:.50}: {error}");
        assert!(error.len() < 400, "the error does not echo a huge name: {error:.500}");
    }
    for (name, says) in [("fn", "Rust keyword"), ("serde", "a crate the project depends on")] {
        let error = stepstone_in(&host, parent.path(), &["new", "--lang", "rust", name]).failure();
        assert!(error.contains(says), "{name}: {error}");
    }
    let written: Vec<_> = std::fs::read_dir(parent.path()).expect("the folder").collect();
    assert!(written.is_empty(), "nothing was written: {written:?}");
    assert!(!absolute.exists());
}

#[test]
fn an_unknown_language_is_refused_with_the_known_ones() {
    let host = Host::new();
    let parent = tempfile::tempdir().expect("an empty folder");
    let error = stepstone_in(&host, parent.path(), &["new", "--lang", "cobol", "x"]).failure();
    for lang in ["rust", "python", "js", "c"] {
        assert!(error.contains(lang), "{lang}: {error}");
    }
    assert!(!parent.path().join("x").exists());
}

#[test]
fn a_folder_with_anything_in_it_is_refused_and_left_as_it_was() {
    let host = Host::new();
    let parent = tempfile::tempdir().expect("an empty folder");
    let mine = parent.path().join("greeter");
    std::fs::create_dir_all(mine.join("src")).expect("a folder");
    std::fs::write(mine.join("src/lib.rs"), "mine").expect("a file");
    let error = stepstone_in(&host, parent.path(), &["new", "--lang", "rust", "greeter"]).failure();
    assert!(error.contains("is not empty"), "{error}");
    let error = stepstone_in(
        &host,
        parent.path(),
        &["new", "--lang", "c", "other", "--dir", "greeter"],
    )
    .failure();
    assert!(error.contains("is not empty"), "{error}");
    assert_eq!(files_under(&mine), [mine.join("src/lib.rs")]);
    assert_eq!(
        std::fs::read_to_string(mine.join("src/lib.rs")).expect("the file"),
        "mine"
    );

    std::fs::write(parent.path().join("plain"), "mine").expect("a file");
    let error = stepstone_in(&host, parent.path(), &["new", "--lang", "js", "plain"]).failure();
    assert!(error.contains("is not a folder"), "{error}");
    assert_eq!(
        std::fs::read_to_string(parent.path().join("plain")).expect("the file"),
        "mine"
    );
}

#[test]
fn an_empty_folder_or_a_new_one_under_dir_is_written() {
    let host = Host::new();
    let parent = tempfile::tempdir().expect("an empty folder");
    std::fs::create_dir(parent.path().join("empty")).expect("a folder");
    stepstone_in(&host, parent.path(), &["new", "--lang", "python", "empty"]).success();
    assert!(parent.path().join("empty/app.py").is_file());
    let nested = parent.path().join("a/b/c");
    let nested_arg = nested.to_str().expect("UTF-8");
    let run = stepstone_in(
        &host,
        parent.path(),
        &["new", "--lang", "c", "greeter", "--dir", nested_arg],
    )
    .success();
    assert!(nested.join("workflow.c").is_file() && nested.join("stepstone/stepstone_guest.h").is_file());
    assert!(
        !parent.path().join("greeter").exists(),
        "--dir, not NAME, is the folder"
    );
    assert!(
        run.stderr().contains("greeter-steps.wasm"),
        "it says how to build and run: {}",
        run.stderr()
    );
}

#[test]
fn new_writes_files_only_even_given_a_server() {
    let host = Host::new();
    let parent = tempfile::tempdir().expect("an empty folder");
    let args = [
        "--server",
        "http://127.0.0.1:9",
        "--token",
        "t",
        "new",
        "--lang",
        "rust",
        "offline",
    ];
    stepstone_in(&host, parent.path(), &args).success();
    assert!(parent.path().join("offline/stepstone-guest/src/lib.rs").is_file());
}
