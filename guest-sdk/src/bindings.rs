//! The wit-bindgen output for the `workflows-and-steps` world (with the
//! WASI interfaces a step may import): raw imports,
//! the export traits and the export macro. The rest of the crate wraps it;
//! it is public only because [`export!`](crate::export) expands in the
//! user's crate and must name these items from there.

wit_bindgen::generate!({
    world: "workflows-and-steps",
    path: "../wit",
    // The macro is `pub` so that `export!`, expanding in the user's crate,
    // can invoke it; `export!` passes `$crate::bindings` as the types' path,
    // so no default bindings module is needed and a renamed dependency works.
    pub_export_macro: true,
    // `export` is the name of this crate's own user-facing macro.
    export_macro_name: "export_bindings",
    // The WASI packages the `steps` world imports (wasi:http, wasi:config
    // and what they use) are generated here too: no other crate binds them.
    generate_all,
});
