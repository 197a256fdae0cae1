//! The Frontend's gRPC request handling: any bytes, decoded as any
//! Frontend request, reach the real service (decoding, validation, the
//! Frontend role, a SQLite store with a deployed lambda) and get an answer.
//! Bad input must be a client error: `INTERNAL` or `UNKNOWN` for a request
//! is a finding, as is a panic.
#![no_main]

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use libfuzzer_sys::fuzz_target;
use tonic::codegen::tokio_stream::StreamExt;
use tonic::{Code, Request};
use waft_api::FrontendService;
use waft_api::proto::frontend_server::Frontend as _;
use waft_core::LambdaConfig;
use waft_services::{ClientApi, DueSignal, Frontend, SystemClock};
use waft_store::SqliteStore;

/// The `hello` sample, as the workspace's build leaves it. Not read through
/// `waft-sample-artifacts`: its build script would build every sample again
/// in this build (its profile differs from the tests'), rewriting the files
/// the tests read when CI builds the targets beside them.
const HELLO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../sample-lambdas/target/wasm32-wasip2/release/hello.wasm"
);

struct Nobody;

#[async_trait]
impl DueSignal for Nobody {
    async fn due(&self, _at: waft_store::Millis) {}
}

fn service() -> &'static FrontendService {
    static SERVICE: OnceLock<FrontendService> = OnceLock::new();
    SERVICE.get_or_init(|| {
        waft_fuzz::tokio().block_on(async {
            // On tmpfs when there is one: the store syncs every write.
            let base = std::path::Path::new("/dev/shm");
            let dir = if base.is_dir() {
                tempfile::tempdir_in(base)
            } else {
                tempfile::tempdir()
            }
            .expect("a temporary directory")
            .keep();
            let store = SqliteStore::open(&dir.join("waft.db"))
                .await
                .expect("a SQLite store");
            let frontend = Arc::new(Frontend::new(
                Arc::new(store),
                Arc::new(SystemClock),
                waft_fuzz::runtime(),
                Arc::new(Nobody),
            ));
            let hello =
                std::fs::read(HELLO).expect("hello built (scripts/fuzz builds the samples)");
            frontend
                .lambda_deploy("hello", hello, LambdaConfig::default())
                .await
                .expect("hello deploys");
            FrontendService(frontend)
        })
    })
}

/// Decodes `bytes` as the request of `method` and calls it; the status of
/// a refusal, `None` for an answer or undecodable bytes.
macro_rules! call {
    ($service:expr, $bytes:expr, $method:ident) => {
        match prost::Message::decode($bytes) {
            Ok(request) => $service.$method(Request::new(request)).await.err(),
            Err(_) => None,
        }
    };
}

/// [`call!`] for a method that answers with a stream: the refusal may come
/// first, or in the stream (a deploy reports, then answers).
macro_rules! call_streamed {
    ($service:expr, $bytes:expr, $method:ident) => {
        match prost::Message::decode($bytes) {
            Ok(request) => match $service.$method(Request::new(request)).await {
                Err(status) => Some(status),
                Ok(response) => {
                    let mut stream = response.into_inner();
                    let mut refused = None;
                    while let Some(item) = StreamExt::next(&mut stream).await {
                        refused = item.err().or(refused);
                    }
                    refused
                }
            },
            Err(_) => None,
        }
    };
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, bytes)) = data.split_first() else {
        return;
    };
    let service = service();
    let refused = waft_fuzz::tokio().block_on(async {
        match selector % 28 {
            0 => call!(service, bytes, schedule),
            1 => call!(service, bytes, schedule_batch),
            2 => call!(service, bytes, get_task),
            3 => call!(service, bytes, list_tasks),
            4 => call!(service, bytes, cancel_task),
            5 => call_streamed!(service, bytes, deploy_lambda),
            6 => call!(service, bytes, get_lambda),
            7 => call!(service, bytes, list_lambdas),
            8 => call!(service, bytes, rollback_lambda),
            9 => call!(service, bytes, list_versions),
            10 => call!(service, bytes, get_component),
            11 => call!(service, bytes, set_gate),
            12 => call!(service, bytes, list_gates),
            13 => call!(service, bytes, redrive_dead),
            14 => call!(service, bytes, list_attempts),
            15 => call!(service, bytes, create_cron),
            16 => call!(service, bytes, list_crons),
            17 => call!(service, bytes, delete_cron),
            18 => call!(service, bytes, create_token),
            19 => call!(service, bytes, list_tokens),
            20 => call!(service, bytes, count_tasks),
            21 => call!(service, bytes, lambda_stats),
            22 => call!(service, bytes, preview_cron),
            23 => call_streamed!(service, bytes, get_artifact),
            24 => call!(service, bytes, wait_lambda_change),
            25 => call!(service, bytes, get_journal),
            26 => call!(service, bytes, task_history),
            _ => call!(service, bytes, revoke_token),
        }
    });
    if let Some(status) = refused {
        assert!(
            !matches!(status.code(), Code::Internal | Code::Unknown),
            "a request was answered {:?}: {}",
            status.code(),
            status.message()
        );
    }
});
