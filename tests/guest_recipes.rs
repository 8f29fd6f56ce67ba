//! The recipes of guest-sdk/README.md, run as written: for each recipe, its
//! `file=` blocks are written to an empty folder, its shell blocks run there
//! with the tools `make guests` installed on the PATH, and the last line the
//! last block prints must be the JSON of its `output` block. So the guide
//! cannot fall behind the code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use stepstone_e2e::{Host, root};

/// One recipe: the files it writes, the shell blocks it runs, what it prints.
#[derive(Default, Debug)]
struct Recipe {
    files: Vec<(String, String)>,
    scripts: Vec<String>,
    output: Option<Value>,
}

/// The recipes of the guide, by name, from its fenced blocks whose info
/// string carries `recipe=NAME` (and `file=PATH` or `output`).
fn recipes(guide: &str) -> BTreeMap<String, Recipe> {
    let mut recipes: BTreeMap<String, Recipe> = BTreeMap::new();
    let mut lines = guide.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else { continue };
        let body: Vec<&str> = lines.by_ref().take_while(|l| !l.starts_with("```")).collect();
        let body = body.join("\n") + "\n";
        let words: Vec<&str> = info.split_whitespace().collect();
        let Some(name) = words.iter().find_map(|w| w.strip_prefix("recipe=")) else {
            continue;
        };
        let recipe = recipes.entry(name.to_owned()).or_default();
        if let Some(file) = words.iter().find_map(|w| w.strip_prefix("file=")) {
            recipe.files.push((file.to_owned(), body));
        } else if words.contains(&"output") {
            recipe.output = Some(serde_json::from_str(&body).expect("an output block is JSON"));
        } else {
            recipe.scripts.push(body);
        }
    }
    recipes
}

/// The directory of the `stepstone` binary this test drives.
fn binary_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its path");
    exe.parent()
        .and_then(Path::parent)
        .expect("tests run from target/<profile>/deps")
        .to_owned()
}

/// The PATH the guide assumes: the host and the tools `make guests` installs.
fn tools_path() -> String {
    let tools = root().join("target/tools");
    let dirs = [
        binary_dir(),
        tools.join("py/bin"),
        tools.join("js/node_modules/.bin"),
        tools.join("bin"),
    ];
    let mut path: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    path.push(std::env::var("PATH").unwrap_or_default());
    path.join(":")
}

fn run_recipe(name: &str, recipe: &Recipe) {
    let host = Host::new();
    let folder = tempfile::tempdir().expect("an empty folder");
    for (file, body) in &recipe.files {
        let path = folder.path().join(file);
        std::fs::create_dir_all(path.parent().expect("in the folder")).expect("the folder is made");
        std::fs::write(path, body).expect("the recipe's file is written");
    }
    let mut printed = String::new();
    for script in &recipe.scripts {
        let output = Command::new("bash")
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(folder.path())
            .env("PATH", tools_path())
            .env("STEPSTONE_REPO", root())
            .env("STEPSTONE_DATA", host.data_dir())
            // The examples' guest build dir: the Rust recipe reuses the
            // wasm32 std and the dependencies built there (cargo locks it).
            .env("CARGO_TARGET_DIR", root().join("target/guest-build"))
            .output()
            .expect("bash starts");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        assert!(
            output.status.success(),
            "recipe {name} failed:\n{script}\nstdout: {stdout}\nstderr: {stderr}"
        );
        printed = stdout.into_owned();
    }
    let last = printed
        .lines()
        .last()
        .unwrap_or_else(|| panic!("recipe {name} printed nothing"));
    let expected = recipe
        .output
        .as_ref()
        .unwrap_or_else(|| panic!("recipe {name} shows no output"));
    let got: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("recipe {name}: {last:?} is not JSON: {e}"));
    assert_eq!(&got, expected, "recipe {name}");
}

fn guide() -> String {
    std::fs::read_to_string(root().join("guest-sdk/README.md")).expect("the guide exists")
}

fn recipe(name: &str) -> Recipe {
    let mut all = recipes(&guide());
    let recipe = all
        .remove(name)
        .unwrap_or_else(|| panic!("the guide has no recipe {name}"));
    assert!(
        !recipe.scripts.is_empty() && recipe.output.is_some(),
        "recipe {name} is incomplete: {recipe:?}"
    );
    recipe
}

#[test]
fn the_guide_has_its_recipes_and_nothing_else() {
    let names: Vec<String> = recipes(&guide()).into_keys().collect();
    assert_eq!(
        names,
        ["c", "javascript", "javascript-http", "python", "python-http", "rust"]
    );
}

#[test]
fn the_guide_pins_the_versions_the_build_installs() {
    let (guide, make) = (
        guide(),
        std::fs::read_to_string(root().join("mk/polyglot.mk")).expect("mk/polyglot.mk"),
    );
    let pin = |name: &str| {
        let line = make
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name}"));
        line.split(":=").nth(1).expect("NAME := VALUE").trim().to_owned()
    };
    let lock = std::fs::read_to_string(root().join("guest-sdk/js/package.json")).expect("package.json");
    let lock: Value = serde_json::from_str(&lock).expect("package.json is JSON");
    let js = &lock["devDependencies"];
    for install in [
        format!("componentize-py=={}", pin("COMPONENTIZE_PY_VERSION")),
        format!("--version {} wit-bindgen-cli", pin("WIT_BINDGEN_VERSION")),
        format!(
            "@bytecodealliance/componentize-js@{}",
            js["@bytecodealliance/componentize-js"].as_str().unwrap()
        ),
        format!(
            "@bytecodealliance/preview2-shim@{}",
            js["@bytecodealliance/preview2-shim"].as_str().unwrap()
        ),
    ] {
        assert!(guide.contains(&install), "the guide does not install {install}");
    }
}

#[test]
fn the_python_recipe_runs_as_written() {
    run_recipe("python", &recipe("python"));
}

#[test]
fn the_javascript_recipe_runs_as_written() {
    run_recipe("javascript", &recipe("javascript"));
}

#[test]
fn the_python_http_recipe_runs_as_written() {
    run_recipe("python-http", &recipe("python-http"));
}

#[test]
fn the_javascript_http_recipe_runs_as_written() {
    run_recipe("javascript-http", &recipe("javascript-http"));
}

#[test]
fn the_rust_recipe_runs_as_written() {
    run_recipe("rust", &recipe("rust"));
}

#[test]
fn the_c_recipe_runs_as_written() {
    run_recipe("c", &recipe("c"));
}
