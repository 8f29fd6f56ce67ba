//! The console's stylesheet and script, compiled into the binary: the
//! console loads nothing from anywhere else.
//!
//! Invariant: an asset's URL names a digest of its bytes, so a browser may
//! keep it for good and still never runs an old script against a new page.

use std::sync::LazyLock;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::extract::Path;

/// One file the console's pages load.
pub struct Asset {
    name: &'static str,
    body: &'static str,
    content_type: &'static str,
    url: LazyLock<String>,
}

impl Asset {
    /// Where pages load it from.
    pub fn url(&self) -> &str {
        &self.url
    }
}

macro_rules! asset {
    ($name:literal, $content_type:literal) => {
        Asset {
            name: $name,
            body: include_str!(concat!("assets/", $name)),
            content_type: $content_type,
            url: LazyLock::new(|| {
                let digest = hex::encode(Sha256::digest(include_str!(concat!("assets/", $name))));
                format!("/ui/assets/{}?v={}", $name, &digest[..16])
            }),
        }
    };
}

pub static CSS: Asset = asset!("console.css", "text/css; charset=utf-8");
pub static JS: Asset = asset!("console.js", "text/javascript; charset=utf-8");

/// `GET /ui/assets/{name}`.
pub async fn serve(Path(name): Path<String>) -> Response {
    let Some(asset) = [&CSS, &JS].into_iter().find(|asset| asset.name == name) else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let headers = [
        (header::CONTENT_TYPE, asset.content_type),
        (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
    ];
    (headers, asset.body).into_response()
}
