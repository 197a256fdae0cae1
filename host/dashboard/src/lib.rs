//! Waft's dashboard: one page, served by the Frontend beside its gRPC API.
//!
//! The page holds no data of its own and no second API: it calls the
//! Frontend's gRPC methods through gRPC-web, with the same token and the same
//! authorization as every client, so a refusal on the page is the refusal
//! the CLI would get. What it needs to speak gRPC is the contract itself —
//! the descriptor set the servers already hold for reflection — served here
//! beside the bundle, so the page never drifts from the proto.
//!
//! The bundle is built from `web/` by `build.rs` and embedded: the binary
//! carries its page, and there is no separate server to run.

use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, X_FRAME_OPTIONS};

const INDEX: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/index.html"));
const SCRIPT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/app.js"));
const STYLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/app.css"));

/// The page's paths; every other path is the API's (or not found).
pub const PATHS: [&str; 4] = ["/", "/app.js", "/app.css", "/waft.binpb"];

/// The page's routes. `descriptors` is the encoded descriptor set of the
/// Frontend's contract, from which the page builds its gRPC-web client.
pub fn routes(descriptors: &'static [u8]) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/app.js",
            get(|| async { asset("text/javascript", SCRIPT) }),
        )
        .route("/app.css", get(|| async { asset("text/css", STYLE) }))
        .route(
            "/waft.binpb",
            get(move || async move { asset("application/octet-stream", descriptors) }),
        )
}

fn asset(content_type: &'static str, body: &'static [u8]) -> Response {
    (
        [
            (CONTENT_TYPE, content_type),
            // The page and its API come from one origin; nothing else runs.
            (
                CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
            ),
            (X_FRAME_OPTIONS, "DENY"),
            // One binary, one page: a new deploy must not mix with a cached one.
            (CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use waft_core::machine::ENDED;

    /// The page's list of ended states is the state table's.
    #[test]
    fn the_page_knows_the_ended_states() {
        let api = include_str!("../web/src/api.js");
        let line = api
            .lines()
            .find_map(|line| line.strip_prefix("export const ENDED = "))
            .expect("web/src/api.js exports ENDED");
        let names: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        let ended: Vec<&str> = ENDED.iter().map(|s| s.as_str()).collect();
        assert_eq!(names, ended);
    }
}
