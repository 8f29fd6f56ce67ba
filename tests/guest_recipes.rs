//! The recipes of guest-sdk/README.md, run as written: for each recipe, its
//! `file=` blocks are written to an empty folder, its shell blocks run there
//! with the tools `make guests` installed on the PATH, and the last line the
//! last block prints must be the JSON of its `output` block. So the guide
//! cannot fall behind the code.

use serde_json::Value;
use stepstone_e2e::{Host, Recipe, polyglot_pin, recipes, root};

fn run_recipe(name: &str, recipe: &Recipe) {
    let folder = tempfile::tempdir().expect("an empty folder");
    recipe.run(
        name,
        folder.path(),
        &Host::new(),
        &[("STEPSTONE_REPO", root().as_path())],
    );
}

fn guide() -> String {
    std::fs::read_to_string(root().join("guest-sdk/README.md")).expect("the guide exists")
}

fn recipe(name: &str) -> Recipe {
    recipes(&guide())
        .remove(name)
        .unwrap_or_else(|| panic!("the guide has no recipe {name}"))
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
    let guide = guide();
    let lock = std::fs::read_to_string(root().join("guest-sdk/js/package.json")).expect("package.json");
    let lock: Value = serde_json::from_str(&lock).expect("package.json is JSON");
    let js = &lock["devDependencies"];
    for install in [
        format!("componentize-py=={}", polyglot_pin("COMPONENTIZE_PY_VERSION")),
        format!("--version {} wit-bindgen-cli", polyglot_pin("WIT_BINDGEN_VERSION")),
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
