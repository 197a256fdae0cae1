//! Failures below gRPC, over a real connection, as the clients report
//! them: a message over its receiver's limit is "too large", never a TLS
//! question, and a plaintext call to a TLS port still asks about TLS.

use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};
use waft_client::status::from_status;
use waft_client::{HscApi, HscClient, ServiceError, TaskResult, proto};
use waft_core::model::ResultOutcome;

/// An HSC that takes everything and answers with claimed tasks of
/// `payload` bytes.
struct Answering {
    payload: usize,
}

#[tonic::async_trait]
impl proto::hsc_server::Hsc for Answering {
    async fn claim_tasks(
        &self,
        request: Request<proto::ClaimTasksRequest>,
    ) -> Result<Response<proto::ClaimTasksResponse>, Status> {
        let task = proto::ClaimedTask {
            payload: vec![b'p'; self.payload],
            ..proto::ClaimedTask::default()
        };
        let answers = request
            .into_inner()
            .claims
            .iter()
            .map(|_| proto::ClaimAnswer {
                answer: Some(proto::claim_answer::Answer::Task(task.clone())),
            })
            .collect();
        Ok(Response::new(proto::ClaimTasksResponse { answers }))
    }

    async fn heartbeat(
        &self,
        _: Request<proto::HeartbeatRequest>,
    ) -> Result<Response<proto::HeartbeatResponse>, Status> {
        Ok(Response::new(proto::HeartbeatResponse::default()))
    }

    async fn set_results(
        &self,
        _: Request<proto::SetResultsRequest>,
    ) -> Result<Response<proto::SetResultsResponse>, Status> {
        Ok(Response::new(proto::SetResultsResponse::default()))
    }

    async fn write_journal(
        &self,
        _: Request<proto::WriteJournalRequest>,
    ) -> Result<Response<proto::WriteJournalResponse>, Status> {
        Ok(Response::new(proto::WriteJournalResponse::default()))
    }

    async fn read_journal(
        &self,
        _: Request<proto::ReadJournalRequest>,
    ) -> Result<Response<proto::ReadJournalResponse>, Status> {
        Ok(Response::new(proto::ReadJournalResponse::default()))
    }

    async fn read_signal(
        &self,
        _: Request<proto::ReadSignalRequest>,
    ) -> Result<Response<proto::ReadSignalResponse>, Status> {
        Ok(Response::new(proto::ReadSignalResponse::default()))
    }
    async fn read_children(
        &self,
        _: Request<proto::ReadChildrenRequest>,
    ) -> Result<Response<proto::ReadChildrenResponse>, Status> {
        Ok(Response::new(proto::ReadChildrenResponse::default()))
    }
}

/// Serves `Answering` with the limits the HSC's server has, over TLS with
/// `identity`; its address.
async fn serve(payload: usize, identity: Option<Identity>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let hsc = proto::hsc_server::HscServer::new(Answering { payload })
        .max_decoding_message_size(waft_client::MAX_INTERNAL_REQUEST)
        .max_encoding_message_size(waft_client::MAX_INTERNAL_REQUEST);
    let mut server = Server::builder();
    if let Some(identity) = identity {
        server = server
            .tls_config(ServerTlsConfig::new().identity(identity))
            .unwrap();
    }
    let incoming = TcpIncoming::from(listener);
    tokio::spawn(server.add_service(hsc).serve_with_incoming(incoming));
    address
}

fn huge_result() -> TaskResult {
    TaskResult {
        id: "01M81141G398N4ZV4VMQVXT2M3".into(),
        lease_token: 1,
        outcome: ResultOutcome::Success {
            output: Some(vec![b'o'; 17 << 20]),
        },
        log: None,
        journal: None,
        replayed: 0,
    }
}

#[tokio::test]
async fn a_request_over_the_limit_is_too_large_whoever_refuses_it() {
    let address = serve(0, None).await;
    // The HSC's client refuses it before it leaves.
    let hsc = HscClient::new(waft_client::channel(&address).unwrap());
    let error = hsc
        .task_set_result_many(vec![huge_result()])
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ServiceError::ResourceExhausted(m) if m.starts_with("request too large for the HSC")),
        "{error:?}"
    );
    // A client without a limit of its own is refused by the server.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect_lazy();
    let mut raw = proto::hsc_client::HscClient::new(channel);
    let request = proto::SetResultsRequest {
        results: vec![waft_client::convert::result_to_proto(huge_result())],
    };
    let status = raw.set_results(request).await.unwrap_err();
    let error = from_status(status, "HSC");
    assert!(
        matches!(&error, ServiceError::ResourceExhausted(m) if m.starts_with("request or answer too large for the HSC")),
        "{error:?}"
    );
    assert!(!error.to_string().contains("TLS"), "{error}");
}

#[tokio::test]
async fn an_answer_over_the_limit_is_too_large() {
    let address = serve(9 << 20, None).await;
    let hsc = HscClient::new(waft_client::channel(&address).unwrap());
    let claims = vec![("a".to_owned(), 1), ("b".to_owned(), 1)];
    let error = hsc.task_claim_many(claims).await.unwrap_err();
    assert!(
        matches!(&error, ServiceError::ResourceExhausted(m) if m.starts_with("answer too large for the HSC")),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_plaintext_call_to_a_tls_port_asks_about_tls() {
    // The workspace's builds may enable more than one rustls provider, and
    // a TLS server then needs one chosen, as `waft` chooses it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let issued = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let identity = Identity::from_pem(issued.cert.pem(), issued.signing_key.serialize_pem());
    let address = serve(0, Some(identity)).await;
    let hsc = HscClient::new(waft_client::channel(&address).unwrap());
    let error = hsc.task_heartbeat_many(Vec::new()).await.unwrap_err();
    assert!(
        matches!(&error, ServiceError::Unavailable(m) if m.contains("if it uses TLS, pass --ca")),
        "{error:?}"
    );
}
